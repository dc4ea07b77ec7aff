/*
 * trace/record/stack_tree.c - the interned prefix tree of stacks.
 *
 * A stack is stored as a path in a tree of (parent, ip) nodes: the outer
 * callers that every stack of a program shares (main, the training loop, the
 * framework's dispatcher) are stored once, a new stack usually costs a few
 * new leaf nodes, and a stack id is one 32-bit node id.
 *
 * The tree lives in fixed-capacity arrays, indexed by a fixed-capacity open
 * addressing hash table keyed by (parent, ip). Lookups are plain loads;
 * insertion publishes a fully written node with one CAS on an empty slot, so
 * the table is lock-free and never reallocates. A thread that loses a CAS race
 * keeps its unused node id for a later insertion (its spare), but only for one
 * under a parent with a smaller id: every published node's parent has a
 * smaller id than the node itself (a fresh id is handed out after its
 * parent's was), so a walk up from any node ends at the root. The exporter
 * relies on nothing of the sort (it checks every parent it follows); ids lost
 * by threads that end while holding one are gaps that no stack refers to.
 *
 * When the table is full, a stack keeps its deepest prefix already in the
 * tree (the outer callers) and is marked truncated (VT_STACK_TRUNCATED in
 * the id it returns) rather than dropped.
 *
 * Nothing here calls malloc: the tables are mmap'ed once (stacks.c's init).
 */
#include "vramtrace.h"
#include "rec_internal.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>

#define NODE_CAP (UINT32_C(1) << 20)   /* node ids; 20 MiB of virtual memory in all */
#define HT_SLOTS (NODE_CAP * 2)        /* load factor <= 1/2: short probes */

static _Atomic uint32_t *node_parent;  /* [id] caller node */
static _Atomic uint64_t *node_ip;      /* [id] instruction pointer */
static _Atomic uint32_t *ht;           /* slot -> node id, 0 = empty */
static _Atomic uint32_t node_next = 1; /* next node id to hand out */
static _Atomic uint64_t dropped;       /* stacks not interned: table full */
static _Atomic uint32_t ids_lost;      /* node ids lost in insertion races for good */

int vt__stack_tree_init(void)
{
    if (node_parent)
        return 0;
    node_parent = vt__map_tables(NODE_CAP * sizeof *node_parent);
    node_ip = vt__map_tables(NODE_CAP * sizeof *node_ip);
    ht = vt__map_tables(HT_SLOTS * sizeof *ht);
    return node_parent && node_ip && ht ? 0 : -ENOMEM;
}

/* A node id for a child of `parent`: the thread's spare only when it is
 * larger than the parent's (see the top of the file), else a fresh one. */
static uint32_t node_alloc(uint32_t *spare, uint32_t parent)
{
    if (spare && *spare > parent) {
        uint32_t id = *spare;
        *spare = 0;
        return id;
    }
    if (atomic_load_explicit(&node_next, memory_order_relaxed) >= NODE_CAP)
        return 0;
    uint32_t id = atomic_fetch_add_explicit(&node_next, 1, memory_order_relaxed);
    return id < NODE_CAP ? id : 0;
}

static uint32_t find_or_insert(uint32_t parent, uint64_t ip, uint32_t *spare)
{
    uint32_t h = (uint32_t)vt__stack_mix(vt__stack_mix(0, parent), ip) & (HT_SLOTS - 1);
    uint32_t mine = 0;
    for (uint32_t probe = 0; probe < HT_SLOTS; probe++, h = (h + 1) & (HT_SLOTS - 1)) {
        uint32_t id = atomic_load_explicit(&ht[h], memory_order_acquire);
        if (id == 0) {
            if (!mine) {
                mine = node_alloc(spare, parent);
                if (!mine)
                    return 0;
                atomic_store_explicit(&node_parent[mine], parent, memory_order_relaxed);
                atomic_store_explicit(&node_ip[mine], ip, memory_order_relaxed);
            }
            if (atomic_compare_exchange_strong_explicit(&ht[h], &id, mine,
                                                        memory_order_release,
                                                        memory_order_acquire))
                return mine;
            /* Lost the race: `id` is the winner, maybe our very key. */
        }
        if (atomic_load_explicit(&node_parent[id], memory_order_relaxed) == parent &&
            atomic_load_explicit(&node_ip[id], memory_order_relaxed) == ip) {
            if (mine) {
                /* A spare is kept for a later child of a smaller parent; the
                 * one it replaces (or one with nowhere to go) is lost. */
                if (!spare || *spare)
                    atomic_fetch_add_explicit(&ids_lost, 1, memory_order_relaxed);
                if (spare)
                    *spare = mine;
            }
            return id;
        }
    }
    return 0;
}

/* Intern ips[0..n) given innermost first: insert from the outermost down.
 * A full table ends the path early: the deepest node reached stands for the
 * stack, marked truncated (0 when not even the outermost frame is known). */
uint32_t vt__stack_tree_intern(const uint64_t *ips, size_t n, uint32_t *spare)
{
    uint32_t node = 0;
    for (size_t i = n; i-- > 0;) {
        uint32_t next = find_or_insert(node, ips[i], spare);
        if (!next) {
            atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);
            return node ? node | VT_STACK_TRUNCATED : 0;
        }
        node = next;
    }
    return node;
}

uint64_t vt__stacks_dropped(void)
{
    return atomic_load_explicit(&dropped, memory_order_relaxed);
}

uint32_t vt__stacks_ids_lost(void)
{
    return atomic_load_explicit(&ids_lost, memory_order_relaxed);
}

uint32_t vt__stacks_count(void)
{
    uint32_t n = atomic_load_explicit(&node_next, memory_order_acquire);
    return n < NODE_CAP ? n : NODE_CAP;
}

int vt__stacks_node(uint32_t id, uint32_t *parent, uint64_t *ip)
{
    id &= ~VT_STACK_TRUNCATED;
    if (id == 0 || id >= vt__stacks_count() || !node_parent)
        return -ENOENT;
    *parent = atomic_load_explicit(&node_parent[id], memory_order_relaxed);
    *ip = atomic_load_explicit(&node_ip[id], memory_order_relaxed);
    return 0;
}

int vt__stacks_test_set_parent(uint32_t id, uint32_t parent)
{
    if (id == 0 || id >= vt__stacks_count() || !node_parent)
        return -ENOENT;
    atomic_store_explicit(&node_parent[id], parent, memory_order_relaxed);
    return 0;
}
