/*
 * trace/check/check_path_text.c - a holder chain as one line of text
 * (vt__check_path_format, check.h): whole, as keys and the JSON have it, or
 * folded for people, a run or a repeating cycle of the same hops once with
 * its count (the text report and the HTML page); and when a finding's
 * chains were seen, in their words.
 */
#include <ctype.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "check_internal.h"
#include "format_bytes.h"

/* ------------------------------------------------------------------------ */
/*  An appender                                                             */
/* ------------------------------------------------------------------------ */

/* snprintf-style appender that keeps the needed length. */
typedef struct sbuf {
    char *buf;
    size_t len, pos;
} sbuf;

__attribute__((format(printf, 2, 3)))
static void sb_printf(sbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    size_t room = b->pos < b->len ? b->len - b->pos : 0;
    int n = vsnprintf(room ? b->buf + b->pos : NULL, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        b->pos += (size_t)n;
}

/* A label joins its holder like an attribute or a subscript; a frame's
 * local, and what its value stack holds, read as words ("frame of step
 * (train.py:52) local 'logits'", "frame for loop's iterator in train
 * train.py:16", "frame with block in main train.py:30"). */
static void sb_label(sbuf *b, const char *label)
{
    if (!label || !*label)
        return;
    if (!strncmp(label, "local '", 7) || !strncmp(label, "for loop's iterator in ", 23) ||
        !strncmp(label, "with block in ", 14))
        sb_printf(b, " %s", label);
    else if (isalpha((unsigned char)label[0]) || label[0] == '_')
        sb_printf(b, ".%s", label);
    else
        sb_printf(b, "%s", label);
}

/* Holder steps i and j the same hop: the same name through the same label. */
static int same_hop(const vt__check_step *a, const vt__check_step *c)
{
    return a->kind == VT_CHECK_NODE_HOLDER && c->kind == VT_CHECK_NODE_HOLDER &&
           !strcmp(a->name ? a->name : "", c->name ? c->name : "") &&
           !strcmp(a->label ? a->label : "", c->label ? c->label : "");
}

/* The longest cycle of hops folded: an RNN cell's graph repeats three to
 * six nodes a time step (Addmm, Tanh, Add; an LSTM cell's with its unbind
 * and stack). */
#define FOLD_PERIOD_MAX 8

/* At step i: the period (1..FOLD_PERIOD_MAX) of holder hops that repeats
 * the most steps from i, and its count (1: nothing repeats). */
static size_t fold_at(const vt__check_path *p, size_t i, size_t *period)
{
    size_t best = 1, best_cover = 1;
    *period = 1;
    for (size_t per = 1; per <= FOLD_PERIOD_MAX && i + 2 * per <= p->nsteps; per++) {
        size_t reps = 1;
        for (;;) {
            size_t at = i + reps * per, j = 0;
            while (j < per && at + j < p->nsteps && same_hop(&p->steps[i + j], &p->steps[at + j]))
                j++;
            if (j < per)
                break;
            reps++;
        }
        if (reps > 1 && reps * per > best_cover) {
            best = reps;
            best_cover = reps * per;
            *period = per;
        }
    }
    return best;
}

static void sb_step(sbuf *b, const vt__check_step *s)
{
    switch (s->kind) {
    case VT_CHECK_NODE_HOLDER:
        if (s->name && *s->name)
            sb_printf(b, "%s", s->name);
        else
            sb_printf(b, "holder #%" PRIu64, s->id);
        sb_label(b, s->label);
        break;
    case VT_CHECK_NODE_TENSOR:
        if (s->name && *s->name)
            sb_printf(b, "tensor '%s'", s->name);
        else
            sb_printf(b, "tensor #%" PRIu64, s->id);
        if (s->base_id) {
            if (s->base_name && *s->base_name)
                sb_printf(b, " (view of '%s')", s->base_name);
            else
                sb_printf(b, " (view of #%" PRIu64 ")", s->base_id);
        }
        sb_label(b, s->label);
        break;
    default: {
        char sz[32];
        sb_printf(b, "storage 0x%" PRIx64 " %s", s->id, vt__fmt_bytes(s->bytes, sz));
        break;
    }
    }
}

static size_t path_format(const vt__check_path *p, char *buf, size_t len, int fold)
{
    sbuf b = { buf, len, 0 };
    if (buf && len)
        buf[0] = 0;
    if (!p)
        return 0;
    if (p->cycle)
        sb_printf(&b, "(cycle) ");
    if (p->truncated)
        sb_printf(&b, "\xe2\x80\xa6 ");
    for (size_t i = 0; i < p->nsteps; i++) {
        if (i)
            sb_printf(&b, " \xe2\x86\x92 ");
        /* a run of the same hops (a chain of AddBackward0 nodes, one per
         * step a running total kept; a recurrent cell's nodes, one cycle
         * per time step of a graph kept across batches) once, with its
         * count */
        size_t period = 1, reps = fold ? fold_at(p, i, &period) : 1;
        if (reps > 1 && period > 1)
            sb_printf(&b, "(");
        for (size_t j = 0; j < period; j++) {
            if (j)
                sb_printf(&b, " \xe2\x86\x92 ");
            sb_step(&b, &p->steps[i + j]);
        }
        if (reps > 1)
            sb_printf(&b, "%s \xc3\x97%zu", period > 1 ? ")" : "", reps);
        i += reps * period - 1;
    }
    if (buf && len && b.pos >= len)
        buf[len - 1] = 0;
    return b.pos;
}

size_t vt__check_path_format(const vt__check_path *p, char *buf, size_t len)
{
    return path_format(p, buf, len, 0);
}

size_t vt__check_path_format_folded(const vt__check_path *p, char *buf, size_t len)
{
    return path_format(p, buf, len, 1);
}

int vt__check_paths_name_no_holder(const vt__check_finding *x)
{
    if (!x->npaths)
        return 0;
    for (size_t p = 0; p < x->npaths; p++) {
        const vt__check_path *q = &x->paths[p];
        if (q->nsteps != 2 || q->steps[0].kind != VT_CHECK_NODE_TENSOR || q->cycle || q->truncated)
            return 0;
    }
    return 1;
}

const char *vt__check_paths_when(const vt__check_finding *x)
{
    return x->path_seq == UINT64_MAX         ? "at the end"
           : x->rule == VT_CHECK_RULE_GROWTH ? (x->growth_window_ns ? "at the last window end judged"
                                                                    : "at the last step end judged")
           : x->rule == VT_CHECK_RULE_CYCLE  ? "just before gc collected it"
           : x->rule == VT_CHECK_RULE_TAPE   ? "at the step's peak"
           : x->paths_before_free            ? "before it was freed"
                                             : "when it became a finding";
}
