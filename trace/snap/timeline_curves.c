/*
 * trace/snap/timeline_curves.c - the memory curves of a timeline: the
 * deltas (allocated, pending, reserved bytes) that each lifetime and segment
 * span contributes, at its own events or elsewhere (before the window, at a
 * gap, at the ALLOC that reuses its addr), and the sweep over the events
 * that turns them into one point per device and event, with the peaks.
 *
 * The delta rules are shared with the streamed build (timeline_stream.c),
 * which sweeps its own way over a second reading of the events.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "grow.h"
#include "order.h"
#include "timeline.h"
#include "timeline_build.h"

/* ---- curves ------------------------------------------------------------- */

struct curve {
    vt__tl_point *pts;
    size_t n, cap;
    uint64_t v[3];           /* allocated, pending, reserved */
    size_t touched;          /* event index + 1 of the last point added */
};

static int cmp_dev(const void *a, const void *b)
{
    const vt__tl_device *x = a, *y = b;
    return (x->device > y->device) - (x->device < y->device);
}

/* A lifetime is pending from its free (or, for a block only the state shows
 * pending, from before the window) to its reusable_event. @return the event
 * index it starts at, VT_TL_NONE for before the window, or -1 if never. */
static int64_t pending_from(const vt__lifetime *l)
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

size_t vt__tl_foreign_lifetime(const vt__lifetime *l, struct tl_delta *d)
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

size_t vt__tl_foreign_span(const vt__segment_span *g, struct tl_delta *d)
{
    size_t n = 0;
    if (g->alloc_event == VT_TL_NONE)
        PUT(VT_TL_NONE, g->device, 2, +1, g->size);
    return n;
}
#undef PUT

static size_t foreign_deltas(const vt__timeline *tl, struct tl_delta *d)
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
    return vt__order(ex, ey);
}

size_t vt__tl_own_deltas(uint8_t kind, const vt__lifetime *l, const vt__segment_span *g,
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
static size_t own_deltas(const vt__timeline *tl, const vt__snapshot_data *s, size_t i,
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
    vt__timeline *tl = b->tl;
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
int vt__tl_build_curves(struct builder *b)
{
    const vt__snapshot_data *s = b->s;
    vt__timeline *tl = b->tl;
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
        cv[k].pts[cv[k].n++] = (vt__tl_point){ seq0, t0, cv[k].v[0], cv[k].v[1], cv[k].v[2],
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
        const vt__event *e = &s->events[ev];
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
                c->pts[c->n++] = (vt__tl_point){ e->seq, e->time_ns, c->v[0], c->v[1], c->v[2],
                                                (uint32_t)ev };
            }
        }
    }
out:
    for (size_t k = 0; k < tl->ndevices; k++) {
        vt__tl_device *dv = &tl->devices[k];
        dv->points = cv[k].pts;
        dv->npoints = cv[k].n;
        for (size_t i = 0; i < dv->npoints; i++) {
            const vt__tl_point *pt = &dv->points[i];
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
