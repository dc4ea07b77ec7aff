/*
 * trace/snap/timeline_steps.c - the steps of a trace the program marked no
 * step of, as its backward passes tell them.
 *
 * `vramtrace run` marks a PyTorch program's optimizer steps; a training loop
 * that updates its parameters by hand (`p.data.add_(p.grad, alpha=-lr)`, as
 * pytorch/examples' word_language_model does by default) makes none, and
 * the rules that judge step by step had nothing to judge. Its backward
 * passes are in the trace: a block made under the autograd engine
 * (vt__snapshot_stack_in_backward) is a pass's, and a pass ends at the next
 * allocation of the program's. A step ends where an optimizer's would: after the last
 * pass before the program releases its gradients (a zero_grad: the free, on
 * the program's own thread, of a block a pass made), however many passes
 * (micro-batches) filled them, and wherever the zero_grad stands (before
 * the next backward, mid-iteration: what a step carries into the next, a
 * truncated BPTT's hidden state, does not outlive one); a loop that zeroes
 * them in place releases nothing, and is stepped at its passes' ends. Of
 * either, the candidates of one line of the program: the one that made the
 * most, of a tie the one that came last (a GAN's discriminator's zero_grad
 * and its generator's each release once a step; a gradient penalty's
 * autograd.grad and the loss's backward each run once). Cut at every
 * candidate, what lives from one to the same one of the next step (the
 * discriminator's gradients across the generator's half; gradients
 * accumulated over micro-batches) outlived steps: findings in a clean loop.
 *
 * vt__timeline_steps is the one rule of which steps a trace has, for
 * `check` (check_model.c adds these as marks) and the page (render_meta.c).
 * A trace with tensors too: under `run --track` the tracker, while the
 * program has made no mark, does a mark's work at the end of each pass
 * (_Marks._pass_ended: the model's state used, the stale storages walked
 * for their holders), a superset of the steps told here.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "grow.h"
#include "timeline.h"
#include "timeline_build.h"
#include "u64map.h"

/* The program's line of stack `id` (a pass's: its `loss.backward()`, the
 * recorder puts the calling thread's Python frames under the engine's; a
 * release's: its `zero_grad()`), as a key; 0: none. */
static uint64_t program_line(const vt__snapshot_data *s, uint32_t id)
{
    const vt__frame *f = vt__snapshot_user_frame(s, id);
    return f ? (uint64_t)f->file << 32 | f->line : 0;
}

static bool in_pass(struct builder *b, uint32_t stack)
{
    const vt__snapshot_data *s = b->s;
    if (!b->backward.memo && s->nstack_nodes)
        b->backward.memo = calloc(s->nstack_nodes, 1);   /* NULL: walked each time */
    return vt__snapshot_stack_in_backward(s, stack, b->backward.memo);
}

static int push(struct tl_step_at **arr, size_t *n, size_t *cap, const vt__tl_mark *m,
                uint64_t line)
{
    struct tl_step_at *at = vt__grow_push((void **)arr, cap, n, sizeof **arr);
    if (!at)
        return -ENOMEM;
    *at = (struct tl_step_at){ .at = *m, .line = line };
    return 0;
}

int vt__tl_backward_alloc(struct builder *b, const vt__event *e, uint32_t ei)
{
    struct tl_backward *bw = &b->backward;
    if (b->tl->nmarks)   /* the program marks its steps: these are not asked */
        return 0;
    bool pass = in_pass(b, e->stack);
    int rc = 0;
    if (pass && !bw->in_pass) {   /* a pass begins */
        bw->passes++;
        bw->line = program_line(b->s, e->stack);
    } else if (!pass && bw->in_pass) {   /* one ended */
        bw->last_end = (vt__tl_mark){ e->seq, e->time_ns, ei, 0 };
        rc = push(&bw->ends, &bw->nends, &bw->cap_ends, &bw->last_end, bw->line);
    }
    bw->in_pass = pass;
    return rc;
}

int vt__tl_backward_free(struct builder *b, const vt__event *e, uint32_t ei, const vt__lifetime *l)
{
    struct tl_backward *bw = &b->backward;
    if (b->tl->nmarks)
        return 0;
    /* the first release of a pass's block by the program's thread since a
     * pass began (gradients set to None): the step ended after that pass,
     * here where nothing was allocated since */
    if (!bw->passes || !l->alloc_stack || !in_pass(b, l->alloc_stack) || in_pass(b, e->stack))
        return 0;
    bw->passes = 0;
    vt__tl_mark here = { e->seq, e->time_ns, ei, 0 };
    return push(&bw->releases, &bw->nreleases, &bw->cap_releases,
                bw->in_pass ? &here : &bw->last_end, program_line(b->s, e->stack));
}

/* Of candidates c[0..n), those of the line that made the most (of a tie,
 * the one that came last) into tl->backward_steps. */
static int choose(struct builder *b, const struct tl_step_at *c, size_t n)
{
    vt__timeline *tl = b->tl;
    vt__u64map count = { 0 };
    if (vt__u64map_init(&count, 16))
        return -ENOMEM;
    uint32_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t k = vt__u64map_get(&count, c[i].line);
        k = k == VT__U64MAP_NONE ? 1 : k + 1;
        if (vt__u64map_put(&count, c[i].line, k)) {
            vt__u64map_free(&count);
            return -ENOMEM;
        }
        most = k > most ? k : most;
    }
    uint64_t line = 0;
    for (size_t i = n; i-- > 0;)
        if (vt__u64map_get(&count, c[i].line) == most) {
            line = c[i].line;
            break;
        }
    vt__u64map_free(&count);
    if (!(tl->backward_steps = malloc(most * sizeof *tl->backward_steps)))
        return -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (c[i].line == line)
            tl->backward_steps[tl->nbackward_steps++] = c[i].at;
    return 0;
}

int vt__tl_backward_steps(struct builder *b)
{
    struct tl_backward *bw = &b->backward;
    int rc = 0;
    if (b->tl->nmarks)
        ;   /* vt__timeline_steps answers the marks */
    else if (bw->nreleases >= VT_TL_INFERRED_STEPS_MIN)
        rc = choose(b, bw->releases, bw->nreleases);
    else if (bw->nends >= VT_TL_INFERRED_STEPS_MIN)
        rc = choose(b, bw->ends, bw->nends);
    return rc ? tl_fail(b, rc, "timeline: out of memory") : 0;
}

void vt__tl_backward_free_state(struct tl_backward *bw)
{
    free(bw->memo);
    free(bw->releases);
    free(bw->ends);
    *bw = (struct tl_backward){ 0 };
}

const vt__tl_mark *vt__timeline_steps(const vt__timeline *tl, size_t *n, bool *inferred)
{
    *inferred = !tl->nmarks &&
                tl->nbackward_steps >= VT_TL_INFERRED_STEPS_MIN;
    *n = *inferred ? tl->nbackward_steps : tl->nmarks;
    return *inferred ? tl->backward_steps : tl->marks;
}
