/*
 * trace/check/check_pinned.c - PINNED: small live views keeping a dropped base's
 * storage (see check.h, "Rules").
 *
 * For each storage whose owner (base) tensor was dropped, the views that
 * outlive the drop are swept in seq order; the storage is pinned while live
 * views exist and their covered union is below --pinned-ratio of it. An
 * interval longer than the grace is one finding. Runs after LINGER, which
 * cuts the intervals of the storages it flagged at their last use.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bsearch.h"
#include "check_internal.h"

/* One tensor (other than the owner) that may hold the storage after the
 * owner's drop: its extent as offsets into the storage, clipped. */
typedef struct pin_view {
    uint32_t node;
    uint32_t ilo, ihi;      /* indexes of lo / hi in the coordinates xs */
    uint64_t lo, hi;        /* offsets into the storage, lo <= hi <= bytes */
    uint64_t start_seq;     /* it holds the storage from here (>= the owner's drop) */
} pin_view;

typedef struct pin_span {
    uint64_t lo, hi;
} pin_span;

static int cmp_span(const void *a, const void *b)
{
    const pin_span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* View v starts (d = +1) or stops (d = -1) holding the storage. */
typedef struct pin_ev {
    uint64_t seq, time;
    uint32_t v;
    int32_t d;
} pin_ev;

/* Scratch reused across storages. The covered length of the live views is
 * kept by a segment tree over their distinct extent ends (count of views
 * covering a node's whole range, covered length below it), so a storage with
 * k views costs O(k log k), never O(k^2). */
typedef struct pin_scratch {
    pin_view *v;    size_t nv, capv;
    pin_ev *ev;     size_t nev, capev;
    uint64_t *xs;   size_t nxs, capxs;
    int32_t *cnt;   size_t capcnt;
    uint64_t *len;  size_t caplen;
    uint32_t *live; size_t caplive;  /* views alive at the path moment */
    pin_span *span; size_t capspan;  /* their extents, for the union */
} pin_scratch;

/* Everything one storage's evaluation needs. */
typedef struct pin_run {
    ck_model *m;
    const vt__check_options *opt;
    ck_findings *fs;
    vt__check_report *r;
    pin_scratch *p;
    int steps;              /* steps grace (else time) */
    uint32_t need;          /* steps: complete steps allowed */
    uint64_t grace_ns;      /* time: ns allowed */
    double ratio;
    /* the storage */
    uint32_t sti;
    uint64_t bytes;
    uint64_t cut_seq;       /* LINGER's last use when it cut the interval, else 0 */
} pin_run;

static void cov_update(pin_scratch *p, size_t node, size_t l, size_t r, size_t ql, size_t qr,
                       int32_t d)
{
    if (qr <= l || r <= ql)
        return;
    if (ql <= l && r <= qr) {
        p->cnt[node] += d;
    } else {
        size_t mid = l + (r - l) / 2;
        cov_update(p, 2 * node, l, mid, ql, qr, d);
        cov_update(p, 2 * node + 1, mid, r, ql, qr, d);
    }
    if (p->cnt[node] > 0)
        p->len[node] = p->xs[r] - p->xs[l];
    else if (r - l == 1)
        p->len[node] = 0;
    else
        p->len[node] = p->len[2 * node] + p->len[2 * node + 1];
}

static uint64_t cov_len(const pin_scratch *p)
{
    return p->nxs >= 2 ? p->len[1] : 0;
}

static size_t xs_index(const pin_scratch *p, uint64_t x)
{
    size_t lo;
    VT__PARTITION_POINT(p->nxs, i, p->xs[i] < x, lo);
    return lo;
}

static int cmp_pin_ev(const void *a, const void *b)
{
    const pin_ev *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

/* The views alive at seq q (UINT64_MAX: at the end), their covered union,
 * and the largest VT_CHECK_MAX_VIEWS of them into the finding. */
static int pin_views_at(pin_run *pr, vt__check_finding *f, uint64_t q)
{
    const ck_model *m = pr->m;
    pin_scratch *p = pr->p;
    if (CK_GROW(p->live, p->caplive, p->nv) < 0 || CK_GROW(p->span, p->capspan, p->nv) < 0)
        return -ENOMEM;
    size_t nl = 0;
    for (size_t k = 0; k < p->nv; k++) {
        const ck_node *n = &m->nodes[p->v[k].node];
        if (p->v[k].start_seq <= q && (!n->dropped || n->drop_seq > q))
            p->live[nl++] = (uint32_t)k;
    }
    /* Largest first (bytes, then id): insertion into a short list. */
    uint32_t top[VT_CHECK_MAX_VIEWS];
    size_t ntop = 0;
    for (size_t k = 0; k < nl; k++) {
        const ck_node *n = &m->nodes[p->v[p->live[k]].node];
        size_t at = ntop;
        while (at > 0) {
            const ck_node *o = &m->nodes[p->v[top[at - 1]].node];
            if (o->nbytes > n->nbytes || (o->nbytes == n->nbytes && o->id <= n->id))
                break;
            at--;
        }
        if (at >= VT_CHECK_MAX_VIEWS)
            continue;
        size_t last = ntop < VT_CHECK_MAX_VIEWS ? ntop : VT_CHECK_MAX_VIEWS - 1;
        memmove(&top[at + 1], &top[at], (last - at) * sizeof *top);
        top[at] = p->live[k];
        if (ntop < VT_CHECK_MAX_VIEWS)
            ntop++;
    }
    if (ntop) {
        f->views = calloc(ntop, sizeof *f->views);
        if (!f->views)
            return -ENOMEM;
    }
    for (size_t k = 0; k < ntop; k++) {
        const pin_view *v = &p->v[top[k]];
        const ck_node *n = &m->nodes[v->node];
        vt__check_view *w = &f->views[k];
        w->id = n->id;
        w->name = vt__ck_string(m->s, n->name);
        w->base_id = n->base_id;
        w->base_name = n->base_id && n->base != CK_NONE
                           ? vt__ck_string(m->s, m->nodes[n->base].name) : "";
        w->addr = n->addr;
        w->bytes = n->nbytes;
        w->covered_bytes = v->hi - v->lo;
    }
    f->nviews = ntop;
    f->nviews_live = (uint32_t)nl;
    /* Union of the live extents. */
    for (size_t k = 0; k < nl; k++)
        p->span[k] = (pin_span){ p->v[p->live[k]].lo, p->v[p->live[k]].hi };
    if (nl > 1)
        qsort(p->span, nl, sizeof *p->span, cmp_span);
    uint64_t covered = 0, reach = 0;
    for (size_t k = 0; k < nl; k++) {
        uint64_t lo = p->span[k].lo > reach ? p->span[k].lo : reach;
        if (p->span[k].hi > lo)
            covered += p->span[k].hi - lo;
        if (p->span[k].hi > reach)
            reach = p->span[k].hi;
    }
    f->covered_bytes = covered;
    f->wasted_bytes = pr->bytes - covered;
    return 0;
}

/* A pinned interval [s, until) ended (until = UINT64_MAX: still pinned at
 * the end of the trace). Report it if it outlasted the grace; *done = 1
 * when the storage needs no further look (reported or ignored). */
static int pin_interval(pin_run *pr, uint64_t s_seq, uint64_t s_time, uint64_t until_seq,
                        uint64_t until_time, double wasted_ns, int *done)
{
    ck_model *m = pr->m;
    ck_storage *st = &m->st[pr->sti];
    uint32_t j = vt__ck_step_of(m, s_seq), unused = 0;
    uint64_t from_seq = 0, from_time = 0;
    int hit = 0;
    if (pr->steps) {
        uint32_t fstep = until_seq == UINT64_MAX ? (uint32_t)m->nmarks
                                                 : vt__ck_step_of(m, until_seq);
        unused = fstep > j + 1 ? fstep - j - 1 : 0;
        if ((size_t)j + pr->need < m->nmarks && m->mark_seq[j + pr->need] < until_seq) {
            hit = 1;
            from_seq = m->mark_seq[j + pr->need];
            from_time = m->mark_time[j + pr->need];
        }
    } else if (until_time > s_time &&
               vt__ck_program_time(m, s_time, until_time) > pr->grace_ns) {
        /* the program's own time, as LINGER's (the tool's pauses left out) */
        hit = 1;
        from_time = vt__ck_program_time_after(m, s_time, pr->grace_ns);
        from_seq = vt__ck_seq_at_time(m, from_time, until_seq == UINT64_MAX ? 0 : until_seq);
        if (from_seq < s_seq)
            from_seq = s_seq;
    }
    if (!hit)
        return 0;
    *done = 1;
    int why = vt__ck_ignored(m, pr->opt, pr->sti, 0);
    if (why) {
        if (!st->ignore_counted)
            ++*(why == 2 ? &pr->r->nhost_skipped : &pr->r->nignored);
        st->ignore_counted = 1;
        return 0;
    }
    vt__check_finding *f = vt__ck_add_finding(pr->fs, pr->sti);
    if (!f)
        return -ENOMEM;
    m->st[pr->sti].pinned = 1;   /* one finding a storage: GROWTH leaves it out */
    vt__ck_fill_storage(f, m, st);
    const ck_node *own = &m->nodes[st->owner];
    f->rule = VT_CHECK_RULE_PINNED;
    f->grace_mode = pr->steps ? VT_CHECK_GRACE_STEPS : VT_CHECK_GRACE_TIME;
    if (st->nuses)
        vt__ck_fill_last_use(f, m, &m->uses[st->first_use + st->nuses - 1]);
    f->nuses = st->nuses;
    f->steps_unused = unused;
    f->linger_from_seq = from_seq;
    f->linger_from_time_ns = from_time;
    f->linger_ns = until_time > s_time ? until_time - s_time : 0;
    f->paused_ns = vt__ck_paused_time(m, s_time, until_time);
    f->byte_seconds = wasted_ns / 1e9;
    f->path_seq = until_seq == UINT64_MAX ? UINT64_MAX : from_seq;
    f->owner_drop_seq = own->drop_seq;
    f->owner_drop_time_ns = own->drop_time;
    f->pinned_since_seq = s_seq;
    f->pinned_since_time_ns = s_time;
    f->pinned_until_seq = until_seq;
    f->pinned_until_time_ns = until_time;
    f->pinned_cut = pr->cut_seq && until_seq == pr->cut_seq;
    return pin_views_at(pr, f, f->path_seq);
}

/* View v is tensor node t (n) of storage st of ``bytes``: its extent as
 * offsets into the storage, clipped. */
static void view_extent(pin_view *v, uint32_t t, const ck_node *n, const ck_storage *st,
                        uint64_t bytes)
{
    v->node = t;
    uint64_t lo = 0, hi = 0;   /* bound means data_ptr >= addr; be safe anyway */
    if (n->addr >= st->addr) {
        lo = n->addr - st->addr;
        hi = n->nbytes > UINT64_MAX - lo ? UINT64_MAX : lo + n->nbytes;
    }
    v->lo = lo < bytes ? lo : bytes;
    v->hi = hi < bytes ? hi : bytes;
    if (v->hi < v->lo)
        v->hi = v->lo;
}

/* Collect the views of storage pr->sti that outlive its owner's drop, then
 * sweep their starts and stops in seq order. */
static int pin_storage(pin_run *pr)
{
    ck_model *m = pr->m;
    pin_scratch *p = pr->p;
    const ck_storage *st = &m->st[pr->sti];
    const ck_node *own = &m->nodes[st->owner];
    uint64_t d_seq = own->drop_seq, d_time = own->drop_time;
    uint64_t e_seq = st->freed ? st->free_seq : UINT64_MAX;
    uint64_t e_time = st->freed ? st->free_time : m->end_time;
    pr->cut_seq = 0;
    if (st->lingered && st->nuses) {
        const ck_use *lu = &m->uses[st->first_use + st->nuses - 1];
        if (lu->seq < e_seq) {
            e_seq = pr->cut_seq = lu->seq;
            e_time = lu->time;
        }
    }
    if (d_seq >= e_seq)
        return 0;
    if (e_time < d_time)
        e_time = d_time;

    p->nv = p->nev = p->nxs = 0;
    for (uint32_t t = st->first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
        const ck_node *n = &m->nodes[t];
        if (t == st->owner || n->new_seq >= e_seq || (n->dropped && n->drop_seq <= d_seq))
            continue;
        if (CK_GROW(p->v, p->capv, p->nv + 1) < 0 || CK_GROW(p->ev, p->capev, p->nev + 2) < 0 ||
            CK_GROW(p->xs, p->capxs, p->nxs + 2) < 0)
            return -ENOMEM;
        pin_view *v = &p->v[p->nv];
        view_extent(v, t, n, st, pr->bytes);
        v->start_seq = n->new_seq > d_seq ? n->new_seq : d_seq;
        p->ev[p->nev++] = (pin_ev){ v->start_seq, n->new_seq > d_seq ? n->new_time : d_time,
                                    (uint32_t)p->nv, 1 };
        if (n->dropped && n->drop_seq < e_seq)
            p->ev[p->nev++] = (pin_ev){ n->drop_seq, n->drop_time, (uint32_t)p->nv, -1 };
        p->xs[p->nxs++] = v->lo;
        p->xs[p->nxs++] = v->hi;
        p->nv++;
    }
    if (!p->nv)
        return 0;

    /* Coordinates: distinct extent ends; tree over the segments between. */
    qsort(p->xs, p->nxs, sizeof *p->xs, vt__qsort_u64);
    size_t nx = 0;
    for (size_t k = 0; k < p->nxs; k++)
        if (!nx || p->xs[k] != p->xs[nx - 1])
            p->xs[nx++] = p->xs[k];
    p->nxs = nx;
    size_t tree = 4 * (nx + 1);
    if (CK_GROW(p->cnt, p->capcnt, tree) < 0 || CK_GROW(p->len, p->caplen, tree) < 0)
        return -ENOMEM;
    memset(p->cnt, 0, tree * sizeof *p->cnt);
    memset(p->len, 0, tree * sizeof *p->len);
    for (size_t k = 0; k < p->nv; k++) {
        p->v[k].ilo = (uint32_t)xs_index(p, p->v[k].lo);
        p->v[k].ihi = (uint32_t)xs_index(p, p->v[k].hi);
    }
    qsort(p->ev, p->nev, sizeof *p->ev, cmp_pin_ev);

    double limit = pr->ratio * (double)pr->bytes;
    int32_t nlive = 0;
    int pinned = 0, done = 0, rc = 0;
    uint64_t s_seq = 0, s_time = 0, prev = 0;
    double wasted_ns = 0;
    for (size_t k = 0; k < p->nev && !done && !rc;) {
        uint64_t seq = p->ev[k].seq, time = p->ev[k].time;
        if (pinned && time > prev)
            wasted_ns += (double)(pr->bytes - cov_len(p)) * (double)(time - prev);
        for (; k < p->nev && p->ev[k].seq == seq; k++) {
            const pin_view *v = &p->v[p->ev[k].v];
            nlive += p->ev[k].d;
            if (nx >= 2 && v->ihi > v->ilo)
                cov_update(p, 1, 0, nx - 1, v->ilo, v->ihi, p->ev[k].d);
        }
        int now = nlive > 0 && (double)cov_len(p) < limit;
        if (now && !pinned) {
            s_seq = seq;
            s_time = time;
            wasted_ns = 0;
        } else if (!now && pinned) {
            rc = pin_interval(pr, s_seq, s_time, seq, time, wasted_ns, &done);
        }
        pinned = now;
        if (time > prev || !pinned)
            prev = time;
    }
    if (pinned && !done && !rc) {
        if (e_time > prev)
            wasted_ns += (double)(pr->bytes - cov_len(p)) * (double)(e_time - prev);
        rc = pin_interval(pr, s_seq, s_time, e_seq, e_time, wasted_ns, &done);
    }
    return rc;
}

static void pin_scratch_free(pin_scratch *p)
{
    free(p->v);
    free(p->ev);
    free(p->xs);
    free(p->cnt);
    free(p->len);
    free(p->live);
    free(p->span);
}

int vt__ck_linger_pinning(ck_model *m, uint32_t sti, double ratio, vt__check_finding *f)
{
    const ck_storage *st = &m->st[sti];
    if (st->ntensors < 2 || st->owner == CK_NONE)
        return 0;
    const ck_node *own = &m->nodes[st->owner];
    uint64_t q = f->path_seq;
    if (own->base_id || !own->dropped || own->drop_seq > q)
        return 0;   /* a view's storage (its base's fate unknown), or the owner alive */
    pin_scratch p;
    memset(&p, 0, sizeof p);
    pin_run pr = { .m = m, .p = &p, .sti = sti, .bytes = vt__ck_storage_bytes(st) };
    int rc = 0;
    for (uint32_t t = st->first_tensor; t != CK_NONE && !rc; t = m->nodes[t].next_bound) {
        const ck_node *n = &m->nodes[t];
        if (t == st->owner || n->new_seq > q || (n->dropped && n->drop_seq <= q))
            continue;
        if (CK_GROW(p.v, p.capv, p.nv + 1) < 0) {
            rc = -ENOMEM;
            break;
        }
        pin_view *v = &p.v[p.nv++];
        view_extent(v, t, n, st, pr.bytes);
        v->start_seq = n->new_seq;
    }
    if (!rc && p.nv) {
        rc = pin_views_at(&pr, f, q);
        if (!rc && (double)f->covered_bytes < ratio * (double)pr.bytes) {
            f->owner_drop_seq = own->drop_seq;
            f->owner_drop_time_ns = own->drop_time;
        } else {   /* they cover most of it: nothing to say */
            free(f->views);
            f->views = NULL;
            f->nviews = 0;
            f->nviews_live = 0;
            f->covered_bytes = f->wasted_bytes = 0;
        }
    }
    pin_scratch_free(&p);
    return rc;
}

int vt__ck_rule_pinned(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                       vt__check_report *r)
{
    pin_scratch p;
    memset(&p, 0, sizeof p);
    pin_run pr = { .m = m, .opt = opt, .fs = fs, .r = r, .p = &p };
    pr.steps = opt->grace_mode == VT_CHECK_GRACE_STEPS ||
               (opt->grace_mode == VT_CHECK_GRACE_AUTO && m->nmarks > 0);
    pr.need = opt->grace_mode == VT_CHECK_GRACE_STEPS ? opt->grace_steps : 1;
    if (opt->grace_mode == VT_CHECK_GRACE_TIME) {
        pr.grace_ns = opt->grace_ns;
    } else {
        uint64_t dur = m->end_time > m->start_time ? m->end_time - m->start_time : 0;
        uint64_t frac = dur / 100 * VT_CHECK_TIME_FRACTION_PCT;
        pr.grace_ns = frac > VT_CHECK_TIME_MIN_NS ? frac : VT_CHECK_TIME_MIN_NS;
    }
    pr.ratio = r->pinned_ratio;
    int rc = 0;
    for (size_t i = 0; i < m->nst && !rc; i++) {
        const ck_storage *st = &m->st[i];
        if (st->ntensors < 2 || st->owner == CK_NONE || st->fate_unknown)
            continue;
        const ck_node *own = &m->nodes[st->owner];
        if (own->base_id || !own->dropped)
            continue;
        pr.sti = (uint32_t)i;
        pr.bytes = vt__ck_storage_bytes(st);
        rc = pin_storage(&pr);
    }
    pin_scratch_free(&p);
    return rc;
}
