/* tests/sim/runtime_memory_extras.c - the runtime's other allocations:
 * pitched (cudaMallocPitch, cudaMalloc3D), arrays (cudaMallocArray,
 * cudaMalloc3DArray), mapped host pointers, device flags, 2D copies
 * (synchronous and stream-ordered), managed-memory hints. Each reaches the
 * driver call the real runtime makes (cuMemAllocPitch, cuArray3DCreate,
 * ...), so whoever watches the driver sees them.
 *
 * Sources (CUDA Runtime API reference): cudaMallocPitch / cudaMalloc3D (pitch
 * from the driver; a zero extent allocates nothing and succeeds),
 * cudaMallocArray / cudaMalloc3DArray (the channel descriptor's bits give the
 * element size), cudaSetDeviceFlags (scheduling, cudaDeviceMapHost,
 * cudaDeviceLmemResizeToMax; anything else cudaErrorInvalidValue),
 * cudaHostGetDevicePointer (flags must be 0; unified addressing: the same
 * pointer), cudaMemcpy2D (synchronous like cudaMemcpy), cudaMemset2D/3D (row
 * by row, asynchronous like cudaMemset), cudaMemPrefetchAsync
 * and cudaStreamAttachMemAsync (hints on managed memory, in stream order).
 */
#include "runtime_internal.h"

#include <stdint.h>

RT_API cudaError_t cudaMallocPitch(void **devPtr, size_t *pitch, size_t width, size_t height)
{
    if (!devPtr || !pitch)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    if (width == 0 || height == 0) {
        *devPtr = NULL;
        *pitch = width;
        return cudaSuccess;
    }
    CUdeviceptr p;
    CUresult r = rt_drv.cuMemAllocPitch(&p, pitch, width, height, 4);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    *devPtr = (void *)(uintptr_t)p;
    return cudaSuccess;
}

RT_API cudaError_t cudaMalloc3D(struct cudaPitchedPtr *out, struct cudaExtent extent)
{
    if (!out)
        return rt_ret(cudaErrorInvalidValue);
    size_t rows = extent.height * extent.depth;
    if (extent.depth && rows / extent.depth != extent.height)
        return rt_ret(cudaErrorInvalidValue);
    void *p = NULL;
    size_t pitch = 0;
    cudaError_t e = cudaMallocPitch(&p, &pitch, extent.width, rows);
    if (e != cudaSuccess)
        return e;
    *out = (struct cudaPitchedPtr){ .ptr = p, .pitch = pitch, .xsize = extent.width,
                                    .ysize = extent.height };
    return cudaSuccess;
}

/* Channel bits -> a driver format of the same element size. */
static cudaError_t array_desc(const struct cudaChannelFormatDesc *d, CUDA_ARRAY3D_DESCRIPTOR *a)
{
    if (!d || d->x < 0 || d->y < 0 || d->z < 0 || d->w < 0)
        return cudaErrorInvalidChannelDescriptor;
    int bits = d->x + d->y + d->z + d->w;
    switch (bits) {
    case 8:   a->Format = CU_AD_FORMAT_UNSIGNED_INT8;  a->NumChannels = 1; break;
    case 16:  a->Format = CU_AD_FORMAT_UNSIGNED_INT16; a->NumChannels = 1; break;
    case 32:  a->Format = CU_AD_FORMAT_UNSIGNED_INT32; a->NumChannels = 1; break;
    case 64:  a->Format = CU_AD_FORMAT_UNSIGNED_INT32; a->NumChannels = 2; break;
    case 128: a->Format = CU_AD_FORMAT_UNSIGNED_INT32; a->NumChannels = 4; break;
    default:  return cudaErrorInvalidChannelDescriptor;
    }
    return cudaSuccess;
}

static cudaError_t array_create(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                size_t w, size_t h, size_t depth)
{
    if (!array)
        return rt_ret(cudaErrorInvalidValue);
    CUDA_ARRAY3D_DESCRIPTOR a = { .Width = w, .Height = h, .Depth = depth };
    cudaError_t e = array_desc(desc, &a);
    if (e != cudaSuccess)
        return rt_ret(e);
    if ((e = rt_enter()) != cudaSuccess)
        return rt_ret(e);
    CUarray out;
    CUresult r = rt_drv.cuArray3DCreate(&out, &a);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    *array = (cudaArray_t)(void *)out;
    return cudaSuccess;
}

RT_API cudaError_t cudaMallocArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                   size_t width, size_t height, unsigned int flags)
{
    (void)flags;   /* surface load/store, texture gather: no device code here */
    return array_create(array, desc, width, height, 0);
}

RT_API cudaError_t cudaMalloc3DArray(cudaArray_t *array, const struct cudaChannelFormatDesc *desc,
                                     struct cudaExtent extent, unsigned int flags)
{
    (void)flags;
    return array_create(array, desc, extent.width, extent.height, extent.depth);
}

RT_API cudaError_t cudaFreeArray(cudaArray_t array)
{
    if (!array)
        return cudaSuccess;
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuArrayDestroy((CUarray)(void *)array));
}

RT_API cudaError_t cudaHostGetDevicePointer(void **pDevice, void *pHost, unsigned int flags)
{
    if (!pDevice)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    CUdeviceptr d;
    CUresult r = rt_drv.cuMemHostGetDevicePointer(&d, pHost, flags);
    if (r != CUDA_SUCCESS)
        return rt_ret_drv(r);
    *pDevice = (void *)(uintptr_t)d;
    return cudaSuccess;
}

static unsigned device_flags[16];   /* per device, as the primary context keeps them */

RT_API cudaError_t cudaSetDeviceFlags(unsigned int flags)
{
    const unsigned known = cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax |
                           cudaDeviceSyncMemops;
    if ((flags & ~known) || (flags & cudaDeviceScheduleMask) == 3 ||
        (flags & cudaDeviceScheduleMask) > cudaDeviceScheduleBlockingSync)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    int dev = rt_current_device();
    if (dev >= 0 && dev < 16)
        device_flags[dev] = flags;
    return cudaSuccess;
}

RT_API cudaError_t cudaGetDeviceFlags(unsigned int *flags)
{
    if (!flags)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    int dev = rt_current_device();
    /* cudaDeviceMapHost is always on under unified addressing. */
    *flags = (dev >= 0 && dev < 16 ? device_flags[dev] : 0) | cudaDeviceMapHost;
    return cudaSuccess;
}

/* A pitched copy is `height` rows of `width` bytes, each one driver copy
 * (unified addressing: the kind is only checked): synchronous like
 * cudaMemcpy, or ordered on `stream`. */
static cudaError_t copy_2d(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                           size_t height, enum cudaMemcpyKind kind, bool async, cudaStream_t stream)
{
    RT_TRY(rt_enter());
    if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault)
        return rt_ret(cudaErrorInvalidMemcpyDirection);
    if (width > dpitch || width > spitch)
        return rt_ret(cudaErrorInvalidPitchValue);
    for (size_t row = 0; row < height; row++) {
        CUdeviceptr d = (CUdeviceptr)(uintptr_t)dst + row * dpitch;
        CUdeviceptr s = (CUdeviceptr)(uintptr_t)src + row * spitch;
        CUresult r = async ? rt_drv.cuMemcpyAsync(d, s, width, (CUstream)stream) : rt_drv.cuMemcpy(d, s, width);
        if (r != CUDA_SUCCESS)
            return rt_ret_drv(r);
    }
    return cudaSuccess;
}

RT_API cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch,
                                size_t width, size_t height, enum cudaMemcpyKind kind)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, false, NULL);
}

RT_API cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
                                     size_t height, enum cudaMemcpyKind kind, cudaStream_t stream)
{
    return copy_2d(dst, dpitch, src, spitch, width, height, kind, true, stream);
}

RT_API cudaError_t cudaMemPrefetchAsync(const void *devPtr, size_t count, struct cudaMemLocation location,
                                        unsigned int flags, cudaStream_t stream)
{
    RT_TRY(rt_enter());
    CUmemLocation loc = { .type = (CUmemLocationType)location.type, .id = location.id };
    return rt_ret_drv(rt_drv.cuMemPrefetchAsync((CUdeviceptr)(uintptr_t)devPtr, count, loc, flags,
                                                (CUstream)stream));
}

RT_API cudaError_t cudaStreamAttachMemAsync(cudaStream_t stream, void *devPtr, size_t length,
                                            unsigned int flags)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuStreamAttachMemAsync((CUstream)stream, (CUdeviceptr)(uintptr_t)devPtr,
                                                    length, flags));
}

/* A plain constructor (runtime API, "Texture Object Management"). */
RT_API struct cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w,
                                                          enum cudaChannelFormatKind f)
{
    return (struct cudaChannelFormatDesc){ .x = x, .y = y, .z = z, .w = w, .f = f };
}

/* cudaMemset2D / cudaMemset3D: one ordered memset per row, like cudaMemset
 * (asynchronous for device memory, on the default stream). */
RT_API cudaError_t cudaMemset2D(void *devPtr, size_t pitch, int value, size_t width, size_t height)
{
    RT_TRY(rt_enter());
    if (width > pitch && height > 1)
        return rt_ret(cudaErrorInvalidPitchValue);
    for (size_t row = 0; row < height; row++) {
        CUresult r = rt_drv.cuMemsetD8((CUdeviceptr)(uintptr_t)devPtr + row * pitch,
                                       (unsigned char)value, width);
        if (r != CUDA_SUCCESS)
            return rt_ret_drv(r);
    }
    return cudaSuccess;
}

RT_API cudaError_t cudaMemset3D(struct cudaPitchedPtr p, int value, struct cudaExtent extent)
{
    size_t rows = extent.height * extent.depth;
    if (extent.depth && rows / extent.depth != extent.height)
        return rt_ret(cudaErrorInvalidValue);
    return cudaMemset2D(p.ptr, p.pitch, value, extent.width, rows);
}
