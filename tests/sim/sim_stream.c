/* tests/sim/sim_stream.c - streams: in-order queues, each run by a worker thread.
 *
 * Every op gets a sequence number in its stream; a stream's `completed` is
 * the seq of its last finished op, so "has X happened" is one comparison
 * and an event is just a (stream, seq) pair. Dependencies are (stream, seq)
 * pairs captured when the op is enqueued; since they always point to ops
 * enqueued earlier, waits can never form a cycle.
 *
 * Legacy default stream semantics are dependencies too: an op on the legacy
 * stream depends on the last op of every blocking stream of the device, and
 * an op on a blocking stream depends on the last op of the legacy stream.
 * Non-blocking streams get neither.
 *
 * Workers sleep on their stream's condition variable when idle; host-side
 * waiters sleep on the device's `progress` condition, broadcast on every
 * completion. Nothing spins.
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <time.h>

uint64_t sim_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- references --------------------------------------------------------- */

void sim_stream_ref(sim_stream *s)
{
    atomic_fetch_add_explicit(&s->refs, 1, memory_order_relaxed);
}

/* Released streams are never freed: they stay in a graveyard as tombstones,
 * so a later use of a destroyed handle is detected every time (invalid
 * handle, counted in stale_stream_uses) instead of reading freed memory or,
 * once the allocation is reused for a new stream, silently naming another
 * stream (the real driver's behaviour there is undefined: a crash, an error,
 * or the wrong stream). Reachable from a global: not a leak to LeakSanitizer. */
static _Atomic(sim_stream *) graveyard;

void sim_stream_unref(sim_stream *s)
{
    if (atomic_fetch_sub_explicit(&s->refs, 1, memory_order_acq_rel) != 1)
        return;
    pthread_cond_destroy(&s->wake);
    /* atomic: a stale handle's user may read it from another thread */
    __atomic_store_n(&s->magic, SIM_MAGIC_DEAD_STREAM, __ATOMIC_RELAXED);
    sim_stream *top = atomic_load_explicit(&graveyard, memory_order_relaxed);
    do
        s->next_dead = top;
    while (!atomic_compare_exchange_weak_explicit(&graveyard, &top, s, memory_order_release,
                                                  memory_order_relaxed));
}

/* ---- ops ---------------------------------------------------------------- */

sim_op *sim_op_new(sim_op_type type)
{
    sim_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->type = type;
    op->deps = op->dep_inline;
    op->cap_deps = 2;
    return op;
}

int sim_op_add_dep(sim_op *op, sim_stream *s, uint64_t seq)
{
    for (int i = 0; i < op->ndeps; i++) {
        if (op->deps[i].stream == s) {
            if (op->deps[i].seq < seq)
                op->deps[i].seq = seq;
            return 0;
        }
    }
    if (op->ndeps == op->cap_deps) {
        int cap = op->cap_deps * 2;
        sim_dep *d = malloc((size_t)cap * sizeof *d);
        if (!d)
            return -1;
        memcpy(d, op->deps, (size_t)op->ndeps * sizeof *d);
        if (op->deps != op->dep_inline)
            free(op->deps);
        op->deps = d;
        op->cap_deps = cap;
    }
    sim_stream_ref(s);
    op->deps[op->ndeps++] = (sim_dep){ s, seq };
    return 0;
}

void sim_op_free(sim_op *op)
{
    for (int i = 0; i < op->ndeps; i++)
        sim_stream_unref(op->deps[i].stream);
    if (op->deps != op->dep_inline)
        free(op->deps);
    if (op->type == SIM_OP_EVENT_RECORD)
        sim_event_unref(op->u.rec.ev);
    if (op->type == SIM_OP_IPC_WAIT)
        sim_event_unref(op->u.ipc_wait.ev);
    if (op->type == SIM_OP_MEMCPY)
        free(op->u.copy.staged);
    free(op);
}

/* Device work that found its memory gone: the context's sticky error, as
 * on a GPU (every later sync and enqueue answers it; sim_device.c's reset
 * clears it). The work itself does nothing. */
static void fault(sim_device *dev)
{
    int none = CUDA_SUCCESS;
    atomic_compare_exchange_strong(&dev->fault, &none, CUDA_ERROR_ILLEGAL_ADDRESS);
    SIM_COUNT(dev, illegal_addresses);
}

CUresult sim_device_fault(const sim_device *dev)
{
    return (CUresult)atomic_load_explicit(&dev->fault, memory_order_relaxed);
}

static void op_execute(sim_device *dev, sim_op *op)
{
    sim_vmm_work w;
    switch (op->type) {
    case SIM_OP_NOP:
    case SIM_OP_KERNEL:
        break;
    case SIM_OP_MEMCPY:
        if ((w = sim_vmm_work_begin(op->u.copy.dst, op->u.copy.src, op->u.copy.n)) == SIM_VMM_WORK_FAULT) {
            fault(dev);
            break;
        }
        memmove(op->u.copy.dst, op->u.copy.src, op->u.copy.n);
        sim_vmm_work_end(w);
        break;
    case SIM_OP_MEMSET:
        if ((w = sim_vmm_work_begin(op->u.set.dst, NULL, op->u.set.n * op->u.set.width))
            == SIM_VMM_WORK_FAULT) {
            fault(dev);
            break;
        }
        if (op->u.set.width == 4) {
            uint32_t *w4 = op->u.set.dst;
            for (size_t i = 0; i < op->u.set.n; i++)
                w4[i] = op->u.set.value;
        } else {
            memset(op->u.set.dst, (int)op->u.set.value, op->u.set.n);
        }
        sim_vmm_work_end(w);
        break;
    case SIM_OP_HOSTFN:
        op->u.host.fn(op->u.host.arg);
        break;
    case SIM_OP_EVENT_RECORD:
        sim_event_record_done(op->u.rec.ev, op->u.rec.gen, op->u.rec.ipc_gen);
        break;
    case SIM_OP_IPC_WAIT:
        sim_ipc_event_wait(op->u.ipc_wait.ev, op->u.ipc_wait.gen);
        break;
    case SIM_OP_FREE:
        sim_mem_free(op->u.free.dev, op->u.free.ptr, SIM_FREE_QUEUED);
        break;
    }
}

/* ---- waiting ------------------------------------------------------------ */

/* Block until s->completed >= seq. Takes s->dev->lock: call without any
 * device lock held. */
/* Under s->dev->lock: sleeps until s has completed op `seq`. */
static void wait_locked(sim_stream *s, uint64_t seq)
{
    while (s->completed < seq)
        pthread_cond_wait(&s->dev->progress, &s->dev->lock);
}

void sim_stream_wait(sim_stream *s, uint64_t seq)
{
    pthread_mutex_lock(&s->dev->lock);
    wait_locked(s, seq);
    pthread_mutex_unlock(&s->dev->lock);
}

static void wait_deps(sim_op *op)
{
    for (int i = 0; i < op->ndeps; i++)
        sim_stream_wait(op->deps[i].stream, op->deps[i].seq);
}

/* ---- worker ------------------------------------------------------------- */

static void *worker_main(void *arg)
{
    sim_stream *s = arg;
    sim_device *dev = s->dev;
    pthread_mutex_lock(&dev->lock);
    for (;;) {
        while ((!s->head && !s->destroyed) || s->inline_busy)
            pthread_cond_wait(&s->wake, &dev->lock);
        if (!s->head)
            break;                      /* destroyed and drained */
        sim_op *op = s->head;           /* stays queued until done: keeps
                                           synchronous ops from running inline */
        pthread_mutex_unlock(&dev->lock);

        wait_deps(op);
        op_execute(dev, op);

        pthread_mutex_lock(&dev->lock);
        s->head = op->next;
        if (!s->head)
            s->tail = NULL;
        s->completed = op->seq;
        atomic_fetch_sub_explicit(&dev->inflight, 1, memory_order_release);
        pthread_cond_broadcast(&dev->progress);
        pthread_mutex_unlock(&dev->lock);
        sim_op_free(op);
        pthread_mutex_lock(&dev->lock);
    }
    /* Leave the device list: nothing can depend on us any more except
     * through references, which keep the memory alive. */
    if (s->prev_live)
        s->prev_live->next_live = s->next_live;
    else
        dev->streams = s->next_live;
    if (s->next_live)
        s->next_live->prev_live = s->prev_live;
    s->prev_live = s->next_live = NULL;
    pthread_mutex_unlock(&dev->lock);
    sim_stream_unref(s);
    return NULL;
}

/* ---- creation and destruction ------------------------------------------- */

CUresult sim_stream_create(sim_device *dev, unsigned flags, int priority,
                           sim_stream_kind kind, sim_stream **out)
{
    sim_stream *s = calloc(1, sizeof *s);
    if (!s)
        return CUDA_ERROR_OUT_OF_MEMORY;
    s->magic = SIM_MAGIC_STREAM;
    s->kind = kind;
    s->dev = dev;
    s->flags = flags;
    s->priority = priority;
    atomic_init(&s->refs, 2);           /* the handle and the worker */
    pthread_cond_init(&s->wake, NULL);

    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 256 << 10);
    pthread_mutex_lock(&dev->lock);
    int err = pthread_create(&s->thread, &attr, worker_main, s);
    if (err == 0) {
        s->next_live = dev->streams;
        if (dev->streams)
            dev->streams->prev_live = s;
        dev->streams = s;
    }
    pthread_mutex_unlock(&dev->lock);
    pthread_attr_destroy(&attr);
    if (err != 0) {
        pthread_cond_destroy(&s->wake);
        free(s);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (kind == SIM_STREAM_USER)
        SIM_COUNT(dev, streams_created);
    *out = s;
    return CUDA_SUCCESS;
}

/* Returns at once; the worker finishes the queued work, then exits and
 * drops its reference (real semantics: resources go when the work is done). */
CUresult sim_stream_destroy(sim_stream *s)
{
    sim_device *dev = s->dev;
    pthread_mutex_lock(&dev->lock);
    if (s->destroyed) {
        pthread_mutex_unlock(&dev->lock);
        return CUDA_ERROR_INVALID_HANDLE;
    }
    s->destroyed = true;
    pthread_cond_signal(&s->wake);
    pthread_mutex_unlock(&dev->lock);
    sim_stream_unref(s);                /* the handle's reference */
    return CUDA_SUCCESS;
}

void sim_device_destroy_user_streams(sim_device *dev)
{
    for (;;) {
        sim_stream *victim = NULL;
        pthread_mutex_lock(&dev->lock);
        for (sim_stream *s = dev->streams; s; s = s->next_live) {
            if (s->kind == SIM_STREAM_USER && !s->destroyed) {
                victim = s;
                break;
            }
        }
        pthread_mutex_unlock(&dev->lock);
        if (!victim)
            return;
        sim_stream_destroy(victim);
    }
}

/* ---- per-thread default streams ----------------------------------------- */

static pthread_key_t  ptds_key;
static pthread_once_t ptds_once = PTHREAD_ONCE_INIT;
static __thread sim_stream *ptds[SIM_MAX_DEVICES];

static void ptds_exit(void *unused)
{
    (void)unused;
    for (int i = 0; i < SIM_MAX_DEVICES; i++) {
        if (ptds[i]) {
            sim_stream_destroy(ptds[i]);
            ptds[i] = NULL;
        }
    }
}

static void ptds_key_init(void)
{
    pthread_key_create(&ptds_key, ptds_exit);
}

static CUresult ptds_get(sim_device *dev, sim_stream **out)
{
    sim_stream *s = ptds[dev->ordinal];
    if (sim_likely(s != NULL)) {
        *out = s;
        return CUDA_SUCCESS;
    }
    pthread_once(&ptds_once, ptds_key_init);
    SIM_TRY(sim_stream_create(dev, 0, 0, SIM_STREAM_PER_THREAD, &s));
    ptds[dev->ordinal] = s;
    pthread_setspecific(ptds_key, (void *)1);   /* arm the exit hook */
    *out = s;
    return CUDA_SUCCESS;
}

/* 0 is the legacy stream, or the per-thread stream in a _ptsz/_ptds call;
 * CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are explicit. They all belong
 * to the current context's device. Before cuInit every handle gives
 * CUDA_ERROR_NOT_INITIALIZED, so callers need no check of their own. */
CUresult sim_stream_resolve(CUstream h, bool ptsz, sim_stream **out)
{
    uintptr_t v = (uintptr_t)h;
    if (v > 2) {
        SIM_TRY(sim_check_init());
        sim_stream *s = (sim_stream *)h;
        uint32_t magic = __atomic_load_n(&s->magic, __ATOMIC_RELAXED);
        if (sim_unlikely(magic != SIM_MAGIC_STREAM || s->destroyed)) {
            if (magic == SIM_MAGIC_DEAD_STREAM || magic == SIM_MAGIC_STREAM)
                SIM_COUNT(s->dev, stale_stream_uses);
            return CUDA_ERROR_INVALID_HANDLE;
        }
        *out = s;
        return CUDA_SUCCESS;
    }
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (v == 2 || (v == 0 && ptsz))
        return ptds_get(c->dev, out);
    *out = c->dev->legacy;
    return CUDA_SUCCESS;
}

CUresult sim_stream_arg(CUstream h, bool ptsz, bool args_ok, sim_stream **out)
{
    SIM_TRY(sim_stream_resolve(h, ptsz, out));
    return args_ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* ---- enqueue ------------------------------------------------------------ */

static bool is_blocking(const sim_stream *s)
{
    return s->kind == SIM_STREAM_PER_THREAD ||
           (s->kind == SIM_STREAM_USER && !(s->flags & CU_STREAM_NON_BLOCKING));
}

/* Under dev->lock: the implicit dependencies of the legacy stream. */
static int add_legacy_deps(sim_stream *s, sim_op *op)
{
    sim_device *dev = s->dev;
    if (s->kind == SIM_STREAM_LEGACY) {
        for (sim_stream *o = dev->streams; o; o = o->next_live)
            if (o != s && is_blocking(o) && o->completed < o->submitted)
                if (sim_op_add_dep(op, o, o->submitted) != 0)
                    return -1;
    } else if (is_blocking(s)) {
        sim_stream *l = dev->legacy;
        if (l->completed < l->submitted)
            if (sim_op_add_dep(op, l, l->submitted) != 0)
                return -1;
    }
    return 0;
}

/* Work on the legacy stream while a blocking stream captures would depend
 * on the capture: refused (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), and the
 * capture is invalidated. Called with dev->lock held. */
static bool legacy_blocked(sim_stream *legacy)
{
    bool blocked = false;
    for (sim_stream *t = legacy->dev->streams; t; t = t->next_live) {
        if (t->capture && is_blocking(t)) {
            sim_graph_invalidate_locked(t->capture);
            blocked = true;
        }
    }
    return blocked;
}

/* Under dev->lock, what happens to `op` before it can join s: true if it
 * may be queued (the lock is still held). Otherwise the lock is released,
 * the op is gone (taken into the capture's graph, or freed) and *rc is the
 * call's result. */
static bool admit_locked(sim_stream *s, sim_op *op, CUresult *rc)
{
    sim_device *dev = s->dev;
    if (s->capture) {                   /* recorded into the graph, not run */
        *rc = sim_graph_capture_op(s->capture, op);
        pthread_mutex_unlock(&dev->lock);
        return false;
    }
    *rc = CUDA_SUCCESS;
    if (s->kind == SIM_STREAM_LEGACY && legacy_blocked(s))
        *rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    else if (add_legacy_deps(s, op) != 0)
        *rc = CUDA_ERROR_OUT_OF_MEMORY;
    if (*rc == CUDA_SUCCESS)
        return true;
    pthread_mutex_unlock(&dev->lock);
    sim_op_free(op);
    return false;
}

/* Under dev->lock: puts an admitted op at the tail of s's queue and wakes
 * the worker. Returns its sequence number (the op itself belongs to the
 * worker once the lock is released). */
static uint64_t append_locked(sim_stream *s, sim_op *op)
{
    op->seq = ++s->submitted;
    if (s->tail)
        s->tail->next = op;
    else
        s->head = op;
    s->tail = op;
    atomic_fetch_add_explicit(&s->dev->inflight, 1, memory_order_relaxed);
    pthread_cond_signal(&s->wake);
    return op->seq;
}

/* Under dev->lock: whether `op` may be done now, on the calling thread: its
 * stream has nothing queued or running and it waits for nothing. */
static bool runs_now_locked(const sim_stream *s, const sim_op *op)
{
    return !s->head && !s->inline_busy && op->ndeps == 0;
}

CUresult sim_stream_enqueue(sim_stream *s, sim_op *op, uint64_t *seq_out)
{
    CUresult rc = sim_device_fault(s->dev);
    if (rc != CUDA_SUCCESS) {
        sim_op_free(op);
        if (seq_out)
            *seq_out = 0;
        return rc;
    }
    pthread_mutex_lock(&s->dev->lock);
    if (!admit_locked(s, op, &rc)) {
        if (seq_out)
            *seq_out = 0;               /* captured (or refused): no device work */
        return rc;
    }
    if (op->type == SIM_OP_KERNEL && runs_now_locked(s, op)) {
        /* Device code never runs here, so a kernel takes no time: on a
         * stream with nothing before it, it is done as it is launched, as
         * a fast kernel can be on a GPU, whose launches cost the host no
         * thread of its own. Handed to the idle worker instead, each launch
         * cost the process a wake-up and two thread switches (futex calls,
         * measured: 2.2 a launch): a program launching slower than the
         * worker drains its queue (a loop under vramtrace's track()) paid
         * them on every op, one launching faster did not. */
        uint64_t seq = ++s->submitted;
        s->completed = seq;   /* nobody waits for it: its seq is not out yet */
        pthread_mutex_unlock(&s->dev->lock);
        sim_op_free(op);
        if (seq_out)
            *seq_out = seq;
        return CUDA_SUCCESS;
    }
    uint64_t seq = append_locked(s, op);
    pthread_mutex_unlock(&s->dev->lock);
    if (seq_out)
        *seq_out = seq;
    return CUDA_SUCCESS;
}

/* A synchronize that found nothing to wait for (the kernels a launch
 * completed at once: sim_stream_enqueue), or a synchronous op run on the
 * calling thread (a copy to the host: `.item()`), still lets the threads
 * waiting for a CPU run before it returns, as CUDA's yielding wait
 * (cudaDeviceScheduleYield) does: a GPU's synchronize waits for the
 * device's signal and never returns in no time. Without it, on one CPU, a
 * program's main thread could reach its exit while the autograd engine's
 * thread, woken as the backward ended, had not yet run to release that
 * backward's state: PyTorch's own exit race (the release takes the GIL
 * during finalization, and the thread's unwinding aborts the process:
 * "terminate called without an active exception", pytorch/pytorch#190489),
 * seen in 4 of 12 bench_track processes pinned to one CPU, none after. */
static void returned_at_once(void)
{
    sched_yield();
}

/* A synchronous op (cudaMemcpy to the host, say): when the stream is idle
 * and nothing it must wait for is pending, run it on the calling thread,
 * which saves two thread hand-offs; otherwise queue it and wait. */
CUresult sim_stream_run_sync(sim_stream *s, sim_op *op)
{
    sim_device *dev = s->dev;
    CUresult rc = sim_device_fault(dev);
    if (rc != CUDA_SUCCESS) {
        sim_op_free(op);
        return rc;
    }
    pthread_mutex_lock(&dev->lock);
    if (!admit_locked(s, op, &rc))
        return rc;
    if (runs_now_locked(s, op)) {
        s->inline_busy = true;
        uint64_t seq = ++s->submitted;
        atomic_fetch_add_explicit(&dev->inflight, 1, memory_order_relaxed);
        pthread_mutex_unlock(&dev->lock);

        op_execute(dev, op);

        pthread_mutex_lock(&dev->lock);
        s->completed = seq;
        s->inline_busy = false;
        atomic_fetch_sub_explicit(&dev->inflight, 1, memory_order_release);
        pthread_cond_broadcast(&dev->progress);
        pthread_cond_signal(&s->wake);
        pthread_mutex_unlock(&dev->lock);
        sim_op_free(op);
        returned_at_once();
        return sim_device_fault(dev);
    }
    wait_locked(s, append_locked(s, op));
    pthread_mutex_unlock(&dev->lock);
    return sim_device_fault(dev);
}

/* ---- host-side synchronisation ------------------------------------------ */

CUresult sim_stream_sync(sim_stream *s)
{
    sim_device *dev = s->dev;
    pthread_mutex_lock(&dev->lock);
    bool idle = s->completed >= s->submitted;
    wait_locked(s, s->submitted);
    pthread_mutex_unlock(&dev->lock);
    if (idle)
        returned_at_once();
    return sim_device_fault(dev);
}

CUresult sim_stream_query(sim_stream *s)
{
    sim_device *dev = s->dev;
    pthread_mutex_lock(&dev->lock);
    bool done = s->completed >= s->submitted;
    pthread_mutex_unlock(&dev->lock);
    CUresult fault = sim_device_fault(dev);
    if (fault != CUDA_SUCCESS)
        return fault;
    return done ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

/* Wait for everything enqueued on the device before the call. Work enqueued
 * by other threads meanwhile is not waited for: a snapshot of targets. */
void sim_device_sync(sim_device *dev)
{
    if (atomic_load_explicit(&dev->inflight, memory_order_acquire) == 0) {
        returned_at_once();
        return;
    }
    pthread_mutex_lock(&dev->lock);
    size_t n = 0, cap = 16;
    sim_dep *targets = malloc(cap * sizeof *targets);
    for (sim_stream *s = dev->streams; s && targets; s = s->next_live) {
        if (s->completed >= s->submitted)
            continue;
        if (n == cap) {
            sim_dep *grown = realloc(targets, 2 * cap * sizeof *targets);
            if (!grown)
                break;
            targets = grown;
            cap *= 2;
        }
        sim_stream_ref(s);
        targets[n++] = (sim_dep){ s, s->submitted };
    }
    for (size_t i = 0; i < n; i++)
        wait_locked(targets[i].stream, targets[i].seq);
    pthread_mutex_unlock(&dev->lock);
    for (size_t i = 0; i < n; i++)
        sim_stream_unref(targets[i].stream);
    free(targets);
}
