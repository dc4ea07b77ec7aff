/* tests/sim/cublaslt_sim.c - the simulated cuBLASLt, libcublasLt.so.13.
 *
 * Descriptors (matmul, matrix layout, preference) are allocated and keep
 * the attributes that decide a product's shape: transposes, rows, columns,
 * leading dimension, batch count, the preference's workspace limit. Other
 * attributes (epilogue, bias and scale pointers, ...) are checked for a
 * buffer and accepted. The heuristic offers one algorithm that needs no
 * workspace; cublasLtMatmul checks its arguments and queues one no-op
 * kernel on the given stream. PyTorch passes its cuBLAS handle as the
 * cuBLASLt handle, which the real library allows: both kinds are accepted.
 */
#include "blas_internal.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

enum { OP_N = 0 };

typedef struct lt_layout {
    int      type;
    uint64_t rows, cols;
    int64_t  ld;
    int32_t  batch;
} lt_layout;

typedef struct lt_matmul_desc {
    int     compute_type, scale_type;
    int32_t transa, transb;
} lt_matmul_desc;

typedef struct lt_preference {
    uint64_t max_workspace;
} lt_preference;

typedef struct { uint64_t data[8]; } lt_algo;   /* cublasLtMatmulAlgo_t */

typedef struct {                                   /* cublasLtMatmulHeuristicResult_t */
    lt_algo        algo;
    size_t         workspaceSize;
    cublasStatus_t state;
    float          wavesCount;
    int            reserved[4];
} lt_heuristic;

#define SIM_LT_ALGO_TAG 0x53494d4c54414c47ull    /* marks an algorithm we handed out */

static sim_blas_kernels kernels;

__attribute__((constructor)) static void register_kernels(void)
{
    sim_blas_register(&kernels, "cublasLt");
}

BLAS_API size_t cublasLtGetVersion(void) { return SIM_CUBLAS_VERSION; }

BLAS_API size_t cublasLtGetCudartVersion(void) { return CUDART_VERSION; }

/* A handle of its own, the same kind cublasCreate makes, with no workspace:
 * cuBLASLt takes its workspace from the caller on every call. */
BLAS_API cublasStatus_t cublasLtCreate(void **handle)
{
    if (!handle)
        return CUBLAS_STATUS_INVALID_VALUE;
    int device;
    if (cudaGetDevice(&device) != cudaSuccess) {
        cudaGetLastError();
        return CUBLAS_STATUS_NOT_INITIALIZED;
    }
    return (*handle = sim_blas_handle_new(device)) ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

BLAS_API cublasStatus_t cublasLtDestroy(void *handle)
{
    sim_blas_handle *h = sim_blas_handle_of(handle);
    if (!h)
        return CUBLAS_STATUS_NOT_INITIALIZED;
    sim_blas_handle_free(h);
    return CUBLAS_STATUS_SUCCESS;
}

/* cublasLt*Create: a descriptor holding a copy of `init`, or NULL. */
static void *new_descriptor(const void *init, size_t size)
{
    void *d = malloc(size);
    if (d)
        memcpy(d, init, size);
    return d;
}

/* A descriptor attribute the simulation keeps: its number, where it is in
 * the descriptor and its size (a value must be exactly that size). */
typedef struct lt_field {
    int    attr;
    size_t offset, size;
} lt_field;

#define LT_FIELD(attr, type, member) { attr, offsetof(type, member), sizeof(((type *)0)->member) }

/* cublasLt*SetAttribute: a descriptor and a value buffer are required; an
 * attribute missing from `fields` (epilogue, pointers, scales, order, ...)
 * is accepted and has no effect on a no-op. */
static cublasStatus_t set_attribute(void *desc, const lt_field *fields, size_t nfields, int attr,
                                    const void *buf, size_t size)
{
    if (!desc || !buf || size == 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (size_t i = 0; i < nfields; i++) {
        if (fields[i].attr != attr)
            continue;
        if (size != fields[i].size)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy((char *)desc + fields[i].offset, buf, size);
        break;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- matmul descriptor ---------------------------------------------------- */

BLAS_API cublasStatus_t cublasLtMatmulDescCreate(lt_matmul_desc **desc, int computeType, int scaleType)
{
    if (!desc)
        return CUBLAS_STATUS_INVALID_VALUE;
    *desc = new_descriptor(&(lt_matmul_desc){ computeType, scaleType, OP_N, OP_N }, sizeof **desc);
    return *desc ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

BLAS_API cublasStatus_t cublasLtMatmulDescDestroy(lt_matmul_desc *desc)
{
    free(desc);
    return CUBLAS_STATUS_SUCCESS;
}

static const lt_field matmul_desc_fields[] = {
    LT_FIELD(0, lt_matmul_desc, compute_type),   /* COMPUTE_TYPE */
    LT_FIELD(1, lt_matmul_desc, scale_type),     /* SCALE_TYPE */
    LT_FIELD(3, lt_matmul_desc, transa),         /* TRANSA */
    LT_FIELD(4, lt_matmul_desc, transb),         /* TRANSB */
};

BLAS_API cublasStatus_t cublasLtMatmulDescSetAttribute(lt_matmul_desc *desc, int attr, const void *buf, size_t size)
{
    return set_attribute(desc, matmul_desc_fields, sizeof matmul_desc_fields / sizeof matmul_desc_fields[0], attr,
                         buf, size);
}

/* ---- matrix layout -------------------------------------------------------- */

BLAS_API cublasStatus_t cublasLtMatrixLayoutCreate(lt_layout **layout, int type, uint64_t rows, uint64_t cols,
                                                   int64_t ld)
{
    if (!layout)
        return CUBLAS_STATUS_INVALID_VALUE;
    *layout = new_descriptor(&(lt_layout){ type, rows, cols, ld, 1 }, sizeof **layout);
    return *layout ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

BLAS_API cublasStatus_t cublasLtMatrixLayoutDestroy(lt_layout *layout)
{
    free(layout);
    return CUBLAS_STATUS_SUCCESS;
}

static const lt_field layout_fields[] = {
    LT_FIELD(0, lt_layout, type),                /* TYPE */
    LT_FIELD(2, lt_layout, rows),                /* ROWS */
    LT_FIELD(3, lt_layout, cols),                /* COLS */
    LT_FIELD(4, lt_layout, ld),                  /* LD */
    LT_FIELD(5, lt_layout, batch),               /* BATCH_COUNT */
};

BLAS_API cublasStatus_t cublasLtMatrixLayoutSetAttribute(lt_layout *l, int attr, const void *buf, size_t size)
{
    return set_attribute(l, layout_fields, sizeof layout_fields / sizeof layout_fields[0], attr, buf, size);
}

/* ---- preference ----------------------------------------------------------- */

BLAS_API cublasStatus_t cublasLtMatmulPreferenceCreate(lt_preference **pref)
{
    if (!pref)
        return CUBLAS_STATUS_INVALID_VALUE;
    *pref = new_descriptor(&(lt_preference){ 0 }, sizeof **pref);
    return *pref ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_ALLOC_FAILED;
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceDestroy(lt_preference *pref)
{
    free(pref);
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceSetAttribute(lt_preference *pref, int attr, const void *buf,
                                                             size_t size)
{
    static const lt_field fields[] = {
        LT_FIELD(1, lt_preference, max_workspace),   /* MAX_WORKSPACE_BYTES */
    };
    return set_attribute(pref, fields, sizeof fields / sizeof fields[0], attr, buf, size);
}

/* ---- algorithms ----------------------------------------------------------- */

/* D = op(A) op(B) + C: the shapes must agree, as the real library checks. */
static cublasStatus_t check_shapes(const lt_matmul_desc *d, const lt_layout *A, const lt_layout *B,
                                   const lt_layout *C, const lt_layout *D)
{
    if (!d || !A || !B || !C || !D)
        return CUBLAS_STATUS_INVALID_VALUE;
    uint64_t am = d->transa == OP_N ? A->rows : A->cols, ak = d->transa == OP_N ? A->cols : A->rows;
    uint64_t bk = d->transb == OP_N ? B->rows : B->cols, bn = d->transb == OP_N ? B->cols : B->rows;
    if (am != D->rows || bn != D->cols || ak != bk || C->rows != D->rows || C->cols != D->cols)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (A->ld < (int64_t)A->rows || B->ld < (int64_t)B->rows || D->ld < (int64_t)D->rows)
        return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasLtMatmulAlgoGetHeuristic(void *handle, lt_matmul_desc *desc, lt_layout *A,
                                                       lt_layout *B, lt_layout *C, lt_layout *D,
                                                       lt_preference *pref, int requested,
                                                       lt_heuristic results[], int *returned)
{
    (void)pref;
    if (!sim_blas_handle_of(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !results || !returned)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check_shapes(desc, A, B, C, D);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    memset(&results[0], 0, sizeof results[0]);
    results[0].algo.data[0] = SIM_LT_ALGO_TAG;
    results[0].workspaceSize = 0;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasLtMatmulAlgoInit(void *handle, int computeType, int scaleType, int Atype, int Btype,
                                               int Ctype, int Dtype, int algoId, lt_algo *algo)
{
    (void)computeType; (void)scaleType; (void)Atype; (void)Btype; (void)Ctype; (void)Dtype;
    if (!sim_blas_handle_of(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo || algoId != 0)
        return CUBLAS_STATUS_INVALID_VALUE;       /* one algorithm: id 0 */
    memset(algo, 0, sizeof *algo);
    algo->data[0] = SIM_LT_ALGO_TAG;
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasLtMatmulAlgoCheck(void *handle, lt_matmul_desc *desc, lt_layout *A, lt_layout *B,
                                                lt_layout *C, lt_layout *D, const lt_algo *algo,
                                                lt_heuristic *result)
{
    if (!sim_blas_handle_of(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!algo || !result || algo->data[0] != SIM_LT_ALGO_TAG)
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check_shapes(desc, A, B, C, D);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    lt_algo copy = *algo;                         /* algo may point into result */
    memset(result, 0, sizeof *result);
    result->algo = copy;
    result->state = CUBLAS_STATUS_SUCCESS;
    result->wavesCount = 1.0f;
    return CUBLAS_STATUS_SUCCESS;
}

/* The one algorithm has no configurable parts: its attributes read as 0
 * and setting one is rejected. */
BLAS_API cublasStatus_t cublasLtMatmulAlgoConfigSetAttribute(lt_algo *algo, int attr, const void *buf, size_t size)
{
    (void)attr; (void)buf; (void)size;
    return algo ? CUBLAS_STATUS_NOT_SUPPORTED : CUBLAS_STATUS_INVALID_VALUE;
}

BLAS_API cublasStatus_t cublasLtMatmulAlgoConfigGetAttribute(const lt_algo *algo, int attr, void *buf, size_t size,
                                                             size_t *written)
{
    (void)attr;
    if (!algo)
        return CUBLAS_STATUS_INVALID_VALUE;
    if (size == 0 && written) {                   /* a size query */
        *written = sizeof(uint32_t);
        return CUBLAS_STATUS_SUCCESS;
    }
    if (!buf || size < sizeof(uint32_t))
        return CUBLAS_STATUS_INVALID_VALUE;
    memset(buf, 0, size);
    if (written)
        *written = sizeof(uint32_t);
    return CUBLAS_STATUS_SUCCESS;
}

BLAS_API cublasStatus_t cublasLtMatmul(void *handle, lt_matmul_desc *desc, const void *alpha, const void *Aptr,
                                       lt_layout *A, const void *Bptr, lt_layout *B, const void *beta,
                                       const void *Cptr, lt_layout *C, void *Dptr, lt_layout *D,
                                       const lt_algo *algo, void *workspace, size_t workspaceSize,
                                       cudaStream_t stream)
{
    (void)Aptr; (void)Bptr; (void)Cptr; (void)Dptr; (void)workspace;
    if (!sim_blas_handle_of(handle))
        return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!alpha || !beta || (algo && algo->data[0] != SIM_LT_ALGO_TAG) || (workspaceSize && !workspace))
        return CUBLAS_STATUS_INVALID_VALUE;
    cublasStatus_t st = check_shapes(desc, A, B, C, D);
    if (st != CUBLAS_STATUS_SUCCESS)
        return st;
    if (D->rows == 0 || D->cols == 0 || D->batch == 0)
        return CUBLAS_STATUS_SUCCESS;
    return sim_blas_launch(kernels.gemm, (int64_t)D->rows, (int64_t)D->cols, D->batch, stream);
}
