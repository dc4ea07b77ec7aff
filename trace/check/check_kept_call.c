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
 * library's. A member OUTLIER by call site found already (a graph's output
 * layer, whose other outputs by the same call died) is a line of the cohort
 * still, its block left to that finding. Two lines at least, not one: a call's result alone kept
 * (predictions gathered for a metric, on purpose) is one line; a graph
 * keeps its input and what its layers saved (an nn.Sequential of Linear and
 * ReLU keeps the batch and each ReLU's output: two lines, torch's relu and
 * the program's). Lines that only ever make long-lived blocks (a cache
 * rebuilt each epoch) have no short-lived siblings and do not count, nor do
 * blocks freed after the last mark (kept for a report, freed at exit). What a
 * program keeps on purpose is mostly small: under the floor of minor
 * findings, where a graph's activations are not. Step 0, the setup's, is
 * not judged.
 *
 * The same kept to the end is NEVER-FREED (and OUTLIER) by call site, one
 * finding per line: minGPT's trainer with a validation loss computed every
 * step without torch.no_grad() and appended to a list kept its graph at 15
 * lines of model.py, 15 causes under plain `run`, where the bug is the one
 * line that called the model (`_, vloss = tr.model(x, y)` in the program's
 * batch-end callback, which every finding's stack shows). What a list local
 * to a function keeps is freed when the function returns: GROWTH by call
 * site, one finding per line alike (pytorch/examples' FSDP2 transformer
 * with an evaluation's outputs kept, graphs and all, in main()'s list: 9
 * causes at 9 lines of model.py). Such findings,
 * at lines whose other blocks die within their step, made under one call of
 * the program, name that call (vt__ck_kept_under_call): one cause. Not a
 * call that drives the steps (the training loop's, the module's line that
 * runs it): two leaks in one loop are two causes. A call drives when nine
 * in ten of the window's blocks with a frame of the program are made under
 * it; a finding's call is the outermost of its program's frames that does
 * not, and the cause names the innermost frame its findings share.
 */
#include <errno.h>
#include <stdlib.h>

#include "check_internal.h"

#define KEPT_MIN_LINES 2      /* lines of Python in one cohort */
#define KEPT_MIN_SIBLINGS 2   /* a line's blocks that died within their step */

typedef struct cand {
    uint32_t from, to;   /* the step it was made in, the one it was freed in */
    uint64_t line;
    uint32_t st;
    uint8_t claimed;     /* already OUTLIER's by call site: a line of its cohort,
                            not one of its finding's */
} cand;

static int cmp_cand(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    int c = vt__order(x->from, y->from);
    c = c ? c : vt__order(x->to, y->to);
    c = c ? c : vt__order(x->line, y->line);
    return c ? c : vt__order(x->st, y->st);
}

/* A storage the rule may judge: the window's, not claimed by another rule. */
static int judged(const ck_storage *st)
{
    return !st->retired && !st->external && !st->implicit && !st->before_window &&
           !st->fate_unknown && !st->claimed;
}

/* Each line's blocks that died within their step: the retired ones (closed
 * before the next mark, counted by call site) and the window's kept ones. */
static int count_short(const ck_model *m, ck_line_memo *lm, vt__u64map *shorts, uint32_t *count,
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
        if (vt__ck_line_of(lm, stack, &line) < 0)
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
    ck_line_memo lm = { 0 };
    uint32_t *count = malloc(cap * sizeof *count), *idx = malloc(cap * sizeof *idx);
    uint64_t *start = malloc(cap * sizeof *start);
    cand *c = malloc(cap * sizeof *c);
    int rc = -ENOMEM;
    if (!count || !idx || !start || !c || vt__u64map_init(&shorts, 256) < 0 ||
        vt__ck_line_memo_init(&lm, m->s) < 0 ||
        count_short(m, &lm, &shorts, count, cap, &nlines) < 0)
        goto out;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        /* one OUTLIER by call site claimed (a graph's output layer, its
         * siblings from the same call the layers that died) is a line of the
         * graph still: of a Tanh model's kept validation graph that layer
         * alone was found, 125 KiB of the megabytes it kept */
        if (!(judged(st) || (st->claimed && !st->retired)) || !st->freed)
            continue;
        uint32_t from = vt__ck_step_of(m, st->alloc_seq), to = vt__ck_step_of(m, st->free_seq);
        /* a complete step outlived, and freed in a step a mark ended: not at
         * the run's end (results kept for a report, freed as it exits) */
        if (from == 0 || to < from + 2 || to >= m->nmarks)
            continue;
        uint64_t line;
        if (vt__ck_line_of(&lm, st->alloc_stack, &line) < 0) {
            rc = -ENOMEM;
            goto out;
        }
        uint32_t k = line ? vt__u64map_get(&shorts, line) : VT__U64MAP_NONE;
        if (k == VT__U64MAP_NONE || count[k] < KEPT_MIN_SIBLINGS)
            continue;
        if (opt->nignore && vt__ck_ignored(m, opt, (uint32_t)i, 0) == 1)
            continue;
        c[nc++] = (cand){ from, to, line, (uint32_t)i, st->claimed };
    }
    if (nc)
        qsort(c, nc, sizeof *c, cmp_cand);
    rc = 0;
    for (size_t a = 0, b; a < nc && rc == 0; a = b) {
        uint32_t lines = 1;
        for (b = a + 1; b < nc && c[b].from == c[a].from && c[b].to == c[a].to; b++)
            lines += c[b].line != c[b - 1].line;
        /* its finding: the members no other finding has */
        size_t n = 0;
        for (size_t k = a; k < b; k++)
            if (!c[k].claimed)
                c[a + n++] = c[k];
        if (lines >= KEPT_MIN_LINES && n)
            rc = kept_finding(m, fs, &c[a], n, lines, idx, start);
    }
out:
    vt__u64map_free(&shorts);
    vt__ck_line_memo_free(&lm);
    free(count);
    free(idx);
    free(start);
    free(c);
    return rc;
}

/* ------------------------------------------------------------------------ */
/*  Findings by call site under one call (vt__ck_kept_under_call)           */
/* ------------------------------------------------------------------------ */

/* Of the window's blocks with a frame of the program, the share a call
 * makes at the least to drive the steps (per mille). */
#define DRIVER_PERMILLE 900

static uint32_t parent_of(const vt__snapshot_data *s, uint32_t node)
{
    return node && node < s->nstack_nodes ? s->stack_nodes[node].parent : 0;
}

/* Blocks the window made under each call of the program (known by its
 * Python frames: vt__snapshot_python_path), kept or retired, into under
 * (path -> index into count); total: those under any. */
typedef struct call_counts {
    vt__u64map under;
    uint64_t *count;
    size_t n, cap;
    uint64_t total;
} call_counts;

static int count_blocks(call_counts *cc, const vt__snapshot_data *s, uint8_t *memo,
                        uint32_t stack, uint64_t n)
{
    int any = 0;
    for (uint32_t node = stack, k = 0; node && node < s->nstack_nodes && k < s->nstack_nodes;
         node = parent_of(s, node), k++) {
        if (!vt__snapshot_node_is_user(s, node, memo))
            continue;
        any = 1;
        uint64_t path = vt__snapshot_python_path(s, node);
        uint32_t at = vt__u64map_get(&cc->under, path);
        if (at == VT__U64MAP_NONE) {
            if (CK_GROW(cc->count, cc->cap, cc->n + 1) < 0 ||
                vt__u64map_put(&cc->under, path, (uint32_t)cc->n) < 0)
                return -ENOMEM;
            at = (uint32_t)cc->n++;
            cc->count[at] = 0;
        }
        cc->count[at] += n;
    }
    if (any)
        cc->total += n;
    return 0;
}

/* By stack first (the window's storages share few stacks), then each stack's
 * calls once. */
static int count_calls(call_counts *cc, const ck_model *m, uint8_t *memo)
{
    vt__u64map of_stack = { 0 };
    uint64_t *n = NULL;
    uint32_t *stack = NULL;
    size_t ns = 0, cap = 0, capn = 0;
    int rc = -ENOMEM;
    if (vt__u64map_init(&of_stack, 256) < 0)
        goto out;
    for (size_t i = 0; i < m->nsites + m->nst; i++) {
        uint32_t st;
        uint64_t k = 1;
        if (i < m->nsites) {
            st = m->sites[i].stack;
            k = m->sites[i].n;
        } else {
            const ck_storage *x = &m->st[i - m->nsites];
            if (x->external || x->implicit || x->before_window)
                continue;
            st = x->alloc_stack;
        }
        uint32_t at = vt__u64map_get(&of_stack, st);
        if (at == VT__U64MAP_NONE) {
            if (CK_GROW(n, capn, ns + 1) < 0 || CK_GROW(stack, cap, ns + 1) < 0 ||
                vt__u64map_put(&of_stack, st, (uint32_t)ns) < 0)
                goto out;
            at = (uint32_t)ns++;
            n[at] = 0;
            stack[at] = st;
        }
        n[at] += k;
    }
    rc = 0;
    for (size_t i = 0; i < ns && rc == 0; i++)
        rc = count_blocks(cc, m->s, memo, stack[i], n[i]);
out:
    vt__u64map_free(&of_stack);
    free(n);
    free(stack);
    return rc;
}

typedef struct under_cand {
    uint64_t top;     /* its outermost call of the program that drives nothing (path) */
    uint32_t user;    /* its stack's innermost frame of the program (a node) */
    uint32_t finding;
} under_cand;

static int cmp_under(const void *a, const void *b)
{
    const under_cand *x = a, *y = b;
    int c = vt__order(x->top, y->top);
    return c ? c : vt__order(x->finding, y->finding);
}

/* Two findings' lines differ: their innermost frames of the program. */
static int other_line(const vt__snapshot_data *s, uint32_t a, uint32_t b)
{
    const vt__frame *x = &s->frames[s->stack_nodes[a].frame];
    const vt__frame *y = &s->frames[s->stack_nodes[b].frame];
    return x->file != y->file || x->line != y->line;
}

/* Whether stack node `in`'s callers (its program's frames outside it)
 * include the call `path`. */
static int called_under(const vt__snapshot_data *s, uint8_t *memo, uint32_t in, uint64_t path)
{
    for (uint32_t node = parent_of(s, in); node; node = parent_of(s, node))
        if (vt__snapshot_node_is_user(s, node, memo) && vt__snapshot_python_path(s, node) == path)
            return 1;
    return 0;
}

/* The cluster c[0..n) (one top; never-freed and outliers alike: what one
 * call kept, some of it freed later) when it spans two lines of the
 * program or more: each finding's under_stack the innermost call of the
 * program they all share (found on the first one's stack). */
static void name_call(const ck_model *m, uint8_t *memo, ck_findings *fs, const under_cand *c,
                      size_t n)
{
    const vt__snapshot_data *s = m->s;
    int lines = 0;
    for (size_t k = 1; k < n && !lines; k++)
        lines = other_line(s, c[0].user, c[k].user);
    if (!lines)
        return;   /* one line: its call site's cause already */
    uint32_t call = 0;
    for (uint32_t node = parent_of(s, c[0].user); node && !call; node = parent_of(s, node)) {
        if (!vt__snapshot_node_is_user(s, node, memo))
            continue;
        uint64_t path = vt__snapshot_python_path(s, node);
        size_t k = 1;
        while (k < n && called_under(s, memo, c[k].user, path))
            k++;
        if (k == n)
            call = node;   /* at top at the outermost */
    }
    for (size_t k = 0; k < n && call; k++)
        fs->f[c[k].finding].under_stack = call;
}

int vt__ck_kept_under_call(ck_model *m, ck_findings *fs)
{
    const vt__snapshot_data *s = m->s;
    if (m->nmarks < 2 || !fs->n || !s->nframes)
        return 0;
    size_t cap = m->nsites + m->nst + 1, nlines = 0, nc = 0;
    vt__u64map shorts = { 0 };
    ck_line_memo lm = { 0 };
    call_counts cc = { 0 };
    uint32_t *count = malloc(cap * sizeof *count);
    uint8_t *memo = calloc(s->nframes, 1);
    under_cand *c = malloc(fs->n * sizeof *c);
    int rc = -ENOMEM;
    if (!count || !memo || !c || vt__u64map_init(&shorts, 256) < 0 ||
        vt__ck_line_memo_init(&lm, m->s) < 0 || vt__u64map_init(&cc.under, 256) < 0 ||
        count_short(m, &lm, &shorts, count, cap, &nlines) < 0 || count_calls(&cc, m, memo) < 0)
        goto out;
    for (size_t i = 0; i < fs->n; i++) {
        const vt__check_finding *f = &fs->f[i];
        if ((f->rule != VT_CHECK_RULE_NEVER_FREED && f->rule != VT_CHECK_RULE_OUTLIER &&
             f->rule != VT_CHECK_RULE_GROWTH) ||
            f->owner_id || !f->alloc_stack || f->under_stack)
            continue;
        uint64_t line;
        if (vt__ck_line_of(&lm, f->alloc_stack, &line) < 0)
            goto out;
        uint32_t k = line ? vt__u64map_get(&shorts, line) : VT__U64MAP_NONE;
        uint32_t user = vt__snapshot_user_node(s, f->alloc_stack);
        if (k == VT__U64MAP_NONE || count[k] < KEPT_MIN_SIBLINGS || !user)
            continue;
        /* the outermost call of the program above its line that drives
         * nothing (the calls outside one that drives drive too) */
        uint64_t top = 0;
        for (uint32_t node = parent_of(s, user); node; node = parent_of(s, node)) {
            if (!vt__snapshot_node_is_user(s, node, memo))
                continue;
            uint64_t path = vt__snapshot_python_path(s, node);
            uint32_t at = vt__u64map_get(&cc.under, path);
            uint64_t n = at == VT__U64MAP_NONE ? 0 : cc.count[at];
            if (n * 1000 >= cc.total * DRIVER_PERMILLE)
                break;
            top = path;
        }
        if (top)
            c[nc++] = (under_cand){ top, user, (uint32_t)i };
    }
    if (nc)
        qsort(c, nc, sizeof *c, cmp_under);
    for (size_t a = 0, b; a < nc; a = b) {
        for (b = a + 1; b < nc && c[b].top == c[a].top; b++)
            ;
        if (b - a >= 2)
            name_call(m, memo, fs, &c[a], b - a);
    }
    rc = 0;
out:
    vt__u64map_free(&shorts);
    vt__ck_line_memo_free(&lm);
    vt__u64map_free(&cc.under);
    free(cc.count);
    free(count);
    free(memo);
    free(c);
    return rc;
}
