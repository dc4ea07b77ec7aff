/*
 * alloc/replay/torch_classify.c - which of a recording's events are
 * PyTorch's, one class byte per event, for replay_torch.c.
 *
 * In a recording that observed PyTorch's allocator (VT_META_POOL_OBSERVED)
 * the ALLOCs flagged VT_ALLOC_POOL_BLOCK are its requests, and a
 * SEGMENT_ALLOC is its when the next allocation on that device is one of
 * its blocks; the other device allocations (a library's own cudaMalloc,
 * served by vramtrace's cache) hold device memory outside the pool, as
 * recorded, and so do the SEGMENT_FREEs of their segments. In an imported
 * PyTorch snapshot every event is PyTorch's; an emptied cache is not an
 * event there, so a run of segment frees that no allocation explains is
 * taken as one. Otherwise (a vramtrace recording replayed under PyTorch's
 * rules) every ALLOC is a request.
 *
 * Each class depends on later events (the device's next allocation, what
 * ends a run of segment frees). tm_classify_stream gets them from forward
 * readings of a stream, whole snapshots' included (vt__event_stream_of): a
 * SEGMENT_ALLOC waits in its device's list, a run of segment frees in its
 * device's slot, until the event that decides arrives. It is what lets a
 * PyTorch-rules replay hold a byte per event, not the events. The same
 * rules read back and forth over a whole snapshot are the tests' oracle
 * (tests/replay/torch_classify_whole.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "torch_model.h"

bool tm_imported(const vt__snapshot_data *s)
{
    return !strcmp(vt__snapshot_string(s, s->meta.library_version), "pytorch");
}

bool vt__replay_is_torch(const vt__snapshot_data *s)
{
    return (s->meta.flags & VT_META_POOL_OBSERVED) || tm_imported(s);
}

bool tm_pool_request(const vt__snapshot_data *s, const vt__event *e)
{
    return !(s->meta.flags & VT_META_POOL_OBSERVED) || (e->aux & VT_ALLOC_POOL_BLOCK);
}

/* ---- a stream ------------------------------------------------------------ */

typedef struct waiting {               /* a device's SEGMENT_ALLOCs before its next allocation */
    size_t *v;
    size_t n, cap;
} waiting;

typedef struct classifier {
    const vt__snapshot_data *s;
    uint8_t *cls;
    bool observed, infer_empty, gc_recorded;
    waiting seg[VT_REPLAY_MAX_DEVICES];
    size_t run[VT_REPLAY_MAX_DEVICES]; /* a run's first SEGMENT_FREE, waiting for the
                                          event that says why; SIZE_MAX: no run */
    vt__u64map outside;                /* segments allocated outside the pool */
} classifier;

/* Device d's next allocation is of `kind` (1 pool, 2 outside): the
 * SEGMENT_ALLOCs before it are its. */
static void allocation(classifier *c, int d, int kind)
{
    waiting *w = &c->seg[d];
    for (size_t k = 0; k < w->n; k++)
        c->cls[w->v[k]] = kind != 2 ? TM_POOL : TM_OUTSIDE;
    w->n = 0;
}

/* ALLOCs, OOMs and SEGMENT_ALLOCs. */
static int allocs_event(classifier *c, size_t i, const vt__event *e)
{
    int d = e->device;
    switch (e->kind) {
    case VT_EV_ALLOC: {
        int kind = tm_pool_request(c->s, e) ? 1 : 2;
        c->cls[i] = kind == 1 ? TM_POOL : 0;
        allocation(c, d, kind);
        break;
    }
    case VT_EV_OOM:   /* a library's, next to an observed PyTorch: outside its pool */
        allocation(c, d, vt__snapshot_oom_outside_framework(c->s, e) ? 2 : 1);
        break;
    case VT_EV_SEGMENT_ALLOC: {
        if (e->aux2) {   /* a private pool's (a CUDA graph's): format 1.14 */
            c->cls[i] = TM_OUTSIDE | TM_PRIVATE;
            break;
        }
        if (!c->observed) {
            c->cls[i] = TM_POOL;
            break;
        }
        waiting *w = &c->seg[d];
        if (vt__grow((void **)&w->v, &w->cap, w->n + 1, sizeof *w->v))
            return -ENOMEM;
        w->v[w->n++] = i;
        break;
    }
    default:
        break;
    }
    return 0;
}

/* An event of device d that ends a run of segment frees (an ALLOC,
 * FREE_REQUESTED, SEGMENT_ALLOC or OOM): what the run was. */
static void run_ends(classifier *c, int d, uint8_t kind)
{
    if (c->run[d] == SIZE_MAX)
        return;
    bool by_malloc = kind == VT_EV_OOM || (kind == VT_EV_SEGMENT_ALLOC && c->gc_recorded);
    if (!by_malloc)
        c->cls[c->run[d]] |= TM_EMPTIED;
    c->run[d] = SIZE_MAX;
}

/* SEGMENT_FREEs, once every SEGMENT_ALLOC before event i has its class. */
static int frees_event(classifier *c, size_t i, const vt__event *e)
{
    int d = e->device;
    switch (e->kind) {
    case VT_EV_SEGMENT_ALLOC:
        /* the map's value: the class its free takes */
        if ((c->cls[i] & TM_OUTSIDE) && vt__u64map_put(&c->outside, e->addr, c->cls[i]))
            return -ENOMEM;
        run_ends(c, d, e->kind);
        break;
    case VT_EV_SEGMENT_FREE: {
        uint64_t cls = vt__u64map_get(&c->outside, e->addr);
        if (cls != VT__U64MAP_NONE) {
            vt__u64map_del(&c->outside, e->addr);
            c->cls[i] = (uint8_t)cls;
            break;
        }
        c->cls[i] = TM_POOL;
        if (c->infer_empty && c->run[d] == SIZE_MAX)
            c->run[d] = i;   /* a run starts */
        break;
    }
    case VT_EV_ALLOC:
    case VT_EV_FREE_REQUESTED:
    case VT_EV_OOM:
        run_ends(c, d, e->kind);
        break;
    default:
        break;
    }
    return 0;
}

/* One reading of es: the allocations' classes, the frees', or both (a
 * recording not observed: every SEGMENT_ALLOC is PyTorch's at once). */
static int reading(classifier *c, vt__event_stream *es, bool allocs, bool frees)
{
    int rc = vt__event_stream_rewind(es);
    vt__event e;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &e)) == 1; i++) {
        rc = 0;
        if (e.device < 0 || e.device >= VT_REPLAY_MAX_DEVICES)
            continue;
        if (allocs)
            rc = allocs_event(c, i, &e);
        if (rc == 0 && frees)
            rc = frees_event(c, i, &e);
    }
    if (rc < 0)
        return rc;
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++) {
        if (allocs)
            allocation(c, d, 0);   /* nothing follows */
        if (frees && c->run[d] != SIZE_MAX)
            c->cls[c->run[d]] |= TM_EMPTIED;   /* nothing explains the run */
    }
    return 0;
}

int tm_classify_stream(const vt__snapshot_data *s, vt__event_stream *es, bool gc_recorded,
                       uint8_t *cls)
{
    classifier c = { .s = s, .cls = cls, .observed = s->meta.flags & VT_META_POOL_OBSERVED,
                     .infer_empty = tm_imported(s), .gc_recorded = gc_recorded };
    memset(cls, 0, vt__event_stream_count(es));
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++)
        c.run[d] = SIZE_MAX;
    if (vt__u64map_init(&c.outside, 64))
        return -ENOMEM;
    int rc = c.observed ? reading(&c, es, true, false) : 0;
    if (rc == 0)
        rc = reading(&c, es, !c.observed, true);
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++)
        free(c.seg[d].v);
    vt__u64map_free(&c.outside);
    return rc;
}
