/* tests/sim/blas_internal.h - what the simulated cuBLAS (libcublas.so.13)
 * and cuBLASLt (libcublasLt.so.13) share.
 *
 * The toolkit's headers for these libraries are not part of the CUDA
 * Toolkit install this project builds against (they ship in the cuBLAS
 * wheel), so the few types the simulation needs are declared here with the
 * ABI of cublas_api.h / cublasLt.h 13.x: enums are ints, handles pointers.
 *
 * A handle is created by cublasCreate (or cublasLtCreate) and, as with the
 * real libraries, a cuBLAS handle may be used wherever a cuBLASLt handle is
 * expected (PyTorch casts one to the other). Device code never runs: every
 * BLAS operation is checked like the real one, then queued on its stream as
 * one no-op kernel launch through the CUDA runtime, so it is ordered and
 * counted (simcuda_counters.kernel_launches) like real work.
 */
#ifndef VT_SIM_BLAS_INTERNAL_H
#define VT_SIM_BLAS_INTERNAL_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#define BLAS_API __attribute__((visibility("default")))

/* The exported entry points' prototypes are NVIDIA's headers, which this
 * build does not have: the definitions are the declarations. */
#pragma GCC diagnostic ignored "-Wmissing-prototypes"

typedef int cublasStatus_t;
enum {
    CUBLAS_STATUS_SUCCESS = 0,
    CUBLAS_STATUS_NOT_INITIALIZED = 1,
    CUBLAS_STATUS_ALLOC_FAILED = 3,
    CUBLAS_STATUS_INVALID_VALUE = 7,
    CUBLAS_STATUS_ARCH_MISMATCH = 8,
    CUBLAS_STATUS_EXECUTION_FAILED = 13,
    CUBLAS_STATUS_INTERNAL_ERROR = 14,
    CUBLAS_STATUS_NOT_SUPPORTED = 15,
};

#define SIM_CUBLAS_VERSION 130101         /* 13.1.1, the wheel torch 2.14.1 pins */
#define SIM_BLAS_HANDLE_MAGIC 0x424c4153u /* 'BLAS' */

typedef struct sim_blas_handle {
    uint32_t     magic;                  /* SIM_BLAS_HANDLE_MAGIC while alive */
    int          device;                 /* current device at creation */
    cudaStream_t stream;                 /* cublasSetStream; 0 = legacy default */
    void        *default_workspace;      /* allocated at creation, freed at destroy */
    size_t       default_workspace_size;
    void        *user_workspace;         /* cublasSetWorkspace; NULL = default */
    size_t       user_workspace_size;
    int          math_mode;              /* cublasSetMathMode */
    int          pointer_mode;           /* cublasSetPointerMode */
    int          sm_count_target;        /* cublasSetSmCountTarget */
} sim_blas_handle;

/* The handle behind h, or NULL if h is no live handle. */
static inline sim_blas_handle *sim_blas_handle_of(void *h)
{
    sim_blas_handle *b = h;
    return b && b->magic == SIM_BLAS_HANDLE_MAGIC ? b : NULL;
}

/* A new live handle for `device`, settings at their defaults, or NULL. */
static inline sim_blas_handle *sim_blas_handle_new(int device)
{
    sim_blas_handle *h = calloc(1, sizeof *h);
    if (h) {
        h->device = device;
        h->magic = SIM_BLAS_HANDLE_MAGIC;
    }
    return h;
}

/* Ends a live handle (cublasDestroy, cublasLtDestroy). */
static inline void sim_blas_handle_free(sim_blas_handle *h)
{
    h->magic = 0;
    free(h);
}

/* Queue one no-op kernel on `stream` covering an m x n x batch result:
 * CUBLAS_STATUS_SUCCESS, or EXECUTION_FAILED when the launch fails (the
 * runtime's error stays its last error, as with a real failed launch). Each
 * library registers its own kernels (sim_blas_register) from a constructor. */
typedef struct sim_blas_kernels {
    const void *gemm;                    /* host stub identities */
} sim_blas_kernels;

void           sim_blas_register(sim_blas_kernels *k, const char *library);
cublasStatus_t sim_blas_launch(const void *kernel, int64_t m, int64_t n, int64_t batch, cudaStream_t stream);

#endif /* VT_SIM_BLAS_INTERNAL_H */
