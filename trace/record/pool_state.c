/*
 * trace/record/pool_state.c - what an observed framework allocator holds
 * now (PyTorch's segments and the blocks alive in them), for the snapshot.
 *
 * The ring keeps the newest events: on a long run it overwrote the ALLOCs
 * and SEGMENT_ALLOCs of everything the framework made early and still holds
 * (the model's parameters, the optimizer's state, the segments they live
 * in). vramtrace's own allocator describes its state at a snapshot (the
 * state provider); the framework's allocator is not ours to ask from a
 * signal thread or an OOM, so its events keep this book as they pass
 * (pool_observe.c), and the snapshot lists its segments, tiled by the live
 * blocks and the free space between them, as pools VT_POOL_FRAMEWORK_*
 * (format 1.10): the views count blocks from before the window as they
 * count those of vramtrace's own cache.
 *
 * The events come on the threads that allocate, with the framework's
 * per-device lock held (a device's events in order); one mutex of this
 * book's own orders the devices' and the snapshot's reading.
 */
#include "vramtrace.h"
#include "rec_internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "fork_lock.h"
#include "grow.h"
#include "order.h"
#include "u64map.h"
#include "vramtrace/format.h"

typedef struct item {
    uint64_t addr, size, req_size, stream, seq;
    uint32_t stack;
    int8_t device;
    uint8_t state;   /* a block's vt_block_state */
    uint8_t pool;    /* a segment's pool (VT_POOL_SMALL/LARGE) */
    uint64_t private_pool;   /* a segment's private pool (a CUDA graph's), 0: default */
} item;

/* One table of items, with the address of each to its index. */
typedef struct book {
    item *items;
    size_t n, cap;
    vt__u64map at;
} book;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static book blocks, segments;
static bool broken;   /* out of memory once: the book is incomplete, left out */

VT__LOCK_ACROSS_FORK(pool_state, lock)

static void put(book *b, const item *it)
{
    if (broken)
        return;
    if (!b->at.mask && vt__u64map_init(&b->at, 1024) != 0) {
        broken = true;
        return;
    }
    uint32_t i = vt__u64map_get(&b->at, it->addr);
    if (i != VT__U64MAP_NONE) {   /* an address taken again before its end was seen */
        b->items[i] = *it;
        return;
    }
    if (vt__grow((void **)&b->items, &b->cap, b->n + 1, sizeof *b->items) != 0 ||
        vt__u64map_put(&b->at, it->addr, (uint32_t)b->n) != 0) {
        broken = true;
        return;
    }
    b->items[b->n++] = *it;
}

static void drop_index(book *b, uint32_t i)
{
    vt__u64map_del(&b->at, b->items[i].addr);
    if (i != b->n - 1) {   /* the last one takes its place */
        b->items[i] = b->items[b->n - 1];
        (void)vt__u64map_put(&b->at, b->items[i].addr, i);   /* held: cannot fail */
    }
    b->n--;
}

/* The index of the item at addr, VT__U64MAP_NONE when none (or no book yet). */
static uint32_t find(const book *b, uint64_t addr)
{
    return b->at.mask ? vt__u64map_get(&b->at, addr) : VT__U64MAP_NONE;
}

static void drop(book *b, uint64_t addr)
{
    uint32_t i = find(b, addr);
    if (i != VT__U64MAP_NONE)
        drop_index(b, i);
}

void vt__pool_state_alloc(int device, uint64_t addr, uint64_t size, uint64_t req_size,
                          uint64_t stream, uint64_t seq, uint32_t stack)
{
    item it = { .addr = addr, .size = size, .req_size = req_size, .stream = stream,
                .seq = seq, .stack = stack, .device = (int8_t)device,
                .state = VT_BLOCK_ACTIVE_ALLOCATED };
    pthread_mutex_lock(&lock);
    put(&blocks, &it);
    pthread_mutex_unlock(&lock);
}

/* The live block at addr (under the lock): its index, VT__U64MAP_NONE when
 * none starts there; *known 0 where the book cannot tell (broken, or no
 * block yet). */
static uint32_t live_block(uint64_t addr, int *known)
{
    *known = !broken && blocks.at.mask;
    return *known ? find(&blocks, addr) : VT__U64MAP_NONE;
}

int vt__pool_state_block_at(uint64_t addr)
{
    int known;
    pthread_mutex_lock(&lock);
    uint32_t i = live_block(addr, &known);
    pthread_mutex_unlock(&lock);
    return known ? i != VT__U64MAP_NONE : -1;
}

uint32_t vt__pool_state_block_stack(uint64_t addr, uint64_t *seq)
{
    int known;
    pthread_mutex_lock(&lock);
    uint32_t i = live_block(addr, &known);
    uint32_t stack = i != VT__U64MAP_NONE ? blocks.items[i].stack : 0;
    if (seq)
        *seq = i != VT__U64MAP_NONE ? blocks.items[i].seq : 0;
    pthread_mutex_unlock(&lock);
    return stack;
}

uint32_t vt__pool_state_free_requested(uint64_t addr)
{
    uint32_t stack = 0;
    pthread_mutex_lock(&lock);
    uint32_t i = find(&blocks, addr);
    if (i != VT__U64MAP_NONE) {
        blocks.items[i].state = VT_BLOCK_ACTIVE_PENDING_FREE;
        stack = blocks.items[i].stack;
    }
    pthread_mutex_unlock(&lock);
    return stack;
}

void vt__pool_state_free_completed(uint64_t addr)
{
    pthread_mutex_lock(&lock);
    drop(&blocks, addr);
    pthread_mutex_unlock(&lock);
}

void vt__pool_state_segment_alloc(int device, uint64_t addr, uint64_t size, uint64_t stream,
                                  uint64_t seq, uint32_t stack, int pool, uint64_t private_pool)
{
    item it = { .addr = addr, .size = size, .stream = stream, .seq = seq, .stack = stack,
                .device = (int8_t)device, .pool = (uint8_t)pool, .private_pool = private_pool };
    pthread_mutex_lock(&lock);
    put(&segments, &it);
    pthread_mutex_unlock(&lock);
}

/* A segment freed, or a range of an expandable segment unmapped: what lay
 * in [addr, addr + size) is no longer reserved. An unmapped range need not
 * be one mapped range: the ranges it covers go, the ones it cuts keep
 * their outer parts. */
void vt__pool_state_segment_free(uint64_t addr, uint64_t size)
{
    pthread_mutex_lock(&lock);
    uint32_t i = find(&segments, addr);
    if (i != VT__U64MAP_NONE && segments.items[i].size == size) {
        drop_index(&segments, i);
    } else {
        uint64_t end = addr + size;
        for (size_t k = segments.n; k-- > 0;) {
            item g = segments.items[k];
            uint64_t gend = g.addr + g.size;
            if (gend <= addr || g.addr >= end)
                continue;
            drop_index(&segments, (uint32_t)k);
            if (g.addr < addr) {
                item left = g;
                left.size = addr - g.addr;
                put(&segments, &left);
            }
            if (gend > end) {
                item right = g;
                right.addr = end;
                right.size = gend - end;
                put(&segments, &right);
            }
        }
    }
    pthread_mutex_unlock(&lock);
}

static int by_addr(const void *a, const void *b)
{
    const item *x = a, *y = b;
    return vt__order(x->addr, y->addr);
}

/* Free space of a segment from `from` to `to`, as an inactive block. */
static int add_gap(vt__snapshot_data *s, uint64_t from, uint64_t to, uint64_t stream)
{
    if (to <= from)
        return 0;
    vt__snap_block gap = { .addr = from, .size = to - from, .stream = stream,
                           .state = VT_BLOCK_INACTIVE };
    return vt__snapshot_add_block(s, &gap);
}

static vt__snap_block block_of(const item *it)
{
    return (vt__snap_block){ .addr = it->addr, .size = it->size, .req_size = it->req_size,
                             .stream = it->stream, .alloc_seq = it->seq, .stack = it->stack,
                             .state = it->state };
}

/* A block in no segment known (made before the observer attached): its own
 * segment, as reserved as it is. */
static int add_alone(vt__snapshot_data *s, const item *it)
{
    vt__snap_segment alone = { .addr = it->addr, .size = it->size, .stream = it->stream,
                               .device = it->device, .pool = VT_POOL_FRAMEWORK_LARGE };
    vt__snap_block bl = block_of(it);
    int rc = vt__snapshot_add_segment(s, &alone);
    return rc ? rc : vt__snapshot_add_block(s, &bl);
}

/* The end of the run of touching segments from seg[i] that live blocks
 * cross (an expandable segment's mapped ranges: one block may span two),
 * and in *next the first segment after it; blk from index b sorted. */
static uint64_t run_end(const item *seg, size_t nseg, size_t i, const item *blk, size_t nblk,
                        size_t b, size_t *next)
{
    uint64_t end = seg[i].addr + seg[i].size;
    size_t j = i + 1;
    for (;; j++) {
        uint64_t reach = end;   /* the furthest a block starting inside reaches */
        for (size_t k = b; k < nblk && blk[k].addr < end; k++)
            if (blk[k].addr + blk[k].size > reach)
                reach = blk[k].addr + blk[k].size;
        if (reach == end || j >= nseg || seg[j].addr != end || seg[j].device != seg[i].device
            || seg[j].private_pool != seg[i].private_pool)
            break;
        end = seg[j].addr + seg[j].size;
    }
    *next = j;
    return end;
}

/* The segments, sorted, each tiled by its blocks, sorted, and the free
 * space between them. */
static int add_segments(vt__snapshot_data *s, const item *seg, size_t nseg, const item *blk,
                        size_t nblk)
{
    size_t b = 0;
    int rc = 0;
    for (size_t i = 0, j; rc == 0 && i < nseg; i = j) {
        uint64_t start = seg[i].addr;
        for (; rc == 0 && b < nblk && blk[b].addr < start; b++)
            if (blk[b].addr + blk[b].size <= start)   /* else it overlaps: left out */
                rc = add_alone(s, &blk[b]);
        uint64_t end = run_end(seg, nseg, i, blk, nblk, b, &j);
        vt__snap_segment g = { .addr = start, .size = end - start, .stream = seg[i].stream,
                               .device = seg[i].device,
                               .pool = seg[i].pool == VT_POOL_SMALL ? VT_POOL_FRAMEWORK_SMALL
                                                                    : VT_POOL_FRAMEWORK_LARGE,
                               .private_pool = seg[i].private_pool };
        if (rc == 0)
            rc = vt__snapshot_add_segment(s, &g);
        uint64_t at = start;
        for (; rc == 0 && b < nblk && blk[b].addr < end; b++) {
            if (blk[b].addr < at || blk[b].addr + blk[b].size > end)
                continue;   /* overlaps the one before, or leaves the segment */
            vt__snap_block bl = block_of(&blk[b]);
            rc = add_gap(s, at, blk[b].addr, g.stream);
            if (rc == 0)
                rc = vt__snapshot_add_block(s, &bl);
            at = blk[b].addr + blk[b].size;
        }
        if (rc == 0)
            rc = add_gap(s, at, end, g.stream);
    }
    for (; rc == 0 && b < nblk; b++)
        rc = add_alone(s, &blk[b]);
    return rc;
}

int vt__pool_state_add(vt__snapshot_data *s)
{
    pthread_mutex_lock(&lock);
    if (broken || (!blocks.n && !segments.n)) {
        int rc = broken ? -ENOMEM : 0;
        pthread_mutex_unlock(&lock);
        return rc;
    }
    item *seg = malloc((segments.n + 1) * sizeof *seg);
    item *blk = malloc((blocks.n + 1) * sizeof *blk);
    size_t nseg = segments.n, nblk = blocks.n;
    if (seg && blk) {
        memcpy(seg, segments.items, nseg * sizeof *seg);
        memcpy(blk, blocks.items, nblk * sizeof *blk);
    }
    pthread_mutex_unlock(&lock);
    int rc = -ENOMEM;
    if (seg && blk) {
        qsort(seg, nseg, sizeof *seg, by_addr);
        qsort(blk, nblk, sizeof *blk, by_addr);
        size_t nseg0 = s->nsegments, nblk0 = s->nblocks;
        rc = add_segments(s, seg, nseg, blk, nblk);
        if (rc) {   /* none of it: a segment half tiled is no state */
            s->nsegments = nseg0;
            s->nblocks = nblk0;
        }
    }
    free(seg);
    free(blk);
    return rc;
}
