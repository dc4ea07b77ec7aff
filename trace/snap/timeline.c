/*
 * trace/snap/timeline.c - reconstruct lifetimes, segment spans and memory curves
 * from a snapshot (see timeline.h for the matching rules): the build over a
 * whole snapshot, the steps after the matching that the streamed build
 * (timeline_stream.c) takes too, and the queries of a built timeline.
 *
 * Two passes over the events: the first matches ALLOC/FREE and
 * SEGMENT_ALLOC/SEGMENT_FREE by address (timeline_match.c, the one state
 * machine of the matching rules), the second replays byte counts per device
 * starting from what the before-window lifetimes add up to
 * (timeline_curves.c). Both passes share the builder of timeline_build.h.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "addr_sort.h"
#include "bsearch.h"
#include "errbuf.h"
#include "liveness.h"
#include "timeline.h"
#include "timeline_build.h"
#include "u64map.h"

/* A new array of the n items (of `size` bytes, each with its uint32_t flags
 * at byte `flags_at`), the before-window ones first, the order within each
 * part kept; map[old index] = new index. Frees `items`; NULL when out of
 * memory (`items` then untouched). Lifetimes and segment spans are both
 * ordered by it, so by one rule. */
static void *front_before_window(void *items, size_t n, size_t size, size_t flags_at,
                                 uint32_t *map)
{
    const unsigned char *from = items;
    unsigned char *to = malloc(n * size + 1);
    if (!to)
        return NULL;
    size_t k = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++) {
            uint32_t flags;
            memcpy(&flags, from + i * size + flags_at, sizeof flags);
            if (!!(flags & VT_LT_BEFORE_WINDOW) == !pass) {
                map[i] = (uint32_t)k;
                memcpy(to + k++ * size, from + i * size, size);
            }
        }
    free(items);
    return to;
}

/* Renumbers by map the owners of the segment events (segments true) or of
 * the other events. */
static void renumber_owners(const vt__snapshot_data *s, vt__timeline *tl, const uint32_t *map,
                            bool segments)
{
    for (size_t i = 0; tl->event_owner && i < s->nevents; i++) {
        uint8_t kd = s->events[i].kind;
        bool segment_event = kd == VT_EV_SEGMENT_ALLOC || kd == VT_EV_SEGMENT_FREE;
        if (tl->event_owner[i] != VT_TL_NONE && segment_event == segments)
            tl->event_owner[i] = map[tl->event_owner[i]];
    }
}

/* Move before-window lifetimes/spans to the front (stable), fixing indexes. */
int vt__tl_reorder(struct builder *b)
{
    vt__timeline *tl = b->tl;
    size_t n = tl->nlifetimes, ns = tl->nsegments;
    uint32_t *map = malloc((n > ns ? n : ns) * sizeof *map + 1);
    if (!map)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    vt__lifetime *nl = front_before_window(tl->lifetimes, n, sizeof *nl,
                                           offsetof(vt__lifetime, flags), map);
    if (nl) {
        tl->lifetimes = nl;
        renumber_owners(b->s, tl, map, false);
    }
    vt__segment_span *ng = !nl ? NULL
                               : front_before_window(tl->segments, ns, sizeof *ng,
                                                     offsetof(vt__segment_span, flags), map);
    if (ng) {
        tl->segments = ng;
        renumber_owners(b->s, tl, map, true);
    }
    free(map);
    return ng ? 0 : tl_fail(b, -ENOMEM, "timeline: out of memory");
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
    vt__timeline *tl = b->tl;
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
        vt__lifetime *l = &tl->lifetimes[p[i].life];
        if (!l->nstreams)
            l->first_stream = (uint32_t)tl->nstreams;
        l->nstreams++;
        tl->streams[tl->nstreams++] = p[i].stream;
    }
    free(p);
    return 0;
}

/* ---- address index ------------------------------------------------------ */

/* The lifetimes' indexes in address order (equal addresses in index
 * order): addr_sort.h's radix sort. */
int vt__tl_build_addr_index(struct builder *b)
{
    vt__timeline *tl = b->tl;
    size_t n = tl->nlifetimes;
    tl->by_addr = malloc(n * sizeof *tl->by_addr + 1);
    vt__addr_key *k1 = malloc(n * sizeof *k1 + 1), *k2 = malloc(n * sizeof *k2 + 1);
    if (!tl->by_addr || !k1 || !k2) {
        free(k1);
        free(k2);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    for (size_t i = 0; i < n; i++) {
        k1[i] = (vt__addr_key){ tl->lifetimes[i].addr, (uint32_t)i };
        if (tl->lifetimes[i].size > tl->max_lifetime_size)
            tl->max_lifetime_size = tl->lifetimes[i].size;
    }
    const vt__addr_key *sorted = vt__addr_keys_sort(k1, k2, n);
    for (size_t i = 0; i < n; i++)
        tl->by_addr[i] = sorted[i].idx;
    free(k1);
    free(k2);
    return 0;
}

/* ---- public ------------------------------------------------------------- */

int vt__lifetime_inherited(const vt__lifetime *l, uint64_t fork_seq)
{
    if (!fork_seq)
        return 0;
    return l->alloc_event != VT_TL_NONE ? l->alloc_seq < fork_seq
           : (l->flags & VT_LT_BEFORE_WINDOW) && (!l->alloc_seq || l->alloc_seq < fork_seq);
}

/* Flag what the parent held at the last fork (timeline.h). */
void vt__tl_mark_inherited(struct builder *b)
{
    vt__timeline *tl = b->tl;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        if (vt__lifetime_inherited(&tl->lifetimes[i], tl->fork_seq))
            tl->lifetimes[i].flags |= VT_LT_INHERITED;
}

void vt__tl_builder_free(struct builder *b)
{
    vt__u64map_free(&b->lmap);
    vt__u64map_free(&b->smap);
    vt__free_match_free(&b->frees);
    vt__liveness_free(b->lv);
    free(b->free_l);
    free(b->free_s);
    free(b->kept);
    free(b->gaps);
    free(b->after_event);
    vt__tl_backward_free_state(&b->backward);
    b->lv = NULL;
}

int vt__timeline_build(const vt__snapshot_data *s, vt__timeline **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    struct builder b = { .s = s, .err = err, .errlen = errlen };
    if (s->nevents >= VT_TL_NONE / 2 || s->nblocks >= VT_TL_NONE / 2)
        return tl_fail(&b, -EOVERFLOW, "timeline: too many events (%zu)", s->nevents);
    vt__timeline *tl = calloc(1, sizeof *tl);
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
        vt__free_match_init(&b.frees) || vt__liveness_build(s, &b.lv)) {
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
        (rc = collect_streams(&b)) || (rc = vt__tl_build_curves(&b)) ||
        (rc = vt__tl_build_addr_index(&b)))
        goto fail;
    if ((rc = vt__tl_backward_steps(&b)))
        goto fail;
    vt__tl_mark_inherited(&b);
    if ((rc = vt__passthrough_build(s, tl->fork_seq, &tl->passthrough, &tl->npassthrough))) {
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

void vt__timeline_free(vt__timeline *tl)
{
    if (!tl)
        return;
    free(tl->lifetimes);
    free(tl->segments);
    for (size_t i = 0; i < tl->ndevices; i++)
        free(tl->devices[i].points);
    free(tl->devices);
    free(tl->marks);
    free(tl->backward_steps);
    free(tl->streams);
    free(tl->event_owner);
    free(tl->by_addr);
    free(tl->passthrough);
    free(tl);
}

const vt__lifetime *vt__timeline_event_lifetime(const vt__timeline *tl, const vt__snapshot_data *s,
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

const vt__segment_span *vt__timeline_event_segment(const vt__timeline *tl,
                                                   const vt__snapshot_data *s, size_t ev)
{
    if (!tl || !s || !tl->event_owner || ev >= tl->nevents || ev >= s->nevents)
        return NULL;
    uint8_t k = s->events[ev].kind;
    if (k != VT_EV_SEGMENT_ALLOC && k != VT_EV_SEGMENT_FREE)
        return NULL;
    uint32_t o = tl->event_owner[ev];
    return o < tl->nsegments ? &tl->segments[o] : NULL;
}

int vt__lifetime_allocated_at(const vt__lifetime *l, uint32_t ev)
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

const vt__lifetime *vt__timeline_find(const vt__timeline *tl, uint64_t addr, uint32_t ev)
{
    if (!tl || !tl->nlifetimes)
        return NULL;
    if (ev != VT_TL_NONE && tl->nevents && ev >= tl->nevents)
        ev = (uint32_t)(tl->nevents - 1);
    /* first index with lifetime addr > addr */
    size_t lo;
    VT__PARTITION_POINT(tl->nlifetimes, i, tl->lifetimes[tl->by_addr[i]].addr <= addr, lo);
    while (lo > 0) {
        const vt__lifetime *l = &tl->lifetimes[tl->by_addr[--lo]];
        if (addr - l->addr >= tl->max_lifetime_size && l->addr != addr)
            break;
        if (addr - l->addr < l->size || (l->size == 0 && l->addr == addr))
            if (vt__lifetime_allocated_at(l, ev))
                return l;
    }
    return NULL;
}

const vt__tl_device *vt__timeline_device(const vt__timeline *tl, int device)
{
    if (!tl)
        return NULL;
    for (size_t i = 0; i < tl->ndevices; i++)
        if (tl->devices[i].device == device)
            return &tl->devices[i];
    return NULL;
}
