/*
 * alloc/backend_cuda.c - the allocator backend on the CUDA driver API.
 *
 * The driver, not the runtime: a program that links the runtime statically
 * has no libcudart.so to call, but every program has libcuda.so.1.
 * Contexts: the runtime allocates in each device's primary context; so do
 * we, whichever context the calling thread has current.
 */
#include "backend.h"

#include <stdatomic.h>
#include <stdbool.h>

#include "cuda_driver.h"

#define MAX_DEVICES 64

static _Atomic(CUcontext) primary[MAX_DEVICES];   /* retained once, never released */

static int primary_ctx(const vt__driver_api *d, int device, CUcontext *out)
{
    if ((unsigned)device >= MAX_DEVICES)
        return CUDA_ERROR_INVALID_DEVICE;
    CUcontext c = atomic_load_explicit(&primary[device], memory_order_acquire);
    if (c) {
        *out = c;
        return 0;
    }
    CUdevice dev;
    CUresult r = d->cuDeviceGet(&dev, device);
    if (r != CUDA_SUCCESS)
        return (int)r;
    r = d->cuDevicePrimaryCtxRetain(&c, dev);
    if (r != CUDA_SUCCESS)
        return (int)r;
    CUcontext expect = NULL;
    /* A racing thread retained too: keep one, drop our extra reference. */
    if (!atomic_compare_exchange_strong(&primary[device], &expect, c)) {
        if (d->cuDevicePrimaryCtxRelease_v2)
            d->cuDevicePrimaryCtxRelease_v2(dev);
        c = expect;
    }
    *out = c;
    return 0;
}

/* A reset (cudaDeviceReset, cuDevicePrimaryCtxReset: the program's, or the
 * runtime's) destroyed the primary context we retained: a call made in it
 * fails with CUDA_ERROR_CONTEXT_IS_DESTROYED until it is retained again
 * (seen on an H200: a cudaMalloc the cache served right after
 * cudaDeviceReset failed so). Forget the handle, so that the next enter()
 * retains it anew. @return whether there was one to forget (retry then).
 * Every call of the cache's goes through IN_CONTEXT_AS, which retries. */
static bool revive(int device)
{
    if (device < 0 || device >= MAX_DEVICES)
        return false;
    return atomic_exchange_explicit(&primary[device], NULL, memory_order_acq_rel) != NULL;
}

/* Make device's primary context current for one call. */
static int enter(int device, const vt__driver_api **dp, int *pushed)
{
    *pushed = 0;
    int r = (int)vt__driver_init();
    if (r)
        return r;
    const vt__driver_api *d = vt__driver();
    CUcontext want, cur = NULL;
    r = primary_ctx(d, device, &want);
    if (r)
        return r;
    if (d->cuCtxGetCurrent(&cur) != CUDA_SUCCESS || cur != want) {
        r = (int)d->cuCtxPushCurrent_v2(want);
        if (r)
            return r;
        *pushed = 1;
    }
    *dp = d;
    return 0;
}

static void leave(const vt__driver_api *d, int pushed)
{
    if (pushed) {
        CUcontext dummy;
        d->cuCtxPopCurrent_v2(&dummy);
    }
}

/* The cache's own device calls that CUDA counts as "potentially unsafe"
 * during a stream capture (allocating, freeing, mapping, synchronizing):
 * made in the relaxed capture mode of this thread, so that a capture the
 * program runs (in global mode: on any thread) is never refused or
 * invalidated by work the program did not ask for. A plain
 * cudaMallocAsync during a global capture, say, grows its pool without
 * disturbing the capture; the cache's segment cuMemAlloc must not disturb
 * it either (cuThreadExchangeStreamCaptureMode; what a real driver does
 * with it: tests/gpucheck/driver_facts.c, capture_thread_mode_relaxed). */
static CUstreamCaptureMode relax_begin(const vt__driver_api *d)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (!d->cuThreadExchangeStreamCaptureMode || d->cuThreadExchangeStreamCaptureMode(&m))
        m = CU_STREAM_CAPTURE_MODE_RELAXED;   /* nothing to put back */
    return m;
}

static void relax_end(const vt__driver_api *d, CUstreamCaptureMode was)
{
    if (was != CU_STREAM_CAPTURE_MODE_RELAXED)
        d->cuThreadExchangeStreamCaptureMode(&was);
}

/* r = `call`, an expression over `d` (the driver's table), made in the
 * device's primary context (and, `relaxed`, in the relaxed capture mode);
 * or enter()'s failure, `call` not made. A macro so that every one-call
 * entry point below is one line of what it calls. */
#define IN_CONTEXT_AS(device, r, relaxed, call)                              \
    do {                                                                     \
        for (int try_ = 0; try_ < 2; try_++) {                               \
            const vt__driver_api *d;                                         \
            int pushed_;                                                     \
            if (((r) = enter((device), &d, &pushed_)) != 0)                  \
                break;                                                       \
            CUstreamCaptureMode was_ = (relaxed) ? relax_begin(d)            \
                                                 : CU_STREAM_CAPTURE_MODE_RELAXED; \
            (r) = (int)(call);                                               \
            relax_end(d, was_);                                              \
            leave(d, pushed_);                                               \
            if ((r) != CUDA_ERROR_CONTEXT_IS_DESTROYED || !revive((device))) \
                break;                                                       \
        }                                                                    \
    } while (0)
#define IN_CONTEXT(device, r, call) IN_CONTEXT_AS(device, r, false, call)
#define IN_CONTEXT_RELAXED(device, r, call) IN_CONTEXT_AS(device, r, true, call)

int vt__backend_init(void)
{
    return (int)vt__driver_init();
}

int vt__backend_device_count(int *count)
{
    int r = (int)vt__driver_init();
    if (r)
        return r;
    return (int)vt__driver()->cuDeviceGetCount(count);
}

int vt__backend_current_device(int *device)
{
    int r = (int)vt__driver_init();
    if (r)
        return r;
    const vt__driver_api *d = vt__driver();
    CUcontext cur = NULL;
    CUdevice dev = 0;
    *device = 0;
    if (d->cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur && d->cuCtxGetDevice
        && d->cuCtxGetDevice(&dev) == CUDA_SUCCESS)
        *device = (int)dev;   /* a CUdevice is its ordinal */
    return 0;
}

int vt__backend_device_name(int device, char *name, size_t len)
{
    if (len)
        name[0] = '\0';
    int r = (int)vt__driver_init();
    if (r)
        return r;
    const vt__driver_api *d = vt__driver();
    CUdevice dev;
    if (!d->cuDeviceGetName)
        return CUDA_ERROR_NOT_SUPPORTED;
    if ((r = (int)d->cuDeviceGet(&dev, device)))
        return r;
    return (int)d->cuDeviceGetName(name, (int)len, dev);
}

int vt__backend_total_mem(int device, uint64_t *total_bytes)
{
    int r = (int)vt__driver_init();
    if (r)
        return r;
    const vt__driver_api *d = vt__driver();
    CUdevice dev;
    size_t total = 0;
    if ((r = (int)d->cuDeviceGet(&dev, device)))
        return r;
    if (!d->cuDeviceTotalMem_v2)
        return CUDA_ERROR_NOT_SUPPORTED;
    r = (int)d->cuDeviceTotalMem_v2(&total, dev);
    *total_bytes = total;
    return r;
}

int vt__backend_mem_info(int device, uint64_t *free_bytes, uint64_t *total_bytes)
{
    size_t f = 0, t = 0;
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuMemGetInfo_v2 ? d->cuMemGetInfo_v2(&f, &t)
                                                     : CUDA_ERROR_NOT_SUPPORTED);
    *free_bytes = f;
    *total_bytes = t;
    return r;
}

int vt__backend_malloc(int device, uint64_t size, uint64_t *addr)
{
    CUdeviceptr p = 0;
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuMemAlloc_v2(&p, (size_t)size));
    *addr = r ? 0 : (uint64_t)p;
    return r;
}

int vt__backend_free(int device, uint64_t addr)
{
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuMemFree_v2((CUdeviceptr)addr));
    return r;
}

/* ---- virtual memory management ------------------------------------------ */

static bool have_vmm(const vt__driver_api *d)
{
    return d->cuMemGetAllocationGranularity && d->cuMemCreate && d->cuMemRelease
        && d->cuMemAddressReserve && d->cuMemAddressFree && d->cuMemMap && d->cuMemUnmap
        && d->cuMemSetAccess;
}

static CUmemAllocationProp device_prop(int device)
{
    CUmemAllocationProp prop = { 0 };
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = device;
    return prop;
}

int vt__backend_vmm_granularity(int device, uint64_t *granularity)
{
    size_t g = 0;
    CUmemAllocationProp prop = device_prop(device);
    int r;
    IN_CONTEXT(device, r, have_vmm(d) ? d->cuMemGetAllocationGranularity(
                                            &g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
                                      : CUDA_ERROR_NOT_SUPPORTED);
    if (!r && !g)
        r = CUDA_ERROR_NOT_SUPPORTED;
    *granularity = g;
    return r;
}

int vt__backend_va_reserve(int device, uint64_t size, uint64_t *addr)
{
    CUdeviceptr p = 0;
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuMemAddressReserve(&p, (size_t)size, 0, 0, 0));
    *addr = r ? 0 : (uint64_t)p;
    return r;
}

int vt__backend_va_free(int device, uint64_t addr, uint64_t size)
{
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuMemAddressFree((CUdeviceptr)addr, (size_t)size));
    return r;
}

/* Unmaps [addr, addr+size) chunk by chunk: the first failure, all tried. */
static int unmap_chunks(const vt__driver_api *d, uint64_t addr, uint64_t size, uint64_t chunk)
{
    int rc = 0;
    for (uint64_t off = 0; off < size; off += chunk) {
        int r = (int)d->cuMemUnmap((CUdeviceptr)(addr + off), (size_t)chunk);
        if (r && !rc)
            rc = r;
    }
    return rc;
}

/* One physical allocation per chunk: cuMemUnmap must cover whole mappings,
 * so a chunk can go back alone only when it was mapped alone. The handle is
 * released at once: the memory lives while it is mapped. On a failure what
 * was mapped is unmapped again. */
static int map_chunks(const vt__driver_api *d, int device, uint64_t addr, uint64_t size,
                      uint64_t chunk)
{
    CUmemAllocationProp prop = device_prop(device);
    CUmemAccessDesc access = { .location = prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    int r = 0;
    uint64_t off = 0;
    for (; off < size; off += chunk) {
        CUmemGenericAllocationHandle handle;
        r = (int)d->cuMemCreate(&handle, (size_t)chunk, &prop, 0);
        if (r)
            break;
        r = (int)d->cuMemMap((CUdeviceptr)(addr + off), (size_t)chunk, 0, handle, 0);
        d->cuMemRelease(handle);
        if (r)
            break;
        r = (int)d->cuMemSetAccess((CUdeviceptr)(addr + off), (size_t)chunk, &access, 1);
        if (r) {
            d->cuMemUnmap((CUdeviceptr)(addr + off), (size_t)chunk);
            break;
        }
    }
    if (r)
        (void)unmap_chunks(d, addr, off, chunk);
    return r;
}

int vt__backend_map(int device, uint64_t addr, uint64_t size, uint64_t chunk)
{
    int r;
    IN_CONTEXT_RELAXED(device, r, map_chunks(d, device, addr, size, chunk));
    return r;
}

int vt__backend_unmap(int device, uint64_t addr, uint64_t size, uint64_t chunk)
{
    int r;
    IN_CONTEXT_RELAXED(device, r, unmap_chunks(d, addr, size, chunk));
    return r;
}

int vt__backend_event_create(int device, void **event)
{
    CUevent ev = NULL;
    int r;
    IN_CONTEXT(device, r, d->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
    *event = ev;
    return r;
}

int vt__backend_event_record(int device, void *event, uint64_t stream)
{
    int r;
    IN_CONTEXT(device, r, d->cuEventRecord((CUevent)event, (CUstream)(uintptr_t)stream));
    return r;
}

int vt__backend_stream_sync(int device, uint64_t stream)
{
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuStreamSynchronize
                              ? d->cuStreamSynchronize((CUstream)(uintptr_t)stream)
                              : CUDA_ERROR_NOT_SUPPORTED);
    return r;
}

int vt__backend_device_sync(int device)
{
    int r;
    IN_CONTEXT_RELAXED(device, r, d->cuCtxSynchronize ? d->cuCtxSynchronize()
                                                      : CUDA_ERROR_NOT_SUPPORTED);
    return r;
}

int vt__backend_stream_capturing(int device, uint64_t stream)
{
    const vt__driver_api *drv = vt__driver();
    if (!drv || !drv->cuStreamIsCapturing)
        return 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    int r;
    IN_CONTEXT(device, r, d->cuStreamIsCapturing((CUstream)(uintptr_t)stream, &st));
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
        return 1;
    return r == CUDA_SUCCESS && st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Query and synchronize need no current context: events know theirs. */
int vt__backend_event_query(int device, void *event)
{
    (void)device;
    return (int)vt__driver()->cuEventQuery((CUevent)event);
}

int vt__backend_event_sync(int device, void *event)
{
    (void)device;
    const vt__driver_api *d = vt__driver();
    CUstreamCaptureMode was = relax_begin(d);
    int r = (int)d->cuEventSynchronize((CUevent)event);
    relax_end(d, was);
    return r;
}

int vt__backend_event_destroy(int device, void *event)
{
    (void)device;
    return (int)vt__driver()->cuEventDestroy_v2((CUevent)event);
}
