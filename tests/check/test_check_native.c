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
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_NEVER_FREED);
    ASSERT_EQ(f->nallocs, 5);    /* steps 1..5; step 6 is after the last mark */
    ASSERT_EQ(f->bytes, 5 * MiB);
    ASSERT_EQ(f->freed, 0);
    ASSERT_EQ(f->npaths, 0);
    const vt__frame *fr = &y.s.frames[y.s.stack_nodes[f->alloc_stack].frame];
    ASSERT_STR_EQ(y.s.strings_blob + y.s.string_offsets[fr->function], "append_history");
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
    assert_rendered_says(r, &y, 0, "rules: none;");
    assert_rendered_says(r, &y, 1, "\"rules_need_steps\":[\"never-freed\",\"outlier\"]");
    vt__check_report_free(r);
    /* named, they judge by time */
    vt__check_options o = default_options();
    o.rules = VT_CHECK_RULE_NEVER_FREED;
    r = check(&y, &o);
    ASSERT_EQ(r->rules_need_steps, 0);
    ASSERT_EQ(only_finding(r)->rule, VT_CHECK_RULE_NEVER_FREED);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(native_fixed_is_clean)
{
    assert_shape_is_clean(native, NATIVE_LEAK_FIXED | NATIVE_OUTLIER_FIXED);
}

TEST_MAIN()
