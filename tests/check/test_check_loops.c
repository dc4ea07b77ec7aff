/* tests/check/test_check_loops.c - loops on traces without tensor
 * annotations: an evaluation loop's allocations kept until it ended
 * (check_loop_kept.c) and, where the program marked no step, the steps its
 * backward passes tell (trace/snap/timeline_steps.c). */
#include "check_fixture.h"
#include "check_shapes.h"

/* Six marked steps of training at model.py's lines 100 and 101 (freed
 * within the step); in step 3 an evaluation loop of `iters` iterations,
 * each making its input at evaluate's line 41 and `layers` activations at
 * each of the model's two lines under evaluate's line 42. Where `chained`,
 * they are all freed together as the loop ends (a running sum of tensor
 * losses keeps each iteration's graph), else each iteration's at its end.
 * The frees have the Python stack of evaluate's return. `by_hand`: no
 * marks; each step's training ends in a backward pass (a block made and
 * freed by the autograd engine's thread), as a loop that steps its
 * parameters by hand makes no optimizer step for `run` to mark. */
static vt__check_report *evaluation_loop_stepped(synth *y, int iters, int layers, int chained,
                                                 int by_hand)
{
    synth_init(y);
    static const char *const model_files[] = { "model.py", "train.py", "train.py" };
    static const char *const own_files[] = { "train.py", "train.py" };
    uint32_t train[2], act[2];
    for (uint32_t l = 0; l < 2; l++) {
        train[l] = synth_stack(y, "forward", "train_step", "<module>", NULL);
        as_python(y, train[l], model_files, (uint32_t[]){ 100 + l, 30, 5 });
        act[l] = synth_stack(y, "forward", "evaluate", "<module>", NULL);
        as_python(y, act[l], model_files, (uint32_t[]){ 100 + l, 42, 7 });
    }
    uint32_t input = synth_stack(y, "evaluate", "<module>", NULL);
    as_python(y, input, own_files, (uint32_t[]){ 41, 7 });
    uint32_t ret = synth_stack(y, "evaluate", "<module>", NULL);
    as_python(y, ret, own_files, (uint32_t[]){ 44, 7 });
    uint32_t backward = synth_stack(y, "at::native::mm_out", "MmBackward0::apply",
                                    "torch::autograd::Engine::evaluate_function",
                                    "torch::autograd::Engine::thread_main", NULL);
    uint64_t at = 0x7e0000000000ull;
    for (int i = 1; i <= 6; i++) {
        if (by_hand)
            synth_tick(y, 100000000);
        else
            synth_step_mark(y, i);
        for (uint32_t l = 0; l < 2; l++)
            synth_alloc(y, 0x7f0000000000ull + l * 0x1000000ull, 2 * MiB, train[l]);
        if (by_hand) {   /* its temporary, made and freed by the engine's thread */
            synth_alloc(y, 0x7f8000000000ull, 2 * MiB, backward);
            SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = 0x7f8000000000ull, .stack = backward);
        }
        for (uint32_t l = 0; l < 2; l++)
            synth_free(y, 0x7f0000000000ull + l * 0x1000000ull);
        if (i != 3)
            continue;
        uint64_t from = at;
        for (int it = 0; it < iters; it++) {
            uint64_t mine = at;
            synth_alloc(y, at, MiB, input);
            at += 0x1000000ull;
            for (int k = 0; k < layers; k++)
                for (uint32_t l = 0; l < 2; l++) {
                    synth_alloc(y, at, MiB, act[l]);
                    at += 0x1000000ull;
                }
            for (; !chained && mine < at; mine += 0x1000000ull)
                SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = mine, .stack = ret);
        }
        for (; chained && from < at; from += 0x1000000ull)
            SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = from, .stack = ret);
    }
    synth_tick(y, 50000000);
    return check(y, NULL);
}

static vt__check_report *evaluation_loop(synth *y, int iters, int layers, int chained)
{
    return evaluation_loop_stepped(y, iters, layers, chained, 0);
}

/* r's one finding, a loop's blocks kept through it (OUTLIER): over `visits`
 * runs of its body, made at `lines` lines of Python, `blocks` of a MiB each,
 * freed, under the call at line `call_line`. */
static const vt__check_finding *only_loop_kept(const vt__check_report *r, const synth *y,
                                               uint32_t visits, uint32_t lines, uint32_t blocks,
                                               uint32_t call_line)
{
    const vt__check_finding *f = only_finding_of(r, VT_CHECK_RULE_OUTLIER);
    ASSERT_EQ(f->loop_visits, visits);
    ASSERT_EQ(f->kept_lines, lines);
    ASSERT_EQ(f->nallocs, blocks);
    ASSERT_EQ(f->bytes, blocks * MiB);
    ASSERT_EQ(f->freed, 1);
    ASSERT(f->under_stack != 0);
    ASSERT_EQ(y->s.frames[y->s.stack_nodes[f->under_stack].frame].line, call_line);
    return f;
}

/* Without tensors, an evaluation that sums its losses as tensors without
 * no_grad keeps every iteration's graph until its loop ends, where each
 * would die with its iteration: the step's peak grows with the batches (an
 * out of memory in validation), and every block is freed within its step,
 * short-lived to the other rules ("0 findings" under plain run and run
 * --track before). Blocks freed together, made at two lines or more over
 * four runs or more of one line inside the call they share (evaluate's
 * input line, visited once an iteration): one finding, named by that call.
 * Not freed iteration by iteration, not one forward's graph (its layers all
 * under one visit of the line that ran the model), not three iterations. */
TEST(a_loops_allocations_kept_until_it_ended_are_an_outlier_without_tensors)
{
    synth y;
    vt__check_report *r = evaluation_loop(&y, 5, 1, 1);
    only_loop_kept(r, &y, 5, 3, 15, 7);
    char *text = render(r, &y, 0);
    ASSERT_STR_CONTAINS(text, "kept through a loop: 15 blocks made at 3 lines over 5 runs of its"
                              " body or more, where each run's would die with it, freed together"
                              " when it ended");
    free(text);
    assert_rendered_says(r, &y, 1, "\"kept_lines\":3,\"kept_steps\":0,\"loop_visits\":5,");
    vt__check_report_free(r);
    synth_fini(&y);

    struct { int iters, layers, chained; } clean[] = {
        { 5, 1, 0 },   /* freed iteration by iteration */
        { 1, 6, 1 },   /* one forward's graph: 13 blocks, one visit */
        { 3, 1, 1 },   /* three iterations */
    };
    for (size_t k = 0; k < sizeof clean / sizeof clean[0]; k++) {
        r = evaluation_loop(&y, clean[k].iters, clean[k].layers, clean[k].chained);
        assert_report_clean(r, &y);
    }
}

/* Six marked steps; in step 3 an evaluation of `iters` iterations whose
 * blocks are all made by torch's Linear under evaluate's line 42 (its
 * batches on the device already: none made in the loop), two an iteration,
 * each under track() a tensor (where `tensors`) used by the op that made
 * the next, all freed together as the loop ends, each tensor dropped with
 * its storage (PyTorch keeps the Python tensor of a saved activation alive
 * as long as the graph keeps its memory). `used_after`: each iteration's
 * second block is used again after the loop (its results, gathered on
 * purpose and read by the code that follows). */
static vt__check_report *one_line_evaluation(synth *y, int iters, int tensors, int used_after)
{
    synth_init(y);
    static const char *const files[] = {
        "/venv/lib/python3.11/site-packages/torch/nn/modules/linear.py", "train.py", "train.py" };
    uint32_t act = synth_stack(y, "forward", "evaluate", "<module>", NULL);
    as_python(y, act, files, (uint32_t[]){ 125, 42, 7 });
    uint32_t ret = synth_stack(y, "evaluate", "<module>", NULL);
    as_python(y, ret, (const char *const[]){ "train.py", "train.py" }, (uint32_t[]){ 44, 7 });
    uint64_t at = 0x7e0000000000ull, id = 1;
    for (int i = 1; i <= 6; i++) {
        synth_step_mark(y, i);
        if (i != 3)
            continue;
        const uint64_t from = at, first = id;
        for (int it = 0; it < iters; it++)
            for (int k = 0; k < 2; k++, id++, at += 0x1000000ull) {
                if (!tensors) {
                    synth_alloc(y, at, MiB, act);
                    continue;
                }
                synth_made(y, id, at, MiB, "out = model(x) (train.py:42)", act);
                if (k)
                    synth_use(y, id - 1);   /* the op that made it read the one before */
            }
        for (uint64_t t = first + 1; tensors && used_after && t < id; t += 2)
            synth_use(y, t);
        for (uint64_t a = from, t = first; a < at; a += 0x1000000ull, t++) {
            if (tensors)
                synth_drop(y, t);
            SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = a, .stack = ret);
        }
    }
    synth_tick(y, 50000000);
    return check(y, NULL);
}

/* A loop whose every kept block is made under one line of it (`out =
 * model(x)`, its batches on the device already) is not told by its lines
 * from one gathering its results (one line too): without tensors it is no
 * finding. Under track() the uses tell them: each iteration's blocks were
 * used for the last time before the next iteration's were made, so they
 * are a loop's kept through it (an evaluation without no_grad gathering
 * its outputs by torch.cat onto a running tensor: "0 findings" before,
 * tests/torch/eval_cat_preds.py); results used after the loop are not, nor
 * are three iterations. */
TEST(a_loops_blocks_made_under_one_line_of_it_are_told_by_their_uses)
{
    synth y;
    vt__check_report *r = one_line_evaluation(&y, 5, 1, 0);
    only_loop_kept(r, &y, 5, 1, 10, 7);
    vt__check_report_free(r);
    synth_fini(&y);

    struct { int iters, tensors, used_after; } clean[] = {
        { 5, 0, 0 },   /* no tensors: one line is a gathering's as much */
        { 5, 1, 1 },   /* its results, used after the loop */
        { 3, 1, 0 },   /* three iterations */
    };
    for (size_t k = 0; k < sizeof clean / sizeof clean[0]; k++) {
        r = one_line_evaluation(&y, clean[k].iters, clean[k].tensors, clean[k].used_after);
        assert_report_clean(r, &y);
    }
}

/* The same evaluation in a loop that steps its parameters by hand: no
 * marks, so the rules that judge step by step had no steps ("0 findings",
 * outlier not run: found on pytorch/examples' word_language_model, whose
 * default steps by hand, with its evaluation summing tensor losses). The
 * backward passes' ends step the trace: found as with marks, and said. */
TEST(a_trace_without_marks_is_stepped_by_the_ends_of_its_backward_passes)
{
    synth y;
    vt__check_report *r = evaluation_loop_stepped(&y, 5, 1, 1, 1);
    ASSERT_EQ(r->nmarks, 5);   /* six passes, the last one's end not seen */
    ASSERT_EQ(r->steps_inferred, 1);
    ASSERT(r->rules_run & VT_CHECK_RULE_OUTLIER);
    only_loop_kept(r, &y, 5, 3, 15, 7);
    assert_rendered_says(r, &y, 0, ", 5 marks (the steps its backward passes tell: the program "
                                   "marked no step and made no optimizer step),");
    assert_rendered_says(r, &y, 1, "\"steps_inferred\":true,\"marks\":5,");
    vt__check_report_free(r);
    synth_fini(&y);

    r = evaluation_loop_stepped(&y, 5, 1, 0, 1);   /* freed iteration by iteration */
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->steps_inferred, 1);
    vt__check_report_free(r);
    synth_fini(&y);

    r = evaluation_loop(&y, 5, 1, 1);   /* marked: the marks, none inferred */
    ASSERT_EQ(r->nmarks, 6);
    ASSERT_EQ(r->steps_inferred, 0);
    assert_rendered_says(r, &y, 1, "\"steps_inferred\":false,\"marks\":6,");
    vt__check_report_free(r);
    synth_fini(&y);
}

/* A backward pass's block, made by the autograd engine's thread under the
 * program's `loss.backward()` at train.py's line `line` (the recorder puts
 * the calling thread's Python frames under the engine's). */
static uint32_t backward_at(synth *y, uint32_t line)
{
    uint32_t st = synth_stack(y, "at::native::mm_out", "MmBackward0::apply",
                              "torch::autograd::Engine::evaluate_function",
                              "torch::autograd::Engine::thread_main", "backward", "<module>", NULL);
    const vt__frame *f[6];
    vt__snapshot_stack_frames(&y->s, st, f, 6);
    static const char *const files[] = { "/venv/lib/python3.11/site-packages/torch/_tensor.py",
                                         "train.py" };
    uint32_t python = synth_str(y, "python");
    for (size_t i = 4; i < 6; i++) {
        vt__frame *w = &y->s.frames[f[i] - y->s.frames];
        w->ip = w->module_offset = 0;
        w->module = python;
        w->file = synth_str(y, files[i - 4]);
        w->line = i == 5 ? line : 623;
    }
    return st;
}

/* A loop stepped by hand (no marks): each step, for each model k, its
 * zero_grad (train.py:40+k: its gradients released), then `passes[k]`
 * forwards (train.py:20+j) and backward passes (train.py:30+j, j counting
 * the step's passes; where `one_line`, every pass of model k at
 * train.py:30+k: micro-batches in a loop), the first of them making the
 * model's gradients, kept until its next zero_grad. A backward pass's
 * temporaries are made and freed by the engine's thread. */
static vt__check_report *loop_by_hand(synth *y, int models, const int *passes, int one_line)
{
    synth_init(y);
    static const char *const files[] = { "train.py" };
    uint32_t fwd[8], bwd[8], zero[2];
    for (uint32_t j = 0; j < 8; j++) {
        fwd[j] = synth_stack(y, "<module>", NULL);
        as_python(y, fwd[j], files, (uint32_t[]){ 20 + j });
        bwd[j] = backward_at(y, 30 + j);
    }
    for (uint32_t k = 0; k < 2; k++) {
        zero[k] = synth_stack(y, "zero_grad", "<module>", NULL);
        as_python(y, zero[k], (const char *const[]){ "/venv/lib/python3.11/site-packages/torch/"
                                                     "nn/modules/module.py", "train.py" },
                  (uint32_t[]){ 2900, 40 + k });
    }
    const uint64_t act = 0x7f0000000000ull, tmp = 0x7f1000000000ull, grad = 0x7f2000000000ull;
    const uint64_t apart = 0x100000000ull;
    for (int i = 0; i < 8; i++) {
        uint32_t j = 0;
        for (int k = 0; k < models; k++) {
            synth_tick(y, 50000000);
            if (i)
                SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = grad + k * apart, .stack = zero[k]);
            for (int p = 0; p < passes[k]; p++, j++) {
                uint32_t back = bwd[one_line ? (uint32_t)k : j];
                synth_alloc(y, act + j * apart, 4 * MiB, fwd[j]);
                synth_alloc(y, tmp + j * apart, 4 * MiB, back);
                SYNTH_EV(y, VT_EV_FREE_REQUESTED, .addr = tmp + j * apart, .stack = back);
                if (!p)
                    synth_alloc(y, grad + k * apart, 2 * MiB, back);
                synth_free(y, act + j * apart);
            }
        }
    }
    synth_tick(y, 50000000);
    return check(y, NULL);
}

/* A GAN's loop stepped by hand (pytorch/examples' DCGAN's, its optimizers'
 * steps done by hand): each step the discriminator's backward on a real
 * batch, then on a fake one, both into its gradients, then the generator's;
 * each model's gradients kept until its zero_grad in the next step. A step
 * ends where an optimizer's would: where the gradients are released, at
 * one of the two zero_grad lines (of a tie, the one that came last); the
 * gradients live from a step into the next, as under an optimizer's marks.
 * Stepped at every release (or every pass), the discriminator's outlived
 * the generator's half: a finding in a clean loop (28 on DCGAN's). */
TEST(a_loop_of_two_models_stepped_by_hand_is_stepped_where_one_releases_its_gradients)
{
    synth y;
    vt__check_report *r = loop_by_hand(&y, 2, (const int[]){ 2, 1 }, 0);
    ASSERT_EQ(r->steps_inferred, 1);
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->nmarks, 7);   /* the generator's zero_grad from the second step on */
    vt__check_report_free(r);
    synth_fini(&y);
}

/* Gradients accumulated over four micro-batches' passes (one line, a loop's),
 * the parameters stepped by hand once they are in: the zero_grad that
 * releases them ends the step, not each pass (the gradients would outlive
 * three). */
TEST(gradients_accumulated_over_passes_by_hand_are_one_step)
{
    synth y;
    vt__check_report *r = loop_by_hand(&y, 1, (const int[]){ 4 }, 1);
    ASSERT_EQ(r->steps_inferred, 1);
    ASSERT_EQ(r->nfindings, 0);
    ASSERT_EQ(r->nmarks, 7);
    vt__check_report_free(r);
    synth_fini(&y);
}

TEST_MAIN()
