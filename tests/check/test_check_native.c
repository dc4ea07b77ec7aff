/* tests/check/test_check_native.c - the native rules (check_native.c:
 * never-freed, outlier) on traces without tensor annotations. */
#include "check_fixture.h"
#include "check_shapes.h"

/* ------------------------------------------------------------------------ */
/*  Native traces (no tensor annotations)                                   */
/* ------------------------------------------------------------------------ */

TEST(native_never_freed_call_site_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape(&y, native, NATIVE_OUTLIER_FIXED);
    ASSERT_EQ(r->rules_run,
              VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER | VT_CHECK_RULE_GROWTH);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    ASSERT_EQ(f->nallocs, 5);    /* steps 1..5; step 6 is after the last mark */
    ASSERT_EQ(f->bytes, 5 * MiB);
    ASSERT_EQ(f->freed, 0);
    ASSERT_EQ(f->npaths, 0);
    const vt__frame *fr = &y.s.frames[y.s.stack_nodes[f->alloc_stack].frame];
    ASSERT_STR_EQ(y.s.strings_blob + y.s.string_offsets[fr->function], "append_history");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* y's run with `nold` more allocations of the leaking line made before
 * its window (the ring overwrote them), still alive. */
static void lost_start(synth *y, int fixed, int nold)
{
    native(y, fixed);
    uint32_t leak_stack = 0;
    for (size_t i = 0; i < y->s.nevents; i++)
        if (y->s.events[i].kind == VT_EV_ALLOC
            && y->s.events[i].addr == 0x7fc000000000ull + 0x1000000)   /* step 1's kept one */
            leak_stack = y->s.events[i].stack;
    ASSERT(leak_stack != 0);
    synth_lost_start(y, leak_stack, nold, 0x7fa000000000ull, MiB);
}

TEST(native_finding_counts_its_lines_allocations_from_before_the_window)
{
    /* the window decides (steps 1..5 keep 1 MiB each); the 20 kept before
     * it, still alive, are the same leak and counted with it */
    synth y;
    lost_start(&y, NATIVE_OUTLIER_FIXED, 20);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    ASSERT_EQ(f->nallocs, 25);
    ASSERT_EQ(f->nbefore_window, 20);
    ASSERT_EQ(f->bytes, 25 * MiB);
    ASSERT_EQ(f->before_window, 0);          /* the one shown is the window's */
    ASSERT(f->alloc_seq != 0);
    assert_text_and_json_say(r, &y,
                             "25 MiB in 25 allocations (20 made before the window, still alive)",
                             "\"allocations\":25,\"allocations_before_window\":20");
    vt__check_report_free(r);
    synth_fini(&y);
    /* a line whose allocations the window frees is not flagged by more
     * made before it than it frees in the window (kept then, on purpose or
     * not: the window cannot say which are the line's usual ones) */
    lost_start(&y, NATIVE_OUTLIER_FIXED | NATIVE_LEAK_FIXED, 20);
    assert_checks_clean(&y, NULL);
}

TEST(native_outliers_made_before_the_window_are_flagged_where_their_siblings_die_in_it)
{
    /* a run longer than the ring whose first steps kept what its later
     * ones free (a debugging list of the first outputs): the window frees
     * the line's allocations within their step, and 3 made before it are
     * alive at its end, having outlived every step of it; the whole
     * recording flags them as outliers, and so does the window. Before:
     * 0 findings under plain `vramtrace run` */
    synth y;
    lost_start(&y, NATIVE_OUTLIER_FIXED | NATIVE_LEAK_FIXED, 3);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(f->nallocs, 3);
    ASSERT_EQ(f->nbefore_window, 3);
    ASSERT_EQ(f->bytes, 3 * MiB);
    ASSERT_EQ(f->before_window, 1);
    ASSERT_EQ(f->freed, 0);
    uint64_t marks[2] = { 0, 0 };   /* judged from the window's first complete step */
    for (size_t i = 0, k = 0; i < y.s.nevents && k < 2; i++)
        if (y.s.events[i].kind == VT_EV_MARK)
            marks[k++] = y.s.events[i].seq;
    ASSERT(marks[1] != 0);
    ASSERT_EQ(f->linger_from_seq, marks[1]);
    assert_rendered_says(r, &y, 0, "3 MiB in 3 allocations (3 made before the window, "
                                   "still alive)");
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(native_outlier_call_site_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape(&y, native, NATIVE_LEAK_FIXED);
    const vt__check_finding *f = the_finding(r, 0x7fd000000000ull + 2 * 0x1000000, 3 * MiB);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(f->nallocs, 1);
    ASSERT_EQ(f->freed, 1);
    ASSERT_GT(f->linger_ns, 200000000);   /* about 3 steps of 100 ms */
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(native_rules_need_steps_and_say_so_without_marks)
{
    synth y;
    vt__check_report *r = check_shape(&y, native, NATIVE_NO_MARKS);
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->rules_run, 0);
    ASSERT_EQ(r->rules_need_steps, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER);
    assert_rendered_says(r, &y, 0, "NOTE: this trace has no steps (marks), and never-freed,outlier "
                                   "judge step by step: not run.");
    assert_text_and_json_say(r, &y, "rules: none;",
                             "\"rules_need_steps\":[\"never-freed\",\"outlier\"]");
    vt__check_report_free(r);
    /* named, they judge by time */
    r = check_rules(&y, VT_CHECK_RULE_NEVER_FREED);
    ASSERT_EQ(r->rules_need_steps, 0);
    only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Six steps; in each of the first five, stacks[k] (0-ended) allocates
 * (k + 1) MiB that is never freed, at an address of its own, except the
 * third, which allocates half a MiB. */
static void never_freed_per_step(synth *y, const uint32_t *stacks)
{
    for (int i = 1; i <= 6; i++) {
        synth_step_mark(y, i);
        for (int k = 0; i <= 5 && stacks[k]; k++)
            synth_alloc(y, 0x7fd000000000ull + (uint64_t)k * 0x1000000000ull +
                               (uint64_t)i * 0x1000000,
                        k == 2 ? MiB / 2 : (uint64_t)(k + 1) * MiB, stacks[k]);
    }
}

/* Without tensors a finding is known by its call site: two call sites that
 * never free are two causes (they were once one, "tensor '?'"), and a trace
 * of PyTorch's blocks says that holders need track(). */
TEST(native_findings_of_two_call_sites_are_two_causes)
{
    synth y;
    synth_init(&y);
    uint32_t keep_logits = synth_stack(&y, "keep_logits", "train_step", "main", NULL);
    uint32_t keep_grads = synth_stack(&y, "keep_grads", "train_step", "main", NULL);
    never_freed_per_step(&y, (uint32_t[]){ keep_logits, keep_grads, 0 });
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    uint32_t g[2];
    ASSERT_EQ(vt__check_report_groups(r, NULL, g), 2);
    ASSERT(g[0] != g[1]);
    char *text = render(r, &y, 0);
    ASSERT_MSG(!strstr(text, "cause"), "%s", text);     /* each its own: no groups list */
    ASSERT_MSG(!strstr(text, "tensor '?'"), "%s", text);
    ASSERT_MSG(!strstr(text, "run --track"), "%s", text);   /* not a PyTorch trace */
    free(text);
    y.s.meta.flags |= VT_META_POOL_OBSERVED;
    assert_rendered_says(r, &y, 0, "NOTE: PyTorch's blocks were seen, not its tensors: findings "
                                   "name where memory was allocated, not what holds it; "
                                   "`vramtrace run --track` records the tensors");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A trace of PyTorch's blocks (no tensors): one line of the program
 * (`logits = model(x)`) allocates at every layer's op, a call site of its own
 * in torch each, kept step after step: one cause, allocated under that line,
 * as track() names them all by it. Another line of the program is another
 * cause; native call sites with no program line stay one cause each (the
 * test above). */
TEST(native_findings_under_one_line_of_the_program_are_one_cause)
{
    synth y;
    synth_init(&y);
    static const char *const conv[] = { "/venv/lib/python3.11/site-packages/torch/nn/modules/conv.py",
                                        "/home/me/train.py", "/home/me/train.py" };
    static const char *const norm[] = { "/venv/lib/python3.11/site-packages/torch/nn/functional.py",
                                        "/home/me/train.py", "/home/me/train.py" };
    static const uint32_t model_line[] = { 560, 11, 30 }, batch_line[] = { 2904, 9, 30 };
    uint32_t st_conv = synth_stack(&y, "_conv_forward", "<module>", "main", NULL);
    uint32_t st_norm = synth_stack(&y, "batch_norm", "<module>", "main", NULL);
    uint32_t st_batch = synth_stack(&y, "batch_norm", "<module>", "main", NULL);
    as_python(&y, st_conv, conv, model_line);
    as_python(&y, st_norm, norm, model_line);
    as_python(&y, st_batch, norm, batch_line);
    never_freed_per_step(&y, (uint32_t[]){ st_conv, st_norm, st_batch, 0 });
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 3);
    uint32_t g[3];
    ASSERT_EQ(vt__check_report_groups(r, &y.s, g), 2);
    size_t conv_i = 3, norm_i = 3, batch_i = 3;
    for (size_t i = 0; i < 3; i++) {
        uint32_t st = r->findings[i].alloc_stack;
        *(st == st_conv ? &conv_i : st == st_norm ? &norm_i : &batch_i) = i;
    }
    ASSERT(conv_i < 3 && norm_i < 3 && batch_i < 3);
    ASSERT_EQ(g[conv_i], g[norm_i]);
    ASSERT(g[batch_i] != g[conv_i]);
    ASSERT_EQ(g[conv_i], 0);   /* the largest */
    ASSERT_EQ(vt__check_report_groups(r, NULL, g), 3);   /* without the stacks: by call site */
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "3 findings from 2 causes");
    ASSERT_STR_CONTAINS(text, "2 \xc3\x97 [never-freed] 15 MiB (7.5 MiB each on average)");
    ASSERT_STR_CONTAINS(text, "allocated at <module> (/home/me/train.py:11)");
    ASSERT_STR_CONTAINS(text, "allocated at <module> (/home/me/train.py:9)");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* In a report that lists causes, a finding no tensor names is shown by the
 * line that allocated it, not as a tensor without a name. */
TEST(native_findings_in_a_list_of_causes_are_shown_by_their_call_site)
{
    synth y;
    setup(&y);
    synth_holder(&y, 5, "history");
    uint32_t scratch = synth_stack(&y, "keep_scratch", "train_step", "main", NULL);
    for (int i = 1; i <= 6; i++) {
        step(&y, i);
        if (i > 4)
            continue;
        keep_logits(&y, i, 5);
        synth_alloc(&y, 0x7fe000000000ull + (uint64_t)i * 0x1000000, MiB, scratch);
    }
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_NEVER_FREED);
    /* four logits lingering, their call site never freeing, the scratch's */
    ASSERT_EQ(r->nfindings, 6);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "6 findings from 3 causes"), "%s", text);
    ASSERT_MSG(strstr(text, "     tensor 'logits'\n     held by: history"), "%s", text);
    ASSERT_MSG(strstr(text, "[never-freed] 4 MiB (4 MiB each on average), first #"), "%s", text);
    ASSERT_MSG(strstr(text, "     allocated at keep_scratch (train.c:10)\n"
                            "     held by: (no tensor recorded for it)\n"), "%s", text);
    ASSERT_MSG(!strstr(text, "tensor '?'"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A replay memory's blocks without tensors (plain `run`): each of 60 steps
 * allocates a transition at one line and frees the one 16 pushes older (a
 * deque with a capacity), besides a step's temporary. variant 1: every
 * fifth transition is also kept in a list, never freed. */
static void window_kept(synth *y, int variant)
{
    synth_init(y);
    uint32_t s_push = synth_stack(y, "observe", "main", NULL);
    uint32_t s_act = synth_stack(y, "activations", "train_step", "main", NULL);
    synth_alloc(y, W_ADDR, 4 * MiB, synth_stack(y, "init_weights", "main", NULL));
    for (int i = 1; i <= 60; i++) {
        synth_step_mark(y, i);
        uint64_t a = 0x7f1000000000ull + (uint64_t)i * 0x10000000ull;
        synth_alloc(y, a, 2 * MiB, s_act);
        synth_free(y, a);
        synth_alloc(y, 0x7fc000000000ull + (uint64_t)i * 0x100000ull, 64 * 1024, s_push);
        int old = i - 16;
        if (old >= 1 && !(variant && old % 5 == 0))
            synth_free(y, 0x7fc000000000ull + (uint64_t)old * 0x100000ull);
    }
}

TEST(a_call_site_keeping_a_window_of_its_blocks_is_not_never_freed)
{
    /* The transitions alive at the end are the 16 youngest, each freed once
     * 16 younger ones come, as 44 were (plain run on the DQN tutorial with a
     * full memory: "never freed, allocated step after step") */
    assert_shape_is_clean(window_kept, 0);
}

TEST(a_window_that_also_keeps_some_of_its_blocks_is_never_freed)
{
    synth y;
    vt__check_report *r = check_shape(&y, window_kept, 1);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    /* 8 kept (5, 10, .. 40: every fifth evicted) and the window's 16 but
     * step 60's, made after the last mark */
    ASSERT_EQ(f->nallocs, 8 + 15);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The same memory in a window shorter than its turnover: a ring that
 * overwrote the run's start, 24 steps of a memory of 32. Each step
 * allocates a transition and frees the oldest, all of them made before the
 * window: the site frees none of its own in it. The free names the block's
 * allocation stack (format 1.12) unless `variant & WINDOW_OLD_FILE`;
 * `variant & WINDOW_LEAK`: the old ones are kept (a list besides), never
 * freed; `variant & WINDOW_EDGE`: the memory's last four old transitions
 * were made at another line (an episode's first state), so the site's last
 * eviction is four steps before the end. */
enum { WINDOW_OLD_FILE = 1, WINDOW_LEAK = 2, WINDOW_EDGE = 4 };

static void window_short(synth *y, int variant)
{
    synth_init(y);
    uint32_t s_push = synth_stack(y, "observe", "main", NULL);
    uint32_t s_reset = synth_stack(y, "observe", "reset", "main", NULL);
    uint32_t s_evict = synth_stack(y, "push", "main", NULL);
    const uint64_t old = 0x7fa000000000ull, fresh = 0x7fc000000000ull, size = 64 * 1024;
    for (int i = 1; i <= 24; i++) {
        synth_step_mark(y, i);
        synth_alloc(y, fresh + (uint64_t)i * 0x100000ull, size, s_push);
        int other = variant & WINDOW_EDGE && i > 20;
        if (!(variant & WINDOW_LEAK))
            SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = old + (uint64_t)i * 0x100000ull,
                     .size = size, .stack = s_evict,
                     .aux2 = variant & WINDOW_OLD_FILE ? 0 : other ? s_reset : s_push);
    }
    /* alive at the end: the window's and the 8 old ones not evicted (all
     * 32 where nothing was) */
    synth_lost_start(y, s_push, variant & WINDOW_LEAK ? 32 : 8,
                     variant & WINDOW_LEAK ? old + 0x100000ull : old + 25 * 0x100000ull, size);
}

TEST(a_window_shorter_than_a_memorys_turnover_is_not_never_freed_where_frees_name_the_site)
{
    /* every transition the window made is alive at the end, but the site
     * frees those made before the window, 24 of them, the oldest after
     * living the whole window: a window of them is kept (dqn_replay.py in a
     * ring of 1 MiB under plain run: 520 KiB never freed) */
    assert_shape_is_clean(window_short, 0);
    /* the site's last old transition evicted four steps before the end,
     * "lived 20 steps" as the window knows it, its oldest alive one 23: it
     * was older than all of them still (dqn_replay.py in a ring of 1 MiB
     * once its exploration decayed: 504 KiB never freed) */
    assert_shape_is_clean(window_short, WINDOW_EDGE);
    /* a file older than 1.12 cannot say whose those frees were */
    synth y;
    vt__check_report *r = check_shape(&y, window_short, WINDOW_OLD_FILE);
    ASSERT_EQ(only_finding_of(r, VT_CHECK_RULE_NEVER_FREED)->nallocs, 23 + 8);
    vt__check_report_free(r);
    synth_fini(&y);
    /* nothing made before the window freed: all 32 old ones kept */
    r = check_shape(&y, window_short, WINDOW_LEAK);
    ASSERT_EQ(only_finding_of(r, VT_CHECK_RULE_NEVER_FREED)->nallocs, 23 + 32);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(native_fixed_is_clean)
{
    assert_shape_is_clean(native, NATIVE_LEAK_FIXED | NATIVE_OUTLIER_FIXED);
}

/* The blocks of an observed PyTorch allocator without marks (an evaluation:
 * no optimizer step): never-freed judges them by time, automatically (and
 * growth, in windows of the trace); the outlier rule still needs steps and
 * says so. */
TEST(native_never_freed_judges_an_observed_pytorch_pool_by_time_without_marks)
{
    synth y;
    native(&y, NATIVE_NO_MARKS);
    y.s.meta.flags |= VT_META_POOL_OBSERVED;
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->rules_need_steps, VT_CHECK_RULE_OUTLIER);
    only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    assert_rendered_says(r, &y, 0, "NOTE: this trace has no steps (marks), and outlier "
                                   "judges step by step: not run. The program made no "
                                   "optimizer step (which `vramtrace run` marks): mark steps "
                                   "with vramtrace.mark(\"step N\"), or name outlier with --rules "
                                   "to judge by time");
    assert_rendered_says(r, &y, 0, "rules: never-freed,growth;");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A model's weights moved to the device, one tensor at a time over a tenth
 * of the trace, then a loop without marks (an evaluation, or a first step
 * that ran out of memory: no optimizer step) whose temporaries come and go:
 * the weights are one burst, not memory kept step after step, however long
 * the burst took. The same loop keeping one tensor an iteration is flagged. */
static void weights_then_loop(synth *y, int keep)
{
    synth_init(y);
    y->s.meta.flags |= VT_META_POOL_OBSERVED;
    uint32_t s_w = synth_stack(y, "move_weights", "main", NULL);
    uint32_t s_tmp = synth_stack(y, "forward", "main", NULL);
    uint32_t s_kept = synth_stack(y, "keep_output", "main", NULL);
    for (int k = 0; k < 20; k++) {   /* 20 weights over 100 ms */
        synth_tick(y, 5000000);
        synth_alloc(y, 0x7f0000000000ull + (uint64_t)k * 0x1000000, MiB, s_w);
    }
    for (int i = 0; i < 45; i++) {   /* 45 iterations over 900 ms */
        synth_tick(y, 10000000);
        uint64_t t = 0x7f2000000000ull + (uint64_t)i * 0x1000000;
        synth_alloc(y, t, 4 * MiB, s_tmp);
        synth_tick(y, 10000000);
        synth_free(y, t);
        if (keep)
            synth_alloc(y, 0x7f4000000000ull + (uint64_t)i * 0x100000, 64 * 1024, s_kept);
    }
}

TEST(weights_moved_before_a_loop_without_marks_are_not_never_freed)
{
    synth y;
    weights_then_loop(&y, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
    assert_report_clean(r, &y);

    weights_then_loop(&y, 1);
    r = check(&y, NULL);
    only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    assert_rendered_says(r, &y, 0, "allocated step after step by the same call site");
    assert_rendered_says(r, &y, 0, "     at keep_output (train.c:10)\n");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The same loop keeping one tensor an iteration runs out of memory: its
 * snapshot is taken at the exit, seconds later (Python's traceback, torch's
 * teardown: longer than the loop ran). The loop's memory is still kept step
 * after step: the quiet before the snapshot is no part of the program's
 * loop. Before: whether it was flagged depended on how long the exit took. */
TEST(a_loop_that_ran_out_of_memory_is_never_freed_however_long_its_exit_took)
{
    synth y;
    weights_then_loop(&y, 1);
    synth_tick(&y, 2000000000ull);   /* the exit snapshot, 2 s after the loop's 1 s */
    vt__check_report *r = check(&y, NULL);
    only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    assert_rendered_says(r, &y, 0, "     at keep_output (train.c:10)\n");
    vt__check_report_free(r);
    synth_fini(&y);

    weights_then_loop(&y, 0);   /* and the weights are still one burst */
    synth_tick(&y, 2000000000ull);
    assert_checks_clean(&y, NULL);
}

/* A deep model's first forward runs out of memory: its weights moved to the
 * device one at a time over 100 ms, then 3 ms of a forward keeping each
 * layer's activation (its temporaries freed), then the OOM, and the exit
 * snapshot half a second later. No loop kept anything step after step: the
 * weights are one burst of allocations with nothing freed among them, the
 * activations one forward. Before: the weights were never freed "step
 * after step" (the quiet since them was the forward's 10 ms). */
TEST(weights_and_a_first_forward_that_ran_out_of_memory_are_not_never_freed)
{
    synth y;
    synth_init(&y);
    y.s.meta.flags |= VT_META_POOL_OBSERVED;
    uint32_t s_w = synth_stack(&y, "move_weights", "main", NULL);
    uint32_t s_act = synth_stack(&y, "forward", "main", NULL);
    uint32_t s_tmp = synth_stack(&y, "relu", "forward", "main", NULL);
    for (int k = 0; k < 20; k++) {
        synth_tick(&y, 5000000);
        synth_alloc(&y, 0x7f0000000000ull + (uint64_t)k * 0x1000000, MiB, s_w);
    }
    y.dt = 100000;   /* the forward: 10 layers in 3 ms (the real one's 8 took 6 ms) */
    for (int k = 0; k < 10; k++) {
        uint64_t t = 0x7f2000000000ull + (uint64_t)k * 0x1000000;
        synth_alloc(&y, t, 32 * MiB, s_tmp);
        synth_alloc(&y, 0x7f4000000000ull + (uint64_t)k * 0x1000000, 32 * MiB, s_act);
        synth_free(&y, t);
    }
    synth_ev(&y, VT_EV_OOM)->size = 32 * MiB;
    synth_tick(&y, 500000000ull);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_GROWTH);
    assert_report_clean(r, &y);
}

/* Six marked steps, then `tail` iterations of the usual step's length
 * without a mark (an evaluation after the last training step), each keeping
 * a 1 MiB block of one call site to the end and freeing its temporary, as a
 * batch's forward frees its activations. */
static vt__check_report *kept_after_the_last_mark(synth *y, int tail)
{
    synth_init(y);
    stacks(y);
    synth_alloc(y, W_ADDR, 4 * MiB, st_init);
    for (int i = 1; i <= 6; i++) {
        synth_step_mark(y, i);
        uint64_t a = 0x7f1000000000ull + (uint64_t)i * 0x10000000ull;
        synth_alloc(y, a, 2 * MiB, st_act);
        synth_free(y, a);
    }
    for (int k = 0; k < tail; k++) {
        synth_tick(y, 100000000);
        synth_alloc(y, 0x7fb000000000ull, 2 * MiB, st_act);
        synth_alloc(y, 0x7fc000000000ull + (uint64_t)k * 0x1000000, MiB, st_fwd);
        synth_free(y, 0x7fb000000000ull);
    }
    synth_tick(y, 50000000);
    return check(y, NULL);
}

/* The time after the last mark, where the run went on for four of its
 * steps at least, is judged in steps of that length: what a final
 * evaluation keeps batch after batch is never-freed (pytorch's BERT
 * fine-tuning with an evaluation at its end that kept every batch's graph:
 * "0 findings" before). A tail of two steps' length is the run's end, not
 * judged. */
TEST(what_a_loop_keeps_after_the_last_mark_is_never_freed)
{
    synth y;
    vt__check_report *r = kept_after_the_last_mark(&y, 8);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    ASSERT_EQ(f->nallocs, 7);   /* the 8th falls in the run's last part of a step */
    ASSERT_EQ(f->bytes, 7 * MiB);
    ASSERT_EQ(r->nmarks, 6);
    ASSERT_EQ(r->quiet_steps, 8);   /* to its last event: 8 steps as long as the marked ones */
    /* a finding since its first block, made after the last mark (there is
     * no mark after it to count from: it read past the marks before) */
    uint64_t first = 0;
    for (size_t i = 0; i < y.s.nevents && !first; i++)
        if (y.s.events[i].kind == VT_EV_ALLOC && y.s.events[i].stack == st_fwd &&
            y.s.events[i].addr >= 0x7fc000000000ull)
            first = y.s.events[i].seq;
    ASSERT_EQ(f->linger_from_seq, first);
    char *t = render(r, &y, 0);
    ASSERT_STR_CONTAINS(t, "s) the run went on for 8 of its usual steps without one:"
                           " never-freed judges them as steps");
    free(t);
    assert_rendered_says(r, &y, 1, "\"marks\":6,\"quiet_steps\":8,");
    vt__check_report_free(r);
    synth_fini(&y);

    r = kept_after_the_last_mark(&y, 2);
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->quiet_steps, 0);
    vt__check_report_free(r);
    synth_fini(&y);

    /* A long quiet time in which one line kept two blocks a moment apart
     * that happen to fall in two of its steps: a slice of time is not a
     * step of the program's; a site needs three of them there. */
    synth_init(&y);
    stacks(&y);
    for (int i = 1; i <= 6; i++) {
        synth_step_mark(&y, i);
    }
    synth_tick(&y, 199000000);
    synth_alloc(&y, 0x7fc000000000ull, MiB, st_fwd);
    synth_tick(&y, 2000000);   /* across the quiet step's end at 200 ms */
    synth_alloc(&y, 0x7fc001000000ull, MiB, st_fwd);
    synth_tick(&y, 800000000);
    synth_alloc(&y, 0x7fd000000000ull, 4096, st_act);   /* the run's last event */
    r = check(&y, NULL);
    ASSERT_GE(r->quiet_steps, 4);
    assert_report_clean(r, &y);
}

/* One call after the last mark that allocates for a while, over several of
 * the run's usual steps, and frees nothing between (a model loaded back
 * after training, `model = torch.load(f)` in pytorch/examples'
 * word_language_model: seven blocks over 30 ms of 9 ms steps), is a burst,
 * not a loop keeping a block per iteration: no finding. The same blocks
 * with a temporary freed between each are a loop's (the test above). */
TEST(one_call_allocating_over_several_quiet_steps_is_not_a_loop)
{
    for (int freeing = 0; freeing <= 1; freeing++) {
        synth y;
        synth_init(&y);
        stacks(&y);
        for (int i = 1; i <= 6; i++) {
            synth_step_mark(&y, i);
            synth_alloc(&y, 0x7f1000000000ull, 2 * MiB, st_act);
            synth_free(&y, 0x7f1000000000ull);
        }
        synth_tick(&y, 100000000);
        for (int k = 0; k < 7; k++) {   /* 7 blocks over 3.5 steps of 100 ms */
            synth_tick(&y, 50000000);
            if (freeing)
                synth_alloc(&y, 0x7fb000000000ull, 2 * MiB, st_act);
            synth_alloc(&y, 0x7fc000000000ull + (uint64_t)k * 0x1000000, MiB, st_fwd);
            if (freeing)
                synth_free(&y, 0x7fb000000000ull);
        }
        synth_tick(&y, 600000000);
        synth_alloc(&y, 0x7fd000000000ull, 4096, st_act);   /* the run's last event */
        vt__check_report *r = check(&y, NULL);
        ASSERT_GE(r->quiet_steps, 4);
        ASSERT_EQ(r->nfindings, (size_t)freeing);
        if (freeing)
            ASSERT_EQ(only_finding_of(r, VT_CHECK_RULE_NEVER_FREED)->nallocs, 7);
        vt__check_report_free(r);
        synth_fini(&y);
    }
}

/* A Python stack whose innermost frame is `forward` at model.py:line,
 * called from `caller` (train_step or evaluate) under <module>: one line of
 * a model reached by two call paths. */
static uint32_t stack_at_line(synth *y, uint32_t line, const char *caller)
{
    const char *fns[3] = { "<module>", caller, "forward" };
    const char *files[3] = { "train.py", "train.py", "model.py" };
    uint32_t lines[3] = { 5, strcmp(caller, "evaluate") ? 30 : 40, line };
    uint32_t module = synth_str(y, "python");   /* a frame read from the interpreter */
    uint32_t parent = 0;
    for (int i = 0; i < 3; i++) {
        uint32_t fr = sb_frame(&y->b, (vt__frame){
            .module = module, .function = synth_str(y, fns[i]),
            .file = synth_str(y, files[i]), .line = lines[i] });
        parent = sb_node(&y->b, parent, fr);
    }
    return parent;
}

/* A new trace in y with `nlines` lines of a model, each reached by the
 * training step (train[l]) and by an evaluation (eval[l]). */
static void two_paths(synth *y, uint32_t nlines, uint32_t *train, uint32_t *eval)
{
    synth_init(y);
    for (uint32_t l = 0; l < nlines; l++) {
        train[l] = stack_at_line(y, 100 + l, "train_step");
        eval[l] = stack_at_line(y, 100 + l, "evaluate");
    }
}

/* Eight marked steps, each training at `nlines` lines of a model (a block
 * each, freed within the step where `siblings`); in step 2 an evaluation
 * reaches the same lines by another path and its blocks are all freed
 * `kept` marks later, together: a graph kept by its loss, then let go. */
static vt__check_report *evaluation_kept(synth *y, uint32_t nlines, int kept, int siblings)
{
    uint32_t train[8], eval[8];
    two_paths(y, nlines, train, eval);
    for (int i = 1; i <= 8; i++) {
        synth_step_mark(y, i);
        if (i == 2 + kept)
            for (uint32_t l = 0; l < nlines; l++)
                synth_free(y, 0x7e0000000000ull + l * 0x1000000ull);
        for (uint32_t l = 0; siblings && l < nlines; l++)
            synth_alloc(y, 0x7f0000000000ull + l * 0x1000000ull, 2 * MiB, train[l]);
        for (uint32_t l = 0; siblings && l < nlines; l++)
            synth_free(y, 0x7f0000000000ull + l * 0x1000000ull);
        if (i == 2)
            for (uint32_t l = 0; l < nlines; l++)
                synth_alloc(y, 0x7e0000000000ull + l * 0x1000000ull, MiB, eval[l]);
    }
    synth_tick(y, 50000000);
    return check(y, NULL);
}

/* Without tensors, what a kept autograd graph leaves in the allocator: the
 * blocks an evaluation made at the model's lines, lines whose other blocks
 * (the training step's) die within their step, all kept and then freed
 * together three steps later: an outlier of its own kind, which the
 * call-site rule does not see (each path is consistent with itself;
 * karpathy/ng-video-lecture's gpt.py keeping `losses[k] = loss` without
 * no_grad: "0 findings" before). Two lines are enough (a Sequential of
 * Linear and ReLU keeps the batch and the ReLUs' outputs). Not with one
 * line (a result kept, as predictions gathered for a metric), nor freed at
 * the next step's end (a complete step not outlived), nor at lines that
 * make nothing short-lived (a cache, rebuilt now and then). */
TEST(a_calls_allocations_kept_together_past_a_step_are_an_outlier_without_tensors)
{
    synth y;
    vt__check_report *r = evaluation_kept(&y, 4, 3, 1);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(f->kept_lines, 4);
    ASSERT_EQ(f->kept_steps, 3);
    ASSERT_EQ(f->nallocs, 4);
    ASSERT_EQ(f->bytes, 4 * MiB);
    char *t = render(r, &y, 0);
    ASSERT_STR_CONTAINS(t, "kept together: 4 blocks that one step made at 4 lines, whose other"
                           " blocks die within their step, freed together 3 steps later");
    free(t);
    assert_rendered_says(r, &y, 1, "\"kept_lines\":4,\"kept_steps\":3,");
    vt__check_report_free(r);
    synth_fini(&y);

    r = evaluation_kept(&y, 2, 3, 1);
    ASSERT_EQ(only_finding_of(r, VT_CHECK_RULE_OUTLIER)->kept_lines, 2);
    vt__check_report_free(r);
    synth_fini(&y);

    struct { uint32_t nlines; int kept, siblings; } clean[] = {
        { 1, 3, 1 },   /* one line */
        { 4, 1, 1 },   /* freed at the end of the next step */
        { 4, 3, 0 },   /* no short-lived siblings at those lines */
    };
    for (size_t k = 0; k < sizeof clean / sizeof clean[0]; k++) {
        r = evaluation_kept(&y, clean[k].nlines, clean[k].kept, clean[k].siblings);
        assert_report_clean(r, &y);
    }
}

/* The same kept graph where one of its lines also made short-lived blocks
 * by the evaluation's own path (a Tanh model's output layer: its Linear's
 * other outputs died, that layer's was kept): OUTLIER by call site claims
 * that line's kept block, and it is a line of the graph still, so the rest
 * of the graph is kept together at two lines. Before: that layer alone was
 * found (125 KiB of a validation graph's 20 MiB), the cohort counted one. */
TEST(a_line_of_a_kept_graph_found_by_its_call_site_still_counts_for_the_graph)
{
    synth y;
    uint32_t train[2], eval[2];
    two_paths(&y, 2, train, eval);
    for (int i = 1; i <= 8; i++) {
        synth_step_mark(&y, i);
        if (i == 5)
            for (uint32_t l = 0; l < 2; l++)
                synth_free(&y, 0x7e0000000000ull + l * 0x1000000ull);
        for (uint32_t l = 0; l < 2; l++)
            synth_alloc(&y, 0x7f0000000000ull + l * 0x1000000ull, 2 * MiB, train[l]);
        for (uint32_t l = 0; l < 2; l++)
            synth_free(&y, 0x7f0000000000ull + l * 0x1000000ull);
        if (i != 2)
            continue;
        for (uint64_t k = 0; k < 3; k++) {   /* the evaluation's short-lived ones at line 100 */
            synth_alloc(&y, 0x7d0000000000ull + k * 0x1000000ull, MiB, eval[0]);
            synth_free(&y, 0x7d0000000000ull + k * 0x1000000ull);
        }
        for (uint32_t l = 0; l < 2; l++)
            synth_alloc(&y, 0x7e0000000000ull + l * 0x1000000ull, MiB, eval[l]);
    }
    synth_tick(&y, 50000000);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    const vt__check_finding *site = NULL, *graph = NULL;
    for (size_t i = 0; i < r->nfindings; i++) {
        ASSERT_EQ(r->findings[i].rule, VT_CHECK_RULE_OUTLIER);
        if (r->findings[i].kept_lines)
            graph = &r->findings[i];
        else
            site = &r->findings[i];
    }
    ASSERT(site && graph);
    ASSERT_EQ(site->alloc_stack, eval[0]);
    ASSERT_EQ(graph->kept_lines, 2);
    ASSERT_EQ(graph->nallocs, 1);   /* line 101's: line 100's is the other finding's */
    ASSERT_EQ(graph->alloc_stack, eval[1]);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Eight marked steps, each training at `nlines` lines of a model (a block
 * each, freed within the step) and evaluating at the same lines by another
 * path (a block each, freed). At the lines in the mask `eval_keeps` the
 * evaluation's block is never freed instead (a validation loss computed
 * without no_grad and kept in a list: its graph, every step); at those in
 * `train_keeps` the training step keeps a second block every step. */
static vt__check_report *kept_every_step(synth *y, uint32_t nlines, unsigned eval_keeps,
                                         unsigned train_keeps)
{
    uint32_t train[8], eval[8];
    two_paths(y, nlines, train, eval);
    for (uint64_t i = 1; i <= 8; i++) {
        synth_step_mark(y, (int)i);
        for (uint32_t l = 0; l < nlines; l++) {
            uint64_t at = 0x7f0000000000ull + l * 0x1000000ull;
            synth_alloc(y, at, 2 * MiB, train[l]);
            if (train_keeps >> l & 1)
                synth_alloc(y, 0x7d0000000000ull + (i * 16 + l) * 0x1000000ull, MiB, train[l]);
            synth_free(y, at);
        }
        for (uint32_t l = 0; l < nlines; l++) {
            uint64_t at = 0x7e0000000000ull + (i * 16 + l) * 0x1000000ull;
            synth_alloc(y, at, MiB, eval[l]);
            if (!(eval_keeps >> l & 1))
                synth_free(y, at);
        }
    }
    synth_tick(y, 50000000);
    return check(y, NULL);
}

/* Finding i's under_stack is `fn` at train.py:line. */
static void assert_kept_under(const synth *y, const vt__check_finding *f, const char *fn,
                              uint32_t line)
{
    ASSERT(f->under_stack != 0);
    const vt__frame *call = &y->s.frames[y->s.stack_nodes[f->under_stack].frame];
    ASSERT_STR_EQ(vt__snapshot_string(&y->s, call->function), fn);
    ASSERT_EQ(call->line, line);
}

/* Without tensors, a graph kept to the end every step is NEVER-FREED at
 * each line of the model it reached (minGPT's trainer with a validation
 * loss kept in a list: 15 causes at 15 lines of model.py under plain run).
 * Lines whose other blocks die within their step, kept under one call of
 * the program (evaluate's): one cause, named by that call. Not merged under
 * a call that drives the steps (here <module>'s, which makes all their
 * blocks): what the training step keeps and what the evaluation keeps are
 * two causes, each its call's. */
TEST(findings_kept_under_one_call_of_the_program_are_one_cause)
{
    synth y;
    vt__check_report *r = kept_every_step(&y, 4, 0xf, 0);
    ASSERT_EQ(r->nfindings, 4);
    for (size_t i = 0; i < 4; i++) {
        ASSERT_EQ(r->findings[i].rule, VT_CHECK_RULE_NEVER_FREED);
        assert_kept_under(&y, &r->findings[i], "evaluate", 40);
    }
    uint32_t g[4];
    ASSERT_EQ(vt__check_report_groups(r, &y.s, g), 1);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "4 findings from 1 cause");
    ASSERT_STR_CONTAINS(text, "     allocated under evaluate (train.py:40), at 4 lines inside "
                              "it\n     kept step after step, where the same lines' other blocks"
                              " die within their step: what this call returned, kept with its "
                              "autograd graph");
    ASSERT_STR_CONTAINS(text, "   kept under one call with other lines' blocks: evaluate "
                              "(train.py:40)\n");
    free(text);
    assert_rendered_says(r, &y, 1, "\"under_call\":[{\"function\":\"evaluate\",\"file\":"
                                   "\"train.py\",\"line\":40,");
    vt__check_report_free(r);
    synth_fini(&y);

    /* the training step keeps at two lines, the evaluation at two others */
    r = kept_every_step(&y, 4, 0xc, 0x3);
    ASSERT_EQ(r->nfindings, 4);
    ASSERT_EQ(vt__check_report_groups(r, &y.s, g), 2);
    for (size_t i = 0; i < 4; i++) {
        const vt__frame *line = vt__snapshot_user_frame(&y.s, r->findings[i].alloc_stack);
        if (line->line < 102)
            assert_kept_under(&y, &r->findings[i], "train_step", 30);
        else
            assert_kept_under(&y, &r->findings[i], "evaluate", 40);
    }
    vt__check_report_free(r);
    synth_fini(&y);

    r = kept_every_step(&y, 4, 0x1, 0);   /* one line: its call site's cause */
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].under_stack, 0);
    vt__check_report_free(r);
    synth_fini(&y);

    r = kept_every_step(&y, 4, 0, 0);   /* the fixed evaluation */
    assert_report_clean(r, &y);
}

/* kept_every_step's run over `nsteps` marked steps whose evaluation keeps
 * its block at every line in a list local to a function, every step, all
 * freed together when the function returns, after the last mark. */
static vt__check_report *kept_then_returned(synth *y, uint32_t nlines, int nsteps)
{
    uint32_t train[8], eval[8];
    two_paths(y, nlines, train, eval);
    for (uint64_t i = 1; i <= (uint64_t)nsteps; i++) {
        synth_step_mark(y, (int)i);
        for (uint32_t l = 0; l < nlines; l++) {
            uint64_t at = 0x7f0000000000ull + l * 0x1000000ull;
            synth_alloc(y, at, 2 * MiB, train[l]);
            synth_free(y, at);
        }
        for (uint32_t l = 0; l < nlines; l++)
            synth_alloc(y, 0x7e0000000000ull + (i * 16 + l) * 0x1000000ull, MiB, eval[l]);
    }
    synth_tick(y, 50000000);
    for (uint64_t i = 1; i <= (uint64_t)nsteps; i++)
        for (uint32_t l = 0; l < nlines; l++)
            synth_free(y, 0x7e0000000000ull + (i * 16 + l) * 0x1000000ull);
    synth_tick(y, 50000000);
    return check(y, NULL);
}

/* What an evaluation keeps, graphs and all, in a list local to a function
 * is freed when the function returns: GROWTH at each line of the model it
 * reached, not never-freed (pytorch/examples' FSDP2 transformer with its
 * evaluation's outputs kept in main()'s list: 9 causes at 9 lines of
 * model.py under plain run). Under one call of the program, as
 * never-freed's: one cause, named by that call. */
TEST(growth_at_several_lines_under_one_call_of_the_program_is_one_cause)
{
    synth y;
    vt__check_report *r = kept_then_returned(&y, 4, 24);
    ASSERT_GT(r->nfindings, 3);
    for (size_t i = 0; i < r->nfindings; i++) {
        ASSERT_EQ(r->findings[i].rule, VT_CHECK_RULE_GROWTH);
        assert_kept_under(&y, &r->findings[i], "evaluate", 40);
    }
    uint32_t g[64];
    ASSERT(r->nfindings <= 64);
    ASSERT_EQ(vt__check_report_groups(r, &y.s, g), 1);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, " findings from 1 cause");
    ASSERT_STR_CONTAINS(text, "     call sites growing step over step, allocated under evaluate "
                              "(train.py:40), at 4 lines inside it: what this call returned, "
                              "kept with its autograd graph");
    ASSERT_STR_CONTAINS(text, "   kept under one call with other lines' blocks: evaluate "
                              "(train.py:40)\n");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);

    r = kept_then_returned(&y, 1, 24);   /* one line: its call site's cause */
    ASSERT_GT(r->nfindings, 0);
    for (size_t i = 0; i < r->nfindings; i++) {
        ASSERT_EQ(r->findings[i].rule, VT_CHECK_RULE_GROWTH);
        ASSERT_EQ(r->findings[i].under_stack, 0);
    }
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Under track(), what a loop keeps after the last mark is said with what
 * holds its tensors, as the other rules' findings are (a Lightning module's
 * validation outputs never cleared: the last validation's, after the last
 * optimizer step, are never freed; their chain was in the JSON only). */
TEST(a_never_freed_finding_under_track_says_what_holds_its_tensors)
{
    synth y;
    setup_module_keeping(&y, 5000, "list", ".kept");
    steps(&y, 1, 6);
    for (int k = 0; k < 8; k++) {   /* the validation after the last step */
        synth_tick(&y, 100000000);
        synth_alloc(&y, 0x7fb000000000ull, 2 * MiB, st_act);   /* its activations */
        uint64_t t = 100 + (uint64_t)k;
        synth_new_tensor(&y, t, 0x7f6000000000ull + (uint64_t)k * 2 * MiB, MiB,
                         "pred = self.net(x) (train.py:28, aten.addmm out[0])", st_fwd);
        synth_ref(&y, 5001, t, item_label(k));
        synth_free(&y, 0x7fb000000000ull);
    }
    synth_tick(&y, 50000000);
    vt__check_report *r = check(&y, NULL);   /* the rules run by default, never-freed there alone */
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_NEVER_FREED);
    ASSERT(f->npaths >= 1);
    assert_rendered_says(r, &y, 0, "   held by (at the end):\n"
                                   "     module __main__.kept \xe2\x86\x92 list[");
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
