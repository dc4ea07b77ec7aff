/*
 * trace/snap/timeline_build.h - the timeline builder: its state and its steps,
 * shared by the build over a whole snapshot (vt__timeline_build, timeline.c)
 * and the build over a stream of its events (vt__timeline_build_stream,
 * timeline_stream.c). One state machine applies the matching rules of
 * timeline.h in both; the stream's build retires what those rules can no
 * longer change, so that it holds what is alive at once. The steps are
 * grouped below by the file that defines them: timeline_match.c (the
 * matching), timeline_curves.c (the curves), timeline.c (the rest).
 */
#ifndef VT_TRACE_TIMELINE_BUILD_H
#define VT_TRACE_TIMELINE_BUILD_H

#include <stddef.h>
#include <stdint.h>

#include "errbuf.h"
#include "free_match.h"
#include "liveness.h"
#include "timeline.h"
#include "u64map.h"

/* Builder-only lifetime and span flags, never seen outside a build. */
#define TL_RETIRED (1u << 31)   /* its slot is free (streamed build) */
#define TL_KEEP (1u << 30)      /* copied out when retired, and retired only when
                                   nothing can change it (timeline_stream.c) */

/* An event that follows a gap, as a streamed build remembers it. */
struct tl_gap_event {
    uint32_t event;
    uint64_t seq, time_ns;
};

/* A candidate step of a trace without marks, and the line of the program
 * that made it (timeline_steps.c). */
struct tl_step_at {
    vt__tl_mark at;
    uint64_t line;
};

/* What the backward passes tell of a trace's steps, as the build goes. */
struct tl_backward {
    uint8_t *memo;          /* each stack node: in a backward pass? (vt__snapshot_stack_in_backward) */
    int in_pass;            /* the last allocation was a backward pass's */
    size_t passes;          /* passes begun since the last release */
    uint64_t line;          /* the pass under way's line */
    vt__tl_mark last_end;   /* where the last pass ended */
    /* the ends of the last pass before each release of gradients, with the
     * release's line, and each pass's end, with the pass's: candidates */
    struct tl_step_at *releases, *ends;
    size_t nreleases, cap_releases, nends, cap_ends;
};

struct builder {
    const vt__snapshot_data *s;
    vt__timeline *tl;
    size_t lcap, scap, mcap;
    vt__u64map lmap, smap;  /* addr -> lifetime, segment span (the newest at the addr) */
    vt__free_match frees;   /* which free request a FREE_COMPLETED completes */
    vt__liveness *lv;
    char *err;
    size_t errlen;
    uint32_t owner;         /* what the event just matched belongs to (event_owner) */
    uint32_t prev;          /* at an ALLOC: the lifetime at its addr that it ended
                               (lost, or its pending free), else VT_TL_NONE */

    /* A streamed build (timeline_stream.c). */
    int stream;             /* retire what is resolved; no event_owner */
    uint32_t retire[2];     /* lifetimes resolved by the event just matched */
    size_t nretire;
    uint32_t retire_span;   /* a span it closed, or VT_TL_NONE */
    uint32_t *free_l, *free_s;     /* retired slots, reused */
    size_t nfree_l, cap_free_l, nfree_s, cap_free_s;
    uint8_t dev_seen[256];  /* devices of retired lifetimes and spans */
    vt__lifetime *kept;      /* retired lifetimes flagged TL_KEEP, copied */
    size_t nkept, cap_kept;
    const uint64_t *after_seq; /* the state's alloc seqs, ascending, unique ... */
    uint32_t *after_event;  /* ... and the first event with a greater seq */
    size_t nafter;
    struct tl_gap_event *gaps; /* seq and time of the events after a gap */
    size_t ngaps, cap_gaps;
    /* told each lifetime retired, its record final (a view that keeps what
     * the build lets go: the page's every allocation) */
    void (*on_retire)(void *ctx, const vt__lifetime *l);
    void (*on_mark)(void *ctx, const vt__tl_mark *m);   /* each MARK, as matched */
    void *retire_ctx;   /* both hooks' */
    struct tl_backward backward;   /* the steps its passes tell (timeline_steps.c) */
    int later;              /* a streamed build's later reading (its curves, its peaks):
                               the steps are the first reading's, not followed again */
};

#define tl_fail(b, rc, ...) vt__errf((b)->err, (b)->errlen, rc, __VA_ARGS__)

/* A lifetime is "open" (still holds its addr) until its FREE_REQUESTED. */
static inline int tl_lifetime_open(const vt__lifetime *l)
{
    return l->free_event == VT_TL_NONE && !(l->flags & VT_LT_FREE_LOST) &&
           !(l->flags & VT_LT_BEFORE_WINDOW && l->free_seq);
}

/* Does lifetime l count as allocated at some point of the curves? Not when
 * it was allocated after the last kept event, nor when the state alone
 * shows it, already freed. */
static inline int tl_in_curves(const vt__lifetime *l)
{
    if (l->flags & (VT_LT_AFTER_WINDOW | VT_LT_OUTSIDE_POOL))
        return 0;
    return !((l->flags & VT_LT_FROM_STATE) && (l->flags & VT_LT_FREE_UNSEEN));
}

/* A curve's figure never goes below 0, whatever inconsistent events say. */
static inline uint64_t tl_sub_sat(uint64_t a, uint64_t b)
{
    return a >= b ? a - b : 0;
}

/* One change of one device's figures at one event. */
struct tl_delta {
    uint32_t event;          /* VT_TL_NONE: before the first event */
    int8_t device;
    uint8_t what;            /* 0 allocated, 1 pending, 2 reserved */
    int sign;
    uint64_t bytes;
};

/* ---- timeline_match.c --------------------------------------------------- */

/* Match event e (index ei) into the lifetimes and spans; sets b->owner,
 * b->prev and, streamed, what it resolved (vt__tl_retire retires it).
 * @return 0 or -ENOMEM with the message in b->err. */
int vt__tl_match_event(struct builder *b, const vt__event *e, uint32_t ei);
/* timeline_steps.c: the steps a trace's backward passes tell. At an
 * allocation (a pass begins or ends), at a free (of a pass's block, on the
 * program's thread: its gradients released), and at the end of the build
 * (tl->backward_steps chosen); the state freed. */
int vt__tl_backward_alloc(struct builder *b, const vt__event *e, uint32_t ei);
int vt__tl_backward_free(struct builder *b, const vt__event *e, uint32_t ei, const vt__lifetime *l);
int vt__tl_backward_steps(struct builder *b);
void vt__tl_backward_free_state(struct tl_backward *bw);
/* Retire what the last matched event resolved (streamed build). */
int vt__tl_retire(struct builder *b);
/* After the last event: the allocator state and the fates of what is left
 * open (timeline.h), VT_LT_ALIVE, nfree_unseen. @return 0 or -ENOMEM. */
int vt__tl_merge_state(struct builder *b);

/* ---- timeline_curves.c -------------------------------------------------- */

/* tl->devices (sorted, zeroed curves) for every device a lifetime, span or
 * the snapshot names; didx: ordinal (as uint8_t) -> index. @return 0 or -ENOMEM. */
int vt__tl_devices(struct builder *b, int8_t didx[256]);
/* The deltas of event `ev` (of kind `kind`) that belong to its own lifetime
 * l or span g (the one not NULL). @return how many (at most 2) into d. */
size_t vt__tl_own_deltas(uint8_t kind, const vt__lifetime *l, const vt__segment_span *g,
                         uint32_t ev, struct tl_delta *d);
/* The deltas of l (g) that do not happen at its own events of the kind: at
 * a gap, before the window, at the ALLOC that reuses its addr. d may be
 * NULL (count only). @return how many. */
size_t vt__tl_foreign_lifetime(const vt__lifetime *l, struct tl_delta *d);
size_t vt__tl_foreign_span(const vt__segment_span *g, struct tl_delta *d);
int vt__tl_cmp_delta(const void *a, const void *b);
/* The curves of a whole snapshot's timeline, in one sweep over its events
 * (the streamed build sweeps its own way). @return 0 or -ENOMEM. */
int vt__tl_build_curves(struct builder *b);

/* ---- timeline.c --------------------------------------------------------- */

/* Before-window lifetimes and spans first (stable). @return 0 or -ENOMEM. */
int vt__tl_reorder(struct builder *b);
/* VT_LT_INHERITED for what was allocated before tl->fork_seq. */
void vt__tl_mark_inherited(struct builder *b);
int vt__tl_build_addr_index(struct builder *b);
void vt__tl_builder_free(struct builder *b);

#endif /* VT_TRACE_TIMELINE_BUILD_H */
