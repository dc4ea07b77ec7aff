/* tests/check/test_check_groups.c - findings grouped by cause
 * (check_groups.c): one graph a kept loss holds, one holder's tensors of
 * several lines, a kept output's items and its cache's fields, one line
 * under one holder whatever key holds it, a chain into a graph without its
 * root, a long name, and each finding's group. */
#include "check_fixture.h"
#include "check_shapes.h"

/* What a program keeps in step i (1 to 4) of the standard loop. */
typedef void (*keep_fn)(synth *y, int i);

/* A program of the standard loop. In setup its module keeps an object of
 * type `kind` under `attr` (setup_module_keeping; no kind: setup() alone),
 * and hold(y), where given, makes what else holds; each of steps 1 to 4
 * keeps what keep(y, i) makes; steps 5 and 6 keep nothing more. */
struct program {
    uint64_t module;
    const char *kind, *attr;
    void (*hold)(synth *y);
    keep_fn keep;
    int every_rule;   /* checked by the rules the checker picks, not by linger's alone */
};

/* What a program's report says of its causes; a count of 0 is not looked
 * at. */
struct causes {
    size_t nfindings;
    size_t mib;            /* findings of 1 MiB: the activations or state kept */
    int mib_one_cause;     /* those all of one cause */
    long ncauses;
    const char *text[6];   /* what the text report says, NULL-ended */
    const char *json[3];   /* what the JSON report says, NULL-ended */
};

/* Each of r's findings' cause (vt__check_report_groups), to free. */
static uint32_t *causes_of_findings(const vt__check_report *r)
{
    uint32_t *g = calloc(r->nfindings ? r->nfindings : 1, sizeof *g);
    ASSERT(g != NULL);
    ASSERT(vt__check_report_groups(r, NULL, g) >= 1);
    return g;
}

static size_t mib_findings(const vt__check_report *r)
{
    size_t n = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        n += r->findings[i].bytes == MiB;
    return n;
}

static void assert_mib_findings_are_one_cause(const vt__check_report *r)
{
    uint32_t *g = causes_of_findings(r);
    long mib_cause = -1;
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].bytes == MiB) {
            if (mib_cause < 0)
                mib_cause = g[i];
            ASSERT_EQ((long)g[i], mib_cause);
        }
    free(g);
}

/* The report on program p (y is the caller's to finish), which says `want`
 * of its causes. */
static vt__check_report *report_of(synth *y, const struct program *p, const struct causes *want)
{
    if (p->kind)
        setup_module_keeping(y, p->module, p->kind, p->attr);
    else
        setup(y);
    if (p->hold)
        p->hold(y);
    for (int i = 1; i <= 4; i++) {
        step(y, i);
        p->keep(y, i);
    }
    steps(y, 5, 6);
    vt__check_report *r = check_rules(y, p->every_rule ? 0 : VT_CHECK_RULE_LINGER);
    if (want->nfindings)
        ASSERT_EQ(r->nfindings, want->nfindings);
    if (want->mib)
        ASSERT_EQ(mib_findings(r), want->mib);
    if (want->mib_one_cause)
        assert_mib_findings_are_one_cause(r);
    if (want->ncauses)
        ASSERT_EQ(vt__check_report_groups(r, NULL, NULL), want->ncauses);
    assert_rendered_says_each(r, y, 0, want->text);
    if (want->json[0])
        assert_rendered_says_each(r, y, 1, want->json);
    return r;
}

/* Program p's report says `want` of its causes. */
static void assert_causes(const struct program *p, const struct causes *want)
{
    synth y;
    vt__check_report *r = report_of(&y, p, want);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* One bug, one cause: a list keeps every step's loss, and through each
 * loss's graph (chains of autograd nodes of different lengths) activations
 * made by two ops of one line. The text report groups them as one, with the
 * losses the list keeps: the graph's holder, each finding its whole chain. */
static void keep_a_loss_and_its_graph_of_chains(synth *y, int i)
{
    uint64_t base = 6000 + 100 * (uint64_t)i, act = 0x7f3000000000ull + (uint64_t)i * MiB;
    synth_made(y, base, act, MiB,
               i == 4   ? "h = block(x) (train.py:40, backward: aten.mm out[0])"
               : i % 2 ? "h = block(x) (train.py:40, aten.relu out[0])"
               : "h = block(x) (train.py:40, aten.addmm out[0])", st_fwd);
    synth_made(y, base + 1, act + MiB / 2, 4, "loss", st_fwd);
    synth_ref(y, 5001, base + 1, "[0]");
    synth_held(y, base + 2, "MeanBackward0", base + 1, "grad_fn");
    uint64_t node = base + 2;
    for (int k = 0; k <= i; k++) {    /* i autograd hops, then the node that saved h */
        synth_holder(y, base + 10 + (uint64_t)k,
                     k == i ? "ReluBackward0" : k % 2 ? "MulBackward0" : "AddmmBackward0");
        synth_ref(y, node, base + 10 + (uint64_t)k, "next_functions[0]");
        node = base + 10 + (uint64_t)k;
    }
    synth_ref(y, node, base, "SavedTensor 'self' of ReluBackward0");
}

TEST(a_graph_kept_through_chains_of_any_length_is_one_cause)
{
    assert_causes(&(struct program){ .module = 5000, .kind = "list", .attr = ".losses",
                                     .keep = keep_a_loss_and_its_graph_of_chains },
                  &(struct causes){ .mib = 4, .text = {
                      "8 findings from 1 cause",
                      "8 \xc3\x97 [linger] 4 MiB (512 KiB each on average)",
                      "tensor 'h = block(x) (train.py:40)' and those of 1 more line\n",
                      "held by: module __main__.losses \xe2\x86\x92 list[*] \xe2\x86\x92 "
                      "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n",
                      "tensor 'loss'.grad_fn \xe2\x86\x92 MeanBackward0.next_functions[0] "
                      "\xe2\x86\x92 AddmmBackward0.next_functions[0] \xe2\x86\x92 "
                      "ReluBackward0.SavedTensor 'self' of ReluBackward0" } });
}

/* The JSON says the causes as the text does: each finding names its group
 * ("group"), and a group what holds it as the cause's "held by" line reads
 * ("held_by": the graph's holder and the graph, where "path" is its first
 * finding's chain, the nodes between folded): what the pytest plugin says a test's leak with. */
TEST(the_json_names_each_findings_cause_and_what_holds_it_as_the_text_does)
{
    synth y;
    vt__check_report *r = report_of(
        &y, &(struct program){ .module = 5000, .kind = "list", .attr = ".losses",
                               .keep = keep_a_loss_and_its_graph_of_chains },
        &(struct causes){ .mib = 4, .text = { "8 findings from 1 cause" } });
    ASSERT_EQ(r->nfindings, 8);
    char *json = render(r, &y, 1);
    size_t n = 0;
    for (const char *p = json; (p = strstr(p, "{\"rule\":\"linger\",\"group\":0,")); p++)
        n++;
    ASSERT_MSG(n == 8, "%zu findings of group 0 in\n%s", n, json);
    ASSERT_STR_CONTAINS(json, "\"held_by\":\"module __main__.losses \xe2\x86\x92 list[*] "
                              "\xe2\x86\x92 tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd "
                              "graph it keeps)\"");
    ASSERT_STR_CONTAINS(json, "\"path\":\"module __main__.losses \xe2\x86\x92 list[*] "
                              "\xe2\x86\x92 tensor 'loss'.grad_fn \xe2\x86\x92 (autograd nodes) "
                              "\xe2\x86\x92 ReluBackward0.SavedTensor 'self' of ReluBackward0");
    free(json);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* One graph, reached from its named root for some of its tensors and, for
 * others, from a node nothing named holds (the walk found those through
 * the graph alone, an LSTM's saved gates: "(autograd nodes) → ..."): one
 * cause, shown by the chain with the root. */
static void keep_a_graph_reached_from_its_root_for_2_steps(synth *y, int i)
{
    uint64_t base = 6000 + 100 * (uint64_t)i, act = 0x7f3000000000ull + (uint64_t)i * MiB;
    synth_made(y, base, act, MiB, "h = block(x) (train.py:40, aten.relu out[0])", st_fwd);
    uint64_t node;
    if (i <= 2) {    /* list → loss.grad_fn → MulBackward0 → ReluBackward0 */
        synth_made(y, base + 1, act + MiB / 2, 4, "loss", st_fwd);
        synth_ref(y, 5001, base + 1, "[0]");
        synth_held(y, base + 2, "MulBackward0", base + 1, "grad_fn");
        node = base + 2;
    } else {         /* a node no named object holds */
        synth_holder(y, base + 2, "MulBackward0");
        node = base + 2;
    }
    synth_holder(y, base + 10, "ReluBackward0");
    synth_ref(y, node, base + 10, "next_functions[0]");
    synth_ref(y, base + 10, base, "SavedTensor 'self' of ReluBackward0");
}

TEST(a_chain_into_a_graph_without_its_root_joins_the_cause_that_names_the_root)
{
    synth y;
    vt__check_report *r = report_of(
        &y, &(struct program){ .module = 5000, .kind = "list", .attr = ".losses",
                               .keep = keep_a_graph_reached_from_its_root_for_2_steps },
        &(struct causes){ .mib = 4, .mib_one_cause = 1, .text = {
            "held by: module __main__.losses \xe2\x86\x92 list[*] \xe2\x86\x92 "
            "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n" } });
    char *text = render(r, &y, 0);
    ASSERT_MSG(!strstr(text, "held by: (autograd nodes)"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Two graphs kept by two holders: one cause each, whatever lines made the
 * tensors each graph saved (a forward of two lines). */
static void keep_a_graph_in_each_of_two_holders(synth *y, int i)
{
    for (int which = 0; which < 2; which++) {   /* history keeps a graph, cache another */
        uint64_t base = 6000 + 100 * (uint64_t)i + 50 * (uint64_t)which;
        uint64_t at = 0x7f3000000000ull + (uint64_t)(4 * i + 2 * which) * MiB;
        synth_made(y, base, at, MiB, "h = fc1(x) (train.py:40, aten.addmm out[0])", st_fwd);
        synth_made(y, base + 1, at + MiB, MiB, "a = act(h) (train.py:41, aten.relu out[0])",
                   st_fwd);
        synth_made(y, base + 2, at + MiB + MiB / 2, 4, "loss", st_fwd);
        synth_ref(y, which ? 5002 : 5001, base + 2, which ? "['last']" : "[0]");
        synth_held(y, base + 3, "MeanBackward0", base + 2, "grad_fn");
        synth_held(y, base + 4, "ReluBackward0", base + 3, "next_functions[0]");
        synth_ref(y, base + 4, base + 1, "SavedTensor 'result' of ReluBackward0");
        synth_held(y, base + 5, "AddmmBackward0", base + 4, "next_functions[0]");
        synth_ref(y, base + 5, base, "SavedTensor 'mat1' of AddmmBackward0");
    }
}

/* The module keeps a list under .history and a dict under .cache. */
static void module_keeps_history_and_cache(synth *y)
{
    synth_holder(y, 5000, "module __main__");
    synth_holder(y, 5001, "list");
    synth_holder(y, 5002, "dict");
    synth_ref(y, 5000, 5001, ".history");
    synth_ref(y, 5000, 5002, ".cache");
}

TEST(graphs_kept_by_two_holders_are_two_causes_of_every_line_they_keep)
{
    assert_causes(&(struct program){ .hold = module_keeps_history_and_cache,
                                     .keep = keep_a_graph_in_each_of_two_holders },
                  &(struct causes){ .mib = 16, .text = {
                      "from 2 causes",
                      "held by: module __main__.history \xe2\x86\x92 list[*] \xe2\x86\x92 "
                      "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n",
                      "held by: module __main__.cache \xe2\x86\x92 dict['last'] \xe2\x86\x92 "
                      "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n",
                      " and those of 2 more lines\n" },   /* h, a, loss */
                      .json = { "\"lines\":3" } });
}

/* A name longer than a group's key: the key is cut, and the report still
 * groups and shows it (a cut key once made the cause list read past it). */
static void keep_a_long_named_tensor_and_a_loss_saving_it(synth *y, int i)
{
    static char name[3000];   /* all 'x' but its terminator */
    memset(name, 'x', sizeof name - 1);
    uint64_t t = 7000 + 10 * (uint64_t)i;
    synth_made(y, t, 0x7f3000000000ull + (uint64_t)i * 4 * MiB, MiB, name, st_fwd);
    synth_ref(y, 5001, t, "[0]");
    synth_made(y, t + 1, 0x7f3000000000ull + (uint64_t)i * 4 * MiB + 2 * MiB, MiB,
               "loss", st_fwd);
    synth_ref(y, 5001, t + 1, "[1]");
    synth_held(y, t + 2, "MeanBackward0", t + 1, "grad_fn");
    synth_ref(y, t + 2, t, "SavedTensor 'self' of MeanBackward0");
}

TEST(a_tensor_name_longer_than_a_group_key_is_grouped_and_shown)
{
    synth y;
    vt__check_report *r = report_of(
        &y, &(struct program){ .module = 5000, .kind = "list", .attr = ".history",
                               .keep = keep_a_long_named_tensor_and_a_loss_saving_it },
        &(struct causes){ .nfindings = 8, .text = { "findings from" },
                          .json = { "\"findings\":[" } });
    long ng = vt__check_report_groups(r, NULL, NULL);
    ASSERT(ng >= 1 && ng <= 3);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A tensor a walk found where no op showed it (a compiled graph's output)
 * is named "LINE (FILE:N, tensor (32, 64, 65) float32, made where ...)":
 * its parenthesized shape is part of the WHAT that a cause's holder drops
 * whole, not cut at its first ")" ("(train.py:9) float32, made ...)" before). */
static void keep_logits_named_with_their_shape(synth *y, int i)
{
    uint64_t t = 7000 + 10 * (uint64_t)i;
    synth_made(y, t, 0x7f3000000000ull + (uint64_t)i * 4 * MiB, MiB,
               "logits = model(x) (train.py:9, tensor (32, 64, 65) float32, made where "
               "no op showed it)", st_fwd);
    synth_ref(y, 5001, t, item_label(i - 1));
}

TEST(a_cause_drops_a_name_whose_what_holds_parentheses_whole)
{
    assert_causes(&(struct program){ .module = 5000, .kind = "list", .attr = ".kept",
                                     .keep = keep_logits_named_with_their_shape },
                  &(struct causes){ .nfindings = 4, .ncauses = 1, .text = {
                      "held by: module __main__.kept \xe2\x86\x92 list[*] \xe2\x86\x92 "
                      "tensor 'logits = model(x) (train.py:9)'\n" } });
}

/* One bug leaks one storage per step: views list it once, as the report's
 * groups do (rule, owner name, first path with its indices blanked). */
static void keep_logits_and_a_batch_once(synth *y, int i)
{
    keep_logits(y, i, 5);
    if (i == 1) {   /* another cause, smaller */
        synth_made(y, 200, 0x7f3000000000ull, 1 * MiB, "batch", st_act);
        synth_ref(y, 6, 200, "['last']");
    }
}

static void history_and_cache(synth *y)
{
    synth_holder(y, 5, "history");
    synth_holder(y, 6, "cache");
}

/* The report on a program whose history keeps four steps' logits and whose
 * cache keeps a batch once: 5 findings of 2 causes. */
static vt__check_report *logits_and_a_batch(synth *y)
{
    return report_of(y, &(struct program){ .hold = history_and_cache,
                                           .keep = keep_logits_and_a_batch_once,
                                           .every_rule = 1 },
                     &(struct causes){ .nfindings = 5, .ncauses = 2 });
}

TEST(report_groups_give_each_finding_its_cause)
{
    synth y;
    vt__check_report *r = logits_and_a_batch(&y);
    uint32_t *g = causes_of_findings(r);
    for (size_t i = 0; i < r->nfindings; i++) {
        const vt__check_finding *f = &r->findings[i];
        /* Group 0 is the largest bytes: the four logits. */
        ASSERT_EQ(g[i], f->bytes == 8 * MiB ? 0u : 1u);
    }
    free(g);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* The text report with at most `top` findings in detail (0: all), and how
 * many it details. */
static char *render_details(const vt__check_report *r, const synth *y, size_t top,
                            size_t *details)
{
    char *buf = render_top(r, y, 0, top);
    *details = 0;
    for (const char *p = buf; (p = strstr(p, "\n#")) != NULL; p++)
        *details += 1;
    return buf;
}

/* Under a --top limit a cause's findings are detailed three at most, so
 * that one leak's many findings (nanoGPT keeping a row of each batch's
 * logits: 42, 390 lines) leave room for the other causes' details; the
 * line that counts the rest says why. --top 0 details every one. */
TEST(a_limited_report_details_three_findings_of_a_cause_at_most)
{
    synth y;
    vt__check_report *r = logits_and_a_batch(&y);
    size_t details;
    char *text = render_details(r, &y, 20, &details);
    ASSERT_EQ(details, 4u);   /* three of the four logits, and the batch */
    ASSERT_STR_CONTAINS(text, "\n#5 [linger] storage 0x7f3000000000");
    ASSERT_STR_CONTAINS(text, "... 1 more finding (at most 3 of each cause shown; --top 0 shows all");
    free(text);
    text = render_details(r, &y, 0, &details);
    ASSERT_EQ(details, 5u);
    ASSERT(strstr(text, "more finding") == NULL);
    free(text);
    text = render_details(r, &y, 2, &details);   /* the limit still counts first */
    ASSERT_EQ(details, 2u);
    ASSERT_STR_CONTAINS(text, "... 3 more findings (--top 0 shows all");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A program keeps each step's whole model output (transformers' ModelOutput:
 * its logits and its loss, two lines of the model, as items of one object
 * in a list): one cause, the holder, whatever lines made the tensors. Two
 * lists an object keeps under two attributes are two causes. */
static void keep_a_model_output_and_two_results(synth *y, int i)
{
    uint64_t out = 8100 + (uint64_t)i, t = 8200 + 4 * (uint64_t)i;
    uint64_t at = 0x7f5000000000ull + (uint64_t)i * 16 * MiB;
    synth_held(y, out, "ModelOutput", 8001, item_label(i - 1));
    synth_new_tensor(y, t, at, 4 * MiB, "lm_logits = self.lm_head(h) (model.py:10, aten.mm out[0])",
                     st_fwd);
    synth_new_tensor(y, t + 1, at + 4 * MiB, MiB, "loss = F.cross_entropy(x, y) (model.py:12, "
                     "aten.nll_loss out[0])", st_fwd);
    synth_new_tensor(y, t + 2, at + 8 * MiB, 2 * MiB, "a = x * 2 (train.py:20, aten.mul out[0])",
                     st_act);
    synth_new_tensor(y, t + 3, at + 12 * MiB, 2 * MiB, "b = x * 3 (train.py:21, aten.mul out[0])",
                     st_act);
    for (uint64_t k = 0; k < 4; k++)
        synth_use(y, t + k);
    synth_ref(y, out, t, "['logits']");
    synth_ref(y, out, t + 1, "['loss']");
    synth_ref(y, 8003, t + 2, item_label(i - 1));
    synth_ref(y, 8004, t + 3, item_label(i - 1));
}

/* Beside the module's list, a trainer it keeps has two lists .a and .b. */
static void a_trainers_two_lists(synth *y)
{
    synth_held(y, 8002, "Trainer", 8000, ".trainer");
    synth_held(y, 8003, "list", 8002, ".a");
    synth_held(y, 8004, "list", 8002, ".b");
}

TEST(tensors_of_several_lines_one_holder_keeps_are_one_cause)
{
    synth y;
    vt__check_report *r = report_of(
        &y, &(struct program){ .module = 8000, .kind = "list", .attr = ".history",
                               .hold = a_trainers_two_lists,
                               .keep = keep_a_model_output_and_two_results },
        &(struct causes){ .nfindings = 16, .ncauses = 3,
                          .text = { "16 findings from 3 causes", "8 \xc3\x97 [linger] 20 MiB",
                                    "(model.py:10)' and those of 1 more line\n" },
                          .json = { "\"count\":8,\"bytes\":20971520", "\"lines\":2" } });
    uint32_t *g = causes_of_findings(r);
    long kept = -1, a = -1, b = -1;
    for (size_t i = 0; i < r->nfindings; i++) {
        const char *owner = r->findings[i].owner_name;
        long *which = !strncmp(owner, "a = ", 4) ? &a : !strncmp(owner, "b = ", 4) ? &b : &kept;
        if (*which < 0)
            *which = g[i];
        ASSERT_EQ((long)g[i], *which);   /* one group per cause, each finding in its own */
    }
    ASSERT(kept != a && kept != b && a != b);
    free(g);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A graph kept across batches (an LSTM's hidden state never detached) holds
 * each batch's saved tensors through hundreds of autograd nodes: the cause
 * still reads to its end, the node that saved them (the chain was cut to a
 * line's length before its nodes were one hop, and read
 * "(autograd nodes) → ThnnFusedLstmCellBackward0.n"). */
#define LOSS_NODE 7000
#define HOPS 300   /* from LOSS_NODE to the node each batch's cell joins */

/* A loss's graph of HOPS autograd nodes. */
static void a_long_graph(synth *y)
{
    synth_holder(y, LOSS_NODE, "NllLossBackward0");
    for (uint64_t k = 1; k <= HOPS; k++) {
        synth_holder(y, LOSS_NODE + k, k % 2 ? "UnbindBackward0" : "StackBackward0");
        synth_ref(y, LOSS_NODE + k - 1, LOSS_NODE + k, "next_functions[0]");
    }
}

static void keep_a_cell_at_the_end_of_the_graph(synth *y, int i)
{
    uint64_t t = 8000 + (uint64_t)i, cell = 8100 + (uint64_t)i;
    synth_made(y, t, 0x7f3000000000ull + (uint64_t)i * MiB, MiB,
               "output, hidden = self.rnn(emb, hidden) (model.py:50, aten.mm out[0])", st_fwd);
    synth_holder(y, cell, "ThnnFusedLstmCellBackward0");
    synth_ref(y, LOSS_NODE + HOPS, cell, "next_functions[2]");
    synth_ref(y, cell, t, "SavedTensor 'result1' of ThnnFusedLstmCellBackward0");
}

TEST(a_cause_through_hundreds_of_autograd_nodes_reads_to_the_node_that_saved_it)
{
    assert_causes(&(struct program){ .hold = a_long_graph,
                                     .keep = keep_a_cell_at_the_end_of_the_graph },
                  &(struct causes){ .mib = 4, .text = {
                      "4 findings from 1 cause",
                      "held by: (autograd nodes) \xe2\x86\x92 ThnnFusedLstmCellBackward0"
                      ".SavedTensor 'result1' of ThnnFusedLstmCellBackward0 \xe2\x86\x92 "
                      "tensor 'output, hidden = self.rnn(emb, hidden) (model.py:50)'\n" } });
}

/* Each step's whole model output kept in a list, as Hugging Face's are: its
 * logits an item of the output, its key/value cache tensors fields of cache
 * layer objects inside it (CausalLMOutput['cache'] → DynamicCache.layers →
 * list[*] → DynamicLayer.keys). One list keeps them all: one cause, where
 * the object nearest each tensor split them into three (found on
 * transformers' GPT2LMHeadModel). */
static void keep_an_output_and_its_cache(synth *y, int i)
{
    uint64_t out = 9100 + 8 * (uint64_t)i, t = 9300 + 4 * (uint64_t)i;
    uint64_t at = 0x7f6000000000ull + (uint64_t)i * 16 * MiB;
    synth_held(y, out, "CausalLMOutputWithCrossAttentions", 9001, item_label(i - 1));
    synth_held(y, out + 1, "DynamicCache", out, "['cache']");
    synth_held(y, out + 2, "list", out + 1, ".layers");
    synth_held(y, out + 3, "DynamicLayer", out + 2, "[0]");
    const char *made = "out = model(input_ids=ids) (train.py:11, aten.mm out[0])";
    synth_new_tensor(y, t, at, 4 * MiB, made, st_fwd);
    synth_new_tensor(y, t + 1, at + 4 * MiB, 2 * MiB, made, st_fwd);
    synth_new_tensor(y, t + 2, at + 8 * MiB, 2 * MiB, made, st_fwd);
    for (uint64_t k = 0; k < 3; k++)
        synth_use(y, t + k);
    synth_ref(y, out, t, "['logits']");
    synth_ref(y, out + 3, t + 1, ".keys");
    synth_ref(y, out + 3, t + 2, ".values");
}

TEST(a_kept_outputs_items_and_its_caches_fields_are_one_cause)
{
    assert_causes(&(struct program){ .module = 9000, .kind = "list", .attr = ".history",
                                     .keep = keep_an_output_and_its_cache },
                  &(struct causes){ .nfindings = 12, .ncauses = 1, .text = {
                      "12 findings from 1 cause",
                      "held by: module __main__.history \xe2\x86\x92 list[*] \xe2\x86\x92 "
                      "CausalLMOutputWithCrossAttentions" } });
}

/* An optimizer keeps two state tensors of every replaced parameter under
 * two keys of one dict, made by one line: one cause, whatever key holds
 * each; and a tensor of that line made after the last walk (no holder
 * recorded) is counted with it, not shown as a cause of its own. */
static void keep_optimizer_state_under_two_keys(synth *y, int i)
{
    uint64_t d = 7100 + (uint64_t)i, t = 7200 + 2 * (uint64_t)i;
    uint64_t at = 0x7f4000000000ull + (uint64_t)i * 4 * MiB;
    synth_made(y, t, at, MiB, "opt.step() (train.py:50, aten.zeros_like out[0])", st_fwd);
    synth_made(y, t + 1, at + 2 * MiB, MiB,
               "opt.step() (train.py:50, aten.zeros_like out[0])", st_fwd);
    if (i == 4)      /* made after the last walk: no holder recorded */
        return;
    synth_held(y, d, "dict", 7002, "[<Parameter>]");
    synth_ref(y, d, t, "['exp_avg']");
    synth_ref(y, d, t + 1, "['exp_avg_sq']");
}

static void the_optimizers_state(synth *y)
{
    synth_held(y, 7002, "defaultdict", 7001, ".state");
}

TEST(findings_of_one_line_under_one_holder_are_one_cause_whatever_key_holds_them)
{
    assert_causes(&(struct program){ .module = 7000, .kind = "Adam", .attr = ".opt",
                                     .hold = the_optimizers_state,
                                     .keep = keep_optimizer_state_under_two_keys },
                  &(struct causes){ .mib = 8, .mib_one_cause = 1, .text = {
                      "8 \xc3\x97 [linger] 8 MiB",
                      /* shown by a finding that has a holder, its whole path */
                      "held by: module __main__.opt \xe2\x86\x92 Adam.state \xe2\x86\x92 " } });
}

/* pytorch/examples' GAT with each layer keeping its attention maps in a
 * list of its own (`self.attention_log.append(attention)`): one line, one
 * cause, reached through the model's dict['gat1'] and dict['gat2']. The
 * cause's path blanks the key as it blanks a list's index; before, it read
 * dict['gat1'] alone, as if one layer kept them. */
static void keep_each_layers_attention(synth *y, int i)
{
    for (uint64_t layer = 0; layer < 2; layer++) {
        uint64_t t = 8600 + 2 * (uint64_t)i + layer;
        uint64_t at = 0x7f6000000000ull + ((uint64_t)i * 2 + layer) * 4 * MiB;
        synth_made(y, t, at, MiB,
                   "attention = F.softmax(e, dim=-1) (main.py:124, aten._softmax out[0])",
                   st_fwd);
        synth_ref(y, 8505 + layer, t, item_label(i - 1));
    }
}

/* The model's two attention layers, each with a list .attention_log. */
static void two_layers_each_with_a_log(synth *y)
{
    synth_held(y, 8502, "dict", 8501, "._modules");
    synth_held(y, 8503, "GraphAttentionLayer", 8502, "['gat1']");
    synth_held(y, 8504, "GraphAttentionLayer", 8502, "['gat2']");
    synth_held(y, 8505, "list", 8503, ".attention_log");
    synth_held(y, 8506, "list", 8504, ".attention_log");
}

/* Three maps a step in the first layer's log, one in the second's at the
 * last step. */
static void keep_three_maps_in_one_layer_and_one_in_the_other(synth *y, int i)
{
    for (uint64_t k = 0; k < 4; k++) {
        uint64_t layer = k == 3;
        if (layer && i != 4)
            continue;
        uint64_t t = 8600 + 4 * (uint64_t)i + k;
        synth_made(y, t, 0x7f6000000000ull + ((uint64_t)i * 4 + k) * 4 * MiB, MiB,
                   "attention = F.softmax(e, dim=-1) (main.py:124, aten._softmax out[0])",
                   st_fwd);
        synth_ref(y, 8505 + layer, t, item_label((int)(4 * (uint64_t)i + k)));
    }
}

/* A limited report details the findings of a cause whose chains differ
 * first: the second layer's one map is shown beside the first layer's,
 * though the first layer's come first (pytorch/examples' GAT keeping each
 * layer's attention maps: under the limit the text named one key only). */
TEST(a_limited_report_details_a_causes_different_chains_first)
{
    synth y;
    vt__check_report *r = report_of(
        &y, &(struct program){ .module = 8500, .kind = "GAT", .attr = ".gat_net",
                               .hold = two_layers_each_with_a_log,
                               .keep = keep_three_maps_in_one_layer_and_one_in_the_other },
        &(struct causes){ .nfindings = 13, .ncauses = 1 });
    size_t details;
    char *text = render_details(r, &y, 20, &details);
    ASSERT_EQ(details, 3u);
    ASSERT_STR_CONTAINS(text, "dict['gat1']");
    ASSERT_STR_CONTAINS(text, "dict['gat2']");
    ASSERT_STR_CONTAINS(text, "... 10 more findings (at most 3 of each cause shown;");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST(a_cause_reached_through_several_keys_of_one_dict_says_dict_star)
{
    assert_causes(&(struct program){ .module = 8500, .kind = "GAT", .attr = ".gat_net",
                                     .hold = two_layers_each_with_a_log,
                                     .keep = keep_each_layers_attention },
                  &(struct causes){ .nfindings = 8, .ncauses = 1, .text = {
                      "held by: module __main__.gat_net \xe2\x86\x92 GAT._modules \xe2\x86\x92 "
                      "dict[*] \xe2\x86\x92 GraphAttentionLayer.attention_log \xe2\x86\x92 "
                      "list[*] \xe2\x86\x92 tensor",
                      /* each finding still says its own key */
                      "dict['gat1']", "dict['gat2']" } });
}

/* The loop's object keeps each step's loss in a list, reached from the frame
 * running the loop (`prog`, a local of run()): the losses and the graphs
 * they keep are one cause, as where a module's global holds the list. */
static void a_local_programs_history(synth *y)
{
    synth_holder(y, 4990, "frame");
    synth_held(y, 4991, "Program", 4990, "local 'prog' in run run.py:68");
    synth_held(y, 5001, "list", 4991, ".history");
}

TEST(losses_and_their_graphs_an_objects_list_keeps_are_one_cause_from_a_frame)
{
    assert_causes(&(struct program){ .hold = a_local_programs_history,
                                     .keep = keep_a_loss_and_its_graph_of_chains },
                  &(struct causes){ .mib = 4, .mib_one_cause = 1, .ncauses = 1, .text = {
                      "held by: frame local 'prog' in run run.py:68 \xe2\x86\x92 "
                      "Program.history \xe2\x86\x92 list[*] \xe2\x86\x92 tensor 'loss'.grad_fn "
                      "\xe2\x86\x92 (the autograd graph it keeps)\n" } });
}

/* A trainer keeps each step's predictions in a list for an accuracy it never
 * computes (minGPT's trainer, pytorch/examples distributed/minGPT-ddp, so
 * changed) until the list is cleared. Each finding's chain is walked when
 * it became one, through whichever frame held the trainer then: the step
 * method's `self` while it trains, main's `trainer` once the step has
 * returned. One list: one cause (it read as two, one a root). */
#define STEP_FRAME 8600
#define MAIN_FRAME 8601
#define TRAINER 8602
#define PREDS 8603
#define PRED_AT(i) (0x7f6000000000ull + (uint64_t)(i) * 2 * MiB)

TEST(one_holder_reached_from_the_frame_running_at_each_walk_is_one_cause)
{
    synth y;
    setup(&y);
    synth_holder(&y, STEP_FRAME, "frame");
    synth_holder(&y, TRAINER, "Trainer");
    synth_ref(&y, STEP_FRAME, TRAINER, "local 'self' in _run_batch trainer.py:107");
    synth_held(&y, PREDS, "list", TRAINER, ".preds");
    for (int i = 1; i <= 6; i++) {
        step(&y, i);
        if (i <= 4) {
            synth_made(&y, 8700 + (uint64_t)i, PRED_AT(i), MiB,
                       "self.preds.append(logits.argmax(-1)) (trainer.py:100, aten.argmax out[0])",
                       st_fwd);
            synth_ref(&y, PREDS, 8700 + (uint64_t)i, item_label(i - 1));
        }
        if (i == 4) {   /* the step returns; main's frame holds the trainer */
            synth_holder(&y, MAIN_FRAME, "frame");
            synth_ref(&y, MAIN_FRAME, TRAINER, "local 'trainer' in main main.py:52");
            synth_unref(&y, STEP_FRAME, TRAINER);
        }
    }
    for (int i = 1; i <= 4; i++)   /* preds.clear() */
        synth_release(&y, PREDS, 8700 + (uint64_t)i, PRED_AT(i));
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(mib_findings(r), 4u);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "4 findings from 1 cause");
    /* each finding still says the root its walk came in by */
    ASSERT_STR_CONTAINS(text, "frame local 'self' in _run_batch trainer.py:107 \xe2\x86\x92 "
                              "Trainer.preds \xe2\x86\x92 list[0]");
    ASSERT_STR_CONTAINS(text, "frame local 'trainer' in main main.py:52 \xe2\x86\x92 "
                              "Trainer.preds \xe2\x86\x92 list[3]");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
