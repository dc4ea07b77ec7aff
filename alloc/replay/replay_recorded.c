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

#include "free_match.h"
#include "replay_internal.h"

static bool allocator_event(uint8_t kind)
{
    return kind == VT_EV_ALLOC || kind == VT_EV_FREE_REQUESTED || kind == VT_EV_FREE_COMPLETED
           || kind == VT_EV_SEGMENT_ALLOC || kind == VT_EV_SEGMENT_FREE || kind == VT_EV_STREAM_USE
           || kind == VT_EV_STREAM_DESTROY || kind == VT_EV_EMPTY_CACHE;
}

static int find_completions(const vt__snapshot_data *s, uint64_t *completion, uint8_t *immediate)
{
    vt__free_match frees;
    if (vt__free_match_init(&frees))
        return -ENOMEM;
    size_t last[VT_REPLAY_MAX_DEVICES];   /* each device's latest allocator event */
    for (int d = 0; d < VT_REPLAY_MAX_DEVICES; d++)
        last[d] = SIZE_MAX;
    int rc = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        uint32_t request;
        if ((rc = vt__free_match_event(&frees, e, (uint32_t)i, &request)))
            break;
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES || !allocator_event(e->kind))
            continue;
        if (e->kind == VT_EV_FREE_REQUESTED) {
            if (completion)
                completion[i] = UINT64_MAX;
            immediate[i] = e->aux == 0;
        } else if (request != VT__FREE_MATCH_NONE) {
            if (completion)
                completion[request] = i;
            if (last[e->device] == request)
                immediate[request] = 1;
        }
        last[e->device] = i;
    }
    vt__free_match_free(&frees);
    return rc;
}

int vt__replay_completions(const vt__snapshot_data *s, uint64_t **completion, uint8_t **immediate)
{
    size_t n = s->nevents ? s->nevents : 1;
    *immediate = calloc(n, 1);
    if (completion)
        *completion = malloc(n * sizeof **completion);
    if (!*immediate || (completion && !*completion)
        || find_completions(s, completion ? *completion : NULL, *immediate)) {
        free(*immediate);
        *immediate = NULL;
        if (completion) {
            free(*completion);
            *completion = NULL;
        }
        return -ENOMEM;
    }
    return 0;
}

int vt__replay_recorded(const vt__snapshot_data *s, const vt__recorded_scope *scope,
                        vt__replay_result *r, uint64_t **segs, size_t *nsegs)
{
    int64_t reserved[VT_REPLAY_MAX_DEVICES] = { 0 }, allocated[VT_REPLAY_MAX_DEVICES] = { 0 };
    size_t n = 0;
    for (size_t i = 0; i < s->nevents; i++)
        n += s->events[i].kind == VT_EV_SEGMENT_ALLOC;
    *segs = malloc((n ? n : 1) * sizeof **segs);
    *nsegs = 0;
    vt__rmap live;   /* recorded address -> its ALLOC's size, when frees name requests */
    bool by_alloc = scope->frees_name_requests;
    if (!*segs || (by_alloc && vt__rmap_init(&live, 1024))) {
        free(*segs);
        *segs = NULL;
        return -ENOMEM;
    }
    int rc = 0;
    for (size_t i = 0; i < s->nevents && rc == 0; i++) {
        const vt__event *e = &s->events[i];
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
            if (!is_free)
                (*segs)[(*nsegs)++] = vt__seg_code(e->device, e->size);
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
    return rc;
}
