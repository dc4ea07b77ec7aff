/*
 * vramtrace.h - the public C API of vramtrace.
 *
 * vramtrace is a drop-in CUDA caching allocator that records the lifetime of
 * every device allocation. Preload libvramtrace.so (`vramtrace run -- CMD`) and
 * every cudaMalloc/cuMemAlloc of the program is served from its block cache;
 * or call the functions below directly, or hand the library to PyTorch as a
 * pluggable allocator (vt_malloc / vt_free have exactly the signatures that
 * torch.cuda.memory.CUDAPluggableAllocator loads).
 *
 * Conventions (one for the whole API):
 *  - Functions returning `int` return 0 on success. Where vramtrace stands in
 *    for CUDA (allocation and free), a failure returns the CUDA runtime error
 *    code the real call would have returned (cudaErrorMemoryAllocation = 2,
 *    cudaErrorInvalidValue = 1, ...). Other failures return a negative errno
 *    value (-EINVAL, -ENOMEM, -EIO, ...). vt_strerror() names any of them.
 *  - Nothing here ever aborts the host program. Misuse (a bad free, an unknown
 *    configuration key) is reported once on stderr and in the trace.
 *  - Every function is thread-safe.
 */
#ifndef VRAMTRACE_H
#define VRAMTRACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>   /* ssize_t */

#ifdef __cplusplus
extern "C" {
#endif

#if defined(VT_BUILDING_LIBRARY)
#  define VT_API __attribute__((visibility("default")))
#else
#  define VT_API
#endif

/* Identical to the CUDA runtime's own typedef (driver_types.h), so this header
 * can be used with or without the CUDA headers. */
typedef struct CUstream_st *cudaStream_t;

/* ======================================================================== */
/*  Version                                                                 */
/* ======================================================================== */

#define VRAMTRACE_VERSION_MAJOR 0
#define VRAMTRACE_VERSION_MINOR 1
#define VRAMTRACE_VERSION_PATCH 0
#define VRAMTRACE_VERSION_STRING "0.1.0"
#define VRAMTRACE_VERSION_NUMBER \
    (VRAMTRACE_VERSION_MAJOR * 10000 + VRAMTRACE_VERSION_MINOR * 100 + VRAMTRACE_VERSION_PATCH)

/*! vt_version_number() :
 * @return the version of the loaded library as MAJOR*10000 + MINOR*100 + PATCH,
 *         to compare with VRAMTRACE_VERSION_NUMBER from the header compiled in. */
VT_API unsigned vt_version_number(void);

/*! vt_version_string() :
 * @return the version of the loaded library as "MAJOR.MINOR.PATCH"; static storage. */
VT_API const char *vt_version_string(void);

/*! vt_strerror() :
 * @return a one-line description of a code returned by this API: "success"
 *         for 0, the CUDA error's name and text for a CUDA error code
 *         ("cudaErrorMemoryAllocation: out of memory"; "CUDA error N" for one
 *         it does not know), strerror's text for a negative errno. Static or
 *         thread-local storage: valid until the thread's next call. */
VT_API const char *vt_strerror(int rc);

/* ======================================================================== */
/*  Allocator (alloc/)                                                      */
/* ======================================================================== */

/* The caching allocator serves device memory from segments it keeps, like
 * PyTorch's CUDA caching allocator: requests are rounded up to 512 bytes;
 * requests up to 1 MiB come from 2 MiB segments (the small pool), others
 * from 20 MiB segments, or their own segment rounded up to 2 MiB at 10 MiB
 * and more (the large pool). A freed block is reused at once by the stream
 * it was allocated on; for other streams it waits for the events recorded
 * on the streams named by vt_record_stream(). Configured by VRAMTRACE_CONF
 * (cache, max_split_size_mb, roundup_power2_divisions,
 * garbage_collection_threshold, per_process_memory_fraction). */

/*! vt_malloc() :
 * Allocate `size` bytes of device memory on `device` (< 0: the calling
 * thread's current device) for use on `stream` (NULL: the legacy default
 * stream; cudaStreamPerThread: the calling thread's per-thread stream).
 * The signature PyTorch's CUDAPluggableAllocator loads.
 * @return the device pointer, or NULL when size <= 0 or on failure (out of
 *         memory after releasing the cache: counted in vt_stats.num_ooms). */
VT_API void *vt_malloc(ssize_t size, int device, cudaStream_t stream);

/*! vt_free() :
 * Give back a pointer from vt_malloc. `size` and `device` are ignored (the
 * cache knows them); `stream` is the stream the free is ordered on, normally
 * the allocating one. NULL is ignored. A pointer vt_malloc did not return
 * (unknown, interior, already freed) is reported once on stderr and in the
 * trace and changes nothing. */
VT_API void vt_free(void *ptr, ssize_t size, int device, cudaStream_t stream);

/*! vt_torch_malloc(), vt_torch_free() :
 * vt_malloc and vt_free as PyTorch's CUDAPluggableAllocator should load them,
 * exported by libvramtrace_torch.so (installed next to libvramtrace.so; what
 * vramtrace.torch.use_allocator() hands PyTorch): PyTorch does not check the
 * pointer a pluggable allocator returns, so vt_torch_malloc throws a C++
 * exception (a std::bad_alloc, "CUDA out of memory (vramtrace): ...") where
 * vt_malloc returns NULL for a non-empty request, which PyTorch raises as a
 * RuntimeError. vt_torch_free is vt_free. Not in libvramtrace.so itself. */
VT_API void *vt_torch_malloc(ssize_t size, int device, cudaStream_t stream);
VT_API void vt_torch_free(void *ptr, ssize_t size, int device, cudaStream_t stream);

/*! vt_record_stream() :
 * The block holding `ptr` is (also) used by work on `stream`. When it is
 * freed, an event is recorded on every such stream and the block is reused
 * only after all of them completed.
 * Not a CUDA call: errors are negative errno values.
 * @return 0, -EINVAL if ptr is not in an allocated block, -ENOMEM. */
VT_API int vt_record_stream(void *ptr, cudaStream_t stream);

/*! vt_empty_cache() :
 * Wait for pending frees, then return every fully free segment of `device`
 * (< 0: every device) to the device.
 * @return 0, or the CUDA error of a failed backend call. */
VT_API int vt_empty_cache(int device);

/* Counters of one kind, as PyTorch keeps them: `allocated` and `freed` sum
 * every increase and decrease since the start. */
typedef struct vt_stat {
    int64_t current;
    int64_t peak;          /* highest `current` since start or vt_reset_peak_stats */
    int64_t allocated;
    int64_t freed;
} vt_stat;

/* Index of the per-pool arrays in vt_stats. */
enum vt_stat_pool { VT_STAT_SMALL = 0, VT_STAT_LARGE = 1, VT_STAT_ALL = 2 };

typedef struct vt_stats {
    /* bytes, per pool */
    vt_stat allocated_bytes[3];       /* handed out to the program */
    vt_stat reserved_bytes[3];        /* held from the device (segments) */
    vt_stat active_bytes[3];          /* handed out or waiting for stream events */
    vt_stat inactive_split_bytes[3];  /* free, in segments that are split */
    vt_stat requested_bytes[3];       /* as asked, before rounding */
    /* counts, per pool */
    vt_stat allocation[3];            /* blocks handed out */
    vt_stat segment[3];               /* segments held */
    vt_stat active[3];                /* blocks handed out or pending */
    vt_stat inactive_split[3];        /* free blocks in split segments */
    /* events */
    uint64_t num_alloc_retries;       /* cache released and allocation retried */
    uint64_t num_ooms;                /* allocations that failed */
    uint64_t num_backend_allocs;      /* device allocations (cuMemAlloc) */
    uint64_t num_backend_frees;       /* device frees (cuMemFree) */
    uint64_t num_sync_all;            /* waits for every pending free */
    uint64_t num_fence_events;        /* events recorded to fence frees */
    uint64_t num_bad_frees;           /* frees rejected */
} vt_stats;

/*! vt_get_stats() :
 * Fill *out with the statistics of `device` (< 0: current device).
 * @return 0, or -EINVAL for a bad device or NULL out. */
VT_API int vt_get_stats(int device, vt_stats *out);

/*! vt_reset_peak_stats() :
 * Set every peak of `device` (< 0: current) to its current value.
 * @return 0 or -EINVAL. */
VT_API int vt_reset_peak_stats(int device);

/*! vt_set_memory_fraction() :
 * Cap the bytes the cache reserves on `device` (< 0: current) to
 * `fraction` (0 < fraction <= 1) of the device's memory; an allocation
 * beyond it fails as out of memory after the cache was released.
 * @return 0 or -EINVAL. */
VT_API int vt_set_memory_fraction(double fraction, int device);

/* ======================================================================== */
/*  Tracing and snapshots (trace/)                                          */
/* ======================================================================== */

/* Every allocation event (alloc, free, segment, stream use, OOM, mark, and the
 * annotations below) is recorded with a compressed native stack into a ring of
 * VRAMTRACE_CONF max_events entries (default 1000000; the oldest are
 * overwritten first and counted). A snapshot writes the retained events, the
 * allocator's segments and blocks, and the symbolized stacks to one .vtsnap
 * file (temporary file + rename: a reader never sees half a file).
 *
 * Snapshots are also written
 *  - at exit, to $VRAMTRACE_OUT, when that variable is set, by a process that
 *    recorded something of its own (a wrapper or launcher that never used the
 *    allocator writes nothing); also when SIGTERM, SIGINT or SIGHUP (left at
 *    their default action) end the process, which then dies of that signal as
 *    it would have; and before exec replaces a recording process ("-exec-<n>");
 *  - on a signal, with VRAMTRACE_CONF=signal:SIGUSR2 (or SIGUSR1, SIGPROF,
 *    SIGRTMIN+N): the handler only wakes a background thread of vramtrace,
 *    which writes the snapshot ("-signal-<n>"); one still owed at exit is
 *    written then;
 *  - when an allocation fails, with dump_on_oom:1 ("-oom-<n>"; oom_snapshots
 *    files per process, default 4, the last one holding the latest OOM).
 * Names: $VRAMTRACE_OUT, or vramtrace-%p-%n.vtsnap when it is unset. Signal,
 * OOM, exec and vt_snapshot(NULL) snapshots get "-<pid>" (unless the pattern
 * has %p) and their "-<reason>-<n>" (unless it has %n) before ".vtsnap", and
 * never replace an existing file; a forked child's exit snapshot gets its pid;
 * a rank from the environment gets "-rank<N>" when the pattern has no %r. So
 * no two snapshots of a run share a name. Only a regular file is ever
 * replaced: a device, FIFO, directory or symbolic link is refused.
 * Paths may contain patterns: %p process id, %h host name, %r rank (RANK,
 * OMPI_COMM_WORLD_RANK, SLURM_PROCID or LOCAL_RANK, the first set; 0 if
 * none), %t local time YYYYmmdd-HHMMSS, %n the number of the snapshot in this
 * process (1, 2, ...), %% a '%'. */

/*! vt_snapshot() :
 * Write a snapshot of this process to `path` (patterns above are expanded
 * only when `path` is NULL: then $VRAMTRACE_OUT, or vramtrace-%p-%n.vtsnap,
 * named as described above).
 * Allocation goes on while the snapshot is taken; only copying the event ring
 * competes with it. Works with trace:0 too (the allocator state, no events).
 * Not async-signal-safe: it allocates memory, symbolizes and writes a file.
 * Called from a signal handler anyway, it refuses (-EDEADLK, nothing
 * written) when the handler interrupted this thread inside the allocator (a
 * cudaMalloc or cudaFree holding the allocator's lock), instead of waiting
 * forever for a lock its own thread holds; interrupting other code (malloc,
 * stdio) it may still hang. For a snapshot on a signal use
 * VRAMTRACE_CONF=signal:SIG (above): its handler is async-signal-safe, it
 * only wakes vramtrace's thread, which writes the snapshot. No other function
 * of this header is async-signal-safe.
 * @return 0, or a negative errno (the reason is also printed on stderr). */
VT_API int vt_snapshot(const char *path);

/*! vt_program_ended() :
 * The program's own work is over: write the exit snapshot now (as at exit:
 * only when one is wanted, $VRAMTRACE_OUT, and this process recorded
 * something; the latest OOM snapshot first when it is stale) instead of at
 * exit(). An interpreter calls it when it starts tearing its objects down
 * (Python: its last atexit handler), so what the program still held at its
 * end is alive in the snapshot, not freed by the teardown and counted as the
 * program's frees. Later calls, and the one at exit, write nothing more.
 * @return 0. */
VT_API int vt_program_ended(void);

/*! vt_mark() :
 * Record a MARK event labelled `label` (a phase: "epoch 3", "step 100"); the
 * timeline shows it, and views can cut the events at it. NULL is an empty label.
 * The label is kept as long as the event is (not for the whole run), so a new
 * label per step costs no more memory than the events; labels over 64 KiB are
 * cut.
 * @return 0 (also when tracing is off: then nothing is recorded). */
VT_API int vt_mark(const char *label);

/*! vt_paused() :
 * Record that the caller, a tool, just stopped the program on this thread
 * for `ns` nanoseconds of its own work (a tracker's holder walk at a mark):
 * a PAUSE event. `vramtrace check` does not count such time as time a
 * storage was held after its last use. Nothing is recorded for 0, nor in a
 * process that has recorded nothing else (a pause alone does not make it
 * write an exit snapshot).
 * @return 0 (also when tracing is off: then nothing is recorded). */
VT_API int vt_paused(uint64_t ns);

/*! vt_trace_window() :
 * The events this process has recorded so far (*recorded) and the most its
 * ring keeps (*capacity): a snapshot holds the last *capacity of them. A
 * tool that declares a long-lived object once (a holder and its name, a
 * reference) declares it again before its declaration would leave the
 * ring, so that every snapshot's window still holds it. Both 0 while
 * tracing is off. @return 0, or -EINVAL when a pointer is NULL. */
VT_API int vt_trace_window(uint64_t *recorded, uint64_t *capacity);

/* ======================================================================== */
/*  Annotations for the reference-graph checker (trace/)                    */
/* ======================================================================== */

/* A framework describes its logical objects so that `vramtrace check` can tell
 * which storages stay alive after their tensor's last use, and through which
 * references. Tensors and holders share one id space; ids are never 0. Every
 * call records one event in the same ring as the allocator's events (fields:
 * include/vramtrace/format.h). With tracing off the calls record nothing and
 * still hand out ids, so callers need no special case. All are thread-safe;
 * calls marked "captures a stack" unwind the caller's native stack
 * (VRAMTRACE_CONF stack_depth frames), and each has a _stack twin that takes
 * a stack id from vt_stack_intern_frames() instead (0: no stack): an
 * interpreter's native stack shows only the interpreter, and the unwind is
 * most of the cost of a call. */

/*! vt_tensor_new() :
 * A logical tensor now views `nbytes` at `data_ptr`, inside a storage
 * allocated by vramtrace (or declared with vt_storage_external()).
 * `base_tensor` is the tensor it is a view of (0: none); `name` may be NULL.
 * Captures a stack (where the tensor was made). The creation counts as the
 * tensor's first use: no vt_tensor_use() is needed for it. `base_tensor`
 * VT_TENSOR_SAVED_ONLY (vramtrace/format.h): the tensor only stands for
 * memory that a saved tensor of the framework keeps after every tensor the
 * program had on it was dropped (a holder can then be referenced to it);
 * its creation is no use, and it does not take the storage over.
 * @return the tensor's id (never 0). */
VT_API uint64_t vt_tensor_new(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                              const char *name);

/*! vt_tensor_new_stack() :
 * As vt_tensor_new(), with `stack` from vt_stack_intern_frames() (0: none)
 * instead of capturing the native one.
 * @return the tensor's id (never 0). */
VT_API uint64_t vt_tensor_new_stack(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                                    const char *name, uint32_t stack);

/*! vt_tensor_again() :
 * Tensor `id`, made earlier by vt_tensor_new() or vt_tensor_new_stack() and
 * alive, is declared again as it is now: `data_ptr`, `nbytes`, `base_tensor`
 * and `name` as vt_tensor_new() takes them, `stack` where it was made
 * (vt_stack_intern_frames(); 0: none), `rest` the longest it has stayed
 * unused before a use so far (0: none seen; its usual gap between uses,
 * which the window may not show): in marks (steps) where the program marks
 * its steps, else in nanoseconds. A run longer than the ring
 * overwrites a tensor's first declaration while the program still holds
 * it; declared again, a snapshot knows it (`vramtrace check` judges it as
 * made before the window, unused since the window began unless a use in
 * the window says otherwise). Not a use, not a new tensor; a reader that
 * still has its first declaration ignores this one. Records the event
 * TENSOR_NEW with VT_TENSOR_AGAIN (format 1.11).
 * @return 0, or -EINVAL if id is 0. */
VT_API int vt_tensor_again(uint64_t id, const void *data_ptr, size_t nbytes,
                           uint64_t base_tensor, const char *name, uint32_t stack,
                           uint64_t rest);

/*! vt_tensor_use() :
 * Tensor `id` was used (read or written) now. Captures a stack. */
VT_API void vt_tensor_use(uint64_t id);

/*! vt_tensor_use_stack() :
 * As vt_tensor_use(), with a stack from vt_stack_intern_frames() (e.g. the
 * Python stack) instead of capturing the native one: cheaper for an
 * interpreter that already knows its frames. 0 records the use without stack. */
VT_API void vt_tensor_use_stack(uint64_t id, uint32_t stack);

/*! vt_tensor_drop() :
 * The logical tensor `id` is gone (its Python object was collected); its
 * storage may live on through other references. Records no stack (no view
 * reads one: the storage's release carries the stack that matters). */
VT_API void vt_tensor_drop(uint64_t id);

/*! vt_tensor_name() :
 * Tensor `id` is called `name` from now on ("fc2 out"), e.g. when a framework
 * learns the name only after the tensor was made; it keeps its id, storage
 * and uses. Reports show the latest name a tensor has in the snapshot.
 * An empty name leaves the tensor nameless. Records no stack.
 * @return 0, or -EINVAL if id is 0 or name is NULL. */
VT_API int vt_tensor_name(uint64_t id, const char *name);

/*! vt_storage_external() :
 * Declare a storage of `nbytes` at `ptr` on `device` that vramtrace did not
 * allocate (another allocator, a CUDA IPC handle, a DLPack import), so that
 * tensors in it can be checked too. Captures a stack (shown as the
 * storage's allocation stack).
 * @return 0, or -EINVAL if ptr is NULL. */
VT_API int vt_storage_external(const void *ptr, size_t nbytes, int device);

/*! vt_storage_external_stack() :
 * As vt_storage_external(), with `stack` from vt_stack_intern_frames()
 * (0: none) instead of capturing the native one.
 * @return 0, or -EINVAL if ptr is NULL. */
VT_API int vt_storage_external_stack(const void *ptr, size_t nbytes, int device, uint32_t stack);

/*! vt_storage_external_free() :
 * The external storage at `ptr` was released. Captures a stack (the
 * storage's free stack) unless free_stacks:0.
 * @return 0, or -EINVAL if ptr is NULL. */
VT_API int vt_storage_external_free(const void *ptr);

/*! vt_storage_external_free_stack() :
 * As vt_storage_external_free(), with `stack` from vt_stack_intern_frames()
 * (0: none) instead of capturing the native one; free_stacks does not apply.
 * @return 0, or -EINVAL if ptr is NULL. */
VT_API int vt_storage_external_free_stack(const void *ptr, uint32_t stack);

/*! vt_holder_new() :
 * Something that can hold references (a module, an optimizer, a cache, a
 * list, a closure), named `name` (may be NULL). Records no stack (no view
 * reads one).
 * @return the holder's id (never 0). */
VT_API uint64_t vt_holder_new(const char *name);

/*! vt_holder_new_flags() :
 * As vt_holder_new(), with VT_HOLDER_* `flags` (vramtrace/format.h):
 * VT_HOLDER_GC_COLLECTION makes the holder one run of a garbage collector,
 * whose references name the tensors that run freed (`vramtrace check` then
 * reports their storages as held by a reference cycle until gc ran).
 * @return the holder's id (never 0). */
VT_API uint64_t vt_holder_new_flags(const char *name, unsigned flags);

/*! vt_ref() :
 * `from` (a holder or tensor id) now references `to` (a tensor or holder id);
 * `label` says how ("param", "grad", "exp_avg", "[3]"), may be NULL.
 * @return 0, or -EINVAL if an id is 0. */
VT_API int vt_ref(uint64_t from, uint64_t to, const char *label);

/*! vt_unref() :
 * The reference from `from` to `to` is gone.
 * @return 0, or -EINVAL if an id is 0. */
VT_API int vt_unref(uint64_t from, uint64_t to);

/*! vt_stack_intern_frames() :
 * Intern a stack of synthetic frames - typically an interpreter's - into the
 * same stack tree as native stacks. frames[0] is the innermost frame, each a
 * string "file:line function" (e.g. "train.py:42 forward"); a frame without
 * ":line" is taken as a function name only. In a snapshot these frames have
 * ip 0, module "python", and function, file and line filled in. Identical
 * stacks get identical ids, so a caller can cache the id per call site.
 * At most 256 frames are kept (the innermost). When the stack table is full,
 * the id names the deepest prefix of the stack (its outer frames) that the
 * table holds, and events that use it count as having a truncated stack.
 * @return a stack id for the _stack calls (vt_tensor_use_stack() ...), 0 if n
 *         is 0, tracing is off, or the table is full and holds not even the
 *         outermost frame. */
VT_API uint32_t vt_stack_intern_frames(const char *const *frames, size_t n);

/*! vt_python_frames() :
 * The calling thread's Python frames, innermost first, as pairs
 * (code object's address, byte offset of its current instruction, -1 before
 * the first) in pairs[0..2*max): what vramtrace's Python stacks are made of,
 * read from the interpreter's structures without making frame objects or
 * calling into Python (CPython 3.10 to 3.13, not free-threaded builds). The
 * thread must be the one whose frames are read; the code objects stay alive
 * while their frames run. For an extension that keys its own cache of stacks
 * by them (vramtrace.torch's).
 * @return the number of frames (0: none, or no Python initialized), -1 when
 *         this library cannot read this interpreter's frames. */
VT_API int vt_python_frames(uint64_t *pairs, int max);

/*! vt_source_is_programs() :
 * Whether Python source file `file` is the program's own code, by the rule
 * every report uses to choose the line it leads with: not under
 * site-packages or dist-packages, not the standard library (lib/pythonX.Y/),
 * not <frozen ...>, not vramtrace's own package, and not a package installed
 * elsewhere (`pip install --target DIR`: a *.dist-info beside it whose RECORD
 * lists it; the disk is read the first time a directory is asked). For
 * interpreters that name what they record by the user's line.
 * @return 1 if it is, 0 if not (or NULL). */
VT_API int vt_source_is_programs(const char *file);

/*! vt_thread_python_stack() :
 * Lend this thread Python frames: while it runs no Python code of its own,
 * the stacks it records (allocations, frees) show `stack`, from
 * vt_stack_intern_frames(), outside its native frames, as if that Python
 * code had called it; 0 stops. For a worker thread that works for Python
 * code it does not run: vramtrace.torch lends an autograd engine thread the
 * frames of the forward op whose gradient it computes. Per thread; a thread
 * running Python code records its own frames. */
VT_API void vt_thread_python_stack(uint32_t stack);

/*! vt_stack_python_frame() :
 * Synthetic frame `i` (0: the innermost) of stack `stack` (a Python frame
 * of the recorder's, or one of vt_stack_intern_frames()'s), as
 * "file:line function", into buf (cut to len - 1 bytes and terminated;
 * len 0: nothing written).
 * @return its full length, 0 when the stack has no such frame, -1 when its
 *         string is gone. */
VT_API int vt_stack_python_frame(uint32_t stack, int i, char *buf, size_t len);

/* ======================================================================== */
/*  A framework's own caching allocator, observed                           */
/* ======================================================================== */

/* A framework that caches device memory itself (PyTorch) asks the device for
 * segments and hands out blocks inside them. An observer running inside the
 * framework's process reports those blocks and segments here as they happen,
 * and vramtrace records them as allocations and segments, as the framework's
 * own snapshot would. vramtrace.torch does this for PyTorch, on its allocator
 * trace tracker, under `vramtrace run`. */

/*! vt_pool_observe() :
 * From now on the framework allocator whose code is the shared object holding
 * `pool_code` is observed: the device allocations and frees it makes itself
 * (its segments) go to the device exactly as without vramtrace, neither
 * cached nor recorded by the hooks (the observer reports them), and frames in
 * the shared object holding `observer_code` (NULL: none) are left out of
 * stacks, as vramtrace's own are. Snapshots say so (VT_META_POOL_OBSERVED).
 * @return 0, or -EINVAL when a code address lies in no loaded shared object. */
VT_API int vt_pool_observe(const void *pool_code, const void *observer_code);

/*! vt_pool_event() :
 * Record one event of the observed allocator on `device`, on `stream` (the
 * cudaStream_t as an integer): VT_EV_ALLOC (`size` bytes asked for at `addr`;
 * `aux` the block's size when it differs, else 0), VT_EV_FREE_REQUESTED and
 * VT_EV_FREE_COMPLETED (the block at `addr` freed by the program, then
 * reusable), VT_EV_SEGMENT_ALLOC (`aux` a VT_POOL_*, or
 * VT_POOL_EVENT_PRIVATE(pool, id) for a segment of the allocator's private
 * pool `id`: a CUDA graph's, a torch.cuda.MemPool's) and VT_EV_SEGMENT_FREE,
 * VT_EV_OOM (`size` the request, `aux` the bytes free on the device, `addr`
 * the device's total memory or 0: snapshots then list the device with it, as
 * they list the devices vramtrace's own cache served), VT_EV_EMPTY_CACHE (the
 * program asked the allocator to give its cached memory back, e.g.
 * torch.cuda.empty_cache(); recorded before the segment frees it causes, so
 * that a replay empties its cache there too).
 * Captures a stack for allocations, segments, OOMs and emptyings (frees: with
 * free_stacks:1). Safe from any thread, with the framework's locks held.
 * @return 0, or -EINVAL for another kind. */
VT_API int vt_pool_event(int kind, int device, uint64_t addr, uint64_t size, uint64_t stream,
                         uint64_t aux);

/*! vt_pool_oom() :
 * vt_pool_event(VT_EV_OOM, device, total, request, stream, free_bytes) for a
 * request the observed allocator served from a private pool: `pool` the id
 * its segments carry (VT_POOL_EVENT_PRIVATE's; a CUDA graph's while it is
 * captured, a torch.cuda.MemPool's), 0 for its default pool.
 * @return 0. */
VT_API int vt_pool_oom(int device, uint64_t request, uint64_t free_bytes, uint64_t total,
                       uint64_t stream, uint64_t pool);

/* vt_pool_event()'s `aux` of a SEGMENT_ALLOC in private pool `id` (nonzero,
 * below 2^56, the same for every segment of that pool): the pool kind in the
 * low byte, the id above it. */
#define VT_POOL_EVENT_PRIVATE(pool, id) ((uint64_t)(pool) | ((uint64_t)(id) << 8))

/*! vt_pool_block_at() :
 * Whether a live block of the observed allocator starts at `addr`: 1, or 0
 * when none does (the memory is not the allocator's: a CUDA IPC handle's
 * mapping, a DLPack import); -1 when it cannot tell (no block seen yet, or
 * its book ran out of memory). A tensor's storage starts at its block. */
VT_API int vt_pool_block_at(uint64_t addr);

/*! vt_pool_block_stack() :
 * The stack its allocation was recorded with, of the observed allocator's
 * live block that starts at `addr`, for vt_stack_python_frame(); in *seq
 * (unless NULL) that allocation's event's sequence number (0: none). For a
 * tracker that first sees a tensor made where no op of its showed it (a
 * compiled region's buffers): the program's line that allocated it.
 * @return the stack id, 0 when no live block starts there (or it has no
 *         stack). */
VT_API uint32_t vt_pool_block_stack(uint64_t addr, uint64_t *seq);

/*! vt_pool_settings() :
 * The observed allocator's settings, in its own syntax (PyTorch: the
 * PYTORCH_CUDA_ALLOC_CONF text it runs with, plus
 * "per_process_memory_fraction:F" where the program set one), kept for the
 * snapshots (META, format 1.7) so that a replay starts from the settings the
 * program ran with. A later call replaces them (the snapshot keeps the last);
 * NULL or "" clears them. Text past 1 KiB is cut.
 * @return 0. */
VT_API int vt_pool_settings(const char *settings);

/*! vt_pool_unseen() :
 * A framework allocator ran in this process that could not be observed:
 * snapshots say so (VT_META_POOL_UNSEEN), and views then say that their
 * allocations are its segments, not the objects inside them. */
VT_API void vt_pool_unseen(void);

#ifdef __cplusplus
}
#endif

#endif /* VRAMTRACE_H */
