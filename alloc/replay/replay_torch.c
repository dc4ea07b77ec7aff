/*
 * alloc/replay/replay_torch.c - a recording replayed under PyTorch's caching
 * allocator's rules: the model (torch_model.h; read from PyTorch's
 * c10/cuda/CUDACachingAllocator.cpp, not copied) as the walker's engine.
 * CUDA graph private pools are held as recorded (torch_private.c). Not
 * modelled: free-memory callbacks, IPC, and the roundup_power2_divisions
 * table form. Which events are PyTorch's is
 * torch_classify.c's: a byte per event, the events read as a stream (a
 * whole snapshot's too).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "torch_model.h"

/* ---- the engine ---------------------------------------------------------- */

typedef struct engine {
    tstate *t;
    const vt__snapshot_data *s;
    const uint8_t *cls;                /* tm_classify_stream() */
    vt__rmap pend;                     /* recorded FREE_COMPLETED (event index) -> the
                                          block pending on other streams until then */
    size_t graphs_deleted_at;          /* options.graphs_deleted_at */
} engine;

static void now(void *self, size_t i, const vt__event *e)
{
    engine *g = self;
    g->t->now = i;
    g->t->now_ns = e->time_ns;
    if (g->graphs_deleted_at && i + 1 >= g->graphs_deleted_at)
        g->t->private_freeable = true;
}

static int do_malloc(void *self, const vt__event *e, uint64_t size, uint64_t *block,
                     uint64_t *stream)
{
    engine *g = self;
    if (e->kind == VT_EV_ALLOC && !tm_pool_request(g->s, e))
        return VT__REPLAY_PASS;   /* outside the pool: its segment (if any) counts as recorded */
    if (e->kind == VT_EV_ALLOC && tm_private_alloc(g->t, e->device, e->addr))
        return VT__REPLAY_PASS;   /* a capture's block, in its private pool as recorded */
    if (vt__snapshot_oom_outside_framework(g->s, e)) {
        /* a library's own request that failed next to PyTorch's cache (cuBLAS
         * making a handle): only what the device has free beside PyTorch's
         * segments serves it, as PyTorch gives its cached blocks back for its
         * own requests alone; served, it is not kept (the program never got it) */
        return tm_device_has(&g->t->dev[e->device], size) ? VT__REPLAY_PASS
                                                           : VT__REPLAY_OUT_OF_MEMORY;
    }
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
        if (g->cls[i] & TM_PRIVATE) {
            if (tm_private_segment(g->t, d, e->addr, e->size))
                return -ENOMEM;
        } else if (g->cls[i] & TM_OUTSIDE) {
            v->outside += e->size;
            tm_note_held(v);
        }
        break;
    case VT_EV_SEGMENT_FREE:
        if (g->cls[i] & TM_PRIVATE)
            tm_private_segment_free(g->t, d, e->addr);
        else if (g->cls[i] & TM_OUTSIDE)
            v->outside = v->outside > e->size ? v->outside - e->size : 0;
        if (g->cls[i] & TM_EMPTIED) {
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

/* A capture's block freed (the walker holds no block for it: passed): not
 * alive in its private pool's segment any more. At the free's request, not
 * its completion: a release of the cache synchronizes pending frees first
 * (and a recording of vramtrace's own rules has no completion for a free
 * that needed none). */
static void after(void *self, size_t i, const vt__event *e)
{
    engine *g = self;
    (void)i;
    if (e->kind == VT_EV_FREE_REQUESTED && g->t->dev[e->device].npriv)
        tm_private_free(g->t, e->device, e->addr);
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

/* Device d held `bytes` outside the pool when the window opened: a
 * library's own segments, alive to the end. */
static void outside(void *self, int d, uint64_t bytes)
{
    engine *g = self;
    tdev *v = &g->t->dev[d];
    v->outside += bytes;
    tm_note_held(v);
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
    if (!opt->ignore_recorded_conf && tm_imported(s))
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
                     const vt__replay_options *opt, const vt__seeds *seeds,
                     vt__replay_result *r, char *err, size_t errlen)
{
    tstate *t = calloc(1, sizeof *t);
    size_t nevents = vt__event_stream_count(es);
    uint8_t *cls = calloc(nevents ? nevents : 1, 1);
    vt__completions done = { 0 };
    uint64_t *rsegs = NULL;
    size_t nrsegs = 0;
    engine g = { .t = t, .s = s, .cls = cls, .graphs_deleted_at = opt->graphs_deleted_at };
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
    for (size_t k = 0; seeds && k < seeds->npriv; k++)   /* graphs' pools held before the window */
        if (seeds->priv[k].device < (int)r->ndevices &&
            tm_private_segment(t, seeds->priv[k].device, seeds->priv[k].addr, seeds->priv[k].size)) {
            rc = -ENOMEM;
            goto out;
        }
    vt__recorded_scope pool = { .ours = cls, .frees_name_requests = true, .seeds = seeds };
    bool gc_recorded = strstr(recorded, "garbage_collection_threshold") != NULL;
    if ((rc = tm_classify_stream(s, es, gc_recorded, cls))
        || (rc = vt__replay_recorded(es, &pool, r, &rsegs, &nrsegs, &done))
        || (rc = vt__rmap_init(&g.pend, 256)))
        goto out;
    const vt__replay_engine en = { .self = &g, .now = now, .malloc = do_malloc,
                                   .free = do_free, .other = other, .after = after, .oom = oom,
                                   .forget = forget, .outside = outside, .trail = &t->trail };
    if ((rc = vt__replay_walk(es, opt, &done, seeds, r, &en)) || (rc = t->failed ? -ENOMEM : 0))
        goto out;
    for (size_t d = 0; d < r->ndevices; d++) {
        r->devices[d].peak_reserved = t->dev[d].peak_reserved;
        r->devices[d].peak_held = t->dev[d].peak_held;
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
