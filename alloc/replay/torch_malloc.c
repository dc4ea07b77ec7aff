/*
 * alloc/replay/torch_malloc.c - a request and a free under PyTorch's rules
 * (DeviceCachingAllocator: malloc, alloc_found_block, free, get_free_block,
 * should_split, round_size, roundup_power2_next_division,
 * get_allocation_size, alloc_block, garbage_collect_cached_blocks,
 * release_available_cached_blocks), over the memory of torch_segments.c:
 *  - sizes: a request rounds up to a 512-byte multiple (512 at least), or,
 *    with roundup_power2_divisions N (N > 1 and the size above 512*N), to the
 *    next of N equal steps between two powers of two;
 *  - pools: rounded sizes up to 1 MiB are small (2 MiB segments), larger
 *    ones large (a 20 MiB segment below 10 MiB, else the size rounded up to
 *    2 MiB); a request takes the smallest free block of its own stream and
 *    pool that is large enough;
 *  - splits: a small block splits when 512 bytes or more would remain, a
 *    large one when more than 1 MiB would remain and the request is below
 *    max_split_size (expandable segments split like small blocks);
 *  - max_split_size_mb: a cached block at or over it never serves a request
 *    below it, and serves a larger request only when it is less than
 *    max_non_split_rounding_mb (20 MiB) over it;
 *  - no cached block fits: with a per-process memory fraction and
 *    garbage_collection_threshold, unsplit large cached blocks are released
 *    by age (how many searches of their pool they sat through) until
 *    reserved is under the threshold; then a new segment; on failure (the
 *    fraction's limit or the device's capacity) cached oversize blocks are
 *    released and it tries again, then every unsplit cached block (after all
 *    pending frees complete) and a last try; then out of memory;
 *  - a block freed while used on other streams comes back when their events
 *    complete: the recording's FREE_COMPLETED says when (or earlier, when
 *    the model synchronizes all events before releasing its cache).
 */
#include <stdlib.h>

#include "grow.h"
#include "torch_model.h"

/* ---- sizes --------------------------------------------------------------- */

static uint64_t pow2_floor(uint64_t x)
{
    return x ? 1ull << (63 - __builtin_clzll(x)) : 0;
}

/* The same rules as scripts/vramtrace/native/pool_observer.cpp's
 * block_size() and block_allocated() (the observer of a live PyTorch,
 * built against torch, keeps its own copy): change both. */
static uint64_t round_size(const tconf *c, uint64_t size)
{
    if (size < KB512)
        return KB512;
    unsigned div = c->divisions;
    if (div > 1 && size > KB512 * div) {
        if ((size & (size - 1)) == 0)
            return size;
        uint64_t floor2 = pow2_floor(size);
        uint64_t step = floor2 >> (63 - __builtin_clzll(div));
        if (step == 0)
            return floor2 << 1;
        uint64_t down = size & ~(step - 1);
        return down == size ? size : down + step;
    }
    return (size + KB512 - 1) / KB512 * KB512;
}

static uint64_t allocation_size(uint64_t size)
{
    if (size <= SMALL_SIZE)
        return SMALL_BUFFER;
    if (size < MIN_LARGE_ALLOC)
        return LARGE_BUFFER;
    return (size + ROUND_LARGE - 1) / ROUND_LARGE * ROUND_LARGE;
}

/* ---- malloc -------------------------------------------------------------- */

typedef struct req {
    uint64_t size, alloc_size, stream;
    int pool;
    tblock *block;
} req;

static bool get_free_block(tstate *t, int d, req *p)
{
    tdev *v = &t->dev[d];
    const tconf *c = &t->c;
    tset *s = &v->free[p->pool];
    if (c->fraction > 0 && c->gc_threshold > 0)
        v->searches[p->pool]++;
    size_t i = tm_lower_bound(s, p->stream, p->size, 0);
    if (i >= s->n || s->v[i]->stream != p->stream)
        return false;
    if (s->v[i]->seg) {
        /* best fit counts what a block can grow into: the unmapped range after it */
#define GROWABLE(b) ((b)->size + ((b)->next && !(b)->next->mapped ? (b)->next->size : 0))
        while (s->v[i]->seg && i + 1 < s->n && s->v[i + 1]->stream == p->stream &&
               GROWABLE(s->v[i + 1]) < GROWABLE(s->v[i]))
            i++;
#undef GROWABLE
    }
    tblock *b = s->v[i];
    if (p->size < c->max_split && b->size >= c->max_split)
        return false;
    if (p->size >= c->max_split && b->size >= p->size + c->max_nonsplit_round)
        return false;
    p->block = b;
    tm_set_remove(s, b);
    return true;
}

static void garbage_collect(tstate *t, int d)
{
    tdev *v = &t->dev[d];
    uint64_t threshold = (uint64_t)(t->c.gc_threshold * (double)v->allowed);
    if (v->reserved <= threshold)
        return;
    uint64_t target = v->reserved - threshold, reclaimed = 0;
    tset *s = &v->free[1];
    double total_age = 0;
    int count = 0;
    for (size_t i = 0; i < s->n; i++)
        if (!s->v[i]->prev && !s->v[i]->next && !s->v[i]->seg) {
            total_age += (double)(v->searches[1] - s->v[i]->gc_base);
            count++;
        }
    bool freed = true;
    while (reclaimed < target && freed && count > 0) {
        double age_threshold = total_age / count;
        freed = false;
        for (size_t i = 0; i < s->n;) {
            tblock *b = s->v[i];
            double age = (double)(v->searches[1] - b->gc_base);
            if (!b->prev && !b->next && !b->seg && age >= age_threshold) {
                freed = true;
                reclaimed += b->size;
                total_age -= age;
                count--;
                tm_release_block(t, d, b);   /* removes s->v[i] */
            } else {
                i++;
            }
        }
    }
}

static bool alloc_block(tstate *t, int d, req *p, bool retry)
{
    tdev *v = &t->dev[d];
    if (retry)
        t->r->devices[d].alloc_retries++;
    if (v->allowed != NO_LIMIT && v->reserved + p->alloc_size > v->allowed)
        return false;
    if (t->c.expandable) {
        p->block = tm_try_allocate_expandable(t, d, p->stream, p->pool, p->size);
        return p->block != NULL;
    }
    if (!tm_device_has(v, p->alloc_size)) {
        t->r->devices[d].device_failed_mallocs++;
        return false;
    }
    tblock *b = tm_new_block(t, tm_take_address(v, p->alloc_size), p->alloc_size, p->stream, p->pool);
    if (!b)
        return false;
    tm_reserve(t, d, (int64_t)p->alloc_size);
    t->r->devices[d].segment_allocs++;
    t->r->devices[d].device_mallocs++;
    p->block = b;
    return true;
}

/* release_available_cached_blocks: oversize cached blocks, enough of them. */
static bool release_oversize(tstate *t, int d, const req *p)
{
    const tconf *c = &t->c;
    if (c->max_split == NO_LIMIT)
        return false;
    tset *s = &t->dev[d].free[p->pool];
    uint64_t key = p->size < c->max_split ? c->max_split : p->size;
    size_t i = tm_lower_bound(s, p->stream, key, 0);
    if (i < s->n && s->v[i]->stream == p->stream) {
        if (s->v[i]->prev || s->v[i]->next || s->v[i]->seg)
            return false;
        tm_release_block(t, d, s->v[i]);
        return true;
    }
    if (i == 0)
        return false;
    uint64_t released = 0;
    for (i--;; i--) {
        tblock *b = s->v[i];
        if (released >= key || b->size < c->max_split || b->stream != p->stream ||
            b->prev || b->next || b->seg)
            break;
        released += b->size;
        tm_release_block(t, d, b);
        if (i == 0)
            break;
    }
    return released >= key;
}

static bool should_split(const tconf *c, const tblock *b, uint64_t size)
{
    uint64_t rest = b->size - size;
    if (b->pool == 0 || c->expandable)
        return rest >= KB512;
    return size < c->max_split && rest > SMALL_SIZE;
}

/* Block b handed to the program, which asked for `asked` bytes: the
 * device's allocated figures as PyTorch keeps them (block sizes). */
static tblock *hand_out(tdev *v, tblock *b, uint64_t asked)
{
    b->allocated = true;
    b->req = asked;
    v->allocated += b->size;
    v->requested += asked;
    v->live++;
    if (v->allocated > v->peak_allocated)
        v->peak_allocated = v->allocated;
    return b;
}

tblock *tm_malloc(tstate *t, int d, uint64_t asked, uint64_t stream)
{
    tdev *v = &t->dev[d];
    const tconf *c = &t->c;
    req p = { .size = round_size(c, asked), .stream = stream };
    if (c->uncached) {   /* every request its own device allocation */
        if (!tm_device_has(v, p.size) || (v->allowed != NO_LIMIT && v->reserved + p.size > v->allowed))
            return NULL;
        tblock *b = tm_new_block(t, tm_take_address(v, p.size), p.size, stream, 1);
        if (!b)
            return NULL;
        tm_reserve(t, d, (int64_t)p.size);
        t->r->devices[d].segment_allocs++;
        t->r->devices[d].device_mallocs++;
        return hand_out(v, b, asked);
    }
    p.pool = p.size <= SMALL_SIZE ? 0 : 1;
    p.alloc_size = allocation_size(p.size);
    bool found = get_free_block(t, d, &p);
    if (!found) {
        if (c->fraction > 0 && c->gc_threshold > 0 && v->allowed != NO_LIMIT)
            garbage_collect(t, d);
        found = alloc_block(t, d, &p, false) ||
                (release_oversize(t, d, &p) && alloc_block(t, d, &p, false));
        if (!found && !t->failed) {
            tm_release_cached_blocks(t, d);
            found = alloc_block(t, d, &p, true);
        }
    }
    if (!found || t->failed)
        return NULL;
    tblock *b = p.block;
    if (should_split(c, b, p.size)) {
        tblock *head = tm_neighbour(t, b, b->addr, p.size, true);
        if (!head)
            return NULL;
        b->addr += p.size;
        b->size -= p.size;
        tm_cache_block(t, d, b);
        b = head;
    }
    return hand_out(v, b, asked);
}

void tm_free(tstate *t, int d, tblock *b, bool pending)
{
    tdev *v = &t->dev[d];
    v->allocated -= b->size;
    v->requested -= b->req;
    v->live--;
    if (t->c.uncached) {
        tm_reserve(t, d, -(int64_t)b->size);
        t->r->devices[d].segment_frees++;
        t->r->devices[d].device_frees++;
        free(b);
        return;
    }
    if (!pending) {
        tm_free_block(t, d, b);
        return;
    }
    b->allocated = false;
    b->pending = true;
    if (vt__grow_from((void **)&v->pending, &v->cappending, v->npending + 1, sizeof *v->pending, 64)) {
        t->failed = true;
        return;
    }
    v->pending[v->npending++] = b;
}

/* the recorded FREE_COMPLETED of a pending free */
void tm_free_completed(tstate *t, int d, tblock *b, uint64_t serial)
{
    tdev *v = &t->dev[d];
    /* not pending any more when the model synchronized them all: then the
     * block may be gone (compared by pointer only, never read) */
    for (size_t i = v->npending; i-- > 0;)
        if (v->pending[i] == b && b->serial == serial) {
            v->pending[i] = v->pending[--v->npending];
            tm_free_block(t, d, b);
            return;
        }
}
