/*
 * alloc/replay/replay.h - run a recorded program's allocations again, through the
 * real caching allocator on a host-only device (alloc/backend_host.c), under
 * other settings and another capacity.
 *
 * What is replayed, in recorded order: every ALLOC (its requested size, its
 * stream, its device; an allocation ordered on no stream as such), every
 * FREE_REQUESTED of an allocation the window holds, every OOM (as the
 * allocation it refused), every STREAM_DESTROY (the stream's segments go
 * back, or wait for their last block, as they did) and every EMPTY_CACHE
 * (format 1.5; in older recordings a destroyed stream's and an emptied
 * cache's segments stay cached in the replay). A free the recording shows completing at once
 * (FREE_COMPLETED right after it, or not pending) is replayed as a free on
 * the block's own stream. A pending one (freed on another stream, used on
 * other streams, or freed by a plain cudaFree) is freed on a logical stream
 * of the host device whose work is done when the replay reaches the
 * recorded FREE_COMPLETED: the allocator fences it as it fences any stream,
 * and the block comes back exactly when it did, whatever the settings (the
 * program's stream work is as slow or fast as it was). The allocator's own
 * events (segments, OOM) are what the replay measures; the recorded ones are
 * compared with them.
 *
 * The allocator is one per process: vt__replay_run() can run once in a
 * process (a second call returns -EBUSY); vt__replay_sweep() runs each setting
 * in a child process of its own.
 */
#ifndef VT_REPLAY_H
#define VT_REPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"

#define VT_REPLAY_MAX_DEVICES 8
#define VT_REPLAY_UNLIMITED UINT64_MAX

/* An allocation the replay frees earlier than the recording did: what the
 * program would have reserved had it dropped the storage at its last use
 * (or collected a reference cycle before an out-of-memory retry). */
typedef struct vt__replay_free_at {
    size_t alloc_event;        /* index of the ALLOC in snapshot->events */
    size_t at_event;           /* freed right after this event is replayed (on the
                                  block's own stream); ignored unless it comes after
                                  the ALLOC and before the recorded free */
} vt__replay_free_at;

/* Whose allocator's rules a replay follows. */
typedef enum vt__replay_rules {
    VT_REPLAY_RULES_AUTO = 0,      /* PyTorch's for a recording of PyTorch's caching
                                      allocator (an imported PyTorch snapshot, or
                                      VT_META_POOL_OBSERVED), vramtrace's otherwise */
    VT_REPLAY_RULES_VRAMTRACE = 1, /* vramtrace's own allocator (alloc/) on a host device */
    VT_REPLAY_RULES_PYTORCH = 2,   /* a model of PyTorch's CUDACachingAllocator
                                      (replay_torch.c, torch_*.c): its pools, rounding, splits,
                                      stream-ordered reuse and PYTORCH_CUDA_ALLOC_CONF keys */
} vt__replay_rules;

typedef struct vt__replay_options {
    const char *conf;          /* "key:value,..." over the recorded settings, NULL: none */
    uint64_t capacity;         /* bytes per device; 0: each device's recorded total
                                  (unlimited when unknown); VT_REPLAY_UNLIMITED */
    bool curve;                /* keep the reserved bytes after every segment change */
    bool ignore_recorded_conf; /* start from the defaults, not the recorded settings */
    vt__replay_rules rules;    /* VT_REPLAY_RULES_AUTO (0) unless set */
    const vt__replay_free_at *free_at; /* frees moved earlier, any order (NULL: none) */
    size_t nfree_at;
    /* Recorded OOM events before this event index that the replay cannot
     * serve either fail as they did and the replay goes on: the program
     * caught them (a smaller batch tried next), and a later OOM is the one
     * asked about. 0: the first request the replay cannot serve ends it. */
    size_t caught_before;
    /* 1 + the index of the event before which the device's cache is
     * emptied, as the program's torch.cuda.empty_cache() would (the blocks
     * cached free given back); 0: none. */
    size_t empty_cache_at;
    /* 1 + the index of the event from which the framework's private pools
     * (CUDA graphs') are freeable, as once the program deleted the graphs:
     * PyTorch's next release of its cache (the retry of a request that
     * found no room, an empty_cache()) gives their wholly free segments back
     * (PyTorch's rules only); 0: never (they are held as recorded). */
    size_t graphs_deleted_at;
    /* What the program held when the window opened (replay_seed.c), read
     * once by a sweep for all its replays; NULL: the replay reads it. */
    const struct vt__seeds *seeds;
} vt__replay_options;

/* Where the replay ran out of memory (the program would have failed there). */
typedef struct vt__replay_oom {
    bool happened;
    size_t event_index;        /* index of the ALLOC event in snapshot->events */
    uint64_t seq, time_ns;     /* of that event */
    int device;
    uint64_t stream;
    uint64_t req_size;
    uint32_t stack;            /* the recorded allocation's stack */
    uint64_t allocated;        /* bytes handed out when it failed (block sizes) */
    uint64_t requested;        /* the same, as asked */
    uint64_t live_blocks;
    uint64_t reserved;         /* held by the cache when it failed */
    uint64_t device_free;      /* what the device had left */
} vt__replay_oom;

typedef struct vt__replay_device {
    int ordinal;
    uint64_t capacity;         /* VT_REPLAY_UNLIMITED: none */
    /* the replay */
    uint64_t peak_allocated;   /* handed out (allocator's peak) */
    uint64_t peak_reserved;    /* held from the device (allocator's peak) */
    uint64_t peak_held;        /* the same with what is held outside the allocator's
                                  pool (a library's own allocations next to PyTorch's
                                  cache), at its highest: the least capacity it fits */
    uint64_t allocated_at_peak;/* handed out when reserved first reached its peak
                                  after a replayed call */
    size_t peak_event;         /* index of the event after which it did */
    uint64_t peak_time_ns;     /* that event's recorded time (0: none) */
    uint64_t segment_allocs, segment_frees;
    uint64_t alloc_retries, sync_all, fence_events;
    /* device calls (backend) */
    uint64_t device_mallocs, device_failed_mallocs, device_frees;
    uint64_t device_maps, device_unmaps;   /* expandable segments' chunks */
    uint64_t event_creates, event_records, event_queries, event_syncs;
    /* the recording, from its events */
    uint64_t recorded_peak_reserved;   /* running sum of SEGMENT events */
    uint64_t recorded_peak_allocated;  /* running sum of ALLOC / FREE_REQUESTED */
    uint64_t recorded_segment_allocs, recorded_segment_frees;
} vt__replay_device;

typedef struct vt__replay_point {   /* reserved bytes after a segment change */
    size_t event;              /* index of the event being replayed */
    uint64_t time_ns;          /* its recorded time */
    uint64_t reserved;
    int8_t device;
} vt__replay_point;

typedef struct vt__replay_result {
    char conf[512];            /* the settings replayed (normalized allocator keys) */
    vt__replay_rules rules;    /* the rules followed: VT_REPLAY_RULES_VRAMTRACE or
                                  VT_REPLAY_RULES_PYTORCH (never AUTO) */
    bool expandable_segments;  /* replayed with expandable segments */
    size_t ndevices;
    vt__replay_device devices[VT_REPLAY_MAX_DEVICES];
    vt__replay_oom oom;
    size_t events;             /* events in the snapshot */
    uint64_t first_time_ns;    /* the first event's recorded time (0: none) */
    size_t replayed;           /* allocator calls made (allocs, frees, stream
                                  destructions, cache emptyings) */
    size_t skipped_frees;      /* frees of allocations the replay never held */
    size_t seeded;             /* allocations held when the window opened (made before
                                  it, as the snapshot's timeline says), made first */
    uint64_t seeded_bytes;     /* their bytes (block sizes) */
    size_t early_frees;        /* options.free_at entries replayed (the others came
                                  too late or named no allocation) */
    size_t recorded_ooms;      /* OOM events in the recording (each replayed as the
                                  allocation it was) */
    size_t recorded_ooms_served; /* of those, allocations the replay could serve */
    size_t recorded_ooms_failed; /* of those, failed as recorded (options.caught_before) */
    uint64_t events_lost;      /* recorder ring overflow: the window misses the start */
    /* Segment allocations (device, size, in order) as recorded? Frees are
     * not compared: a stream's destruction gives its segments back in the
     * recording, and the recording does not say when a stream was destroyed
     * (the replay keeps them cached: its reserved bytes after that point
     * are an upper bound). */
    bool segments_identical;
    size_t segments_compared;  /* segment allocations compared */
    size_t first_segment_difference; /* index in that sequence, when not identical */
    vt__replay_point *curve;   /* options.curve: owned; vt__replay_result_free */
    size_t ncurve;
} vt__replay_result;

/* Replay `s` with `opt`. On success fills *out and returns 0; on bad input
 * (a bad conf value, no allocations in the snapshot, too many devices)
 * returns -EINVAL with one line in `err`; -ENOMEM; -EBUSY when the
 * allocator of this process has already been used (vramtrace's rules only:
 * PyTorch's are a model that a process can replay any number of times).
 *
 * Under PyTorch's rules the conf keys are PYTORCH_CUDA_ALLOC_CONF's
 * (max_split_size_mb, roundup_power2_divisions (one number),
 * garbage_collection_threshold, expandable_segments (True/False/1/0),
 * max_non_split_rounding_mb) plus per_process_memory_fraction
 * (torch.cuda.set_per_process_memory_fraction, which a recording does not
 * hold) and cache:0 (PYTORCH_NO_CUDA_MEMORY_CACHING). An imported PyTorch
 * snapshot's allocator_settings are the recorded settings; a recording of
 * the observed allocator does not hold PyTorch's settings: replay starts from
 * PyTorch's defaults. The peaks are PyTorch's own (max_memory_reserved(),
 * max_memory_allocated()); memory outside its pool (a library's own
 * cudaMalloc) counts against the capacity as recorded. */
int vt__replay_run(const vt__snapshot_data *s, const vt__replay_options *opt,
                   vt__replay_result *out, char *err, size_t errlen);

/* vt__replay_run on a snapshot whose events are read as a stream: s holds
 * every section but the events (vt__snapshot_open), es reads them, a few
 * times (the recording's own figures, then the replay), so that memory
 * follows what is alive at once: the blocks the replay holds, and a bit
 * per event plus an entry per pending free that completed (when each
 * free's block comes back); under PyTorch's rules a byte per event more
 * (whose each segment is, where the cache was emptied: one or two more
 * readings). vt__replay_run is this on a stream over s->events. A damaged
 * file stops the replay with the stream's error (in the err the stream
 * was opened with). */
struct vt__event_stream;
int vt__replay_run_stream(const vt__snapshot_data *s, struct vt__event_stream *es,
                          const vt__replay_options *opt, vt__replay_result *out, char *err,
                          size_t errlen);

/* Free what a result owns (the curve). */
void vt__replay_result_free(vt__replay_result *r);

/* The highest peak reserved of r's devices: what a setting needs. */
uint64_t vt__replay_peak_reserved(const vt__replay_result *r);

/* Settings recorded in the snapshot, as replay conf text ("key:value,...",
 * allocator keys only; PyTorch's allocator_settings translated). Empty when
 * none were recorded. */
void vt__replay_recorded_conf(const vt__snapshot_data *s, char *buf, size_t len);

/* Each of `n` options replayed in a child process (at most `jobs` at
 * once; the curve is never kept), results in out[i]. A child that fails
 * leaves out[i] zeroed with status[i] < 0 (its error text in errs[i] when
 * errs != NULL). @return 0, or -ENOMEM/-EINVAL when nothing could be
 * started. */
int vt__replay_sweep(const vt__snapshot_data *s, const vt__replay_options *opts, size_t n,
                     unsigned jobs, vt__replay_result *out, int *status,
                     char (*errs)[256]);

/* The same with confs[i] over `base`'s capacity, rules and
 * ignore_recorded_conf (its conf and curve are not used). */
int vt__replay_sweep_confs(const vt__snapshot_data *s, const char *const *confs, size_t n,
                           const vt__replay_options *base, unsigned jobs, vt__replay_result *out,
                           int *status, char (*errs)[256]);

/* Is `s` a recording of PyTorch's caching allocator (whose rules AUTO
 * follows)? Its metadata says: s needs no events. */
bool vt__replay_is_torch(const vt__snapshot_data *s);

/* vt__replay_sweep_confs on the snapshot file `path`, which each child
 * reads as a stream of its own (vt__snapshot_open, vt__replay_run_stream):
 * nothing of it is held here. */
int vt__replay_sweep_confs_file(const char *path, const char *const *confs, size_t n,
                                const vt__replay_options *base, unsigned jobs,
                                vt__replay_result *out, int *status, char (*errs)[256]);

/* vt__replay_sweep_confs on the events of es (s: every section but them,
 * vt__snapshot_open), which each child reads from its own copy of the
 * stream (forked: a stream of a file reads it without a shared offset), so
 * that a pickle is converted once, by the caller; nothing of the events is
 * held here. `stream_err`: the buffer es was opened with (a child's
 * damaged file is said in errs[i] as the reader says it). */
struct vt__event_stream;
int vt__replay_sweep_confs_stream(const vt__snapshot_data *s, struct vt__event_stream *es,
                                  char *stream_err, const char *const *confs, size_t n,
                                  const vt__replay_options *base, unsigned jobs,
                                  vt__replay_result *out, int *status, char (*errs)[256]);

/* "vramtrace" or "pytorch" (AUTO: "auto"). */
const char *vt__replay_rules_name(vt__replay_rules rules);

#endif /* VT_REPLAY_H */
