/* tests/check/test_check_growth_time.c - GROWTH by time (check_growth.c):
 * an observed PyTorch pool's trace without marks (an evaluation) cut into
 * windows; a call site whose blocks pile up through the loop is flagged
 * even when the program frees them all before it ends (a function's
 * locals), with the same finding whether pass 1 retired its storages or
 * kept every record; a site allocating and freeing each iteration is not,
 * nor one buffer made again larger (a KV cache); a trace that is no observed
 * pool does not run it, nor a cache filled and emptied per request whose
 * live bytes at the window ends rise by their phase. With the tensors recorded (`run --track` of a
 * program that makes no optimizer step), a graph kept across batches, used
 * again by every backward, grows by time and its finding names what holds
 * it; results collected untouched for the end only when growth is asked. */
#include "check_fixture.h"
#include "format_bytes.h"

#define ITERS 40
#define KEPT_ADDR 0x7f6000000000ull

static uint32_t st_setup, st_batch, st_kept;

/* Weights at the start; ITERS iterations of 50 ms, each a batch allocated
 * and freed, and an output of kept_bytes kept (0: none); the kept ones all
 * freed at the end (returned), and 5 ms more. */
static void eval_loop_keeping(synth *y, uint64_t kept_bytes, int observed)
{
    int kept = kept_bytes != 0;
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
            synth_alloc(y, KEPT_ADDR + (uint64_t)i * 0x1000000, kept_bytes, st_kept);
        synth_free(y, 0x7f1000000000ull);
    }
    synth_tick(y, 1000000);
    for (int i = 0; kept && i < ITERS; i++)
        synth_free(y, KEPT_ADDR + (uint64_t)i * 0x1000000);
    synth_tick(y, 5000000);
}

/* The same, a 1 MiB output kept an iteration (kept) or none. */
static void eval_loop(synth *y, int kept, int observed)
{
    eval_loop_keeping(y, kept ? MiB : 0, observed);
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
        const vt__check_finding *f = only_finding_of(r[k], VT_CHECK_RULE_GROWTH);
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

/* A 4-byte output kept an iteration holds a 512-byte block of the cache:
 * the growth's blocks (block_bytes, what the floor of minor findings
 * weighs) are its storages' blocks alive at the last judged window's end
 * less those at the first, the same whether pass 1 retired the storages
 * (their sites' sums) or kept every record. */
TEST(a_growth_of_small_outputs_by_time_counts_their_blocks)
{
    synth y;
    eval_loop_keeping(&y, 4, 1);
    vt__check_report *r[2] = { check_keep(&y, 0), check_keep(&y, 1) };
    for (int k = 0; k < 2; k++) {
        const vt__check_finding *f = only_finding_of(r[k], VT_CHECK_RULE_GROWTH);
        uint64_t grew = (f->growth_last_bytes - f->growth_first_bytes) / 4;
        ASSERT(grew >= 20);
        ASSERT_EQ(f->bytes, 4 * grew);
        ASSERT_EQ(f->block_bytes, 512 * grew);
    }
    assert_rendered_says(r[0], &y, 0, " (blocks ");
    vt__check_report_free(r[0]);
    vt__check_report_free(r[1]);
    synth_fini(&y);
}

/* y, made by its shape, judged by both rules by time and clean. */
static void assert_clean_by_time(synth *y)
{
    vt__check_report *r = check_keep(y, 0);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
    assert_report_clean(r, y);
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

/* Requests of 100 ms, each filling a cache one block every 6.25 ms (16
 * blocks of 64 KiB) and emptying it at its end, over 21 requests: the 20
 * windows of the trace are 105 ms, so each window's end falls 5 ms later
 * into its request than the one before, and the cache's live bytes at the
 * window ends rise through the run (hf_decode.py's fixed twin under plain
 * `run`, once under load: 648 to 848 KiB). No block lives past its
 * request: no growth. With one block of each request kept to the end of
 * the loop (`keep`), they pile up: growth. */
static void requests(synth *y, int keep)
{
    synth_init(y);
    st_setup = synth_stack(y, "load_weights", "main", NULL);
    st_kept = synth_stack(y, "cache_update", "decode", "main", NULL);
    y->s.meta.flags |= VT_META_POOL_OBSERVED;
    synth_alloc(y, W_ADDR, 8 * MiB, st_setup);
    for (uint64_t r = 0; r < 21; r++) {
        uint64_t base = KEPT_ADDR + r * 0x1000000;
        for (uint64_t k = 0; k < 16; k++) {
            synth_tick(y, 6250000);
            synth_alloc(y, base + k * 0x10000, 64 * 1024, st_kept);
        }
        for (uint64_t k = keep ? 1 : 0; k < 16; k++)
            synth_free(y, base + k * 0x10000);
    }
    synth_tick(y, 1000000);
    for (uint64_t r = 0; keep && r < 21; r++)   /* the kept ones let go at the end */
        synth_free(y, KEPT_ADDR + r * 0x1000000);
    synth_tick(y, 5000000);
}

TEST(a_cache_filled_and_emptied_per_request_is_no_growth_at_drifting_window_ends)
{
    for (int keep_records = 0; keep_records <= 1; keep_records++) {
        synth y;
        requests(&y, 0);
        vt__check_report *r = check_keep(&y, keep_records);
        ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
        assert_report_clean(r, &y);
        requests(&y, 1);
        r = check_keep(&y, keep_records);
        size_t growth = findings_of(r, VT_CHECK_RULE_GROWTH);
        ASSERT_MSG(growth == 1, "keep_records %d: %zu growth findings", keep_records, growth);
        vt__check_report_free(r);
        synth_fini(&y);
    }
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
    assert_report_clean(r, &y);
}

/* Truncated BPTT with the hidden state never detached and every backward
 * told to retain the graph (pytorch/examples' word_language_model without
 * repackage_hidden, "fixed" with retain_graph=True): each batch's saved
 * activation stays in a graph the hidden state keeps, and every backward
 * goes through the whole graph, using each of them again. Nothing lingers;
 * the line's live bytes grow batch after batch. No optimizer: no marks.
 * `kind`: TBPTT_KEPT the graph kept to the end, TBPTT_FREED_AT_END let go
 * at the end (an epoch's end made the hidden state again), TBPTT_FIXED each
 * batch's activation freed with its batch (the hidden state detached),
 * TBPTT_COLLECTED not a graph: each batch's result kept in a list,
 * untouched until the end (for a torch.cat). `exit_ns`: the time from the
 * end of the loop's work to the trace's end (the program's exit). */
enum { TBPTT_KEPT, TBPTT_FREED_AT_END, TBPTT_FIXED, TBPTT_COLLECTED };

static void tbptt(synth *y, int kind, uint64_t exit_ns)
{
    synth_init(y);
    stacks(y);
    y->s.meta.flags |= VT_META_POOL_OBSERVED;
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "cell.weight_hh", st_init);
    /* module __main__.hidden → .grad_fn → the graph's node saving each
     * batch's activation (or module __main__.kept, a list of results) */
    synth_new_tensor(y, 9100, 0x7f7000000000ull, 4096, "hidden", st_init);
    synth_holder(y, 9000, "module __main__");
    synth_holder(y, 9001, kind == TBPTT_COLLECTED ? "list" : "AddmmBackward0");
    if (kind == TBPTT_COLLECTED) {
        synth_ref(y, 9000, 9001, ".kept");
    } else {
        synth_ref(y, 9000, 9100, ".hidden");
        synth_ref(y, 9100, 9001, ".grad_fn");
    }
    for (int i = 0; i < ITERS; i++) {
        synth_tick(y, 50000000);
        uint64_t t = 9101 + (uint64_t)i;
        synth_new_tensor(y, t, KEPT_ADDR + (uint64_t)i * 0x1000000, MiB,
                         "hidden = cell(x, hidden) (tbptt.py:22, aten.tanh out[0])", st_act);
        synth_use(y, t);
        synth_alloc(y, 0x7f1000000000ull, 2 * MiB, st_fwd);   /* the batch's temporaries */
        synth_free(y, 0x7f1000000000ull);
        synth_use(y, W_ID);
        synth_use(y, 9100);
        if (kind == TBPTT_FIXED) {
            synth_drop(y, t);
            synth_free(y, KEPT_ADDR + (uint64_t)i * 0x1000000);
            continue;
        }
        char label[48];
        snprintf(label, sizeof label, kind == TBPTT_COLLECTED ? "[%d]"
                                                            : "SavedTensor 'mat1' of step %d", i);
        synth_ref(y, 9001, t, label);
        for (int k = 0; kind != TBPTT_COLLECTED && k <= i; k++)   /* the backward, through all */
            synth_use(y, 9101 + (uint64_t)k);
    }
    synth_tick(y, 1000000);
    for (int i = 0; kind == TBPTT_COLLECTED && i < ITERS; i++)   /* torch.cat(kept) */
        synth_use(y, 9101 + (uint64_t)i);
    for (int i = 0; kind == TBPTT_FREED_AT_END && i < ITERS; i++)
        synth_free(y, KEPT_ADDR + (uint64_t)i * 0x1000000);
    synth_tick(y, exit_ns);
    /* the exit's last event: a temporary of its teardown */
    synth_alloc(y, 0x7f1000000000ull, 4096, st_fwd);
    synth_free(y, 0x7f1000000000ull);
}

static vt__check_report *check_asking_growth(synth *y)
{
    return check_rules(y, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_GROWTH);
}

TEST(a_graph_kept_across_batches_grows_by_time_under_track_and_names_its_holder)
{
    for (int kind = TBPTT_KEPT; kind <= TBPTT_FREED_AT_END; kind++) {
        synth y;
        tbptt(&y, kind, 5000000);
        vt__check_report *r = check_keep(&y, 0);
        ASSERT(r->rules_run & VT_CHECK_RULE_GROWTH);
        ASSERT_EQ(r->rules_need_steps, 0);
        const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_GROWTH);
        ASSERT_EQ(f->alloc_stack, st_act);
        ASSERT(f->growth_window_ns > 0);
        ASSERT(f->nallocs >= 30 && f->nallocs <= ITERS);
        /* its largest storage alive at the last judged end, with a tensor,
         * stands for it, and its holders are looked up while it was */
        ASSERT(f->npaths >= 1);
        assert_rendered_says(r, &y, 0, kind == TBPTT_FREED_AT_END
                                           ? "held by (at the last window end judged):"
                                           : "held by (at the end):");
        assert_rendered_says(r, &y, 0, "AddmmBackward0.SavedTensor 'mat1' of step");
        vt__check_report_free(r);
        synth_fini(&y);
    }
}

/* y, a tracked trace, judged by growth by time among the automatic rules,
 * and clean. */
static void assert_clean_with_growth_by_time(synth *y)
{
    vt__check_report *r = check_keep(y, 0);
    ASSERT(r->rules_run & VT_CHECK_RULE_GROWTH);
    ASSERT_CLEAN(r, y);
    vt__check_report_free(r);
}

TEST(a_graph_let_go_with_each_batch_is_clean_by_time_under_track)
{
    synth y;
    tbptt(&y, TBPTT_FIXED, 5000000);
    assert_clean_with_growth_by_time(&y);
    synth_fini(&y);
}

/* Results collected untouched for the program's end (a list for a
 * torch.cat after the loop) grow as much, but are no leak: not flagged by
 * the automatic choice; growth asked for by name flags them. */
TEST(results_collected_for_the_end_grow_by_time_only_when_growth_is_asked)
{
    synth y;
    tbptt(&y, TBPTT_COLLECTED, 5000000);
    assert_clean_with_growth_by_time(&y);
    vt__check_report *r = check_asking_growth(&y);
    only_finding_of(r, VT_CHECK_RULE_GROWTH);
    assert_rendered_says(r, &y, 0, "module __main__.kept \xe2\x86\x92 list[");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The same results with an exit that takes two and a half windows (the
 * trace 2 s, windows of 100 ms, the exit 250 ms: a process's teardown
 * under load): the torch.cat after the loop falls in a window before the
 * last, where the list no longer grows. A use once the growth has stopped
 * is not a use while growing (tests/torch/kept_cls.py's fixed twin was
 * flagged so when its exit took a window longer than usual). */
TEST(results_collected_for_the_end_are_clean_however_long_the_exit_takes)
{
    synth y;
    tbptt(&y, TBPTT_COLLECTED, 250000000);
    assert_clean_with_growth_by_time(&y);
    synth_fini(&y);
}

/* Asked for by name where it cannot run (no marks, no observed pool), the
 * report says growth needs steps, and offers --rules only for what runs
 * on time when named. */
TEST(growth_asked_where_it_cannot_run_is_not_offered_by_name)
{
    synth y;
    eval_loop(&y, 1, 0);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->rules_need_steps, VT_CHECK_RULE_GROWTH);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "growth judges step by step: not run."), "%s", text);
    ASSERT_MSG(!strstr(text, "with --rules to judge by time"), "%s", text);
    free(text);
    vt__check_report_free(r);
    r = check_keep(&y, 0);   /* the automatic choice: both offered by name */
    assert_rendered_says(r, &y, 0, "or name never-freed,outlier with --rules to judge by time");
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
