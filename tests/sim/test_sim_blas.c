/* tests/sim/test_sim_blas.c - the simulated cuBLAS and cuBLASLt: handle
 * workspaces, streams, argument checks, GEMMs queued as counted no-op
 * kernels, real vector copies. Prototypes are declared here with the ABI
 * of NVIDIA's headers (which this build does not have). */
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_util.h"

int cublasCreate_v2(void **h);
int cublasDestroy_v2(void *h);
int cublasSetStream_v2(void *h, cudaStream_t s);
int cublasSetWorkspace_v2(void *h, void *ws, size_t n);
int cublasSgemm_v2(void *h, int ta, int tb, int m, int n, int k, const float *alpha, const float *A,
                   int lda, const float *B, int ldb, const float *beta, float *C, int ldc);
int cublasSetVectorAsync(int n, int elemSize, const void *x, int incx, void *y, int incy, cudaStream_t s);
int cublasSetPointerMode_v2(void *h, int mode);
int cublasSdot_v2(void *h, int n, const float *x, int incx, const float *y, int incy, float *r);
int cublasDotEx(void *h, int n, const void *x, int xType, int incx, const void *y, int yType, int incy,
                void *r, int rType, int execType);
int cublasSaxpy_v2(void *h, int n, const float *alpha, const float *x, int incx, float *y, int incy);
int cublasLtMatmulDescCreate(void **d, int computeType, int scaleType);
int cublasLtMatmulDescDestroy(void *d);
int cublasLtMatrixLayoutCreate(void **l, int type, uint64_t rows, uint64_t cols, int64_t ld);
int cublasLtMatrixLayoutDestroy(void *l);
int cublasLtMatmul(void *h, void *desc, const void *alpha, const void *A, void *Ad, const void *B, void *Bd,
                   const void *beta, const void *C, void *Cd, void *D, void *Dd, const void *algo,
                   void *ws, size_t wsSize, cudaStream_t s);

#define MIB (1u << 20)

static uint64_t in_use(void)
{
    simcuda_counters c;
    return simcuda_stats(0, &c) == 0 ? c.bytes_in_use : 0;
}

static uint64_t launches(void)
{
    simcuda_counters c;
    return simcuda_stats(0, &c) == 0 ? c.kernel_launches : 0;
}

/* A cuBLAS handle whose work goes on a stream of its own, *s. */
static void *handle_on_new_stream(cudaStream_t *s)
{
    void *h;
    ASSERT_EQ(cublasCreate_v2(&h), 0);
    ASSERT_OK(cudaStreamCreate(s));
    ASSERT_EQ(cublasSetStream_v2(h, *s), 0);
    return h;
}

/* `call` (a cuBLAS call that returns 0), made while a slow host function
 * holds stream s, is queued behind it: s is not ready when it returns, and
 * once s is done it has launched one kernel. */
#define ASSERT_QUEUED_BEHIND_SLOW_WORK(s, call)                   \
    do {                                                          \
        int flag_ = 0;                                            \
        ASSERT_OK(launch_slow_store((s), &flag_, 1, 50));         \
        uint64_t l0_ = launches();                                \
        ASSERT_EQ((call), 0);                                     \
        ASSERT_EQ(cudaStreamQuery(s), cudaErrorNotReady);         \
        ASSERT_OK(cudaStreamSynchronize(s));                      \
        ASSERT_EQ(launches() - l0_, 1);                           \
    } while (0)

TEST(cublas_handle_holds_its_default_workspace)
{
    ASSERT_OK(cudaFree(NULL));
    uint64_t before = in_use();
    void *h;
    ASSERT_EQ(cublasCreate_v2(&h), 0);
    ASSERT_EQ(in_use() - before, 32 * MIB);        /* sm_90: 32 MiB */
    ASSERT_EQ(cublasDestroy_v2(h), 0);
    ASSERT_EQ(in_use(), before);
}

TEST(gemm_is_checked_and_queued_on_the_handles_stream)
{
    cudaStream_t s;
    void *h = handle_on_new_stream(&s);
    float *A, *B, *C, one = 1.0f, zero = 0.0f;
    ASSERT_OK(cudaMalloc((void **)&A, 64 * 64 * 4));
    ASSERT_OK(cudaMalloc((void **)&B, 64 * 64 * 4));
    ASSERT_OK(cudaMalloc((void **)&C, 64 * 64 * 4));
    ASSERT_QUEUED_BEHIND_SLOW_WORK(s, cublasSgemm_v2(h, 0, 0, 64, 64, 64, &one, A, 64, B, 64,
                                                     &zero, C, 64));
    /* lda < m, negative sizes: invalid; an empty product: nothing queued */
    uint64_t l0 = launches();
    ASSERT_EQ(cublasSgemm_v2(h, 0, 0, 64, 64, 64, &one, A, 32, B, 64, &zero, C, 64), 7);
    ASSERT_EQ(cublasSgemm_v2(h, 0, 0, -1, 64, 64, &one, A, 64, B, 64, &zero, C, 64), 7);
    ASSERT_EQ(cublasSgemm_v2(h, 0, 0, 0, 64, 64, &one, A, 64, B, 64, &zero, C, 64), 0);
    ASSERT_EQ(launches() - l0, 0);
    ASSERT_EQ(cublasSgemm_v2(NULL, 0, 0, 64, 64, 64, &one, A, 64, B, 64, &zero, C, 64), 1);
    /* a user workspace must be 256-byte aligned */
    ASSERT_EQ(cublasSetWorkspace_v2(h, (char *)A + 4, 1024), 7);
    ASSERT_EQ(cublasSetWorkspace_v2(h, A, 1024), 0);
    /* outside gemm, gemv and dot: not supported */
    ASSERT_EQ(cublasSaxpy_v2(h, 4, &one, A, 1, B, 1), 15);
    ASSERT_EQ(cublasDestroy_v2(h), 0);
    ASSERT_OK(cudaStreamDestroy(s));
}

/* torch.dot's way (the device pointer mode): queued, the result written by
 * the stream's work; the host pointer mode blocks until the result is in
 * host memory. */
TEST(dot_writes_its_result_where_the_pointer_mode_says)
{
    cudaStream_t s;
    void *h = handle_on_new_stream(&s);
    float *x, *r;
    ASSERT_OK(cudaMalloc((void **)&x, 64 * 4));
    ASSERT_OK(cudaMalloc((void **)&r, 4));
    ASSERT_OK(cudaMemset(r, 0x7f, 4));
    ASSERT_EQ(cublasSetPointerMode_v2(h, 1), 0);
    ASSERT_QUEUED_BEHIND_SLOW_WORK(s, cublasSdot_v2(h, 64, x, 1, x, 1, r));
    /* a dot of nothing is 0, written in stream order */
    ASSERT_EQ(cublasSdot_v2(h, 0, x, 1, x, 1, r), 0);
    float back = 1;
    ASSERT_OK(cudaMemcpy(&back, r, 4, cudaMemcpyDeviceToHost));
    ASSERT(back == 0.0f);
    ASSERT_EQ(cublasSdot_v2(h, 64, x, 1, x, 1, NULL), 7);
    /* half vectors, a float result (torch.dot of float16); an unknown type */
    ASSERT_EQ(cublasDotEx(h, 32, x, 2, 1, x, 2, 1, r, 0, 0), 0);
    ASSERT_EQ(cublasDotEx(h, 32, x, 99, 1, x, 2, 1, r, 0, 0), 15);
    ASSERT_OK(cudaStreamSynchronize(s));
    /* the host mode: the call returns with the stream's work done */
    ASSERT_EQ(cublasSetPointerMode_v2(h, 0), 0);
    int flag = 0;
    ASSERT_OK(launch_slow_store(s, &flag, 1, 50));
    float host = 5;
    ASSERT_EQ(cublasSdot_v2(h, 64, x, 1, x, 1, &host), 0);
    ASSERT_EQ(flag, 1);
    ASSERT_OK(cudaStreamQuery(s));
    ASSERT(host == 0.0f);
    ASSERT_EQ(cublasSdot_v2(NULL, 64, x, 1, x, 1, &host), 1);
    ASSERT_OK(cudaFree(x));
    ASSERT_OK(cudaFree(r));
    ASSERT_EQ(cublasDestroy_v2(h), 0);
    ASSERT_OK(cudaStreamDestroy(s));
}

TEST(cublas_vector_copies_are_real)
{
    float x[8] = { 1, 2, 3, 4, 5, 6, 7, 8 }, back[4] = { 0 };
    float *d;
    ASSERT_OK(cudaMalloc((void **)&d, 8 * 4));
    ASSERT_EQ(cublasSetVectorAsync(4, 4, x, 2, d, 1, 0), 0);     /* every other element */
    ASSERT_OK(cudaMemcpy(back, d, 16, cudaMemcpyDeviceToHost));
    ASSERT(back[0] == 1 && back[1] == 3 && back[2] == 5 && back[3] == 7);
    ASSERT_OK(cudaFree(d));
}

TEST(lt_matmul_checks_shapes_and_queues_on_its_stream)
{
    void *h, *desc, *la, *lb, *lc;
    ASSERT_EQ(cublasCreate_v2(&h), 0);        /* a cuBLAS handle serves as a cuBLASLt one */
    ASSERT_EQ(cublasLtMatmulDescCreate(&desc, 68 /* CUBLAS_COMPUTE_32F */, 0 /* CUDA_R_32F */), 0);
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&la, 0, 32, 16, 32), 0);   /* A 32x16 */
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lb, 0, 16, 8, 16), 0);    /* B 16x8 */
    ASSERT_EQ(cublasLtMatrixLayoutCreate(&lc, 0, 32, 8, 32), 0);    /* C, D 32x8 */
    float *A, one = 1.0f, zero = 0.0f;
    ASSERT_OK(cudaMalloc((void **)&A, 4096));
    uint64_t l0 = launches();
    ASSERT_EQ(cublasLtMatmul(h, desc, &one, A, la, A, lb, &zero, A, lc, A, lc, NULL, NULL, 0, 0), 0);
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(launches() - l0, 1);
    /* B 16x8 as A: inner dimensions disagree */
    ASSERT_EQ(cublasLtMatmul(h, desc, &one, A, lb, A, lb, &zero, A, lc, A, lc, NULL, NULL, 0, 0), 7);
    ASSERT_EQ(cublasLtMatrixLayoutDestroy(la), 0);
    ASSERT_EQ(cublasLtMatrixLayoutDestroy(lb), 0);
    ASSERT_EQ(cublasLtMatrixLayoutDestroy(lc), 0);
    ASSERT_EQ(cublasLtMatmulDescDestroy(desc), 0);
    ASSERT_EQ(cublasDestroy_v2(h), 0);
}

TEST_MAIN()
