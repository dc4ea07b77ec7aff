/* tests/check/test_check_growth_time.c - GROWTH by time (check_growth.c):
 * an observed PyTorch pool's trace without marks (an evaluation) cut into
 * windows; a call site whose blocks pile up through the loop is flagged
 * even when the program frees them all before it ends (a function's
 * locals), with the same finding whether pass 1 retired its storages or
 * kept every record; a site allocating and freeing each iteration is not,
 * nor one buffer made again larger (a KV cache); a trace that is no observed
 * pool does not run it. */
#include "check_fixture.h"
#include "format_bytes.h"

#define ITERS 40
#define KEPT_ADDR 0x7f6000000000ull

static uint32_t st_setup, st_batch, st_kept;

/* Weights at the start; ITERS iterations of 50 ms, each a batch allocated
 * and freed, and (kept) a 1 MiB output kept; the kept ones all freed at the
 * end (returned), and 5 ms more. */
static void eval_loop(synth *y, int kept, int observed)
{
    synth_init(y);
    st_setup = synth_stack(y, "load_weights", "main", NULL);
    st_batch = synth_stack(y, "make_batch", "evaluate", "main", NULL);
    st_kept = synth_stack(y, "forward", "evaluate", "main", NULL);
    if (observed)
        y->s.meta.flags |= VT_META_POOL_OBSERVED;
    synth_alloc(y, W_ADDR, 8 * MiB, st_setup);
    for (int i = 0; i < ITERS; i++) {
        synth_tick(y, 50000000);
        synth_alloc(y, 0x7f1000000000ull, 2 * MiB, st_batch);
        if (kept)
            synth_alloc(y, KEPT_ADDR + (uint64_t)i * 0x1000000, MiB, st_kept);
        synth_free(y, 0x7f1000000000ull);
    }
    synth_tick(y, 1000000);
    for (int i = 0; kept && i < ITERS; i++)
        synth_free(y, KEPT_ADDR + (uint64_t)i * 0x1000000);
    synth_tick(y, 5000000);
}

/* The same evaluation, but a cache made again larger every iteration
 * (one more MiB, the old one freed) instead of outputs kept. */
static void cache_loop(synth *y)
{
    synth_init(y);
    st_setup = synth_stack(y, "load_weights", "main", NULL);
    st_kept = synth_stack(y, "grow_cache", "generate", "main", NULL);
    y->s.meta.flags |= VT_META_POOL_OBSERVED;
    synth_alloc(y, W_ADDR, 8 * MiB, st_setup);
    for (int i = 1; i <= ITERS; i++) {
        synth_tick(y, 50000000);
        synth_alloc(y, KEPT_ADDR + (uint64_t)i * 0x10000000, (uint64_t)i * MiB, st_kept);
        if (i > 1)
            synth_free(y, KEPT_ADDR + (uint64_t)(i - 1) * 0x10000000);
    }
    synth_tick(y, 5000000);
}

static vt__check_report *check_keep(synth *y, int keep_records)
{
    vt__check_options o = default_options();
    o.keep_records = keep_records;
    return check(y, &o);
}

TEST(outputs_kept_through_an_evaluation_grow_by_time_though_freed_at_its_end)
{
    synth y;
    eval_loop(&y, 1, 1);
    vt__check_report *r[2] = { check_keep(&y, 0), check_keep(&y, 1) };
    for (int k = 0; k < 2; k++) {
        ASSERT_EQ(r[k]->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
        const vt__check_finding *f = only_finding(r[k]);
        ASSERT_EQ(f->rule, VT_CHECK_RULE_GROWTH);
        ASSERT_EQ(f->alloc_stack, st_kept);
        ASSERT_EQ(f->addr, KEPT_ADDR);            /* the site's first storage */
        ASSERT(f->growth_window_ns > 0);
        /* about 2 MiB a window (20 windows of the trace: 2 iterations each) */
        ASSERT(f->growth_per_step >= 2 * MiB - MiB / 2 && f->growth_per_step <= 2 * MiB + MiB / 2);
        ASSERT(f->nallocs >= 30 && f->nallocs <= ITERS);
        ASSERT_EQ(f->growth_last_bytes, (uint64_t)f->nallocs * MiB);
        ASSERT_EQ(f->freed, 1);
    }
    /* retired or kept, the same finding */
    ASSERT_EQ(r[0]->findings[0].nallocs, r[1]->findings[0].nallocs);
    ASSERT_EQ(r[0]->findings[0].growth_first_mark, r[1]->findings[0].growth_first_mark);
    ASSERT_EQ(r[0]->findings[0].growth_last_mark, r[1]->findings[0].growth_last_mark);
    ASSERT_EQ(r[0]->findings[0].bytes, r[1]->findings[0].bytes);
    ASSERT_EQ(r[0]->findings[0].alloc_seq, r[1]->findings[0].alloc_seq);
    /* 20 windows of its events' span (2.16 s: 1 ms an event besides the
     * ticks; the end of the trace is the snapshot, 5 ms later) */
    const vt__check_finding *f = &r[0]->findings[0];
    ASSERT(f->growth_window_ns > 100000000 &&
           f->growth_window_ns < (r[0]->end_time_ns - r[0]->start_time_ns) / 20);
    char want[256];
    assert_rendered_says(r[0], &y, 0, "#1 [growth] storage 0x7f6000000000 on cuda:0");
    char win[VT_FMT_BYTES_LEN];
    snprintf(want, sizeof want, "(no marks: judged at the ends of %s windows of the trace, "
             "the first %u not judged: warm-up)", vt__fmt_duration(f->growth_window_ns, win),
             f->growth_first_mark);
    assert_rendered_says(r[0], &y, 0, want);
    snprintf(want, sizeof want, "\"window_ns\":%llu}", (unsigned long long)f->growth_window_ns);
    assert_rendered_says(r[0], &y, 1, want);
    vt__check_report_free(r[0]);
    vt__check_report_free(r[1]);
    synth_fini(&y);
}

/* y, made by its shape, judged by both rules by time and clean. */
static void assert_clean_by_time(synth *y)
{
    vt__check_report *r = check_keep(y, 0);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
    ASSERT_CLEAN(r, y);
    vt__check_report_free(r);
    synth_fini(y);
}

TEST(an_evaluation_that_keeps_nothing_is_clean_by_time)
{
    synth y;
    eval_loop(&y, 0, 1);
    assert_clean_by_time(&y);
}

/* Inference growing a cache by torch.cat (a generation's KV cache): one
 * buffer made again larger every iteration, the old one freed. Without
 * steps that is what the program does, not storages piling up: clean. */
TEST(a_buffer_made_again_larger_is_no_growth_by_time)
{
    synth y;
    cache_loop(&y);
    assert_clean_by_time(&y);
}

/* Not an observed pool (a native program of its own): no growth by time,
 * the rules that need steps say so. */
TEST(growth_by_time_is_for_an_observed_pool_only)
{
    synth y;
    eval_loop(&y, 1, 0);
    vt__check_report *r = check_keep(&y, 0);
    ASSERT_EQ(r->rules_run, 0);
    ASSERT_EQ(r->rules_need_steps, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(r->nfindings, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
