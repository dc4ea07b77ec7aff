/*
 * tests/trace/test_format_timeline.c - timeline reconstruction: lifetimes,
 * allocations from before the retained window, segments, curves, lookups.
 */
#include <time.h>

#include "free_match.h"
#include "harness.h"
#include "timeline.h"
#include "test_format_gen.h"

static char err[512];

static const vt__lifetime *at_addr(const vt__timeline *tl, uint64_t addr, int nth)
{
    for (size_t i = 0; i < tl->nlifetimes; i++)
        if (tl->lifetimes[i].addr == addr && nth-- == 0)
            return &tl->lifetimes[i];
    HARNESS_FAIL("no lifetime at 0x%llx", (unsigned long long)addr);
}

TEST(timeline_small_lifetimes_and_window)
{
    vt__snapshot_data *s = gen_small();
    vt__timeline *tl;
    ASSERT_MSG(vt__timeline_build(s, &tl, err, sizeof err) == 0, "%s", err);
    ASSERT_EQ(tl->nlifetimes, 5);
    /* before-window ones come first */
    ASSERT(tl->lifetimes[0].flags & VT_LT_BEFORE_WINDOW);
    ASSERT(tl->lifetimes[1].flags & VT_LT_BEFORE_WINDOW);
    ASSERT(!(tl->lifetimes[2].flags & VT_LT_BEFORE_WINDOW));

    const vt__lifetime *old = at_addr(tl, 0x7000, 0);     /* freed in window, alloc unknown */
    ASSERT_EQ(old->flags, VT_LT_BEFORE_WINDOW);
    ASSERT_EQ(old->alloc_event, VT_TL_NONE);
    ASSERT_EQ(old->free_event, 0);
    ASSERT_EQ(old->size, 1 * MiB);
    /* where it was made: the free names it (format 1.12) */
    ASSERT_EQ(old->alloc_stack, s->events[0].aux2);
    ASSERT(old->alloc_stack != 0);

    const vt__lifetime *a1 = at_addr(tl, 0x10000000, 0);  /* from the state only */
    ASSERT_EQ(a1->flags, VT_LT_BEFORE_WINDOW | VT_LT_FROM_STATE | VT_LT_ALIVE);
    ASSERT_EQ(a1->alloc_seq, 3);
    ASSERT_EQ(a1->req_size, 8 * MiB - 100);
    ASSERT_EQ(a1->alloc_stack, s->blocks[0].stack);

    const vt__lifetime *a2 = at_addr(tl, 0x10000000 + 8 * MiB, 0);
    ASSERT_EQ(a2->flags, VT_LT_ALIVE);
    ASSERT_EQ(a2->alloc_seq, 13);
    ASSERT_EQ(a2->alloc_event, 3);

    const vt__lifetime *b1 = at_addr(tl, 0x20000000, 0);  /* pending free at the end */
    ASSERT_EQ(b1->flags, VT_LT_PENDING_FREE);              /* freed: not alive */
    ASSERT_EQ(b1->free_seq, 17);
    ASSERT_EQ(b1->release_event, 7);                       /* allocated until the free */
    ASSERT_EQ(b1->reusable_event, VT_TL_NONE);             /* still pending */
    ASSERT_EQ(b1->nstreams, 1);
    ASSERT_EQ(tl->streams[b1->first_stream], 0x99);
    ASSERT_EQ(b1->device, 1);

    const vt__lifetime *tmp = at_addr(tl, 0x10000000 + 12 * MiB, 0);
    ASSERT_EQ(tmp->flags, 0);
    ASSERT_EQ(tmp->release_seq, 19);
    ASSERT_EQ(tmp->free_stack, s->events[9].stack);

    /* event -> lifetime */
    ASSERT_PTR_EQ(vt__timeline_event_lifetime(tl, s, 5), b1);   /* STREAM_USE */
    ASSERT_PTR_EQ(vt__timeline_event_lifetime(tl, s, 7), b1);   /* FREE_REQUESTED */
    ASSERT_PTR_EQ(vt__timeline_event_lifetime(tl, s, 1), NULL); /* MARK */
    ASSERT_PTR_EQ(vt__timeline_event_lifetime(tl, s, 99), NULL);

    /* segments: A from state, B in window, a short-lived third */
    ASSERT_EQ(tl->nsegments, 3);
    ASSERT_EQ(tl->segments[0].addr, 0x10000000);
    ASSERT_EQ(tl->segments[0].flags, VT_LT_BEFORE_WINDOW | VT_LT_FROM_STATE | VT_LT_ALIVE);
    ASSERT_EQ(tl->segments[0].state_segment, 0);
    const vt__segment_span *sb = vt__timeline_event_segment(tl, s, 2);
    ASSERT(sb && sb->addr == 0x20000000 && sb->flags == VT_LT_ALIVE && sb->state_segment == 1);
    const vt__segment_span *sc = vt__timeline_event_segment(tl, s, 13);
    ASSERT(sc && sc->free_seq == 24 && !(sc->flags & VT_LT_ALIVE));

    /* marks and counts */
    ASSERT_EQ(tl->nmarks, 1);
    ASSERT_EQ(tl->marks[0].seq, 11);
    ASSERT_EQ(tl->kind_counts[VT_EV_ALLOC], 3);
    ASSERT_EQ(tl->kind_counts[VT_EV_OOM], 1);
    ASSERT_EQ(tl->first_seq, 10);
    ASSERT_EQ(tl->last_seq, 24);

    vt__timeline_free(tl);
    vt__snapshot_free(s);
}

TEST(timeline_curves_start_at_before_window_bytes)
{
    vt__snapshot_data *s = gen_small();
    vt__timeline *tl;
    ASSERT(vt__timeline_build(s, &tl, err, sizeof err) == 0);
    ASSERT_EQ(tl->ndevices, 2);
    const vt__tl_device *d0 = vt__timeline_device(tl, 0), *d1 = vt__timeline_device(tl, 1);
    ASSERT(d0 && d1 && !vt__timeline_device(tl, 5));
    ASSERT_EQ(d0->initial_allocated, 9 * MiB);
    ASSERT_EQ(d0->initial_reserved, 20 * MiB);
    ASSERT_EQ(d0->peak_allocated, 13 * MiB);
    ASSERT_EQ(d0->points[d0->peak_allocated_point].seq, 18);
    ASSERT_EQ(d0->final_allocated, 12 * MiB);
    ASSERT_EQ(d0->peak_reserved, 22 * MiB);
    ASSERT_EQ(d0->final_reserved, 20 * MiB);
    /* points: initial, free@10, alloc@13, alloc@18, free@19, seg@23, seg@24 */
    ASSERT_EQ(d0->npoints, 7);
    ASSERT_EQ(d0->points[0].event, VT_TL_NONE);
    ASSERT_EQ(d0->points[1].allocated, 8 * MiB);
    ASSERT_EQ(d1->initial_allocated, 0);
    ASSERT_EQ(d1->peak_allocated, 512 * 1024);
    ASSERT_EQ(d1->final_allocated, 0);          /* the program freed it ... */
    ASSERT_EQ(d1->final_pending, 512 * 1024);   /* ... and it waits for its stream */
    ASSERT_EQ(d1->peak_active, 512 * 1024);
    ASSERT_EQ(d1->final_reserved, 2 * MiB);
    ASSERT_EQ(d0->final_pending, 0);
    vt__timeline_free(tl);
    vt__snapshot_free(s);
}

TEST(timeline_pending_free_released_at_completion_and_lost_frees)
{
    struct snap_builder g = gen_begin();
    vt__event *e;
    e = gen_ev(&g, VT_EV_ALLOC, 1, 10); e->addr = 0x1000; e->size = 100;
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 2, 20); e->addr = 0x1000; e->size = 100; e->aux = 1;
    e = gen_ev(&g, VT_EV_ALLOC, 3, 30); e->addr = 0x2000; e->size = 50;
    e = gen_ev(&g, VT_EV_FREE_COMPLETED, 4, 40); e->addr = 0x1000; e->size = 100;
    /* 0x2000 allocated again without a recorded free */
    e = gen_ev(&g, VT_EV_ALLOC, 5, 50); e->addr = 0x2000; e->size = 70;
    /* plain free followed by a FREE_COMPLETED: linked, no double count */
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 6, 60); e->addr = 0x2000; e->size = 70;
    e = gen_ev(&g, VT_EV_FREE_COMPLETED, 7, 70); e->addr = 0x2000; e->size = 70;
    vt__timeline *tl;
    ASSERT(vt__timeline_build(g.s, &tl, err, sizeof err) == 0);
    ASSERT_EQ(tl->nlifetimes, 3);
    const vt__lifetime *a = at_addr(tl, 0x1000, 0);
    ASSERT_EQ(a->release_seq, 2);               /* allocated until the program frees */
    ASSERT_EQ(a->complete_event, 3);
    ASSERT_EQ(a->reusable_event, 3);            /* pending until its completion */
    ASSERT_EQ(a->flags, 0);
    const vt__lifetime *lost = at_addr(tl, 0x2000, 0);
    ASSERT_EQ(lost->flags, VT_LT_FREE_LOST);
    ASSERT_EQ(lost->release_seq, 5);
    const vt__lifetime *c = at_addr(tl, 0x2000, 1);
    ASSERT_EQ(c->release_seq, 6);
    ASSERT_EQ(c->complete_event, 6);
    const vt__tl_device *d = vt__timeline_device(tl, 0);
    /* after seq 1, 2 (pending), 3, 4 (completed), 5 (+70 -50), 6 */
    uint64_t want[] = { 0, 100, 0, 50, 50, 70, 0 };
    uint64_t want_pending[] = { 0, 0, 100, 100, 0, 0, 0 };
    ASSERT_EQ(d->npoints, 7);
    for (int i = 0; i < 7; i++) {
        ASSERT_EQ(d->points[i].allocated, want[i]);
        ASSERT_EQ(d->points[i].pending, want_pending[i]);
    }
    ASSERT_EQ(d->peak_allocated, 100);
    ASSERT_EQ(d->peak_active, 150);             /* 50 allocated + 100 pending */
    ASSERT_EQ(d->final_pending, 0);
    /* find: by interior address, at a point in time */
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x1000 + 99, 0), a);
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x1000 + 100, 0), NULL);
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x1000, 1), NULL);     /* freed at event 1 */
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x1000, 2), NULL);     /* pending is not allocated */
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x2000 + 60, 4), c);
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x2000 + 10, 3), lost);
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0x2000, VT_TL_NONE), NULL);
    vt__timeline_free(tl);
    vt__snapshot_free(g.s);
}

/* A live snapshot under load: writers lapped the ring copy, so seqs 3..9 are
 * missing. A and B were allocated before the gap and not freed after it; C
 * after it; D freed after it, its ALLOC lost in it. */
static struct snap_builder gapped(void)
{
    struct snap_builder g = gen_begin();
    vt__event *e;
    e = gen_ev(&g, VT_EV_ALLOC, 1, 10); e->addr = 0x1000; e->size = 100;
    e = gen_ev(&g, VT_EV_ALLOC, 2, 20); e->addr = 0x2000; e->size = 200;
    e = gen_ev(&g, VT_EV_ALLOC, 10, 100); e->addr = 0x3000; e->size = 300;
    e = gen_ev(&g, VT_EV_FREE_REQUESTED, 11, 110); e->addr = 0x4000; e->size = 50;
    e = gen_ev(&g, VT_EV_MARK, 12, 120); e->device = -1;
    return g;
}

TEST(timeline_lifetime_crossing_a_gap_without_state_is_never_alive)
{
    struct snap_builder g = gapped();
    vt__timeline *tl;
    ASSERT(vt__timeline_build(g.s, &tl, err, sizeof err) == 0);
    ASSERT_EQ(tl->state_complete, 0);
    ASSERT_EQ(tl->ngaps, 1);
    ASSERT_EQ(tl->events_missing, 7);
    const vt__lifetime *a = at_addr(tl, 0x1000, 0), *b = at_addr(tl, 0x2000, 0);
    const vt__lifetime *c = at_addr(tl, 0x3000, 0), *d = at_addr(tl, 0x4000, 0);
    /* A and B: fate unknown, never alive; they stop counting at the gap */
    ASSERT_EQ(a->flags, VT_LT_FREE_UNSEEN);
    ASSERT_EQ(b->flags, VT_LT_FREE_UNSEEN);
    ASSERT_EQ(a->release_event, 2);
    ASSERT_EQ(c->flags, VT_LT_ALIVE);
    /* D: allocated in the gap, counted from it, not from before the window */
    ASSERT_EQ(d->flags, VT_LT_BEFORE_WINDOW);
    ASSERT_EQ(d->start_event, 2);
    ASSERT_EQ(tl->nfree_unseen, 2);
    const vt__tl_device *dv = vt__timeline_device(tl, 0);
    ASSERT_EQ(dv->initial_allocated, 0);
    uint64_t want[] = { 0, 100, 300, 350, 300 };   /* -A -B +C +D at the gap, -D */
    ASSERT_EQ(dv->npoints, 5);
    for (int i = 0; i < 5; i++)
        ASSERT_EQ(dv->points[i].allocated, want[i]);
    ASSERT_EQ(dv->peak_allocated, 350);
    vt__timeline_free(tl);
    vt__snapshot_free(g.s);
}

TEST(timeline_alive_set_agrees_with_a_complete_allocator_state)
{
    /* The allocator state at the snapshot holds A (alloc seq 1), C (seq 10)
     * and F (seq 15, allocated after the ring was copied); B is gone. */
    struct snap_builder g = gapped();
    g.s->meta.flags = VT_META_STATE_COMPLETE;
    gen_segment_holding(&g, 0x1000, 100, 1);
    gen_segment_holding(&g, 0x3000, 300, 10);
    gen_segment_holding(&g, 0x6000, 0x1000, 15);
    vt__timeline *tl;
    ASSERT(vt__timeline_build(g.s, &tl, err, sizeof err) == 0);
    ASSERT_EQ(tl->state_complete, 1);
    ASSERT_EQ(at_addr(tl, 0x1000, 0)->flags, VT_LT_ALIVE);   /* confirmed across the gap */
    ASSERT_EQ(at_addr(tl, 0x2000, 0)->flags, VT_LT_FREE_UNSEEN);
    ASSERT_EQ(at_addr(tl, 0x3000, 0)->flags, VT_LT_ALIVE);
    const vt__lifetime *f = at_addr(tl, 0x6000, 0);
    ASSERT_EQ(f->flags, VT_LT_ALIVE | VT_LT_FROM_STATE | VT_LT_AFTER_WINDOW);
    ASSERT_EQ(vt__lifetime_allocated_at(f, 4), 0);            /* in no curve */
    /* what is alive is exactly the state's active blocks */
    uint64_t alive = 0, nalive = 0, state = 0, nstate = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        if (tl->lifetimes[i].flags & VT_LT_ALIVE) {
            alive += tl->lifetimes[i].size;
            nalive++;
        }
    for (size_t i = 0; i < g.s->nblocks; i++)
        if (g.s->blocks[i].state == VT_BLOCK_ACTIVE_ALLOCATED) {
            state += g.s->blocks[i].size;
            nstate++;
        }
    ASSERT_EQ(nalive, nstate);
    ASSERT_EQ(alive, state);
    /* B stopped counting at the gap; A counts on */
    const vt__tl_device *dv = vt__timeline_device(tl, 0);
    ASSERT_EQ(dv->final_allocated, 100 + 300);
    vt__timeline_free(tl);
    vt__snapshot_free(g.s);
}

/* An observed framework allocator's run whose ring lost its first events:
 * the framework's segment lists the block it allocated before the window
 * (FRAMEWORK_STATE); it counts as allocated from the start, as its blocks
 * of the window do. vramtrace's own allocator's state block (a library's
 * cudaMalloc served from the cache) is outside the pool: reserved, never
 * allocated. */
TEST(timeline_of_an_observed_run_counts_the_frameworks_state_blocks_as_allocated)
{
    struct snap_builder g = gen_begin();
    g.s->meta.flags = VT_META_POOL_OBSERVED;
    vt__event *e = gen_ev(&g, VT_EV_ALLOC, 10, 100);
    e->addr = 0x401000;
    e->size = e->req_size = 0x1000;
    e->aux = VT_ALLOC_POOL_BLOCK;
    gen_segment(&g, 0x100000, 0x200000, 0, VT_POOL_LARGE, 0);       /* cuBLAS's, say */
    gen_block(&g, 0x200000, 0x200000, 0, 0, 0, VT_BLOCK_ACTIVE_ALLOCATED);
    gen_segment(&g, 0x400000, 0x200000, 0, VT_POOL_FRAMEWORK_SMALL, 0);
    gen_block(&g, 0x1000, 0x1000, 0, 2, 0, VT_BLOCK_ACTIVE_ALLOCATED);   /* seq 2: overwritten */
    gen_block(&g, 0x1000, 0x1000, 0, 10, 0, VT_BLOCK_ACTIVE_ALLOCATED);  /* the window's ALLOC */
    gen_block(&g, 0x1fe000, 0, 0, 0, 0, VT_BLOCK_INACTIVE);
    vt__timeline *tl;
    ASSERT_MSG(vt__timeline_build(g.s, &tl, err, sizeof err) == 0, "%s", err);
    const vt__lifetime *early = at_addr(tl, 0x400000, 0), *lib = at_addr(tl, 0x100000, 0);
    ASSERT_EQ(early->flags, VT_LT_ALIVE | VT_LT_FROM_STATE | VT_LT_BEFORE_WINDOW);
    ASSERT_EQ(early->alloc_seq, 2);
    ASSERT(lib->flags & VT_LT_OUTSIDE_POOL);
    ASSERT(!(at_addr(tl, 0x401000, 0)->flags & VT_LT_FROM_STATE));   /* the event's own */
    const vt__tl_device *d = vt__timeline_device(tl, 0);
    ASSERT_EQ(d->initial_allocated, 0x1000);
    ASSERT_EQ(d->final_allocated, 0x2000);
    ASSERT_EQ(d->final_reserved, 0x400000);
    for (size_t i = 0; i < tl->nsegments; i++)   /* the pools as the events name them */
        ASSERT(tl->segments[i].pool <= VT_POOL_UNCACHED);
    vt__timeline_free(tl);
    vt__snapshot_free(g.s);
}

/* Its speed is measured in tests/bench/bench_trace.c, not asserted here. */
TEST(timeline_of_one_million_events_is_consistent)
{
    vt__snapshot_data *s = gen_training(1000000, 5);
    vt__timeline *tl;
    ASSERT(vt__timeline_build(s, &tl, err, sizeof err) == 0);
    printf("timeline of %zu events: %zu lifetimes\n", s->nevents, tl->nlifetimes);
    ASSERT_EQ(tl->kind_counts[VT_EV_ALLOC] + tl->kind_counts[VT_EV_FREE_REQUESTED] > 0, 1);
    ASSERT_EQ(tl->ngaps, 0);
    ASSERT_EQ(tl->nfree_unseen, 0);
    /* every allocation freed within its step except the last step's tail */
    const vt__tl_device *d = vt__timeline_device(tl, 0);
    ASSERT(d->peak_allocated > 0 && d->peak_allocated <= d->peak_reserved);
    ASSERT_EQ(tl->kind_counts[VT_EV_MARK], tl->nmarks);
    vt__timeline_free(tl);
    vt__snapshot_free(s);
}

TEST(timeline_of_empty_snapshot)
{
    vt__snapshot_data *s = calloc(1, sizeof *s);
    vt__timeline *tl;
    ASSERT(vt__timeline_build(s, &tl, err, sizeof err) == 0);
    ASSERT_EQ(tl->nlifetimes, 0);
    ASSERT_EQ(tl->ndevices, 0);
    ASSERT_PTR_EQ(vt__timeline_find(tl, 0, 0), NULL);
    vt__timeline_free(tl);
    vt__snapshot_free(s);
}

TEST(free_completion_completes_the_newest_request_its_address_was_not_allocated_since)
{
    enum { N = VT__FREE_MATCH_NONE };
    static const struct {
        vt__event e;
        uint32_t completes;
    } ev[] = {
        { { .kind = VT_EV_ALLOC, .addr = 0x1000 }, N },
        { { .kind = VT_EV_FREE_REQUESTED, .addr = 0x1000, .aux = 1 }, N },
        { { .kind = VT_EV_FREE_REQUESTED, .addr = 0x2000, .aux = 1 }, N },
        { { .kind = VT_EV_FREE_COMPLETED, .addr = 0x1000 }, 1 },
        { { .kind = VT_EV_FREE_COMPLETED, .addr = 0x1000 }, N },  /* completed already */
        { { .kind = VT_EV_ALLOC, .addr = 0x2000 }, N },
        { { .kind = VT_EV_FREE_COMPLETED, .addr = 0x2000 }, N },  /* allocated again since */
        { { .kind = VT_EV_FREE_COMPLETED, .addr = 0x3000 }, N },  /* requested before the window */
        { { .kind = VT_EV_FREE_REQUESTED, .addr = 0x2000 }, N },
        { { .kind = VT_EV_FREE_REQUESTED, .addr = 0x2000 }, N },
        { { .kind = VT_EV_FREE_COMPLETED, .addr = 0x2000 }, 9 },  /* the newest */
    };
    vt__free_match m;
    ASSERT_EQ(vt__free_match_init(&m), 0);
    for (uint32_t i = 0; i < sizeof ev / sizeof ev[0]; i++) {
        uint32_t request;
        ASSERT_EQ(vt__free_match_event(&m, &ev[i].e, i, &request), 0);
        ASSERT_MSG(request == ev[i].completes, "event %u completes %u, not %u", i, request,
                   ev[i].completes);
    }
    vt__free_match_free(&m);
}

TEST_MAIN()
