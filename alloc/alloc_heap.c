/*
 * alloc/alloc_heap.c - the caching allocator core: one heap per device,
 * its lock, its block structs, and the malloc and free paths.
 *
 * Allocation: round the size, poll in-flight fences (completed frees become
 * reusable, alloc_fence.c), best fit in the pool's free index on the
 * allocating stream (alloc_index.c), split, hand out. On a miss: the
 * segments' miss path (alloc_segment.c: gc, a new segment, the OOM chain).
 *
 * Free: a block whose only user is its own stream is free at once and
 * coalesces with free neighbours; any other waits on a fence
 * (alloc_fence.c, which says when a block may be used again, and by whom).
 *
 * Elsewhere: stream keys and destroyed streams (alloc_stream.c), counters
 * (alloc_stats.c), cache:0 (alloc_uncached.c), fork safety (alloc_fork.c),
 * bad frees (alloc_badfree.c), a device reset (alloc_reset.c).
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "alloc_internal.h"
#include "backend.h"
#include "recorder.h"

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

/* ---- the lock (the fast path is inline in alloc_internal.h) ------------ */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

__thread unsigned vt__heap_locks_held __attribute__((tls_model("initial-exec")));

void vt__heap_lock_slow(vt__heap *h)
{
    for (;;) {
        for (int i = 0; i < 64 && atomic_load_explicit(&h->lock, memory_order_relaxed); i++)
            cpu_relax();
        if (!atomic_exchange_explicit(&h->lock, 1, memory_order_acquire))
            return;
        sched_yield();
    }
}

/* ---- block structs ----------------------------------------------------- */

vt__block *vt__block_new(vt__heap *h)
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

void vt__block_release(vt__heap *h, vt__block *b)
{
    if (b->xstreams != b->xinline)
        free(b->xstreams);
    b->bnext = h->spare;
    h->spare = b;
}

static inline void account_free(vt__heap *h, vt__block *b, int sign)
{
    if (b->prev || b->next) {
        vt__stat_add(h->inactive_split_bytes, b->seg->spool, sign * (int64_t)b->size);
        vt__stat_add(h->inactive_split, b->seg->spool, sign);
    }
}

static uint64_t round_size(uint64_t req, const vt__conf *cfg)
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

/* ---- heaps ------------------------------------------------------------- */

static void heap_setup(vt__heap *h, int device)
{
    const vt__conf *cfg = vt__config();
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
    if (vt__likely(atomic_load_explicit(&heap_ready[device], memory_order_acquire)))
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
    vt__heap_lock(h);
    if (!h->ready)
        heap_setup(h, device);
    vt__heap_unlock(h);
    atomic_store_explicit(&heap_ready[device], true, memory_order_release);
    int hi = atomic_load(&heap_hi);
    while (hi < device + 1 && !atomic_compare_exchange_weak(&heap_hi, &hi, device + 1))
        ;
    return h;
}

vt__heap *vt__heap_slot(int device)
{
    return &heaps[device];
}

int vt__heap_count(void)
{
    return atomic_load_explicit(&heap_hi, memory_order_acquire);
}

/* ---- free blocks -------------------------------------------------------- */

vt__block *vt__find_free(vt__heap *h, int pool, uint64_t key, uint64_t size,
                         const vt__conf *cfg)
{
    vt__block *b = vt__index_best_fit(&h->free_idx[pool], key, size);
    if (!b)
        return NULL;
    /* IPC-safe (alloc_ipc.c): a whole segment of about the size, no other */
    if (vt__unlikely(vt__ipc_whole(key, cfg)))
        return b->seg->whole && b->size - size <= size / 8 ? b : NULL;
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
static void carve(vt__heap *h, vt__block *b, uint64_t size, const vt__conf *cfg)
{
    int pool = b->pool;
    vt__index_remove(&h->free_idx[pool], b);
    h->nfree[pool]--;
    account_free(h, b, -1);
    vt__seg_set_freed(b->seg, b->addr, false);   /* an allocation starts here again */
    uint64_t rem = b->size - size;
    /* in an expandable segment any remainder splits off (as PyTorch's):
     * the free end of the range serves every size */
    bool split = b->seg->whole ? false
        : pool == VT_POOL_SMALL || b->seg->va_size
        ? rem >= VT_MIN_BLOCK
        : (size < cfg->max_split_size && rem > VT_SMALL_SIZE);
    if (split) {
        vt__block *r = vt__block_new(h);
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
        vt__block_release(h, p);
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
        vt__block_release(h, n);
    }
}

/* vt__make_free() in a dead segment: merge without the index; when the segment
 * is free as a whole, detach it onto h->retired. The caller may hold the lock
 * across a fence walk, so the backend free waits for the next
 * vt__release_detached(). */
static __attribute__((noinline)) void make_free_dead(vt__heap *h, vt__block *b)
{
    merge_free(h, b, false);
    if (b->prev || b->next) {
        account_free(h, b, +1);
        if (!b->seg->unmapped || !vt__seg_unused(b->seg))
            return;   /* else free blocks between holes: free as a whole */
    }
    vt__seg_detach(h, b->seg, &h->retired);
}

/* Make b free and merge it with free neighbours (pending ones stay apart). */
void vt__make_free(vt__heap *h, vt__block *b)
{
    if (vt__unlikely(b->seg->dead)) {
        make_free_dead(h, b);
        return;
    }
    int pool = b->pool;
    merge_free(h, b, true);
    account_free(h, b, +1);
    vt__index_insert(&h->free_idx[pool], b);
    h->nfree[pool]++;
}

/* ---- allocation --------------------------------------------------------- */

int vt__heap_malloc(vt__heap *h, uint64_t req, uint64_t key, void **out)
{
    const vt__conf *cfg = vt__config();
    uint32_t stack = vt__trace_enabled() ? vt__stack_capture() : 0;
    if (vt__unlikely(req > VT_MAX_REQUEST)) {
        vt__oom_report(h, key, req, req, stack);
        *out = NULL;
        return VT_CUDA_ERR_OOM;
    }
    if (vt__unlikely(!cfg->cache))
        return vt__uncached_malloc(h, req, key, stack, out);
    uint64_t size = round_size(req, cfg);
    int pool = size <= VT_SMALL_SIZE ? VT_POOL_SMALL : VT_POOL_LARGE;
    if (key == VT_NO_STREAM_KEY)
        vt__ipc_refresh(cfg);   /* the IPC-safe mode (alloc_ipc.c), before the lock */

    vt__heap_lock(h);
    h->tick++;
    if (vt__unlikely(h->fences || h->batch)) {
        vt__poll_fences(h, false);
        if (vt__unlikely(h->retired))
            vt__release_detached(h, NULL);
    }
    vt__block *b = vt__find_free(h, pool, key, size, cfg);
    if (vt__unlikely(!b)) {
        int rc = vt__heap_grow(h, pool, key, size, stack, cfg, &b);
        if (rc) {
            vt__heap_unlock(h);
            if (rc == VT_CUDA_ERR_OOM)
                vt__oom_report(h, key, req, size, stack);
            *out = NULL;
            return rc;
        }
    }
    carve(h, b, size, cfg);
    if (vt__unlikely(vt__ptrmap_put(&h->live, b->addr, b))) {
        vt__make_free(h, b);   /* host memory exhausted: give the block back */
        vt__heap_unlock(h);
        *out = NULL;
        return VT_CUDA_ERR_OOM;
    }
    int sp = b->seg->spool;
    b->state = VT_B_ALLOCATED;
    b->req_size = req;
    b->stack = stack;
    vt__stat_add(h->allocated_bytes, sp, (int64_t)b->size);
    vt__stat_add(h->requested_bytes, sp, (int64_t)req);
    vt__stat_add(h->active_bytes, sp, (int64_t)b->size);
    vt__stat_add(h->allocation, sp, 1);
    vt__stat_add(h->active, sp, 1);
    b->alloc_seq = vt__trace(.kind = VT_EV_ALLOC, .device = h->device,
                             .stream = vt__trace_stream(key),
                             .addr = b->addr, .req_size = req,
                             .size = b->size, .stack = stack,
                             .aux = key == VT_NO_STREAM_KEY ? VT_ALLOC_NO_STREAM : 0);
    *out = (void *)(uintptr_t)b->addr;
    vt__heap_unlock(h);
    return 0;
}

/* ---- free --------------------------------------------------------------- */

/* Free an allocated block of heap h (locked). */
static void free_block(vt__heap *h, vt__block *b, uint64_t key, enum vt__free_mode mode,
                       uint32_t stack)
{
    if (vt__unlikely(b->pool == VT_POOL_UNCACHED)) {
        vt__trace(.kind = VT_EV_FREE_REQUESTED, .device = h->device,
                  .stream = mode == VT_FREE_UNKNOWN_STREAM ? 0 : vt__trace_stream(key),
                  .addr = b->addr, .req_size = b->req_size, .size = b->size,
                  .stack = stack, .aux2 = b->stack);
        vt__uncached_free(h, b);
        return;
    }
    int sp = b->seg->spool;
    vt__stat_add(h->allocated_bytes, sp, -(int64_t)b->size);
    vt__stat_add(h->requested_bytes, sp, -(int64_t)b->req_size);
    vt__stat_add(h->allocation, sp, -1);
    vt__seg_set_freed(b->seg, b->addr, true);
    /* Freed on another stream than its own: that stream may still use it. */
    bool unknown = mode == VT_FREE_UNKNOWN_STREAM;
    if (!unknown && key != b->stream && vt__block_use_stream(b, key) < 0)
        unknown = true;   /* no memory to remember it: fence every stream */
    bool pending = unknown || b->nx > 0;
    vt__trace(.kind = VT_EV_FREE_REQUESTED, .device = h->device,
              .stream = unknown ? 0 : vt__trace_stream(key), .addr = b->addr,
              .req_size = b->req_size, .size = b->size, .stack = stack, .aux = pending,
              .aux2 = b->stack);   /* where it was made: format 1.12 */
    if (vt__likely(!pending)) {
        vt__stat_add(h->active_bytes, sp, -(int64_t)b->size);
        vt__stat_add(h->active, sp, -1);
        uint64_t addr = b->addr, size = b->size;
        vt__make_free(h, b);
        vt__trace(.kind = VT_EV_FREE_COMPLETED, .device = h->device,
                  .stream = vt__trace_stream(key), .addr = addr, .size = size);
        return;
    }
    vt__fence_free(h, b, unknown);
}

static int classify(vt__heap *h, uint64_t addr)
{
    vt__segment *s = vt__segs_find(h, addr, NULL);
    return s ? vt__badfree_classify(h, s, addr) : vt__badfree_outside_segments(h, addr);
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

/* Each heap d, h whose range may hold addr (heap_may_own), in device order.
 * The body runs once per such heap: `continue` goes to the next one, and so
 * does `break` (it leaves only the one-pass inner loop): leave with return. */
#define FOR_EACH_HEAP_MAY_OWN(d, h, addr)                         \
    for (int d = 0, n_ = vt__heap_count(); d < n_; d++)           \
        for (vt__heap *h = &heaps[d]; h && heap_may_own(d, addr); h = NULL)

int vt__heap_free(void *ptr, uint64_t key, enum vt__free_mode mode, uint32_t stack)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    FOR_EACH_HEAP_MAY_OWN(d, h, addr) {
        vt__heap_lock(h);
        vt__block *b = vt__ptrmap_del(&h->live, addr);
        if (vt__likely(b)) {
            free_block(h, b, key, mode, stack);
            if (vt__unlikely(h->retired))
                vt__release_detached(h, NULL);
            vt__heap_unlock(h);
            return 0;
        }
        int reason = classify(h, addr);
        bool accepted = reason && vt__badfree_accepted(h, addr, reason);
        if (reason)
            h->num_bad_frees++;
        vt__heap_unlock(h);
        if (reason) {
            vt__badfree_report(d, addr, reason, stack);
            return accepted ? 0 : VT_CUDA_ERR_INVALID_VALUE;
        }
    }
    return VT_ALLOC_NOT_OWNED;
}

int vt__heap_record_stream(void *ptr, uint64_t key)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    FOR_EACH_HEAP_MAY_OWN(d, h, addr) {
        vt__heap_lock(h);
        vt__block *b = vt__ptrmap_get(&h->live, addr);
        if (!b) {
            /* an interior pointer names its block too (a tensor view) */
            vt__segment *s = vt__segs_find(h, addr, NULL);
            for (vt__block *x = s ? s->first : NULL; x; x = x->next)
                if (addr >= x->addr && addr < x->addr + x->size) {
                    if (x->state == VT_B_ALLOCATED)
                        b = x;
                    break;
                }
        }
        if (!b) {
            vt__heap_unlock(h);
            continue;
        }
        int rc = vt__fence_record_use(h, b, key);
        vt__heap_unlock(h);
        return rc;
    }
    return VT_CUDA_ERR_INVALID_VALUE;
}

bool vt__heap_owns(const void *ptr)
{
    uint64_t addr = (uint64_t)(uintptr_t)ptr;
    FOR_EACH_HEAP_MAY_OWN(d, h, addr) {
        vt__heap_lock(h);
        bool own = vt__segs_find(h, addr, NULL) != NULL;
        vt__heap_unlock(h);
        if (own)
            return true;
    }
    return false;
}
