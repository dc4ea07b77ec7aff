/*
 * trace/snap/passthrough.h - memory the program holds that the cache did not
 * serve: managed memory, pinned host memory (allocated or registered),
 * pitched allocations, arrays, allocations from an explicit pool, VMM
 * physical allocations, graph memory (stream-ordered allocations captured
 * into a graph). The hooks record each as a PASSTHROUGH event (aux =
 * the call, VT_PASS_*; aux2 = 1 for its release). Every view shows them as
 * kinds of their own, apart from the cache's allocated/reserved figures.
 *
 * Matching: a PASSTHROUGH allocation opens an allocation at its addr; the
 * next PASSTHROUGH release at that addr closes it, whichever call released
 * it (cudaFree of a pitched or managed pointer is recorded as
 * VT_PASS_FOREIGN_FREE). Mappings (VT_PASS_VMM_MAP) are not memory of their
 * own (cuMemCreate counts it) and are skipped. A release with nothing open
 * at its addr was allocated before the kept events: nothing is known of its
 * size, so it is not shown. The allocator-state section does not hold these
 * allocations: one without a release among the kept events is alive.
 */
#ifndef VT_TRACE_PASSTHROUGH_H
#define VT_TRACE_PASSTHROUGH_H

#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"
#include "u64map.h"

/* What the views call each kind (one name per VT_PASS_* allocation call). */
enum vt__passthrough_kind {
    VT_PTK_MANAGED = 0,        /* cudaMallocManaged / cuMemAllocManaged */
    VT_PTK_PINNED_HOST,        /* cudaMallocHost, cudaHostAlloc, cuMemHostRegister */
    VT_PTK_PITCHED,            /* cudaMallocPitch, cudaMalloc3D */
    VT_PTK_ARRAY,              /* cudaMallocArray, cudaMalloc3DArray */
    VT_PTK_POOL,               /* cudaMallocFromPoolAsync from an explicit pool */
    VT_PTK_VMM,                /* cuMemCreate physical memory */
    VT_PTK_GRAPH,              /* stream-ordered allocation during capture: graph memory */
    VT_PTK_OTHER,              /* a call of a newer format minor */
    VT_PTK_COUNT
};

typedef struct vt__passthrough {
    uint64_t addr;            /* pointer (an array: its handle; VMM: the handle) */
    uint64_t size;            /* bytes as recorded */
    uint64_t stream;          /* stream of a pool allocation, else 0 */
    uint64_t alloc_seq, alloc_time_ns;
    uint64_t free_seq, free_time_ns;   /* 0 while alive */
    uint32_t alloc_stack, free_stack;
    uint32_t alloc_event;     /* index into s->events */
    uint32_t free_event;      /* UINT32_MAX while alive */
    uint8_t  call;            /* VT_PASS_* of the allocation */
    uint8_t  kind;            /* enum vt__passthrough_kind */
    uint8_t  alive;           /* not released among the kept events */
    uint8_t  inherited;       /* allocated before the last FORK event: the parent's */
    int8_t   device;
} vt__passthrough;

/* Kind of a VT_PASS_* allocation call (VT_PTK_OTHER for unknown ones). */
enum vt__passthrough_kind vt__passthrough_kind_of(unsigned call);

/* "managed", "pinned host", "pitched", "array", "pool", "vmm", "graph", "other". */
const char *vt__passthrough_kind_name(enum vt__passthrough_kind k);

/* Is a kind host memory (pinned host) rather than device memory? */
int vt__passthrough_kind_is_host(enum vt__passthrough_kind k);

/* Match the PASSTHROUGH events of `s` into allocations, in allocation order.
 * fork_seq: seq of the last FORK event (0: none).
 * @return 0 and *out (free()), *n; -ENOMEM. */
int vt__passthrough_build(const vt__snapshot_data *s, uint64_t fork_seq, vt__passthrough **out, size_t *n);

/* The same matching for events read one at a time (event_stream.h): each
 * event noted in order (index i), then the allocations taken, in allocation
 * order, with the last FORK's seq known by then. note: 0 or -ENOMEM (the
 * matcher then still to be discarded). */
typedef struct vt__passthrough_matcher {
    vt__u64map open;          /* addr -> the allocation open there */
    vt__passthrough *v;
    size_t n, cap;
} vt__passthrough_matcher;
int vt__passthrough_note(vt__passthrough_matcher *um, const vt__event *e, uint32_t i);
/* *out (free()) and *n; the matcher is left empty. */
void vt__passthrough_finish(vt__passthrough_matcher *um, uint64_t fork_seq, vt__passthrough **out, size_t *n);
void vt__passthrough_discard(vt__passthrough_matcher *um);

#endif /* VT_TRACE_PASSTHROUGH_H */
