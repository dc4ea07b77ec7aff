/* tests/check/test_check_groups.c - findings grouped by cause
 * (check_groups.c): one graph a kept loss holds, one holder's tensors of
 * several lines, a kept output's items and its cache's fields, one line
 * under one holder whatever key holds it, a chain into a graph without its
 * root, a long name, and each finding's group. */
#include "check_fixture.h"
#include "check_shapes.h"

/* y checked by the linger rule alone, which flags `activations` storages of
 * 1 MiB (the shapes below keep their activations at 1 MiB each). */
static vt__check_report *linger_with_activations(synth *y, size_t activations)
{
    vt__check_report *r = check_rules(y, VT_CHECK_RULE_LINGER);
    size_t acts = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        acts += r->findings[i].bytes == MiB;
    ASSERT_EQ(acts, activations);
    return r;
}

/* One bug, one cause: a list keeps every step's loss, and through each
 * loss's graph (chains of autograd nodes of different lengths) activations
 * made by two ops of one line. The text report groups them as one, with the
 * losses the list keeps: the graph's holder, each finding its whole chain. */
TEST(a_graph_kept_through_chains_of_any_length_is_one_cause)
{
    synth y;
    setup_module_keeping(&y, 5000, "list", ".losses");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t base = 6000 + 100 * (uint64_t)i, act = 0x7f3000000000ull + (uint64_t)i * MiB;
        synth_made(&y, base, act, MiB,
                   i == 4   ? "h = block(x) (train.py:40, backward: aten.mm out[0])"
                   : i % 2 ? "h = block(x) (train.py:40, aten.relu out[0])"
                   : "h = block(x) (train.py:40, aten.addmm out[0])", st_fwd);
        synth_made(&y, base + 1, act + MiB / 2, 4, "loss", st_fwd);
        synth_ref(&y, 5001, base + 1, "[0]");
        synth_held(&y, base + 2, "MeanBackward0", base + 1, "grad_fn");
        uint64_t node = base + 2;
        for (int k = 0; k <= i; k++) {    /* i autograd hops, then the node that saved h */
            synth_holder(&y, base + 10 + (uint64_t)k,
                         k == i ? "ReluBackward0" : k % 2 ? "MulBackward0" : "AddmmBackward0");
            synth_ref(&y, node, base + 10 + (uint64_t)k, "next_functions[0]");
            node = base + 10 + (uint64_t)k;
        }
        synth_ref(&y, node, base, "SavedTensor 'self' of ReluBackward0");
    }
    steps(&y, 5, 6);
    vt__check_report *r = linger_with_activations(&y, 4);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "8 findings from 1 cause"), "%s", text);
    ASSERT_MSG(strstr(text, "8 \xc3\x97 [linger] 4 MiB (512 KiB each on average)"), "%s", text);
    ASSERT_MSG(strstr(text, "tensor 'h = block(x) (train.py:40)' and those of 1 more line\n"),
               "%s", text);
    ASSERT_MSG(strstr(text, "held by: module __main__.losses \xe2\x86\x92 list[*] \xe2\x86\x92 "
                            "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n"),
               "%s", text);
    ASSERT_MSG(strstr(text, "tensor 'loss'.grad_fn \xe2\x86\x92 MeanBackward0.next_functions[0] "
                            "\xe2\x86\x92 AddmmBackward0.next_functions[0] \xe2\x86\x92 "
                            "ReluBackward0.SavedTensor 'self' of ReluBackward0"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* One graph, reached from its named root for some of its tensors and, for
 * others, from a node nothing named holds (the walk found those through
 * the graph alone, an LSTM's saved gates: "(autograd nodes) → ..."): one
 * cause, shown by the chain with the root. */
TEST(a_chain_into_a_graph_without_its_root_joins_the_cause_that_names_the_root)
{
    synth y;
    setup_module_keeping(&y, 5000, "list", ".losses");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t base = 6000 + 100 * (uint64_t)i, act = 0x7f3000000000ull + (uint64_t)i * MiB;
        synth_made(&y, base, act, MiB, "h = block(x) (train.py:40, aten.relu out[0])", st_fwd);
        uint64_t node;
        if (i <= 2) {    /* list → loss.grad_fn → MulBackward0 → ReluBackward0 */
            synth_made(&y, base + 1, act + MiB / 2, 4, "loss", st_fwd);
            synth_ref(&y, 5001, base + 1, "[0]");
            synth_held(&y, base + 2, "MulBackward0", base + 1, "grad_fn");
            node = base + 2;
        } else {         /* a node no named object holds */
            synth_holder(&y, base + 2, "MulBackward0");
            node = base + 2;
        }
        synth_holder(&y, base + 10, "ReluBackward0");
        synth_ref(&y, node, base + 10, "next_functions[0]");
        synth_ref(&y, base + 10, base, "SavedTensor 'self' of ReluBackward0");
    }
    steps(&y, 5, 6);
    vt__check_report *r = linger_with_activations(&y, 4);
    uint32_t *g = calloc(r->nfindings, sizeof *g);
    ASSERT(g != NULL);
    ASSERT(vt__check_report_groups(r, NULL, g) >= 1);
    long act_group = -1;
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].bytes == MiB) {
            if (act_group < 0)
                act_group = g[i];
            ASSERT_EQ((long)g[i], act_group);    /* all four in one group */
        }
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "held by: module __main__.losses \xe2\x86\x92 list[*] \xe2\x86\x92 "
                            "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n"),
               "%s", text);
    ASSERT_MSG(!strstr(text, "held by: (autograd nodes)"), "%s", text);
    free(text);
    free(g);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Two graphs kept by two holders: one cause each, whatever lines made the
 * tensors each graph saved (a forward of two lines). */
TEST(graphs_kept_by_two_holders_are_two_causes_of_every_line_they_keep)
{
    synth y;
    setup(&y);
    synth_holder(&y, 5000, "module __main__");
    synth_holder(&y, 5001, "list");
    synth_holder(&y, 5002, "dict");
    synth_ref(&y, 5000, 5001, ".history");
    synth_ref(&y, 5000, 5002, ".cache");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        for (int which = 0; which < 2; which++) {   /* history keeps a graph, cache another */
            uint64_t base = 6000 + 100 * (uint64_t)i + 50 * (uint64_t)which;
            uint64_t at = 0x7f3000000000ull + (uint64_t)(4 * i + 2 * which) * MiB;
            synth_made(&y, base, at, MiB, "h = fc1(x) (train.py:40, aten.addmm out[0])", st_fwd);
            synth_made(&y, base + 1, at + MiB, MiB, "a = act(h) (train.py:41, aten.relu out[0])",
                       st_fwd);
            synth_made(&y, base + 2, at + MiB + MiB / 2, 4, "loss", st_fwd);
            synth_ref(&y, which ? 5002 : 5001, base + 2, which ? "['last']" : "[0]");
            synth_held(&y, base + 3, "MeanBackward0", base + 2, "grad_fn");
            synth_held(&y, base + 4, "ReluBackward0", base + 3, "next_functions[0]");
            synth_ref(&y, base + 4, base + 1, "SavedTensor 'result' of ReluBackward0");
            synth_held(&y, base + 5, "AddmmBackward0", base + 4, "next_functions[0]");
            synth_ref(&y, base + 5, base, "SavedTensor 'mat1' of AddmmBackward0");
        }
    }
    steps(&y, 5, 6);
    vt__check_report *r = linger_with_activations(&y, 16);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "from 2 causes"), "%s", text);
    ASSERT_MSG(strstr(text, "held by: module __main__.history \xe2\x86\x92 list[*] \xe2\x86\x92 "
                            "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n"),
               "%s", text);
    ASSERT_MSG(strstr(text, "held by: module __main__.cache \xe2\x86\x92 dict['last'] \xe2\x86\x92 "
                            "tensor 'loss'.grad_fn \xe2\x86\x92 (the autograd graph it keeps)\n"),
               "%s", text);
    ASSERT_MSG(strstr(text, " and those of 2 more lines\n"), "%s", text);   /* h, a, loss */
    free(text);
    char *js = render(r, &y, 1);
    ASSERT_JSON_VALID(js);
    ASSERT_STR_CONTAINS(js, "\"lines\":3");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A name longer than a group's key: the key is cut, and the report still
 * groups and shows it (a cut key once made the cause list read past it). */
TEST(a_tensor_name_longer_than_a_group_key_is_grouped_and_shown)
{
    synth y;
    setup_module_keeping(&y, 5000, "list", ".history");
    char name[3000];
    memset(name, 'x', sizeof name - 1);
    name[sizeof name - 1] = 0;
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t t = 7000 + 10 * (uint64_t)i;
        synth_made(&y, t, 0x7f3000000000ull + (uint64_t)i * 4 * MiB, MiB, name, st_fwd);
        synth_ref(&y, 5001, t, "[0]");
        synth_made(&y, t + 1, 0x7f3000000000ull + (uint64_t)i * 4 * MiB + 2 * MiB, MiB,
                   "loss", st_fwd);
        synth_ref(&y, 5001, t + 1, "[1]");
        synth_held(&y, t + 2, "MeanBackward0", t + 1, "grad_fn");
        synth_ref(&y, t + 2, t, "SavedTensor 'self' of MeanBackward0");
    }
    steps(&y, 5, 6);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(r->nfindings, 8);
    uint32_t g[8];
    long ng = vt__check_report_groups(r, NULL, g);
    ASSERT(ng >= 1 && ng <= 3);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "findings from");
    free(text);
    char *js = render(r, &y, 1);
    ASSERT_JSON_VALID(js);
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A tensor a walk found where no op showed it (a compiled graph's output)
 * is named "LINE (FILE:N, tensor (32, 64, 65) float32, made where ...)":
 * its parenthesized shape is part of the WHAT that a cause's holder drops
 * whole, not cut at its first ")" ("(train.py:9) float32, made ...)" before). */
TEST(a_cause_drops_a_name_whose_what_holds_parentheses_whole)
{
    synth y;
    setup_module_keeping(&y, 5000, "list", ".kept");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t t = 7000 + 10 * (uint64_t)i;
        synth_made(&y, t, 0x7f3000000000ull + (uint64_t)i * 4 * MiB, MiB,
                   "logits = model(x) (train.py:9, tensor (32, 64, 65) float32, made where "
                   "no op showed it)", st_fwd);
        synth_ref(&y, 5001, t, item_label(i - 1));
    }
    steps(&y, 5, 6);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(r->nfindings, 4);
    uint32_t g[4];
    ASSERT_EQ(vt__check_report_groups(r, NULL, g), 1);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "held by: module __main__.kept \xe2\x86\x92 list[*] \xe2\x86\x92 "
                              "tensor 'logits = model(x) (train.py:9)'\n");
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* One bug leaks one storage per step: views list it once, as the report's
 * groups do (rule, owner name, first path with its indices blanked). */
TEST(report_groups_give_each_finding_its_cause)
{
    synth y;
    setup(&y);
    synth_holder(&y, 5, "history");
    synth_holder(&y, 6, "cache");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        keep_logits(&y, i, 5);
        if (i == 1) {   /* another cause, smaller */
            synth_made(&y, 200, 0x7f3000000000ull, 1 * MiB, "batch", st_act);
            synth_ref(&y, 6, 200, "['last']");
        }
    }
    steps(&y, 5, 6);
    vt__check_report *r = check(&y, NULL);
    ASSERT_EQ(r->nfindings, 5);
    uint32_t g[5];
    ASSERT_EQ(vt__check_report_groups(r, NULL, g), 2);
    for (size_t i = 0; i < r->nfindings; i++) {
        const vt__check_finding *f = &r->findings[i];
        /* Group 0 is the largest bytes: the four logits. */
        ASSERT_EQ(g[i], f->bytes == 8 * MiB ? 0u : 1u);
    }
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A program keeps each step's whole model output (transformers' ModelOutput:
 * its logits and its loss, two lines of the model, as items of one object
 * in a list): one cause, the holder, whatever lines made the tensors. Two
 * lists an object keeps under two attributes are two causes. */
TEST(tensors_of_several_lines_one_holder_keeps_are_one_cause)
{
    synth y;
    setup_module_keeping(&y, 8000, "list", ".history");
    synth_held(&y, 8002, "Trainer", 8000, ".trainer");
    synth_held(&y, 8003, "list", 8002, ".a");
    synth_held(&y, 8004, "list", 8002, ".b");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t out = 8100 + (uint64_t)i, t = 8200 + 4 * (uint64_t)i;
        uint64_t at = 0x7f5000000000ull + (uint64_t)i * 16 * MiB;
        synth_held(&y, out, "ModelOutput", 8001, item_label(i - 1));
        synth_new_tensor(&y, t, at, 4 * MiB, "lm_logits = self.lm_head(h) (model.py:10, aten.mm out[0])",
                         st_fwd);
        synth_new_tensor(&y, t + 1, at + 4 * MiB, MiB, "loss = F.cross_entropy(x, y) (model.py:12, "
                         "aten.nll_loss out[0])", st_fwd);
        synth_new_tensor(&y, t + 2, at + 8 * MiB, 2 * MiB, "a = x * 2 (train.py:20, aten.mul out[0])",
                         st_act);
        synth_new_tensor(&y, t + 3, at + 12 * MiB, 2 * MiB, "b = x * 3 (train.py:21, aten.mul out[0])",
                         st_act);
        for (uint64_t k = 0; k < 4; k++)
            synth_use(&y, t + k);
        synth_ref(&y, out, t, "['logits']");
        synth_ref(&y, out, t + 1, "['loss']");
        synth_ref(&y, 8003, t + 2, item_label(i - 1));
        synth_ref(&y, 8004, t + 3, item_label(i - 1));
    }
    steps(&y, 5, 6);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(r->nfindings, 16);
    uint32_t g[16];
    ASSERT_EQ(vt__check_report_groups(r, NULL, g), 3);
    long kept = -1, a = -1, b = -1;
    for (size_t i = 0; i < r->nfindings; i++) {
        const char *owner = r->findings[i].owner_name;
        long *which = !strncmp(owner, "a = ", 4) ? &a : !strncmp(owner, "b = ", 4) ? &b : &kept;
        if (*which < 0)
            *which = g[i];
        ASSERT_EQ((long)g[i], *which);   /* one group per cause, each finding in its own */
    }
    ASSERT(kept != a && kept != b && a != b);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "16 findings from 3 causes"), "%s", text);
    ASSERT_MSG(strstr(text, "8 \xc3\x97 [linger] 20 MiB"), "%s", text);
    ASSERT_MSG(strstr(text, "(model.py:10)' and those of 1 more line\n"), "%s", text);
    free(text);
    char *js = render(r, &y, 1);
    ASSERT_STR_CONTAINS(js, "\"count\":8,\"bytes\":20971520");
    ASSERT_STR_CONTAINS(js, "\"lines\":2");
    free(js);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A graph kept across batches (an LSTM's hidden state never detached) holds
 * each batch's saved tensors through hundreds of autograd nodes: the cause
 * still reads to its end, the node that saved them (the chain was cut to a
 * line's length before its nodes were one hop, and read
 * "(autograd nodes) → ThnnFusedLstmCellBackward0.n"). */
TEST(a_cause_through_hundreds_of_autograd_nodes_reads_to_the_node_that_saved_it)
{
    synth y;
    setup(&y);
    synth_holder(&y, 7000, "NllLossBackward0");
    uint64_t node = 7000;
    for (uint64_t k = 1; k <= 300; k++) {
        synth_holder(&y, 7000 + k, k % 2 ? "UnbindBackward0" : "StackBackward0");
        synth_ref(&y, node, 7000 + k, "next_functions[0]");
        node = 7000 + k;
    }
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t t = 8000 + (uint64_t)i, cell = 8100 + (uint64_t)i;
        synth_made(&y, t, 0x7f3000000000ull + (uint64_t)i * MiB, MiB,
                   "output, hidden = self.rnn(emb, hidden) (model.py:50, aten.mm out[0])", st_fwd);
        synth_holder(&y, cell, "ThnnFusedLstmCellBackward0");
        synth_ref(&y, node, cell, "next_functions[2]");
        synth_ref(&y, cell, t, "SavedTensor 'result1' of ThnnFusedLstmCellBackward0");
    }
    steps(&y, 5, 6);
    vt__check_report *r = linger_with_activations(&y, 4);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "4 findings from 1 cause"), "%s", text);
    ASSERT_MSG(strstr(text, "held by: (autograd nodes) \xe2\x86\x92 ThnnFusedLstmCellBackward0"
                            ".SavedTensor 'result1' of ThnnFusedLstmCellBackward0 \xe2\x86\x92 "
                            "tensor 'output, hidden = self.rnn(emb, hidden) (model.py:50)'\n"),
               "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Each step's whole model output kept in a list, as Hugging Face's are: its
 * logits an item of the output, its key/value cache tensors fields of cache
 * layer objects inside it (CausalLMOutput['cache'] → DynamicCache.layers →
 * list[*] → DynamicLayer.keys). One list keeps them all: one cause, where
 * the object nearest each tensor split them into three (found on
 * transformers' GPT2LMHeadModel). */
TEST(a_kept_outputs_items_and_its_caches_fields_are_one_cause)
{
    synth y;
    setup_module_keeping(&y, 9000, "list", ".history");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t out = 9100 + 8 * (uint64_t)i, t = 9300 + 4 * (uint64_t)i;
        uint64_t at = 0x7f6000000000ull + (uint64_t)i * 16 * MiB;
        synth_held(&y, out, "CausalLMOutputWithCrossAttentions", 9001, item_label(i - 1));
        synth_held(&y, out + 1, "DynamicCache", out, "['cache']");
        synth_held(&y, out + 2, "list", out + 1, ".layers");
        synth_held(&y, out + 3, "DynamicLayer", out + 2, "[0]");
        const char *made = "out = model(input_ids=ids) (train.py:11, aten.mm out[0])";
        synth_new_tensor(&y, t, at, 4 * MiB, made, st_fwd);
        synth_new_tensor(&y, t + 1, at + 4 * MiB, 2 * MiB, made, st_fwd);
        synth_new_tensor(&y, t + 2, at + 8 * MiB, 2 * MiB, made, st_fwd);
        for (uint64_t k = 0; k < 3; k++)
            synth_use(&y, t + k);
        synth_ref(&y, out, t, "['logits']");
        synth_ref(&y, out + 3, t + 1, ".keys");
        synth_ref(&y, out + 3, t + 2, ".values");
    }
    steps(&y, 5, 6);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    ASSERT_EQ(r->nfindings, 12);
    uint32_t g[12];
    ASSERT_EQ(vt__check_report_groups(r, NULL, g), 1);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "12 findings from 1 cause"), "%s", text);
    ASSERT_MSG(strstr(text, "held by: module __main__.history \xe2\x86\x92 list[*] \xe2\x86\x92 "
                            "CausalLMOutputWithCrossAttentions"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* An optimizer keeps two state tensors of every replaced parameter under
 * two keys of one dict, made by one line: one cause, whatever key holds
 * each; and a tensor of that line made after the last walk (no holder
 * recorded) is counted with it, not shown as a cause of its own. */
TEST(findings_of_one_line_under_one_holder_are_one_cause_whatever_key_holds_them)
{
    synth y;
    setup_module_keeping(&y, 7000, "Adam", ".opt");
    synth_held(&y, 7002, "defaultdict", 7001, ".state");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        uint64_t d = 7100 + (uint64_t)i, t = 7200 + 2 * (uint64_t)i;
        uint64_t at = 0x7f4000000000ull + (uint64_t)i * 4 * MiB;
        synth_made(&y, t, at, MiB, "opt.step() (train.py:50, aten.zeros_like out[0])", st_fwd);
        synth_made(&y, t + 1, at + 2 * MiB, MiB,
                   "opt.step() (train.py:50, aten.zeros_like out[0])", st_fwd);
        if (i == 4)      /* made after the last walk: no holder recorded */
            continue;
        synth_held(&y, d, "dict", 7002, "[<Parameter>]");
        synth_ref(&y, d, t, "['exp_avg']");
        synth_ref(&y, d, t + 1, "['exp_avg_sq']");
    }
    steps(&y, 5, 6);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    size_t state = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        state += r->findings[i].bytes == MiB;
    ASSERT_EQ(state, 8);
    uint32_t *g = calloc(r->nfindings, sizeof *g);
    ASSERT(g != NULL);
    long ng = vt__check_report_groups(r, NULL, g);
    ASSERT(ng >= 1);
    long state_group = -1;
    for (size_t i = 0; i < r->nfindings; i++)
        if (r->findings[i].bytes == MiB) {
            if (state_group < 0)
                state_group = g[i];
            ASSERT_EQ((long)g[i], state_group);    /* all eight in one group */
        }
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "8 \xc3\x97 [linger] 8 MiB"), "%s", text);
    /* shown by a finding that has a holder, its whole path */
    ASSERT_MSG(strstr(text, "held by: module __main__.opt \xe2\x86\x92 Adam.state \xe2\x86\x92 "), "%s", text);
    free(text);
    free(g);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* pytorch/examples' GAT with each layer keeping its attention maps in a
 * list of its own (`self.attention_log.append(attention)`): one line, one
 * cause, reached through the model's dict['gat1'] and dict['gat2']. The
 * cause's path blanks the key as it blanks a list's index; before, it read
 * dict['gat1'] alone, as if one layer kept them. */
TEST(a_cause_reached_through_several_keys_of_one_dict_says_dict_star)
{
    synth y;
    setup_module_keeping(&y, 8500, "GAT", ".gat_net");
    synth_held(&y, 8502, "dict", 8501, "._modules");
    synth_held(&y, 8503, "GraphAttentionLayer", 8502, "['gat1']");
    synth_held(&y, 8504, "GraphAttentionLayer", 8502, "['gat2']");
    synth_held(&y, 8505, "list", 8503, ".attention_log");
    synth_held(&y, 8506, "list", 8504, ".attention_log");
    for (int i = 1; i <= 4; i++) {
        step(&y, i);
        for (uint64_t layer = 0; layer < 2; layer++) {
            uint64_t t = 8600 + 2 * (uint64_t)i + layer;
            uint64_t at = 0x7f6000000000ull + ((uint64_t)i * 2 + layer) * 4 * MiB;
            synth_made(&y, t, at, MiB,
                       "attention = F.softmax(e, dim=-1) (main.py:124, aten._softmax out[0])",
                       st_fwd);
            synth_ref(&y, 8505 + layer, t, item_label(i - 1));
        }
    }
    steps(&y, 5, 6);
    vt__check_report *r = check_rules(&y, VT_CHECK_RULE_LINGER);
    ASSERT(r->nfindings >= 6);
    ASSERT_EQ(vt__check_report_groups(r, NULL, NULL), 1);
    char *text = render(r, &y, 0);
    ASSERT_MSG(strstr(text, "held by: module __main__.gat_net \xe2\x86\x92 GAT._modules \xe2\x86\x92 "
                            "dict[*] \xe2\x86\x92 GraphAttentionLayer.attention_log \xe2\x86\x92 "
                            "list[*] \xe2\x86\x92 tensor"), "%s", text);
    /* each finding still says its own key */
    ASSERT_MSG(strstr(text, "dict['gat1']") && strstr(text, "dict['gat2']"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
