/*
 * alloc/cuda_driver.h - the real CUDA driver entry points, resolved once.
 *
 * Everything in vramtrace that must reach the device (the allocator backend,
 * the hooks forwarding to the real driver) calls through this table, never
 * through an exported cu* symbol: when libvramtrace.so is preloaded those
 * names are our own hooks. The table is filled from dlopen("libcuda.so.1")
 * with the REAL dlsym (dlvsym(RTLD_NEXT, "dlsym", ...), because the hooks
 * override the global dlsym) and then the driver's own cuGetProcAddress with
 * base names, so it works the same for programs that link the runtime
 * statically (no libcudart.so in the process) and for the simulated driver.
 *
 * Field names are the ABI names the function pointers have (cuMemAlloc_v2
 * is the 64-bit-size version that cuGetProcAddress returns for "cuMemAlloc").
 * A field is NULL when the driver lacks that entry point.
 */
#ifndef VT_ALLOC_CUDA_DRIVER_H
#define VT_ALLOC_CUDA_DRIVER_H

#include <stdbool.h>
#include <stddef.h>
#include <cuda.h>

typedef struct vt__driver_api {
    /* initialization and devices */
    CUresult (*cuInit)(unsigned flags);
    CUresult (*cuDriverGetVersion)(int *version);
    CUresult (*cuDeviceGet)(CUdevice *dev, int ordinal);
    CUresult (*cuDeviceGetCount)(int *count);
    CUresult (*cuDeviceGetName)(char *name, int len, CUdevice dev);
    CUresult (*cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev);
    CUresult (*cuGetErrorString)(CUresult err, const char **str);
    /* contexts */
    CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *ctx, CUdevice dev);
    CUresult (*cuDevicePrimaryCtxRelease_v2)(CUdevice dev);
    CUresult (*cuCtxGetCurrent)(CUcontext *ctx);
    CUresult (*cuCtxSetCurrent)(CUcontext ctx);
    CUresult (*cuCtxGetDevice)(CUdevice *dev);         /* the 2.0 ABI, see cuda_driver.c */
    CUresult (*cuCtxPushCurrent_v2)(CUcontext ctx);
    CUresult (*cuCtxPopCurrent_v2)(CUcontext *ctx);
    CUresult (*cuCtxSynchronize)(void);                 /* the 2.0 ABI, see cuda_driver.c */
    /* memory */
    CUresult (*cuMemAlloc_v2)(CUdeviceptr *ptr, size_t bytes);
    CUresult (*cuMemFree_v2)(CUdeviceptr ptr);
    CUresult (*cuMemGetInfo_v2)(size_t *free_bytes, size_t *total_bytes);
    CUresult (*cuMemAllocAsync)(CUdeviceptr *ptr, size_t bytes, CUstream s);
    CUresult (*cuMemFreeAsync)(CUdeviceptr ptr, CUstream s);
    CUresult (*cuMemAllocManaged)(CUdeviceptr *ptr, size_t bytes, unsigned flags);
    CUresult (*cuMemAllocHost_v2)(void **ptr, size_t bytes);
    CUresult (*cuMemFreeHost)(void *ptr);
    CUresult (*cuMemGetAddressRange_v2)(CUdeviceptr *base, size_t *size, CUdeviceptr ptr);
    CUresult (*cuPointerGetAttribute)(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
    /* virtual memory management (expandable segments); NULL before CUDA 10.2 */
    CUresult (*cuMemGetAllocationGranularity)(size_t *g, const CUmemAllocationProp *prop,
                                              CUmemAllocationGranularity_flags option);
    CUresult (*cuMemCreate)(CUmemGenericAllocationHandle *h, size_t size,
                            const CUmemAllocationProp *prop, unsigned long long flags);
    CUresult (*cuMemRelease)(CUmemGenericAllocationHandle h);
    CUresult (*cuMemAddressReserve)(CUdeviceptr *ptr, size_t size, size_t align, CUdeviceptr addr,
                                    unsigned long long flags);
    CUresult (*cuMemAddressFree)(CUdeviceptr ptr, size_t size);
    CUresult (*cuMemMap)(CUdeviceptr ptr, size_t size, size_t offset,
                         CUmemGenericAllocationHandle h, unsigned long long flags);
    CUresult (*cuMemUnmap)(CUdeviceptr ptr, size_t size);
    CUresult (*cuMemSetAccess)(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc,
                               size_t count);
    /* streams and events */
    CUresult (*cuStreamSynchronize)(CUstream s);
    CUresult (*cuStreamGetDevice)(CUstream s, CUdevice *dev);  /* CUDA 12.8+, else NULL */
    CUresult (*cuStreamGetCtx)(CUstream s, CUcontext *ctx);    /* the 9.2 ABI (no green ctx) */
    CUresult (*cuStreamQuery)(CUstream s);
    CUresult (*cuStreamIsCapturing)(CUstream s, CUstreamCaptureStatus *st); /* 10.0+, else NULL */
    CUresult (*cuThreadExchangeStreamCaptureMode)(CUstreamCaptureMode *mode); /* 10.1+, else NULL */
    CUresult (*cuStreamWaitEvent)(CUstream s, CUevent ev, unsigned flags);
    CUresult (*cuEventCreate)(CUevent *ev, unsigned flags);
    CUresult (*cuEventRecord)(CUevent ev, CUstream s);
    CUresult (*cuEventQuery)(CUevent ev);
    CUresult (*cuEventSynchronize)(CUevent ev);
    CUresult (*cuEventDestroy_v2)(CUevent ev);
    /* the driver's own resolver (real, not hooked) */
    CUresult (*cuGetProcAddress_v2)(const char *symbol, void **pfn, int cuda_version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *status);
    int cuda_version;      /* version passed to cuGetProcAddress (min(driver, headers)) */
} vt__driver_api;

/* The table, resolved on first call (thread-safe, no lock a CUDA call can
 * re-enter: a re-entrant call from inside the resolution returns NULL).
 * @return NULL when libcuda.so.1 cannot be loaded; the reason was printed
 * once on stderr. Does NOT call cuInit: see vt__driver_init(). */
const vt__driver_api *vt__driver(void);

/* cuInit(0) once per process, without a lock: callers racing the first
 * initialization each call cuInit themselves (it is idempotent).
 * @return the CUresult of cuInit (CUDA_ERROR_NOT_INITIALIZED when the
 * driver could not be loaded). */
CUresult vt__driver_init(void);

/* The real dlsym of the C library (never the hooks' override).
 * @return NULL if it cannot be found. */
void *vt__real_dlsym(void *handle, const char *name);

#endif /* VT_ALLOC_CUDA_DRIVER_H */
