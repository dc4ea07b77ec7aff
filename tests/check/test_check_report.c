/* tests/check/test_check_report.c - what every rule shares (check.c,
 * check_report.c, check_paths.c): options, ranking, odd inputs, the text and
 * JSON reports, and a million events. Findings grouped by cause:
 * test_check_groups.c. */
#include "check_fixture.h"
#include "check_shapes.h"
#include "timeline.h"
#include "u64map.h"

/* ------------------------------------------------------------------------ */
/*  Options                                                                 */
/* ------------------------------------------------------------------------ */

TEST(grace_steps_option)
{
    synth y;
    gc_cycle(&y, 0);   /* steps 3, 4, 5 unused, freed in step 6 */
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_grace("4steps", &o), 0);
    ASSERT_EQ(o.grace_mode, VT_CHECK_GRACE_STEPS);
    ASSERT_EQ(o.grace_steps, 4);
    vt__check_report *r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_parse_grace("3", &o), 0);
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->grace_user, 1);
    ASSERT_EQ(r->grace_steps, 3);
    vt__check_report_free(r);
    synth_fini(&y);

    /* 0 steps: alive at the end of the step of its last use is enough. */
    pipeline(&y, 1);
    ASSERT_EQ(vt__check_parse_grace("0steps", &o), 0);
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);   /* freed within the step */
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(grace_time_option)
{
    synth y;
    gc_cycle(&y, 0);   /* steps are 100 ms: lingering about 400 ms */
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_grace("50ms", &o), 0);
    ASSERT_EQ(o.grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(o.grace_ns, 50000000);
    vt__check_report *r = check(&y, &o);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_TIME);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->findings[0].linger_from_time_ns, r->findings[0].last_use_time_ns + 50000000);
    ASSERT_EQ(r->findings[0].npaths, 1);   /* paths at last use + 50 ms: the cycle */
    ASSERT(r->findings[0].paths[0].cycle);
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_parse_grace("2.5s", &o), 0);
    ASSERT_EQ(o.grace_ns, 2500000000ull);
    assert_checks_clean(&y, &o);

    ASSERT_EQ(vt__check_parse_grace("1.5steps", &o), -EINVAL);
    ASSERT_EQ(vt__check_parse_grace("-1s", &o), -EINVAL);
    ASSERT_EQ(vt__check_parse_grace("3parsecs", &o), -EINVAL);
    ASSERT_EQ(vt__check_parse_grace("", &o), -EINVAL);
    ASSERT_EQ(vt__check_parse_grace("auto", &o), 0);
    ASSERT_EQ(o.grace_mode, VT_CHECK_GRACE_AUTO);
}

TEST(ignore_patterns)
{
    synth y;
    gc_cycle(&y, 0);
    const char *pats[] = { "act1" };
    vt__check_options o = default_options();
    o.ignore = pats;
    o.nignore = 1;
    vt__check_report *r = check(&y, &o);
    ASSERT_EQ(only_finding(r)->addr, ACT2);
    ASSERT_EQ(r->nignored, 1);
    vt__check_report_free(r);

    pats[0] = "act*";
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    ASSERT_EQ(r->nignored, 2);
    vt__check_report_free(r);

    pats[0] = "forward_*";   /* a function of the allocation stack */
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);

    pats[0] = "backward_block";   /* a function of the last-use stack */
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);

    pats[0] = "nothing*";
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->nignored, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* What holds a tensor: holders, then the references between them; each
 * list ends at an id of 0. */
struct holder {
    uint64_t id;
    const char *type;
};

struct edge {
    uint64_t from, to;
    const char *label;
};

static void hold(synth *y, const struct holder *holders, const struct edge *edges)
{
    for (; holders->id; holders++)
        synth_holder(y, holders->id, holders->type);
    for (; edges->from; edges++)
        synth_ref(y, edges->from, edges->to, edges->label);
}

/* Unused through step 6, tensor 70 is held by `paths` (NULL-terminated),
 * and by the first of them alone where one path a finding is asked for; y
 * is finished. */
static void assert_kept_through_step_6_by(synth *y, const char *const *paths)
{
    steps(y, 2, 6);
    vt__check_report *r = check(y, NULL);
    assert_paths(the_finding(r, ACT1, MiB), paths);
    vt__check_report_free(r);
    vt__check_options o = default_options();
    o.max_paths = 1;
    r = check(y, &o);
    assert_paths(&r->findings[0], (const char *const[]){ paths[0], NULL });
    vt__check_report_free(r);
    synth_fini(y);
}

/* A holder whose HOLDER_NEW the ring overwrote is nameless ("holder #71")
 * until a TENSOR_NAME names it (the tracker's snapshot walk names its
 * holders again after their refs); a holder with a name keeps it. */
TEST(a_holder_declared_before_the_window_takes_the_name_given_again)
{
    synth y;
    made_in_step_1(&y, 70, ACT1, "t");
    hold(&y, (const struct holder[]){ { 73, "named" }, { 0 } },
         (const struct edge[]){ { 71, 72, ".kept" },   /* 71, 72: declared before the window */
                                { 72, 70, "[0]" }, { 0 } });
    steps(&y, 2, 6);
    synth_name(&y, 71, "module __main__");
    synth_name(&y, 72, "list");
    synth_name(&y, 73, "renamed");           /* named already: left alone */
    synth_ref(&y, 73, 70, "[1]");
    vt__check_report *r = check(&y, NULL);
    assert_paths(the_finding(r, ACT1, MiB), (const char *const[]){
        "named[1] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 1 MiB",
        "module __main__.kept \xe2\x86\x92 list[0] \xe2\x86\x92 tensor 't' \xe2\x86\x92 "
        "storage 0x7f2000000000 1 MiB", NULL });
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(max_paths_and_multiple_roots)
{
    /* One storage held by three lists: three roots, shortest first. */
    synth y;
    made_in_step_1(&y, 70, ACT1, "t");
    hold(&y, (const struct holder[]){ { 71, "deep" }, { 72, "mid" }, { 73, "short" },
                                      { 74, "other" }, { 0 } },
         (const struct edge[]){ { 71, 72, ".x" }, { 72, 70, "[0]" }, { 73, 70, "[1]" },
                                { 74, 70, "[2]" },
                                { 73, 70, "[3]" },   /* a second edge, same pair */
                                { 0 } });
    synth_unref(&y, 73, 70);        /* removes the latest: [3] */
    assert_kept_through_step_6_by(&y, (const char *const[]){
        "other[2] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 1 MiB",
        "short[1] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 1 MiB",
        "deep.x \xe2\x86\x92 mid[0] \xe2\x86\x92 tensor 't' \xe2\x86\x92 storage 0x7f2000000000 "
        "1 MiB",
        NULL });
}

/* Tensors alive long after their last use that no recorded reference holds
 * (the holder walks reached nothing referring to them: held from C++, or
 * freed before a walk got to their holder): the report says no holder was
 * found, not a "held by" that is the tensor itself. Before: "held by:
 * tensor 'out (train.py:10)'" and a path of the tensor's own hop. */
TEST(a_lingering_tensor_no_walk_found_a_holder_of_says_so)
{
    synth y;
    synth_init(&y);
    uint32_t st = synth_stack(&y, "forward", "main", NULL);
    synth_mark(&y, "step 0");
    synth_made(&y, 70, 0x7f0000000000ull, MiB, "out", st);
    synth_made(&y, 71, 0x7f0000200000ull, MiB, "out", st);
    for (int k = 1; k <= 5; k++) {
        synth_tick(&y, 100000000);
        synth_mark(&y, "step");
    }
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->findings[0].npaths, 1);   /* the tensor's own hop, in the JSON */
    ASSERT_EQ(r->findings[0].paths[0].nsteps, 2);
    const char *said = "no holder found (no object the holder walks reached refers to the "
                       "tensor: it is held from C++, or a walk had not reached its holder yet)\n";
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "2 findings from 1 cause");
    char cause[512], finding[512];
    snprintf(cause, sizeof cause, "     held by: %s", said);
    snprintf(finding, sizeof finding, "   held by (at the end): %s", said);
    ASSERT_STR_CONTAINS(text, cause);
    ASSERT_STR_CONTAINS(text, finding);
    ASSERT(strstr(text, "held by: tensor") == NULL);
    ASSERT(strstr(text, "\xe2\x86\x92 storage") == NULL);   /* no path of the tensor's own hop */
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A graph kept by a module's global, and a shorter chain to its saved
 * tensor ACT1 from `shorter`: a tensor nothing recorded holds (an output
 * another node saved, held from C++), or an autograd node nothing recorded
 * holds (an earlier batch's loss node, its loss tensor gone). The path
 * shown first names the global; the second starts with `second`. */
static void graph_kept_by_a_global(int shorter_is_node, const char *second)
{
    synth y;
    made_in_step_1(&y, 80, ACT1, "gates");
    synth_new_tensor(&y, 82, ACT2 + 4096, 4, "hidden", st_fwd);
    synth_holder(&y, 83, "module __main__");
    synth_holder(&y, 84, "LstmBackward0");
    synth_holder(&y, 85, "StackBackward0");
    if (shorter_is_node) {
        synth_holder(&y, 81, "NllLossBackward0");
        synth_ref(&y, 81, 84, "next_functions[0]");
    } else {
        synth_new_tensor(&y, 81, ACT2, 4, "out", st_fwd);
        synth_ref(&y, 81, 84, "grad_fn");
    }
    synth_ref(&y, 84, 80, "SavedTensor 'gates' of LstmBackward0");
    synth_ref(&y, 85, 84, "next_functions[0]");
    synth_ref(&y, 82, 85, "grad_fn");
    synth_ref(&y, 83, 82, ".hidden");
    steps(&y, 2, 6);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = by_addr(r, ACT1);
    ASSERT_EQ(f->npaths, 2);
    ASSERT_MSG(!strncmp(path_text(f, 0), "module __main__.hidden", 22), "%s", path_text(f, 0));
    ASSERT_MSG(!strncmp(path_text(f, 1), second, strlen(second)), "%s", path_text(f, 1));
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_named_root_is_shown_before_a_tensor_nothing_is_seen_holding)
{
    graph_kept_by_a_global(0, "tensor 'out'.grad_fn");
}

TEST(a_named_root_is_shown_before_an_autograd_node_nothing_is_seen_holding)
{
    graph_kept_by_a_global(1, "NllLossBackward0.next_functions[0]");
}

TEST(a_named_root_is_shown_before_a_bare_container_no_one_is_seen_holding)
{
    /* Lightning's optimizer_step(model=, closure=) keeps a keyword-argument
     * dict on a running frame's value stack: found with no referrer, a bare
     * 'dict'. It is nearer than the frame local naming the same model, but
     * the path shown first is the one that says who holds it. */
    synth y;
    made_in_step_1(&y, 70, ACT1, "logits");
    hold(&y, (const struct holder[]){ { 71, "frame" }, { 72, "Net" }, { 73, "list" },
                                      { 74, "dict" }, { 0 } },
         (const struct edge[]){ { 73, 70, "[0]" }, { 72, 73, ".outputs" },
                                { 71, 72, "local 'model' in fit trainer.py:538" },
                                { 74, 72, "['model']" }, { 0 } });
    /* Asked for one path, the named one, though the bare dict is as near. */
    assert_kept_through_step_6_by(&y, (const char *const[]){
        "frame local 'model' in fit trainer.py:538 \xe2\x86\x92 Net.outputs \xe2\x86\x92 list[0] "
        "\xe2\x86\x92 tensor 'logits' \xe2\x86\x92 storage 0x7f2000000000 1 MiB",
        "dict['model'] \xe2\x86\x92 Net.outputs \xe2\x86\x92 list[0] \xe2\x86\x92 tensor 'logits' "
        "\xe2\x86\x92 storage 0x7f2000000000 1 MiB",
        NULL });
}

/* An evaluation's graph that only a cycle through C++ keeps (a
 * saved_tensors_hooks pack hook returned ReLU's output as it was given):
 * tensor 'out' (ACT1) → its grad_fn ReluBackward0, which saved 'out' itself
 * and leads to AddmmBackward0, which saved the batch 'x' (ACT2). Each
 * storage's chain reads from the tensor 'out', whichever hop the search met
 * the cycle at (the batch's at the node's saved 'result'), so both are one
 * cause; the report says why no collection frees it. */
TEST(a_cycle_through_a_pack_hooks_saved_output_reads_from_its_tensor_as_one_cause)
{
    synth y;
    made_in_step_1(&y, 90, ACT1, "out");
    synth_new_tensor(&y, 91, ACT2, 2 * MiB, "x", st_fwd);
    synth_holder(&y, 92, "ReluBackward0");
    synth_holder(&y, 93, "AddmmBackward0");
    synth_ref(&y, 90, 92, "grad_fn");
    synth_ref(&y, 92, 90, "SavedTensor 'result' of ReluBackward0 (as packed by saved_tensors_hooks)");
    synth_ref(&y, 92, 93, "next_functions[0]");
    synth_ref(&y, 93, 91, "SavedTensor 'mat1' of AddmmBackward0 (as packed by saved_tensors_hooks)");
    steps(&y, 2, 6);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    const vt__check_finding *f = by_addr(r, ACT2);
    ASSERT(f->paths[0].cycle);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) tensor 'out'.grad_fn \xe2\x86\x92 ReluBackward0.next_functions[0] \xe2\x86\x92 "
        "AddmmBackward0.SavedTensor 'mat1' of AddmmBackward0 (as packed by saved_tensors_hooks) "
        "\xe2\x86\x92 tensor 'x' \xe2\x86\x92 storage 0x7f2000100000 2 MiB");
    f = by_addr(r, ACT1);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) tensor 'out'.grad_fn \xe2\x86\x92 ReluBackward0.SavedTensor 'result' of "
        "ReluBackward0 (as packed by saved_tensors_hooks) \xe2\x86\x92 tensor 'out' "
        "\xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "2 findings from 1 cause");
    ASSERT_STR_CONTAINS(text, "held by: (cycle) tensor 'out'.grad_fn \xe2\x86\x92 (the autograd"
                              " graph it keeps)\n     a cycle through the autograd graph, which the"
                              " garbage collector cannot break");
    ASSERT_STR_CONTAINS(text, "a pack hook that returns t.detach() saves the same data without"
                              " the cycle");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Ranking, bytes, odd inputs                                              */
/* ------------------------------------------------------------------------ */

TEST(findings_ranked_by_bytes_times_time)
{
    /* small: 1 MiB held ~5 steps; big: 8 MiB held ~2 steps; mid: 3 MiB
     * (asked 3 MiB + 100, block rounded) held ~4 steps. */
    synth y;
    setup(&y);
    step(&y, 1);
    synth_new_tensor(&y, 80, 0x7e0000000000ull, MiB, "small", st_fwd);
    synth_new_tensor(&y, 81, 0x7e1000000000ull, 8 * MiB, "big", st_fwd);
    synth_new_tensor(&y, 82, 0x7e2000000000ull, 3 * MiB + 100, "mid", st_fwd);
    steps(&y, 2, 4);
    synth_release(&y, 0, 81, 0x7e1000000000ull);
    steps(&y, 5, 6);
    synth_release(&y, 0, 82, 0x7e2000000000ull);
    step(&y, 7);
    synth_release(&y, 0, 80, 0x7e0000000000ull);
    steps(&y, 8, 9);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 3);
    ASSERT_STR_EQ(r->findings[0].owner_name, "big");
    ASSERT_STR_EQ(r->findings[1].owner_name, "mid");
    ASSERT_STR_EQ(r->findings[2].owner_name, "small");
    ASSERT_EQ(r->findings[1].bytes, 3 * MiB + 100);
    ASSERT_EQ(r->findings[1].block_bytes, 3 * MiB + 512);
    double total = 0;
    for (size_t i = 0; i < r->nfindings; i++) {
        if (i)
            ASSERT(r->findings[i - 1].byte_seconds >= r->findings[i].byte_seconds);
        total += r->findings[i].byte_seconds;
    }
    ASSERT(fabs(total - r->total_byte_seconds) < 1e-6);
    ASSERT_EQ(r->total_bytes, 12 * MiB + 100);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A host storage of 5 MiB (a CPU tensor, as track() declares one) and its
 * tensor 90, 'cpu batch', made in step 1. */
static void cpu_batch_made_in_step_1(synth *y)
{
    setup(y);
    step(y, 1);
    synth_ext(y, 0x5555000000ull, 5 * MiB);
    synth_tensor(y, 90, 0x5555000000ull, 5 * MiB, 0, "cpu batch");
}

TEST(external_storage_is_checked)
{
    synth y;
    cpu_batch_made_in_step_1(&y);
    synth_holder(&y, 91, "DataLoader");
    synth_ref(&y, 91, 90, "._prefetched[0]");
    steps(&y, 2, 5);
    synth_unref(&y, 91, 90);
    synth_drop(&y, 90);
    synth_ext_free(&y, 0x5555000000ull);
    step(&y, 6);
    /* A host storage next to device ones: judged with --host only (by
     * default the report says it was not judged). */
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->nhost_skipped, 1);
    vt__check_report_free(r);
    vt__check_options o = default_options();
    o.host = VT_CHECK_HOST_ALWAYS;
    r = check(&y, &o);
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->external, 1);
    ASSERT_EQ(f->device, -1);
    ASSERT_EQ(f->bytes, 5 * MiB);
    ASSERT_EQ(f->freed, 1);
    ASSERT_STR_EQ(path_text(f, 0),
        "DataLoader._prefetched[0] \xe2\x86\x92 tensor 'cpu batch' \xe2\x86\x92 "
        "storage 0x5555000000 5 MiB");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The external storages a view draws: in allocation order, each with the
 * lifetime, owner (its latest name) and last use the checker's model has;
 * the allocator's own allocations are not in the list. */
TEST(external_storages_are_listed_with_owner_and_last_use)
{
    synth y;
    cpu_batch_made_in_step_1(&y);
    synth_tensor(&y, 92, 0x5555000000ull, 1 * MiB, 90, "its view");
    synth_tick(&y, 1000);
    synth_use(&y, 92);
    uint64_t use_time = y.time;
    step(&y, 2);
    synth_ext(&y, 0x6666000000ull, 2 * MiB);
    synth_tensor(&y, 93, 0x6666000000ull, 2 * MiB, 0, "scratch");
    synth_name(&y, 93, "scratch (renamed)");
    synth_drop(&y, 93);
    synth_ext_free(&y, 0x6666000000ull);
    step(&y, 3);
    vt__check_storage *xs = NULL;
    size_t n = 0;
    char err[256];
    ASSERT_EQ(vt__check_list_external(&y.s, &xs, &n, err, sizeof err), 0);
    ASSERT_EQ(n, 2);
    ASSERT_EQ(xs[0].addr, 0x5555000000ull);
    ASSERT_EQ(xs[0].bytes, 5 * MiB);
    ASSERT_EQ(xs[0].device, -1);
    ASSERT_EQ(xs[0].freed, 0);
    ASSERT_EQ(xs[0].ntensors, 2);
    ASSERT_EQ(xs[0].nuses, 3);                       /* two creations and a use */
    ASSERT_EQ(xs[0].last_use_time_ns, use_time);
    ASSERT_EQ(xs[0].owner_id, 90);
    ASSERT_STR_EQ(vt__snapshot_string(&y.s, xs[0].owner_name), "cpu batch");
    ASSERT_EQ(y.s.events[xs[0].alloc_event].kind, VT_EV_STORAGE_EXTERNAL);
    ASSERT_EQ(y.s.events[xs[0].alloc_event].seq, xs[0].alloc_seq);
    ASSERT_EQ(xs[1].addr, 0x6666000000ull);
    ASSERT_EQ(xs[1].freed, 1);
    ASSERT_GT(xs[1].free_seq, xs[1].alloc_seq);
    ASSERT_STR_EQ(vt__snapshot_string(&y.s, xs[1].owner_name), "scratch (renamed)");
    free(xs);
    /* None declared: an empty list, not an error. */
    synth_fini(&y);
    setup(&y);
    step(&y, 1);
    ASSERT_EQ(vt__check_list_external(&y.s, &xs, &n, err, sizeof err), 0);
    ASSERT_EQ(n, 0);
    ASSERT(xs == NULL);
    synth_fini(&y);
}

/* A tensor on memory allocated before the window (no ALLOC seen): made,
 * used and dropped in step 1 while the memory lives on (e.g. a leaked raw
 * pointer), the block freed in step 5 of 6. */
struct memory_from_before_the_window {
    uint64_t id, addr, bytes;   /* the tensor */
    const char *name;
    uint64_t block;
    uint64_t block_bytes;       /* what the free says of the block, 0: nothing */
};

static void tensor_on_memory_from_before_the_window(synth *y,
                                                    const struct memory_from_before_the_window *m)
{
    setup(y);
    step(y, 1);
    synth_tensor(y, m->id, m->addr, m->bytes, 0, m->name);
    synth_use(y, m->id);
    synth_drop(y, m->id);
    steps(y, 2, 5);
    SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = m->block, .size = m->block_bytes);
    step(y, 6);
}

/* The report's one finding: the block at `block`, of `bytes`, from before
 * the window and freed. */
static const vt__check_finding *the_freed_block_from_before_the_window(const vt__check_report *r,
                                                                       uint64_t block,
                                                                       uint64_t bytes)
{
    const vt__check_finding *f = the_finding(r, block, bytes);
    ASSERT_EQ(f->before_window, 1);
    ASSERT_EQ(f->freed, 1);
    return f;
}

TEST(storage_from_before_the_window_and_dropped_tensors)
{
    synth y;
    tensor_on_memory_from_before_the_window(&y, &(struct memory_from_before_the_window){
        .id = 95, .addr = 0x7ee000000000ull, .bytes = 6 * MiB, .name = "old",
        .block = 0x7ee000000000ull });
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = the_freed_block_from_before_the_window(r, 0x7ee000000000ull,
                                                                        6 * MiB);
    ASSERT_EQ(f->npaths, 0);   /* nothing alive holds it */
    vt__check_report_free(r);
    synth_fini(&y);
}

/* One matching rule for every view: a FREE_REQUESTED with no ALLOC in the
 * window is an allocation from before it, for the checker as for the
 * timeline. A view inside that block binds to it (it used to get an implicit
 * storage of its own that the free never closed). */
TEST(free_without_alloc_is_the_same_lifetime_for_checker_and_timeline)
{
    synth y;
    const uint64_t blk = 0x7ed000000000ull;
    tensor_on_memory_from_before_the_window(&y, &(struct memory_from_before_the_window){
        .id = 96, .addr = blk + MiB, .bytes = MiB, .name = "inner",
        .block = blk, .block_bytes = 8 * MiB });
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = the_freed_block_from_before_the_window(r, blk, 8 * MiB);

    vt__timeline *tl;
    char err[256];
    ASSERT_EQ(vt__timeline_build(&y.s, &tl, err, sizeof err), 0);
    const vt__lifetime *l = vt__timeline_find(tl, blk, VT_TL_NONE);
    ASSERT(l != NULL);
    ASSERT(l->flags & VT_LT_BEFORE_WINDOW);
    ASSERT_EQ(l->size, f->bytes);
    ASSERT_EQ(l->free_seq, f->free_seq);
    vt__timeline_free(tl);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(empty_and_malformed_inputs_never_fail)
{
    synth y;
    synth_init(&y);
    vt__check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);
    /* Garbage: unknown ids, unref without ref, frees of nothing, uses of
     * unknown tensors, out-of-range strings and stacks. */
    for (int i = 0; i < 50; i++) {
        vt__event *e = synth_ev(&y, (uint8_t)(i % 30));
        e->aux = (uint64_t)i * 7;
        e->aux2 = (uint64_t)i * 3;
        e->addr = (uint64_t)i * 4096;
        e->size = 4096;
        e->str = (uint32_t)i * 1000;
        e->stack = (uint32_t)i * 1000;
    }
    r = check_rules(&y, VT_CHECK_RULES_ALL);
    FILE *devnull = fopen("/dev/null", "w");
    ASSERT(devnull);
    ASSERT_EQ(vt__check_report_print(devnull, r, &y.s, 0), 0);
    ASSERT_EQ(vt__check_report_write_json(devnull, r, &y.s), 0);
    fclose(devnull);
    vt__check_report_free(r);
    ASSERT_EQ(vt__check_run(NULL, NULL, &r, NULL, 0), -EINVAL);
    synth_fini(&y);
}

TEST(path_format_truncates_like_snprintf)
{
    synth y;
    pipeline(&y, 0);
    vt__check_report *r = check(&y, NULL);
    char small[10];
    size_t need = vt__check_path_format(&r->findings[0].paths[0], small, sizeof small);
    char big[512];
    ASSERT_EQ(vt__check_path_format(&r->findings[0].paths[0], big, sizeof big), need);
    ASSERT_EQ(strlen(big), need);
    ASSERT_EQ(strlen(small), sizeof small - 1);
    ASSERT_EQ(strncmp(small, big, sizeof small - 1), 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* ------------------------------------------------------------------------ */
/*  Output                                                                  */
/* ------------------------------------------------------------------------ */

TEST(json_output_is_valid_and_complete)
{
    assert_shape_says(view_pins_base, 0, 1, (const char *const[]){
        "\"vramtrace_check\":1",
        "\"rule\":\"linger\"",
        "\"addr\":\"0x7f4000000000\"",
        "\"bytes\":67108864",
        "\"owner\":{\"id\":10,\"name\":\"padded\"}",
        "\"view_of\":{\"id\":10,\"name\":\"padded\"}",
        "\"function\":\"forward_block\"",
        "\"text\":\"outputs[0] \xe2\x86\x92 tensor 'z' (view of 'padded')",
        "\"grace\":{\"mode\":\"steps\",\"steps\":null,\"seconds\":null}",
        NULL });

    /* Clean, native, and odd strings. */
    synth y;
    native(&y, 0);
    synth_str(&y, "x");
    vt__check_report *r = check(&y, NULL);
    assert_rendered_says_each(r, &y, 1, (const char *const[]){
        "\"rule\":\"never-freed\"", "\"rule\":\"outlier\"", "\"owner\":null", NULL });
    vt__check_report_free(r);
    synth_fini(&y);

    setup(&y);
    synth_holder(&y, 5, "quote\" back\\slash \x01 tab\t");
    synth_ref(&y, 5, W_ID, "[\"k\"]");
    for (int i = 1; i <= 4; i++) {
        synth_tick(&y, 100000000);
        synth_mark(&y, "s");
    }
    r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 1);
    assert_rendered_says(r, &y, 1, "quote\\\" back\\\\slash \\u0001 tab\\t");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A kept loss of 8 bytes on the 75 KiB storage of its elementwise loss (as
 * PyTorch's mse_loss returns it) is said to be that small: "holding 75 KiB"
 * alone reads as a mistake. A tensor as large as its storage is not. */
TEST(an_owner_much_smaller_than_its_storage_says_its_own_bytes)
{
    synth y;
    kept_losses_on_their_buffers(&y);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 2);
    assert_text_and_json_say(r, &y,
                             "owner: tensor 'loss = criterion(out, target) (train.py:58)' (#31, "
                             "itself 8 B of the storage's 75.02 KiB), 1 tensor bound",
                             "\"owner_bytes\":8,");
    assert_text_and_json_say(r, &y,
                             "owner: tensor 'err = out - target (train.py:57)' (#32), "
                             "1 tensor bound",
                             "\"owner_bytes\":76824,");
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(text_report_names_everything)
{
    assert_shape_says(pipeline, 0, 0, (const char *const[]){
        "vramtrace check: 2 findings, 48 MiB held after last use",
        "#1 [linger] storage 0x7f6001000000 on cuda:0, 32 MiB",
        "owner: tensor 'send 1' (#21)",
        "at forward_block (train.c:10)",
        "last use: tensor 'send 1' (#21)",
        "at backward_block (train.c:10)",
        "2 complete steps unused (used in one step only)",
        "freed: seq",
        " MiB\xc2\xb7s",
        "Context.output_tensors \xe2\x86\x92 list[1]",
        NULL });
    assert_shape_says(ends_alive, 6, 0, (const char *const[]){
        "still alive at the end", "held by (at the end):", NULL });
}

/* A finding's Python frames say where their function is defined (format
 * 1.4 first lines), in the text as "def at line N" and in JSON as
 * first_line; a module's top level ("<module>", always line 1) does not. */
TEST(python_frames_of_a_finding_name_the_line_their_function_is_defined_at)
{
    synth y;
    pipeline(&y, 0);
    uint32_t python = synth_str(&y, "python"), top = synth_str(&y, "<module>");
    for (size_t i = 0; i < y.s.nframes; i++) {
        vt__frame *f = &y.s.frames[i];
        const char *fn = vt__snapshot_string(&y.s, f->function);
        f->ip = f->module_offset = 0;
        f->module = python;
        if (!strcmp(fn, "forward_block"))
            f->first_line = 7;
        if (!strcmp(fn, "main")) {
            f->function = top;
            f->first_line = 1;
        }
    }
    vt__check_report *r = check(&y, NULL);
    char *t = render(r, &y, 0);
    ASSERT_STR_CONTAINS(t, "at forward_block (train.c:10, def at line 7)");
    ASSERT_STR_CONTAINS(t, "at train_step (train.c:11)\n");     /* first line unknown */
    ASSERT_STR_CONTAINS(t, "at <module> (train.c:12)\n");
    free(t);
    char *js = render(r, &y, 1);
    ASSERT_JSON_VALID(js);
    ASSERT_STR_CONTAINS(js, "\"function\":\"forward_block\",\"file\":\"train.c\",\"line\":10,"
                            "\"first_line\":7,");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

#define TORCH_LINEAR "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py"

/* The pipeline's report with its frames made Python frames: forward_block's
 * in file `forward_file`, train_step's in `step_file`, the rest the
 * program's (/home/me/train.py). The caller frees the text. */
static char *report_of_python_frames(const char *forward_file, const char *step_file)
{
    synth y;
    pipeline(&y, 0);
    uint32_t python = synth_str(&y, "python"), forward = synth_str(&y, forward_file);
    uint32_t step = synth_str(&y, step_file), user = synth_str(&y, "/home/me/train.py");
    for (size_t i = 0; i < y.s.nframes; i++) {
        vt__frame *f = &y.s.frames[i];
        const char *fn = vt__snapshot_string(&y.s, f->function);
        f->ip = f->module_offset = 0;
        f->module = python;
        f->file = !strcmp(fn, "forward_block") ? forward : !strcmp(fn, "train_step") ? step : user;
    }
    vt__check_report *r = check(&y, NULL);
    char *t = render(r, &y, 0);
    vt__check_report_free(r);
    synth_fini(&y);
    return t;
}

TEST(a_findings_stack_leads_with_the_programs_own_line_and_folds_library_frames)
{
    char *t = report_of_python_frames(TORCH_LINEAR, "/home/me/train.py");
    /* the program's line first; torch's forward folded after it */
    ASSERT_STR_CONTAINS(t, " s\n     at train_step (/home/me/train.py:11)\n");
    ASSERT_STR_CONTAINS(t, "(inside it: forward_block (/venv/lib/python3.11/site-packages/torch/"
                           "nn/modules/linear.py:10))");
    ASSERT(!strstr(t, "at forward_block"));
    free(t);
}

TEST(a_findings_folded_library_line_is_a_frameworks_before_torchs)
{
    char *t = report_of_python_frames(
        TORCH_LINEAR, "/venv/lib/python3.11/site-packages/transformers/trainer.py");
    /* the program's line first; inside it the framework's line that led to
     * torch's forward, not torch's own */
    ASSERT_STR_CONTAINS(t, " s\n     at main (/home/me/train.py:12)\n");
    ASSERT_STR_CONTAINS(t, "(inside it: train_step (/venv/lib/python3.11/site-packages/"
                           "transformers/trainer.py:11) and 1 more library Python frame)");
    free(t);
}

TEST(user_code_is_the_programs_python_frames_only)
{
    synth y;
    synth_init(&y);
    uint32_t python = synth_str(&y, "python"), so = synth_str(&y, "libtorch.so");
    const char *files[] = {
        "/home/me/train.py", "train.py", "<string>",                            /* the program's */
        "/home/me/ab/cab.py",                      /* a short c-name in a 2-letter folder */
        "/home/me/xy/cab62s4wikxjt4aycns6o2hytbhdevbrfbygm4kyhbsbzevfbpyq.py",   /* not its folder */
        "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py",       /* not */
        "/usr/lib/python3/dist-packages/numpy/core/a.py",
        "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py",
        "<frozen importlib._bootstrap>", "/work/scripts/vramtrace/_autorun.py",
        "<eval_with_key>.3",                      /* torch.fx's code of a compiled graph */
        /* inductor's generated module, in its cache (TORCHINDUCTOR_CACHE_DIR or the default) */
        "/tmp/torchinductor_me/bb/cbbo62s4wikxjt4aycns6o2hytbhdevbrfbygm4kyhbsbzevfbpy.py",
        "/scratch/ind/ep/ceprpgcv3ue4maqx6jdqbtn72jlxnsduhrrsuzr2fpajdccnafdg.py",
    };
    for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
        vt__frame f = { .module = python, .file = synth_str(&y, files[i]) };
        ASSERT_MSG(vt__frame_is_user_code(&y.s, &f) == (i < 5), "%s", files[i]);
    }
    vt__frame native = { .ip = 0x1234, .module = so, .file = synth_str(&y, "/home/me/x.cpp") };
    ASSERT(!vt__frame_is_user_code(&y.s, &native));
    synth_fini(&y);
}

/* The one rule the reports and the page fold by (vt__frame_fold). */
TEST(frames_folded_are_torch_plumbing_the_interpreter_and_a_recorders_own)
{
    synth y;
    synth_init(&y);
    const struct { const char *module, *file, *fn; uint64_t ip; enum vt__frame_fold fold; } frames[] = {
        { "python", "/venv/lib/python3.11/site-packages/torch/nn/modules/module.py", "_call_impl", 0,
          VT_FOLD_WITH_PYTHON },
        { "python", "/work/scripts/vramtrace/torch.py", "_engine_dispatch", 0, VT_FOLD_WITH_PYTHON },
        { "python", "/site/vramtrace/torch/_recording.py", "__torch_dispatch__", 0,
          VT_FOLD_WITH_PYTHON },
        { "python", "/site/vramtrace/torch/_marks.py", "_on_mark", 0, VT_FOLD_NEVER },
        { "python", "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "forward", 0,
          VT_FOLD_NEVER },
        { "python", "/home/me/train.py", "_call_impl", 0, VT_FOLD_NEVER },   /* not torch's */
        { "/usr/lib/libpython3.11.so.1.0", "", "_PyEval_EvalFrameDefault", 0x10, VT_FOLD_WITH_PYTHON },
        { "/usr/bin/python3.11", "", "_start", 0x10, VT_FOLD_WITH_PYTHON },
        { "/venv/vramtrace/_trackfast.cpython-311-x86_64-linux-gnu.so", "", "record_op", 0x10,
          VT_FOLD_WITH_PYTHON },
        { "/venv/torch/lib/libtorch_cuda.so", "", "at::empty", 0x10, VT_FOLD_NEVER },
        { "", "", "torch::unwind::unwind()", 0x10, VT_FOLD_ALWAYS },   /* imported: no module */
        { "", "", "c10::cuda::CUDACachingAllocator::Native::local_raw_delete(void*)", 0x10, VT_FOLD_ALWAYS },
        { "/venv/torch/lib/libtorch.so", "", "torch::unwind::unwind()", 0x10, VT_FOLD_NEVER },
    };
    for (size_t i = 0; i < sizeof frames / sizeof frames[0]; i++) {
        vt__frame f = { .ip = frames[i].ip, .module = synth_str(&y, frames[i].module),
                       .file = synth_str(&y, frames[i].file), .function = synth_str(&y, frames[i].fn) };
        ASSERT_MSG(vt__frame_fold(&y.s, &f) == frames[i].fold, "%s %s", frames[i].module, frames[i].fn);
        ASSERT(vt__frame_is_python(&y.s, &f) == !strcmp(frames[i].module, "python"));
    }
    synth_fini(&y);
}

/* One mark in the window (a CPU program whose steps each fill the ring, a run
 * of one optimizer step): linger judges at a mark after a storage's last
 * use's step, so it judges nothing, and the report says so rather than
 * letting "0 findings" read as its verdict. With marks after the use, the
 * same tensor is a finding and the line is gone. */
static vt__check_report *kept_after_marks(synth *y, int marks)
{
    made_in_step_1(y, 70, ACT1, "kept");
    synth_use(y, 70);
    steps(y, 2, marks);
    synth_tick(y, 5000000000ull);
    return check(y, NULL);
}

TEST(one_mark_in_the_window_says_linger_judged_nothing)
{
    synth y;
    vt__check_report *r = kept_after_marks(&y, 1);
    ASSERT_EQ(r->nmarks, 1);
    ASSERT_EQ(r->nfindings, 0);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "\n  one mark in the window: linger judges a storage at a mark "
                              "after its last use's step, so it judged none (a run of more "
                              "steps, or a larger ring, gives it some)\n");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);

    /* no mark at all, steps asked for: the same, said of no mark */
    setup(&y);
    synth_new_tensor(&y, 70, ACT1, MiB, "kept", st_fwd);
    synth_use(&y, 70);
    synth_tick(&y, 5000000000ull);
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_grace("1steps", &o), 0);
    r = check(&y, &o);
    ASSERT_EQ(r->nmarks, 0);
    ASSERT_EQ(r->nfindings, 0);
    text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "\n  no mark in the window: linger judges a storage at a mark ");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);

    r = kept_after_marks(&y, 4);
    ASSERT_EQ(r->nmarks, 4);
    ASSERT_EQ(r->nfindings, 1);
    ASSERT_EQ(r->findings[0].rule, VT_CHECK_RULE_LINGER);
    text = render(r, &y, 0);
    ASSERT(strstr(text, "one mark in the window") == NULL);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(one_million_events_checked)
{
    /* 4000 steps x ~250 events: 20 weights used every step, 30 activations
     * (alloc, new, 2 uses, ref/unref from a per-step context, drop, free),
     * and every 50 steps one activation kept forever in a history list. */
    synth y;
    synth_init(&y);
    uint32_t s_a = synth_stack(&y, "act", "train_step", "main", NULL);
    uint32_t nm_w = synth_str(&y, "weight"), nm_a = synth_str(&y, "act");
    uint32_t nm_ctx = synth_str(&y, "ctx"), nm_l = synth_str(&y, "[i]");
    uint32_t nm_mark = synth_str(&y, "step");
    y.dt = 1000;
    for (int w = 0; w < 20; w++) {
        synth_alloc(&y, 0x100000000ull + (uint64_t)w * 0x1000000, MiB, s_a);
        vt__event *e = synth_ev(&y, VT_EV_TENSOR_NEW);
        e->aux = 1 + (uint64_t)w;
        e->addr = 0x100000000ull + (uint64_t)w * 0x1000000;
        e->size = MiB;
        e->str = nm_w;
    }
    synth_holder(&y, 900000000, "history");
    uint64_t id = 1000;
    for (int st = 0; st < 4000; st++) {
        synth_ev(&y, VT_EV_MARK)->str = nm_mark;
        for (int w = 0; w < 20; w++)
            synth_ev(&y, VT_EV_TENSOR_USE)->aux = 1 + (uint64_t)w;
        uint64_t ctx = 800000000 + (uint64_t)st;
        vt__event *h = synth_ev(&y, VT_EV_HOLDER_NEW);
        h->aux = ctx;
        h->str = nm_ctx;
        for (int a = 0; a < 30; a++) {
            uint64_t addr = 0x200000000ull + (uint64_t)a * 0x1000000;
            int keep = a == 0 && st % 50 == 0;
            if (keep)
                addr = 0x900000000ull + (uint64_t)st * 0x1000000;
            uint64_t tid = id++;
            synth_alloc(&y, addr, MiB, s_a);
            vt__event *e = synth_ev(&y, VT_EV_TENSOR_NEW);
            e->aux = tid;
            e->addr = addr;
            e->size = MiB;
            e->str = nm_a;
            vt__event *rf = synth_ev(&y, VT_EV_REF);
            rf->aux = keep ? 900000000 : ctx;
            rf->aux2 = tid;
            rf->str = nm_l;
            synth_ev(&y, VT_EV_TENSOR_USE)->aux = tid;
            synth_ev(&y, VT_EV_TENSOR_USE)->aux = tid;
            if (!keep) {
                vt__event *u = synth_ev(&y, VT_EV_UNREF);
                u->aux = ctx;
                u->aux2 = tid;
                synth_ev(&y, VT_EV_TENSOR_DROP)->aux = tid;
                synth_free(&y, addr);
            }
        }
    }
    ASSERT_GE(y.s.nevents, 1000000);
    double t0 = now_s();
    vt__check_report *r = check(&y, NULL);
    double dt = now_s() - t0;
    fprintf(stderr, "checked %zu events in %.3f s: %zu findings\n", y.s.nevents, dt,
            r->nfindings);
    ASSERT_EQ(r->nfindings, 4000 / 50);
    ASSERT_STR_EQ(path_text(&r->findings[0], 0),
                  "history[i] \xe2\x86\x92 tensor 'act' \xe2\x86\x92 storage 0x900000000 1 MiB");
    vt__check_report_free(r);
    synth_fini(&y);
}


/* Addresses chosen so that, were the treap's priorities a public function of
 * the storage index, the live storages would form one list: 80,000 external
 * storages then took a minute (and recursed 80,000 deep). */
static uint32_t public_prio(uint32_t index)
{
    return (uint32_t)vt__mix64(index + 0x9e3779b97f4a7c15ull);
}

static int cmp_by_prio(const void *a, const void *b)
{
    uint32_t x = public_prio(*(const uint32_t *)a), y = public_prio(*(const uint32_t *)b);
    return (x > y) - (x < y);
}

TEST(crafted_storage_addresses_keep_the_model_fast)
{
    enum { N = 80000 };
    uint32_t *order = malloc(N * sizeof *order);
    uint64_t *addr = malloc(N * sizeof *addr);
    ASSERT(order && addr);
    for (uint32_t i = 0; i < N; i++)
        order[i] = i;
    qsort(order, N, sizeof *order, cmp_by_prio);
    for (uint32_t k = 0; k < N; k++)
        addr[order[k]] = 0x5555000000ull + (uint64_t)k * 0x1000;
    synth y;
    synth_init(&y);
    y.dt = 1000;
    for (uint32_t i = 0; i < N; i++)
        synth_ext(&y, addr[i], 0x1000);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    vt__check_report *r = check(&y, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    ASSERT_MSG(s < 5, "the checker took %.1f s on %d storages", s, N);
    ASSERT_EQ(r->nstorages, N);
    vt__check_report_free(r);
    synth_fini(&y);
    free(order);
    free(addr);
}

TEST_MAIN()
