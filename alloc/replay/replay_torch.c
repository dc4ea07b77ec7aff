/*
 * alloc/replay/replay_torch.c - a recording replayed under PyTorch's caching
 * allocator's rules: the model (torch_model.h; read from PyTorch's
 * c10/cuda/CUDACachingAllocator.cpp, not copied) as the walker's engine.
 * Not modelled: CUDA graph private pools, free-memory callbacks, IPC, and
 * the roundup_power2_divisions table form.
 *
 * Which events are PyTorch's: in a recording that observed PyTorch's
 * allocator (VT_META_POOL_OBSERVED) the ALLOCs flagged VT_ALLOC_POOL_BLOCK
 * are its requests, and a SEGMENT_ALLOC is its when the next allocation on
 * that device is one of its blocks; the other device allocations (a
 * library's own cudaMalloc, served by vramtrace's cache) hold device memory
 * outside the pool, as recorded. In an imported PyTorch snapshot every event
 * is PyTorch's; an emptied cache is not an event there, so a run of segment
 * frees that no allocation explains is taken as one. Otherwise (a vramtrace
 * recording replayed under PyTorch's rules) every ALLOC is a request.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "torch_model.h"

/* ---- the recording ------------------------------------------------------- */

/* classify()'s marks; POOL is bit 0, as vt__recorded_scope.ours reads it */
enum { POOL = 1, OUTSIDE = 2, EMPTIED = 4 };

/* A PyTorch snapshot brought in by `vramtrace import`. */
static bool imported(const vt__snapshot_data *s)
{
    return !strcmp(vt__snapshot_string(s, s->meta.library_version), "pytorch");
}

bool vt__replay_is_torch(const vt__snapshot_data *s)
{
    return (s->meta.flags & VT_META_POOL_OBSERVED) || imported(s);
}

/* Is ALLOC e a request to PyTorch's allocator? */
static bool pool_request(const vt__snapshot_data *s, const vt__event *e)
{
    return !(s->meta.flags & VT_META_POOL_OBSERVED) || (e->aux & VT_ALLOC_POOL_BLOCK);
}

/* Per event: whose ALLOC or segment event it is, and where the cache was
 * emptied. */
static int classify(const vt__snapshot_data *s, bool gc_recorded, uint8_t *cls)
{
    bool observed = s->meta.flags & VT_META_POOL_OBSERVED;
    bool infer_empty = imported(s);
    /* backwards: the next allocation (or OOM) on each device */
    int8_t next_kind[VT_REPLAY_MAX_DEVICES];   /* 0 none, 1 pool, 2 outside, 3 segment alloc */
    memset(next_kind, 0, sizeof next_kind);
    for (size_t i = s->nevents; i-- > 0;) {
        const vt__event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        int d = e->device;
        switch (e->kind) {
        case VT_EV_ALLOC:
            next_kind[d] = pool_request(s, e) ? 1 : 2;
            cls[i] = next_kind[d] == 1 ? POOL : 0;
            break;
        case VT_EV_OOM:
            next_kind[d] = 1;
            break;
        case VT_EV_SEGMENT_ALLOC:
            /* PyTorch's when its allocation follows (or when nothing
             * follows and the recording is PyTorch's alone) */
            cls[i] = !observed || next_kind[d] != 2 ? POOL : OUTSIDE;
            break;
        default:
            break;
        }
    }
    vt__u64map outside;
    if (vt__u64map_init(&outside, 64))
        return -ENOMEM;
    bool in_batch[VT_REPLAY_MAX_DEVICES] = { false };
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        int d = e->device;
        if (e->kind == VT_EV_SEGMENT_ALLOC) {
            if (cls[i] == OUTSIDE && vt__u64map_put(&outside, e->addr, 1)) {
                vt__u64map_free(&outside);
                return -ENOMEM;
            }
            in_batch[d] = false;
        } else if (e->kind == VT_EV_SEGMENT_FREE) {
            if (observed && vt__u64map_get(&outside, e->addr) != VT__U64MAP_NONE) {
                vt__u64map_del(&outside, e->addr);
                cls[i] = OUTSIDE;
                continue;
            }
            cls[i] = POOL;
            if (!infer_empty || in_batch[d])
                continue;
            /* a run of segment frees: a malloc releasing cached blocks (the
             * GC, or the retry after a failed cudaMalloc) goes on to a
             * segment or an OOM; anything else emptied the cache */
            bool by_malloc = false;
            for (size_t k = i + 1; k < s->nevents; k++) {
                const vt__event *n = &s->events[k];
                if (n->device != d)
                    continue;
                if (n->kind == VT_EV_SEGMENT_FREE)
                    continue;
                if (n->kind == VT_EV_SEGMENT_ALLOC || n->kind == VT_EV_OOM)
                    by_malloc = gc_recorded || n->kind == VT_EV_OOM;
                if (n->kind == VT_EV_ALLOC || n->kind == VT_EV_FREE_REQUESTED ||
                    n->kind == VT_EV_SEGMENT_ALLOC || n->kind == VT_EV_OOM)
                    break;
            }
            in_batch[d] = true;
            if (!by_malloc)
                cls[i] |= EMPTIED;
        } else if (e->kind == VT_EV_ALLOC || e->kind == VT_EV_FREE_REQUESTED ||
                   e->kind == VT_EV_OOM) {
            in_batch[d] = false;
        }
    }
    vt__u64map_free(&outside);
    return 0;
}

/* ---- the engine ---------------------------------------------------------- */

typedef struct engine {
    tstate *t;
    const vt__snapshot_data *s;
    const uint8_t *cls;                /* classify() */
    vt__rmap pend;                     /* recorded FREE_COMPLETED (event index) -> the
                                          block pending on other streams until then */
} engine;

static void now(void *self, size_t i, const vt__event *e)
{
    engine *g = self;
    g->t->now = i;
    g->t->now_ns = e->time_ns;
}

static int do_malloc(void *self, const vt__event *e, uint64_t size, uint64_t *block,
                     uint64_t *stream)
{
    engine *g = self;
    if (e->kind == VT_EV_ALLOC && !pool_request(g->s, e))
        return VT__REPLAY_PASS;   /* outside the pool: its segment (if any) counts as recorded */
    tblock *b = tm_malloc(g->t, e->device, size, e->stream);
    if (!b)
        return g->t->failed ? -ENOMEM : VT__REPLAY_OUT_OF_MEMORY;
    *block = (uint64_t)(uintptr_t)b;
    *stream = e->stream;
    return VT__REPLAY_SERVED;
}

static int do_free(void *self, int d, uint64_t block, uint64_t stream, size_t free_event,
                   uint64_t completed)
{
    engine *g = self;
    tblock *b = (tblock *)(uintptr_t)block;
    bool pending = free_event != VT__REPLAY_AT_ONCE;
    (void)stream;
    tm_free(g->t, d, b, pending);
    uint64_t done = pending ? completed : UINT64_MAX;
    if (done != UINT64_MAX && !g->t->c.uncached) {
        vt__rmap_entry *y = vt__rmap_put(&g->pend, done);
        if (!y)
            return -ENOMEM;
        y->value = block;
        y->stream = b->serial;
    }
    return g->t->failed ? -ENOMEM : 0;
}

/* Every pending free completed: the cache was released. */
static int release_cached(engine *g, int d)
{
    tm_release_cached_blocks(g->t, d);
    vt__rmap_destroy(&g->pend);
    return vt__rmap_init(&g->pend, 256);
}

static int other(void *self, size_t i, const vt__event *e)
{
    engine *g = self;
    int d = e->device, calls = 0;
    tdev *v = &g->t->dev[d];
    switch (e->kind) {
    case VT_EV_FREE_COMPLETED: {
        vt__rmap_entry *y = vt__rmap_get(&g->pend, i);
        if (!y)
            break;
        tblock *b = (tblock *)(uintptr_t)y->value;
        uint64_t serial = y->stream;
        vt__rmap_del(&g->pend, y);
        tm_free_completed(g->t, d, b, serial);
        break;
    }
    case VT_EV_EMPTY_CACHE:
        if (release_cached(g, d))
            return -ENOMEM;
        calls = 1;
        break;
    case VT_EV_SEGMENT_ALLOC:
        if (g->cls[i] & OUTSIDE)
            v->outside += e->size;
        break;
    case VT_EV_SEGMENT_FREE:
        if (g->cls[i] & OUTSIDE)
            v->outside = v->outside > e->size ? v->outside - e->size : 0;
        if (g->cls[i] & EMPTIED) {
            if (release_cached(g, d))
                return -ENOMEM;
            calls = 1;
        }
        break;
    default:
        break;
    }
    return g->t->failed ? -ENOMEM : calls;
}

static void oom(void *self, int d, vt__replay_oom *o)
{
    engine *g = self;
    const tdev *v = &g->t->dev[d];
    o->allocated = v->allocated;
    o->requested = v->requested;
    o->live_blocks = v->live;
    o->reserved = v->reserved;
    uint64_t held = v->reserved + v->outside;
    o->device_free = v->capacity != NO_LIMIT && v->capacity > held ? v->capacity - held : 0;
}

/* A block still handed out: every other one is in the model's sets. */
static void forget(void *self, uint64_t block)
{
    (void)self;
    free((void *)(uintptr_t)block);
}

/* ---- the replay ---------------------------------------------------------- */

/* The settings PyTorch ran with, then opt->conf over them. */
static int setup_conf(tstate *t, const vt__snapshot_data *s, const vt__replay_options *opt,
                      char *recorded, size_t len, char *err, size_t errlen)
{
    /* an imported snapshot has them; a recording of the observed allocator
     * has them as the framework's settings (format 1.7:
     * PYTORCH_CUDA_ALLOC_CONF text), and vramtrace's own in its config,
     * which are not PyTorch's (older recordings: the defaults) */
    bool expandable = false;
    recorded[0] = '\0';
    if (!opt->ignore_recorded_conf && imported(s))
        vt__replay_conf_from_meta(vt__snapshot_string(s, s->meta.config), recorded, len,
                                  &expandable);
    else if (!opt->ignore_recorded_conf && (s->meta.flags & VT_META_FRAMEWORK_SETTINGS))
        snprintf(recorded, len, "%s", vt__snapshot_string(s, s->meta.framework_settings));
    t->c = (tconf){ .max_split = NO_LIMIT, .max_nonsplit_round = LARGE_BUFFER };
    char msg[256] = "";
    if (tm_apply_conf(&t->c, recorded, msg, sizeof msg))
        return vt__errf(err, errlen, -EINVAL, "the recorded settings '%s' are not valid: %s",
                        recorded, msg);
    if (expandable)
        t->c.expandable = true;
    if (opt->conf && *opt->conf && tm_apply_conf(&t->c, opt->conf, msg, sizeof msg))
        return vt__errf(err, errlen, -EINVAL, "bad --conf '%s': %s", opt->conf, msg);
    return 0;
}

static void setup_devices(tstate *t)
{
    for (size_t d = 0; d < t->r->ndevices; d++) {
        tdev *v = &t->dev[d];
        uint64_t cap = t->r->devices[d].capacity;
        v->capacity = cap == VT_REPLAY_UNLIMITED ? NO_LIMIT : cap;
        v->allowed = t->c.fraction > 0 && v->capacity != NO_LIMIT
                         ? (uint64_t)(t->c.fraction * (double)v->capacity)
                         : NO_LIMIT;
        v->next_addr = (uint64_t)(d + 1) << 52;
        v->free[0].by_addr = v->free[1].by_addr = false;
        v->unmapped[0].by_addr = v->unmapped[1].by_addr = true;
    }
}

int vt__replay_torch(const vt__snapshot_data *s, vt__event_stream *es,
                     const vt__replay_options *opt, vt__replay_result *r, char *err,
                     size_t errlen)
{
    tstate *t = calloc(1, sizeof *t);
    uint8_t *cls = calloc(s->nevents ? s->nevents : 1, 1);
    vt__completions done = { 0 };
    uint64_t *rsegs = NULL;
    size_t nrsegs = 0;
    engine g = { .t = t, .s = s, .cls = cls };
    char recorded[1024];
    int rc = -ENOMEM;
    if (!t || !cls)
        goto out;
    t->r = r;
    t->trail.want_curve = opt->curve;
    if ((rc = setup_conf(t, s, opt, recorded, sizeof recorded, err, errlen)))
        goto out;
    tm_format_conf(&t->c, r->conf, sizeof r->conf);
    r->expandable_segments = t->c.expandable;
    setup_devices(t);
    vt__recorded_scope pool = { .ours = cls, .frees_name_requests = true };
    if ((rc = classify(s, strstr(recorded, "garbage_collection_threshold") != NULL, cls))
        || (rc = vt__replay_recorded(es, &pool, r, &rsegs, &nrsegs, &done))
        || (rc = vt__rmap_init(&g.pend, 256)))
        goto out;
    const vt__replay_engine en = { .self = &g, .now = now, .malloc = do_malloc,
                                   .free = do_free, .other = other, .oom = oom,
                                   .forget = forget };
    if ((rc = vt__replay_walk(es, opt, &done, r, &en)) || (rc = t->failed ? -ENOMEM : 0))
        goto out;
    for (size_t d = 0; d < r->ndevices; d++) {
        r->devices[d].peak_reserved = t->dev[d].peak_reserved;
        r->devices[d].peak_allocated = t->dev[d].peak_allocated;
    }
    vt__trail_finish(&t->trail, rsegs, nrsegs, r);
out:
    vt__rmap_destroy(&g.pend);   /* a zeroed map too */
    if (t) {
        tm_free_all(t);
        vt__trail_free(&t->trail);
    }
    free(t);
    free(cls);
    vt__completions_free(&done);
    free(rsegs);
    return rc == -ENOMEM ? vt__errf(err, errlen, rc, "out of host memory") : rc;
}
