/* tests/sim/cublas_sim.c - the simulated cuBLAS, libcublas.so.13: handles,
 * streams, workspaces and math modes kept like the real library's; the
 * matrix products PyTorch uses (gemm in every precision, batched, strided
 * batched, Ex), gemv and the dot products checked like the real ones and
 * queued on the handle's stream as no-op kernels (blas_launch.c); the host<->device
 * vector/matrix helpers as real, ordered copies. Every other entry point a
 * PyTorch build links returns CUBLAS_STATUS_NOT_SUPPORTED
 * (cublas_unsupported.c).
 *
 * The real cuBLAS embeds its own CUDA runtime, which reaches the driver
 * through cuGetProcAddress: its workspace is a driver allocation that no
 * libcudart hook sees. This one launches through the simulated
 * libcudart.so.13 but allocates the same way, with the driver's cuMemAlloc
 * obtained as an entry point.
 */
#include "blas_internal.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { OP_N = 0, OP_T = 1, OP_C = 2 };
enum { POINTER_MODE_HOST = 0, POINTER_MODE_DEVICE = 1 };

static sim_blas_kernels kernels;

typedef int (*mem_alloc_fn)(unsigned long long *, size_t);
typedef int (*mem_free_fn)(unsigned long long);

/* The driver's cuMemAlloc_v2 / cuMemFree_v2 (CUDA 3.2 ABI), or NULL. */
static void *driver_entry(const char *name)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion(name, &fn, 3020, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return fn;
}

__attribute__((constructor)) static void register_kernels(void)
{
    sim_blas_register(&kernels, "cublas");
}

/* The workspace cuBLAS allocates for a new handle: the size its
 * documentation recommends per architecture (cublasSetWorkspace: 32 MiB
 * on Hopper and later, 4 MiB before). */
static size_t default_workspace_size(int device)
{
    int major = 0;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device);
    return major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
}

BLAS_API cublasStatus_t cublasCreate_v2(void **handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    int device;
    /* The embedded runtime makes the device's primary context current, as
     * cudaSetDevice does: the driver allocation below needs a context. */
    if (cudaGetDevice(&device) != cudaSuccess || cudaSetDevice(device) != cudaSuccess) {
        cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    sim_blas_handle *h = sim_blas_handle_new(device);
    if (!h)
        return CUBLAS_STATUS_ALLOC_FAILED;
    h->default_workspace_size = default_workspace_size(device);
    mem_alloc_fn mem_alloc = NULL;
    void *entry = driver_entry("cuMemAlloc");
    memcpy(&mem_alloc, &entry, sizeof entry);     /* object -> function pointer, as dlsym's */
    unsigned long long ws = 0;
    if (!mem_alloc || mem_alloc(&ws, h->default_workspace_size) != 0) {
        sim_blas_handle_free(h);
        return CUBLAS_STATUS_ALLOC_FAILED;
    }
    h->default_workspace = (void *)(uintptr_t)ws;
    *handle = h;
    return CUBLAS_STATUS_SUCCESS;
}

/* Waits for the handle's work like the real one (its workspace may be in
 * use), then releases it. */
BLAS_API cublasStatus_t cublasDestroy_v2(void *handle)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    cudaStreamSynchronize(h->stream);
    mem_free_fn mem_free = NULL;
    void *entry = driver_entry("cuMemFree");
    memcpy(&mem_free, &entry, sizeof entry);
    if (mem_free)
        mem_free((unsigned long long)(uintptr_t)h->default_workspace);
    sim_blas_handle_free(h);
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetVersion_v2(void *handle, int *version)
{
    (void)handle;
    if (!version)
        return CUBLAS_STATUS_INVALID_VALUE;
    *version = SIM_CUBLAS_VERSION;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasSetStream_v2(void *handle, cudaStream_t stream)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    /* As documented: setting a stream drops a user workspace, and the
     * default workspace is used again until cublasSetWorkspace. */
    h->stream = stream;
    h->user_workspace = NULL;
    h->user_workspace_size = 0;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasGetStream_v2(void *handle, cudaStream_t *stream)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!stream)
        return CUBLAS_STATUS_INVALID_VALUE;
    *stream = h->stream;
    return CUBLAS_STATUS_SUCCESS;
}

/* A user workspace must be 256-byte aligned (cublasSetWorkspace). */
BLAS_API cublasStatus_t cublasSetWorkspace_v2(void *handle, void *workspace, size_t size)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (((uintptr_t)workspace & 255) != 0 || (size && !workspace))
        return CUBLAS_STATUS_INVALID_VALUE;
    h->user_workspace = workspace;
    h->user_workspace_size = size;
    return CUBLAS_STATUS_SUCCESS;
}

/* The int settings (math mode, pointer mode, SM count target): the handle
 * is checked first, then the value; `setting` is the field's offset. */
static cublasStatus_t set_setting(void *handle, size_t setting, int value, bool valid)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!valid)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy((char *)h + setting, &value, sizeof value);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t get_setting(void *handle, size_t setting, int *value)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!value)
        return CUBLAS_STATUS_INVALID_VALUE;
    memcpy(value, (char *)h + setting, sizeof *value);
    return CUBLAS_STATUS_SUCCESS;
}

/* DEFAULT 0, TENSOR_OP 1, PEDANTIC 2, TF32 3, + DISALLOW_REDUCED_PRECISION_REDUCTION 16 */
BLAS_API cublasStatus_t cublasSetMathMode(void *handle, int mode)
{
    int base = mode & ~16;
    return set_setting(handle, offsetof(sim_blas_handle, math_mode), mode, base >= 0 && base <= 3);
}

BLAS_API cublasStatus_t cublasGetMathMode(void *handle, int *mode)
{
    return get_setting(handle, offsetof(sim_blas_handle, math_mode), mode);
}

BLAS_API cublasStatus_t cublasSetPointerMode_v2(void *handle, int mode)
{
    return set_setting(handle, offsetof(sim_blas_handle, pointer_mode), mode,
                       mode == POINTER_MODE_HOST || mode == POINTER_MODE_DEVICE);
}

BLAS_API cublasStatus_t cublasGetPointerMode_v2(void *handle, int *mode)
{
    return get_setting(handle, offsetof(sim_blas_handle, pointer_mode), mode);
}

BLAS_API cublasStatus_t cublasSetSmCountTarget(void *handle, int target)
{
    return set_setting(handle, offsetof(sim_blas_handle, sm_count_target), target, target >= 0);
}

/* ---- matrix products ------------------------------------------------------ */

static int max1(int v) { return v > 1 ? v : 1; }

/* The argument rules of cublas<t>gemm: then queue it, or return at once for
 * an empty result (the real library's quick return). */
static cublasStatus_t gemm(void *handle, int ta, int tb, int m, int n, int k, int lda, int ldb, int ldc,
                           int batch)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (ta < OP_N || ta > OP_C || tb < OP_N || tb > OP_C || m < 0 || n < 0 || k < 0 || batch < 0 ||
        lda < max1(ta == OP_N ? m : k) || ldb < max1(tb == OP_N ? k : n) || ldc < max1(m))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0 || batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    return sim_blas_launch(kernels.gemm, m, n, batch, h->stream);
}

#define GEMM_V2(name, T)                                                                          \
    BLAS_API cublasStatus_t name(void *h, int ta, int tb, int m, int n, int k, const T *alpha,     \
                                 const T *A, int lda, const T *B, int ldb, const T *beta, T *C,   \
                                 int ldc)                                                         \
    {                                                                                             \
        (void)A; (void)B; (void)C;                                                                \
        if (!alpha || !beta)                                                                      \
            return CUBLAS_STATUS_INVALID_VALUE;                                                   \
        return gemm(h, ta, tb, m, n, k, lda, ldb, ldc, 1);                                        \
    }

#define GEMM_STRIDED(name, T)                                                                     \
    BLAS_API cublasStatus_t name(void *h, int ta, int tb, int m, int n, int k, const T *alpha,     \
                                 const T *A, int lda, long long sA, const T *B, int ldb,          \
                                 long long sB, const T *beta, T *C, int ldc, long long sC,        \
                                 int batch)                                                       \
    {                                                                                             \
        (void)A; (void)B; (void)C; (void)sA; (void)sB; (void)sC;                                  \
        if (!alpha || !beta)                                                                      \
            return CUBLAS_STATUS_INVALID_VALUE;                                                   \
        return gemm(h, ta, tb, m, n, k, lda, ldb, ldc, batch);                                    \
    }

#define GEMM_BATCHED(name, T)                                                                     \
    BLAS_API cublasStatus_t name(void *h, int ta, int tb, int m, int n, int k, const T *alpha,     \
                                 const T *const A[], int lda, const T *const B[], int ldb,        \
                                 const T *beta, T *const C[], int ldc, int batch)                 \
    {                                                                                             \
        (void)A; (void)B; (void)C;                                                                \
        if (!alpha || !beta)                                                                      \
            return CUBLAS_STATUS_INVALID_VALUE;                                                   \
        return gemm(h, ta, tb, m, n, k, lda, ldb, ldc, batch);                                    \
    }

typedef struct { float x, y; } sim_complex;
typedef struct { double x, y; } sim_double_complex;

GEMM_V2(cublasSgemm_v2, float)
GEMM_V2(cublasDgemm_v2, double)
GEMM_V2(cublasCgemm_v2, sim_complex)
GEMM_V2(cublasZgemm_v2, sim_double_complex)
GEMM_STRIDED(cublasSgemmStridedBatched, float)
GEMM_STRIDED(cublasDgemmStridedBatched, double)
GEMM_STRIDED(cublasCgemmStridedBatched, sim_complex)
GEMM_STRIDED(cublasZgemmStridedBatched, sim_double_complex)
GEMM_BATCHED(cublasSgemmBatched, float)
GEMM_BATCHED(cublasDgemmBatched, double)
GEMM_BATCHED(cublasCgemmBatched, sim_complex)
GEMM_BATCHED(cublasZgemmBatched, sim_double_complex)

BLAS_API cublasStatus_t cublasSgemmEx(void *h, int ta, int tb, int m, int n, int k, const float *alpha,
                                      const void *A, int Atype, int lda, const void *B, int Btype, int ldb,
                                      const float *beta, void *C, int Ctype, int ldc)
{
    (void)A; (void)B; (void)C; (void)Atype; (void)Btype; (void)Ctype;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm(h, ta, tb, m, n, k, lda, ldb, ldc, 1);
}

BLAS_API cublasStatus_t cublasGemmEx(void *h, int ta, int tb, int m, int n, int k, const void *alpha,
                                     const void *A, int Atype, int lda, const void *B, int Btype, int ldb,
                                     const void *beta, void *C, int Ctype, int ldc, int computeType, int algo)
{
    (void)A; (void)B; (void)C; (void)Atype; (void)Btype; (void)Ctype; (void)computeType; (void)algo;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm(h, ta, tb, m, n, k, lda, ldb, ldc, 1);
}

BLAS_API cublasStatus_t cublasGemmStridedBatchedEx(void *h, int ta, int tb, int m, int n, int k,
                                                   const void *alpha, const void *A, int Atype, int lda,
                                                   long long sA, const void *B, int Btype, int ldb,
                                                   long long sB, const void *beta, void *C, int Ctype,
                                                   int ldc, long long sC, int batch, int computeType, int algo)
{
    (void)A; (void)B; (void)C; (void)Atype; (void)Btype; (void)Ctype; (void)computeType; (void)algo;
    (void)sA; (void)sB; (void)sC;
    if (!alpha || !beta)
        return CUBLAS_STATUS_INVALID_VALUE;
    return gemm(h, ta, tb, m, n, k, lda, ldb, ldc, batch);
}

/* y = alpha op(A) x + beta y: a matrix-vector product, queued the same way. */
static cublasStatus_t gemv(void *handle, int trans, int m, int n, int lda, int incx, int incy)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (trans < OP_N || trans > OP_C || m < 0 || n < 0 || lda < max1(m) || incx == 0 || incy == 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (m == 0 || n == 0)
        return CUBLAS_STATUS_SUCCESS;
    return sim_blas_launch(kernels.gemm, trans == OP_N ? m : n, 1, 1, h->stream);
}

#define GEMV_V2(name, T)                                                                          \
    BLAS_API cublasStatus_t name(void *h, int trans, int m, int n, const T *alpha, const T *A,     \
                                 int lda, const T *x, int incx, const T *beta, T *y, int incy)    \
    {                                                                                             \
        (void)A; (void)x; (void)y;                                                                \
        if (!alpha || !beta)                                                                      \
            return CUBLAS_STATUS_INVALID_VALUE;                                                   \
        return gemv(h, trans, m, n, lda, incx, incy);                                             \
    }

GEMV_V2(cublasSgemv_v2, float)
GEMV_V2(cublasDgemv_v2, double)
GEMV_V2(cublasCgemv_v2, sim_complex)
GEMV_V2(cublasZgemv_v2, sim_double_complex)

/* ---- dot products ---------------------------------------------------------- */

/* result = x . y (x^H . y for the `c` forms); torch.dot, torch.vdot and
 * torch.inner of vectors reach these, and torch.optim.LBFGS calls them every
 * iteration. The result goes where the handle's pointer mode says: in the
 * device mode (PyTorch's, through its PointerModeGuard) the queued kernel
 * writes it, so a dot of nothing (n <= 0: BLAS's 0) is a queued memset; in
 * the host mode the real call blocks until its result is in host memory, so
 * this one waits for the stream, then writes what a kernel that never runs
 * leaves: zero. */
static cublasStatus_t dot(void *handle, int n, void *result, size_t result_size)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!result || !result_size)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (h->pointer_mode == POINTER_MODE_DEVICE) {
        if (n > 0)
            return sim_blas_launch(kernels.gemm, n, 1, 1, h->stream);
        return cudaMemsetAsync(result, 0, result_size, h->stream) == cudaSuccess
                   ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
    }
    if (n > 0) {
        cublasStatus_t st = sim_blas_launch(kernels.gemm, n, 1, 1, h->stream);
        if (st != CUBLAS_STATUS_SUCCESS)
            return st;
    }
    if (cudaStreamSynchronize(h->stream) != cudaSuccess)
        return CUBLAS_STATUS_EXECUTION_FAILED;
    memset(result, 0, result_size);
    return CUBLAS_STATUS_SUCCESS;
}

#define DOT_V2(name, T)                                                                           \
    BLAS_API cublasStatus_t name(void *h, int n, const T *x, int incx, const T *y, int incy,      \
                                 T *result)                                                       \
    {                                                                                             \
        (void)x; (void)y; (void)incx; (void)incy;                                                 \
        return dot(h, n, result, sizeof *result);                                                 \
    }

DOT_V2(cublasSdot_v2, float)
DOT_V2(cublasDdot_v2, double)
DOT_V2(cublasCdotu_v2, sim_complex)
DOT_V2(cublasCdotc_v2, sim_complex)
DOT_V2(cublasZdotu_v2, sim_double_complex)
DOT_V2(cublasZdotc_v2, sim_double_complex)

/* The bytes of one value of a cudaDataType_t (library_types.h), 0 for a
 * type the dot products do not take. */
static size_t data_type_size(int type)
{
    switch (type) {
    case 2: case 14: return 2;            /* CUDA_R_16F, CUDA_R_16BF */
    case 0: case 6: case 15: return 4;    /* CUDA_R_32F, CUDA_C_16F, CUDA_C_16BF */
    case 1: case 4: return 8;             /* CUDA_R_64F, CUDA_C_32F */
    case 5: return 16;                    /* CUDA_C_64F */
    default: return 0;
    }
}

/* cublasDotEx: torch.dot of half and bfloat16 vectors. */
#define DOT_EX(name)                                                                              \
    BLAS_API cublasStatus_t name(void *h, int n, const void *x, int xType, int incx, const void *y, \
                                 int yType, int incy, void *result, int resultType, int execType) \
    {                                                                                             \
        (void)x; (void)y; (void)incx; (void)incy;                                                 \
        size_t size = data_type_size(resultType);                                                 \
        if (!data_type_size(xType) || !data_type_size(yType) || !size || !data_type_size(execType)) \
            return sim_blas_handle_of(h) ? CUBLAS_STATUS_NOT_SUPPORTED                            \
                                         : CUBLAS_STATUS_NOT_INITIALIZED;                         \
        return dot(h, n, result, size);                                                           \
    }

DOT_EX(cublasDotEx)

/* ---- host <-> device helpers: real copies, in stream order ---------------- */

static cublasStatus_t copy_strided(const void *src, size_t spitch, void *dst, size_t dpitch, size_t width,
                                   size_t height, cudaStream_t stream)
{
    if (cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDefault, stream) != cudaSuccess) {
        cudaGetLastError();
        return CUBLAS_STATUS_INTERNAL_ERROR;
    }
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t vector(int n, int elemSize, const void *x, int incx, void *y, int incy, cudaStream_t s)
{
    if (n < 0 || elemSize <= 0 || incx <= 0 || incy <= 0 || !x || !y)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (n == 0)
        return CUBLAS_STATUS_SUCCESS;
    return copy_strided(x, (size_t)incx * (size_t)elemSize, y, (size_t)incy * (size_t)elemSize,
                        (size_t)elemSize, (size_t)n, s);
}

static cublasStatus_t matrix(int rows, int cols, int elemSize, const void *A, int lda, void *B, int ldb,
                             cudaStream_t s)
{
    if (rows < 0 || cols < 0 || elemSize <= 0 || lda < max1(rows) || ldb < max1(rows) || !A || !B)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (rows == 0 || cols == 0)
        return CUBLAS_STATUS_SUCCESS;
    return copy_strided(A, (size_t)lda * (size_t)elemSize, B, (size_t)ldb * (size_t)elemSize,
                        (size_t)rows * (size_t)elemSize, (size_t)cols, s);
}

BLAS_API cublasStatus_t cublasSetVectorAsync(int n, int elemSize, const void *hostPtr, int incx, void *devicePtr,
                                             int incy, cudaStream_t stream)
{
    return vector(n, elemSize, hostPtr, incx, devicePtr, incy, stream);
}

BLAS_API cublasStatus_t cublasGetVectorAsync(int n, int elemSize, const void *devicePtr, int incx, void *hostPtr,
                                             int incy, cudaStream_t stream)
{
    return vector(n, elemSize, devicePtr, incx, hostPtr, incy, stream);
}

BLAS_API cublasStatus_t cublasSetMatrixAsync(int rows, int cols, int elemSize, const void *A, int lda, void *B,
                                             int ldb, cudaStream_t stream)
{
    return matrix(rows, cols, elemSize, A, lda, B, ldb, stream);
}

BLAS_API cublasStatus_t cublasGetMatrixAsync(int rows, int cols, int elemSize, const void *A, int lda, void *B,
                                             int ldb, cudaStream_t stream)
{
    return matrix(rows, cols, elemSize, A, lda, B, ldb, stream);
}
