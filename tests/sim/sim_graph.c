/* tests/sim/sim_graph.c - stream capture and CUDA graphs, as far as
 * programs that capture copies, memsets, no-op kernels, host functions and
 * stream-ordered allocations need.
 *
 * Sources (CUDA Driver API reference, "Stream Management" and "Graph
 * Management"; CUDA Programming Guide, "CUDA Graphs" and "Graph Memory
 * Nodes"):
 *  - cuStreamBeginCapture puts a stream in capture mode: work enqueued on it
 *    is recorded into a graph instead of running. The legacy stream cannot
 *    be captured (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED).
 *  - An event recorded in a capturing stream joins the capture: a stream
 *    that waits for it is captured into the same graph from then on (fork
 *    and join). cuEventQuery/cuEventSynchronize of an event last recorded
 *    in a capture: CUDA_ERROR_CAPTURED_EVENT.
 *  - cuStreamSynchronize/cuStreamQuery of a capturing stream are not
 *    permitted (CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED) and invalidate the
 *    capture; cuStreamEndCapture then returns
 *    CUDA_ERROR_STREAM_CAPTURE_INVALIDATED and no graph.
 *  - cuStreamEndCapture on the stream that began it ends it for every
 *    stream that joined; on another stream: CUDA_ERROR_STREAM_CAPTURE_UNMATCHED.
 *  - Work on the legacy stream while a blocking stream captures:
 *    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT ("a disallowed implicit dependency
 *    on a current capture sequence from cudaStreamLegacy"), and the capture
 *    is invalidated.
 *  - cuStreamIsCapturing / cuStreamGetCaptureInfo: NONE, ACTIVE or
 *    INVALIDATED, and a process-unique capture id. On the legacy stream
 *    while a blocking stream of the device captures:
 *    CUDA_ERROR_STREAM_CAPTURE_IMPLICIT.
 *  - cuGraphInstantiate / cuGraphLaunch: each launch runs the recorded work
 *    in stream order on the launch stream.
 *  - Graph memory nodes: cuMemAllocAsync on a capturing stream returns an
 *    address at once; it stays valid across launches. Here the memory is
 *    taken at capture and kept as long as the graph: memory the graph
 *    allocates and frees goes back when the graph and its instances are
 *    destroyed (real CUDA may map it only while a launch runs); memory the
 *    graph allocates without freeing it is the program's after the capture
 *    (freed with cuMemFreeAsync/cuMemFree). A free node of memory allocated
 *    outside the graph frees it at the first launch.
 *  - cuGraphLaunch: "If any allocations created by hGraphExec remain unfreed
 *    (from a previous launch) and hGraphExec was not instantiated with
 *    CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, the launch will fail
 *    with CUDA_ERROR_INVALID_VALUE" (cuGraphLaunch). Seen on the H200 (facts
 *    graph_relaunch_unfreed, graph_relaunch_auto_free): the second launch
 *    fails with 1 without the flag, succeeds with it; after cudaFree of the
 *    allocation a launch succeeds and the address is usable again (the
 *    graph allocates it anew at the same address); a cudaFreeAsync of it
 *    after that launch succeeds, a second free is cudaErrorInvalidValue.
 *    Here a freed graph allocation is "parked": its range stays the graph's,
 *    uncommitted and uncharged, and every launch makes it live again.
 *  - cuStreamGetDevice of a capturing stream: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED,
 *    and the capture is invalidated (seen on the H200, fact
 *    capture_after_stream_queries; the driver logged "Returning 900 from
 *    cuStreamGetDevice", then "Capture was invalidated by a prior API call").
 *    cuStreamIsCapturing and cuCtxGetDevice are allowed.
 *  - cuMemFreeAsync on a capturing stream of memory allocated outside any
 *    graph (a pool's or cuMemAlloc's, before the capture):
 *    CUDA_ERROR_INVALID_VALUE ("Virtual address ... does not refer to an
 *    active allocation"); the capture goes on and the memory stays
 *    allocated (H200, facts capture_free_async_of_*).
 *  - Potentially unsafe calls during a capture (cuStreamBeginCapture,
 *    cuThreadExchangeStreamCaptureMode): a thread in GLOBAL interaction mode
 *    may not make them while it has a capture of its own not begun RELAXED,
 *    or while another thread has a GLOBAL capture; THREAD_LOCAL: only its
 *    own non-relaxed capture counts; RELAXED: never prohibited. The
 *    interaction mode is per thread, GLOBAL by default, swapped by
 *    cuThreadExchangeStreamCaptureMode. A prohibited call returns
 *    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture
 *    (H200: cudaMalloc and cudaFree during a GLOBAL capture returned 900,
 *    cudaStreamEndCapture then 901; in RELAXED mode cudaFree freed: facts
 *    capture_forbidden_calls, capture_cuda_free_global/relaxed); another
 *    thread's cudaMalloc/cudaMallocAsync during a GLOBAL capture: 900, and
 *    that capture invalidated ("API call conflicts with a stream capture
 *    sequence initiated from another thread": capture_global_other_thread_allocates).
 *    The calls treated as unsafe: sim_capture_unsafe_call's callers
 *    (cuMemAlloc, cuMemAllocPitch, cuMemAllocManaged,
 *    cuMemAllocHost/cuMemHostAlloc, cuMemFree, cuMemFreeHost,
 *    cuCtxSynchronize, cuEventSynchronize, cuEventQuery, cuStreamSynchronize
 *    and cuStreamQuery of a stream that is not capturing, cuMemAllocAsync
 *    and cuMemFreeAsync on one); the documentation names cudaMalloc as its
 *    example and gives no list: all but cuMemAllocPitch were seen refused on
 *    the H200 (fact capture_unsafe_calls), which allowed cuMemGetInfo,
 *    synchronous copies from pageable memory and memsets. cuCtxSynchronize
 *    is refused during any capture of its device, relaxed ones too (seen),
 *    from any thread (a guess).
 * Simplified: the recorded work is one list in capture order (a valid
 * ordering of the real graph's dependencies).
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

#define SIM_MAGIC_GRAPH 0x47525048u     /* 'GRPH' */
#define SIM_MAGIC_EXEC  0x47455845u     /* 'GEXE' */
#define MAX_ACTIVE 64

struct sim_graph {
    uint32_t    magic;
    sim_device *dev;
    atomic_int  refs;                    /* handle (or capture) + instances */
    uint64_t    id;                      /* capture id */
    sim_stream *origin;                  /* the stream that began the capture */
    CUstreamCaptureMode mode;            /* given to cuStreamBeginCapture */
    pthread_t   thread;                  /* the thread that began it */
    bool        launched;                /* an instance was launched */
    bool        invalidated;
    bool        ended;
    sim_op    **ops;                     /* recorded work, in capture order */
    size_t      nops, cap;
    uintptr_t  *allocs;                  /* allocated during the capture */
    size_t      nallocs, allocs_cap;
    uintptr_t  *owned;                   /* allocated and freed inside the graph */
    size_t      nowned, owned_cap;
};

typedef struct sim_graph_exec {
    uint32_t   magic;
    sim_graph *g;
    bool       launched;
    bool       auto_free;                /* CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH */
} sim_graph_exec;

static atomic_ullong next_capture_id = 1;
static sim_graph *active[SIM_MAX_DEVICES][MAX_ACTIVE];   /* under dev->lock */
static atomic_int strict_captures;       /* active captures not begun RELAXED */
static atomic_int any_captures;          /* active captures */
static __thread CUstreamCaptureMode thread_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

/* Is a graph allocation: allocated during the capture, not freed in it. */
static bool owned_by(const sim_graph *g, uintptr_t p)
{
    for (size_t i = 0; i < g->nowned; i++)
        if (g->owned[i] == p)
            return true;
    return false;
}

sim_graph *sim_graph_active(sim_device *dev, uint64_t id)
{
    for (int i = 0; i < MAX_ACTIVE; i++) {
        sim_graph *g = active[dev->ordinal][i];
        if (g && g->id == id)
            return g;
    }
    return NULL;
}

uint64_t sim_graph_capture_id(const sim_graph *g)
{
    return g->id;
}

static void graph_unref(sim_graph *g)
{
    if (atomic_fetch_sub(&g->refs, 1) != 1)
        return;
    for (size_t i = 0; i < g->nops; i++)
        sim_op_free(g->ops[i]);
    /* Memory it allocated and freed goes with it; what it allocated and
     * did not free stays the program's, or, if the program freed it, goes
     * now. */
    for (size_t i = 0; i < g->nallocs; i++)
        sim_mem_graph_drop(g->dev, g->allocs[i]);
    for (size_t i = 0; i < g->nowned; i++)
        sim_mem_free(g->dev, g->owned[i], SIM_FREE_QUEUED);
    free(g->ops);
    free(g->allocs);
    free(g->owned);
    g->magic = 0;
    free(g);
}

static int push(uintptr_t **v, size_t *n, size_t *cap, uintptr_t x)
{
    if (*n == *cap) {
        size_t c = *cap ? 2 * *cap : 8;
        uintptr_t *w = realloc(*v, c * sizeof *w);
        if (!w)
            return -1;
        *v = w;
        *cap = c;
    }
    (*v)[(*n)++] = x;
    return 0;
}

CUresult sim_graph_capture_op(sim_graph *g, sim_op *op)
{
    /* The recorded op runs later on whatever stream launches it: it keeps
     * no dependency of the capture-time streams. */
    for (int i = 0; i < op->ndeps; i++)
        sim_stream_unref(op->deps[i].stream);
    if (op->deps != op->dep_inline)
        free(op->deps);
    op->deps = op->dep_inline;
    op->ndeps = 0;
    op->cap_deps = 2;
    if (g->invalidated) {
        /* Work on a stream whose capture was invalidated: refused (H200,
         * fact capture_after_stream_queries). */
        sim_op_free(op);
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    if (op->type == SIM_OP_NOP) {
        sim_op_free(op);
        return CUDA_SUCCESS;
    }
    if (g->nops == g->cap) {  /* (also below: at most one op is added) */
        size_t cap = g->cap ? 2 * g->cap : 16;
        sim_op **v = realloc(g->ops, cap * sizeof *v);
        if (!v) {
            sim_op_free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        g->ops = v;
        g->cap = cap;
    }
    if (op->type == SIM_OP_FREE) {
        /* Freeing what this capture allocated: the graph's own memory, kept
         * for every launch and released with the graph. */
        for (size_t i = 0; i < g->nallocs; i++) {
            if (g->allocs[i] == op->u.free.ptr &&
                push(&g->owned, &g->nowned, &g->owned_cap, op->u.free.ptr) == 0) {
                sim_op_free(op);
                return CUDA_SUCCESS;
            }
        }
    }
    g->ops[g->nops++] = op;
    return CUDA_SUCCESS;
}

void sim_graph_invalidate_locked(sim_graph *g)
{
    g->invalidated = true;
}

bool sim_graph_invalidate_if_capturing(sim_stream *s)
{
    pthread_mutex_lock(&s->dev->lock);
    sim_graph *g = s->capture;
    if (g)
        g->invalidated = true;
    pthread_mutex_unlock(&s->dev->lock);
    return g != NULL;
}

/* ---- capture ------------------------------------------------------------- */

static CUresult begin_capture(CUstream h, CUstreamCaptureMode mode, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, mode <= CU_STREAM_CAPTURE_MODE_RELAXED, &s));
    if (s->kind == SIM_STREAM_LEGACY)
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    sim_graph *g = calloc(1, sizeof *g);
    if (!g)
        return CUDA_ERROR_OUT_OF_MEMORY;
    g->magic = SIM_MAGIC_GRAPH;
    g->dev = s->dev;
    atomic_init(&g->refs, 1);
    g->id = atomic_fetch_add(&next_capture_id, 1);
    g->origin = s;
    g->mode = mode;
    g->thread = pthread_self();
    sim_device *dev = s->dev;
    pthread_mutex_lock(&dev->lock);
    int slot = -1;
    for (int i = 0; i < MAX_ACTIVE && slot < 0; i++)
        if (!active[dev->ordinal][i])
            slot = i;
    if (s->capture || slot < 0) {
        pthread_mutex_unlock(&dev->lock);
        free(g);
        return s->capture ? CUDA_ERROR_ILLEGAL_STATE : CUDA_ERROR_OUT_OF_MEMORY;
    }
    active[dev->ordinal][slot] = g;
    s->capture = g;
    if (mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        atomic_fetch_add(&strict_captures, 1);
    atomic_fetch_add(&any_captures, 1);
    pthread_mutex_unlock(&dev->lock);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamBeginCapture_v2(CUstream h, CUstreamCaptureMode m) { return begin_capture(h, m, false); }
SIM_API CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode m) { return begin_capture(h, m, true); }

static CUresult end_capture(CUstream h, CUgraph *out, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, out != NULL, &s));
    sim_device *dev = s->dev;
    pthread_mutex_lock(&dev->lock);
    sim_graph *g = s->capture;
    if (!g) {
        pthread_mutex_unlock(&dev->lock);
        return CUDA_ERROR_ILLEGAL_STATE;
    }
    if (g->origin != s) {
        g->invalidated = true;
        pthread_mutex_unlock(&dev->lock);
        return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
    }
    for (sim_stream *t = dev->streams; t; t = t->next_live)
        if (t->capture == g)
            t->capture = NULL;
    if (dev->legacy->capture == g)
        dev->legacy->capture = NULL;
    for (int i = 0; i < MAX_ACTIVE; i++)
        if (active[dev->ordinal][i] == g)
            active[dev->ordinal][i] = NULL;
    if (g->mode != CU_STREAM_CAPTURE_MODE_RELAXED)
        atomic_fetch_sub(&strict_captures, 1);
    atomic_fetch_sub(&any_captures, 1);
    g->ended = true;
    bool bad = g->invalidated;
    pthread_mutex_unlock(&dev->lock);
    if (bad) {
        graph_unref(g);
        *out = NULL;
        return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
    }
    *out = (CUgraph)(void *)g;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuStreamEndCapture(CUstream h, CUgraph *g) { return end_capture(h, g, false); }
SIM_API CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *g) { return end_capture(h, g, true); }

/* Status of `s`; CUDA_ERROR_STREAM_CAPTURE_IMPLICIT on the legacy stream
 * while a blocking stream of its device captures. */
static CUresult capture_status(sim_stream *s, CUstreamCaptureStatus *st, uint64_t *id)
{
    sim_device *dev = s->dev;
    CUresult rc = CUDA_SUCCESS;
    pthread_mutex_lock(&dev->lock);
    sim_graph *g = s->capture;
    if (!g && s->kind == SIM_STREAM_LEGACY) {
        for (sim_stream *t = dev->streams; t; t = t->next_live)
            if (t->capture && !(t->flags & CU_STREAM_NON_BLOCKING))
                rc = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
    }
    *st = !g ? CU_STREAM_CAPTURE_STATUS_NONE
             : g->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
    if (id)
        *id = g ? g->id : 0;
    pthread_mutex_unlock(&dev->lock);
    return rc;
}

static CUresult is_capturing(CUstream h, CUstreamCaptureStatus *st, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_arg(h, ptsz, st != NULL, &s));
    return capture_status(s, st, NULL);
}

SIM_API CUresult cuStreamIsCapturing(CUstream h, CUstreamCaptureStatus *st) { return is_capturing(h, st, false); }
SIM_API CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st) { return is_capturing(h, st, true); }

static CUresult capture_info(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *graph,
                             const CUgraphNode **deps, const CUgraphEdgeData **edges, size_t *ndeps,
                             bool ptsz)
{
    sim_stream *s;
    CUresult rc = sim_stream_resolve(h, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    if (!st)
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t cid = 0;
    rc = capture_status(s, st, &cid);
    if (id)
        *id = cid;
    if (graph) {
        pthread_mutex_lock(&s->dev->lock);
        *graph = (CUgraph)(void *)s->capture;
        pthread_mutex_unlock(&s->dev->lock);
    }
    /* Nodes are not exposed: the capture's dependencies read as none. */
    if (deps)
        *deps = NULL;
    if (edges)
        *edges = NULL;
    if (ndeps)
        *ndeps = 0;
    return rc;
}

SIM_API CUresult cuStreamGetCaptureInfo_v3(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id, CUgraph *g,
                                           const CUgraphNode **d, const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(h, st, id, g, d, e, n, false);
}

SIM_API CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                                CUgraph *g, const CUgraphNode **d,
                                                const CUgraphEdgeData **e, size_t *n)
{
    return capture_info(h, st, id, g, d, e, n, true);
}

/* ---- graphs and their instances ------------------------------------------ */

static sim_graph *graph_of(CUgraph h)
{
    sim_graph *g = (sim_graph *)(void *)h;
    return g && g->magic == SIM_MAGIC_GRAPH && g->ended ? g : NULL;
}

SIM_API CUresult cuGraphDestroy(CUgraph h)
{
    sim_graph *g = graph_of(h);
    if (!g)
        return CUDA_ERROR_INVALID_VALUE;
    graph_unref(g);
    return CUDA_SUCCESS;
}

/* The graph's nodes are its recorded work (copies, memsets, kernels, host
 * functions, frees) and its memory nodes (one per capture-time allocation,
 * one per free of it); event records only order work, not nodes here.
 * Only the count is given: nodes are not exposed (node handles would need
 * the node-by-node API, which is not simulated). */
SIM_API CUresult cuGraphGetNodes(CUgraph h, CUgraphNode *nodes, size_t *numNodes)
{
    SIM_TRY(sim_check_init());
    sim_graph *g = graph_of(h);
    if (!g || !numNodes)
        return CUDA_ERROR_INVALID_VALUE;
    if (nodes)
        return CUDA_ERROR_NOT_SUPPORTED;
    size_t n = g->nallocs + g->nowned;
    for (size_t i = 0; i < g->nops; i++)
        n += g->ops[i]->type != SIM_OP_EVENT_RECORD;
    *numNodes = n;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphInstantiateWithFlags(CUgraphExec *out, CUgraph h, unsigned long long flags)
{
    SIM_TRY(sim_check_init());
    sim_graph *g = graph_of(h);
    if (!out || !g || (flags & ~(unsigned long long)(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                                       CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY)))
        return CUDA_ERROR_INVALID_VALUE;
    sim_graph_exec *x = calloc(1, sizeof *x);
    if (!x)
        return CUDA_ERROR_OUT_OF_MEMORY;
    x->magic = SIM_MAGIC_EXEC;
    x->g = g;
    x->auto_free = (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH) != 0;
    atomic_fetch_add(&g->refs, 1);
    *out = (CUgraphExec)(void *)x;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphExecDestroy(CUgraphExec h)
{
    sim_graph_exec *x = (sim_graph_exec *)(void *)h;
    if (!x || x->magic != SIM_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    /* Launches still queued use the graph's ops: wait for them. */
    sim_device_sync(x->g->dev);
    x->magic = 0;
    graph_unref(x->g);
    free(x);
    return CUDA_SUCCESS;
}

/* A copy of a recorded op to run once (the recording stays for the next). */
static sim_op *clone_op(const sim_op *o)
{
    sim_op *op = sim_op_new(o->type);
    if (!op)
        return NULL;
    op->u = o->u;
    if (o->type == SIM_OP_MEMCPY && o->u.copy.staged) {
        op->u.copy.staged = malloc(o->u.copy.n);
        if (!op->u.copy.staged) {
            free(op);
            return NULL;
        }
        memcpy(op->u.copy.staged, o->u.copy.staged, o->u.copy.n);
        op->u.copy.src = op->u.copy.staged;
    }
    if (o->type == SIM_OP_EVENT_RECORD)
        atomic_fetch_add(&o->u.rec.ev->refs, 1);
    return op;
}

static CUresult launch(CUgraphExec h, CUstream hs, bool ptsz)
{
    sim_graph_exec *x = (sim_graph_exec *)(void *)h;
    if (!x || x->magic != SIM_MAGIC_EXEC)
        return CUDA_ERROR_INVALID_VALUE;
    sim_stream *s;
    CUresult rc = sim_stream_resolve(hs, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_graph *g = x->g;
    /* Its allocations: still live from the previous launch, the launch
     * fails unless instantiated to free them first; then each is allocated
     * anew at its address. */
    if (g->launched && !x->auto_free) {
        for (size_t i = 0; i < g->nallocs; i++)
            if (!owned_by(g, g->allocs[i]) && sim_mem_graph_is_live(g->dev, g->allocs[i]))
                return CUDA_ERROR_INVALID_VALUE;
    }
    for (size_t i = 0; i < g->nallocs; i++)
        if (!owned_by(g, g->allocs[i]))
            SIM_TRY(sim_mem_graph_revive(g->dev, g->allocs[i]));
    g->launched = true;
    for (size_t i = 0; i < g->nops; i++) {
        const sim_op *o = g->ops[i];
        if (o->type == SIM_OP_EVENT_RECORD)
            continue;                     /* the capture's own fork/join */
        if (o->type == SIM_OP_FREE && x->launched)
            continue;                     /* freed at the first launch already */
        sim_op *op = clone_op(o);
        if (!op)
            return CUDA_ERROR_OUT_OF_MEMORY;
        if ((rc = sim_stream_enqueue(s, op, NULL)) != CUDA_SUCCESS)
            return rc;
    }
    x->launched = true;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuGraphLaunch(CUgraphExec h, CUstream s) { return launch(h, s, false); }
SIM_API CUresult cuGraphLaunch_ptsz(CUgraphExec h, CUstream s) { return launch(h, s, true); }

/* cuMemAllocAsync on a capturing stream (driver_memory.c): the address is
 * the graph's from now on. False when `s` is not capturing. */
bool sim_graph_note_alloc(sim_stream *s, uintptr_t p)
{
    pthread_mutex_lock(&s->dev->lock);
    sim_graph *g = s->capture;
    if (g)
        push(&g->allocs, &g->nallocs, &g->allocs_cap, p);
    pthread_mutex_unlock(&s->dev->lock);
    if (g)
        sim_mem_graph_mark(s->dev, p);
    return g != NULL;
}

CUresult sim_graph_capture_state(sim_stream *s)
{
    pthread_mutex_lock(&s->dev->lock);
    bool bad = s->capture && s->capture->invalidated;
    pthread_mutex_unlock(&s->dev->lock);
    return bad ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED : CUDA_SUCCESS;
}

bool sim_graph_is_capturing(sim_stream *s)
{
    pthread_mutex_lock(&s->dev->lock);
    bool capturing = s->capture != NULL;
    pthread_mutex_unlock(&s->dev->lock);
    return capturing;
}

/* ---- potentially unsafe calls (see the header) ----------------------------- */

CUresult sim_capture_unsafe_call(void)
{
    if (atomic_load_explicit(&strict_captures, memory_order_relaxed) == 0 ||
        thread_mode == CU_STREAM_CAPTURE_MODE_RELAXED)
        return CUDA_SUCCESS;
    pthread_t self = pthread_self();
    bool prohibited = false;
    for (int d = 0; d < sim_device_count; d++) {
        sim_device *dev = &sim_devices[d];
        pthread_mutex_lock(&dev->lock);
        for (int i = 0; i < MAX_ACTIVE; i++) {
            sim_graph *g = active[d][i];
            if (!g || g->mode == CU_STREAM_CAPTURE_MODE_RELAXED)
                continue;
            bool mine = pthread_equal(g->thread, self);
            if (mine || (thread_mode == CU_STREAM_CAPTURE_MODE_GLOBAL &&
                         g->mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
                g->invalidated = true;
                prohibited = true;
            }
        }
        pthread_mutex_unlock(&dev->lock);
    }
    return prohibited ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

CUresult sim_capture_device_sync(sim_device *dev)
{
    if (atomic_load_explicit(&any_captures, memory_order_relaxed) == 0)
        return CUDA_SUCCESS;
    bool any = false;
    pthread_mutex_lock(&dev->lock);
    for (int i = 0; i < MAX_ACTIVE; i++) {
        sim_graph *g = active[dev->ordinal][i];
        if (g) {
            g->invalidated = true;
            any = true;
        }
    }
    pthread_mutex_unlock(&dev->lock);
    return any ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

SIM_API CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *mode)
{
    SIM_TRY(sim_check_init());
    if (!mode || (*mode != CU_STREAM_CAPTURE_MODE_GLOBAL && *mode != CU_STREAM_CAPTURE_MODE_THREAD_LOCAL &&
                  *mode != CU_STREAM_CAPTURE_MODE_RELAXED))
        return CUDA_ERROR_INVALID_VALUE;
    CUstreamCaptureMode old = thread_mode;
    thread_mode = *mode;
    *mode = old;
    return CUDA_SUCCESS;
}
