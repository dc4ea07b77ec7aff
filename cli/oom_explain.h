/*
 * cli/oom_explain.h - why a recorded run ran out of device memory, and what
 * would have fit, each candidate checked by replaying the run to its end
 * (alloc/replay/replay.h). One analysis, three views: `vramtrace oom`
 * (text and --json), the short form `vramtrace run` prints after a run that
 * ran out of memory, and the OOM panel of `vramtrace viz` (the JSON).
 *
 * What it reads at the OOM (the first OOM event of the recording; the
 * timeline's matching rules, trace/snap/timeline.h): the request (size,
 * device, stream, the user's line), the device curve (reserved, allocated,
 * pending), the segments alive and the blocks alive or pending in them (the
 * free pieces of the cache: by pool and stream, the largest, and the bytes
 * free in pieces smaller than the request), memory outside the caching
 * allocator (a library's own device allocations next to an observed
 * framework allocator, memory the cache did not serve, and what the device's
 * free figure leaves unexplained: other processes, contexts), the
 * allocations alive grouped by the line that made them, and which of them
 * the checker flags as alive after their last use.
 *
 * What would have fit: the recorded settings replayed (under the recorded
 * allocator's rules: PyTorch's model for a recording of PyTorch's allocator,
 * vramtrace's own allocator otherwise) at the capacity the process had (device memory minus what others held at the OOM) must run
 * out of memory too ("the replay reproduces the OOM"); then each candidate
 * (expandable segments, max_split_size_mb values derived from the request,
 * garbage_collection_threshold, roundup_power2_divisions, the flagged
 * storages freed at their last use, a gc.collect() before the retry, a
 * bigger device) is replayed to the end of the recording. A candidate
 * whose replay does not run out of memory fits; it is offered as a fix only
 * when the recorded settings reproduce the OOM.
 */
#ifndef VT_CLI_OOM_EXPLAIN_H
#define VT_CLI_OOM_EXPLAIN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "replay.h"
#include "report_util.h"
#include "snapshot.h"
#include "timeline.h"

/* Free bytes of the cache at the OOM, per pool and stream. */
typedef struct vt__oom_free_group {
    uint8_t pool;              /* enum vt_pool */
    uint64_t stream;
    uint64_t bytes, pieces, largest;
} vt__oom_free_group;

#define VT__OOM_INSIDE_SHOWN 3

/* Allocations alive at the OOM made by one line of the program. */
typedef struct vt__oom_site {
    const vt__frame *frame;     /* the user's line (vt__report_site_frame), NULL: no stack */
    uint64_t bytes;
    uint32_t count;
    /* the libraries' lines under it that made the most (a framework's,
     * called by this line: `trainer.train()`), the largest first; how many
     * lines there were, shown or not */
    vt__report_inside inside[VT__OOM_INSIDE_SHOWN];
    uint32_t ninside;
    uint32_t tensor;           /* string: the largest one's tensor name (track()), 0 */
    uint64_t flagged_bytes;    /* of them, alive after their last use (check) */
    uint32_t flagged;
    const vt__check_finding *finding;  /* the largest flagged one, NULL */
    const vt__check_finding *site_finding; /* without tensors: the checker's finding on
                                              this line's call sites (never-freed, growth,
                                              outlier), the largest; NULL */
} vt__oom_site;

#define VT__OOM_PRIVATE_IDS 16   /* private pools told apart at an OOM */

/* What CUDA graphs' private pools (format 1.14) hold on a device right after
 * an event: vt__oom_graph_pools. */
typedef struct vt__graph_pools {
    uint64_t reserved;         /* their segments */
    uint64_t free;             /* of it, what no block occupies */
    uint64_t whole;            /* in segments wholly free: what deleting the graphs gives back */
    size_t pools;              /* how many (told apart up to VT__OOM_PRIVATE_IDS) */
    uint64_t ids[VT__OOM_PRIVATE_IDS];      /* theirs (format 1.14's private pool ids) */
    uint32_t stacks[VT__OOM_PRIVATE_IDS];   /* where each was captured: its first segment's
                                               stack (a whole snapshot's), else a block's
                                               alive in it; 0: none */
    uint32_t stack;            /* the first of those known; 0: none */
    bool compiled;             /* that capture was torch.compile's (its cudagraph trees) */
    bool program_made;         /* every one of them the program made (an odd id:
                                  torch.cuda.MemPool, graph_pool_handle()), none a
                                  graph's own nor torch.compile's */
} vt__graph_pools;

/* What a private pool a request was asked into is. */
enum vt__oom_pool_kind {
    VT__OOM_POOL_DEFAULT = 0,  /* none: the default pool */
    VT__OOM_POOL_CAPTURE,      /* a CUDA graph's, while it was captured (an even id) */
    VT__OOM_POOL_COMPILED,     /* torch.compile's CUDA graphs' (a capture through its
                                  cudagraph trees, which share a graph_pool_handle()) */
    VT__OOM_POOL_PROGRAM,      /* one the program made (an odd id: torch.cuda.MemPool,
                                  graph_pool_handle()) */
};

enum vt__oom_fix_kind {
    VT__OOM_FIX_SETTING = 0,   /* an allocator setting (conf: its key:value) */
    VT__OOM_FIX_FREE_FLAGGED,  /* the flagged storages freed at their last use */
    VT__OOM_FIX_GC,            /* the cycle-held storages freed before the retry */
    VT__OOM_FIX_DEVICE,        /* more device memory */
    VT__OOM_FIX_RETRY_OUTSIDE, /* what the caught OOM's call made freed when it raised
                                  (the retry after its except clause: oom_caught.c) */
    VT__OOM_FIX_EMPTY_CACHE,   /* the framework's cache emptied before a library's
                                  request (torch.cuda.empty_cache()) */
    VT__OOM_FIX_GRAPHS_DELETED,/* the CUDA graphs that own the private pools deleted
                                  before it: their free segments given back at the retry */
};

typedef struct vt__oom_fix {
    int kind;                  /* enum vt__oom_fix_kind */
    char conf[192];            /* PYTORCH_CUDA_ALLOC_CONF syntax, or a description */
    uint64_t peak_reserved;    /* the replay's, the largest device's */
    uint64_t capacity;         /* the capacity replayed */
    bool fits;                 /* the replay ran to the end without running out */
    bool failed;               /* the replay itself failed: err */
    char err[160];
    size_t oom_event;          /* where it ran out, when it did not fit */
    uint32_t storages;         /* FREE_FLAGGED, GC: allocations freed earlier */
    uint64_t storage_bytes;
} vt__oom_fix;

typedef struct vt__oom_report {
    /* the request */
    size_t event;              /* index of the OOM event in s->events */
    size_t noom;               /* OOM events recorded */
    size_t index;              /* which of them this is, 1-based */
    size_t allocs_after;       /* ALLOC events recorded after it (0: the program
                                  ended there, and a replay checks no further) */
    /* the OOM before it (an earlier one the program caught; oom_caught.c) */
    size_t prev_event;         /* its event, SIZE_MAX: none */
    uint64_t prev_size;
    char failed_call_name[112];   /* the program's call that ran out then (the
                                     outermost Python frame of its stack not on
                                     this one's), as the views name its line;
                                     "" with none */
    uint64_t held_prev_bytes;  /* alive at this OOM, made under that call before
                                  it ran out: its frames, kept by the exception */
    bool held_in_handler;      /* no step began between the two OOMs (no mark): the
                                  retry ran in the except clause that caught the
                                  earlier one, whose exception keeps that call's frames */
    size_t held_prev_count;
    vt__replay_free_at *held_frees; /* those freed at the earlier OOM, for its replay */
    int device;
    uint64_t stream, size, seq, time_ns;
    uint8_t pool;              /* the pool that serves it (enum vt_pool) */
    bool library;              /* a library's own request, outside the observed framework's
                                  cache (vt__snapshot_oom_outside_framework): its free
                                  cached memory could not serve it */
    uint32_t stack;
    /* the private pool the request was for (format 1.15), 0: the default
     * pool; what it is (enum vt__oom_pool_kind) */
    uint64_t in_pool;
    uint8_t in_pool_kind;
    uint32_t in_pool_stack;    /* where that pool was captured (pools.stacks), 0: not
                                  known (or no segment of it yet) */
    bool pytorch;              /* PyTorch's allocator (observed or imported) */
    /* the device at the OOM */
    uint64_t total;            /* device memory as recorded, 0: not recorded */
    uint64_t device_free;      /* what the device said was free (cudaMemGetInfo) */
    uint64_t capacity;         /* what this process's allocators could have held:
                                  total - other, else reserved + free + passthrough */
    uint64_t reserved, allocated, pending;   /* the caching allocator's */
    uint64_t cache_free, cache_pieces, largest_free, free_smaller;
    /* free bytes in pieces big enough for the request: in its pool (small:
     * 1 MiB or less) on its stream, the only ones that may serve it, and
     * elsewhere (other streams, the other pool) */
    uint64_t fit_where_served, fit_elsewhere;
    vt__oom_free_group *groups;
    size_t ngroups;
    /* CUDA graphs' private pools: part of reserved; their free bytes are
     * not in cache_free (no request outside the pool uses them) */
    vt__graph_pools pools;
    uint64_t outside_reserved; /* a library's own allocations next to an observed
                                  framework allocator (their segments) */
    uint64_t outside_allocated;
    uint64_t passthrough;      /* device memory the cache did not serve, alive */
    uint64_t other;            /* total - free - the above: others, contexts */
    uint64_t events_lost;      /* the ring overwrote the recording's first events */
    uint64_t before_window;    /* of the allocated and pending bytes, those made before the
                                  window (the replay starts without them) */
    /* what was alive */
    vt__oom_site *sites;
    size_t nsites;
    uint64_t alive_bytes;
    size_t alive_count;
    bool tensors;              /* track() recorded tensors: the checker ran */
    size_t nflagged;           /* alive at the OOM, after their last use */
    uint64_t flagged_bytes;
    vt__check_report *check;    /* NULL when the checker found nothing to say */
    /* what would have fit */
    bool replayed;             /* the replays ran */
    char replay_err[256];      /* why they did not, when not */
    bool reproduced;           /* the recorded settings ran out of memory in replay */
    size_t baseline_oom_event; /* where (SIZE_MAX: they did not) */
    uint64_t baseline_peak;    /* their peak reserved */
    char baseline_conf[512];   /* the settings replayed */
    const char *rules;         /* whose allocator rules: "pytorch" or "vramtrace" */
    vt__oom_fix *fixes;        /* fitting first, then by peak reserved */
    size_t nfixes;
    uint64_t min_capacity;     /* the smallest capacity the replay fitted in, 0: none */
    size_t nreplays;           /* replays run, of the whole recording each */
} vt__oom_report;

/* vt__oom_options.which: the last OOM of the recording */
#define VT__OOM_LAST SIZE_MAX

typedef struct vt__oom_options {
    unsigned jobs;             /* replays at once, 0: the CPUs */
    bool no_replay;            /* explain only */
    size_t which;              /* the OOM to explain, 1-based (VT__OOM_LAST: the last);
                                  0: the one the program ended with (the last, with
                                  no allocation after it), else the first */
} vt__oom_options;

/* CUDA graphs' private pools on `device` right after event k of tl (s: a
 * whole snapshot, or a streamed one's sections: the capture's line is then a
 * block's). @return 0 or -ENOMEM. */
int vt__oom_graph_pools(const vt__snapshot_data *s, const vt__timeline *tl, int device, size_t k,
                        vt__graph_pools *out);

/* Explain an OOM of `s` (its timeline `tl`): options.which's. Names in `s`
 * should be terminal-safe for the text view (vt__report_text_names) and as
 * recorded for JSON. Where an earlier OOM was caught, the replays let it fail
 * as it did (replay options.caught_before). @return 0 and *out
 * (vt__oom_free), -ENOENT when the recording has no OOM, -ERANGE when it has
 * fewer than options.which, -ENOMEM; a one-line message in err. */
int vt__oom_explain(const vt__snapshot_data *s, const vt__timeline *tl, const vt__oom_options *opt,
                    vt__oom_report **out, char *err, size_t errlen);

void vt__oom_free(vt__oom_report *r);

/* oom_caught.c: what the call that ran out of memory at the OOM before r's
 * (r->prev_event) made and still held at r's: r->failed_call_name,
 * r->held_prev_*, and r->held_frees (r->held_prev_count of them),
 * the frees that move them to that OOM for the replay of a retry after the
 * except clause. @return 0 or -ENOMEM. */
int vt__oom_held_since_caught(const vt__snapshot_data *s, const vt__timeline *tl,
                              vt__oom_report *r);

/* The line a report names for stack `id`: vt__report_site_frame's, or, in
 * an imported PyTorch stack whose frames carry no module (C++ and Python
 * frames interleaved, stacks='all'), the innermost frame of a .py file of
 * the program's own. */
const vt__frame *vt__oom_site_frame(const vt__snapshot_data *s, uint32_t id);

/* The explanation as text (about a screenful); `brief`: the short form
 * `vramtrace run` prints (the request, the device, the fixes). */
void vt__oom_print(FILE *f, const char *path, const vt__snapshot_data *s, const vt__oom_report *r,
                   bool brief);

/* The same as one JSON object (docs/json-schema.md, "vramtrace oom"),
 * without a trailing newline. */
void vt__oom_write_json(FILE *f, const char *path, const vt__snapshot_data *s,
                        const vt__oom_report *r);

#endif /* VT_CLI_OOM_EXPLAIN_H */
