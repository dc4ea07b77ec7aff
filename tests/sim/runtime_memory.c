/* tests/sim/runtime_memory.c - runtime memory management: thin calls into the
 * driver, plus the runtime's own rules (size 0, NULL frees, copy kinds). */
#include "runtime_internal.h"

#include <stdint.h>

#define DPTR(p) ((CUdeviceptr)(uintptr_t)(p))

/* The prologue of the allocations that accept size 0: a NULL out-pointer is
 * invalid; size 0 succeeds and gives NULL without asking the driver (which
 * itself rejects size 0). The caller is done unless this returns
 * cudaSuccess with size != 0. */
static cudaError_t alloc_enter(void **out, size_t size)
{
    if (!out)
        return rt_ret(cudaErrorInvalidValue);
    cudaError_t e = rt_enter();
    if (rt_unlikely(e != cudaSuccess))
        return rt_ret(e);
    if (size == 0)
        *out = NULL;
    return cudaSuccess;
}

/* The driver's answer to a device allocation, handed to the caller. */
static cudaError_t alloc_done(CUresult r, CUdeviceptr p, void **out)
{
    if (rt_unlikely(r != CUDA_SUCCESS))
        return rt_ret_drv(r);
    *out = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaMalloc(void **devPtr, size_t size)
{
    cudaError_t e = alloc_enter(devPtr, size);
    if (e != cudaSuccess || size == 0)
        return e;
    CUdeviceptr p = 0;
    CUresult r = rt_drv.cuMemAlloc(&p, size);
    return alloc_done(r, p, devPtr);
}

/* Waits for the device (the driver does) unless the pointer came from a
 * stream-ordered allocation. A bad pointer is cudaErrorInvalidValue. */
RT_API cudaError_t cudaFree(void *devPtr)
{
    cudaError_t e = rt_enter();
    if (rt_unlikely(e != cudaSuccess))
        return rt_ret(e);
    return rt_ret_drv(rt_drv.cuMemFree(DPTR(devPtr)));
}

/* Unlike cudaMalloc, size 0 is cudaErrorInvalidValue (documented). */
RT_API cudaError_t cudaMallocManaged(void **devPtr, size_t size, unsigned int flags)
{
    if (!devPtr || size == 0)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    CUdeviceptr p = 0;
    CUresult r = rt_drv.cuMemAllocManaged(&p, size, flags);
    return alloc_done(r, p, devPtr);
}

static cudaError_t malloc_async(void **devPtr, size_t size, cudaStream_t s, bool ptsz)
{
    cudaError_t e = alloc_enter(devPtr, size);
    if (e != cudaSuccess || size == 0)
        return e;
    CUdeviceptr p = 0;
    CUresult r = RT_DRV(cuMemAllocAsync, ptsz)(&p, size, (CUstream)s);
    return alloc_done(r, p, devPtr);
}

/* A NULL pointer is no work, unless the stream's capture was invalidated:
 * then cudaErrorStreamCaptureInvalidated, like every call on it (seen on an
 * H200: fact capture_after_stream_queries frees the NULL a refused
 * cudaMallocAsync left). */
static cudaError_t free_async(void *devPtr, cudaStream_t s, bool ptsz)
{
    RT_TRY(rt_enter());
    if (!devPtr) {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        if (RT_DRV(cuStreamIsCapturing, ptsz)((CUstream)s, &st) == CUDA_SUCCESS &&
            st == CU_STREAM_CAPTURE_STATUS_INVALIDATED)
            return rt_ret_drv(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
        return cudaSuccess;
    }
    return rt_ret_drv(RT_DRV(cuMemFreeAsync, ptsz)(DPTR(devPtr), (CUstream)s));
}

RT_API cudaError_t cudaMallocAsync(void **p, size_t n, cudaStream_t s)      { return malloc_async(p, n, s, false); }
RT_API cudaError_t cudaMallocAsync_ptsz(void **p, size_t n, cudaStream_t s) { return malloc_async(p, n, s, true); }
RT_API cudaError_t cudaFreeAsync(void *p, cudaStream_t s)                   { return free_async(p, s, false); }
RT_API cudaError_t cudaFreeAsync_ptsz(void *p, cudaStream_t s)              { return free_async(p, s, true); }

RT_API cudaError_t cudaMallocHost(void **ptr, size_t size)
{
    cudaError_t e = alloc_enter(ptr, size);
    if (e != cudaSuccess || size == 0)
        return e;
    return rt_ret_drv(rt_drv.cuMemAllocHost(ptr, size));
}

RT_API cudaError_t cudaHostAlloc(void **pHost, size_t size, unsigned int flags)
{
    cudaError_t e = alloc_enter(pHost, size);
    if (e != cudaSuccess || size == 0)
        return e;
    return rt_ret_drv(rt_drv.cuMemHostAlloc(pHost, size, flags));
}

RT_API cudaError_t cudaFreeHost(void *ptr)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuMemFreeHost(ptr));
}

RT_API cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuMemGetInfo(free_b, total_b));
}

/* ---- copies and sets ---------------------------------------------------- */

/* With unified addressing every kind is one driver copy; the kind is only
 * checked. cudaMemcpyDefault infers the direction from the pointers. */
static cudaError_t copy_enter(enum cudaMemcpyKind kind)
{
    RT_TRY(rt_enter());
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    return cudaSuccess;
}

static cudaError_t memcpy_sync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, bool ptds)
{
    cudaError_t e = copy_enter(kind);
    if (e != cudaSuccess)
        return e;
    return rt_ret_drv(RT_DRV(cuMemcpy, ptds)(DPTR(dst), DPTR(src), n));
}

static cudaError_t memcpy_async(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                cudaStream_t s, bool ptsz)
{
    cudaError_t e = copy_enter(kind);
    if (e != cudaSuccess)
        return e;
    return rt_ret_drv(RT_DRV(cuMemcpyAsync, ptsz)(DPTR(dst), DPTR(src), n, (CUstream)s));
}

RT_API cudaError_t cudaMemcpy(void *d, const void *s, size_t n, enum cudaMemcpyKind k)      { return memcpy_sync(d, s, n, k, false); }
RT_API cudaError_t cudaMemcpy_ptds(void *d, const void *s, size_t n, enum cudaMemcpyKind k) { return memcpy_sync(d, s, n, k, true); }
RT_API cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    return memcpy_async(d, s, n, k, st, false);
}
RT_API cudaError_t cudaMemcpyAsync_ptsz(void *d, const void *s, size_t n, enum cudaMemcpyKind k, cudaStream_t st)
{
    return memcpy_async(d, s, n, k, st, true);
}

static cudaError_t memset_any(void *p, int value, size_t n, cudaStream_t s, bool async, bool ptsz)
{
    RT_TRY(rt_enter());
    CUresult r = async ? RT_DRV(cuMemsetD8Async, ptsz)(DPTR(p), (unsigned char)value, n, (CUstream)s)
                       : RT_DRV(cuMemsetD8, ptsz)(DPTR(p), (unsigned char)value, n);
    return rt_ret_drv(r);
}

RT_API cudaError_t cudaMemset(void *p, int v, size_t n)      { return memset_any(p, v, n, 0, false, false); }
RT_API cudaError_t cudaMemset_ptds(void *p, int v, size_t n) { return memset_any(p, v, n, 0, false, true); }
RT_API cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)      { return memset_any(p, v, n, s, true, false); }
RT_API cudaError_t cudaMemsetAsync_ptsz(void *p, int v, size_t n, cudaStream_t s) { return memset_any(p, v, n, s, true, true); }
