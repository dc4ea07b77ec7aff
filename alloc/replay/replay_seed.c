/*
 * alloc/replay/replay_seed.c - what the program held when the recording's
 * window opened, made first, so that a replay of a window that lost its
 * start (the ring overwrote it, or tracing began late, or PyTorch's own
 * history was cut at max_entries) starts with the device as full as it was.
 *
 * Without it a replay starts empty: an OOM after a long run (the weights,
 * the optimizer's state and whatever the first steps kept, all allocated
 * before the ring's window) does not run out in the replay, and no fix can
 * be verified. What was alive then is what the snapshot's timeline calls
 * allocated before the window (VT_LT_BEFORE_WINDOW): the state section's
 * blocks no kept ALLOC explains, and the allocations whose free is kept but
 * not their ALLOC. Their sizes, streams and devices are known; the order
 * they were made in and how they lay in segments are not: the ones alive at
 * the end are made first (by their allocation's seq, which the state keeps),
 * then the ones the window frees, in the order it frees them (the longer
 * lived first, as the weights before the activations). A block of a
 * library's own (outside an observed framework's pool) is not a request to
 * the replayed allocator: its segment, alive at the end, is held outside
 * the pool from the start, as it was; so is a CUDA graph's private pool's
 * segment (the replay's model holds those as recorded: torch_private.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "errbuf.h"
#include "grow.h"
#include "order.h"
#include "replay_internal.h"
#include "timeline.h"

static int by_order(const void *a, const void *b)
{
    const vt__seed *x = a, *y = b;
    int c = vt__order(x->due, y->due);
    c = c ? c : vt__order(x->order, y->order);
    return c ? c : vt__order(x->addr, y->addr);
}

/* l was made before the window (or in a gap of it) and held then. */
static bool held_before(const vt__lifetime *l)
{
    if (!(l->flags & VT_LT_BEFORE_WINDOW) || (l->flags & VT_LT_AFTER_WINDOW))
        return false;
    /* freed where the events do not show it: when, nobody knows */
    return !(l->flags & VT_LT_FREE_UNSEEN);
}

static int add_blocks(const vt__timeline *tl, vt__seeds *out)
{
    size_t cap = 0;
    for (size_t k = 0; k < tl->nlifetimes; k++) {
        const vt__lifetime *l = &tl->lifetimes[k];
        if (!held_before(l) || (l->flags & VT_LT_OUTSIDE_POOL) || l->device < 0
            || l->device >= VT_REPLAY_MAX_DEVICES || !l->size)
            continue;
        if (vt__grow_from((void **)&out->v, &cap, out->n + 1, sizeof *out->v, 64))
            return -ENOMEM;
        bool freed = l->free_event != VT_TL_NONE;
        /* alive at the end first, by when they were made (0: unknown, first),
         * then the freed ones by their free */
        uint64_t order = freed ? (1ull << 63) | l->free_event : l->alloc_seq;
        out->v[out->n++] = (vt__seed){
            .due = l->start_event == VT_TL_NONE ? 0 : l->start_event,
            .order = order, .addr = l->addr, .size = l->size,
            .req_size = l->req_size ? l->req_size : l->size, .stream = l->stream,
            .stack = l->alloc_stack, .device = l->device };
        if (l->device + 1 > out->ndevices)
            out->ndevices = l->device + 1;
    }
    if (out->n)   /* none held: v is NULL, which qsort may not be given */
        qsort(out->v, out->n, sizeof *out->v, by_order);
    return 0;
}

/* Segments alive when the window opened: the replayed allocator's as the
 * recording's reserved bytes then; a library's own, in a recording of an
 * observed framework (alive at the end: the state says whose), held
 * outside the pool. */
static int add_segments(const vt__snapshot_data *s, const vt__timeline *tl, vt__seeds *out)
{
    const bool observed = (s->meta.flags & VT_META_POOL_OBSERVED) != 0;
    size_t cap = 0;
    for (size_t k = 0; k < tl->nsegments; k++) {
        const vt__segment_span *g = &tl->segments[k];
        if (!(g->flags & VT_LT_BEFORE_WINDOW) || g->device < 0
            || g->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        if (g->private_pool) {
            if (vt__grow_from((void **)&out->priv, &cap, out->npriv + 1, sizeof *out->priv, 8))
                return -ENOMEM;
            out->priv[out->npriv++] = (struct vt__seed_segment){ g->addr, g->size, g->device };
            continue;
        }
        bool library = observed && g->state_segment != VT_TL_NONE
                       && g->state_segment < s->nsegments
                       && !vt__pool_is_framework(s->segments[g->state_segment].pool);
        if (library)
            out->outside[g->device] += g->size;
        else
            out->reserved[g->device] += g->size;
    }
    return 0;
}

int vt__replay_seeds(const vt__snapshot_data *s, vt__event_stream *es, vt__seeds *out,
                     char *err, size_t errlen)
{
    *out = (vt__seeds){ 0 };
    vt__timeline *tl = NULL;
    char tlerr[256];
    int rc = vt__timeline_build_stream(s, es, 0, &tl, tlerr, sizeof tlerr);
    if (rc)
        return rc == -ENOMEM ? rc : vt__errf(err, errlen, rc, "%s", tlerr);
    rc = add_blocks(tl, out);
    if (rc == 0)
        rc = add_segments(s, tl, out);
    vt__timeline_free(tl);
    if (rc)
        vt__seeds_free(out);
    return rc;
}

void vt__seeds_free(vt__seeds *sd)
{
    free(sd->v);
    free(sd->priv);
    *sd = (vt__seeds){ 0 };
}
