/*
 * trace/snap/timeline_walk.c - every lifetime of a snapshot read as a
 * stream, in vt__timeline_build's order and with its records
 * (vt__tl_walk_*, timeline.h): what an export that lists every allocation
 * needs, in memory that follows what is alive at once plus 32 bytes per
 * allocation the events settle.
 *
 * The timeline's order is the order it made them in, those from before the
 * window first (vt__tl_reorder): the ones a FREE_REQUESTED made without an
 * ALLOC (by that event), the state's from before the window, then the ones
 * of each ALLOC (by it), then the state's others. A lifetime of an ALLOC is
 * settled (the streamed build retires it) only at its free, long after
 * the ALLOCs that follow it, so the walk is told each retired one as the
 * streamed build reads the events and keeps of it what its ALLOC does not
 * tell again (struct late); one without an ALLOC is kept whole (those come
 * first, and they are few). Then one more reading rebuilds each ALLOC's
 * lifetime as that ALLOC comes by.
 */
#include <errno.h>
#include <stdlib.h>

#include "errbuf.h"
#include "event_stream.h"
#include "grow.h"
#include "order.h"
#include "timeline.h"

#define NONE VT_TL_NONE

/* A retired lifetime of an ALLOC: what that event does not say. Its end is
 * its free, or the next ALLOC at its addr when the free was lost (then it
 * has no free): one seq, time and event say either. */
struct late {
    uint64_t end_seq;
    uint64_t end_time_ns;
    uint32_t alloc_event;
    uint32_t end_event;
    uint32_t free_stack;
    uint32_t flags;
};

struct vt__tl_walk {
    struct late *late;        /* sorted by alloc_event before the walk */
    size_t nlate, cap_late;
    vt__lifetime *pre;        /* retired, without an ALLOC (before the window) */
    size_t npre, cap_pre;
    int oom;                  /* a table could not grow while the build read */
};

int vt__tl_walk_open(vt__tl_walk **out)
{
    *out = calloc(1, sizeof **out);
    return *out ? 0 : -ENOMEM;
}

static void no_point(void *ctx, size_t device, const vt__tl_point *pt)
{
    (void)ctx, (void)device, (void)pt;
}

int vt__tl_walk_build(const vt__snapshot_data *s, vt__event_stream *es, const char *who,
                      vt__tl_walk **walk, vt__timeline **tl, char *err, size_t errlen)
{
    *tl = NULL;
    if (vt__tl_walk_open(walk))
        return vt__errf(err, errlen, -ENOMEM, "%s: out of memory", who);
    vt__tl_stream_hooks h = { .retired = vt__tl_walk_retired, .point = no_point, .ctx = *walk };
    return vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &h, tl, err, errlen);
}

void vt__tl_walk_close(vt__tl_walk *w)
{
    if (!w)
        return;
    free(w->late);
    free(w->pre);
    free(w);
}

void vt__tl_walk_retired(void *ctx, const vt__lifetime *l)
{
    vt__tl_walk *w = ctx;
    if (l->alloc_event != NONE) {
        struct late *t = vt__grow_push((void **)&w->late, &w->cap_late, &w->nlate, sizeof *t);
        if (!t) {
            w->oom = 1;
            return;
        }
        *t = (struct late){ .end_seq = l->release_seq, .end_time_ns = l->release_time_ns,
                            .alloc_event = l->alloc_event, .end_event = l->release_event,
                            .free_stack = l->free_stack, .flags = l->flags };
        return;
    }
    vt__lifetime *c = vt__grow_push((void **)&w->pre, &w->cap_pre, &w->npre, sizeof *c);
    if (!c)
        w->oom = 1;
    else
        *c = *l;
}

/* The lifetime event e (index i, an ALLOC) made, settled as t says: the
 * matching's record (timeline_match.c) but the FREE_COMPLETED's events. */
static vt__lifetime rebuild(const vt__event *e, uint32_t i, const struct late *t,
                            uint64_t fork_seq)
{
    vt__lifetime l = { .addr = e->addr, .size = e->size, .req_size = e->req_size,
                       .stream = e->stream, .alloc_seq = e->seq, .alloc_time_ns = e->time_ns,
                       .release_seq = t->end_seq, .release_time_ns = t->end_time_ns,
                       .alloc_stack = e->stack, .free_stack = t->free_stack, .alloc_event = i,
                       .free_event = NONE, .complete_event = NONE, .release_event = t->end_event,
                       .start_event = i, .reusable_event = NONE, .flags = t->flags,
                       .device = e->device };
    if (!(t->flags & VT_LT_FREE_LOST)) {   /* freed: its free is its end */
        l.free_seq = t->end_seq;
        l.free_time_ns = t->end_time_ns;
        l.free_event = t->end_event;
    }
    if (vt__lifetime_inherited(&l, fork_seq))
        l.flags |= VT_LT_INHERITED;
    return l;
}

/* The table by alloc_event, in place: it is the walk's largest (one record
 * per allocation settled), and qsort's merge sort would hold a copy of it. */
static void sift_down(struct late *v, size_t i, size_t n)
{
    struct late x = v[i];
    for (size_t c; (c = 2 * i + 1) < n; i = c) {
        if (c + 1 < n && v[c + 1].alloc_event > v[c].alloc_event)
            c++;
        if (v[c].alloc_event <= x.alloc_event)
            break;
        v[i] = v[c];
    }
    v[i] = x;
}

static void sort_late(struct late *v, size_t n)
{
    for (size_t i = n / 2; i-- > 0;)
        sift_down(v, i, n);
    for (size_t k = n; k-- > 1;) {
        struct late x = v[0];
        v[0] = v[k];
        v[k] = x;
        sift_down(v, 0, k);
    }
}

/* Lifetimes a FREE_REQUESTED made without an ALLOC: in the order of that
 * event, the order the timeline made them in. */
static int cmp_free_event(const void *a, const void *b)
{
    uint32_t x = ((const vt__lifetime *)a)->free_event, y = ((const vt__lifetime *)b)->free_event;
    return vt__order(x, y);
}

static int cmp_alloc_event(const void *a, const void *b, void *ctx)
{
    const vt__timeline *tl = ctx;
    uint32_t x = tl->lifetimes[*(const uint32_t *)a].alloc_event;
    uint32_t y = tl->lifetimes[*(const uint32_t *)b].alloc_event;
    return vt__order(x, y);
}

int vt__tl_walk_run(vt__tl_walk *w, vt__event_stream *es, const vt__timeline *tl,
                    void (*fn)(void *ctx, const vt__lifetime *l), void *ctx)
{
    if (w->oom)
        return -ENOMEM;
    /* the events' own without an ALLOC, retired or left at the end */
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->alloc_event != NONE || (l->flags & VT_LT_FROM_STATE))
            continue;
        vt__lifetime *c = vt__grow_push((void **)&w->pre, &w->cap_pre, &w->npre, sizeof *c);
        if (!c)
            return -ENOMEM;
        *c = *l;
    }
    if (w->npre > 1)
        qsort(w->pre, w->npre, sizeof *w->pre, cmp_free_event);
    for (size_t i = 0; i < w->npre; i++) {
        if (vt__lifetime_inherited(&w->pre[i], tl->fork_seq))
            w->pre[i].flags |= VT_LT_INHERITED;
        fn(ctx, &w->pre[i]);
    }
    /* the state's from before the window */
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if ((l->flags & VT_LT_FROM_STATE) && (l->flags & VT_LT_BEFORE_WINDOW))
            fn(ctx, l);
    }
    /* those of an ALLOC, in its order: retired (w->late) or left at the end */
    uint32_t *kept = malloc((tl->nlifetimes + 1) * sizeof *kept);
    if (!kept)
        return -ENOMEM;
    size_t nkept = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        if (tl->lifetimes[i].alloc_event != NONE && !(tl->lifetimes[i].flags & VT_LT_FROM_STATE))
            kept[nkept++] = (uint32_t)i;
    qsort_r(kept, nkept, sizeof *kept, cmp_alloc_event, (void *)tl);
    sort_late(w->late, w->nlate);
    size_t it = 0, ik = 0;
    uint32_t i = 0;
    vt__event e;
    int rc = vt__event_stream_rewind(es);
    while (rc == 0 && (it < w->nlate || ik < nkept) && (rc = vt__event_stream_next(es, &e)) == 1) {
        if (it < w->nlate && w->late[it].alloc_event == i) {
            vt__lifetime l = rebuild(&e, i, &w->late[it++], tl->fork_seq);
            fn(ctx, &l);
        } else if (ik < nkept && tl->lifetimes[kept[ik]].alloc_event == i) {
            fn(ctx, &tl->lifetimes[kept[ik++]]);
        }
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
            fn(ctx, l);
    }
    return 0;
}
