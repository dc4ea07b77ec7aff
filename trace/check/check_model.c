/*
 * trace/check/check_model.c - the checker's model of a snapshot (pass 1; see
 * check.h and check_internal.h).
 *
 * Allocations are the timeline's lifetimes (timeline.h: the matching rules
 * every view agrees on); one walk over the events opens and closes their
 * storages where the timeline says (with a treap of the live ones, so a
 * tensor binds to the storage CONTAINING its data_ptr in O(log n)), adds the
 * external and implicit storages the timeline does not know, and builds
 * the nodes (tensors and holders), the uses and the graph operations; the
 * uses are then grouped by storage (counting sort) for the
 * rules. Pass 2 (check_paths.c) replays only the graph operations. Nothing
 * is quadratic: 1M events cost well under a second.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "bsearch.h"
#include "check_internal.h"
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
/*  Treap of live storages, keyed by address                                */
/* ------------------------------------------------------------------------ */

static void rot_right(ck_storage *st, uint32_t *t)
{
    uint32_t l = st[*t].tl;
    st[*t].tl = st[l].tr;
    st[l].tr = *t;
    *t = l;
}

static void rot_left(ck_storage *st, uint32_t *t)
{
    uint32_t r = st[*t].tr;
    st[*t].tr = st[r].tl;
    st[r].tl = *t;
    *t = r;
}

/* Insert storage x (its addr must not be in the treap): down to where its
 * priority belongs, then the subtree there is split by x's address into
 * x's two children. Iterative: no stack depth the input could choose. */
static void treap_insert(ck_storage *st, uint32_t *t, uint32_t x)
{
    while (*t != CK_NONE && st[*t].prio >= st[x].prio)
        t = st[x].addr < st[*t].addr ? &st[*t].tl : &st[*t].tr;
    uint32_t cur = *t, *l = &st[x].tl, *r = &st[x].tr;
    while (cur != CK_NONE) {
        if (st[cur].addr < st[x].addr) {
            *l = cur;
            l = &st[cur].tr;
            cur = st[cur].tr;
        } else {
            *r = cur;
            r = &st[cur].tl;
            cur = st[cur].tl;
        }
    }
    *l = *r = CK_NONE;
    *t = x;
}

static void treap_remove(ck_storage *st, uint32_t *t, uint64_t addr)
{
    while (*t != CK_NONE && st[*t].addr != addr)
        t = addr < st[*t].addr ? &st[*t].tl : &st[*t].tr;
    if (*t == CK_NONE)
        return;
    for (;;) {
        uint32_t l = st[*t].tl, r = st[*t].tr;
        if (l == CK_NONE) { *t = r; return; }
        if (r == CK_NONE) { *t = l; return; }
        if (st[l].prio > st[r].prio) {
            rot_right(st, t);
            t = &st[*t].tr;
        } else {
            rot_left(st, t);
            t = &st[*t].tl;
        }
    }
}

/* The live storage with the greatest addr <= addr. */
static uint32_t treap_floor(const ck_storage *st, uint32_t t, uint64_t addr)
{
    uint32_t best = CK_NONE;
    while (t != CK_NONE) {
        if (st[t].addr <= addr) {
            best = t;
            t = st[t].tr;
        } else {
            t = st[t].tl;
        }
    }
    return best;
}

static uint32_t live_at(const ck_model *m, uint64_t addr)
{
    uint32_t x = treap_floor(m->st, m->root, addr);
    return x != CK_NONE && m->st[x].addr == addr ? x : CK_NONE;
}

static uint32_t live_containing(const ck_model *m, uint64_t addr)
{
    uint32_t x = treap_floor(m->st, m->root, addr);
    if (x == CK_NONE)
        return CK_NONE;
    const ck_storage *s = &m->st[x];
    if (addr - s->addr < s->size || addr == s->addr)
        return x;
    return CK_NONE;
}

/* ------------------------------------------------------------------------ */
/*  Pass 1: the model                                                       */
/* ------------------------------------------------------------------------ */

/* Priorities the input cannot predict: a treap is balanced only while its
 * priorities are independent of its keys, and a public function of the
 * storage index let crafted addresses turn it into a list (80,000 external
 * storages: a minute). splitmix64 from a per-run seed. */
static uint32_t next_prio(ck_model *m)
{
    m->prio_state += 0x9e3779b97f4a7c15ull;
    return (uint32_t)(vt__mix64(m->prio_state) >> 32);
}

static void close_storage(ck_model *m, uint32_t x, const vt__event *e, uint32_t stack)
{
    ck_storage *s = &m->st[x];
    s->freed = 1;
    s->free_seq = e->seq;
    s->free_time = e->time_ns;
    s->free_stack = stack;
    treap_remove(m->st, &m->root, s->addr);
}

/* A new live storage; an older one still open at the same address is
 * closed here (its free was not recorded). */
static int open_storage(ck_model *m, const vt__event *e, uint64_t addr, uint64_t size,
                        uint32_t *out)
{
    if (CK_GROW(m->st, m->capst, m->nst + 1) < 0)
        return -ENOMEM;
    if (e) {
        uint32_t old = live_at(m, addr);
        if (old != CK_NONE)
            close_storage(m, old, e, 0);
    }
    uint32_t x = (uint32_t)m->nst++;
    ck_storage *s = &m->st[x];
    memset(s, 0, sizeof *s);
    s->addr = addr;
    s->size = size;
    s->owner = s->first_tensor = CK_NONE;
    s->tl = s->tr = CK_NONE;
    s->prio = next_prio(m);
    s->device = -1;
    s->alloc_event = UINT32_MAX;
    if (e) {
        s->alloc_event = (uint32_t)(e - m->s->events);
        s->alloc_seq = e->seq;
        s->alloc_time = e->time_ns;
        s->alloc_stack = e->stack;
        s->device = e->device;
    }
    treap_insert(m->st, &m->root, x);
    *out = x;
    return 0;
}

static int new_node(ck_model *m, uint8_t kind, uint64_t id, uint32_t name, uint32_t *out)
{
    if (CK_GROW(m->nodes, m->capnodes, m->nnodes + 1) < 0)
        return -ENOMEM;
    uint32_t x = (uint32_t)m->nnodes++;
    ck_node *n = &m->nodes[x];
    memset(n, 0, sizeof *n);
    n->id = id;
    n->name = name;
    n->kind = kind;
    n->alive = kind == VT_CHECK_NODE_HOLDER;
    n->storage = n->base = n->next_bound = n->in_head = n->parent = CK_NONE;
    if (vt__u64map_put(&m->ids, id, x) < 0)
        return -ENOMEM;
    *out = x;
    return 0;
}

/* The node an id names now; an id never introduced becomes an implicit,
 * nameless holder (the object was created before the window). */
static int resolve(ck_model *m, uint64_t id, uint32_t *out)
{
    uint32_t x = vt__u64map_get(&m->ids, id);
    if (x != CK_NONE) {
        *out = x;
        return 0;
    }
    return new_node(m, VT_CHECK_NODE_HOLDER, id, 0, out);
}

static int push_gop(ck_model *m, uint64_t seq, uint8_t op, uint32_t a, uint32_t b, uint32_t label)
{
    if (CK_GROW(m->gops, m->capgops, m->ngops + 1) < 0)
        return -ENOMEM;
    m->gops[m->ngops++] = (ck_gop){ .seq = seq, .a = a, .b = b, .label = label, .op = op };
    return 0;
}

static int push_use(ck_model *m, const vt__event *e, uint32_t node)
{
    uint32_t st = m->nodes[node].storage;
    if (st == CK_NONE)
        return 0;
    if (CK_GROW(m->uses, m->capuses, m->nuses + 1) < 0)
        return -ENOMEM;
    m->uses[m->nuses++] = (ck_use){ .seq = e->seq, .time = e->time_ns, .storage = st,
                                    .node = node, .stack = e->stack };
    m->st[st].nuses++;
    return 0;
}

static int on_tensor_new(ck_model *m, const vt__event *e)
{
    uint32_t base = CK_NONE;
    if (e->aux2) {
        base = vt__u64map_get(&m->ids, e->aux2);
        if (base != CK_NONE && m->nodes[base].kind != VT_CHECK_NODE_TENSOR)
            base = CK_NONE;
    }
    uint32_t x;
    if (new_node(m, VT_CHECK_NODE_TENSOR, e->aux, e->str, &x) < 0)
        return -ENOMEM;
    m->ntensors++;
    ck_node *n = &m->nodes[x];
    n->base = base;
    n->base_id = e->aux2;
    n->addr = e->addr;
    n->nbytes = e->size;
    n->new_seq = e->seq;
    n->new_time = e->time_ns;
    if (e->addr) {
        uint32_t st = live_containing(m, e->addr);
        if (st == CK_NONE) {
            if (open_storage(m, NULL, e->addr, e->size, &st) < 0)
                return -ENOMEM;
            m->st[st].implicit = 1;
            m->st[st].before_window = 1;
            m->st[st].device = e->device;
            m->st[st].req_size = e->size;
        } else if (m->st[st].size == 0 && m->st[st].addr == e->addr) {
            /* A lifetime whose size no event told (a bare free of memory
             * from before the window): its tensor says how large it is. */
            m->st[st].size = m->st[st].req_size = e->size;
        }
        n = &m->nodes[x];
        ck_storage *s = &m->st[st];
        n->storage = st;
        n->next_bound = s->first_tensor;
        s->first_tensor = x;
        s->ntensors++;
        /* Owner: the first non-view tensor, else the first tensor. */
        if (s->owner == CK_NONE || (m->nodes[s->owner].base_id && !e->aux2))
            s->owner = x;
    }
    if (push_use(m, e, x) < 0)
        return -ENOMEM;
    return push_gop(m, e->seq, CK_OP_NEW, x, 0, 0);
}

/* The storage of lifetime `l` of the timeline, opened where its bytes start
 * counting: at its ALLOC (closing a storage still open at the address: its
 * free was lost, as the timeline says), at the first event after the gap
 * that hid its allocation, or before the first event. */
static int open_lifetime(ck_model *m, const vt__timeline *tl, uint32_t li, const vt__event *alloc)
{
    const vt__lifetime *l = &tl->lifetimes[li];
    uint32_t x;
    if (open_storage(m, alloc, l->addr, l->size, &x) < 0)
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
    m->lt_storage[li] = x;
    return 0;
}

/* Lifetimes whose ALLOC is not among the events: those counted from before
 * the first event are open from the start; the others (allocated in a gap)
 * are returned in `late`, sorted by the event at which they start. */
static int seed_lifetimes(ck_model *m, const vt__timeline *tl, uint32_t **late, size_t *nlate)
{
    size_t n = 0, cap = 0;
    uint32_t *v = NULL;
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        if (l->alloc_event != VT_TL_NONE || (l->flags & VT_LT_AFTER_WINDOW))
            continue;
        if (l->start_event == VT_TL_NONE) {
            if (open_lifetime(m, tl, (uint32_t)i, NULL) < 0)
                goto oom;
            continue;
        }
        if (CK_GROW(v, cap, n + 1) < 0)
            goto oom;
        size_t k = n++;   /* insertion sort: lifetimes hidden by gaps are few */
        while (k > 0 && tl->lifetimes[v[k - 1]].start_event > l->start_event) {
            v[k] = v[k - 1];
            k--;
        }
        v[k] = (uint32_t)i;
    }
    *late = v;
    *nlate = n;
    return 0;
oom:
    free(v);
    return -ENOMEM;
}

/* Storages the kept events leave open are alive only if the timeline says
 * so (liveness.h); the others are closed where their bytes stopped counting
 * (the first gap after their allocation, or the last event) and judged by
 * no rule. */
static void settle_open_storages(ck_model *m, const vt__timeline *tl)
{
    for (size_t i = 0; i < tl->nlifetimes; i++) {
        const vt__lifetime *l = &tl->lifetimes[i];
        uint32_t x = m->lt_storage[i];
        if (x == CK_NONE || m->st[x].freed || !(l->flags & VT_LT_FREE_UNSEEN))
            continue;
        ck_storage *st = &m->st[x];
        const vt__event *at = l->release_event != VT_TL_NONE ? &m->s->events[l->release_event]
                                                             : &m->s->events[m->s->nevents - 1];
        st->fate_unknown = 1;
        st->freed = 1;
        st->free_seq = at->seq;
        st->free_time = at->time_ns;
        st->free_stack = 0;
    }
}

/* Allocations come from the timeline's lifetimes (one matching rule for
 * every view); the walk adds what the timeline does not know: external and
 * implicit storages, tensors, holders, references, marks. */
static int walk_events(ck_model *m, const vt__timeline *tl, const uint32_t *late, size_t nlate)
{
    const vt__snapshot_data *s = m->s;
    size_t next_late = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        uint32_t x, y, li;
        while (next_late < nlate && tl->lifetimes[late[next_late]].start_event <= i)
            if (open_lifetime(m, tl, late[next_late++], NULL) < 0)
                return -ENOMEM;
        switch (e->kind) {
        case VT_EV_ALLOC:
            li = tl->event_owner[i];
            if (li != VT_TL_NONE && tl->lifetimes[li].alloc_event == i &&
                open_lifetime(m, tl, li, e) < 0)
                return -ENOMEM;
            break;
        case VT_EV_FREE_REQUESTED:
            li = tl->event_owner[i];
            x = li != VT_TL_NONE ? m->lt_storage[li] : CK_NONE;
            if (x == CK_NONE || m->st[x].freed)
                x = live_at(m, e->addr);   /* an implicit storage at the address */
            if (x != CK_NONE && !m->st[x].freed && !m->st[x].external)
                close_storage(m, x, e, e->stack);
            break;
        case VT_EV_STORAGE_EXTERNAL:
            if (open_storage(m, e, e->addr, e->size, &x) < 0)
                return -ENOMEM;
            m->st[x].external = 1;
            m->st[x].req_size = e->size;
            break;
        case VT_EV_STORAGE_EXTERNAL_FREE:
            x = live_at(m, e->addr);
            if (x != CK_NONE && (m->st[x].external || m->st[x].implicit))
                close_storage(m, x, e, e->stack);
            break;
        case VT_EV_MARK: {
            size_t cap = m->capmarks;
            if (CK_GROW(m->mark_seq, m->capmarks, m->nmarks + 1) < 0)
                return -ENOMEM;
            if (m->capmarks != cap || !m->mark_time) {
                uint64_t *nt = realloc(m->mark_time, m->capmarks * sizeof *nt);
                if (!nt)
                    return -ENOMEM;
                m->mark_time = nt;
                uint32_t *nl = realloc(m->mark_label, m->capmarks * sizeof *nl);
                if (!nl)
                    return -ENOMEM;
                m->mark_label = nl;
            }
            m->mark_seq[m->nmarks] = e->seq;
            m->mark_time[m->nmarks] = e->time_ns;
            m->mark_label[m->nmarks] = e->str;
            m->nmarks++;
            break;
        }
        case VT_EV_TENSOR_NEW:
            if (on_tensor_new(m, e) < 0)
                return -ENOMEM;
            break;
        case VT_EV_TENSOR_USE:
            x = vt__u64map_get(&m->ids, e->aux);
            if (x != CK_NONE && m->nodes[x].kind == VT_CHECK_NODE_TENSOR && push_use(m, e, x) < 0)
                return -ENOMEM;
            break;
        case VT_EV_TENSOR_DROP:
            x = vt__u64map_get(&m->ids, e->aux);
            if (x == CK_NONE || m->nodes[x].kind != VT_CHECK_NODE_TENSOR)
                break;
            if (!m->nodes[x].dropped) {
                m->nodes[x].dropped = 1;
                m->nodes[x].drop_seq = e->seq;
                m->nodes[x].drop_time = e->time_ns;
            }
            if (push_gop(m, e->seq, CK_OP_DROP, x, 0, 0) < 0)
                return -ENOMEM;
            break;
        case VT_EV_TENSOR_NAME:
            /* The node keeps one name: the latest. Findings are made after the
             * whole walk, so owner, last use and path steps all show the name
             * the tensor has at the end of the snapshot, also for what
             * happened before the rename. A holder id or an unknown one is
             * left alone (the event names tensors only). */
            x = vt__u64map_get(&m->ids, e->aux);
            if (x != CK_NONE && m->nodes[x].kind == VT_CHECK_NODE_TENSOR)
                m->nodes[x].name = e->str;
            break;
        case VT_EV_HOLDER_NEW:
            if (new_node(m, VT_CHECK_NODE_HOLDER, e->aux, e->str, &x) < 0)
                return -ENOMEM;
            m->nholders++;
            if (e->aux2 & VT_HOLDER_GC_COLLECTION) {
                m->nodes[x].gc_collection = 1;
                m->ngc_collections++;
            }
            break;
        case VT_EV_REF:
            if (resolve(m, e->aux, &x) < 0 || resolve(m, e->aux2, &y) < 0 ||
                push_gop(m, e->seq, CK_OP_REF, x, y, e->str) < 0)
                return -ENOMEM;
            m->nrefs++;
            /* A collection names the tensors it freed. */
            if (m->nodes[x].gc_collection && m->nodes[y].kind == VT_CHECK_NODE_TENSOR &&
                !m->nodes[y].gc_seq) {
                m->nodes[y].gc_seq = e->seq;
                m->nodes[y].gc_time = e->time_ns;
            }
            break;
        case VT_EV_UNREF:
            x = vt__u64map_get(&m->ids, e->aux);
            y = vt__u64map_get(&m->ids, e->aux2);
            if (x != CK_NONE && y != CK_NONE && push_gop(m, e->seq, CK_OP_UNREF, x, y, 0) < 0)
                return -ENOMEM;
            break;
        default:
            break;
        }
    }
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
    free(m->nodes);
    free(m->uses);
    free(m->gops);
    free(m->mark_seq);
    free(m->mark_time);
    free(m->mark_label);
    free(m->lt_storage);
    vt__u64map_free(&m->ids);
    memset(m, 0, sizeof *m);
}

static int build_model(ck_model *m)
{
    vt__timeline *tl;
    m->root = CK_NONE;
    if (getrandom(&m->prio_state, sizeof m->prio_state, GRND_NONBLOCK) != sizeof m->prio_state) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        m->prio_state = (uint64_t)now.tv_nsec ^ (uint64_t)now.tv_sec << 30 ^ (uintptr_t)m;
    }
    if (vt__u64map_init(&m->ids, 1024) < 0)
        return -ENOMEM;
    int rc = vt__timeline_build(m->s, &tl, NULL, 0);
    if (rc < 0)
        return rc;
    uint32_t *late = NULL;
    size_t nlate = 0;
    m->lt_storage = malloc((tl->nlifetimes ? tl->nlifetimes : 1) * sizeof *m->lt_storage);
    if (!m->lt_storage)
        rc = -ENOMEM;
    else
        memset(m->lt_storage, 0xff, (tl->nlifetimes ? tl->nlifetimes : 1) * sizeof *m->lt_storage);
    if (rc == 0)
        rc = seed_lifetimes(m, tl, &late, &nlate);
    if (rc == 0)
        rc = walk_events(m, tl, late, nlate);
    if (rc == 0 && m->s->nevents)
        settle_open_storages(m, tl);
    free(late);
    vt__timeline_free(tl);
    return rc;
}

int vt__ck_model_build(ck_model *m)
{
    const vt__snapshot_data *s = m->s;
    int rc = build_model(m);
    if (rc < 0)
        return rc;
    if (group_uses(m) < 0)
        return -ENOMEM;
    m->start_time = s->nevents ? s->events[0].time_ns : 0;
    m->end_time = s->meta.snapshot_time_ns;
    if (s->nevents && s->events[s->nevents - 1].time_ns > m->end_time)
        m->end_time = s->events[s->nevents - 1].time_ns;
    if (m->end_time < m->start_time)
        m->end_time = m->start_time;
    return 0;
}

/* ------------------------------------------------------------------------ */
/*  Queries the rules ask of the model                                      */
/* ------------------------------------------------------------------------ */

/* Step of an event: the number of marks at or before it. */
uint32_t vt__ck_step_of(const ck_model *m, uint64_t seq)
{
    size_t lo;
    VT__PARTITION_POINT(m->nmarks, i, m->mark_seq[i] <= seq, lo);
    return (uint32_t)lo;
}

const char *vt__ck_step_label(const ck_model *m, uint32_t step)
{
    if (step == 0 || step > m->nmarks || !m->mark_label)
        return "";
    return vt__ck_string(m->s, m->mark_label[step - 1]);
}

/* First event seq whose time is >= t (events are in time order up to clock
 * jitter between threads), clamped below `limit`. */
uint64_t vt__ck_seq_at_time(const vt__snapshot_data *s, uint64_t t, uint64_t limit)
{
    size_t lo;
    VT__PARTITION_POINT(s->nevents, i, s->events[i].time_ns < t, lo);
    uint64_t seq = lo < s->nevents ? s->events[lo].seq : UINT64_MAX;
    if (limit && seq >= limit)
        seq = limit - 1;
    return seq;
}
