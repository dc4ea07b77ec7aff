/*
 * trace/check/check.h - the reference-graph checker (`vramtrace check`).
 *
 * The question it answers: which storage stayed alive after the last logical
 * use of the tensors on it, since when, how many bytes, and which chain of
 * references kept it alive. Typical causes: a Python reference cycle that
 * holds activations until the next gc pass, a view that pins the whole buffer
 * it was cut from, a pipeline context that keeps send/recv buffers one
 * micro-batch too long, a hook closure that keeps a dict of intermediates.
 *
 * Input: a vt__snapshot_data (trace/snapshot.h), nothing else, or one whose
 * events are read as a stream (vt__check_run_stream). The checker is a pure
 * function of it: no allocator, no CUDA, no globals, no I/O except the
 * printers below. Cost: O(n log n) in the number of events plus a bounded
 * search per finding (see vt__check_options.max_visit); 1M events take well
 * under a second. Memory follows what is alive at once, the tensors and
 * their references, not the number of events (vt__check_run_stream).
 *
 * ---------------------------------------------------------------------------
 * The model built from the events (see vramtrace/format.h for the fields)
 * ---------------------------------------------------------------------------
 *  storages  Allocations: the lifetimes of trace/snap/timeline.h (the model
 *            is built on it, one matching rule for every view): ALLOC opens a
 *            storage at its addr, FREE_REQUESTED at that addr closes it; a
 *            free with no open storage is an allocation from before the
 *            window; ACTIVE blocks of the allocator state that no ALLOC
 *            explains are storages alive throughout; an ALLOC over a still
 *            open storage closes the old one there (its free was lost).
 *            STORAGE_EXTERNAL / STORAGE_EXTERNAL_FREE add storages vramtrace
 *            did not allocate (a CPU tensor's, another allocator's).
 *  tensors   TENSOR_NEW binds tensor `aux` to the storage that CONTAINS its
 *            data_ptr (`addr`) at that moment; if none does, an implicit
 *            storage [addr, addr+size) is assumed (allocated before the
 *            window), closed by a later free at its address. A view
 *            (aux2 = base id) binds the same way: to the storage its data
 *            lives in, which is its base's. The creation counts as a use.
 *            TENSOR_USE is a use; TENSOR_DROP: the tensor object died (it
 *            no longer holds its storage, and nothing holds it).
 *  holders   HOLDER_NEW: a non-tensor object (list, dict, closure cell,
 *            frame, autograd node, "reference cycle collected by gc"...).
 *            Tensor and holder ids share one id space.
 *  edges     REF(from, to, label) adds a reference, UNREF(from, to) removes
 *            the most recent one between the two. The graph is therefore
 *            time-varying; implicit edges tensor -> its storage.
 *
 * A storage's "owning tensor" is the first non-view tensor bound to it (the
 * first tensor at all if only views were). Its "last use" is the last
 * TENSOR_NEW/TENSOR_USE of ANY tensor bound to it, so a view still in use
 * keeps its base's storage alive as far as LINGER is concerned (PINNED below
 * looks at how much of it the view actually covers).
 * A tensor's "bytes" are its TENSOR_NEW nbytes (`size`), its extent
 * [data_ptr, data_ptr + nbytes); it is alive from its TENSOR_NEW to its
 * first TENSOR_DROP (or the end).
 *
 * ---------------------------------------------------------------------------
 * Rules (vt__check_options.rules; a finding names the one that fired)
 * ---------------------------------------------------------------------------
 * VT_CHECK_RULE_LINGER (tensor annotations present): a storage alive after
 * its last use by more than the grace.
 *   - Steps (default when the snapshot has MARK events): marks cut the trace
 *     into steps; step k runs from mark k to mark k+1 (step 0 is before the
 *     first mark; the step after the last mark is never complete). Let j be
 *     the step of the last use and G the storage's usual gap: the median
 *     distance, in steps, between consecutive distinct steps it was used in
 *     (1 if it was used in fewer than two steps). The storage is flagged when
 *     it stayed alive, unused, through N = max(1, G) complete steps after
 *     step j, i.e. it was still alive at mark j+1+N. That mark is when it
 *     became a finding (linger_from). Weights used every step (G = 1) or
 *     state used every k steps (G = k) are never flagged by the trace simply
 *     ending: their missed use would have to be followed by a complete step.
 *     A storage whose call site's storages are drawn from at random (a
 *     replay buffer: check_sampled.c) gets N = max(N, that site's grace).
 *     `--grace Nsteps` sets N directly (the usual gap is then ignored).
 *   - Time (default when there are no marks, or `--grace 2.5s`): flagged when
 *     free (or the end of the trace) minus the last use exceeds
 *       T = max(1 s, 10 x the median gap between its uses,
 *               VT_CHECK_TIME_FRACTION_PCT % of the trace duration);
 *     `--grace S` sets T = S. The finding starts at last use + T.
 *     "End of the trace" = max(meta.snapshot_time_ns, last event time).
 * VT_CHECK_RULE_NEVER_FREED (native trace, no tensor annotations): per call
 *   site (allocation stack), the allocations alive at the snapshot that were
 *   allocated before the last mark and after the first one (without marks:
 *   before the last VT_CHECK_TIME_FRACTION_PCT % of the trace), when they come
 *   from at least two different steps (without marks: spread over at least
 *   VT_CHECK_TIME_FRACTION_PCT % of the trace; only when named in
 *   vt__check_options.rules: the automatic choice does not run it on a trace
 *   without marks, rules_need_steps says so). That is the signature of a
 *   call site that accumulates memory step after step; one-time setup
 *   (weights, lazily created optimizer state: all in one step) is not flagged,
 *   nor a site that keeps a window of its allocations (a replay memory, a
 *   queue: VT_CHECK_WINDOW_MIN_FREED of them freed after living a step or
 *   more, none alive at the end older than the longest of those lived).
 * VT_CHECK_RULE_OUTLIER (native trace): per call site, the allocations that
 *   stayed alive through at least one complete step (without marks: longer
 *   than max(1 s, 10 x the median lifetime of their siblings)) while at least
 *   two of their siblings (same allocation stack) died within one step and
 *   such short-lived siblings are the majority. One finding per call site.
 *   And, with marks, a call's allocations kept together (check_kept_call.c):
 *   blocks one step made at two lines of Python or more, lines whose
 *   other blocks die within their step, all freed in one later step, a
 *   complete step at least after theirs (an autograd graph kept by a result
 *   and then let go). One finding per such cohort (kept_lines, kept_steps).
 *   And a loop's allocations kept until it ended (check_loop_kept.c; with
 *   tensors too, where OUTLIER is this look alone, added to the automatic
 *   rules where it found something): the
 *   blocks freed together, with no allocation between, in the step that
 *   made them, at two lines of Python or more, over four runs or more of one
 *   line inside the innermost call of the program they share (the
 *   iterations of a loop: an evaluation summing its losses as tensors keeps
 *   every batch's graph until the loop ends). One finding per run of
 *   frees (kept_lines, loop_visits, under_stack the call).
 *   Findings of both rules by call site whose lines are such lines, made
 *   under one call of the program that does not drive the steps (an
 *   evaluation's `model(x)`, not the training loop that makes nine in ten
 *   of the steps' blocks), name that call (under_stack): one cause.
 *
 * VT_CHECK_RULE_PINNED (tensor annotations present): a view that keeps its
 *   base's storage alive after the base tensor was dropped, e.g.
 *   `x = big[:, :10]` kept while `big` is gone: the whole buffer stays
 *   allocated for the few bytes of x, even if x is used every step (which
 *   LINGER cannot see). Checked only for storages whose owning tensor is not
 *   a view (its base's fate is unknown otherwise) and whose owner got a
 *   TENSOR_DROP. "Live views" are the other tensors bound to the storage
 *   that are alive (views of the owner or of its views; any other tensor on
 *   the same storage counts too). "Covered bytes" are the union of the live
 *   views' extents, clipped to the storage [addr, addr + bytes) (bytes as in
 *   the finding: asked-for size); "wasted bytes" = bytes - covered bytes.
 *   The storage is PINNED at a moment when its owner was dropped, it is
 *   still allocated, at least one view is alive and
 *     covered bytes < pinned_ratio x bytes   (default 0.5: `--pinned-ratio`).
 *   A pinned interval is a maximal run of such moments (it starts at the
 *   owner's drop, or when a view's drop brings the coverage under the
 *   ratio; it ends when the last view dies, the coverage reaches the ratio,
 *   the storage is freed, or at the end of the trace). The first interval
 *   that outlasts the grace is the finding (one per storage):
 *   - steps: it is still pinned at mark j+1+N where j is the step the
 *     interval started in and N = `--grace Nsteps`, else 1 (a view pinning a
 *     buffer through one complete step); steps_unused = complete steps it
 *     stayed pinned;
 *   - time: it lasted longer than T = `--grace S`, else
 *     max(1 s, VT_CHECK_TIME_FRACTION_PCT % of the trace).
 *   linger_from is when it became a finding; linger_ns the length of the
 *   interval; byte_seconds the integral of the wasted bytes over it (the
 *   ranking key: wasted bytes x time, not the storage's bytes x time).
 *   wasted_bytes, covered_bytes and the views listed are those of the moment
 *   the paths show (path_seq); the paths start from the live views.
 *   LINGER first: when LINGER flags the same storage, the pinned interval
 *   is cut at the storage's last use (from there LINGER's finding already
 *   counts every byte of it as held after its last use), so the two never
 *   report the same interval; if what is left does not outlast the grace,
 *   only the LINGER finding is reported. With `--rules pinned` alone nothing
 *   is cut. A LINGER finding on a storage whose owner was dropped and whose
 *   kept tensors cover less than pinned_ratio of it says so (its views,
 *   covered and wasted bytes: "kept_part"): a slice kept unused after its
 *   batch (`out[:8].detach()`, which PyTorch makes no view) lingers, and
 *   pins the rest of the buffer with it.
 *
 * VT_CHECK_RULE_CYCLE (tensor annotations and a HOLDER_NEW flagged
 *   VT_HOLDER_GC_COLLECTION present): a storage freed by a garbage
 *   collection, i.e. a reference cycle held it until gc ran. The storage was
 *   freed, and the last of its tensors to die was dropped by a collection (a
 *   REF from a collection holder to it precedes its TENSOR_DROP, which
 *   precedes the free). Flagged whatever the grace: memory that only a
 *   collection frees is held for as long as the collector waits, which the
 *   program does not control (PyTorch's own cycle detector flags the same).
 *   linger_from is the collection (its REF: gc_seq); linger_ns runs from
 *   the last use to the free ("held X s after its last use"); the paths show
 *   the references just before the collection (the cycle, when a holder
 *   walk recorded it). The CYCLE rule runs before LINGER, which then skips
 *   the storages it flagged (one finding per storage).
 *
 * VT_CHECK_RULE_TAPE (tensor annotations and marks; opt-in: `--rules
 *   linger,pinned,tape`, not part of the automatic rules): retention inside a
 *   step, e.g. a hand-written autograd tape that keeps every intermediate
 *   until the end of backward. A storage freed in the same complete step
 *   (between two marks) as its last use is flagged when it stayed alive after
 *   that use for at least VT_CHECK_TAPE_PCT % of the step's tensor uses (the
 *   ops the tracker saw, not time: a tracker's own pauses record nothing; not
 *   all events: a device's ALLOC/FREE would double a mass free's weight) and was alive and
 *   unused at the step's peak: the first event at which the live bytes of all
 *   storages in that step were highest (the step's peak depends on it).
 *   linger_from is that peak, linger_ns the time from the last use to the
 *   free; step_ns and step_peak_bytes say the step's length and peak; the
 *   paths show what held it at the peak. Storages LINGER or CYCLE flagged are
 *   not judged again.
 *
 * VT_CHECK_RULE_GROWTH (marks: at least VT_CHECK_GROWTH_MIN_MARKS): a call
 *   site (allocation stack) whose live bytes grow step over step. Its series
 *   is the bytes of its storages alive at each mark (a step's end), counting
 *   only storages no other rule flagged (LINGER, PINNED, CYCLE, NEVER-FREED
 *   and OUTLIER run first: one finding per storage), so it adds what they cannot
 *   see: a buffer reallocated larger every step, a cache that grows and is
 *   freed only at the end. Where the ring overwrote the run's start, a
 *   storage made before the window and freed in it (no allocation stack)
 *   counts with the site whose storages in the window have a tensor made
 *   at the stack its tensor, declared again, was made at (a full replay
 *   memory: those made before the window are evicted as the window's come;
 *   since format 1.12 the free names its allocation stack). The series is
 *   judged by vt__check_growth_fit (below): warm-up marks skipped, a robust
 *   slope, a floor that rises. A growing site whose storages freed in the
 *   window were mostly freed at one line is judged with every site freed
 *   mostly there: where together they do not grow, its growth is a share
 *   moving between lines one container holds (a replay memory's actions,
 *   made at the policy's line ever more often as exploration decays), not
 *   a finding.
 *   One finding per site: bytes is the growth over the judged marks, nallocs
 *   its storages alive at the last judged mark, growth_* the figures;
 *   linger_from is the first judged mark, linger_ns the time to the last,
 *   byte_seconds half of bytes x linger_ns (growth from nothing to bytes).
 *
 * Minor findings: after the rules, the findings are grouped by cause (as
 * vt__check_report_groups groups them) and those of a cause whose held bytes
 * (vt__check_held_bytes: each storage's block where larger than its bytes)
 * sum under the floor (vt__check_options.min_bytes; automatic: see
 * VT_CHECK_MINOR_PERMILLE) move to the report's `minor`, ranked the same:
 * they are not findings (nfindings, the totals, the exit status) but stay
 * whole for whoever wants them (the JSON's "minor", export's marked ones).
 * The peak the floor is a share of is the highest sum of the bytes of the
 * storages open at once, in event order (device storages when there are
 * any, else host ones).
 *
 * "Lingering" is measured from the last use (native rules: from the
 * allocation plus the siblings' median lifetime, or from the allocation for
 * never-freed; PINNED: from the start of the pinned interval) to the free or
 * the end; findings are ranked by bytes x lingering seconds (PINNED: wasted
 * bytes x seconds), largest first.
 *
 * Retention paths (LINGER and PINNED): the live reference chains, at linger_from
 * (or at the end of the trace if the storage is still alive then; PINNED: if
 * it is still pinned then), from a root to the storage. A breadth-first search runs backwards over live edges from
 * the storage through its live tensors; a root is a node with no live
 * incoming edge (a holder, or a tensor nothing recorded refers to). The
 * shortest paths to up to max_paths distinct roots are kept. When only cycles
 * reach the storage (no root: an uncollected reference cycle), one path that
 * closes the cycle is reported (its first node appears again later in it)
 * and the path is flagged `cycle`.
 *
 * Ownership: the report owns its arrays. Its `const char *` members point
 * into the snapshot's string table (or at a static ""), and its stack ids are
 * snapshot stack ids: keep the snapshot alive while using the report.
 */
#ifndef VT_TRACE_CHECK_H
#define VT_TRACE_CHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "snapshot.h"

struct vt__event_stream;

/* Share of the trace duration used by the time rules (see above). */
#define VT_CHECK_TIME_FRACTION_PCT 5
/* Floor of the time rule's grace. */
#define VT_CHECK_TIME_MIN_NS 1000000000ull
/* Multiple of the median use gap in the time rule. */
#define VT_CHECK_GAP_FACTOR 10
/* LINGER, storages revisited at random (check_sampled.c): a storage shows
 * draws with this many gaps between its use steps or more, not all equal; a
 * call site is drawn from when this many of its storages show them, more
 * than show regular gaps; their grace is where the chance of a draw missing
 * them that many steps in a row falls under VT_CHECK_SAMPLED_CHANCE. */
#define VT_CHECK_SAMPLED_MIN_GAPS 3
#define VT_CHECK_SAMPLED_MIN_STORAGES 4
#define VT_CHECK_SAMPLED_CHANCE 1e-6
/* NEVER-FREED: a call site that freed this many of its allocations after
 * they lived a complete step (a second without marks) keeps a window of
 * them, when none alive at the end is older than the longest of those
 * lived (a replay memory, a queue: check_native.c) */
#define VT_CHECK_WINDOW_MIN_FREED 4
/* PINNED: default share of the storage its live views must cover. */
#define VT_CHECK_PINNED_RATIO 0.5
/* TAPE: share of its step's events (percent) a storage must stay alive after its
 * last use. */
#define VT_CHECK_TAPE_PCT 25
/* PINNED: views listed per finding (the largest ones; nviews_live counts all). */
#define VT_CHECK_MAX_VIEWS 8
/* GROWTH: step ends (marks) judged after the warm-up, at least. */
#define VT_CHECK_GROWTH_MIN_STEPS 4
/* GROWTH: marks a trace needs for the rule to run (one of warm-up at least). */
#define VT_CHECK_GROWTH_MIN_MARKS (VT_CHECK_GROWTH_MIN_STEPS + 1)
/* Minor findings: a cause (a group of findings, vt__check_report_groups)
 * holding fewer bytes than the floor is minor (its storages' blocks, which
 * are what it keeps from the program: a 4-byte tensor holds a 512-byte block
 * of PyTorch's cache, and a list of one a step outgrows the floor as one of
 * 512 bytes would): the program's small results
 * kept on purpose (`losses.append(loss.detach())`, a list of per-batch
 * accuracies) are not what a memory check is asked about, and a leak worth
 * the name outgrows the floor. The automatic floor is this share (per
 * mille) of the peak live bytes of the trace's storages (device ones when it
 * has any), at most VT_CHECK_MINOR_CAP: a GPU job's floor is the cap. */
#define VT_CHECK_MINOR_PERMILLE 1
#define VT_CHECK_MINOR_CAP (1ull << 20)
/* vt__check_options.min_bytes: the automatic floor (0), or none at all. */
#define VT_CHECK_MIN_BYTES_AUTO 0ull
#define VT_CHECK_MIN_BYTES_NONE UINT64_MAX

/* Rules (bit flags; vt__check_options.rules, vt__check_finding.rule). */
enum vt__check_rule {
    VT_CHECK_RULE_LINGER = 1u << 0,      /* alive after its last use beyond the grace */
    VT_CHECK_RULE_NEVER_FREED = 1u << 1, /* native: call site accumulating never-freed memory */
    VT_CHECK_RULE_OUTLIER = 1u << 2,     /* native: outlives its call site's siblings */
    VT_CHECK_RULE_PINNED = 1u << 3,      /* small live views pin a dropped base's storage */
    VT_CHECK_RULE_CYCLE = 1u << 4,       /* held by a reference cycle until gc freed it */
    VT_CHECK_RULE_TAPE = 1u << 5,        /* idle through its step's peak (opt-in) */
    VT_CHECK_RULE_GROWTH = 1u << 6,      /* a call site's live bytes grow step over step */
};
#define VT_CHECK_RULES_AUTO 0u    /* LINGER + PINNED if the snapshot has tensors (+ CYCLE
                                     when it recorded a garbage collection, + OUTLIER's
                                     loop look alone where it found a loop's kept
                                     blocks), else the native rules; + GROWTH with
                                     enough marks */
#define VT_CHECK_RULES_ALL 127u

/* How the grace of the LINGER rule is decided. */
enum vt__check_grace_mode {
    VT_CHECK_GRACE_AUTO = 0,  /* steps when there are marks, time otherwise */
    VT_CHECK_GRACE_STEPS = 1, /* exactly grace_steps complete steps */
    VT_CHECK_GRACE_TIME = 2,  /* exactly grace_ns after the last use */
};

typedef struct vt__check_options {
    int grace_mode;            /* enum vt__check_grace_mode */
    uint32_t grace_steps;      /* GRACE_STEPS: complete unused steps allowed (0 ok) */
    uint64_t grace_ns;         /* GRACE_TIME: ns allowed after the last use */
    const char *const *ignore; /* fnmatch(3) patterns; a storage is skipped when one */
    size_t nignore;            /* matches a bound tensor's name or any function of its
                                  allocation or last-use stack */
    unsigned rules;            /* VT_CHECK_RULE_* bits, VT_CHECK_RULES_AUTO = 0 */
    unsigned max_paths;        /* retention paths per finding, 0 = 3 */
    unsigned max_visit;        /* nodes one path search may visit, 0 = 4096 (after
                                  20M visits in all, each search gets 64) */
    double pinned_ratio;       /* PINNED: flagged while live views cover less than this
                                  share of the storage, (0, 1]; 0 = VT_CHECK_PINNED_RATIO */
    int host;                  /* storages in host memory (CPU tensors): VT_CHECK_HOST_* */
    uint64_t min_bytes;        /* causes holding fewer bytes are minor (moved to the
                                  report's `minor`): VT_CHECK_MIN_BYTES_AUTO (0) = the
                                  automatic floor, VT_CHECK_MIN_BYTES_NONE = no floor */
    int keep_records;          /* keep a record of every storage: the model retires those
                                  no rule can flag (vt__check_run_stream); the tests
                                  set it to show that retiring them changes nothing */
} vt__check_options;

/* Whether the tensor rules judge storages in host memory. A GPU memory check
 * is about device memory: in a program that used a device, its CPU tensors
 * (a dataset's index tensors, a DataLoader's batches) are not what the user
 * asked about, and there are many of them. A trace with no device storage at
 * all (a CPU-only program, or tensors made on the host on purpose) is
 * judged on its host storages. */
enum vt__check_host {
    VT_CHECK_HOST_AUTO = 0,    /* only when the trace has no device storage */
    VT_CHECK_HOST_ALWAYS = 1,  /* `check --host` */
};

/* Node kinds of a retention path step. */
enum vt__check_node_kind {
    VT_CHECK_NODE_HOLDER = 1,
    VT_CHECK_NODE_TENSOR = 2,
    VT_CHECK_NODE_STORAGE = 3,
};

/* One node of a retention path. Paths run root first, storage last. */
typedef struct vt__check_step {
    uint8_t kind;              /* enum vt__check_node_kind */
    uint64_t id;               /* holder/tensor id; storage: its address */
    const char *name;          /* holder/tensor name, "" if none; storage: "" */
    const char *label;         /* label of the reference from this node to the next
                                  one ("" if unlabeled, and for the last step) */
    uint64_t base_id;          /* tensor: its base tensor's id if a view, else 0 */
    const char *base_name;     /* tensor: the base's name if a view, else "" */
    uint64_t bytes;            /* storage: bytes (as in the finding), else 0 */
} vt__check_step;

typedef struct vt__check_path {
    vt__check_step *steps;     /* root first, storage last */
    size_t nsteps;
    uint8_t cycle;             /* no root: steps[0] reappears later in the path */
    uint8_t truncated;         /* search bound hit: steps[0] is not a root */
} vt__check_path;

/* PINNED: one live view holding the storage (at the finding's path_seq). */
typedef struct vt__check_view {
    uint64_t id;               /* tensor id */
    const char *name;          /* its name, "" if none */
    uint64_t base_id;          /* its base tensor's id if a view, else 0 */
    const char *base_name;     /* the base's name if known, else "" */
    uint64_t addr;             /* data_ptr */
    uint64_t bytes;            /* TENSOR_NEW nbytes */
    uint64_t covered_bytes;    /* of those, inside the storage */
} vt__check_view;

typedef struct vt__check_finding {
    unsigned rule;             /* the VT_CHECK_RULE_* that fired */
    int grace_mode;            /* LINGER: GRACE_STEPS or GRACE_TIME, as applied */
    int8_t device;             /* CUDA ordinal, -1 host/unknown */
    uint8_t external;          /* a STORAGE_EXTERNAL storage */
    uint8_t before_window;     /* allocated before the first retained event */
    uint8_t freed;             /* 1: freed at free_seq; 0: still alive at the end */

    uint64_t addr;             /* storage address (native groups: the largest one) */
    uint64_t bytes;            /* bytes asked for (req_size; block size if unknown);
                                  native groups: the sum over nallocs */
    uint64_t block_bytes;      /* rounded block size(s); GROWTH: the site's blocks alive at
                                  the last judged end less those at the first (at least
                                  bytes), what its growth keeps from the program */
    uint32_t nallocs;          /* allocations in the finding: 1, or a call site's count */
    uint32_t kept_lines;       /* OUTLIER, a call's allocations kept together
                                  (check_kept_call.c): the lines of Python they were
                                  made at; 0 for a call site's outliers */
    uint32_t kept_steps;       /* the same: marks from the step that made them to the
                                  one that freed them */
    uint32_t loop_visits;      /* OUTLIER, a loop's allocations kept until it ended
                                  (check_loop_kept.c): the runs of its body they were
                                  made over; 0 otherwise */
    uint32_t under_stack;      /* NEVER-FREED and OUTLIER by call site, with marks and no
                                  tensors (check_kept_call.c): the program's call (a stack
                                  node whose frame is the program's) under which this
                                  site's blocks and those of other lines were kept, lines
                                  whose other blocks die within their step: one call's
                                  results kept, one cause; 0: none */
    uint32_t nbefore_window;   /* native call sites: of nallocs, those made before the
                                  window (still alive at the end; the window's decided) */
    uint32_t older_alive;      /* tensor rules, on one finding per allocation stack: more
                                  storages allocated there before the window, still alive,
                                  with no tensor recorded (their records left the ring):
                                  not judged, counted (check_window.c) */
    uint64_t older_alive_bytes;

    uint64_t owner_id;         /* owning tensor id, 0 if none (native) */
    const char *owner_name;    /* its name, "" if none */
    uint64_t owner_bytes;      /* its own bytes (TENSOR_NEW nbytes), 0 if unknown: a
                                  loss of 8 B may hold a 75 KiB storage (mse_loss's
                                  result is a 0-dim tensor on its elementwise buffer) */
    uint32_t ntensors;         /* tensors (owner and views) ever bound to the storage */

    uint64_t alloc_seq;        /* 0 if before the window */
    uint64_t alloc_time_ns;    /* 0 if unknown */
    uint32_t alloc_stack;      /* snapshot stack id, 0 if none */

    uint64_t last_use_seq;     /* LINGER: last NEW/USE of a bound tensor; native: alloc */
    uint64_t last_use_time_ns;
    uint32_t last_use_stack;   /* stack of that use, 0 if none */
    uint8_t last_use_before_window;   /* that use is before the window, when unknown: the
                                  tensor was made there and declared again in it (format
                                  1.11) with no use since (seq/time: the window's start) */
    uint64_t last_use_tensor;  /* id of the tensor used last */
    const char *last_use_name; /* its name */
    uint32_t nuses;            /* uses (including creations) of the storage */
    uint32_t last_use_step;    /* step index of the last use (0 before the first mark) */
    const char *last_use_mark; /* label of the mark that began that step, as the program
                                  wrote it ("" before the first mark) */
    uint32_t usual_gap_steps;  /* upper median gap between distinct use steps, 0 if
                                  used in one step only (steps mode) */
    uint32_t sampled_grace_steps;  /* LINGER and GROWTH, steps mode: its call site's
                                  storages are revisited at random (drawn from: a replay
                                  buffer), and this is the grace LINGER gives them (set on
                                  a LINGER finding only where it outgrew its usual gap);
                                  0 if not */
    double sampled_mean_gap;   /* the site's mean gap between draws lately, in steps */
    uint64_t usual_gap_ns;     /* median time gap between uses, 0 if < 2 uses */
    uint32_t steps_unused;     /* complete steps alive and unused after the last use's step */

    uint64_t linger_from_seq;  /* when it became a finding (the mark / the time) */
    uint64_t linger_from_time_ns;
    uint64_t free_seq;         /* FREE_REQUESTED / EXTERNAL_FREE seq, 0 if still alive */
    uint64_t free_time_ns;
    uint32_t free_stack;       /* stack of the free, 0 if none */
    uint64_t linger_ns;        /* free (or end) minus the start of lingering */
    uint64_t paused_ns;        /* of linger_ns, the time vramtrace's tracker paused the
                                  program (PAUSE events: holder walks), which the time
                                  rules do not count as the program's (linger, cycle,
                                  pinned) */
    double byte_seconds;       /* bytes x linger_ns / 1e9: the ranking key */

    uint64_t path_seq;         /* graph state the paths show: linger_from_seq, or
                                  UINT64_MAX = at the end of the trace */
    uint8_t paths_before_free; /* LINGER: none named a holder at linger_from_seq; the
                                  paths are at path_seq, the last moment a tensor of
                                  the freed storage lived */
    vt__check_path *paths;     /* shortest first, up to max_paths */
    size_t npaths;

    /* PINNED only (0 / empty otherwise), and a LINGER finding's small kept
     * part (vt__ck_linger_pinning: owner_drop_*, wasted/covered bytes,
     * nviews_live, views; its owner dropped, what it keeps covers less than
     * pinned_ratio of the storage). The last_use_* fields above are the
     * storage's last use over the whole trace, for information. */
    uint64_t wasted_bytes;     /* bytes - covered_bytes, at path_seq */
    uint64_t covered_bytes;    /* union of the live views' extents in the storage */
    uint64_t owner_drop_seq;   /* TENSOR_DROP of the owner */
    uint64_t owner_drop_time_ns;
    uint64_t pinned_since_seq; /* start of the pinned interval (the owner's drop, or the
                                  drop that brought the coverage under the ratio) */
    uint64_t pinned_since_time_ns;
    uint64_t pinned_until_seq; /* its end (linger_from marks when it became a finding):
                                  the event that ended it, or UINT64_MAX = still
                                  pinned at the end of the trace */
    uint64_t pinned_until_time_ns;
    uint8_t pinned_cut;        /* 1: interval cut at the last use (LINGER took over) */
    uint32_t nviews_live;      /* live views at path_seq */
    /* CYCLE only (0 otherwise): the collection that freed it. */
    uint64_t gc_seq;           /* the REF of the collection to its last tensor */
    uint64_t gc_time_ns;
    /* TAPE only (0 otherwise): the step it was retained in. */
    uint64_t step_ns;          /* the step's length (mark to mark) */
    uint64_t step_peak_bytes;  /* live bytes at the step's peak (linger_from_seq) */
    uint32_t step_idle_pct;    /* share of the step's tensor uses after its last use */
    vt__check_view *views;      /* the largest of them, up to VT_CHECK_MAX_VIEWS */
    size_t nviews;
    /* GROWTH only (0 otherwise): the site's live bytes at the judged marks. */
    uint64_t growth_per_step;  /* robust slope, bytes per step (vt__check_growth) */
    uint32_t growth_first_mark; /* first judged mark (0-based index of the MARK) */
    uint32_t growth_last_mark; /* last judged mark */
    uint64_t growth_first_bytes; /* live bytes of the site at the first judged mark */
    uint64_t growth_last_bytes;  /* at the last one */
    uint64_t growth_window_ns; /* by time (a trace without marks): the windows' length,
                                  the marks above being window ends; 0: by marks */
} vt__check_finding;

typedef struct vt__check_report {
    vt__check_finding *findings; /* ranked: byte_seconds, then bytes, then addr */
    size_t nfindings;
    unsigned rules_run;        /* VT_CHECK_RULE_* bits actually evaluated */
    unsigned rules_need_steps; /* automatic rules not run: they need steps (MARK
                                  events) and the trace has none (never-freed,
                                  outlier, growth) */
    unsigned rules_on_time;    /* of those, what --rules runs on time instead
                                  (never-freed, outlier; growth runs on time
                                  where it can, automatically) */
    int grace_mode;            /* GRACE_STEPS or GRACE_TIME as applied to LINGER */
    uint8_t grace_user;        /* the grace came from the options (not automatic) */
    uint32_t grace_steps;      /* user's grace (GRACE_STEPS from options), else 0 */
    uint64_t grace_ns;         /* user's grace (GRACE_TIME from options), else 0 */
    size_t nmarks;             /* MARK events: nmarks + 1 steps */
    uint8_t steps_inferred;    /* the program marked no step: the marks are the steps
                                  its backward passes tell (trace/snap/timeline_steps.c) */
    size_t quiet_steps;        /* NEVER-FREED: whole steps of the usual length in the
                                  run's time after its last mark (check_clock.c) */
    uint64_t quiet_from_ns;    /* where they begin: the last mark's time */
    size_t nstorages;          /* storages in the model (all kinds) */
    size_t ntensors, nholders, nrefs; /* annotation counts */
    size_t nignored;           /* storages skipped by --ignore patterns */
    size_t nhost_skipped;      /* host storages not judged (VT_CHECK_HOST_AUTO in a
                                  trace with device storages) */
    size_t ngrowth_replaced;   /* call sites that grew by marks only as their value was
                                  replaced by larger ones made afresh (inputs that grow:
                                  a length curriculum), not judged growth (check_growth.c) */
    uint64_t start_time_ns;    /* first event */
    uint64_t end_time_ns;      /* end of the trace (see the time rule) */
    double pinned_ratio;       /* PINNED threshold as applied */
    uint64_t total_bytes;      /* sum of findings' bytes (PINNED: wasted_bytes) */
    uint64_t total_held_bytes; /* the same with each storage's block where larger than its
                                  bytes (vt__check_held_bytes): what they keep from the program */
    double total_byte_seconds; /* sum of findings' byte_seconds */
    /* The findings of causes under the floor, ranked as `findings` are; not
     * in `findings`, nfindings or the totals above. */
    vt__check_finding *minor;
    size_t nminor;
    uint64_t minor_bytes;      /* sum of their bytes (PINNED: wasted_bytes) */
    uint64_t minor_held_bytes; /* the same with blocks, as total_held_bytes */
    uint64_t min_bytes;        /* the floor applied, 0: none */
    uint8_t min_bytes_auto;    /* it is the automatic floor */
    uint64_t peak_bytes;       /* peak live bytes of the storages (device ones when the
                                  trace has any): what the automatic floor is a share of */
} vt__check_report;

/* The verdict on a series of bytes alive at consecutive step ends (marks). */
typedef struct vt__check_growth {
    uint32_t first, last;      /* the judged step ends: v[first..last]; the ones before
                                  first are the warm-up */
    uint64_t first_bytes, last_bytes; /* v[first], v[last] */
    int64_t per_step;          /* Theil-Sen slope over the judged ends, bytes per step */
    uint8_t judged;            /* enough ends to judge (VT_CHECK_GROWTH_MIN_STEPS) */
    uint8_t grows;             /* the rule below says it grows */
} vt__check_growth;

/*! vt__check_growth_fit() :
 * Judge the series v[0..n) (bytes alive at each step end, in step order):
 * the first max(1, n/4) ends are the warm-up (caches fill, optimizer state
 * is made at the first step, an allocator's pools warm up) and are not
 * judged. Over the rest (at least VT_CHECK_GROWTH_MIN_STEPS, else judged =
 * 0): per_step is the Theil-Sen slope (the median of the slopes between
 * every two ends; over at most 256 ends, evenly spaced), robust to a few
 * odd steps. It grows when per_step > 0 and its floor rises: the least
 * bytes of each third of the judged ends is more than the third's before
 * it, and the last third's floor is above the first's by more than half
 * of any third's spread (its highest end less its least). A leak's floor rises; a
 * one-time jump lifts one third only, a warm-up longer than the skipped
 * ends the first only, and a cache emptied in cycles comes back to the same
 * floor in every third, or, sampled at random phases of its cycle, spreads
 * over more in a third than its floors rise.
 * @return 0, or -ENOMEM (out zeroed). */
int vt__check_growth_fit(const uint64_t *v, size_t n, vt__check_growth *out);

/*! vt__check_options_init() :
 * Fill `opt` with the defaults: automatic grace and rules, no ignore
 * patterns, 3 paths, 4096 visited nodes per search. */
void vt__check_options_init(vt__check_options *opt);

/*! vt__check_parse_grace() :
 * Parse a `--grace` argument into `opt`: "N" or "Nsteps"/"Nstep" (complete
 * steps, integer >= 0), or a duration "2.5s", "300ms", "50us", "10ns",
 * "1m" (minutes). "auto" restores the default.
 * @return 0, or -EINVAL (opt unchanged). */
int vt__check_parse_grace(const char *text, vt__check_options *opt);

/*! vt__check_parse_rules() :
 * Parse a comma-separated list of rule names ("linger", "never-freed",
 * "outlier", "pinned", "cycle", "tape", "growth", "all", "auto") into VT_CHECK_RULE_* bits.
 * @return 0 and *rules, or -EINVAL. */
int vt__check_parse_rules(const char *text, unsigned *rules);

/*! vt__check_parse_pinned_ratio() :
 * Parse a `--pinned-ratio` argument: a share "0.25" or a percentage "25%",
 * greater than 0 and at most 1 (100%).
 * @return 0 and *ratio, or -EINVAL (*ratio unchanged). */
int vt__check_parse_pinned_ratio(const char *text, double *ratio);

/*! vt__check_run() :
 * Check snapshot `s` with `opt` (NULL = defaults).
 * @return 0 and *out (free with vt__check_report_free; it borrows strings and
 *         stack ids from `s`), or a negative errno (-ENOMEM, -EINVAL) with a
 *         one-line message in err. A malformed event stream never fails: it
 *         is reconciled by trace/snap/timeline.h's rules. */
int vt__check_run(const vt__snapshot_data *s, const vt__check_options *opt,
                  vt__check_report **out, char *err, size_t errlen);

/*! vt__check_run_stream() :
 * vt__check_run on a snapshot whose events are read as a stream: s holds
 * every section but the events, es reads them (vt__snapshot_open gives
 * both; vt__event_stream_of makes one of a whole snapshot, which is what
 * vt__check_run does). The same report, in memory that follows what is
 * alive at once: the events are read two or three times (the timeline's
 * fates at the end, then the model; a third time only when a rule judges
 * by time, without marks or with `--grace S`, which then keeps every
 * event's time and seq, a few bytes each), and the model keeps no record of
 * a storage that no rule can flag: one that no tensor was bound to, freed
 * before the next mark (the native rules keep their call site's counts of
 * those; when OUTLIER runs, their lifetimes, 16 bytes each). TAPE, and
 * OUTLIER on a trace without marks, judge every storage: then all are kept.
 * @return 0 and *out, or a negative errno with a one-line message in err
 *         (a damaged file: the stream's own message, when it shares err). */
int vt__check_run_stream(const vt__snapshot_data *s, struct vt__event_stream *es,
                         const vt__check_options *opt, vt__check_report **out, char *err,
                         size_t errlen);

/*! vt__check_report_free() : release a report. NULL is fine. */
void vt__check_report_free(vt__check_report *r);

/*! vt__check_held_bytes() :
 * What a finding keeps from the program: its block(s) where larger than the
 * bytes asked for (a 4-byte loss holds a 512-byte block of PyTorch's cache;
 * a growth's, the blocks it grew by), else its bytes. What the floor of
 * minor findings weighs, summed by cause. */
uint64_t vt__check_held_bytes(const vt__check_finding *f);

/*! vt__check_blocks_worth_saying() :
 * Whether blocks holding `held` are worth a word after `bytes` (the report's
 * and the page's " in X of blocks"): where they hold a quarter more. Small
 * tensors each take a block of 512 bytes at least; a larger tensor's block
 * rounds it up by less, which is not worth a word on every cause. */
int vt__check_blocks_worth_saying(uint64_t bytes, uint64_t held);

/*! vt__check_owner_bytes_worth_saying() :
 * Whether the owner's own bytes are worth a word beside its storage's (the
 * report's and the page's "itself 8 B of the storage's 75.02 KiB"): where
 * it is known and at most half the storage. A tensor much smaller than
 * what it keeps (PyTorch's mse_loss returns its 0-dim result on the
 * elementwise buffer) otherwise reads as a mistake. */
int vt__check_owner_bytes_worth_saying(const vt__check_finding *f);

/*! vt__check_rule_name() :
 * @return "linger", "never-freed", "outlier", "pinned", "cycle", "tape", "growth", or "?"; static
 * storage. */
const char *vt__check_rule_name(unsigned rule);

/*! vt__check_path_format() :
 * Render a path on one line, snprintf-style, e.g.
 *   Context.output_tensors → list[1] → tensor 'z' (view of 'fc2 out') → storage 0x7f0000 64 MiB
 * Holders print as their name (or "holder #ID") immediately followed by the
 * label of the reference to the next node (a label starting with a letter or
 * '_' gets a '.' first: "saved" -> ".saved"; "[1]", "['acts']", ".x" are
 * appended as they are); tensors as `tensor 'NAME'` (or "tensor #ID"), plus
 * " (view of 'BASE')" for a view, plus the label of their own outgoing
 * reference if any (".grad_fn"); the storage as "storage 0xADDR" and its
 * size. A cycle path is prefixed "(cycle) " and a truncated one "… ".
 * Arrows are UTF-8 " → ".
 * @return the length the full text needs (excluding the NUL), like snprintf. */
size_t vt__check_path_format(const vt__check_path *p, char *buf, size_t len);

/*! vt__check_path_format_folded() :
 * The same, for people: a run of the same hop (a holder of one name through
 * one label, e.g. a chain of AddBackward0 nodes a running total kept, one
 * per step) is shown once with its count, "AddBackward0.next_functions[0] ×12",
 * and so is a repeating cycle of up to 8 hops (a recurrent cell's nodes, once
 * per time step of a graph kept across batches), "(A.x → B.y → C.z) ×390".
 * The report's text and the HTML page show paths so; keys and JSON whole. */
size_t vt__check_path_format_folded(const vt__check_path *p, char *buf, size_t len);

/*! vt__check_paths_name_no_holder() :
 * Whether every path of finding `x` is its tensor's own hop to the storage
 * (0 where it has none): the holder walks reached nothing that refers to
 * the tensor (it is held from C++, or was freed before a walk got to its
 * holder). */
int vt__check_paths_name_no_holder(const vt__check_finding *x);

/*! vt__check_paths_when() :
 * When finding `x`'s holder chains were seen, as the report and the HTML
 * page say it: "at the end", "when it became a finding", and each rule's
 * own moment (a cycle's collection, a tape's peak, growth's last judged
 * step or window). */
const char *vt__check_paths_when(const vt__check_finding *x);

/*! vt__check_finding_holder() :
 * What holds finding `x`, as the report's list of causes shows it: its first
 * path with indices and ids blanked ("module __main__.kept → list[*] →
 * tensor 'x'"), ops dropped from tensor names, chains of autograd nodes
 * collapsed; "" when no holder was recorded.
 * @return the text's length (cut to fit buf[len]). */
size_t vt__check_finding_holder(const vt__check_finding *x, char *buf, size_t len);

/*! vt__check_report_print() :
 * The human-readable report: a summary line; when findings repeat, their
 * causes (findings grouped by rule, owner name and first path, with counts
 * and bytes; see "groups" below); then up to `max_findings`
 * findings (0 = all), each with its storage, owner, allocation stack, last
 * use and its stack, free or "still alive", lingering and bytes x time, and
 * its retention paths; a PINNED finding also names the views keeping it,
 *   kept by: tensor 'x' (view of 'big', 40 B of 4 KiB)
 * and its wasted bytes. Stacks are symbolized from `s`.
 * @return 0, or -EIO if writing failed. */
int vt__check_report_print(FILE *f, const vt__check_report *r, const vt__snapshot_data *s,
                           size_t max_findings);

/*! vt__check_report_groups() :
 * The findings by cause, as the printed report and "groups" below list them
 * (rule, owner name, first path with its indices and ids blanked; largest
 * bytes first): group_of[i] is the group of finding i (0 the largest), for
 * each of r->nfindings. Views that list findings use it to show one entry
 * per cause, as `vramtrace check` does. `s` is the snapshot r was made from
 * (its stacks: a finding no tensor names groups by the line of the
 * program's own code it was allocated under), or NULL.
 * @return the number of groups, or -ENOMEM. */
long vt__check_report_groups(const vt__check_report *r, const vt__snapshot_data *s,
                             uint32_t *group_of);

/*! vt__check_report_write_json() :
 * The whole report as one JSON object (UTF-8, valid JSON, ends with "\n").
 * Schema, stable (fields are only ever added):
 * {
 *   "vramtrace_check": 1,                       schema version
 *   "rules_run": ["linger", ...],
 *   "rules_need_steps": ["never-freed", ...],  (automatic rules not run: no marks)      ("linger", "never-freed", "outlier", "pinned",
 *                                        "cycle", "tape", "growth")
 *   "grace": {"mode": "steps"|"time", "steps": N|null, "seconds": S|null},
 *             (N / S are set when the user gave them, null = the automatic rule)
 *   "pinned_ratio": X,                          PINNED threshold as applied
 *   "marks": N, "storages": N, "tensors": N, "holders": N, "refs": N,
 *   "ignored": N,
 *   "host_skipped": N,                 (host storages not judged: vt__check_host)
 *   "start_time_ns": N, "end_time_ns": N,
 *   "total_bytes": N, "total_held_bytes": N, "total_byte_seconds": X,
 *                                  (held: each storage's block where larger than its bytes)
 *   "findings": [                               ranked, largest bytes x time first
 *     {
 *       "rule": "linger"|"never-freed"|"outlier"|"pinned"|"cycle"|"tape"|"growth",
 *       "addr": "0x...",  (hex string: 64-bit addresses exceed JSON doubles)
 *       "device": N, "external": bool, "before_window": bool,
 *       "bytes": N, "block_bytes": N, "allocations": N,
 *       "owner": {"id": N, "name": "..."} | null, "tensors": N,
 *       "alloc": {"seq": N, "time_ns": N, "stack": STACK},
 *       "last_use": {"seq": N, "time_ns": N, "step": N, "tensor": N,
 *                    "name": "...", "mark": "label of the mark that began that step",
 *                    "stack": STACK,
 *                    "before_window": bool} ,   (true: the tensor was made before the
 *                                  window and declared again in it, format 1.11,
 *                                  with no use in the window: its last use is
 *                                  unknown, before the window; seq/time/step
 *                                  are the window's start, stack empty)
 *       "uses": N, "usual_gap_steps": N, "usual_gap_ns": N,
 *       "drawn": {"mean_gap_steps": X, "grace_steps": N} | null,  (linger, steps:
 *                                  its line's tensors drawn from at random, and the
 *                                  grace that gave it: check_sampled.c)
 *       "steps_unused": N,
 *       "lingering_from": {"seq": N, "time_ns": N},
 *       "freed": {"seq": N, "time_ns": N, "stack": STACK} | null,  (null: still alive)
 *       "linger_ns": N, "paused_ns": N, "byte_seconds": X,  (paused_ns: of
 *                                  linger_ns, vramtrace's own pauses)
 *       "wasted_bytes": N,                      (0 unless "pinned", or "linger"
 *                                                with a "kept_part")
 *       "collected_by_gc": {"seq": N, "time_ns": N} | null,  (set for "cycle" only:
 *                                                the collection that freed it)
 *       "step": {"ns": N, "peak_bytes": N, "idle_pct": N} | null,  (set for
 *                                  "tape" only: the step it was retained in, and
 *                                  the share of its events after the last use)
 *       "growth": {"per_step": N, "first_mark": N, "last_mark": N,
 *                  "first_bytes": N, "last_bytes": N,
 *                  "window_ns": N (by time only)} | null,  (set for "growth"
 *                                  only: marks are 0-based indices of the MARKs;
 *                                  by time, of the windows, per_step per window)
 *       "pinned": null | {                      (set for "pinned" only)
 *           "owner_dropped": {"seq": N, "time_ns": N},
 *           "since": {"seq": N, "time_ns": N},  (start of the pinned interval)
 *           "until": {"seq": N, "time_ns": N} | "end",
 *           "cut_at_last_use": bool,   (the rest is the "linger" finding's)
 *           "covered_bytes": N, "wasted_bytes": N, "views_live": N,
 *           "views": [ {"id": N, "name": "...",
 *                       "view_of": {"id": N, "name": "..."} | null,
 *                       "addr": "0x...", "bytes": N, "covered_bytes": N} ] },
 *       "kept_part": null | {                   ("linger" only: its owner dropped, the
 *                                                tensors kept on it cover less than
 *                                                pinned_ratio of it, at paths_at)
 *           "owner_dropped": {"seq": N, "time_ns": N},
 *           "covered_bytes": N, "wasted_bytes": N, "views_live": N,
 *           "views": [ as "pinned" ] },
 *       "paths_at": "end" | N (seq),
 *       "paths": [ {"text": "...", "cycle": bool, "truncated": bool,
 *                   "steps": [ {"kind": "holder"|"tensor"|"storage",
 *                               "id": N (storage: "0x..." address),
 *                               "name": "...", "label": "...",
 *                               "view_of": {"id": N, "name": "..."} (views only),
 *                               "bytes": N (storage only)} ] } ]
 *     } ],
 *   "min_bytes": N, "peak_bytes": N,  the floor of minor causes applied (0: none), and
 *                                     the peak it is a share of (auto)
 *   "minor_bytes": N, "minor_held_bytes": N,   (held: as total_held_bytes)
 *   "minor": [ FINDING... ],          the findings of causes under the floor, as above
 *   "groups": [                                 the findings by cause, largest bytes first
 *     {"rule": "...", "count": N, "bytes": N,
 *      "first": N,                  (index into "findings" of its first finding)
 *      "owner": "...",              (the owner tensor's name: the line that made it)
 *      "path": "..."} ]             (its first path, list indices and ids as "*",
 *                                    without the storage; "" when none was recorded)
 * }
 * STACK = [ {"function": "...", "file": "...", "line": N, "module": "...",
 *            "ip": "0x..."} ... ], innermost frame first ([] if none).
 * Integers are written exactly (no exponent); N < 2^63 except ids and
 * seqs, which are exact uint64 decimals.
 * @return 0, or -EIO if writing failed. */
int vt__check_report_write_json(FILE *f, const vt__check_report *r, const vt__snapshot_data *s);

/* A storage vramtrace did not allocate (STORAGE_EXTERNAL: a CPU tensor's,
 * another allocator's), as the checker's model sees it. */
typedef struct vt__check_storage {
    uint64_t addr;
    uint64_t bytes;            /* as in a finding about it */
    int8_t device;             /* as declared: -1 host (CPU), else an ordinal */
    uint8_t freed;             /* 1: freed at free_seq; 0: alive at the end */
    uint32_t alloc_event;      /* index of its STORAGE_EXTERNAL event in s->events */
    uint64_t alloc_seq, alloc_time_ns;
    uint32_t alloc_stack;      /* snapshot stack id, 0 if none */
    uint64_t free_seq, free_time_ns;   /* 0 while alive at the end */
    uint32_t free_stack;
    uint64_t owner_id;         /* owning tensor (check.h's rule), 0 if none */
    uint32_t owner_name;       /* its latest name: snapshot string index, 0 if none */
    uint32_t ntensors;         /* tensors ever bound to it */
    uint32_t nuses;            /* uses, creations included */
    uint64_t last_use_seq, last_use_time_ns;   /* 0 if never used */
    uint32_t last_use_stack;
    uint8_t last_use_before_window;   /* as vt__check_finding's */
} vt__check_storage;

/*! vt__check_list_external() :
 * The external storages of snapshot `s`, in the order of their
 * STORAGE_EXTERNAL events, with the lifetime, owner and last use the
 * checker's model gives them (the same a finding about one states).
 * @return 0 and *out (free() it; NULL when there are none) with *n entries,
 *         or -ENOMEM with a one-line message in err. */
int vt__check_list_external(const vt__snapshot_data *s, vt__check_storage **out, size_t *n,
                            char *err, size_t errlen);
/* The same from a stream of the events (vt__check_run_stream's), of which
 * nx are STORAGE_EXTERNAL (the timeline's kind_counts say how many; 0:
 * none listed, the events not read). */
int vt__check_list_external_stream(const vt__snapshot_data *s, struct vt__event_stream *es,
                                   size_t nx, vt__check_storage **out, size_t *n, char *err,
                                   size_t errlen);

#endif /* VT_TRACE_CHECK_H */
