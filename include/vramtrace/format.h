/*
 * vramtrace/format.h - the snapshot file format (.vtsnap).
 *
 * Everything a third-party reader needs to parse a snapshot without linking
 * vramtrace. The constants below are part of the format: their values never
 * change once released; new kinds are only ever appended.
 */
#ifndef VRAMTRACE_FORMAT_H
#define VRAMTRACE_FORMAT_H

#include <stdint.h>

/* ------------------------------------------------------------------------ */
/*  Event kinds                                                             */
/* ------------------------------------------------------------------------ */
/* Field use per kind (fields of one event: seq, time_ns, thread, device,
 * stream, addr, req_size, size, stack, aux, aux2, str):
 *
 *   ALLOC            addr/size of the block handed out, req_size as asked,
 *                    stream = allocating stream, stack = allocation stack
 *   FREE_REQUESTED   addr/size, stream = freeing stream (0 when unknown:
 *                    plain cudaFree), stack = free stack, aux = 1 if the
 *                    block must wait for events (pending) before reuse
 *   FREE_COMPLETED   addr/size: the block became reusable (pending events done)
 *   SEGMENT_ALLOC    addr/size of a backend allocation (cudaMalloc/cuMemAlloc)
 *                    aux = pool (VT_POOL_*)
 *   SEGMENT_FREE     addr/size of a backend free
 *   STREAM_USE       addr = block, stream = the extra stream (vt_record_stream)
 *   OOM              req_size = request, aux = bytes free on the device,
 *                    aux2 = bytes reserved by the cache
 *   MARK             str = label
 *   BAD_FREE         addr = the pointer, aux = VT_BAD_FREE_* reason
 *   PASSTHROUGH      addr/size of a call not cached (managed, host, VMM),
 *                    aux = VT_PASS_* which call, aux2 = 1 for the release
 *   TENSOR_NEW       aux = tensor id, aux2 = base tensor id (0: none),
 *                    addr = data_ptr, size = nbytes, str = name
 *   TENSOR_USE       aux = tensor id, stack = stack of the use
 *   TENSOR_DROP      aux = tensor id
 *   STORAGE_EXTERNAL addr/size, device: a storage vramtrace did not allocate
 *   STORAGE_EXTERNAL_FREE addr
 *   HOLDER_NEW       aux = holder id, str = name
 *   REF              aux = from id, aux2 = to id, str = label
 *   UNREF            aux = from id, aux2 = to id
 *   FINDING          reserved for checker findings embedded in a snapshot
 */
enum vt_event_kind {
    VT_EV_ALLOC = 1,
    VT_EV_FREE_REQUESTED = 2,
    VT_EV_FREE_COMPLETED = 3,
    VT_EV_SEGMENT_ALLOC = 4,
    VT_EV_SEGMENT_FREE = 5,
    VT_EV_STREAM_USE = 6,
    VT_EV_OOM = 7,
    VT_EV_MARK = 8,
    VT_EV_BAD_FREE = 9,
    VT_EV_PASSTHROUGH = 10,
    /* 11..15 reserved for allocator events */
    VT_EV_TENSOR_NEW = 16,
    VT_EV_TENSOR_USE = 17,
    VT_EV_TENSOR_DROP = 18,
    VT_EV_STORAGE_EXTERNAL = 19,
    VT_EV_STORAGE_EXTERNAL_FREE = 20,
    VT_EV_HOLDER_NEW = 21,
    VT_EV_REF = 22,
    VT_EV_UNREF = 23,
    VT_EV_FINDING = 24,
    VT_EV_KIND_COUNT
};

/* Pools a block or segment belongs to. */
enum vt_pool {
    VT_POOL_SMALL = 0,       /* requests <= 1 MiB, 2 MiB segments */
    VT_POOL_LARGE = 1,       /* larger requests */
    VT_POOL_UNCACHED = 2,    /* cache:0 pass-through allocations */
};

/* States of a block in the allocator-state section (as PyTorch names them). */
enum vt_block_state {
    VT_BLOCK_ACTIVE_ALLOCATED = 0,    /* handed out to the program */
    VT_BLOCK_ACTIVE_PENDING_FREE = 1, /* freed, waiting for stream events */
    VT_BLOCK_INACTIVE = 2,            /* free in the cache */
};

/* Reasons of a BAD_FREE event. */
enum vt_bad_free_reason {
    VT_BAD_FREE_UNKNOWN_POINTER = 1,  /* never allocated by anyone we know */
    VT_BAD_FREE_INTERIOR = 2,         /* points inside a block, not at its start */
    VT_BAD_FREE_DOUBLE = 3,           /* the block is already free */
};

/* Calls seen but not cached (PASSTHROUGH aux). */
enum vt_passthrough_call {
    VT_PASS_MANAGED = 1,          /* cudaMallocManaged / cuMemAllocManaged */
    VT_PASS_HOST = 2,             /* cudaMallocHost / cuMemAllocHost */
    VT_PASS_FROM_POOL = 3,        /* cudaMallocFromPoolAsync */
    VT_PASS_VMM_CREATE = 4,       /* cuMemCreate / cuMemRelease */
    VT_PASS_VMM_MAP = 5,          /* cuMemMap / cuMemUnmap */
    VT_PASS_FOREIGN_FREE = 6,     /* a free of a pointer the cache does not own */
};

/* ------------------------------------------------------------------------ */
/*  File layout                                                             */
/* ------------------------------------------------------------------------ */
/* @@FILE-LAYOUT@@ (owned by the format engineer: magic, version and
 * compatibility rule, header, section table, section encodings) */

#endif /* VRAMTRACE_FORMAT_H */
