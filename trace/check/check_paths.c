/*
 * trace/check/check_paths.c - retention paths: which live chain of references
 * holds a storage at a given moment (see check.h, "Retention paths").
 *
 * The graph changes over time (REF/UNREF, tensors created and dropped), and
 * each finding asks about one moment. Instead of snapshotting the graph, the
 * graph operations are replayed once, in order, and each finding's search
 * runs when the replay reaches its moment. Each edge is O(1) to add and to
 * remove (a pool of edges, doubly linked into the target's incoming list,
 * plus a (from, to) map to the most recent such edge); each search visits at
 * most max_visit nodes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

/* The rules whose findings are held by something the program keeps: their
 * holders are looked up (the native rules name allocations with no tensor:
 * nothing to hold them; but never-freed under track(), in the time after
 * the last mark, names a storage of tensors: check_native.c). */
#define PATH_RULES (VT_CHECK_RULE_LINGER | VT_CHECK_RULE_PINNED | VT_CHECK_RULE_CYCLE | \
                    VT_CHECK_RULE_TAPE | VT_CHECK_RULE_GROWTH | VT_CHECK_RULE_NEVER_FREED)

typedef struct ck_edge {
    uint32_t from, to;
    uint32_t label;         /* string index */
    uint32_t prev, next;    /* in the target's incoming list */
    uint32_t older;         /* previous live edge with the same (from, to) */
} ck_edge;

typedef struct graph {
    ck_model *m;
    ck_edge *e;
    size_t ne, cap;
    uint32_t free_head;     /* recycled edges, linked by next */
    vt__u64map pairs;       /* (from << 32 | to) -> most recent live edge */
    uint32_t gen;           /* search generation (ck_node.gen) */
    uint32_t *queue;
    size_t capq;
    uint64_t budget;        /* visits left for all searches together */
    uint64_t *held_until;   /* per finding, or NULL: see root_held_until() */
} graph;

/* All searches together visit at most this many nodes; past it each search
 * is cut to CK_SMALL_VISIT nodes, so thousands of findings over a huge graph
 * stay linear. */
#define CK_VISIT_BUDGET 20000000ull
#define CK_SMALL_VISIT 64u

static uint64_t pair_key(uint32_t from, uint32_t to)
{
    return (uint64_t)from << 32 | to;
}

static int add_edge(graph *g, uint32_t from, uint32_t to, uint32_t label)
{
    uint32_t x;
    if (g->free_head != CK_NONE) {
        x = g->free_head;
        g->free_head = g->e[x].next;
    } else {
        if (CK_GROW(g->e, g->cap, g->ne + 1) < 0)
            return -ENOMEM;
        x = (uint32_t)g->ne++;
    }
    ck_node *t = &g->m->nodes[to];
    ck_edge *ed = &g->e[x];
    ed->from = from;
    ed->to = to;
    ed->label = label;
    ed->prev = CK_NONE;
    ed->next = t->in_head;
    if (t->in_head != CK_NONE)
        g->e[t->in_head].prev = x;
    t->in_head = x;
    ed->older = vt__u64map_get(&g->pairs, pair_key(from, to));
    return vt__u64map_put(&g->pairs, pair_key(from, to), x);
}

static void remove_edge(graph *g, uint32_t from, uint32_t to)
{
    uint64_t key = pair_key(from, to);
    uint32_t x = vt__u64map_get(&g->pairs, key);
    if (x == CK_NONE)
        return;
    ck_edge *ed = &g->e[x];
    if (ed->prev != CK_NONE)
        g->e[ed->prev].next = ed->next;
    else
        g->m->nodes[to].in_head = ed->next;
    if (ed->next != CK_NONE)
        g->e[ed->next].prev = ed->prev;
    if (ed->older == CK_NONE)
        vt__u64map_del(&g->pairs, key);
    else
        vt__u64map_put(&g->pairs, key, ed->older); /* key exists: cannot fail */
    ed->next = g->free_head;
    g->free_head = x;
}

static void apply(graph *g, const ck_gop *op, int *rc)
{
    ck_node *nodes = g->m->nodes;
    switch (op->op) {
    case CK_OP_NEW: nodes[op->a].alive = 1; break;
    case CK_OP_DROP: nodes[op->a].alive = 0; break;
    case CK_OP_REF:
        if (add_edge(g, op->a, op->b, op->label) < 0)
            *rc = -ENOMEM;
        break;
    case CK_OP_UNREF: remove_edge(g, op->a, op->b); break;
    default: break;
    }
}

/* A live source: holders always, tensors between NEW and DROP. */
static int live(const ck_node *n)
{
    return n->alive;
}

static int visit(graph *g, uint32_t x, uint32_t parent, uint32_t label, uint32_t depth,
                 size_t *nq)
{
    ck_node *n = &g->m->nodes[x];
    n->gen = g->gen;
    n->parent = parent;
    n->plabel = label;
    n->depth = depth;
    if (CK_GROW(g->queue, g->capq, *nq + 1) < 0)
        return -ENOMEM;
    g->queue[(*nq)++] = x;
    return 0;
}

static void fill_node_step(const ck_model *m, vt__check_step *st, uint32_t x, uint32_t label)
{
    const ck_node *n = &m->nodes[x];
    memset(st, 0, sizeof *st);
    st->kind = n->kind;
    st->id = n->id;
    st->name = vt__ck_string(m->s, n->name);
    st->label = vt__ck_string(m->s, label);
    st->base_name = "";
    if (n->kind == VT_CHECK_NODE_TENSOR && n->base_id) {
        st->base_id = n->base_id;
        if (n->base != CK_NONE)
            st->base_name = vt__ck_string(m->s, m->nodes[n->base].name);
    }
}

/* Append the path (optional `head` node with edge label `head_label`, then
 * start, start's parent ... the storage) to finding f. */
static int emit_path(graph *g, vt__check_finding *f, uint32_t sti, uint32_t head,
                     uint32_t head_label, uint32_t start, uint8_t cycle, uint8_t truncated)
{
    const ck_model *m = g->m;
    size_t len = m->nodes[start].depth + 2 + (head != CK_NONE); /* nodes + storage */
    vt__check_path *np = realloc(f->paths, (f->npaths + 1) * sizeof *np);
    if (!np)
        return -ENOMEM;
    f->paths = np;
    vt__check_path *p = &f->paths[f->npaths];
    p->steps = calloc(len, sizeof *p->steps);
    if (!p->steps)
        return -ENOMEM;
    f->npaths++;
    p->cycle = cycle;
    p->truncated = truncated;
    size_t k = 0;
    if (head != CK_NONE)
        fill_node_step(m, &p->steps[k++], head, head_label);
    for (uint32_t x = start; x != CK_NONE && k + 1 < len; x = m->nodes[x].parent)
        fill_node_step(m, &p->steps[k++], x, m->nodes[x].plabel);
    vt__check_step *st = &p->steps[k++];
    st->kind = VT_CHECK_NODE_STORAGE;
    st->id = m->st[sti].addr;
    st->name = st->label = st->base_name = "";
    st->bytes = f->bytes;
    p->nsteps = k;
    return 0;
}

/* Is node y on the chain from x to the storage? */
static int on_chain(const ck_model *m, uint32_t x, uint32_t y)
{
    for (; x != CK_NONE; x = m->nodes[x].parent)
        if (x == y)
            return 1;
    return 0;
}

/* A holder named by its type alone: a container's. */
static int bare_container(const char *name)
{
    static const char *const bare[] = { "dict", "list", "tuple", "set", "frozenset", "deque",
                                        "cell" };
    for (size_t i = 0; i < sizeof bare / sizeof *bare; i++)
        if (!strcmp(name, bare[i]))
            return 1;
    return 0;
}

/* Whether an edge's label is a hop inside an autograd graph: from a node to
 * the next, or to a tensor it saved (a node nothing recorded holds is held
 * by a tensor's grad_fn, or by the node of a later op). */
static int graph_hop(const char *label)
{
    static const char *const hops[] = { "next_functions[", "SavedTensor ", "saved_tensors[",
                                        "variable" };
    for (size_t i = 0; i < sizeof hops / sizeof *hops; i++)
        if (!strncmp(label, hops[i], strlen(hops[i])))
            return 1;
    return 0;
}

/* A root that says nothing of who holds it: a tensor, or a bare container
 * (its holder name is its type's), found with no referrer. Such a container is held
 * where the walk cannot look: a call's keyword arguments on a running
 * frame's value stack (Lightning's `optimizer_step(model=, closure=)`), a C
 * extension's field. Its path names only what it leads through, so a named
 * root (a module, a class, a frame's local) is shown before it. So is an
 * autograd node nothing recorded holds: the graph it is in is held by a tensor
 * whose grad_fn leads there, which a longer chain may name. */
static int anonymous(uint8_t kind, const char *name, const char *label)
{
    /* a tensor nothing recorded holds is held from C++ (a graph's output
     * another node saved): a chain through its grad_fn reaches a graph a
     * named root may keep as well (tbptt_retain.py lstm: the module's
     * `hidden`, one run in six behind a shorter chain from such a tensor) */
    if (kind == VT_CHECK_NODE_TENSOR)
        return 1;
    return kind == VT_CHECK_NODE_HOLDER && (bare_container(name) || graph_hop(label));
}

static int anonymous_root(const ck_model *m, uint32_t x)
{
    const ck_node *n = &m->nodes[x];
    return anonymous(n->kind, vt__ck_string(m->s, n->name), vt__ck_string(m->s, n->plabel));
}

/* The latest moment before now at which root x (nothing live holds it
 * now) still had a holder: the seq before the drop of the last tensor
 * that held it (an autograd node: the tensor whose grad_fn it was); 0 if
 * none did. */
static uint64_t root_held_until(const graph *g, uint32_t x)
{
    const ck_model *m = g->m;
    uint64_t until = 0;
    for (uint32_t e = m->nodes[x].in_head; e != CK_NONE; e = g->e[e].next) {
        const ck_node *src = &m->nodes[g->e[e].from];
        if (src->kind == VT_CHECK_NODE_TENSOR && src->dropped && src->drop_seq > until + 1)
            until = src->drop_seq - 1;
    }
    return until;
}

/* Breadth-first search backwards from storage sti, at the current moment.
 * Roots come shortest first, the named before the anonymous (above). */
static int search(graph *g, vt__check_finding *f, size_t fi, uint32_t sti,
                  const vt__check_options *opt)
{
    ck_model *m = g->m;
    size_t nq = 0, head = 0;
    uint32_t anon[8];   /* anonymous roots, emitted after the named ones */
    size_t nanon = 0;
    size_t max_visit = opt->max_visit;
    if (g->budget < max_visit && max_visit > CK_SMALL_VISIT)
        max_visit = CK_SMALL_VISIT;
    g->gen++;
    for (uint32_t t = m->st[sti].first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
        if (!live(&m->nodes[t]))
            continue;
        if (nq >= max_visit)
            break;
        if (visit(g, t, CK_NONE, 0, 0, &nq) < 0)
            return -ENOMEM;
    }
    int bounded = 0;
    while (head < nq && f->npaths < opt->max_paths) {
        uint32_t x = g->queue[head++];
        int has_in = 0;
        for (uint32_t e = m->nodes[x].in_head; e != CK_NONE; e = g->e[e].next) {
            uint32_t src = g->e[e].from;
            if (!live(&m->nodes[src]))
                continue;
            has_in = 1;
            if (m->nodes[src].gen == g->gen)
                continue;
            if (nq >= max_visit) {
                bounded = 1;
                break;
            }
            if (visit(g, src, x, g->e[e].label, m->nodes[x].depth + 1, &nq) < 0)
                return -ENOMEM;
        }
        if (has_in)
            continue;
        if (g->held_until) {
            uint64_t until = root_held_until(g, x);
            if (until > g->held_until[fi])
                g->held_until[fi] = until;
        }
        if (anonymous_root(m, x)) {
            if (nanon < sizeof anon / sizeof *anon)
                anon[nanon++] = x;
        } else if (emit_path(g, f, sti, CK_NONE, 0, x, 0, 0) < 0) {
            return -ENOMEM;
        }
    }
    for (size_t i = 0; i < nanon && f->npaths < opt->max_paths; i++)
        if (emit_path(g, f, sti, CK_NONE, 0, anon[i], 0, 0) < 0)
            return -ENOMEM;
    g->budget = g->budget > nq ? g->budget - nq : 0;
    if (f->npaths || !nq)
        return 0;
    if (!bounded) {
        /* Every node found has a live referrer: only cycles hold it. Report
         * the shallowest node whose referrer lies on its own chain, from
         * that referrer; from the node itself where it is a tensor and the
         * referrer is not. A cycle through an autograd graph (a tensor its
         * own grad_fn saved) then reads from its tensor whichever of the
         * graph's storages it is found from: "(cycle) tensor 'out'.grad_fn
         * → …", one cause for its output and the inputs its nodes saved,
         * not one per node the search met first. */
        size_t lim = nq < 256 ? nq : 256;
        for (size_t i = 0; i < lim; i++) {
            uint32_t x = g->queue[i];
            unsigned seen = 0;
            for (uint32_t e = m->nodes[x].in_head; e != CK_NONE && seen < 64;
                 e = g->e[e].next, seen++) {
                uint32_t src = g->e[e].from;
                if (!live(&m->nodes[src]) || !on_chain(m, x, src))
                    continue;
                if (m->nodes[x].kind == VT_CHECK_NODE_TENSOR &&
                    m->nodes[src].kind != VT_CHECK_NODE_TENSOR)
                    return emit_path(g, f, sti, CK_NONE, 0, x, 1, 0);
                return emit_path(g, f, sti, src, g->e[e].label, x, 1, 0);
            }
        }
    }
    /* Bound hit (or an odd shape): show the farthest chain found. */
    return emit_path(g, f, sti, CK_NONE, 0, g->queue[nq - 1], 0, 1);
}

/* The paths of the findings with a path rule (``only``: those it marks),
 * each at its path_seq: one sweep over the graph's operations in seq order. */
static int sweep(ck_model *m, vt__check_report *r, const uint32_t *fst,
                 const vt__check_options *opt, const uint8_t *only, uint64_t *held_until)
{
    size_t nqueries = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        if (fst[i] != CK_NONE && (r->findings[i].rule & PATH_RULES) && (!only || only[i]))
            nqueries++;
    if (!nqueries)
        return 0;
    ck_key *q = malloc(nqueries * sizeof *q);
    if (!q)
        return -ENOMEM;
    nqueries = 0;
    for (size_t i = 0; i < r->nfindings; i++)
        if (fst[i] != CK_NONE && (r->findings[i].rule & PATH_RULES) && (!only || only[i]))
            q[nqueries++] = (ck_key){ r->findings[i].path_seq, 0, (uint32_t)i };
    qsort(q, nqueries, sizeof *q, vt__ck_cmp_key);   /* by seq, then finding */

    graph g;
    memset(&g, 0, sizeof g);
    g.m = m;
    g.free_head = CK_NONE;
    g.budget = CK_VISIT_BUDGET;
    g.held_until = held_until;
    int rc = vt__u64map_init(&g.pairs, m->nrefs ? m->nrefs : 16);
    for (size_t i = 0; i < m->nnodes; i++) {
        ck_node *n = &m->nodes[i];
        n->alive = n->kind == VT_CHECK_NODE_HOLDER || n->implicit;   /* until its DROP */
        n->in_head = CK_NONE;
        n->gen = 0;
    }
    size_t qi = 0;
    for (size_t i = 0; i <= m->ngops && !rc; i++) {
        uint64_t seq = i < m->ngops ? m->gops[i].seq : UINT64_MAX;
        /* The state at q.seq: every operation with seq <= q.seq applied. */
        while (qi < nqueries && (q[qi].seq < seq || i == m->ngops) && !rc) {
            uint32_t fi = q[qi].idx;
            rc = search(&g, &r->findings[fi], fi, fst[fi], opt);
            qi++;
        }
        if (i < m->ngops)
            apply(&g, &m->gops[i], &rc);
    }
    free(q);
    free(g.e);
    free(g.queue);
    vt__u64map_free(&g.pairs);
    return rc;
}

/* Whether a path of f says what holds its tensor. */
static int names_a_holder(const vt__check_finding *f)
{
    return f->npaths && !vt__check_paths_name_no_holder(f);
}

/* Whether a path starts at a holder that says who holds it (not one the
 * search takes for anonymous). */
static int named_root(const vt__check_path *p)
{
    const vt__check_step *st = &p->steps[0];
    return !p->cycle && p->nsteps >= 2 && st->kind == VT_CHECK_NODE_HOLDER &&
           !anonymous(st->kind, st->name, st->label);
}

/* How much f's paths say of what holds its tensor: 2, a chain from a named
 * root; 1, from an autograd node or a tensor nothing holds; 0, nothing. */
static int holder_rank(const vt__check_finding *f)
{
    for (size_t p = 0; p < f->npaths; p++)
        if (named_root(&f->paths[p]))
            return 2;
    return names_a_holder(f) ? 1 : 0;
}

static void free_paths(vt__check_path *paths, size_t n)
{
    for (size_t p = 0; p < n; p++)
        free(paths[p].steps);
    free(paths);
}

/* The findings with a nonzero at[i] asked again at that seq; the new paths
 * kept where they say more of the holder (holder_rank), and the finding then
 * shows its paths "before it was freed"; the old ones otherwise. Each asked
 * finding's root_held_until() for the new paths, kept or not, goes to
 * until[i]. A negative errno, or 0. */
static int ask_again(ck_model *m, vt__check_report *r, const uint32_t *fst,
                     const vt__check_options *opt, const uint64_t *at, uint64_t *until)
{
    size_t n = r->nfindings, asked = 0;
    for (size_t i = 0; i < n; i++)
        asked += at[i] != 0;
    if (!asked)
        return 0;
    uint8_t *ask = calloc(n, 1);   /* asked: 1 + the rank of the old paths */
    vt__check_path **was = calloc(n, sizeof *was);
    size_t *nwas = calloc(n, sizeof *nwas);
    uint64_t *was_seq = calloc(n, sizeof *was_seq);
    int rc = ask && was && nwas && was_seq ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        if (!at[i])
            continue;
        vt__check_finding *f = &r->findings[i];
        ask[i] = (uint8_t)(1 + holder_rank(f));
        was[i] = f->paths;
        nwas[i] = f->npaths;
        was_seq[i] = f->path_seq;
        f->paths = NULL;
        f->npaths = 0;
        f->path_seq = at[i];
        until[i] = 0;
    }
    if (!rc)
        rc = sweep(m, r, fst, opt, ask, until);
    for (size_t i = 0; ask && i < n; i++) {
        vt__check_finding *f = &r->findings[i];
        if (!ask[i])
            continue;
        if (!rc && 1 + holder_rank(f) > ask[i]) {
            free_paths(was[i], nwas[i]);
            f->paths_before_free = 1;
            continue;
        }
        free_paths(f->paths, f->npaths);   /* no more said then: as it was */
        f->paths = was[i];
        f->npaths = nwas[i];
        f->path_seq = was_seq[i];
    }
    free(ask);
    free(was);
    free(nwas);
    free(was_seq);
    return rc;
}

/* The last seq before storage sti's free (free_seq) at which a tensor of it
 * was alive: the seq before its last tensor's drop (a tensor kept by C++
 * alone, a graph's saved one, drops when the graph goes, just before the
 * storage is freed); 0 when none was alive after `after`. */
static uint64_t last_alive_seq(const ck_model *m, uint32_t sti, uint64_t after, uint64_t free_seq)
{
    uint64_t last = 0;
    for (uint32_t t = m->st[sti].first_tensor; t != CK_NONE; t = m->nodes[t].next_bound) {
        const ck_node *n = &m->nodes[t];
        uint64_t until = n->dropped && n->drop_seq < free_seq ? n->drop_seq : free_seq;
        if (until > after + 1 && until - 1 > last)
            last = until - 1;
    }
    return last;
}

/* How many times a freed finding is asked again just before the holder
 * of its chain's root died (each answer may start at an older graph). */
#define CK_HELD_ROUNDS 3

/* Whether every path of f reaches the tensor it keeps through an autograd
 * graph (the hop into that tensor is a node's: a saved tensor). */
static int kept_inside_a_graph(const vt__check_finding *f)
{
    if (!f->npaths)
        return 0;
    for (size_t i = 0; i < f->npaths; i++) {
        const vt__check_path *p = &f->paths[i];
        size_t t = p->nsteps;
        while (t > 0 && p->steps[t - 1].kind != VT_CHECK_NODE_TENSOR)
            t--;
        if (t < 2 || !graph_hop(p->steps[t - 2].label))
            return 0;
    }
    return 1;
}

/* A LINGER finding's small kept part (vt__ck_linger_pinning) said nothing
 * the program can act on when what keeps the part is a tensor an autograd
 * graph saved: no .clone() of it is the program's to make, the graph is what
 * to let go (the finding's holder says which). Then it is not said. */
static void unsay_kept_parts_inside_graphs(vt__check_report *r)
{
    for (size_t i = 0; i < r->nfindings; i++) {
        vt__check_finding *f = &r->findings[i];
        if (f->rule != VT_CHECK_RULE_LINGER || !f->owner_drop_seq || !kept_inside_a_graph(f))
            continue;
        free(f->views);
        f->views = NULL;
        f->nviews = 0;
        f->nviews_live = 0;
        f->covered_bytes = f->wasted_bytes = 0;
        f->owner_drop_seq = f->owner_drop_time_ns = 0;
    }
}

int vt__ck_paths(ck_model *m, vt__check_report *r, const uint32_t *fst,
                 const vt__check_options *opt)
{
    int rc = sweep(m, r, fst, opt, NULL, NULL);
    size_t n = r->nfindings;
    if (rc || !n)
        return rc;
    /* A freed lingering storage whose holders were not known yet when it
     * became a finding: a walk starts from a tensor once it is stale, at a
     * mark or a tick after its last use, and lingering begins at about that
     * time (a program without marks: a second after its last use), so the
     * state then often has the tensor and no holder yet (word_language_model
     * with its hidden state never detached: every one of 3,369 findings).
     * Asked again at the last moment a tensor of it lived: what held it
     * until then, kept where it says more. */
    uint64_t *at = calloc(n, sizeof *at), *until = calloc(n, sizeof *until);
    if (!at || !until)
        rc = -ENOMEM;
    for (size_t i = 0; i < n && !rc; i++) {
        vt__check_finding *f = &r->findings[i];
        if (fst[i] != CK_NONE && f->rule == VT_CHECK_RULE_LINGER && f->free_seq &&
            f->path_seq == f->linger_from_seq && holder_rank(f) < 2)
            at[i] = last_alive_seq(m, fst[i], f->path_seq, f->free_seq);
    }
    if (!rc)
        rc = ask_again(m, r, fst, opt, at, until);
    /* Where its chains then start at an autograd node or a tensor nothing
     * holds, the graph they run through was held by a tensor that has died
     * since (a graph kept across batches is held by the latest batch's
     * output, a local of the training loop, which replaces it every batch):
     * asked again just before the last holder of that root died, while it
     * still lingered. */
    for (int round = 0; round < CK_HELD_ROUNDS && !rc; round++) {
        size_t asked = 0;
        for (size_t i = 0; i < n; i++) {
            const vt__check_finding *f = &r->findings[i];
            int go = at[i] && holder_rank(f) < 2 && until[i] > f->linger_from_seq &&
                     until[i] < at[i];
            at[i] = go ? until[i] : 0;
            asked += go;
        }
        if (!asked)
            break;
        rc = ask_again(m, r, fst, opt, at, until);
    }
    free(at);
    free(until);
    if (!rc)
        unsay_kept_parts_inside_graphs(r);
    return rc;
}
