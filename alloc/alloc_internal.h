/*
 * alloc/alloc_internal.h - the caching allocator's types and cross-file map.
 *
 * One heap per device, each with its own lock (no lock is shared across
 * devices). A heap owns segments (backend allocations) tiled by blocks;
 * free blocks sit in one best-fit index per pool and stream (alloc_index.c);
 * handed-out blocks sit in a pointer map keyed by address; blocks freed while
 * other streams may still use them wait on fences (sets of events).
 *
 * Block lifecycle:  FREE --carve--> ALLOCATED --free--> FREE (coalesced)
 *                                      |                  ^
 *                                      +--> PENDING ------+ (fences completed)
 */
#ifndef VT_ALLOC_INTERNAL_H
#define VT_ALLOC_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "allocator.h"
#include "config.h"
#include "vramtrace.h"
#include "vramtrace/format.h"

#include "cuda_errors.h"
#include "grow.h"
#include "likely.h"

#define VT_MAX_DEVICES   64
#define VT_MIN_BLOCK     512ull               /* every size is a multiple */
#define VT_SMALL_SIZE    VT_POOL_SMALL_MAX_REQUEST   /* largest "small" request */
#define VT_SMALL_BUFFER  (2ull << 20)         /* small pool segment */
#define VT_LARGE_BUFFER  (20ull << 20)        /* large pool segment for < 10 MiB */
#define VT_MIN_LARGE_ALLOC (10ull << 20)
#define VT_ROUND_LARGE   (2ull << 20)         /* larger requests round to this */

/* Stream keys: the cache's name for a stream. 0 and 0x1 are both the legacy
 * default stream (key 0). 0x2, the per-thread default stream, is a different
 * stream in every thread, so it gets a key per thread: this bit plus a
 * thread serial. A block freed by thread T on its per-thread stream is
 * reused at once only by T's per-thread stream; another thread's 0x2 is
 * another stream, exactly as two created streams would be. */
#define VT_PTDS_KEY_BIT  (1ull << 63)

/* The key of VT_NO_STREAM allocations (allocator.h): the same value, never a
 * per-thread key (serials stay far below 2^63 - 1). Events and snapshots
 * show it as the legacy stream, the stream such memory is ordered with
 * when anything orders it. */
#define VT_NO_STREAM_KEY UINT64_MAX

static inline uint64_t vt__trace_stream(uint64_t key)
{
    return key == VT_NO_STREAM_KEY ? 0 : key;
}

enum vt__bstate {
    VT_B_ALLOCATED = VT_BLOCK_ACTIVE_ALLOCATED,
    VT_B_PENDING = VT_BLOCK_ACTIVE_PENDING_FREE,
    VT_B_FREE = VT_BLOCK_INACTIVE,
    VT_B_UNMAPPED = 0xff,         /* a hole of an expandable segment: addresses whose
                                     chunks were unmapped (never in a snapshot) */
};

typedef struct vt__segment vt__segment;
typedef struct vt__fence vt__fence;

/* One mapping of an expandable segment as the trace shows it (one
 * SEGMENT_ALLOC; its SEGMENT_FREE names the same addr and size). */
typedef struct vt__mapping {
    uint64_t start, end;
} vt__mapping;

typedef struct vt__block {
    uint64_t addr;
    uint64_t size;                /* multiple of VT_MIN_BLOCK */
    uint64_t req_size;            /* as asked, while allocated */
    uint64_t stream;              /* stream key the block belongs to */
    struct vt__block *prev, *next;/* address neighbours in the segment */
    struct vt__block *left, *right, *parent; /* free index: AVL tree of its class */
    vt__segment *seg;
    uint64_t alloc_seq;           /* seq of the ALLOC event */
    uint64_t free_tick;           /* heap tick when it became free (gc age) */
    uint64_t *xstreams;           /* extra streams (vt_record_stream) */
    uint32_t nx, capx;
    uint32_t stack;               /* allocation stack id */
    uint32_t nwait;               /* fences still to complete (PENDING) */
    uint8_t state;                /* enum vt__bstate */
    uint8_t pool;                 /* VT_POOL_SMALL / LARGE / UNCACHED */
    uint8_t in_batch;             /* waits for the next unknown-stream fence */
    uint8_t height;               /* free index: AVL height of its subtree (leaf 1) */
    struct vt__block *bnext;      /* batch list link */
    uint64_t xinline[2];          /* storage for the first extra streams */
} vt__block;

struct vt__segment {
    uint64_t addr, size;
    uint64_t stream;              /* stream key it was allocated for */
    vt__block *first;             /* lowest block */
    vt__segment *next;            /* detached list, while being released */
    uint8_t pool;                 /* VT_POOL_SMALL / LARGE / UNCACHED */
    uint8_t spool;                /* stats pool: VT_STAT_SMALL / LARGE */
    uint64_t *freed;              /* a bit per VT_MIN_BLOCK: an allocation started here
                                     and was freed, none started here since (bad-free
                                     diagnosis; NULL: no host memory, unknown) */
    uint8_t dead;                 /* its stream was destroyed: free blocks are kept out
                                     of the index, the segment goes back to the device
                                     when its last block is free (see
                                     vt__heap_stream_destroyed) */
    uint64_t va_size;             /* an expandable segment's reserved addresses (size:
                                     the extent of its blocks from addr on); 0: a plain one */
    uint64_t unmapped;            /* expandable: bytes of its holes (VT_B_UNMAPPED
                                     blocks); it reserves size - unmapped */
    vt__mapping *pieces;          /* expandable: its mappings as traced, ascending,
                                     disjoint; together exactly the mapped bytes */
    uint32_t npieces, cappieces;
    uint8_t whole;                /* ipc-safe: one block from its start, never split
                                     (alloc_ipc.c) */
};

/* The bytes a segment holds on the device. */
static inline uint64_t vt__seg_mapped(const vt__segment *s)
{
    return s->size - s->unmapped;
}

/* Events recorded after a free, one per stream that may still use the
 * block(s). Shared by every block of an unknown-stream batch. */
struct vt__fence {
    void **events;
    uint32_t nev, ndone;          /* events recorded, completed so far */
    vt__block **blocks;           /* blocks waiting on it */
    uint32_t nblocks, capblocks;
    vt__fence *next;              /* heap's in-flight list */
    uint8_t batch;                /* an unknown-stream batch fence */
};

typedef struct vt__sindex vt__sindex;
typedef struct vt__findex {      /* free blocks of one pool, per stream */
    vt__sindex *list;
    vt__sindex *last;             /* the last one used (usually the only one) */
} vt__findex;

/* address -> allocated block, open addressing, linear probing */
typedef struct vt__ptrmap {
    uint64_t *keys;               /* 0 = empty slot */
    vt__block **vals;
    uint64_t mask;                /* capacity - 1 */
    uint64_t count;
} vt__ptrmap;

typedef struct vt__heap {
    atomic_int lock;              /* vt__heap_lock() */
    int device;
    bool ready;                   /* initialized (under lock) */
    vt__findex free_idx[2];       /* free index per pool (small, large) */
    uint64_t nfree[2];
    vt__ptrmap live;              /* allocated blocks */
    vt__segment **segs;           /* sorted by addr */
    uint64_t nsegs, capsegs;
    _Atomic uint64_t lo, hi;      /* address bounds of all segments ever */
    vt__fence *fences;            /* in flight */
    vt__segment *retired;         /* dead segments become fully free, detached, waiting
                                     for release_detached() (backend free, lock dropped) */
    vt__segment *unwaited;        /* detached ranges whose work a capture kept from being
                                     waited for: released by the next release that is
                                     not the free path's (vt__release_detached) */
    vt__block *batch;             /* unknown-stream frees awaiting a fence */
    uint64_t nbatch;
    vt__fence *batch_fence;       /* the batch fence in flight, if any */
    uint64_t npending;            /* blocks in PENDING state */
    uint64_t *streams;            /* streams announced on this device */
    uint64_t nstreams, capstreams;
    void **evpool;                /* idle events for reuse */
    uint64_t nevpool, capevpool;
    vt__block *spare;             /* recycled block structs */
    uint64_t tick;                /* mallocs so far (gc age clock) */
    uint64_t total_mem;           /* device total */
    uint64_t cap;                 /* cap on reserved bytes */
    uint64_t inflight;            /* bytes being allocated with the lock dropped */
    double fraction;
    uint64_t vmm_gran;            /* expandable segments: the device's granularity
                                     (0: not asked yet, UINT64_MAX: no VMM) */
    /* stats, the public vt_stat (PyTorch's Stat): [VT_STAT_SMALL, VT_STAT_LARGE, VT_STAT_ALL] */
    vt_stat allocated_bytes[3], reserved_bytes[3], active_bytes[3],
            inactive_split_bytes[3], requested_bytes[3];
    vt_stat allocation[3], segment[3], active[3], inactive_split[3];
    uint64_t num_alloc_retries, num_ooms, num_backend_allocs, num_backend_frees;
    uint64_t num_sync_all, num_fence_events, num_bad_frees;
    uint64_t *reset_ptrs;         /* sorted: pointers live at the last device reset */
    uint64_t nreset;
    vt__ptrmap uncached_freed;    /* cache:0 addresses freed, not handed out since */
} vt__heap;

/* The freed-start bits of a segment (alloc_badfree.c). */
static inline void vt__seg_set_freed(vt__segment *s, uint64_t addr, bool on)
{
    if (vt__unlikely(!s->freed))
        return;
    uint64_t i = (addr - s->addr) / VT_MIN_BLOCK;
    if (on)
        s->freed[i / 64] |= 1ull << (i % 64);
    else
        s->freed[i / 64] &= ~(1ull << (i % 64));
}

static inline bool vt__seg_was_freed(const vt__segment *s, uint64_t addr)
{
    if (!s->freed || addr % VT_MIN_BLOCK)
        return false;
    uint64_t i = (addr - s->addr) / VT_MIN_BLOCK;
    return s->freed[i / 64] >> (i % 64) & 1;
}

/* ---- alloc_index.c: the free index ------------------------------------ */
/* (vt__findex and vt__sindex are declared before vt__heap) */
/* The stream's index; created on demand (NULL: no memory, or !create). */
vt__sindex *vt__index_stream(vt__findex *fx, uint64_t stream, bool create);
/* Insert / remove a free block; its stream's index must exist. */
void vt__index_insert(vt__findex *fx, vt__block *b);
void vt__index_remove(vt__findex *fx, vt__block *b);
/* The exact best fit: the free block with this stream and size >= size
 * that is smallest by (size, address), NULL if none. O(log n). */
vt__block *vt__index_best_fit(vt__findex *fx, uint64_t stream, uint64_t size);
bool vt__index_contains(vt__findex *fx, const vt__block *b);
/* Verify the structure: bitmaps, every class's tree (strict (size, addr)
 * order, parent links, AVL heights and balance), class, stream and state of
 * every block. @return blocks held, or -1 when inconsistent. */
int64_t vt__index_check(vt__findex *fx);
void vt__index_destroy(vt__findex *fx);
/* Drop the stream's index when it holds no block (its stream was destroyed:
 * a later stream with the same handle starts a new one). */
void vt__index_drop(vt__findex *fx, uint64_t stream);

/* ---- alloc_ptrmap.c ---------------------------------------------------- */
int vt__ptrmap_put(vt__ptrmap *m, uint64_t key, vt__block *b);
vt__block *vt__ptrmap_get(const vt__ptrmap *m, uint64_t key);
vt__block *vt__ptrmap_del(vt__ptrmap *m, uint64_t key);
/* Every entry, in no particular order: start with *pos = 0; @return false
 * at the end. The map must not change during the walk. */
bool vt__ptrmap_next(const vt__ptrmap *m, uint64_t *pos, uint64_t *key, vt__block **val);

/* ---- alloc_heap.c: heaps, their lock, blocks, the malloc and free paths - */
vt__heap *vt__heap_get(int device, bool create);   /* NULL if device invalid */
/* Device d's heap, ready or not (the fork handlers lock every one). */
vt__heap *vt__heap_slot(int device);
int vt__heap_count(void);                         /* devices ever touched, upper bound */
/* Each heap there is (a device the program never used has none). */
#define VT__FOR_EACH_HEAP(h)                                       \
    for (int d_ = 0, n_ = vt__heap_count(); d_ < n_; d_++)          \
        for (vt__heap *h = vt__heap_get(d_, false); h; h = NULL)
int vt__heap_malloc(vt__heap *h, uint64_t size, uint64_t stream_key, void **out);
/* @return 0, VT_ALLOC_NOT_OWNED if ptr not in h, or cudaErrorInvalidValue */
int vt__heap_free(void *ptr, uint64_t stream_key, enum vt__free_mode mode, uint32_t stack);
int vt__heap_record_stream(void *ptr, uint64_t stream_key);
bool vt__heap_owns(const void *ptr);
/* Under the lock: a block struct from the heap's spares (zeroed) / back. */
vt__block *vt__block_new(vt__heap *h);
void vt__block_release(vt__heap *h, vt__block *b);
/* Under the lock: a free block of `pool` on stream `key` that can serve
 * `size` (max_split_size rules applied), NULL if none. */
vt__block *vt__find_free(vt__heap *h, int pool, uint64_t key, uint64_t size,
                         const vt__conf *cfg);
/* Under the lock: b becomes free and merges with free neighbours (pending
 * ones stay apart); in a dead segment the segment may retire. */
void vt__make_free(vt__heap *h, vt__block *b);
/* Room for one more element in a doubling array of `elem`-byte items
 * (`first` slots at the start), by the one growable array (grow.h).
 * @return 0, or -1 out of memory (unchanged). */
static inline int vt__reserve_one(void **arr, uint64_t n, uint64_t *cap, size_t elem,
                                  uint64_t first)
{
    _Static_assert(sizeof *cap == sizeof(size_t), "the allocator's counts are size_t wide");
    return vt__grow_from(arr, (size_t *)cap, n + 1, elem, first) ? -1 : 0;
}

/* The heap lock: a test-and-set lock, one atomic exchange to take and a
 * plain release store to drop (a pthread mutex costs two atomic operations
 * per pair and dominated the cached path). Critical sections are short;
 * the long operations (backend allocation and free) run with it dropped.
 * A waiter spins briefly, then yields its CPU (vt__heap_lock_slow). */
void vt__heap_lock_slow(vt__heap *h);

/* Heap locks this thread holds or is taking. A signal handler that
 * interrupted this thread inside the allocator must not wait for a heap lock:
 * it would wait for itself (vt__alloc_describe_state refuses instead). Counted
 * before the lock is taken and after it is dropped, so that a handler never
 * sees the lock held with the count at zero; the signal fences keep the
 * compiler from moving the count across the lock. */
extern __thread unsigned vt__heap_locks_held __attribute__((tls_model("initial-exec")));

static inline void vt__heap_lock(vt__heap *h)
{
    vt__heap_locks_held++;
    atomic_signal_fence(memory_order_seq_cst);
    if (vt__unlikely(atomic_exchange_explicit(&h->lock, 1, memory_order_acquire)))
        vt__heap_lock_slow(h);
}

static inline void vt__heap_unlock(vt__heap *h)
{
    atomic_store_explicit(&h->lock, 0, memory_order_release);
    atomic_signal_fence(memory_order_seq_cst);
    vt__heap_locks_held--;
}

/* ---- alloc_segment.c: segments, their release, gc, the OOM chain ------- */
int vt__segs_insert(vt__heap *h, vt__segment *s);
/* b becomes a free block [addr, +size) of s: its links and the books (free
 * index, counters) are the caller's. */
void vt__block_set_free(const vt__heap *h, const vt__segment *s, vt__block *b, uint64_t addr,
                        uint64_t size);
/* b becomes new segment s's one free block of `size` bytes (alloc_segment.c). */
void vt__segment_start_free(vt__heap *h, vt__segment *s, vt__block *b, uint64_t size);
/* Under the lock: `size` bytes from the device, the lock dropped during the
 * call (the bytes count against the cap meanwhile). @return 0,
 * VT_CUDA_ERR_OOM when over the cap, or the backend's error. */
int vt__heap_backend_malloc(vt__heap *h, uint64_t size, uint64_t *addr);
/* The segment containing addr (its position in h->segs in *index). */
vt__segment *vt__segs_find(vt__heap *h, uint64_t addr, uint64_t *index);
void vt__segs_remove(vt__heap *h, vt__segment *s);
/* A cached segment that holds no allocated or pending block (one free
 * block; an expandable one's free blocks between its holes). */
bool vt__seg_unused(const vt__segment *s);
/* Take a fully free segment out of every structure onto *list; the caller
 * gives the list back with vt__release_detached (lock dropped there). */
void vt__seg_detach(vt__heap *h, vt__segment *s, vt__segment **list);
int vt__release_detached(vt__heap *h, vt__segment *list);
/* The miss path: gc, a new segment, the OOM chain. Called and returns with
 * the lock held; may drop it in between. */
int vt__heap_grow(vt__heap *h, int pool, uint64_t key, uint64_t size, uint32_t stack,
                  const vt__conf *cfg, vt__block **out);
/* Count and record an out-of-memory (takes the lock). */
void vt__oom_report(vt__heap *h, uint64_t key, uint64_t req, uint64_t size, uint32_t stack);
int vt__heap_empty_cache(vt__heap *h);
uint64_t vt__heap_cached_free(vt__heap *h);
uint64_t vt__heap_mem_free(vt__heap *h, uint64_t device_free);
int vt__heap_set_fraction(vt__heap *h, double fraction);

/* ---- alloc_expandable.c: expandable segments ---------------------------- */
#define VT_EXPANDABLE_UNAVAILABLE (-1)   /* no VMM or no address space: plain segments */
/* Under the lock: map room for `size` bytes in a range of (pool, key) (in
 * a hole, at its end, or both), or start a range. *out: the free block that
 * now fits. @return 0, VT_CUDA_ERR_OOM, VT_EXPANDABLE_UNAVAILABLE or a
 * device error. */
int vt__expandable_grow(vt__heap *h, int pool, uint64_t key, uint64_t size, uint32_t stack,
                        vt__block **out);
/* Under the lock: bytes of the whole free chunks of range s (0 when dead). */
uint64_t vt__expandable_free_chunks(const vt__heap *h, const vt__segment *s);
/* Under the lock: unmap the whole free chunks of every range that holds an
 * allocated or pending block (a wholly free one goes back whole). */
void vt__expandable_shrink(vt__heap *h);
/* Wait for the work that may still use range s's memory, before any of it
 * is unmapped. @return 0: done; VT_WAIT_CAPTURING: a capture is underway,
 * nothing may wait (the range keeps its memory for now); else the driver's
 * error. */
#define VT_WAIT_CAPTURING (-1)
int vt__expandable_wait(vt__heap *h, const vt__segment *s);
/* A detached range, lock dropped, its work waited for: unmap everything,
 * free its addresses. */
int vt__expandable_release(vt__heap *h, vt__segment *s);
/* Under the lock: trace a range going back whole (a SEGMENT_FREE per traced
 * mapping, so that each matches its SEGMENT_ALLOC). */
void vt__expandable_trace_free(vt__heap *h, vt__segment *s);

/* ---- alloc_ipc.c: IPC-safe mode ----------------------------------------- */
extern atomic_bool vt__ipc_on;
extern atomic_uint vt__ipc_loads_gen, vt__ipc_scanned_gen;
/* Look at the loaded objects again if a dlopen came since the last look
 * (skipped while another thread looks). Never under a heap lock: it takes
 * the dynamic loader's lock. */
void vt__ipc_scan(void);

/* Before an allocation ordered on no stream, with no lock held: in auto
 * mode, look again if something was loaded since the last look (two
 * relaxed loads when nothing was). */
static inline void vt__ipc_refresh(const vt__conf *cfg)
{
    if (cfg->ipc_safe != VT_IPC_SAFE_AUTO || atomic_load_explicit(&vt__ipc_on, memory_order_relaxed))
        return;
    if (vt__likely(atomic_load_explicit(&vt__ipc_loads_gen, memory_order_relaxed) ==
                  atomic_load_explicit(&vt__ipc_scanned_gen, memory_order_relaxed)))
        return;
    vt__ipc_scan();
}

/* Does a request on stream key `key` get a whole segment (IPC-safe mode,
 * VRAMTRACE_CONF ipc_safe)? Only memory ordered on no stream (cudaMalloc,
 * cuMemAlloc) is legacy-exportable. Under the lock: no look, what is known. */
static inline bool vt__ipc_whole(uint64_t key, const vt__conf *cfg)
{
    if (key != VT_NO_STREAM_KEY || cfg->ipc_safe == VT_IPC_SAFE_OFF)
        return false;
    return cfg->ipc_safe == VT_IPC_SAFE_ON || atomic_load_explicit(&vt__ipc_on, memory_order_relaxed);
}

/* ---- alloc_uncached.c: cache:0, one backend allocation per request ----- */
int vt__uncached_malloc(vt__heap *h, uint64_t req, uint64_t key, uint32_t stack, void **out);
/* Under the lock: free b (of an uncached segment) and its segment. */
void vt__uncached_free(vt__heap *h, vt__block *b);

/* ---- alloc_fence.c: frees that wait for other streams ----------------- */
/* Under the lock: b (being freed, its allocated stats already moved) waits
 * for the streams in b->xstreams and, when `unknown`, for every stream. */
void vt__fence_free(vt__heap *h, vt__block *b, bool unknown);
/* Under the lock: allocated block b is used on stream `key` too
 * (vt_record_stream). @return 0 or cudaErrorMemoryAllocation. */
int vt__fence_record_use(vt__heap *h, vt__block *b, uint64_t key);
/* Add an extra stream the block is used on. @return 1 added, 0 already
 * known, -1 no memory. */
int vt__block_use_stream(vt__block *b, uint64_t key);
/* Record the fence of the unknown-stream batch now. */
void vt__record_batch_fence(vt__heap *h);
/* Is any stream of the device capturing into a graph (the legacy one
 * included)? Then nothing may be recorded on it or waited for. */
bool vt__heap_any_capturing(vt__heap *h);
/* Retire completed fences (wait: block until every one completed). */
void vt__poll_fences(vt__heap *h, bool wait);
void vt__heap_sync_begin(vt__heap *h, bool all);
void vt__heap_sync_end(vt__heap *h);

/* ---- alloc_stream.c: stream keys and the streams' lifecycle ------------ */
uint64_t vt__stream_key(uint64_t raw);
/* The handle to record an event on for a stream key. */
uint64_t vt__stream_raw(uint64_t key);
void vt__heap_stream_created(vt__heap *h, uint64_t raw);
void vt__heap_stream_destroyed(vt__heap *h, uint64_t raw);

/* ---- alloc_stats.c: PyTorch-style counters ----------------------------- */
static inline void vt__stat_add1(vt_stat *s, int64_t d)
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

/* Move one counter of `pool` and of the total. */
static inline void vt__stat_add(vt_stat *arr, int pool, int64_t d)
{
    vt__stat_add1(&arr[pool], d);
    vt__stat_add1(&arr[VT_STAT_ALL], d);
}

void vt__heap_stats(vt__heap *h, vt_stats *out);
void vt__heap_reset_peaks(vt__heap *h);

/* ---- alloc_badfree.c --------------------------------------------------- */
/* A free of a pointer no heap owns failed (the real free refused it, or
 * vt_free got it): classify it, count it, print it, trace it. */
void vt__alloc_report_foreign_free(int device, const void *ptr, uint32_t stack);
void vt__badfree_report(int device, uint64_t addr, int reason, uint32_t stack);
/* Under h's lock: the reason of a bad free inside segment s / outside every
 * segment of h. */
int vt__badfree_classify(vt__heap *h, const vt__segment *s, uint64_t addr);
/* A bad free (`reason`) that a real driver accepts all the same: a free of
 * a stream-ordered allocation from before the last reset, even where its
 * address now lies in a newer segment (seen on an H200, alloc_reset.c).
 * Reported, answered with success. Under h's lock. */
bool vt__badfree_accepted(const vt__heap *h, uint64_t addr, int reason);
/* Under h's lock: the reason of a free at addr, in h's range but in none of
 * its segments: VT_BAD_FREE_AFTER_RESET for a stream-ordered allocation
 * from before the last reset (accepted, above); else 0, not the cache's
 * (the real free decides, and a refusal is reported as a foreign one). */
int vt__badfree_outside_segments(const vt__heap *h, uint64_t addr);
int vt__badfree_foreign_reason(vt__heap *h, uint64_t addr);
/* Under h's lock: a cache:0 free gave addr back to the device; the device
 * handed addr out again. */
void vt__badfree_note_uncached_free(vt__heap *h, uint64_t addr);
void vt__badfree_forget(vt__heap *h, uint64_t addr);
/* The pointers live when the device was reset (takes the malloc'ed array;
 * takes the lock). */
void vt__badfree_note_reset(vt__heap *h, uint64_t *addrs, uint64_t n);

/* ---- alloc_check.c ----------------------------------------------------- */
/* Walk every structure of `device` (-1: all) and verify it; prints the first
 * problem on stderr. @return 0 when consistent, -1 otherwise. */
VT_API int vt__alloc_check_invariants(int device);

/* ---- alloc_state.c ----------------------------------------------------- */
/* The snapshot state provider: every heap's segments and blocks, and the
 * devices' peaks (alloc_api.c registers it with the recorder). */
struct vt__snapshot_data;
/* The state provider (recorder.h); with snap NULL, whether it could describe
 * the state now: -EDEADLK on a thread that holds a heap lock. */
int vt__alloc_describe_state(struct vt__snapshot_data *snap);

#endif /* VT_ALLOC_INTERNAL_H */
