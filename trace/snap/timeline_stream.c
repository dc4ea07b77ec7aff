/*
 * trace/snap/timeline_stream.c - the timeline of a snapshot whose events are
 * read as a stream (vt__timeline_build_stream, timeline.h): what summary and
 * leaks show, in memory that follows what is alive at once rather than the
 * number of events.
 *
 * The one builder (timeline_build.h) matches the events; streamed, it
 * retires every lifetime as soon as the rules can no longer change it
 * (allocated in the window, freed or lost, not pending). What is left at
 * the end (alive, pending, allocated before the window, freed where the
 * events do not show it) is few, and gets the allocator state and the fates
 * exactly as a whole-snapshot build gives them.
 *
 * The curves need a second reading: a lifetime's fate, known at the end,
 * decides bytes counted from its start (a free without its ALLOC counts
 * from the gap before it; a pending free the state does not confirm never
 * counted as pending). So the events go by again through a fresh builder:
 * the deltas of a retired lifetime are its own at its events (nothing
 * changes them later), those of a lifetime left at the end come from its
 * final record. Only each device's first, peak and last points are kept.
 * A third reading stops at each device's allocated peak to keep the
 * lifetimes allocated there (summary's call sites at the peak), followed
 * until nothing can change their records (their FREE_COMPLETED, or the
 * addr taken by another), which ends the reading early where the recorder
 * wrote a FREE_COMPLETED after each free.
 *
 * A view that draws every allocation and every step of the curves (the
 * HTML page) is told them as the readings go (vt__timeline_build_stream_hooked):
 * each lifetime as it is retired, its record final, and each point as the
 * second reading makes it; it keeps what it draws, the build still only
 * what is alive.
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "event_stream.h"
#include "grow.h"
#include "liveness.h"
#include "order.h"
#include "timeline.h"
#include "timeline_build.h"
#include "u64map.h"
#include "passthrough.h"

#define MAP_START 1024

static int builder_init(struct builder *b, const vt__snapshot_data *s, vt__timeline *tl,
                        vt__liveness *lv, char *err, size_t errlen)
{
    *b = (struct builder){ .s = s, .tl = tl, .lv = lv, .err = err, .errlen = errlen,
                           .stream = 1 };
    if (vt__u64map_init(&b->lmap, MAP_START) || vt__u64map_init(&b->smap, MAP_START) ||
        vt__free_match_init(&b->frees))
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    return 0;
}

/* A builder of a later reading: the liveness is the first one's. */
static void builder_done(struct builder *b)
{
    b->lv = NULL;
    vt__tl_builder_free(b);
}

static int next_event(struct builder *b, vt__event_stream *es, vt__event *e, size_t i)
{
    int rc = vt__event_stream_next(es, e);
    if (rc == 1 && i >= VT_TL_NONE / 2)
        return tl_fail(b, -EOVERFLOW, "timeline: too many events (%zu)", i);
    return rc;   /* a damaged file: its message is in the stream's err */
}

/* The state's alloc seqs, for which the first event after each is noted as
 * the events go by (merge_state asks for it). */
static int after_table(struct builder *b, uint64_t **seqs)
{
    const vt__snapshot_data *s = b->s;
    *seqs = malloc((s->nblocks + 1) * sizeof **seqs);
    if (!*seqs)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    size_t n = 0;
    for (size_t i = 0; i < s->nblocks; i++)
        if (s->blocks[i].alloc_seq)
            (*seqs)[n++] = s->blocks[i].alloc_seq;
    qsort(*seqs, n, sizeof **seqs, vt__qsort_u64);
    size_t u = 0;
    for (size_t i = 0; i < n; i++)
        if (!u || (*seqs)[u - 1] != (*seqs)[i])
            (*seqs)[u++] = (*seqs)[i];
    b->after_event = malloc((u + 1) * sizeof *b->after_event);
    if (!b->after_event)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    for (size_t i = 0; i < u; i++)
        b->after_event[i] = VT_TL_NONE;
    b->after_seq = *seqs;
    b->nafter = u;
    return 0;
}

/* Reading 1: every event matched, the resolved retired. */
static int read_matching(struct builder *b, vt__event_stream *es, vt__passthrough_matcher *um)
{
    vt__timeline *tl = b->tl;
    vt__event e;
    size_t i = 0, k = 0;
    int rc;
    while ((rc = next_event(b, es, &e, i)) == 1) {
        uint32_t ev = (uint32_t)i;
        size_t g0 = vt__liveness_gap_count(b->lv);
        if (vt__liveness_note_event(b->lv, ev, e.seq))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        if (vt__liveness_gap_count(b->lv) != g0) {
            struct tl_gap_event *g = vt__grow_push((void **)&b->gaps, &b->cap_gaps, &b->ngaps,
                                                   sizeof *g);
            if (!g)
                return tl_fail(b, -ENOMEM, "timeline: out of memory");
            *g = (struct tl_gap_event){ ev, e.seq, e.time_ns };
        }
        for (; k < b->nafter && b->after_seq[k] < e.seq; k++)
            b->after_event[k] = ev;
        if ((rc = vt__tl_match_event(b, &e, ev)) || (rc = vt__tl_retire(b)))
            return rc;
        if (vt__passthrough_note(um, &e, ev))
            return tl_fail(b, -ENOMEM, "timeline: out of memory");
        i++;
    }
    if (rc < 0)
        return rc;
    tl->nevents = i;
    tl->ngaps = vt__liveness_gap_count(b->lv);
    tl->events_missing = vt__liveness_events_missing(b->lv);
    return 0;
}

/* Drop the retired slots of arr (n elements of elem bytes, the flags word
 * at flags_off); map's values follow the moved ones. */
static int compact(struct builder *b, void *arr, size_t *n, size_t elem, size_t flags_off,
                   vt__u64map *map)
{
    uint32_t *to = malloc((*n + 1) * sizeof *to);
    if (!to)
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    size_t j = 0;
    for (size_t i = 0; i < *n; i++) {
        char *p = (char *)arr + i * elem;
        uint32_t flags;
        memcpy(&flags, p + flags_off, sizeof flags);
        to[i] = VT_TL_NONE;
        if (flags & TL_RETIRED)
            continue;
        if (j != i)
            memcpy((char *)arr + j * elem, p, elem);
        to[i] = (uint32_t)j++;
    }
    *n = j;
    for (size_t k = 0; map->vals && k <= map->mask; k++)
        if (map->vals[k] != VT__U64MAP_NONE)
            map->vals[k] = to[map->vals[k]];
    free(to);
    return 0;
}

/* ---- the curves ---------------------------------------------------------- */

/* The key a later reading finds a lifetime by: the event that made it. */
static uint32_t made_at(const vt__lifetime *l)
{
    if (l->flags & VT_LT_FROM_STATE)
        return VT_TL_NONE;
    return l->alloc_event != VT_TL_NONE ? l->alloc_event : l->free_event;
}

/* The final record of what the event-made lifetime l of a later reading is,
 * when it was left at the end of the first (not retired); else NULL. */
static const vt__lifetime *final_of(const vt__timeline *tl, const vt__u64map *left,
                                   const vt__lifetime *l)
{
    uint32_t k = made_at(l);
    uint32_t i = k == VT_TL_NONE ? VT_TL_NONE : vt__u64map_get(left, k);
    return i == VT_TL_NONE ? NULL : &tl->lifetimes[i];
}

struct peaks {
    vt__tl_point first, alloc, reserved, active, last;
    size_t touched;          /* event index + 1 of the last point */
    uint64_t v[3];           /* allocated, pending, reserved */
};

static void see_point(struct peaks *p, const vt__tl_point *pt)
{
    if (pt->allocated > p->alloc.allocated)
        p->alloc = *pt;
    if (pt->reserved > p->reserved.reserved)
        p->reserved = *pt;
    if (pt->allocated + pt->pending > p->active.allocated + p->active.pending)
        p->active = *pt;
    p->last = *pt;
}

static int cmp_point(const void *a, const void *b)
{
    const vt__tl_point *x = a, *y = b;
    uint64_t ex = x->event == VT_TL_NONE ? 0 : (uint64_t)x->event + 1;
    uint64_t ey = y->event == VT_TL_NONE ? 0 : (uint64_t)y->event + 1;
    return vt__order(ex, ey);
}

static uint32_t point_at(const vt__tl_device *d, uint32_t event)
{
    for (size_t i = 0; i < d->npoints; i++)
        if (d->points[i].event == event)
            return (uint32_t)i;
    return 0;
}

/* A device's figures from its peaks: the first, peak and last points. */
static int device_from_peaks(vt__tl_device *d, const struct peaks *p)
{
    vt__tl_point pts[5] = { p->first, p->alloc, p->reserved, p->active, p->last };
    qsort(pts, 5, sizeof pts[0], cmp_point);
    d->points = malloc(5 * sizeof *d->points);
    if (!d->points)
        return -ENOMEM;
    for (size_t i = 0; i < 5; i++)
        if (!d->npoints || d->points[d->npoints - 1].event != pts[i].event)
            d->points[d->npoints++] = pts[i];
    d->peak_allocated = p->alloc.allocated;
    d->peak_allocated_point = point_at(d, p->alloc.event);
    d->peak_reserved = p->reserved.reserved;
    d->peak_reserved_point = point_at(d, p->reserved.event);
    d->peak_active = p->active.allocated + p->active.pending;
    d->peak_active_point = point_at(d, p->active.event);
    d->final_allocated = p->last.allocated;
    d->final_pending = p->last.pending;
    d->final_reserved = p->last.reserved;
    d->initial_allocated = p->first.allocated;
    d->initial_pending = p->first.pending;
    d->initial_reserved = p->first.reserved;
    return 0;
}

/* The deltas at event i of a later reading's builder b2: those of the
 * event's own lifetime or span (from its final record when the first
 * reading left it), those at an ALLOC of the lifetime it ended when that
 * was retired, and the foreign ones of the records (fd, sorted; *fi the
 * next). @return how many into d (room for 4 + the foreign ones at i). */
static size_t deltas_at(const struct builder *b2, const vt__timeline *tl, const vt__u64map *left,
                        uint8_t kind, uint32_t i, struct tl_delta *d)
{
    const vt__timeline *t2 = b2->tl;
    size_t n = 0;
    uint32_t o = b2->owner;
    if (o != VT_TL_NONE) {
        if (kind == VT_EV_SEGMENT_ALLOC || kind == VT_EV_SEGMENT_FREE) {
            n += vt__tl_own_deltas(kind, NULL, &t2->segments[o], i, d + n);
        } else if (kind != VT_EV_STREAM_USE) {
            const vt__lifetime *l = &t2->lifetimes[o], *f = final_of(tl, left, l);
            n += vt__tl_own_deltas(kind, f ? f : l, NULL, i, d + n);
        }
    }
    if (b2->prev != VT_TL_NONE && !final_of(tl, left, &t2->lifetimes[b2->prev])) {
        struct tl_delta fx[4];
        size_t nf = vt__tl_foreign_lifetime(&t2->lifetimes[b2->prev], fx);
        for (size_t k = 0; k < nf; k++)
            if (fx[k].event == i)
                d[n++] = fx[k];
    }
    return n;
}

/* Reading 2: the curves' first, peak and last points per device; every
 * point to h->point when asked. */
static int read_curves(struct builder *b, vt__event_stream *es, const vt__u64map *left,
                       const vt__tl_stream_hooks *h)
{
    vt__timeline *tl = b->tl;
    int8_t didx[256];
    int rc = vt__tl_devices(b, didx);
    if (rc)
        return rc;
    size_t nf = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        nf += vt__tl_foreign_lifetime(&tl->lifetimes[i], NULL);
    for (size_t i = 0; i < tl->nsegments; i++)
        nf += vt__tl_foreign_span(&tl->segments[i], NULL);
    struct tl_delta *fd = malloc((nf + 1) * sizeof *fd);
    struct peaks *pk = calloc(tl->ndevices + 1, sizeof *pk);
    vt__timeline *t2 = calloc(1, sizeof *t2);
    struct builder b2;
    if (!fd || !pk || !t2 || builder_init(&b2, b->s, t2, b->lv, b->err, b->errlen)) {
        free(fd);
        free(pk);
        free(t2);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    b2.later = 1;
    nf = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        nf += vt__tl_foreign_lifetime(&tl->lifetimes[i], fd + nf);
    for (size_t i = 0; i < tl->nsegments; i++)
        nf += vt__tl_foreign_span(&tl->segments[i], fd + nf);
    qsort(fd, nf, sizeof *fd, vt__tl_cmp_delta);
    size_t fi = 0;
    for (; fi < nf && fd[fi].event == VT_TL_NONE; fi++)
        pk[didx[(uint8_t)fd[fi].device]].v[fd[fi].what] += fd[fi].bytes;
    for (size_t k = 0; k < tl->ndevices; k++) {
        struct peaks *p = &pk[k];
        p->first = (vt__tl_point){ tl->nevents ? tl->first_seq : 0,
                                  tl->nevents ? tl->first_time_ns : 0, p->v[0], p->v[1], p->v[2],
                                  VT_TL_NONE };
        p->alloc = p->reserved = p->active = p->last = p->first;
        if (h && h->point)
            h->point(h->ctx, k, &p->first);
    }
    struct tl_delta *own = NULL;
    size_t own_cap = 0;
    vt__event e;
    size_t i = 0;
    if ((rc = vt__event_stream_rewind(es)))
        goto out;
    while ((rc = next_event(b, es, &e, i)) == 1) {
        uint32_t ev = (uint32_t)i++;
        if ((rc = vt__tl_match_event(&b2, &e, ev)))
            goto out;
        size_t f0 = fi;
        while (fi < nf && fd[fi].event == ev)
            fi++;
        if (vt__grow((void **)&own, &own_cap, 4 + fi - f0, sizeof *own)) {
            rc = tl_fail(b, -ENOMEM, "timeline: out of memory");
            goto out;
        }
        size_t n = deltas_at(&b2, tl, left, e.kind, ev, own);
        memcpy(own + n, fd + f0, (fi - f0) * sizeof *own);
        n += fi - f0;
        if ((rc = vt__tl_retire(&b2)))
            goto out;
        for (size_t j = 0; j < n; j++) {   /* apply all, then one point per device */
            uint64_t *v = &pk[didx[(uint8_t)own[j].device]].v[own[j].what];
            *v = own[j].sign > 0 ? *v + own[j].bytes : tl_sub_sat(*v, own[j].bytes);
        }
        for (size_t j = 0; j < n; j++) {
            struct peaks *p = &pk[didx[(uint8_t)own[j].device]];
            if (p->touched == (size_t)ev + 1)
                continue;
            p->touched = (size_t)ev + 1;
            vt__tl_point pt = { e.seq, e.time_ns, p->v[0], p->v[1], p->v[2], ev };
            see_point(p, &pt);
            if (h && h->point)
                h->point(h->ctx, (size_t)(p - pk), &pt);
        }
    }
    if (rc < 0)
        goto out;
    rc = 0;
    for (size_t k = 0; k < tl->ndevices && !rc; k++)
        if (device_from_peaks(&tl->devices[k], &pk[k]))
            rc = tl_fail(b, -ENOMEM, "timeline: out of memory");
out:
    free(own);
    free(fd);
    free(pk);
    builder_done(&b2);
    vt__timeline_free(t2);
    return rc;
}

/* ---- the lifetimes at each device's peak -------------------------------- */

/* Reading 3: the retired lifetimes allocated at each device's allocated
 * peak, kept (their records as the rules leave them) and appended. */
static int read_peak_lifetimes(struct builder *b, vt__event_stream *es, const vt__u64map *left)
{
    vt__timeline *tl = b->tl;
    uint32_t last_peak = VT_TL_NONE;
    for (size_t k = 0; k < tl->ndevices; k++) {
        const vt__tl_device *d = &tl->devices[k];
        uint32_t ev = d->points[d->peak_allocated_point].event;
        if (ev != VT_TL_NONE && (last_peak == VT_TL_NONE || ev > last_peak))
            last_peak = ev;
    }
    if (last_peak == VT_TL_NONE)
        return 0;   /* only what was alive before the first event: the records */
    vt__timeline *t3 = calloc(1, sizeof *t3);
    struct builder b3;
    if (!t3 || builder_init(&b3, b->s, t3, b->lv, b->err, b->errlen)) {
        free(t3);
        return tl_fail(b, -ENOMEM, "timeline: out of memory");
    }
    b3.later = 1;
    int rc = vt__event_stream_rewind(es);
    size_t marked = 0, i = 0;
    vt__event e;
    while (!rc && (rc = next_event(b, es, &e, i)) == 1) {
        uint32_t ev = (uint32_t)i++;
        if ((rc = vt__tl_match_event(&b3, &e, ev)) || (rc = vt__tl_retire(&b3)))
            break;
        for (size_t k = 0; k < tl->ndevices; k++) {
            const vt__tl_device *d = &tl->devices[k];
            if (d->points[d->peak_allocated_point].event != ev)
                continue;
            for (size_t j = 0; j < t3->nlifetimes; j++) {
                vt__lifetime *l = &t3->lifetimes[j];
                if (!(l->flags & (TL_RETIRED | TL_KEEP)) && l->device == d->device &&
                    vt__lifetime_allocated_at(l, ev) && !final_of(tl, left, l)) {
                    l->flags |= TL_KEEP;
                    marked++;
                }
            }
        }
        if (ev >= last_peak && b3.nkept == marked)
            break;   /* every one kept is released: the rest changes none */
    }
    /* kept ones whose free needed no wait and whose FREE_COMPLETED did not
     * come: as the events leave them */
    for (size_t j = 0; rc >= 0 && j < t3->nlifetimes; j++)
        if ((t3->lifetimes[j].flags & (TL_KEEP | TL_RETIRED)) == TL_KEEP) {
            vt__lifetime *c = vt__grow_push((void **)&b3.kept, &b3.cap_kept, &b3.nkept,
                                           sizeof *c);
            if (!c)
                rc = tl_fail(b, -ENOMEM, "timeline: out of memory");
            else
                *c = t3->lifetimes[j], c->flags &= ~(uint32_t)TL_KEEP;
        }
    if (rc >= 0) {
        rc = 0;
        tl->npeak_kept = b3.nkept;
        size_t cap = tl->nlifetimes;
        if (vt__grow((void **)&tl->lifetimes, &cap, tl->nlifetimes + b3.nkept,
                     sizeof *tl->lifetimes))
            rc = tl_fail(b, -ENOMEM, "timeline: out of memory");
        else
            for (size_t k = 0; k < b3.nkept; k++)
                tl->lifetimes[tl->nlifetimes++] = b3.kept[k];
    }
    builder_done(&b3);
    vt__timeline_free(t3);
    return rc;
}

/* ---- public -------------------------------------------------------------- */

int vt__timeline_build_stream(const vt__snapshot_data *s, vt__event_stream *es, unsigned what,
                              vt__timeline **out, char *err, size_t errlen)
{
    return vt__timeline_build_stream_hooked(s, es, what, NULL, out, err, errlen);
}

int vt__timeline_build_stream_hooked(const vt__snapshot_data *s, vt__event_stream *es,
                                     unsigned what, const vt__tl_stream_hooks *h,
                                     vt__timeline **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    struct builder b;
    vt__passthrough_matcher um = { 0 };
    vt__u64map left = { 0 };
    uint64_t *seqs = NULL;
    vt__timeline *tl = calloc(1, sizeof *tl);
    if (!tl)
        return vt__errf(err, errlen, -ENOMEM, "timeline: out of memory");
    int rc = builder_init(&b, s, tl, NULL, err, errlen);
    if (rc)
        goto fail;
    if (h) {
        b.on_retire = h->retired;
        b.on_mark = h->mark;
        b.retire_ctx = h->ctx;
    }
    if (s->nblocks >= VT_TL_NONE / 2) {
        rc = tl_fail(&b, -EOVERFLOW, "timeline: too many blocks (%zu)", s->nblocks);
        goto fail;
    }
    if (vt__liveness_build_state(s, &b.lv)) {
        rc = tl_fail(&b, -ENOMEM, "timeline: out of memory");
        goto fail;
    }
    tl->state_complete = vt__snapshot_state_complete(s);
    if ((rc = after_table(&b, &seqs)) || (rc = vt__event_stream_rewind(es)) ||
        (rc = read_matching(&b, es, &um)) ||
        (rc = compact(&b, tl->lifetimes, &tl->nlifetimes, sizeof *tl->lifetimes,
                      offsetof(vt__lifetime, flags), &b.lmap)) ||
        (rc = compact(&b, tl->segments, &tl->nsegments, sizeof *tl->segments,
                      offsetof(vt__segment_span, flags), &b.smap)))
        goto fail;
    b.nfree_l = b.nfree_s = 0;
    if ((rc = vt__tl_merge_state(&b)) || (rc = vt__tl_reorder(&b)))
        goto fail;
    if (what & VT_TL_STREAM_CURVES) {
        if (vt__u64map_init(&left, tl->nlifetimes)) {
            rc = tl_fail(&b, -ENOMEM, "timeline: out of memory");
            goto fail;
        }
        for (size_t i = 0; i < tl->nlifetimes; i++)
            if (made_at(&tl->lifetimes[i]) != VT_TL_NONE)
                vt__u64map_put(&left, made_at(&tl->lifetimes[i]), (uint32_t)i);
        /* a view told every point needs not the lifetimes at the peaks */
        if ((rc = read_curves(&b, es, &left, h)) ||
            (!(h && h->point) && (rc = read_peak_lifetimes(&b, es, &left))))
            goto fail;
    }
    if ((rc = vt__tl_build_addr_index(&b)))
        goto fail;
    if ((rc = vt__tl_backward_steps(&b)))
        goto fail;
    vt__tl_mark_inherited(&b);
    vt__passthrough_finish(&um, tl->fork_seq, &tl->passthrough, &tl->npassthrough);
    vt__u64map_free(&left);
    free(seqs);
    vt__tl_builder_free(&b);
    *out = tl;
    return 0;
fail:
    vt__passthrough_discard(&um);
    vt__u64map_free(&left);
    free(seqs);
    vt__tl_builder_free(&b);
    vt__timeline_free(tl);
    return rc < 0 ? rc : -EINVAL;
}
