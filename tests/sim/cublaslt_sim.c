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

/* cublasLt*Create: a descriptor holding a copy of `init` (size bytes),
 * stored into *out, where `out` is the caller's T ** (every object pointer
 * has one representation on the platforms CUDA supports). */
static cublasStatus_t create_descriptor(void *out, const void *init, size_t size)
{
    if (!out)
        return CUBLAS_STATUS_INVALID_VALUE;
    void *d = malloc(size);
    if (!d)
        return CUBLAS_STATUS_ALLOC_FAILED;
    memcpy(d, init, size);
    memcpy(out, &d, sizeof d);
    return CUBLAS_STATUS_SUCCESS;
}

/* The descriptor attributes the simulation keeps: the kind of descriptor,
 * the attribute's number, where it is in the descriptor and its size (a
 * value must be exactly that size). Others are accepted and kept nowhere. */
typedef enum lt_kind { LT_MATMUL_DESC, LT_LAYOUT, LT_PREFERENCE } lt_kind;

typedef struct lt_field {
    lt_kind kind;
    int     attr;
    size_t  offset, size;
} lt_field;

#define LT_FIELD(kind, attr, type, member) \
    { kind, attr, offsetof(type, member), sizeof(((type *)0)->member) }

static const lt_field lt_fields[] = {
    LT_FIELD(LT_MATMUL_DESC, 0, lt_matmul_desc, compute_type),   /* COMPUTE_TYPE */
    LT_FIELD(LT_MATMUL_DESC, 1, lt_matmul_desc, scale_type),     /* SCALE_TYPE */
    LT_FIELD(LT_MATMUL_DESC, 3, lt_matmul_desc, transa),         /* TRANSA */
    LT_FIELD(LT_MATMUL_DESC, 4, lt_matmul_desc, transb),         /* TRANSB */
    LT_FIELD(LT_LAYOUT, 0, lt_layout, type),                     /* TYPE */
    LT_FIELD(LT_LAYOUT, 2, lt_layout, rows),                     /* ROWS */
    LT_FIELD(LT_LAYOUT, 3, lt_layout, cols),                     /* COLS */
    LT_FIELD(LT_LAYOUT, 4, lt_layout, ld),                       /* LD */
    LT_FIELD(LT_LAYOUT, 5, lt_layout, batch),                    /* BATCH_COUNT */
    LT_FIELD(LT_PREFERENCE, 1, lt_preference, max_workspace),    /* MAX_WORKSPACE_BYTES */
};

/* cublasLt*SetAttribute: a descriptor and a value buffer are required; an
 * attribute not in lt_fields (epilogue, pointers, scales, order, ...) is
 * accepted and has no effect on a no-op. */
static cublasStatus_t set_attribute(lt_kind kind, void *desc, int attr, const void *buf, size_t size)
{
    if (!desc || !buf || size == 0)
        return CUBLAS_STATUS_INVALID_VALUE;
    for (size_t i = 0; i < sizeof lt_fields / sizeof lt_fields[0]; i++) {
        const lt_field *f = &lt_fields[i];
        if (f->kind != kind || f->attr != attr)
            continue;
        if (size != f->size)
            return CUBLAS_STATUS_INVALID_VALUE;
        memcpy((char *)desc + f->offset, buf, size);
        break;
    }
    return CUBLAS_STATUS_SUCCESS;
}

/* ---- descriptors --------------------------------------------------------- */

BLAS_API cublasStatus_t cublasLtMatmulDescCreate(lt_matmul_desc **desc, int computeType, int scaleType)
{
    return create_descriptor(desc, &(lt_matmul_desc){ computeType, scaleType, OP_N, OP_N }, sizeof **desc);
}

BLAS_API cublasStatus_t cublasLtMatrixLayoutCreate(lt_layout **layout, int type, uint64_t rows, uint64_t cols,
                                                   int64_t ld)
{
    return create_descriptor(layout, &(lt_layout){ type, rows, cols, ld, 1 }, sizeof **layout);
}

BLAS_API cublasStatus_t cublasLtMatmulPreferenceCreate(lt_preference **pref)
{
    return create_descriptor(pref, &(lt_preference){ 0 }, sizeof **pref);
}

/* cublasLt<Name>Destroy and cublasLt<Name>SetAttribute are the same for
 * every kind of descriptor: cublasLtMatmulDesc*, cublasLtMatrixLayout*,
 * cublasLtMatmulPreference*. */
#define LT_DESCRIPTOR_CALLS(Name, type, kind)                                                       \
    BLAS_API cublasStatus_t cublasLt##Name##Destroy(type *d)                                        \
    {                                                                                              \
        free(d);                                                                                   \
        return CUBLAS_STATUS_SUCCESS;                                                              \
    }                                                                                              \
    BLAS_API cublasStatus_t cublasLt##Name##SetAttribute(type *d, int attr, const void *buf, size_t size) \
    {                                                                                              \
        return set_attribute(kind, d, attr, buf, size);                                            \
    }

LT_DESCRIPTOR_CALLS(MatmulDesc, lt_matmul_desc, LT_MATMUL_DESC)
LT_DESCRIPTOR_CALLS(MatrixLayout, lt_layout, LT_LAYOUT)
LT_DESCRIPTOR_CALLS(MatmulPreference, lt_preference, LT_PREFERENCE)

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
