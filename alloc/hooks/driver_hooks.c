/*
 * alloc/hooks/driver_hooks.c - the driver layer: cuMemAlloc_v2 and friends.
 *
 * Every program reaches the driver, whether it links the runtime
 * dynamically, statically (the runtime then gets these through our
 * cuGetProcAddress), or dlopens libcuda.so.1 itself (through our dlsym). So
 * this layer alone already puts every device allocation under the cache; the
 * runtime layer exists for programs that call cudaMalloc of a shared runtime
 * and to keep the runtime's device and error semantics.
 *
 * Each hook passes straight through when the thread is already inside
 * vramtrace (the guard: a runtime hook calling the real runtime, the
 * allocator calling the driver) or when the caller is libvramtrace itself
 * (a driver that handed the allocator our own address for a name), so a
 * call is served and counted once. Arguments the allocator would not see the
 * way the driver does (NULL output, size 0) also go to the real driver, for
 * its exact error code.
 *
 * Device of a driver call: the current context's (cuCtxGetDevice); for
 * stream-ordered calls on a created stream, the stream's (see
 * vt__hk_stream_device). The allocator allocates in that device's primary context;
 * with unified addressing the memory is usable from any context of the
 * device. Like the real driver, cuMemAlloc_v2 and cuMemFree_v2 fail without
 * a current context (CUDA_ERROR_INVALID_CONTEXT; before cuInit
 * NOT_INITIALIZED), also when the cache could serve them: the driver, unlike
 * the runtime, never makes a context current by itself.
 *
 * cuMemGetInfo_v2 reports the device's numbers with the bytes the cache holds
 * in segments without an allocated block counted as free
 * (vt__alloc_mem_free, which also keeps to the cap of
 * per_process_memory_fraction): to the program they are as available as
 * memory the device never gave away (the OOM chain gives them back). Free
 * tails of segments in use are not: they serve only requests that fit.
 */
#include <stdatomic.h>
#include <string.h>

#include <cuda.h>

#include "allocator.h"
#include "config.h"
#include "cuda_driver.h"
#include "hooks_internal.h"
#include "recorder.h"
#include "vramtrace/format.h"

/* cuda.h maps these names to their _v2 ABI; we define the old names too. */
#undef cuGetProcAddress
#undef cuStreamDestroy
#undef cuDevicePrimaryCtxReset

__thread int vt__hk_guard __attribute__((tls_model("initial-exec")));

#define SELF_CALLER() vt__hk_is_self(__builtin_return_address(0))
/* Our own calls, and an observed framework allocator's (vt_pool_observe):
 * its segments reach the device as without us, and its observer records them. */
#define PASS() (vt__unlikely(vt__hk_guard != 0) || vt__unlikely(SELF_CALLER())                  \
                || vt__unlikely(vt__pool_caller(__builtin_return_address(0))))

#define REAL HK_DRV_REAL   /* hooks_internal.h */

/* A real driver call, under the guard so whatever it calls back passes. */
#define GUARDED(expr) (HK_ENTER(), r_ = (expr), HK_LEAVE(), r_)

/* r = the real driver function `name` (the prototype of our hook of the same
 * name) called under the guard, as HK_DRV_CALL. */
#define REAL_CALL(r, name, ...)                                                \
    do {                                                                       \
        __typeof__(&name) f_;                                                  \
        HK_DRV_CALL(r, f_, HK_##name, __VA_ARGS__);                            \
    } while (0)

/* The allocator speaks cudaError_t; the numbers the driver layer can see
 * mostly coincide, except those two which are spelled out. */
static CUresult to_cu(int e)
{
    switch (e) {
    case 0: return CUDA_SUCCESS;
    case 1: return CUDA_ERROR_INVALID_VALUE;        /* cudaErrorInvalidValue */
    case 2: return CUDA_ERROR_OUT_OF_MEMORY;        /* cudaErrorMemoryAllocation */
    default: return (CUresult)e;                    /* backend: driver codes */
    }
}

static CUresult ctx_device(int *dev)
{
    const vt__driver_api *d = vt__driver();
    if (!d || !d->cuCtxGetDevice)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUdevice cd = 0;
    CUresult r = d->cuCtxGetDevice(&cd);
    if (r == CUDA_SUCCESS)
        *dev = (int)cd;
    return r;
}

/* The device an allocation is on (with unified addressing, no context
 * needed); a pointer no allocation returned: INVALID_VALUE, as the real
 * free says. */
static CUresult pointer_device(CUdeviceptr p, int *dev)
{
    const vt__driver_api *d = vt__driver();
    if (!d || !d->cuPointerGetAttribute)
        return CUDA_ERROR_INVALID_CONTEXT;
    int ord = -1;
    CUresult r = d->cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, p);
    if (r == CUDA_SUCCESS)
        *dev = ord;
    return r;
}

static int device_or_zero(void)
{
    int dev = 0;
    return ctx_device(&dev) == CUDA_SUCCESS ? dev : 0;
}

static bool is_default_stream(uint64_t stream)
{
    return stream == 0 || stream == HK_STREAM_PER_THREAD;
}

/* Device of stream-ordered work on `s` (`stream` = hk_stream(s, ...)), and
 * whether `s` is capturing into a graph (`capturing`, may be NULL). The
 * legacy and per-thread streams belong to the current context: without one
 * the driver refuses (INVALID_CONTEXT). A created stream carries its
 * context: cuMemAllocAsync takes "the memory pool current to the stream's
 * device" and needs no current context, and the stream's device wins over
 * the current context's. With cuStreamGetDevice (CUDA 12.8+) that is one
 * call, as cheap as cuCtxGetDevice; before, the current context's device
 * stands in when there is one (a stream of another device is then not told
 * apart) and only without one is the stream's context asked and made
 * current for the question. An invalid handle fails here as it would in
 * the real call (a destroyed stream: CUDA_ERROR_INVALID_HANDLE).
 *
 * The capture is asked first: on a capturing stream a real driver refuses
 * cuStreamGetDevice (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidates
 * the program's capture (NVIDIA H200, driver 580.159.04:
 * tests/gpucheck/driver_facts.real, capture_after_stream_queries), so there
 * the current context's device stands in; cuStreamIsCapturing and
 * cuCtxGetDevice are allowed. */
int vt__hk_stream_device(const void *handle, uint64_t stream, int *dev, bool *capturing)
{
    CUstream s = (CUstream)(uintptr_t)handle;
    bool cap = vt__hk_stream_capturing(stream);
    if (capturing)
        *capturing = cap;
    if (is_default_stream(stream))
        return ctx_device(dev);
    const vt__driver_api *d = vt__driver();
    if (!d)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUdevice cd = 0;
    CUresult r;
    if (vt__likely(d->cuStreamGetDevice != NULL) && vt__likely(!cap)) {
        r = d->cuStreamGetDevice(s, &cd);
    } else {
        r = ctx_device(dev);
        if (r != CUDA_ERROR_INVALID_CONTEXT || !d->cuStreamGetCtx || !d->cuCtxGetDevice)
            return r;
        CUcontext c = NULL;
        if ((r = d->cuStreamGetCtx(s, &c)) != CUDA_SUCCESS)
            return r;
        if ((r = d->cuCtxPushCurrent_v2(c)) != CUDA_SUCCESS)
            return r;
        r = d->cuCtxGetDevice(&cd);
        CUcontext popped = NULL;
        d->cuCtxPopCurrent_v2(&popped);
    }
    if (r == CUDA_SUCCESS)
        *dev = (int)cd;
    return r;
}

void vt__hk_passthrough(int device, uint64_t stream, uint64_t addr, uint64_t size,
                        unsigned which, bool release)
{
    if (!vt__trace_enabled())
        return;
    uint32_t stack = release ? vt__stack_capture_free() : vt__stack_capture();
    vt__trace(.kind = VT_EV_PASSTHROUGH, .device = device, .stream = stream, .addr = addr,
              .req_size = size, .size = size, .stack = stack, .aux = which,
              .aux2 = release ? 1 : 0);
}

/* Stream capture (CUDA Programming Guide, "Graph Memory Nodes"): a
 * stream-ordered allocation on a capturing stream is a node of the graph
 * and its address is valid at every launch, so it goes to the driver, which
 * records it (VT_PASS_GRAPH). A stream-ordered free there of memory
 * allocated before the capture (every block the cache owns) is refused by a
 * real driver: CUDA_ERROR_INVALID_VALUE, the capture goes on and the memory
 * stays allocated (driver_facts.real, capture_free_async_of_*); so it is
 * here, the block staying the program's. */
bool vt__hk_stream_capturing(uint64_t stream)
{
    const vt__driver_api *d = vt__driver();
    if (!d || !d->cuStreamIsCapturing)
        return false;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return d->cuStreamIsCapturing((CUstream)(uintptr_t)stream, &st) == CUDA_SUCCESS &&
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* ---- allocation ---------------------------------------------------------- */

static CUresult alloc_on(int dev, CUdeviceptr *dptr, size_t bytes, uint64_t stream)
{
    void *p = NULL;
    HK_ENTER();
    int e = vt__alloc_malloc(dev, bytes, stream, &p);
    HK_LEAVE();
    if (e == 0)
        *dptr = (CUdeviceptr)(uintptr_t)p;
    return to_cu(e);
}

HK_EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    CUresult (*real)(CUdeviceptr *, size_t);
    REAL(real, HK_cuMemAlloc_v2);
    if (PASS() || !dptr || bytesize == 0) {
        CUresult r_;
        return real ? GUARDED(real(dptr, bytesize)) : CUDA_ERROR_NOT_INITIALIZED;
    }
    int dev;
    CUresult r = ctx_device(&dev);
    if (r != CUDA_SUCCESS)
        return r;
    if (vt__unlikely((r = (CUresult)vt__hk_capture_refusal()) != CUDA_SUCCESS))
        return r;   /* a capture prohibits it (capture_modes.c) */
    return alloc_on(dev, dptr, bytesize, VT_NO_STREAM);   /* usable on every stream at once */
}

static CUresult alloc_async(enum vt__hk_drv e, CUdeviceptr *dptr, size_t bytes, CUstream s,
                            bool ptsz, bool pass)
{
    CUresult (*real)(CUdeviceptr *, size_t, CUstream);
    REAL(real, e);
    if (pass || !dptr || bytes == 0) {
        CUresult r_;
        return real ? GUARDED(real(dptr, bytes, s)) : CUDA_ERROR_NOT_INITIALIZED;
    }
    uint64_t stream = hk_stream(s, ptsz);
    int dev;
    bool graph;
    CUresult r = (CUresult)vt__hk_stream_device(s, stream, &dev, &graph);
    if (r != CUDA_SUCCESS)
        return r;
    if (vt__unlikely(graph || vt__hk_pool_is_programs(dev))) {   /* program_pools.c */
        if (!real)
            return CUDA_ERROR_NOT_INITIALIZED;
        CUresult r_;
        r = GUARDED(real(dptr, bytes, s));
        if (r == CUDA_SUCCESS)
            vt__hk_passthrough(dev, stream, (uint64_t)*dptr, bytes,
                               graph ? VT_PASS_GRAPH : VT_PASS_FROM_POOL, false);
        return r;
    }
    if (vt__unlikely((r = (CUresult)vt__hk_capture_refusal()) != CUDA_SUCCESS))
        return r;   /* another stream's capture prohibits it (capture_modes.c) */
    return alloc_on(dev, dptr, bytes, stream);
}

HK_EXPORT CUresult cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(HK_cuMemAllocAsync, dptr, bytesize, hStream, false, PASS());
}

HK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream);
HK_EXPORT CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream hStream)
{
    return alloc_async(HK_cuMemAllocAsync_ptsz, dptr, bytesize, hStream, true, PASS());
}

/* ---- free ---------------------------------------------------------------- */

/* A pointer the cache does not own goes to the real free, unchanged. Freed:
 * a pass-through; refused as invalid: a bad free of the program's, reported
 * (the error stays the real one). */
static CUresult free_foreign(CUresult (*real1)(CUdeviceptr), CUresult (*real2)(CUdeviceptr, CUstream),
                             CUdeviceptr ptr, CUstream s, uint64_t stream, int dev)
{
    CUresult r_, r = CUDA_ERROR_NOT_INITIALIZED;
    if (real1)
        r = GUARDED(real1(ptr));
    else if (real2)
        r = GUARDED(real2(ptr, s));
    if (r == CUDA_ERROR_INVALID_VALUE) {
        HK_ENTER();
        vt__alloc_foreign_free_failed(dev, (const void *)(uintptr_t)ptr);
        HK_LEAVE();
    } else if (r == CUDA_SUCCESS) {
        vt__hk_passthrough(dev, stream, (uint64_t)ptr, 0, VT_PASS_FOREIGN_FREE, true);
    }
    return r;
}

HK_EXPORT CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    CUresult (*real)(CUdeviceptr);
    REAL(real, HK_cuMemFree_v2);
    if (PASS() || dptr == 0) {
        CUresult r_;
        return real ? GUARDED(real(dptr)) : CUDA_ERROR_NOT_INITIALIZED;
    }
    /* Before cuInit the real cuMemFree frees nothing (NOT_INITIALIZED).
     * Without a current context it still frees: the allocation names its
     * device (driver_facts.real, no_context_calls), and the cache makes the
     * primary context current for its own calls (backend_cuda.c). */
    int dev;
    CUresult cr = ctx_device(&dev);
    if (cr == CUDA_ERROR_INVALID_CONTEXT)
        cr = pointer_device(dptr, &dev);
    if (cr != CUDA_SUCCESS)
        return cr;
    if (vt__unlikely((cr = (CUresult)vt__hk_capture_refusal()) != CUDA_SUCCESS))
        return cr;   /* a capture prohibits it (capture_modes.c) */
    HK_ENTER();
    if (vt__config()->free_sync) {
        /* Exactly what cuMemFree does: wait for the device, then free. */
        const vt__driver_api *d = vt__driver();
        if (d && d->cuCtxSynchronize)
            d->cuCtxSynchronize();
    }
    int e = vt__alloc_free((void *)(uintptr_t)dptr, 0, VT_FREE_UNKNOWN_STREAM);
    HK_LEAVE();
    if (e == VT_ALLOC_NOT_OWNED)
        return free_foreign(real, NULL, dptr, NULL, 0, dev);
    return to_cu(e);
}

static CUresult free_async(enum vt__hk_drv e, CUdeviceptr dptr, CUstream s, bool ptsz, bool pass)
{
    CUresult (*real)(CUdeviceptr, CUstream);
    REAL(real, e);
    if (pass || dptr == 0) {
        CUresult r_;
        return real ? GUARDED(real(dptr, s)) : CUDA_ERROR_NOT_INITIALIZED;
    }
    uint64_t stream = hk_stream(s, ptsz);
    /* The legacy and per-thread streams are the current context's: without
     * one the real call fails and frees nothing. A created stream carries
     * its context; the real call needs none current (vt__hk_stream_device). */
    int dev;
    bool capturing;
    CUresult cr = (CUresult)vt__hk_stream_device(s, stream, &dev, &capturing);
    if (cr != CUDA_SUCCESS)
        return cr;
    if (vt__unlikely(capturing)) {
        if (vt__alloc_owns((const void *)(uintptr_t)dptr))
            return CUDA_ERROR_INVALID_VALUE;   /* allocated before the capture: refused (above) */
        return free_foreign(NULL, real, dptr, s, stream, dev);
    }
    if (vt__unlikely((cr = (CUresult)vt__hk_capture_refusal()) != CUDA_SUCCESS))
        return cr;   /* another stream's capture prohibits it (capture_modes.c) */
    HK_ENTER();
    int rc = vt__alloc_free((void *)(uintptr_t)dptr, stream, VT_FREE_ON_STREAM);
    HK_LEAVE();
    if (rc == VT_ALLOC_NOT_OWNED)
        return free_foreign(NULL, real, dptr, s, stream, dev);
    return to_cu(rc);
}

HK_EXPORT CUresult cuMemFreeAsync(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(HK_cuMemFreeAsync, dptr, hStream, false, PASS());
}

HK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream);
HK_EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream hStream)
{
    return free_async(HK_cuMemFreeAsync_ptsz, dptr, hStream, true, PASS());
}

/* ---- memory info --------------------------------------------------------- */

HK_EXPORT CUresult cuMemGetInfo_v2(size_t *free_bytes, size_t *total_bytes)
{
    CUresult (*real)(size_t *, size_t *);
    REAL(real, HK_cuMemGetInfo_v2);
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r_;
    CUresult r = GUARDED(real(free_bytes, total_bytes));
    if (PASS() || r != CUDA_SUCCESS || !free_bytes)
        return r;
    int dev;
    if (ctx_device(&dev) == CUDA_SUCCESS)
        vt__hk_mem_info_free(dev, free_bytes, total_bytes);
    return r;
}

void vt__hk_mem_info_free(int dev, size_t *free_bytes, const size_t *total_bytes)
{
    HK_ENTER();
    uint64_t f = vt__alloc_mem_free(dev, (uint64_t)*free_bytes);
    HK_LEAVE();
    if (total_bytes && f > *total_bytes)
        f = *total_bytes;
    *free_bytes = (size_t)f;
}

/* ---- streams --------------------------------------------------------------- */

static void stream_created(CUstream s)
{
    int dev;
    if (ctx_device(&dev) == CUDA_SUCCESS) {
        HK_ENTER();
        vt__alloc_stream_created(dev, (uint64_t)(uintptr_t)s);
        HK_LEAVE();
    }
}

HK_EXPORT CUresult cuStreamCreate(CUstream *phStream, unsigned int Flags)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuStreamCreate, phStream, Flags);
    if (!pass && r == CUDA_SUCCESS && phStream)
        stream_created(*phStream);
    return r;
}

HK_EXPORT CUresult cuStreamCreateWithPriority(CUstream *phStream, unsigned int flags, int priority)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuStreamCreateWithPriority, phStream, flags, priority);
    if (!pass && r == CUDA_SUCCESS && phStream)
        stream_created(*phStream);
    return r;
}

/* The allocator hears of the stream first, while it still exists: blocks
 * pending on it keep their events, which outlive the stream. */
static CUresult stream_destroy(enum vt__hk_drv e, CUstream s, bool pass)
{
    CUresult (*real)(CUstream);
    REAL(real, e);
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    HK_ENTER();
    if (!pass && s)
        vt__alloc_stream_destroyed((uint64_t)(uintptr_t)s);
    CUresult r = real(s);
    HK_LEAVE();
    return r;
}

HK_EXPORT CUresult cuStreamDestroy_v2(CUstream hStream)
{
    return stream_destroy(HK_cuStreamDestroy_v2, hStream, PASS());
}

HK_EXPORT CUresult cuStreamDestroy(CUstream hStream);
HK_EXPORT CUresult cuStreamDestroy(CUstream hStream)
{
    return stream_destroy(HK_cuStreamDestroy, hStream, PASS());
}

/* ---- waits ------------------------------------------------------------------ */

/* hooks_internal.h's HK_WAIT, for the driver's entry points: a statically
 * linked runtime's cudaDeviceSynchronize, cudaMemcpy and queries arrive here. */
#define WAIT_CALL(e, begin, all, ...)                                          \
    do {                                                                       \
        __typeof__(&e) real_;                                                  \
        REAL(real_, HK_##e);                                                   \
        HK_WAIT(CUresult, real_, CUDA_ERROR_NOT_INITIALIZED, PASS(), CUDA_SUCCESS, \
                begin, all, __VA_ARGS__);                                      \
    } while (0)

#define SYNC_CALL(e, all, ...) WAIT_CALL(e, true, all, __VA_ARGS__)

HK_EXPORT CUresult cuCtxSynchronize(void)
{
    SYNC_CALL(cuCtxSynchronize, true);
}

HK_EXPORT CUresult cuCtxSynchronize_v2(CUcontext ctx)
{
    SYNC_CALL(cuCtxSynchronize_v2, true, ctx);
}

HK_EXPORT CUresult cuStreamSynchronize(CUstream hStream)
{
    SYNC_CALL(cuStreamSynchronize, false, hStream);
}

HK_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream);
HK_EXPORT CUresult cuStreamSynchronize_ptsz(CUstream hStream)
{
    SYNC_CALL(cuStreamSynchronize_ptsz, false, hStream);
}

HK_EXPORT CUresult cuEventSynchronize(CUevent hEvent)
{
    SYNC_CALL(cuEventSynchronize, false, hEvent);
}

/* Queries that answer CUDA_SUCCESS, and blocking copies: the device's
 * semantics and why the per-thread variants record no fence in front are
 * in runtime_hooks.c (cudaMemcpy). */
HK_EXPORT CUresult cuStreamQuery(CUstream hStream)
{
    WAIT_CALL(cuStreamQuery, false, false, hStream);
}

HK_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream);
HK_EXPORT CUresult cuStreamQuery_ptsz(CUstream hStream)
{
    WAIT_CALL(cuStreamQuery_ptsz, false, false, hStream);
}

HK_EXPORT CUresult cuEventQuery(CUevent hEvent)
{
    WAIT_CALL(cuEventQuery, false, false, hEvent);
}

HK_EXPORT CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    WAIT_CALL(cuMemcpy, true, false, dst, src, ByteCount);
}

HK_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount);
HK_EXPORT CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t ByteCount)
{
    WAIT_CALL(cuMemcpy_ptds, false, false, dst, src, ByteCount);
}

HK_EXPORT CUresult cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void *srcHost, size_t ByteCount)
{
    WAIT_CALL(cuMemcpyHtoD_v2, true, false, dstDevice, srcHost, ByteCount);
}

HK_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                        size_t ByteCount);
HK_EXPORT CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dstDevice, const void *srcHost,
                                        size_t ByteCount)
{
    WAIT_CALL(cuMemcpyHtoD_v2_ptds, false, false, dstDevice, srcHost, ByteCount);
}

HK_EXPORT CUresult cuMemcpyDtoH_v2(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    WAIT_CALL(cuMemcpyDtoH_v2, true, false, dstHost, srcDevice, ByteCount);
}

HK_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount);
HK_EXPORT CUresult cuMemcpyDtoH_v2_ptds(void *dstHost, CUdeviceptr srcDevice, size_t ByteCount)
{
    WAIT_CALL(cuMemcpyDtoH_v2_ptds, false, false, dstHost, srcDevice, ByteCount);
}

/* ---- seen, not cached ------------------------------------------------------ */

HK_EXPORT CUresult cuMemAllocHost_v2(void **pp, size_t bytesize)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemAllocHost_v2, pp, bytesize);
    if (!pass && r == CUDA_SUCCESS && pp)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*pp, bytesize,
                           VT_PASS_HOST, false);
    return r;
}

HK_EXPORT CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int Flags)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemHostAlloc, pp, bytesize, Flags);
    if (!pass && r == CUDA_SUCCESS && pp && *pp)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*pp, bytesize,
                           VT_PASS_HOST, false);
    return r;
}

HK_EXPORT CUresult cuMemFreeHost(void *p)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemFreeHost, p);
    if (!pass && r == CUDA_SUCCESS && p)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)p, 0, VT_PASS_HOST, true);
    return r;
}

HK_EXPORT CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemAllocManaged, dptr, bytesize, flags);
    if (!pass && r == CUDA_SUCCESS && dptr)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)*dptr, bytesize, VT_PASS_MANAGED, false);
    return r;
}

/* Pitched rows: a device allocation of pitch * Height bytes. */
HK_EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                      size_t Height, unsigned int ElementSizeBytes)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemAllocPitch_v2, dptr, pPitch, WidthInBytes, Height, ElementSizeBytes);
    if (!pass && r == CUDA_SUCCESS && dptr && pPitch)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)*dptr, *pPitch * Height,
                           VT_PASS_PITCH, false);
    return r;
}

/* Arrays are opaque: the event's addr is the handle, its size the texels'
 * bytes (the layout the driver picks may pad them). */
static uint64_t array_bytes(size_t w, size_t h, size_t d, CUarray_format f, unsigned channels)
{
    uint64_t elem;
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8: elem = 1; break;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF: elem = 2; break;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT: elem = 4; break;
    default: elem = 0; break;   /* block-compressed and other formats: size unknown */
    }
    return elem * channels * (uint64_t)w * (h ? h : 1) * (d ? d : 1);
}

HK_EXPORT CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *desc)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuArrayCreate_v2, pHandle, desc);
    if (!pass && r == CUDA_SUCCESS && pHandle && desc)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*pHandle,
                           array_bytes(desc->Width, desc->Height, 0, desc->Format,
                                       desc->NumChannels), VT_PASS_ARRAY, false);
    return r;
}

HK_EXPORT CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *desc)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuArray3DCreate_v2, pHandle, desc);
    if (!pass && r == CUDA_SUCCESS && pHandle && desc)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*pHandle,
                           array_bytes(desc->Width, desc->Height, desc->Depth, desc->Format,
                                       desc->NumChannels), VT_PASS_ARRAY, false);
    return r;
}

HK_EXPORT CUresult cuArrayDestroy(CUarray hArray)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuArrayDestroy, hArray);
    if (!pass && r == CUDA_SUCCESS && hArray)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)hArray, 0, VT_PASS_ARRAY,
                           true);
    return r;
}

/* The program's own host memory, page-locked: pinned host bytes it holds. */
HK_EXPORT CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemHostRegister_v2, p, bytesize, Flags);
    if (!pass && r == CUDA_SUCCESS && p)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)p, bytesize,
                           VT_PASS_HOST_REGISTER, false);
    return r;
}

HK_EXPORT CUresult cuMemHostUnregister(void *p)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemHostUnregister, p);
    if (!pass && r == CUDA_SUCCESS && p)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)p, 0, VT_PASS_HOST_REGISTER,
                           true);
    return r;
}

/* An explicit pool is the program's choice of memory (its attributes, its
 * access list, maybe IPC): passed through, recorded. The device is the
 * pool's, which the stream's stands in for (a pool of another device is
 * allocated from on a stream of that device's context in practice). */
static CUresult from_pool(enum vt__hk_drv e, CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                          CUstream hStream, bool ptsz)
{
    CUresult (*real)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    REAL(real, e);
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    bool pass = PASS();
    CUresult r_;
    CUresult r = GUARDED(real(dptr, bytesize, pool, hStream));
    if (!pass && r == CUDA_SUCCESS && dptr) {
        uint64_t stream = hk_stream(hStream, ptsz);
        int dev = 0;
        if (vt__hk_stream_device(hStream, stream, &dev, NULL) != CUDA_SUCCESS)
            dev = device_or_zero();
        vt__hk_passthrough(dev, stream, (uint64_t)*dptr, bytesize, VT_PASS_FROM_POOL, false);
    }
    return r;
}

HK_EXPORT CUresult cuMemAllocFromPoolAsync(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool pool,
                                           CUstream hStream)
{
    return from_pool(HK_cuMemAllocFromPoolAsync, dptr, bytesize, pool, hStream, false);
}

HK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream);
HK_EXPORT CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *dptr, size_t bytesize,
                                                CUmemoryPool pool, CUstream hStream)
{
    return from_pool(HK_cuMemAllocFromPoolAsync_ptsz, dptr, bytesize, pool, hStream, true);
}

/* The program chooses its pools: noted (program_pools.c), passed on. A
 * call of the real runtime under our guard is one of ours: not noted. */
HK_EXPORT CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuDeviceSetMemPool, dev, pool);
    if (!pass && r == CUDA_SUCCESS)
        vt__hk_pool_made_current((int)dev, pool);
    return r;
}

HK_EXPORT CUresult cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void *value)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemPoolSetAttribute, pool, attr, value);
    if (!pass && r == CUDA_SUCCESS)
        vt__hk_pool_configured(pool);
    return r;
}

HK_EXPORT CUresult cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc *map, size_t count)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemPoolSetAccess, pool, map, count);
    if (!pass && r == CUDA_SUCCESS)
        vt__hk_pool_configured(pool);
    return r;
}

HK_EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemCreate, handle, size, prop, flags);
    if (!pass && r == CUDA_SUCCESS && handle) {
        int dev = prop && prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE ? prop->location.id
                                                                            : device_or_zero();
        vt__hk_passthrough(dev, 0, (uint64_t)*handle, size, VT_PASS_VMM_CREATE, false);
    }
    return r;
}

HK_EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemRelease, handle);
    if (!pass && r == CUDA_SUCCESS)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)handle, 0, VT_PASS_VMM_CREATE, true);
    return r;
}

HK_EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                            CUmemGenericAllocationHandle handle, unsigned long long flags)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemMap, ptr, size, offset, handle, flags);
    if (!pass && r == CUDA_SUCCESS)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)ptr, size, VT_PASS_VMM_MAP, false);
    return r;
}

HK_EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    bool pass = PASS();
    CUresult r;
    REAL_CALL(r, cuMemUnmap, ptr, size);
    if (!pass && r == CUDA_SUCCESS)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)ptr, size, VT_PASS_VMM_MAP, true);
    return r;
}

/* ---- legacy IPC ----------------------------------------------------------------- */

/* The handle exports the whole device allocation holding the pointer, and
 * a raw importer opens its start: a block inside a cached segment is
 * reported, and makes later blocks ipc-safe (alloc/alloc_ipc.c). The handle
 * is the driver's either way. Reached through cudaIpcGetMemHandle too (the
 * runtime asks cuGetProcAddress for it). */
HK_EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    bool pass = PASS();
    if (!pass)
        vt__alloc_ipc_exporting((const void *)(uintptr_t)dptr);
    CUresult r;
    REAL_CALL(r, cuIpcGetMemHandle, pHandle, dptr);
    return r;
}

/* ---- device reset ------------------------------------------------------------ */

/* The primary context's reset frees every allocation of the device (what
 * cudaDeviceReset does, also in a statically linked runtime, which reaches
 * it through our cuGetProcAddress): empty the books first. */
static CUresult ctx_reset(enum vt__hk_drv e, CUdevice dev, bool pass)
{
    CUresult (*real)(CUdevice);
    REAL(real, e);
    if (!real)
        return CUDA_ERROR_NOT_INITIALIZED;
    HK_ENTER();
    if (!pass)
        vt__alloc_device_reset((int)dev);
    CUresult r = real(dev);
    HK_LEAVE();
    return r;
}

HK_EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    return ctx_reset(HK_cuDevicePrimaryCtxReset_v2, dev, PASS());
}

HK_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev);
HK_EXPORT CUresult cuDevicePrimaryCtxReset(CUdevice dev)
{
    return ctx_reset(HK_cuDevicePrimaryCtxReset, dev, PASS());
}

/* ---- the resolvers ---------------------------------------------------------- */

/* Ask the real resolver with exactly the caller's arguments, then replace the
 * answer if it is one of the functions we hook (procaddr.c). Substitution is
 * done even under the guard: a runtime resolving lazily inside a call we
 * forwarded keeps what it gets forever. */
HK_EXPORT CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                       cuuint64_t flags, CUdriverProcAddressQueryResult *symbolStatus)
{
    CUresult (*real)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    REAL(real, HK_cuGetProcAddress_v2);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    bool self = SELF_CALLER();
    CUresult r = real(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn && !self)
        *pfn = vt__hk_substitute(symbol, *pfn, flags, true);
    return r;
}

/* The CUDA 11.3 ABI (no status argument). */
HK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags);
HK_EXPORT CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                    cuuint64_t flags)
{
    CUresult (*real)(const char *, void **, int, cuuint64_t);
    REAL(real, HK_cuGetProcAddress);
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    bool self = SELF_CALLER();
    CUresult r = real(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn && !self)
        *pfn = vt__hk_substitute(symbol, *pfn, flags, true);
    return r;
}

/* ---- hook table ------------------------------------------------------------- */

/* The hooks' own addresses through hidden aliases: taking the address of an
 * exported name goes through the GOT and could resolve to another object's
 * definition of that name when libvramtrace is not first in the search order. */
#define HOOKS(X)                                                                \
    X(cuGetProcAddress) X(cuGetProcAddress_v2) X(cuMemAlloc_v2) X(cuMemFree_v2)  \
    X(cuMemGetInfo_v2) X(cuMemAllocAsync) X(cuMemAllocAsync_ptsz)               \
    X(cuMemFreeAsync) X(cuMemFreeAsync_ptsz) X(cuStreamCreate)                   \
    X(cuStreamCreateWithPriority) X(cuStreamDestroy) X(cuStreamDestroy_v2)      \
    X(cuMemAllocHost_v2) X(cuMemHostAlloc) X(cuMemFreeHost) X(cuMemAllocManaged) \
    X(cuMemCreate) X(cuMemRelease) X(cuMemMap) X(cuMemUnmap)                    \
    X(cuDevicePrimaryCtxReset) X(cuDevicePrimaryCtxReset_v2) X(cuCtxSynchronize)  \
    X(cuCtxSynchronize_v2) X(cuStreamSynchronize) X(cuStreamSynchronize_ptsz)     \
    X(cuEventSynchronize) X(cuStreamQuery) X(cuStreamQuery_ptsz) X(cuEventQuery)  \
    X(cuMemcpy) X(cuMemcpy_ptds) X(cuMemcpyHtoD_v2) X(cuMemcpyHtoD_v2_ptds)       \
    X(cuMemcpyDtoH_v2) X(cuMemcpyDtoH_v2_ptds) X(cuMemAllocPitch_v2) X(cuArrayCreate_v2) \
    X(cuArray3DCreate_v2) X(cuArrayDestroy) X(cuMemHostRegister_v2)              \
    X(cuMemHostUnregister) X(cuMemAllocFromPoolAsync) X(cuMemAllocFromPoolAsync_ptsz) \
    X(cuDeviceSetMemPool) X(cuMemPoolSetAttribute) X(cuMemPoolSetAccess)          \
    X(cuIpcGetMemHandle)

#define ALIAS(name) \
    extern __typeof(name) hkl_##name __attribute__((alias(#name), visibility("hidden")));
HOOKS(ALIAS)
#undef ALIAS

void *vt__hk_drv_hook(enum vt__hk_drv e)
{
    void (*f)(void) = NULL;
    switch (e) {
#define CASE(name) case HK_##name: f = (void (*)(void))hkl_##name; break;
    HOOKS(CASE)
#undef CASE
    case HK_cuStreamBeginCapture_v2: case HK_cuStreamBeginCapture_v2_ptsz:
    case HK_cuStreamBeginCaptureToGraph: case HK_cuStreamBeginCaptureToGraph_ptsz:
    case HK_cuStreamEndCapture: case HK_cuStreamEndCapture_ptsz:
        return vt__hk_capture_hook(e);
    case HK_DRV_COUNT: break;
    }
    void *p;
    memcpy(&p, &f, sizeof p);
    return p;
}
