/* tests/check/test_check_pinned.c - the pinned rule (check_pinned.c): small
 * views keeping a dropped base's storage alive. */
#include "check_fixture.h"
#include "check_shapes.h"

/* ------------------------------------------------------------------------ */
/*  PINNED: small views keeping a dropped base's storage alive              */
/* ------------------------------------------------------------------------ */

TEST(pinned_used_view_is_flagged_with_wasted_bytes_and_path)
{
    synth y;
    vt__check_report *r = check_shape(&y, pinned_view, PIN_LEAK);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_GROWTH);
    if (r->nfindings != 1)
        dump(r, &y);
    /* used every step: LINGER stays silent */
    const vt__check_finding *f = the_finding(r, BIG, 4096);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->covered_bytes, 40);
    ASSERT_EQ(f->wasted_bytes, 4096 - 40);
    ASSERT_EQ(r->total_bytes, 4096 - 40);
    ASSERT_EQ(f->owner_id, BIG_ID);
    ASSERT_STR_EQ(f->owner_name, "big");
    ASSERT_EQ(f->ntensors, 2);
    ASSERT_EQ(f->freed, 0);
    ASSERT_GT(f->owner_drop_seq, 0);
    ASSERT_EQ(f->pinned_since_seq, f->owner_drop_seq);
    ASSERT_EQ(f->pinned_until_seq, UINT64_MAX);
    ASSERT_EQ(f->pinned_cut, 0);
    /* Dropped in step 2; one complete step (3) later, at the mark of step 4. */
    ASSERT_EQ(f->linger_from_seq, mark_seq_of(&y, "step 4"));
    ASSERT_EQ(f->steps_unused, 5);   /* steps 3..7 complete and pinned */
    ASSERT_EQ(f->linger_ns, r->end_time_ns - f->owner_drop_time_ns);
    ASSERT(fabs(f->byte_seconds - 4056.0 * (double)f->linger_ns / 1e9) < 1e-6);
    ASSERT_EQ(f->last_use_tensor, X_ID);
    ASSERT_EQ(f->nviews, 1);
    ASSERT_EQ(f->nviews_live, 1);
    ASSERT_EQ(f->views[0].id, X_ID);
    ASSERT_STR_EQ(f->views[0].name, "x");
    ASSERT_EQ(f->views[0].base_id, BIG_ID);
    ASSERT_STR_EQ(f->views[0].base_name, "big");
    ASSERT_EQ(f->views[0].bytes, 40);
    ASSERT_EQ(f->path_seq, UINT64_MAX);
    ASSERT_EQ(f->npaths, 1);
    ASSERT_STR_EQ(path_text(f, 0),
        "model.x \xe2\x86\x92 tensor 'x' (view of 'big') \xe2\x86\x92 "
        "storage 0x7e8000000000 4 KiB");
    char *t = NULL;
    size_t tl = 0;
    FILE *mf = open_memstream(&t, &tl);
    ASSERT(mf);
    ASSERT_EQ(vt__check_report_print(mf, r, &y.s, 0), 0);
    fclose(mf);
    ASSERT_STR_CONTAINS(t, "#1 [pinned] storage 0x7e8000000000 on cuda:0, 4 KiB");
    ASSERT_STR_CONTAINS(t, "kept by: tensor 'x' (view of 'big', 40 B of 4 KiB)");
    ASSERT_STR_CONTAINS(t, "wasted: 3.96 KiB of 4 KiB (live views cover 40 B)");
    ASSERT_STR_CONTAINS(t, "held by (at the end):");
    ASSERT_STR_CONTAINS(t, "model.x \xe2\x86\x92 tensor 'x' (view of 'big')");
    ASSERT_STR_CONTAINS(t, "or pinned by small views");
    free(t);
    vt__check_report_free(r);

    /* The grace: 5 complete steps pinned is enough, 6 are not there. */
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_grace("5steps", &o), 0);
    r = check(&y, &o);
    ASSERT_EQ(only_finding(r)->linger_from_seq, mark_seq_of(&y, "step 8"));
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_parse_grace("6steps", &o), 0);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);

    /* Selected alone or not at all. */
    o = default_options();
    ASSERT_EQ(vt__check_parse_rules("pinned", &o.rules), 0);
    ASSERT_EQ(o.rules, VT_CHECK_RULE_PINNED);
    r = check(&y, &o);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(r->nfindings, 1);
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_parse_rules("linger", &o.rules), 0);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);

    /* --ignore applies. */
    const char *pats[] = { "big" };
    o = default_options();
    o.ignore = pats;
    o.nignore = 1;
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    ASSERT_EQ(r->nignored, 1);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_fixed_clone_is_clean)
{
    assert_shape_is_clean(pinned_view, PIN_FIXED);
}

TEST(pinned_view_covering_most_of_its_base_is_clean)
{
    synth y;
    vt__check_report *r = check_shape(&y, pinned_view, PIN_MOSTLY_COVERED);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);
    /* ... unless the ratio asks for more than 90%. */
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_pinned_ratio("95%", &o.pinned_ratio), 0);
    r = check(&y, &o);
    only_finding_of(r, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(r->findings[0].covered_bytes, 3687);
    ASSERT_EQ(r->findings[0].wasted_bytes, 4096 - 3687);
    ASSERT(fabs(r->pinned_ratio - 0.95) < 1e-12);
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_parse_pinned_ratio("0.9", &o.pinned_ratio), 0);  /* 3687 >= 0.9 x 4096 */
    assert_checks_clean(&y, &o);
}

TEST(pinned_base_still_alive_is_not_pinned)
{
    synth y;
    pinned_view(&y, PIN_BASE_ALIVE);
    vt__check_options o = default_options();
    o.pinned_ratio = 1;
    assert_checks_clean(&y, &o);
}

TEST(pinned_ratio_parse)
{
    double v = 0.5;
    ASSERT_EQ(vt__check_parse_pinned_ratio("0.25", &v), 0);
    ASSERT(fabs(v - 0.25) < 1e-12);
    ASSERT_EQ(vt__check_parse_pinned_ratio("10%", &v), 0);
    ASSERT(fabs(v - 0.10) < 1e-12);
    ASSERT_EQ(vt__check_parse_pinned_ratio("1", &v), 0);
    ASSERT_EQ(v, 1.0);
    ASSERT_EQ(vt__check_parse_pinned_ratio("100%", &v), 0);
    ASSERT_EQ(v, 1.0);
    v = 0.5;
    ASSERT_EQ(vt__check_parse_pinned_ratio("0", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("0%", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("1.5", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("101%", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("-0.5", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("half", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("0.5x", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("nan", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio("", &v), -EINVAL);
    ASSERT_EQ(vt__check_parse_pinned_ratio(NULL, &v), -EINVAL);
    ASSERT_EQ(v, 0.5);
    vt__check_options o;
    vt__check_options_init(&o);
    ASSERT_EQ(o.pinned_ratio, VT_CHECK_PINNED_RATIO);
    ASSERT_STR_EQ(vt__check_rule_name(VT_CHECK_RULE_PINNED), "pinned");
    unsigned rules = 0;
    ASSERT_EQ(vt__check_parse_rules("all", &rules), 0);
    ASSERT(rules & VT_CHECK_RULE_PINNED);
}

TEST(pinned_and_linger_never_report_the_same_interval)
{
    synth y;
    pinned_then_lingering(&y, 4);
    vt__check_report *r = check(&y, NULL);
    if (r->nfindings != 2)
        dump(r, &y);
    ASSERT_EQ(r->nfindings, 2);
    const vt__check_finding *lg = NULL, *pn = NULL;
    for (size_t i = 0; i < r->nfindings; i++) {
        if (r->findings[i].rule == VT_CHECK_RULE_LINGER)
            lg = &r->findings[i];
        if (r->findings[i].rule == VT_CHECK_RULE_PINNED)
            pn = &r->findings[i];
    }
    ASSERT(lg && pn);
    ASSERT_EQ(lg->addr, BIG);
    ASSERT_EQ(pn->addr, BIG);
    /* PINNED: from the drop (step 2) to the last use (step 4), then LINGER. */
    ASSERT_EQ(pn->pinned_cut, 1);
    ASSERT_EQ(pn->pinned_until_seq, lg->last_use_seq);
    ASSERT_EQ(pn->pinned_until_time_ns, lg->last_use_time_ns);
    ASSERT_EQ(pn->linger_ns, lg->last_use_time_ns - pn->owner_drop_time_ns);
    ASSERT_EQ(pn->linger_from_seq, mark_seq_of(&y, "step 4"));
    ASSERT_EQ(pn->path_seq, pn->linger_from_seq);
    ASSERT_EQ(pn->wasted_bytes, 4056);
    ASSERT_STR_EQ(path_text(pn, 0),
        "model.x \xe2\x86\x92 tensor 'x' (view of 'big') \xe2\x86\x92 "
        "storage 0x7e8000000000 4 KiB");
    ASSERT_EQ(lg->bytes, 4096);
    ASSERT_EQ(r->total_bytes, 4096 + 4056);
    vt__check_report_free(r);

    /* PINNED alone is not cut: pinned until the view's drop in step 8. */
    r = check_rules(&y, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(only_finding(r)->pinned_cut, 0);
    ASSERT_GT(r->findings[0].pinned_until_seq, lg ? 0 : 0);
    ASSERT_EQ(r->findings[0].freed, 1);
    ASSERT_LT(r->findings[0].pinned_until_seq, r->findings[0].free_seq);  /* the drop */
    vt__check_report_free(r);
    synth_fini(&y);

    /* Used in step 3 only after the drop: what is left before the last use
     * does not outlast a complete step, so LINGER's finding is the only one. */
    pinned_then_lingering(&y, 3);
    r = check(&y, NULL);
    only_finding_of(r, VT_CHECK_RULE_LINGER);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_coverage_is_the_union_of_live_views_clipped)
{
    /* A 1000 B storage (block 1024). Views a [0,300), b [200,400),
     * c [400,800), d [950,1250) -> clipped to [950,1000). With c alive they
     * cover 750 B; c dropped in step 3 leaves 450 B (45%): pinned from there. */
    synth y;
    setup(&y);
    for (int i = 1; i <= 8; i++) {
        step(&y, i);
        if (i == 2) {
            synth_new_tensor(&y, BIG_ID, BIG, 1000, "base", st_fwd);
            synth_tensor(&y, 71, BIG, 300, BIG_ID, "a");
            synth_tensor(&y, 72, BIG + 200, 200, BIG_ID, "b");
            synth_tensor(&y, 73, BIG + 400, 400, BIG_ID, "c");
            synth_tensor(&y, 74, BIG + 950, 300, 71, "d");   /* a view of a view */
            synth_drop(&y, BIG_ID);
        }
        if (i == 3)
            synth_drop(&y, 73);
        if (i >= 2)
            for (uint64_t v = 71; v <= 74; v++)
                if (v != 73 || i < 3)
                    synth_use(&y, v);
    }
    vt__check_report *r = check(&y, NULL);
    if (r->nfindings != 1)
        dump(r, &y);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->bytes, 1000);
    ASSERT_EQ(f->block_bytes, 1024);
    ASSERT_EQ(f->covered_bytes, 450);
    ASSERT_EQ(f->wasted_bytes, 550);
    ASSERT_GT(f->pinned_since_seq, f->owner_drop_seq);   /* c's drop */
    ASSERT_EQ(f->linger_from_seq, mark_seq_of(&y, "step 5"));
    ASSERT_EQ(f->nviews_live, 3);
    ASSERT_EQ(f->nviews, 3);
    ASSERT_EQ(f->views[0].id, 71);   /* largest first: 300, 300 (by id), 200 */
    ASSERT_EQ(f->views[1].id, 74);
    ASSERT_EQ(f->views[1].covered_bytes, 50);
    ASSERT_STR_EQ(f->views[1].base_name, "a");
    ASSERT_EQ(f->views[2].id, 72);
    ASSERT(fabs(f->byte_seconds - 550.0 * (double)f->linger_ns / 1e9) < 1e-6);
    ASSERT_EQ(f->npaths, 3);   /* three live views, three roots */
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_time_rule_without_marks)
{
    synth y;
    /* pinned 19 s: over max(1 s, 5% of 31 s) */
    vt__check_report *r = check_shape(&y, pinned_no_marks, 20000);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(f->wasted_bytes, 63 * MiB);
    uint64_t grace = (r->end_time_ns - r->start_time_ns) / 100 * VT_CHECK_TIME_FRACTION_PCT;
    ASSERT_EQ(f->linger_from_time_ns, f->owner_drop_time_ns + grace);
    ASSERT_EQ(f->freed, 1);
    ASSERT_EQ(f->path_seq, f->linger_from_seq);
    ASSERT_STR_EQ(path_text(f, 0), "tensor 'x' (view of 'padded') \xe2\x86\x92 "
                                   "storage 0x7e8000000000 64 MiB");
    vt__check_report_free(r);
    synth_fini(&y);

    pinned_no_marks(&y, 2000);    /* pinned 1 s: under the grace */
    r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_grace("500ms", &o), 0);
    r = check(&y, &o);
    only_finding_of(r, VT_CHECK_RULE_PINNED);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* pinned_no_marks with the base dropped at 1 s and the view released at
 * 3.5 s, 1.5 s of which the tool paused the program (a tick's holder walk):
 * recorded (`pause`, a PAUSE event) or not. */
static void pinned_across_a_pause(synth *y, int pause)
{
    pinned_no_marks_begin(y);
    for (int k = 1; k <= 310; k++) {
        synth_tick(y, 100000000);
        synth_use(y, W_ID);
        if (k <= 25)
            synth_use(y, X_ID);
        if (k == 10)
            synth_drop(y, BIG_ID);
        if (k == 15) {
            synth_tick(y, 1500000000);
            if (pause)
                SYNTH_EV(y, VT_EV_PAUSE, .aux = 1500000000, .device = -1);
        }
        if (k == 25)
            synth_release(y, 0, X_ID, BIG);
    }
}

/* Judged by time, the tool's pauses are not the program's (as for linger):
 * pinned 2.5 s of the wall clock, over the grace (max(1 s, 5% of ~32 s)),
 * of which 1.5 s was the tool's: flagged without the PAUSE, not with it. */
TEST(pinned_time_rule_leaves_the_tools_pauses_out)
{
    synth y;
    pinned_across_a_pause(&y, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    only_finding_of(r, VT_CHECK_RULE_PINNED);
    vt__check_report_free(r);
    synth_fini(&y);

    pinned_across_a_pause(&y, 1);
    assert_checks_clean(&y, NULL);
}

TEST(pinned_json_has_rule_and_wasted_bytes)
{
    synth y;
    vt__check_report *r = check_shape(&y, pinned_view, PIN_LEAK);
    char *js = render(r, &y, 1);
    ASSERT_JSON_VALID(js);
    ASSERT_STR_CONTAINS(js, "\"rules_run\":[\"linger\",\"pinned\",\"growth\"]");
    ASSERT_STR_CONTAINS(js, "\"pinned_ratio\":0.5,");
    ASSERT_STR_CONTAINS(js, "\"rule\":\"pinned\"");
    ASSERT_STR_CONTAINS(js, "\"bytes\":4096,");
    ASSERT_STR_CONTAINS(js, "\"wasted_bytes\":4056,\"pinned\":{\"owner_dropped\":{\"seq\":");
    ASSERT_STR_CONTAINS(js, "\"until\":\"end\",\"cut_at_last_use\":false,"
                            "\"covered_bytes\":40,\"wasted_bytes\":4056,\"views_live\":1,"
                            "\"views\":[{\"id\":63,\"name\":\"x\",\"view_of\":{\"id\":60,"
                            "\"name\":\"big\"},\"addr\":\"0x7e8000000000\",\"bytes\":40,"
                            "\"covered_bytes\":40}]}");
    ASSERT_STR_CONTAINS(js, "\"total_bytes\":4056,");
    ASSERT_STR_CONTAINS(js, "\"paths_at\":\"end\"");
    ASSERT_STR_CONTAINS(js, "\"text\":\"model.x \xe2\x86\x92 tensor 'x' (view of 'big')");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);

    /* The LINGER finding of a storage a small view keeps after its base's
     * drop carries "pinned":null and what the view covers ("kept_part"). */
    pinned_then_lingering(&y, 4);
    r = check(&y, NULL);
    js = render(r, &y, 1);
    ASSERT_JSON_VALID(js);
    const vt__check_finding *lg = NULL;
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].rule == VT_CHECK_RULE_LINGER)
            lg = &r->findings[i];
    ASSERT(lg);
    char want[512];
    snprintf(want, sizeof want,
             "\"wasted_bytes\":4056,\"pinned\":null,\"kept_part\":{\"owner_dropped\":"
             "{\"seq\":%" PRIu64 ",\"time_ns\":%" PRIu64 "},\"covered_bytes\":40,"
             "\"wasted_bytes\":4056,\"views_live\":1,\"views\":[{\"id\":63,\"name\":\"x\","
             "\"view_of\":{\"id\":60,\"name\":\"big\"},\"addr\":\"0x7e8000000000\","
             "\"bytes\":40,\"covered_bytes\":40}]}",
             lg->owner_drop_seq, lg->owner_drop_time_ns);
    ASSERT_STR_CONTAINS(js, want);
    ASSERT_STR_CONTAINS(js, "\"cut_at_last_use\":true");
    /* the PINNED finding carries no "kept_part" */
    ASSERT_STR_CONTAINS(js, "\"covered_bytes\":40}]},\"kept_part\":null");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);

    /* A finding of neither carries "wasted_bytes":0, "pinned" and "kept_part" null. */
    r = check_shape(&y, closure_self, 0);
    js = render(r, &y, 1);
    ASSERT_JSON_VALID(js);
    ASSERT_STR_CONTAINS(js, "\"wasted_bytes\":0,\"pinned\":null,\"kept_part\":null");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(pinned_many_views_are_summarized)
{
    /* One 64 MiB buffer cut into 60000 1 KiB views; the base dropped, then
     * the views dropped one per event: coverage falls under half midway. */
    synth y;
    synth_init(&y);
    y.dt = 1000;
    uint32_t nm = synth_str(&y, "piece");
    synth_alloc(&y, BIG, 64 * MiB, 0);
    synth_tensor(&y, 1, BIG, 64 * MiB, 0, "base");
    const uint64_t n = 60000;
    for (uint64_t v = 0; v < n; v++) {
        vt__event *e = synth_ev(&y, VT_EV_TENSOR_NEW);
        e->aux = 10 + v;
        e->aux2 = 1;
        e->addr = BIG + v * 1024;
        e->size = 1024;
        e->str = nm;
    }
    synth_drop(&y, 1);
    for (uint64_t v = 0; v < n; v++) {
        synth_drop(&y, 10 + v);
        synth_tick(&y, 1000000);
    }
    double t0 = now_s();
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_grace("1s", &o), 0);
    o.rules = VT_CHECK_RULE_PINNED;   /* nothing is used: LINGER would take it all */
    vt__check_report *r = check(&y, &o);
    double dt = now_s() - t0;
    fprintf(stderr, "pinned: %zu events, %" PRIu64 " views in %.3f s\n", y.s.nevents, n, dt);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_PINNED);
    ASSERT_EQ(f->nviews, VT_CHECK_MAX_VIEWS);
    ASSERT_LT(f->covered_bytes, 32 * MiB);
    ASSERT_EQ(f->covered_bytes, (uint64_t)f->nviews_live * 1024);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
