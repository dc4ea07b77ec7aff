/*
 * trace/snap/timeline.h - the whole memory timeline reconstructed from a snapshot.
 *
 * A vt__snapshot_data holds raw events (ALLOC, FREE_REQUESTED, ...) plus the
 * allocator's state at snapshot time. Every view wants the same derived
 * picture: which allocation lived when, which segments existed when, how many
 * bytes were allocated and reserved after each event. vt__timeline_build()
 * computes it once, in O(n log n) for n events (hash maps for matching, one
 * sort for the stream lists), so views never rescan events quadratically.
 *
 * Pure function of the snapshot: no allocator, no CUDA, no globals. The
 * timeline keeps no pointer into the snapshot except what is documented
 * (none): you may free the snapshot after the timeline, or before it.
 *
 * Matching rules (the ones every view then agrees on):
 *  - An ALLOC opens a lifetime at its addr. A FREE_REQUESTED at the same addr
 *    (same device or not: device addresses are unique under UVA) closes it.
 *  - "Allocated" has PyTorch's meaning: the bytes stop counting as allocated
 *    at the FREE_REQUESTED, when the program frees them. A FREE_REQUESTED
 *    with aux = 1 (the block must wait for stream events before reuse) makes
 *    them "pending" until the matching FREE_COMPLETED (or until the addr is
 *    handed out again, or a gap hides the completion); pending bytes are a
 *    figure of their own, and allocated + pending is PyTorch's "active".
 *  - A FREE_REQUESTED with no open lifetime at its addr is an allocation made
 *    before the retained window (events overwritten, or tracing started late),
 *    or in a gap of it: it gets a lifetime flagged VT_LT_BEFORE_WINDOW whose
 *    alloc_* fields are unknown (size/stack taken from the free event); its
 *    bytes count from the gap before its free when there is one
 *    (start_event), else from before the first event.
 *  - The allocator-state section, when complete (vt__snapshot_state_complete),
 *    is the truth of what is alive at the end (liveness.h): an open lifetime
 *    without an active-allocated block at its addr and seq was freed where
 *    the events do not show it (VT_LT_FREE_UNSEEN: in a gap or after the
 *    ring was copied), never alive. Without a complete state, an open
 *    lifetime that a gap follows is VT_LT_FREE_UNSEEN too (its fate is
 *    unknown). Either way its bytes stop counting at the first gap after its
 *    allocation, or stay counted to the last event when no gap follows.
 *  - Every ACTIVE block of the allocator-state section that no ALLOC in the
 *    window explains is a lifetime alive at the end (VT_LT_ALIVE |
 *    VT_LT_FROM_STATE), with the block's stack and alloc_seq: allocated
 *    before the window (VT_LT_BEFORE_WINDOW, counted from the first point),
 *    in a gap of it (counted from the first event after its alloc_seq), or
 *    after the events were copied (VT_LT_AFTER_WINDOW: in no curve). The same
 *    for segments of the state with no SEGMENT_ALLOC.
 *  - An ALLOC at an addr whose previous lifetime is still open (the free was
 *    not recorded) closes that lifetime with VT_LT_FREE_LOST at the new ALLOC.
 *  - A lifetime allocated before the last FORK event (or before the window,
 *    when a FORK event is in it) is VT_LT_INHERITED: the parent process's
 *    allocation, copied into this forked child; views do not call it this
 *    process's leak. The curves still count it (the child's allocator holds it).
 *  - The bytes allocated/reserved before the first event are the sums of the
 *    sizes of the lifetimes / segment spans counted from before it, per
 *    device, so the step curves start at the right height.
 *
 *  - In a snapshot of an observed framework allocator (PyTorch's), only its
 *    blocks count as allocated (VT_ALLOC_POOL_BLOCK); every other allocation
 *    is VT_LT_OUTSIDE_POOL: its segment counts it as reserved.
 *
 * "allocated" counts block sizes (vt__event.size, the rounded size) of
 * lifetimes the program holds; "pending" those freed and not yet reusable;
 * "reserved" counts segment sizes (SEGMENT_ALLOC .. SEGMENT_FREE).
 */
#ifndef VT_TRACE_TIMELINE_H
#define VT_TRACE_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"
#include "passthrough.h"

/* "No such event / lifetime / segment" in the uint32 index fields below. */
#define VT_TL_NONE UINT32_MAX

/* vt__lifetime.flags */
enum vt__lifetime_flag {
    VT_LT_ALIVE = 1u << 0,         /* still allocated (not freed) at the snapshot */
    VT_LT_BEFORE_WINDOW = 1u << 1, /* its ALLOC is not among the kept events */
    VT_LT_PENDING_FREE = 1u << 2,  /* freed, waiting for stream events at the snapshot */
    VT_LT_FREE_LOST = 1u << 3,     /* its free was never recorded (addr reused) */
    VT_LT_FROM_STATE = 1u << 4,    /* reconstructed from the allocator-state section */
    VT_LT_INHERITED = 1u << 7,     /* allocated before the last FORK event: the parent
                                      process's, inherited by this forked child */
    VT_LT_FREE_UNSEEN = 1u << 5,   /* no free among the kept events, yet not alive:
                                      freed in a gap or after the copy, or of unknown
                                      fate (a gap follows it, no complete state) */
    VT_LT_AFTER_WINDOW = 1u << 6,  /* from the state, allocated after the last kept event */
    VT_LT_OUTSIDE_POOL = 1u << 8,  /* a framework allocator was observed (VT_META_POOL_OBSERVED)
                                      and this is not one of its blocks: a device allocation
                                      of a library's own (cuBLAS, NCCL), counted as reserved
                                      by its segment, not as allocated, as the framework's
                                      memory_allocated() does not count it */
};

/* One allocation (block handed to the program) from alloc to free. */
typedef struct vt__lifetime {
    uint64_t addr;
    uint64_t size;           /* block size (rounded) */
    uint64_t req_size;       /* bytes asked for, 0 if unknown */
    uint64_t stream;         /* allocating stream */
    uint64_t alloc_seq;      /* 0 if unknown (before the window) */
    uint64_t alloc_time_ns;  /* 0 if unknown */
    uint64_t free_seq;       /* FREE_REQUESTED seq, 0 if never freed in the window */
    uint64_t free_time_ns;   /* 0 if never freed */
    uint64_t release_seq;    /* when the bytes stopped counting as allocated:
                                free_seq (or the event after a gap, or the ALLOC
                                that reused a lost lifetime's addr), 0 if never */
    uint64_t release_time_ns;/* likewise */
    uint32_t alloc_stack;    /* stack id, 0 if none/unknown */
    uint32_t free_stack;     /* stack id of the FREE_REQUESTED, 0 if none */
    uint32_t alloc_event;    /* index into s->events, VT_TL_NONE if before window */
    uint32_t free_event;     /* FREE_REQUESTED event index, VT_TL_NONE if none */
    uint32_t complete_event; /* FREE_COMPLETED event index, VT_TL_NONE if none */
    uint32_t release_event;  /* event at which the bytes stopped counting as
                                allocated (see release_seq), VT_TL_NONE if never */
    uint32_t start_event;    /* event from which they count as allocated: the
                                ALLOC, the first event after the gap that hid
                                it, VT_TL_NONE from before the first event */
    uint32_t reusable_event; /* a pending free's end: its FREE_COMPLETED (or the
                                next ALLOC at the addr, or the event after a gap);
                                VT_TL_NONE if not pending or pending at the end */
    uint32_t first_stream;   /* its extra streams: tl->streams[first_stream ..
                                first_stream + nstreams), sorted, unique */
    uint32_t nstreams;       /* from STREAM_USE events (vt_record_stream) */
    uint32_t flags;          /* enum vt__lifetime_flag */
    int8_t device;
} vt__lifetime;

/* One segment (backend allocation) from SEGMENT_ALLOC to SEGMENT_FREE. */
typedef struct vt__segment_span {
    uint64_t addr;
    uint64_t size;
    uint64_t stream;         /* from the state section when known, else 0 */
    uint64_t alloc_seq;      /* 0 if before the window */
    uint64_t alloc_time_ns;
    uint64_t free_seq;       /* 0 if alive at the snapshot */
    uint64_t free_time_ns;
    uint32_t alloc_event;    /* VT_TL_NONE if before the window */
    uint32_t free_event;     /* VT_TL_NONE if alive */
    uint32_t state_segment;  /* index into s->segments if alive at the end, else VT_TL_NONE */
    uint32_t flags;          /* VT_LT_ALIVE, VT_LT_BEFORE_WINDOW, VT_LT_FROM_STATE */
    int8_t device;
    uint8_t pool;            /* enum vt_pool (SEGMENT_ALLOC aux or the state) */
    uint64_t private_pool;   /* the observed framework's private pool it serves (a CUDA
                                graph's: SEGMENT_ALLOC aux2, or the state's
                                SEGMENT_POOLS, format 1.14), 0: its default pool */
} vt__segment_span;

/* One step of a device's memory curve: the values right AFTER event `event`.
 * The first point of each curve has event = VT_TL_NONE: the state before the
 * first retained event (it carries that first event's seq and time). */
typedef struct vt__tl_point {
    uint64_t seq;            /* seq of the event (first point: first event's seq, or 0) */
    uint64_t time_ns;        /* its time (first point: first event's time, or 0) */
    uint64_t allocated;      /* bytes allocated on the device after it */
    uint64_t pending;        /* bytes freed but not yet reusable (pending free) */
    uint64_t reserved;       /* bytes reserved (segments) on the device after it */
    uint32_t event;          /* index into s->events, VT_TL_NONE for the first point */
} vt__tl_point;

/* The curve and its extremes for one device. A point is added only for
 * events that change allocated or reserved on this device. */
typedef struct vt__tl_device {
    int device;                 /* CUDA ordinal (-1 for host/unknown) */
    vt__tl_point *points;        /* npoints >= 1, in event order */
    size_t npoints;
    uint64_t peak_allocated;    /* max allocated over the curve */
    uint32_t peak_allocated_point; /* index into points of its FIRST occurrence */
    uint64_t peak_reserved;     /* max reserved */
    uint32_t peak_reserved_point;
    uint64_t peak_active;       /* max allocated + pending (PyTorch's "active") */
    uint32_t peak_active_point;
    uint64_t final_allocated;   /* at the last kept event (last point) */
    uint64_t final_pending;
    uint64_t final_reserved;
    uint64_t initial_allocated; /* before the window (first point) */
    uint64_t initial_pending;
    uint64_t initial_reserved;
} vt__tl_device;

/* A MARK event. */
typedef struct vt__tl_mark {
    uint64_t seq;
    uint64_t time_ns;
    uint32_t event;          /* index into s->events */
    uint32_t label;          /* string index */
} vt__tl_mark;

typedef struct vt__timeline {
    vt__lifetime *lifetimes;      size_t nlifetimes;  /* by alloc order: before-window
                                                        ones (in event/state order) first,
                                                        then in ALLOC order */
    vt__segment_span *segments;   size_t nsegments;  /* same ordering rule */
    vt__tl_device *devices;       size_t ndevices;    /* sorted by ordinal */
    vt__tl_mark *marks;           size_t nmarks;     /* in event order */
    /* The steps the backward passes tell (timeline_steps.c), label 0: where
     * the program released its gradients after a pass (a zero_grad), else
     * where each pass ended (the first allocation after the autograd
     * engine's), those of one line of the program. A trace the program
     * marked no step of is stepped by them (vt__timeline_steps: a training
     * loop that updates its parameters by hand makes no optimizer step for
     * `vramtrace run` to mark). */
    vt__tl_mark *backward_steps;  size_t nbackward_steps;
    uint64_t *streams;           size_t nstreams;    /* backing store of lifetimes' streams */

    /* For each event index: the lifetime (ALLOC, FREE_REQUESTED,
     * FREE_COMPLETED, STREAM_USE) or segment span (SEGMENT_ALLOC,
     * SEGMENT_FREE) it belongs to, VT_TL_NONE otherwise. nevents entries. */
    uint32_t *event_owner;       size_t nevents;

    uint64_t kind_counts[256];   /* events per kind (index = vt__event.kind) */
    size_t ngaps;                /* gaps inside the window (liveness.h) */
    uint64_t events_missing;     /* seqs missing in those gaps */
    int state_complete;          /* vt__snapshot_state_complete(s) */
    size_t nfree_unseen;         /* lifetimes flagged VT_LT_FREE_UNSEEN */
    uint64_t first_seq, last_seq;        /* 0 when there are no events */
    uint64_t first_time_ns, last_time_ns;
    uint64_t fork_seq;           /* seq of the last FORK event, 0 if none */
    uint64_t fork_parent_pid;    /* its aux: the parent's pid */

    /* Memory the cache did not serve (managed, pinned host, pitched, arrays,
     * explicit pools, VMM), in allocation order: passthrough.h. Never in the
     * curves, the lifetimes or the event owners above. */
    vt__passthrough *passthrough;       size_t npassthrough;

    /* A streamed build with VT_TL_STREAM_CURVES and no point hook: how many
     * of the last lifetimes are retired ones kept for the peaks (the
     * retired hook was told them already); 0 otherwise. */
    size_t npeak_kept;

    /* Lifetimes sorted by addr (then alloc order), for vt__timeline_find(). */
    uint32_t *by_addr;
    uint64_t max_lifetime_size;
} vt__timeline;

/* Build the timeline of `s`.
 * @return 0 and *out (free with vt__timeline_free), or a negative errno
 *         (-ENOMEM, -EOVERFLOW beyond 4G events/lifetimes) with a one-line
 *         message in err. Inconsistent event streams never fail: they are
 *         reconciled by the matching rules above. */
int vt__timeline_build(const vt__snapshot_data *s, vt__timeline **out, char *err, size_t errlen);

/* The timeline of a snapshot read as a stream of its events (s holds every
 * section but the events, as vt__snapfile_open_stream gives it; or a whole
 * snapshot with vt__event_stream_of), in memory that follows what is alive
 * at once rather than the number of events: a condensed timeline, the same
 * figures as vt__timeline_build's where it has them. It has:
 *  - the counts, window, gaps, marks, fork, pass-through allocations, the
 *    segment spans left open or from before the window;
 *  - the lifetimes the events leave unresolved, with their flags exactly as
 *    vt__timeline_build gives them: alive at the end (VT_LT_ALIVE), pending,
 *    allocated before the window or shown only by the state, freed where
 *    the events do not show it; not the ones allocated and freed in the
 *    window;
 *  - with VT_TL_STREAM_CURVES (what reads the events three times): each
 *    device's curve reduced to its first point, its peaks' points and its
 *    last (so peak_*_point, final_* and initial_* as vt__timeline_build's),
 *    and the lifetimes allocated at each device's allocated peak;
 *    without it, no devices.
 * No event_owner, streams or per-event points. Errors of the stream (a
 * damaged file) come back as its message.
 * @return 0 and *out (free with vt__timeline_free), or a negative errno with
 *         one line in err. */
#define VT_TL_STREAM_CURVES 1u
struct vt__event_stream;
int vt__timeline_build_stream(const vt__snapshot_data *s, struct vt__event_stream *es,
                              unsigned what, vt__timeline **out, char *err, size_t errlen);

/* What a view that keeps more than the condensed timeline is told while
 * vt__timeline_build_stream_hooked reads the events (ctx is handed back):
 *  - retired: each lifetime the first reading lets go, its record final
 *    (exactly vt__timeline_build's but VT_LT_INHERITED), in the order they
 *    were resolved; with the build's own lifetimes, every lifetime;
 *  - point (with VT_TL_STREAM_CURVES): every point of every device's curve,
 *    as vt__timeline_build's tl->devices[device].points has them, each
 *    device's in event order (its first point before any other); the
 *    lifetimes at the peaks are then not read (a view told every point
 *    has what it needs to find them);
 *  - mark: each MARK event as the first reading meets it, before any
 *    lifetime resolved by a later event is retired (a view that places the
 *    retired between marks needs not keep them until the marks are known).
 * Any may be NULL. */
typedef struct vt__tl_stream_hooks {
    void (*retired)(void *ctx, const vt__lifetime *l);
    void (*point)(void *ctx, size_t device, const vt__tl_point *pt);
    void (*mark)(void *ctx, const vt__tl_mark *m);
    void *ctx;
} vt__tl_stream_hooks;
int vt__timeline_build_stream_hooked(const vt__snapshot_data *s, struct vt__event_stream *es,
                                     unsigned what, const vt__tl_stream_hooks *h,
                                     vt__timeline **out, char *err, size_t errlen);

/* Release a timeline. NULL is fine. */
void vt__timeline_free(vt__timeline *tl);

/* The matching followed one event at a time, after vt__timeline_build_stream
 * (timeline_follow.c): for a view that walks the events again itself and
 * asks, at each event, which lifetime it belongs to, in memory that follows
 * what is alive at once. Feed it every event of the stream, in order, from
 * the first. */
typedef struct vt__tl_follow vt__tl_follow;
typedef struct vt__tl_followed {
    uint32_t lifetime;       /* the follower's handle of the event's lifetime (ALLOC,
                                FREE_REQUESTED, FREE_COMPLETED, STREAM_USE), the same
                                from the event that made it to its free; VT_TL_NONE:
                                none (then l is not set) */
    uint32_t final;          /* its index in the streamed build's lifetimes when that
                                kept it to the end, else VT_TL_NONE */
    vt__lifetime l;          /* its record: the final one when `final` is set, else as
                                matched up to this event (what the events it was
                                resolved by made it) */
} vt__tl_followed;

/* A follower of the events of s, whose streamed build is tl (both must
 * outlive it). `err` must outlive it too: its errors are written there.
 * @return 0 and *out, or -ENOMEM with one line in err. */
int vt__tl_follow_open(const vt__snapshot_data *s, const vt__timeline *tl, vt__tl_follow **out,
                       char *err, size_t errlen);
/* Event e, of index i (the next one). @return 0 and *out, or -ENOMEM. */
int vt__tl_follow_event(vt__tl_follow *f, const vt__event *e, uint32_t i, vt__tl_followed *out);
/* Tell `fn` each lifetime the follower lets go, its record final, as it
 * retires it (within vt__tl_follow_event); not the ones the streamed build
 * kept to the end (`final` hands those out). */
void vt__tl_follow_on_retire(vt__tl_follow *f, void (*fn)(void *ctx, const vt__lifetime *l),
                             void *ctx);
/* Release a follower. NULL is fine. */
void vt__tl_follow_close(vt__tl_follow *f);

/* Every lifetime of vt__timeline_build's, in its order and with its
 * records, from a snapshot read as a stream (timeline_walk.c): for a view
 * that lists every allocation, in memory that follows what is alive at once
 * plus 32 bytes per allocation the events settle. Open a walk, let the
 * streamed build (vt__timeline_build_stream_hooked, which may be told the
 * points too) tell it each lifetime it retires (vt__tl_walk_retired as the
 * `retired` hook, the walk as its ctx), then run it once over that build's
 * timeline: `fn` is handed each lifetime in turn. The records are the whole
 * build's but their streams (nstreams 0: the streamed build keeps none) and,
 * for a lifetime the build retired, complete_event and reusable_event
 * (VT_TL_NONE). */
typedef struct vt__tl_walk vt__tl_walk;
/* @return 0 or -ENOMEM. */
int vt__tl_walk_open(vt__tl_walk **out);
/* The first reading of such a view, which the JSON document and the
 * Perfetto export share: a walk opened (*walk) and the streamed build of
 * es with its curves (*tl), which tells the walk each lifetime it retires
 * and the points to no one (being told them spares the build its third
 * reading: the lifetimes at the peaks). `who` names the view in the line
 * err says when the walk cannot open. @return 0; else -ENOMEM or the
 * build's error, with *walk and *tl for vt__tl_walk_close and
 * vt__timeline_free either way. */
int vt__tl_walk_build(const vt__snapshot_data *s, struct vt__event_stream *es, const char *who,
                      vt__tl_walk **walk, vt__timeline **tl, char *err, size_t errlen);
/* A vt__tl_stream_hooks.retired; ctx is the walk. */
void vt__tl_walk_retired(void *ctx, const vt__lifetime *l);
/* Hand fn each lifetime, reading the events once more. A damaged file's
 * message is the stream's. @return 0, -ENOMEM or the stream's error. */
int vt__tl_walk_run(vt__tl_walk *w, struct vt__event_stream *es, const vt__timeline *tl,
                    void (*fn)(void *ctx, const vt__lifetime *l), void *ctx);
/* Release a walk. NULL is fine. */
void vt__tl_walk_close(vt__tl_walk *w);

/* Was l allocated by the parent of a forked process (VT_LT_INHERITED's
 * rule), fork_seq being the last FORK event's seq (0: none)? */
int vt__lifetime_inherited(const vt__lifetime *l, uint64_t fork_seq);

/* The lifetime an event belongs to, or NULL (not an allocation event or out
 * of range). For SEGMENT_* events use vt__timeline_event_segment(). */
const vt__lifetime *vt__timeline_event_lifetime(const vt__timeline *tl, const vt__snapshot_data *s,
                                               size_t event_index);

/* The segment span a SEGMENT_ALLOC/SEGMENT_FREE event belongs to, or NULL. */
const vt__segment_span *vt__timeline_event_segment(const vt__timeline *tl,
                                                   const vt__snapshot_data *s,
                                                   size_t event_index);

/* Is lifetime `l` counted as allocated right after event index `ev`, i.e.
 * at or after its start_event and before its release_event? Never for one
 * allocated after the kept events or shown only by the state as freed.
 * (ev = VT_TL_NONE asks about the state before the first event.) */
int vt__lifetime_allocated_at(const vt__lifetime *l, uint32_t ev);

/* The lifetime whose block [addr, addr+size) contains `addr` and which is
 * allocated right after event `ev` (VT_TL_NONE: before the first event;
 * tl->nevents - 1 or more: at the snapshot). NULL if none. O(log n + k). */
const vt__lifetime *vt__timeline_find(const vt__timeline *tl, uint64_t addr, uint32_t ev);

/* The fewest steps the backward passes must tell to step a trace without
 * marks (one pass is a gradient taken once, not a loop). */
#define VT_TL_INFERRED_STEPS_MIN 2

/* The steps of the trace, as `check` judges them and the page draws them:
 * its marks; or, where it has none, the steps its backward passes tell,
 * VT_TL_INFERRED_STEPS_MIN or more (tl->backward_steps, timeline_steps.c:
 * a training loop that steps its parameters by hand makes no optimizer
 * step for `vramtrace run` to mark; under track() the tracker does a
 * mark's work at each pass's end, _Marks._pass_ended). *n: how many;
 * *inferred: whether they are the backward passes'. */
const vt__tl_mark *vt__timeline_steps(const vt__timeline *tl, size_t *n, bool *inferred);

/* The device curve of ordinal `device`, or NULL. */
const vt__tl_device *vt__timeline_device(const vt__timeline *tl, int device);

#endif /* VT_TRACE_TIMELINE_H */
