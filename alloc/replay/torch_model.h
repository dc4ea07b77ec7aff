/*
 * alloc/replay/torch_model.h - the model of PyTorch's caching allocator
 * (c10/cuda/CUDACachingAllocator.cpp) that replay_torch.c drives: its
 * types and the map of its files, `tm_` across them.
 *
 * torch_segments.c holds the memory: blocks in segments, the ordered free
 * sets, segments (and expandable segments' pages) taken from and given
 * back to the device, and the books of what is reserved. torch_malloc.c is
 * the request path over it: sizes rounded, a cached block found or a
 * segment allocated, the garbage collection and the retries, splits, and
 * frees (at once or pending on other streams). torch_conf.c reads the
 * PYTORCH_CUDA_ALLOC_CONF keys.
 */
#ifndef VT_TORCH_MODEL_H
#define VT_TORCH_MODEL_H

#include "replay_internal.h"

#define KB512 512ull
#define SMALL_SIZE (1ull << 20)         /* largest small request */
#define SMALL_BUFFER (2ull << 20)       /* small segments, small pages */
#define LARGE_BUFFER (20ull << 20)      /* segments of 1-10 MiB requests, large pages */
#define MIN_LARGE_ALLOC (10ull << 20)
#define ROUND_LARGE (2ull << 20)
#define NO_LIMIT UINT64_MAX

typedef struct tseg {                  /* an expandable segment's address space */
    uint64_t base, size, page;
} tseg;

typedef struct tblock {
    uint64_t addr, size;
    uint64_t req;                      /* as asked (allocated blocks) */
    uint64_t stream;
    struct tblock *prev, *next;        /* neighbours in the segment */
    tseg *seg;                         /* expandable segment, or NULL */
    int64_t gc_base;                   /* pool's search count when cached */
    uint64_t serial;                   /* which block this is (never reused) */
    uint8_t pool;                      /* 0 small, 1 large */
    bool allocated, pending, mapped;
} tblock;

typedef struct tset {                  /* blocks ordered by (stream, size, addr) */
    tblock **v;
    size_t n, cap;
    bool by_addr;                      /* (stream, addr): the unmapped ranges */
} tset;

typedef struct tconf {
    uint64_t max_split;                /* NO_LIMIT: unlimited */
    uint64_t max_nonsplit_round;       /* oversize blocks serve requests this far below */
    unsigned divisions;                /* roundup_power2_divisions, 0/1: none */
    double gc_threshold;
    double fraction;                   /* per-process memory fraction, 0: none */
    bool expandable;
    bool uncached;                     /* cache:0 (PYTORCH_NO_CUDA_MEMORY_CACHING) */
} tconf;

typedef struct tprivate {              /* a private pool's segment (torch_private.c) */
    uint64_t addr, size;
    uint64_t live;                     /* recorded blocks alive in it */
    bool released;                     /* given back (its pool freeable), before its
                                          recorded SEGMENT_FREE */
} tprivate;

typedef struct tdev {
    tset free[2], unmapped[2];
    int64_t searches[2];               /* get_free_block calls (the GC's clock) */
    tblock **pending;                  /* freed, waiting for other streams */
    size_t npending, cappending;
    tseg **segs;
    size_t nsegs, capsegs;
    uint64_t capacity, allowed;        /* allowed: NO_LIMIT without a fraction */
    uint64_t reserved, allocated, requested, live;
    uint64_t outside;                  /* device memory held outside the pool (a
                                          library's own, a private pool's) */
    tprivate *priv;                    /* private pools' segments, by address */
    size_t npriv, cappriv;
    uint64_t peak_reserved, peak_allocated;
    uint64_t peak_held;                /* reserved + outside at their highest */
    uint64_t next_addr;
} tdev;

typedef struct tstate {
    tconf c;
    tdev dev[VT_REPLAY_MAX_DEVICES];
    vt__replay_result *r;
    size_t now;                        /* event being replayed */
    uint64_t now_ns;
    bool failed;                       /* out of host memory */
    vt__replay_trail trail;            /* segment allocations, the reserved curve */
    uint64_t serials;
    bool private_freeable;             /* the private pools' graphs were deleted: a
                                          release of the cache gives their free
                                          segments back */
} tstate;

/* ---- torch_classify.c: which of the recording's events are PyTorch's --- */
enum { TM_POOL = 1, TM_OUTSIDE = 2, TM_EMPTIED = 4,  /* a class; TM_POOL is bit 0, as
                                                        vt__recorded_scope.ours reads it */
       TM_PRIVATE = 8 };   /* with TM_OUTSIDE: a segment event of a private pool's */
/* An imported PyTorch snapshot? */
bool tm_imported(const vt__snapshot_data *s);
/* Is ALLOC e a request to PyTorch's allocator? */
bool tm_pool_request(const vt__snapshot_data *s, const vt__event *e);
/* Per event of es (s: every section but the events; a whole snapshot's
 * through vt__event_stream_of), read forward once or twice (rewound first),
 * into cls (vt__event_stream_count bytes): TM_POOL for PyTorch's ALLOCs and
 * segment events, TM_OUTSIDE for the segment events of memory outside its
 * pool (with TM_PRIVATE: a private pool's, SEGMENT_ALLOC aux2), TM_EMPTIED
 * on the segment free where an imported snapshot's cache was emptied.
 * `gc_recorded`: the recorded settings have a garbage collection threshold.
 * Memory: the segments allocated outside the pool, and those allocated
 * before their device's next allocation. @return 0, -ENOMEM or the
 * stream's error. */
int tm_classify_stream(const vt__snapshot_data *s, struct vt__event_stream *es, bool gc_recorded,
                       uint8_t *cls);

/* ---- torch_segments.c ---------------------------------------------------- */
/* The first position in s at or after (stream, size, addr). */
size_t tm_lower_bound(const tset *s, uint64_t stream, uint64_t size, uint64_t addr);
int tm_set_insert(tstate *t, tset *s, tblock *b);
void tm_set_remove(tset *s, tblock *b);
/* Device d's reserved bytes change by delta: its peak, the trail. */
void tm_reserve(tstate *t, int d, int64_t delta);
/* The pool's segments and the memory outside it, at their highest so far:
 * after either changes. */
void tm_note_held(tdev *v);
tblock *tm_new_block(tstate *t, uint64_t addr, uint64_t size, uint64_t stream, int pool);
/* A new block [addr, addr + size) of b's segment, stream and pool, linked
 * just before (or after) b; b's own range is the caller's to shrink. */
tblock *tm_neighbour(tstate *t, tblock *b, uint64_t addr, uint64_t size, bool before);
/* insert_into_blocks: a free block cached in its pool's set. */
int tm_cache_block(tstate *t, int d, tblock *b);
/* Address space for a segment of `size` (never reused). */
uint64_t tm_take_address(tdev *v, uint64_t size);
/* Would the device give `size` more bytes? (cudaMalloc / cuMemCreate) */
bool tm_device_has(const tdev *v, uint64_t size);
/* A whole cached segment back to the device. */
void tm_release_block(tstate *t, int d, tblock *b);
/* free_block: merged with free neighbours, cached. */
void tm_free_block(tstate *t, int d, tblock *b);
/* try_allocate_expandable_block: a free mapped block of `size` at the
 * lowest address that fits, pages mapped as needed; NULL without. */
tblock *tm_try_allocate_expandable(tstate *t, int d, uint64_t stream, int pool, uint64_t size);
/* release_cached_blocks: every pending free completed (the events
 * synchronized), then every unsplit cached block back to the device. */
void tm_release_cached_blocks(tstate *t, int d);
/* Every block and segment of the model freed. */
void tm_free_all(tstate *t);

/* ---- torch_private.c ----------------------------------------------------- */
/* A private pool's segment on device d, held outside the default pool until
 * tm_private_segment_free. @return 0, -1 out of host memory (t->failed). */
int tm_private_segment(tstate *t, int d, uint64_t addr, uint64_t size);
void tm_private_segment_free(tstate *t, int d, uint64_t addr);
/* A recorded block at addr: in a private pool's segment (counted alive
 * there until tm_private_free)? */
bool tm_private_alloc(tstate *t, int d, uint64_t addr);
void tm_private_free(tstate *t, int d, uint64_t addr);
/* release_cached_blocks' part for freeable private pools (t->private_freeable):
 * their segments with no block alive given back. */
void tm_private_release(tstate *t, int d);

/* ---- torch_malloc.c ------------------------------------------------------ */
/* A block for `asked` bytes on `stream`; NULL: out of memory (t->failed:
 * out of host memory). */
tblock *tm_malloc(tstate *t, int d, uint64_t asked, uint64_t stream);
/* The program frees b: cached now, or (pending) when its other streams'
 * work completes (tm_free_completed). */
void tm_free(tstate *t, int d, tblock *b, bool pending);
/* The recorded FREE_COMPLETED of a pending free of b (serial: which block
 * b was, as it may be gone). */
void tm_free_completed(tstate *t, int d, tblock *b, uint64_t serial);

/* ---- torch_conf.c -------------------------------------------------------- */
/* "key:value,..." over c; @return 0, or -EINVAL with one line in err. */
int tm_apply_conf(tconf *c, const char *text, char *err, size_t errlen);
/* c as conf text, every key. */
void tm_format_conf(const tconf *c, char *buf, size_t len);

#endif /* VT_TORCH_MODEL_H */
