/* tests/sim/driver_stream.c - driver entry points for streams, host functions
 * and kernel launches. The machinery is in sim_stream.c. */
#include "sim_internal.h"

static CUresult create(CUstream *ph, unsigned flags, int priority)
{
    sim_ctx *c;
    CUresult rc = sim_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ph || (flags & ~(unsigned)CU_STREAM_NON_BLOCKING))
        return CUDA_ERROR_INVALID_VALUE;
    /* Priorities are clamped to the range cuCtxGetStreamPriorityRange gives. */
    if (priority > 0)
        priority = 0;
    if (priority < -5)
        priority = -5;
    sim_stream *s;
    rc = sim_stream_create(c->dev, flags, priority, SIM_STREAM_USER, &s);
    if (rc == CUDA_SUCCESS)
        *ph = (CUstream)s;
    return rc;
}

SIM_API CUresult cuStreamCreate(CUstream *ph, unsigned int flags) { return create(ph, flags, 0); }
SIM_API CUresult cuStreamCreateWithPriority(CUstream *ph, unsigned int flags, int priority)
{
    return create(ph, flags, priority);
}

SIM_API CUresult cuCtxGetStreamPriorityRange(int *least, int *greatest)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (least) *least = 0;
    if (greatest) *greatest = -5;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamDestroy_v2(CUstream h)
{
    SIM_TRY(sim_check_init());
    uintptr_t v = (uintptr_t)h;
    if (v <= 2)
        return CUDA_ERROR_INVALID_HANDLE;   /* default streams are not destroyed */
    sim_stream *s = (sim_stream *)h;
    uint32_t magic = __atomic_load_n(&s->magic, __ATOMIC_RELAXED);
    if (magic == SIM_MAGIC_DEAD_STREAM) {
        SIM_COUNT(s->dev, stale_stream_uses);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    if (magic != SIM_MAGIC_STREAM || s->kind != SIM_STREAM_USER)
        return CUDA_ERROR_INVALID_HANDLE;
    CUresult r = sim_stream_destroy(s);
    if (r == CUDA_ERROR_INVALID_HANDLE)
        SIM_COUNT(s->dev, stale_stream_uses);   /* destroyed twice */
    return r;
}

static CUresult stream_sync(CUstream h, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    SIM_COUNT(s->dev, stream_syncs);
    if (sim_graph_invalidate_if_capturing(s))   /* not permitted: ends the capture's use */
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    SIM_TRY(sim_capture_unsafe_call());
    return sim_stream_sync(s);
}

static CUresult stream_query(CUstream h, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    if (sim_graph_invalidate_if_capturing(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    SIM_TRY(sim_capture_unsafe_call());
    return sim_stream_query(s);
}

SIM_API CUresult cuStreamSynchronize(CUstream h)      { return stream_sync(h, false); }
SIM_API CUresult cuStreamSynchronize_ptsz(CUstream h) { return stream_sync(h, true); }
SIM_API CUresult cuStreamQuery(CUstream h)            { return stream_query(h, false); }
SIM_API CUresult cuStreamQuery_ptsz(CUstream h)       { return stream_query(h, true); }

/* The prologue of the stream attribute getters: the out-argument is checked
 * before the handle. */
static CUresult attr_stream(CUstream h, bool ptsz, const void *out, sim_stream **s)
{
    SIM_TRY(sim_check_init());
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    return sim_stream_resolve(h, ptsz, s);
}

static CUresult get_priority(CUstream h, int *priority, bool ptsz)
{
    sim_stream *s;
    CUresult rc = attr_stream(h, ptsz, priority, &s);
    if (rc == CUDA_SUCCESS)
        *priority = s->priority;
    return rc;
}

static CUresult get_flags(CUstream h, unsigned *flags, bool ptsz)
{
    sim_stream *s;
    CUresult rc = attr_stream(h, ptsz, flags, &s);
    /* Not permitted on a capturing stream, and the capture is invalidated
     * (seen on an H200, fact capture_other_queries; cuStreamGetCtx is
     * allowed). */
    if (rc == CUDA_SUCCESS && sim_graph_invalidate_if_capturing(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (rc == CUDA_SUCCESS)
        *flags = s->flags;
    return rc;
}

SIM_API CUresult cuStreamGetPriority(CUstream h, int *p)           { return get_priority(h, p, false); }
SIM_API CUresult cuStreamGetPriority_ptsz(CUstream h, int *p)      { return get_priority(h, p, true); }
SIM_API CUresult cuStreamGetFlags(CUstream h, unsigned int *f)     { return get_flags(h, f, false); }
SIM_API CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int *f) { return get_flags(h, f, true); }

static CUresult host_func(CUstream h, CUhostFn fn, void *arg, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, fn != NULL, &s));
    SIM_COUNT(s->dev, host_funcs);
    sim_op *op = sim_op_new(SIM_OP_HOSTFN);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.host.fn = fn;
    op->u.host.arg = arg;
    return sim_stream_enqueue(s, op, NULL);
}

SIM_API CUresult cuLaunchHostFunc(CUstream h, CUhostFn fn, void *arg)      { return host_func(h, fn, arg, false); }
SIM_API CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *arg) { return host_func(h, fn, arg, true); }

/* A 32-bit store in stream order. The target is device memory or pinned
 * host memory (its device pointer is the host pointer here), never managed
 * memory, 4-byte aligned. The v2 ABI has no NO_MEMORY_BARRIER flag. */
static CUresult write_value32(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned flags,
                              bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, addr != 0 && addr % 4 == 0 &&
                           flags == CU_STREAM_WRITE_VALUE_DEFAULT, &s));
    sim_mem_kind kind;
    uintptr_t base;
    size_t size;
    bool ok;
    if (sim_mem_lookup((uintptr_t)addr, NULL, NULL, NULL, &kind) == CUDA_SUCCESS)
        ok = kind == SIM_MEM_VA ? sim_vmm_mapping_range((uintptr_t)addr, &base, &size) == CUDA_SUCCESS
                                : kind != SIM_MEM_MANAGED;
    else
        ok = sim_mem_host_lookup((void *)(uintptr_t)addr, NULL, NULL);
    if (!ok)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op *op = sim_op_new(SIM_OP_MEMSET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = (void *)(uintptr_t)addr;
    op->u.set.value = value;
    op->u.set.width = 4;
    op->u.set.n = 1;
    return sim_stream_enqueue(s, op, NULL);
}

SIM_API CUresult cuStreamWriteValue32_v2(CUstream h, CUdeviceptr a, cuuint32_t v, unsigned int f)
{
    return write_value32(h, a, v, f, false);
}
SIM_API CUresult cuStreamWriteValue32_v2_ptsz(CUstream h, CUdeviceptr a, cuuint32_t v, unsigned int f)
{
    return write_value32(h, a, v, f, true);
}

/* Device code cannot run here: a launch is validated, ordered in its stream
 * like any other work, and counted. `f` is not checked against a module. */
static CUresult launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                       unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                       CUstream h, void **params, void **extra, bool ptsz)
{
    (void)f; (void)shmem; (void)params; (void)extra;
    sim_stream *s;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    if (gx == 0 || gy == 0 || gz == 0 || bx == 0 || by == 0 || bz == 0 ||
        (unsigned long long)bx * by * bz > 1024 || by > 1024 || bz > 64 ||
        gy > 65535 || gz > 65535)
        return CUDA_ERROR_INVALID_VALUE;
    SIM_COUNT(s->dev, kernel_launches);
    sim_op *op = sim_op_new(SIM_OP_KERNEL);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return sim_stream_enqueue(s, op, NULL);
}

SIM_API CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                CUstream h, void **params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, extra, false);
}

SIM_API CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                     unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                     CUstream h, void **params, void **extra)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, extra, true);
}

/* A cooperative launch: its blocks must all be resident at once, which the
 * sim does not check (device code never runs); ordered like any launch. */
SIM_API CUresult cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                           unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                           CUstream h, void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, NULL, false);
}

SIM_API CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy,
                                                unsigned gz, unsigned bx, unsigned by, unsigned bz,
                                                unsigned shmem, CUstream h, void **params)
{
    return launch(f, gx, gy, gz, bx, by, bz, shmem, h, params, NULL, true);
}

/* cuLaunchKernelEx: the same launch, its configuration in a struct; the
 * launch attributes (clusters, programmatic dependent launch, priorities)
 * are accepted and ignored: there is no device code to schedule. */
static CUresult launch_ex(const CUlaunchConfig *config, CUfunction f, void **params,
                          void **extra, bool ptsz)
{
    if (!config || (config->numAttrs && !config->attrs))
        return CUDA_ERROR_INVALID_VALUE;
    return launch(f, config->gridDimX, config->gridDimY, config->gridDimZ, config->blockDimX,
                  config->blockDimY, config->blockDimZ, config->sharedMemBytes,
                  config->hStream, params, extra, ptsz);
}

SIM_API CUresult cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, void **params,
                                  void **extra)
{
    return launch_ex(config, f, params, extra, false);
}

SIM_API CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f,
                                       void **params, void **extra)
{
    return launch_ex(config, f, params, extra, true);
}

/* The context and device of a stream. A created stream answers for itself,
 * with or without a current context; the special handles (0, legacy,
 * per-thread) name the current context's stream: INVALID_CONTEXT without
 * one (cuda.h, cuStreamGetCtx); sim_stream_resolve gives exactly that. The
 * sim has only primary contexts. */
static CUresult get_ctx(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen, bool v2, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, pctx && (!v2 || pgreen), &s));
    *pctx = (CUcontext)&s->dev->primary;
    if (v2)
        *pgreen = NULL;               /* no green contexts here */
    return CUDA_SUCCESS;
}

static CUresult get_device(CUstream h, CUdevice *dev, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, dev != NULL, &s));
    /* Not permitted on a capturing stream, and the capture is invalidated
     * (seen on an H200: sim_graph.c). */
    if (sim_graph_invalidate_if_capturing(s))
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    *dev = s->dev->ordinal;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamGetCtx(CUstream h, CUcontext *c)      { return get_ctx(h, c, NULL, false, false); }
SIM_API CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *c) { return get_ctx(h, c, NULL, false, true); }
SIM_API CUresult cuStreamGetCtx_v2(CUstream h, CUcontext *c, CUgreenCtx *g)
{
    return get_ctx(h, c, g, true, false);
}
SIM_API CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *c, CUgreenCtx *g)
{
    return get_ctx(h, c, g, true, true);
}
SIM_API CUresult cuStreamGetDevice(CUstream h, CUdevice *d)      { return get_device(h, d, false); }
SIM_API CUresult cuStreamGetDevice_ptsz(CUstream h, CUdevice *d) { return get_device(h, d, true); }
