/* tests/sim/runtime_stream.c - runtime streams, events and host functions.
 *
 * cudaStream_t and cudaEvent_t are the driver's CUstream and CUevent, as in
 * the real runtime, so handles pass between the two APIs. cudaStreamLegacy
 * (0x1) and cudaStreamPerThread (0x2) are understood by the driver; 0 means
 * the legacy stream, or the per-thread one in the _ptsz entry points.
 */
#include "runtime_internal.h"

#define STREAM(s) ((CUstream)(s))
#define EVENT(e)  ((CUevent)(e))

static cudaError_t stream_create(cudaStream_t *s, unsigned flags, int priority)
{
    if (!s)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuStreamCreateWithPriority((CUstream *)s, flags, priority));
}

RT_API cudaError_t cudaStreamCreate(cudaStream_t *s)                          { return stream_create(s, 0, 0); }
RT_API cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f) { return stream_create(s, f, 0); }
RT_API cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p)
{
    return stream_create(s, f, p);
}

RT_API cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuStreamDestroy(STREAM(s)));
}

static cudaError_t stream_sync(cudaStream_t s, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuStreamSynchronize, ptsz)(STREAM(s)));
}

static cudaError_t stream_query(cudaStream_t s, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuStreamQuery, ptsz)(STREAM(s)));
}

static cudaError_t stream_wait(cudaStream_t s, cudaEvent_t ev, unsigned flags, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuStreamWaitEvent, ptsz)(STREAM(s), EVENT(ev), flags));
}

RT_API cudaError_t cudaStreamSynchronize(cudaStream_t s)      { return stream_sync(s, false); }
RT_API cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) { return stream_sync(s, true); }
RT_API cudaError_t cudaStreamQuery(cudaStream_t s)            { return stream_query(s, false); }
RT_API cudaError_t cudaStreamQuery_ptsz(cudaStream_t s)       { return stream_query(s, true); }
RT_API cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)      { return stream_wait(s, e, f, false); }
RT_API cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int f) { return stream_wait(s, e, f, true); }

static cudaError_t stream_priority(cudaStream_t s, int *p, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuStreamGetPriority, ptsz)(STREAM(s), p));
}

static cudaError_t stream_flags(cudaStream_t s, unsigned *f, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuStreamGetFlags, ptsz)(STREAM(s), f));
}

RT_API cudaError_t cudaStreamGetPriority(cudaStream_t s, int *p)            { return stream_priority(s, p, false); }
RT_API cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int *p)       { return stream_priority(s, p, true); }
RT_API cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned int *f)      { return stream_flags(s, f, false); }
RT_API cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int *f) { return stream_flags(s, f, true); }

static cudaError_t host_func(cudaStream_t s, cudaHostFn_t fn, void *arg, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuLaunchHostFunc, ptsz)(STREAM(s), (CUhostFn)fn, arg));
}

RT_API cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void *arg)      { return host_func(s, fn, arg, false); }
RT_API cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void *arg) { return host_func(s, fn, arg, true); }

/* ---- events ------------------------------------------------------------- */

RT_API cudaError_t cudaEventCreateWithFlags(cudaEvent_t *ev, unsigned int flags)
{
    if (!ev)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuEventCreate((CUevent *)ev, flags));
}

RT_API cudaError_t cudaEventCreate(cudaEvent_t *ev)
{
    return cudaEventCreateWithFlags(ev, cudaEventDefault);
}

RT_API cudaError_t cudaEventDestroy(cudaEvent_t ev)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuEventDestroy(EVENT(ev)));
}

static cudaError_t event_record(cudaEvent_t ev, cudaStream_t s, unsigned flags, bool ptsz)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(RT_DRV(cuEventRecordWithFlags, ptsz)(EVENT(ev), STREAM(s), flags));
}

RT_API cudaError_t cudaEventRecord(cudaEvent_t ev, cudaStream_t s)      { return event_record(ev, s, 0, false); }
RT_API cudaError_t cudaEventRecord_ptsz(cudaEvent_t ev, cudaStream_t s) { return event_record(ev, s, 0, true); }
RT_API cudaError_t cudaEventRecordWithFlags(cudaEvent_t ev, cudaStream_t s, unsigned int f)
{
    return event_record(ev, s, f, false);
}
RT_API cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t ev, cudaStream_t s, unsigned int f)
{
    return event_record(ev, s, f, true);
}

RT_API cudaError_t cudaEventQuery(cudaEvent_t ev)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuEventQuery(EVENT(ev)));
}

RT_API cudaError_t cudaEventSynchronize(cudaEvent_t ev)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuEventSynchronize(EVENT(ev)));
}

RT_API cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuEventElapsedTime(ms, EVENT(start), EVENT(end)));
}
