/*
 * alloc/alloc_heap.c - the caching allocator core: one heap per device.
 *
 * Allocation: round the size, poll in-flight fences (completed frees become
 * reusable), best fit in the pool's free index on the allocating stream,
 * split, hand out. On a miss: garbage collection (gc threshold), a new
 * segment from the backend with the heap lock dropped, and the OOM chain:
 * release unused segments and retry, then wait for every pending free,
 * release all and retry, then a segment of exactly the request (what the
 * program's own cudaMalloc would have got), then fail.
 *
 * Free: a block whose only user is its own stream is free at once and
 * coalesces with free neighbours. A block used on other streams
 * (vt_record_stream, or freed on another stream) waits on a fence: one event
 * per extra stream. A free of unknown stream (plain cudaFree through the
 * hooks) joins the heap's batch; one fence over every known stream covers the
 * whole batch, and a new batch fence is recorded only when the previous one
 * completed, so a burst of frees costs one event per stream in total.
 *
 * When a block may be used again, and by whom (every path):
 *   - on its own stream, at once after a free on that stream: stream order
 *     puts the new work after the old (the legacy stream is a stream too);
 *   - by anyone else only through a fence on every stream that may still
 *     use it: the freeing stream when it is not the block's own, the
 *     streams of vt_record_stream, every known stream for a free of unknown
 *     stream. An event on the legacy stream covers the blocking streams and
 *     every thread's per-thread stream (legacy-stream rules);
 *   - cudaMalloc/cuMemAlloc memory (VT_NO_STREAM) may be used on any stream
 *     at once, so it has a key of its own: it never takes a block freed on a
 *     stream before that stream reached the free;
 *   - a segment goes back to the device (release, gc, a destroyed stream's,
 *     reset) only with cuMemFree, which waits for the device.
 *
 * Destroyed streams: free blocks belong to their stream, so the segments of
 * a destroyed stream could serve no one any more. Its fully free segments go
 * back to the device at once, the others when their last block is free
 * (vt__heap_stream_destroyed); a program that creates and destroys streams
 * per request keeps a bounded cache instead of growing it until an OOM.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "backend.h"
#include "config.h"
#include "recorder.h"

#define CUDA_ERR_INVALID_VALUE 1
#define CUDA_ERR_OOM 2
#define CUDA_ERR_INVALID_DEVICE 101

/* Larger requests fail as out of memory before any rounding: rounding
 * SIZE_MAX up to 512 B (or to a power-of-two division, or a segment to
 * 2 MiB) would wrap around to a tiny size and hand out a tiny block. No
 * device has 2^62 bytes; the real cudaMalloc(SIZE_MAX) fails the same way. */
#define VT_MAX_REQUEST (1ull << 62)

/* Static zero is an unlocked heap: the locks work before any constructor
 * ran, which a preloaded library needs. */
static vt__heap heaps[VT_MAX_DEVICES];
static atomic_bool heap_ready[VT_MAX_DEVICES];
static atomic_int heap_hi;                 /* 1 + highest device ever set up */
static atomic_int ndevices = -1;
static atomic_uint_fast64_t ptds_serial;
static _Thread_local uint64_t my_ptds;    /* this thread's per-thread stream key */
static atomic_bool provider_set;

/* ---- small helpers ----------------------------------------------------- */

/* The heap lock: a test-and-set lock, one atomic exchange to take and a
 * plain release store to drop (a pthread mutex costs two atomic operations
 * per pair and dominated the cached path). Critical sections are short;
 * the long operations (backend allocation and free) run with it dropped.
 * A waiter spins briefly, then yields its CPU. */
static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static void lock_slow(vt__heap *h)
{
    for (;;) {
        for (int i = 0; i < 64 && atomic_load_explicit(&h->lock, memory_order_relaxed); i++)
            cpu_relax();
        if (!atomic_exchange_explicit(&h->lock, 1, memory_order_acquire))
            return;
        sched_yield();
    }
}

static inline void lock(vt__heap *h)
{
    if (vt_unlikely(atomic_exchange_explicit(&h->lock, 1, memory_order_acquire)))
        lock_slow(h);
}

static inline void unlock(vt__heap *h)
{
    atomic_store_explicit(&h->lock, 0, memory_order_release);
}

/* fork() while another thread holds a heap lock would leave it held forever
 * in the child: the child's snapshot at exit (VRAMTRACE_OUT with %p, a
 * DataLoader worker) and every hook that looks up a pointer would spin on it.
 * So the fork waits for every heap lock and the child starts with them free.
 * Heap locks are taken inside the snapshot writer's lock (the state
 * provider), never the other way round; prepare handlers run in reverse
 * order of registration, so this one is registered first (constructor
 * priority) to run after the recorder's and take the locks in that order. */
static void fork_prepare(void)
{
    for (int d = 0; d < VT_MAX_DEVICES; d++)
        lock(&heaps[d]);
}

static void fork_release(void)
{
    for (int d = VT_MAX_DEVICES - 1; d >= 0; d--)
        unlock(&heaps[d]);
}

__attribute__((constructor(101))) static void heap_atfork(void)
{
    pthread_atfork(fork_prepare, fork_release, fork_release);
}

static inline void stat_add(vt__stat_t *s, int64_t d)
{
    s->current += d;
    if (d > 0) {
        s->allocated += d;
        if (s->current > s->peak)
            s->peak = s->current;
    } else {
        s->freed -= d;
    }
}

static inline void stat2(vt__stat_t *arr, int pool, int64_t d)
{
    stat_add(&arr[pool], d);
    stat_add(&arr[VT_STAT_ALL], d);
}

uint64_t vt__stream_key(uint64_t raw)
{
    if (raw == 1)
        return 0;
    if (raw == 2) {
        if (vt_unlikely(!my_ptds))
            my_ptds = VT_PTDS_KEY_BIT | (atomic_fetch_add(&ptds_serial, 1) + 1);
        return my_ptds;
    }
    return raw;
}

/* The handle to record an event on for a stream key. Another thread's
 * per-thread stream cannot be named from here; the legacy stream can stand
 * in for it: legacy-stream work waits for all blocking streams, and
 * per-thread default streams are blocking. */
static uint64_t key_to_raw(uint64_t key)
{
    if (key == VT_NO_STREAM_KEY)
        return 0;
    if (key & VT_PTDS_KEY_BIT)
        return key == my_ptds ? 2 : 0;
    return key;
}

static vt__block *block_new(vt__heap *h)
{
    vt__block *b = h->spare;
    if (b) {
        h->spare = b->bnext;
    } else {
        b = malloc(sizeof *b);
        if (!b)
            return NULL;
    }
    memset(b, 0, sizeof *b);
    b->xstreams = b->xinline;
    b->capx = 2;
    return b;
}

static void block_release(vt__heap *h, vt__block *b)
{
    if (b->xstreams != b->xinline)
        free(b->xstreams);
    b->bnext = h->spare;
    h->spare = b;
}

static inline void account_free(vt__heap *h, vt__block *b, int sign)
{
    if (b->prev || b->next) {
        stat2(h->inactive_split_bytes, b->seg->spool, sign * (int64_t)b->size);
        stat2(h->inactive_split, b->seg->spool, sign);
    }
}

static uint64_t round_size(uint64_t req, const vt_config *cfg)
{
    if (req < VT_MIN_BLOCK)
        return VT_MIN_BLOCK;
    unsigned div = cfg->roundup_power2_divisions;
    if (div > 1 && req > VT_MIN_BLOCK * div) {
        /* Round up to one of `div` steps between two powers of two, so a
         * training run's many nearby sizes share blocks. */
        uint64_t floor2 = 1ull << (63 - __builtin_clzll(req));
        uint64_t step = floor2 / div;
        req = (req + step - 1) & ~(step - 1);
    }
    return (req + VT_MIN_BLOCK - 1) & ~(VT_MIN_BLOCK - 1);
}

/* Mid-size requests (1 to 10 MiB) share segments of up to 20 MiB, as
 * PyTorch's do, but sized to a whole number of the request: a 20 MiB
 * segment of 7 MiB blocks would leave a 6 MiB tail that no later 7 MiB
 * request can use, and a program filling the device with them would run
 * out of memory at 70 % of what plain cudaMalloc gets (3 MiB: 90 %). */
static uint64_t segment_size(uint64_t size)
{
    if (size <= VT_SMALL_SIZE)
        return VT_SMALL_BUFFER;
    if (size < VT_MIN_LARGE_ALLOC)
        return size * (VT_LARGE_BUFFER / size);
    return (size + VT_ROUND_LARGE - 1) & ~(VT_ROUND_LARGE - 1);
}

/* ---- heaps ------------------------------------------------------------- */

static void heap_setup(vt__heap *h, int device)
{
    const vt_config *cfg = vt__config();
    h->device = device;
    uint64_t total = 0;
    if (vt__backend_total_mem(device, &total) || !total)
        total = UINT64_MAX;
    h->total_mem = total;
    h->fraction = cfg->per_process_memory_fraction;
    h->cap = total == UINT64_MAX ? UINT64_MAX : (uint64_t)(h->fraction * (double)total);
    h->lo = UINT64_MAX;
    h->hi = 0;
    h->ready = true;
}

vt__heap *vt__heap_get(int device, bool create)
{
    if ((unsigned)device >= VT_MAX_DEVICES)
        return NULL;
    vt__heap *h = &heaps[device];
    if (vt_likely(atomic_load_explicit(&heap_ready[device], memory_order_acquire)))
        return h;
    if (!create)
        return NULL;
    int n = atomic_load(&ndevices);
    if (n < 0) {
        if (vt__backend_device_count(&n))
            n = 0;
        atomic_store(&ndevices, n);
    }
    if (device >= n)
        return NULL;
    /* outside any heap lock: the recorder takes its own */
    if (!atomic_exchange(&provider_set, true))
        vt__alloc_register_state_provider();
    lock(h);
    if (!h->ready)
        heap_setup(h, device);
    unlock(h);
    atomic_store_explicit(&heap_ready[device], true, memory_order_release);
    int hi = atomic_load(&heap_hi);
    while (hi < device + 1 && !atomic_compare_exchange_weak(&heap_hi, &hi, device + 1))
        ;
    return h;
}

int vt__heap_count(void)
{
    return atomic_load_explicit(&heap_hi, memory_order_acquire);
}

/* Room for one more element in a doubling array of `elem`-byte items
 * (`first` slots at the start). @return 0, or -1 out of memory (unchanged). */
static int reserve_one(void **arr, uint64_t n, uint64_t *cap, size_t elem, uint64_t first)
{
    if (n < *cap)
        return 0;
    uint64_t ncap = *cap ? *cap * 2 : first;
    void *p = realloc(*arr, ncap * elem);
    if (!p)
        return -1;
    *arr = p;
    *cap = ncap;
    return 0;
}

/* ---- segments ---------------------------------------------------------- */

static int segs_insert(vt__heap *h, vt__segment *s)
{
    if (reserve_one((void **)&h->segs, h->nsegs, &h->capsegs, sizeof *h->segs, 64))
        return -1;
    uint64_t lo = 0, hi = h->nsegs;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (h->segs[mid]->addr < s->addr)
            lo = mid + 1;
        else
            hi = mid;
    }
    memmove(&h->segs[lo + 1], &h->segs[lo], (h->nsegs - lo) * sizeof *h->segs);
    h->segs[lo] = s;
    h->nsegs++;
    uint64_t v = atomic_load(&h->lo);
    while (s->addr < v && !atomic_compare_exchange_weak(&h->lo, &v, s->addr))
        ;
    v = atomic_load(&h->hi);
    while (s->addr + s->size > v && !atomic_compare_exchange_weak(&h->hi, &v, s->addr + s->size))
        ;
    return 0;
}

static vt__segment *segs_find(vt__heap *h, uint64_t addr, uint64_t *index)
{
    uint64_t lo = 0, hi = h->nsegs;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        vt__segment *s = h->segs[mid];
        if (addr < s->addr)
            hi = mid;
        else if (addr >= s->addr + s->size)
            lo = mid + 1;
        else {
            if (index)
                *index = mid;
            return s;
        }
    }
    return NULL;
}

static void segs_remove(vt__heap *h, vt__segment *s)
{
    uint64_t i;
    if (segs_find(h, s->addr, &i) != s)
        return;
    memmove(&h->segs[i], &h->segs[i + 1], (h->nsegs - i - 1) * sizeof *h->segs);
    h->nsegs--;
}

static bool seg_unused(const vt__segment *s)
{
    return s->pool != VT_POOL_UNCACHED && s->first->state == VT_B_FREE
        && s->first->size == s->size;
}

/* Take a fully free segment out of every structure; the caller frees it on
 * the backend (after dropping the lock) with release_detached(). */
static void detach(vt__heap *h, vt__segment *s, vt__segment **list)
{
    vt__block *b = s->first;
    if (b->state == VT_B_FREE && !s->dead) {
        vt__index_remove(&h->free_idx[s->pool], b);
        h->nfree[s->pool]--;
    }
    block_release(h, b);
    segs_remove(h, s);
    stat2(h->reserved_bytes, s->spool, -(int64_t)s->size);
    stat2(h->segment, s->spool, -1);
    vt__trace(VT_EV_SEGMENT_FREE, h->device, vt__trace_stream(s->stream), s->addr, 0, s->size, 0,
              s->pool, 0, 0);
    s->next = *list;
    *list = s;
}

/* Free detached segments on the device with the lock dropped (cuMemFree
 * synchronizes the device: other threads must not wait for that). */
static int release_detached(vt__heap *h, vt__segment *list)
{
    if (vt_unlikely(h->retired)) {   /* dead segments that became free: along too */
        vt__segment *t = h->retired;
        while (t->next)
            t = t->next;
        t->next = list;
        list = h->retired;
        h->retired = NULL;
    }
    if (!list)
        return 0;
    int rc = 0;
    uint64_t n = 0;
    unlock(h);
    while (list) {
        vt__segment *s = list;
        list = s->next;
        int r = vt__backend_free(h->device, s->addr);
        if (r && !rc)
            rc = r;
        n++;
        free(s->freed);
        free(s);
    }
    lock(h);
    h->num_backend_frees += n;
    return rc;
}

/* Release unused segments: `need` bytes' worth (the smallest one that is big
 * enough, else the largest first), or all of them. */
static int release_cached(vt__heap *h, uint64_t need, bool all)
{
    vt__segment *list = NULL;
    if (!all) {
        vt__segment *fit = NULL;
        for (uint64_t i = 0; i < h->nsegs; i++) {
            vt__segment *s = h->segs[i];
            if (seg_unused(s) && s->size >= need && (!fit || s->size < fit->size))
                fit = s;
        }
        if (fit) {
            detach(h, fit, &list);
            return release_detached(h, list);
        }
    }
    uint64_t freed = 0;
    while (all || freed < need) {
        vt__segment *big = NULL;
        for (uint64_t i = 0; i < h->nsegs; i++) {
            vt__segment *s = h->segs[i];
            if (seg_unused(s) && (!big || s->size > big->size))
                big = s;
        }
        if (!big)
            break;
        freed += big->size;
        detach(h, big, &list);
    }
    return release_detached(h, list);
}

/* garbage_collection_threshold: before the cache grows past threshold x cap,
 * release the unused segments that have been idle longer than average. */
static void collect_garbage(vt__heap *h, uint64_t incoming, const vt_config *cfg)
{
    double thr = cfg->garbage_collection_threshold;
    if (thr <= 0 || h->cap == UINT64_MAX)
        return;
    uint64_t target = (uint64_t)(thr * (double)h->cap);
    vt__segment *list = NULL;
    for (;;) {
        uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
        if (reserved + incoming <= target)
            break;
        uint64_t total_age = 0, n = 0;
        for (uint64_t i = 0; i < h->nsegs; i++)
            if (seg_unused(h->segs[i])) {
                total_age += h->tick - h->segs[i]->first->free_tick;
                n++;
            }
        if (!n)
            break;
        uint64_t avg = total_age / n, released = 0;
        for (uint64_t i = 0; i < h->nsegs && reserved + incoming > target;) {
            vt__segment *s = h->segs[i];
            if (seg_unused(s) && h->tick - s->first->free_tick >= avg) {
                reserved -= s->size;
                detach(h, s, &list);   /* shifts segs down: same i again */
                released++;
            } else {
                i++;
            }
        }
        if (!released)
            break;
    }
    release_detached(h, list);
}

/* A new segment from the backend, with the heap lock dropped during the
 * call. The reservation counts against the cap while the lock is dropped. */
static int new_segment(vt__heap *h, int pool, uint64_t key, uint64_t size,
                       uint32_t stack, vt__block **out)
{
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    if (h->cap != UINT64_MAX && reserved + h->inflight + size > h->cap)
        return CUDA_ERR_OOM;
    if (!vt__index_stream(&h->free_idx[pool], key, true))
        return CUDA_ERR_OOM;   /* no host memory for the stream's index */
    h->inflight += size;
    unlock(h);
    uint64_t addr = 0;
    int rc = vt__backend_malloc(h->device, size, &addr);
    lock(h);
    h->inflight -= size;
    if (rc)
        return rc;
    h->num_backend_allocs++;
    vt__segment *s = malloc(sizeof *s);
    vt__block *b = block_new(h);
    if (s)
        *s = (vt__segment){ .addr = addr, .size = size, .stream = key, .first = b,
                            .pool = (uint8_t)pool, .spool = (uint8_t)pool,
                            .freed = calloc((size / VT_MIN_BLOCK + 63) / 64,
                                            sizeof(uint64_t)) };
    /* The stream's index again: its stream may have been destroyed (and
     * the index dropped) while the lock was dropped; a program error, but
     * one that must not crash the insert below. */
    if (!s || !b || !vt__index_stream(&h->free_idx[pool], key, true)
        || segs_insert(h, s) != 0) {
        if (s)
            free(s->freed);
        free(s);
        if (b)
            block_release(h, b);
        unlock(h);
        vt__backend_free(h->device, addr);
        lock(h);
        h->num_backend_frees++;
        return CUDA_ERR_OOM;
    }
    b->addr = addr;
    b->size = size;
    b->stream = key;
    b->seg = s;
    b->pool = (uint8_t)pool;
    b->state = VT_B_FREE;
    b->free_tick = h->tick;
    vt__index_insert(&h->free_idx[pool], b);
    h->nfree[pool]++;
    stat2(h->reserved_bytes, pool, (int64_t)size);
    stat2(h->segment, pool, 1);
    vt__trace(VT_EV_SEGMENT_ALLOC, h->device, vt__trace_stream(key), addr, 0, size, stack, (uint64_t)pool, 0, 0);
    *out = b;
    return 0;
}

/* ---- free blocks -------------------------------------------------------- */

static vt__block *find_free(vt__heap *h, int pool, uint64_t key, uint64_t size,
                            const vt_config *cfg)
{
    vt__block *b = vt__index_best_fit(&h->free_idx[pool], key, size);
    if (!b)
        return NULL;
    uint64_t msplit = cfg->max_split_size;
    /* Oversize blocks (>= max_split_size) are never split: a small request
     * must not take one, and a large one only with little waste. */
    if (msplit != UINT64_MAX) {
        if (size < msplit && b->size >= msplit)
            return NULL;
        if (size >= msplit && b->size >= size + VT_LARGE_BUFFER)
            return NULL;
    }
    return b;
}

/* Hand out `size` bytes from the start of free block b; the rest stays
 * free when it is worth keeping as a block of its own. */
static void carve(vt__heap *h, vt__block *b, uint64_t size, const vt_config *cfg)
{
    int pool = b->pool;
    vt__index_remove(&h->free_idx[pool], b);
    h->nfree[pool]--;
    account_free(h, b, -1);
    vt__seg_set_freed(b->seg, b->addr, false);   /* an allocation starts here again */
    uint64_t rem = b->size - size;
    bool split = pool == VT_POOL_SMALL
        ? rem >= VT_MIN_BLOCK
        : (size < cfg->max_split_size && rem > VT_SMALL_SIZE);
    if (split) {
        vt__block *r = block_new(h);
        if (r) {
            r->addr = b->addr + size;
            r->size = rem;
            r->stream = b->stream;
            r->seg = b->seg;
            r->pool = b->pool;
            r->state = VT_B_FREE;
            r->free_tick = b->free_tick;
            r->prev = b;
            r->next = b->next;
            if (b->next)
                b->next->prev = r;
            b->next = r;
            b->size = size;
            account_free(h, r, +1);
            vt__index_insert(&h->free_idx[pool], r);
            h->nfree[pool]++;
        }
    }
}

/* Mark b free and absorb its free neighbours. `indexed`: the neighbours are
 * in the free index (everywhere but in a dead segment, whose free blocks are
 * kept out of it so that nothing is carved from it again). */
static inline void merge_free(vt__heap *h, vt__block *b, bool indexed)
{
    int pool = b->pool;
    b->state = VT_B_FREE;
    b->req_size = 0;
    b->nx = 0;
    b->free_tick = h->tick;
    vt__block *p = b->prev, *n = b->next;
    if (p && p->state == VT_B_FREE) {
        account_free(h, p, -1);
        if (indexed) {
            vt__index_remove(&h->free_idx[pool], p);
            h->nfree[pool]--;
        }
        b->addr = p->addr;
        b->size += p->size;
        b->prev = p->prev;
        if (b->prev)
            b->prev->next = b;
        else
            b->seg->first = b;
        block_release(h, p);
    }
    if (n && n->state == VT_B_FREE) {
        account_free(h, n, -1);
        if (indexed) {
            vt__index_remove(&h->free_idx[pool], n);
            h->nfree[pool]--;
        }
        b->size += n->size;
        b->next = n->next;
        if (b->next)
            b->next->prev = b;
        block_release(h, n);
    }
}

/* make_free() in a dead segment: merge without the index; when the segment
 * is free as a whole, detach it onto h->retired. The caller may hold the lock
 * across a fence walk, so the backend free waits for the next
 * release_detached(). */
static __attribute__((noinline)) void make_free_dead(vt__heap *h, vt__block *b)
{
    merge_free(h, b, false);
    if (b->prev || b->next) {
        account_free(h, b, +1);
        return;
    }
    detach(h, b->seg, &h->retired);
}

/* Make b free and merge it with free neighbours (pending ones stay apart). */
static void make_free(vt__heap *h, vt__block *b)
{
    if (vt_unlikely(b->seg->dead)) {
        make_free_dead(h, b);
        return;
    }
    int pool = b->pool;
    merge_free(h, b, true);
    account_free(h, b, +1);
    vt__index_insert(&h->free_idx[pool], b);
    h->nfree[pool]++;
}

/* ---- fences ------------------------------------------------------------- */

static void *event_get(vt__heap *h)
{
    if (h->nevpool)
        return h->evpool[--h->nevpool];
    void *ev = NULL;
    if (vt__backend_event_create(h->device, &ev))
        return NULL;
    return ev;
}

static void event_put(vt__heap *h, void *ev)
{
    if (reserve_one((void **)&h->evpool, h->nevpool, &h->capevpool, sizeof *h->evpool, 64)) {
        vt__backend_event_destroy(h->device, ev);
        return;
    }
    h->evpool[h->nevpool++] = ev;
}

static vt__fence *fence_new(uint32_t nstreams)
{
    vt__fence *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->events = calloc(nstreams ? nstreams : 1, sizeof *f->events);
    if (!f->events) {
        free(f);
        return NULL;
    }
    return f;
}

/* An event on `raw` stream. A stream we cannot record on (destroyed,
 * another context) cannot be waited for either: it is skipped. */
static void fence_record(vt__heap *h, vt__fence *f, uint64_t raw)
{
    void *ev = event_get(h);
    if (!ev)
        return;
    if (vt__backend_event_record(h->device, ev, raw)) {
        event_put(h, ev);
        return;
    }
    f->events[f->nev++] = ev;
    h->num_fence_events++;
}

static int fence_add_block(vt__fence *f, vt__block *b)
{
    uint64_t cap = f->capblocks;
    if (reserve_one((void **)&f->blocks, f->nblocks, &cap, sizeof *f->blocks, 4))
        return -1;
    f->capblocks = (uint32_t)cap;
    f->blocks[f->nblocks++] = b;
    b->nwait++;
    return 0;
}

static void finish_pending(vt__heap *h, vt__block *b)
{
    h->npending--;
    stat2(h->active_bytes, b->seg->spool, -(int64_t)b->size);
    stat2(h->active, b->seg->spool, -1);
    uint64_t addr = b->addr, size = b->size, stream = b->stream;
    make_free(h, b);
    vt__trace(VT_EV_FREE_COMPLETED, h->device, vt__trace_stream(stream), addr, 0, size, 0, 0, 0, 0);
}

/* Record the fence of the current unknown-stream batch: the legacy stream
 * (which waits for all blocking streams, per-thread ones included) and every
 * stream announced on this device. */
static void record_batch_fence(vt__heap *h)
{
    vt__fence *f = fence_new((uint32_t)h->nstreams + 1);
    if (!f)
        return;   /* retried at the next poll */
    f->batch = 1;
    fence_record(h, f, 0);
    for (uint64_t i = 0; i < h->nstreams; i++)
        fence_record(h, f, h->streams[i]);
    while (h->batch) {
        vt__block *b = h->batch;
        if (fence_add_block(f, b))
            break;
        h->batch = b->bnext;
        b->bnext = NULL;
        b->in_batch = 0;
        b->nwait--;       /* the batch's wait is now this fence's */
        h->nbatch--;
    }
    f->next = h->fences;
    h->fences = f;
    h->batch_fence = f;
}

static void fence_done(vt__heap *h, vt__fence *f)
{
    for (uint32_t i = 0; i < f->nev; i++)
        event_put(h, f->events[i]);
    if (h->batch_fence == f)
        h->batch_fence = NULL;
    for (uint32_t i = 0; i < f->nblocks; i++) {
        vt__block *b = f->blocks[i];
        if (--b->nwait == 0)
            finish_pending(h, b);
    }
    free(f->blocks);
    free(f->events);
    free(f);
}

/* Retire completed fences (wait: block until every one completed). */
static void poll_fences(vt__heap *h, bool wait)
{
    if (h->batch && (wait || !h->batch_fence))
        record_batch_fence(h);
    vt__fence **pp = &h->fences;
    while (*pp) {
        vt__fence *f = *pp;
        while (f->ndone < f->nev) {
            void *ev = f->events[f->ndone];
            int r = wait ? vt__backend_event_sync(h->device, ev)
                         : vt__backend_event_query(h->device, ev);
            if (r == VT_BACKEND_NOT_READY)
                break;
            f->ndone++;   /* done, or failed: its work will never run */
        }
        if (f->ndone == f->nev) {
            *pp = f->next;
            fence_done(h, f);
        } else {
            pp = &f->next;
        }
    }
    if (h->batch && !h->batch_fence)
        record_batch_fence(h);
}

/* ---- allocation --------------------------------------------------------- */

static void oom_report(vt__heap *h, uint64_t key, uint64_t req, uint64_t size, uint32_t stack)
{
    uint64_t free_b = 0, total = 0;
    vt__backend_mem_info(h->device, &free_b, &total);
    lock(h);
    h->num_ooms++;
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    vt__trace(VT_EV_OOM, h->device, vt__trace_stream(key), 0, req, size, stack, free_b, reserved, 0);
    unlock(h);
    vt__trace_out_of_memory();
}

/* The miss path: grow, or recover memory and retry. Called and returns with
 * the lock held; may drop it in between. */
static int grow(vt__heap *h, int pool, uint64_t key, uint64_t size, uint32_t stack,
                const vt_config *cfg, vt__block **out)
{
    uint64_t seg = segment_size(size);
    collect_garbage(h, seg, cfg);
    if ((*out = find_free(h, pool, key, size, cfg)))
        return 0;
    int rc = new_segment(h, pool, key, seg, stack, out);
    if (rc != CUDA_ERR_OOM)
        return rc;
    /* 1: release unused segments (enough for this one) and retry */
    h->num_alloc_retries++;
    release_cached(h, seg, false);
    if ((*out = find_free(h, pool, key, size, cfg)))
        return 0;
    rc = new_segment(h, pool, key, seg, stack, out);
    if (rc != CUDA_ERR_OOM)
        return rc;
    /* 2: wait for every pending free, release everything unused, retry */
    h->num_sync_all++;
    poll_fences(h, true);
    release_detached(h, NULL);   /* dead segments that became free */
    if ((*out = find_free(h, pool, key, size, cfg)))
        return 0;
    release_cached(h, 0, true);
    if ((*out = find_free(h, pool, key, size, cfg)))
        return 0;
    rc = new_segment(h, pool, key, seg, stack, out);
    if (rc != CUDA_ERR_OOM || seg == size)
        return rc;
    /* 3: what the program's own cudaMalloc would have got: the request
     * alone, no room to share. A program that fits without the cache fits
     * with it. */
    return new_segment(h, pool, key, size, stack, out);
}

/* cache:0 - one backend allocation per request, tracked only so that frees
 * and the trace know it. */
static int passthrough_malloc(vt__heap *h, uint64_t req, uint64_t key, uint32_t stack,
                              void **out)
{
    int spool = req <= VT_SMALL_SIZE ? VT_STAT_SMALL : VT_STAT_LARGE;
    lock(h);
    uint64_t reserved = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current;
    if (h->cap != UINT64_MAX && reserved + h->inflight + req > h->cap) {
        unlock(h);
        oom_report(h, key, req, req, stack);
        return CUDA_ERR_OOM;
    }
    h->inflight += req;
    unlock(h);
    uint64_t addr = 0;
    int rc = vt__backend_malloc(h->device, req, &addr);
    lock(h);
    h->inflight -= req;
    if (rc) {
        unlock(h);
        if (rc == CUDA_ERR_OOM)
            oom_report(h, key, req, req, stack);
        return rc;
    }
    h->num_backend_allocs++;
    vt__badfree_forget(h, addr);   /* the device hands the address out again */
    vt__segment *s = malloc(sizeof *s);
    vt__block *b = block_new(h);
    if (s && b) {
        *s = (vt__segment){ .addr = addr, .size = req, .stream = key, .first = b,
                            .pool = VT_POOL_UNCACHED, .spool = (uint8_t)spool };
        b->addr = addr;
        b->size = req;
        b->req_size = req;
        b->stream = key;
        b->seg = s;
        b->stack = stack;
        b->state = VT_B_ALLOCATED;
        b->pool = VT_POOL_UNCACHED;
    }
    if (!s || !b || segs_insert(h, s)) {
        free(s);
        if (b)
            block_release(h, b);
        unlock(h);
        vt__backend_free(h->device, addr);
        return CUDA_ERR_OOM;
    }
    if (vt__ptrmap_put(&h->live, addr, b)) {
        segs_remove(h, s);
        free(s);
        block_release(h, b);
        unlock(h);
        vt__backend_free(h->device, addr);
        return CUDA_ERR_OOM;
    }
    stat2(h->reserved_bytes, spool, (int64_t)req);
    stat2(h->segment, spool, 1);
    stat2(h->allocated_bytes, spool, (int64_t)req);
    stat2(h->requested_bytes, spool, (int64_t)req);
    stat2(h->active_bytes, spool, (int64_t)req);
    stat2(h->allocation, spool, 1);
    stat2(h->active, spool, 1);
    vt__trace(VT_EV_SEGMENT_ALLOC, h->device, vt__trace_stream(key), addr, 0, req, stack, VT_POOL_UNCACHED, 0, 0);
    b->alloc_seq = vt__trace(VT_EV_ALLOC, h->device, vt__trace_stream(key), addr, req, req, stack, 0, 0, 0);
    unlock(h);
    *out = (void *)(uintptr_t)addr;
    return 0;
}

int vt__heap_malloc(vt__heap *h, uint64_t req, uint64_t key, void **out)
{
    const vt_config *cfg = vt__config();
    uint32_t stack = vt__trace_enabled() ? vt__stack_capture() : 0;
    if (vt_unlikely(req > VT_MAX_REQUEST)) {
        oom_report(h, key, req, req, stack);
        *out = NULL;
        return CUDA_ERR_OOM;
    }
    if (vt_unlikely(!cfg->cache))
        return passthrough_malloc(h, req, key, stack, out);
    uint64_t size = round_size(req, cfg);
    int pool = size <= VT_SMALL_SIZE ? VT_POOL_SMALL : VT_POOL_LARGE;

    lock(h);
    h->tick++;
    if (vt_unlikely(h->fences || h->batch)) {
        poll_fences(h, false);
        if (vt_unlikely(h->retired))
            release_detached(h, NULL);
    }
    vt__block *b = find_free(h, pool, key, size, cfg);
    if (vt_unlikely(!b)) {
        int rc = grow(h, pool, key, size, stack, cfg, &b);
        if (rc) {
            unlock(h);
            if (rc == CUDA_ERR_OOM)
                oom_report(h, key, req, size, stack);
            *out = NULL;
            return rc;
        }
    }
    carve(h, b, size, cfg);
    if (vt_unlikely(vt__ptrmap_put(&h->live, b->addr, b))) {
        make_free(h, b);   /* host memory exhausted: give the block back */
        unlock(h);
        *out = NULL;
        return CUDA_ERR_OOM;
    }
    int sp = b->seg->spool;
    b->state = VT_B_ALLOCATED;
    b->req_size = req;
    b->stack = stack;
    stat2(h->allocated_bytes, sp, (int64_t)b->size);
    stat2(h->requested_bytes, sp, (int64_t)req);
    stat2(h->active_bytes, sp, (int64_t)b->size);
    stat2(h->allocation, sp, 1);
    stat2(h->active, sp, 1);
    b->alloc_seq = vt__trace(VT_EV_ALLOC, h->device, vt__trace_stream(key), b->addr, req, b->size, stack, 0, 0, 0);
    *out = (void *)(uintptr_t)b->addr;
    unlock(h);
    return 0;
}

/* ---- free --------------------------------------------------------------- */

void vt__alloc_report_foreign_free(int device, const void *ptr, uint32_t stack)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    int reason = VT_BAD_FREE_UNKNOWN_POINTER;
    vt__heap *h = vt__heap_get(device, false);
    if (h) {
        lock(h);
        reason = vt__badfree_foreign_reason(h, addr);
        h->num_bad_frees++;
        unlock(h);
    }
    vt__badfree_report(device, addr, reason, stack);
}

static void free_uncached(vt__heap *h, vt__block *b)
{
    vt__segment *s = b->seg, *list = NULL;
    int sp = s->spool;
    stat2(h->allocated_bytes, sp, -(int64_t)b->size);
    stat2(h->requested_bytes, sp, -(int64_t)b->req_size);
    stat2(h->active_bytes, sp, -(int64_t)b->size);
    stat2(h->allocation, sp, -1);
    stat2(h->active, sp, -1);
    vt__trace(VT_EV_FREE_COMPLETED, h->device, vt__trace_stream(b->stream), b->addr, 0, b->size, 0, 0, 0, 0);
    vt__badfree_note_uncached_free(h, b->addr);
    b->state = VT_B_PENDING;   /* not FREE: detach must not look in the index */
    detach(h, s, &list);
    release_detached(h, list);
}

/* Add an extra stream the block is used on. @return 0 or -1 (no memory). */
static int xstream_add(vt__block *b, uint64_t key)
{
    for (uint32_t i = 0; i < b->nx; i++)
        if (b->xstreams[i] == key)
            return 0;
    if (b->nx == b->capx) {
        uint64_t *n = malloc(b->capx * 2 * sizeof *n);
        if (!n)
            return -1;
        memcpy(n, b->xstreams, b->nx * sizeof *n);
        if (b->xstreams != b->xinline)
            free(b->xstreams);
        b->xstreams = n;
        b->capx *= 2;
    }
    b->xstreams[b->nx++] = key;
    return 1;
}

/* Free an allocated block of heap h (locked). */
static void free_block(vt__heap *h, vt__block *b, uint64_t key, enum vt_free_mode mode,
                       uint32_t stack)
{
    if (vt_unlikely(b->pool == VT_POOL_UNCACHED)) {
        vt__trace(VT_EV_FREE_REQUESTED, h->device, mode == VT_FREE_UNKNOWN_STREAM ? 0 : vt__trace_stream(key),
                  b->addr, b->req_size, b->size, stack, 0, 0, 0);
        free_uncached(h, b);
        return;
    }
    int sp = b->seg->spool;
    stat2(h->allocated_bytes, sp, -(int64_t)b->size);
    stat2(h->requested_bytes, sp, -(int64_t)b->req_size);
    stat2(h->allocation, sp, -1);
    vt__seg_set_freed(b->seg, b->addr, true);
    /* Freed on another stream than its own: that stream may still use it. */
    bool unknown = mode == VT_FREE_UNKNOWN_STREAM;
    if (!unknown && key != b->stream && xstream_add(b, key) < 0)
        unknown = true;   /* no memory to remember it: fence every stream */
    bool pending = unknown || b->nx > 0;
    vt__trace(VT_EV_FREE_REQUESTED, h->device, unknown ? 0 : vt__trace_stream(key), b->addr, b->req_size,
              b->size, stack, pending, 0, 0);
    if (vt_likely(!pending)) {
        stat2(h->active_bytes, sp, -(int64_t)b->size);
        stat2(h->active, sp, -1);
        uint64_t addr = b->addr, size = b->size;
        make_free(h, b);
        vt__trace(VT_EV_FREE_COMPLETED, h->device, vt__trace_stream(key), addr, 0, size, 0, 0, 0, 0);
        return;
    }
    b->state = VT_B_PENDING;
    b->nwait = 0;
    h->npending++;
    if (b->nx) {
        vt__fence *f = fence_new(b->nx);
        if (f) {
            for (uint32_t i = 0; i < b->nx; i++)
                fence_record(h, f, key_to_raw(b->xstreams[i]));
            if (fence_add_block(f, b) == 0) {
                f->next = h->fences;
                h->fences = f;
            } else {
                free(f->events);
                free(f);
                f = NULL;
            }
        }
        if (!f && !unknown) {
            /* no host memory for a fence: fall back to the batch, which
             * fences every stream */
            unknown = true;
        }
    }
    if (unknown) {
        b->in_batch = 1;
        b->nwait++;
        b->bnext = h->batch;
        h->batch = b;
        h->nbatch++;
    }
}

static int classify(vt__heap *h, uint64_t addr)
{
    vt__segment *s = segs_find(h, addr, NULL);
    return s ? vt__badfree_classify(h, s, addr) : 0;
}

/* Could heap d own addr? Its [lo, hi) range only grows, so a lock-free look
 * rules out the other devices' heaps before taking any lock. */
static inline bool heap_may_own(int d, uint64_t addr)
{
    const vt__heap *h = &heaps[d];
    return atomic_load_explicit(&heap_ready[d], memory_order_acquire)
           && addr >= atomic_load_explicit(&h->lo, memory_order_relaxed)
           && addr < atomic_load_explicit(&h->hi, memory_order_relaxed);
}

int vt__heap_free(void *ptr, uint64_t key, enum vt_free_mode mode, uint32_t stack)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    int n = vt__heap_count();
    for (int d = 0; d < n; d++) {
        vt__heap *h = &heaps[d];
        if (!heap_may_own(d, addr))
            continue;
        lock(h);
        vt__block *b = vt__ptrmap_del(&h->live, addr);
        if (vt_likely(b)) {
            free_block(h, b, key, mode, stack);
            if (vt_unlikely(h->retired))
                release_detached(h, NULL);
            unlock(h);
            return 0;
        }
        int reason = classify(h, addr);
        if (reason)
            h->num_bad_frees++;
        unlock(h);
        if (reason) {
            vt__badfree_report(d, addr, reason, stack);
            return CUDA_ERR_INVALID_VALUE;
        }
    }
    return VT_ALLOC_NOT_OWNED;
}

int vt__heap_record_stream(void *ptr, uint64_t key)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    int n = vt__heap_count();
    for (int d = 0; d < n; d++) {
        vt__heap *h = &heaps[d];
        if (!heap_may_own(d, addr))
            continue;
        lock(h);
        vt__block *b = vt__ptrmap_get(&h->live, addr);
        if (!b) {
            /* an interior pointer names its block too (a tensor view) */
            vt__segment *s = segs_find(h, addr, NULL);
            for (vt__block *x = s ? s->first : NULL; x; x = x->next)
                if (addr >= x->addr && addr < x->addr + x->size) {
                    if (x->state == VT_B_ALLOCATED)
                        b = x;
                    break;
                }
        }
        if (!b) {
            unlock(h);
            continue;
        }
        int rc = 0;
        if (key != b->stream && b->pool != VT_POOL_UNCACHED) {
            int r = xstream_add(b, key);
            if (r < 0)
                rc = CUDA_ERR_OOM;
            else if (r > 0)
                vt__trace(VT_EV_STREAM_USE, h->device, key, b->addr, 0, b->size, 0, 0, 0, 0);
        }
        unlock(h);
        return rc;
    }
    return CUDA_ERR_INVALID_VALUE;
}

bool vt__heap_owns(const void *ptr)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    int n = vt__heap_count();
    for (int d = 0; d < n; d++) {
        vt__heap *h = &heaps[d];
        if (!heap_may_own(d, addr))
            continue;
        lock(h);
        bool own = segs_find(h, addr, NULL) != NULL;
        unlock(h);
        if (own)
            return true;
    }
    return false;
}

/* ---- maintenance -------------------------------------------------------- */

int vt__heap_empty_cache(vt__heap *h)
{
    lock(h);
    h->num_sync_all++;
    poll_fences(h, true);
    int rc = release_cached(h, 0, true);
    unlock(h);
    return rc;
}

void vt__heap_sync_begin(vt__heap *h, bool all)
{
    lock(h);
    if (h->batch && (all || !h->batch_fence))
        record_batch_fence(h);
    unlock(h);
}

void vt__heap_sync_end(vt__heap *h)
{
    lock(h);
    if (h->fences || h->batch) {
        poll_fences(h, false);
        if (h->retired)
            release_detached(h, NULL);
    }
    unlock(h);
}

void vt__heap_stream_created(vt__heap *h, uint64_t raw)
{
    if (raw <= 2)
        return;   /* default streams are covered by the legacy-stream event */
    lock(h);
    for (uint64_t i = 0; i < h->nstreams; i++)
        if (h->streams[i] == raw) {
            unlock(h);
            return;
        }
    if (reserve_one((void **)&h->streams, h->nstreams, &h->capstreams, sizeof *h->streams, 16)) {
        unlock(h);
        return;
    }
    h->streams[h->nstreams++] = raw;
    unlock(h);
}

/* Does the cache still depend on work of stream `raw`: a segment of its
 * own (a later stream may get the same handle and reuse those blocks at
 * once) or a live block used on it (vt_record_stream, whose fence is only
 * recorded at the free)? */
static bool stream_in_use(vt__heap *h, uint64_t raw)
{
    for (uint64_t i = 0; i < h->nsegs; i++)
        if (h->segs[i]->stream == raw && !h->segs[i]->dead)
            return true;
    for (uint64_t i = 0; h->live.keys && i <= h->live.mask; i++) {
        const vt__block *b = h->live.keys[i] ? h->live.vals[i] : NULL;
        for (uint32_t k = 0; b && k < b->nx; k++)
            if (b->xstreams[k] == raw)
                return true;
    }
    return false;
}

/* The segments of a destroyed stream, once its work is done. Only that
 * stream's allocations look in their index, and it will make none (a later
 * stream that gets the same handle value is a new stream and starts a new
 * index), so the memory would sit idle until an OOM or empty_cache:
 *   - a fully free one is detached onto *list, for the backend;
 *   - one that still holds allocated or pending blocks becomes dead: its
 *     free blocks leave the index, and make_free_dead() retires it when its
 *     last block is free. Frees of its blocks keep their ordinary rules
 *     (a free on the block's own stream needs no fence: that stream's work
 *     was waited for; a free on another stream is fenced on that stream), and
 *     the backend free (cuMemFree synchronizes the device) ends any doubt.
 * Why not re-home such a segment to the legacy stream and keep it cached:
 * the blocks were handed out for the destroyed stream, and the caller frees
 * them naming that stream (vt_free and PyTorch's pluggable-allocator free
 * pass the allocation stream). Re-homed, that free would look like a
 * cross-stream free and record a fence event on a dead handle (undefined on a
 * real driver); and a live block would move to a stream whose ordering the
 * program never agreed to. Releasing is safe without any such argument, and
 * the cost is one cudaMalloc for a later stream that needs the memory.
 * Then the stream's (empty) index is dropped: about 60 KiB of host memory per
 * pool and stream. */
static void retire_stream_segments(vt__heap *h, uint64_t key, vt__segment **list)
{
    for (uint64_t i = 0; i < h->nsegs;) {
        vt__segment *s = h->segs[i];
        if (s->stream != key || s->dead || s->pool == VT_POOL_UNCACHED) {
            i++;
            continue;
        }
        if (seg_unused(s)) {
            detach(h, s, list);   /* shifts segs down: same i again */
            continue;
        }
        s->dead = 1;
        for (vt__block *b = s->first; b; b = b->next)
            if (b->state == VT_B_FREE) {
                vt__index_remove(&h->free_idx[s->pool], b);
                h->nfree[s->pool]--;
            }
        i++;
    }
    vt__index_drop(&h->free_idx[VT_POOL_SMALL], key);
    vt__index_drop(&h->free_idx[VT_POOL_LARGE], key);
}

/* Called before the stream is destroyed (its handle is invalid after: no
 * event can be recorded on it any more, and the value may name a new stream
 * later), while its queued work may still run. So: frees of unknown stream
 * still waiting for their fence get it now, with this stream in it; and
 * when blocks still depend on the stream's work, that work is waited for
 * here, after which the stream is dropped from every block's users and its
 * segments are given back (retire_stream_segments). */
void vt__heap_stream_destroyed(vt__heap *h, uint64_t raw)
{
    if (raw <= 2)
        return;   /* default streams are never destroyed */
    lock(h);
    if (h->batch)
        record_batch_fence(h);
    for (uint64_t i = 0; i < h->nstreams; i++)
        if (h->streams[i] == raw) {
            h->streams[i] = h->streams[--h->nstreams];
            break;
        }
    bool busy = stream_in_use(h, raw);
    unlock(h);
    if (busy)
        vt__backend_stream_sync(h->device, raw);
    lock(h);
    for (uint64_t i = 0; busy && h->live.keys && i <= h->live.mask; i++) {
        vt__block *b = h->live.keys[i] ? h->live.vals[i] : NULL;
        for (uint32_t k = 0; b && k < b->nx; k++)
            if (b->xstreams[k] == raw) {
                b->xstreams[k] = b->xstreams[--b->nx];
                break;
            }
    }
    /* Completed frees first: a segment whose last pending block is done
     * goes back now rather than at a later poll. */
    if (h->fences || h->batch)
        poll_fences(h, false);
    vt__segment *list = NULL;
    retire_stream_segments(h, raw, &list);
    release_detached(h, list);
    unlock(h);
}

/* What the next allocation can get back from the cache, whatever its size
 * and stream: the segments that hold no allocated block (free, or freed and
 * waiting for a fence, which the OOM chain waits for), which the OOM chain
 * gives back to the device. Free blocks in segments that still hold an
 * allocated block serve only requests that fit them, on their stream: not
 * counted, so cudaMemGetInfo never promises memory a cudaMalloc of that
 * size cannot get. */
static uint64_t releasable(const vt__heap *h)
{
    uint64_t v = 0;
    for (uint64_t i = 0; i < h->nsegs; i++) {
        const vt__segment *s = h->segs[i];
        if (s->pool == VT_POOL_UNCACHED)
            continue;
        const vt__block *b = s->first;
        while (b && b->state != VT_B_ALLOCATED)
            b = b->next;
        if (!b)
            v += s->size;
    }
    return v;
}

uint64_t vt__heap_cached_free(vt__heap *h)
{
    lock(h);
    uint64_t v = releasable(h);
    unlock(h);
    return v;
}

/* The cap counts reserved bytes: after the OOM chain gave the releasable
 * segments back, cap - (reserved - releasable) is all it lets through. */
uint64_t vt__heap_mem_free(vt__heap *h, uint64_t device_free)
{
    lock(h);
    uint64_t rel = releasable(h);
    uint64_t v = device_free + rel;
    if (h->cap != UINT64_MAX) {
        uint64_t kept = (uint64_t)h->reserved_bytes[VT_STAT_ALL].current - rel;
        uint64_t room = h->cap > kept ? h->cap - kept : 0;
        if (v > room)
            v = room;
    }
    unlock(h);
    return v;
}

static void copy_stats(vt_stat *dst, const vt__stat_t *src)
{
    for (int i = 0; i < 3; i++)
        dst[i] = (vt_stat){ src[i].current, src[i].peak, src[i].allocated, src[i].freed };
}

void vt__heap_stats(vt__heap *h, vt_stats *o)
{
    memset(o, 0, sizeof *o);
    lock(h);
    copy_stats(o->allocated_bytes, h->allocated_bytes);
    copy_stats(o->reserved_bytes, h->reserved_bytes);
    copy_stats(o->active_bytes, h->active_bytes);
    copy_stats(o->inactive_split_bytes, h->inactive_split_bytes);
    copy_stats(o->requested_bytes, h->requested_bytes);
    copy_stats(o->allocation, h->allocation);
    copy_stats(o->segment, h->segment);
    copy_stats(o->active, h->active);
    copy_stats(o->inactive_split, h->inactive_split);
    o->num_alloc_retries = h->num_alloc_retries;
    o->num_ooms = h->num_ooms;
    o->num_backend_allocs = h->num_backend_allocs;
    o->num_backend_frees = h->num_backend_frees;
    o->num_sync_all = h->num_sync_all;
    o->num_fence_events = h->num_fence_events;
    o->num_bad_frees = h->num_bad_frees;
    unlock(h);
}

void vt__heap_reset_peaks(vt__heap *h)
{
    vt__stat_t *all[] = { h->allocated_bytes, h->reserved_bytes, h->active_bytes,
                          h->inactive_split_bytes, h->requested_bytes, h->allocation,
                          h->segment, h->active, h->inactive_split };
    lock(h);
    for (size_t k = 0; k < sizeof all / sizeof *all; k++)
        for (int i = 0; i < 3; i++)
            all[k][i].peak = all[k][i].current;
    unlock(h);
}

int vt__heap_set_fraction(vt__heap *h, double fraction)
{
    if (!(fraction > 0 && fraction <= 1))
        return -EINVAL;
    lock(h);
    h->fraction = fraction;
    if (h->total_mem != UINT64_MAX)
        h->cap = (uint64_t)(fraction * (double)h->total_mem);
    unlock(h);
    return 0;
}

/* ---- read access for the checker and the snapshot provider -------------- */

void vt__heap_lock(vt__heap *h) { lock(h); }
void vt__heap_unlock(vt__heap *h) { unlock(h); }
