/* tests/check/test_check_linger.c - the linger rule (check_linger.c): every
 * leak shape with its fixed twin, which must come out clean; what must never
 * be flagged. Traces without marks (the time rule): test_check_linger_time.c;
 * how a chain of references is shown: test_check_linger_chains.c; tensors
 * declared again after the ring overwrote them: test_check_linger_declared.c. */
#include "check_fixture.h"
#include "check_shapes.h"

/* ------------------------------------------------------------------------ */
/*  Leak shapes and their fixed twins                                       */
/* ------------------------------------------------------------------------ */

TEST(gc_cycle_is_flagged_with_cycle_path)
{
    synth y;
    vt__check_report *r = check_shape(&y, gc_cycle, 0);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->rules_run, VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_GROWTH);
    ASSERT_EQ(r->grace_mode, VT_CHECK_GRACE_STEPS);
    ASSERT_EQ(r->nmarks, 8);
    /* Same lingering, bigger first. */
    ASSERT_EQ(r->findings[0].addr, ACT2);
    ASSERT_EQ(r->findings[1].addr, ACT1);
    const vt__check_finding *f = by_addr(r, ACT1);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->bytes, 1 * MiB);
    ASSERT_STR_EQ(f->owner_name, "act1");
    ASSERT_EQ(f->owner_id, 100);
    ASSERT_EQ(f->last_use_step, 2);
    ASSERT_EQ(f->last_use_stack, st_bwd);
    ASSERT_EQ(f->alloc_stack, st_fwd);
    ASSERT_EQ(f->nuses, 2);
    ASSERT_EQ(f->steps_unused, 3);   /* steps 3, 4, 5 */
    ASSERT_EQ(f->freed, 1);
    ASSERT_GT(f->free_seq, f->linger_from_seq);
    ASSERT_EQ(f->linger_ns, f->free_time_ns - f->last_use_time_ns);
    ASSERT(fabs(f->byte_seconds - (double)MiB * (double)f->linger_ns / 1e9) < 1e-3);
    /* Became a finding at the mark of step 4 (one complete step, 3, passed). */
    const vt__event *mk = NULL;
    for (size_t i = 0; i < y.s.nevents; i++)
        if (y.s.events[i].kind == VT_EV_MARK && y.s.events[i].seq == f->linger_from_seq)
            mk = &y.s.events[i];
    ASSERT(mk);
    ASSERT_STR_EQ(y.s.strings_blob + y.s.string_offsets[mk->str], "step 4");
    ASSERT_EQ(f->path_seq, f->linger_from_seq);
    ASSERT_EQ(f->npaths, 1);
    ASSERT(f->paths[0].cycle);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) A.next \xe2\x86\x92 B.prev \xe2\x86\x92 A.saved \xe2\x86\x92 tensor 'act1'"
        " \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    f = by_addr(r, ACT2);
    ASSERT_STR_EQ(path_text(f, 0),
        "(cycle) B.prev \xe2\x86\x92 A.next \xe2\x86\x92 B.saved \xe2\x86\x92 tensor 'act2'"
        " \xe2\x86\x92 storage 0x7f2000100000 2 MiB");
    ASSERT_EQ(f->paths[0].nsteps, 5);
    ASSERT_EQ(f->paths[0].steps[0].kind, VT_CHECK_NODE_HOLDER);
    ASSERT_EQ(f->paths[0].steps[0].id, 501);
    ASSERT_EQ(f->paths[0].steps[3].kind, VT_CHECK_NODE_TENSOR);
    ASSERT_EQ(f->paths[0].steps[4].kind, VT_CHECK_NODE_STORAGE);
    ASSERT_EQ(f->paths[0].steps[4].bytes, 2 * MiB);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(gc_cycle_fixed_is_clean)
{
    assert_shape_is_clean(gc_cycle, 1);
}

TEST(closure_capturing_self_is_flagged)
{
    assert_shape_flags(closure_self, (struct expected_finding){
        .addr = CACHE, .bytes = 8 * MiB, .owner = "cache",
        .path = "(cycle) Trainer.hook \xe2\x86\x92 <closure>.__closure__[0] \xe2\x86\x92 "
                "cell.cell_contents \xe2\x86\x92 Trainer.cache \xe2\x86\x92 tensor 'cache' "
                "\xe2\x86\x92 storage 0x7f3000000000 8 MiB" });
}

TEST(closure_capturing_self_fixed_is_clean)
{
    assert_shape_is_clean(closure_self, 1);
}

TEST(view_keeps_base_storage_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape_flags(&y, view_pins_base, 0, (struct expected_finding){
        .addr = BASE, .bytes = 64 * MiB, .owner = "padded",
        .path = "outputs[0] \xe2\x86\x92 tensor 'z' (view of 'padded') \xe2\x86\x92 "
                "storage 0x7f4000000000 64 MiB" });
    const vt__check_finding *f = &r->findings[0];
    ASSERT_EQ(f->block_bytes, 64 * MiB);
    ASSERT_EQ(f->owner_id, 10);
    ASSERT_EQ(f->ntensors, 2);
    ASSERT_EQ(f->last_use_tensor, 11);
    ASSERT_STR_EQ(f->last_use_name, "z");
    ASSERT_EQ(f->npaths, 1);
    ASSERT(!f->paths[0].cycle);
    ASSERT_EQ(f->paths[0].steps[1].base_id, 10);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The finding above, in the user's words: the kept tensor is 1 MiB of the
 * dropped 64 MiB buffer, and a copy of it would let the rest go. */
/* A 64 MiB buffer 'padded' (10) and a 1 MiB slice of it 'z' (11), used. */
static void padded_and_its_slice(synth *y)
{
    synth_made(y, 10, BASE, 64 * MiB, "padded", st_fwd);
    synth_tensor(y, 11, BASE + MiB, MiB, 10, "z");
    synth_use(y, 11);
}

TEST(a_lingering_storage_kept_by_a_small_part_says_what_the_part_covers)
{
    synth y;
    vt__check_report *r = check_shape(&y, view_pins_base, 0);
    const vt__check_finding *f = the_finding(r, BASE, 64 * MiB);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->nviews_live, 1);
    ASSERT_EQ(f->nviews, 1);
    ASSERT_EQ(f->views[0].id, 11);
    ASSERT_STR_EQ(f->views[0].name, "z");
    ASSERT_EQ(f->views[0].bytes, MiB);
    ASSERT_EQ(f->covered_bytes, MiB);
    ASSERT_EQ(f->wasted_bytes, 63 * MiB);
    ASSERT_GT(f->owner_drop_seq, 0);
    ASSERT_LT(f->owner_drop_seq, f->linger_from_seq);
    ASSERT_EQ(r->total_bytes, 64 * MiB);   /* LINGER counts the whole storage still */
    char *t = render(r, &y, 0);
    ASSERT_STR_CONTAINS(t, "what is kept of the storage covers 1 MiB of 64 MiB:\n"
                           "   kept by: tensor 'z' (view of 'padded', 1 MiB of 64 MiB)\n"
                           "   the other 63 MiB stay allocated only for it: a copy of what is"
                           " kept (.clone(), or .cpu()) would let them go\n");
    free(t);
    vt__check_report_free(r);
    /* and in the summary of causes, where several such storages group */
    synth_fini(&y);
    setup(&y);
    for (int i = 1; i <= 8; i++) {   /* a buffer a step, a slice of each kept */
        step(&y, i);
        if (i == 2 || i == 3) {
            uint64_t base = BASE + (uint64_t)(i - 2) * 128 * MiB, id = 10 * (uint64_t)i;
            synth_made(&y, id, base, 64 * MiB, "padded", st_fwd);
            synth_tensor(&y, id + 1, base + MiB, MiB, id, "z");
            synth_use(&y, id + 1);
            if (i == 2)
                synth_holder(&y, 700, "outputs");
            synth_ref(&y, 700, id + 1, "[*]");
            synth_drop(&y, id);
        }
    }
    r = check(&y, NULL);
    if (r->nfindings != 2)
        dump(r, &y);
    ASSERT_EQ(r->nfindings, 2);
    assert_rendered_says(r, &y, 0, "what is kept is a small part: 1 MiB of 64 MiB in #1; a copy"
                                   " of it (.clone(), or .cpu()) would free the rest\n");
    vt__check_report_free(r);
    synth_fini(&y);
    r = check_shape(&y, view_pins_base, 0);

    /* Covering the ratio asked for: nothing said (1 MiB is over 1%). */
    vt__check_options o = default_options();
    ASSERT_EQ(vt__check_parse_pinned_ratio("1%", &o.pinned_ratio), 0);
    r = check(&y, &o);
    f = the_finding(r, BASE, 64 * MiB);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->nviews_live, 0);
    ASSERT_EQ(f->wasted_bytes, 0);
    ASSERT(f->views == NULL);
    assert_rendered_says(r, &y, 1, "\"kept_part\":null");
    vt__check_report_free(r);
    synth_fini(&y);

    /* The slice kept by an autograd graph (a tensor a node saved, the graph
     * held by a loss summed step after step): no .clone() of it is the
     * program's to make, the graph is what to let go. The kept part is not
     * said; the finding and its holder are. */
    setup(&y);
    synth_holder(&y, 700, "module __main__");
    for (int i = 1; i <= 8; i++) {
        step(&y, i);
        if (i == 2) {
            padded_and_its_slice(&y);
            synth_made(&y, 12, BASE + 128 * MiB, 4, "total", st_fwd);
            synth_ref(&y, 700, 12, ".total");
            synth_held(&y, 13, "AddBackward0", 12, "grad_fn");
            synth_ref(&y, 13, 11, "SavedTensor 'self' of AddBackward0");
            synth_drop(&y, 10);
        }
        if (i >= 2)
            synth_use(&y, 12);   /* the sum goes on every step */
    }
    r = check(&y, NULL);
    f = the_finding(r, BASE, 64 * MiB);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->nviews_live, 0);
    ASSERT(f->views == NULL);
    ASSERT_EQ(f->owner_drop_seq, 0);
    t = render(r, &y, 0);
    ASSERT_MSG(!strstr(t, "what is kept"), "%s", t);
    ASSERT_MSG(!strstr(t, ".clone()"), "%s", t);
    ASSERT_STR_CONTAINS(t, "module __main__.total");
    free(t);
    assert_rendered_says(r, &y, 1, "\"kept_part\":null");
    vt__check_report_free(r);
    synth_fini(&y);

    /* The same slice kept, its whole buffer still held too: the owner lives
     * on, what is kept is all of it, and nothing of the kind is said. */
    setup(&y);
    for (int i = 1; i <= 8; i++) {
        step(&y, i);
        if (i == 2) {
            padded_and_its_slice(&y);
            synth_holder(&y, 700, "outputs");
            synth_ref(&y, 700, 11, "[0]");
            synth_ref(&y, 700, 10, "[1]");
        }
    }
    r = check(&y, NULL);
    f = the_finding(r, BASE, 64 * MiB);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->nviews_live, 0);
    ASSERT_EQ(f->wasted_bytes, 0);
    t = render(r, &y, 0);
    ASSERT_MSG(!strstr(t, "what is kept"), "%s", t);
    free(t);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(renamed_tensor_is_reported_under_its_latest_name)
{
    synth y;
    renamed(&y);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->addr, RN_ADDR);
    ASSERT_EQ(f->owner_id, 100);
    ASSERT_STR_EQ(f->owner_name, "fc2 out");
    ASSERT_EQ(f->last_use_tensor, 101);
    ASSERT_STR_EQ(f->last_use_name, "fc2 head");
    ASSERT_EQ(f->nuses, 3);          /* renames are not uses */
    ASSERT_EQ(f->npaths, 1);
    ASSERT_STR_EQ(path_text(f, 0),
        "cache[0] \xe2\x86\x92 tensor 'fc2 head' (view of 'fc2 out') \xe2\x86\x92 "
        "storage 0x7f2000000000 1 MiB");
    ASSERT_EQ(r->ntensors, 1 + 8 + 2);
    vt__check_report_free(r);

    /* --ignore matches the latest name only */
    const char *pats[] = { "aten.mm*" };
    vt__check_options o = default_options();
    o.ignore = pats;
    o.nignore = 1;
    r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 1);
    vt__check_report_free(r);
    pats[0] = "fc2 out";
    r = check(&y, &o);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);

    /* the text report and the JSON carry the new name */
    char *buf = NULL;
    size_t n = 0;
    FILE *mf = open_memstream(&buf, &n);
    r = check(&y, NULL);
    vt__check_report_print(mf, r, &y.s, 0);
    fclose(mf);
    ASSERT_STR_CONTAINS(buf, "fc2 out");
    ASSERT(strstr(buf, "aten.mm out[0]") == NULL);
    ASSERT(strstr(buf, "fc2 tmp") == NULL);
    free(buf);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* setup(), and step 1, in which tensor `id` (`name`, 1 MiB at `addr`, made
 * at init and used there where `used`) is dropped at once: its storage
 * lives on, for the tensor that binds to it next. */
static void owner_died_in_step_1(synth *y, uint64_t id, uint64_t addr, const char *name, int used)
{
    setup(y);
    step(y, 1);
    synth_new_tensor(y, id, addr, MiB, name, st_init);
    if (used)
        synth_use(y, id);
    synth_drop(y, id);
}

/* nn.Parameter(torch.empty(n)): the temporary the parameter wraps dies,
 * and the parameter (a tensor of its own on the same storage) is the one
 * that keeps it: the finding's owner is the parameter, not the temporary. */
TEST(a_tensor_bound_after_the_owner_died_owns_the_storage)
{
    synth y;
    const uint64_t at = 0x7f7000000000ull;
    owner_died_in_step_1(&y, 300, at,
                         "self.head = nn.Linear(D, H) (model.py:9, aten.empty out[0])", 0);
    synth_tensor(&y, 301, at, MiB, 0, "parameter, first used by \"self.head = nn.Linear(D, H)\"");
    synth_use(&y, 301);
    synth_holder(&y, 302, "Adam.state");
    synth_ref(&y, 302, 301, "[<Parameter>]");
    steps(&y, 2, 5);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = by_addr(r, at);
    ASSERT_EQ(f->owner_id, 301);
    ASSERT_STR_CONTAINS(f->owner_name, "parameter, first used by");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A storage whose every tensor died while only an autograd node's saved
 * tensor keeps it (a sigmoid's output, saved by its node alone): a walk
 * much later records a tensor that stands for the saved one
 * (VT_TENSOR_SAVED_ONLY, format 1.8) and the node's reference to it. Its
 * making is no use of the storage (it still lingers from the step of its
 * last use), it does not take the storage over, and it is no view; the
 * finding's holder is the node's chain. */
TEST(a_tensor_standing_for_a_saved_one_names_the_holder_and_is_no_use)
{
    synth y;
    const uint64_t at = 0x7f7100000000ull;
    owner_died_in_step_1(&y, 400, at,
                         "loss = model(x).sigmoid().mean() (train.py:9, aten.sigmoid out[0])", 1);
    steps(&y, 2, 5);
    synth_holder(&y, 401, "SigmoidBackward0");
    synth_tensor(&y, 402, at, MiB, VT_TENSOR_SAVED_ONLY,
                 "loss = model(x).sigmoid().mean() (train.py:9, saved 'result' of SigmoidBackward0)");
    const uint64_t walk_seq = y.s.events[y.s.nevents - 1].seq;
    synth_ref(&y, 401, 402, "SavedTensor 'result' of SigmoidBackward0");
    step(&y, 6);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = by_addr(r, at);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->owner_id, 400);                      /* not taken over */
    ASSERT(f->last_use_seq < walk_seq);        /* from step 1, not from the walk */
    ASSERT(f->linger_from_seq < walk_seq);
    ASSERT_GE(f->npaths, 1);
    char path[1024];
    vt__check_path_format(&f->paths[0], path, sizeof path);
    ASSERT_STR_CONTAINS(path, "SigmoidBackward0.SavedTensor 'result' of SigmoidBackward0");
    ASSERT_MSG(!strstr(path, "view of"), "%s", path);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* setup(), and step 1, which makes and uses tensor `id`, 'h' of a line of
 * the program (1 MiB at `at`). */
static void h_made_in_step_1(synth *y, uint64_t id, uint64_t at)
{
    made_in_step_1(y, id, at, "h = block(x) (train.py:40, aten.relu out[0])");
    synth_use(y, id);
}

/* y's storage at `at`, freed, is a linger finding whose first chain names
 * `holder`, shown as the references were just before the storage was freed
 * (before_free) or when it became a finding; the text report says which. y
 * is finished. */
static void assert_freed_and_shown_held_by(synth *y, uint64_t at, int before_free,
                                           const char *holder)
{
    vt__check_report *r = check(y, NULL);
    const vt__check_finding *f = by_addr(r, at);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT(f->free_seq != 0);
    ASSERT_EQ(f->paths_before_free, before_free);
    if (!before_free)
        ASSERT_EQ(f->path_seq, f->linger_from_seq);
    ASSERT_GE(f->npaths, 1);
    char path[1024];
    vt__check_path_format(&f->paths[0], path, sizeof path);
    ASSERT_STR_CONTAINS(path, holder);
    assert_rendered_says(r, y, 0, before_free ? "held by (before it was freed):"
                                              : "held by (when it became a finding):");
    vt__check_report_free(r);
    synth_fini(y);
}

/* A freed storage that lingered before any walk had found its holder: a
 * walk starts from a tensor once it is stale, so the state when lingering
 * began has the tensor and nothing holding it. The holder a later walk
 * found is shown, "before it was freed": the state at the last moment a
 * tensor of it lived (its drop comes just before the storage's free). */
TEST(a_freed_storage_whose_holder_a_later_walk_found_is_shown_held_until_freed)
{
    synth y;
    const uint64_t at = 0x7f7200000000ull;
    h_made_in_step_1(&y, 500, at);
    steps(&y, 2, 4);
    synth_holder(&y, 501, "module __main__");    /* a walk at step 4's end */
    synth_ref(&y, 501, 500, ".kept");
    step(&y, 5);
    synth_drop(&y, 500);
    synth_free(&y, at);
    step(&y, 6);
    step(&y, 7);
    assert_freed_and_shown_held_by(&y, at, 1, "module __main__.kept");
}

/* Found when it became a finding: shown as then, not again later. */
TEST(a_freed_storage_held_when_it_became_a_finding_is_shown_as_then)
{
    synth y;
    const uint64_t at = 0x7f7300000000ull;
    h_made_in_step_1(&y, 600, at);
    synth_holder(&y, 601, "module __main__");
    synth_ref(&y, 601, 600, ".kept");
    steps(&y, 2, 5);
    synth_holder(&y, 602, "Trainer");
    synth_ref(&y, 602, 600, ".cache");
    synth_drop(&y, 600);
    synth_free(&y, at);
    step(&y, 6);
    assert_freed_and_shown_held_by(&y, at, 0, "module __main__.kept");
}

/* A graph kept across batches is held by the latest batch's output, a
 * local of the training loop that the next batch replaces: the walk after
 * the storage became a finding found the graph and the local holding its
 * top tensor; by the last moment a tensor of the storage lived, that local
 * held another tensor, and the chain then starts at the graph's node. It is
 * shown as it was just before the local's tensor died, "before it was
 * freed". `loss_before_window`: that tensor was made before the ring's
 * oldest event (only its references and its drop are in the window): its
 * drop still ends what it held. The first chain starts with `chain`. */
static void graph_held_by_a_replaced_local(int loss_before_window, const char *chain)
{
    synth y;
    const uint64_t at = 0x7f7400000000ull, loss_at = 0x7f7500000000ull;
    made_in_step_1(&y, 700, at, "output, hidden = rnn(x, hidden) (train.py:12, aten.mm out[0])");
    synth_use(&y, 700);
    steps(&y, 2, 4);
    if (!loss_before_window)
        synth_made(&y, 702, loss_at, 512, "loss = criterion(output, y) (train.py:13)", st_fwd);
    synth_holder(&y, 701, "ThnnFusedLstmCellBackward0");   /* a walk at step 4's end */
    synth_holder(&y, 703, "frame");
    synth_ref(&y, 701, 700, "SavedTensor 'hidden_gates' of ThnnFusedLstmCellBackward0");
    synth_ref(&y, 702, 701, "grad_fn");
    synth_ref(&y, 703, 702, "local 'loss' in train train.py:14");
    step(&y, 5);
    synth_drop(&y, 702);   /* the next batch's loss replaces it */
    if (!loss_before_window)
        synth_free(&y, loss_at);
    step(&y, 6);
    synth_drop(&y, 700);
    synth_free(&y, at);
    step(&y, 7);
    assert_freed_and_shown_held_by(&y, at, 1, chain);
}

TEST(a_graph_held_by_a_local_replaced_since_is_shown_before_it_was_replaced)
{
    graph_held_by_a_replaced_local(0, "frame local 'loss' in train train.py:14 \xe2\x86\x92 "
                                      "tensor 'loss");
}

/* (was: "frame local 'loss' ... → holder #702.grad_fn", a holder alive to
 * the end, though the tensor had dropped long before) */
TEST(a_tensor_made_before_the_window_holds_until_its_drop)
{
    graph_held_by_a_replaced_local(1, "frame local 'loss' in train train.py:14 \xe2\x86\x92 "
                                      "tensor #702.grad_fn");
}

TEST(view_keeps_base_storage_fixed_is_clean)
{
    assert_shape_is_clean(view_pins_base, 1);
}

TEST(pipeline_context_keeping_sent_tensors_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape(&y, pipeline, 0);
    ASSERT_EQ(r->nfindings, 2);
    ASSERT_EQ(r->findings[0].addr, S1);
    ASSERT_EQ(r->findings[0].bytes, 32 * MiB);
    ASSERT_EQ(r->findings[1].addr, S0);
    ASSERT_EQ(r->findings[1].bytes, 16 * MiB);
    ASSERT_EQ(r->total_bytes, 48 * MiB);
    ASSERT_STR_EQ(path_text(&r->findings[0], 0),
        "Context.output_tensors \xe2\x86\x92 list[1] \xe2\x86\x92 tensor 'send 1' "
        "\xe2\x86\x92 storage 0x7f6001000000 32 MiB");
    ASSERT_STR_EQ(path_text(&r->findings[1], 0),
        "Context.output_tensors \xe2\x86\x92 list[0] \xe2\x86\x92 tensor 'send 0' "
        "\xe2\x86\x92 storage 0x7f6000000000 16 MiB");
    ASSERT_EQ(r->findings[0].steps_unused, 2);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(pipeline_context_fixed_is_clean)
{
    assert_shape_is_clean(pipeline, 1);
}

TEST(hook_closure_cycle_is_flagged)
{
    assert_shape_flags(hook_cycle, (struct expected_finding){
        .addr = INTER, .bytes = 4 * MiB,
        .path = "(cycle) dict['hook'] \xe2\x86\x92 <hook>.__closure__[0] \xe2\x86\x92 "
                "cell.cell_contents \xe2\x86\x92 dict['acts'] \xe2\x86\x92 tensor 'intermediate' "
                "\xe2\x86\x92 storage 0x7f7000000000 4 MiB" });
}

TEST(hook_closure_cycle_fixed_is_clean)
{
    assert_shape_is_clean(hook_cycle, 1);
}

TEST(autograd_graph_kept_by_a_loss_list_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape(&y, autograd_graph, 0);
    ASSERT_EQ(r->nfindings, 2);   /* h (12 MiB) first, then the loss itself */
    const vt__check_finding *f = &r->findings[0];
    ASSERT_EQ(f->addr, HID);
    ASSERT_STR_EQ(path_text(f, 0),
        "losses[1] \xe2\x86\x92 tensor 'loss'.grad_fn \xe2\x86\x92 MulBackward0.saved_self "
        "\xe2\x86\x92 tensor 'h' \xe2\x86\x92 storage 0x7ef000000000 12 MiB");
    ASSERT_EQ(f->freed, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(autograd_graph_fixed_is_clean)
{
    assert_shape_is_clean(autograd_graph, 1);
}

/* ------------------------------------------------------------------------ */
/*  What must never be flagged                                              */
/* ------------------------------------------------------------------------ */

TEST(weights_used_every_step_are_never_flagged)
{
    synth y;
    setup(&y);
    steps(&y, 1, 30);
    vt__check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    ASSERT_EQ(r->ntensors, 31);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(state_used_every_k_steps_is_never_flagged)
{
    /* last use in step 10: steps 11 and 12 unused < gap 3 */
    assert_shape_is_clean(every_k, 12);
}

TEST(state_missing_its_next_use_is_flagged)
{
    synth y;
    /* Steps 11, 12, 13 complete and unused: missed step 13. Nothing refers
     * to the tensor, and it was never dropped: it is its own root. */
    vt__check_report *r = check_shape_flags(&y, every_k, 15, (struct expected_finding){
        .addr = STATE, .bytes = 8 * MiB,
        .path = "tensor 'exp_avg' \xe2\x86\x92 storage 0x7f8000000000 8 MiB" });
    const vt__check_finding *f = &r->findings[0];
    ASSERT_EQ(f->usual_gap_steps, 3);
    ASSERT_EQ(f->last_use_step, 10);
    ASSERT_EQ(f->freed, 0);
    ASSERT_EQ(f->path_seq, UINT64_MAX);
    vt__check_report_free(r);
    synth_fini(&y);
}

#define REPLAY 0x7fa000000000ull
#define REPLAY_STEPS 200
#define REPLAY_CAP 16

/* The DQN tutorial's replay memory (module __main__.memory, a deque): each
 * step pushes a transition (a tensor made at its own line), evicts the
 * oldest past REPLAY_CAP, and draws 4 of those it holds at random (an LCG),
 * which reads them. variant 1: every transition is also kept in a list
 * (all_transitions), so an evicted one stays alive and is never drawn
 * again: a leak. Returns the step at which each transition was evicted in
 * evicted[] (0: held at the end). */
static void replay_buffer(synth *y, int variant, int *evicted)
{
    setup(y);
    uint32_t st_push = synth_stack(y, "observe", "main", NULL);
    synth_holder(y, 900, "module __main__");
    synth_held(y, 901, "deque", 900, ".memory");
    if (variant)
        synth_held(y, 902, "list", 900, ".all_transitions");
    uint64_t rng = 12345;
    int oldest = 1;   /* the transitions held are oldest..i */
    for (int i = 1; i <= REPLAY_STEPS; i++) {
        step(y, i);
        uint64_t id = 20000 + (uint64_t)i, addr = REPLAY + (uint64_t)i * 0x100000ull;
        synth_made(y, id, addr, 64 * 1024, "state = torch.tensor(obs) (dqn.py:134)", st_push);
        synth_ref(y, 901, id, "[*]");
        if (variant)
            synth_ref(y, 902, id, item_label(i));
        evicted[i] = 0;
        if (i - oldest + 1 > REPLAY_CAP) {
            uint64_t old = 20000 + (uint64_t)oldest;
            synth_unref(y, 901, old);
            if (!variant) {
                synth_drop(y, old);
                synth_free(y, REPLAY + (uint64_t)oldest * 0x100000ull);
            }
            evicted[oldest++] = i;
        }
        for (int b = 0; b < 4; b++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            synth_use(y, 20000 + (uint64_t)(oldest + (int)((rng >> 33) % (uint64_t)(i - oldest + 1))));
        }
    }
}

TEST(a_replay_buffers_entries_drawn_at_random_are_not_lingering)
{
    /* Each transition waits a few steps between draws and after its last
     * one until its eviction (found on the PyTorch DQN tutorial under run
     * --track: every transition flagged, 715 findings with a full buffer):
     * its line's tensors are drawn from at random, and their grace is the
     * run of misses a draw makes once in a million. */
    synth y;
    int evicted[REPLAY_STEPS + 1];
    replay_buffer(&y, 0, evicted);
    vt__check_report *r = check(&y, NULL);
    ASSERT_CLEAN(r, &y);
    vt__check_report_free(r);
    /* asked for a grace of one step, they are flagged as before */
    vt__check_options o = default_options();
    o.grace_mode = VT_CHECK_GRACE_STEPS;
    o.grace_steps = 1;
    r = check(&y, &o);
    ASSERT_GT(r->nfindings, 10);
    ASSERT_EQ(r->findings[0].sampled_grace_steps, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_replay_buffers_entries_kept_past_their_eviction_are_flagged)
{
    /* The same buffer, each transition also kept in a list: an evicted one
     * is never drawn again, and once it has gone unused for longer than a
     * draw could miss it, it is flagged, held by the list. */
    synth y;
    int evicted[REPLAY_STEPS + 1];
    replay_buffer(&y, 1, evicted);
    vt__check_report *r = check(&y, NULL);
    ASSERT_GT(r->nfindings, 50);
    uint32_t grace = r->findings[0].sampled_grace_steps;
    /* 4 draws of 16 a step: 1 step in 4.4; read from the gaps the draws
     * ended alone (an evicted one's wait is not counted while it is alive),
     * 1 in 3.4: 40 steps of grace (a draw misses one so 1 in 30,000) */
    ASSERT(grace >= 35 && grace <= 60);
    for (size_t k = 0; k < r->nfindings; k++) {
        const vt__check_finding *f = &r->findings[k];
        ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
        ASSERT_EQ(f->sampled_grace_steps, grace);
        ASSERT(f->sampled_mean_gap > 3 && f->sampled_mean_gap < 5);
        int i = (int)((f->addr - REPLAY) / 0x100000ull);
        ASSERT_MSG(evicted[i] != 0, "transition %d, still in the buffer, flagged", i);
        ASSERT_GE(f->steps_unused, grace);
        ASSERT(strstr(path_text(f, 0), "module __main__.all_transitions") != NULL);
    }
    /* said in the text and the JSON */
    char want_text[128], want_json[128];
    snprintf(want_text, sizeof want_text, "(its line's tensors are drawn from at random, as a "
             "replay buffer's: 1 step in %.1f lately, grace %u steps)",
             r->findings[0].sampled_mean_gap, grace);
    snprintf(want_json, sizeof want_json, "\"drawn\":{\"mean_gap_steps\":%.3f,\"grace_steps\":%u}",
             r->findings[0].sampled_mean_gap, grace);
    assert_rendered_says_each(r, &y, 0, (const char *const[]){ want_text, NULL });
    assert_rendered_says_each(r, &y, 1, (const char *const[]){ want_json, NULL });
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(storage_whose_lifetime_crosses_a_gap_is_not_judged)
{
    /* As state_missing_its_next_use_is_flagged, but a gap after its
     * allocation hides whether it was freed, and no allocator state says
     * it is alive: it must not be reported as alive after its last use. */
    synth y;
    every_k(&y, 15);
    open_a_gap(&y);
    assert_checks_clean(&y, NULL);
}

TEST(storage_across_a_gap_that_the_allocator_state_holds_is_judged)
{
    synth y;
    every_k(&y, 15);
    open_a_gap(&y);
    uint64_t seq = 0;
    for (size_t i = 0; i < y.s.nevents; i++)
        if (y.s.events[i].kind == VT_EV_ALLOC && y.s.events[i].addr == STATE)
            seq = y.s.events[i].seq;
    ASSERT(seq != 0);
    /* the state at the snapshot: STATE's block is allocated */
    y.s.meta.flags = VT_META_STATE_COMPLETE;
    y.s.segments = calloc(1, sizeof *y.s.segments);
    y.s.blocks = calloc(1, sizeof *y.s.blocks);
    y.s.segments[0] = (vt__snap_segment){ .addr = STATE, .size = 8 * MiB, .nblocks = 1 };
    y.s.blocks[0] = (vt__snap_block){ .addr = STATE, .size = 8 * MiB, .req_size = 8 * MiB,
                                .alloc_seq = seq, .state = VT_BLOCK_ACTIVE_ALLOCATED };
    y.s.nsegments = y.s.nblocks = 1;
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(only_finding(r)->addr, STATE);
    ASSERT_EQ(r->findings[0].freed, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(trace_ending_is_not_flagged)
{
    for (int at = 7; at <= 8; at++)  /* last and second-to-last step */
        assert_shape_is_clean(ends_alive, at);
}

TEST(storages_of_a_findings_stack_made_before_the_window_are_counted_not_judged)
{
    /* under track() past the ring: LATE (step 6's, lingering) is judged;
     * three more blocks allocated at its stack before the window, alive,
     * have no tensor recorded (their records left the ring): counted on
     * the finding, and in its cause, never findings themselves */
    synth y;
    ends_alive(&y, 6);
    synth_lost_start(&y, st_fwd, 3, 0x7e0000000000ull, 2 * MiB);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = only_finding(r);
    ASSERT_EQ(f->addr, LATE);
    ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(f->older_alive, 3);
    ASSERT_EQ(f->older_alive_bytes, 6 * MiB);
    ASSERT_EQ(r->total_bytes, 3 * MiB);      /* not judged: not in the totals */
    assert_text_and_json_say(r, &y,
                             "and 3 more storages (6 MiB) allocated at its stack before the "
                             "window, still alive: their tensors' records left the ring (not "
                             "judged)",
                             "\"older_alive\":{\"storages\":3,\"bytes\":6291456}");
    vt__check_report_free(r);
    synth_fini(&y);
    /* at another stack (the weights'): nothing to say about them */
    ends_alive(&y, 6);
    synth_lost_start(&y, st_init, 3, 0x7e0000000000ull, 2 * MiB);
    r = check(&y, NULL);
    ASSERT_EQ(only_finding(r)->older_alive, 0);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(alive_through_a_complete_step_before_the_end_is_flagged)
{
    synth y;
    vt__check_report *r = check_shape(&y, ends_alive, 6);  /* step 7 is complete and unused */
    const vt__check_finding *f = the_finding(r, LATE, 3 * MiB);
    ASSERT_EQ(f->steps_unused, 1);
    ASSERT_EQ(f->freed, 0);
    ASSERT_EQ(f->linger_ns, r->end_time_ns - f->last_use_time_ns);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A CPU tensor (host storage, as track() declares one) made in step 1 and
 * kept unused to the end, next to weights used every step: device memory,
 * or with `device` false host memory too (a CPU-only program). */
#define HOST_ADDR 0x55550000a000ull
static void host_tensor_kept(synth *y, int device)
{
    synth_init(y);
    stacks(y);
    if (device) {
        synth_new_tensor(y, W_ID, W_ADDR, 4 * MiB, "fc.weight", st_init);
    } else {
        synth_ext(y, W_ADDR, 4 * MiB);
        synth_tensor(y, W_ID, W_ADDR, 4 * MiB, 0, "fc.weight");
    }
    for (int i = 1; i <= 5; i++) {
        synth_step_mark(y, i);
        synth_use(y, W_ID);
        if (i == 1) {
            synth_ext(y, HOST_ADDR, 4096);
            synth_tensor(y, 77, HOST_ADDR, 4096, 0, "idx = ixes[i]");
            synth_use(y, 77);
        }
    }
}

/* Checked with `o` (NULL: default_options()), y's host tensor is judged,
 * and is the one finding. */
static void assert_host_tensor_flagged(synth *y, const vt__check_options *o)
{
    vt__check_report *r = check(y, o);
    ASSERT_EQ(r->nhost_skipped, 0);
    the_finding(r, HOST_ADDR, 4096);
    vt__check_report_free(r);
}

TEST(host_storages_are_not_judged_in_a_trace_with_device_storages)
{
    synth y;
    host_tensor_kept(&y, 1);
    vt__check_options o = default_options();
    vt__check_report *r = check(&y, &o);
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->nhost_skipped, 1);
    assert_text_and_json_say(r, &y, "1 host storage (CPU tensors) not judged",
                             "\"host_skipped\":1");
    vt__check_report_free(r);

    o.host = VT_CHECK_HOST_ALWAYS;               /* check --host */
    assert_host_tensor_flagged(&y, &o);
    synth_fini(&y);
}

TEST(host_storages_are_judged_in_a_trace_without_device_storage)
{
    synth y;
    host_tensor_kept(&y, 0);
    assert_host_tensor_flagged(&y, NULL);
    synth_fini(&y);
}

/* What a running frame's value stack holds (a for loop's iterator walking a
 * list no local holds; a with block's __exit__, bound to its context
 * manager) reads as words after the frame, as a local does:
 * "frame for loop's iterator in train train.py:16", not
 * "frame.for loop's iterator ...". */
TEST(a_frames_value_stack_reads_as_words_as_a_local_does)
{
    static const struct {
        const char *label, *holder, *hop, *want;
    } held[] = {
        {"for loop's iterator in train train.py:16", "list_iterator", ".seq",
         "frame for loop's iterator in train train.py:16 "
         "\xe2\x86\x92 list_iterator.seq \xe2\x86\x92 list[*]"},
        {"with block in main train.py:30", "method __exit__", ".__self__",
         "frame with block in main train.py:30 "
         "\xe2\x86\x92 method __exit__.__self__ \xe2\x86\x92 list[*]"},
    };
    for (size_t i = 0; i < sizeof held / sizeof held[0]; i++) {
        synth y;
        const uint64_t at = 0x7f7300000000ull;
        h_made_in_step_1(&y, 700, at);
        synth_holder(&y, 701, "frame");
        synth_holder(&y, 702, held[i].holder);
        synth_holder(&y, 703, "list");
        synth_ref(&y, 701, 702, held[i].label);
        synth_ref(&y, 702, 703, held[i].hop);
        synth_ref(&y, 703, 700, "[*]");
        steps(&y, 2, 6);
        vt__check_report *r = check(&y, NULL);
        const vt__check_finding *f = by_addr(r, at);
        ASSERT_EQ(f->rule, VT_CHECK_RULE_LINGER);
        ASSERT_STR_CONTAINS(path_text(f, 0), held[i].want);
        vt__check_report_free(r);
        synth_fini(&y);
    }
}

TEST_MAIN()
