/*
 * trace/check/check_kept_call.c - OUTLIER, a call's allocations kept
 * together (see check.h, "Rules"): in a trace without tensors, the blocks
 * that one step made at several lines of Python, lines whose other
 * blocks die within their step, all kept past a complete step and freed in
 * one later step together. That is what an autograd graph kept by a result
 * leaves in the allocator: a loss kept as a tensor from a forward run
 * without torch.no_grad() holds every activation that forward saved, and
 * lets them all go when the result is replaced (karpathy/ng-video-lecture's
 * gpt.py with `losses[k] = loss` and no no_grad: 61 MiB kept 20 steps at a
 * time, "0 findings" before). OUTLIER by call site does not see it: the
 * kept blocks come from another call path (the evaluation's) than their
 * short-lived siblings (the training step's), and each path is consistent.
 *
 * A cohort is the candidates made in one step and freed in one step (each a
 * complete step at least later); one with KEPT_MIN_LINES lines or more is a
 * finding. A line is a block's innermost Python frame, the program's or a
 * library's. Two lines at least, not one: a call's result alone kept
 * (predictions gathered for a metric, on purpose) is one line; a graph
 * keeps its input and what its layers saved (an nn.Sequential of Linear and
 * ReLU keeps the batch and each ReLU's output: two lines, torch's relu and
 * the program's). Lines that only ever make long-lived blocks (a cache
 * rebuilt each epoch) have no short-lived siblings and do not count, nor do
 * blocks freed after the last mark (kept for a report, freed at exit). What a
 * program keeps on purpose is mostly small: under the floor of minor
 * findings, where a graph's activations are not. Step 0, the setup's, is
 * not judged.
 */
#include <errno.h>
#include <stdlib.h>

#include "check_internal.h"

#define KEPT_MIN_LINES 2      /* lines of Python in one cohort */
#define KEPT_MIN_SIBLINGS 2   /* a line's blocks that died within their step */

/* The line a stack allocated at, as a key: its innermost Python frame's
 * (its file's string, its line), the program's or a library's: a model
 * built of torch's modules (nn.Sequential of Linear and ReLU) allocates at
 * their lines, under one line of the program; 0: none (a native stack). */
static uint64_t line_of(const vt__snapshot_data *s, uint32_t stack)
{
    const vt__frame *fr[64];
    size_t n = vt__snapshot_stack_frames(s, stack, fr, 64);
    for (size_t i = 0; i < n && i < 64; i++)
        if (fr[i]->line && vt__frame_is_python(s, fr[i]))
            return ((uint64_t)fr[i]->file << 32) | fr[i]->line;
    return 0;
}

/* line_of once per stack: the window's storages share few stacks. */
typedef struct line_memo {
    const vt__snapshot_data *s;
    vt__u64map of_stack;   /* stack -> index into line */
    uint64_t *line;
    size_t n, cap;
} line_memo;

/* line_of(stack) into *line: 0, or -ENOMEM. */
static int memo_line(line_memo *lm, uint32_t stack, uint64_t *line)
{
    uint32_t k = vt__u64map_get(&lm->of_stack, stack);
    if (k != VT__U64MAP_NONE) {
        *line = lm->line[k];
        return 0;
    }
    if (lm->n == lm->cap) {
        size_t cap = lm->cap ? 2 * lm->cap : 256;
        uint64_t *l = realloc(lm->line, cap * sizeof *l);
        if (!l)
            return -ENOMEM;
        lm->line = l;
        lm->cap = cap;
    }
    if (vt__u64map_put(&lm->of_stack, stack, (uint32_t)lm->n) < 0)
        return -ENOMEM;
    *line = lm->line[lm->n++] = line_of(lm->s, stack);
    return 0;
}

typedef struct cand {
    uint32_t from, to;   /* the step it was made in, the one it was freed in */
    uint64_t line;
    uint32_t st;
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->from != y->from)
        return x->from < y->from ? -1 : 1;
    if (x->to != y->to)
        return x->to < y->to ? -1 : 1;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    return (x->st > y->st) - (x->st < y->st);
}

/* A storage the rule may judge: the window's, not claimed by another rule. */
static int judged(const ck_storage *st)
{
    return !st->retired && !st->external && !st->implicit && !st->before_window &&
           !st->fate_unknown && !st->claimed;
}

/* Each line's blocks that died within their step: the retired ones (closed
 * before the next mark, counted by call site) and the window's kept ones. */
static int count_short(const ck_model *m, line_memo *lm, vt__u64map *shorts, uint32_t *count,
                       size_t cap, size_t *nlines)
{
    for (size_t i = 0; i < m->nsites + m->nst; i++) {
        uint32_t stack, n = 1;
        if (i < m->nsites) {
            stack = m->sites[i].stack;
            n = m->sites[i].n;
        } else {
            const ck_storage *st = &m->st[i - m->nsites];
            if (!judged(st) || !st->freed ||
                vt__ck_step_of(m, st->free_seq) != vt__ck_step_of(m, st->alloc_seq))
                continue;
            stack = st->alloc_stack;
        }
        uint64_t line;
        if (memo_line(lm, stack, &line) < 0)
            return -ENOMEM;
        if (!line)
            continue;
        uint32_t k = vt__u64map_get(shorts, line);
        if (k == VT__U64MAP_NONE) {
            if (*nlines == cap || vt__u64map_put(shorts, line, (uint32_t)*nlines) < 0)
                return -ENOMEM;
            k = (uint32_t)(*nlines)++;
            count[k] = 0;
        }
        count[k] += n;
    }
    return 0;
}

/* One finding of the cohort c[0..n) with nlines lines: a call site's
 * (check_native.c), its members held from the end of the step that made
 * them, where they should have died. idx and start: room for n. */
static int kept_finding(ck_model *m, ck_findings *fs, const cand *c, size_t n, uint32_t nlines,
                        uint32_t *idx, uint64_t *start)
{
    for (size_t k = 0; k < n; k++) {
        idx[k] = c[k].st;
        start[k] = m->mark_time[c[0].from];
    }
    vt__check_finding *f = vt__ck_site_finding(m, fs, VT_CHECK_RULE_OUTLIER, idx, n, 0, start,
                                               m->mark_seq[c[0].from], m->mark_time[c[0].from]);
    if (!f)
        return -ENOMEM;
    f->kept_lines = nlines;
    f->kept_steps = c[0].to - c[0].from;
    return 0;
}

int vt__ck_rule_kept_call(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                          vt__check_report *r)
{
    (void)r;
    if (m->nmarks < 2)
        return 0;
    size_t cap = m->nsites + m->nst + 1, nlines = 0, nc = 0;
    vt__u64map shorts = { 0 };
    line_memo lm = { .s = m->s };
    uint32_t *count = malloc(cap * sizeof *count), *idx = malloc(cap * sizeof *idx);
    uint64_t *start = malloc(cap * sizeof *start);
    cand *c = malloc(cap * sizeof *c);
    int rc = -ENOMEM;
    if (!count || !idx || !start || !c || vt__u64map_init(&shorts, 256) < 0 ||
        vt__u64map_init(&lm.of_stack, 256) < 0 ||
        count_short(m, &lm, &shorts, count, cap, &nlines) < 0)
        goto out;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        if (!judged(st) || !st->freed)
            continue;
        uint32_t from = vt__ck_step_of(m, st->alloc_seq), to = vt__ck_step_of(m, st->free_seq);
        /* a complete step outlived, and freed in a step a mark ended: not at
         * the run's end (results kept for a report, freed as it exits) */
        if (from == 0 || to < from + 2 || to >= m->nmarks)
            continue;
        uint64_t line;
        if (memo_line(&lm, st->alloc_stack, &line) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        uint32_t k = line ? vt__u64map_get(&shorts, line) : VT__U64MAP_NONE;
        if (k == VT__U64MAP_NONE || count[k] < KEPT_MIN_SIBLINGS)
            continue;
        if (opt->nignore && vt__ck_ignored(m, opt, (uint32_t)i, 0) == 1)
            continue;
        c[nc++] = (cand){ from, to, line, (uint32_t)i };
    }
    if (nc)
        qsort(c, nc, sizeof *c, cmp_cand);
    rc = 0;
    for (size_t a = 0, b; a < nc && rc == 0; a = b) {
        uint32_t lines = 1;
        for (b = a + 1; b < nc && c[b].from == c[a].from && c[b].to == c[a].to; b++)
            lines += c[b].line != c[b - 1].line;
        if (lines >= KEPT_MIN_LINES)
            rc = kept_finding(m, fs, &c[a], b - a, lines, idx, start);
    }
out:
    vt__u64map_free(&shorts);
    vt__u64map_free(&lm.of_stack);
    free(lm.line);
    free(count);
    free(idx);
    free(start);
    free(c);
    return rc;
}
