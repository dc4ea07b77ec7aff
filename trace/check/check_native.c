/*
 * trace/check/check_native.c - the rules for native traces (no tensor
 * annotations; see check.h, "Rules"): NEVER-FREED call sites that
 * accumulate memory alive at the end, and OUTLIER allocations that outlive
 * their call site's short-lived siblings. Storages are grouped by call site
 * (allocation stack) and each site becomes at most one finding per rule.
 *
 * The window judges: only allocations it holds decide whether a site is
 * flagged. A flagged site's allocations made before the window and still
 * alive at the end (the state section keeps their stack) are the same
 * leak, older: the finding counts them too (nbefore_window), so a run
 * longer than the ring is not reported as holding only its window's share.
 * OUTLIER alone also flags a site by them: having outlived the whole
 * window, they are outliers by its definition wherever the window's
 * siblings, dying within a step, outnumber them (an early leak that ended
 * long before the snapshot, which the window otherwise does not show).
 */
#include <errno.h>
#include <stdlib.h>

#include "check_internal.h"

/* The site's storages made before the window, alive at the end and not
 * yet part of a finding: appended to idx[n..] with their linger counted
 * from the window's start (nothing is claimed: a finding made of them
 * claims them). @return how many. */
static size_t older_members(ck_model *m, const ck_key *old, size_t nold, uint32_t *idx,
                            uint64_t *linger_start, size_t n)
{
    size_t k = 0;
    for (size_t j = 0; j < nold; j++) {
        if (m->st[old[j].idx].claimed)
            continue;
        idx[n + k] = old[j].idx;
        linger_start[n + k++] = m->start_time;
    }
    return k;
}

/* The storages made before the window and freed in it whose allocation
 * stack their free named (format 1.12), by stack, then free: what each call
 * site freed of its older allocations. Kept in the model with marks only
 * (by time pass 1 retires them). @return how many, into out. */
static size_t freed_before_window(const ck_model *m, ck_key *out)
{
    size_t n = 0;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        if (!st->retired && st->before_window && st->freed && st->alloc_stack && !st->external)
            out[n++] = (ck_key){ st->free_seq, st->alloc_stack, (uint32_t)i };
    }
    if (n)
        qsort(out, n, sizeof *out, vt__ck_cmp_key);
    return n;
}

/* The keys of group `group` in keys[0..n), sorted by group, from cursor
 * *at on (the groups are asked in order): how many, *at moved to the first
 * of them. */
static size_t keys_of_group(const ck_key *keys, size_t n, size_t *at, uint32_t group)
{
    while (*at < n && keys[*at].group < group)
        ++*at;
    size_t k = 0;
    while (*at + k < n && keys[*at + k].group == group)
        k++;
    return k;
}

/* How long the blocks made before the window and freed in it lived at
 * least, by their free line (lived_for). */
typedef struct old_frees {
    vt__u64map until;     /* free line -> step (or ms since the window's start)
                             of its last free of a block made before the window */
    ck_line_memo lines;   /* free stack -> free line */
} old_frees;

/* of for lived_for, from every storage made before the window and freed in
 * it at a free stack. 0 or -ENOMEM (of still to free). */
static int old_frees_init(const ck_model *m, old_frees *of)
{
    if (vt__u64map_init(&of->until, 16) < 0 || vt__ck_line_memo_init(&of->lines, m->s) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        uint64_t line;
        if (st->retired || !st->before_window || !st->freed || !st->free_stack)
            continue;
        if (vt__ck_free_line(&of->lines, st->free_stack, &line) < 0)
            return -ENOMEM;
        uint64_t at = m->nmarks ? vt__ck_step_of(m, st->free_seq)
                                : (st->free_time - m->start_time) / 1000000;
        uint32_t was = vt__u64map_get(&of->until, line);
        if (at >= UINT32_MAX)
            at = UINT32_MAX - 1;
        if ((was == VT__U64MAP_NONE || was < at) &&
            vt__u64map_put(&of->until, line, (uint32_t)at) < 0)
            return -ENOMEM;
    }
    return 0;
}

static void old_frees_free(old_frees *of)
{
    vt__u64map_free(&of->until);
    vt__ck_line_memo_free(&of->lines);
}

/* How long storage st lived before its free, in steps with marks, else in
 * time. One made before the window lived at least until the last block
 * made before the window that its free line let go of, of any site: a
 * container evicts in order, so it was older than that one (a replay
 * memory whose line evicted its last old transition steps before the end,
 * as the other line's came due: "53 steps" against a window whose oldest
 * alive one was 54: dqn_replay.py in a ring of 1 MiB, 504 KiB never freed). */
static uint64_t lived_for(const ck_model *m, const ck_storage *st, old_frees *of)
{
    if (st->before_window) {
        /* old_frees_init looked every such free stack up: no allocation */
        uint64_t line;
        uint32_t until = vt__ck_free_line(&of->lines, st->free_stack, &line) < 0
                             ? VT__U64MAP_NONE : vt__u64map_get(&of->until, line);
        if (until == VT__U64MAP_NONE)   /* cannot be: st is one of them */
            return 0;
        return m->nmarks ? until : (uint64_t)until * 1000000;
    }
    return m->nmarks ? vt__ck_step_of(m, st->free_seq) - vt__ck_step_of(m, st->alloc_seq)
                     : st->free_time - st->alloc_time;
}

/* Whether call site `site` (ns storages, in allocation order; gone, ngone:
 * its allocations made before the window and freed in it) keeps a window
 * of its allocations: its older ones were freed after living a while (a
 * complete step at least: VT_CHECK_WINDOW_MIN_FREED of them), and none of
 * those alive at the end (grp, ng) is older than the longest of them
 * lived. A replay memory (a deque with a capacity: the DQN tutorial's
 * transitions), a cache of the last N, a queue: each allocation is freed
 * once N younger ones came, and those alive at the end are the youngest N,
 * freed later. NEVER-FREED took them for memory accumulated step after step
 * (plain `run` on the DQN tutorial: 3 findings with a full memory of 300).
 * In a window shorter than the memory's turnover the site frees none of
 * its own, only those made before the window (which the free names: a ring
 * of 1 MiB on tests/torch/dqn_replay.py, 57 steps of a memory of 64, was
 * 520 KiB never freed). A leak through such a site too (a transition also
 * kept in a list) leaves allocations older than any the window freed, or
 * frees none: still flagged. In steps with marks, else in time. */
static int keeps_a_window(const ck_model *m, const uint32_t *site, size_t ns, const ck_key *gone,
                          size_t ngone, old_frees *of, const uint32_t *grp, size_t ng)
{
    size_t nfreed = 0;
    uint64_t longest = 0;
    for (size_t k = 0; k < ns + ngone; k++) {
        const ck_storage *st = &m->st[k < ns ? site[k] : gone[k - ns].idx];
        if (!st->freed)
            continue;
        uint64_t lived = lived_for(m, st, of);
        if (m->nmarks ? lived < 2 : lived < VT_CHECK_TIME_MIN_NS)
            continue;   /* a temporary of its step (or second), not a window's */
        nfreed++;
        if (lived > longest)
            longest = lived;
    }
    if (nfreed < VT_CHECK_WINDOW_MIN_FREED)
        return 0;
    for (size_t k = 0; k < ng; k++) {
        const ck_storage *st = &m->st[grp[k]];
        uint64_t age = m->nmarks ? m->nmarks - vt__ck_step_of(m, st->alloc_seq)
                                 : m->end_time - st->alloc_time;
        if (age > longest)
            return 0;
    }
    return 1;
}

vt__check_finding *vt__ck_site_finding(ck_model *m, ck_findings *fs, unsigned rule,
                                      const uint32_t *idx, size_t n, size_t nbefore,
                                      const uint64_t *linger_start, uint64_t from_seq,
                                      uint64_t from_time)
{
    uint32_t big = idx[0];
    for (size_t k = 1; k < n - nbefore; k++)
        if (vt__ck_storage_bytes(&m->st[idx[k]]) > vt__ck_storage_bytes(&m->st[big]))
            big = idx[k];
    /* under track(), the quiet time's (vt__ck_quiet_tail) is a storage of
     * tensors: its holders are looked up (check_paths.c), at the end */
    int held = m->quiet_only && rule == VT_CHECK_RULE_NEVER_FREED && m->st[big].ntensors;
    vt__check_finding *f = vt__ck_add_finding(fs, held ? big : CK_NONE);
    if (!f)
        return NULL;
    vt__ck_fill_storage(f, m, &m->st[big]);
    if (held)
        f->path_seq = UINT64_MAX;
    f->rule = rule;
    f->nallocs = (uint32_t)n;
    f->nbefore_window = (uint32_t)nbefore;
    f->bytes = f->block_bytes = 0;
    f->freed = 1;
    double bs = 0;
    uint64_t maxlinger = 0;
    for (size_t k = 0; k < n; k++) {
        ck_storage *st = &m->st[idx[k]];
        st->claimed = 1;
        f->bytes += vt__ck_storage_bytes(st);
        f->block_bytes += st->size;
        uint64_t end = st->freed ? st->free_time : m->end_time;
        uint64_t lg = end > linger_start[k] ? end - linger_start[k] : 0;
        bs += (double)vt__ck_storage_bytes(st) * ((double)lg / 1e9);
        if (lg > maxlinger)
            maxlinger = lg;
        if (!st->freed)
            f->freed = 0;
        else if (f->freed && st->free_seq > f->free_seq) {
            f->free_seq = st->free_seq;
            f->free_time_ns = st->free_time;
            f->free_stack = st->free_stack;
        }
    }
    if (!f->freed)
        f->free_seq = f->free_time_ns = f->free_stack = 0;
    vt__ck_fill_blocks_held(f, m, from_seq, from_time, maxlinger, bs);
    return f;
}

static int cmp_life(const void *a, const void *b)
{
    const ck_life *x = a, *y = b;
    return vt__order(x->stack, y->stack);
}

static int cmp_site(const void *a, const void *b)
{
    const ck_site *x = a, *y = b;
    return vt__order(x->stack, y->stack);
}

int vt__ck_rule_native(ck_model *m, const vt__check_options *opt, unsigned rules,
                       ck_findings *fs, vt__check_report *r)
{
    size_t cap = m->nst + m->nlives + 1;
    uint32_t *idx = malloc(cap * sizeof *idx);
    uint64_t *tmp = malloc(cap * sizeof *tmp);
    uint32_t *grp = malloc(cap * sizeof *grp);
    uint64_t *lstart = malloc(cap * sizeof *lstart);
    ck_key *keys = NULL, *gone = malloc((m->nst ? m->nst : 1) * sizeof *gone);
    old_frees of = {0};
    int rc = 0;
    if (!idx || !tmp || !grp || !lstart || !gone) {
        rc = -ENOMEM;
        goto out;
    }
    /* Call sites: storages sorted by (alloc_stack, alloc_seq). */
    keys = malloc((m->nst ? m->nst : 1) * sizeof *keys);
    if (!keys) {
        rc = -ENOMEM;
        goto out;
    }
    size_t n = 0;
    for (size_t i = 0; i < m->nst; i++)
        if (!m->st[i].external && !m->st[i].implicit && !m->st[i].before_window &&
            !m->st[i].fate_unknown)
            keys[n++] = (ck_key){ m->st[i].alloc_seq, m->st[i].alloc_stack, (uint32_t)i };
    if (n)
        qsort(keys, n, sizeof *keys, vt__ck_cmp_key);
    for (size_t i = 0; i < n; i++)
        idx[i] = keys[i].idx;
    /* made before the window, alive at the end, their stack known: by site */
    ck_key *old = keys;
    size_t nold = vt__ck_alive_before_window(m, old);
    /* made before the window, freed in it, their stack named by the free;
     * how long such ones lived at least, by free line */
    size_t ngone = freed_before_window(m, gone);
    if (old_frees_init(m, &of) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    /* The retired storages (check_model.c) by call site: each is short-lived
     * (freed before the next mark), its lifetime kept while OUTLIER may run. */
    if (m->nsites)
        qsort(m->sites, m->nsites, sizeof *m->sites, cmp_site);
    if (m->nlives)
        qsort(m->lives, m->nlives, sizeof *m->lives, cmp_life);

    uint64_t dur = m->end_time > m->start_time ? m->end_time - m->start_time : 0;
    uint64_t frac = dur / 100 * VT_CHECK_TIME_FRACTION_PCT;

    size_t ci = 0, li = 0, oi = 0, gi = 0;
    for (size_t a = 0; (a < n || ci < m->nsites) && !rc;) {
        /* the next call site, in stack order, with kept storages or retired ones */
        uint32_t stack = a < n ? m->st[idx[a]].alloc_stack : UINT32_MAX;
        if (ci < m->nsites && (a >= n || m->sites[ci].stack <= stack))
            stack = m->sites[ci].stack;
        const ck_site *ret = ci < m->nsites && m->sites[ci].stack == stack ? &m->sites[ci++] : NULL;
        size_t b = a;
        while (b < n && m->st[idx[b]].alloc_stack == stack)
            b++;
        const uint32_t *site = &idx[a];
        size_t ns = b - a, nret = ret ? ret->n : 0;
        a = b;
        size_t l0 = li;
        while (li < m->nlives && m->lives[li].stack < stack)
            l0 = ++li;
        while (li < m->nlives && m->lives[li].stack == stack)
            li++;
        size_t nsite_old = keys_of_group(old, nold, &oi, stack);
        const ck_key *site_old = &old[oi];
        size_t nsite_gone = keys_of_group(gone, ngone, &gi, stack);
        const ck_key *site_gone = &gone[gi];
        if (opt->nignore) {
            const ck_storage *f0 = ns ? &m->st[site[0]] : NULL;
            int ret_first = ret && (!f0 || ret->first_seq < f0->alloc_seq ||
                                    (ret->first_seq == f0->alloc_seq && ret->first_ord < f0->ord));
            if (ret_first ? vt__ck_site_ignored(m, opt, ret->stack, ret->first_device)
                          : vt__ck_ignored(m, opt, site[0], 0) == 1) {
                r->nignored += ns + nret;
                continue;
            }
        }

        if (rules & VT_CHECK_RULE_OUTLIER) {
            /* Short-lived siblings vs. outliers that outlived a complete step. */
            size_t nshort = 0, nout = 0, nt = 0;
            uint64_t thr = VT_CHECK_TIME_MIN_NS;
            if (!m->nmarks) {
                for (size_t k = 0; k < ns; k++)
                    if (m->st[site[k]].freed)
                        tmp[nt++] = m->st[site[k]].free_time - m->st[site[k]].alloc_time;
                uint64_t med = vt__ck_median(tmp, nt);
                if (med * VT_CHECK_GAP_FACTOR > thr)
                    thr = med * VT_CHECK_GAP_FACTOR;
            }
            nt = 0;
            for (size_t k = l0; k < li; k++)
                tmp[nt++] = m->lives[k].ns;
            nshort = nret;
            for (size_t k = 0; k < ns; k++) {
                const ck_storage *st = &m->st[site[k]];
                int is_short = 0, is_out = 0;
                if (m->nmarks) {
                    uint32_t as = vt__ck_step_of(m, st->alloc_seq);
                    int has_next = (size_t)as + 1 < m->nmarks;
                    uint64_t end_mark = has_next ? m->mark_seq[as + 1] : 0;
                    if (st->freed && (!has_next || st->free_seq < end_mark))
                        is_short = 1;
                    else if (has_next)
                        is_out = 1;
                } else {
                    uint64_t end = st->freed ? st->free_time : m->end_time;
                    uint64_t life = end - st->alloc_time;
                    if (life > thr)
                        is_out = 1;
                    else if (st->freed)
                        is_short = 1;
                }
                if (is_short)
                    tmp[nt++] = st->free_time - st->alloc_time;
                if (is_out)
                    grp[nout++] = site[k];
                nshort += is_short;
            }
            /* Made before the window and alive at its end: outlived every
             * complete step of it (one at least). The window alone flags a
             * site by them only where its siblings dying within a step
             * outnumber them (a run longer than the ring, whose first steps
             * kept what the later ones free: the whole recording's outliers) */
            size_t nb = older_members(m, site_old, nsite_old, grp, lstart, nout);
            size_t nold_out = m->nmarks >= 2 || (!m->nmarks && dur > thr) ? nb : 0;
            if ((nout ? nshort > nout : nold_out && nshort > nold_out) && nshort >= 2) {
                uint64_t med = vt__ck_median(tmp, nt);
                uint64_t from_seq = UINT64_MAX, from_time = 0;
                if (!nout) {   /* the first complete step's end, or the grace's */
                    from_time = m->nmarks ? m->mark_time[1] : m->start_time + thr;
                    from_seq = m->nmarks ? m->mark_seq[1] : vt__ck_seq_at_time(m, from_time, 0);
                }
                for (size_t k = 0; k < nout; k++) {
                    const ck_storage *st = &m->st[grp[k]];
                    lstart[k] = st->alloc_time + med;
                    uint64_t fs_ = st->alloc_seq, ft = st->alloc_time + thr;
                    if (m->nmarks) {
                        uint32_t as = vt__ck_step_of(m, st->alloc_seq);
                        fs_ = m->mark_seq[as + 1];
                        ft = m->mark_time[as + 1];
                    } else {
                        fs_ = vt__ck_seq_at_time(m, ft, 0);
                    }
                    if (fs_ < from_seq) {
                        from_seq = fs_;
                        from_time = ft;
                    }
                }
                rc = vt__ck_site_finding(m, fs, VT_CHECK_RULE_OUTLIER, grp, nout + nb, nb, lstart,
                                  from_seq, from_time) ? 0 : -ENOMEM;
                if (rc)
                    break;
            }
        }

        if (rules & VT_CHECK_RULE_NEVER_FREED) {
            /* Alive at the end, allocated inside the loop, from >= 2 steps. */
            size_t ng = 0, nsteps = 0;
            uint32_t last_step = UINT32_MAX;
            uint64_t tmin = UINT64_MAX, tmax = 0;
            int marked = 0;   /* one allocation in a step a mark ended */
            for (size_t k = 0; k < ns; k++) {
                const ck_storage *st = &m->st[site[k]];
                if (st->freed || st->claimed)
                    continue;
                if (m->nmarks) {
                    uint32_t as = vt__ck_step_of(m, st->alloc_seq);
                    if (as >= m->nmarks)   /* after the last mark: a quiet step's */
                        as = vt__ck_quiet_step_of(m, st->alloc_time);
                    else if (m->quiet_only)
                        continue;
                    if (as == 0 || as == UINT32_MAX)
                        continue;
                    marked |= as < m->nmarks;
                    if (as != last_step)  /* site[] is in alloc order */
                        nsteps++;
                    last_step = as;
                } else if (dur && st->alloc_time - m->start_time > dur - frac) {
                    continue;
                }
                if (st->alloc_time < tmin) tmin = st->alloc_time;
                if (st->alloc_time > tmax) tmax = st->alloc_time;
                grp[ng++] = site[k];
            }
            /* Without marks, steps are read from time: allocations spread
             * over a twentieth of the trace at least, and still made in its
             * later part (the time since the last no longer than the time
             * they took): what a loop that keeps memory does until the end
             * or an OOM. The quiet ends at the program's last event, not
             * at the snapshot: an OOM's traceback and exit are no part of
             * its loop. And a loop frees what it used between the kept
             * allocations: a model's weights moved to the device are one
             * burst of allocations alone, however long it took, followed
             * by the whole loop or by an OOM in the first step. */
            uint64_t quiet = m->last_event_time > tmax ? m->last_event_time - tmax : 0;
            /* A quiet time's steps are slices of time, not the program's: two
             * allocations of one line a moment apart may fall in two of them
             * (ff.py's `x_te, y_te = x_te.to(device), y_te.to(device)`), a
             * loop's fall in every one: three of them at least there. And
             * there as without marks, a loop frees between: one call that
             * allocates a while may span three slices (pytorch/examples'
             * word_language_model loads its best model after training,
             * `model = torch.load(f)`, seven blocks over 30 ms of 9 ms
             * steps, and was "never freed, allocated step after step"). */
            size_t need = marked ? 2 : CK_QUIET_MIN_SITE_STEPS;
            int hit = m->nmarks ? nsteps >= need &&
                                      (marked || vt__ck_freed_between(m, tmin, tmax))
                                : (ng >= 2 && frac && tmax - tmin >= frac && quiet <= tmax - tmin &&
                                   vt__ck_freed_between(m, tmin, tmax));
            hit = hit && !keeps_a_window(m, site, ns, site_gone, nsite_gone, &of, grp, ng);
            if (hit) {
                for (size_t k = 0; k < ng; k++)
                    lstart[k] = m->st[grp[k]].alloc_time;
                /* a finding from the mark that ended its first block's step;
                 * one made after the last mark (the quiet time's) has none:
                 * from that block */
                const ck_storage *first = &m->st[grp[0]];
                uint64_t from_seq = first->alloc_seq, from_time = first->alloc_time;
                uint32_t as = vt__ck_step_of(m, first->alloc_seq);
                if (as < m->nmarks) {
                    from_seq = m->mark_seq[as];
                    from_time = m->mark_time[as];
                }
                size_t nb = older_members(m, site_old, nsite_old, grp, lstart, ng);
                rc = vt__ck_site_finding(m, fs, VT_CHECK_RULE_NEVER_FREED, grp, ng + nb, nb, lstart,
                                  from_seq, from_time) ? 0 : -ENOMEM;
            }
        }
    }
out:
    free(keys);
    free(gone);
    old_frees_free(&of);
    free(idx);
    free(tmp);
    free(grp);
    free(lstart);
    return rc;
}
