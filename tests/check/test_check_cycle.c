/* tests/check/test_check_cycle.c - the cycle rule (check_cycle.c): storages a
 * garbage collection freed are reported as held by a reference cycle until
 * gc ran, whatever the grace; what refcounting frees, and what a collection's
 * victim leaves alive, is not; older files (no collection flag) are judged as
 * before. */
#include "check_shapes.h"

#define BUF 0x7f2000200000ull
#define GC_ID 900

/* One run of the collector: a holder flagged as a collection (`flagged`: 0
 * for a file written before the flag existed). */
static void collection(synth *y, int flagged)
{
    uint32_t n = synth_str(y, "reference cycle collected by gc");
    vt__event *e = synth_ev(y, VT_EV_HOLDER_NEW);
    e->aux = GC_ID;
    e->aux2 = flagged ? VT_HOLDER_GC_COLLECTION : 0;
    e->str = n;
}

/* Step 2 stashes act1 in a cycle A <-> B (a mark's walk recorded it) and
 * act2 the same way but with a view of it kept outside the cycle; a
 * collection in step 3 (before one complete unused step: LINGER's grace)
 * frees the cycle; the view dies right after (refcount), freeing act2.
 * Fixed: no cycle, refcounting frees act1 in step 2. `late`: the collector
 * runs in step 7 instead, after LINGER's grace. */
static void stash_in_cycle(synth *y, int fixed, int flagged, int late)
{
    setup(y);
    for (int i = 1; i <= 8; i++) {
        step(y, i);
        if (i == 2) {
            new_act_pair(y, "stash = Ctx(act) (train.py:12)", "kept = Ctx(act2) (train.py:13)");
            synth_tensor(y, 102, ACT2, 4096, 101, "view = kept.act[:1] (train.py:14)");
            synth_use_at(y, 100, st_bwd);
            synth_use_at(y, 102, st_bwd);
            if (fixed) {
                synth_drop(y, 100);
                synth_free(y, ACT1);
            }
        }
        if (i == 3 && !fixed) {   /* the walk at a mark found the cycle */
            synth_holder(y, 500, "Ctx");
            synth_held(y, 501, "Ctx", 500, ".peer");
            synth_ref(y, 501, 500, ".peer");
            synth_ref(y, 500, 100, ".act");
            synth_ref(y, 501, 101, ".act");
        }
        if (i == (late ? 7 : 3) && !fixed) {
            synth_tick(y, 1000000);
            collection(y, flagged);
            synth_ref(y, GC_ID, 100, "cycle");
            synth_drop(y, 100);
            synth_ref(y, GC_ID, 101, "cycle");
            synth_drop(y, 101);
            synth_free(y, ACT1);   /* freed inside the collection */
        }
        if (i == (late ? 8 : 3)) {   /* the view outside the cycle dies */
            synth_drop(y, 102);
            if (fixed)
                synth_drop(y, 101);
            synth_free(y, ACT2);
        }
    }
}

TEST(storage_a_collection_freed_is_held_by_a_reference_cycle_until_gc_ran)
{
    synth y;
    stash_in_cycle(&y, 0, 1, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_CYCLE |
                                VT_CHECK_RULE_GROWTH);
    /* act1 only: act2's last tensor (the view) died by refcount later; the
     * weights and each step's activation were never the collector's. */
    ASSERT_EQ(r->nfindings, 1);
    const vt__check_finding *f = &r->findings[0];
    ASSERT_EQ(f->rule, VT_CHECK_RULE_CYCLE);
    ASSERT_EQ(f->addr, ACT1);
    ASSERT_EQ(f->bytes, 1 * MiB);
    ASSERT_EQ(f->freed, 1);
    ASSERT_LT(f->gc_seq, f->free_seq);
    ASSERT_EQ(f->linger_from_seq, f->gc_seq);
    ASSERT_EQ(f->linger_ns, f->free_time_ns - f->last_use_time_ns);
    ASSERT_EQ(f->last_use_step, 2);
    ASSERT_EQ(f->steps_unused, 0);
    ASSERT_EQ(f->path_seq, f->gc_seq - 1);
    ASSERT_EQ(f->npaths, 1);
    ASSERT(f->paths[0].cycle);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) Ctx.peer \xe2\x86\x92 Ctx.peer \xe2\x86\x92 Ctx.act \xe2\x86\x92 tensor "
        "'stash = Ctx(act) (train.py:12)' \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "#1 [cycle] storage 0x7f2000000000");
    ASSERT_STR_CONTAINS(text, "held by a reference cycle until gc ran: the collection at ");
    ASSERT_STR_CONTAINS(text, " after its last use, 0 complete steps unused\n");
    ASSERT_STR_CONTAINS(text, "held by (just before gc collected it):\n     (cycle) Ctx.peer");
    free(text);
    char *js = render(r, &y, 1);
    ASSERT_STR_CONTAINS(js, "\"rules_run\":[\"linger\",\"pinned\",\"cycle\",\"growth\"]");
    ASSERT_STR_CONTAINS(js, "\"rule\":\"cycle\"");
    char want[96];
    snprintf(want, sizeof want, "\"collected_by_gc\":{\"seq\":%" PRIu64 ",", f->gc_seq);
    ASSERT_STR_CONTAINS(js, want);
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A stash_in_cycle trace whose report is clean and ran no cycle rule (no
 * collection was flagged in it). */
static void assert_clean_without_cycle_rule(int fixed, int flagged)
{
    synth y;
    stash_in_cycle(&y, fixed, flagged, 0);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_GROWTH);
    assert_report_clean(r, &y);
}

TEST(cycle_fixed_by_refcounting_is_clean)
{
    assert_clean_without_cycle_rule(1, 1);
}

TEST(a_late_collection_is_one_cycle_finding_not_a_linger_one_too)
{
    synth y;
    stash_in_cycle(&y, 0, 1, 1);
    vt__check_report *r = check(&y, NULL);
    /* act1: the cycle rule's (LINGER would flag it too); act2: held by its
     * view through complete steps after its last use, LINGER's. */
    ASSERT_EQ(r->nfindings, 2);
    const vt__check_finding *f = by_addr(r, ACT1);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_CYCLE);
    ASSERT_EQ(f->steps_unused, 4);   /* steps 3..6 complete and unused */
    f = by_addr(r, ACT2);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    /* --rules linger: the same storage is LINGER's alone */
    vt__check_options o;
    vt__check_options_init(&o);
    ASSERT_EQ(vt__check_parse_rules("linger", &o.rules), 0);
    vt__check_report *l = check(&y, &o);
    ASSERT_EQ(l->nfindings, 2);
    ASSERT_EQ(by_addr(l, ACT1)->rule, VT_CHECK_RULE_LINGER);
    vt__check_report_free(l);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(collection_without_the_flag_is_an_ordinary_holder)
{
    /* A file from before VT_HOLDER_GC_COLLECTION: nothing says the holder
     * was a collection, so the storage freed within the grace is not judged. */
    assert_clean_without_cycle_rule(0, 0);
    assert_rule_is_named("cycle", VT_CHECK_RULE_CYCLE);
}

TEST_MAIN()
