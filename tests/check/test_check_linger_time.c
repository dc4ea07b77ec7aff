/* tests/check/test_check_linger_time.c - the linger rule without marks: a
 * trace whose steps are unknown is judged by time (check_linger.c); the
 * tool's own pauses and walks are not the program's time; the native rules
 * on the same annotated traces when asked. Marked traces:
 * test_check_linger.c. */
#include "check_fixture.h"
#include "check_shapes.h"

TEST(no_marks_time_rule_flags_long_linger)
{
    synth y;
    vt__check_report *r = check_shape(&y, no_marks, 30000);
    ASSERT_EQ(r->nmarks, 0);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    const vt__check_finding *f = the_finding(r, XT, 10 * MiB);
    ASSERT_EQ(f->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(f->freed, 1);
    ASSERT_EQ(f->usual_gap_ns, 100000000 + 2000);  /* tick + two events */
    /* grace = 5% of ~31 s > 10 x 100 ms > 1 s */
    uint64_t dur = r->end_time_ns - r->start_time_ns;
    ASSERT_EQ(f->linger_from_time_ns, f->last_use_time_ns + dur / 100 * 5);
    ASSERT_GT(f->linger_ns, 28000000000ull);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(no_marks_time_rule_fixed_is_clean)
{
    assert_shape_is_clean(no_marks, 1500);   /* freed 0.5 s after its last use */
}

TEST(no_marks_alive_at_end_with_old_last_use_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape(&y, no_marks, 0);
    ASSERT_EQ(the_finding(r, XT, 10 * MiB)->freed, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A snapshot asked for half a second after a tensor's last use, whose
 * holder walk (vramtrace.torch's, before the file is written) records its
 * HOLDER_NEW and REF events two seconds later: the walk is vramtrace's own
 * time, not the program's, and the snapshot's time is the request's
 * (vt__snapshot_requested). Judged by time, the tensor is not lingering: the
 * program ended (an OOM in its first step, say) half a second after it. */
TEST(no_marks_a_snapshots_holder_walk_is_not_the_programs_time)
{
    synth y;
    synth_init(&y);
    stacks(&y);
    y.dt = 1000;
    synth_new_tensor(&y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    synth_made(&y, 60, XT, 10 * MiB, "x", st_fwd);
    for (int k = 0; k < 5; k++) {   /* the program goes on for 0.5 s */
        synth_tick(&y, 100000000);
        synth_use(&y, W_ID);
    }
    uint64_t requested = y.time;
    synth_tick(&y, 2000000000);    /* the walk: 2 s of vramtrace's own work */
    synth_held(&y, 900, "list", 0, "module __main__.kept");
    synth_ref(&y, 900, 60, "[0]");
    y.s.meta.snapshot_time_ns = requested;
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nmarks, 0);
    ASSERT_EQ(r->end_time_ns, requested);
    assert_report_clean(r, &y);
}

/* A loop of 10 s without marks (so a grace of 1 s) in which the tool
 * paused the program for 1.2 s (a tick's holder walk) between a temporary's
 * last use and the next op, which frees it; a tensor made beside it is kept
 * to the end. `pause`: the tool recorded its pause (PAUSE, vt_paused). */
#define KEPT (XT + 16 * MiB)
static void paused_loop(synth *y, int pause)
{
    synth_init(y);
    stacks(y);
    y->dt = 1000;
    synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    for (int k = 0; k < 100; k++) {
        synth_tick(y, 100000000);
        synth_use(y, W_ID);
        if (k == 20) {
            synth_made(y, 60, XT, 10 * MiB, "logits", st_fwd);
            synth_made(y, 61, KEPT, 1 * MiB, "kept", st_fwd);
        }
        if (k == 21) {
            synth_tick(y, 1200000000);
            if (pause)
                SYNTH_EV(y, VT_EV_PAUSE, .aux = 1200000000, .device = -1);
            synth_release(y, 0, 60, XT);
        }
    }
}

/* Judged by time, the tool's pauses are not the program's: the temporary
 * replaced at the program's next op is not held, though 1.3 s of the wall
 * clock passed (without the PAUSE the same trace flags it), and the kept
 * tensor lingers from one second of the program's own time after its last
 * use: later, by the pause, than one second of the wall clock. */
TEST(no_marks_the_tools_recorded_pauses_are_not_the_programs_time)
{
    synth y;
    paused_loop(&y, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(r->nfindings, 2);   /* unrecorded, the pause reads as the program's time */
    for (size_t i = 0; i < r->nfindings; i++)
        ASSERT_EQ(r->findings[i].paused_ns, 0);
    char *text = render(r, &y, 0);
    ASSERT_MSG(!strstr(text, "pauses"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);

    paused_loop(&y, 1);
    r = check(&y, NULL);
    const vt__check_finding *f = the_finding(r, KEPT, 1 * MiB);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->freed, 0);
    /* last used at k = 20; the pause began 0.1 s and 2 events later */
    ASSERT_EQ(f->linger_from_time_ns, f->last_use_time_ns + 1000000000ull + 1200000000ull);
    /* the report says how much of the time it was held was the tool's */
    ASSERT_EQ(f->paused_ns, 1200000000ull);
    char want[160];
    snprintf(want, sizeof want, "   held %.3f s after last use (1.200 s of it vramtrace's pauses): ",
             (double)f->linger_ns / 1e9);
    assert_text_and_json_say(r, &y, want, "\"paused_ns\":1200000000,");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The native rules run on annotated traces too, when asked. */
TEST(native_rules_can_be_selected_on_annotated_traces)
{
    synth y;
    gc_cycle(&y, 1);
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_rules("linger,never-freed,outlier,pinned,cycle,tape,growth", &o.rules), 0);
    ASSERT_EQ(o.rules, VT_CHECK_RULES_ALL);
    vt__check_report *r = check(&y, &o);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULES_ALL);
    ASSERT_CLEAN(r, &y);   /* weights: setup, not accumulating */
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_parse_rules("linger,bogus", &o.rules), -EINVAL);
    synth_fini(&y);
}

TEST_MAIN()
