/*
 * trace/interop/perfetto_stream.c - the Trace Event Format export of a
 * snapshot whose events are read as a stream (vt__perfetto_export_stream,
 * perfetto.h): the bytes vt__perfetto_export writes from the whole snapshot
 * and its timeline, in memory that follows what is alive at once plus 16
 * bytes per allocation the events free.
 *
 * The file's order is the whole export's (perfetto_write.h): every device's
 * curve in turn, then one slice per lifetime in the timeline's order (those
 * without an ALLOC first), then the events drawn as instants. A slice's end
 * is known only at the free, long after the ALLOCs that follow it, so:
 *  1. the streamed timeline (two readings) is told each lifetime it
 *     retires: of one its ALLOC made, only that event and the time its
 *     bytes stopped counting are kept (the ALLOC tells the rest again in
 *     step 3); one without an ALLOC is kept whole (those come first, and
 *     they are few). Its condensed timeline gives the window, the devices
 *     and the lifetimes left at the end, their records final.
 *  2. per device, the streamed timeline again (two readings each), told
 *     every point of the curves: the device's are written as they come.
 *  3. the slices: those without an ALLOC, then one reading in which each
 *     ALLOC's lifetime is written as it comes, then the state's others.
 *  4. one reading for the instants.
 */
#include <errno.h>
#include <stdlib.h>

#include "errbuf.h"
#include "event_stream.h"
#include "grow.h"
#include "perfetto.h"
#include "perfetto_write.h"

#define NONE VT_TL_NONE

/* A lifetime its ALLOC made and the events freed: what the ALLOC does not
 * tell of its slice. */
struct ended {
    uint64_t release_time_ns;
    uint32_t alloc_event;
};

struct ps {
    struct ended *ended;      /* retired, made by an ALLOC: sorted by it before step 3 */
    size_t nended, cap_ended;
    vt__lifetime *pre;        /* retired, without an ALLOC (before the window) */
    size_t npre, cap_pre;
    vt__pf *w;
    size_t device;            /* step 2: the device index whose points are written */
    int oom;                  /* a hook could not grow a table */
};

static void on_retired(void *ctx, const vt__lifetime *l)
{
    struct ps *x = ctx;
    if (l->alloc_event != NONE) {
        struct ended *e = vt__grow_push((void **)&x->ended, &x->cap_ended, &x->nended, sizeof *e);
        if (!e)
            x->oom = 1;
        else
            *e = (struct ended){ l->release_time_ns, l->alloc_event };
        return;
    }
    vt__lifetime *c = vt__grow_push((void **)&x->pre, &x->cap_pre, &x->npre, sizeof *c);
    if (!c)
        x->oom = 1;
    else
        *c = *l;
}

/* Step 1 needs no point; being told them spares the streamed timeline its
 * third reading (the lifetimes at the peaks, which nothing here shows). */
static void on_point_none(void *ctx, size_t device, const vt__tl_point *pt)
{
    (void)ctx, (void)device, (void)pt;
}

static void on_point(void *ctx, size_t device, const vt__tl_point *pt)
{
    struct ps *x = ctx;
    if (device == x->device)
        vt__pf_point(x->w, device, pt);
}

static int cmp_ended(const void *a, const void *b)
{
    uint32_t x = ((const struct ended *)a)->alloc_event, y = ((const struct ended *)b)->alloc_event;
    return (x > y) - (x < y);
}

/* Lifetimes made by a FREE_REQUESTED without an ALLOC: in the order of that
 * event, which is the order the timeline made them in. */
static int cmp_free_event(const void *a, const void *b)
{
    uint32_t x = ((const vt__lifetime *)a)->free_event, y = ((const vt__lifetime *)b)->free_event;
    return (x > y) - (x < y);
}

static int cmp_alloc_event(const void *a, const void *b, void *ctx)
{
    const vt__timeline *tl = ctx;
    uint32_t x = tl->lifetimes[*(const uint32_t *)a].alloc_event;
    uint32_t y = tl->lifetimes[*(const uint32_t *)b].alloc_event;
    return (x > y) - (x < y);
}

/* The slice of the lifetime event e (index i) made, retired as n says. */
static void slice_of_alloc(vt__pf *w, const vt__event *e, uint32_t i, const struct ended *n)
{
    vt__lifetime l = { .addr = e->addr, .size = e->size, .req_size = e->req_size,
                       .stream = e->stream, .alloc_seq = e->seq, .alloc_time_ns = e->time_ns,
                       .release_time_ns = n->release_time_ns, .alloc_stack = e->stack,
                       .alloc_event = i, .device = e->device };
    vt__pf_slice(w, &l);
}

/* Step 3: the slices in the timeline's order. */
static int write_slices(struct ps *x, vt__event_stream *es, const vt__timeline *tl)
{
    int rc = 0;
    /* the events' own without an ALLOC, retired or left at the end */
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->alloc_event != NONE || (l->flags & VT_LT_FROM_STATE))
            continue;
        vt__lifetime *c = vt__grow_push((void **)&x->pre, &x->cap_pre, &x->npre, sizeof *c);
        if (!c)
            return -ENOMEM;
        *c = *l;
    }
    if (x->npre > 1)
        qsort(x->pre, x->npre, sizeof *x->pre, cmp_free_event);
    for (size_t i = 0; i < x->npre; i++)
        vt__pf_slice(x->w, &x->pre[i]);
    /* the state's from before the window */
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if ((l->flags & VT_LT_FROM_STATE) && (l->flags & VT_LT_BEFORE_WINDOW))
            vt__pf_slice(x->w, l);
    }
    /* those of an ALLOC, in its order: retired (x->ended) or left at the end */
    uint32_t *kept = malloc((tl->nlifetimes + 1) * sizeof *kept);
    if (!kept)
        return -ENOMEM;
    size_t nkept = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        if (tl->lifetimes[i].alloc_event != NONE && !(tl->lifetimes[i].flags & VT_LT_FROM_STATE))
            kept[nkept++] = (uint32_t)i;
    qsort_r(kept, nkept, sizeof *kept, cmp_alloc_event, (void *)tl);
    if (x->nended > 1)
        qsort(x->ended, x->nended, sizeof *x->ended, cmp_ended);
    size_t ie = 0, ik = 0;
    uint32_t i = 0;
    vt__event e;
    if ((rc = vt__event_stream_rewind(es)) == 0)
        while ((ie < x->nended || ik < nkept) && (rc = vt__event_stream_next(es, &e)) == 1) {
            if (ie < x->nended && x->ended[ie].alloc_event == i)
                slice_of_alloc(x->w, &e, i, &x->ended[ie++]);
            else if (ik < nkept && tl->lifetimes[kept[ik]].alloc_event == i)
                vt__pf_slice(x->w, &tl->lifetimes[kept[ik++]]);
            i++;
            rc = 0;
        }
    free(kept);
    if (rc < 0)
        return rc;
    /* the state's from a gap or after the window: made last */
    for (size_t k = 0; k < tl->nlifetimes; k++) {
        const vt__lifetime *l = &tl->lifetimes[k];
        if ((l->flags & VT_LT_FROM_STATE) && !(l->flags & VT_LT_BEFORE_WINDOW))
            vt__pf_slice(x->w, l);
    }
    return 0;
}

/* Step 4. */
static int write_instants(vt__pf *w, vt__event_stream *es)
{
    vt__event e;
    int rc = vt__event_stream_rewind(es);
    if (rc)
        return rc;
    while ((rc = vt__event_stream_next(es, &e)) == 1)
        vt__pf_instant(w, &e);
    return rc;
}

int vt__perfetto_export_stream(FILE *o, const vt__snapshot_data *s, vt__event_stream *es,
                               const vt__perfetto_options *opt, char *err, size_t errlen)
{
    struct ps x = { 0 };
    vt__pf w;
    vt__timeline *tl = NULL;
    vt__tl_stream_hooks h1 = { .retired = on_retired, .point = on_point_none, .ctx = &x };
    int rc = vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &h1, &tl, err, errlen);
    if (rc == 0 && x.oom)
        rc = vt__errf(err, errlen, -ENOMEM, "perfetto: out of memory");
    if (rc)
        goto out;
    vt__pf_begin(&w, o, s, tl, opt);
    x.w = &w;
    vt__tl_stream_hooks h2 = { .point = on_point, .ctx = &x };
    for (x.device = 0; x.device < tl->ndevices; x.device++) {
        vt__timeline *again = NULL;
        rc = vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &h2, &again, err, errlen);
        vt__timeline_free(again);
        if (rc)
            break;
    }
    if (rc == 0 && (rc = write_slices(&x, es, tl)) == -ENOMEM)
        vt__errf(err, errlen, rc, "perfetto: out of memory");
    if (rc == 0)
        rc = write_instants(&w, es);
    int erc = vt__pf_end(&w);
    if (rc == 0 && erc)
        rc = vt__errf(err, errlen, erc, "perfetto: write error");
out:
    free(x.ended);
    free(x.pre);
    vt__timeline_free(tl);
    return rc < 0 ? rc : 0;
}
