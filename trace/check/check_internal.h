/*
 * trace/check/check_internal.h - the checker's model, shared by its files:
 *   check.c         entry points: options, ranking, vt__check_run (runs the
 *                   passes and the rules; nothing calls back into it)
 *   check_findings.c what the rules share: ignore patterns, findings, medians
 *   check_model.c   the model (pass 1, on the timeline's lifetimes, from a
 *                   stream of the events; storages no rule can flag retired)
 *                   and its queries
 *   check_live.c    the storages open during pass 1, by address
 *   check_linger.c  the LINGER rule and its grace
 *   check_sampled.c the call sites whose storages are revisited at random
 *                   (a replay buffer's entries), and the grace they get
 *   check_pinned.c  the PINNED rule (coverage tree over the live views)
 *   check_cycle.c   the CYCLE rule: storages a garbage collection freed
 *   check_tape.c    the TAPE rule: retention inside a step, through its peak
 *   check_native.c  the NEVER-FREED and OUTLIER rules of native traces
 *   check_growth.c  the GROWTH rule: call sites growing step over step, and
 *                   vt__check_growth_fit
 *   check_window_sites.c the call site of a storage made before the window
 *                   and freed in it in a file older than 1.12, for GROWTH
 *   check_paths.c   the time-varying reference graph (pass 2) and path search
 *   check_report.c  formatting, the text report and the JSON writer
 *   check_path_text.c a holder chain as one line, whole or folded
 *   check_storages.c the model's external storages, listed for the views
 *   check_times.c   every event's time and seq, compact, for the time rules
 * Below the types, each file's cross-file functions are grouped under its
 * name.
 */
#ifndef VT_TRACE_CHECK_INTERNAL_H
#define VT_TRACE_CHECK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "check.h"
#include "grow.h"
#include "order.h"
#include "u64map.h"

#define CK_NONE UINT32_MAX

/* One storage: an allocation, an external storage, or an implicit one
 * (a tensor whose data lives in nothing we saw allocated). */
typedef struct ck_storage {
    uint64_t addr;
    uint64_t size;          /* block size / external nbytes / tensor nbytes */
    uint64_t req_size;      /* bytes asked for, 0 if unknown */
    uint64_t alloc_seq;     /* 0 if before the window */
    uint64_t alloc_time;
    uint64_t free_seq;      /* 0 while alive at the end */
    uint64_t free_time;
    uint64_t again_rest;    /* the longest a tensor on it declared again (format 1.11)
                               had stayed unused before a use, before the window:
                               its usual gap, which the window may not show; in
                               marks, or in ns where the program made none */
    uint32_t alloc_stack;
    uint32_t free_stack;
    uint32_t free_thread;   /* the thread of the event that freed it */
    uint32_t last_use_thread;   /* the thread of its last use (push_use: in event order) */
    uint64_t last_use_seq;      /* and its seq (its uses are contiguous in m->uses only
                                   after pass 1: this is what pass 1 reads) */
    uint32_t owner;         /* node index of the owning tensor, CK_NONE */
    uint32_t first_tensor;  /* bound tensors, linked by ck_node.next_bound */
    uint32_t ntensors;
    uint32_t first_use;     /* its uses: m->uses[first_use .. first_use + nuses) */
    uint32_t nuses;
    uint32_t tl, tr, prio;  /* check_live.c's treap (pass 1 only) */
    int8_t device;
    uint8_t external;       /* STORAGE_EXTERNAL */
    uint8_t implicit;       /* assumed from a TENSOR_NEW */
    uint8_t before_window;  /* allocated before the first event */
    uint8_t freed;          /* free_seq is valid */
    uint8_t claimed;        /* already part of a native finding */
    uint8_t lingered;       /* flagged by LINGER (PINNED stops at its last use) */
    uint8_t gc_freed;       /* flagged by CYCLE (LINGER skips it) */
    uint8_t pinned;         /* flagged by PINNED (GROWTH counts it no more) */
    uint8_t ignore_counted; /* already counted in nignored */
    uint8_t fate_unknown;   /* no free among the kept events, yet not alive at the end
                               (trace/liveness.h): freed in a gap or after the copy;
                               no rule judges it */
    uint8_t retired;        /* pass 1: its slot is free (the storage is in ck_site) */
    uint32_t alloc_event;   /* index of its ALLOC event, UINT32_MAX if none */
    uint32_t ord;           /* opened as the ord-th storage: the model's order */
} ck_storage;

/* What the native rules count of a call site's retired storages (closed,
 * no tensor, alive at no mark: pass 1 keeps no record of them). */
typedef struct ck_site {
    uint32_t stack;         /* the call site: allocation stack */
    uint32_t n;             /* its retired storages */
    uint64_t first_seq;     /* the first of them in the model's order (alloc_seq, */
    uint32_t first_ord;     /* then ord): what an --ignore pattern is asked about */
    int8_t first_device;
    /* GROWTH by time (ck_model.nwin > 0): its retired storages' bytes alive
     * at each window's end, as differences (nwin + 1 of them), then their
     * count the same way (nwin + 1 more), then, for each window a storage
     * started to count at, the latest window any of those stopped at (nwin
     * + 1 more: how long the storages made then were kept), then their
     * blocks alive at each window's end as differences (nwin + 1 more: what
     * a growth keeps from the program, vt__ck_held_bytes), and the first of
     * them that counted there (lowest ord), which a finding shows. */
    int64_t *win;
    ck_storage win_first;
} ck_site;

/* A retired storage's lifetime (free - alloc), for OUTLIER's median of the
 * short-lived: kept only while that rule may run. */
typedef struct ck_life {
    uint64_t ns;
    uint32_t stack;
} ck_life;

/* A holder or a tensor (one per HOLDER_NEW / TENSOR_NEW, plus implicit
 * holders for ids that a REF names before any NEW). */
typedef struct ck_node {
    uint64_t id;
    uint32_t name;          /* string index: the latest (TENSOR_NEW, TENSOR_NAME) */
    uint8_t kind;           /* VT_CHECK_NODE_HOLDER / _TENSOR */
    uint8_t alive;          /* pass 2: tensor between NEW and DROP; holders 1 */
    uint32_t storage;       /* tensor: bound storage, CK_NONE */
    uint64_t base_id;       /* tensor: base tensor id (TENSOR_NEW aux2), 0: not a view */
    uint32_t base;          /* tensor: base tensor node, CK_NONE if unknown */
    uint32_t next_bound;    /* next tensor bound to the same storage */
    uint64_t addr, nbytes;  /* tensor: data_ptr and nbytes of its TENSOR_NEW */
    uint64_t new_seq, new_time;   /* tensor: its TENSOR_NEW */
    uint32_t made_stack;    /* tensor: its TENSOR_NEW's stack (where it was made; a
                               declaration again says it too) */
    uint64_t drop_seq, drop_time; /* tensor: its first TENSOR_DROP */
    uint8_t dropped;        /* tensor: drop_seq is valid */
    uint8_t implicit;       /* made for an id a REF named before any NEW: a holder, or
                               a tensor made before the window (its TENSOR_NEW
                               overwritten), known as one by its drop: alive until then */
    uint8_t gc_collection;  /* holder: one run of a garbage collector (HOLDER_NEW aux2) */
    uint64_t gc_seq, gc_time; /* tensor: first REF from a collection holder, 0: none */
    uint32_t in_head;       /* pass 2: first live incoming edge */
    uint32_t gen;           /* path search: visited when == current generation */
    uint32_t parent;        /* path search: next node toward the storage, CK_NONE:
                               the storage itself */
    uint32_t plabel;        /* path search: label of the edge to parent */
    uint32_t depth;
} ck_node;

/* One use of a storage (a TENSOR_NEW or TENSOR_USE of a bound tensor). */
typedef struct ck_use {
    uint64_t seq;
    uint64_t time;
    uint32_t storage;
    uint32_t node;
    uint32_t stack;
    uint8_t before_window;  /* stands for an unknown use before the window: a
                               tensor declared again (format 1.11) whose
                               first declaration the ring overwrote */
} ck_use;

/* A graph operation, in event order (pass 2 replays only these). */
enum { CK_OP_NEW = 1, CK_OP_DROP, CK_OP_REF, CK_OP_UNREF };
typedef struct ck_gop {
    uint64_t seq;
    uint32_t a, b;          /* NEW/DROP: a = node; REF/UNREF: a = from, b = to */
    uint32_t label;         /* REF: string index */
    uint8_t op;
} ck_gop;

/* A run of frees that a loop's blocks made (check_loop_kept.c): the
 * retired storages keep no record, this does. */
typedef struct ck_loop {
    ck_storage big;          /* its largest block, as closed */
    uint64_t bytes, block_bytes;
    uint64_t first_seq, first_time;   /* its first block's allocation */
    uint64_t longest;        /* the longest a block of it was held, ns */
    double byte_seconds;
    uint32_t n, lines, visits;
    uint32_t call;           /* the call of the program they were made under */
} ck_loop;
typedef struct ck_loops ck_loops;

/* The call sites (allocation stacks) whose storages are drawn from at
 * random (a replay buffer's entries: check_sampled.c), each with the grace
 * in steps LINGER gives them (see VT_CHECK_SAMPLED_*). */
typedef struct ck_sampled {
    vt__u64map site;      /* allocation stack -> index */
    uint32_t *grace;      /* by index; 0: not drawn from */
    double *mean_gap;     /* by index: the mean gap between draws lately, in steps */
} ck_sampled;

typedef struct ck_model {
    const vt__snapshot_data *s;
    struct vt__event_stream *es; /* its events, read once per pass */
    char *err; size_t errlen;    /* a failed pass's one line */
    unsigned rules_asked;   /* VT_CHECK_RULE_* asked for by name, 0: automatic */
    uint8_t keep_records;   /* retire no storage (vt__check_options.keep_records) */
    uint8_t keep_all;       /* retire no storage: asked, or a rule judges every one */
    uint8_t collect_lives;  /* keep the retired lifetimes: OUTLIER runs */
    uint8_t loop_look;      /* pass 1 judges runs of frees (check_loop_kept.c) */
    ck_loops *loops;        /* its state and what it found; NULL: not looked */
    ck_storage *st;   size_t nst, capst;   /* after pass 1: the kept storages, by ord */
    size_t nst_all;         /* storages opened, retired ones included */
    uint32_t *free_slots; size_t nfree_slots, capfree_slots;  /* pass 1 */
    ck_site *sites;   size_t nsites, capsites;
    vt__u64map site_of;     /* stack -> its ck_site */
    ck_life *lives;   size_t nlives, caplives;
    uint8_t any_device;     /* a storage on a device (not host) */
    size_t nevents;
    struct ck_times *times; /* every event's time and seq, only for the time rules
                               (check_times.c) */
    ck_node *nodes;   size_t nnodes, capnodes;
    ck_use *uses;     size_t nuses, capuses;
    ck_gop *gops;     size_t ngops, capgops;
    uint64_t *mark_seq; uint64_t *mark_time; size_t nmarks, capmarks;
    ck_sampled drawn;       /* sites drawn from at random (steps mode, after pass 2) */
    /* The marks are the steps the backward passes tell (tl->backward_steps),
     * added by pass 1 where the program marked no step (vt__ck_model_build) */
    uint8_t steps_inferred;
    /* The time of every free the program asked for from free_time_from
     * on (the last mark; 0 without marks), in order; a call site keeping
     * memory between frees is in a loop (NEVER-FREED and GROWTH by time,
     * NEVER-FREED after the last mark), one allocating a burst of weights
     * is not. */
    uint64_t *free_time; size_t nfree_time, capfree_time;
    uint64_t free_time_from;
    /* The recording tool's own pauses of the program (PAUSE events), as
     * disjoint intervals in time order, each with the paused time of those
     * before it: the program's own time between two moments leaves them
     * out (LINGER and PINNED by time). */
    struct ck_pause { uint64_t from, to, before; } *pause;
    size_t npause, cappause;
    uint32_t *mark_label;   /* string id of each mark's label */
    /* the time after the last mark as steps (vt__ck_quiet_tail) */
    uint64_t quiet_from, quiet_gap;
    uint32_t quiet_steps;
    int quiet_only;         /* NEVER-FREED judges the quiet time alone */
    int loop_only;          /* OUTLIER is its look for a loop's blocks alone (tensors) */
    vt__u64map ids;         /* id -> node (latest NEW) */
    uint32_t root;          /* check_live.c's treap root, CK_NONE */
    uint64_t prio_state;    /* treap priorities: a generator seeded per run */
    uint64_t start_time, end_time;
    /* The program's last event: end_time is the snapshot when later, and
     * a program that ran out of memory is seconds from its exit snapshot
     * (its traceback, its teardown): no time of its loop. */
    uint64_t last_event_time;
    size_t ntensors, nholders, nrefs;
    size_t ngc_collections; /* holders flagged VT_HOLDER_GC_COLLECTION */
    uint8_t skip_host;      /* host storages are not judged (vt__check_host) */
    /* The blocks of an observed PyTorch pool, no marks, no tensors (an
     * evaluation, inference): NEVER-FREED and GROWTH judge them by time. */
    uint8_t pool_by_time;
    /* GROWTH by time (check_growth.c): nwin windows of the trace, the k-th
     * ending at win_t0 + (k + 1) * win_span / nwin; 0: by marks. */
    size_t nwin;
    uint64_t win_t0, win_span;
    /* Live bytes of the open storages, in event order, and their highest:
     * device and host apart (the floor under which findings are minor). */
    uint64_t live_device, peak_device, live_host, peak_host;
} ck_model;

/* The findings of all rules, in the order the rules add them. */
typedef struct ck_findings {
    vt__check_finding *f;
    uint32_t *fst;          /* storage index per finding (LINGER), CK_NONE */
    size_t n, cap, capst;
} ck_findings;

/* ------------------------------------------------------------------------ */
/* check_model.c                                                            */
/* ------------------------------------------------------------------------ */

/* Grow an array so that it holds at least `need` elements (0 / -ENOMEM). */
#define CK_GROW(arr, cap, need) vt__grow((void **)&(arr), &(cap), (need), sizeof *(arr))
/* GROWTH by time: the windows a trace without marks is cut into. */
#define CK_GROWTH_WINDOWS 20

/* String idx of the snapshot, "" when absent or malformed. */
const char *vt__ck_string(const vt__snapshot_data *s, uint32_t idx);

/* Build the model of m->s from its events m->es (m zeroed but for s, es,
 * err, rules_asked and keep_records): pass 1, the kept storages in their
 * order, the uses grouped by storage, start and end time. 0, or -ENOMEM
 * or the stream's error with one line in m->err (then vt__ck_model_free). */
int vt__ck_model_build(ck_model *m);
void vt__ck_model_free(ck_model *m);
/* An implicit storage (from before the window: its allocation unseen) of
 * size bytes at addr, opened and counted live for a tensor that stands on
 * it (check_nodes.c). 0, or -ENOMEM. */
int vt__ck_open_implicit(ck_model *m, uint64_t addr, uint64_t size, int8_t device, uint32_t *out);

/* ------------------------------------------------------------------------ */
/* check_nodes.c: pass 1's tensors and holders, uses, graph operations      */
/* ------------------------------------------------------------------------ */

/* One event of the tensors and holders (TENSOR_NEW, _USE, _DROP, _NAME,
 * HOLDER_NEW, REF, UNREF) into the model. 0, or -ENOMEM. */
int vt__ck_on_graph_event(ck_model *m, const vt__event *e);
/* The tensors declared again whose first declaration the ring overwrote,
 * bound before the first event (one more pass, only where the ring
 * overwrote events). 0, or -ENOMEM or the stream's error. */
int vt__ck_seed_declared_again(ck_model *m);

/* ------------------------------------------------------------------------ */
/* check_live.c: the storages open during pass 1, by address               */
/* ------------------------------------------------------------------------ */

/* Empty, with priorities seeded for this run (before the first insert). */
void vt__ck_live_init(ck_model *m);
/* Storage x opened (not open already) / closed (a no-op if not open). */
void vt__ck_live_insert(ck_model *m, uint32_t x);
void vt__ck_live_remove(ck_model *m, uint32_t x);
/* The open storage at addr (the newest of several), or CK_NONE. */
uint32_t vt__ck_live_at(const ck_model *m, uint64_t addr);
/* The open storage whose bytes hold addr (or at addr, if empty), or CK_NONE. */
uint32_t vt__ck_live_containing(const ck_model *m, uint64_t addr);

/* ------------------------------------------------------------------------ */
/* check_clock.c: steps, frees and the program's own time                    */
/* ------------------------------------------------------------------------ */

/* Step of an event: the number of marks at or before it. */
uint32_t vt__ck_step_of(const ck_model *m, uint64_t seq);
/* Whether the program freed anything strictly between times a and b
 * (both at or after free_time_from: the frees kept). */
int vt__ck_freed_between(const ck_model *m, uint64_t a, uint64_t b);
/* A PAUSE event (its end time, aux its length) kept by the model's walk
 * (0, or -ENOMEM); once the walk is done, the pauses put in time order,
 * overlaps merged. */
int vt__ck_push_pause(ck_model *m, const vt__event *e);
void vt__ck_order_pauses(ck_model *m);
/* The tool's pauses between times a and b (0 unless a < b): what a
 * finding's held time has that is not the program's (paused_ns). */
uint64_t vt__ck_paused_time(const ck_model *m, uint64_t a, uint64_t b);
/* The program's own time from a to b (a <= b): b - a less the tool's
 * pauses between them. */
uint64_t vt__ck_program_time(const ck_model *m, uint64_t a, uint64_t b);
/* The moment the program's own time since a reaches d: a + d, later by the
 * tool's pauses on the way. */
uint64_t vt__ck_program_time_after(const ck_model *m, uint64_t a, uint64_t d);
/* Label of the mark that began step `step` ("" for step 0). */
const char *vt__ck_step_label(const ck_model *m, uint32_t step);
/* The run's time after its last mark, where it went on for CK_QUIET_STEPS
 * of its usual steps at least (the median gap between marks, in the
 * program's own time): m->quiet_steps whole steps of m->quiet_gap from
 * m->quiet_from (an evaluation after the last training step, which has no
 * optimizer step to mark). 0, or -ENOMEM. */
#define CK_QUIET_STEPS 4
#define CK_QUIET_MIN_SITE_STEPS 3   /* NEVER-FREED: a site's quiet steps, when it has no other */
int vt__ck_quiet_tail(ck_model *m);
/* The step of a moment after the last mark: nmarks + the quiet step it
 * falls in, or UINT32_MAX past the last whole one (or without a quiet tail). */
uint32_t vt__ck_quiet_step_of(const ck_model *m, uint64_t time);

/* ------------------------------------------------------------------------ */
/* check_times.c                                                            */
/* ------------------------------------------------------------------------ */

typedef struct ck_times ck_times;
/* Every event's time and seq (m->times), read again from the stream: what
 * vt__ck_seq_at_time needs. 0 or a negative errno (m->err). */
int vt__ck_model_times(ck_model *m);
void vt__ck_times_free(ck_times *t);
/* First event seq whose time is >= t, clamped below `limit` (0: none);
 * after vt__ck_model_times. */
uint64_t vt__ck_seq_at_time(const ck_model *m, uint64_t t, uint64_t limit);

/* ------------------------------------------------------------------------ */
/* check_findings.c: what the rules share                                   */
/* ------------------------------------------------------------------------ */

/* A sort key: by group, then seq, then idx (vt__ck_cmp_key, for qsort).
 * A key without groups leaves group 0. */
typedef struct ck_key {
    uint64_t seq;
    uint32_t group;
    uint32_t idx;
} ck_key;
int vt__ck_cmp_key(const void *a, const void *b);

/* Upper median of v[0..n) (reorders v); 0 for n == 0. */
uint64_t vt__ck_median(uint64_t *v, size_t n);
/* vt__snapshot_python_line once per stack: a window's storages share few
 * stacks. */
typedef struct ck_line_memo {
    const vt__snapshot_data *s;
    vt__u64map of_stack;   /* stack -> index into line */
    uint64_t *line;
    size_t n, cap;
} ck_line_memo;
/* 0 or -ENOMEM (lm zeroed, safe to free). */
int vt__ck_line_memo_init(ck_line_memo *lm, const vt__snapshot_data *s);
/* Stack's innermost Python line (vt__snapshot_python_line: 0 for none)
 * into *line: 0, or -ENOMEM. */
int vt__ck_line_of(ck_line_memo *lm, uint32_t stack, uint64_t *line);
/* Where a free stack frees, as a key, into *key: its innermost Python line
 * (a container's eviction frees its items through several native paths, a
 * view's and a base's), else the stack itself. 0, or -ENOMEM. */
int vt__ck_free_line(ck_line_memo *lm, uint32_t free_stack, uint64_t *key);
void vt__ck_line_memo_free(ck_line_memo *lm);

/* Whether storage sti is not judged: 2 when it is in host memory and the
 * model skips host storages (vt__check_host), 1 when --ignore skips it (a
 * pattern matches one of its tensors' names or a function of its
 * allocation stack or of extra_stack), else 0. */
int vt__ck_ignored(const ck_model *m, const vt__check_options *opt, uint32_t sti,
                   uint32_t extra_stack);
/* A new zeroed finding about storage sti (CK_NONE: a call site); NULL on
 * ENOMEM. */
/* Whether --ignore skips a call site known by a retired storage of it (no
 * record left: its stack and device only, no tensor; a host one the host
 * rule skips is not ignored here). */
int vt__ck_site_ignored(const ck_model *m, const vt__check_options *opt, uint32_t stack,
                        int8_t device);
vt__check_finding *vt__ck_add_finding(ck_findings *fs, uint32_t sti);
/* Bytes asked for, else the block size. */
uint64_t vt__ck_storage_bytes(const ck_storage *st);
/* A storage's lifetime (its allocation and its free: seq, time, stack) and
 * its tensor count into `o`, and a use's when and where (seq, time, stack)
 * into o's last_use_*: the fields a finding (vt__ck_fill_storage) and a row
 * of vt__check_storages share, by the same names in both public records
 * (check.h), copied the one way. */
#define VT__CK_COPY_LIFETIME(o, st)                                                               \
    do {                                                                                         \
        (o)->alloc_seq = (st)->alloc_seq;                                                        \
        (o)->alloc_time_ns = (st)->alloc_time;                                                   \
        (o)->alloc_stack = (st)->alloc_stack;                                                    \
        (o)->free_seq = (st)->free_seq;                                                          \
        (o)->free_time_ns = (st)->free_time;                                                     \
        (o)->free_stack = (st)->free_stack;                                                      \
        (o)->ntensors = (st)->ntensors;                                                          \
    } while (0)
#define VT__CK_COPY_LAST_USE(o, use)                                                              \
    do {                                                                                         \
        (o)->last_use_seq = (use)->seq;                                                          \
        (o)->last_use_time_ns = (use)->time;                                                     \
        (o)->last_use_stack = (use)->stack;                                                      \
        (o)->last_use_before_window = (use)->before_window;                                      \
    } while (0)
/* The storage's fields of a finding (address, sizes, lifetime, owner). */
void vt__ck_fill_storage(vt__check_finding *f, const ck_model *m, const ck_storage *st);
/* A finding of blocks no use was recorded for (the native rules'): its last
 * use is its allocation, held from (from_seq, from_time), linger_ns the
 * longest of them; no holder paths looked for. */
void vt__ck_fill_blocks_held(vt__check_finding *f, const ck_model *m, uint64_t from_seq,
                             uint64_t from_time, uint64_t linger_ns, double byte_seconds);
/* The last-use fields of a finding (when, where, which tensor, its step). */
void vt__ck_fill_last_use(vt__check_finding *f, const ck_model *m, const ck_use *last);
/* Opens a finding of `rule` on storage sti, last used at `last`: its storage
 * and last-use fields filled in. NULL when --ignore skips it (counted in
 * r->nignored) or, with *rc = -ENOMEM, when out of memory. */
vt__check_finding *vt__ck_open_use_finding(ck_model *m, const vt__check_options *opt,
                                          ck_findings *fs, vt__check_report *r, uint32_t sti,
                                          const ck_use *last, unsigned rule, int *rc);

/* ------------------------------------------------------------------------ */
/* check_linger.c, check_pinned.c, check_cycle.c, check_native.c,          */
/* check_growth.c: the rules                                                */
/* ------------------------------------------------------------------------ */

/* Each adds its findings to fs; 0 or -ENOMEM. LINGER also sets
 * r->grace_mode and marks the storages it flags (ck_storage.lingered), so it
 * runs before PINNED. */
int vt__ck_rule_linger(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                       vt__check_report *r);
int vt__ck_rule_pinned(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                       vt__check_report *r);
/* A LINGER finding ``f`` on storage ``sti`` whose owner was dropped by the
 * moment its paths show (f->path_seq), and whose tensors alive then cover
 * less than ``ratio`` of it: what the program keeps is a small part of the
 * buffer (a slice of a batch's output kept in a list, ``out[:8].detach()``,
 * which is no view to PyTorch), and a copy of it would let the rest go.
 * Fills the finding's views, covered and wasted bytes and live count, and
 * the owner's drop, as PINNED lists them (left 0 when they cover more).
 * 0, or -ENOMEM. */
int vt__ck_linger_pinning(ck_model *m, uint32_t sti, double ratio, vt__check_finding *f);
/* check_sampled.c: fills m->drawn (steps mode: LINGER's and GROWTH's);
 * empty (no site) with too few marks. 0 or -ENOMEM. */
int vt__ck_sampled_init(ck_sampled *s, const ck_model *m);
/* st's site's grace (0: none), its mean gap in *mean_gap. */
uint32_t vt__ck_sampled_grace(const ck_sampled *s, const ck_storage *st, double *mean_gap);
void vt__ck_sampled_free(ck_sampled *s);
/* st's gaps between the distinct steps it was used in (gaps: room for
 * st->nuses); their count, and its last use's step in *last_step. */
size_t vt__ck_use_step_gaps(const ck_model *m, const ck_storage *st, uint64_t *gaps,
                            uint32_t *last_step);
/* CYCLE runs before LINGER and marks the storages it flags (gc_freed). */
int vt__ck_rule_cycle(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                      vt__check_report *r);
/* TAPE runs after LINGER and CYCLE and skips what they flagged. */
int vt__ck_rule_tape(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                     vt__check_report *r);
/* NEVER-FREED and/or OUTLIER, as `rules` selects. */
int vt__ck_rule_native(ck_model *m, const vt__check_options *opt, unsigned rules,
                       ck_findings *fs, vt__check_report *r);
/* A call-site finding of `rule` from its member storages idx[0..n), the
 * window's first (the one shown is the largest of them), then the nbefore
 * made before it, each held from linger_start[k] to its free (or the end),
 * held from (from_seq, from_time) as a whole; its members claimed. NULL on
 * ENOMEM. */
vt__check_finding *vt__ck_site_finding(ck_model *m, ck_findings *fs, unsigned rule,
                                      const uint32_t *idx, size_t n, size_t nbefore,
                                      const uint64_t *linger_start, uint64_t from_seq,
                                      uint64_t from_time);
/* OUTLIER's second look, with marks and no tensors: a call's allocations
 * kept together past a complete step (check_kept_call.c). */
int vt__ck_rule_kept_call(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                          vt__check_report *r);
/* OUTLIER's third look, with marks and no tensors: a loop's allocations
 * kept until it ended (check_loop_kept.c). Pass 1 calls _freed for each
 * storage it closes and _boundary where a run of frees ends (an
 * allocation, a mark, the end); the rule makes the findings. */
int vt__ck_loops_init(ck_model *m);
void vt__ck_loops_free(ck_model *m);
int vt__ck_loop_freed(ck_model *m, const ck_storage *s, uint32_t free_stack);
int vt__ck_loop_boundary(ck_model *m);
/* How many runs of frees pass 1 found a loop's blocks in. */
size_t vt__ck_loops_found(const ck_model *m);
int vt__ck_rule_loop_kept(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                          vt__check_report *r);
/* After NEVER-FREED, OUTLIER and GROWTH, with marks and no tensors: their
 * call-site findings kept under one call of the program name it
 * (under_stack; check_kept_call.c), but those that name theirs already (a
 * loop's). 0 or -ENOMEM. */
int vt__ck_kept_under_call(ck_model *m, ck_findings *fs);
/* GROWTH runs last: it judges the storages no other rule flagged. */
/* The window storage st is alive at the end of, first and past the last:
 * [*a, *b) (by time: ck_model.nwin). */
void vt__ck_win_span(const ck_model *m, const ck_storage *st, size_t *a, size_t *b);
/* Whether GROWTH judges st (one finding per storage: not what the other
 * rules flagged, nor what they cannot tell). */
int vt__ck_growth_counts(const ck_storage *st);
/* The same by time (ck_model.nwin): of those, the pool's blocks only (device
 * memory allocated in the window), retired or not. */
int vt__ck_growth_counts_by_time(const ck_storage *st);
int vt__ck_rule_growth(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                       vt__check_report *r);

/* ------------------------------------------------------------------------ */
/* check_paths.c                                                            */
/* ------------------------------------------------------------------------ */

/* Compute the retention paths of the LINGER and PINNED findings of `r`
 * (storage index of finding i in fst[i]) by replaying the graph operations
 * once. */
int vt__ck_paths(ck_model *m, vt__check_report *r, const uint32_t *fst,
                 const vt__check_options *opt);

/* ------------------------------------------------------------------------ */
/* check_groups.c: findings grouped by cause                                */
/* ------------------------------------------------------------------------ */

#define CK_GROUP_KEY_MAX 1024
#define CK_GROUP_LINES_MAX 64

typedef struct ck_group {
    char key[CK_GROUP_KEY_MAX];   /* rule \x1f owner \x1f holder (see holder_root), or
                                   * rule \x1f \x1e graph \x1f the graph's holder (graph_root) */
    char shown[CK_GROUP_KEY_MAX]; /* rule \x1f owner \x1f its first finding's normalized path */
    size_t first;                 /* index of its first finding */
    size_t count;
    uint64_t bytes;
    uint64_t held_bytes;          /* its findings' vt__ck_held_bytes: what the floor weighs */
    size_t nlines;                /* distinct owner lines in it (a graph's group has several),
                                   * counted up to CK_GROUP_LINES_MAX ("at least" from there) */
    uint64_t lines[CK_GROUP_LINES_MAX];   /* their hashes */
} ck_group;

/* The groups of r's findings, largest first (*ngroups of them; group_of[i],
 * if given, the group of finding i); NULL when out of memory. free() it.
 * `s` (the snapshot r was made from; NULL: none) tells the lines of the
 * program's own code that findings no tensor names are grouped by. */
ck_group *vt__ck_group_findings(const vt__check_report *r, const vt__snapshot_data *s,
                                size_t *ngroups, uint32_t *group_of);
/* r's groups (vt__ck_group_findings) and, in *older (free() it), each
 * group's older_alive storages and bytes, its findings' sums: group k's at
 * [k] and [*ng + k]; finding i's group in group_of[i] where given (room
 * for r->nfindings). NULL when out of memory. */
ck_group *vt__ck_groups_with_older(const vt__check_report *r, const vt__snapshot_data *s,
                                   size_t *ng, uint64_t **older, uint32_t *group_of);
/* A group's rule, owner line and shown path: pointers into ``copy``. */
void vt__ck_group_parts(const ck_group *grp, char *copy, size_t len, const char **rule,
                        const char **owner, const char **path);
/* The holder of the autograd graph whose tensors ``grp`` groups, in ``buf``
 * (CK_GROUP_KEY_MAX bytes hold it whole); NULL when it groups by owner line
 * and holder. */
const char *vt__ck_group_graph_root(const ck_group *grp, char *buf, size_t len);
/* What a cause's "held by" says after a graph's holder: its tensors are the
 * graph's (the text's causes and the JSON groups' "held_by"). */
#define CK_GRAPH_KEPT " \xe2\x86\x92 (the autograd graph it keeps)"

/* ------------------------------------------------------------------------ */
/* check_window.c                                                           */
/* ------------------------------------------------------------------------ */

/* The tensor rules' findings (LINGER, CYCLE, TAPE, PINNED) of fs: on the
 * first of each allocation stack, the storages allocated there before the
 * window that are still alive with no tensor recorded (older_alive).
 * @return 0 or -ENOMEM. */
int vt__ck_older_alive(ck_model *m, ck_findings *fs);
/* The storages made before the window and alive at the end whose
 * allocation stack is known (the state kept it), into out (room for
 * m->nst) as keys (seq: alloc_seq, group: the stack), sorted by stack,
 * then seq: what a finding of that stack may count besides its own.
 * @return how many. */
size_t vt__ck_alive_before_window(const ck_model *m, ck_key *out);

/* ------------------------------------------------------------------------ */
/* check_window_sites.c                                                     */
/* ------------------------------------------------------------------------ */

/* What places storages made before the window and freed in it at a call
 * site in a file older than 1.12: the tensors' made stacks. Zeroed: places
 * none. */
typedef struct ck_window_sites {
    int on;                        /* the ring overwrote some, some are stackless,
                                      and tensors were recorded */
    vt__u64map by_made;            /* made stack -> call site */
} ck_window_sites;
/* @return 0 or -ENOMEM (ws zeroed). */
int vt__ck_window_sites_init(const ck_model *m, ck_window_sites *ws);
/* st's call site: its allocation stack, or for a stackless storage the one
 * its tensor's made stack gives (0: none). */
uint32_t vt__ck_window_site_of(const ck_model *m, const ck_storage *st,
                              const ck_window_sites *ws);
void vt__ck_window_sites_free(ck_window_sites *ws);

#endif /* VT_TRACE_CHECK_INTERNAL_H */
