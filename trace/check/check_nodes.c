/*
 * trace/check/check_nodes.c - pass 1's nodes (check_model.c walks the
 * events): the tensors and holders, each tensor bound to the storage that
 * contains its data, their uses, and the graph operations (new, drop, ref,
 * unref) that pass 2 (check_paths.c) replays. Nodes are found by the id the
 * tracker gave them (m->ids).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"
#include "event_stream.h"

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
    if (new_node(m, VT_CHECK_NODE_HOLDER, id, 0, out) < 0)
        return -ENOMEM;
    m->nodes[*out].implicit = 1;
    return 0;
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
    m->st[st].last_use_thread = e->thread;
    m->st[st].last_use_seq = e->seq;
    return 0;
}

/* A tensor's node bound to the storage that contains it (a storage of its
 * own, implicit, where none does): `e` its TENSOR_NEW. */
static int bind_tensor(ck_model *m, const vt__event *e, uint32_t *out)
{
    /* One that stands for memory only a saved tensor keeps (format 1.8):
     * it does not take the storage over. */
    const uint64_t said = VT_TENSOR_BASE(e->aux2);
    const int saved_only = said == VT_TENSOR_SAVED_ONLY;
    uint32_t base = CK_NONE;
    if (said && !saved_only) {
        base = vt__u64map_get(&m->ids, said);
        if (base != CK_NONE && m->nodes[base].kind != VT_CHECK_NODE_TENSOR)
            base = CK_NONE;
    }
    uint32_t x;
    if (new_node(m, VT_CHECK_NODE_TENSOR, e->aux, e->str, &x) < 0)
        return -ENOMEM;
    m->ntensors++;
    ck_node *n = &m->nodes[x];
    n->base = base;
    n->base_id = saved_only ? 0 : said;
    n->addr = e->addr;
    n->nbytes = e->size;
    n->new_seq = e->seq;
    n->new_time = e->time_ns;
    n->made_stack = e->stack;
    if (e->addr) {
        uint32_t st = vt__ck_live_containing(m, e->addr);
        if (st == CK_NONE) {
            if (vt__ck_open_implicit(m, e->addr, e->size, e->device, &st) < 0)
                return -ENOMEM;
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
        /* Owner: the first non-view tensor, else the first tensor; a
         * non-view tensor made after the owner was dropped takes over (the
         * storage is its now: nn.Parameter(torch.empty(n)) binds the
         * parameter after the temporary it wrapped died). */
        const ck_node *own = s->owner != CK_NONE ? &m->nodes[s->owner] : NULL;
        if (!own || (!said && (own->base_id || own->dropped)))
            s->owner = x;
    }
    *out = x;
    return push_gop(m, e->seq, CK_OP_NEW, x, 0, 0);
}

static int on_tensor_new(ck_model *m, const vt__event *e)
{
    /* Declared again (format 1.11): known from its first declaration in
     * the window, or bound before the first event (seed_declared_again). */
    if (e->aux2 & VT_TENSOR_AGAIN)
        return 0;
    uint32_t x;
    if (bind_tensor(m, e, &x) < 0)
        return -ENOMEM;
    /* a saved tensor's stand-in is found by a walk long after the
     * storage's last use, which its making is not */
    if (e->aux2 != VT_TENSOR_SAVED_ONLY && push_use(m, e, x) < 0)
        return -ENOMEM;
    return 0;
}

/* The tensors the tracker declared again (TENSOR_NEW with VT_TENSOR_AGAIN,
 * format 1.11) whose first declaration the ring overwrote: made before the
 * window and alive in it. Bound before the first event, each to the
 * storage it was on (opened from before the window: seed_lifetimes), so
 * that every event naming them (uses, drops, references, renames) finds a
 * tensor, with a use standing for their last one before the window (its
 * time and stack unknown: at the window's start, no stack); a use in the
 * window comes after it. The storage keeps the longest rest the tracker
 * saw its tensor take between uses (the event's stream field), which the
 * linger rule's usual gap takes in: a validation batch used every 500
 * steps is not flagged in a window of 200. One more pass over the events,
 * made only where the ring overwrote some. */
int vt__ck_seed_declared_again(ck_model *m)
{
    if (!m->s->meta.events_overwritten)
        return 0;
    vt__u64map known;
    if (vt__u64map_init(&known, 1024) < 0)
        return -ENOMEM;
    vt__event *again = NULL, e;
    size_t n = 0, cap = 0;
    uint64_t first_seq = 0, first_time = 0;
    int rc = vt__event_stream_rewind(m->es), any = 0;
    while (rc == 0 && (rc = vt__event_stream_next(m->es, &e)) == 1) {
        rc = 0;
        if (!any) {
            any = 1;
            first_seq = e.seq;
            first_time = e.time_ns;
        }
        if (e.kind != VT_EV_TENSOR_NEW || vt__u64map_get(&known, e.aux) != VT__U64MAP_NONE)
            continue;
        /* a tensor's first declaration in the window: its own, or the
         * first of those again (its own comes before any again) */
        if (vt__u64map_put(&known, e.aux, 1) < 0 ||
            ((e.aux2 & VT_TENSOR_AGAIN) && CK_GROW(again, cap, n + 1) < 0)) {
            rc = -ENOMEM;
            break;
        }
        if (e.aux2 & VT_TENSOR_AGAIN)
            again[n++] = e;
    }
    vt__u64map_free(&known);
    for (size_t i = 0; i < n && rc == 0; i++) {
        uint32_t x;
        vt__event *a = &again[i];
        uint64_t rest = a->stream;
        uint32_t made = a->stack;
        a->seq = first_seq;
        a->time_ns = first_time;
        a->stack = 0;   /* the use standing for its last one: where, unknown */
        if (bind_tensor(m, a, &x) < 0) {
            rc = -ENOMEM;
            break;
        }
        m->nodes[x].made_stack = made;   /* what GROWTH groups a stackless storage by */
        uint32_t st = m->nodes[x].storage;
        if (VT_TENSOR_BASE(a->aux2) == VT_TENSOR_SAVED_ONLY || st == CK_NONE)
            continue;
        if (rest > m->st[st].again_rest)
            m->st[st].again_rest = rest;
        size_t u = m->nuses;
        if (push_use(m, a, x) < 0) {
            rc = -ENOMEM;
            break;
        }
        m->uses[u].before_window = 1;
    }
    free(again);
    return rc < 0 ? rc : 0;
}

/* The events of the tensors and holders (TENSOR_*, HOLDER_NEW, REF, UNREF). */
int vt__ck_on_graph_event(ck_model *m, const vt__event *e)
{
    uint32_t x, y;
    switch (e->kind) {
    case VT_EV_TENSOR_NEW:
        return on_tensor_new(m, e);
    case VT_EV_TENSOR_USE:
        x = vt__u64map_get(&m->ids, e->aux);
        if (x != CK_NONE && m->nodes[x].kind == VT_CHECK_NODE_TENSOR && push_use(m, e, x) < 0)
            return -ENOMEM;
        break;
    case VT_EV_TENSOR_DROP:
        x = vt__u64map_get(&m->ids, e->aux);
        /* An implicit holder that drops is a tensor the window saw only
         * referenced (a graph's top tensor a walk started from, made before
         * the ring's oldest event): what held through it holds no longer. */
        if (x != CK_NONE && m->nodes[x].implicit && m->nodes[x].kind == VT_CHECK_NODE_HOLDER)
            m->nodes[x].kind = VT_CHECK_NODE_TENSOR;
        if (x == CK_NONE || m->nodes[x].kind != VT_CHECK_NODE_TENSOR)
            break;
        if (!m->nodes[x].dropped) {
            m->nodes[x].dropped = 1;
            m->nodes[x].drop_seq = e->seq;
            m->nodes[x].drop_time = e->time_ns;
        }
        return push_gop(m, e->seq, CK_OP_DROP, x, 0, 0);
    case VT_EV_TENSOR_NAME:
        /* The node keeps one name: the latest. Findings are made after the
         * whole walk, so owner, last use and path steps all show the name
         * the tensor has at the end of the snapshot, also for what
         * happened before the rename. A holder takes it only where it has
         * none: one whose HOLDER_NEW the ring overwrote (the tracker names
         * its holders again at a snapshot's walk, after their refs); a
         * named holder and an unknown id are left alone. */
        x = vt__u64map_get(&m->ids, e->aux);
        if (x != CK_NONE && (m->nodes[x].kind == VT_CHECK_NODE_TENSOR ||
                             (m->nodes[x].kind == VT_CHECK_NODE_HOLDER && !m->nodes[x].name)))
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
    return 0;
}
