/*
 * trace/check/check_model.c - the checker's model of a snapshot (pass 1; see
 * check.h and check_internal.h).
 *
 * Allocations are the timeline's lifetimes (timeline.h: the matching rules
 * every view agrees on); one walk over the events opens and closes their
 * storages where the timeline says (check_live.c keeps the live ones by
 * address, so a tensor binds to the storage CONTAINING its data_ptr in
 * O(log n)), adds the external and implicit storages the timeline does not
 * know, and builds the nodes (tensors and holders: check_nodes.c), the uses
 * and the graph operations; the uses are then grouped by storage (counting
 * sort) for the rules. Pass 2 (check_paths.c) replays only the graph operations. Nothing
 * is quadratic: 1M events cost well under a second.
 *
 * The events come as a stream (event_stream.h), never as an array: the
 * streamed timeline (vt__timeline_build_stream) reads them first for what
 * only the end decides (what was alive, freed unseen, allocated before the
 * window, whose storages open before the first event), then the walk reads
 * them again, asking the timeline's follower (vt__tl_follow_event) which
 * lifetime each belongs to. So that the model follows what is alive at once
 * rather than how many allocations a run made, a storage closed with no
 * tensor bound and alive at no mark is retired: no tensor rule judges it,
 * GROWTH counts only storages alive at a mark, and what the native rules
 * ask of it its call site sums up (ck_site, ck_life). Its slot is reused;
 * the kept storages are put back in the order they were opened at the end,
 * so that the rules see them, and break their ties, as if none was retired.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"
#include "errbuf.h"
#include "event_stream.h"
#include "timeline.h"

/* ------------------------------------------------------------------------ */
/*  Small helpers                                                           */
/* ------------------------------------------------------------------------ */

const char *vt__ck_string(const vt__snapshot_data *s, uint32_t idx)
{
    if (!s || idx == 0 || idx >= s->nstrings || !s->string_offsets || !s->strings_blob)
        return "";
    uint32_t off = s->string_offsets[idx];
    if (off >= s->strings_blob_size)
        return "";
    /* The reader validates NUL termination; be safe with hand-built ones. */
    if (!memchr(s->strings_blob + off, 0, s->strings_blob_size - off))
        return "";
    return s->strings_blob + off;
}

/* ------------------------------------------------------------------------ */
/*  Pass 1: the model                                                       */
/* ------------------------------------------------------------------------ */

/* A closed storage no rule needs a record of: no tensor was bound to it
 * (the tensor rules judge only those), it was alive at no mark (GROWTH
 * counts only those), and the native rules need of it only what its call
 * site sums up. The marks so far are all that can matter: a later mark
 * comes after its free (the events are in seq order, which the walk
 * checks). */
static int retirable(const ck_model *m, const ck_storage *s)
{
    if (m->keep_all || s->ntensors || !s->freed)
        return 0;
    if (!m->nmarks)
        return 1;
    return s->alloc_seq && m->mark_seq[m->nmarks - 1] <= s->alloc_seq;
}

/* GROWTH by time: a retired storage's bytes in its site's windows. */
static int win_fold(ck_model *m, ck_site *c, const ck_storage *s)
{
    size_t a, b;
    vt__ck_win_span(m, s, &a, &b);
    if (a >= b)
        return 0;   /* alive at no window's end */
    if (!c->win) {
        if (!(c->win = calloc(4 * (m->nwin + 1), sizeof *c->win)))
            return -ENOMEM;
        c->win_first = *s;
    } else if (s->ord < c->win_first.ord) {
        c->win_first = *s;
    }
    int64_t bytes = (int64_t)vt__ck_storage_bytes(s), *count = c->win + m->nwin + 1;
    int64_t *until = count + m->nwin + 1, *blocks = until + m->nwin + 1;
    c->win[a] += bytes;
    c->win[b] -= bytes;
    count[a]++;
    count[b]--;
    if ((int64_t)b > until[a])
        until[a] = (int64_t)b;
    blocks[a] += (int64_t)s->size;
    blocks[b] -= (int64_t)s->size;
    return 0;
}

/* Fold storage x into its call site's sums and free its slot. */
static int retire(ck_model *m, uint32_t x)
{
    ck_storage *s = &m->st[x];
    m->any_device |= s->device >= 0;
    if (!s->external && !s->implicit && !s->before_window) {
        uint32_t k = vt__u64map_get(&m->site_of, s->alloc_stack);
        if (k == CK_NONE) {
            if (CK_GROW(m->sites, m->capsites, m->nsites + 1) < 0 ||
                vt__u64map_put(&m->site_of, s->alloc_stack, (uint32_t)m->nsites) < 0)
                return -ENOMEM;
            k = (uint32_t)m->nsites++;
            m->sites[k] = (ck_site){ .stack = s->alloc_stack, .first_seq = UINT64_MAX,
                                     .first_ord = UINT32_MAX };
        }
        ck_site *c = &m->sites[k];
        c->n++;
        if (s->alloc_seq < c->first_seq ||
            (s->alloc_seq == c->first_seq && s->ord < c->first_ord)) {
            c->first_seq = s->alloc_seq;
            c->first_ord = s->ord;
            c->first_device = s->device;
        }
        if (m->collect_lives) {
            if (CK_GROW(m->lives, m->caplives, m->nlives + 1) < 0)
                return -ENOMEM;
            m->lives[m->nlives++] = (ck_life){ s->free_time - s->alloc_time, s->alloc_stack };
        }
        if (m->nwin && vt__ck_growth_counts_by_time(s) && win_fold(m, c, s) < 0)
            return -ENOMEM;
    }
    s->retired = 1;
    if (CK_GROW(m->free_slots, m->capfree_slots, m->nfree_slots + 1) < 0)
        return -ENOMEM;
    m->free_slots[m->nfree_slots++] = x;
    return 0;
}

/* A storage's bytes start or stop counting toward the live bytes (once its
 * size and device are known: after its opening's fields are set). */
static void count_live(ck_model *m, const ck_storage *s, int open)
{
    uint64_t b = vt__ck_storage_bytes(s);
    uint64_t *live = s->device >= 0 ? &m->live_device : &m->live_host;
    uint64_t *peak = s->device >= 0 ? &m->peak_device : &m->peak_host;
    if (open) {
        *live += b;
        if (*live > *peak)
            *peak = *live;
    } else {
        *live = *live > b ? *live - b : 0;
    }
}

static int close_storage(ck_model *m, uint32_t x, const vt__event *e, uint32_t stack)
{
    ck_storage *s = &m->st[x];
    count_live(m, s, 0);
    s->freed = 1;
    s->free_seq = e->seq;
    s->free_time = e->time_ns;
    s->free_stack = stack;
    s->free_thread = e->thread;
    vt__ck_live_remove(m, x);
    if (m->loops && vt__ck_loop_freed(m, s, stack) < 0)
        return -ENOMEM;
    return retirable(m, s) ? retire(m, x) : 0;
}

/* A new live storage; an older one still open at the same address is
 * closed here (its free was not recorded). `ev` is e's index. */
static int open_storage(ck_model *m, const vt__event *e, uint32_t ev, uint64_t addr,
                        uint64_t size, uint32_t *out)
{
    if (e) {
        uint32_t old = vt__ck_live_at(m, addr);
        if (old != CK_NONE && close_storage(m, old, e, 0) < 0)
            return -ENOMEM;
    }
    uint32_t x;
    if (m->nfree_slots) {
        x = m->free_slots[--m->nfree_slots];
    } else {
        if (m->nst >= CK_NONE - 1 || CK_GROW(m->st, m->capst, m->nst + 1) < 0)
            return -ENOMEM;
        x = (uint32_t)m->nst++;
    }
    ck_storage *s = &m->st[x];
    memset(s, 0, sizeof *s);
    s->addr = addr;
    s->size = size;
    s->owner = s->first_tensor = CK_NONE;
    s->tl = s->tr = CK_NONE;
    s->device = -1;
    s->alloc_event = UINT32_MAX;
    s->ord = (uint32_t)m->nst_all++;
    if (e) {
        s->alloc_event = ev;
        s->alloc_seq = e->seq;
        s->alloc_time = e->time_ns;
        s->alloc_stack = e->stack;
        s->device = e->device;
    }
    vt__ck_live_insert(m, x);
    *out = x;
    return 0;
}

int vt__ck_open_implicit(ck_model *m, uint64_t addr, uint64_t size, int8_t device, uint32_t *out)
{
    if (open_storage(m, NULL, 0, addr, size, out) < 0)
        return -ENOMEM;
    ck_storage *s = &m->st[*out];
    s->implicit = 1;
    s->before_window = 1;
    s->device = device;
    s->req_size = size;
    count_live(m, s, 1);
    return 0;
}

/* Pass 1's view of the timeline: the streamed build's lifetimes (what the
 * events leave unresolved at the end) and a follower that names each
 * event's lifetime as the walk goes (timeline.h). A lifetime's storage is
 * found by the follower's handle while it is open, by its final record's
 * index when the build kept it; `ord` tells a slot reused since. */
typedef struct lt_map {
    uint32_t *st, *ord;
    size_t cap;
} lt_map;

typedef struct walk {
    const vt__timeline *tl;
    vt__tl_follow *follow;
    lt_map by_handle, by_final;
    uint32_t *late;          /* lifetimes hidden by gaps, by the event they start at */
    size_t nlate, next_late;
    uint64_t last_seq, last_time;   /* last_time: the program's last event (walk_events) */
} walk;

/* *arr, an array beside one that CK_GROW grew, given that one's capacity
 * `cap` (of `elem`-byte elements). @return 0 or -ENOMEM (*arr unchanged). */
static int grow_beside(void **arr, size_t cap, size_t elem)
{
    void *p = realloc(*arr, cap * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    return 0;
}

static int map_set(lt_map *mp, uint32_t k, uint32_t x, uint32_t ord)
{
    size_t cap = mp->cap;
    if (CK_GROW(mp->st, mp->cap, (size_t)k + 1) < 0)
        return -ENOMEM;
    if (mp->cap != cap || !mp->ord) {
        if (grow_beside((void **)&mp->ord, mp->cap, sizeof *mp->ord) < 0)
            return -ENOMEM;
        memset(mp->st + cap, 0xff, (mp->cap - cap) * sizeof *mp->st);
    }
    mp->st[k] = x;
    mp->ord[k] = ord;
    return 0;
}

/* The storage the map holds for k, CK_NONE when none or retired since (a
 * retired storage was freed: the walk treats both alike). */
static uint32_t map_get(const ck_model *m, const lt_map *mp, uint32_t k)
{
    if (k == VT_TL_NONE || k >= mp->cap || mp->st[k] == CK_NONE)
        return CK_NONE;
    uint32_t x = mp->st[k];
    if (x >= m->nst || m->st[x].retired || m->st[x].ord != mp->ord[k])
        return CK_NONE;
    return x;
}

/* The storage of a lifetime, opened where its bytes start counting: at its
 * ALLOC (closing a storage still open at the address: its free was lost,
 * as the timeline says), at the first event after the gap that hid its
 * allocation, or before the first event. */
static int open_lifetime(ck_model *m, walk *w, const vt__lifetime *l, uint32_t final,
                         uint32_t handle, const vt__event *alloc, uint32_t ev)
{
    uint32_t x;
    if (open_storage(m, alloc, ev, l->addr, l->size, &x) < 0)
        return -ENOMEM;
    ck_storage *st = &m->st[x];
    st->req_size = l->req_size;
    st->alloc_stack = l->alloc_stack;
    st->device = l->device;
    st->before_window = (l->flags & VT_LT_BEFORE_WINDOW) != 0;
    if (!alloc) {
        st->alloc_seq = l->alloc_seq;
        st->alloc_time = l->alloc_time_ns;
    }
    count_live(m, st, 1);
    if (final != VT_TL_NONE && map_set(&w->by_final, final, x, st->ord) < 0)
        return -ENOMEM;
    if (handle != VT_TL_NONE && map_set(&w->by_handle, handle, x, st->ord) < 0)
        return -ENOMEM;
    return 0;
}

/* The order a whole-snapshot build gives the lifetimes whose ALLOC is not
 * among the events: the ones flagged before the window first, each part
 * in the order they were made (by an event, in event order, then from the
 * state, in its order: the streamed build appends those last, in order). */
typedef struct seed_key {
    uint64_t start;          /* the late ones: the event they start at */
    uint64_t made;           /* (not before the window, from the state, made at) */
    uint32_t i;              /* index in the streamed build's lifetimes */
} seed_key;

static int cmp_seed(const void *a, const void *b)
{
    const seed_key *x = a, *y = b;
    int c = vt__order(x->start, y->start);
    c = c ? c : vt__order(x->made, y->made);
    return c ? c : vt__order(x->i, y->i);
}

/* Lifetimes whose ALLOC is not among the events: those counted from before
 * the first event are open from the start; the others (allocated in a gap)
 * in w->late, by the event at which they start. */
static int seed_lifetimes(ck_model *m, walk *w)
{
    const vt__timeline *tl = w->tl;
    seed_key *v = malloc((tl->nlifetimes ? tl->nlifetimes : 1) * sizeof *v);
    if (!v)
        return -ENOMEM;
    size_t n = 0;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->alloc_event != VT_TL_NONE || (l->flags & VT_LT_AFTER_WINDOW))
            continue;
        uint64_t state = (l->flags & VT_LT_FROM_STATE) != 0;
        v[n++] = (seed_key){
            .made = (uint64_t)!(l->flags & VT_LT_BEFORE_WINDOW) << 63 | state << 62 |
                    (state ? i : l->free_event),
            .i = (uint32_t)i };
    }
    qsort(v, n, sizeof *v, cmp_seed);
    size_t nlate = 0;
    for (size_t k = 0; k < n; k++) {
        const vt__lifetime *l = &tl->lifetimes[v[k].i];
        if (l->start_event != VT_TL_NONE) {
            v[nlate] = v[k];
            v[nlate].start = l->start_event;
            v[nlate++].made = k;   /* ties at an event: the order above */
            continue;
        }
        if (open_lifetime(m, w, l, v[k].i, VT_TL_NONE, NULL, 0) < 0) {
            free(v);
            return -ENOMEM;
        }
    }
    qsort(v, nlate, sizeof *v, cmp_seed);
    uint32_t *late = malloc((nlate ? nlate : 1) * sizeof *late);
    if (!late) {
        free(v);
        return -ENOMEM;
    }
    for (size_t k = 0; k < nlate; k++)
        late[k] = v[k].i;
    free(v);
    w->late = late;
    w->nlate = nlate;
    return 0;
}

/* Storages the kept events leave open are alive only if the timeline says
 * so (liveness.h); the others are closed where their bytes stopped counting
 * (the first gap after their allocation, or the last event) and judged by
 * no rule. */
static void settle_open_storages(ck_model *m, const walk *w)
{
    const vt__timeline *tl = w->tl;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        uint32_t x = map_get(m, &w->by_final, (uint32_t)i);
        if (x == CK_NONE || m->st[x].freed || !(l->flags & VT_LT_FREE_UNSEEN))
            continue;
        ck_storage *st = &m->st[x];
        int at_gap = l->release_event != VT_TL_NONE;
        st->fate_unknown = 1;
        st->freed = 1;
        st->free_seq = at_gap ? l->release_seq : w->last_seq;
        st->free_time = at_gap ? l->release_time_ns : w->last_time;
        st->free_stack = 0;
    }
}

static int add_mark(ck_model *m, const vt__event *e)
{
    size_t cap = m->capmarks;
    if (CK_GROW(m->mark_seq, m->capmarks, m->nmarks + 1) < 0)
        return -ENOMEM;
    if ((m->capmarks != cap || !m->mark_time) &&
        (grow_beside((void **)&m->mark_time, m->capmarks, sizeof *m->mark_time) < 0 ||
         grow_beside((void **)&m->mark_label, m->capmarks, sizeof *m->mark_label) < 0))
        return -ENOMEM;
    m->mark_seq[m->nmarks] = e->seq;
    m->mark_time[m->nmarks] = e->time_ns;
    m->mark_label[m->nmarks] = e->str;
    m->nmarks++;
    return 0;
}

/* A mark (or a step the backward passes tell, where the program marked
 * none): it ends the loop look's run of frees and begins a step. */
static int on_mark(ck_model *m, const vt__event *e)
{
    if (m->loops && vt__ck_loop_boundary(m) < 0)
        return -ENOMEM;
    return add_mark(m, e);
}

static int push_free_time(ck_model *m, uint64_t t)
{
    if (vt__grow_from((void **)&m->free_time, &m->capfree_time, m->nfree_time + 1,
                      sizeof *m->free_time, 1024) < 0)
        return -ENOMEM;
    m->free_time[m->nfree_time++] = t;
    return 0;
}

/* One event of the walk: allocations come from the timeline's lifetimes
 * (one matching rule for every view); the walk adds what the timeline does
 * not know: external and implicit storages, tensors, holders, references,
 * marks. */
static int on_event(ck_model *m, walk *w, const vt__event *e, uint32_t i,
                    const vt__tl_followed *fl)
{
    const vt__timeline *tl = w->tl;
    uint32_t x;
    while (w->next_late < w->nlate && tl->lifetimes[w->late[w->next_late]].start_event <= i) {
        uint32_t li = w->late[w->next_late++];
        if (open_lifetime(m, w, &tl->lifetimes[li], li, VT_TL_NONE, NULL, 0) < 0)
            return -ENOMEM;
    }
    switch (e->kind) {
    case VT_EV_ALLOC:
        if (m->loops && vt__ck_loop_boundary(m) < 0)   /* a run of frees ends */
            return -ENOMEM;
        if (fl->lifetime != VT_TL_NONE && fl->l.alloc_event == i &&
            open_lifetime(m, w, &fl->l, fl->final, fl->lifetime, e, i) < 0)
            return -ENOMEM;
        break;
    case VT_EV_FREE_REQUESTED:
        x = CK_NONE;
        if (fl->lifetime != VT_TL_NONE) {
            /* one from before the window is made by this free: its storage
             * was opened from its final record */
            x = fl->l.alloc_event == VT_TL_NONE ? map_get(m, &w->by_final, fl->final)
                                                : map_get(m, &w->by_handle, fl->lifetime);
            if (x != CK_NONE && fl->l.alloc_event == VT_TL_NONE &&
                map_set(&w->by_handle, fl->lifetime, x, m->st[x].ord) < 0)
                return -ENOMEM;
        }
        if (e->time_ns >= m->free_time_from && push_free_time(m, e->time_ns) < 0)
            return -ENOMEM;
        if (x == CK_NONE || m->st[x].freed)
            x = vt__ck_live_at(m, e->addr);   /* an implicit storage at the address */
        if (x != CK_NONE && !m->st[x].freed && !m->st[x].external &&
            close_storage(m, x, e, e->stack) < 0)
            return -ENOMEM;
        break;
    case VT_EV_STORAGE_EXTERNAL:
        if (open_storage(m, e, i, e->addr, e->size, &x) < 0)
            return -ENOMEM;
        m->st[x].external = 1;
        m->st[x].req_size = e->size;
        count_live(m, &m->st[x], 1);
        break;
    case VT_EV_STORAGE_EXTERNAL_FREE:
        x = vt__ck_live_at(m, e->addr);
        if (x != CK_NONE && (m->st[x].external || m->st[x].implicit) &&
            close_storage(m, x, e, e->stack) < 0)
            return -ENOMEM;
        break;
    case VT_EV_MARK:
        return on_mark(m, e);
    case VT_EV_PAUSE:
        return vt__ck_push_pause(m, e);
    case VT_EV_TENSOR_NEW:
    case VT_EV_TENSOR_USE:
    case VT_EV_TENSOR_DROP:
    case VT_EV_TENSOR_NAME:
    case VT_EV_HOLDER_NEW:
    case VT_EV_REF:
    case VT_EV_UNREF:
        return vt__ck_on_graph_event(m, e);
    default:
        break;
    }
    return 0;
}

/* Events out of seq order: retiring a storage counted on the marks so far,
 * which no longer holds (the walk starts again keeping every record). */
#define CK_UNORDERED 1

/* Pass 1 proper: every event once, in order. */
static int walk_events(ck_model *m, walk *w)
{
    vt__event e;
    int rc = vt__event_stream_rewind(m->es);
    uint32_t i = 0;
    size_t inferred = 0;   /* the next step the backward passes tell, where they are the marks */
    while (rc == 0 && (rc = vt__event_stream_next(m->es, &e)) == 1) {
        if (i && e.seq <= w->last_seq && !m->keep_all)
            return CK_UNORDERED;
        for (; m->steps_inferred && inferred < w->tl->nbackward_steps &&
               w->tl->backward_steps[inferred].event <= i; inferred++) {
            const vt__tl_mark *b = &w->tl->backward_steps[inferred];
            if (on_mark(m, &(vt__event){ .kind = VT_EV_MARK, .seq = b->seq, .time_ns = b->time_ns }) < 0)
                return vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
        }
        if (i == 0)
            m->start_time = e.time_ns;
        vt__tl_followed fl;
        if ((rc = vt__tl_follow_event(w->follow, &e, i, &fl)) < 0)
            return rc;
        if ((rc = on_event(m, w, &e, i, &fl)) < 0)
            return vt__errf(m->err, m->errlen, rc, "check: out of memory");
        w->last_seq = e.seq;
        /* The program's time: not the holder graph's events, which
         * vramtrace.torch records by walking the heap (at a snapshot, after
         * its request: vramtrace's own time, seconds on a large heap). */
        if (e.kind != VT_EV_HOLDER_NEW && e.kind != VT_EV_REF && e.kind != VT_EV_UNREF &&
            e.kind != VT_EV_TENSOR_NAME)
            w->last_time = e.time_ns;
        i++;
        rc = 0;
    }
    m->nevents = i;
    m->end_time = m->last_event_time = w->last_time;
    return rc;   /* 0 at the end, or the stream's error (its line in m->err) */
}

/* The kept storages, from their slots into the model's order (the order
 * they were opened in, which the rules and their ties follow). */
static int order_storages(ck_model *m)
{
    size_t n = 0;
    uint64_t *key = malloc((m->nst ? m->nst : 1) * sizeof *key);
    if (!key)
        return -ENOMEM;
    for (size_t i = 0; i < m->nst; i++)
        if (!m->st[i].retired)
            key[n++] = (uint64_t)m->st[i].ord << 32 | i;
    qsort(key, n, sizeof *key, vt__qsort_u64);
    ck_storage *st = malloc((n ? n : 1) * sizeof *st);
    uint32_t *to = malloc((m->nst ? m->nst : 1) * sizeof *to);
    if (!st || !to) {
        free(key);
        free(st);
        free(to);
        return -ENOMEM;
    }
    for (size_t k = 0; k < n; k++) {
        uint32_t i = (uint32_t)key[k];
        st[k] = m->st[i];
        to[i] = (uint32_t)k;
    }
    for (size_t i = 0; i < m->nnodes; i++)
        if (m->nodes[i].storage != CK_NONE)
            m->nodes[i].storage = to[m->nodes[i].storage];
    for (size_t i = 0; i < m->nuses; i++)
        m->uses[i].storage = to[m->uses[i].storage];
    for (size_t k = 0; k < n; k++)
        m->any_device |= st[k].device >= 0;
    free(key);
    free(to);
    free(m->st);
    free(m->free_slots);
    m->free_slots = NULL;
    m->nfree_slots = m->capfree_slots = 0;
    m->st = st;
    m->nst = m->capst = n;
    m->root = CK_NONE;   /* the treap was pass 1's */
    return 0;
}

/* Group the uses by storage (stable counting sort: each storage's uses stay
 * in event order). */
static int group_uses(ck_model *m)
{
    uint32_t acc = 0;
    for (size_t i = 0; i < m->nst; i++) {
        m->st[i].first_use = acc;
        acc += m->st[i].nuses;
    }
    ck_use *sorted = malloc((m->nuses ? m->nuses : 1) * sizeof *sorted);
    uint32_t *fill = calloc(m->nst ? m->nst : 1, sizeof *fill);
    if (!sorted || !fill) {
        free(sorted);
        free(fill);
        return -ENOMEM;
    }
    for (size_t i = 0; i < m->nuses; i++) {
        const ck_use *u = &m->uses[i];
        sorted[m->st[u->storage].first_use + fill[u->storage]++] = *u;
    }
    free(fill);
    free(m->uses);
    m->uses = sorted;
    m->capuses = m->nuses;
    return 0;
}

void vt__ck_model_free(ck_model *m)
{
    free(m->st);
    free(m->free_slots);
    for (size_t i = 0; i < m->nsites; i++)
        free(m->sites[i].win);
    free(m->sites);
    free(m->lives);
    vt__u64map_free(&m->site_of);
    vt__ck_sampled_free(&m->drawn);
    free(m->nodes);
    free(m->uses);
    free(m->gops);
    free(m->mark_seq);
    free(m->mark_time);
    free(m->mark_label);
    free(m->free_time);
    free(m->pause);
    vt__ck_times_free(m->times);
    vt__u64map_free(&m->ids);
    vt__ck_loops_free(m);
    memset(m, 0, sizeof *m);
}

static void walk_free(walk *w)
{
    free(w->by_handle.st);
    free(w->by_handle.ord);
    free(w->by_final.st);
    free(w->by_final.ord);
    free(w->late);
    vt__tl_follow_close(w->follow);
    memset(w, 0, sizeof *w);
}

/* Forget pass 1's storages and nodes (the walk starts again). */
static void model_reset(ck_model *m)
{
    ck_model keep = { .s = m->s, .es = m->es, .err = m->err, .errlen = m->errlen,
                      .rules_asked = m->rules_asked, .keep_records = m->keep_records,
                      .pool_by_time = m->pool_by_time, .nwin = m->nwin, .win_t0 = m->win_t0,
                      .win_span = m->win_span, .free_time_from = m->free_time_from,
                      .loop_look = m->loop_look, .steps_inferred = m->steps_inferred };
    vt__ck_model_free(m);
    *m = keep;
}

static int build_model(ck_model *m, const vt__timeline *tl)
{
    walk w = { .tl = tl };
    vt__ck_live_init(m);
    if (vt__u64map_init(&m->ids, 1024) < 0 || vt__u64map_init(&m->site_of, 64) < 0 ||
        (m->loop_look && vt__ck_loops_init(m) < 0))
        return vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
    int rc = vt__tl_follow_open(m->s, tl, &w.follow, m->err, m->errlen);
    if (rc == 0 && seed_lifetimes(m, &w) < 0)
        rc = vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
    if (rc == 0 && (rc = vt__ck_seed_declared_again(m)) < 0 && (!m->err || !m->err[0]))
        rc = vt__errf(m->err, m->errlen, rc, "check: out of memory");
    if (rc == 0)
        rc = walk_events(m, &w);
    if (rc == 0 && m->loops && vt__ck_loop_boundary(m) < 0)   /* the last run of frees */
        rc = vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
    if (rc == 0 && m->nevents)
        settle_open_storages(m, &w);
    walk_free(&w);
    return rc;
}

int vt__ck_model_build(ck_model *m)
{
    vt__timeline *tl;
    char tlerr[256];
    size_t n = vt__event_stream_count(m->es);
    if (n >= VT_TL_NONE / 2)
        return vt__errf(m->err, m->errlen, -EOVERFLOW, "check: snapshot too large (%zu events)", n);
    /* What the events leave unresolved at the end: pass 1 opens those
     * storages where a whole-snapshot timeline would. */
    int rc = vt__timeline_build_stream(m->s, m->es, 0, &tl, tlerr, sizeof tlerr);
    if (rc < 0) {
        if (!m->err || !m->err[0])
            (void)vt__errf(m->err, m->errlen, rc, "%s", tlerr);
        return rc;
    }
    /* What pass 1 may retire depends on the rules that will run, which the
     * first reading tells: TAPE makes a step's peak of every storage's
     * bytes, and OUTLIER without marks judges each sibling by time; with
     * marks OUTLIER needs only the lifetimes of the short-lived (check.c
     * chooses the rules the same way). */
    int tensors = tl->kind_counts[VT_EV_TENSOR_NEW] != 0;
    /* A trace the program marked no step of, whose backward passes tell its
     * steps (pytorch/examples' word_language_model steps its parameters by
     * hand; trace/snap/timeline_steps.c): each begins a step, as a mark
     * would, for every rule (pass 1 adds them: walk_events). */
    size_t nmarks;
    bool inferred;
    const vt__tl_mark *marks = vt__timeline_steps(tl, &nmarks, &inferred);
    m->steps_inferred = inferred;
    int outlier = m->rules_asked ? (m->rules_asked & VT_CHECK_RULE_OUTLIER) != 0
                                 : !tensors && nmarks;
    m->keep_all = m->keep_records || (m->rules_asked & VT_CHECK_RULE_TAPE) || (outlier && !nmarks);
    m->collect_lives = !m->keep_all && outlier;
    /* OUTLIER's look for a loop's blocks kept until it ended, as the runs
     * of frees end (check_loop_kept.c): with marks; on a trace with tensors
     * where the rules are chosen or OUTLIER named (check.c adds it to the
     * tensor rules where it found something: their tensors die within the
     * step that made them, which the tensor rules do not judge) */
    m->loop_look = nmarks && (tensors ? !m->rules_asked || (m->rules_asked & VT_CHECK_RULE_OUTLIER)
                                      : outlier);
    /* without marks every free; with them those after the last mark,
     * where NEVER-FREED judges the run's quiet end (vt__ck_quiet_tail) */
    m->free_time_from = nmarks ? marks[nmarks - 1].time_ns : 0;
    /* GROWTH by time (check.c runs it where nwin says), in windows of the
     * trace the retired storages are counted in as they go: an observed
     * PyTorch pool's trace without marks, its tensors recorded or not (a
     * program that steps its parameters by hand, as pytorch/examples'
     * word_language_model does, makes no optimizer step for `run` to mark,
     * and a retained graph that grows batch after batch is used by every
     * backward: only its growth tells it). */
    int observed = (m->s->meta.flags & VT_META_POOL_OBSERVED) != 0;
    m->pool_by_time = !nmarks && !tensors && observed;
    if (!nmarks && observed && (!m->rules_asked || (m->rules_asked & VT_CHECK_RULE_GROWTH)) &&
        tl->last_time_ns > tl->first_time_ns) {
        m->nwin = CK_GROWTH_WINDOWS;
        m->win_t0 = tl->first_time_ns;
        m->win_span = tl->last_time_ns - tl->first_time_ns;
    }
    rc = build_model(m, tl);
    if (rc == CK_UNORDERED) {
        model_reset(m);
        m->keep_all = 1;
        m->collect_lives = 0;
        rc = build_model(m, tl);
    }
    vt__timeline_free(tl);
    if (rc < 0)
        return rc;
    for (size_t i = 1; i < m->nfree_time; i++)   /* threads' clocks may cross */
        if (m->free_time[i] < m->free_time[i - 1]) {
            qsort(m->free_time, m->nfree_time, sizeof *m->free_time, vt__qsort_u64);
            break;
        }
    vt__ck_order_pauses(m);
    if (order_storages(m) < 0 || group_uses(m) < 0)
        return vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
    /* the end of the trace: the snapshot, or its last event if later */
    if (m->s->meta.snapshot_time_ns > m->end_time || !m->nevents)
        m->end_time = m->s->meta.snapshot_time_ns;
    if (m->end_time < m->start_time)
        m->end_time = m->start_time;
    return 0;
}
