/*
 * alloc/hooks/hooks_internal.h - the interposition layer's cross-file map.
 *
 * Two layers of hooks feed one allocator:
 *   runtime layer (runtime_hooks.c)  cudaMalloc, cudaFree, ... exported both
 *                                    unversioned and as name@libcudart.so.13
 *   driver layer  (driver_hooks.c)   cuMemAlloc_v2, cuMemFree_v2, ... exported,
 *                                    and handed out by cuGetProcAddress and dlsym
 *                                    (procaddr.c, dl_override.c)
 * A call that enters one layer and comes back through the other (the real
 * cudaFree calling cuMemFree_v2; the allocator's own driver calls) is served
 * once: every hook raises the thread's guard while it runs vramtrace or the
 * real CUDA, and a driver hook entered under the guard is a plain pass-through.
 *
 * Real entry points are resolved lazily with atomics, never under a
 * pthread_once: resolving loads libraries whose constructors may call CUDA,
 * which would re-enter a once-initializer and deadlock.
 */
#ifndef VT_HOOKS_INTERNAL_H
#define VT_HOOKS_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "likely.h"

/* For code our dlsym runs on behalf of a sanitizer runtime that is still
 * initializing (ASan resolves its interceptors with dlsym before its shadow
 * memory exists): such code must not be instrumented. */
#define HK_EARLY vt__no_sanitize

#define HK_EXPORT __attribute__((visibility("default")))

/* The thread is inside vramtrace (a hook, the allocator, the real CUDA called
 * by a hook): driver hooks pass straight through. Initial-exec TLS: no
 * allocation, no lock, one instruction to test. */
extern __thread int vt__hk_guard __attribute__((tls_model("initial-exec")));

#define HK_ENTER() (vt__hk_guard++)
#define HK_LEAVE() (vt__hk_guard--)

/* The program waits for the device, a stream or an event, through the
 * runtime or the driver (each file's WAIT_CALL): the frees whose work is
 * done by then complete now (vt__alloc_sync_begin/end), so what is recorded
 * as completed is true when the program looks, not late, and the memory is
 * reusable at once. `begin`: record the fence of the frees of unknown
 * stream before the call, so that the wait covers it (all: even when one is
 * in flight); without it the call only looks at the fences after it
 * succeeded (a query, or a call that may not wait for every stream, must
 * not have the legacy stream's event in front of it). `real`: the real entry
 * point (NULL: the hook returns `missing`); `pass`: the call is ours (then
 * only passed on); `ok`: the API's success. */
#define HK_WAIT(result_t, real, missing, pass, ok, begin, all, ...)           \
    do {                                                                       \
        if (!(real))                                                           \
            return (missing);                                                  \
        bool pass_ = (pass);                                                   \
        HK_ENTER();                                                            \
        if (!pass_ && (begin))                                                 \
            vt__alloc_sync_begin(all);                                         \
        result_t r_ = (real)(__VA_ARGS__);                                     \
        if (!pass_ && r_ == (ok))                                              \
            vt__alloc_sync_end();                                              \
        HK_LEAVE();                                                            \
        return r_;                                                             \
    } while (0)

/* Stream handles as the allocator wants them: CU_STREAM_LEGACY (0x1) is the
 * legacy stream, 0; in a _ptsz entry point 0 means the per-thread stream. */
#define HK_STREAM_PER_THREAD 0x2u
static inline uint64_t hk_stream(const void *s, bool ptsz)
{
    uint64_t v = (uint64_t)(uintptr_t)s;
    if (v == 0x1)
        return 0;
    if (v == 0 && ptsz)
        return HK_STREAM_PER_THREAD;
    return v;
}

/* ---- dl_override.c ------------------------------------------------------ */

/* Is `addr` code of libvramtrace itself? (Lock-free: linker-defined bounds.) */
bool vt__hk_is_self(const void *addr);

/* The real dlsym of the C library. */
void *vt__hk_real_dlsym(void *handle, const char *name);

/* ---- procaddr.c: the driver entry points the hooks replace -------------- */

/* One per hooked driver ABI entry point (the exported name). */
enum vt__hk_drv {
    HK_cuGetProcAddress,        /* 11.3 ABI, 4 arguments */
    HK_cuGetProcAddress_v2,
    HK_cuMemAlloc_v2,
    HK_cuMemFree_v2,
    HK_cuMemGetInfo_v2,
    HK_cuMemAllocAsync,
    HK_cuMemAllocAsync_ptsz,
    HK_cuMemFreeAsync,
    HK_cuMemFreeAsync_ptsz,
    HK_cuStreamCreate,
    HK_cuStreamCreateWithPriority,
    HK_cuStreamDestroy,         /* old name, same ABI as _v2 */
    HK_cuStreamDestroy_v2,
    HK_cuMemAllocHost_v2,
    HK_cuMemHostAlloc,
    HK_cuMemFreeHost,
    HK_cuMemAllocManaged,
    HK_cuMemCreate,
    HK_cuMemRelease,
    HK_cuMemMap,
    HK_cuMemUnmap,
    HK_cuDevicePrimaryCtxReset,    /* old name, same ABI as _v2 */
    HK_cuDevicePrimaryCtxReset_v2,
    HK_cuCtxSynchronize,           /* 2.0 ABI: the current context */
    HK_cuCtxSynchronize_v2,        /* 13.0 ABI: a context argument */
    HK_cuStreamSynchronize,
    HK_cuStreamSynchronize_ptsz,
    HK_cuEventSynchronize,
    HK_cuStreamQuery,
    HK_cuStreamQuery_ptsz,
    HK_cuEventQuery,
    HK_cuMemcpy,                   /* unified addressing, any direction */
    HK_cuMemcpy_ptds,
    HK_cuMemcpyHtoD_v2,
    HK_cuMemcpyHtoD_v2_ptds,
    HK_cuMemcpyDtoH_v2,
    HK_cuMemcpyDtoH_v2_ptds,
    HK_cuMemAllocPitch_v2,
    HK_cuArrayCreate_v2,
    HK_cuArray3DCreate_v2,
    HK_cuArrayDestroy,
    HK_cuMemHostRegister_v2,
    HK_cuMemHostUnregister,
    HK_cuMemAllocFromPoolAsync,
    HK_cuMemAllocFromPoolAsync_ptsz,
    HK_cuDeviceSetMemPool,
    HK_cuMemPoolSetAttribute,
    HK_cuMemPoolSetAccess,
    HK_cuIpcGetMemHandle,
    HK_cuStreamBeginCapture_v2,          /* capture_modes.c */
    HK_cuStreamBeginCapture_v2_ptsz,
    HK_cuStreamBeginCaptureToGraph,
    HK_cuStreamBeginCaptureToGraph_ptsz,
    HK_cuStreamEndCapture,
    HK_cuStreamEndCapture_ptsz,
    HK_DRV_COUNT
};

/* The real (libcuda.so.1) function of entry `e`, resolved once; NULL when
 * the driver lacks it or cannot be loaded. */
void *vt__hk_drv_real(enum vt__hk_drv e);

/* The real function of entry e, as a function pointer of var's type. */
#define HK_DRV_REAL(var, e)                                                    \
    do {                                                                       \
        void *p_ = vt__hk_drv_real(e);                                         \
        memcpy(&(var), &p_, sizeof p_);                                        \
    } while (0)

/* r = the real function of entry e called through `var` (the caller's, of
 * its type) under the guard, so whatever it calls back passes; no driver:
 * the hook returns CUDA_ERROR_NOT_INITIALIZED, as the driver does before
 * cuInit. */
#define HK_DRV_CALL(r, var, e, ...)                                            \
    do {                                                                       \
        HK_DRV_REAL(var, e);                                                   \
        if (!(var))                                                            \
            return CUDA_ERROR_NOT_INITIALIZED;                                 \
        HK_ENTER();                                                            \
        (r) = (var)(__VA_ARGS__);                                              \
        HK_LEAVE();                                                            \
    } while (0)

/* `p` was returned by the real driver or dlsym for `symbol` (a base name for
 * cuGetProcAddress, an ABI name for dlsym; NULL: unknown): our hook when p
 * is one of the hooked real functions, else p unchanged. */
void *vt__hk_substitute(const char *symbol, void *p, uint64_t gpa_flags, bool from_gpa);

/* Is `name` (an ABI name, as dlsym sees it) one the driver layer hooks? */
bool vt__hk_is_hooked_name(const char *name);

/* ---- driver_hooks.c ----------------------------------------------------- */

/* The hook standing in for entry `e`. */
void *vt__hk_drv_hook(enum vt__hk_drv e);

/* The device of stream-ordered work on `handle` (`stream`: its hk_stream()
 * value): the current context's for the default streams, the stream's own
 * for a created one; `capturing` (may be NULL): whether the stream captures
 * into a graph (then the current context's device: the driver refuses the
 * stream's during a capture). @return a CUresult; an invalid (destroyed)
 * handle is CUDA_ERROR_INVALID_HANDLE, as in the real call. */
int vt__hk_stream_device(const void *handle, uint64_t stream, int *dev, bool *capturing);

/* *free_bytes, which the real cuMemGetInfo or cudaMemGetInfo gave for `dev`,
 * as the program should see it: plus what the cache holds unused, never
 * above *total_bytes (when given). */
void vt__hk_mem_info_free(int dev, size_t *free_bytes, const size_t *total_bytes);

/* ---- passthrough events (runtime_hooks.c / driver_hooks.c) -------------- */

/* ---- driver_hooks.c: stream capture ------------------------------------ */

/* Is `stream` (an hk_stream() value: 0 legacy, HK_STREAM_PER_THREAD, or a
 * created stream) capturing into a graph? Stream-ordered allocations and
 * frees on it are then the graph's (graph memory nodes), never the cache's. */
bool vt__hk_stream_capturing(uint64_t stream);

/* ---- capture_modes.c: calls a capture prohibits --------------------------- */

/* Would a real driver refuse a potentially unsafe call (cudaMalloc,
 * cudaFree, cuMemAlloc, cuMemFree, stream-ordered ones on a stream that is
 * not capturing) from this thread now, a stream capture being underway?
 * CUDA_SUCCESS when not (one load when no capture is); else the driver's refusal (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, with its
 * effect on the capture), which the hook returns instead of serving. */
extern atomic_int vt__hk_strict_captures;
int vt__hk_capture_refusal_slow(void);
static inline int vt__hk_capture_refusal(void)
{
    if (vt__likely(atomic_load_explicit(&vt__hk_strict_captures, memory_order_relaxed) == 0))
        return 0;   /* nothing can be prohibited: no capture outside relaxed mode */
    return vt__hk_capture_refusal_slow();
}

/* The hook standing in for a capture entry (HK_cuStreamBeginCapture_v2 ...). */
void *vt__hk_capture_hook(enum vt__hk_drv e);

/* ---- program_pools.c: devices whose memory pool the program configures -- */

/* Does `dev`'s stream-ordered allocation go to the driver (the program made
 * another pool current, or configured the default one)? */
bool vt__hk_pool_is_programs(int dev);
/* cuDeviceSetMemPool(dev, pool) succeeded. */
void vt__hk_pool_made_current(int dev, const void *pool);
/* An attribute or the access list of `pool` was set. */
void vt__hk_pool_configured(const void *pool);

/* Record a call vramtrace saw but did not cache (VT_EV_PASSTHROUGH). */
void vt__hk_passthrough(int device, uint64_t stream, uint64_t addr, uint64_t size,
                        unsigned which, bool release);

#endif /* VT_HOOKS_INTERNAL_H */
