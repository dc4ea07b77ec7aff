/*
 * alloc/replay/replay_internal.h - the replay's types and cross-file map.
 *
 * replay.c walks the recorded events and drives the allocator (vramtrace's
 * rules) or hands them to replay_torch.c (a model of PyTorch's allocator);
 * replay_trace.c is the recorder the allocator reports to during a replay
 * (trace/record/recorder.h), which keeps the replay's own books; replay_map.c maps
 * recorded addresses to replayed blocks; replay_conf.c turns recorded
 * settings into allocator settings; replay_sweep.c runs settings side by
 * side in child processes.
 */
#ifndef VT_REPLAY_INTERNAL_H
#define VT_REPLAY_INTERNAL_H

#include "replay.h"
#include "u64map.h"

/* ---- replay_map.c: recorded address -> what replay knows of it ---------- */
typedef struct vt__rmap_entry {
    uint64_t key;              /* recorded address; 0 = a free entry */
    uint64_t value;            /* replayed address (or an event index); a
                                * free entry: the next free one */
    uint64_t stream;           /* stream it was allocated on (or a count) */
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

/* ---- replay_trace.c: the replay's books -------------------------------- */
typedef struct vt__replay_books {
    int64_t allocated[VT_REPLAY_MAX_DEVICES];  /* block bytes handed out */
    int64_t requested[VT_REPLAY_MAX_DEVICES];
    int64_t live_blocks[VT_REPLAY_MAX_DEVICES];
    int64_t reserved[VT_REPLAY_MAX_DEVICES];
    uint64_t *segs;            /* replayed segment allocations, vt__seg_code() */
    size_t nsegs, capsegs;
    vt_replay_point *curve;    /* NULL unless wanted */
    size_t ncurve, capcurve;
    bool want_curve;
    size_t now_event;          /* index of the event being replayed */
    uint64_t now_ns;           /* its recorded time */
    bool oom;                  /* the allocator reported an OOM */
    uint64_t oom_device_free, oom_reserved;
    bool failed;               /* no host memory for the books */
} vt__replay_books;

/* The books the recorder writes to during a replay (one per process). */
extern vt__replay_books vt__books;

/* One segment event as a comparable code. */
static inline uint64_t vt__seg_code(bool is_free, int device, uint64_t size)
{
    return (uint64_t)is_free << 63 | (uint64_t)(device & 0x7f) << 56 | (size & ((1ull << 56) - 1));
}

/* ---- replay_conf.c ----------------------------------------------------- */
/* Recorded settings into conf text (see vt_replay_recorded_conf); sets
 * *expandable when the recording says expandable segments were on. */
void vt__replay_conf_from_meta(const char *recorded, char *buf, size_t len, bool *expandable);

/* ---- replay.c ---------------------------------------------------------- */
/* For every FREE_REQUESTED i: completion[i], the index of its
 * FREE_COMPLETED (UINT64_MAX when the window ends first), and immediate[i]
 * when it completed at once. */
int vt__replay_find_completions(const vt_snapshot_data *s, uint64_t *completion,
                                uint8_t *immediate);

/* ---- replay_early.c: frees moved earlier (options.free_at) ------------- */
typedef struct vt__early {
    vt_replay_free_at *at;     /* the valid entries, by the event they follow */
    size_t n, next;            /* next: the first not yet due */
    uint8_t *marked;           /* per event: an ALLOC freed early (mark its live entry) */
    vt__rmap done;             /* recorded addresses freed early, until their recorded free */
} vt__early;

/* Keep opt->free_at's entries that name an ALLOC and an event at or after
 * it. @return 0 or -ENOMEM (then vt__early_destroy). */
int vt__early_init(vt__early *ef, const vt_snapshot_data *s, const vt_replay_options *opt);
void vt__early_destroy(vt__early *ef);
/* The recorded address of the next allocation due to be freed before event
 * `i` (after every event before it); false when none is. The engine frees
 * it if its live entry is still the early-marked one, then calls
 * vt__early_freed. */
bool vt__early_due(vt__early *ef, const vt_snapshot_data *s, size_t i, uint64_t *addr);
int vt__early_freed(vt__early *ef, uint64_t addr);
/* A recorded free of an address with no live allocation: true (and
 * forgotten) when it is the late free of one freed early. */
bool vt__early_recorded_free(vt__early *ef, uint64_t addr);

/* ---- replay_torch.c: PyTorch's caching allocator, modelled ------------- */
/* Is `s` a recording of PyTorch's caching allocator? */
bool vt__replay_is_torch(const vt_snapshot_data *s);
/* Replay `s` under PyTorch's rules into `r`, whose devices (ordinal,
 * capacity) and ndevices are set. @return 0, -EINVAL (a bad conf, one line
 * in err) or -ENOMEM. */
int vt__replay_torch(const vt_snapshot_data *s, const vt_replay_options *opt,
                     vt_replay_result *r, const uint64_t *completion, const uint8_t *immediate,
                     char *err, size_t errlen);

#endif /* VT_REPLAY_INTERNAL_H */
