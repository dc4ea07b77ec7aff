/*
 * trace/check/check_window.c - what a window that lost its start still
 * says about the tensor rules' findings.
 *
 * Under track() a storage is judged through its tensors. When the ring
 * overwrote a long run's start, the storages made then and still alive are
 * in the snapshot (the state keeps their blocks and allocation stacks), but
 * their tensors' records are gone: no rule can judge them, and a leak that
 * grew all run would be reported as the window's share alone (a kept KV
 * cache of 40 requests as 3 MiB of its last two). What can be said without
 * judging them: how many such storages, of how many bytes, were allocated
 * at the stack of a finding. They are counted on the first finding of each
 * stack (the report sums them by cause), never made findings: whether they
 * are held after their last use is not known. The storages alive since
 * before the window are listed here once, by stack, for these counts and
 * for the native rules, whose flagged call sites count them as members
 * (check_native.c).
 */
#include <errno.h>
#include <stdlib.h>

#include "bsearch.h"
#include "check_internal.h"

size_t vt__ck_alive_before_window(const ck_model *m, ck_key *out)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        if (st->before_window && !st->freed && st->alloc_stack && !st->external
            && !st->implicit && !st->fate_unknown)
            out[n++] = (ck_key){ st->alloc_seq, st->alloc_stack, (uint32_t)i };
    }
    if (n)
        qsort(out, n, sizeof *out, vt__ck_cmp_key);
    return n;
}

static bool tensor_rule(unsigned rule)
{
    return rule & (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_CYCLE | VT_CHECK_RULE_TAPE |
                   VT_CHECK_RULE_PINNED);
}

int vt__ck_older_alive(ck_model *m, ck_findings *fs)
{
    ck_key *v = malloc((m->nst ? m->nst : 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t n = vt__ck_alive_before_window(m, v);
    for (size_t k = 0; k < fs->n && n; k++) {
        vt__check_finding *f = &fs->f[k];
        if (!tensor_rule(f->rule) || !f->alloc_stack)
            continue;
        size_t lo;
        VT__PARTITION_POINT(n, i, v[i].group < f->alloc_stack, lo);
        for (; lo < n && v[lo].group == f->alloc_stack; lo++) {
            ck_storage *st = &m->st[v[lo].idx];
            if (st->claimed || st->ntensors)
                continue;   /* counted on an earlier finding of this stack, or judged */
            st->claimed = 1;
            f->older_alive++;
            f->older_alive_bytes += vt__ck_storage_bytes(st);
        }
    }
    free(v);
    return 0;
}
