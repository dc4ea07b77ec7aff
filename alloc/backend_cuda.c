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
    const vt__driver_api *d;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return r;
    size_t f = 0, t = 0;
    r = d->cuMemGetInfo_v2 ? (int)d->cuMemGetInfo_v2(&f, &t) : CUDA_ERROR_NOT_SUPPORTED;
    leave(d, pushed);
    *free_bytes = f;
    *total_bytes = t;
    return r;
}

int vt__backend_malloc(int device, uint64_t size, uint64_t *addr)
{
    const vt__driver_api *d;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return r;
    CUdeviceptr p = 0;
    r = (int)d->cuMemAlloc_v2(&p, (size_t)size);
    leave(d, pushed);
    *addr = r ? 0 : (uint64_t)p;
    return r;
}

int vt__backend_free(int device, uint64_t addr)
{
    const vt__driver_api *d;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return r;
    r = (int)d->cuMemFree_v2((CUdeviceptr)addr);
    leave(d, pushed);
    return r;
}

int vt__backend_event_create(int device, void **event)
{
    const vt__driver_api *d;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return r;
    CUevent ev = NULL;
    r = (int)d->cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);
    leave(d, pushed);
    *event = ev;
    return r;
}

int vt__backend_event_record(int device, void *event, uint64_t stream)
{
    const vt__driver_api *d;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return r;
    r = (int)d->cuEventRecord((CUevent)event, (CUstream)(uintptr_t)stream);
    leave(d, pushed);
    return r;
}

int vt__backend_stream_sync(int device, uint64_t stream)
{
    const vt__driver_api *d;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return r;
    r = d->cuStreamSynchronize ? (int)d->cuStreamSynchronize((CUstream)(uintptr_t)stream)
                               : CUDA_ERROR_NOT_SUPPORTED;
    leave(d, pushed);
    return r;
}

int vt__backend_stream_capturing(int device, uint64_t stream)
{
    const vt__driver_api *d = vt__driver();
    if (!d || !d->cuStreamIsCapturing)
        return 0;
    int pushed, r = enter(device, &d, &pushed);
    if (r)
        return 0;
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    r = (int)d->cuStreamIsCapturing((CUstream)(uintptr_t)stream, &st);
    leave(d, pushed);
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
    return (int)vt__driver()->cuEventSynchronize((CUevent)event);
}

int vt__backend_event_destroy(int device, void *event)
{
    (void)device;
    return (int)vt__driver()->cuEventDestroy_v2((CUevent)event);
}
