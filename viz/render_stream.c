/*
 * viz/render_stream.c - the page of a snapshot whose events are read as a
 * stream (vt__viz_render_stream, render.h): the bytes vt__viz_render_page
 * writes from the whole snapshot and its timeline, in memory that follows
 * what is alive at once plus a few bytes per event and per allocation.
 *
 * The page needs every allocation, where the streamed timeline
 * (timeline_stream.c) keeps only what the events leave unresolved; so the
 * events are read four times:
 *  0. the kinds every event puts on the x axis, the renames (a tensor's
 *     latest name), the OOM (whose explanation replays the whole snapshot:
 *     such a page is vt__viz_render_page's);
 *  1-2. the streamed timeline, told each lifetime it retires (the ends of
 *     its band go on the axis, its stacks are kept; one allocated before
 *     the window is held, as those come first on the page) and each point
 *     of the curves (on the axis; where the reserved bytes change, held);
 *  3. the page in page order, its allocations in ALLOC order: the
 *     timeline's follower names each event's lifetime. What an ALLOC knows
 *     (position, size, stack, stream, device, address) is written then, as
 *     the column's bytes; what only its end knows (release, free stack,
 *     flags) and its name wait in a few bytes per allocation until the
 *     columns are put together. A tensor, a finding, finds the allocation
 *     under its address among those open at its event.
 * The page's order (render.c: by ALLOC, those without one first in the
 * timeline's order, external storages by their own event after) is built
 * here as the events go; tests/viz/test_render_stream.c holds it to
 * the whole render's, byte for byte.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "event_stream.h"
#include "grow.h"
#include "order.h"
#include "render.h"
#include "render_internal.h"

/* A column written value by value: its plain varints, and what its
 * run-length form would take (vt__viz_put_column's choice, made when it
 * is put on the page). */
struct scol {
    const char *name;
    vt__buf plain;
    size_t rle_bytes;
    uint64_t run_v;
    size_t run_n;
};

static void scol_put(struct scol *c, uint64_t v)
{
    vt__put_varint(&c->plain, v);
    if (c->run_n && v == c->run_v) {
        c->run_n++;
        return;
    }
    if (c->run_n)
        c->rle_bytes += vt__viz_varint_len(c->run_v) + vt__viz_varint_len(c->run_n);
    c->run_v = v;
    c->run_n = 1;
}

/* Onto the page (cols->blob), as vt__viz_put_column would have put it. */
static void scol_finish(struct scol *c, struct columns *cols)
{
    if (c->run_n)
        c->rle_bytes += vt__viz_varint_len(c->run_v) + vt__viz_varint_len(c->run_n);
    c->run_n = 0;
    if (c->plain.oom)
        cols->blob->oom = 1;
    int rle = c->rle_bytes < c->plain.n;
    vt__viz_col_begin(cols, c->name, rle);
    if (!rle) {
        vt__put_bytes(cols->blob, c->plain.p, c->plain.n);
    } else {
        vt__cur cur = vt__cur_make(c->plain.p, c->plain.n);
        uint64_t v = 0;
        size_t n = 0;
        while (vt__cur_left(&cur)) {
            uint64_t x = vt__get_varint(&cur);
            if (n && x == v) {
                n++;
                continue;
            }
            if (n) {
                vt__put_varint(cols->blob, v);
                vt__put_varint(cols->blob, n);
            }
            v = x;
            n = 1;
        }
        if (n) {
            vt__put_varint(cols->blob, v);
            vt__put_varint(cols->blob, n);
        }
    }
    vt__buf_free(&c->plain);
}

/* An allocation on the page, open in reading 3: found by the event that
 * made it and by its address. */
struct entry {
    vt__lifetime l;          /* as matched so far, or its final record */
    uint32_t pos;            /* page position */
    uint8_t final;
};

/* A reserved step of a device's curve, held until the axis is numbered. */
struct step {
    uint32_t event;
    uint64_t reserved;
};

struct dev_steps {
    struct step *v;
    size_t n, cap;
    size_t seen;             /* points told */
};

/* A checker's finding's lifetime, found as the events go by (render_findings.c's
 * rule: the owner of the event at its alloc_seq, else the allocation under
 * its address at its last use or the last event, else before the first). */
struct fpos {
    int64_t by_alloc, by_use, by_last, by_none;
    int use_seen;
};

struct seq_ref {
    uint64_t seq;
    uint32_t f;
};

/* A recorded FINDING event, held until the checker's findings are written. */
struct ev_finding {
    vt__event e;
    int64_t pos;
};

/* An extra stream an allocation used (STREAM_USE), at its page position. */
struct xs_use {
    uint32_t pos;
    uint64_t stream;
};

/* The state of one streamed render: the page's (r), and what each reading
 * gathers for the next. */
struct sr {
    struct render r;          /* r.tl: the streamed timeline, built here */
    const vt__check_report *report;
    vt__event_stream *es;
    char *err;
    size_t errlen;
    int oom;                  /* a hook could not grow a table: the render fails */
    /* reading 0 */
    struct vt__viz_rename *rn;
    size_t nrn, cap_rn;
    size_t ntensor_new;
    /* readings 1-2 */
    uint64_t size_or, addr_or;
    size_t nretired;
    vt__lifetime *pre;        /* retired, without an ALLOC (before the window) */
    size_t npre, cap_pre;
    struct dev_steps *steps;
    size_t nsteps_dev;
    /* reading 3 */
    uint32_t next_pos;        /* the next allocation's page position */
    uint32_t cur_event;       /* the event the follower is matching */
    uint32_t *end, *fstk;     /* per page position: l_end's value, free stack node */
    uint8_t *flags;           /* l_flags' value */
    uint8_t *by_view;         /* named by a view (vt__viz_bind_name) */
    struct xs_use *xsp;       /* extra streams used, sorted at the end */
    size_t nxsp, cap_xsp;
    struct entry *ent;        /* the allocations open (slots reused) */
    size_t nent, cap_ent;
    uint32_t *free_ent;       /* slots free */
    size_t nfree_ent, cap_free_ent;
    vt__u64map made, at_addr; /* made_at -> entry; addr -> the newest entry there */
    vt__u64map stream_use;    /* the addrs of STREAM_USE events (reading 0) ... */
    vt__u64map newest;        /* ... -> page position of the newest lifetime made there,
                                 freed or not: the one a STREAM_USE there names */
    vt__lifetime born;        /* one retired at the event that made it */
    int has_born;
    uint32_t *xorder;         /* external storages in page order */
    uint32_t *xpos;           /* each one's page position */
    size_t xnext;
    struct scol ev_dt, l_pos, l_size, l_req, l_site, l_stream, l_dev, l_addr; /* written
                                 as the events go */
    int64_t last_p1;          /* the previous allocation's position + 1 (l_pos deltas) */
    uint64_t last_a, prevq;   /* its address (l_addr deltas), the last axis time quantum */
    struct columns cols;
    struct fpos *fp;          /* per checker finding */
    struct seq_ref *fa, *fu;  /* the findings' alloc and last-use seqs, sorted */
    size_t nfa, nfu, ia, iu;
    struct ev_finding *evf;
    size_t nevf, cap_evf;
};

/* The key an allocation is found by in reading 3: the event that made it
 * (the follower's and the streamed build's own). */
static uint64_t made_at(const vt__lifetime *l)
{
    if (l->flags & VT_LT_FROM_STATE)
        return VT__U64MAP_NONE;
    return l->alloc_event != NONE ? l->alloc_event : l->free_event;
}

static void mark_axis(struct sr *x, uint32_t ev)
{
    if (ev < x->r.nevents)
        x->r.axis_of[ev] = 1;
}

/* ---- reading 0 ------------------------------------------------------------ */

static int read_kinds(struct sr *x)
{
    struct render *r = &x->r;
    vt__event e;
    size_t i = 0;
    int rc = vt__event_stream_rewind(x->es);
    if (rc)
        return rc;
    while ((rc = vt__event_stream_next(x->es, &e)) == 1) {
        if (e.kind == VT_EV_OOM)
            return -ENOTSUP;
        r->axis_of[i] = vt__viz_on_axis_kind(e.kind) ? 1 : 0;
        if (e.kind == VT_EV_TENSOR_NAME) {
            struct vt__viz_rename *n = vt__grow_push((void **)&x->rn, &x->cap_rn, &x->nrn,
                                                     sizeof *n);
            if (!n)
                return -ENOMEM;
            *n = (struct vt__viz_rename){ e.aux, (uint32_t)i, e.str };
        }
        x->ntensor_new += e.kind == VT_EV_TENSOR_NEW;
        if (e.kind == VT_EV_STREAM_USE && vt__u64map_put(&x->stream_use, e.addr, 1))
            return -ENOMEM;
        if (vt__viz_keep_pause(r, &e) < 0)
            return -ENOMEM;
        i++;
    }
    if (rc < 0)
        return rc;
    if (x->nrn > 1)
        qsort(x->rn, x->nrn, sizeof *x->rn, vt__viz_cmp_rename);
    return 0;
}

/* ---- readings 1-2: the timeline's ---------------------------------------- */

/* Every lifetime of the page, once: what the axis, the stacks and the
 * shifts of sizes and addresses need of it. */
static void see_lifetime(struct sr *x, const vt__lifetime *l)
{
    mark_axis(x, band_start(&x->r, l));
    mark_axis(x, l->release_event);
    vt__viz_keep_stack(&x->r, l->alloc_stack);
    vt__viz_keep_stack(&x->r, l->free_stack);
    x->size_or |= l->size;
    x->addr_or |= l->addr;
}

static void on_retired(void *ctx, const vt__lifetime *l)
{
    struct sr *x = ctx;
    see_lifetime(x, l);
    x->nretired++;
    if (l->alloc_event == NONE) {
        vt__lifetime *c = vt__grow_push((void **)&x->pre, &x->cap_pre, &x->npre, sizeof *c);
        if (!c)
            x->oom = 1;
        else
            *c = *l;
    }
}

static void on_point(void *ctx, size_t device, const vt__tl_point *pt)
{
    struct sr *x = ctx;
    if (pt->event != NONE)
        mark_axis(x, pt->event);
    if (device >= x->nsteps_dev) {
        size_t cap = x->nsteps_dev;
        if (vt__grow((void **)&x->steps, &cap, device + 1, sizeof *x->steps)) {
            x->oom = 1;
            return;
        }
        memset(x->steps + x->nsteps_dev, 0, (cap - x->nsteps_dev) * sizeof *x->steps);
        x->nsteps_dev = cap;
    }
    struct dev_steps *d = &x->steps[device];
    /* the page draws only where the reserved bytes change */
    if (d->seen++ && d->n && d->v[d->n - 1].reserved == pt->reserved)
        return;
    struct step *st = vt__grow_push((void **)&d->v, &d->cap, &d->n, sizeof *st);
    if (!st)
        x->oom = 1;
    else
        *st = (struct step){ pt->event, pt->reserved };
}

/* ---- the page's order ------------------------------------------------------ */

static int cmp_made(const void *a, const void *b)
{
    uint64_t x = made_at(a), y = made_at(b);
    return vt__order(x, y);
}

/* External storages by their own event, those without one first (qsort_r:
 * ctx is the render). */
static int cmp_external(const void *a, const void *b, void *ctx)
{
    const struct render *r = ctx;
    uint32_t i = *(const uint32_t *)a, j = *(const uint32_t *)b;
    uint32_t ei = r->xs[i].alloc_event, ej = r->xs[j].alloc_event;
    uint64_t ki = ei == NONE ? 0 : (uint64_t)ei + 1, kj = ej == NONE ? 0 : (uint64_t)ej + 1;
    int c = vt__order(ki, kj);
    return c ? c : vt__order(i, j);
}

/* ---- reading 3: the page ----------------------------------------------------- */

static void set_late(struct sr *x, uint32_t pos, const vt__lifetime *l)
{
    struct render *r = &x->r;
    uint64_t p1 = axis_p1(r, band_start(r, l));
    uint64_t e1 = axis_p1(r, l->release_event);
    /* release position = value + p1 - 2; 0 = never released */
    x->end[pos] = (uint32_t)(e1 == 0 ? 0 : (e1 >= p1 ? e1 - p1 + 1 : 1));
    x->fstk[pos] = page_node(r, l->free_stack);
    /* Bit 7 of the page: outside an observed framework's pool (a segment it
     * reserved, a library's own buffer), not allocated. */
    x->flags[pos] = (uint8_t)((l->flags & 0x7f) | (l->flags & VT_LT_OUTSIDE_POOL ? 0x80 : 0));
}

/* The allocation's early columns, at its page position (the next). */
static uint32_t emit(struct sr *x, const vt__lifetime *l, int external)
{
    struct render *r = &x->r;
    uint32_t pos = x->next_pos++;
    int64_t p1 = (int64_t)axis_p1(r, band_start(r, l));
    scol_put(&x->l_pos, vt__zigzag(p1 - x->last_p1));
    x->last_p1 = p1;
    scol_put(&x->l_size, l->size >> x->cols.size_shift);
    scol_put(&x->l_req, l->req_size && l->req_size <= l->size ? l->size - l->req_size + 1 : 0);
    scol_put(&x->l_site, page_node(r, l->alloc_stack));
    scol_put(&x->l_stream, vt__viz_stream_index(r, l->stream));
    scol_put(&x->l_dev, vt__viz_page_device(r, l->device, external));
    uint64_t a = l->addr >> x->cols.addr_shift;
    scol_put(&x->l_addr, vt__zigzag((int64_t)(a - x->last_a)));
    x->last_a = a;
    return pos;
}

static int add_entry(struct sr *x, const vt__lifetime *l, uint32_t pos, int final)
{
    uint32_t k;
    if (x->nfree_ent) {
        k = x->free_ent[--x->nfree_ent];
    } else {
        if (!vt__grow_push((void **)&x->ent, &x->cap_ent, &x->nent, sizeof *x->ent))
            return -ENOMEM;
        k = (uint32_t)(x->nent - 1);
    }
    x->ent[k] = (struct entry){ .l = *l, .pos = pos, .final = (uint8_t)final };
    uint64_t key = made_at(l);
    if ((key != VT__U64MAP_NONE && vt__u64map_put(&x->made, key, k)) ||
        vt__u64map_put(&x->at_addr, l->addr, k))
        return -ENOMEM;
    return 0;
}

static void drop_entry(struct sr *x, uint32_t k)
{
    struct entry *en = &x->ent[k];
    uint64_t key = made_at(&en->l);
    if (key != VT__U64MAP_NONE)
        vt__u64map_del(&x->made, key);
    if (vt__u64map_get(&x->at_addr, en->l.addr) == k)
        vt__u64map_del(&x->at_addr, en->l.addr);
    uint32_t *f = vt__grow_push((void **)&x->free_ent, &x->cap_free_ent, &x->nfree_ent, sizeof *f);
    if (f)
        *f = k;   /* else the slot is only not reused */
}

static int contains(const vt__lifetime *l, uint64_t addr)
{
    return addr - l->addr < l->size || (l->size == 0 && l->addr == addr);
}

/* vt__timeline_find among the allocations open here: the one whose block
 * holds addr, allocated right after event ev; the highest address, then the
 * latest, when several are. @return its page position, -1: none. */
static int64_t find_open(const struct sr *x, uint64_t addr, uint32_t ev)
{
    if (ev != NONE && x->r.nevents && ev >= x->r.nevents)
        ev = (uint32_t)(x->r.nevents - 1);
    uint32_t k = vt__u64map_get(&x->at_addr, addr);
    if (k != VT__U64MAP_NONE && vt__lifetime_allocated_at(&x->ent[k].l, ev))
        return x->ent[k].pos;
    /* an address inside a block, or one another allocation took since:
     * rare, so every open one is looked at */
    const struct entry *best = NULL;
    for (size_t i = 0; i < x->nent; i++) {
        const struct entry *en = &x->ent[i];
        if (en->l.addr > addr || !contains(&en->l, addr) || !vt__lifetime_allocated_at(&en->l, ev))
            continue;
        if (!best || en->l.addr > best->l.addr ||
            (en->l.addr == best->l.addr && en->pos > best->pos))
            best = en;
    }
    return best ? (int64_t)best->pos : -1;
}

/* A lifetime the follower let go: its record is final. */
static void on_retired3(void *ctx, const vt__lifetime *l)
{
    struct sr *x = ctx;
    if (l->alloc_event == NONE)
        return;   /* on the page before any event, its record held since reading 1 */
    uint32_t k = vt__u64map_get(&x->made, made_at(l));
    if (k == VT__U64MAP_NONE) {
        if (l->alloc_event == x->cur_event) {   /* made and resolved by one event */
            x->born = *l;
            x->has_born = 1;
        }
        return;
    }
    set_late(x, x->ent[k].pos, l);
    drop_entry(x, k);
}

static int emit_externals_at(struct sr *x, uint32_t ev)
{
    struct render *r = &x->r;
    while (x->xnext < r->nx) {
        uint32_t k = x->xorder[x->xnext];
        uint32_t a = r->xs[k].alloc_event;
        uint64_t key = a == NONE ? 0 : (uint64_t)a + 1;
        uint64_t at = ev == NONE ? 0 : (uint64_t)ev + 1;
        if (key > at)
            break;
        uint32_t pos = emit(x, &r->xlt[k], 1);
        set_late(x, pos, &r->xlt[k]);
        r->name[pos] = r->xs[k].owner_name;
        x->xpos[k] = pos;
        x->xnext++;
    }
    return 0;
}

/* The checker's findings whose seqs are this event's: the first event with
 * that seq, as render_findings.c's event_by_seq finds it. */
static void findings_at(struct sr *x, const vt__event *e, uint32_t i, const vt__tl_followed *fl)
{
    while (x->ia < x->nfa && x->fa[x->ia].seq < e->seq)
        x->ia++;
    for (; x->ia < x->nfa && x->fa[x->ia].seq == e->seq; x->ia++) {
        if (fl->lifetime == NONE)
            continue;
        uint32_t k = vt__u64map_get(&x->made, made_at(&fl->l));
        if (k != VT__U64MAP_NONE)
            x->fp[x->fa[x->ia].f].by_alloc = x->ent[k].pos;
    }
    while (x->iu < x->nfu && x->fu[x->iu].seq < e->seq)
        x->iu++;
    for (; x->iu < x->nfu && x->fu[x->iu].seq == e->seq; x->iu++) {
        uint32_t f = x->fu[x->iu].f;
        x->fp[f].use_seen = 1;
        x->fp[f].by_use = find_open(x, x->report->findings[f].addr, i);
    }
    if ((size_t)i + 1 == x->r.nevents && x->report)
        for (size_t f = 0; f < x->report->nfindings; f++)
            x->fp[f].by_last = find_open(x, x->report->findings[f].addr, i);
}

/* One event of reading 3, after the follower named its lifetime. */
static int page_event(struct sr *x, const vt__event *e, uint32_t i, const vt__tl_followed *fl)
{
    struct render *r = &x->r;
    if (fl->lifetime != NONE) {
        uint64_t key = made_at(&fl->l);
        if (fl->l.alloc_event == i && !(fl->l.flags & VT_LT_FROM_STATE)) {
            int final = fl->final != NONE;
            const vt__lifetime *l = &fl->l;
            if (!final && x->has_born && made_at(&x->born) == key) {
                l = &x->born;   /* resolved already: its final record */
                final = 1;
            }
            uint32_t pos = emit(x, l, 0);
            if (final) {
                set_late(x, pos, l);
                if (fl->final != NONE)
                    r->rank[fl->final] = pos;
            }
            if (add_entry(x, l, pos, final))
                return -ENOMEM;
        } else {
            uint32_t k = vt__u64map_get(&x->made, key);
            if (k != VT__U64MAP_NONE && !x->ent[k].final)
                x->ent[k].l = fl->l;
        }
        if (key == i && vt__u64map_get(&x->stream_use, fl->l.addr) != VT__U64MAP_NONE) {
            /* made here: the newest at its addr */
            uint32_t k = vt__u64map_get(&x->made, key);
            if (k != VT__U64MAP_NONE && vt__u64map_put(&x->newest, fl->l.addr, x->ent[k].pos))
                return -ENOMEM;
        }
    }
    /* The whole timeline gives a STREAM_USE to the newest lifetime at its
     * addr, freed or not (the streamed one forgets a freed one). */
    if (e->kind == VT_EV_STREAM_USE) {
        uint32_t pos = vt__u64map_get(&x->newest, e->addr);
        if (pos != VT__U64MAP_NONE) {
            if (vt__grow((void **)&x->xsp, &x->cap_xsp, x->nxsp + 1, sizeof *x->xsp))
                return -ENOMEM;
            x->xsp[x->nxsp].pos = pos;
            x->xsp[x->nxsp++].stream = e->stream;
        }
    }
    x->has_born = 0;
    emit_externals_at(x, i);
    if (e->kind == VT_EV_TENSOR_NEW) {
        uint32_t name = x->nrn ? vt__viz_latest_name(x->rn, x->nrn, e->aux, e->str) : e->str;
        int64_t pos = name ? find_open(x, e->addr, i) : -1;
        if (pos >= 0)
            vt__viz_bind_name(r, x->by_view, (size_t)pos, name, VT_TENSOR_BASE(e->aux2) != 0);
    } else if (e->kind == VT_EV_FINDING) {
        struct ev_finding *f = vt__grow_push((void **)&x->evf, &x->cap_evf, &x->nevf, sizeof *f);
        if (!f)
            return -ENOMEM;
        *f = (struct ev_finding){ *e, find_open(x, e->addr, i) };
    }
    if (x->report)
        findings_at(x, e, i, fl);
    return 0;
}

static int cmp_seq_ref(const void *a, const void *b)
{
    const struct seq_ref *x = a, *y = b;
    int c = vt__order(x->seq, y->seq);
    return c ? c : vt__order(x->f, y->f);
}

/* What reading 3 looks for of the checker's findings. */
static int prepare_findings(struct sr *x)
{
    const vt__check_report *rep = x->report;
    size_t n = rep ? rep->nfindings : 0;
    x->fp = calloc(n + 1, sizeof *x->fp);
    x->fa = malloc((n + 1) * sizeof *x->fa);
    x->fu = malloc((n + 1) * sizeof *x->fu);
    if (!x->fp || !x->fa || !x->fu)
        return -ENOMEM;
    for (size_t f = 0; f < n; f++) {
        const vt__check_finding *cf = &rep->findings[f];
        x->fp[f] = (struct fpos){ -1, -1, -1, -1, 0 };
        if (cf->external)
            continue;
        if (cf->alloc_seq)
            x->fa[x->nfa++] = (struct seq_ref){ cf->alloc_seq, (uint32_t)f };
        if (cf->last_use_seq)
            x->fu[x->nfu++] = (struct seq_ref){ cf->last_use_seq, (uint32_t)f };
        x->fp[f].by_none = find_open(x, cf->addr, NONE);
    }
    qsort(x->fa, x->nfa, sizeof *x->fa, cmp_seq_ref);
    qsort(x->fu, x->nfu, sizeof *x->fu, cmp_seq_ref);
    return 0;
}

static int64_t finding_pos(const struct sr *x, size_t f)
{
    const vt__check_finding *cf = &x->report->findings[f];
    const struct fpos *p = &x->fp[f];
    if (cf->external) {
        uint32_t li = vt__viz_external_of(&x->r, cf);
        return li == NONE ? -1 : (int64_t)x->xpos[li - x->r.nl];
    }
    if (p->by_alloc >= 0)
        return p->by_alloc;
    int64_t at = p->use_seen ? p->by_use : x->r.nevents ? p->by_last : p->by_none;
    return at >= 0 ? at : p->by_none;
}

static int cmp_xsp(const void *a, const void *b)
{
    const struct xs_use *x = a, *y = b;
    int c = vt__order(x->pos, y->pos);
    return c ? c : vt__order(x->stream, y->stream);
}

/* The columns in the page's order of them (render_columns.c's). */
static void put_columns(struct sr *x, size_t *npoints)
{
    struct render *r = &x->r;
    struct columns *c = &x->cols;
    vt__buf *blob = c->blob;
    size_t np = r->nl + r->nx;
    struct scol end = { .name = "l_end" }, fstk = { .name = "l_fstk" },
                name = { .name = "l_name" }, flags = { .name = "l_flags" };
    scol_finish(&x->ev_dt, c);
    scol_finish(&x->l_pos, c);
    for (size_t k = 0; k < np; k++)
        scol_put(&end, x->end[k]);
    scol_finish(&end, c);
    scol_finish(&x->l_size, c);
    scol_finish(&x->l_req, c);
    scol_finish(&x->l_site, c);
    for (size_t k = 0; k < np; k++)
        scol_put(&fstk, x->fstk[k]);
    scol_finish(&fstk, c);
    for (size_t k = 0; k < np; k++)
        scol_put(&name, use_str(r, r->name[k]));
    scol_finish(&name, c);
    scol_finish(&x->l_stream, c);
    scol_finish(&x->l_dev, c);
    scol_finish(&x->l_addr, c);
    for (size_t k = 0; k < np; k++)
        scol_put(&flags, x->flags[k]);
    scol_finish(&flags, c);

    vt__viz_col_begin(c, "l_xs", 0);
    if (x->nxsp > 1)
        qsort(x->xsp, x->nxsp, sizeof *x->xsp, cmp_xsp);
    size_t lastk = 0;
    for (size_t i = 0; i < x->nxsp;) {
        size_t j = i, nu = 0;
        for (; j < x->nxsp && x->xsp[j].pos == x->xsp[i].pos; j++)
            nu += j == i || x->xsp[j].stream != x->xsp[j - 1].stream;
        vt__put_varint(blob, x->xsp[i].pos - lastk);
        lastk = x->xsp[i].pos;
        vt__put_varint(blob, nu);
        for (size_t k = i; k < j; k++)
            if (k == i || x->xsp[k].stream != x->xsp[k - 1].stream)
                vt__put_varint(blob, vt__viz_stream_index(r, x->xsp[k].stream));
        c->nxs++;
        i = j;
    }
    struct scol xu = { .name = "x_use" }, xn = { .name = "x_nuse" }, xt = { .name = "x_nt" };
    for (size_t k = 0; k < r->nx; k++) {
        const vt__check_storage *s = &r->xs[x->xorder[k]];
        scol_put(&xu, s->last_use_seq ? rel(r, s->last_use_time_ns) / c->tq + 1 : 0);
    }
    scol_finish(&xu, c);
    for (size_t k = 0; k < r->nx; k++)
        scol_put(&xn, r->xs[x->xorder[k]].nuses);
    scol_finish(&xn, c);
    for (size_t k = 0; k < r->nx; k++)
        scol_put(&xt, r->xs[x->xorder[k]].ntensors);
    scol_finish(&xt, c);
    vt__viz_write_stacks(r, c);
    vt__viz_col_begin(c, "curves", 0);
    for (size_t d = 0; d < r->tl->ndevices; d++) {
        uint64_t lp = 0;
        const struct dev_steps *ds = d < x->nsteps_dev ? &x->steps[d] : NULL;
        for (size_t j = 0; ds && j < ds->n; j++) {
            uint64_t p1 = ds->v[j].event == NONE ? 0 : axis_p1(r, ds->v[j].event);
            vt__put_varint(blob, p1 >= lp ? p1 - lp : 0);
            if (p1 > lp)
                lp = p1;
            vt__put_varint(blob, ds->v[j].reserved);
        }
        npoints[d] = ds ? ds->n : 0;
    }
}

/* Reading 3. */
static int read_page(struct sr *x)
{
    struct render *r = &x->r;
    vt__tl_follow *f = NULL;
    int rc = vt__tl_follow_open(r->s, r->tl, &f, x->err, x->errlen);
    if (rc)
        return rc;
    vt__tl_follow_on_retire(f, on_retired3, x);
    vt__event e;
    size_t i = 0;
    if ((rc = vt__event_stream_rewind(x->es)))
        goto out;
    if (vt__viz_pools_begin(r)) {
        rc = -ENOMEM;
        goto out;
    }
    while ((rc = vt__event_stream_next(x->es, &e)) == 1) {
        uint32_t ev = (uint32_t)i++;
        vt__viz_pools_event(r, ev, &e);
        if (r->axis_of[ev] != NONE) {
            uint64_t q = rel(r, e.time_ns) / x->cols.tq;
            scol_put(&x->ev_dt, q > x->prevq ? q - x->prevq : 0);
            if (q > x->prevq)
                x->prevq = q;
        }
        vt__tl_followed fl;
        x->cur_event = ev;
        if ((rc = vt__tl_follow_event(f, &e, ev, &fl)) || (rc = page_event(x, &e, ev, &fl)))
            goto out;
    }
out:
    vt__tl_follow_close(f);
    return rc < 0 ? rc : 0;
}

/* Where each freed external storage ends: the event of its free's seq (the
 * first with it), NONE if none has it. One more reading, only for a
 * snapshot with external storages. */
static int release_events_of_externals(struct sr *x)
{
    struct render *r = &x->r;
    struct seq_ref *fs = malloc((r->nx + 1) * sizeof *fs);
    uint32_t *rel_ev = malloc((r->nx + 1) * sizeof *rel_ev);
    int rc = fs && rel_ev ? 0 : -ENOMEM;
    size_t n = 0;
    for (size_t k = 0; !rc && k < r->nx; k++) {
        rel_ev[k] = NONE;
        if (r->xs[k].freed)
            fs[n++] = (struct seq_ref){ r->xs[k].free_seq, (uint32_t)k };
    }
    if (!rc) {
        qsort(fs, n, sizeof *fs, cmp_seq_ref);
        rc = vt__event_stream_rewind(x->es);
    }
    vt__event e;
    size_t i = 0, j = 0;
    while (!rc && j < n && (rc = vt__event_stream_next(x->es, &e)) == 1) {
        while (j < n && fs[j].seq < e.seq)
            j++;
        for (; j < n && fs[j].seq == e.seq; j++)
            rel_ev[fs[j].f] = (uint32_t)i;
        i++;
        rc = 0;
    }
    if (rc >= 0) {
        rc = 0;
        for (size_t k = 0; k < r->nx; k++)
            vt__viz_external_lifetime(r, k, rel_ev[k]);
    }
    free(fs);
    free(rel_ev);
    return rc;
}

/* The allocations without an ALLOC, first on the page: the events' own
 * (freed with no ALLOC in the window) in the order of the events that made
 * them, then the state's, those from before the window first (the
 * timeline's order of them). */
static int emit_before_window(struct sr *x)
{
    struct render *r = &x->r;
    const vt__timeline *tl = r->tl;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->alloc_event == NONE && made_at(l) != VT__U64MAP_NONE) {
            vt__lifetime *c = vt__grow_push((void **)&x->pre, &x->cap_pre, &x->npre, sizeof *c);
            if (!c)
                return -ENOMEM;
            *c = *l;
        }
    }
    if (x->npre > 1)
        qsort(x->pre, x->npre, sizeof *x->pre, cmp_made);
    for (size_t i = 0; i < x->npre; i++) {
        uint32_t pos = emit(x, &x->pre[i], 0);
        set_late(x, pos, &x->pre[i]);
        if (add_entry(x, &x->pre[i], pos, 1))
            return -ENOMEM;
    }
    for (int bw = 1; bw >= 0; bw--)   /* the state's: before the window first */
        for (size_t i = 0; i < tl->nlifetimes; i++) {
            const vt__lifetime *l = &tl->lifetimes[i];
            int before = (l->flags & VT_LT_BEFORE_WINDOW) != 0;
            if (l->alloc_event != NONE || made_at(l) != VT__U64MAP_NONE || before != bw)
                continue;
            uint32_t pos = emit(x, l, 0);
            set_late(x, pos, l);
            r->rank[i] = pos;
            if (add_entry(x, l, pos, 1))
                return -ENOMEM;
        }
    /* the left ones among the events' own: their index in tl */
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->alloc_event != NONE || made_at(l) == VT__U64MAP_NONE)
            continue;
        uint32_t k = vt__u64map_get(&x->made, made_at(l));
        if (k != VT__U64MAP_NONE)
            r->rank[i] = x->ent[k].pos;
    }
    return emit_externals_at(x, NONE);
}

static void sr_free(struct sr *x)
{
    free(x->rn);
    free(x->pre);
    for (size_t d = 0; d < x->nsteps_dev; d++)
        free(x->steps[d].v);
    free(x->steps);
    free(x->end);
    free(x->fstk);
    free(x->flags);
    free(x->by_view);
    free(x->xsp);
    free(x->ent);
    free(x->free_ent);
    vt__u64map_free(&x->made);
    vt__u64map_free(&x->at_addr);
    vt__u64map_free(&x->newest);
    vt__u64map_free(&x->stream_use);
    free(x->xorder);
    free(x->xpos);
    struct scol *cs[] = { &x->ev_dt, &x->l_pos, &x->l_size, &x->l_req, &x->l_site,
                          &x->l_stream, &x->l_dev, &x->l_addr };
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++)
        vt__buf_free(&cs[k]->plain);
    free(x->fp);
    free(x->fa);
    free(x->fu);
    free(x->evf);
    vt__timeline_free((vt__timeline *)x->r.tl);
    x->r.tl = NULL;
    vt__viz_render_free(&x->r);
}

int vt__viz_render_stream(FILE *out, const vt__snapshot_data *s, vt__event_stream *es,
                          const vt__check_report *report, vt__viz_stats *stats, char *err,
                          size_t errlen)
{
    struct sr x = { .r = { .s = s, .nevents = vt__event_stream_count(es),
                           .check = report },
                    .report = report, .es = es, .err = err, .errlen = errlen,
                    .ev_dt = { .name = "ev_dt" }, .l_pos = { .name = "l_pos" },
                    .l_size = { .name = "l_size" }, .l_req = { .name = "l_req" },
                    .l_site = { .name = "l_site" }, .l_stream = { .name = "l_stream" },
                    .l_dev = { .name = "l_dev" }, .l_addr = { .name = "l_addr" } };
    struct render *r = &x.r;
    vt__buf blob = { 0 };
    size_t *npoints = NULL;
    vt__timeline *tl = NULL;
    int rc;
    if (errlen)
        err[0] = 0;
    if (r->nevents >= NONE)
        return vt__errf(err, errlen, -EOVERFLOW, "viz: too many events or allocations to render");
    r->axis_of = calloc(r->nevents + 1, sizeof *r->axis_of);
    if (!r->axis_of)
        return vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
    /* Reading 0; an OOM's page is the whole snapshot's (render.h). */
    if (vt__u64map_init(&x.stream_use, 16)) {
        free(r->axis_of);
        return vt__errf(err, errlen, -ENOMEM, "viz: out of memory");
    }
    if ((rc = read_kinds(&x)) < 0)
        goto fail;
    /* The tables of the stacks before the timeline's lifetimes keep theirs. */
    if (vt__viz_render_init(r)) {
        rc = -ENOMEM;
        goto fail;
    }
    /* Readings 1-2. */
    vt__tl_stream_hooks hooks = { .retired = on_retired, .point = on_point, .ctx = &x };
    char tlerr[512] = "";
    if ((rc = vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &hooks, &tl, tlerr,
                                               sizeof tlerr)) < 0) {
        if (!err[0])
            vt__errf(err, errlen, rc, "%s", tlerr);
        goto fail;
    }
    r->tl = tl;
    if (x.oom) {
        rc = -ENOMEM;
        goto fail;
    }
    vt__viz_index_devices(r);
    r->t0 = tl->first_time_ns;
    for (size_t i = 0; i < tl->nlifetimes; i++)
        see_lifetime(&x, &tl->lifetimes[i]);
    for (size_t i = 0; i < tl->npassthrough; i++)
        vt__viz_keep_stack(r, tl->passthrough[i].alloc_stack);
    /* The external storages, from the checker's model of the events. */
    if ((rc = vt__check_list_external_stream(s, es, tl->kind_counts[VT_EV_STORAGE_EXTERNAL],
                                             &r->xs, &r->nx, err, errlen)) < 0)
        goto fail;
    r->nl = x.nretired + tl->nlifetimes;
    size_t np = r->nl + r->nx;
    if (np >= NONE) {
        rc = vt__errf(err, errlen, -EOVERFLOW, "viz: too many events or allocations to render");
        goto fail;
    }
    r->xlt = calloc(r->nx + 1, sizeof *r->xlt);
    x.xorder = malloc((r->nx + 1) * sizeof *x.xorder);
    x.xpos = malloc((r->nx + 1) * sizeof *x.xpos);
    if (!r->xlt || !x.xorder || !x.xpos) {
        rc = -ENOMEM;
        goto fail;
    }
    if (r->nx && (rc = release_events_of_externals(&x)) < 0)
        goto fail;
    for (size_t k = 0; k < r->nx; k++) {
        x.xorder[k] = (uint32_t)k;
        see_lifetime(&x, &r->xlt[k]);
    }
    qsort_r(x.xorder, r->nx, sizeof *x.xorder, cmp_external, (void *)r);

    /* The axis numbered, the stacks kept numbered, the columns' units. */
    uint32_t naxis = 0;
    for (size_t i = 0; i < r->nevents; i++)
        r->axis_of[i] = r->axis_of[i] ? naxis++ : NONE;
    r->naxis = naxis;
    vt__viz_number_stacks(r);
    x.cols.blob = &blob;
    x.cols.size_shift = vt__viz_common_shift(x.size_or);
    x.cols.addr_shift = vt__viz_common_shift(x.addr_or);
    /* Time: quantized as render_columns.c does. */
    uint64_t span = tl->last_time_ns > r->t0 ? tl->last_time_ns - r->t0 : 0;
    x.cols.tq = 1;
    if (r->naxis)
        while (x.cols.tq * 2 <= span / r->naxis / 64)
            x.cols.tq *= 2;

    /* Reading 3. */
    x.end = calloc(np + 1, sizeof *x.end);
    x.fstk = calloc(np + 1, sizeof *x.fstk);
    x.flags = calloc(np + 1, 1);
    r->name = calloc(np + 1, sizeof *r->name);
    r->rank = calloc(tl->nlifetimes + 1, sizeof *r->rank);
    x.by_view = x.ntensor_new ? calloc(np + 1, 1) : NULL;
    if (!x.end || !x.fstk || !x.flags || !r->name || !r->rank ||
        vt__u64map_init(&x.made, 1024) || vt__u64map_init(&x.at_addr, 1024) ||
        vt__u64map_init(&x.newest, 16) ||
        (rc = emit_before_window(&x)) < 0 || (rc = prepare_findings(&x)) < 0) {
        rc = rc < 0 ? rc : -ENOMEM;
        goto fail;
    }
    if ((rc = read_page(&x)) < 0 || x.oom || r->oom) {
        rc = rc < 0 ? rc : -ENOMEM;
        goto fail;
    }

    if (report && report->nfindings) {
        /* Findings by cause, as `vramtrace check` groups them. */
        uint32_t *group = malloc(report->nfindings * sizeof *group);
        if (!group || vt__check_report_groups(report, s, group) < 0) {
            free(group);
            rc = -ENOMEM;
            goto fail;
        }
        for (size_t i = 0; i < report->nfindings; i++)
            vt__viz_add_check_finding(r, &report->findings[i], group[i], finding_pos(&x, i));
        free(group);
    }
    for (size_t i = 0; i < x.nevf; i++)
        vt__viz_add_event_finding(r, &x.evf[i].e, x.evf[i].pos);

    npoints = calloc(tl->ndevices + 1, sizeof *npoints);
    if (!npoints) {
        rc = -ENOMEM;
        goto fail;
    }
    put_columns(&x, npoints);
    vt__viz_pools_write(r, &x.cols);
    rc = vt__viz_finish_page(out, r, &x.cols, npoints, stats, err, errlen);
    free(npoints);
    vt__buf_free(&blob);
    sr_free(&x);
    return rc;
fail:
    free(npoints);
    vt__buf_free(&blob);
    sr_free(&x);
    if (rc == -ENOMEM && !err[0])
        vt__errf(err, errlen, rc, "viz: out of memory");
    return rc;
}
