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

#include "free_match.h"
#include "grow.h"
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
    return (x->request > y->request) - (x->request < y->request);
}

int vt__replay_completions(vt__event_stream *es, vt__completions *c)
{
    memset(c, 0, sizeof *c);
    vt__free_match frees;
    if (vt__free_match_init(&frees))
        return -ENOMEM;
    size_t last[VT_REPLAY_MAX_DEVICES];   /* each device's latest allocator event */
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++)
        last[d] = SIZE_MAX;
    int rc = vt__event_stream_rewind(es);
    vt__event ev;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &ev)) == 1; i++) {
        rc = 0;
        const vt__event *e = &ev;
        uint32_t request;
        if ((rc = vt__free_match_event(&frees, e, (uint32_t)i, &request)))
            break;
        /* A free not marked pending came back at once whatever completes
         * it: its request is let go (a run whose addresses are never
         * reused would hold every one), and a FREE_COMPLETED at its
         * address then completes nothing, which changes no pending one's. */
        if (e->kind == VT_EV_FREE_REQUESTED && e->aux == 0)
            vt__free_match_drop(&frees, e->addr);
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES || !allocator_event(e->kind))
            continue;
        if (e->kind != VT_EV_FREE_REQUESTED && request != VT__FREE_MATCH_NONE) {
            vt__completion *x = vt__grow_push((void **)&c->v, &c->cap, &c->n, sizeof *x);
            if (!x) {
                rc = -ENOMEM;
                break;
            }
            *x = (vt__completion){ request,
                                   last[e->device] == request ? request : (uint32_t)i };
        }
        last[e->device] = i;
    }
    vt__free_match_free(&frees);
    if (rc == 0 && c->n)   /* made in completion order: looked up by request */
        qsort(c->v, c->n, sizeof *c->v, cmp_request);
    return rc < 0 ? rc : 0;
}

bool vt__completed_at_once(const vt__completions *c, size_t i, const vt__event *e,
                           uint64_t *done)
{
    *done = UINT64_MAX;
    if (e->aux == 0)
        return true;   /* not pending */
    size_t lo = 0, hi = c->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (c->v[mid].request < i)
            lo = mid + 1;
        else
            hi = mid;
    }
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

int vt__replay_recorded(vt__event_stream *es, const vt__recorded_scope *scope,
                        vt__replay_result *r, uint64_t **segs, size_t *nsegs)
{
    int64_t reserved[VT_REPLAY_MAX_DEVICES] = { 0 }, allocated[VT_REPLAY_MAX_DEVICES] = { 0 };
    size_t capsegs = 64;
    *segs = malloc(capsegs * sizeof **segs);
    *nsegs = 0;
    vt__rmap live;   /* recorded address -> its ALLOC's size, when frees name requests */
    bool by_alloc = scope->frees_name_requests;
    if (!*segs || (by_alloc && vt__rmap_init(&live, 1024))) {
        free(*segs);
        *segs = NULL;
        return -ENOMEM;
    }
    int rc = vt__event_stream_rewind(es);
    vt__event ev;
    for (size_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &ev)) == 1; i++) {
        rc = 0;
        const vt__event *e = &ev;
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
    return rc < 0 ? rc : 0;
}
