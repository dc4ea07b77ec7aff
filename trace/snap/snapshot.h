/*
 * trace/snap/snapshot.h - the in-memory model of one snapshot.
 *
 * This is the contract between the parts: the recorder fills a vt__snapshot_data
 * from the live process, the file writer encodes it (snapfile_write.c), the
 * reader decodes a file back into the very same struct (snapfile_read.c), and
 * every view (summary, leaks, json, check, viz) reads only this struct.
 * Nothing here depends on the allocator.
 *
 * Ownership: a vt__snapshot_data returned by the reader owns all its arrays; free it
 * with vt__snapshot_free(). Strings are indexes into `strings` (0 = none, the
 * empty string). Stack ids are indexes into `stack_nodes` (0 = no stack).
 */
#ifndef VT_TRACE_SNAPSHOT_H
#define VT_TRACE_SNAPSHOT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vramtrace/format.h"

/* One recorded event. The meaning of addr/size/aux/aux2/str per kind is
 * documented next to enum vt_event_kind in vramtrace/format.h. */
typedef struct vt__event {
    uint64_t seq;          /* global sequence number, strictly increasing */
    uint64_t time_ns;      /* CLOCK_MONOTONIC ns; see vt__snapshot_meta.clock_base_* */
    uint64_t stream;       /* cudaStream_t value (0 = legacy default or unknown) */
    uint64_t addr;         /* device address (or data_ptr for tensors) */
    uint64_t req_size;     /* bytes the caller asked for */
    uint64_t size;         /* bytes after rounding (block size) */
    uint64_t aux;          /* kind-specific, see format.h */
    uint64_t aux2;         /* kind-specific, see format.h */
    uint32_t thread;       /* small thread number, 1.. in order of first event */
    uint32_t stack;        /* stack id (index into stack_nodes), 0 = none */
    uint32_t str;          /* string index (mark label, tensor name...) */
    uint8_t kind;          /* enum vt_event_kind */
    int8_t device;         /* CUDA device ordinal, -1 for host/unknown */
} vt__event;

/* A stack is a path in a prefix tree of instruction pointers: node 0 is the
 * root (no frame); every other node is one frame whose `parent` is its caller.
 * A stack id names the node of the innermost frame; walking parents goes
 * outward to main. Shared prefixes (the outer callers) are stored once. */
typedef struct vt__stack_node {
    uint32_t parent;       /* caller's node, 0 = root */
    uint32_t frame;        /* index into frames */
} vt__stack_node;

/* One unique instruction pointer, symbolized at export. */
typedef struct vt__frame {
    uint64_t ip;           /* absolute address in the recorded process */
    uint64_t module_offset;/* ip relative to the module's load base */
    uint32_t module;       /* string: module path */
    uint32_t build_id;     /* string: GNU build id in hex, 0 if none */
    uint32_t function;     /* string: symbol name, 0 if unknown */
    uint32_t file;         /* string: source file, 0 if no debug info */
    uint32_t line;         /* source line, 0 if unknown */
    uint32_t first_line;   /* Python: line where the function is defined
                            * (co_firstlineno), 0 if unknown (format 1.4) */
    uint32_t flags;        /* VT_FRAME_* (format 1.8): what the recording
                            * machine knew of it, e.g. installed code */
} vt__frame;

/* A block of a segment in the allocator's state at snapshot time. */
typedef struct vt__snap_block {
    uint64_t addr;
    uint64_t size;         /* block size */
    uint64_t req_size;     /* requested size, 0 when inactive */
    uint64_t stream;       /* stream the block belongs to */
    uint64_t alloc_seq;    /* seq of its ALLOC event, 0 if before the window/unknown */
    uint32_t stack;        /* allocation stack, 0 if none */
    uint8_t state;         /* enum vt_block_state */
} vt__snap_block;

/* A backend allocation, tiled exactly by its blocks. */
typedef struct vt__snap_segment {
    uint64_t addr;
    uint64_t size;
    uint64_t stream;       /* stream the segment was allocated for */
    uint32_t first_block;  /* index into blocks */
    uint32_t nblocks;
    int8_t device;
    uint8_t pool;          /* enum vt_pool */
    uint64_t private_pool; /* the private pool it serves (a CUDA graph's; section
                              SEGMENT_POOLS, format 1.14), 0: its default pool */
} vt__snap_segment;

/* Per-device facts. */
typedef struct vt__snap_device {
    int32_t ordinal;
    uint32_t name;         /* string */
    uint64_t total_bytes;  /* device memory */
    /* The allocator's own peaks (vt_get_stats: since the start or the last
     * vt_reset_peak_stats), whatever the event window kept; valid when
     * meta.flags has VT_META_DEVICE_PEAKS (format 1.2). */
    uint64_t peak_allocated;   /* handed out to the program */
    uint64_t peak_reserved;    /* held from the device */
    uint64_t peak_active;      /* handed out or freed and waiting for stream events */
} vt__snap_device;

typedef struct vt__snapshot_meta {
    uint32_t format_version;   /* of the file it was read from (writer: current) */
    int32_t pid;
    int32_t rank;              /* RANK / OMPI_COMM_WORLD_RANK, -1 if unset */
    uint32_t host;             /* string */
    uint32_t command_line;     /* string: argv joined by spaces */
    uint32_t config;           /* string: effective VRAMTRACE_CONF, normalized */
    uint32_t library_version;  /* string */
    uint64_t clock_base_monotonic_ns; /* a CLOCK_MONOTONIC reading ... */
    uint64_t clock_base_realtime_ns;  /* ... and CLOCK_REALTIME at the same moment */
    uint64_t snapshot_time_ns; /* CLOCK_MONOTONIC when the snapshot was taken */
    uint64_t events_recorded;  /* total events ever recorded */
    uint64_t events_overwritten; /* lost to ring overflow (oldest first) */
    uint64_t stacks_dropped;   /* captures not interned whole (table full) */
    uint64_t stacks_truncated; /* events in the file whose stack is truncated
                                * (table full): format 1.2, 0 in older files */
    uint32_t flags;            /* VT_META_* (format 1.2) */
    uint32_t framework_settings; /* string: the observed framework allocator's
                                  * settings in its syntax (VT_META_FRAMEWORK_SETTINGS,
                                  * format 1.7), 0 if none */
} vt__snapshot_meta;

typedef struct vt__snapshot_data {
    vt__snapshot_meta meta;

    vt__snap_device *devices;   size_t ndevices;
    vt__snap_segment *segments;      size_t nsegments;
    vt__snap_block *blocks;          size_t nblocks;
    vt__event *events;          size_t nevents;     /* in seq order */
    vt__stack_node *stack_nodes; size_t nstack_nodes; /* [0] is the root */
    vt__frame *frames;          size_t nframes;

    /* String table: string i is strings_blob + string_offsets[i], NUL-terminated.
     * String 0 is always "". */
    char *strings_blob;        size_t strings_blob_size;
    uint32_t *string_offsets;  size_t nstrings;
} vt__snapshot_data;

/* Accessors that never fail: an out-of-range index yields "" / NULL. */
const char *vt__snapshot_string(const vt__snapshot_data *s, uint32_t index);

/* What a view must say about a framework allocator (PyTorch's) in this
 * snapshot (VT_META_POOL_*): one sentence, or NULL when there is nothing to
 * say. Every view that reports allocations prints it the same way. */
const char *vt__snapshot_pool_note(const vt__snapshot_data *s);

/* Whether OOM event e is a library's own request that vramtrace's cache
 * served outside an observed framework allocator's (cuBLAS making a
 * handle next to PyTorch's cache: format 1.13's VT_OOM_FRAMEWORK absent),
 * which the framework's free cached memory could not serve. */
bool vt__snapshot_oom_outside_framework(const vt__snapshot_data *s, const vt__event *e);

/* Frames of stack `id`, innermost first. Writes up to `max` frame pointers
 * to `out` and returns how many the stack has (may exceed max). */
size_t vt__snapshot_stack_frames(const vt__snapshot_data *s, uint32_t id,
                                 const vt__frame **out, size_t max);

/* The innermost frame of the program's own code in stack `id`
 * (vt__frame_is_user_code: the line every view leads with); NULL when the
 * stack has none (a native program, a stack all library). */
const vt__frame *vt__snapshot_user_frame(const vt__snapshot_data *s, uint32_t id);
/* The same frame's node in the stack tree (what it and its callers are: a
 * call of the program, shared by every stack made under it); 0: none. */
uint32_t vt__snapshot_user_node(const vt__snapshot_data *s, uint32_t id);
/* Whether stack node `node`'s frame is the program's own code
 * (vt__frame_is_user_code), asked once per frame where memo is given (the
 * snapshot's nframes bytes, zeroed; NULL: asked each time). */
bool vt__snapshot_node_is_user(const vt__snapshot_data *s, uint32_t node, uint8_t *memo);

/* The line stack `id` allocated at, as a key (its file's string << 32 |
 * its line): its innermost Python frame's, the program's or a library's
 * (a model of torch's modules allocates at their lines); 0: none. */
uint64_t vt__snapshot_python_line(const vt__snapshot_data *s, uint32_t id);

/* Whether stack `id` ran in a backward pass: one of its native frames is
 * PyTorch's autograd engine (torch::autograd::Engine::thread_main,
 * evaluate_function: the engine's device threads run every CUDA backward op,
 * the calling thread a CPU one). memo: the snapshot's nstack_nodes bytes,
 * zeroed, each node's answer kept as stacks are asked (a node is walked
 * once); NULL: walked each time. */
bool vt__snapshot_stack_in_backward(const vt__snapshot_data *s, uint32_t id, uint8_t *memo);

/* Which call stack `id` is, by its Python frames alone (a hash of them,
 * outermost first; the innermost VT_SNAPSHOT_PYTHON_PATH_MAX): the recorder
 * keeps a stack's innermost native frames, so one call of the program has
 * nodes of its own under each depth of native frames cut off outside it;
 * its Python frames are the same. */
#define VT_SNAPSHOT_PYTHON_PATH_MAX 512
uint64_t vt__snapshot_python_path(const vt__snapshot_data *s, uint32_t id);

/* Where frame f runs: its source file, or else its module ("" when neither
 * is known). */
const char *vt__frame_file(const vt__snapshot_data *s, const vt__frame *f);

/* The line where frame f's function is defined, as the views show it
 * beside f's own line ("def at line 80"): f->first_line, or 0 when unknown
 * or when f runs a module's top-level code ("<module>", always line 1). */
uint32_t vt__frame_def_line(const vt__snapshot_data *s, const vt__frame *f);

/* A Python frame of the program's own code: not a library's (site-packages,
 * dist-packages, or installed elsewhere as the recorder found:
 * VT_FRAME_INSTALLED), not the standard library's or the interpreter's own
 * (<frozen ...>, <string> is the program's), not vramtrace's. Views lead
 * with the innermost such frame: the line the user wrote. */
bool vt__frame_is_user_code(const vt__snapshot_data *s, const vt__frame *f);

/* A Python frame of a library the program called that is not torch's own
 * (vt__source_is_torchs) nor the standard library's: an installed package's
 * (site-packages, dist-packages, VT_FRAME_INSTALLED), not vramtrace's. A
 * framework that runs the program's training (Hugging Face's Trainer,
 * Lightning, accelerate) allocates at such lines under one line of the
 * program. */
bool vt__frame_is_library_code(const vt__snapshot_data *s, const vt__frame *f);

/* The innermost line of a library (vt__frame_is_library_code) between
 * stack `id`'s allocation and its innermost line of the program: what a
 * framework did under the line that called it (`trainer.evaluate()` ->
 * transformers' torch_pad_and_concatenate). NULL where the program's line
 * calls torch directly, or the stack has no line of the program. */
const vt__frame *vt__snapshot_library_frame(const vt__snapshot_data *s, uint32_t id);

/* A Python frame (the recorder's, or a PyTorch snapshot's): no instruction
 * pointer, module "python". */
bool vt__frame_is_python(const vt__snapshot_data *s, const vt__frame *f);

/* Whether the views fold frame f away as plumbing between the program and
 * the memory (frame_fold.c, the one rule: the text reports ask it, the page
 * gets it as a mark per frame). */
enum vt__frame_fold {
    VT_FOLD_NEVER = 0,         /* shown */
    VT_FOLD_WITH_PYTHON = 1,   /* folded in a stack with Python frames: torch's Python
                                  dispatch layers, the interpreter's own native frames */
    VT_FOLD_ALWAYS = 2,        /* a recorder's own frames (PyTorch's unwinder, its allocator) */
};
enum vt__frame_fold vt__frame_fold(const vt__snapshot_data *s, const vt__frame *f);

/* Whether native frame f is a library making memory it keeps for itself and
 * reuses: cuBLAS/cuBLASLt and cuDNN handles and workspaces (PyTorch's
 * at::cuda::getCurrentCUDABlasHandle, getNewWorkspace, getCUDABlasLtWorkspace,
 * setWorkspaceForHandle), NCCL's communicators; by its function's name
 * (frame_fold.c: the text views ask it, the page gets a mark per frame). A
 * block so made under a line of the program is that library's, not the
 * line's tensor. */
bool vt__frame_makes_library_workspace(const vt__snapshot_data *s, const vt__frame *f);

/* Whether native frame f is PyTorch's pinned host memory cache making a block
 * (at::CachingHostAllocatorImpl, CUDACachingHostAllocatorImpl's
 * allocate_host_memory_slowpath): kept for reuse until the program empties
 * the host cache, whether or not a tensor is on it (frame_fold.c). */
bool vt__frame_makes_host_cache_block(const vt__snapshot_data *s, const vt__frame *f);

/* Whether a state segment's pool is an observed framework allocator's
 * (VT_POOL_FRAMEWORK_*, read from FRAMEWORK_STATE). */
static inline bool vt__pool_is_framework(uint8_t pool)
{
    return pool == VT_POOL_FRAMEWORK_SMALL || pool == VT_POOL_FRAMEWORK_LARGE;
}

/* A pool as its kind of segments: the framework's small and large are
 * small and large (the pools of its SEGMENT_ALLOC events). */
static inline uint8_t vt__pool_kind(uint8_t pool)
{
    return pool == VT_POOL_FRAMEWORK_SMALL ? VT_POOL_SMALL
         : pool == VT_POOL_FRAMEWORK_LARGE ? VT_POOL_LARGE : pool;
}

/* Where a PAUSE event's pause began: it is recorded when the pause ended,
 * aux its length (the tool's time, not the program's: check, viz, the
 * Perfetto export). */
static inline uint64_t vt__pause_start(const vt__event *e)
{
    return e->time_ns > e->aux ? e->time_ns - e->aux : 0;
}

/* Release everything a snapshot owns (also the struct itself). NULL is fine. */
void vt__snapshot_free(vt__snapshot_data *s);

/* Release the arrays a snapshot owns, not the struct (one that lives
 * elsewhere, e.g. inside a test's builder). */
void vt__snapshot_free_arrays(vt__snapshot_data *s);

/* The highest device ordinal an event or a segment names; -1 when none. */
int vt__snapshot_max_device(const vt__snapshot_data *s);

#endif /* VT_TRACE_SNAPSHOT_H */
