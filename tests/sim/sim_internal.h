/* tests/sim/sim_internal.h - the simulated driver's types and cross-file map.
 *
 * All device state lives in libcuda.so.1 (the driver). The runtime
 * (libcudart) never includes this header: it reaches the driver only through
 * cuGetProcAddress, like the real one.
 *
 * Locking, in the order they may nest:
 *   sim_device.lock       streams, events, contexts of one device, and the
 *                         `progress` condition every waiter sleeps on
 *   sim_device.mem_lock   the address-range allocator of one device
 *   (sim_ipc.c)           open_lock before mem_lock; ipc_lock under mem_lock
 * A thread never holds two device locks at once: cross-device waits take the
 * other device's lock alone.
 */
#ifndef VT_SIM_INTERNAL_H
#define VT_SIM_INTERNAL_H

#include <cuda.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "simcuda.h"

#define SIM_API __attribute__((visibility("default")))
#define sim_unlikely(x) __builtin_expect(!!(x), 0)
#define sim_likely(x)   __builtin_expect(!!(x), 1)

/* Returns from the calling entry point with the driver error of `call`, if
 * any (zstd's FORWARD_IF_ERROR): the checks every entry point makes in
 * order (initialised, context, handle, arguments) read as one line each. */
#define SIM_TRY(call)                                 \
    do {                                              \
        CUresult sim_try_rc_ = (call);                \
        if (sim_unlikely(sim_try_rc_ != CUDA_SUCCESS)) \
            return sim_try_rc_;                       \
    } while (0)

#define SIM_MAX_DEVICES   16
#define SIM_DRIVER_VERSION 13000         /* cuDriverGetVersion */
#define SIM_GRANULE       4096u          /* address carving unit: a page, so
                                            decommit never hits a neighbour */
#define SIM_VMM_GRANULE   (2u << 20)     /* cuMemGetAllocationGranularity */
#define SIM_PAGE          (2u << 20)     /* device memory is consumed in pages of
                                            this size (sim_memory.c, "Footprint") */
#define SIM_SMALL_MAX     (1u << 20)     /* cuMemAlloc up to this size shares pages */
#define SIM_SMALL_UNIT    512u           /* ... in units of this size (a guess) */
#define SIM_POOL_CHUNK    (32u << 20)    /* a memory pool reserves chunks of this size */

#define SIM_MAGIC_STREAM  0x5354524du    /* 'STRM' */
#define SIM_MAGIC_DEAD_STREAM 0x44454144u /* 'DEAD': released, kept as a tombstone */
#define SIM_MAGIC_EVENT   0x45564e54u    /* 'EVNT' */
#define SIM_MAGIC_CTX     0x43545854u    /* 'CTXT' */

typedef struct sim_device sim_device;
typedef struct sim_stream sim_stream;
typedef struct sim_event  sim_event;
typedef struct sim_ctx    sim_ctx;
typedef struct sim_graph  sim_graph;

/* ---- memory (sim_memory.c) ---------------------------------------------- */

typedef enum sim_mem_kind {
    SIM_MEM_DEVICE = 1,                  /* cuMemAlloc */
    SIM_MEM_ASYNC,                       /* cuMemAllocAsync */
    SIM_MEM_MANAGED,                     /* cuMemAllocManaged */
    SIM_MEM_VA,                          /* cuMemAddressReserve: never committed */
    SIM_MEM_IPC,                         /* cuIpcOpenMemHandle: another process's
                                            allocation mapped here (sim_ipc.c);
                                            not counted against capacity */
} sim_mem_kind;

typedef struct sim_block {
    uintptr_t         addr;              /* start, SIM_GRANULE aligned */
    size_t            span;              /* bytes of address range, granules */
    size_t            req;               /* bytes asked for (bytes_in_use counts these) */
    size_t            charge;            /* bytes of capacity it takes: its own pages,
                                            or (small) its share of the shared pages */
    struct sim_block *prev_phys;         /* address-order neighbours, for coalescing */
    struct sim_block *next_phys;
    struct sim_block *prev_free;         /* size-class list, while free */
    struct sim_block *next_free;
    uint8_t           is_free;
    uint8_t           kind;              /* sim_mem_kind while used */
    uint8_t           free_pending;      /* a stream-ordered free is queued */
    uint8_t           small;             /* charge is in shared memory: 1 the small
                                            pages, 2 a pool's chunks (sim_memory.c) */
    uint8_t           graph;             /* a graph's allocation (sim_graph.c) */
    uint8_t           unlaunched;        /* graph allocation no launch has made yet */
    uint8_t           parked;            /* graph allocation freed by the program: the
                                            range stays the graph's, uncommitted and
                                            uncharged, until a launch allocates it again */
    uint8_t           stale_frees;       /* queued frees that a relaunch overtook: they
                                            free the previous launch's memory, which the
                                            relaunch made its own again: no-ops */
    uint64_t          ipc_id;            /* exported (cuIpcGetMemHandle): its pages are
                                            the shared file of this id; 0: private */
} sim_block;

#define SIM_FL_COUNT 48
#define SIM_SL_COUNT 16

typedef struct sim_heap {
    uintptr_t   base;                    /* reserved range [base, base+size) */
    size_t      size;
    sim_block  *free_heads[SIM_FL_COUNT][SIM_SL_COUNT];
    uint64_t    fl_bitmap;
    uint32_t    sl_bitmap[SIM_FL_COUNT];
    void       *used_tree;               /* tsearch tree of used blocks, by range */
} sim_heap;

/* ---- streams and work (sim_stream.c) ------------------------------------ */

typedef enum sim_op_type {
    SIM_OP_NOP = 0,                      /* carries only dependencies (stream wait) */
    SIM_OP_MEMCPY,
    SIM_OP_MEMSET,
    SIM_OP_HOSTFN,
    SIM_OP_EVENT_RECORD,
    SIM_OP_KERNEL,                       /* device code cannot run: a no-op in order */
    SIM_OP_FREE,                         /* stream-ordered free */
    SIM_OP_IPC_WAIT,                     /* waits for another process's record of an
                                            interprocess event (sim_ipc_event.c) */
} sim_op_type;

typedef struct sim_dep {
    sim_stream *stream;                  /* holds a reference */
    uint64_t    seq;                     /* wait until stream->completed >= seq */
} sim_dep;

typedef struct sim_op {
    struct sim_op *next;
    uint64_t       seq;
    sim_op_type    type;
    int            ndeps;
    int            cap_deps;
    sim_dep       *deps;
    sim_dep        dep_inline[2];        /* most ops need at most two */
    union {
        struct { void *dst; const void *src; size_t n;
                 void *staged; } copy;   /* staged: our copy of a pageable
                                            source, freed with the op */
        struct { void *dst; unsigned value; unsigned width;
                 size_t n; } set;        /* n elements of width (1 or 4) bytes */
        struct { CUhostFn fn; void *arg; } host;
        struct { sim_event *ev; uint64_t gen;
                 uint64_t ipc_gen; } rec;  /* ipc_gen: its number among the records
                                            of an interprocess event, 0: none */
        struct { sim_event *ev; uint64_t gen; } ipc_wait; /* until record gen is done */
        struct { uintptr_t ptr; sim_device *dev; } free;
    } u;
} sim_op;

typedef enum sim_stream_kind {
    SIM_STREAM_USER = 0,
    SIM_STREAM_LEGACY,                   /* handle 0 / CU_STREAM_LEGACY */
    SIM_STREAM_PER_THREAD,               /* CU_STREAM_PER_THREAD, or 0 in _ptsz calls */
} sim_stream_kind;

struct sim_stream {
    uint32_t        magic;
    sim_stream_kind kind;
    sim_device     *dev;
    unsigned        flags;               /* CU_STREAM_NON_BLOCKING ... */
    int             priority;
    atomic_int      refs;                /* handle + worker + deps + event records */
    /* under dev->lock: */
    sim_op         *head, *tail;         /* queue; head stays until it completes */
    uint64_t        submitted;           /* seq of the last op enqueued */
    uint64_t        completed;           /* seq of the last op finished */
    bool            destroyed;           /* handle gone: drain then exit */
    bool            inline_busy;         /* a synchronous op runs on the caller */
    pthread_cond_t  wake;                /* worker sleeps here */
    pthread_t       thread;
    sim_stream     *prev_live, *next_live; /* dev->streams, until the worker exits */
    sim_stream     *next_dead;           /* graveyard link, once released */
    sim_graph      *capture;             /* under dev->lock: the graph its work is
                                            captured into (sim_graph.c), or NULL */
};

/* ---- events (sim_event.c) ----------------------------------------------- */

struct sim_event {
    uint32_t     magic;
    unsigned     flags;                  /* CU_EVENT_DISABLE_TIMING ... */
    sim_device  *dev;
    atomic_int   refs;                   /* handle + pending record ops */
    /* under dev->lock: */
    bool         recorded;
    uint64_t     gen;                    /* bumped by every record */
    sim_stream  *rec_stream;             /* holds a reference while set */
    uint64_t     rec_seq;
    uint64_t     time_ns;                /* CLOCK_MONOTONIC at completion */
    bool         time_valid;
    uint64_t     captured_id;            /* last recorded in this capture (0: not) */
    /* CU_EVENT_INTERPROCESS: the records of every process that has it open,
     * counted in a shared file (sim_ipc_event.c); its state is read there */
    struct sim_ipc_event_state *ipc;
    int32_t      ipc_pid;                /* the process that made it */
    uint64_t     ipc_id;                 /* its export id there */
};

/* ---- contexts and devices (sim_device.c) -------------------------------- */

struct sim_ctx {
    uint32_t     magic;
    sim_device  *dev;
    atomic_int   retains;                /* cuDevicePrimaryCtxRetain count */
    unsigned     flags;
    atomic_bool  reset;                  /* cuDevicePrimaryCtxReset destroyed it: calls
                                            in it fail (CONTEXT_IS_DESTROYED) until the
                                            next cuDevicePrimaryCtxRetain */
};

struct sim_device {
    int               ordinal;
    size_t            capacity;          /* SIMCUDA_MEM */
    pthread_mutex_t   lock;
    pthread_cond_t    progress;          /* broadcast whenever any op completes */
    sim_stream       *streams;           /* live + draining streams */
    sim_stream       *legacy;            /* created with the device */
    atomic_long       inflight;          /* ops enqueued, not completed: 0 = idle */
    sim_ctx           primary;
    pthread_mutex_t   mem_lock;
    sim_heap          heap;
    size_t            used;              /* under mem_lock: bytes asked for (bytes_in_use) */
    size_t            peak;
    size_t            footprint;         /* under mem_lock: capacity taken, in pages */
    size_t            small_bytes;       /* under mem_lock: small allocations' charges */
    size_t            pool_bytes;        /* under mem_lock: pool allocations' charges */
    simcuda_counters  stats;             /* fields updated with relaxed atomics */
    atomic_int        fault;             /* sticky error of the context (device work
                                            hit unmapped memory: sim_vmm.c); every
                                            later sync and enqueue returns it, until
                                            the primary context is reset */
};

extern sim_device  sim_devices[SIM_MAX_DEVICES];
extern int         sim_device_count;
extern atomic_bool sim_initialized;

#define SIM_COUNT(dev, field) \
    __atomic_fetch_add(&(dev)->stats.field, 1, __ATOMIC_RELAXED)

/* ---- cross-file prototypes ---------------------------------------------- */

/* sim_device.c */
CUresult sim_check_init(void);
CUresult sim_current_ctx(sim_ctx **out);     /* CUDA_ERROR_INVALID_CONTEXT if none */
sim_device *sim_device_get(int ordinal);     /* NULL if out of range */
void sim_device_reset(sim_device *dev);

/* sim_memory.c */
int  sim_heap_init(sim_device *dev);
CUresult sim_mem_alloc(sim_device *dev, size_t bytes, sim_mem_kind kind, uintptr_t *out);
CUresult sim_mem_alloc_aligned(sim_device *dev, size_t bytes, size_t align,
                               sim_mem_kind kind, uintptr_t *out);
typedef enum sim_free_mode {
    SIM_FREE_PLAIN,                      /* cuMemFree */
    SIM_FREE_QUEUED,                     /* the op a cuMemFreeAsync queued */
    SIM_FREE_VA,                         /* cuMemAddressFree */
    SIM_FREE_IPC,                        /* cuIpcCloseMemHandle */
} sim_free_mode;
CUresult sim_mem_free(sim_device *dev, uintptr_t ptr, sim_free_mode mode);
CUresult sim_mem_charge(sim_device *dev, size_t bytes);
void sim_mem_uncharge(sim_device *dev, size_t bytes);
CUresult sim_mem_mark_free_pending(sim_device *dev, uintptr_t ptr);
/* Graph allocations (sim_graph.c): flag ptr as the graph's; make a parked
 * one live again (or, if live, count its queued free as stale: a relaunch
 * with auto-free); release it for good when the graph goes (live ones stay
 * the program's). is_live: allocated and not freed by the program. */
void     sim_mem_graph_mark(sim_device *dev, uintptr_t ptr);
bool     sim_mem_graph_is_live(sim_device *dev, uintptr_t ptr);
CUresult sim_mem_graph_revive(sim_device *dev, uintptr_t ptr);
void     sim_mem_graph_drop(sim_device *dev, uintptr_t ptr);
bool     sim_mem_is_graph(uintptr_t ptr);
bool     sim_mem_is_unlaunched_graph(uintptr_t ptr);
/* A stream-ordered allocation cudaDeviceReset released: its free is
 * accepted once afterwards (sim_memory.c). */
bool     sim_mem_reset_orphan_take(sim_device *dev, uintptr_t ptr);
CUresult sim_mem_lookup(uintptr_t ptr, sim_device **dev_out, uintptr_t *base,
                        size_t *size, sim_mem_kind *kind);
sim_device *sim_mem_owner(uintptr_t ptr);    /* device whose range holds ptr, or NULL */
bool sim_mem_is_async(sim_device *dev, uintptr_t ptr);
void sim_mem_release_all(sim_device *dev);
void sim_mem_info(sim_device *dev, size_t *free_b, size_t *total_b);
int  sim_mem_host_track(void *p, size_t n, bool add);  /* pinned host allocations */
bool sim_mem_host_lookup(const void *p, void **base, size_t *size);
CUresult sim_mem_host_register(void *p, size_t n, bool add); /* cuMemHostRegister ranges */
/* The cuMemAlloc allocation holding ptr, made shareable (its pages become a
 * shared file, contents kept; once per allocation): its base, size, span
 * and export id. CUDA_ERROR_INVALID_VALUE for memory legacy IPC refuses. */
CUresult sim_mem_share(uintptr_t ptr, int *ordinal, uintptr_t *base, size_t *size,
                       size_t *span, uint64_t *id);
/* Map `span` bytes of open file `fd` at a fresh range of dev (kind
 * SIM_MEM_IPC, `size` bytes as its size). */
CUresult sim_mem_map_shared(sim_device *dev, int fd, size_t size, size_t span, uintptr_t *out);

/* sim_vmm.c */
/* The cuMemMap mapping holding ptr (one handle's pages), or CUDA_ERROR_NOT_FOUND. */
CUresult sim_vmm_mapping_range(uintptr_t ptr, uintptr_t *base, size_t *size);
/* A stream's memset or copy of n bytes to dst (from src, or NULL), as it
 * runs. cuMemUnmap does not wait for work still queued on the memory (an
 * H200, driver 580.159.04, 2026-12-04: tests/gpucheck's fact
 * unmap_while_queued), so the work checks its memory now: where it lies in
 * an address reservation every byte must be mapped and accessible, else it
 * faults (SIM_VMM_WORK_FAULT: the caller sets the device's sticky error and
 * skips the work). LOCKED: vmm_lock is held until sim_vmm_work_end, so an
 * unmap cannot take the pages away mid-copy (the sim's worker would crash
 * where a GPU reads freed memory). */
typedef enum sim_vmm_work {
    SIM_VMM_WORK_PLAIN,                  /* no reserved memory involved */
    SIM_VMM_WORK_LOCKED,
    SIM_VMM_WORK_FAULT,
} sim_vmm_work;
sim_vmm_work sim_vmm_work_begin(const void *dst, const void *src, size_t n);
void         sim_vmm_work_end(sim_vmm_work w);

/* sim_ipc.c */
uint64_t sim_ipc_new_id(void);               /* an export id unique in this process */
int      sim_ipc_create(uint64_t id);        /* the file of export id: fd, or -1 */
void     sim_ipc_remove(uint64_t id);        /* the export's file goes (its memory was freed) */

int      sim_ipc_open(int32_t pid, uint64_t id); /* another process's export file: fd, or -1 */

/* sim_ipc_event.c: interprocess events. Every record of one, in any process,
 * takes the next number of its shared count; its state is whether the
 * last record taken by the time of the call has completed. */
CUresult sim_ipc_event_init(sim_event *ev);         /* cuEventCreate: its shared state */
void     sim_ipc_event_fini(sim_event *ev);         /* its last reference went */
uint64_t sim_ipc_event_record(sim_event *ev);       /* a record's number */
void     sim_ipc_event_done(sim_event *ev, uint64_t gen); /* that record completed */
uint64_t sim_ipc_event_last(sim_event *ev);         /* the last record's number */
bool     sim_ipc_event_reached(sim_event *ev, uint64_t gen); /* record gen completed */
void     sim_ipc_event_wait(sim_event *ev, uint64_t gen);    /* until it is */

/* sim_stream.c */
CUresult sim_stream_resolve(CUstream h, bool ptsz, sim_stream **out); /* checks init */
/* sim_stream_resolve, then CUDA_ERROR_INVALID_VALUE unless `args_ok`: the
 * order of the checks of an entry point that takes a stream first. */
CUresult sim_stream_arg(CUstream h, bool ptsz, bool args_ok, sim_stream **out);
CUresult sim_stream_create(sim_device *dev, unsigned flags, int priority,
                           sim_stream_kind kind, sim_stream **out);
CUresult sim_stream_destroy(sim_stream *s);
void     sim_stream_ref(sim_stream *s);
void     sim_stream_unref(sim_stream *s);
sim_op  *sim_op_new(sim_op_type type);
void     sim_op_free(sim_op *op);
int      sim_op_add_dep(sim_op *op, sim_stream *s, uint64_t seq); /* takes a ref */
CUresult sim_stream_enqueue(sim_stream *s, sim_op *op, uint64_t *seq_out);
CUresult sim_stream_run_sync(sim_stream *s, sim_op *op);
void     sim_stream_wait(sim_stream *s, uint64_t seq);
CUresult sim_stream_sync(sim_stream *s);
CUresult sim_stream_query(sim_stream *s);
void     sim_device_sync(sim_device *dev);
/* The device's sticky error (device work hit unmapped memory), or 0. */
CUresult sim_device_fault(const sim_device *dev);
void     sim_device_destroy_user_streams(sim_device *dev);
uint64_t sim_now_ns(void);

/* sim_graph.c (called with dev->lock held) */
CUresult sim_graph_capture_op(sim_graph *g, sim_op *op);   /* takes op */
sim_graph *sim_graph_active(sim_device *dev, uint64_t capture_id); /* NULL if ended */
uint64_t sim_graph_capture_id(const sim_graph *g);
bool     sim_graph_invalidate_if_capturing(sim_stream *s);  /* true if s was capturing */
void     sim_graph_invalidate_locked(sim_graph *g);
bool     sim_graph_note_alloc(sim_stream *s, uintptr_t p);  /* (no lock held) */
bool     sim_graph_is_capturing(sim_stream *s);             /* (no lock held) */
/* CUDA_ERROR_STREAM_CAPTURE_INVALIDATED if s captures into an invalidated
 * capture: every stream call then fails so (no lock held). */
CUresult sim_graph_capture_state(sim_stream *s);
/* A potentially unsafe call (cuMemAlloc, cuMemFree, synchronizing calls...)
 * checks this first: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and the captures
 * that forbid it invalidated, if the capture rules forbid it now. */
CUresult sim_capture_unsafe_call(void);
/* cuCtxSynchronize: CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, every capture of
 * dev invalidated, if dev has any (relaxed ones too). */
CUresult sim_capture_device_sync(sim_device *dev);

/* sim_event.c */
void sim_event_record_done(sim_event *ev, uint64_t gen, uint64_t ipc_gen); /* by workers */
void sim_event_unref(sim_event *ev);

/* driver_procaddr.c */
CUresult sim_procaddr_lookup(const char *symbol, void **pfn, int cuda_version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult *status);

/* Exported symbols the public header hides behind macros or the
 * per-thread-stream build: declared here so the definitions have prototypes. */
#undef cuGetProcAddress
#undef cuEventElapsedTime
CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags);
CUresult cuEventElapsedTime(float *pMilliseconds, CUevent hStart, CUevent hEnd);
CUresult cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n);
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void *src, size_t n, CUstream h);
CUresult cuMemcpyDtoHAsync_v2_ptsz(void *dst, CUdeviceptr src, size_t n, CUstream h);
CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream h);
CUresult cuMemsetD8_v2_ptds(CUdeviceptr dst, unsigned char uc, size_t n);
CUresult cuMemsetD8Async_ptsz(CUdeviceptr dst, unsigned char uc, size_t n, CUstream h);
CUresult cuMemsetD32_v2_ptds(CUdeviceptr dst, unsigned int ui, size_t n);
CUresult cuMemsetD32Async_ptsz(CUdeviceptr dst, unsigned int ui, size_t n, CUstream h);
CUresult cuStreamWriteValue32_v2_ptsz(CUstream h, CUdeviceptr addr, cuuint32_t value, unsigned int flags);
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t bytesize, CUstream h);
CUresult cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream h);
CUresult cuStreamSynchronize_ptsz(CUstream h);
CUresult cuStreamQuery_ptsz(CUstream h);
CUresult cuStreamWaitEvent_ptsz(CUstream h, CUevent ev, unsigned int flags);
CUresult cuEventRecord_ptsz(CUevent ev, CUstream h);
CUresult cuEventRecordWithFlags_ptsz(CUevent ev, CUstream h, unsigned int flags);
CUresult cuLaunchHostFunc_ptsz(CUstream h, CUhostFn fn, void *userData);
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                             unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                             CUstream h, void **params, void **extra);
CUresult cuLaunchKernelEx_ptsz(const CUlaunchConfig *config, CUfunction f, void **params,
                               void **extra);
CUresult cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                                        unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                                        CUstream h, void **params);
CUresult cuStreamGetPriority_ptsz(CUstream h, int *priority);
CUresult cuStreamGetFlags_ptsz(CUstream h, unsigned int *flags);
CUresult cuStreamGetCtx_ptsz(CUstream h, CUcontext *pctx);
CUresult cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext *pctx, CUgreenCtx *pgreen);
CUresult cuStreamGetDevice_ptsz(CUstream h, CUdevice *dev);
CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s);
CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                                    CUstream s);
CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned int flags);
CUresult cuStreamBeginCapture_v2_ptsz(CUstream h, CUstreamCaptureMode m);
CUresult cuStreamEndCapture_ptsz(CUstream h, CUgraph *g);
CUresult cuStreamIsCapturing_ptsz(CUstream h, CUstreamCaptureStatus *st);
CUresult cuStreamGetCaptureInfo_v3_ptsz(CUstream h, CUstreamCaptureStatus *st, cuuint64_t *id,
                                        CUgraph *g, const CUgraphNode **d,
                                        const CUgraphEdgeData **e, size_t *n);
CUresult cuGraphLaunch_ptsz(CUgraphExec h, CUstream s);

#endif /* VT_SIM_INTERNAL_H */
