/*
 * alloc/replay/replay_recorded.c - what the recording itself says, read
 * before a replay and compared with it: when each free completed, and the
 * recorded peaks and segment allocations.
 *
 * A free completed at once when no allocator event of its device came
 * between its FREE_REQUESTED and its FREE_COMPLETED (or it was not marked
 * pending); any other is replayed as pending until its recorded completion,
 * so that a block comes back exactly when it did, whatever the settings.
 * Which request a completion completes is the timeline's rule
 * (trace/snap/free_match.h).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "free_match.h"
#include "grow.h"
#include "order.h"
#include "replay_internal.h"

static bool allocator_event(uint8_t kind)
{
    return kind == VT_EV_ALLOC || kind == VT_EV_FREE_REQUESTED || kind == VT_EV_FREE_COMPLETED
           || kind == VT_EV_SEGMENT_ALLOC || kind == VT_EV_SEGMENT_FREE || kind == VT_EV_STREAM_USE
           || kind == VT_EV_STREAM_DESTROY || kind == VT_EV_EMPTY_CACHE;
}

static int cmp_request(const void *a, const void *b)
{
    const vt__completion *x = a, *y = b;
    return vt__order(x->request, y->request);
}

/* The completions read one event at a time (alone, or in the reading of
 * the recording's figures: one pass over the events for both). */
typedef struct completion_reader {
    vt__completions *c;
    vt__free_match frees;
    size_t last[VT_REPLAY_MAX_DEVICES];   /* each device's latest allocator event */
} completion_reader;

static int reader_init(completion_reader *cr, vt__completions *c)
{
    memset(c, 0, sizeof *c);
    memset(cr, 0, sizeof *cr);
    cr->c = c;
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++)
        cr->last[d] = SIZE_MAX;
    return vt__free_match_init(&cr->frees) ? -ENOMEM : 0;
}

static int reader_event(completion_reader *cr, size_t i, const vt__event *e)
{
    uint32_t request;
    if (vt__free_match_event(&cr->frees, e, (uint32_t)i, &request))
        return -ENOMEM;
    /* A free not marked pending came back at once whatever completes it:
     * its request is let go (a run whose addresses are never reused would
     * hold every one), and a FREE_COMPLETED at its address then completes
     * nothing, which changes no pending one's. */
    if (e->kind == VT_EV_FREE_REQUESTED && e->aux == 0)
        vt__free_match_drop(&cr->frees, e->addr);
    if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES || !allocator_event(e->kind))
        return 0;
    if (e->kind != VT_EV_FREE_REQUESTED && request != VT__FREE_MATCH_NONE) {
        vt__completions *c = cr->c;
        vt__completion *x = vt__grow_push((void **)&c->v, &c->cap, &c->n, sizeof *x);
        if (!x)
            return -ENOMEM;
        *x = (vt__completion){ request, cr->last[e->device] == request ? request : (uint32_t)i };
    }
    cr->last[e->device] = i;
    return 0;
}

static void reader_finish(completion_reader *cr, int rc)
{
    vt__free_match_free(&cr->frees);
    vt__completions *c = cr->c;
    if (rc == 0 && c->n)   /* made in completion order: looked up by request */
        qsort(c->v, c->n, sizeof *c->v, cmp_request);
}

int vt__replay_completions(vt__event_stream *es, vt__completions *c)
{
    completion_reader cr;
    int rc = reader_init(&cr, c);
    if (!rc)
        rc = vt__event_stream_rewind(es);
    vt__event ev;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &ev)) == 1; i++)
        rc = reader_event(&cr, i, &ev);
    reader_finish(&cr, rc < 0 ? rc : 0);
    return rc < 0 ? rc : 0;
}

bool vt__completed_at_once(const vt__completions *c, size_t i, const vt__event *e,
                           uint64_t *done)
{
    *done = UINT64_MAX;
    if (e->aux == 0)
        return true;   /* not pending */
    size_t lo;   /* the first pending free requested at or after event i */
    VT__PARTITION_POINT(c->n, k, c->v[k].request < i, lo);
    if (lo == c->n || c->v[lo].request != i)
        return false;   /* the window ends first */
    if (c->v[lo].completed == c->v[lo].request)
        return true;
    *done = c->v[lo].completed;
    return false;
}

void vt__completions_free(vt__completions *c)
{
    free(c->v);
    memset(c, 0, sizeof *c);
}

/* Seeds due before event i: held when the window opened, the recorded
 * running sums start from them. */
static int seeds_due(const vt__seeds *sd, size_t *next, size_t i, int64_t *allocated,
                     vt__rmap *live, vt__replay_result *r)
{
    for (; *next < sd->n && sd->v[*next].due <= i; (*next)++) {
        const vt__seed *x = &sd->v[*next];
        vt__replay_device *d = &r->devices[x->device];
        allocated[x->device] += (int64_t)x->size;
        if (allocated[x->device] > (int64_t)d->recorded_peak_allocated)
            d->recorded_peak_allocated = (uint64_t)allocated[x->device];
        if (!live)
            continue;
        vt__rmap_entry *y = vt__rmap_put(live, x->addr);
        if (!y)
            return -ENOMEM;
        y->value = x->size;
        y->device = x->device;
    }
    return 0;
}

int vt__replay_recorded(vt__event_stream *es, const vt__recorded_scope *scope,
                        vt__replay_result *r, uint64_t **segs, size_t *nsegs,
                        vt__completions *c)
{
    int64_t reserved[VT_REPLAY_MAX_DEVICES] = { 0 }, allocated[VT_REPLAY_MAX_DEVICES] = { 0 };
    size_t capsegs = 64;
    *segs = malloc(capsegs * sizeof **segs);
    *nsegs = 0;
    vt__rmap live;   /* recorded address -> its ALLOC's size, when frees name requests */
    bool by_alloc = scope->frees_name_requests;
    completion_reader cr;
    if (!*segs || reader_init(&cr, c) || (by_alloc && vt__rmap_init(&live, 1024))) {
        if (*segs)
            reader_finish(&cr, -ENOMEM);
        free(*segs);
        *segs = NULL;
        return -ENOMEM;
    }
    static const vt__seeds none = { 0 };
    const vt__seeds *sd = scope->seeds ? scope->seeds : &none;
    size_t next = 0;
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++) {
        reserved[d] = (int64_t)sd->reserved[d];
        if (reserved[d] > (int64_t)r->devices[d].recorded_peak_reserved)
            r->devices[d].recorded_peak_reserved = (uint64_t)reserved[d];
    }
    int rc = vt__event_stream_rewind(es);
    vt__event ev;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &ev)) == 1; i++) {
        const vt__event *e = &ev;
        if ((rc = reader_event(&cr, i, e)) != 0
            || (rc = seeds_due(sd, &next, i, allocated, by_alloc ? &live : NULL, r)) != 0)
            break;
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        bool ours = !scope->ours || (scope->ours[i] & 1);
        vt__replay_device *d = &r->devices[e->device];
        switch (e->kind) {
        case VT_EV_SEGMENT_ALLOC:
        case VT_EV_SEGMENT_FREE: {
            if (!ours)
                break;
            bool is_free = e->kind == VT_EV_SEGMENT_FREE;
            reserved[e->device] += is_free ? -(int64_t)e->size : (int64_t)e->size;
            if (reserved[e->device] > (int64_t)d->recorded_peak_reserved)
                d->recorded_peak_reserved = (uint64_t)reserved[e->device];
            d->recorded_segment_allocs += !is_free;
            d->recorded_segment_frees += is_free;
            if (!is_free) {
                if (vt__grow((void **)segs, &capsegs, *nsegs + 1, sizeof **segs)) {
                    rc = -ENOMEM;
                    break;
                }
                (*segs)[(*nsegs)++] = vt__seg_code(e->device, e->size);
            }
            break;
        }
        case VT_EV_ALLOC:
            if (!ours)
                break;
            allocated[e->device] += (int64_t)e->size;
            if (allocated[e->device] > (int64_t)d->recorded_peak_allocated)
                d->recorded_peak_allocated = (uint64_t)allocated[e->device];
            if (by_alloc) {
                vt__rmap_entry *x = vt__rmap_put(&live, e->addr);
                if (!x) {
                    rc = -ENOMEM;
                    break;
                }
                x->value = e->size;
                x->device = e->device;
            }
            break;
        case VT_EV_FREE_REQUESTED: {
            if (!by_alloc) {
                allocated[e->device] -= (int64_t)e->size;
                break;
            }
            vt__rmap_entry *x = vt__rmap_get(&live, e->addr);
            if (x && x->device == e->device) {
                allocated[e->device] -= (int64_t)x->value;
                vt__rmap_del(&live, x);
            }
            break;
        }
        case VT_EV_OOM:
            r->recorded_ooms++;
            break;
        default:
            break;
        }
    }
    if (by_alloc)
        vt__rmap_destroy(&live);
    reader_finish(&cr, rc < 0 ? rc : 0);
    return rc < 0 ? rc : 0;
}
