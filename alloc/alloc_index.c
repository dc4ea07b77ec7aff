/*
 * alloc/alloc_index.c - the free-block index: segregated fit with bitmaps.
 *
 * One index per (pool, stream). Sizes are multiples of 512; below 2 MiB
 * every size has its own class (exact), above it each power of two is cut
 * into 64 classes. A two-level bitmap finds the first non-empty class at or
 * above a request in a few instructions, so best fit costs O(1) in the
 * number of free blocks: an exact class holds only blocks of one size (any
 * of them is a best fit; the most recently freed is taken, it is the one
 * most likely still in the caches); a log class spans 1/64 of an octave and
 * is searched for its smallest fitting block (lowest address on ties).
 * Lists are doubly linked through the block's left/right fields, so removal
 * (coalescing) is O(1).
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
    uint64_t bits[NWORDS];                /* bit c: heads[c] != NULL */
    vt__block *heads[NCLASS];
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

vt__sindex *vt__index_stream(vt__findex *fx, uint64_t stream, bool create)
{
    vt__sindex *s = fx->last;
    if (vt_likely(s && s->stream == stream))
        return s;
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

void vt__index_insert(vt__findex *fx, vt__block *b)
{
    vt__sindex *s = vt__index_stream(fx, b->stream, false);
    uint32_t c = class_of(b->size);
    b->left = NULL;
    b->right = s->heads[c];
    if (b->right)
        b->right->left = b;
    s->heads[c] = b;
    s->bits[c / 64] |= 1ull << (c % 64);
    s->summary[c / 4096] |= 1ull << ((c / 64) % 64);
    s->count++;
}

void vt__index_remove(vt__findex *fx, vt__block *b)
{
    vt__sindex *s = vt__index_stream(fx, b->stream, false);
    uint32_t c = class_of(b->size);
    if (b->left)
        b->left->right = b->right;
    else
        s->heads[c] = b->right;
    if (b->right)
        b->right->left = b->left;
    b->left = b->right = NULL;
    if (!s->heads[c]) {
        s->bits[c / 64] &= ~(1ull << (c % 64));
        if (!s->bits[c / 64])
            s->summary[c / 4096] &= ~(1ull << ((c / 64) % 64));
    }
    s->count--;
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

/* Smallest (size, addr) block >= size in class c. */
static vt__block *best_in(const vt__sindex *s, uint32_t c, uint64_t size)
{
    vt__block *best = NULL;
    for (vt__block *b = s->heads[c]; b; b = b->right)
        if (b->size >= size
            && (!best || b->size < best->size || (b->size == best->size && b->addr < best->addr)))
            best = b;
    return best;
}

vt__block *vt__index_best_fit(vt__findex *fx, uint64_t stream, uint64_t size)
{
    vt__sindex *s = vt__index_stream(fx, stream, false);
    if (!s || !s->count)
        return NULL;
    uint32_t c = class_of(size);
    if (c < EXACT_CLASSES && s->heads[c])
        return s->heads[c];
    if (c >= EXACT_CLASSES) {
        vt__block *b = best_in(s, c, size);
        if (b)
            return b;
    }
    c = next_class(s, c + 1);
    if (c == NCLASS)
        return NULL;
    return c < EXACT_CLASSES ? s->heads[c] : best_in(s, c, size);
}

bool vt__index_contains(vt__findex *fx, const vt__block *b)
{
    vt__sindex *s = vt__index_stream(fx, b->stream, false);
    if (!s)
        return false;
    for (vt__block *x = s->heads[class_of(b->size)]; x; x = x->right)
        if (x == b)
            return true;
    return false;
}

/* Walks only the classes whose bit is set: a list whose bit were clear
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
                if (!s->heads[c] || s->heads[c]->left)
                    return -1;
                for (vt__block *b = s->heads[c]; b; b = b->right) {
                    if (class_of(b->size) != c || b->stream != s->stream
                        || b->state != VT_B_FREE || (b->right && b->right->left != b))
                        return -1;
                    n++;
                }
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
