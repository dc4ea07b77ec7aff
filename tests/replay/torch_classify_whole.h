/*
 * tests/replay/torch_classify_whole.h - the oracle of the PyTorch-rules
 * classification (alloc/replay/torch_classify.c, tm_classify_stream): the
 * same rules read back and forth over a whole snapshot, as they were written
 * before the replay streamed its events. Per event of s, into cls
 * (s->nevents bytes, zeroed): TM_POOL for PyTorch's ALLOCs and segment
 * events, TM_OUTSIDE for the segment events of memory outside its pool,
 * TM_EMPTIED on the segment free where an imported snapshot's cache was
 * emptied. @return 0 or -ENOMEM.
 */
#ifndef VT_TEST_TORCH_CLASSIFY_WHOLE_H
#define VT_TEST_TORCH_CLASSIFY_WHOLE_H

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "torch_model.h"

static int tm_classify(const vt__snapshot_data *s, bool gc_recorded, uint8_t *cls)
{
    bool observed = s->meta.flags & VT_META_POOL_OBSERVED;
    bool infer_empty = tm_imported(s);
    /* backwards: the next allocation (or OOM) on each device */
    int8_t next_kind[VT_REPLAY_MAX_DEVICES];   /* 0 none, 1 pool, 2 outside */
    memset(next_kind, 0, sizeof next_kind);
    for (size_t i = s->nevents; i-- > 0;) {
        const vt__event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        int d = e->device;
        switch (e->kind) {
        case VT_EV_ALLOC:
            next_kind[d] = tm_pool_request(s, e) ? 1 : 2;
            cls[i] = next_kind[d] == 1 ? TM_POOL : 0;
            break;
        case VT_EV_OOM:
            next_kind[d] = vt__snapshot_oom_outside_framework(s, e) ? 2 : 1;
            break;
        case VT_EV_SEGMENT_ALLOC:
            /* PyTorch's when its allocation follows (or when nothing
             * follows and the recording is PyTorch's alone) */
            cls[i] = !observed || next_kind[d] != 2 ? TM_POOL : TM_OUTSIDE;
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
            if (cls[i] == TM_OUTSIDE && vt__u64map_put(&outside, e->addr, 1)) {
                vt__u64map_free(&outside);
                return -ENOMEM;
            }
            in_batch[d] = false;
        } else if (e->kind == VT_EV_SEGMENT_FREE) {
            if (observed && vt__u64map_get(&outside, e->addr) != VT__U64MAP_NONE) {
                vt__u64map_del(&outside, e->addr);
                cls[i] = TM_OUTSIDE;
                continue;
            }
            cls[i] = TM_POOL;
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
                cls[i] |= TM_EMPTIED;
        } else if (e->kind == VT_EV_ALLOC || e->kind == VT_EV_FREE_REQUESTED ||
                   e->kind == VT_EV_OOM) {
            in_batch[d] = false;
        }
    }
    vt__u64map_free(&outside);
    return 0;
}

#endif /* VT_TEST_TORCH_CLASSIFY_WHOLE_H */
