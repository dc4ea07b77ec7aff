/* tests/check/test_check_linger_chains.c - how the linger rule (check_linger.c)
 * shows the chain of references that keeps a finding's storage: bounded and
 * marked truncated when deep, a run of the same hop or a repeating cycle of
 * hops shown once with its count, a line too long keeping its root and its
 * end. The leak shapes themselves: test_check_linger.c. */
#include "check_fixture.h"
#include "check_shapes.h"

TEST(deep_chain_is_bounded_and_marked_truncated)
{
    synth y;
    made_in_step_1(&y, 2, ACT1, "deep");
    for (uint64_t h = 0; h < 10000; h++) {
        SYNTH_EV(&y, VT_EV_HOLDER_NEW, .aux = 100000 + h);
        SYNTH_EV(&y, VT_EV_REF, .aux = 100000 + h, .aux2 = h ? 100000 + h - 1 : 2);
    }
    steps(&y, 2, 4);
    vt__check_report *r = check(&y, NULL);
    const vt__check_finding *f = the_finding(r, ACT1, MiB);
    ASSERT_EQ(f->npaths, 1);
    ASSERT(f->paths[0].truncated);
    ASSERT_EQ(f->paths[0].nsteps, 4096 + 1);
    ASSERT_STR_CONTAINS(path_text(f, 0), "\xe2\x80\xa6 holder #104094 \xe2\x86\x92 holder #104093");
    vt__check_report_free(r);
    vt__check_options o = default_options();
    o.max_visit = 20000;
    r = check(&y, &o);
    ASSERT(!r->findings[0].paths[0].truncated);
    ASSERT_EQ(r->findings[0].paths[0].nsteps, 10000 + 2);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A finding held through a chain: module __main__.`root` → `n` holders,
 * the i-th named name(i) and left through via(i) → the last one's `saved`
 * → tensor 'h' (1 MiB at ACT1), lingering from step 1. Its report. */
typedef const char *(*hop_fn)(uint64_t i, char *buf, size_t len);

static vt__check_report *held_through_a_chain(synth *y, uint64_t n, hop_fn name, hop_fn via,
                                              const char *root, const char *saved)
{
    char buf[64];
    made_in_step_1(y, 2, ACT1, "h");
    synth_holder(y, 99, "module __main__");
    for (uint64_t i = 0; i < n; i++)
        synth_holder(y, 100 + i, name(i, buf, sizeof buf));
    synth_ref(y, 99, 100, root);
    for (uint64_t i = 0; i + 1 < n; i++)
        synth_ref(y, 100 + i, 100 + i + 1, via(i, buf, sizeof buf));
    synth_ref(y, 100 + n - 1, 2, saved);
    steps(y, 2, 4);
    return check(y, NULL);
}

/* The first chain of the finding on ACT1 in r, folded into buf. */
static const vt__check_finding *folded_chain(const vt__check_report *r, char *buf, size_t len)
{
    const vt__check_finding *f = the_finding(r, ACT1, MiB);
    vt__check_path_format_folded(&f->paths[0], buf, len);
    return f;
}

static const char *add_node(uint64_t i, char *buf, size_t len)
{
    (void)i, (void)buf, (void)len;
    return "AddBackward0";
}

static const char *first_input(uint64_t i, char *buf, size_t len)
{
    (void)i, (void)buf, (void)len;
    return "next_functions[0]";
}

/* A running total keeps one AddBackward0 per step: the report's text shows
 * the run of that hop once, with its count; keys and JSON keep every hop. */
TEST(a_run_of_the_same_hop_is_shown_once_with_its_count)
{
    synth y;
    vt__check_report *r = held_through_a_chain(&y, 12, add_node, first_input, "running",
                                               "saved_self");
    char folded[1024];
    const vt__check_finding *f = folded_chain(r, folded, sizeof folded);
    ASSERT_STR_EQ(folded, "module __main__.running \xe2\x86\x92 AddBackward0.next_functions[0] "
                          "\xc3\x97" "11 \xe2\x86\x92 AddBackward0.saved_self \xe2\x86\x92 "
                          "tensor 'h' \xe2\x86\x92 storage 0x7f2000000000 1 MiB");
    ASSERT_EQ(f->paths[0].nsteps, 15);
    ASSERT_STR_CONTAINS(path_text(f, 0), "AddBackward0.next_functions[0] \xe2\x86\x92 "
                                         "AddBackward0.next_functions[0]");
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, folded);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

static const char *numbered_node(uint64_t i, char *buf, size_t len)
{
    snprintf(buf, len, "Node%03uBackward0", (unsigned)i);
    return buf;
}

/* A chain too long for a line keeps its root and its end (what saved the
 * storage, and the storage) and elides hops between them at arrows. */
TEST(a_chain_too_long_for_a_line_keeps_its_root_and_its_end)
{
    synth y;   /* no two hops alike: nothing folds */
    vt__check_report *r = held_through_a_chain(&y, 200, numbered_node, first_input, "outs",
                                               "saved_mat1");
    char *text = render(r, &y, 0);
    const char *line = strstr(text, "     module __main__.outs \xe2\x86\x92 Node000Backward0");
    ASSERT_MSG(line != NULL, "%s", text);
    const char *end = strchr(line, '\n');
    ASSERT(end && end - line < 2100);
    ASSERT_MSG(strstr(line, " \xe2\x86\x92 \xe2\x80\xa6 \xe2\x86\x92 Node"), "%s", text);
    ASSERT_MSG(strstr(line, "Node199Backward0.saved_mat1 \xe2\x86\x92 tensor 'h' \xe2\x86\x92 "
                            "storage 0x7f2000000000 1 MiB\n"), "%s", text);
    free(text);
    vt__check_report_free(r);
    synth_fini(&y);
}

/* An RNN cell's nodes a time step: Addmm, Tanh, Add, through their inputs. */
static const char *rnn_cell_node(uint64_t i, char *buf, size_t len)
{
    static const char *const cell[3] = { "AddmmBackward0", "TanhBackward0", "AddBackward0" };
    (void)buf, (void)len;
    return cell[i % 3];
}

static const char *rnn_cell_input(uint64_t i, char *buf, size_t len)
{
    (void)buf, (void)len;
    return i % 3 ? "next_functions[0]" : "next_functions[1]";
}

/* A recurrent cell's graph kept across batches (the hidden state never
 * detached) repeats the cell's nodes once per time step: the text shows
 * the repeating cycle of hops once, with its count, and the hops around it
 * (what saved the storage, at the end) whole. */
TEST(a_repeating_cycle_of_hops_is_shown_once_with_its_count)
{
    synth y;   /* 10 time steps of 3 nodes, and the saving one */
    vt__check_report *r = held_through_a_chain(&y, 31, rnn_cell_node, rnn_cell_input, "outs",
                                               "saved_mat1");
    char folded[1024];
    const vt__check_finding *f = folded_chain(r, folded, sizeof folded);
    ASSERT_STR_EQ(folded, "module __main__.outs \xe2\x86\x92 (AddmmBackward0.next_functions[1] "
                          "\xe2\x86\x92 TanhBackward0.next_functions[0] \xe2\x86\x92 "
                          "AddBackward0.next_functions[0]) \xc3\x97" "10 \xe2\x86\x92 "
                          "AddmmBackward0.saved_mat1 \xe2\x86\x92 tensor 'h' \xe2\x86\x92 "
                          "storage 0x7f2000000000 1 MiB");
    ASSERT_EQ(f->paths[0].nsteps, 34);   /* JSON and keys: every hop */
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
