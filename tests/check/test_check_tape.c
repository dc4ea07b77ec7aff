/* tests/check/test_check_tape.c - the tape rule (check_tape.c): a tape that
 * keeps every intermediate until the end of backward is flagged, inside each
 * step, for the intermediates idle through the step's peak; its fixed twin,
 * which frees each one after its last use, is clean; the rule is opt-in. */
#include "check_fixture.h"

#define TAPE 0x7f4000000000ull
#define GRAD 0x7f5000000000ull
#define NTAPE 4

/* fixed: each intermediate freed after its use; release_thread: the thread
 * whose events free the tape's entries at the end (1: the program's, as a
 * hand-written tape; 2: the autograd engine's, releasing what backward
 * nodes saved) */
static void tape_steps_freed_on(synth *y, int fixed, uint32_t release_thread)
{
    setup(y);
    for (int i = 1; i <= 6; i++) {
        step(y, i);
        if (i < 2 || i > 5)
            continue;
        uint64_t base = (uint64_t)i * 100;
        for (int k = 0; k < NTAPE; k++) {      /* forward: each intermediate used once */
            synth_tick(y, 1000000);
            uint64_t a = TAPE + (uint64_t)i * 0x1000000 + (uint64_t)k * 0x100000;
            synth_new_tensor(y, base + (uint64_t)k, a, 1 * MiB, "tape entry", st_fwd);
            if (fixed) {
                synth_drop(y, base + (uint64_t)k);
                synth_free(y, a);
            }
        }
        if (!fixed) {                           /* the tape holds every entry */
            synth_holder(y, 9000 + (uint64_t)i, "Tape");
            for (int k = 0; k < NTAPE; k++)
                synth_ref(y, 9000 + (uint64_t)i, base + (uint64_t)k, ".entries");
        }
        synth_tick(y, 150000000);               /* backward: the gradient buffer */
        synth_new_tensor(y, base + 50, GRAD + (uint64_t)i * 0x1000000, 8 * MiB, "grad", st_bwd);
        for (int k = 0; k < NTAPE; k++) {      /* each layer's backward op writes it */
            synth_tick(y, 2000000);
            synth_use(y, base + 50);
        }
        synth_tick(y, 10000000);
        synth_drop(y, base + 50);
        synth_free(y, GRAD + (uint64_t)i * 0x1000000);
        if (!fixed) {
            for (int k = 0; k < NTAPE; k++) {  /* the tape is cleared at the end */
                synth_unref(y, 9000 + (uint64_t)i, base + (uint64_t)k);
                synth_drop(y, base + (uint64_t)k);
                SYNTH_EV(y, VT_EV_FREE_REQUESTED,
                         .addr = TAPE + (uint64_t)i * 0x1000000 + (uint64_t)k * 0x100000)
                    ->thread = release_thread;
            }
        }
    }
}

static void tape_steps(synth *y, int fixed)
{
    tape_steps_freed_on(y, fixed, 1);
}

static vt__check_report *check_tape(synth *y)
{
    vt__check_options o;
    vt__check_options_init(&o);
    ASSERT_EQ(vt__check_parse_rules("linger,pinned,tape", &o.rules), 0);
    return check(y, &o);
}

TEST(tape_keeping_intermediates_through_the_peak_is_flagged)
{
    synth y;
    tape_steps(&y, 0);
    /* Not an automatic rule: the default check sees nothing. */
    vt__check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);
    r = check_tape(&y);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_TAPE);
    ASSERT_EQ(r->nfindings, 4 * NTAPE);        /* steps 2..5, every entry */
    for (size_t i = 0; i < r->nfindings; i++) {
        const vt__check_finding *f = &r->findings[i];
        ASSERT_EQ(f->rule, VT_CHECK_RULE_TAPE);
        ASSERT_EQ(f->bytes, 1 * MiB);
        ASSERT_STR_EQ(f->owner_name, "tape entry");
        ASSERT_GE(f->step_idle_pct, VT_CHECK_TAPE_PCT);
        ASSERT_LE(f->step_idle_pct, 100);
        ASSERT_GT(f->linger_ns, 0);
        ASSERT_EQ(f->step_peak_bytes, (4 + NTAPE + 8) * MiB);   /* weights, tape, grad */
        ASSERT_LT(f->last_use_seq, f->linger_from_seq);
        ASSERT_LT(f->linger_from_seq, f->free_seq);
        ASSERT_EQ(f->path_seq, f->linger_from_seq);
        ASSERT_EQ(f->npaths, 1);
        ASSERT_STR_CONTAINS(path_text(f, 0), "Tape.entries \xe2\x86\x92 tensor 'tape entry'");
    }
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "[tape] storage 0x7f400");
    ASSERT_STR_CONTAINS(text, "retained inside its step: alive ");
    ASSERT_STR_CONTAINS(text, "through the step's peak of 16 MiB at ");
    ASSERT_STR_CONTAINS(text, "held by (at the step's peak):\n     Tape.entries");
    free(text);
    char *js = render(r, &y, 1);
    ASSERT_STR_CONTAINS(js, "\"rule\":\"tape\"");
    ASSERT_STR_CONTAINS(js, ",\"step\":{\"ns\":");
    ASSERT_STR_CONTAINS(js, ",\"idle_pct\":");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(what_another_thread_frees_after_its_last_seen_use_is_not_judged)
{
    /* The same steps, the entries freed by the autograd engine's thread: a
     * backward node's saved tensors, released right after the node read
     * them, a read that track() records only for tensors that outlive the
     * backward (observer.cpp, engine_ops): their true last use is unknown.
     * On clean training loops on the simulated device these were all but
     * 11 of the rule's 4,100 findings. */
    synth y;
    tape_steps_freed_on(&y, 0, 2);
    vt__check_report *r = check_tape(&y);
    assert_report_clean(r, &y);
}

TEST(tape_freeing_each_intermediate_after_its_use_is_clean)
{
    synth y;
    tape_steps(&y, 1);
    vt__check_report *r = check_tape(&y);
    assert_report_clean(r, &y);
    assert_rule_is_named("tape", VT_CHECK_RULE_TAPE);
}

TEST_MAIN()
