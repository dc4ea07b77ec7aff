/*
 * trace/record/rec_internal.h - what the recorder's own files share.
 *
 * What the allocator calls (vt__trace, stack capture, string interning) is
 * in recorder.h, included here.
 *
 * Map of the recorder:
 *   recorder.c   state, initialization, thread numbers, vt__trace
 *   ring.c       the wait-free event ring
 *   stacks.c     stack capture (libunwind) and the interned prefix tree
 *   pyframes.c   the calling thread's Python frames, read without libpython
 *   strings.c    the string table a snapshot is built with
 *   interned.c   the process-wide interned strings, kept as long as events
 *   symbolize.c  IP -> module/build id/function/file/line at export (libdwfl)
 *   snapshot_take.c  building a vt__snapshot_data from the live process, writing it
 *   auto_snapshot.c vt_snapshot(), vt_mark(), snapshot names, exit/exec/OOM snapshots
 *                (calls into the recorder; the recorder never calls it)
 *   snap_signal.c  snapshots on a signal, the exit snapshot on SIGTERM/SIGINT
 *   runlog.c     the run directory of `vramtrace run`: snapshots registered,
 *                the processes a snapshot signal is passed on to
 *   exec_hook.c  the exec family: the snapshot before an exec
 *   annotate.c   the annotation API (tensors, holders, references)
 *   installed_code.c  Python files of packages installed outside site-packages
 *                (a RECORD of a *.dist-info beside them lists them)
 *   pool_observe.c  a framework's own caching allocator observed (PyTorch's):
 *                its blocks and segments as events, its device calls known
 *   version.c    vt_version_number / vt_version_string
 */
#ifndef VT_TRACE_REC_INTERNAL_H
#define VT_TRACE_REC_INTERNAL_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>

#include "likely.h"
#include "recorder.h"

/* Functions that can be on the stack when a stack is captured. When the
 * recorder is linked into the main program (the unit tests) the module range
 * cannot tell our frames from the caller's, so leading frames inside this
 * section are skipped instead. */
#define VT_REC_TEXT __attribute__((section("vt_rec_text"), noinline))

/* ---- recorder.c ---------------------------------------------------------- */
enum { VT_REC_UNINIT = 0, VT_REC_ON = 1, VT_REC_OFF = 2 };
extern _Atomic int vt__rec_state;

/* Initialize once (thread-safe, never calls CUDA). @return VT_REC_ON/OFF. */
int vt__rec_init(void);

/* True when tracing is on, initializing on first use. One branch when on. */
static inline bool vt__rec_on(void)
{
    int s = atomic_load_explicit(&vt__rec_state, memory_order_acquire);
    if (vt__likely(s == VT_REC_ON))
        return true;
    if (s == VT_REC_OFF)
        return false;
    return vt__rec_init() == VT_REC_ON;
}

/* The calling thread's small number (1.. in order of first event). */
uint32_t vt__rec_thread_id(void);
/* CLOCK_MONOTONIC in ns. */
uint64_t vt__now_ns(void);

/* Event time stamps: the TSC where it is invariant and the kernel itself
 * keeps time with it (a register read instead of a clock_gettime call), converted
 * to CLOCK_MONOTONIC ns at export by a calibration between initialization
 * and the export; CLOCK_MONOTONIC ns directly elsewhere. */
extern bool vt__time_tsc;
static inline uint64_t vt__now_raw(void)
{
#if defined(__x86_64__)
    if (vt__likely(vt__time_tsc)) {
        uint32_t lo, hi;
        __asm__ volatile("rdtsc" : "=a"(lo), "=d"(hi));
        return (uint64_t)hi << 32 | lo;
    }
#endif
    return vt__now_ns();
}
typedef struct vt__timecal {
    uint64_t raw0, ns0;    /* a raw reading and its CLOCK_MONOTONIC ns */
    double ns_per_raw;     /* 1.0 when raw readings are ns already */
} vt__timecal;
void vt__time_calibrate(vt__timecal *cal);
static inline uint64_t vt__time_to_ns(const vt__timecal *cal, uint64_t raw)
{
    if (cal->ns_per_raw == 1.0)
        return raw;
    double d = ((double)raw - (double)cal->raw0) * cal->ns_per_raw;
    return (uint64_t)((double)cal->ns0 + d);
}

/* ---- ring.c -------------------------------------------------------------- */
/* One event as the ring stores it: 10 words, seqlock-stamped. */
typedef struct vt__ring_rec {
    uint64_t time_ns, stream, addr, req_size, size, aux, aux2;
    uint32_t thread, stack, str;
    uint8_t kind;
    int8_t device;
} vt__ring_rec;

int vt__ring_init(uint64_t capacity);
uint64_t vt__ring_write(const vt__ring_rec *r);
uint64_t vt__ring_capacity(void);
uint64_t vt__ring_head(void);
/* Tests only: where the slot of event `seq` lies in memory. */
const void *vt__ring_slot(uint64_t seq);
/* The slots the writers commit ahead of themselves at a time (ring.c). */
#define VT_RING_CHUNK_SLOTS UINT64_C(1024)

/* ---- stacks.c ------------------------------------------------------------ */
#define VT_STACK_MAX_DEPTH 256
/* Synthetic (e.g. Python) frames are interned as IPs with this bit set and
 * the string index of "file:line function" in the low 32 bits: user-space
 * code addresses never have bit 63 set. Bits 32..62 hold the first line of
 * the frame's function (Python: co_firstlineno; 0 when not known). */
#define VT_IP_SYNTHETIC (UINT64_C(1) << 63)
#define VT_IP_FIRST_LINE_SHIFT 32
#define VT_IP_FIRST_LINE_MAX INT32_MAX

int vt__stacks_init(unsigned depth);
/* The executable range [lo, hi) of the loaded object containing addr.
 * @return 1 for a shared object, 2 for the main program, 0 if none holds it. */
int vt__module_text(uintptr_t addr, uintptr_t *lo, uintptr_t *hi);
/* Frames in the shared object containing addr are ours too: left out of the
 * stacks captured below them (an observer of another allocator calls us from
 * its callbacks). One such object at a time. @return 0 or -ENOENT. */
int vt__stacks_own_module(const void *addr);
/* How many library loads and lookups the hooks have seen (dlopen, dlsym):
 * what the process has loaded may have changed when it moved. */
uint32_t vt__modules_loaded_gen(void);
/* Set in a stack id whose stack lost its inner frames because the node
 * table was full: the id names the deepest prefix (outer callers) that was
 * already interned. Node ids stay below NODE_CAP (2^20), far from this bit;
 * the snapshot exporter clears it and counts the events that carried it. */
#define VT_STACK_TRUNCATED (UINT32_C(1) << 31)
/* Anonymous memory for the recorder's tables, committed as it is touched
 * (no malloc in the recorder); NULL when mmap fails. */
static inline void *vt__map_tables(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}
/* stack_tree.c: the interned prefix tree of stacks. Its tables, mapped
 * once: 0, -ENOMEM. */
int vt__stack_tree_init(void);
/* Intern `n` IPs given innermost first; `spare`: the calling thread's spare
 * node id (NULL: none), see stack_tree.c. As vt__stack_intern_ips. */
uint32_t vt__stack_tree_intern(const uint64_t *ips, size_t n, uint32_t *spare);
/* The hash step stacks and their tree share: mix `v` into `h`. */
static inline uint64_t vt__stack_mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= UINT64_C(0x9E3779B97F4A7C15);
    return h ^ (h >> 29);
}
/* Intern `n` IPs given innermost first. @return stack id, 0 if n == 0; when
 * the table is full, the deepest known prefix | VT_STACK_TRUNCATED, or 0 if
 * not even the outermost frame is known (either way counted in
 * vt__stacks_dropped()). */
uint32_t vt__stack_intern_ips(const uint64_t *ips, size_t n);
/* Captures that could not be interned whole (truncated or dropped). */
uint64_t vt__stacks_dropped(void);
/* Number of node ids handed out (node ids are 1..count-1; 0 is the root). */
uint32_t vt__stacks_count(void);
/* Node ids lost for good in insertion races: a thread keeps one spare id for
 * a later node under a smaller parent; the spare it replaces is lost. */
uint32_t vt__stacks_ids_lost(void);
/* A node's parent and IP (VT_STACK_TRUNCATED ignored). Ids below the count
 * that no stack refers to (lost in insertion races) read as what was last
 * written there, or 0/0. @return 0, -ENOENT if out of range. */
int vt__stacks_node(uint32_t id, uint32_t *parent, uint64_t *ip);
/* Tests only: rewrite node `id`'s parent, to give the exporter a tree that
 * breaks its invariants (cycles, parents after children, out of range). */
int vt__stacks_test_set_parent(uint32_t id, uint32_t parent);
/* Test visibility: how many captures were answered by the per-thread cache. */
uint64_t vt__stacks_cache_hits(void);
/* The calling thread's captures by the path that answered them (tests). */
typedef struct vt__stack_captures {
    uint64_t remembered;   /* a remembered walk: no unwind */
    uint64_t unwinds;      /* unw_backtrace */
    uint64_t learns;       /* libunwind's cursor walk, learning a walk (slow) */
    uint64_t python;       /* captures that found Python frames on the thread */
    uint64_t python_merges;  /* ... whose merged stack was not remembered */
} vt__stack_captures;
void vt__stacks_thread_stats(vt__stack_captures *out);
/* The Python minor version whose frames captures read (3.x), 0 if none. */
unsigned vt__stacks_python_minor(void);

/* ---- pyframes.c ---------------------------------------------------------- */
/* One Python frame as read from the interpreter. */
typedef struct vt__pyframe {
    uint64_t code;         /* the code object's address */
    uint64_t names;        /* its file, name and first line, mixed: a code object
                            * at a reused address with other names differs */
    int32_t addr;          /* byte offset of the instruction, -1 before the first */
    uint32_t group;        /* which C call of the eval loop runs it, innermost 0 */
} vt__pyframe;
/* Look for a CPython this file can read in the process (once, at init).
 * @return true when found. */
bool vt__py_detect(void);
/* The minor version found (3.x), 0 if none. */
unsigned vt__py_minor(void);
/* A native return address inside _PyEval_EvalFrameDefault. */
bool vt__py_is_eval_frame(uint64_t ip);
/* The calling thread's Python frames, innermost first, at most max; the
 * number of eval-loop C calls they ran in into *ngroups. @return count, 0
 * when this thread runs no Python. */
int vt__py_walk(vt__pyframe *out, int max, uint32_t *ngroups);
/* The synthetic IP of a frame ("file:line function" pinned, and the first
 * line of its code object), 0 on failure. */
uint64_t vt__py_frame_ip(const vt__pyframe *f);
/* Whether f runs function `name` of a file whose path ends with `suffix`. */
bool vt__py_frame_is(const vt__pyframe *f, const char *suffix, const char *name);

/* ---- auto_snapshot.c ----------------------------------------------------- */
/* Snapshots nobody asked for by name: exit, signal thread, exec hooks, OOM.
 * Set up by its own constructor when the library loads; it calls into the
 * recorder, never the other way. */
/* A snapshot not asked for by name (signal, OOM, exec): to VRAMTRACE_OUT or
 * vramtrace-%p-%n.vtsnap, tagged with the pid and `reason`, never over an
 * existing file. @return 0 or -errno. */
int vt__snapshot_auto(const char *reason);
/* The same; the name written in path. */
int vt__snapshot_auto_named(const char *reason, char *path, size_t len);
/* Expand %p %h %r %t %n %% in `pattern`. @return 0, -ENAMETOOLONG. */
int vt__expand_path(const char *pattern, unsigned n, char *out, size_t len);
/* The rank of this process from the launcher's environment (RANK,
 * OMPI_COMM_WORLD_RANK, SLURM_PROCID, LOCAL_RANK, first set), or NULL. */
const char *vt__rank_env(void);
/* Write the exit snapshot once per process (later calls wait for it). */
void vt__exit_snapshot(void);
/* VRAMTRACE_OUT is set. */
bool vt__exit_snapshot_wanted(void);
/* This process recorded something of its own: events since it began (a
 * forked child's start), an allocator it set up, an OOM. */
bool vt__process_recorded(void);
/* The same without starting the recorder (atomic loads only): for a signal
 * handler. */
bool vt__process_recorded_signal_safe(void);
/* Called by the exec wrappers before the program image is replaced. */
void vt__before_exec(void);

/* ---- recorder.c ---------------------------------------------------------- */
/* This process did something of its own besides events (set up an allocator,
 * hit an OOM); forgotten in a forked child. It used a device, then, not the
 * host alone (a DataLoader worker under `run --track` records its CPU
 * tensors): `run` gives a shared snapshot name to the one process that did
 * (runlog.c). */
void vt__note_activity(void);
bool vt__activity_noted(void);
void vt__activity_forget(void);

/* ---- snap_signal.c ------------------------------------------------------- */
void vt__signal_init(void);
/* At exit: take the signal snapshots still owed. */
void vt__signal_at_exit(void);
/* At exit, after the exit snapshot: die of a pending termination signal. */
void vt__signal_exit_done(void);
/* getpid() as of the last fork we saw (a vfork child differs). */
int vt__known_pid(void);

/* ---- runlog.c ------------------------------------------------------------ */
/* Under `vramtrace run` (VRAMTRACE_RUN_DIR): register a snapshot written
 * (rc 0) or lost. plain: the name run may rename an exit snapshot to. */
void vt__runlog_add(const char *kind, const char *path, const char *plain, int rc);
bool vt__runlog_active(void);
/* Register this process as one that takes snapshots on the signal.
 * @return 0, -1 when not in a run or the run directory cannot be written. */
int vt__runlog_register_signal(void);
/* `pid` is a process of this run: this one, a registered one still alive, or
 * one started with this run's VRAMTRACE_RUN_DIR. */
bool vt__runlog_fellow(pid_t pid);
/* Send `sig` to every other registered process of the run that is still
 * alive and catches it. @return how many were signalled. */
int vt__runlog_fan_out(int sig);
/* This process ran out of memory: in a run with a snapshot signal configured,
 * the signal thread sends that signal to the run's other processes (each
 * dumps a signal snapshot beside this one's OOM snapshot). Never waits. */
void vt__signal_oom_pass_on(void);

/* ---- exec_hook.c --------------------------------------------------------- */
void vt__exec_hooks_init(void);

/* ---- snapshot_take.c ----------------------------------------------------- */
/* Write a snapshot of the live process to `path` (flags: outfile.h).
 * @return 0 or -errno with one line in err. */
int vt__snapshot_write(const char *path, int flags, char *err, size_t errlen);
/* The same, replacing `path`, the error printed. @return 0 or -errno. */
int vt__snapshot_write_path(const char *path);

/* ---- strings.c ----------------------------------------------------------- */
/* A growable, deduplicating string table. String 0 is always "". */
typedef struct vt__strtab {
    char *blob;            /* NUL-terminated strings back to back */
    size_t size, cap;      /* bytes used / allocated in blob */
    uint32_t *offsets;     /* string i starts at blob + offsets[i] */
    size_t n, ncap;        /* strings / allocated offsets */
    uint32_t *slots;       /* open addressing: string index, 0 = empty */
    size_t mask;           /* slots - 1 */
} vt__strtab;

int vt__strtab_init(vt__strtab *t);
void vt__strtab_free(vt__strtab *t);
/* @return the index of s (added if new), 0 for NULL/"", UINT32_MAX on ENOMEM. */
uint32_t vt__strtab_add(vt__strtab *t, const char *s);
uint32_t vt__strtab_add_len(vt__strtab *t, const char *s, size_t len);
/* FNV-1a over len bytes. */
uint64_t vt__str_hash(const char *s, size_t len);

/* ---- interned.c ---------------------------------------------------------- */
/* vt__string_intern (above): a string for an event, kept while the ring may
 * still hold an event naming it. This one: a string for a stack node (a
 * synthetic frame's text), kept for good. @return its index, 0 if s is
 * NULL/"" or it could not be kept. */
uint32_t vt__string_intern_pinned(const char *s);
/* Look an interned string up by index (copies into buf). @return length or
 * -1 (unknown, or its events are gone and it with them). */
int vt__strings_get(uint32_t index, char *buf, size_t len);
/* A snapshot holds the strings from before it copies the ring until it has
 * exported them: while held nothing is freed (interning goes on). */
void vt__strings_hold(void);
void vt__strings_release(void);
/* What the interned strings take now (tests). */
typedef struct vt__strings_usage {
    uint64_t event_strings;      /* strings of events, in live generations */
    uint64_t event_generations;  /* live generations of them */
    uint64_t pinned_strings;     /* strings of stack frames */
    uint64_t bytes;              /* memory of all generations (allocated) */
    uint64_t refused;            /* strings not kept (memory, limits) */
} vt__strings_usage;
void vt__strings_stats(vt__strings_usage *out);

/* Whether Python file `file` (absolute, or as the interpreter was given it:
 * against the working directory) belongs to a package an installer put in a
 * directory that the path rule (common/user_code.h) takes for the program's
 * (installed_code.c). Reads the disk the first time a directory is asked. */
bool vt__source_is_installed(const char *file);

#endif /* VT_TRACE_REC_INTERNAL_H */
