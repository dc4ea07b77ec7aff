/* tests/check/test_check_linger_declared.c - the linger rule over tensors
 * track() declared again (VT_TENSOR_AGAIN) after the ring overwrote their
 * TENSOR_NEWs: judged by their uses in the window, or by the usual gap
 * they had before it, marked and by time. The rule's other cases:
 * test_check_linger.c. */
#include "check_fixture.h"
#include "check_shapes.h"

/* A run longer than the ring, under track(): W (a weight) and K (an early
 * step's output a list keeps) were made before the window, their
 * TENSOR_NEWs overwritten; the tracker declared them again mid-window
 * (VT_TENSOR_AGAIN, format 1.11), after W's first uses in it. N is made in
 * the window and declared again too (a duplicate). `variant` 1: K is used
 * in step 1 too (before its declaration again); 2: K, before the window,
 * was used every 11 steps (the tracker saw it rest 10 marks). */
#define OLD_W 0x7e0000000000ull
#define OLD_K 0x7e0001000000ull
static void declared_again(synth *y, int variant)
{
    synth_init(y);
    uint32_t st_made = synth_stack(y, "made", "main", NULL);
    uint32_t st_step = synth_stack(y, "step", "main", NULL);
    synth_holder(y, 900, "module __main__.kept");
    for (int step = 0; step < 6; step++) {
        char label[32];
        snprintf(label, sizeof label, "step %d", step);
        synth_mark(y, label);
        synth_tick(y, 1000000);
        synth_use_at(y, 7, st_step);                 /* W, every step */
        if (step == 1) {
            synth_made(y, 30, 0x7f0000000000ull, MiB, "n", st_step);
            if (variant == 1)
                synth_use_at(y, 8, st_step);
        }
        if (step == 2) {                             /* the tracker's half ring */
            SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = 7, .aux2 = VT_TENSOR_AGAIN, .addr = OLD_W,
                     .size = 2 * MiB, .stack = st_made, .str = synth_str(y, "weight"));
            SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = 8, .aux2 = VT_TENSOR_AGAIN, .addr = OLD_K,
                     .size = 2 * MiB, .stack = st_made, .str = synth_str(y, "logits"),
                     .stream = variant == 2 ? 10 : 0);
            SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = 30, .aux2 = VT_TENSOR_AGAIN,
                     .addr = 0x7f0000000000ull, .size = MiB, .stack = st_step,
                     .str = synth_str(y, "n"));
            synth_ref(y, 900, 8, "[0]");
        }
        synth_use_at(y, 30, st_step);
    }
    synth_mark(y, "end");
    synth_lost_start(y, st_made, 2, OLD_W, 2 * MiB);
}

TEST(tensors_declared_again_after_the_ring_overwrote_them_are_judged)
{
    synth y;
    vt__check_report *r = check_shape(&y, declared_again, 0);
    ASSERT_EQ(r->ntensors, 3);       /* W, K once each; N's duplicate ignored */
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->addr, OLD_K);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->owner_id, 8);
    ASSERT_STR_EQ(f->owner_name, "logits");
    ASSERT_EQ(f->before_window, 1);
    ASSERT_EQ(f->last_use_before_window, 1);
    ASSERT_EQ(f->last_use_stack, 0);
    ASSERT_EQ(f->older_alive, 0);    /* K has its tensor: judged, not counted */
    ASSERT_EQ(f->npaths, 1);
    ASSERT_STR_EQ(path_text(f, 0), "module __main__.kept[0] \xe2\x86\x92 tensor 'logits' "
                                   "\xe2\x86\x92 storage 0x7e0001000000 2 MiB");
    assert_text_and_json_say(r, &y,
                             "last use: before the trace window, by tensor 'logits' (#8), made "
                             "there; unused since the window began",
                             "\"before_window\":true");
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_tensor_declared_again_and_used_in_the_window_before_it_is_judged_by_that_use)
{
    /* K's use in step 1 comes before its declaration again: the use is
     * found (the tensor is bound from the window's start), and K is judged
     * from step 1, not from before the window */
    synth y;
    vt__check_report *r = check_shape(&y, declared_again, 1);
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->addr, OLD_K);
    ASSERT_EQ(f->last_use_before_window, 0);
    ASSERT_EQ(f->last_use_step, 2);  /* the step from mark "step 1" */
    ASSERT_EQ(f->nuses, 2);          /* the window's start, and step 1's */
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_tensor_declared_again_is_judged_by_the_usual_gap_it_had_before_the_window)
{
    /* K was used every 11 steps before the window (the tracker's rest: 10
     * marks), and the window holds 7 of them: it has not missed a use yet.
     * A window of 6 steps cannot show that gap; the declaration says it */
    synth y;
    vt__check_report *r = check_shape(&y, declared_again, 2);
    assert_report_clean(r, &y);
    /* the same told to wait 2 steps (--grace 2): flagged */
    vt__check_options o = default_options();
    o.grace_mode = VT_CHECK_GRACE_STEPS;
    o.grace_steps = 2;
    declared_again(&y, 2);
    r = check(&y, &o);
    ASSERT_EQ(only_finding(r)->addr, OLD_K);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The same without marks (judged by time): 3 s of a loop making and
 * freeing a temporary every 100 ms; K, made before the window, declared
 * again at 0.2 s with `rest_ns` (the tracker's ticks in ns) and never used
 * in it. */
static void declared_again_by_time(synth *y, int variant)
{
    synth_init(y);
    uint32_t st_made = synth_stack(y, "made", "main", NULL);
    uint32_t st_step = synth_stack(y, "step", "main", NULL);
    for (int i = 0; i < 30; i++) {
        uint64_t addr = 0x7f0000000000ull + (uint64_t)i * 0x100000;
        synth_tick(y, 100000000);
        synth_made(y, 100 + (uint64_t)i, addr, MiB, "tmp", st_step);
        synth_drop(y, 100 + (uint64_t)i);
        synth_free(y, addr);
        if (i == 1)
            SYNTH_EV(y, VT_EV_TENSOR_NEW, .aux = 8, .aux2 = VT_TENSOR_AGAIN, .addr = OLD_K,
                     .size = 2 * MiB, .stack = st_made, .str = synth_str(y, "logits"),
                     .stream = variant ? 10000000000ull : 0);
    }
    synth_lost_start(y, st_made, 2, OLD_W, 2 * MiB);
}

TEST(a_tensor_declared_again_is_judged_by_the_usual_gap_it_had_before_the_window_by_time)
{
    /* unused for the window's 3 s: past the time rule's 1 s, flagged */
    synth y;
    vt__check_report *r = check_shape(&y, declared_again_by_time, 0);
    ASSERT_EQ(r->nmarks, 0);
    ASSERT_EQ(only_finding(r)->addr, OLD_K);
    ASSERT_EQ(r->findings[0].last_use_before_window, 1);
    vt__check_report_free(r);
    synth_fini(&y);
    /* used every 10 s before the window (the tracker's rest, in ns): not
     * yet missed a use */
    r = check_shape(&y, declared_again_by_time, 1);
    assert_report_clean(r, &y);
}

TEST_MAIN()
