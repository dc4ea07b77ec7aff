/* tests/sim/blas_launch.c - how the simulated BLAS libraries queue their
 * work: kernels registered the way nvcc-generated code registers them, and
 * launched through the CUDA runtime on the caller's stream. Compiled into
 * both libcublas.so.13 and libcublasLt.so.13 (each has its own copy). */
#include "blas_internal.h"

/* nvcc declares these in the code it generates; the runtime exports them. */
void **__cudaRegisterFatBinary(void *fatCubin);
void __cudaRegisterFatBinaryEnd(void **handle);
void __cudaRegisterFunction(void **handle, const char *hostFun, char *deviceFun,
                            const char *deviceName, int thread_limit, uint3 *tid,
                            uint3 *bid, dim3 *bDim, dim3 *gDim, int *wSize);

/* The host stub of the library's one kernel: only its address matters. */
static void sim_blas_gemm_stub(void) {}

/* A fat binary wrapper with no device code: nothing reads its contents. */
static struct { int magic, version; const void *data, *filename; } fatbin_wrapper = { 0x466243b1, 1, NULL, NULL };

void sim_blas_register(sim_blas_kernels *k, const char *library)
{
    (void)library;
    void **h = __cudaRegisterFatBinary(&fatbin_wrapper);
    static char name[] = "sim_blas_gemm";
    __cudaRegisterFunction(h, (const char *)(uintptr_t)sim_blas_gemm_stub, name, name, -1,
                           NULL, NULL, NULL, NULL, NULL);
    __cudaRegisterFatBinaryEnd(h);
    k->gemm = (const void *)(uintptr_t)sim_blas_gemm_stub;
}

cublasStatus_t sim_blas_launch(const void *kernel, int64_t m, int64_t n, int64_t batch, cudaStream_t stream)
{
    int64_t gx = (m + 127) / 128, gy = (n + 127) / 128, gz = batch;
    dim3 grid = { (unsigned)(gx > 0x7fffffff ? 0x7fffffff : gx), (unsigned)(gy > 65535 ? 65535 : gy),
                  (unsigned)(gz > 65535 ? 65535 : gz) };
    dim3 block = { 256, 1, 1 };
    return cudaLaunchKernel(kernel, grid, block, NULL, 0, stream) == cudaSuccess
               ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}
