/*
 * trace/check/check_findings.c - what the rules share: statistics (median),
 * the --ignore patterns, and making a finding about a storage. The rules
 * call these; check.c only orchestrates the rules.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

/* ------------------------------------------------------------------------ */
/*  Small helpers                                                           */
/* ------------------------------------------------------------------------ */

int vt__ck_cmp_key(const void *a, const void *b)
{
    const ck_key *x = a, *y = b;
    int c = vt__order(x->group, y->group);
    c = c ? c : vt__order(x->seq, y->seq);
    return c ? c : vt__order(x->idx, y->idx);
}

int vt__ck_line_memo_init(ck_line_memo *lm, const vt__snapshot_data *s)
{
    memset(lm, 0, sizeof *lm);
    lm->s = s;
    return vt__u64map_init(&lm->of_stack, 256);
}

int vt__ck_line_of(ck_line_memo *lm, uint32_t stack, uint64_t *line)
{
    uint32_t k = vt__u64map_get(&lm->of_stack, stack);
    if (k != VT__U64MAP_NONE) {
        *line = lm->line[k];
        return 0;
    }
    if (vt__grow_from((void **)&lm->line, &lm->cap, lm->n + 1, sizeof *lm->line, 256) < 0)
        return -ENOMEM;
    if (vt__u64map_put(&lm->of_stack, stack, (uint32_t)lm->n) < 0)
        return -ENOMEM;
    *line = lm->line[lm->n++] = vt__snapshot_python_line(lm->s, stack);
    return 0;
}

int vt__ck_free_line(ck_line_memo *lm, uint32_t free_stack, uint64_t *key)
{
    int rc = vt__ck_line_of(lm, free_stack, key);
    if (!rc && !*key)
        *key = (1ull << 63) | free_stack;
    return rc;
}

void vt__ck_line_memo_free(ck_line_memo *lm)
{
    vt__u64map_free(&lm->of_stack);
    free(lm->line);
    memset(lm, 0, sizeof *lm);
}

/* Upper median of v[0..n) (reorders v); 0 for n == 0. */
uint64_t vt__ck_median(uint64_t *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, vt__qsort_u64);
    return v[n / 2];
}

/* ------------------------------------------------------------------------ */
/*  What the rules share                                                    */
/* ------------------------------------------------------------------------ */

static int stack_matches(const vt__snapshot_data *s, uint32_t stack, const char *pat)
{
    for (uint32_t guard = 0; stack && stack < s->nstack_nodes && guard < 4096; guard++) {
        const vt__stack_node *sn = &s->stack_nodes[stack];
        if (sn->frame < s->nframes) {
            const char *fn = vt__ck_string(s, s->frames[sn->frame].function);
            if (*fn && fnmatch(pat, fn, 0) == 0)
                return 1;
        }
        if (sn->parent >= stack)  /* parents precede children; stop on a bad tree */
            break;
        stack = sn->parent;
    }
    return 0;
}

int vt__ck_ignored(const ck_model *m, const vt__check_options *opt, uint32_t sti,
                   uint32_t extra_stack)
{
    const ck_storage *st = &m->st[sti];
    if (m->skip_host && st->device < 0)
        return 2;
    if (!opt->nignore)
        return 0;
    for (size_t p = 0; p < opt->nignore; p++) {
        const char *pat = opt->ignore[p];
        if (!pat)
            continue;
        for (uint32_t t = st->first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
            const char *nm = vt__ck_string(m->s, m->nodes[t].name);
            if (*nm && fnmatch(pat, nm, 0) == 0)
                return 1;
        }
        if (stack_matches(m->s, st->alloc_stack, pat) || stack_matches(m->s, extra_stack, pat))
            return 1;
    }
    return 0;
}

int vt__ck_site_ignored(const ck_model *m, const vt__check_options *opt, uint32_t stack,
                        int8_t device)
{
    if (m->skip_host && device < 0)
        return 0;
    ck_storage st = { .alloc_stack = stack, .first_tensor = CK_NONE, .device = device };
    ck_model one = { .s = m->s, .st = &st, .nst = 1 };
    return vt__ck_ignored(&one, opt, 0, 0) == 1;
}

vt__check_finding *vt__ck_add_finding(ck_findings *fs, uint32_t sti)
{
    if (CK_GROW(fs->f, fs->cap, fs->n + 1) < 0 || CK_GROW(fs->fst, fs->capst, fs->n + 1) < 0)
        return NULL;
    vt__check_finding *f = &fs->f[fs->n];
    memset(f, 0, sizeof *f);
    fs->fst[fs->n] = sti;
    fs->n++;
    f->owner_name = f->last_use_name = f->last_use_mark = "";
    f->nallocs = 1;
    return f;
}

uint64_t vt__ck_storage_bytes(const ck_storage *st)
{
    return st->req_size ? st->req_size : st->size;
}

uint64_t vt__check_held_bytes(const vt__check_finding *f)
{
    return f->block_bytes > f->bytes ? f->block_bytes : f->bytes;
}

int vt__check_blocks_worth_saying(uint64_t bytes, uint64_t held)
{
    return held > bytes && held - bytes > bytes / 4;
}

int vt__check_owner_bytes_worth_saying(const vt__check_finding *f)
{
    return f->owner_bytes && f->owner_bytes <= f->bytes / 2;
}

void vt__ck_fill_storage(vt__check_finding *f, const ck_model *m, const ck_storage *st)
{
    f->device = st->device;
    f->external = st->external;
    f->before_window = st->before_window;
    f->freed = st->freed;
    f->addr = st->addr;
    f->bytes = vt__ck_storage_bytes(st);
    f->block_bytes = st->size;
    VT__CK_COPY_LIFETIME(f, st);
    if (st->owner != CK_NONE) {
        f->owner_id = m->nodes[st->owner].id;
        f->owner_name = vt__ck_string(m->s, m->nodes[st->owner].name);
        f->owner_bytes = m->nodes[st->owner].nbytes;
    }
}

void vt__ck_fill_blocks_held(vt__check_finding *f, const ck_model *m, uint64_t from_seq,
                             uint64_t from_time, uint64_t linger_ns, double byte_seconds)
{
    f->last_use_seq = f->alloc_seq;
    f->last_use_time_ns = f->alloc_time_ns;
    f->last_use_stack = f->alloc_stack;
    f->last_use_step = vt__ck_step_of(m, f->alloc_seq);
    f->last_use_mark = vt__ck_step_label(m, f->last_use_step);
    f->linger_from_seq = from_seq;
    f->linger_from_time_ns = from_time;
    f->linger_ns = linger_ns;
    f->byte_seconds = byte_seconds;
    f->path_seq = UINT64_MAX;
}

void vt__ck_fill_last_use(vt__check_finding *f, const ck_model *m, const ck_use *last)
{
    VT__CK_COPY_LAST_USE(f, last);
    f->last_use_tensor = m->nodes[last->node].id;
    f->last_use_name = vt__ck_string(m->s, m->nodes[last->node].name);
    f->last_use_step = vt__ck_step_of(m, last->seq);
    f->last_use_mark = vt__ck_step_label(m, f->last_use_step);
}

vt__check_finding *vt__ck_open_use_finding(ck_model *m, const vt__check_options *opt,
                                          ck_findings *fs, vt__check_report *r, uint32_t sti,
                                          const ck_use *last, unsigned rule, int *rc)
{
    ck_storage *st = &m->st[sti];
    int why = vt__ck_ignored(m, opt, sti, last->stack);
    if (why) {
        if (!st->ignore_counted)
            ++*(why == 2 ? &r->nhost_skipped : &r->nignored);
        st->ignore_counted = 1;
        return NULL;
    }
    vt__check_finding *f = vt__ck_add_finding(fs, sti);
    if (!f) {
        *rc = -ENOMEM;
        return NULL;
    }
    vt__ck_fill_storage(f, m, st);
    f->rule = rule;
    vt__ck_fill_last_use(f, m, last);
    f->nuses = st->nuses;
    return f;
}
