/*
 * alloc/hooks/runtime_hooks.c - the runtime layer: cudaMalloc and friends.
 *
 * Exported twice: unversioned, and as name@libcudart.so.13 (hooks.map). A
 * binary linked against the toolkit's libcudart.so.13 imports
 * cudaMalloc@libcudart.so.13; glibc binds a versioned reference to an
 * unversioned definition found first, and to an exact version match, so both
 * bind to us when we are preloaded; the explicit version is what
 * dlvsym(..., "libcudart.so.13") and tools that check versions find.
 *
 * The real runtime is found after us (RTLD_NEXT), or, when the program loaded
 * it privately (RTLD_LOCAL dlopen), through its soname. A statically linked
 * runtime has no exported symbols at all: these hooks then never run, and the
 * driver layer (reached through our cuGetProcAddress) does the work.
 *
 * Context and device: a call the cache serves first does what the real
 * runtime does on entry (rt_enter): it works on the thread's current
 * context, or makes its device's primary context current when there is none,
 * so driver code after a cudaMalloc finds the context it finds without us.
 * Every call into the real runtime is made under the guard, so the driver
 * calls it makes come back through the driver hooks as plain pass-throughs
 * (counted once).
 *
 * cudaFree does NOT synchronize the device, unlike CUDA's: the block is
 * fenced against every stream the allocator knows (VT_FREE_UNKNOWN_STREAM)
 * and reused only once that work is done. free_sync:1 restores CUDA's
 * behaviour (cudaDeviceSynchronize, then free).
 * cudaMemGetInfo counts the cache's unused bytes as free (see driver_hooks.c).
 *
 * Last error. The real runtime remembers, per thread, the last error any
 * runtime call returned (cudaGetLastError returns it and resets it,
 * cudaPeekAtLastError only returns it; a later successful call does not
 * clear it). A call the cache fails itself never reaches the real runtime,
 * so the hooks keep that error in a thread-local (our_last_error) and merge
 * it with the real one:
 *   - when the cache fails a call, the real runtime's last error is dropped
 *     (real cudaGetLastError) and ours stored: the real runtime would have
 *     overwritten its older error with this newer one;
 *   - so a real last error that is set later is newer than ours: our
 *     cudaGetLastError/cudaPeekAtLastError return the real one when it is set
 *     (and cudaGetLastError then forgets ours too: one slot, overwritten),
 *     else ours.
 * Sticky errors stay the real runtime's (its cudaGetLastError keeps them).
 * A statically linked runtime never calls these hooks: its cudaMalloc reaches
 * the driver hooks, and it records the CUresult they return as its own last
 * error, which is the same behaviour. A program that takes cudaGetLastError
 * from dlsym on a libcudart handle (not the global scope) gets the real one
 * and does not see the cache's errors (it sees cudaSuccess, as before).
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "allocator.h"
#include "config.h"
#include "cuda_driver.h"
#include "hooks_internal.h"
#include "recorder.h"
#include "vramtrace/format.h"

/* Declared by the toolkit headers only in per-thread-stream builds. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t stream);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count, enum cudaMemcpyKind kind);

/* ---- the real runtime ------------------------------------------------------ */

#define RT_FUNCS(X)                                                            \
    X(cudaGetDevice) X(cudaMalloc) X(cudaFree) X(cudaMallocAsync)              \
    X(cudaMallocAsync_ptsz) X(cudaFreeAsync) X(cudaFreeAsync_ptsz)             \
    X(cudaMemGetInfo) X(cudaDeviceReset) X(cudaDeviceSynchronize)              \
    X(cudaStreamCreate) X(cudaStreamCreateWithFlags)                           \
    X(cudaStreamCreateWithPriority) X(cudaStreamDestroy) X(cudaMallocManaged)  \
    X(cudaMallocHost) X(cudaFreeHost) X(cudaMallocFromPoolAsync)               \
    X(cudaMallocFromPoolAsync_ptsz) X(cudaGetLastError) X(cudaPeekAtLastError) \
    X(cudaHostAlloc) X(cudaStreamSynchronize) X(cudaStreamSynchronize_ptsz)   \
    X(cudaEventSynchronize) X(cudaStreamQuery) X(cudaStreamQuery_ptsz)         \
    X(cudaEventQuery) X(cudaMemcpy) X(cudaMemcpy_ptds)

enum rt_fn {
#define ENUM(name) RT_##name,
    RT_FUNCS(ENUM)
#undef ENUM
    RT_COUNT
};

static const char *const rt_names[RT_COUNT] = {
#define NAME(name) #name,
    RT_FUNCS(NAME)
#undef NAME
};

static void *_Atomic rt_fn_ptr[RT_COUNT];

static void *rt_lookup(const char *name)
{
    void *p = vt__hk_real_dlsym(RTLD_NEXT, name);
    if (p && !vt__hk_is_self(p))
        return p;
    static const char *const sonames[] = { "libcudart.so.13", "libcudart.so.12", "libcudart.so" };
    for (size_t i = 0; i < sizeof sonames / sizeof sonames[0]; i++) {
        void *h = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (!h)
            continue;
        p = vt__hk_real_dlsym(h, name);
        dlclose(h);   /* NOLOAD took a reference; the program holds its own */
        if (p && !vt__hk_is_self(p))
            return p;
    }
    return NULL;
}

static void *rt_real(enum rt_fn e)
{
    void *p = atomic_load_explicit(&rt_fn_ptr[e], memory_order_acquire);
    if (vt__likely(p != NULL))
        return p;
    p = rt_lookup(rt_names[e]);
    if (p)
        atomic_store_explicit(&rt_fn_ptr[e], p, memory_order_release);
    return p;
}

#define REAL(var, e)                                                           \
    do {                                                                       \
        void *p_ = rt_real(RT_##e);                                            \
        memcpy(&(var), &p_, sizeof p_);                                        \
    } while (0)

/* r = the real function `e` (same prototype as our hook `e`) called with
 * the guard up; no runtime found: the hook returns an initialization error. */
#define REAL_CALL(r, e, ...)                                                   \
    do {                                                                       \
        __typeof__(&e) f_;                                                     \
        REAL(f_, e);                                                           \
        if (!f_)                                                               \
            return rt_fail(cudaErrorInitializationError);                      \
        HK_ENTER();                                                            \
        (r) = f_(__VA_ARGS__);                                                 \
        HK_LEAVE();                                                            \
    } while (0)

/* Return what the real `e` returns. */
#define CALL_REAL(e, ...)                                                      \
    do {                                                                       \
        cudaError_t r_;                                                        \
        REAL_CALL(r_, e, __VA_ARGS__);                                         \
        return r_;                                                             \
    } while (0)

/* ---- last error ------------------------------------------------------------ */

/* The error the cache itself produced last on this thread, not yet returned
 * by cudaGetLastError (cudaSuccess: none, or the real runtime's is newer). */
static __thread cudaError_t our_last_error __attribute__((tls_model("initial-exec")));

/* The cache fails a runtime call with `e`: make it the thread's last error,
 * as the real runtime would have (it replaces any older one). cudaErrorNotReady
 * is not an error and is not remembered (the runtime does not record it). */
static cudaError_t rt_fail(cudaError_t e)
{
    if (e == cudaSuccess || e == cudaErrorNotReady)
        return e;
    cudaError_t (*get)(void);
    REAL(get, cudaGetLastError);
    if (get) {
        HK_ENTER();
        get();   /* older than ours: the real runtime would have overwritten it */
        HK_LEAVE();
    }
    our_last_error = e;
    return e;
}

static cudaError_t rt_device(int *dev)
{
    CALL_REAL(cudaGetDevice, dev);
}

/* The runtime's lazy initialization, for the calls the cache serves without
 * the real runtime. CUDA's rule ("Interactions with the CUDA Driver API"):
 * a runtime call operates on the context current to the thread; when none
 * is current it selects its device's primary context, initializes it and
 * makes it current, and that context stays current after the call. Driver
 * code that follows a cudaMalloc (cuCtxGetCurrent, cuMemcpyHtoD,
 * cuLaunchKernel) relies on it, so every served call does the same:
 *   - a context is current (the hot path: one driver call, a thread-local
 *     read in the driver, which replaces the cudaGetDevice it used to cost):
 *     the runtime works on it, and its device is the call's device (what
 *     the real cudaGetDevice answers then);
 *   - none is (a fresh thread, or the program popped or unset its context):
 *     the real cudaFree(NULL), whose only effect is exactly that
 *     initialization; it also fails, and records the last error, exactly
 *     as the real call would have (no device, driver too old, ...).
 * Checked on every call, not once per thread: a program may unset the
 * context between two runtime calls, and the next real call restores it.
 * cudaSetDevice would initialize too, but it also replaces a current
 * non-primary context; cudaFree(NULL) only acts when none is current. */
static cudaError_t rt_enter(int *dev)
{
    const vt__driver_api *d = vt__driver();
    CUdevice cd;
    if (vt__likely(d != NULL && d->cuCtxGetDevice != NULL)
        && vt__likely(d->cuCtxGetDevice(&cd) == CUDA_SUCCESS)) {
        *dev = (int)cd;
        return cudaSuccess;
    }
    cudaError_t r;
    REAL_CALL(r, cudaFree, NULL);
    if (r != cudaSuccess)
        return r;   /* the real runtime has recorded it as the last error */
    return rt_device(dev);
}

static int device_or_zero(void)
{
    int dev = 0;
    return rt_device(&dev) == cudaSuccess ? dev : 0;
}

/* The versioned twin of an exported hook: a jump to it, exported as
 * name@libcudart.so.13 (the unversioned and the versioned definition must be
 * distinct symbols, else the linker keeps only the versioned one). */
#define VT_V13(name)                                                           \
    extern __typeof(name) hkl_##name                                           \
        __attribute__((alias(#name), visibility("hidden")));                   \
    __asm__(".pushsection .text\n"                                             \
            ".globl vt__v13_" #name "\n"                                       \
            ".type vt__v13_" #name ", @function\n"                             \
            "vt__v13_" #name ":\n"                                             \
            "    jmp hkl_" #name "\n"                                          \
            ".size vt__v13_" #name ", .-vt__v13_" #name "\n"                   \
            ".symver vt__v13_" #name ", " #name "@libcudart.so.13\n"           \
            ".popsection\n");

/* ---- allocation ------------------------------------------------------------- */

/* rt_enter, and for stream-ordered work on a created stream, the stream's
 * device. A destroyed stream is an invalid handle: the real call fails with
 * cudaErrorInvalidResourceHandle (the driver's CUDA_ERROR_INVALID_HANDLE, the
 * same number) and does nothing, and so must a call the cache serves. */
/* The device of work on `stream` (vt__hk_stream_device), and whether the
 * stream captures into a graph (`capturing`, may be NULL). */
static cudaError_t rt_stream_enter(const void *handle, uint64_t stream, int *dev,
                                   bool *capturing)
{
    if (capturing)
        *capturing = false;
    cudaError_t r = rt_enter(dev);
    if (r != cudaSuccess || stream == VT_NO_STREAM)
        return r;
    if (stream == 0 || stream == HK_STREAM_PER_THREAD) {
        if (capturing)
            *capturing = vt__hk_stream_capturing(stream);
        return r;
    }
    HK_ENTER();
    int e = vt__hk_stream_device(handle, stream, dev, capturing);
    HK_LEAVE();
    return rt_fail((cudaError_t)e);
}

/* The cache serves an allocation on `dev`, unless another stream's capture
 * refuses it (capture_modes.c). */
static cudaError_t rt_cache_malloc(int dev, size_t size, uint64_t stream, void **devPtr)
{
    int refused = vt__hk_capture_refusal();
    if (vt__unlikely(refused))
        return rt_fail((cudaError_t)refused);
    HK_ENTER();
    int e = vt__alloc_malloc(dev, size, stream, devPtr);
    HK_LEAVE();
    return rt_fail((cudaError_t)e);
}

static cudaError_t rt_alloc(void **devPtr, size_t size, const void *handle, uint64_t stream)
{
    int dev;
    cudaError_t r = rt_stream_enter(handle, stream, &dev, NULL);
    if (r != cudaSuccess)
        return r;
    return rt_cache_malloc(dev, size, stream, devPtr);
}

HK_EXPORT cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    /* An observed framework allocator's segment (vt_pool_observe): the
     * device's, as without us; its observer records it. */
    if (vt__unlikely(vt__hk_guard != 0) || !devPtr || size == 0
        || vt__unlikely(vt__pool_caller(__builtin_return_address(0))))
        CALL_REAL(cudaMalloc, devPtr, size);
    return rt_alloc(devPtr, size, NULL, VT_NO_STREAM);   /* usable on every stream at once */
}
VT_V13(cudaMalloc)

/* cudaMallocAsync on a device whose pool the program configures goes to
 * the real runtime (program_pools.c), recorded as a pool allocation. */
static cudaError_t rt_alloc_async(enum rt_fn e, void **devPtr, size_t size, cudaStream_t s,
                                  bool ptsz)
{
    uint64_t stream = hk_stream(s, ptsz);
    int dev;
    bool graph;   /* a graph memory node (driver_hooks.c) */
    cudaError_t r = rt_stream_enter(s, stream, &dev, &graph);
    if (r != cudaSuccess)
        return r;
    if (vt__likely(!graph && !vt__hk_pool_is_programs(dev)))
        return rt_cache_malloc(dev, size, stream, devPtr);
    cudaError_t (*f)(void **, size_t, cudaStream_t);
    void *p = rt_real(e);
    memcpy(&f, &p, sizeof p);
    if (!f)
        return rt_fail(cudaErrorInitializationError);
    HK_ENTER();
    r = f(devPtr, size, s);
    HK_LEAVE();
    if (r == cudaSuccess)
        vt__hk_passthrough(dev, stream, (uint64_t)(uintptr_t)*devPtr, size,
                           graph ? VT_PASS_GRAPH : VT_PASS_FROM_POOL, false);
    return r;
}

HK_EXPORT cudaError_t cudaMallocAsync(void **devPtr, size_t size, cudaStream_t hStream)
{
    if (vt__unlikely(vt__hk_guard != 0) || !devPtr || size == 0)
        CALL_REAL(cudaMallocAsync, devPtr, size,
                  hStream);
    return rt_alloc_async(RT_cudaMallocAsync, devPtr, size, hStream, false);
}
VT_V13(cudaMallocAsync)

HK_EXPORT cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream)
{
    if (vt__unlikely(vt__hk_guard != 0) || !devPtr || size == 0)
        CALL_REAL(cudaMallocAsync_ptsz, devPtr,
                  size, hStream);
    return rt_alloc_async(RT_cudaMallocAsync_ptsz, devPtr, size, hStream, true);
}
VT_V13(cudaMallocAsync_ptsz)

/* ---- free ------------------------------------------------------------------- */

/* The real free's answer for a pointer the cache does not own: freed, a
 * pass-through; refused as invalid, a bad free of the program's (reported,
 * the error stays the real one). */
static cudaError_t foreign_free_done(const void *p, uint64_t stream, cudaError_t r)
{
    int dev = device_or_zero();
    if (r == cudaErrorInvalidValue) {
        HK_ENTER();
        vt__alloc_foreign_free_failed(dev, p);
        HK_LEAVE();
    } else if (r == cudaSuccess) {
        vt__hk_passthrough(dev, stream, (uint64_t)(uintptr_t)p, 0, VT_PASS_FOREIGN_FREE, true);
    }
    return r;
}

/* Call the real `e` like CALL_REAL, then foreign_free_done. */
#define FREE_FOREIGN(e, stream, ...)                                           \
    do {                                                                       \
        cudaError_t r_;                                                        \
        REAL_CALL(r_, e, __VA_ARGS__);                                         \
        return foreign_free_done(devPtr, (stream), r_);                        \
    } while (0)

HK_EXPORT cudaError_t cudaFree(void *devPtr)
{
    /* NULL: the real cudaFree(NULL) initializes the context, as programs expect. */
    if (vt__unlikely(vt__hk_guard != 0) || !devPtr)
        CALL_REAL(cudaFree, devPtr);
    if (vt__unlikely(vt__pool_caller(__builtin_return_address(0))) && !vt__alloc_owns(devPtr))
        CALL_REAL(cudaFree, devPtr);   /* an observed framework's segment */
    int dev;
    cudaError_t r = rt_enter(&dev);
    if (r != cudaSuccess)
        return r;
    int refused = vt__hk_capture_refusal();   /* capture_modes.c */
    if (vt__unlikely(refused))
        return rt_fail((cudaError_t)refused);
    if (vt__config()->free_sync) {
        cudaError_t (*sync)(void);
        REAL(sync, cudaDeviceSynchronize);
        if (sync) {
            HK_ENTER();
            sync();
            HK_LEAVE();
        }
    }
    HK_ENTER();
    int e = vt__alloc_free(devPtr, 0, VT_FREE_UNKNOWN_STREAM);
    HK_LEAVE();
    if (e == VT_ALLOC_NOT_OWNED)
        FREE_FOREIGN(cudaFree, 0, devPtr);
    return rt_fail((cudaError_t)e);
}
VT_V13(cudaFree)

static cudaError_t rt_free_async(void *devPtr, const void *handle, uint64_t stream)
{
    int dev;
    bool capturing;
    cudaError_t r = rt_stream_enter(handle, stream, &dev, &capturing);
    if (r != cudaSuccess)
        return r;
    if (vt__unlikely(capturing))   /* memory from before the capture: refused (driver_hooks.c) */
        return vt__alloc_owns(devPtr) ? rt_fail(cudaErrorInvalidValue)
                                      : (cudaError_t)VT_ALLOC_NOT_OWNED;
    int refused = vt__hk_capture_refusal();   /* another stream's capture (capture_modes.c) */
    if (vt__unlikely(refused))
        return rt_fail((cudaError_t)refused);
    HK_ENTER();
    int e = vt__alloc_free(devPtr, stream, VT_FREE_ON_STREAM);
    HK_LEAVE();
    return e == VT_ALLOC_NOT_OWNED ? (cudaError_t)e : rt_fail((cudaError_t)e);
}

HK_EXPORT cudaError_t cudaFreeAsync(void *devPtr, cudaStream_t hStream)
{
    if (vt__unlikely(vt__hk_guard != 0) || !devPtr)
        CALL_REAL(cudaFreeAsync, devPtr, hStream);
    cudaError_t e = rt_free_async(devPtr, hStream, hk_stream(hStream, false));
    if ((int)e == VT_ALLOC_NOT_OWNED)
        FREE_FOREIGN(cudaFreeAsync, hk_stream(hStream, false), devPtr, hStream);
    return e;
}
VT_V13(cudaFreeAsync)

HK_EXPORT cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream)
{
    if (vt__unlikely(vt__hk_guard != 0) || !devPtr)
        CALL_REAL(cudaFreeAsync_ptsz, devPtr, hStream);
    cudaError_t e = rt_free_async(devPtr, hStream, hk_stream(hStream, true));
    if ((int)e == VT_ALLOC_NOT_OWNED)
        FREE_FOREIGN(cudaFreeAsync_ptsz, hk_stream(hStream, true), devPtr, hStream);
    return e;
}
VT_V13(cudaFreeAsync_ptsz)

/* ---- device ----------------------------------------------------------------- */

HK_EXPORT cudaError_t cudaMemGetInfo(size_t *free, size_t *total)
{
    cudaError_t r;
    REAL_CALL(r, cudaMemGetInfo, free, total);
    if (vt__hk_guard != 0 || r != cudaSuccess || !free)
        return r;
    int dev;
    if (rt_device(&dev) == cudaSuccess)
        vt__hk_mem_info_free(dev, free, total);
    return r;
}
VT_V13(cudaMemGetInfo)

/* The reset frees every allocation of the device: the cache's free segments
 * and the blocks the program still holds (their pointers are invalid after a
 * real reset too). The books are emptied first, while the streams and
 * events the cache uses still exist (alloc_reset.c); the real reset's own
 * driver call then passes through (guard). */
HK_EXPORT cudaError_t cudaDeviceReset(void)
{
    if (vt__hk_guard == 0) {
        int dev;
        if (rt_device(&dev) == cudaSuccess) {
            HK_ENTER();
            vt__alloc_device_reset(dev);
            HK_LEAVE();
        }
    }
    CALL_REAL(cudaDeviceReset);
}
VT_V13(cudaDeviceReset)

/* ---- waits ------------------------------------------------------------------ */

/* hooks_internal.h's HK_WAIT, for the runtime's entry points. */
#define WAIT_CALL(e, begin, all, ...)                                          \
    do {                                                                       \
        __typeof__(&e) f_;                                                     \
        REAL(f_, e);                                                           \
        HK_WAIT(cudaError_t, f_, rt_fail(cudaErrorInitializationError),        \
                vt__hk_guard != 0, cudaSuccess, begin, all, __VA_ARGS__);      \
    } while (0)

#define SYNC_CALL(e, all, ...) WAIT_CALL(e, true, all, __VA_ARGS__)

HK_EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    SYNC_CALL(cudaDeviceSynchronize, true);
}
VT_V13(cudaDeviceSynchronize)

HK_EXPORT cudaError_t cudaStreamSynchronize(cudaStream_t stream)
{
    SYNC_CALL(cudaStreamSynchronize, false, stream);
}
VT_V13(cudaStreamSynchronize)

HK_EXPORT cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream)
{
    SYNC_CALL(cudaStreamSynchronize_ptsz, false, stream);
}
VT_V13(cudaStreamSynchronize_ptsz)

HK_EXPORT cudaError_t cudaEventSynchronize(cudaEvent_t event)
{
    SYNC_CALL(cudaEventSynchronize, false, event);
}
VT_V13(cudaEventSynchronize)

/* A query that answers cudaSuccess: the stream's (the event's) work is done,
 * and so are the fences recorded on it before. */
HK_EXPORT cudaError_t cudaStreamQuery(cudaStream_t stream)
{
    WAIT_CALL(cudaStreamQuery, false, false, stream);
}
VT_V13(cudaStreamQuery)

HK_EXPORT cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream)
{
    WAIT_CALL(cudaStreamQuery_ptsz, false, false, stream);
}
VT_V13(cudaStreamQuery_ptsz)

HK_EXPORT cudaError_t cudaEventQuery(cudaEvent_t event)
{
    WAIT_CALL(cudaEventQuery, false, false, event);
}
VT_V13(cudaEventQuery)

/* cudaMemcpy waits for the device as a side effect. CUDA runtime API
 * reference, "API synchronization behavior" and "Stream synchronization
 * behavior" (docs.nvidia.com/cuda/cuda-runtime-api/api-sync-behavior.html,
 * .../stream-sync-behavior.html): the copy is queued on the default stream;
 * device-to-host returns once the copy completed, pinned host-to-device and
 * host-to-host are synchronous, pageable host-to-device syncs the stream
 * before the copy; only device-to-device copies return at once. On the
 * legacy default stream (cudaMemcpy) the copy first waits for all work of
 * the blocking streams (created without cudaStreamNonBlocking, and the
 * per-thread ones), so a fence recorded just before it on the legacy stream
 * and those streams is complete when it returns: cudaMemcpy is treated like
 * a stream synchronize. The per-thread default stream (cudaMemcpy_ptds,
 * --default-stream per-thread) synchronizes with the legacy stream only,
 * not with other streams: no fence is recorded in front of it (its event
 * on the legacy stream would make the copy wait for every blocking stream,
 * which the program did not ask for); the fences it happens to have
 * outlived complete after it. */
HK_EXPORT cudaError_t cudaMemcpy(void *dst, const void *src, size_t count,
                                 enum cudaMemcpyKind kind)
{
    WAIT_CALL(cudaMemcpy, kind != cudaMemcpyDeviceToDevice, false, dst, src, count, kind);
}
VT_V13(cudaMemcpy)

HK_EXPORT cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t count,
                                      enum cudaMemcpyKind kind)
{
    WAIT_CALL(cudaMemcpy_ptds, false, false, dst, src, count, kind);
}
VT_V13(cudaMemcpy_ptds)

/* ---- last error ------------------------------------------------------------ */

/* What the real cudaGetLastError or cudaPeekAtLastError (`e`) answers, under
 * the guard; no runtime found: cudaSuccess, so that the cache's own error
 * is the one reported. */
static cudaError_t real_last_error(enum rt_fn e)
{
    cudaError_t (*f)(void);
    void *p = rt_real(e);
    memcpy(&f, &p, sizeof p);
    cudaError_t real = cudaSuccess;
    if (f) {
        HK_ENTER();
        real = f();
        HK_LEAVE();
    }
    return real;
}

HK_EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t real = real_last_error(RT_cudaGetLastError);
    cudaError_t ours = our_last_error;
    our_last_error = cudaSuccess;
    return real != cudaSuccess ? real : ours;
}
VT_V13(cudaGetLastError)

HK_EXPORT cudaError_t cudaPeekAtLastError(void)
{
    cudaError_t real = real_last_error(RT_cudaPeekAtLastError);
    return real != cudaSuccess ? real : our_last_error;
}
VT_V13(cudaPeekAtLastError)

/* ---- streams ---------------------------------------------------------------- */

static void rt_stream_created(cudaError_t r, const cudaStream_t *s, bool pass)
{
    if (pass || r != cudaSuccess || !s)
        return;
    int dev;
    if (rt_device(&dev) == cudaSuccess) {
        HK_ENTER();
        vt__alloc_stream_created(dev, (uint64_t)(uintptr_t)*s);
        HK_LEAVE();
    }
}

HK_EXPORT cudaError_t cudaStreamCreate(cudaStream_t *pStream)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaStreamCreate, pStream);
    rt_stream_created(r, pStream, pass);
    return r;
}
VT_V13(cudaStreamCreate)

HK_EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *pStream, unsigned int flags)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaStreamCreateWithFlags, pStream, flags);
    rt_stream_created(r, pStream, pass);
    return r;
}
VT_V13(cudaStreamCreateWithFlags)

HK_EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *pStream, unsigned int flags,
                                                   int priority)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaStreamCreateWithPriority, pStream, flags, priority);
    rt_stream_created(r, pStream, pass);
    return r;
}
VT_V13(cudaStreamCreateWithPriority)

HK_EXPORT cudaError_t cudaStreamDestroy(cudaStream_t stream)
{
    cudaError_t (*f)(cudaStream_t);
    REAL(f, cudaStreamDestroy);
    if (!f)
        return rt_fail(cudaErrorInitializationError);
    bool pass = vt__hk_guard != 0;
    HK_ENTER();
    if (!pass && stream)
        vt__alloc_stream_destroyed((uint64_t)(uintptr_t)stream);
    cudaError_t r = f(stream);
    HK_LEAVE();
    return r;
}
VT_V13(cudaStreamDestroy)

/* ---- seen, not cached ------------------------------------------------------- */

HK_EXPORT cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaMallocManaged, devPtr, size, flags);
    if (!pass && r == cudaSuccess && devPtr)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*devPtr, size,
                           VT_PASS_MANAGED, false);
    return r;
}
VT_V13(cudaMallocManaged)

HK_EXPORT cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaMallocHost, ptr, size);
    if (!pass && r == cudaSuccess && ptr && *ptr)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*ptr, size, VT_PASS_HOST,
                           false);
    return r;
}
VT_V13(cudaMallocHost)

/* Same event as cudaMallocHost; its driver call (cuMemHostAlloc) comes back
 * through the driver hook under the guard and is not recorded twice. */
HK_EXPORT cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaHostAlloc, pHost, size, flags);
    if (!pass && r == cudaSuccess && pHost && *pHost)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)*pHost, size, VT_PASS_HOST,
                           false);
    return r;
}
VT_V13(cudaHostAlloc)

HK_EXPORT cudaError_t cudaFreeHost(void *ptr)
{
    bool pass = vt__hk_guard != 0;
    cudaError_t r;
    REAL_CALL(r, cudaFreeHost, ptr);
    if (!pass && r == cudaSuccess && ptr)
        vt__hk_passthrough(device_or_zero(), 0, (uint64_t)(uintptr_t)ptr, 0, VT_PASS_HOST, true);
    return r;
}
VT_V13(cudaFreeHost)

static cudaError_t from_pool(enum rt_fn e, void **ptr, size_t size, cudaMemPool_t pool,
                             cudaStream_t s, bool ptsz)
{
    cudaError_t (*f)(void **, size_t, cudaMemPool_t, cudaStream_t);
    void *p = rt_real(e);
    memcpy(&f, &p, sizeof p);
    if (!f)
        return rt_fail(cudaErrorInitializationError);
    bool pass = vt__hk_guard != 0;
    HK_ENTER();
    cudaError_t r = f(ptr, size, pool, s);
    HK_LEAVE();
    if (!pass && r == cudaSuccess && ptr)
        vt__hk_passthrough(device_or_zero(), hk_stream(s, ptsz), (uint64_t)(uintptr_t)*ptr, size,
                           VT_PASS_FROM_POOL, false);
    return r;
}

HK_EXPORT cudaError_t cudaMallocFromPoolAsync(void **ptr, size_t size, cudaMemPool_t memPool,
                                              cudaStream_t stream)
{
    return from_pool(RT_cudaMallocFromPoolAsync, ptr, size, memPool, stream, false);
}
VT_V13(cudaMallocFromPoolAsync)

HK_EXPORT cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                                   cudaStream_t stream)
{
    return from_pool(RT_cudaMallocFromPoolAsync_ptsz, ptr, size, memPool, stream, true);
}
VT_V13(cudaMallocFromPoolAsync_ptsz)
