/*
 * trace/check/check_live.c - the storages open at the checker's point in
 * its walk over the events (pass 1, check_model.c), by address: which
 * storage is at an address, and which contains it (a tensor's data_ptr may
 * point inside its storage). A treap in the storages' own slots (ck_storage
 * tl, tr, prio; ck_model root), so opening and closing a storage costs
 * O(log n) and no memory of its own.
 */
#include <stdint.h>
#include <sys/random.h>
#include <time.h>

#include "check_internal.h"
#include "u64map.h"

/* Storages can share an address while both are open (a lifetime from
 * before the window, or one after a gap, is opened without closing what is
 * open there), so a storage's key is (addr, ord): each storage is one node,
 * found and removed as itself, never as another of its address (removing
 * the other left a storage linked after its slot was reused: a cycle, and
 * check looped for ever). Of several at one address the newest is found. */
static int key_before(const ck_storage *st, uint32_t a, uint32_t b)
{
    return st[a].addr < st[b].addr || (st[a].addr == st[b].addr && st[a].ord < st[b].ord);
}

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

/* Priorities the input cannot predict: a treap is balanced only while its
 * priorities are independent of its keys, and a public function of the
 * storage index let crafted addresses turn it into a list (80,000 external
 * storages: a minute). splitmix64 from a per-run seed. */
static uint32_t next_prio(ck_model *m)
{
    m->prio_state += 0x9e3779b97f4a7c15ull;
    return (uint32_t)(vt__mix64(m->prio_state) >> 32);
}

void vt__ck_live_init(ck_model *m)
{
    m->root = CK_NONE;
    if (getrandom(&m->prio_state, sizeof m->prio_state, GRND_NONBLOCK) != sizeof m->prio_state) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        m->prio_state = (uint64_t)now.tv_nsec ^ (uint64_t)now.tv_sec << 30 ^ (uintptr_t)m;
    }
}

/* Down to where x's priority belongs, then the subtree there is split by
 * x's address into x's two children. Iterative: no stack depth the input
 * could choose. */
void vt__ck_live_insert(ck_model *m, uint32_t x)
{
    ck_storage *st = m->st;
    uint32_t *t = &m->root;
    st[x].prio = next_prio(m);
    while (*t != CK_NONE && st[*t].prio >= st[x].prio)
        t = key_before(st, x, *t) ? &st[*t].tl : &st[*t].tr;
    uint32_t cur = *t, *l = &st[x].tl, *r = &st[x].tr;
    while (cur != CK_NONE) {
        if (key_before(st, cur, x)) {
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

void vt__ck_live_remove(ck_model *m, uint32_t x)
{
    ck_storage *st = m->st;
    uint32_t *t = &m->root;
    while (*t != CK_NONE && *t != x)
        t = key_before(st, x, *t) ? &st[*t].tl : &st[*t].tr;
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

/* The open storage with the greatest addr <= addr. */
static uint32_t floor_of(const ck_model *m, uint64_t addr)
{
    const ck_storage *st = m->st;
    uint32_t best = CK_NONE, t = m->root;
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

uint32_t vt__ck_live_at(const ck_model *m, uint64_t addr)
{
    uint32_t x = floor_of(m, addr);
    return x != CK_NONE && m->st[x].addr == addr ? x : CK_NONE;
}

uint32_t vt__ck_live_containing(const ck_model *m, uint64_t addr)
{
    uint32_t x = floor_of(m, addr);
    if (x == CK_NONE)
        return CK_NONE;
    const ck_storage *s = &m->st[x];
    if (addr - s->addr < s->size || addr == s->addr)
        return x;
    return CK_NONE;
}
