/* tests/sim/driver_memory.c - driver entry points for memory: allocation,
 * copies, sets, pointer queries.
 *
 * Synchronisation follows the CUDA documentation ("API synchronization
 * behavior"): cuMemFree waits for the whole device unless the pointer came
 * from cuMemAllocAsync; synchronous copies to or from the host return when
 * the copy is done; device-to-device copies and memsets on device memory are
 * asynchronous with respect to the host, ordered on the default stream;
 * asynchronous copies involving pageable host memory are not (copy_async).
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

/* ---- allocation --------------------------------------------------------- */

/* The common tail of every allocation call, after it has been counted. */
static CUresult alloc_out(sim_device *dev, CUdeviceptr *dptr, size_t bytesize, sim_mem_kind kind)
{
    if (!dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    CUresult rc = sim_mem_alloc(dev, bytesize, kind, &p);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)p;
    return rc;
}

/* The device that owns a pointer being freed, into *owner; if no device
 * does, CUDA_ERROR_INVALID_VALUE and a bad free counted on the caller's. */
static CUresult free_owner(sim_device *caller, CUdeviceptr dptr, sim_device **owner)
{
    *owner = sim_mem_owner((uintptr_t)dptr);
    if (*owner)
        return CUDA_SUCCESS;
    SIM_COUNT(caller, bad_frees);
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    SIM_TRY(sim_capture_unsafe_call());
    SIM_COUNT(c->dev, mem_alloc_calls);
    return alloc_out(c->dev, dptr, bytesize, SIM_MEM_DEVICE);
}

SIM_API CUresult cuMemAllocManaged(CUdeviceptr *dptr, size_t bytesize, unsigned int flags)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    SIM_TRY(sim_capture_unsafe_call());
    SIM_COUNT(c->dev, mem_alloc_managed_calls);
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)
        return CUDA_ERROR_INVALID_VALUE;
    return alloc_out(c->dev, dptr, bytesize, SIM_MEM_MANAGED);
}

/* No context needed: the H200 freed a valid pointer with none current and
 * refused a second free of it with CUDA_ERROR_INVALID_VALUE (fact
 * no_context_calls); the counts then go to the owning device. */
SIM_API CUresult cuMemFree_v2(CUdeviceptr dptr)
{
    SIM_TRY(sim_check_init());
    sim_ctx *c = NULL;
    sim_device *caller = sim_current_ctx(&c) == CUDA_SUCCESS ? c->dev : sim_mem_owner((uintptr_t)dptr);
    SIM_TRY(sim_capture_unsafe_call());
    if (!caller)
        return dptr == 0 ? CUDA_ERROR_INVALID_CONTEXT : CUDA_ERROR_INVALID_VALUE;
    SIM_COUNT(caller, mem_free_calls);
    if (dptr == 0)
        return CUDA_SUCCESS;
    /* A stream-ordered allocation a cudaDeviceReset released: a plain free
     * is accepted too (H200: prog_misc reset, cudaFree of the old
     * stream-ordered pointer returned 0). */
    if (sim_mem_reset_orphan_take(caller, (uintptr_t)dptr))
        return CUDA_SUCCESS;
    sim_device *dev;
    SIM_TRY(free_owner(caller, dptr, &dev));
    /* Stream-ordered allocations are freed without a device-wide wait. */
    if (atomic_load_explicit(&dev->inflight, memory_order_relaxed) != 0 &&
        !sim_mem_is_async(dev, (uintptr_t)dptr)) {
        SIM_COUNT(dev, device_syncs);
        sim_device_sync(dev);
    }
    return sim_mem_free(dev, (uintptr_t)dptr, SIM_FREE_PLAIN);
}

/* What an async memory call checks on its stream s once it is counted:
 * the stream's capture state and, outside a capture, the call as a
 * potentially unsafe one (seen on an H200). @return CUDA_SUCCESS, with
 * *capturing: whether s is capturing; else the call's error. */
static CUresult async_call_checks(sim_stream *s, bool *capturing)
{
    SIM_TRY(sim_graph_capture_state(s));
    *capturing = sim_graph_is_capturing(s);
    if (!*capturing)
        SIM_TRY(sim_capture_unsafe_call());
    return CUDA_SUCCESS;
}

static CUresult alloc_async(CUdeviceptr *dptr, size_t bytesize, CUstream h, bool ptsz)
{
    sim_stream *s;
    bool capturing;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    SIM_COUNT(s->dev, mem_alloc_async_calls);
    SIM_TRY(async_call_checks(s, &capturing));
    /* Simplified pool: the memory is taken now. Being unused until the
     * stream reaches this point is indistinguishable from being taken then.
     * On a capturing stream it is a graph memory node (sim_graph.c). */
    CUresult rc = alloc_out(s->dev, dptr, bytesize, SIM_MEM_ASYNC);
    if (rc == CUDA_SUCCESS)
        sim_graph_note_alloc(s, (uintptr_t)*dptr);
    return rc;
}

static CUresult free_async(CUdeviceptr dptr, CUstream h, bool ptsz)
{
    sim_stream *s;
    bool capturing;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    SIM_COUNT(s->dev, mem_free_async_calls);
    SIM_TRY(async_call_checks(s, &capturing));
    if (dptr == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device *dev;
    SIM_TRY(free_owner(s->dev, dptr, &dev));
    /* On a capturing stream only a graph's allocation can be freed (a free
     * node); anything else is refused and the capture goes on (seen on an
     * H200: sim_graph.c). */
    if (capturing && !sim_mem_is_graph((uintptr_t)dptr)) {
        SIM_COUNT(dev, bad_frees);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* A graph's allocation no launch has made yet, freed outside a
     * capture: refused too (H200: cudaFreeAsync on another stream, during
     * a relaxed capture, of what the capture allocated). */
    if (!capturing && sim_mem_is_unlaunched_graph((uintptr_t)dptr)) {
        SIM_COUNT(dev, bad_frees);
        return CUDA_ERROR_INVALID_VALUE;
    }
    /* A stream-ordered allocation a cudaDeviceReset released: accepted. */
    if (sim_mem_reset_orphan_take(dev, (uintptr_t)dptr))
        return CUDA_SUCCESS;
    SIM_TRY(sim_mem_mark_free_pending(dev, (uintptr_t)dptr));
    sim_op *op = sim_op_new(SIM_OP_FREE);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.free.ptr = (uintptr_t)dptr;
    op->u.free.dev = dev;               /* may differ from the stream's */
    return sim_stream_enqueue(s, op, NULL);
}

SIM_API CUresult cuMemAllocAsync(CUdeviceptr *p, size_t n, CUstream s) { return alloc_async(p, n, s, false); }
SIM_API CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t n, CUstream s) { return alloc_async(p, n, s, true); }
SIM_API CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s) { return free_async(p, s, false); }
SIM_API CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return free_async(p, s, true); }

SIM_API CUresult cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!free_b || !total_b)
        return CUDA_ERROR_INVALID_VALUE;
    sim_mem_info(c->dev, free_b, total_b);
    return CUDA_SUCCESS;
}

/* ---- pinned host memory ------------------------------------------------- */

static CUresult host_alloc(void **pp, size_t bytesize)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    SIM_TRY(sim_capture_unsafe_call());
    SIM_COUNT(c->dev, mem_alloc_host_calls);
    if (!pp || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    void *p = NULL;
    if (posix_memalign(&p, 4096, bytesize) != 0)
        return CUDA_ERROR_OUT_OF_MEMORY;
    if (sim_mem_host_track(p, bytesize, true) != 0) {
        free(p);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *pp = p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemAllocHost_v2(void **pp, size_t bytesize) { return host_alloc(pp, bytesize); }

SIM_API CUresult cuMemHostAlloc(void **pp, size_t bytesize, unsigned int flags)
{
    (void)flags;  /* portable / mapped / write-combined: all the same here */
    return host_alloc(pp, bytesize);
}

SIM_API CUresult cuMemFreeHost(void *p)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    SIM_TRY(sim_capture_unsafe_call());
    SIM_COUNT(c->dev, mem_free_host_calls);
    if (!p)
        return CUDA_SUCCESS;
    /* Pinned memory may still be the target of queued copies. */
    sim_device_sync(c->dev);
    if (sim_mem_host_track(p, 0, false) != 0)
        return CUDA_ERROR_INVALID_VALUE;
    free(p);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemHostGetDevicePointer_v2(CUdeviceptr *pdptr, void *p, unsigned int flags)
{
    SIM_TRY(sim_check_init());
    if (!pdptr || flags != 0 || !sim_mem_host_lookup(p, NULL, NULL))
        return CUDA_ERROR_INVALID_VALUE;
    *pdptr = (CUdeviceptr)(uintptr_t)p;   /* unified addressing */
    return CUDA_SUCCESS;
}

/* ---- copies and sets ---------------------------------------------------- */

/* Pageable host memory: host memory that is neither device (or managed)
 * memory nor pinned (cuMemAllocHost / cuMemHostAlloc). */
static bool is_pageable(const void *p)
{
    return !sim_mem_owner((uintptr_t)p) && !sim_mem_host_lookup(p, NULL, NULL);
}

/* Asynchronous copies are asynchronous only between device and pinned
 * memory ("API synchronization behavior", CUDA runtime and driver API
 * references). With pageable memory:
 *   - to the device: the source is staged at the call, which returns once
 *     it has been copied out; the device-side copy runs in stream order
 *     (here: a private copy of the source, freed with the op);
 *   - to pageable host memory (from the device, or host to host): the call
 *     returns when the copy is done;
 *   - host to host is fully synchronous, pinned or not. */
static CUresult copy_async(sim_stream *s, sim_op *op)
{
    void *dst = op->u.copy.dst;
    const void *src = op->u.copy.src;
    bool dst_dev = sim_mem_owner((uintptr_t)dst) != NULL;
    bool src_dev = sim_mem_owner((uintptr_t)src) != NULL;
    if ((!dst_dev && !src_dev) || (!dst_dev && is_pageable(dst)))
        return sim_stream_run_sync(s, op);
    if (!src_dev && is_pageable(src)) {
        void *staged = malloc(op->u.copy.n);
        if (!staged) {
            free(op);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        memcpy(staged, src, op->u.copy.n);
        op->u.copy.src = op->u.copy.staged = staged;
    }
    return sim_stream_enqueue(s, op, NULL);
}

static CUresult copy(void *dst, const void *src, size_t n, CUstream h, bool ptsz, bool async)
{
    sim_stream *s;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    SIM_COUNT(s->dev, memcpys);
    if (n == 0)
        return CUDA_SUCCESS;
    if (!dst || !src)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op *op = sim_op_new(SIM_OP_MEMCPY);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.copy.dst = dst;
    op->u.copy.src = src;
    op->u.copy.n = n;
    if (async)
        return copy_async(s, op);
    /* Synchronous device-to-device copies do not block the host. */
    if (sim_mem_owner((uintptr_t)dst) && sim_mem_owner((uintptr_t)src))
        return sim_stream_enqueue(s, op, NULL);
    return sim_stream_run_sync(s, op);
}

#define P(x) ((void *)(uintptr_t)(x))

SIM_API CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n)        { return copy(P(d), P(s), n, 0, false, false); }
SIM_API CUresult cuMemcpy_ptds(CUdeviceptr d, CUdeviceptr s, size_t n)   { return copy(P(d), P(s), n, 0, true, false); }
SIM_API CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) { return copy(P(d), s, n, 0, false, false); }
SIM_API CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr d, const void *s, size_t n) { return copy(P(d), s, n, 0, true, false); }
SIM_API CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n)       { return copy(d, P(s), n, 0, false, false); }
SIM_API CUresult cuMemcpyDtoH_v2_ptds(void *d, CUdeviceptr s, size_t n)  { return copy(d, P(s), n, 0, true, false); }
SIM_API CUresult cuMemcpyDtoD_v2(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy(P(d), P(s), n, 0, false, false); }
SIM_API CUresult cuMemcpyDtoD_v2_ptds(CUdeviceptr d, CUdeviceptr s, size_t n) { return copy(P(d), P(s), n, 0, true, false); }

SIM_API CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)      { return copy(P(d), P(s), n, h, false, true); }
SIM_API CUresult cuMemcpyAsync_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return copy(P(d), P(s), n, h, true, true); }
SIM_API CUresult cuMemcpyHtoDAsync_v2(CUdeviceptr d, const void *s, size_t n, CUstream h)      { return copy(P(d), s, n, h, false, true); }
SIM_API CUresult cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr d, const void *s, size_t n, CUstream h) { return copy(P(d), s, n, h, true, true); }
SIM_API CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, CUstream h)      { return copy(d, P(s), n, h, false, true); }
SIM_API CUresult cuMemcpyDtoHAsync_v2_ptsz(void *d, CUdeviceptr s, size_t n, CUstream h) { return copy(d, P(s), n, h, true, true); }
SIM_API CUresult cuMemcpyDtoDAsync_v2(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h)      { return copy(P(d), P(s), n, h, false, true); }
SIM_API CUresult cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr d, CUdeviceptr s, size_t n, CUstream h) { return copy(P(d), P(s), n, h, true, true); }

/* n elements of `width` bytes (1 or 4) set to v. */
static CUresult set(CUdeviceptr d, unsigned v, unsigned width, size_t n, CUstream h, bool ptsz,
                    bool async)
{
    sim_stream *s;
    SIM_TRY(sim_stream_resolve(h, ptsz, &s));
    SIM_COUNT(s->dev, memsets);
    if (n == 0)
        return CUDA_SUCCESS;
    if (!d || (d % width))                       /* 32-bit sets need 4-byte alignment */
        return CUDA_ERROR_INVALID_VALUE;
    sim_op *op = sim_op_new(SIM_OP_MEMSET);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    op->u.set.dst = P(d);
    op->u.set.value = v;
    op->u.set.width = width;
    op->u.set.n = n;
    /* Synchronous memsets are asynchronous to the host unless the target is
     * host memory (pinned or managed). */
    if (async || sim_mem_owner((uintptr_t)d))
        return sim_stream_enqueue(s, op, NULL);
    return sim_stream_run_sync(s, op);
}

SIM_API CUresult cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n)      { return set(d, v, 1, n, 0, false, false); }
SIM_API CUresult cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) { return set(d, v, 1, n, 0, true, false); }
SIM_API CUresult cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream h)      { return set(d, v, 1, n, h, false, true); }
SIM_API CUresult cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream h) { return set(d, v, 1, n, h, true, true); }
SIM_API CUresult cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n)      { return set(d, v, 4, n, 0, false, false); }
SIM_API CUresult cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) { return set(d, v, 4, n, 0, true, false); }
SIM_API CUresult cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream h)      { return set(d, v, 4, n, h, false, true); }
SIM_API CUresult cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream h) { return set(d, v, 4, n, h, true, true); }

/* ---- pointer attributes ------------------------------------------------- */

static CUresult pointer_attr(void *data, CUpointer_attribute attr, CUdeviceptr ptr)
{
    sim_device *dev = NULL;
    uintptr_t base = 0;
    size_t size = 0;
    sim_mem_kind kind = 0;
    void *hbase = NULL;
    bool is_dev = sim_mem_lookup((uintptr_t)ptr, &dev, &base, &size, &kind) == CUDA_SUCCESS;
    bool is_host = !is_dev && sim_mem_host_lookup(P(ptr), &hbase, &size);
    if (is_host)
        base = (uintptr_t)hbase;
    if (!is_dev && !is_host) {
        /* Unknown memory: CUDA answers a few attributes and fails the rest. */
        switch (attr) {
        case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data = 0; return CUDA_ERROR_INVALID_VALUE;
        case CU_POINTER_ATTRIBUTE_IS_MANAGED:  *(int *)data = 0; return CUDA_SUCCESS;
        case CU_POINTER_ATTRIBUTE_MAPPED:      *(int *)data = 0; return CUDA_SUCCESS;
        default: return CUDA_ERROR_INVALID_VALUE;
        }
    }
    switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
        *(CUcontext *)data = is_dev ? (CUcontext)&dev->primary : NULL;
        break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *(unsigned *)data = is_dev ? CU_MEMORYTYPE_DEVICE : CU_MEMORYTYPE_HOST;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
        *(CUdeviceptr *)data = ptr;
        break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        if (is_dev && kind != SIM_MEM_MANAGED)
            return CUDA_ERROR_INVALID_VALUE;
        *(void **)data = P(ptr);
        break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *(int *)data = is_dev && kind == SIM_MEM_MANAGED;
        break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *(int *)data = is_dev ? dev->ordinal : 0;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
        *(CUdeviceptr *)data = (CUdeviceptr)base;
        break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
        *(size_t *)data = size;
        break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
        *(int *)data = 1;
        break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
        *(unsigned long long *)data = (unsigned long long)base;
        break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
        *(int *)data = 0;
        break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
        *(int *)data = is_dev && kind == SIM_MEM_DEVICE;   /* sim_ipc.c */
        break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
        *(void **)data = NULL;
        break;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuPointerGetAttribute(void *data, CUpointer_attribute attribute, CUdeviceptr ptr)
{
    SIM_TRY(sim_check_init());
    if (!data)
        return CUDA_ERROR_INVALID_VALUE;
    return pointer_attr(data, attribute, ptr);
}

/* Unlike the single query, unknown memory is not an error here: unsupported
 * answers are left zeroed. */
SIM_API CUresult cuPointerGetAttributes(unsigned int n, CUpointer_attribute *attrs,
                                        void **data, CUdeviceptr ptr)
{
    SIM_TRY(sim_check_init());
    if (!attrs || !data)
        return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < n; i++) {
        if (!data[i])
            return CUDA_ERROR_INVALID_VALUE;
        if (pointer_attr(data[i], attrs[i], ptr) != CUDA_SUCCESS) {
            /* unknown attribute values read as zero */
            switch (attrs[i]) {
            case CU_POINTER_ATTRIBUTE_MEMORY_TYPE: *(unsigned *)data[i] = 0; break;
            case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: *(int *)data[i] = -2; break;
            case CU_POINTER_ATTRIBUTE_CONTEXT:
            case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
            case CU_POINTER_ATTRIBUTE_HOST_POINTER:
            case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
            case CU_POINTER_ATTRIBUTE_RANGE_SIZE: *(void **)data[i] = NULL; break;
            default: *(int *)data[i] = 0; break;
            }
        }
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemGetAddressRange_v2(CUdeviceptr *pbase, size_t *psize, CUdeviceptr dptr)
{
    /* A current context is needed (an H200 answered CUDA_ERROR_INVALID_CONTEXT
     * to test_alloc_ipc, whose thread had none). */
    sim_ctx *c;
    CUresult rc = sim_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    uintptr_t base;
    size_t size;
    sim_mem_kind kind;
    rc = sim_mem_lookup((uintptr_t)dptr, NULL, &base, &size, &kind);
    if (rc != CUDA_SUCCESS)
        return CUDA_ERROR_NOT_FOUND;
    /* In a cuMemAddressReserve range the allocation is the one handle
     * mapped at dptr, not the reservation; nothing mapped: not found. */
    if (kind == SIM_MEM_VA)
        SIM_TRY(sim_vmm_mapping_range((uintptr_t)dptr, &base, &size));
    if (pbase) *pbase = (CUdeviceptr)base;
    if (psize) *psize = size;
    return CUDA_SUCCESS;
}
