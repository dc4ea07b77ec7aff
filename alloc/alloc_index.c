/*
 * alloc/alloc_index.c - the free-block index: exact (size, address) best fit.
 *
 * The contract (as PyTorch's allocator, whose free blocks sit in ordered sets
 * keyed by (stream, size, address) and are found by lower bound): among the
 * free blocks of a stream with size >= the request, take the smallest by
 * (size, address), so equal-size ties go to the lowest address. That choice
 * is deterministic (a replay of the same program gets the same addresses,
 * whatever order the frees came in) and tends to pack live blocks toward
 * low addresses, leaving high segments whole and releasable. It costs
 * O(log n) and never scans a class. (Before, an exact class was a LIFO
 * list, handing out the most recently freed block, and a log class was a
 * list scanned whole for its smallest fitting block.)
 *
 * Structure: one index per (pool, stream). Sizes are multiples of 512; below
 * 2 MiB every size has its own class (exact), above it each power of two is
 * cut into 64 classes (a log class spans 1/64 of an octave). A two-level
 * bitmap finds the first non-empty class at or above a request in a few
 * instructions. Each class holds its blocks in an intrusive AVL tree ordered
 * by (size, address), linked through the block's left/right/parent fields
 * (no allocation under the lock, no failure path). Best fit is then:
 *   - the request's own class: lower bound of (size, 0) in its tree. In an
 *     exact class every block has the request's size, so that is the
 *     leftmost (lowest address) block; in a log class it skips the smaller
 *     blocks of the class in O(log k), not by walking them.
 *   - else the first non-empty class above (bitmap): its leftmost block,
 *     which is its smallest (size, address) and fits, as the whole class
 *     lies above the request.
 * Insert and arbitrary removal (a neighbour merged away by coalescing) are
 * O(log k) with k the blocks of the class, worst case (AVL height <= 1.44
 * log2 k). The common case is a class of one block (in bench_alloc 87% of
 * inserts find their class empty): insert and remove then only set or clear
 * the root and bitmap bits, which keeps the cached alloc+free pair within
 * a few ns of the LIFO lists. A balanced tree rather than an address heap
 * per class because a log class needs lower bound by size, and one
 * structure serves both kinds; AVL rather than a splay tree or treap for a
 * worst-case, not amortized or expected, bound.
 */
#include <stdlib.h>

#include "alloc_internal.h"

#define EXACT_CLASSES 4096u               /* 512 B units below 2 MiB */
#define LOG_SUB 64u                       /* classes per octave above */
#define NCLASS (EXACT_CLASSES + 52u * LOG_SUB)
#define NWORDS ((NCLASS + 63) / 64)

struct vt__sindex {
    uint64_t stream;
    uint64_t count;                       /* blocks held */
    struct vt__sindex *next;              /* other streams of the pool */
    uint64_t summary[(NWORDS + 63) / 64]; /* bit w: bits[w] != 0 */
    uint64_t bits[NWORDS];                /* bit c: roots[c] != NULL */
    vt__block *roots[NCLASS];             /* AVL tree of each class */
};

static inline uint32_t class_of(uint64_t size)
{
    uint64_t u = size >> 9;
    if (u < EXACT_CLASSES)
        return (uint32_t)u;
    uint32_t fl = 63u - (uint32_t)__builtin_clzll(u);     /* >= 12 */
    uint32_t sl = (uint32_t)(u >> (fl - 6)) & (LOG_SUB - 1);
    return EXACT_CLASSES + (fl - 12) * LOG_SUB + sl;
}

/* ---- the per-class AVL tree, keyed by (size, addr) ---------------------- */

static inline bool key_less(const vt__block *a, const vt__block *b)
{
    return a->size < b->size || (a->size == b->size && a->addr < b->addr);
}

static inline int height(const vt__block *n)
{
    return n ? n->height : 0;
}

static inline void fix_height(vt__block *n)
{
    int l = height(n->left), r = height(n->right);
    n->height = (uint8_t)(1 + (l > r ? l : r));
}

/* Make nw take old's place under p (p NULL: the root). */
static inline void replace_child(vt__block **root, vt__block *p, vt__block *old, vt__block *nw)
{
    if (!p)
        *root = nw;
    else if (p->left == old)
        p->left = nw;
    else
        p->right = nw;
    if (nw)
        nw->parent = p;
}

/* Lift x's child on one side (the left one when lift_left) into x's place;
 * x goes down the other side and takes the lifted node's inner subtree. */
static inline vt__block *rotate(vt__block **root, vt__block *x, bool lift_left)
{
    vt__block *y = lift_left ? x->left : x->right, *p = x->parent;
    vt__block **inner = lift_left ? &y->right : &y->left;
    *(lift_left ? &x->left : &x->right) = *inner;
    if (*inner)
        (*inner)->parent = x;
    *inner = x;
    x->parent = y;
    replace_child(root, p, x, y);
    fix_height(x);
    fix_height(y);
    return y;
}

static vt__block *rotate_left(vt__block **root, vt__block *x)
{
    return rotate(root, x, false);
}

static vt__block *rotate_right(vt__block **root, vt__block *x)
{
    return rotate(root, x, true);
}

/* n's subtrees are valid AVL trees; restore n's balance and height.
 * @return the subtree's new top. */
static vt__block *rebalance(vt__block **root, vt__block *n)
{
    int bf = height(n->left) - height(n->right);
    if (bf > 1) {
        if (height(n->left->left) < height(n->left->right))
            rotate_left(root, n->left);
        return rotate_right(root, n);
    }
    if (bf < -1) {
        if (height(n->right->right) < height(n->right->left))
            rotate_right(root, n->right);
        return rotate_left(root, n);
    }
    fix_height(n);
    return n;
}

/* Rebalance from n up to the root; a subtree whose height came out as
 * before leaves everything above it unchanged, so the walk stops there. */
static void retrace(vt__block **root, vt__block *n)
{
    while (n) {
        int old = n->height;
        vt__block *top = rebalance(root, n);
        if (top->height == old)
            return;
        n = top->parent;
    }
}

static __attribute__((noinline)) void tree_insert(vt__block **root, vt__block *z)
{
    vt__block *p = NULL, **link = root;
    while (*link) {
        p = *link;
        link = key_less(z, p) ? &p->left : &p->right;
    }
    z->left = z->right = NULL;
    z->parent = p;
    z->height = 1;
    *link = z;
    retrace(root, p);
}

static __attribute__((noinline)) void tree_remove(vt__block **root, vt__block *z)
{
    vt__block *fix;   /* lowest node whose subtree changed */
    if (z->left && z->right) {
        /* z's successor y (no left child) takes z's place */
        vt__block *y = z->right;
        while (y->left)
            y = y->left;
        if (y->parent == z) {
            fix = y;
        } else {
            fix = y->parent;
            fix->left = y->right;
            if (y->right)
                y->right->parent = fix;
            y->right = z->right;
            z->right->parent = y;
        }
        y->left = z->left;
        z->left->parent = y;
        y->height = z->height;   /* the height the place had before */
        replace_child(root, z->parent, z, y);
    } else {
        fix = z->parent;
        replace_child(root, fix, z, z->left ? z->left : z->right);
    }
    z->left = z->right = z->parent = NULL;
    retrace(root, fix);
}

/* Smallest (size, addr) with size >= size in the tree, NULL if none. */
static inline vt__block *lower_bound(vt__block *n, uint64_t size)
{
    vt__block *best = NULL;
    while (n) {
        if (n->size >= size) {
            best = n;
            n = n->left;
        } else {
            n = n->right;
        }
    }
    return best;
}

static inline vt__block *leftmost(vt__block *n)
{
    while (n->left)
        n = n->left;
    return n;
}

/* ---- the index ---------------------------------------------------------- */

static __attribute__((noinline)) vt__sindex *stream_slow(vt__findex *fx, uint64_t stream,
                                                         bool create)
{
    vt__sindex *s;
    for (s = fx->list; s; s = s->next)
        if (s->stream == stream) {
            fx->last = s;
            return s;
        }
    if (!create)
        return NULL;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->stream = stream;
    s->next = fx->list;
    fx->list = s;
    fx->last = s;
    return s;
}

/* The stream's index: nearly always the one used last (one stream). */
static inline vt__sindex *stream_of(vt__findex *fx, uint64_t stream, bool create)
{
    vt__sindex *s = fx->last;
    if (vt__likely(s && s->stream == stream))
        return s;
    return stream_slow(fx, stream, create);
}

vt__sindex *vt__index_stream(vt__findex *fx, uint64_t stream, bool create)
{
    return stream_of(fx, stream, create);
}

/* Most classes hold one block or none (cached sizes repeat; a class rarely
 * has several free at once): that case sets the root and skips the tree
 * walk and retracing altogether. */
void vt__index_insert(vt__findex *fx, vt__block *b)
{
    vt__sindex *s = stream_of(fx, b->stream, false);
    uint32_t c = class_of(b->size);
    s->count++;
    if (vt__likely(!s->roots[c])) {
        b->left = b->right = b->parent = NULL;
        b->height = 1;
        s->roots[c] = b;
        s->bits[c / 64] |= 1ull << (c % 64);
        s->summary[c / 4096] |= 1ull << ((c / 64) % 64);
        return;
    }
    tree_insert(&s->roots[c], b);
}

void vt__index_remove(vt__findex *fx, vt__block *b)
{
    vt__sindex *s = stream_of(fx, b->stream, false);
    uint32_t c = class_of(b->size);
    s->count--;
    if (vt__likely(s->roots[c] == b && !b->left && !b->right))
        s->roots[c] = NULL;   /* the class's only block */
    else
        tree_remove(&s->roots[c], b);
    if (!s->roots[c]) {
        s->bits[c / 64] &= ~(1ull << (c % 64));
        if (!s->bits[c / 64])
            s->summary[c / 4096] &= ~(1ull << ((c / 64) % 64));
    }
}

/* First non-empty class >= c, or NCLASS. */
static uint32_t next_class(const vt__sindex *s, uint32_t c)
{
    if (c >= NCLASS)
        return NCLASS;
    uint32_t w = c / 64;
    uint64_t m = s->bits[w] & (~0ull << (c % 64));
    if (m)
        return w * 64 + (uint32_t)__builtin_ctzll(m);
    for (uint32_t sw = (w + 1) / 64; sw < (NWORDS + 63) / 64; sw++) {
        uint64_t sm = s->summary[sw];
        if (sw == (w + 1) / 64)
            sm &= (w + 1) % 64 ? ~0ull << ((w + 1) % 64) : ~0ull;
        if (sm) {
            uint32_t ww = sw * 64 + (uint32_t)__builtin_ctzll(sm);
            return ww * 64 + (uint32_t)__builtin_ctzll(s->bits[ww]);
        }
    }
    return NCLASS;
}

vt__block *vt__index_best_fit(vt__findex *fx, uint64_t stream, uint64_t size)
{
    vt__sindex *s = stream_of(fx, stream, false);
    if (!s || !s->count)
        return NULL;
    uint32_t c = class_of(size);
    if (c >= NCLASS)
        return NULL;
    if (s->roots[c]) {
        vt__block *b = lower_bound(s->roots[c], size);
        if (b)
            return b;
    }
    c = next_class(s, c + 1);
    return c == NCLASS ? NULL : leftmost(s->roots[c]);
}

bool vt__index_contains(vt__findex *fx, const vt__block *b)
{
    vt__sindex *s = vt__index_stream(fx, b->stream, false);
    if (!s)
        return false;
    uint32_t c = class_of(b->size);
    if (c >= NCLASS)
        return false;
    vt__block *n = s->roots[c];
    while (n && n != b)
        n = key_less(b, n) ? n->left : n->right;
    return n == b;
}

/* Verify the subtree at n (parent p) in order: keys strictly increasing
 * after *prev, links, heights, balance, and each block's class, stream and
 * state. *budget bounds the walk, so a cycle cannot hang the checker.
 * @return its height, or -1. */
static int check_tree(const vt__block *n, const vt__block *p, const vt__block **prev,
                      uint32_t c, uint64_t stream, uint64_t *n_seen, uint64_t budget)
{
    if (!n)
        return 0;
    if (n->parent != p || ++*n_seen > budget)
        return -1;
    int l = check_tree(n->left, n, prev, c, stream, n_seen, budget);
    if (l < 0)
        return -1;
    if ((*prev && !key_less(*prev, n)) || class_of(n->size) != c || n->stream != stream
        || n->state != VT_B_FREE)
        return -1;
    *prev = n;
    int r = check_tree(n->right, n, prev, c, stream, n_seen, budget);
    if (r < 0 || l - r > 1 || r - l > 1)
        return -1;
    int h = 1 + (l > r ? l : r);
    return h == n->height ? h : -1;
}

/* Walks only the classes whose bit is set: a tree whose bit were clear
 * would go uncounted, and the caller compares the count with the free
 * blocks it finds in the segments. */
int64_t vt__index_check(vt__findex *fx)
{
    int64_t total = 0;
    for (vt__sindex *s = fx->list; s; s = s->next) {
        uint64_t n = 0;
        for (uint32_t w = 0; w < NWORDS; w++) {
            if (((s->summary[w / 64] >> (w % 64)) & 1) != (s->bits[w] != 0))
                return -1;
            for (uint64_t m = s->bits[w]; m; m &= m - 1) {
                uint32_t c = w * 64 + (uint32_t)__builtin_ctzll(m);
                const vt__block *prev = NULL;
                if (!s->roots[c]
                    || check_tree(s->roots[c], NULL, &prev, c, s->stream, &n, s->count) < 0)
                    return -1;
            }
        }
        if (n != s->count)
            return -1;
        total += (int64_t)n;
    }
    return total;
}

void vt__index_destroy(vt__findex *fx)
{
    while (fx->list) {
        vt__sindex *s = fx->list;
        fx->list = s->next;
        free(s);
    }
    fx->last = NULL;
}

void vt__index_drop(vt__findex *fx, uint64_t stream)
{
    for (vt__sindex **pp = &fx->list; *pp; pp = &(*pp)->next) {
        vt__sindex *s = *pp;
        if (s->stream != stream)
            continue;
        if (s->count)
            return;
        *pp = s->next;
        if (fx->last == s)
            fx->last = fx->list;
        free(s);
        return;
    }
}
