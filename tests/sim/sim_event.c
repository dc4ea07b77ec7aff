/* tests/sim/sim_event.c - events: a recorded (stream, seq) position.
 *
 * cuEventRecord enqueues a record op and remembers (stream, seq) as the
 * event's current record; queries, synchronisation and stream waits look at
 * the record current at the time of the call, as in CUDA. Re-recording bumps
 * a generation number, so an older record op that completes late does not
 * overwrite the timestamp of the newer one. An event never recorded is
 * complete. An interprocess event's state is the records of every process
 * that has it open (sim_ipc_event.c): its queries, synchronisation and
 * stream waits read that instead.
 */
#include "sim_internal.h"

#include <stdlib.h>

/* Every event call starts here: initialised, then a live handle. */
static CUresult event_get(CUevent h, sim_event **out)
{
    CUresult rc = sim_check_init();
    if (sim_unlikely(rc != CUDA_SUCCESS))
        return rc;
    sim_event *ev = (sim_event *)h;
    if (sim_unlikely(!ev || ev->magic != SIM_MAGIC_EVENT))
        return CUDA_ERROR_INVALID_HANDLE;
    *out = ev;
    return CUDA_SUCCESS;
}

void sim_event_unref(sim_event *ev)
{
    if (atomic_fetch_sub_explicit(&ev->refs, 1, memory_order_acq_rel) != 1)
        return;
    if (ev->rec_stream)
        sim_stream_unref(ev->rec_stream);
    if (ev->ipc)
        sim_ipc_event_fini(ev);
    ev->magic = 0;
    free(ev);
}

void sim_event_record_done(sim_event *ev, uint64_t gen, uint64_t ipc_gen)
{
    if (ipc_gen)
        sim_ipc_event_done(ev, ipc_gen);
    uint64_t now = sim_now_ns();
    pthread_mutex_lock(&ev->dev->lock);
    if (ev->gen == gen) {
        ev->time_ns = now;
        ev->time_valid = true;
    }
    pthread_mutex_unlock(&ev->dev->lock);
}

SIM_API CUresult cuEventCreate(CUevent *phEvent, unsigned int flags)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!phEvent)
        return CUDA_ERROR_INVALID_VALUE;
    if (flags & ~(unsigned)(CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS))
        return CUDA_ERROR_INVALID_VALUE;
    /* Interprocess events must have timing disabled, as in CUDA. */
    if ((flags & CU_EVENT_INTERPROCESS) && !(flags & CU_EVENT_DISABLE_TIMING))
        return CUDA_ERROR_INVALID_VALUE;
    sim_event *ev = calloc(1, sizeof *ev);
    if (!ev)
        return CUDA_ERROR_OUT_OF_MEMORY;
    ev->magic = SIM_MAGIC_EVENT;
    ev->flags = flags;
    ev->dev = c->dev;
    atomic_init(&ev->refs, 1);
    if (flags & CU_EVENT_INTERPROCESS) {
        CUresult rc = sim_ipc_event_init(ev);
        if (rc != CUDA_SUCCESS) {
            free(ev);
            return rc;
        }
    }
    SIM_COUNT(c->dev, events_created);
    *phEvent = (CUevent)ev;
    return CUDA_SUCCESS;
}

/* Destroying an event with a pending record is legal: the record op holds
 * its own reference. */
SIM_API CUresult cuEventDestroy_v2(CUevent h)
{
    sim_event *ev;
    SIM_TRY(event_get(h, &ev));
    ev->magic = 0xdeadu;   /* later use of the handle is an invalid handle */
    sim_event_unref(ev);
    return CUDA_SUCCESS;
}

/* The event, then the stream, of a call that takes both (record, wait). */
static CUresult event_and_stream(CUevent h, CUstream hs, bool ptsz, sim_event **ev, sim_stream **s)
{
    SIM_TRY(event_get(h, ev));
    return sim_stream_resolve(hs, ptsz, s);
}

static CUresult event_record(CUevent h, CUstream hs, unsigned flags, bool ptsz)
{
    if (flags & ~(unsigned)CU_EVENT_RECORD_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    sim_event *ev;
    sim_stream *s;
    SIM_TRY(event_and_stream(h, hs, ptsz, &ev, &s));
    if (s->dev != ev->dev)
        return CUDA_ERROR_INVALID_HANDLE;
    /* In a capture the record is a node of the graph: the event now stands
     * for that point of the capture (sim_graph.c), not for device work. */
    pthread_mutex_lock(&ev->dev->lock);
    if (s->capture) {
        ev->captured_id = sim_graph_capture_id(s->capture);
        pthread_mutex_unlock(&ev->dev->lock);
        SIM_COUNT(ev->dev, event_records);
        return CUDA_SUCCESS;
    }
    ev->captured_id = 0;
    pthread_mutex_unlock(&ev->dev->lock);
    sim_op *op = sim_op_new(SIM_OP_EVENT_RECORD);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&ev->refs, 1);
    op->u.rec.ev = ev;

    /* Generation and position must be taken together with the enqueue, or
     * a concurrent query could see the new generation with the old seq. We
     * enqueue first, then publish; the op only compares generations, and a
     * query between the two still sees the previous record, which is the
     * ordering CUDA gives for calls on different threads. */
    sim_device *dev = ev->dev;
    pthread_mutex_lock(&dev->lock);
    uint64_t gen = ++ev->gen;
    ev->time_valid = false;
    pthread_mutex_unlock(&dev->lock);
    op->u.rec.gen = gen;
    uint64_t ipc_gen = ev->ipc ? sim_ipc_event_record(ev) : 0;
    op->u.rec.ipc_gen = ipc_gen;
    uint64_t seq;
    CUresult rc = sim_stream_enqueue(s, op, &seq);
    if (rc != CUDA_SUCCESS) {
        if (ipc_gen)   /* the number taken stands for no work: nobody waits for it */
            sim_ipc_event_done(ev, ipc_gen);
        return rc;
    }
    pthread_mutex_lock(&dev->lock);
    if (ev->gen == gen) {
        if (ev->rec_stream != s) {
            sim_stream_ref(s);
            if (ev->rec_stream)
                sim_stream_unref(ev->rec_stream);
            ev->rec_stream = s;
        }
        ev->rec_seq = seq;
        ev->recorded = true;
    }
    pthread_mutex_unlock(&dev->lock);
    SIM_COUNT(dev, event_records);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventRecord(CUevent h, CUstream s)      { return event_record(h, s, 0, false); }
SIM_API CUresult cuEventRecord_ptsz(CUevent h, CUstream s) { return event_record(h, s, 0, true); }
SIM_API CUresult cuEventRecordWithFlags(CUevent h, CUstream s, unsigned int f)      { return event_record(h, s, f, false); }
SIM_API CUresult cuEventRecordWithFlags_ptsz(CUevent h, CUstream s, unsigned int f) { return event_record(h, s, f, true); }

/* The current record, with a reference on its stream; false if none. */
static bool event_position(sim_event *ev, sim_stream **s, uint64_t *seq)
{
    pthread_mutex_lock(&ev->dev->lock);
    bool recorded = ev->recorded;
    if (recorded) {
        *s = ev->rec_stream;
        *seq = ev->rec_seq;
        sim_stream_ref(*s);
    }
    pthread_mutex_unlock(&ev->dev->lock);
    return recorded;
}

/* The start of cuEventQuery and cuEventSynchronize: the event (counted as
 * a query or a sync), refused if it stands for a point of a capture, and
 * whether its last record has completed (or it was never recorded). */
static CUresult event_state(CUevent h, bool query, sim_event **ev, bool *done)
{
    SIM_TRY(event_get(h, ev));
    sim_device *dev = (*ev)->dev;
    if (query)
        SIM_COUNT(dev, event_queries);
    else
        SIM_COUNT(dev, event_syncs);
    pthread_mutex_lock(&dev->lock);
    bool captured = (*ev)->captured_id != 0;
    *done = (*ev)->ipc ? sim_ipc_event_reached(*ev, sim_ipc_event_last(*ev))
                       : !(*ev)->recorded || (*ev)->rec_stream->completed >= (*ev)->rec_seq;
    pthread_mutex_unlock(&dev->lock);
    if (captured)
        return CUDA_ERROR_CAPTURED_EVENT;
    return sim_capture_unsafe_call();
}

SIM_API CUresult cuEventQuery(CUevent h)
{
    sim_event *ev;
    bool done;
    SIM_TRY(event_state(h, true, &ev, &done));
    SIM_TRY(sim_device_fault(ev->dev));
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

SIM_API CUresult cuEventSynchronize(CUevent h)
{
    sim_event *ev;
    bool done;
    SIM_TRY(event_state(h, false, &ev, &done));
    if (ev->ipc) {
        sim_ipc_event_wait(ev, sim_ipc_event_last(ev));
        return CUDA_SUCCESS;
    }
    sim_stream *s;
    uint64_t seq;
    if (event_position(ev, &s, &seq)) {
        sim_stream_wait(s, seq);
        sim_stream_unref(s);
    }
    return sim_device_fault(ev->dev);
}

static CUresult elapsed(float *ms, CUevent hs, CUevent he)
{
    sim_event *a, *b;
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!ms)
        return CUDA_ERROR_INVALID_VALUE;
    if ((rc = event_get(hs, &a)) != CUDA_SUCCESS ||
        (rc = event_get(he, &b)) != CUDA_SUCCESS)
        return rc;
    if ((a->flags | b->flags) & CU_EVENT_DISABLE_TIMING)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Events of two devices: take the locks one at a time. */
    uint64_t t[2];
    sim_event *evs[2] = { a, b };
    for (int i = 0; i < 2; i++) {
        sim_event *ev = evs[i];
        pthread_mutex_lock(&ev->dev->lock);
        bool recorded = ev->recorded;
        bool done = recorded && ev->rec_stream->completed >= ev->rec_seq && ev->time_valid;
        t[i] = ev->time_ns;
        pthread_mutex_unlock(&ev->dev->lock);
        if (!recorded)
            return CUDA_ERROR_INVALID_HANDLE;
        if (!done)
            return CUDA_ERROR_NOT_READY;
    }
    *ms = (float)((double)((int64_t)(t[1] - t[0])) / 1e6);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuEventElapsedTime(float *ms, CUevent hs, CUevent he) { return elapsed(ms, hs, he); }
SIM_API CUresult cuEventElapsedTime_v2(float *ms, CUevent hs, CUevent he) { return elapsed(ms, hs, he); }

/* A stream's wait for an interprocess event: for the last record taken by
 * any process, polled by the stream's worker (SIM_OP_IPC_WAIT). In a capture
 * it is refused (an assumption: the graph could not wait for another
 * process's work when launched). */
static CUresult wait_ipc_event(sim_stream *s, sim_event *ev)
{
    uint64_t gen = sim_ipc_event_last(ev);
    pthread_mutex_lock(&s->dev->lock);
    bool capturing = s->capture != NULL;
    pthread_mutex_unlock(&s->dev->lock);
    if (capturing)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    if (sim_ipc_event_reached(ev, gen))
        return CUDA_SUCCESS;            /* nothing left to wait for */
    sim_op *op = sim_op_new(SIM_OP_IPC_WAIT);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    atomic_fetch_add(&ev->refs, 1);
    op->u.ipc_wait.ev = ev;
    op->u.ipc_wait.gen = gen;
    return sim_stream_enqueue(s, op, NULL);
}

static CUresult stream_wait_event(CUstream hs, CUevent h, unsigned flags, bool ptsz)
{
    sim_event *ev;
    sim_stream *s;
    SIM_TRY(event_and_stream(h, hs, ptsz, &ev, &s));
    if (flags & ~(unsigned)CU_EVENT_WAIT_EXTERNAL)
        return CUDA_ERROR_INVALID_VALUE;
    SIM_COUNT(s->dev, stream_waits);
    /* Waiting for a point of a capture joins that capture. */
    pthread_mutex_lock(&ev->dev->lock);
    if (ev->captured_id) {
        sim_graph *g = sim_graph_active(ev->dev, ev->captured_id);
        CUresult jr = CUDA_SUCCESS;
        if (!g)
            jr = CUDA_ERROR_CAPTURED_EVENT;   /* its capture has ended */
        else if (s->capture && s->capture != g)
            jr = CUDA_ERROR_STREAM_CAPTURE_MERGE;
        else if (s->dev != ev->dev || s->kind == SIM_STREAM_LEGACY)
            jr = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        else
            s->capture = g;
        pthread_mutex_unlock(&ev->dev->lock);
        return jr;
    }
    pthread_mutex_unlock(&ev->dev->lock);
    if (ev->ipc)
        return wait_ipc_event(s, ev);
    sim_stream *target;
    uint64_t seq;
    if (!event_position(ev, &target, &seq))
        return CUDA_SUCCESS;            /* never recorded: nothing to wait for */
    sim_op *op = sim_op_new(SIM_OP_NOP);
    if (!op || sim_op_add_dep(op, target, seq) != 0) {
        free(op);
        sim_stream_unref(target);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    sim_stream_unref(target);
    return sim_stream_enqueue(s, op, NULL);
}

SIM_API CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f) { return stream_wait_event(s, e, f, false); }
SIM_API CUresult cuStreamWaitEvent_ptsz(CUstream s, CUevent e, unsigned int f) { return stream_wait_event(s, e, f, true); }
