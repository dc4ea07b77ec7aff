/*
 * trace/snap/timeline.c - reconstruct lifetimes, segment spans and memory curves
 * from a snapshot (see timeline.h for the matching rules).
 *
 * Two passes over the events: the first matches ALLOC/FREE and
 * SEGMENT_ALLOC/SEGMENT_FREE by address through open-addressing hash maps
 * (addr -> newest lifetime at that addr; over a whole snapshot entries are
 * never deleted, the lifetime's state says whether it is open), the second
 * replays byte counts per device starting from what the before-window
 * lifetimes add up to.
 *
 * The first pass is one event at a time (vt__tl_match_event), so that a
 * build over a stream of events (timeline_stream.c) applies the very same
 * rules; streamed, the builder retires what they have settled (a lifetime
 * freed and not pending, a closed span) and reuses its slot.
 *
 * Over 1,000 lines on purpose: the matching rules of timeline.h are one state
 * machine over the events, and both passes share its builder state; split,
 * one rule would be read across files.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
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

/* The next lifetime or span, zeroed, and its index; NULL past the index
 * limit or without memory. */
static void *push(void **arr, size_t *cap, size_t *n, size_t elem, uint32_t *idx)
{
    if (*n >= VT_TL_NONE - 1)
        return NULL;
    *idx = (uint32_t)*n;
    return vt__grow_push(arr, cap, n, elem);
}

/* A retired slot again (streamed build), zeroed. */
static void *reuse(void *arr, size_t elem, uint32_t *free_list, size_t *nfree, uint32_t *idx)
{
    if (!*nfree)
        return NULL;
    *idx = free_list[--*nfree];
    void *p = (char *)arr + (size_t)*idx * elem;
    memset(p, 0, elem);
    return p;
}

static vt_lifetime *new_lifetime(struct builder *b, uint32_t *idx)
{
    vt_timeline *tl = b->tl;
    vt_lifetime *l = reuse(tl->lifetimes, sizeof *l, b->free_l, &b->nfree_l, idx);
    if (!l)
        l = push((void **)&tl->lifetimes, &b->lcap, &tl->nlifetimes, sizeof *l, idx);
    if (l) {
        l->alloc_event = l->free_event = l->complete_event = l->release_event = VT_TL_NONE;
        l->start_event = l->reusable_event = VT_TL_NONE;
    }
    return l;
}

static vt_segment_span *new_span(struct builder *b, uint32_t *idx)
{
    vt_timeline *tl = b->tl;
    vt_segment_span *g = reuse(tl->segments, sizeof *g, b->free_s, &b->nfree_s, idx);
    if (!g)
        g = push((void **)&tl->segments, &b->scap, &tl->nsegments, sizeof *g, idx);
    if (g)
        g->alloc_event = g->free_event = g->state_segment = VT_TL_NONE;
    return g;
}

/* The span still open at addr, or else a new one for a segment allocated
 * before the window (flags added); NULL without memory. */
static vt_segment_span *open_span(struct builder *b, uint64_t addr, uint64_t size, int8_t device,
                                  uint32_t flags, uint32_t *idx)
{
    vt_timeline *tl = b->tl;
    *idx = vt__u64map_get(&b->smap, addr);
    if (*idx != VT_TL_NONE && tl->segments[*idx].free_event == VT_TL_NONE)
        return &tl->segments[*idx];
    vt_segment_span *g = new_span(b, idx);
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

static void release(vt_lifetime *l, const vt_event *e, uint32_t i)
{
    l->release_event = i;
    l->release_seq = e->seq;
    l->release_time_ns = e->time_ns;
}

/* A pending free that ends at event i (its completion, a reuse of the addr,
 * or a gap that hides the completion). */
static void end_pending(vt_lifetime *l, uint32_t i)
{
    l->reusable_event = i;
    l->flags &= ~(uint32_t)VT_LT_PENDING_FREE;
}

/* A lifetime whose fate the events have settled: its ALLOC seen, freed or
 * lost, not pending. Only its FREE_COMPLETED may still come (the allocator
 * records one right after a free that needs no wait), while the addr is
 * still its own. */
static int resolved(const vt_lifetime *l)
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
    const vt_lifetime *l = &b->tl->lifetimes[idx];
    if (resolved(l) && (displaced || l->complete_event != VT_TL_NONE || !(l->flags & TL_KEEP)))
        b->retire[b->nretire++] = idx;
}

/* Match one event into lifetimes and segment spans. */
int vt__tl_match_event(struct builder *b, const vt_event *e, uint32_t ei)
{
    const vt__snapshot_data *s = b->s;
    vt_timeline *tl = b->tl;
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
    switch (e->kind) {
    case VT_EV_ALLOC: {
        uint32_t prev = vt__u64map_get(&b->lmap, e->addr);
        if (prev != VT_TL_NONE) {
            vt_lifetime *old = &tl->lifetimes[prev];
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
        vt_lifetime *l = new_lifetime(b, &idx);
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
        vt_lifetime *l = NULL;
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
            l->stream = e->stream;
            l->device = e->device;
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
        release(l, e, ei);   /* the program freed it: no longer allocated */
        if (e->aux)
            l->flags |= VT_LT_PENDING_FREE;
        b->owner = idx;
        retire_if_done(b, idx, 0);
        break;
    }
    case VT_EV_FREE_COMPLETED: {
        idx = vt__u64map_get(&b->lmap, e->addr);
        if (idx == VT_TL_NONE)
            break;
        vt_lifetime *l = &tl->lifetimes[idx];
        if (l->free_event == VT_TL_NONE || l->complete_event != VT_TL_NONE)
            break;
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
        vt_segment_span *g = new_span(b, &idx);
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
        if (vt__u64map_put(&b->smap, e->addr, idx))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        b->owner = idx;
        break;
    }
    case VT_EV_SEGMENT_FREE: {
        vt_segment_span *g = open_span(b, e->addr, e->size, e->device, 0, &idx);
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
        tl->marks[tl->nmarks++] = (vt_tl_mark){ e->seq, e->time_ns, ei, e->str };
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
    vt_timeline *tl = b->tl;
    for (size_t k = 0; k < b->nretire; k++) {
        uint32_t idx = b->retire[k];
        vt_lifetime *l = &tl->lifetimes[idx];
        if (l->flags & TL_KEEP) {
            vt_lifetime *c = vt__grow_push((void **)&b->kept, &b->cap_kept, &b->nkept, sizeof *c);
            if (!c)
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
            *c = *l;
            c->flags &= ~(uint32_t)TL_KEEP;
        }
        if (vt__u64map_get(&b->lmap, l->addr) == idx)
            vt__u64map_del(&b->lmap, l->addr);
        b->dev_seen[(uint8_t)l->device] = 1;
        l->flags = TL_RETIRED;
        if (push_free(&b->free_l, &b->nfree_l, &b->cap_free_l, idx))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    b->nretire = 0;
    if (b->retire_span != VT_TL_NONE) {
        vt_segment_span *g = &tl->segments[b->retire_span];
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
static void release_at_gap(const struct builder *b, vt_lifetime *l, uint32_t g)
{
    if (!b->stream) {
        release(l, &b->s->events[g], g);
        return;
    }
    size_t lo;   /* a streamed build remembers those events (timeline_stream.c) */
    VT__PARTITION_POINT(b->ngaps, i, b->gaps[i].event < g, lo);
    vt_event e = { .seq = b->gaps[lo].seq, .time_ns = b->gaps[lo].time_ns };
    release(l, &e, g);
}

/* Lifetimes the kept events leave open, and pending frees they leave
 * pending: the allocator state (when complete) or the gaps decide
 * (liveness.h). What is not confirmed stops counting at the first gap after
 * its last known event, or stays counted to the last event. */
static void fate_of_open(struct builder *b)
{
    const vt__snapshot_data *s = b->s;
    vt_timeline *tl = b->tl;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        vt_lifetime *l = &tl->lifetimes[i];
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
    vt_timeline *tl = b->tl;
    for (size_t gi = 0; gi < s->nsegments; gi++) {
        const vt_segment *sg = &s->segments[gi];
        uint32_t idx;
        vt_segment_span *g = open_span(b, sg->addr, sg->size, sg->device, VT_LT_FROM_STATE, &idx);
        if (!g)
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        g->stream = sg->stream;
        g->pool = sg->pool;
        g->state_segment = (uint32_t)gi;

        for (size_t k = 0; k < sg->nblocks; k++) {
            size_t bi = (size_t)sg->first_block + k;
            if (bi >= s->nblocks)
                break;
            const vt_block *bl = &s->blocks[bi];
            if (bl->state == VT_BLOCK_INACTIVE)
                continue;
            uint32_t li = vt__u64map_get(&b->lmap, bl->addr);
            if (li != VT_TL_NONE) {
                vt_lifetime *l = &tl->lifetimes[li];
                int same = !bl->alloc_seq || !l->alloc_seq || bl->alloc_seq == l->alloc_seq;
                if (bl->state == VT_BLOCK_ACTIVE_ALLOCATED && tl_lifetime_open(l) && same)
                    continue; /* explained by the events */
                if (bl->state == VT_BLOCK_ACTIVE_PENDING_FREE && same &&
                    (l->flags & VT_LT_PENDING_FREE))
                    continue; /* freed in the window, still pending */
                if (bl->state == VT_BLOCK_ACTIVE_PENDING_FREE && same && tl_lifetime_open(l))
                    continue; /* freed after the window: fate_of_open() says so */
            }
            vt_lifetime *l = new_lifetime(b, &li);
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
        vt_lifetime *l = &tl->lifetimes[i];
        if (l->release_event == VT_TL_NONE && !(l->flags & VT_LT_FREE_UNSEEN))
            l->flags |= VT_LT_ALIVE;
        tl->nfree_unseen += (l->flags & VT_LT_FREE_UNSEEN) != 0;
    }
    for (size_t i = 0; i < tl->nsegments; i++)
        if (tl->segments[i].free_event == VT_TL_NONE)
            tl->segments[i].flags |= VT_LT_ALIVE;
    return 0;
}

/* Move before-window lifetimes/spans to the front (stable), fixing indexes. */
int vt__tl_reorder(struct builder *b)
{
    vt_timeline *tl = b->tl;
    size_t n = tl->nlifetimes, ns = tl->nsegments;
    uint32_t *map = malloc((n > ns ? n : ns) * sizeof *map + 1);
    if (!map)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");

    vt_lifetime *nl = malloc(n * sizeof *nl + 1);
    if (!nl) {
        free(map);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            if (!!(tl->lifetimes[i].flags & VT_LT_BEFORE_WINDOW) == !pass) {
                map[i] = (uint32_t)k;
                nl[k++] = tl->lifetimes[i];
            }
    free(tl->lifetimes);
    tl->lifetimes = nl;
    const vt__snapshot_data *s = b->s;
    for (size_t i = 0; tl->event_owner && i < s->nevents; i++) {
        uint8_t kd = s->events[i].kind;
        if (tl->event_owner[i] != VT_TL_NONE && kd != VT_EV_SEGMENT_ALLOC &&
            kd != VT_EV_SEGMENT_FREE)
            tl->event_owner[i] = map[tl->event_owner[i]];
    }

    vt_segment_span *ng = malloc(ns * sizeof *ng + 1);
    if (!ng) {
        free(map);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < ns; i++)
            if (!!(tl->segments[i].flags & VT_LT_BEFORE_WINDOW) == !pass) {
                map[i] = (uint32_t)k;
                ng[k++] = tl->segments[i];
            }
    free(tl->segments);
    tl->segments = ng;
    for (size_t i = 0; tl->event_owner && i < s->nevents; i++) {
        uint8_t kd = s->events[i].kind;
        if (tl->event_owner[i] != VT_TL_NONE &&
            (kd == VT_EV_SEGMENT_ALLOC || kd == VT_EV_SEGMENT_FREE))
            tl->event_owner[i] = map[tl->event_owner[i]];
    }
    free(map);
    return 0;
}

/* ---- streams used ------------------------------------------------------- */

struct pair { uint32_t life; uint64_t stream; };

static int cmp_pair(const void *a, const void *b)
{
    const struct pair *x = a, *y = b;
    if (x->life != y->life)
        return x->life < y->life ? -1 : 1;
    return x->stream < y->stream ? -1 : x->stream > y->stream;
}

static int collect_streams(struct builder *b)
{
    const vt__snapshot_data *s = b->s;
    vt_timeline *tl = b->tl;
    size_t n = 0;
    for (size_t i = 0; i < s->nevents; i++)
        n += s->events[i].kind == VT_EV_STREAM_USE && tl->event_owner[i] != VT_TL_NONE;
    if (!n)
        return 0;
    struct pair *p = malloc(n * sizeof *p);
    if (!p)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    n = 0;
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_STREAM_USE && tl->event_owner[i] != VT_TL_NONE)
            p[n++] = (struct pair){ tl->event_owner[i], s->events[i].stream };
    qsort(p, n, sizeof *p, cmp_pair);
    tl->streams = malloc(n * sizeof *tl->streams);
    if (!tl->streams) {
        free(p);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        if (i && p[i].life == p[i - 1].life && p[i].stream == p[i - 1].stream)
            continue;
        vt_lifetime *l = &tl->lifetimes[p[i].life];
        if (!l->nstreams)
            l->first_stream = (uint32_t)tl->nstreams;
        l->nstreams++;
        tl->streams[tl->nstreams++] = p[i].stream;
    }
    free(p);
    return 0;
}

/* ---- curves ------------------------------------------------------------- */

struct curve {
    vt_tl_point *pts;
    size_t n, cap;
    uint64_t v[3];           /* allocated, pending, reserved */
    size_t touched;          /* event index + 1 of the last point added */
};

static int cmp_dev(const void *a, const void *b)
{
    const vt_tl_device *x = a, *y = b;
    return (x->device > y->device) - (x->device < y->device);
}

/* A lifetime is pending from its free (or, for a block only the state shows
 * pending, from before the window) to its reusable_event. @return the event
 * index it starts at, VT_TL_NONE for before the window, or -1 if never. */
static int64_t pending_from(const vt_lifetime *l)
{
    if (l->flags & VT_LT_OUTSIDE_POOL)
        return -1;
    if (l->reusable_event == VT_TL_NONE && !(l->flags & VT_LT_PENDING_FREE))
        return -1;
    if (l->free_event != VT_TL_NONE)
        return l->free_event;
    if ((l->flags & VT_LT_FROM_STATE) && !(l->flags & VT_LT_AFTER_WINDOW))
        return VT_TL_NONE;
    return -1;
}

/* Deltas that do not happen at the lifetime's (or span's) own event of the
 * kind: before the window, at a gap, at the ALLOC that replaces a lost
 * lifetime. The common ones are applied in the sweep through event_owner;
 * these few are collected here. */
#define PUT(ev, dev, w, sg, by)                                                      \
    do {                                                                             \
        if (d)                                                                       \
            d[n] = (struct tl_delta){ (ev), (dev), (w), (sg), (by) };                \
        n++;                                                                         \
    } while (0)

size_t vt__tl_foreign_lifetime(const vt_lifetime *l, struct tl_delta *d)
{
    size_t n = 0;
    if (tl_in_curves(l)) {
        if (l->start_event == VT_TL_NONE || l->start_event != l->alloc_event)
            PUT(l->start_event, l->device, 0, +1, l->size);
        if (l->release_event != VT_TL_NONE && l->release_event != l->free_event)
            PUT(l->release_event, l->device, 0, -1, l->size);
    }
    int64_t pf = pending_from(l);
    if (pf < 0)
        return n;
    if ((uint32_t)pf == VT_TL_NONE)
        PUT(VT_TL_NONE, l->device, 1, +1, l->size);
    if (l->reusable_event != VT_TL_NONE && l->reusable_event != l->complete_event)
        PUT(l->reusable_event, l->device, 1, -1, l->size);
    return n;
}

size_t vt__tl_foreign_span(const vt_segment_span *g, struct tl_delta *d)
{
    size_t n = 0;
    if (g->alloc_event == VT_TL_NONE)
        PUT(VT_TL_NONE, g->device, 2, +1, g->size);
    return n;
}
#undef PUT

static size_t foreign_deltas(const vt_timeline *tl, struct tl_delta *d)
{
    size_t n = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        n += vt__tl_foreign_lifetime(&tl->lifetimes[i], d ? d + n : NULL);
    for (size_t i = 0; i < tl->nsegments; i++)
        n += vt__tl_foreign_span(&tl->segments[i], d ? d + n : NULL);
    return n;
}

int vt__tl_cmp_delta(const void *a, const void *b)
{
    const struct tl_delta *x = a, *y = b;
    /* VT_TL_NONE (before the first event) sorts first */
    uint64_t ex = x->event == VT_TL_NONE ? 0 : (uint64_t)x->event + 1;
    uint64_t ey = y->event == VT_TL_NONE ? 0 : (uint64_t)y->event + 1;
    return (ex > ey) - (ex < ey);
}

size_t vt__tl_own_deltas(uint8_t kind, const vt_lifetime *l, const vt_segment_span *g,
                         uint32_t ev, struct tl_delta *d)
{
    size_t n = 0;
    switch (kind) {
    case VT_EV_ALLOC:
        if (tl_in_curves(l) && l->start_event == ev)
            d[n++] = (struct tl_delta){ ev, l->device, 0, +1, l->size };
        break;
    case VT_EV_FREE_REQUESTED:
        if (l->free_event != ev)
            break;
        if (tl_in_curves(l) && l->release_event == ev)
            d[n++] = (struct tl_delta){ ev, l->device, 0, -1, l->size };
        if (pending_from(l) == (int64_t)ev)
            d[n++] = (struct tl_delta){ ev, l->device, 1, +1, l->size };
        break;
    case VT_EV_FREE_COMPLETED:
        if (l->complete_event == ev && l->reusable_event == ev && pending_from(l) >= 0)
            d[n++] = (struct tl_delta){ ev, l->device, 1, -1, l->size };
        break;
    case VT_EV_SEGMENT_ALLOC:
        if (g->alloc_event == ev)
            d[n++] = (struct tl_delta){ ev, g->device, 2, +1, g->size };
        break;
    case VT_EV_SEGMENT_FREE:
        if (g->free_event == ev)
            d[n++] = (struct tl_delta){ ev, g->device, 2, -1, g->size };
        break;
    default:
        break;
    }
    return n;
}

/* The deltas at event i that belong to its own lifetime or span. */
static size_t own_deltas(const vt_timeline *tl, const vt__snapshot_data *s, size_t i,
                         struct tl_delta *d)
{
    uint32_t o = tl->event_owner[i];
    if (o == VT_TL_NONE)
        return 0;
    uint8_t kind = s->events[i].kind;
    int span = kind == VT_EV_SEGMENT_ALLOC || kind == VT_EV_SEGMENT_FREE;
    if (kind == VT_EV_STREAM_USE)
        return 0;
    return vt__tl_own_deltas(kind, span ? NULL : &tl->lifetimes[o],
                             span ? &tl->segments[o] : NULL, (uint32_t)i, d);
}

int vt__tl_devices(struct builder *b, int8_t didx[256])
{
    const vt__snapshot_data *s = b->s;
    vt_timeline *tl = b->tl;
    uint8_t seen[256];
    memcpy(seen, b->dev_seen, sizeof seen);
    for (size_t i = 0; i < s->ndevices; i++)
        if (s->devices[i].ordinal >= -128 && s->devices[i].ordinal < 128)
            seen[(uint8_t)(int8_t)s->devices[i].ordinal] = 1;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        seen[(uint8_t)tl->lifetimes[i].device] = 1;
    for (size_t i = 0; i < tl->nsegments; i++)
        seen[(uint8_t)tl->segments[i].device] = 1;
    size_t nd = 0;
    for (int i = 0; i < 256; i++)
        nd += seen[i];
    tl->devices = calloc(nd + 1, sizeof *tl->devices);
    if (!tl->devices)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    for (int i = 0; i < 256; i++)
        if (seen[i])
            tl->devices[tl->ndevices++].device = (int8_t)(uint8_t)i;
    qsort(tl->devices, tl->ndevices, sizeof *tl->devices, cmp_dev);
    memset(didx, -1, 256);
    for (size_t i = 0; i < tl->ndevices; i++)
        didx[(uint8_t)(int8_t)tl->devices[i].device] = (int8_t)i;
    return 0;
}

/* One sweep over the events: the deltas of each event (its own lifetime's,
 * then the few foreign ones, sorted by event) change the figures of their
 * devices; each device an event changed gets one point with the values
 * after all of them. */
static int build_curves(struct builder *b)
{
    const vt__snapshot_data *s = b->s;
    vt_timeline *tl = b->tl;
    int8_t didx[256];
    if (vt__tl_devices(b, didx))
        return -ENOMEM;
    size_t nf = foreign_deltas(tl, NULL);
    struct curve *cv = calloc(tl->ndevices + 1, sizeof *cv);
    struct tl_delta *fd = malloc((nf + 1) * sizeof *fd);
    if (!cv || !fd) {
        free(cv);
        free(fd);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    foreign_deltas(tl, fd);
    qsort(fd, nf, sizeof *fd, vt__tl_cmp_delta);   /* order within an event is moot */

    int rc = 0;
    size_t fi = 0;
    for (; fi < nf && fd[fi].event == VT_TL_NONE; fi++)
        cv[didx[(uint8_t)fd[fi].device]].v[fd[fi].what] += fd[fi].bytes;
    uint64_t seq0 = s->nevents ? s->events[0].seq : 0;
    uint64_t t0 = s->nevents ? s->events[0].time_ns : 0;
    for (size_t k = 0; k < tl->ndevices; k++) {
        tl->devices[k].initial_allocated = cv[k].v[0];
        tl->devices[k].initial_pending = cv[k].v[1];
        tl->devices[k].initial_reserved = cv[k].v[2];
        if (vt__grow((void **)&cv[k].pts, &cv[k].cap, 1, sizeof *cv[k].pts)) {
            rc = -ENOMEM;
            goto out;
        }
        cv[k].pts[cv[k].n++] = (vt_tl_point){ seq0, t0, cv[k].v[0], cv[k].v[1], cv[k].v[2],
                                              VT_TL_NONE };
    }

    for (size_t ev = 0; ev < s->nevents; ev++) {
        struct tl_delta own[3];
        size_t no = own_deltas(tl, s, ev, own);
        size_t f0 = fi;
        while (fi < nf && fd[fi].event == ev)
            fi++;
        if (!no && f0 == fi)
            continue;
        const vt_event *e = &s->events[ev];
        for (size_t pass = 0; pass < 2; pass++) {
            /* pass 0 applies, pass 1 adds the points */
            for (size_t j = 0; j < no + (fi - f0); j++) {
                const struct tl_delta *x = j < no ? &own[j] : &fd[f0 + j - no];
                struct curve *c = &cv[didx[(uint8_t)x->device]];
                if (pass == 0) {
                    uint64_t *v = &c->v[x->what];
                    *v = x->sign > 0 ? *v + x->bytes : tl_sub_sat(*v, x->bytes);
                    continue;
                }
                if (c->touched == ev + 1)
                    continue;
                c->touched = ev + 1;
                if (vt__grow((void **)&c->pts, &c->cap, c->n + 1, sizeof *c->pts)) {
                    rc = -ENOMEM;
                    goto out;
                }
                c->pts[c->n++] = (vt_tl_point){ e->seq, e->time_ns, c->v[0], c->v[1], c->v[2],
                                                (uint32_t)ev };
            }
        }
    }
out:
    for (size_t k = 0; k < tl->ndevices; k++) {
        vt_tl_device *dv = &tl->devices[k];
        dv->points = cv[k].pts;
        dv->npoints = cv[k].n;
        for (size_t i = 0; i < dv->npoints; i++) {
            const vt_tl_point *pt = &dv->points[i];
            if (i == 0 || pt->allocated > dv->peak_allocated) {
                dv->peak_allocated = pt->allocated;
                dv->peak_allocated_point = (uint32_t)i;
            }
            if (i == 0 || pt->reserved > dv->peak_reserved) {
                dv->peak_reserved = pt->reserved;
                dv->peak_reserved_point = (uint32_t)i;
            }
            if (i == 0 || pt->allocated + pt->pending > dv->peak_active) {
                dv->peak_active = pt->allocated + pt->pending;
                dv->peak_active_point = (uint32_t)i;
            }
        }
        if (dv->npoints) {
            dv->final_allocated = dv->points[dv->npoints - 1].allocated;
            dv->final_pending = dv->points[dv->npoints - 1].pending;
            dv->final_reserved = dv->points[dv->npoints - 1].reserved;
        }
    }
    free(cv);
    free(fd);
    if (rc)
        return tl_fail(b, rc, "timeline: out of memory");
    return 0;
}

/* ---- address index ------------------------------------------------------ */

/* Stable LSD radix sort of (addr, index) pairs by addr: equal addrs stay in
 * index order; sorting copies of the keys keeps every pass sequential. */
struct akey { uint64_t addr; uint32_t idx; };

int vt__tl_build_addr_index(struct builder *b)
{
    vt_timeline *tl = b->tl;
    size_t n = tl->nlifetimes;
    tl->by_addr = malloc(n * sizeof *tl->by_addr + 1);
    struct akey *k1 = malloc(n * sizeof *k1 + 1), *k2 = malloc(n * sizeof *k2 + 1);
    if (!tl->by_addr || !k1 || !k2) {
        free(k1);
        free(k2);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        k1[i] = (struct akey){ tl->lifetimes[i].addr, (uint32_t)i };
        if (tl->lifetimes[i].size > tl->max_lifetime_size)
            tl->max_lifetime_size = tl->lifetimes[i].size;
    }
    struct akey *src = k1, *dst = k2;
    for (int shift = 0; shift < 64; shift += 8) {
        size_t cnt[257] = { 0 };
        for (size_t i = 0; i < n; i++)
            cnt[((src[i].addr >> shift) & 0xff) + 1]++;
        int trivial = 0;
        for (int k = 1; k <= 256; k++)
            if (cnt[k] == n)
                trivial = 1;
        if (trivial)
            continue;
        for (int k = 0; k < 256; k++)
            cnt[k + 1] += cnt[k];
        for (size_t i = 0; i < n; i++)
            dst[cnt[(src[i].addr >> shift) & 0xff]++] = src[i];
        struct akey *t = src;
        src = dst;
        dst = t;
    }
    for (size_t i = 0; i < n; i++)
        tl->by_addr[i] = src[i].idx;
    free(k1);
    free(k2);
    return 0;
}

/* ---- public ------------------------------------------------------------- */

/* Flag what the parent held at the last fork (timeline.h). */
void vt__tl_mark_inherited(struct builder *b)
{
    vt_timeline *tl = b->tl;
    if (!tl->fork_seq)
        return;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        vt_lifetime *l = &tl->lifetimes[i];
        int before = l->alloc_event != VT_TL_NONE ? l->alloc_seq < tl->fork_seq
                    : (l->flags & VT_LT_BEFORE_WINDOW) && (!l->alloc_seq || l->alloc_seq < tl->fork_seq);
        if (before)
            l->flags |= VT_LT_INHERITED;
    }
}

void vt__tl_builder_free(struct builder *b)
{
    vt__u64map_free(&b->lmap);
    vt__u64map_free(&b->smap);
    vt__liveness_free(b->lv);
    free(b->free_l);
    free(b->free_s);
    free(b->kept);
    free(b->gaps);
    free(b->after_event);
    b->lv = NULL;
}

int vt__timeline_build(const vt__snapshot_data *s, vt_timeline **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    struct builder b = { .s = s, .err = err, .errlen = errlen };
    if (s->nevents >= VT_TL_NONE / 2 || s->nblocks >= VT_TL_NONE / 2)
        return tl_fail(&b, -EOVERFLOW, "timeline: too many events (%zu)", s->nevents);
    vt_timeline *tl = calloc(1, sizeof *tl);
    if (!tl)
        return tl_fail(&b, -ENOMEM, "timeline: out of memory");
    b.tl = tl;
    int rc = -ENOMEM;
    size_t nl = s->nblocks, ns = s->nsegments;
    for (size_t i = 0; i < s->nevents; i++) {
        uint8_t k = s->events[i].kind;
        nl += k == VT_EV_ALLOC || k == VT_EV_FREE_REQUESTED;
        ns += k == VT_EV_SEGMENT_ALLOC || k == VT_EV_SEGMENT_FREE;
    }
    tl->nevents = s->nevents;
    tl->event_owner = malloc(s->nevents * sizeof *tl->event_owner + 1);
    if (!tl->event_owner || vt__u64map_init(&b.lmap, nl) || vt__u64map_init(&b.smap, ns) ||
        vt__liveness_build(s, &b.lv)) {
        tl_fail(&b, rc, "timeline: out of memory");
        goto fail;
    }
    memset(tl->event_owner, 0xff, s->nevents * sizeof *tl->event_owner);
    tl->ngaps = vt__liveness_gap_count(b.lv);
    tl->events_missing = vt__liveness_events_missing(b.lv);
    tl->state_complete = vt__snapshot_state_complete(s);
    for (size_t i = 0; i < s->nevents; i++) {
        if ((rc = vt__tl_match_event(&b, &s->events[i], (uint32_t)i)))
            goto fail;
        tl->event_owner[i] = b.owner;
    }
    if ((rc = vt__tl_merge_state(&b)) || (rc = vt__tl_reorder(&b)) ||
        (rc = collect_streams(&b)) || (rc = build_curves(&b)) ||
        (rc = vt__tl_build_addr_index(&b)))
        goto fail;
    vt__tl_mark_inherited(&b);
    if ((rc = vt__uncached_build(s, tl->fork_seq, &tl->uncached, &tl->nuncached))) {
        tl_fail(&b, rc, "timeline: out of memory");
        goto fail;
    }
    vt__tl_builder_free(&b);
    *out = tl;
    return 0;
fail:
    vt__tl_builder_free(&b);
    vt__timeline_free(tl);
    return rc;
}

void vt__timeline_free(vt_timeline *tl)
{
    if (!tl)
        return;
    free(tl->lifetimes);
    free(tl->segments);
    for (size_t i = 0; i < tl->ndevices; i++)
        free(tl->devices[i].points);
    free(tl->devices);
    free(tl->marks);
    free(tl->streams);
    free(tl->event_owner);
    free(tl->by_addr);
    free(tl->uncached);
    free(tl);
}

const vt_lifetime *vt__timeline_event_lifetime(const vt_timeline *tl, const vt__snapshot_data *s,
                                               size_t ev)
{
    if (!tl || !s || !tl->event_owner || ev >= tl->nevents || ev >= s->nevents)
        return NULL;
    uint8_t k = s->events[ev].kind;
    if (k != VT_EV_ALLOC && k != VT_EV_FREE_REQUESTED && k != VT_EV_FREE_COMPLETED &&
        k != VT_EV_STREAM_USE)
        return NULL;
    uint32_t o = tl->event_owner[ev];
    return o < tl->nlifetimes ? &tl->lifetimes[o] : NULL;
}

const vt_segment_span *vt__timeline_event_segment(const vt_timeline *tl, const vt__snapshot_data *s,
                                                  size_t ev)
{
    if (!tl || !s || !tl->event_owner || ev >= tl->nevents || ev >= s->nevents)
        return NULL;
    uint8_t k = s->events[ev].kind;
    if (k != VT_EV_SEGMENT_ALLOC && k != VT_EV_SEGMENT_FREE)
        return NULL;
    uint32_t o = tl->event_owner[ev];
    return o < tl->nsegments ? &tl->segments[o] : NULL;
}

int vt__lifetime_allocated_at(const vt_lifetime *l, uint32_t ev)
{
    /* ev = VT_TL_NONE means "before event 0": compare as -1 */
    if (!tl_in_curves(l))
        return 0;
    int64_t e = ev == VT_TL_NONE ? -1 : (int64_t)ev;
    int64_t a = l->start_event == VT_TL_NONE ? -2 : (int64_t)l->start_event;
    if (a > e)
        return 0;
    if (l->release_event == VT_TL_NONE)
        return 1;
    return (int64_t)l->release_event > e;
}

const vt_lifetime *vt__timeline_find(const vt_timeline *tl, uint64_t addr, uint32_t ev)
{
    if (!tl || !tl->nlifetimes)
        return NULL;
    if (ev != VT_TL_NONE && tl->nevents && ev >= tl->nevents)
        ev = (uint32_t)(tl->nevents - 1);
    /* first index with lifetime addr > addr */
    size_t lo;
    VT__PARTITION_POINT(tl->nlifetimes, i, tl->lifetimes[tl->by_addr[i]].addr <= addr, lo);
    while (lo > 0) {
        const vt_lifetime *l = &tl->lifetimes[tl->by_addr[--lo]];
        if (addr - l->addr >= tl->max_lifetime_size && l->addr != addr)
            break;
        if (addr - l->addr < l->size || (l->size == 0 && l->addr == addr))
            if (vt__lifetime_allocated_at(l, ev))
                return l;
    }
    return NULL;
}

const vt_tl_device *vt__timeline_device(const vt_timeline *tl, int device)
{
    if (!tl)
        return NULL;
    for (size_t i = 0; i < tl->ndevices; i++)
        if (tl->devices[i].device == device)
            return &tl->devices[i];
    return NULL;
}
