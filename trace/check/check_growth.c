/*
 * trace/check/check_growth.c - GROWTH: a call site whose live bytes grow
 * step over step (see check.h, "Rules"), and vt__check_growth_fit, the one
 * judgement of a series of bytes at step ends that `vramtrace compare` uses
 * across ranks too.
 *
 * A step's end is a mark; what a site holds there is what outlives its
 * step. A leak grows that by the same bytes every step, a warm-up (optimizer
 * state made at the first step, caches that fill) for a few steps only, a
 * cache that is emptied now and then in cycles. The series is the site's
 * live bytes at every mark, built from each storage's span of marks (two
 * binary searches each) with one difference array per site: O(n log n) in
 * the storages plus O(marks) per site that outlives a step.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "check_internal.h"

/* Points of the Theil-Sen slope at most: 256 ends give 32640 pairs. */
#define FIT_MAX_POINTS 256

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int vt__check_growth_fit(const uint64_t *v, size_t n, vt__check_growth *out)
{
    memset(out, 0, sizeof *out);
    size_t warm = n / 4 > 1 ? n / 4 : 1;
    if (n < warm + VT_CHECK_GROWTH_MIN_STEPS)
        return 0;
    size_t a = warm, b = n - 1, k = b - a + 1;
    size_t np = k > FIT_MAX_POINTS ? FIT_MAX_POINTS : k;
    double *slope = malloc(np * (np - 1) / 2 * sizeof *slope);
    if (!slope)
        return -ENOMEM;
    size_t ns = 0;
    for (size_t i = 0; i < np; i++) {
        size_t x = a + i * (k - 1) / (np - 1);
        for (size_t j = i + 1; j < np; j++) {
            size_t y = a + j * (k - 1) / (np - 1);
            slope[ns++] = ((double)v[y] - (double)v[x]) / (double)(y - x);
        }
    }
    qsort(slope, ns, sizeof *slope, cmp_double);
    double med = ns % 2 ? slope[ns / 2] : (slope[ns / 2 - 1] + slope[ns / 2]) / 2;
    free(slope);
    out->first = (uint32_t)a;
    out->last = (uint32_t)b;
    out->first_bytes = v[a];
    out->last_bytes = v[b];
    out->per_step = (int64_t)(med >= 0 ? med + 0.5 : med - 0.5);
    out->judged = 1;
    /* The floor rises third after third: a leak's does; a one-time jump
     * crosses one border only, and a cache emptied in cycles (or a warm-up
     * that ends early) comes back to the same floor. And from the first
     * third to the last it rises by more than half of any third's own
     * spread (its highest end above its floor): a leak's floor rises by two
     * thirds of its growth where a third spreads over one third of it,
     * while a site whose bytes fill and empty in cycles, sampled at random
     * phases (windows of a trace without marks against requests of another
     * length), shows three rising floors by chance about one time in five,
     * but each third spreads over most of the cycle, more than its floors
     * move. Half, not all of the spread: a small leak riding on a large
     * cycle stays seen (simulated sawtooth cycles at random phases, 20
     * ends: clean ones flagged 19 % of the time before, 1.7 % with this;
     * a leak of a seventh of the cycle a cycle 87 % of the time, 43 % with
     * the whole spread). */
    size_t t1 = a + k / 3, t2 = a + 2 * k / 3;
    uint64_t floor[3] = { UINT64_MAX, UINT64_MAX, UINT64_MAX }, top[3] = { 0, 0, 0 };
    for (size_t i = a; i <= b; i++) {
        int t = i < t1 ? 0 : i < t2 ? 1 : 2;
        if (v[i] < floor[t])
            floor[t] = v[i];
        if (v[i] > top[t])
            top[t] = v[i];
    }
    uint64_t spread = 0;
    for (int t = 0; t < 3; t++)
        if (top[t] - floor[t] > spread)
            spread = top[t] - floor[t];
    out->grows = out->per_step > 0 && floor[0] < floor[1] && floor[1] < floor[2] &&
                 2 * (floor[2] - floor[0]) > spread;
    return 0;
}

int vt__ck_growth_counts(const ck_storage *st)
{
    return !(st->implicit || st->fate_unknown || st->claimed || st->lingered || st->pinned ||
             st->gc_freed);
}

int vt__ck_growth_counts_by_time(const ck_storage *st)
{
    /* the pool's blocks: device memory the program allocated in the window */
    return vt__ck_growth_counts(st) && !st->external && !st->before_window && st->device >= 0;
}

/* The end of window k (by time). */
static uint64_t win_end(const ck_model *m, size_t k)
{
    /* no overflow before a trace of 27 years */
    return m->win_t0 + (uint64_t)(k + 1) * m->win_span / m->nwin;
}

/* The first window whose end is at or after time t (nwin: none). */
static size_t window_of(const ck_model *m, uint64_t t)
{
    size_t k;
    VT__PARTITION_POINT(m->nwin, i, win_end(m, i) < t, k);
    return k;
}

void vt__ck_win_span(const ck_model *m, const ck_storage *st, size_t *a, size_t *b)
{
    /* alive at a window's end T: allocated at or before T, freed after it */
    *a = st->alloc_seq ? window_of(m, st->alloc_time) : 0;
    *b = st->freed ? window_of(m, st->free_time) : m->nwin;
}

/* A storage alive at marks [a, b) of its call site. */
typedef struct span {
    uint32_t stack, idx, a, b;
} span;

static int cmp_span(const void *p, const void *q)
{
    const span *x = p, *y = q;
    int c = vt__order(x->stack, y->stack);
    return c ? c : vt__order(x->idx, y->idx);
}

/* A growing site's finding, shown by storage st (index sti, CK_NONE for a
 * retired one's copy), nalive of its storages alive at the last judged
 * step end (mark, or window end by time), its blocks alive there less those
 * at the first judged end in block_growth (small tensors each hold a block:
 * what the growth keeps from the program, vt__check_held_bytes). */
static int site_finding(ck_model *m, ck_findings *fs, uint32_t sti, const ck_storage *st,
                        uint32_t nalive, const vt__check_growth *g, int64_t block_growth)
{
    /* its storage's holders are looked up like any finding's */
    vt__check_finding *f = vt__ck_add_finding(fs, sti);
    if (!f)
        return -ENOMEM;
    vt__ck_fill_storage(f, m, st);
    f->rule = VT_CHECK_RULE_GROWTH;
    f->nallocs = nalive;
    f->bytes = g->last_bytes - g->first_bytes;
    f->block_bytes = block_growth > (int64_t)f->bytes ? (uint64_t)block_growth : f->bytes;
    f->grace_mode = m->nmarks ? VT_CHECK_GRACE_STEPS : VT_CHECK_GRACE_TIME;
    f->last_use_seq = f->alloc_seq;
    f->last_use_time_ns = f->alloc_time_ns;
    f->last_use_stack = f->alloc_stack;
    f->last_use_step = vt__ck_step_of(m, f->alloc_seq);
    f->last_use_mark = vt__ck_step_label(m, f->last_use_step);
    /* a replay buffer filling up grows so: said with it */
    f->sampled_grace_steps = vt__ck_sampled_grace(&m->drawn, st, &f->sampled_mean_gap);
    if (m->nmarks) {
        f->linger_from_seq = m->mark_seq[g->first];
        f->linger_from_time_ns = m->mark_time[g->first];
        f->linger_ns = m->mark_time[g->last] - m->mark_time[g->first];
    } else {
        f->growth_window_ns = m->win_span / m->nwin;
        f->linger_from_time_ns = win_end(m, g->first);
        f->linger_from_seq = vt__ck_seq_at_time(m, f->linger_from_time_ns, 0);
        f->linger_ns = win_end(m, g->last) - win_end(m, g->first);
    }
    f->byte_seconds = (double)f->bytes * ((double)f->linger_ns / 1e9) / 2;
    /* Its holders at the end, or, where it was freed before (a graph kept
     * across batches and let go at an epoch's end), at the last step end
     * judged, when it was part of the growth. */
    f->path_seq = UINT64_MAX;
    if (st && st->freed)
        f->path_seq = m->nmarks ? m->mark_seq[g->last]
                                : vt__ck_seq_at_time(m, win_end(m, g->last), 0);
    f->growth_per_step = (uint64_t)g->per_step;
    f->growth_first_mark = g->first;
    f->growth_last_mark = g->last;
    f->growth_first_bytes = g->first_bytes;
    f->growth_last_bytes = g->last_bytes;
    return 0;
}

/* Of a site's storages sp[0..n), the largest alive at judged end `at`
 * (with a tensor bound, where `with_tensor`), CK_NONE if none; how many
 * are alive there in *nalive (NULL: not wanted). */
static uint32_t largest_alive_at(const ck_model *m, const span *sp, size_t n, uint32_t at,
                                 int with_tensor, uint32_t *nalive)
{
    uint32_t big = CK_NONE, alive = 0;
    for (size_t k = 0; k < n; k++) {
        const ck_storage *st = &m->st[sp[k].idx];
        if (!(sp[k].a <= at && at < sp[k].b) || (with_tensor && st->first_tensor == CK_NONE))
            continue;
        alive++;
        if (big == CK_NONE || vt__ck_storage_bytes(st) > vt__ck_storage_bytes(&m->st[big]))
            big = sp[k].idx;
    }
    if (nalive)
        *nalive = alive;
    return big;
}

/* The blocks of a site's storages sp[0..n) alive at step end `at`. */
static int64_t blocks_alive_at(const ck_model *m, const span *sp, size_t n, uint32_t at)
{
    int64_t sum = 0;
    for (size_t k = 0; k < n; k++)
        if (sp[k].a <= at && at < sp[k].b)
            sum += (int64_t)m->st[sp[k].idx].size;
    return sum;
}

/* The finding of one growing site by marks, its storages sp[0..n): its
 * largest storage alive at the last judged mark stands for it. */
static int marks_finding(ck_model *m, ck_findings *fs, const span *sp, size_t n,
                         const vt__check_growth *g)
{
    uint32_t nalive;
    uint32_t big = largest_alive_at(m, sp, n, g->last, 0, &nalive);
    if (big == CK_NONE)
        return 0;   /* cannot be: it grew to last_bytes > 0 */
    return site_finding(m, fs, big, &m->st[big], nalive, g,
                        blocks_alive_at(m, sp, n, g->last) - blocks_alive_at(m, sp, n, g->first));
}

/* The storages GROWTH judges in the model, each with the step ends it is
 * alive at, [a, b) (marks; by time, window ends: the device blocks that a
 * retired storage would have been counted with), by call site; how many in
 * *count. 0 or -ENOMEM. */
static int judged_spans(ck_model *m, const vt__check_options *opt, vt__check_report *r,
                        span *sp, size_t *count)
{
    /* a stackless storage's site (check_window_sites.c) */
    ck_window_sites ws;
    if (vt__ck_window_sites_init(m, &ws) < 0)
        return -ENOMEM;
    size_t n = 0, nm = m->nmarks;
    for (size_t i = 0; i < m->nst; i++) {
        ck_storage *st = &m->st[i];
        /* one finding per storage: what the other rules flagged is theirs */
        if (st->retired || !(nm ? vt__ck_growth_counts(st) : vt__ck_growth_counts_by_time(st)))
            continue;
        size_t a = 0, b = nm;
        if (!nm) {
            vt__ck_win_span(m, st, &a, &b);
        } else {
            if (st->alloc_seq)
                VT__PARTITION_POINT(nm, k, m->mark_seq[k] <= st->alloc_seq, a);
            if (st->freed)
                VT__PARTITION_POINT(nm, k, m->mark_seq[k] < st->free_seq, b);
        }
        if (a >= b)
            continue;   /* alive at no step's end */
        int why = vt__ck_ignored(m, opt, (uint32_t)i, 0);
        if (why) {
            if (!st->ignore_counted)
                ++*(why == 2 ? &r->nhost_skipped : &r->nignored);
            st->ignore_counted = 1;
            continue;
        }
        sp[n++] = (span){ vt__ck_window_site_of(m, st, &ws), (uint32_t)i, (uint32_t)a,
                          (uint32_t)b };
    }
    vt__ck_window_sites_free(&ws);
    if (n)
        qsort(sp, n, sizeof *sp, cmp_span);
    *count = n;
    return 0;
}

/* A site by time: its stack, its retired storages' windows (NULL: none),
 * and its storages still in the model, sp[0..n). */
typedef struct time_site {
    uint32_t stack;
    const ck_site *retired;
    size_t s0, s1;           /* its spans in sp */
} time_site;

static int cmp_time_site(const void *p, const void *q)
{
    const time_site *x = p, *y = q;
    return vt__order(x->stack, y->stack);
}

/* With the tensors recorded, whether a growing site's storages alive at
 * the last judged window's end were mostly used again while it grew (in a
 * window after the one their first use, which made them, fell in, and
 * before `grown`, the first window whose end saw the site's highest bytes):
 * each backward through a graph kept across batches uses every batch's
 * saved activations again. What a program collects untouched for its end
 * (`torch.cat(kept)` after the loop: tests/torch/kept_cls.py's fixed twin)
 * grows as much and is no leak, however many windows its exit takes after
 * that use (a window more than usual under load, and the use fell before
 * the last judged window: flagged once). Asked for by name, growth is not
 * held to this. */
static int used_again_while_growing(const ck_model *m, const span *sp, size_t s0, size_t s1,
                                    const vt__check_growth *g, size_t grown)
{
    if (!g->last)   /* not judged; else grown >= g->first >= 1 (the warm-up) */
        return 0;
    uint64_t until = win_end(m, grown - 1);
    size_t n = 0, again = 0;
    for (size_t k = s0; k < s1; k++) {
        if (!(sp[k].a < g->last && g->last < sp[k].b))
            continue;   /* not alive at the last judged end, or made in its window */
        const ck_storage *st = &m->st[sp[k].idx];
        n++;
        if (!st->nuses)
            continue;
        /* made: by its first use, the op that made its tensor, which the
         * tracker records as the program's next op begins (a sleep after
         * it puts that in a later window than the block's allocation) */
        size_t w = window_of(m, m->uses[st->first_use].time);
        uint64_t made = win_end(m, w < m->nwin ? w : m->nwin - 1);
        for (uint32_t u = 1; u < st->nuses; u++) {
            uint64_t t = m->uses[st->first_use + u].time;
            if (t > made && t <= until) {
                again++;
                break;
            }
        }
    }
    return n && 2 * again >= n;
}

/* Whether LINGER or PINNED flagged a storage of call site `stack`: its
 * growth is that leak seen again (its newest storages, within their grace,
 * are what is left to grow), not a cause of its own (a list of each step's
 * detached F.mse_loss, whose 4-byte scalar keeps the unreduced errors: its
 * storages pinned, and the site growing by them, 102 MiB said of 60). A
 * scan of the model, made only for a site that grows. */
static int site_flagged(const ck_model *m, uint32_t stack)
{
    for (size_t i = 0; i < m->nst; i++)
        if ((m->st[i].lingered || m->st[i].pinned) && m->st[i].alloc_stack == stack)
            return 1;
    return 0;
}

/* Whether a storage of site x alive at the last judged window's end was
 * alive already at the end of the window halfway through the growth:
 * storages piling up are kept. A cache filled and emptied per request
 * (hf_decode.py's fixed twin under plain `run`: each request's blocks live
 * two windows) reads as growth where the window ends fall at later phases
 * of later requests (its live bytes at the ends of ten windows rose 648 to
 * 848 KiB, once under load), and none of its storages lives that long. */
static int kept_through_second_half(const time_site *x, const span *sp, size_t nw,
                                    const vt__check_growth *g)
{
    size_t mid = g->first + (g->last - g->first) / 2;
    const int64_t *until = x->retired ? x->retired->win + 2 * (nw + 1) : NULL;
    for (size_t a = 0; until && a <= mid; a++)
        if (until[a] > (int64_t)g->last)
            return 1;
    for (size_t k = x->s0; k < x->s1; k++)
        if (sp[k].a <= mid && sp[k].b > g->last)
            return 1;
    return 0;
}

/* GROWTH by time: a trace without marks (an observed PyTorch pool's: an
 * evaluation, inference) cut into CK_GROWTH_WINDOWS windows, a site's
 * series its live bytes at each window's end, judged up to its last
 * highest (what a program keeps through its loop and lets go when it ends,
 * a function's locals, grew all the same), and only where more of its
 * storages are alive at the last judged end than at the first. The site's
 * first storage in the model's order that counted stands for it, retired
 * or not. */
static int rule_growth_by_time(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                               vt__check_report *r)
{
    size_t nw = m->nwin;
    span *sp = malloc((m->nst ? m->nst : 1) * sizeof *sp);
    time_site *ts = malloc((m->nst + m->nsites + 1) * sizeof *ts);
    int64_t *delta = malloc(2 * (nw + 1) * sizeof *delta);
    uint64_t *v = malloc(nw * sizeof *v);
    uint32_t *nalive = malloc(nw * sizeof *nalive);
    int rc = 0;
    if (!sp || !ts || !delta || !v || !nalive) {
        rc = -ENOMEM;
        goto out;
    }
    size_t n, nts = 0;
    if ((rc = judged_spans(m, opt, r, sp, &n)) < 0)
        goto out;
    for (size_t s0 = 0; s0 < n;) {
        size_t s1 = s0;
        while (s1 < n && sp[s1].stack == sp[s0].stack)
            s1++;
        ts[nts++] = (time_site){ sp[s0].stack, NULL, s0, s1 };
        s0 = s1;
    }
    size_t nlive = nts;
    for (size_t c = 0; c < m->nsites; c++) {
        const ck_site *site = &m->sites[c];
        if (!site->win || vt__ck_site_ignored(m, opt, site->stack, site->win_first.device))
            continue;
        size_t k;   /* ts[0..nlive) are by stack, as sp is */
        VT__PARTITION_POINT(nlive, i, ts[i].stack < site->stack, k);
        if (k < nlive && ts[k].stack == site->stack)
            ts[k].retired = site;
        else
            ts[nts++] = (time_site){ site->stack, site, 0, 0 };
    }
    if (nts)
        qsort(ts, nts, sizeof *ts, cmp_time_site);
    for (size_t t = 0; t < nts && !rc; t++) {
        const time_site *x = &ts[t];
        /* bytes, then storages, alive at each window's end, as differences */
        if (x->retired)
            memcpy(delta, x->retired->win, 2 * (nw + 1) * sizeof *delta);
        else
            memset(delta, 0, 2 * (nw + 1) * sizeof *delta);
        int64_t *count = delta + nw + 1;
        for (size_t k = x->s0; k < x->s1; k++) {
            int64_t bytes = (int64_t)vt__ck_storage_bytes(&m->st[sp[k].idx]);
            delta[sp[k].a] += bytes;
            delta[sp[k].b] -= bytes;
            count[sp[k].a]++;
            count[sp[k].b]--;
        }
        int64_t live = 0, alive = 0;
        size_t top = 0;
        for (size_t k = 0; k < nw; k++) {
            live += delta[k];
            alive += count[k];
            v[k] = (uint64_t)live;
            nalive[k] = (uint32_t)alive;
            if (v[k] >= v[top])
                top = k;
        }
        vt__check_growth g;
        rc = vt__check_growth_fit(v, top + 1, &g);
        /* Without steps a buffer made again larger (a KV cache grown by
         * torch.cat through a generation) is what inference does: growth
         * by time is storages piling up, more of them alive at the end,
         * some of them kept through its second half. */
        if (rc || !g.grows || nalive[g.last] <= nalive[g.first] ||
            !kept_through_second_half(x, sp, nw, &g))
            continue;
        size_t grown = g.last;   /* the first window end at the highest */
        while (grown > g.first && v[grown - 1] >= v[g.last])
            grown--;
        if (m->ntensors && !(m->rules_asked & VT_CHECK_RULE_GROWTH) &&
            (!used_again_while_growing(m, sp, x->s0, x->s1, &g, grown) ||
             site_flagged(m, x->stack)))
            continue;
        /* A loop frees what it used among the allocations that grew: a
         * burst of allocations alone is a model's weights moved to the
         * device, however much of a short trace (an OOM in the first
         * forward) it took. */
        uint64_t t0 = UINT64_MAX, t1 = 0;
        for (size_t k = x->s0; k < x->s1; k++) {
            const ck_storage *st = &m->st[sp[k].idx];
            if (sp[k].a > g.first && sp[k].a <= g.last) {
                if (st->alloc_time < t0) t0 = st->alloc_time;
                if (st->alloc_time > t1) t1 = st->alloc_time;
            }
        }
        if (t0 < t1 && !vt__ck_freed_between(m, t0, t1))
            continue;
        /* Its largest storage alive at the last judged end stands for it
         * where one has a tensor (whose holders name the growth); else the
         * first storage that counted, retired or not. */
        uint32_t sti = CK_NONE;
        uint32_t big = largest_alive_at(m, sp + x->s0, x->s1 - x->s0, g.last, 1, NULL);
        for (size_t k = x->s0; k < x->s1; k++)
            if (sti == CK_NONE || m->st[sp[k].idx].ord < m->st[sti].ord)
                sti = sp[k].idx;
        const ck_storage *show = sti != CK_NONE ? &m->st[sti] : NULL;
        if (big != CK_NONE) {
            sti = big;
            show = &m->st[big];
        } else if (x->retired && (!show || x->retired->win_first.ord < show->ord)) {
            show = &x->retired->win_first;
            sti = CK_NONE;
        }
        /* its blocks at the first and last judged ends: the live ones', and
         * the retired ones' from their sums (win's fourth part) */
        int64_t block_growth = blocks_alive_at(m, sp + x->s0, x->s1 - x->s0, g.last) -
                               blocks_alive_at(m, sp + x->s0, x->s1 - x->s0, g.first);
        if (x->retired) {
            const int64_t *blocks = x->retired->win + 3 * (nw + 1);
            for (size_t k = g.first + 1; k <= g.last; k++)
                block_growth += blocks[k];
        }
        rc = site_finding(m, fs, sti, show, nalive[g.last], &g, block_growth);
    }
out:
    free(sp);
    free(ts);
    free(delta);
    free(v);
    free(nalive);
    return rc;
}

/* Add the bytes of storages sp[s0..s1) to delta at the step end each
 * starts being alive at, less at the one it stops: a difference array. */
static void add_spans(const ck_model *m, const span *sp, size_t s0, size_t s1, int64_t *delta)
{
    for (size_t k = s0; k < s1; k++) {
        int64_t bytes = (int64_t)vt__ck_storage_bytes(&m->st[sp[k].idx]);
        delta[sp[k].a] += bytes;
        delta[sp[k].b] -= bytes;
    }
}

/* The live bytes at each of the nm marks, from the difference array, into
 * v, fitted into *g. 0 or -ENOMEM. */
static int fit_marks(const int64_t *delta, size_t nm, uint64_t *v, vt__check_growth *g)
{
    int64_t live = 0;
    for (size_t k = 0; k < nm; k++) {
        live += delta[k];
        v[k] = (uint64_t)live;
    }
    return vt__check_growth_fit(v, nm, g);
}

/* The line most of a site's storages sp[s0..s1) freed in the window were
 * freed at, into *out (0: none freed, or no line is most of them). 0 or
 * -ENOMEM. */
static int dominant_free_line(const ck_model *m, ck_line_memo *lm, const span *sp, size_t s0,
                              size_t s1, uint64_t *out)
{
    uint64_t cand = 0, line;
    uint32_t votes = 0, nfreed = 0, n = 0;
    for (size_t k = s0; k < s1; k++) {   /* the majority vote: one pass */
        const ck_storage *st = &m->st[sp[k].idx];
        if (!st->freed || !st->free_stack)
            continue;
        if (vt__ck_free_line(lm, st->free_stack, &line) < 0)
            return -ENOMEM;
        nfreed++;
        if (!votes)
            cand = line;
        votes += line == cand ? 1 : (uint32_t)-1;
    }
    for (size_t k = s0; k < s1 && nfreed; k++) {   /* every stack looked up: no allocation */
        const ck_storage *st = &m->st[sp[k].idx];
        if (st->freed && st->free_stack && vt__ck_free_line(lm, st->free_stack, &line) == 0)
            n += line == cand;
    }
    *out = 2 * n > nfreed ? cand : 0;
    return 0;
}

/* Whether the storages of every site whose frees in the window were mostly
 * at line `line` (sites[0..nsites) of sp) grow together: their live bytes
 * at the marks, into v, fitted. A replay memory holds each transition's
 * action, made at the policy's line or at the random one as exploration
 * decays: the policy's line grows as the random one shrinks, evicted
 * together at `memory.append`, and the memory is flat (the DQN tutorial,
 * 2,346 steps under plain `run`, 2.7M events under `run --track`: "grows 2 B
 * per step" at `select_action`). Each line's growth is then a share moving
 * between lines that one container holds, not memory growing. @return 1,
 * 0, or -ENOMEM. */
static int co_freed_grow(const ck_model *m, ck_line_memo *lm, const span *sp,
                         const size_t *site_at, size_t nsites, uint64_t line, int64_t *delta,
                         uint64_t *v)
{
    size_t nm = m->nmarks;
    memset(delta, 0, (nm + 1) * sizeof *delta);
    for (size_t g = 0; g < nsites; g++) {
        uint32_t nfreed = 0, nat = 0;
        for (size_t k = site_at[g]; k < site_at[g + 1]; k++) {
            const ck_storage *st = &m->st[sp[k].idx];
            uint64_t at;
            if (!st->freed || !st->free_stack)
                continue;
            if (vt__ck_free_line(lm, st->free_stack, &at) < 0)
                return -ENOMEM;
            nfreed++;
            nat += at == line;
        }
        if (2 * nat > nfreed)
            add_spans(m, sp, site_at[g], site_at[g + 1], delta);
    }
    vt__check_growth g;
    return fit_marks(delta, nm, v, &g) < 0 ? -ENOMEM : g.grows;
}

/* A site's spans that a storage replaced-by-larger judgement reads at the
 * most: it pairs each storage with the others (a site whose value is
 * replaced each step has about one a step). */
#define REPLACED_MAX_SPANS 4096

/* Whether storage st was used by an event in [lo, hi] (its uses are in
 * event order). */
static int used_between(const ck_model *m, const ck_storage *st, uint64_t lo, uint64_t hi)
{
    const ck_use *u = &m->uses[st->first_use];
    size_t k;
    VT__PARTITION_POINT(st->nuses, i, u[i].seq < lo, k);
    return k < st->nuses && u[k].seq <= hi;
}

/* With the tensors recorded, whether a site growing by marks (its storages
 * sp[s0..s1), judged in *g) only had its value replaced by larger ones: no
 * more of its storages alive at any judged mark than at the first, and each
 * storage that began to be alive at a later judged mark made afresh, by an
 * op that used none of the site's storages alive at the mark before (the op
 * that made it: the uses between its allocation and its first use, which is
 * its making). A run of one epoch whose batches grow (a length curriculum,
 * progressive resizing) keeps each step's logits bound across the step's
 * end, each larger than the last: real memory, no leak. A buffer rebuilt
 * larger each step (`preds = torch.cat([preds, p])`) is made from the one
 * before it: a leak, still judged. Without the making known (no use of the
 * new storage), or over REPLACED_MAX_SPANS spans, it is judged as before. */
static int replaced_by_larger(const ck_model *m, const span *sp, size_t s0, size_t s1,
                              const vt__check_growth *g)
{
    if (!m->ntensors || s1 - s0 > REPLACED_MAX_SPANS)
        return 0;
    uint32_t first_alive = 0;
    for (size_t k = s0; k < s1; k++)
        first_alive += sp[k].a <= g->first && g->first < sp[k].b;
    if (!first_alive)
        return 0;
    for (uint32_t j = g->first + 1; j <= g->last; j++) {
        uint32_t alive = 0;
        for (size_t k = s0; k < s1; k++) {
            if (!(sp[k].a <= j && j < sp[k].b))
                continue;
            if (++alive > first_alive)
                return 0;   /* storages piling up: a leak's shape */
            if (sp[k].a != j)
                continue;
            const ck_storage *made = &m->st[sp[k].idx];
            if (!made->nuses || !made->alloc_seq)
                return 0;   /* its making not recorded */
            uint64_t at = m->uses[made->first_use].seq;
            for (size_t q = s0; q < s1; q++)
                if (q != k && sp[q].a <= j - 1 && j - 1 < sp[q].b &&
                    used_between(m, &m->st[sp[q].idx], made->alloc_seq, at))
                    return 0;   /* made from the value it replaced */
        }
    }
    return 1;
}

int vt__ck_rule_growth(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                       vt__check_report *r)
{
    size_t nm = m->nmarks;
    if (!nm && m->nwin)
        return rule_growth_by_time(m, opt, fs, r);
    if (nm < VT_CHECK_GROWTH_MIN_MARKS)
        return 0;
    span *sp = malloc((m->nst ? m->nst : 1) * sizeof *sp);
    int64_t *delta = malloc((nm + 1) * sizeof *delta);
    uint64_t *v = malloc(nm * sizeof *v);
    size_t *site_at = NULL;
    vt__u64map line_grows = {0};   /* free line -> whether its lines grow together */
    ck_line_memo lm = {0};
    int rc = 0;
    if (!sp || !delta || !v) {
        rc = -ENOMEM;
        goto out;
    }
    size_t n;
    if ((rc = judged_spans(m, opt, r, sp, &n)) < 0)
        goto out;
    /* the sites: their spans sp[site_at[g]..site_at[g + 1]) */
    size_t nsites = 0;
    for (size_t k = 0; k < n; k++)
        nsites += !k || sp[k].stack != sp[k - 1].stack;
    site_at = malloc((nsites + 1) * sizeof *site_at);
    if (!site_at || vt__u64map_init(&line_grows, 16) < 0 || vt__ck_line_memo_init(&lm, m->s) < 0) {
        rc = -ENOMEM;
        goto out;
    }
    nsites = 0;
    for (size_t k = 0; k < n; k++)
        if (!k || sp[k].stack != sp[k - 1].stack)
            site_at[nsites++] = k;
    site_at[nsites] = n;
    for (size_t g = 0; g < nsites && !rc; g++) {
        size_t s0 = site_at[g], s1 = site_at[g + 1];
        memset(delta, 0, (nm + 1) * sizeof *delta);
        add_spans(m, sp, s0, s1, delta);
        vt__check_growth gr;
        rc = fit_marks(delta, nm, v, &gr);
        if (rc || !gr.grows)
            continue;
        if (!(m->rules_asked & VT_CHECK_RULE_GROWTH) && replaced_by_larger(m, sp, s0, s1, &gr)) {
            r->ngrowth_replaced++;
            continue;
        }
        uint64_t line;
        if ((rc = dominant_free_line(m, &lm, sp, s0, s1, &line)) < 0)
            break;
        if (line) {
            /* once a line: a graph kept across batches grows at every op's
             * line, all freed at one */
            uint32_t grow = vt__u64map_get(&line_grows, line);
            if (grow == VT__U64MAP_NONE) {
                int got = co_freed_grow(m, &lm, sp, site_at, nsites, line, delta, v);
                if (got < 0 || vt__u64map_put(&line_grows, line, (uint32_t)got) < 0) {
                    rc = -ENOMEM;
                    break;
                }
                grow = (uint32_t)got;
            }
            if (!grow)
                continue;
        }
        rc = marks_finding(m, fs, &sp[s0], s1 - s0, &gr);
    }
out:
    free(sp);
    free(delta);
    free(v);
    free(site_at);
    vt__u64map_free(&line_grows);
    vt__ck_line_memo_free(&lm);
    return rc;
}
