/*
 * tests/trace/test_timeline_stream.c - the timeline built from a stream of
 * events (vt__timeline_build_stream) against the one built from the whole
 * snapshot: the same counts, fates, flags, peaks and lifetimes at the peak,
 * on random event streams full of what the matching rules reconcile (lost
 * frees, frees without their ALLOC, pending frees, gaps, allocator states
 * that do and do not agree, forks, observed pools), on training loops, and
 * with files read in chunks small enough to end inside events.
 */
#include <fcntl.h>
#include <unistd.h>

#include "harness.h"
#include "event_stream.h"
#include "snapfile.h"
#include "streamed_vs_whole.h"
#include "test_format_gen.h"
#include "timeline.h"

static char err[1024];

/* ---- comparing a condensed timeline with the whole one ------------------ */

static int same_lifetime(const vt__lifetime *a, const vt__lifetime *b)
{
    /* every field but the extra streams, which a condensed timeline has not */
    return a->addr == b->addr && a->size == b->size && a->req_size == b->req_size &&
           a->stream == b->stream && a->alloc_seq == b->alloc_seq &&
           a->alloc_time_ns == b->alloc_time_ns && a->free_seq == b->free_seq &&
           a->free_time_ns == b->free_time_ns && a->release_seq == b->release_seq &&
           a->release_time_ns == b->release_time_ns && a->alloc_stack == b->alloc_stack &&
           a->free_stack == b->free_stack && a->alloc_event == b->alloc_event &&
           a->free_event == b->free_event && a->complete_event == b->complete_event &&
           a->release_event == b->release_event && a->start_event == b->start_event &&
           a->reusable_event == b->reusable_event && a->flags == b->flags &&
           a->device == b->device;
}

/* Every lifetime of `part` is one of `whole` (each matched once). */
static void lifetimes_within(const vt__lifetime *const *part, size_t np,
                             const vt__lifetime *const *whole, size_t nw, const char *what)
{
    char *used = calloc(nw + 1, 1);
    for (size_t i = 0; i < np; i++) {
        size_t j = 0;
        while (j < nw && (used[j] || !same_lifetime(part[i], whole[j])))
            j++;
        for (size_t q = 0; j == nw && q < nw; q++)   /* say what it could have been */
            if (whole[q]->addr == part[i]->addr)
                fprintf(stderr, "  whole: alloc %u free %u complete %u release %u start %u "
                        "reusable %u flags 0x%x\n", whole[q]->alloc_event, whole[q]->free_event,
                        whole[q]->complete_event, whole[q]->release_event,
                        whole[q]->start_event, whole[q]->reusable_event, whole[q]->flags);
        ASSERT_MSG(j < nw, "%s: lifetime at 0x%llx (alloc event %u, flags 0x%x) is not the "
                   "whole timeline's", what, (unsigned long long)part[i]->addr,
                   part[i]->alloc_event, part[i]->flags);
        used[j] = 1;
    }
    free(used);
}

/* The lifetimes of tl that pick() takes. */
static size_t pick_lifetimes(const vt__timeline *tl, const vt__lifetime **out,
                             int (*pick)(const vt__lifetime *, const void *), const void *arg)
{
    size_t n = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        if (pick(&tl->lifetimes[i], arg))
            out[n++] = &tl->lifetimes[i];
    return n;
}

static int any(const vt__lifetime *l, const void *arg)
{
    (void)l, (void)arg;
    return 1;
}

/* What a condensed timeline must hold: what the events leave unresolved. */
static int unresolved(const vt__lifetime *l, const void *arg)
{
    (void)arg;
    return (l->flags & (VT_LT_ALIVE | VT_LT_FREE_UNSEEN | VT_LT_BEFORE_WINDOW |
                        VT_LT_FROM_STATE | VT_LT_PENDING_FREE)) != 0;
}

struct at_peak { int device; uint32_t event; };

static int allocated_at_peak(const vt__lifetime *l, const void *arg)
{
    const struct at_peak *p = arg;
    return l->device == p->device && vt__lifetime_allocated_at(l, p->event);
}

static void same_point(const vt__tl_point *a, const vt__tl_point *b)
{
    ASSERT_EQ(a->seq, b->seq);
    ASSERT_EQ(a->time_ns, b->time_ns);
    ASSERT_EQ(a->allocated, b->allocated);
    ASSERT_EQ(a->pending, b->pending);
    ASSERT_EQ(a->reserved, b->reserved);
    ASSERT_EQ(a->event, b->event);
}

static int span_kept(const vt__segment_span *g)
{
    return !(g->alloc_event != VT_TL_NONE && g->free_event != VT_TL_NONE);
}

static void same_condensed(const vt__timeline *w, const vt__timeline *c, int curves)
{
    ASSERT_EQ(c->nevents, w->nevents);
    for (int k = 0; k < 256; k++)
        ASSERT_EQ(c->kind_counts[k], w->kind_counts[k]);
    ASSERT_EQ(c->ngaps, w->ngaps);
    ASSERT_EQ(c->events_missing, w->events_missing);
    ASSERT_EQ(c->state_complete, w->state_complete);
    ASSERT_EQ(c->nfree_unseen, w->nfree_unseen);
    ASSERT_EQ(c->first_seq, w->first_seq);
    ASSERT_EQ(c->last_seq, w->last_seq);
    ASSERT_EQ(c->first_time_ns, w->first_time_ns);
    ASSERT_EQ(c->last_time_ns, w->last_time_ns);
    ASSERT_EQ(c->fork_seq, w->fork_seq);
    ASSERT_EQ(c->fork_parent_pid, w->fork_parent_pid);
    ASSERT_EQ(c->nmarks, w->nmarks);
    for (size_t i = 0; i < c->nmarks; i++)
        ASSERT(c->marks[i].seq == w->marks[i].seq && c->marks[i].event == w->marks[i].event &&
               c->marks[i].label == w->marks[i].label);
    ASSERT_EQ(c->npassthrough, w->npassthrough);
    for (size_t i = 0; i < c->npassthrough; i++) {
        const vt__passthrough *x = &c->passthrough[i], *y = &w->passthrough[i];
        ASSERT(x->addr == y->addr && x->size == y->size && x->alloc_event == y->alloc_event &&
               x->free_event == y->free_event && x->alive == y->alive &&
               x->inherited == y->inherited && x->kind == y->kind);
    }
    /* spans: the ones not opened and closed in the window, alike */
    size_t nw = 0, alive_w = 0, alive_c = 0;
    for (size_t i = 0; i < w->nsegments; i++) {
        nw += span_kept(&w->segments[i]);
        alive_w += (w->segments[i].flags & VT_LT_ALIVE) != 0;
    }
    for (size_t i = 0; i < c->nsegments; i++)
        alive_c += (c->segments[i].flags & VT_LT_ALIVE) != 0;
    ASSERT_EQ(c->nsegments, nw);
    ASSERT_EQ(alive_c, alive_w);

    const vt__lifetime **lw = malloc((w->nlifetimes + 1) * sizeof *lw);
    const vt__lifetime **lc = malloc((c->nlifetimes + 1) * sizeof *lc);
    size_t nlw = pick_lifetimes(w, lw, any, NULL);
    size_t nlc = pick_lifetimes(c, lc, any, NULL);
    lifetimes_within(lc, nlc, lw, nlw, "condensed");
    nlw = pick_lifetimes(w, lw, unresolved, NULL);
    lifetimes_within(lw, nlw, lc, nlc, "unresolved");
    if (!curves) {
        ASSERT_EQ(c->ndevices, 0);
        free(lw);
        free(lc);
        return;
    }
    ASSERT_EQ(c->ndevices, w->ndevices);
    for (size_t k = 0; k < w->ndevices; k++) {
        const vt__tl_device *a = &w->devices[k], *b = &c->devices[k];
        ASSERT_EQ(b->device, a->device);
        ASSERT_EQ(b->peak_allocated, a->peak_allocated);
        ASSERT_EQ(b->peak_reserved, a->peak_reserved);
        ASSERT_EQ(b->peak_active, a->peak_active);
        ASSERT_EQ(b->final_allocated, a->final_allocated);
        ASSERT_EQ(b->final_pending, a->final_pending);
        ASSERT_EQ(b->final_reserved, a->final_reserved);
        ASSERT_EQ(b->initial_allocated, a->initial_allocated);
        ASSERT_EQ(b->initial_pending, a->initial_pending);
        ASSERT_EQ(b->initial_reserved, a->initial_reserved);
        same_point(&b->points[b->peak_allocated_point], &a->points[a->peak_allocated_point]);
        same_point(&b->points[b->peak_reserved_point], &a->points[a->peak_reserved_point]);
        same_point(&b->points[b->peak_active_point], &a->points[a->peak_active_point]);
        same_point(&b->points[0], &a->points[0]);
        same_point(&b->points[b->npoints - 1], &a->points[a->npoints - 1]);
        /* the lifetimes allocated at the peak: the same ones */
        struct at_peak p = { a->device, a->points[a->peak_allocated_point].event };
        nlw = pick_lifetimes(w, lw, allocated_at_peak, &p);
        nlc = pick_lifetimes(c, lc, allocated_at_peak, &p);
        ASSERT_EQ(nlc, nlw);
        lifetimes_within(lc, nlc, lw, nlw, "at the peak");
    }
    free(lw);
    free(lc);
}

/* Both condensed timelines of s (its events in memory) against the whole. */
static void check_in_memory(const vt__snapshot_data *s)
{
    vt__timeline *w;
    ASSERT_MSG(vt__timeline_build(s, &w, err, sizeof err) == 0, "%s", err);
    for (int curves = 0; curves < 2; curves++) {
        vt__event_stream *es;
        vt__timeline *c;
        ASSERT(vt__event_stream_of(s, &es) == 0);
        ASSERT_MSG(vt__timeline_build_stream(s, es, curves ? VT_TL_STREAM_CURVES : 0, &c, err,
                                             sizeof err) == 0, "%s", err);
        same_condensed(w, c, curves);
        vt__timeline_free(c);
        vt__event_stream_close(es);
    }
    vt__timeline_free(w);
}

/* The same with s written to a file and read back in chunks of `chunk`. */
static void check_from_file(const vt__snapshot_data *s, size_t chunk)
{
    char dir[64], path[96];
    svw_write_snapshot(s, "tlstream", dir, path, sizeof path);
    vt__snapshot_data *r;
    ASSERT_MSG(vt__snapfile_read(path, &r, err, sizeof err) == 0, "%s", err);
    vt__timeline *w;
    ASSERT_MSG(vt__timeline_build(r, &w, err, sizeof err) == 0, "%s", err);
    vt__snapshot_data *h;
    vt__event_stream *es;
    char serr[1024];
    svw_open_stream(path, chunk, &h, &es, serr, sizeof serr);
    vt__timeline *c;
    ASSERT_MSG(vt__timeline_build_stream(h, es, VT_TL_STREAM_CURVES, &c, err, sizeof err) == 0,
               "%s %s", err, serr);
    same_condensed(w, c, 1);
    vt__timeline_free(c);
    vt__event_stream_close(es);
    vt__snapshot_free(h);
    vt__timeline_free(w);
    vt__snapshot_free(r);
    svw_remove(dir, path);
}

static void random_round(vt__snapshot_data *s, int k, uint64_t *rnd, const char *what)
{
    (void)what;
    check_in_memory(s);
    if (k % 10 == 0)
        check_from_file(s, 1 + gen_rand(rnd) % 64);
}

TEST(streamed_timeline_agrees_with_the_whole_on_random_event_streams)
{
    svw_each_random(20261128, 400, 300, random_round);
}

TEST(streamed_timeline_agrees_on_training_loops_read_in_small_chunks)
{
    vt__snapshot_data *s = gen_training(300000, 7);
    check_in_memory(s);
    check_from_file(s, 16);
    check_from_file(s, 0);
    vt__snapshot_free(s);
    s = gen_small();
    check_in_memory(s);
    check_from_file(s, 17);
    vt__snapshot_free(s);
}

TEST_MAIN()
