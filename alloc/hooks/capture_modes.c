/*
 * alloc/hooks/capture_modes.c - when a real driver would refuse the
 * program's cudaMalloc or cudaFree because a stream capture is underway, so
 * that the cache refuses it too.
 *
 * During a capture CUDA prohibits "potentially unsafe API calls" such as
 * cudaMalloc and cudaFree (cuThreadExchangeStreamCaptureMode, cuda.h): a
 * thread in the default global interaction mode may not make them while it
 * has an ongoing capture not begun in relaxed mode, or while any other
 * thread has one begun in global mode; in thread-local mode only its own
 * counts; in relaxed mode nothing does. A refused call returns
 * CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture
 * (NVIDIA H200, driver 580.159.04: tests/gpucheck/driver_facts.real,
 * capture_forbidden_calls, capture_cuda_free_global, capture_unsafe_calls).
 * Stream-ordered allocations and frees on a stream that is not capturing
 * are such calls too (capture_global_other_thread_allocates). Served from the
 * cache, the same call would succeed and the program's capture would go on:
 * vramtrace would change what the program raises.
 *
 * So the begin and end of every capture pass through here (hooks of
 * cuStreamBeginCapture_v2, cuStreamBeginCaptureToGraph, cuStreamEndCapture
 * and their per-thread-stream twins; the runtime reaches them through
 * cuGetProcAddress), and the allocation hooks ask vt__hk_capture_refusal
 * before serving cudaMalloc, cuMemAlloc, cudaFree, cuMemFree, and the
 * stream-ordered ones on a stream that is not capturing. With no capture
 * underway that is one inline load (hooks_internal.h). When the rule says
 * the call is prohibited, the driver itself is asked with a real 1-byte
 * cuMemAlloc: a refusal is then the driver's own, with its own effect on
 * the capture,
 * and an acceptance (the books missed something) is undone and the cache
 * serves the call as usual. The cache's own device calls run in relaxed
 * mode (alloc/backend_cuda.c), so they are never refused.
 *
 * Not tracked: the 10.0 ABI cuStreamBeginCapture (no mode argument;
 * programs built since CUDA 10.1 call _v2) and captures begun before the
 * preload's hooks were installed.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include <cuda.h>

#include "cuda_driver.h"
#include "hooks_internal.h"

#define MAX_CAPTURES 256

struct capture {
    CUstream stream;
    CUstreamCaptureMode mode;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct capture ongoing[MAX_CAPTURES];
static unsigned nongoing;
/* Ongoing captures not begun in relaxed mode, every thread (the hooks' one
 * load when none is: hooks_internal.h); one past the table is never taken
 * off, so that the slow path stays on. */
atomic_int vt__hk_strict_captures;
static atomic_int global_captures;   /* ongoing, begun in global mode, every thread */
static atomic_bool overflowed;       /* more than MAX_CAPTURES at once: always ask */
static __thread int my_strict __attribute__((tls_model("initial-exec")));   /* this thread's ongoing non-relaxed captures */
static __thread int my_global __attribute__((tls_model("initial-exec")));   /* of which begun in global mode */

static void began(CUstream s, CUstreamCaptureMode mode)
{
    pthread_mutex_lock(&lock);
    if (nongoing < MAX_CAPTURES)
        ongoing[nongoing++] = (struct capture){ s, mode };
    else
        atomic_store(&overflowed, true);
    pthread_mutex_unlock(&lock);
    /* A capture not begun in relaxed mode ends on the thread that began it
     * (cuStreamBeginCapture), so the per-thread counts stay this thread's. */
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
        my_strict++;
        atomic_fetch_add(&vt__hk_strict_captures, 1);
    }
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
        my_global++;
        atomic_fetch_add(&global_captures, 1);
    }
}

static void ended(CUstream s)
{
    bool found = false;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    pthread_mutex_lock(&lock);
    for (unsigned i = 0; i < nongoing; i++) {
        if (ongoing[i].stream == s) {
            mode = ongoing[i].mode;
            ongoing[i] = ongoing[--nongoing];
            found = true;
            break;
        }
    }
    pthread_mutex_unlock(&lock);
    if (!found)
        return;
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED) {
        if (my_strict > 0)
            my_strict--;
        atomic_fetch_sub(&vt__hk_strict_captures, 1);
    }
    if (mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
        if (my_global > 0)
            my_global--;
        atomic_fetch_sub(&global_captures, 1);
    }
}

/* Has the capture on s ended? (cuStreamEndCapture ends it also when it
 * reports the capture invalidated, and not when called from the wrong
 * thread: asked rather than guessed from the return code.) */
static bool capture_over(CUstream s)
{
    const vt__driver_api *d = vt__driver();
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return !d || !d->cuStreamIsCapturing || d->cuStreamIsCapturing(s, &st) != CUDA_SUCCESS
           || st == CU_STREAM_CAPTURE_STATUS_NONE;
}

int vt__hk_capture_refusal_slow(void)
{
    const vt__driver_api *d = vt__driver();
    if (!d || !d->cuThreadExchangeStreamCaptureMode || !d->cuMemAlloc_v2 || !d->cuMemFree_v2)
        return CUDA_SUCCESS;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    if (d->cuThreadExchangeStreamCaptureMode(&mode) != CUDA_SUCCESS)
        return CUDA_SUCCESS;
    CUstreamCaptureMode again = mode;
    d->cuThreadExchangeStreamCaptureMode(&again);   /* put back: only read */
    bool others = atomic_load(&global_captures) - my_global > 0 || atomic_load(&overflowed);
    bool prohibited = mode == CU_STREAM_CAPTURE_MODE_GLOBAL ? my_strict > 0 || others
                      : mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL ? my_strict > 0
                      : false;
    if (!prohibited)
        return CUDA_SUCCESS;
    CUdeviceptr p = 0;
    HK_ENTER();
    CUresult r = d->cuMemAlloc_v2(&p, 1);
    if (r == CUDA_SUCCESS)
        d->cuMemFree_v2(p);
    HK_LEAVE();
    return r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
           ? (int)r : CUDA_SUCCESS;
}

/* ---- the hooks ------------------------------------------------------------ */

static CUresult begin_capture(enum vt__hk_drv e, CUstream s, CUstreamCaptureMode mode)
{
    CUresult (*real)(CUstream, CUstreamCaptureMode);
    CUresult r;
    HK_DRV_CALL(r, real, e, s, mode);
    if (r == CUDA_SUCCESS)
        began(s, mode);
    return r;
}

HK_EXPORT CUresult cuStreamBeginCapture_v2(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(HK_cuStreamBeginCapture_v2, hStream, mode);
}

HK_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode);
HK_EXPORT CUresult cuStreamBeginCapture_v2_ptsz(CUstream hStream, CUstreamCaptureMode mode)
{
    return begin_capture(HK_cuStreamBeginCapture_v2_ptsz, hStream, mode);
}

static CUresult begin_capture_to_graph(enum vt__hk_drv e, CUstream s, CUgraph g,
                                       const CUgraphNode *deps, const CUgraphEdgeData *data,
                                       size_t ndeps, CUstreamCaptureMode mode)
{
    CUresult (*real)(CUstream, CUgraph, const CUgraphNode *, const CUgraphEdgeData *, size_t,
                     CUstreamCaptureMode);
    CUresult r;
    HK_DRV_CALL(r, real, e, s, g, deps, data, ndeps, mode);
    if (r == CUDA_SUCCESS)
        began(s, mode);
    return r;
}

HK_EXPORT CUresult cuStreamBeginCaptureToGraph(CUstream hStream, CUgraph hGraph,
                                               const CUgraphNode *dependencies,
                                               const CUgraphEdgeData *dependencyData,
                                               size_t numDependencies, CUstreamCaptureMode mode)
{
    return begin_capture_to_graph(HK_cuStreamBeginCaptureToGraph, hStream, hGraph, dependencies,
                                  dependencyData, numDependencies, mode);
}

HK_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                    const CUgraphNode *dependencies,
                                                    const CUgraphEdgeData *dependencyData,
                                                    size_t numDependencies,
                                                    CUstreamCaptureMode mode);
HK_EXPORT CUresult cuStreamBeginCaptureToGraph_ptsz(CUstream hStream, CUgraph hGraph,
                                                    const CUgraphNode *dependencies,
                                                    const CUgraphEdgeData *dependencyData,
                                                    size_t numDependencies,
                                                    CUstreamCaptureMode mode)
{
    return begin_capture_to_graph(HK_cuStreamBeginCaptureToGraph_ptsz, hStream, hGraph,
                                  dependencies, dependencyData, numDependencies, mode);
}

static CUresult end_capture(enum vt__hk_drv e, CUstream s, CUgraph *g)
{
    CUresult (*real)(CUstream, CUgraph *);
    CUresult r;
    HK_DRV_CALL(r, real, e, s, g);
    if (capture_over(s))
        ended(s);
    return r;
}

HK_EXPORT CUresult cuStreamEndCapture(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(HK_cuStreamEndCapture, hStream, phGraph);
}

HK_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph);
HK_EXPORT CUresult cuStreamEndCapture_ptsz(CUstream hStream, CUgraph *phGraph)
{
    return end_capture(HK_cuStreamEndCapture_ptsz, hStream, phGraph);
}

/* The hooks' own addresses (hidden aliases, as in driver_hooks.c). */
#define CAPTURE_HOOK_NAMES(X)                                                  \
    X(cuStreamBeginCapture_v2) X(cuStreamBeginCapture_v2_ptsz)                 \
    X(cuStreamBeginCaptureToGraph) X(cuStreamBeginCaptureToGraph_ptsz)         \
    X(cuStreamEndCapture) X(cuStreamEndCapture_ptsz)

#define ALIAS(name) \
    extern __typeof(name) hkc_##name __attribute__((alias(#name), visibility("hidden")));
CAPTURE_HOOK_NAMES(ALIAS)
#undef ALIAS

void *vt__hk_capture_hook(enum vt__hk_drv e)
{
    void (*f)(void) = NULL;
    switch ((int)e) {
#define CASE(name) case HK_##name: f = (void (*)(void))hkc_##name; break;
    CAPTURE_HOOK_NAMES(CASE)
#undef CASE
    default: break;
    }
    void *p;
    memcpy(&p, &f, sizeof p);
    return p;
}
