/*
 * trace/snap/timeline_match.c - the matching rules of timeline.h as one
 * state machine: each event matched into the lifetimes and segment spans
 * (vt__tl_match_event), what it settled retired in a streamed build, and
 * after the last event the allocator state merged and the fates of what is
 * left open decided.
 *
 * ALLOC/FREE and SEGMENT_ALLOC/SEGMENT_FREE are matched by address through
 * open-addressing hash maps (addr -> newest lifetime at that addr; over a
 * whole snapshot entries are never deleted, the lifetime's state says
 * whether it is open).
 *
 * One event at a time, so that a build over a stream of events
 * (timeline_stream.c) applies the very same rules as the build over a whole
 * snapshot (timeline.c); streamed, the builder retires what they have
 * settled (a lifetime freed and not pending, a closed span) and reuses its
 * slot. Every rule lives in this file: split, one rule would be read across
 * files.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "errbuf.h"
#include "grow.h"
#include "liveness.h"
#include "timeline.h"
#include "timeline_build.h"
#include "u64map.h"

/* ---- builder state ------------------------------------------------------ */

/* A slot for the next lifetime or span, zeroed, and its index: a retired
 * one (streamed build: free_list) where there is one, else a new one at
 * the end of arr; NULL past the index limit or without memory. */
static void *take_slot(void **arr, size_t *cap, size_t *n, size_t elem, uint32_t *free_list,
                       size_t *nfree, uint32_t *idx)
{
    if (*nfree) {
        *idx = free_list[--*nfree];
        void *p = (char *)*arr + (size_t)*idx * elem;
        memset(p, 0, elem);
        return p;
    }
    if (*n >= VT_TL_NONE - 1)
        return NULL;
    *idx = (uint32_t)*n;
    return vt__grow_push(arr, cap, n, elem);
}

static vt__lifetime *new_lifetime(struct builder *b, uint32_t *idx)
{
    vt__timeline *tl = b->tl;
    vt__lifetime *l = take_slot((void **)&tl->lifetimes, &b->lcap, &tl->nlifetimes, sizeof *l,
                                b->free_l, &b->nfree_l, idx);
    if (l) {
        l->alloc_event = l->free_event = l->complete_event = l->release_event = VT_TL_NONE;
        l->start_event = l->reusable_event = VT_TL_NONE;
    }
    return l;
}

static vt__segment_span *new_span(struct builder *b, uint32_t *idx)
{
    vt__timeline *tl = b->tl;
    vt__segment_span *g = take_slot((void **)&tl->segments, &b->scap, &tl->nsegments, sizeof *g,
                                    b->free_s, &b->nfree_s, idx);
    if (g)
        g->alloc_event = g->free_event = g->state_segment = VT_TL_NONE;
    return g;
}

/* The span still open at addr, or else a new one for a segment allocated
 * before the window (flags added); NULL without memory. */
static vt__segment_span *open_span(struct builder *b, uint64_t addr, uint64_t size, int8_t device,
                                   uint32_t flags, uint32_t *idx)
{
    vt__timeline *tl = b->tl;
    *idx = vt__u64map_get(&b->smap, addr);
    if (*idx != VT_TL_NONE && tl->segments[*idx].free_event == VT_TL_NONE)
        return &tl->segments[*idx];
    vt__segment_span *g = new_span(b, idx);
    if (g) {
        g->addr = addr;
        g->size = size;
        g->device = device;
        g->flags |= VT_LT_BEFORE_WINDOW | flags;
        if (vt__u64map_put(&b->smap, addr, *idx))
            return NULL;   /* a streamed build's map could not grow */
    }
    return g;
}

static void release(vt__lifetime *l, const vt__event *e, uint32_t i)
{
    l->release_event = i;
    l->release_seq = e->seq;
    l->release_time_ns = e->time_ns;
}

/* A pending free that ends at event i (its completion, a reuse of the addr,
 * or a gap that hides the completion). */
static void end_pending(vt__lifetime *l, uint32_t i)
{
    l->reusable_event = i;
    l->flags &= ~(uint32_t)VT_LT_PENDING_FREE;
}

/* A lifetime whose fate the events have settled: its ALLOC seen, freed or
 * lost, not pending. Only its FREE_COMPLETED may still come (the allocator
 * records one right after a free that needs no wait), while the addr is
 * still its own. */
static int resolved(const vt__lifetime *l)
{
    return l->alloc_event != VT_TL_NONE && !tl_lifetime_open(l) &&
           !(l->flags & VT_LT_PENDING_FREE);
}

/* A streamed build retires a settled lifetime: nothing but that
 * FREE_COMPLETED can change it, and the completion of a free that needs no
 * wait changes no figure. One whose record is kept whole (TL_KEEP) waits
 * for it, or for its addr to be another's (`displaced`). */
static void retire_if_done(struct builder *b, uint32_t idx, int displaced)
{
    if (!b->stream || idx == VT_TL_NONE)
        return;
    const vt__lifetime *l = &b->tl->lifetimes[idx];
    if (resolved(l) && (displaced || l->complete_event != VT_TL_NONE || !(l->flags & TL_KEEP)))
        b->retire[b->nretire++] = idx;
}

/* Match one event into lifetimes and segment spans. */
int vt__tl_match_event(struct builder *b, const vt__event *e, uint32_t ei)
{
    const vt__snapshot_data *s = b->s;
    vt__timeline *tl = b->tl;
    uint32_t idx;
    b->owner = b->prev = b->retire_span = VT_TL_NONE;
    b->nretire = 0;
    if (ei == 0) {
        tl->first_seq = e->seq;
        tl->first_time_ns = e->time_ns;
    }
    tl->last_seq = e->seq;
    tl->last_time_ns = e->time_ns;
    tl->kind_counts[e->kind]++;
    uint32_t request;   /* at a FREE_COMPLETED, the FREE_REQUESTED it completes */
    if (vt__free_match_event(&b->frees, e, ei, &request))
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    switch (e->kind) {
    case VT_EV_ALLOC: {
        if (!b->later && vt__tl_backward_alloc(b, e, ei))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        uint32_t prev = vt__u64map_get(&b->lmap, e->addr);
        if (prev != VT_TL_NONE) {
            vt__lifetime *old = &tl->lifetimes[prev];
            if (tl_lifetime_open(old)) {
                old->flags |= VT_LT_FREE_LOST;
                release(old, e, ei);
                b->prev = prev;
            } else if (old->flags & VT_LT_PENDING_FREE) {
                /* pending free whose completion was not recorded */
                end_pending(old, ei);
                b->prev = prev;
            }
            retire_if_done(b, prev, 1);   /* the new ALLOC takes its addr */
        }
        vt__lifetime *l = new_lifetime(b, &idx);
        if (!l)
            return tl_fail(b, -ENOMEM, "timeline: out of memory (%zu lifetimes)", tl->nlifetimes);
        l->addr = e->addr;
        l->size = e->size;
        l->req_size = e->req_size;
        l->stream = e->stream;
        l->alloc_seq = e->seq;
        l->alloc_time_ns = e->time_ns;
        l->alloc_stack = e->stack;
        l->alloc_event = l->start_event = ei;
        l->device = e->device;
        if ((s->meta.flags & VT_META_POOL_OBSERVED) && !(e->aux & VT_ALLOC_POOL_BLOCK))
            l->flags |= VT_LT_OUTSIDE_POOL;
        if (vt__u64map_put(&b->lmap, e->addr, idx))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        b->owner = idx;
        break;
    }
    case VT_EV_FREE_REQUESTED: {
        vt__lifetime *l = NULL;
        idx = vt__u64map_get(&b->lmap, e->addr);
        if (idx != VT_TL_NONE && tl_lifetime_open(&tl->lifetimes[idx])) {
            l = &tl->lifetimes[idx];
        } else {
            retire_if_done(b, idx, 1);   /* the new lifetime takes its addr */
            /* allocated before the window */
            l = new_lifetime(b, &idx);
            if (!l)
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
            l->addr = e->addr;
            l->size = e->size;
            l->req_size = e->req_size;
            l->stream = e->stream;
            l->device = e->device;
            /* where it was made, which the free names (format 1.12) */
            l->alloc_stack = e->aux2 < s->nstack_nodes ? (uint32_t)e->aux2 : 0;
            l->flags |= VT_LT_BEFORE_WINDOW;
            /* its ALLOC is in the gap before this free, if there is one */
            l->start_event = vt__liveness_gap_at_or_before(b->lv, ei);
            if (vt__u64map_put(&b->lmap, e->addr, idx))
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
        }
        l->free_seq = e->seq;
        l->free_time_ns = e->time_ns;
        l->free_stack = e->stack;
        l->free_event = ei;
        if (!b->later && vt__tl_backward_free(b, e, ei, l))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        release(l, e, ei);   /* the program freed it: no longer allocated */
        if (e->aux)
            l->flags |= VT_LT_PENDING_FREE;
        b->owner = idx;
        retire_if_done(b, idx, 0);
        break;
    }
    case VT_EV_FREE_COMPLETED: {
        /* the lifetime that request freed, unless a streamed build retired it */
        idx = request == VT__FREE_MATCH_NONE ? VT_TL_NONE : vt__u64map_get(&b->lmap, e->addr);
        if (idx == VT_TL_NONE)
            break;
        vt__lifetime *l = &tl->lifetimes[idx];
        l->complete_event = ei;
        if (l->flags & VT_LT_PENDING_FREE)
            end_pending(l, ei);
        b->owner = idx;
        retire_if_done(b, idx, 0);
        break;
    }
    case VT_EV_STREAM_USE: {
        b->owner = vt__u64map_get(&b->lmap, e->addr);
        break;
    }
    case VT_EV_SEGMENT_ALLOC: {
        vt__segment_span *g = new_span(b, &idx);
        if (!g)
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        g->addr = e->addr;
        g->size = e->size;
        g->stream = e->stream;
        g->alloc_seq = e->seq;
        g->alloc_time_ns = e->time_ns;
        g->alloc_event = ei;
        g->device = e->device;
        g->pool = (uint8_t)e->aux;
        g->private_pool = e->aux2;
        if (vt__u64map_put(&b->smap, e->addr, idx))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        b->owner = idx;
        break;
    }
    case VT_EV_SEGMENT_FREE: {
        vt__segment_span *g = open_span(b, e->addr, e->size, e->device, 0, &idx);
        if (!g)
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        g->free_seq = e->seq;
        g->free_time_ns = e->time_ns;
        g->free_event = ei;
        b->owner = idx;
        /* a span allocated in the window and freed is done; one from
         * before it adds to the curves' start (kept) */
        if (b->stream && g->alloc_event != VT_TL_NONE)
            b->retire_span = idx;
        break;
    }
    case VT_EV_MARK: {
        if (vt__grow((void **)&tl->marks, &b->mcap, tl->nmarks + 1, sizeof *tl->marks))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        tl->marks[tl->nmarks++] = (vt__tl_mark){ e->seq, e->time_ns, ei, e->str };
        if (b->on_mark)
            b->on_mark(b->retire_ctx, &tl->marks[tl->nmarks - 1]);
        break;
    }
    case VT_EV_FORK:   /* the last one counts (timeline.h) */
        tl->fork_seq = e->seq;
        tl->fork_parent_pid = e->aux;
        break;
    default:
        break;
    }
    return 0;
}

static int push_free(uint32_t **list, size_t *n, size_t *cap, uint32_t idx)
{
    if (vt__grow((void **)list, cap, *n + 1, sizeof **list))
        return -ENOMEM;
    (*list)[(*n)++] = idx;
    return 0;
}

int vt__tl_retire(struct builder *b)
{
    vt__timeline *tl = b->tl;
    for (size_t k = 0; k < b->nretire; k++) {
        uint32_t idx = b->retire[k];
        vt__lifetime *l = &tl->lifetimes[idx];
        if (l->flags & TL_KEEP) {
            vt__lifetime *c = vt__grow_push((void **)&b->kept, &b->cap_kept, &b->nkept, sizeof *c);
            if (!c)
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
            *c = *l;
            c->flags &= ~(uint32_t)TL_KEEP;
        }
        if (vt__u64map_get(&b->lmap, l->addr) == idx) {
            vt__u64map_del(&b->lmap, l->addr);
            /* Its free request can complete nothing any more: a
             * FREE_COMPLETED at the addr finds no lifetime there whatever
             * the request says, until an event makes one (an ALLOC drops the
             * request, a FREE_REQUESTED puts its own). Held, the requests
             * of a run whose addresses are never reused would grow with
             * its frees. */
            vt__free_match_drop(&b->frees, l->addr);
        }
        b->dev_seen[(uint8_t)l->device] = 1;
        if (b->on_retire)
            b->on_retire(b->retire_ctx, l);
        l->flags = TL_RETIRED;
        if (push_free(&b->free_l, &b->nfree_l, &b->cap_free_l, idx))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    b->nretire = 0;
    if (b->retire_span != VT_TL_NONE) {
        vt__segment_span *g = &tl->segments[b->retire_span];
        if (vt__u64map_get(&b->smap, g->addr) == b->retire_span)
            vt__u64map_del(&b->smap, g->addr);
        b->dev_seen[(uint8_t)g->device] = 1;
        g->flags = TL_RETIRED;
        if (push_free(&b->free_s, &b->nfree_s, &b->cap_free_s, b->retire_span))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        b->retire_span = VT_TL_NONE;
    }
    return 0;
}

/* The first event index whose seq is above `seq` (the event after the gap
 * that holds seq). */
static uint32_t first_event_after(const struct builder *b, uint64_t seq)
{
    const vt__snapshot_data *s = b->s;
    size_t lo;
    if (b->stream) {   /* noted while the events went by (timeline_stream.c) */
        VT__PARTITION_POINT(b->nafter, i, b->after_seq[i] < seq, lo);
        return lo < b->nafter && b->after_seq[lo] == seq ? b->after_event[lo] : VT_TL_NONE;
    }
    VT__PARTITION_POINT(s->nevents, i, s->events[i].seq <= seq, lo);
    return lo < s->nevents ? (uint32_t)lo : VT_TL_NONE;
}

/* Release l at event g, one that follows a gap. */
static void release_at_gap(const struct builder *b, vt__lifetime *l, uint32_t g)
{
    if (!b->stream) {
        release(l, &b->s->events[g], g);
        return;
    }
    size_t lo;   /* a streamed build remembers those events (timeline_stream.c) */
    VT__PARTITION_POINT(b->ngaps, i, b->gaps[i].event < g, lo);
    vt__event e = { .seq = b->gaps[lo].seq, .time_ns = b->gaps[lo].time_ns };
    release(l, &e, g);
}

/* Lifetimes the kept events leave open, and pending frees they leave
 * pending: the allocator state (when complete) or the gaps decide
 * (liveness.h). What is not confirmed stops counting at the first gap after
 * its last known event, or stays counted to the last event. */
static void fate_of_open(struct builder *b)
{
    const vt__snapshot_data *s = b->s;
    vt__timeline *tl = b->tl;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        vt__lifetime *l = &tl->lifetimes[i];
        if (l->flags & VT_LT_FROM_STATE)
            continue;
        if (tl_lifetime_open(l)) {
            uint32_t last = l->start_event;
            if (vt__liveness_fate(b->lv, l->addr, l->alloc_seq, last) == VT_FATE_ALIVE)
                continue;
            l->flags |= VT_LT_FREE_UNSEEN;
            uint32_t g = vt__liveness_gap_after(b->lv, last);
            if (g != VT_TL_NONE)
                release_at_gap(b, l, g);
            if (tl->state_complete) {
                long bi = vt__liveness_state_block(b->lv, l->addr);
                if (bi >= 0 && s->blocks[bi].state == VT_BLOCK_ACTIVE_PENDING_FREE &&
                    (!l->alloc_seq || !s->blocks[bi].alloc_seq ||
                     l->alloc_seq == s->blocks[bi].alloc_seq))
                    l->flags |= VT_LT_PENDING_FREE;
            }
        } else if (l->flags & VT_LT_PENDING_FREE) {
            int still;
            if (tl->state_complete) {
                long bi = vt__liveness_state_block(b->lv, l->addr);
                still = bi >= 0 && s->blocks[bi].state == VT_BLOCK_ACTIVE_PENDING_FREE;
            } else {
                still = vt__liveness_gap_after(b->lv, l->free_event) == VT_TL_NONE;
            }
            if (still)
                continue;
            uint32_t g = vt__liveness_gap_after(b->lv, l->free_event);
            if (g != VT_TL_NONE)
                end_pending(l, g);
            else
                l->flags &= ~(uint32_t)VT_LT_PENDING_FREE; /* completed after the copy */
        }
    }
}

/* Reconcile with the allocator state: blocks/segments alive at the end that no
 * event in the window explains were allocated before it (or in a gap, or
 * after the events were copied). */
int vt__tl_merge_state(struct builder *b)
{
    const vt__snapshot_data *s = b->s;
    vt__timeline *tl = b->tl;
    const bool observed = (s->meta.flags & VT_META_POOL_OBSERVED) != 0;
    for (size_t gi = 0; gi < s->nsegments; gi++) {
        const vt__snap_segment *sg = &s->segments[gi];
        /* an observed framework's segment: its blocks are its own, as its
         * ALLOCs' (VT_ALLOC_POOL_BLOCK); the state's others are libraries' */
        const bool framework = vt__pool_is_framework(sg->pool);
        uint32_t idx;
        vt__segment_span *g = open_span(b, sg->addr, sg->size, sg->device, VT_LT_FROM_STATE, &idx);
        if (!g)
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        g->stream = sg->stream;
        g->pool = vt__pool_kind(sg->pool);
        g->state_segment = (uint32_t)gi;
        if (sg->private_pool)   /* a window whose ring overwrote its SEGMENT_ALLOC */
            g->private_pool = sg->private_pool;

        for (size_t k = 0; k < sg->nblocks; k++) {
            size_t bi = (size_t)sg->first_block + k;
            if (bi >= s->nblocks)
                break;
            const vt__snap_block *bl = &s->blocks[bi];
            if (bl->state == VT_BLOCK_INACTIVE)
                continue;
            uint32_t li = vt__u64map_get(&b->lmap, bl->addr);
            if (li != VT_TL_NONE) {
                vt__lifetime *l = &tl->lifetimes[li];
                int same = !bl->alloc_seq || !l->alloc_seq || bl->alloc_seq == l->alloc_seq;
                if (bl->state == VT_BLOCK_ACTIVE_ALLOCATED && tl_lifetime_open(l) && same)
                    continue; /* explained by the events */
                if (bl->state == VT_BLOCK_ACTIVE_PENDING_FREE && same &&
                    (l->flags & VT_LT_PENDING_FREE))
                    continue; /* freed in the window, still pending */
                if (bl->state == VT_BLOCK_ACTIVE_PENDING_FREE && same && tl_lifetime_open(l))
                    continue; /* freed after the window: fate_of_open() says so */
            }
            vt__lifetime *l = new_lifetime(b, &li);
            if (!l)
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
            l->addr = bl->addr;
            l->size = bl->size;
            l->req_size = bl->req_size;
            l->stream = bl->stream;
            l->alloc_seq = bl->alloc_seq;
            l->alloc_stack = bl->stack;
            l->device = sg->device;
            l->flags = VT_LT_FROM_STATE;
            if (observed && !framework)
                l->flags |= VT_LT_OUTSIDE_POOL;
            if (bl->alloc_seq && tl->nevents && bl->alloc_seq > tl->last_seq) {
                l->flags |= VT_LT_AFTER_WINDOW;
            } else {
                l->flags |= VT_LT_BEFORE_WINDOW;
                if (bl->alloc_seq && tl->nevents && bl->alloc_seq > tl->first_seq)
                    l->start_event = first_event_after(b, bl->alloc_seq);
            }
            if (bl->state == VT_BLOCK_ACTIVE_PENDING_FREE) {
                /* freed where the events do not show it, still pending */
                l->flags |= VT_LT_PENDING_FREE | VT_LT_FREE_UNSEEN;
                l->flags &= ~(uint32_t)VT_LT_AFTER_WINDOW;
                l->start_event = VT_TL_NONE;
            }
            if (vt__u64map_put(&b->lmap, bl->addr, li))
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
        }
    }
    fate_of_open(b);
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        vt__lifetime *l = &tl->lifetimes[i];
        if (l->release_event == VT_TL_NONE && !(l->flags & VT_LT_FREE_UNSEEN))
            l->flags |= VT_LT_ALIVE;
        tl->nfree_unseen += (l->flags & VT_LT_FREE_UNSEEN) != 0;
    }
    for (size_t i = 0; i < tl->nsegments; i++)
        if (tl->segments[i].free_event == VT_TL_NONE)
            tl->segments[i].flags |= VT_LT_ALIVE;
    return 0;
}
