/*
 * trace/check.c - the checker's model and its rules (see check.h).
 *
 * Pass 1 walks the events once: storages (with a treap of the live ones, so
 * a tensor binds to the storage CONTAINING its data_ptr in O(log n)), nodes,
 * uses and graph operations. The rules then look at each storage's uses
 * (grouped by a counting sort) and lifetime. Pass 2 (check_paths.c) replays
 * only the graph operations to find the retention paths. Nothing is
 * quadratic: 1M events cost well under a second.
 */
#include <errno.h>
#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

/* ------------------------------------------------------------------------ */
/*  Small helpers                                                           */
/* ------------------------------------------------------------------------ */

static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

/* Grow an array so that it holds at least `need` elements. */
static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 64;
    while (ncap < need)
        ncap *= 2;
    void *np = realloc(*p, ncap * elem);
    if (!np)
        return -ENOMEM;
    *p = np;
    *cap = ncap;
    return 0;
}
#define GROW(arr, cap, need) grow((void **)&(arr), &(cap), (need), sizeof *(arr))

const char *vt__ck_string(const vt_snapshot_data *s, uint32_t idx)
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

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

/* ------------------------------------------------------------------------ */
/*  u64 -> u32 map                                                          */
/* ------------------------------------------------------------------------ */

int vt__ck_map_init(ck_map *m, size_t cap)
{
    size_t c = 64;
    while (c < cap * 2)
        c *= 2;
    m->keys = malloc(c * sizeof *m->keys);
    m->vals = malloc(c * sizeof *m->vals);
    m->used = calloc(c, 1);
    m->cap = c;
    m->n = 0;
    if (!m->keys || !m->vals || !m->used) {
        vt__ck_map_free(m);
        return -ENOMEM;
    }
    return 0;
}

void vt__ck_map_free(ck_map *m)
{
    free(m->keys);
    free(m->vals);
    free(m->used);
    memset(m, 0, sizeof *m);
}

uint32_t vt__ck_map_get(const ck_map *m, uint64_t key)
{
    if (!m->cap)
        return CK_NONE;
    size_t mask = m->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (!m->used[i])
            return CK_NONE;
        if (m->keys[i] == key)
            return m->vals[i];
    }
}

int vt__ck_map_put(ck_map *m, uint64_t key, uint32_t val)
{
    if ((m->n + 1) * 2 > m->cap) {
        ck_map nm;
        if (vt__ck_map_init(&nm, m->cap) < 0)
            return -ENOMEM;
        for (size_t i = 0; i < m->cap; i++)
            if (m->used[i])
                vt__ck_map_put(&nm, m->keys[i], m->vals[i]);
        vt__ck_map_free(m);
        *m = nm;
    }
    size_t mask = m->cap - 1;
    for (size_t i = mix64(key) & mask;; i = (i + 1) & mask) {
        if (!m->used[i]) {
            m->used[i] = 1;
            m->keys[i] = key;
            m->vals[i] = val;
            m->n++;
            return 0;
        }
        if (m->keys[i] == key) {
            m->vals[i] = val;
            return 0;
        }
    }
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

/* Insert storage x (its addr must not be in the treap). Depth is O(log n)
 * in expectation, so recursion is fine. */
static void treap_insert(ck_storage *st, uint32_t *t, uint32_t x)
{
    if (*t == CK_NONE) {
        *t = x;
        return;
    }
    if (st[x].addr < st[*t].addr) {
        treap_insert(st, &st[*t].tl, x);
        if (st[st[*t].tl].prio > st[*t].prio)
            rot_right(st, t);
    } else {
        treap_insert(st, &st[*t].tr, x);
        if (st[st[*t].tr].prio > st[*t].prio)
            rot_left(st, t);
    }
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

static void close_storage(ck_model *m, uint32_t x, const vt_event *e, uint32_t stack)
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
static int open_storage(ck_model *m, const vt_event *e, uint64_t addr, uint64_t size,
                        uint32_t *out)
{
    if (GROW(m->st, m->capst, m->nst + 1) < 0)
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
    s->prio = (uint32_t)mix64(x + 0x9e3779b97f4a7c15ull);
    s->device = -1;
    if (e) {
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
    if (GROW(m->nodes, m->capnodes, m->nnodes + 1) < 0)
        return -ENOMEM;
    uint32_t x = (uint32_t)m->nnodes++;
    ck_node *n = &m->nodes[x];
    memset(n, 0, sizeof *n);
    n->id = id;
    n->name = name;
    n->kind = kind;
    n->alive = kind == VT_CHECK_NODE_HOLDER;
    n->storage = n->base = n->next_bound = n->in_head = n->parent = CK_NONE;
    if (vt__ck_map_put(&m->ids, id, x) < 0)
        return -ENOMEM;
    *out = x;
    return 0;
}

/* The node an id names now; an id never introduced becomes an implicit,
 * nameless holder (the object was created before the window). */
static int resolve(ck_model *m, uint64_t id, uint32_t *out)
{
    uint32_t x = vt__ck_map_get(&m->ids, id);
    if (x != CK_NONE) {
        *out = x;
        return 0;
    }
    return new_node(m, VT_CHECK_NODE_HOLDER, id, 0, out);
}

static int push_gop(ck_model *m, uint64_t seq, uint8_t op, uint32_t a, uint32_t b, uint32_t label)
{
    if (GROW(m->gops, m->capgops, m->ngops + 1) < 0)
        return -ENOMEM;
    m->gops[m->ngops++] = (ck_gop){ .seq = seq, .a = a, .b = b, .label = label, .op = op };
    return 0;
}

static int push_use(ck_model *m, const vt_event *e, uint32_t node)
{
    uint32_t st = m->nodes[node].storage;
    if (st == CK_NONE)
        return 0;
    if (GROW(m->uses, m->capuses, m->nuses + 1) < 0)
        return -ENOMEM;
    m->uses[m->nuses++] = (ck_use){ .seq = e->seq, .time = e->time_ns, .storage = st,
                                    .node = node, .stack = e->stack };
    m->st[st].nuses++;
    return 0;
}

static int on_tensor_new(ck_model *m, const vt_event *e)
{
    uint32_t base = CK_NONE;
    if (e->aux2) {
        base = vt__ck_map_get(&m->ids, e->aux2);
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

/* Storages alive throughout: ACTIVE blocks of the allocator state that no
 * ALLOC of the window explains. */
static int seed_state(ck_model *m)
{
    const vt_snapshot_data *s = m->s;
    uint64_t first = s->nevents ? s->events[0].seq : UINT64_MAX;
    for (size_t i = 0; i < s->nblocks; i++) {
        const vt_block *b = &s->blocks[i];
        if (b->state == VT_BLOCK_INACTIVE)
            continue;
        if (b->alloc_seq && b->alloc_seq >= first)
            continue;
        if (live_at(m, b->addr) != CK_NONE)
            continue;
        uint32_t x;
        if (open_storage(m, NULL, b->addr, b->size, &x) < 0)
            return -ENOMEM;
        ck_storage *st = &m->st[x];
        st->req_size = b->req_size;
        st->alloc_stack = b->stack;
        st->before_window = 1;
        for (size_t g = 0; g < s->nsegments; g++) {
            const vt_segment *sg = &s->segments[g];
            if (i >= sg->first_block && i - sg->first_block < sg->nblocks) {
                st->device = sg->device;
                break;
            }
        }
    }
    return 0;
}

static int build_model(ck_model *m)
{
    const vt_snapshot_data *s = m->s;
    m->root = CK_NONE;
    if (vt__ck_map_init(&m->ids, 1024) < 0)
        return -ENOMEM;
    if (seed_state(m) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        uint32_t x, y;
        switch (e->kind) {
        case VT_EV_ALLOC:
            if (open_storage(m, e, e->addr, e->size, &x) < 0)
                return -ENOMEM;
            m->st[x].req_size = e->req_size;
            break;
        case VT_EV_FREE_REQUESTED:
            x = live_at(m, e->addr);
            if (x != CK_NONE && !m->st[x].external)
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
            if (GROW(m->mark_seq, m->capmarks, m->nmarks + 1) < 0)
                return -ENOMEM;
            if (m->capmarks != cap || !m->mark_time) {
                uint64_t *nt = realloc(m->mark_time, m->capmarks * sizeof *nt);
                if (!nt)
                    return -ENOMEM;
                m->mark_time = nt;
            }
            m->mark_seq[m->nmarks] = e->seq;
            m->mark_time[m->nmarks] = e->time_ns;
            m->nmarks++;
            break;
        }
        case VT_EV_TENSOR_NEW:
            if (on_tensor_new(m, e) < 0)
                return -ENOMEM;
            break;
        case VT_EV_TENSOR_USE:
            x = vt__ck_map_get(&m->ids, e->aux);
            if (x != CK_NONE && m->nodes[x].kind == VT_CHECK_NODE_TENSOR && push_use(m, e, x) < 0)
                return -ENOMEM;
            break;
        case VT_EV_TENSOR_DROP:
            x = vt__ck_map_get(&m->ids, e->aux);
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
        case VT_EV_HOLDER_NEW:
            if (new_node(m, VT_CHECK_NODE_HOLDER, e->aux, e->str, &x) < 0)
                return -ENOMEM;
            m->nholders++;
            break;
        case VT_EV_REF:
            if (resolve(m, e->aux, &x) < 0 || resolve(m, e->aux2, &y) < 0 ||
                push_gop(m, e->seq, CK_OP_REF, x, y, e->str) < 0)
                return -ENOMEM;
            m->nrefs++;
            break;
        case VT_EV_UNREF:
            x = vt__ck_map_get(&m->ids, e->aux);
            y = vt__ck_map_get(&m->ids, e->aux2);
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

static void free_model(ck_model *m)
{
    free(m->st);
    free(m->nodes);
    free(m->uses);
    free(m->gops);
    free(m->mark_seq);
    free(m->mark_time);
    vt__ck_map_free(&m->ids);
    memset(m, 0, sizeof *m);
}

/* ------------------------------------------------------------------------ */
/*  Rules                                                                   */
/* ------------------------------------------------------------------------ */

/* Step of an event: the number of marks at or before it. */
static uint32_t step_of(const ck_model *m, uint64_t seq)
{
    size_t lo = 0, hi = m->nmarks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->mark_seq[mid] <= seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return (uint32_t)lo;
}

/* Upper median of v[0..n) (reorders v); 0 for n == 0. */
static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_u64);
    return v[n / 2];
}

/* First event seq whose time is >= t (events are in time order up to clock
 * jitter between threads), clamped below `limit`. */
static uint64_t seq_at_time(const vt_snapshot_data *s, uint64_t t, uint64_t limit)
{
    size_t lo = 0, hi = s->nevents;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (s->events[mid].time_ns < t)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint64_t seq = lo < s->nevents ? s->events[lo].seq : UINT64_MAX;
    if (limit && seq >= limit)
        seq = limit - 1;
    return seq;
}

static int stack_matches(const vt_snapshot_data *s, uint32_t stack, const char *pat)
{
    for (uint32_t guard = 0; stack && stack < s->nstack_nodes && guard < 4096; guard++) {
        const vt_stack_node *sn = &s->stack_nodes[stack];
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

static int ignored(const ck_model *m, const vt_check_options *opt, uint32_t sti,
                   uint32_t extra_stack)
{
    if (!opt->nignore)
        return 0;
    const ck_storage *st = &m->st[sti];
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

typedef struct findings {
    vt_check_finding *f;
    uint32_t *fst;          /* storage index per finding (LINGER), CK_NONE */
    size_t n, cap, capst;
} findings;

static vt_check_finding *add_finding(findings *fs, uint32_t sti)
{
    if (GROW(fs->f, fs->cap, fs->n + 1) < 0 || GROW(fs->fst, fs->capst, fs->n + 1) < 0)
        return NULL;
    vt_check_finding *f = &fs->f[fs->n];
    memset(f, 0, sizeof *f);
    fs->fst[fs->n] = sti;
    fs->n++;
    f->owner_name = f->last_use_name = "";
    f->nallocs = 1;
    return f;
}

static uint64_t storage_bytes(const ck_storage *st)
{
    return st->req_size ? st->req_size : st->size;
}

static void fill_storage(vt_check_finding *f, const ck_model *m, const ck_storage *st)
{
    f->device = st->device;
    f->external = st->external;
    f->before_window = st->before_window;
    f->freed = st->freed;
    f->addr = st->addr;
    f->bytes = storage_bytes(st);
    f->block_bytes = st->size;
    f->alloc_seq = st->alloc_seq;
    f->alloc_time_ns = st->alloc_time;
    f->alloc_stack = st->alloc_stack;
    f->free_seq = st->free_seq;
    f->free_time_ns = st->free_time;
    f->free_stack = st->free_stack;
    f->ntensors = st->ntensors;
    if (st->owner != CK_NONE) {
        f->owner_id = m->nodes[st->owner].id;
        f->owner_name = vt__ck_string(m->s, m->nodes[st->owner].name);
    }
}

static int rule_linger(ck_model *m, const vt_check_options *opt, findings *fs,
                       vt_check_report *r)
{
    int steps = opt->grace_mode == VT_CHECK_GRACE_STEPS ||
                (opt->grace_mode == VT_CHECK_GRACE_AUTO && m->nmarks > 0);
    r->grace_mode = steps ? VT_CHECK_GRACE_STEPS : VT_CHECK_GRACE_TIME;
    uint64_t dur = m->end_time > m->start_time ? m->end_time - m->start_time : 0;
    uint64_t frac = dur / 100 * VT_CHECK_TIME_FRACTION_PCT;
    uint64_t *gaps = NULL;
    size_t capgaps = 0;
    int rc = 0;

    for (size_t i = 0; i < m->nst; i++) {
        ck_storage *st = &m->st[i];
        if (!st->ntensors || !st->nuses)
            continue;
        const ck_use *u = &m->uses[st->first_use];
        const ck_use *last = &u[st->nuses - 1];
        uint64_t end_time = st->freed ? st->free_time : m->end_time;
        if (GROW(gaps, capgaps, st->nuses) < 0) {
            rc = -ENOMEM;
            break;
        }
        /* Median time gap between uses. */
        size_t ng = 0;
        for (uint32_t k = 1; k < st->nuses; k++)
            gaps[ng++] = u[k].time >= u[k - 1].time ? u[k].time - u[k - 1].time : 0;
        uint64_t gap_ns = median(gaps, ng);

        uint32_t j = step_of(m, last->seq), need = 0, unused = 0, gap_steps = 0;
        uint64_t from_seq = 0, from_time = 0;
        int hit = 0;
        if (steps) {
            /* Median distance between consecutive distinct use steps. */
            ng = 0;
            uint32_t prev = step_of(m, u[0].seq);
            for (uint32_t k = 1; k < st->nuses; k++) {
                uint32_t sk = step_of(m, u[k].seq);
                if (sk != prev)
                    gaps[ng++] = sk - prev;
                prev = sk;
            }
            gap_steps = (uint32_t)median(gaps, ng);
            if (opt->grace_mode == VT_CHECK_GRACE_STEPS)
                need = opt->grace_steps;
            else
                need = gap_steps > 1 ? gap_steps : 1;
            /* Complete steps after j the storage outlived: step k is complete
             * and outlived when mark k+1 exists and precedes the free. */
            uint32_t f = st->freed ? step_of(m, st->free_seq) : (uint32_t)m->nmarks;
            unused = f > j + 1 ? f - j - 1 : 0;
            /* Alive at mark j+1+need (0-based index j+need). */
            if ((size_t)j + need < m->nmarks) {
                uint64_t ms = m->mark_seq[j + need];
                if (!st->freed || st->free_seq > ms) {
                    hit = 1;
                    from_seq = ms;
                    from_time = m->mark_time[j + need];
                }
            }
        } else {
            uint64_t t = opt->grace_mode == VT_CHECK_GRACE_TIME ? opt->grace_ns : VT_CHECK_TIME_MIN_NS;
            if (opt->grace_mode != VT_CHECK_GRACE_TIME) {
                if (gap_ns && gap_ns * VT_CHECK_GAP_FACTOR / VT_CHECK_GAP_FACTOR == gap_ns &&
                    gap_ns * VT_CHECK_GAP_FACTOR > t)
                    t = gap_ns * VT_CHECK_GAP_FACTOR;
                if (frac > t)
                    t = frac;
            }
            if (end_time > last->time && end_time - last->time > t) {
                hit = 1;
                from_time = last->time + t;
                from_seq = seq_at_time(m->s, from_time, st->freed ? st->free_seq : 0);
                if (from_seq <= last->seq)
                    from_seq = last->seq + 1;
            }
        }
        if (!hit)
            continue;
        if (ignored(m, opt, (uint32_t)i, last->stack)) {
            r->nignored++;
            st->ignore_counted = 1;
            continue;
        }
        vt_check_finding *f = add_finding(fs, (uint32_t)i);
        if (!f) {
            rc = -ENOMEM;
            break;
        }
        fill_storage(f, m, st);
        f->rule = VT_CHECK_RULE_LINGER;
        f->grace_mode = r->grace_mode;
        f->last_use_seq = last->seq;
        f->last_use_time_ns = last->time;
        f->last_use_stack = last->stack;
        f->last_use_tensor = m->nodes[last->node].id;
        f->last_use_name = vt__ck_string(m->s, m->nodes[last->node].name);
        f->nuses = st->nuses;
        f->last_use_step = j;
        f->usual_gap_steps = gap_steps;
        f->usual_gap_ns = gap_ns;
        f->steps_unused = unused;
        f->linger_from_seq = from_seq;
        f->linger_from_time_ns = from_time;
        f->linger_ns = end_time > last->time ? end_time - last->time : 0;
        f->byte_seconds = (double)f->bytes * ((double)f->linger_ns / 1e9);
        f->path_seq = st->freed ? from_seq : UINT64_MAX;
        st->lingered = 1;
    }
    free(gaps);
    return rc;
}

/* ------------------------------------------------------------------------ */
/*  PINNED: small live views keeping a dropped base's storage               */
/* ------------------------------------------------------------------------ */

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
    const vt_check_options *opt;
    findings *fs;
    vt_check_report *r;
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
    size_t lo = 0, hi = p->nxs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->xs[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
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
static int pin_views_at(pin_run *pr, vt_check_finding *f, uint64_t q)
{
    const ck_model *m = pr->m;
    pin_scratch *p = pr->p;
    if (GROW(p->live, p->caplive, p->nv) < 0 || GROW(p->span, p->capspan, p->nv) < 0)
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
        vt_check_view *w = &f->views[k];
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
    uint32_t j = step_of(m, s_seq), unused = 0;
    uint64_t from_seq = 0, from_time = 0;
    int hit = 0;
    if (pr->steps) {
        uint32_t fstep = until_seq == UINT64_MAX ? (uint32_t)m->nmarks : step_of(m, until_seq);
        unused = fstep > j + 1 ? fstep - j - 1 : 0;
        if ((size_t)j + pr->need < m->nmarks && m->mark_seq[j + pr->need] < until_seq) {
            hit = 1;
            from_seq = m->mark_seq[j + pr->need];
            from_time = m->mark_time[j + pr->need];
        }
    } else if (until_time > s_time && until_time - s_time > pr->grace_ns) {
        hit = 1;
        from_time = s_time + pr->grace_ns;
        from_seq = seq_at_time(m->s, from_time, until_seq == UINT64_MAX ? 0 : until_seq);
        if (from_seq < s_seq)
            from_seq = s_seq;
    }
    if (!hit)
        return 0;
    *done = 1;
    if (ignored(m, pr->opt, pr->sti, 0)) {
        if (!st->ignore_counted)
            pr->r->nignored++;
        st->ignore_counted = 1;
        return 0;
    }
    vt_check_finding *f = add_finding(pr->fs, pr->sti);
    if (!f)
        return -ENOMEM;
    fill_storage(f, m, st);
    const ck_node *own = &m->nodes[st->owner];
    f->rule = VT_CHECK_RULE_PINNED;
    f->grace_mode = pr->steps ? VT_CHECK_GRACE_STEPS : VT_CHECK_GRACE_TIME;
    if (st->nuses) {
        const ck_use *lu = &m->uses[st->first_use + st->nuses - 1];
        f->last_use_seq = lu->seq;
        f->last_use_time_ns = lu->time;
        f->last_use_stack = lu->stack;
        f->last_use_tensor = m->nodes[lu->node].id;
        f->last_use_name = vt__ck_string(m->s, m->nodes[lu->node].name);
        f->last_use_step = step_of(m, lu->seq);
    }
    f->nuses = st->nuses;
    f->steps_unused = unused;
    f->linger_from_seq = from_seq;
    f->linger_from_time_ns = from_time;
    f->linger_ns = until_time > s_time ? until_time - s_time : 0;
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
        if (GROW(p->v, p->capv, p->nv + 1) < 0 || GROW(p->ev, p->capev, p->nev + 2) < 0 ||
            GROW(p->xs, p->capxs, p->nxs + 2) < 0)
            return -ENOMEM;
        pin_view *v = &p->v[p->nv];
        v->node = t;
        uint64_t lo = 0, hi = 0;   /* bound means data_ptr >= addr; be safe anyway */
        if (n->addr >= st->addr) {
            lo = n->addr - st->addr;
            hi = n->nbytes > UINT64_MAX - lo ? UINT64_MAX : lo + n->nbytes;
        }
        v->lo = lo < pr->bytes ? lo : pr->bytes;
        v->hi = hi < pr->bytes ? hi : pr->bytes;
        if (v->hi < v->lo)
            v->hi = v->lo;
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
    qsort(p->xs, p->nxs, sizeof *p->xs, cmp_u64);
    size_t nx = 0;
    for (size_t k = 0; k < p->nxs; k++)
        if (!nx || p->xs[k] != p->xs[nx - 1])
            p->xs[nx++] = p->xs[k];
    p->nxs = nx;
    size_t tree = 4 * (nx + 1);
    if (GROW(p->cnt, p->capcnt, tree) < 0 || GROW(p->len, p->caplen, tree) < 0)
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

static int rule_pinned(ck_model *m, const vt_check_options *opt, findings *fs,
                       vt_check_report *r)
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
        if (st->ntensors < 2 || st->owner == CK_NONE)
            continue;
        const ck_node *own = &m->nodes[st->owner];
        if (own->base_id || !own->dropped)
            continue;
        pr.sti = (uint32_t)i;
        pr.bytes = storage_bytes(st);
        rc = pin_storage(&pr);
    }
    free(p.v);
    free(p.ev);
    free(p.xs);
    free(p.cnt);
    free(p.len);
    free(p.live);
    free(p.span);
    return rc;
}

/* Call-site grouping key: storages sorted by (alloc_stack, alloc_seq). */
typedef struct site_key {
    uint64_t seq;
    uint32_t stack;
    uint32_t idx;
} site_key;

static int cmp_site(const void *a, const void *b)
{
    const site_key *x = a, *y = b;
    if (x->stack != y->stack)
        return x->stack < y->stack ? -1 : 1;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Fill a call-site finding from its member storages idx[0..n). */
static int site_finding(ck_model *m, findings *fs, unsigned rule, const uint32_t *idx, size_t n,
                        const uint64_t *linger_start, uint64_t from_seq, uint64_t from_time)
{
    uint32_t big = idx[0];
    for (size_t k = 1; k < n; k++)
        if (storage_bytes(&m->st[idx[k]]) > storage_bytes(&m->st[big]))
            big = idx[k];
    vt_check_finding *f = add_finding(fs, CK_NONE);
    if (!f)
        return -ENOMEM;
    fill_storage(f, m, &m->st[big]);
    f->rule = rule;
    f->nallocs = (uint32_t)n;
    f->bytes = f->block_bytes = 0;
    f->freed = 1;
    double bs = 0;
    uint64_t maxlinger = 0;
    for (size_t k = 0; k < n; k++) {
        ck_storage *st = &m->st[idx[k]];
        st->claimed = 1;
        f->bytes += storage_bytes(st);
        f->block_bytes += st->size;
        uint64_t end = st->freed ? st->free_time : m->end_time;
        uint64_t lg = end > linger_start[k] ? end - linger_start[k] : 0;
        bs += (double)storage_bytes(st) * ((double)lg / 1e9);
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
    f->last_use_seq = f->alloc_seq;
    f->last_use_time_ns = f->alloc_time_ns;
    f->last_use_stack = f->alloc_stack;
    f->last_use_step = step_of(m, f->alloc_seq);
    f->linger_from_seq = from_seq;
    f->linger_from_time_ns = from_time;
    f->linger_ns = maxlinger;
    f->byte_seconds = bs;
    f->path_seq = UINT64_MAX;
    return 0;
}

static int rule_native(ck_model *m, const vt_check_options *opt, unsigned rules,
                       findings *fs, vt_check_report *r)
{
    uint32_t *idx = malloc((m->nst ? m->nst : 1) * sizeof *idx);
    uint64_t *tmp = malloc((m->nst ? m->nst : 1) * sizeof *tmp);
    uint32_t *grp = malloc((m->nst ? m->nst : 1) * sizeof *grp);
    uint64_t *lstart = malloc((m->nst ? m->nst : 1) * sizeof *lstart);
    int rc = 0;
    if (!idx || !tmp || !grp || !lstart) {
        rc = -ENOMEM;
        goto out;
    }
    site_key *keys = malloc((m->nst ? m->nst : 1) * sizeof *keys);
    if (!keys) {
        rc = -ENOMEM;
        goto out;
    }
    size_t n = 0;
    for (size_t i = 0; i < m->nst; i++)
        if (!m->st[i].external && !m->st[i].implicit && !m->st[i].before_window)
            keys[n++] = (site_key){ m->st[i].alloc_seq, m->st[i].alloc_stack, (uint32_t)i };
    if (n)
        qsort(keys, n, sizeof *keys, cmp_site);
    for (size_t i = 0; i < n; i++)
        idx[i] = keys[i].idx;
    free(keys);

    uint64_t dur = m->end_time > m->start_time ? m->end_time - m->start_time : 0;
    uint64_t frac = dur / 100 * VT_CHECK_TIME_FRACTION_PCT;

    for (size_t a = 0; a < n && !rc;) {
        size_t b = a;
        while (b < n && m->st[idx[b]].alloc_stack == m->st[idx[a]].alloc_stack)
            b++;
        const uint32_t *site = &idx[a];
        size_t ns = b - a;
        a = b;
        if (opt->nignore && ignored(m, opt, site[0], 0)) {
            r->nignored += ns;
            continue;
        }

        if (rules & VT_CHECK_RULE_OUTLIER) {
            /* Short-lived siblings vs. outliers that outlived a complete step. */
            size_t nshort = 0, nout = 0, nt = 0;
            uint64_t thr = VT_CHECK_TIME_MIN_NS;
            if (!m->nmarks) {
                for (size_t k = 0; k < ns; k++)
                    if (m->st[site[k]].freed)
                        tmp[nt++] = m->st[site[k]].free_time - m->st[site[k]].alloc_time;
                uint64_t med = median(tmp, nt);
                if (med * VT_CHECK_GAP_FACTOR > thr)
                    thr = med * VT_CHECK_GAP_FACTOR;
            }
            nt = 0;
            for (size_t k = 0; k < ns; k++) {
                const ck_storage *st = &m->st[site[k]];
                int is_short = 0, is_out = 0;
                if (m->nmarks) {
                    uint32_t as = step_of(m, st->alloc_seq);
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
            if (nout && nshort >= 2 && nshort > nout) {
                uint64_t med = median(tmp, nt);
                uint64_t from_seq = UINT64_MAX, from_time = 0;
                for (size_t k = 0; k < nout; k++) {
                    const ck_storage *st = &m->st[grp[k]];
                    lstart[k] = st->alloc_time + med;
                    uint64_t fs_ = st->alloc_seq, ft = st->alloc_time + thr;
                    if (m->nmarks) {
                        uint32_t as = step_of(m, st->alloc_seq);
                        fs_ = m->mark_seq[as + 1];
                        ft = m->mark_time[as + 1];
                    } else {
                        fs_ = seq_at_time(m->s, ft, 0);
                    }
                    if (fs_ < from_seq) {
                        from_seq = fs_;
                        from_time = ft;
                    }
                }
                rc = site_finding(m, fs, VT_CHECK_RULE_OUTLIER, grp, nout, lstart,
                                  from_seq, from_time);
                if (rc)
                    break;
            }
        }

        if (rules & VT_CHECK_RULE_NEVER_FREED) {
            /* Alive at the end, allocated inside the loop, from >= 2 steps. */
            size_t ng = 0, nsteps = 0;
            uint32_t last_step = UINT32_MAX;
            uint64_t tmin = UINT64_MAX, tmax = 0;
            for (size_t k = 0; k < ns; k++) {
                const ck_storage *st = &m->st[site[k]];
                if (st->freed || st->claimed)
                    continue;
                if (m->nmarks) {
                    uint32_t as = step_of(m, st->alloc_seq);
                    if (as == 0 || as >= m->nmarks)
                        continue;
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
            int hit = m->nmarks ? nsteps >= 2 : (ng >= 2 && frac && tmax - tmin >= frac);
            if (hit) {
                for (size_t k = 0; k < ng; k++)
                    lstart[k] = m->st[grp[k]].alloc_time;
                const ck_storage *first = &m->st[grp[0]];
                uint64_t from_seq = first->alloc_seq, from_time = first->alloc_time;
                if (m->nmarks) {
                    uint32_t as = step_of(m, first->alloc_seq);
                    from_seq = m->mark_seq[as];
                    from_time = m->mark_time[as];
                }
                rc = site_finding(m, fs, VT_CHECK_RULE_NEVER_FREED, grp, ng, lstart,
                                  from_seq, from_time);
            }
        }
    }
out:
    free(idx);
    free(tmp);
    free(grp);
    free(lstart);
    return rc;
}

/* ------------------------------------------------------------------------ */
/*  Entry points                                                            */
/* ------------------------------------------------------------------------ */

void vt_check_options_init(vt_check_options *opt)
{
    memset(opt, 0, sizeof *opt);
    opt->grace_mode = VT_CHECK_GRACE_AUTO;
    opt->rules = VT_CHECK_RULES_AUTO;
    opt->max_paths = 3;
    opt->max_visit = 4096;
    opt->pinned_ratio = VT_CHECK_PINNED_RATIO;
}

const char *vt_check_rule_name(unsigned rule)
{
    switch (rule) {
    case VT_CHECK_RULE_LINGER: return "linger";
    case VT_CHECK_RULE_NEVER_FREED: return "never-freed";
    case VT_CHECK_RULE_OUTLIER: return "outlier";
    case VT_CHECK_RULE_PINNED: return "pinned";
    default: return "?";
    }
}

int vt_check_parse_rules(const char *text, unsigned *rules)
{
    if (!text || !*text)
        return -EINVAL;
    unsigned acc = 0;
    const char *p = text;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 6 && !strncmp(p, "linger", n)) acc |= VT_CHECK_RULE_LINGER;
        else if (n == 11 && !strncmp(p, "never-freed", n)) acc |= VT_CHECK_RULE_NEVER_FREED;
        else if (n == 7 && !strncmp(p, "outlier", n)) acc |= VT_CHECK_RULE_OUTLIER;
        else if (n == 6 && !strncmp(p, "pinned", n)) acc |= VT_CHECK_RULE_PINNED;
        else if (n == 3 && !strncmp(p, "all", n)) acc |= VT_CHECK_RULES_ALL;
        else if (n == 4 && !strncmp(p, "auto", n)) acc |= 0;
        else return -EINVAL;
        p += n;
        if (*p == ',')
            p++;
    }
    *rules = acc;
    return 0;
}

int vt_check_parse_pinned_ratio(const char *text, double *ratio)
{
    if (!text || !*text || !ratio || text[0] == '-' || text[0] == '+')
        return -EINVAL;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text)
        return -EINVAL;
    if (!strcmp(end, "%"))
        v /= 100;
    else if (*end)
        return -EINVAL;
    if (!(v > 0) || v > 1)
        return -EINVAL;
    *ratio = v;
    return 0;
}

int vt_check_parse_grace(const char *text, vt_check_options *opt)
{
    if (!text || !*text)
        return -EINVAL;
    if (!strcmp(text, "auto")) {
        opt->grace_mode = VT_CHECK_GRACE_AUTO;
        return 0;
    }
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || !(v >= 0) || v > 1e12 || text[0] == '-' || text[0] == '+')
        return -EINVAL;
    if (!*end || !strcmp(end, "steps") || !strcmp(end, "step")) {
        if (v != (double)(uint32_t)v)
            return -EINVAL;
        opt->grace_mode = VT_CHECK_GRACE_STEPS;
        opt->grace_steps = (uint32_t)v;
        return 0;
    }
    double scale;
    if (!strcmp(end, "s")) scale = 1e9;
    else if (!strcmp(end, "ms")) scale = 1e6;
    else if (!strcmp(end, "us")) scale = 1e3;
    else if (!strcmp(end, "ns")) scale = 1;
    else if (!strcmp(end, "m") || !strcmp(end, "min")) scale = 60e9;
    else return -EINVAL;
    double ns = v * scale;
    if (ns > 1.8e19)
        return -EINVAL;
    opt->grace_mode = VT_CHECK_GRACE_TIME;
    opt->grace_ns = (uint64_t)(ns + 0.5);
    return 0;
}

static int cmp_rank(const void *a, const void *b)
{
    const vt_check_finding *x = a, *y = b;
    if (x->byte_seconds != y->byte_seconds)
        return x->byte_seconds > y->byte_seconds ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->linger_from_seq < y->linger_from_seq ? -1 : x->linger_from_seq > y->linger_from_seq;
}

void vt_check_report_free(vt_check_report *r)
{
    if (!r)
        return;
    for (size_t i = 0; i < r->nfindings; i++) {
        vt_check_finding *f = &r->findings[i];
        for (size_t p = 0; p < f->npaths; p++)
            free(f->paths[p].steps);
        free(f->paths);
        free(f->views);
    }
    free(r->findings);
    free(r);
}

int vt_check_run(const vt_snapshot_data *s, const vt_check_options *opt_in,
                 vt_check_report **out, char *err, size_t errlen)
{
    if (!s || !out) {
        seterr(err, errlen, "vt_check_run: no snapshot");
        return -EINVAL;
    }
    *out = NULL;
    vt_check_options opt;
    if (opt_in)
        opt = *opt_in;
    else
        vt_check_options_init(&opt);
    if (!opt.max_paths)
        opt.max_paths = 3;
    if (!opt.max_visit)
        opt.max_visit = 4096;
    if (s->nevents > UINT32_MAX / 2 || s->nblocks > UINT32_MAX / 2) {
        seterr(err, errlen, "vt_check_run: snapshot too large (%zu events)", s->nevents);
        return -EOVERFLOW;
    }

    ck_model m;
    memset(&m, 0, sizeof m);
    m.s = s;
    vt_check_report *r = calloc(1, sizeof *r);
    findings fs = { 0 };
    int rc = -ENOMEM;
    if (!r)
        goto fail;
    if (build_model(&m) < 0 || group_uses(&m) < 0)
        goto fail;

    m.start_time = s->nevents ? s->events[0].time_ns : 0;
    m.end_time = s->meta.snapshot_time_ns;
    if (s->nevents && s->events[s->nevents - 1].time_ns > m.end_time)
        m.end_time = s->events[s->nevents - 1].time_ns;
    if (m.end_time < m.start_time)
        m.end_time = m.start_time;

    unsigned rules = opt.rules & VT_CHECK_RULES_ALL;
    if (!rules)
        rules = m.ntensors ? (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED)
                           : (VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER);
    r->rules_run = rules;
    r->grace_mode = opt.grace_mode;
    r->grace_user = opt.grace_mode != VT_CHECK_GRACE_AUTO;
    if (opt.grace_mode == VT_CHECK_GRACE_STEPS)
        r->grace_steps = opt.grace_steps;
    if (opt.grace_mode == VT_CHECK_GRACE_TIME)
        r->grace_ns = opt.grace_ns;
    r->nmarks = m.nmarks;
    r->nstorages = m.nst;
    r->ntensors = m.ntensors;
    r->nholders = m.nholders;
    r->nrefs = m.nrefs;
    r->start_time_ns = m.start_time;
    r->end_time_ns = m.end_time;
    r->pinned_ratio = opt.pinned_ratio > 0 && opt.pinned_ratio <= 1 ? opt.pinned_ratio
                                                                    : VT_CHECK_PINNED_RATIO;

    if (rules & VT_CHECK_RULE_LINGER) {
        if (rule_linger(&m, &opt, &fs, r) < 0)
            goto fail;
    } else {
        r->grace_mode = opt.grace_mode == VT_CHECK_GRACE_TIME || !m.nmarks
                            ? VT_CHECK_GRACE_TIME : VT_CHECK_GRACE_STEPS;
    }
    /* After LINGER: it cuts the pinned intervals of the storages it flagged. */
    if (rules & VT_CHECK_RULE_PINNED)
        if (rule_pinned(&m, &opt, &fs, r) < 0)
            goto fail;
    if (rules & (VT_CHECK_RULE_NEVER_FREED | VT_CHECK_RULE_OUTLIER))
        if (rule_native(&m, &opt, rules, &fs, r) < 0)
            goto fail;

    r->findings = fs.f;
    r->nfindings = fs.n;
    fs.f = NULL;
    if (vt__ck_paths(&m, r, fs.fst, &opt) < 0)
        goto fail;

    if (r->nfindings)
        qsort(r->findings, r->nfindings, sizeof *r->findings, cmp_rank);
    for (size_t i = 0; i < r->nfindings; i++) {
        r->total_bytes += r->findings[i].rule == VT_CHECK_RULE_PINNED
                              ? r->findings[i].wasted_bytes : r->findings[i].bytes;
        r->total_byte_seconds += r->findings[i].byte_seconds;
    }
    free(fs.fst);
    free_model(&m);
    *out = r;
    return 0;

fail:
    seterr(err, errlen, "vt_check_run: out of memory");
    free(fs.f);
    free(fs.fst);
    vt_check_report_free(r);
    free_model(&m);
    return rc;
}
