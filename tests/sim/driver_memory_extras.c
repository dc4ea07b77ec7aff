/* tests/sim/driver_memory_extras.c - the driver's other ways to hold memory:
 * pitched allocations, arrays, registered host memory, memory pools, and the
 * managed-memory hints (prefetch, attach).
 *
 * Sources (CUDA Driver API reference): cuMemAllocPitch (at least
 * WidthInBytes * Height bytes, rows padded, ElementSizeBytes 4, 8 or 16;
 * the sim pads rows to 512 bytes, the texture pitch alignment it reports),
 * cuArrayCreate / cuArray3DCreate (opaque handles whose storage counts
 * against device memory; NumChannels 1, 2 or 4), cuMemHostRegister (page-
 * locks an existing range: copies with it are asynchronous; overlapping a
 * registered range is CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED, unregistering
 * an unknown one CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED), the Stream Ordered
 * Memory Allocator section (default pool per device, cuMemPoolCreate for a
 * device location with pinned allocations, cuDeviceSetMemPool making a pool
 * the one cuMemAllocAsync uses, attributes: release threshold and the three
 * reuse flags; cuMemPoolDestroy of a device's current pool makes the default
 * current again), cuMemPrefetchAsync / cuStreamAttachMemAsync (hints on
 * managed memory, ordered on the stream: no data moves in one address space).
 */
#include "sim_internal.h"

#include <stdlib.h>
#include <string.h>

#define SIM_PITCH_ALIGN 512u
#define SIM_MAGIC_ARRAY 0x41525259u      /* 'ARRY' */
#define SIM_MAGIC_POOL  0x504f4f4cu      /* 'POOL' */

/* ---- pitched memory ----------------------------------------------------- */

SIM_API CUresult cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes)
{
    sim_ctx *c;
    CUresult rc = sim_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    SIM_TRY(sim_capture_unsafe_call());
    SIM_COUNT(c->dev, mem_alloc_calls);
    if (!dptr || !pPitch || WidthInBytes == 0 || Height == 0 ||
        (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16))
        return CUDA_ERROR_INVALID_VALUE;
    size_t pitch = (WidthInBytes + SIM_PITCH_ALIGN - 1) / SIM_PITCH_ALIGN * SIM_PITCH_ALIGN;
    if (pitch < WidthInBytes || Height > SIZE_MAX / pitch)
        return CUDA_ERROR_INVALID_VALUE;
    uintptr_t p;
    rc = sim_mem_alloc(c->dev, pitch * Height, SIM_MEM_DEVICE, &p);
    if (rc != CUDA_SUCCESS)
        return rc;
    *dptr = (CUdeviceptr)p;
    *pPitch = pitch;
    return CUDA_SUCCESS;
}

/* ---- arrays ------------------------------------------------------------- */

typedef struct sim_array {
    uint32_t    magic;
    sim_device *dev;
    uintptr_t   storage;                 /* device memory holding the texels */
    CUDA_ARRAY3D_DESCRIPTOR desc;
} sim_array;

static size_t format_bytes(CUarray_format f)
{
    switch (f) {
    case CU_AD_FORMAT_UNSIGNED_INT8: case CU_AD_FORMAT_SIGNED_INT8:   return 1;
    case CU_AD_FORMAT_UNSIGNED_INT16: case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:                                           return 2;
    case CU_AD_FORMAT_UNSIGNED_INT32: case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:                                          return 4;
    default:                                                          return 0;
    }
}

static CUresult array_create(CUarray *out, const CUDA_ARRAY3D_DESCRIPTOR *d)
{
    sim_ctx *c;
    CUresult rc = sim_current_ctx(&c);
    if (rc != CUDA_SUCCESS)
        return rc;
    size_t elem = d ? format_bytes(d->Format) : 0;
    if (!out || !elem || (d->NumChannels != 1 && d->NumChannels != 2 && d->NumChannels != 4) ||
        d->Width == 0)
        return CUDA_ERROR_INVALID_VALUE;
    size_t h = d->Height ? d->Height : 1, depth = d->Depth ? d->Depth : 1;
    size_t row = elem * d->NumChannels * d->Width;
    if (row / d->Width != elem * d->NumChannels || h > SIZE_MAX / row || depth > SIZE_MAX / (row * h))
        return CUDA_ERROR_INVALID_VALUE;
    sim_array *a = calloc(1, sizeof *a);
    if (!a)
        return CUDA_ERROR_OUT_OF_MEMORY;
    SIM_COUNT(c->dev, mem_alloc_calls);
    rc = sim_mem_alloc(c->dev, row * h * depth, SIM_MEM_DEVICE, &a->storage);
    if (rc != CUDA_SUCCESS) {
        free(a);
        return rc;
    }
    a->magic = SIM_MAGIC_ARRAY;
    a->dev = c->dev;
    a->desc = *d;
    *out = (CUarray)(void *)a;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuArrayCreate_v2(CUarray *pHandle, const CUDA_ARRAY_DESCRIPTOR *p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    CUDA_ARRAY3D_DESCRIPTOR d = { .Width = p->Width, .Height = p->Height, .Depth = 0,
                                  .Format = p->Format, .NumChannels = p->NumChannels };
    return array_create(pHandle, &d);
}

SIM_API CUresult cuArray3DCreate_v2(CUarray *pHandle, const CUDA_ARRAY3D_DESCRIPTOR *p)
{
    return array_create(pHandle, p);
}

SIM_API CUresult cuArrayDestroy(CUarray h)
{
    CUresult rc = sim_check_init();
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_array *a = (sim_array *)(void *)h;
    if (!a || a->magic != SIM_MAGIC_ARRAY)
        return CUDA_ERROR_INVALID_HANDLE;
    /* Like cuMemFree: queued copies into it may still run. */
    sim_device_sync(a->dev);
    rc = sim_mem_free(a->dev, a->storage, SIM_FREE_PLAIN);
    a->magic = 0;
    free(a);
    return rc;
}

SIM_API CUresult cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR *out, CUarray h)
{
    sim_array *a = (sim_array *)(void *)h;
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    if (!a || a->magic != SIM_MAGIC_ARRAY)
        return CUDA_ERROR_INVALID_HANDLE;
    *out = (CUDA_ARRAY_DESCRIPTOR){ .Width = a->desc.Width, .Height = a->desc.Height,
                                    .Format = a->desc.Format, .NumChannels = a->desc.NumChannels };
    return CUDA_SUCCESS;
}

/* ---- registered host memory --------------------------------------------- */

SIM_API CUresult cuMemHostRegister_v2(void *p, size_t bytesize, unsigned int Flags)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    (void)Flags;   /* portable / mapped / I/O memory / read-only: all the same here */
    if (!p || bytesize == 0 || sim_mem_owner((uintptr_t)p))
        return CUDA_ERROR_INVALID_VALUE;
    return sim_mem_host_register(p, bytesize, true);
}

SIM_API CUresult cuMemHostUnregister(void *p)
{
    sim_ctx *c;
    SIM_TRY(sim_current_ctx(&c));
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    /* Queued asynchronous copies may still read or write it. */
    sim_device_sync(c->dev);
    return sim_mem_host_register(p, 0, false);
}

/* ---- memory pools ------------------------------------------------------- */

typedef struct sim_pool {
    uint32_t    magic;
    int         device;
    bool        is_default;
    cuuint64_t  release_threshold;
    int         reuse[3];                /* follow events, opportunistic, internal deps */
} sim_pool;

static sim_pool default_pools[SIM_MAX_DEVICES];
static sim_pool *_Atomic current_pool[SIM_MAX_DEVICES]; /* NULL = the default */
static pthread_once_t pools_once = PTHREAD_ONCE_INIT;

static void pools_init(void)
{
    for (int i = 0; i < SIM_MAX_DEVICES; i++)
        default_pools[i] = (sim_pool){ SIM_MAGIC_POOL, i, true, 0, { 1, 1, 1 } };
}

static sim_pool *pool_of(CUmemoryPool h)
{
    sim_pool *p = (sim_pool *)(void *)h;
    return p && p->magic == SIM_MAGIC_POOL ? p : NULL;
}

static CUresult device_arg(CUdevice dev)
{
    SIM_TRY(sim_check_init());
    pthread_once(&pools_once, pools_init);
    return sim_device_get(dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

SIM_API CUresult cuDeviceGetDefaultMemPool(CUmemoryPool *out, CUdevice dev)
{
    SIM_TRY(device_arg(dev));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    *out = (CUmemoryPool)(void *)&default_pools[dev];
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceGetMemPool(CUmemoryPool *out, CUdevice dev)
{
    SIM_TRY(device_arg(dev));
    if (!out)
        return CUDA_ERROR_INVALID_VALUE;
    sim_pool *p = atomic_load(&current_pool[dev]);
    *out = (CUmemoryPool)(void *)(p ? p : &default_pools[dev]);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuDeviceSetMemPool(CUdevice dev, CUmemoryPool h)
{
    SIM_TRY(device_arg(dev));
    sim_pool *p = pool_of(h);
    if (!p || p->device != dev)
        return CUDA_ERROR_INVALID_VALUE;
    atomic_store(&current_pool[dev], p->is_default ? NULL : p);
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolCreate(CUmemoryPool *out, const CUmemPoolProps *props)
{
    SIM_TRY(sim_check_init());
    pthread_once(&pools_once, pools_init);
    if (!out || !props || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
        props->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    if (!sim_device_get(props->location.id))
        return CUDA_ERROR_INVALID_DEVICE;
    sim_pool *p = malloc(sizeof *p);
    if (!p)
        return CUDA_ERROR_OUT_OF_MEMORY;
    *p = (sim_pool){ SIM_MAGIC_POOL, props->location.id, false, 0, { 1, 1, 1 } };
    *out = (CUmemoryPool)(void *)p;
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolDestroy(CUmemoryPool h)
{
    SIM_TRY(sim_check_init());
    sim_pool *p = pool_of(h);
    if (!p || p->is_default)
        return CUDA_ERROR_INVALID_VALUE;
    sim_pool *expect = p;
    atomic_compare_exchange_strong(&current_pool[p->device], &expect, NULL);
    /* The handle stays readable as a tombstone (never reused). */
    p->magic = 0;
    return CUDA_SUCCESS;
}

/* The checks of both attribute calls, a pool and a value buffer, then
 * where attribute `a` is kept in the pool and its size (*field NULL for the
 * usage counters, which are not simulated, and unknown attributes). */
static CUresult attr_field(CUmemoryPool h, CUmemPool_attribute a, const void *value, void **field, size_t *size)
{
    sim_pool *p = pool_of(h);
    if (!p || !value)
        return CUDA_ERROR_INVALID_VALUE;
    *size = sizeof p->reuse[0];
    switch (a) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:   *field = &p->reuse[0]; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:         *field = &p->reuse[1]; break;
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES: *field = &p->reuse[2]; break;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
        *field = &p->release_threshold;
        *size = sizeof p->release_threshold;
        break;
    default:
        *field = NULL;
    }
    return CUDA_SUCCESS;
}

SIM_API CUresult cuMemPoolSetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
    void *field;
    size_t size;
    SIM_TRY(attr_field(h, attr, value, &field, &size));
    if (field) {
        memcpy(field, value, size);
        return CUDA_SUCCESS;
    }
    if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH || attr == CU_MEMPOOL_ATTR_USED_MEM_HIGH)
        return CUDA_ERROR_NOT_SUPPORTED;     /* usage counters: not simulated */
    return CUDA_ERROR_INVALID_VALUE;
}

SIM_API CUresult cuMemPoolGetAttribute(CUmemoryPool h, CUmemPool_attribute attr, void *value)
{
    void *field;
    size_t size;
    SIM_TRY(attr_field(h, attr, value, &field, &size));
    if (!field)
        return CUDA_ERROR_NOT_SUPPORTED;     /* the usage counters */
    memcpy(value, field, size);
    return CUDA_SUCCESS;
}

/* Every device may access every pool (one address space): checked, kept nowhere. */
SIM_API CUresult cuMemPoolSetAccess(CUmemoryPool h, const CUmemAccessDesc *map, size_t count)
{
    if (!pool_of(h) || (count && !map))
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < count; i++)
        if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
            !sim_device_get(map[i].location.id) || map[i].flags > CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
    return CUDA_SUCCESS;
}

/* Frees reach the device at once (see cuMemFreeAsync): nothing to trim. */
SIM_API CUresult cuMemPoolTrimTo(CUmemoryPool h, size_t minBytesToKeep)
{
    (void)minBytesToKeep;
    return pool_of(h) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

static CUresult alloc_from_pool(CUdeviceptr *dptr, size_t bytesize, CUmemoryPool h, CUstream hs,
                                bool ptsz)
{
    sim_stream *s;
    CUresult rc = sim_stream_resolve(hs, ptsz, &s);
    if (rc != CUDA_SUCCESS)
        return rc;
    sim_pool *p = pool_of(h);
    if (!p || !dptr || bytesize == 0)
        return CUDA_ERROR_INVALID_VALUE;
    sim_device *dev = sim_device_get(p->device);
    SIM_COUNT(dev, mem_alloc_async_calls);
    uintptr_t out;
    rc = sim_mem_alloc(dev, bytesize, SIM_MEM_ASYNC, &out);
    if (rc == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)out;
    return rc;
}

SIM_API CUresult cuMemAllocFromPoolAsync(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    return alloc_from_pool(d, n, p, s, false);
}

SIM_API CUresult cuMemAllocFromPoolAsync_ptsz(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    return alloc_from_pool(d, n, p, s, true);
}

/* ---- managed-memory hints ----------------------------------------------- */

/* A hint in stream order: the range must be managed memory. */
static CUresult managed_hint(CUdeviceptr ptr, size_t n, CUstream hs, bool ptsz)
{
    sim_stream *s;
    SIM_TRY(sim_stream_resolve(hs, ptsz, &s));
    sim_device *dev;
    uintptr_t base;
    size_t size;
    sim_mem_kind kind;
    if (sim_mem_lookup((uintptr_t)ptr, &dev, &base, &size, &kind) != CUDA_SUCCESS ||
        kind != SIM_MEM_MANAGED || (uintptr_t)ptr + n > base + size)
        return CUDA_ERROR_INVALID_VALUE;
    sim_op *op = sim_op_new(SIM_OP_NOP);
    if (!op)
        return CUDA_ERROR_OUT_OF_MEMORY;
    return sim_stream_enqueue(s, op, NULL);
}

SIM_API CUresult cuMemPrefetchAsync_v2(CUdeviceptr p, size_t n, CUmemLocation loc, unsigned int flags,
                                       CUstream s)
{
    if (flags != 0 || (loc.type != CU_MEM_LOCATION_TYPE_DEVICE &&
                       loc.type != CU_MEM_LOCATION_TYPE_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    if (loc.type == CU_MEM_LOCATION_TYPE_DEVICE && !sim_device_get(loc.id))
        return CUDA_ERROR_INVALID_DEVICE;
    return managed_hint(p, n, s, false);
}

SIM_API CUresult cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t n, CUmemLocation loc,
                                            unsigned int flags, CUstream s)
{
    if (flags != 0 || (loc.type != CU_MEM_LOCATION_TYPE_DEVICE &&
                       loc.type != CU_MEM_LOCATION_TYPE_HOST))
        return CUDA_ERROR_INVALID_VALUE;
    return managed_hint(p, n, s, true);
}

SIM_API CUresult cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    return managed_hint(p, n, s, false);
}

SIM_API CUresult cuStreamAttachMemAsync_ptsz(CUstream s, CUdeviceptr p, size_t n, unsigned int flags)
{
    if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
        flags != CU_MEM_ATTACH_SINGLE)
        return CUDA_ERROR_INVALID_VALUE;
    return managed_hint(p, n, s, true);
}
