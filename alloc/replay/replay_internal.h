/*
 * alloc/replay/replay_internal.h - the replay's types and cross-file map.
 *
 * replay.c picks the rules and runs one of two engines through the one
 * walker of the recorded events (replay_walk.c): vramtrace's allocator of
 * this process on the host device (replay_alloc.c, with replay_trace.c as
 * the recorder the allocator reports to) or a model of PyTorch's allocator
 * (replay_torch.c, the model in torch_*.c, which of the events are
 * PyTorch's in torch_classify.c). What the recording itself says
 * (its peaks, its segments, when each free completed) is read once in
 * replay_recorded.c; what a replay measures is kept in replay_result.c.
 * replay_map.c maps recorded addresses to replayed blocks, replay_early.c
 * the frees moved earlier, replay_conf.c recorded settings to allocator
 * settings, replay_sweep.c runs settings side by side in child processes.
 */
#ifndef VT_REPLAY_INTERNAL_H
#define VT_REPLAY_INTERNAL_H

#include "event_stream.h"
#include "replay.h"
#include "u64map.h"

/* ---- replay_map.c: recorded address -> what replay knows of it ---------- */
typedef struct vt__rmap_entry {
    uint64_t key;              /* recorded address (or event index); 0 = a free entry */
    uint64_t value;            /* replayed address (or a size); a free entry:
                                * the next free one */
    uint64_t stream;           /* stream it was allocated on (or a serial) */
    int8_t device;
    uint8_t early;             /* options.free_at frees it before its recorded free */
} vt__rmap_entry;

typedef struct vt__rmap {
    vt__u64map index;          /* recorded address -> entry */
    vt__rmap_entry *entries;   /* freed ones are reused first */
    size_t nentries, cap;
    uint32_t free_head;        /* first free entry, VT__U64MAP_NONE */
} vt__rmap;

/* Address 0 is never held: get and put return NULL for it. An entry's
 * pointer is valid until the next put. */
int vt__rmap_init(vt__rmap *m, size_t expected);
void vt__rmap_destroy(vt__rmap *m);
vt__rmap_entry *vt__rmap_get(vt__rmap *m, uint64_t key);
/* The entry of `key`, created zeroed (but for its key) when absent; NULL
 * without memory. */
vt__rmap_entry *vt__rmap_put(vt__rmap *m, uint64_t key);
void vt__rmap_del(vt__rmap *m, vt__rmap_entry *e);

/* ---- replay_result.c: what a replay measures, in order --------------- */
typedef struct vt__replay_trail {
    uint64_t *segs;            /* segment allocations, vt__seg_code() */
    size_t nsegs, capsegs;
    vt__replay_point *curve;    /* reserved after each change; NULL unless wanted */
    size_t ncurve, capcurve;
    bool want_curve;
    size_t seeded;             /* the first segments, made for what was held when the
                                  window opened: not compared with the recording's */
} vt__replay_trail;

/* One segment allocation as a comparable code. */
static inline uint64_t vt__seg_code(int device, uint64_t size)
{
    return (uint64_t)(device & 0x7f) << 56 | (size & ((1ull << 56) - 1));
}

/* Device `device`'s reserved bytes changed by `delta` (a segment, or pages
 * of one, allocated when positive) to `reserved`, while event `event`
 * (recorded at `time_ns`) was replayed. @return 0 or -ENOMEM. */
int vt__trail_reserved(vt__replay_trail *t, int device, int64_t delta, uint64_t reserved,
                       size_t event, uint64_t time_ns);
/* Compare the trail's segment allocations with the recorded ones into r
 * (segments_identical, _compared, first_segment_difference), hand r the
 * curve and free the rest of the trail. */
void vt__trail_finish(vt__replay_trail *t, const uint64_t *recorded, size_t nrecorded,
                      vt__replay_result *r);
void vt__trail_free(vt__replay_trail *t);

/* ---- replay_seed.c: what was held when the window opened ---------------- */
/* An allocation made before the window (or in a gap of it) and held when
 * it opened: a request to the replayed allocator, made before event `due`. */
typedef struct vt__seed {
    size_t due;                /* made before this event (0: before the first) */
    uint64_t order;            /* among those due together: made in this order */
    uint64_t addr;             /* recorded address: its recorded free finds it */
    uint64_t size, req_size;   /* block size; asked (the size when unknown) */
    uint64_t stream;
    uint32_t stack;            /* its allocation's, when the state kept it */
    int8_t device;
} vt__seed;

typedef struct vt__seeds {
    vt__seed *v;               /* by due, then order */
    size_t n;
    int ndevices;              /* 1 + the highest device of a seed (0: none) */
    uint64_t reserved[VT_REPLAY_MAX_DEVICES]; /* the replayed allocator's segments
                                  alive when the window opened, as recorded */
    uint64_t outside[VT_REPLAY_MAX_DEVICES];  /* device memory a library held outside
                                  an observed framework's pool then (and to the end) */
    struct vt__seed_segment {  /* private pools' segments (CUDA graphs') alive then
                                  (and to the end: the state says whose) */
        uint64_t addr, size;
        int device;
    } *priv;
    size_t npriv;
} vt__seeds;

/* The seeds of s, whose events es reads (rewound first): one streamed
 * reading of its timeline. @return 0, -ENOMEM or the stream's error (one
 * line in err). */
int vt__replay_seeds(const vt__snapshot_data *s, struct vt__event_stream *es,
                     vt__seeds *out, char *err, size_t errlen);
void vt__seeds_free(vt__seeds *sd);

/* ---- replay_recorded.c: what the recording says ------------------------ */
/* When each FREE_REQUESTED's block came back: at once, or at its
 * FREE_COMPLETED. A free not marked pending (aux 0) came back at once;
 * only the others are kept, 8 bytes each, sorted by their request. */
typedef struct vt__completion {
    uint32_t request;          /* the FREE_REQUESTED's event index */
    uint32_t completed;        /* its FREE_COMPLETED's; `request` itself: at once (no
                                  allocator event of its device came between) */
} vt__completion;

typedef struct vt__completions {
    vt__completion *v;         /* by request */
    size_t n, cap;
} vt__completions;

/* Read es (rewound first) for the completions. @return 0, -ENOMEM, or the
 * stream's error (then vt__completions_free). */
int vt__replay_completions(struct vt__event_stream *es, vt__completions *c);
/* Whether FREE_REQUESTED i, e, completed at once; else *done: its
 * FREE_COMPLETED, UINT64_MAX when the window ends first. */
bool vt__completed_at_once(const vt__completions *c, size_t i, const vt__event *e,
                           uint64_t *done);
void vt__completions_free(vt__completions *c);

/* Which of the recording's events the replayed allocator owns. */
typedef struct vt__recorded_scope {
    const uint8_t *ours;       /* per event: bit 0 set for an ALLOC or SEGMENT event
                                  of the replayed allocator; NULL: every one */
    bool frees_name_requests;  /* a FREE_REQUESTED's size is what was asked (PyTorch's
                                  observed allocator): it gives back its ALLOC's size */
    const vt__seeds *seeds;    /* what was held when the window opened: the recorded
                                  figures start from it */
} vt__recorded_scope;

/* The recording's own peaks, segment counts and OOMs into r, its segment
 * allocations (vt__seg_code, in order) into *segs (freed by the caller),
 * and its completions into *c (as vt__replay_completions: the same
 * reading), from es (rewound first). @return 0, -ENOMEM or the stream's
 * error (then vt__completions_free too). */
int vt__replay_recorded(struct vt__event_stream *es, const vt__recorded_scope *scope,
                        vt__replay_result *r, uint64_t **segs, size_t *nsegs,
                        vt__completions *c);

/* ---- replay_walk.c: the recorded events, in order, through an engine --- */
enum {
    VT__REPLAY_SERVED = 0,     /* the block is handed out */
    VT__REPLAY_OUT_OF_MEMORY = 1, /* the replay stops there */
    VT__REPLAY_REFUSED = 2,    /* not served, not for want of memory (the program's error) */
    VT__REPLAY_PASS = 3,       /* not a request to the replayed allocator: as recorded */
};
#define VT__REPLAY_AT_ONCE SIZE_MAX

/* What the walker asks of an engine (vramtrace's allocator, PyTorch's
 * model). `self` is the engine's state. */
typedef struct vt__replay_engine {
    void *self;
    /* Event i, of a device the replay holds, is replayed next. */
    void (*now)(void *self, size_t i, const vt__event *e);
    /* `size` bytes for ALLOC or OOM event e: VT__REPLAY_* above, with
     * *block and *stream (where its free goes) when served; or -ENOMEM. */
    int (*malloc)(void *self, const vt__event *e, uint64_t size, uint64_t *block,
                  uint64_t *stream);
    /* Give a served block back: at once on `stream`, or, when `free_event`
     * is not VT__REPLAY_AT_ONCE, pending as that recorded FREE_REQUESTED
     * was until `done`, its FREE_COMPLETED (UINT64_MAX: the window ended
     * first). @return 0 or -ENOMEM. */
    int (*free)(void *self, int device, uint64_t block, uint64_t stream, size_t free_event,
                uint64_t done);
    /* Any other event of a device the replay holds: @return the allocator
     * calls it made (counted as replayed), or -ENOMEM. */
    int (*other)(void *self, size_t i, const vt__event *e);
    /* After event i (NULL: nothing to do); not after the one that ran out
     * of memory. */
    void (*after)(void *self, size_t i, const vt__event *e);
    /* Out of memory: the engine's books when it happened. */
    void (*oom)(void *self, int device, vt__replay_oom *o);
    /* A block still handed out when the walk ends (NULL: nothing to do). */
    void (*forget)(void *self, uint64_t block);
    /* Device d held `bytes` outside the replayed allocator's pool when the
     * window opened (NULL: the engine does not count such memory). */
    void (*outside)(void *self, int d, uint64_t bytes);
    /* The segment allocations the engine made, whose first ones, made for
     * the seeds due before the first event, are not the recording's to
     * compare (the walk marks them: trail->seeded). */
    vt__replay_trail *trail;
} vt__replay_engine;

/* Replay the events of es (rewound first) through `en`: what was held when
 * the window opened (seeds: made before the event each is due at, as
 * ALLOCs of their recorded addresses, so that their recorded frees find
 * them), the frees moved
 * earlier (opt->free_at), recorded frees of blocks the replay holds
 * (completed at once or pending, as c says), recorded OOMs asked again,
 * everything else to en->other. Stops at the first OUT_OF_MEMORY (filling
 * r->oom). @return 0, -ENOMEM or the stream's error. */
int vt__replay_walk(struct vt__event_stream *es, const vt__replay_options *opt,
                    const vt__completions *c, const vt__seeds *seeds, vt__replay_result *r,
                    const vt__replay_engine *en);

/* ---- replay_trace.c: the recorder the allocator reports to in a replay -- */
typedef struct vt__replay_books {
    int64_t allocated[VT_REPLAY_MAX_DEVICES];  /* block bytes handed out */
    int64_t requested[VT_REPLAY_MAX_DEVICES];
    int64_t live_blocks[VT_REPLAY_MAX_DEVICES];
    int64_t reserved[VT_REPLAY_MAX_DEVICES];
    vt__replay_trail trail;
    size_t now_event;          /* index of the event being replayed */
    uint64_t now_ns;           /* its recorded time */
    bool oom;                  /* the allocator reported an OOM */
    uint64_t oom_device_free, oom_reserved;
    bool failed;               /* no host memory for the books */
} vt__replay_books;

/* The books the recorder writes to during a replay (one per process). */
extern vt__replay_books vt__books;

/* ---- replay_conf.c ----------------------------------------------------- */
/* Recorded settings into conf text (see vt__replay_recorded_conf); sets
 * *expandable when the recording says expandable segments were on. */
void vt__replay_conf_from_meta(const char *recorded, char *buf, size_t len, bool *expandable);

/* ---- replay_early.c: frees moved earlier (options.free_at) ------------- */
typedef struct vt__early_free {
    vt__replay_free_at at;
    uint64_t addr;             /* its ALLOC's address, once the walk met it */
    bool seen;                 /* the walk met it, an ALLOC */
} vt__early_free;

typedef struct vt__early {
    vt__early_free *v;         /* opt->free_at's entries, by the event they follow */
    size_t n, next;            /* next: the first not yet due */
    size_t *by_alloc;          /* indices into v, by their ALLOC's event */
    size_t nextalloc;          /* the first of by_alloc not yet met */
    vt__rmap done;             /* recorded addresses freed early, until their recorded free */
} vt__early;

/* Keep opt->free_at's entries that name an event of the `nevents` and an
 * event at or after it (whether it is an ALLOC is known when the walk
 * meets it). @return 0 or -ENOMEM (then vt__early_destroy). */
int vt__early_init(vt__early *ef, size_t nevents, const vt__replay_options *opt);
void vt__early_destroy(vt__early *ef);
/* Event i, e, as the walk meets it (every one, in order): whether an
 * options.free_at entry frees this ALLOC early (mark its live entry). */
bool vt__early_alloc(vt__early *ef, size_t i, const vt__event *e);
/* The recorded address of the next allocation due to be freed before event
 * `i` (after every event before it); false when none is. The walker frees
 * it if its live entry is still the early-marked one, then calls
 * vt__early_freed. */
bool vt__early_due(vt__early *ef, size_t i, uint64_t *addr);
int vt__early_freed(vt__early *ef, uint64_t addr);
/* A recorded free of an address with no live allocation: true (and
 * forgotten) when it is the late free of one freed early. */
bool vt__early_recorded_free(vt__early *ef, uint64_t addr);

/* ---- replay_alloc.c: vramtrace's rules, the allocator of this process -- */
/* Replay `s` (its events read from es, what was held when its window
 * opened from seeds) through the allocator on the host
 * device into `r`, whose devices are set. Once per process. @return 0, -EINVAL (bad settings,
 * one line in err) or -ENOMEM. */
int vt__replay_alloc(const vt__snapshot_data *s, struct vt__event_stream *es,
                     const vt__replay_options *opt, const vt__seeds *seeds,
                     vt__replay_result *r, char *err, size_t errlen);

/* ---- replay_torch.c: PyTorch's caching allocator, modelled ------------- */
/* Replay `s` (its events read from es; from s->events too when s holds
 * them; what was held when its window opened from seeds) under PyTorch's
 * rules into `r`, whose devices (ordinal, capacity) and ndevices are set. @return 0, -EINVAL (a bad conf, one line in err),
 * -ENOMEM or the stream's error. */
int vt__replay_torch(const vt__snapshot_data *s, struct vt__event_stream *es,
                     const vt__replay_options *opt, const vt__seeds *seeds,
                     vt__replay_result *r, char *err, size_t errlen);

#endif /* VT_REPLAY_INTERNAL_H */
