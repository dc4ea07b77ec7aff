/* trackfast.h - what the files of the _trackfast extension share.
 *
 * _trackfast is vramtrace.torch.track()'s per-op path in C (module.c says
 * why it exists). Its files, one concept each:
 *   module.c    the module, its setup() and the Dispatcher type
 *   dispatch.c  the mode's __torch_dispatch__: an op's tensors, their uses
 *   tensors.c   tensors seen for the first time, and their deaths
 *   storages.c  storages into and out of the books (host ones declared)
 *   storage_turns.c  their rare turns: memory reused, twins, new memory, a tensor moved
 *   records.c   the books' record types (TensorRec, StorageRec); a tensor's TENSOR_NEW
 *   stacks.c    raw Python stacks -> the library's stack ids, cached
 *   lent.c      the frames to lend engine threads, readable without the GIL
 *   op_cache.c  an op's meta and its outputs' names, in C in front of the books
 *   python.c    calls back into the Python Tracker
 *   gc_schedule.c  the tracker's own objects kept out of the collector's count
 *   grads.c     a parameter's .grad followed (used, named) at each mark
 * Internal: nothing here is exported from the module but PyInit__trackfast.
 */
#ifndef VT_TRACKFAST_H
#define VT_TRACKFAST_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <frameobject.h>
#include <structmember.h>

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include "../trackobs/tensor_facts.h"

#if PY_VERSION_HEX < 0x030B0000
#error "_trackfast needs CPython 3.11 or newer (PyFrame_GetLasti); the tracker runs in Python without it"
#endif

typedef void (*use_fn)(uint64_t id, uint32_t stack);
typedef void (*drop_fn)(uint64_t id);
typedef int (*external_fn)(const void *ptr, size_t nbytes, int device, uint32_t stack);
typedef int (*external_free_fn)(const void *ptr, uint32_t stack);
typedef int (*rename_fn)(uint64_t id, const char *name);
typedef int (*python_frames_fn)(uint64_t *pairs, int max);
typedef uint64_t (*new_fn)(const void *data_ptr, size_t nbytes, uint64_t base_tensor,
                           const char *name, uint32_t stack);
typedef int (*again_fn)(uint64_t id, const void *data_ptr, size_t nbytes,
                        uint64_t base_tensor, const char *name, uint32_t stack,
                        uint64_t rest);
typedef int (*window_fn)(uint64_t *recorded, uint64_t *capacity);
typedef int (*paused_fn)(uint64_t ns);
typedef int (*pool_block_at_fn)(uint64_t addr);

enum { MAX_RAW_FRAMES = 192,      /* frames looked at per stack (as _stacks.py) */
       MAX_CACHED = 1 << 16 };    /* distinct raw stacks before the cache starts over */

/* One raw stack seen before: (code identity, instruction offset) pairs,
 * innermost first, and the stack id the library gave its frames. */
typedef struct {
    uint64_t hash;
    uint32_t sid;
    uint32_t n;              /* pairs */
    uintptr_t pairs[];       /* 2 * n words */
} StackEntry;

/* The books' containers (Dispatcher.containers; the Dispatcher's
 * attributes of the same names, lower case). */
enum {
    BOOK_BY_OBJ,        /* id(tensor) -> TensorRec */
    BOOK_BY_TID,        /* recorded ones: tid -> TensorRec */
    BOOK_PENDING,       /* outputs not recorded yet, in creation order */
    BOOK_STORAGES,      /* storage key -> StorageRec */
    BOOK_MAYBE_GONE,    /* StorageRecs whose last tensor died */
    BOOK_HELD,          /* the same, found still held elsewhere when asked */
    BOOK_OP_META,       /* id(op) -> (view arg, OP_* flags, op) */
    BOOK_NODE_STACKS,   /* autograd sequence number -> stack id of the forward op */
    BOOK_NAMES,         /* (id(op), output, stack) -> name */
    BOOK_ENCODED,       /* name -> its UTF-8 bytes */
    BOOK_STARTS,        /* sorted addresses of declared host storages */
    BOOK_AT_PTR,        /* address -> declared host StorageRec */
    BOOK_GC_DEAD,       /* (tid, id(tensor)) died in the tracker's own collection */
    BOOK_LENT,          /* stack id of a forward op -> the frames lent for its backward */
    BOOKS
};

/* The frames to lend an engine thread, by autograd sequence number
 * (lent.c): one slot per number modulo LENT_SLOTS, written by the owner
 * thread under the GIL, read by the op observer on engine threads without
 * it (vt__lent_read_fn). */
enum { LENT_SLOTS = 1 << 16 };
typedef struct {
    _Atomic uint64_t key;    /* seq + 1, 0: empty or being written */
    _Atomic uint32_t sid;
} LentSlot;

typedef struct {
    PyObject_HEAD
    PyObject *tracker;       /* the Tracker (strong: it owns us, a cycle gc breaks) */
    PyObject *intern_frame;  /* its StackInterner's intern_frame(frame), for a miss */
    use_fn use;              /* vt_tensor_use_stack */
    new_fn tensor_new;       /* vt_tensor_new_stack */
    drop_fn drop;            /* vt_tensor_drop */
    external_fn external;    /* vt_storage_external_stack */
    external_free_fn external_free;   /* vt_storage_external_free_stack */
    rename_fn rename;        /* vt_tensor_name */
    python_frames_fn python_frames;   /* vt_python_frames, or NULL (stacks.c) */
    again_fn again;          /* vt_tensor_again, or NULL: a library that cannot
                              * declare a tensor again (records.c) */
    window_fn window;        /* vt_trace_window, or NULL (read through ctypes) */
    paused_fn paused;        /* vt_paused, or NULL (recorded through ctypes) */
    pool_block_at_fn pool_block_at;  /* vt_pool_block_at, or NULL: every device storage
                                      * is taken for a block of the allocator */
    uint64_t object_walks;   /* stacks keyed by walking frame objects instead */
    PyObject *codes;         /* id -> code object of every code in a cached key */
    StackEntry **table;      /* open addressing, capacity 2 * MAX_CACHED */
    size_t cached;
    int stacks_enabled;
    int life_available;      /* StorageLife has weak handles (torch >= 2.0) */
    PyObject *use_count;     /* torch._C._storage_Use_Count, or NULL */
    PyObject *holders;       /* tracker._book (its HolderBook) and its _targeted set, */
    PyObject *targeted;      /* read at the first death: neither is ever replaced */
    PyObject *free_weak_ref; /* UntypedStorage._free_weak_ref, or NULL */
    PyObject *life_now;      /* the tracker's StorageLife.now, or NULL */
    /* The books, made here (the Tracker binds the same objects), by
     * BOOK_* below: */
    PyObject *containers[BOOKS];
    /* ... and their state, fields the Tracker reads and writes as
     * attributes of this object: */
    int recording;           /* ops are recorded (inside the block, not at a mark) */
    unsigned long marking;   /* the thread doing a mark's work now, 0: none; the op
                              * observer reads it (Dispatcher.marking_address): another
                              * thread's op waits for it (observer.cpp) */
    unsigned long owner;     /* the thread that entered: it runs the forward ops */
    long long epoch;         /* marks (and ticks) seen */
    /* The thread inside a collection (0: none): another thread's tensor
     * that dies meanwhile (the collection's finalizers let the GIL go) was
     * not freed by it. */
    unsigned long manual_gc; /* the tracker's own cycle collection */
    unsigned long in_gc;     /* a collection the tracker did not start */
    long long errors;        /* recordings that failed (Tracker.errors) */
    int lend;                /* the op observer reads the frames to lend (lent) */
    LentSlot *lent;          /* LENT_SLOTS of them */
    long long seq_noted;     /* the autograd number last noted in node_stacks, -1: none */
    struct OpCache *op_cache;   /* op_cache.c */
    uint64_t ops;            /* ops recorded (Tracker.ops) */
    uint64_t uses_only;      /* of them, backward ops recorded by engine_uses */
    double busy;             /* seconds spent recording here (Tracker._busy() adds) */
    long long sole;          /* its count for a storage only a dying tensor holds, -1: unknown */
    long long sole_bare;     /* the same for a storage no Python object was made for */
    vt__make_weak_fn make_weak;   /* the op observer's, while it hands ops over; NULL: none,
                                  * and its facts are not used */
    vt__storage_now_fn storage_now;   /* the op observer's storage reader; NULL: ask
                                      * Python (which materializes copy-on-write) */
    vt__use_count_fn use_count_now;   /* the op observer's use-count reader; NULL:
                                      * use_count (torch._C._storage_Use_Count) */
    vt__storage_key_fn storage_key;   /* the op observer's reader of a tensor's
                                      * StorageImpl, set where a Python tensor's
                                      * TensorImpl is read as tensor_impl_of()
                                      * reads it (read_storages_with);
                                      * NULL: torch._C._storage_id */
    vt__drain_fn drain;      /* the op observer's, while it hands ops over: what it
                              * holds back, recorded before a flush; NULL: none */
    uint64_t from_facts;     /* tensors tracked from the observer's facts */
    double tick_s;           /* Tracker._tick every tick_s seconds of the owner
                              * thread's ops (0: never; it ticks while the
                              * program has made no mark or its marks have
                              * gone quiet) */
    double next_tick;        /* now_s() of the next tick, 0: not started */
    int pass_ticks;          /* Tracker._pass_ended at the owner thread's first op
                              * after a backward pass that reads a tensor a
                              * backward op made (set while the program has made
                              * no mark: its passes are its steps) */
    char backward_ran;       /* a backward op was recorded since the last pass's end */
    char pass_seen;          /* pass_ended() was called: the first does no mark's work */
    char device_seen;        /* a storage on a device was tracked (new_storage): the
                              * marks then leave host storages to the snapshot's walk */
} Dispatcher;

enum { TABLE_CAP = 2 * MAX_CACHED };

/* The tracker's books, one record per tracked tensor and per storage
 * (records.c): C objects with native fields, read and written here
 * directly and by the Python package as attributes
 * (vramtrace.torch._records picks these types when this module loads). */
typedef struct {
    PyObject_HEAD
    uint64_t tid;            /* recorder tensor id, 0 until recorded */
    uint64_t base;           /* root base tensor id if a view, else 0 */
    PyObject *skey;          /* key of its StorageRec (the StorageImpl's identity) */
    PyObject *ref;           /* weak reference whose callback records the death; None */
    PyObject *name;          /* str */
    /* its TENSOR_NEW, until recorded ("pend" in Python: (ptr, nbytes, stack)) */
    int pending;
    uint64_t pend_ptr, pend_nbytes;   /* kept once recorded: what it declared */
    PyObject *pend_stack;    /* stack id (int), or None: captured when recorded */
    uint32_t stack;          /* once recorded: the stack its TENSOR_NEW carried */
    uint64_t said_base;      /* once recorded: the base its TENSOR_NEW carried
                              * (VT_TENSOR_SAVED_ONLY where Dispatcher.record said so) */
    char by_backward;        /* made by a backward op: a gradient, whose first read
                              * by the program after a pass ends its step
                              * (Dispatcher.pass_ticks) */
} TensorRec;

typedef struct {
    PyObject_HEAD
    uint64_t ptr, nbytes;
    long long device;        /* -1: host */
    char external;           /* declared with vt_storage_external */
    char declared;           /* an external storage is open at ptr in the trace */
    char bare;               /* tracked from the op observer's facts: no Python object
                              * of ours on it (its sole count is sole_bare's) */
    PyObject *tids;          /* set of its TensorRecs, recorded or not yet */
    PyObject *skey;          /* identity of the StorageImpl */
    uint64_t weak;           /* StorageLife handle, 0 when unavailable */
    long long last_epoch;    /* marks seen before its last use */
    long long seen_epoch;    /* last_epoch as the previous mark saw it */
    long long rest;          /* most marks it stayed unused before a use */
    PyObject *twins;         /* set of the storages on its very memory, or None */
    char waiting;            /* in maybe_gone or held_elsewhere (once: settle()) */
    PyObject *gone_stack;    /* there: where its last tensor died (a stack id, None:
                              * captured at the release), its release's stack */
    uint32_t made_stack;     /* the stack of the first op that showed a tensor on it
                              * (0: none yet): a tensor found on it later, which no op
                              * showed, is named by that op's line (_walks._adopt_unseen) */
    long long made_epoch;    /* the marks (and ticks) seen when it was recorded */
    char regrown;            /* made, at its made_stack, by an op that read a smaller
                              * storage made at that same stack in an earlier step: a
                              * value rebuilt larger from itself (`kept =
                              * torch.cat([kept, x])`), used every step, so never
                              * stale; stale_storages hands it to the walks all the
                              * same (a growth finding's holder) */
} StorageRec;

extern PyTypeObject TensorRecType, StorageRecType;
#define TREC(o) ((TensorRec *)(o))
#define SREC(o) ((StorageRec *)(o))

/* Interned attribute names and objects looked up once. */
extern PyObject *s_out_name, *s_meta_of, *s_engine_dispatch, *s_recording_failed,
    *s_base_attr, *s_data_ptr, *s_nbytes, *s_storage_offset,
    *s_element_size, *s_input_name, *s_tick, *s_pass_ended,
    *s_untyped_storage, *s_cdata, *s_book, *s_targeted,
    *s_forget_target, *s_view_base, *s_is_cuda,
    *s_get_device, *s_weak_ref, *s_life, *s_cls,
    *s_use_count, *s_sole, *s_sole_bare, *s_free_weak_ref, *s_now, *s_lent_for, *s_collected, *s_gc_dead,
    *s_grad, *s_set_name, *s_backward_marker;
extern PyObject *tensor_type, *parameter_type, *sequence_nr_fn, *set_eval_frame_fn,
    *pending_names, *take_pending_name_fn, *storage_id_fn,
    *data_address_fn;

static inline double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The time since ``began`` goes to Tracker._busy() (the walk schedule's input). */
static inline void add_busy(Dispatcher *d, double began)
{
    d->busy += now_s() - began;
}

/* The Python references a type of ours owns (Dispatcher, TensorRec,
 * StorageRec, DeathCall), named once in a table of their offsets: its
 * tp_traverse visits that table and its tp_clear drops it, so a field added
 * to the type cannot be visited and never cleared, or the reverse (a leak,
 * or a cycle the collector cannot see). Inline: a record's clear runs at
 * every tracked tensor's death. */
#define NOWNED(table) (sizeof(table) / sizeof(table)[0])

static inline PyObject **owned_field(PyObject *o, Py_ssize_t at)
{
    return (PyObject **)((char *)o + at);
}

static inline int visit_owned(PyObject *o, const Py_ssize_t *at, size_t n, visitproc visit,
                              void *arg)
{
    for (size_t i = 0; i < n; i++)
        Py_VISIT(*owned_field(o, at[i]));
    return 0;
}

static inline void clear_owned(PyObject *o, const Py_ssize_t *at, size_t n)
{
    for (size_t i = 0; i < n; i++)
        Py_CLEAR(*owned_field(o, at[i]));
}

/* tp_dealloc of a GC type that holds nothing but its owned references:
 * out of the collector's lists first, so its tp_clear runs on no tracked
 * object. */
static inline void dealloc_owned(PyObject *o)
{
    PyObject_GC_UnTrack(o);
    Py_TYPE(o)->tp_clear(o);
    Py_TYPE(o)->tp_free(o);
}

/* prefix_traverse and prefix_clear, a type's tp_traverse and tp_clear, from
 * its table of owned offsets (a type that owns nothing else) */
#define OWNED_GC_SLOTS(prefix, table)                                       \
    static int prefix##_traverse(PyObject *o, visitproc visit, void *arg)   \
    {                                                                       \
        return visit_owned(o, table, NOWNED(table), visit, arg);            \
    }                                                                       \
    static int prefix##_clear(PyObject *o)                                  \
    {                                                                       \
        clear_owned(o, table, NOWNED(table));                               \
        return 0;                                                           \
    }

/* python.c */
PyObject *call_python(PyObject *fn, PyObject *const *args, size_t nargs);
PyObject *call_method(PyObject *tracker, PyObject *name, PyObject *const *args, size_t nargs);
int attr_true(PyObject *obj, PyObject *name);
PyObject *call0(PyObject *obj, PyObject *name);

/* stacks.c */
void clear_stacks(Dispatcher *d);
uint32_t capture(Dispatcher *d);

/* records.c */
int records_ready(void);
PyObject *new_tensor_rec(PyObject *skey, PyObject *name, uint64_t base, uint64_t ptr,
                         uint64_t nbytes, PyObject *stack_obj);
PyObject *new_storage_rec(uint64_t ptr, uint64_t nbytes, long device, long long epoch,
                          PyObject *skey, uint64_t weak);
int is_tensor_rec(PyObject *o);
int is_storage_rec(PyObject *o);
PyObject *book_filter(Dispatcher *d, int which, int (*is_rec)(PyObject *),
                      int (*keep)(Dispatcher *, PyObject *));
PyObject *record_of(PyObject *by_obj, PyObject *t);
int storage_rec_of(PyObject *storages, PyObject *rec, StorageRec **out);
int record(Dispatcher *d, PyObject *rec, uint64_t *tid);
int record_as(Dispatcher *d, PyObject *rec, const uint64_t *base, uint64_t *tid);
PyObject *saved_stand_in(Dispatcher *d, PyObject *srec, PyObject *name, PyObject *stack_obj,
                         uint64_t said_base);
Py_ssize_t declare_again(Dispatcher *d, Py_ssize_t limit, uint64_t scale);
void clear_pending(TensorRec *r);
int set_name(Dispatcher *d, uint64_t tid, PyObject *label);
int name_record(Dispatcher *d, PyObject *rec, PyObject *label);
int flush(Dispatcher *d);

/* storages.c */
PyObject *new_storage(Dispatcher *d, PyObject *t, PyObject *st, const vt__tensor_facts *f,
                      uint64_t ptr, uint64_t nbytes, PyObject *skey, PyObject *stack_obj);
Py_ssize_t declared_bisect(PyObject *starts, uint64_t ptr);
int declare(Dispatcher *d, PyObject *srec, PyObject *stack_obj);
long long storage_rest(StorageRec *s);
int undeclare(Dispatcher *d, PyObject *srec, PyObject *stack_obj);
int end_storage(Dispatcher *d, PyObject *srec, PyObject *stack_obj);
int orphaned(Dispatcher *d, PyObject *srec, PyObject *stack_obj);
PyObject *storages_to_check(Dispatcher *d);
PyObject *stale_storages(Dispatcher *d, long long threshold, int final, int host_later);
PyObject *shared_storages(Dispatcher *d);
int settle(Dispatcher *d, int all);
int storage_read(Dispatcher *d, const StorageRec *s, uint64_t now[2]);

/* storage_turns.c */
int overlapped(Dispatcher *d, PyObject *srec, PyObject *stack_obj);
int leave_twins(Dispatcher *d, PyObject *srec);
int check_storage(Dispatcher *d, PyObject *srec, PyObject *stack_obj, int force);
int move_tensor(Dispatcher *d, PyObject *rec, PyObject *stack_obj);
int move_tensors(Dispatcher *d, PyObject *srec, PyObject *stack_obj);

/* tensors.c */
/* track()'s ``said_base``: what the trace is told of its base (NULL: its
 * own; record_as()) */
PyObject *track(Dispatcher *d, PyObject *t, const vt__tensor_facts *f, PyObject *name,
                PyObject *stack_obj, PyObject *view_of, int defer, const uint64_t *said_base);
PyObject *tensors_to_check(Dispatcher *d);

/* The TensorImpl of Python tensor ``t`` as torch lays a THPVariable out
 * (torch/csrc/autograd/python_variable.h: its at::Tensor, one pointer, right
 * after the object's head); used only once Dispatcher.read_storages_with
 * found it to be the one torch names (_cdata) for a probe. */
static inline unsigned long long tensor_impl_of(PyObject *t)
{
    void *impl;
    memcpy(&impl, (const char *)t + sizeof(PyObject), sizeof impl);
    return (unsigned long long)(uintptr_t)impl;
}
int name_grad(Dispatcher *d, PyObject *grec, PyObject *label);
PyObject *follow_state(Dispatcher *d, PyObject *state, long long epoch, int timed);
PyObject *follow_grads(Dispatcher *d, long long epoch, PyObject *named, PyObject *param_names,
                       PyObject *model_of);
int forget(Dispatcher *d, PyObject *rec);
int migrate(Dispatcher *d, PyObject *rec, PyObject *stack_obj);
PyObject *reshaped(Dispatcher *d, PyObject *t, PyObject *rec, PyObject *stack_obj);
int drop(Dispatcher *d, PyObject *rec, PyObject *stack_obj);
extern PyTypeObject DeathCallType;   /* a tracked tensor's weakref callback */

/* op_cache.c */
typedef struct OpCache OpCache;
OpCache *op_cache_new(void);
void op_cache_clear(OpCache *c);
int op_cache_traverse(OpCache *c, visitproc visit, void *arg);
/* What an op does besides its outputs (Tracker._meta_of's flags): */
enum {
    OP_RESHAPES = 1,     /* may give a tensor other memory: set_, resize_ */
    OP_WRITES_OUT = 2,   /* writes an `out=` argument (aten.mm.out) */
};
int op_meta(Dispatcher *d, PyObject *func, long *view_arg, int *flags);
PyObject *out_name(Dispatcher *d, PyObject *func, Py_ssize_t i, uint32_t stack,
                   PyObject *stack_obj, int forward);

/* lent.c */
int lent_note(Dispatcher *d, long long seq, uint32_t stack);
uint32_t lent_read(const void *table, uint64_t seq);

/* dispatch.c */
PyObject *dispatch(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs, PyObject *kwnames);
PyObject *observed(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs);
PyObject *engine_op(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs);
PyObject *observed_engine(Dispatcher *d, PyObject *const *argv, Py_ssize_t nargs);
int engine_uses(void *self, void *func, void *const *objs, size_t n, uint32_t stack,
                const uint64_t *pairs, size_t npairs);   /* a vt__engine_uses_fn */

/* A new reference to the books' container ``which`` (BOOK_*). */
static inline PyObject *book(Dispatcher *d, int which)
{
    return Py_NewRef(d->containers[which]);
}

/* gc_schedule.c: hold the collector's count while the tracker works. */
long gc_hold(void);
void gc_release(long saved);
/* inside a hold: ``obj`` (a new reference taken) freed at the next hold */
void gc_free_later(PyObject *obj);
/* inside a hold: the count now, and ``n`` objects made since counted as the
 * program's (PyTorch keeps them for its tensors and storages) */
long gc_held_count(void);
void gc_count_as_program(long n);
/* holds open (0: none) */
int gc_hold_depth(void);
int gc_can_hold(void);
PyObject *py_gc_hold(PyObject *self, PyObject *unused);
PyObject *py_gc_release(PyObject *self, PyObject *token);
PyObject *py_gc_held_count(PyObject *self, PyObject *unused);
PyObject *py_gc_count_as_program(PyObject *self, PyObject *n);

/* gc_schedule.c, with CPython's internal headers: the young generation's
 * count, which paces the collector */
int *gc_young_count(void);
/* gc_reads.c: what the tracker's reading makes for the program's objects.
 * gc_program_read(): a walk begins in this hold; gc_reads_settle(): at the
 * outermost release, still held, how many of the objects made are the
 * program's. */
void gc_program_read(void);
long gc_reads_settle(void);
PyObject *py_gc_program_read(PyObject *self, PyObject *unused);
/* gc_torch_kept_types(types): the kinds of object PyTorch keeps with its
 * C++ objects (autograd nodes, storages), which a walk made for the
 * program (a sequence of types defined in C; -1: a class defined in
 * Python, or more kinds than it holds) */
int gc_torch_kept_types(PyObject *types);
PyObject *py_gc_torch_kept_types(PyObject *self, PyObject *types);
PyObject *py_frame_stack(PyObject *self, PyObject *frame);
PyObject *py_instances_of(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
/* ptr_set.c: a set of object addresses (ptr_set_add: into a set sized for
 * it by ptr_set_init; ptr_set_insert grows it) */
typedef struct {
    PyObject **slots;   /* open addressing, NULL for empty */
    size_t mask, count;
} ptr_set;
size_t ptr_hash(const void *p);
int ptr_set_init(ptr_set *s, Py_ssize_t n);
void ptr_set_free(ptr_set *s);
int ptr_set_has(const ptr_set *s, const void *o);
void ptr_set_add(ptr_set *s, PyObject *o);
int ptr_set_insert(ptr_set *s, PyObject *o);
int ptr_set_remove(ptr_set *s, const void *o);
/* referrers.c: gc.get_referrers(*objects) in one pass, whatever their number */
PyObject *py_referrers_of(PyObject *self, PyObject *objects);
/* ... and every level of a walk from one pass: ReferrerIndex */
extern PyTypeObject ReferrerIndexType;

#endif
