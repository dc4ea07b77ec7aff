/* tests/sim/runtime_internal.h - the simulated runtime's cross-file map.
 *
 * The runtime holds no device state. It loads the driver the way the real
 * runtime >= 11.3 does (runtime_loader.c) and calls it only through the
 * function pointers in `rt_drv`. It keeps per thread: the current device,
 * the last error and the launch configuration stack.
 */
#ifndef VT_SIM_RUNTIME_INTERNAL_H
#define VT_SIM_RUNTIME_INTERNAL_H

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <stdbool.h>

#define RT_API __attribute__((visibility("default")))
#define rt_unlikely(x) __builtin_expect(!!(x), 0)

/* Returns from the calling entry point with the runtime error of `call`, if
 * any, remembered as the thread's last error (rt_ret): mostly
 * RT_TRY(rt_enter()) or RT_TRY(rt_init()) before an entry point's work. */
#define RT_TRY(call)                                  \
    do {                                              \
        cudaError_t rt_try_e_ = (call);               \
        if (rt_unlikely(rt_try_e_ != cudaSuccess))    \
            return rt_ret(rt_try_e_);                 \
    } while (0)

/* The driver entry points the runtime uses: X(field, base name, type).
 * PTSZ rows are asked for twice, the second time with
 * CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM into field_ptsz. */
#define RT_DRIVER_FUNCS(X, PTSZ)                                                            \
    X(cuInit, "cuInit", CUresult (*)(unsigned))                                             \
    X(cuDriverGetVersion, "cuDriverGetVersion", CUresult (*)(int *))                       \
    X(cuDeviceGetCount, "cuDeviceGetCount", CUresult (*)(int *))                           \
    X(cuDeviceGet, "cuDeviceGet", CUresult (*)(CUdevice *, int))                           \
    X(cuDeviceGetName, "cuDeviceGetName", CUresult (*)(char *, int, CUdevice))             \
    X(cuDeviceGetAttribute, "cuDeviceGetAttribute", CUresult (*)(int *, CUdevice_attribute, CUdevice)) \
    X(cuDeviceTotalMem, "cuDeviceTotalMem", CUresult (*)(size_t *, CUdevice))              \
    X(cuDeviceGetUuid, "cuDeviceGetUuid", CUresult (*)(CUuuid *, CUdevice))                \
    X(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", CUresult (*)(CUcontext *, CUdevice)) \
    X(cuDevicePrimaryCtxReset, "cuDevicePrimaryCtxReset", CUresult (*)(CUdevice))          \
    X(cuCtxGetCurrent, "cuCtxGetCurrent", CUresult (*)(CUcontext *))                       \
    X(cuCtxSetCurrent, "cuCtxSetCurrent", CUresult (*)(CUcontext))                         \
    X(cuCtxGetDevice, "cuCtxGetDevice", CUresult (*)(CUdevice *, CUcontext)) /* 13.0 ABI */ \
    X(cuCtxSynchronize, "cuCtxSynchronize", CUresult (*)(CUcontext))         /* 13.0 ABI */ \
    X(cuMemAlloc, "cuMemAlloc", CUresult (*)(CUdeviceptr *, size_t))                       \
    X(cuMemFree, "cuMemFree", CUresult (*)(CUdeviceptr))                                   \
    X(cuMemAllocManaged, "cuMemAllocManaged", CUresult (*)(CUdeviceptr *, size_t, unsigned)) \
    X(cuMemAllocHost, "cuMemAllocHost", CUresult (*)(void **, size_t))                     \
    X(cuMemHostAlloc, "cuMemHostAlloc", CUresult (*)(void **, size_t, unsigned))           \
    X(cuMemFreeHost, "cuMemFreeHost", CUresult (*)(void *))                                \
    X(cuMemGetInfo, "cuMemGetInfo", CUresult (*)(size_t *, size_t *))                      \
    X(cuPointerGetAttributes, "cuPointerGetAttributes",                                    \
      CUresult (*)(unsigned, CUpointer_attribute *, void **, CUdeviceptr))                 \
    X(cuStreamCreateWithPriority, "cuStreamCreateWithPriority", CUresult (*)(CUstream *, unsigned, int)) \
    X(cuCtxGetStreamPriorityRange, "cuCtxGetStreamPriorityRange", CUresult (*)(int *, int *)) \
    X(cuStreamDestroy, "cuStreamDestroy", CUresult (*)(CUstream))                          \
    X(cuEventCreate, "cuEventCreate", CUresult (*)(CUevent *, unsigned))                   \
    X(cuEventDestroy, "cuEventDestroy", CUresult (*)(CUevent))                             \
    X(cuEventQuery, "cuEventQuery", CUresult (*)(CUevent))                                 \
    X(cuEventSynchronize, "cuEventSynchronize", CUresult (*)(CUevent))                     \
    X(cuEventElapsedTime, "cuEventElapsedTime", CUresult (*)(float *, CUevent, CUevent))   \
    X(cuGetErrorName, "cuGetErrorName", CUresult (*)(CUresult, const char **))             \
    X(cuMemAllocPitch, "cuMemAllocPitch", CUresult (*)(CUdeviceptr *, size_t *, size_t, size_t, unsigned)) \
    X(cuArray3DCreate, "cuArray3DCreate", CUresult (*)(CUarray *, const CUDA_ARRAY3D_DESCRIPTOR *)) \
    X(cuArrayDestroy, "cuArrayDestroy", CUresult (*)(CUarray))                             \
    X(cuMemHostRegister, "cuMemHostRegister", CUresult (*)(void *, size_t, unsigned))      \
    X(cuMemHostUnregister, "cuMemHostUnregister", CUresult (*)(void *))                    \
    X(cuIpcGetMemHandle, "cuIpcGetMemHandle", CUresult (*)(CUipcMemHandle *, CUdeviceptr))  \
    X(cuIpcOpenMemHandle, "cuIpcOpenMemHandle", CUresult (*)(CUdeviceptr *, CUipcMemHandle, unsigned)) \
    X(cuIpcCloseMemHandle, "cuIpcCloseMemHandle", CUresult (*)(CUdeviceptr))             \
    X(cuIpcGetEventHandle, "cuIpcGetEventHandle", CUresult (*)(CUipcEventHandle *, CUevent)) \
    X(cuIpcOpenEventHandle, "cuIpcOpenEventHandle", CUresult (*)(CUevent *, CUipcEventHandle)) \
    X(cuMemHostGetDevicePointer, "cuMemHostGetDevicePointer", CUresult (*)(CUdeviceptr *, void *, unsigned)) \
    X(cuDeviceGetDefaultMemPool, "cuDeviceGetDefaultMemPool", CUresult (*)(CUmemoryPool *, CUdevice)) \
    X(cuDeviceGetMemPool, "cuDeviceGetMemPool", CUresult (*)(CUmemoryPool *, CUdevice))    \
    X(cuDeviceSetMemPool, "cuDeviceSetMemPool", CUresult (*)(CUdevice, CUmemoryPool))      \
    X(cuMemPoolCreate, "cuMemPoolCreate", CUresult (*)(CUmemoryPool *, const CUmemPoolProps *)) \
    X(cuMemPoolDestroy, "cuMemPoolDestroy", CUresult (*)(CUmemoryPool))                    \
    X(cuMemPoolSetAttribute, "cuMemPoolSetAttribute", CUresult (*)(CUmemoryPool, CUmemPool_attribute, void *)) \
    X(cuMemPoolGetAttribute, "cuMemPoolGetAttribute", CUresult (*)(CUmemoryPool, CUmemPool_attribute, void *)) \
    X(cuMemPoolSetAccess, "cuMemPoolSetAccess", CUresult (*)(CUmemoryPool, const CUmemAccessDesc *, size_t)) \
    X(cuMemPoolTrimTo, "cuMemPoolTrimTo", CUresult (*)(CUmemoryPool, size_t))              \
    PTSZ(cuMemAllocFromPoolAsync, "cuMemAllocFromPoolAsync", CUresult (*)(CUdeviceptr *, size_t, CUmemoryPool, CUstream)) \
    PTSZ(cuMemPrefetchAsync, "cuMemPrefetchAsync", CUresult (*)(CUdeviceptr, size_t, CUmemLocation, unsigned, CUstream)) \
    PTSZ(cuStreamAttachMemAsync, "cuStreamAttachMemAsync", CUresult (*)(CUstream, CUdeviceptr, size_t, unsigned)) \
    PTSZ(cuStreamBeginCapture, "cuStreamBeginCapture", CUresult (*)(CUstream, CUstreamCaptureMode)) \
    PTSZ(cuStreamEndCapture, "cuStreamEndCapture", CUresult (*)(CUstream, CUgraph *))      \
    PTSZ(cuStreamIsCapturing, "cuStreamIsCapturing", CUresult (*)(CUstream, CUstreamCaptureStatus *)) \
    X(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode", CUresult (*)(CUstreamCaptureMode *)) \
    PTSZ(cuStreamGetCaptureInfo, "cuStreamGetCaptureInfo",                                 \
         CUresult (*)(CUstream, CUstreamCaptureStatus *, cuuint64_t *, CUgraph *,          \
                      const CUgraphNode **, const CUgraphEdgeData **, size_t *))           \
    PTSZ(cuGraphLaunch, "cuGraphLaunch", CUresult (*)(CUgraphExec, CUstream))              \
    X(cuGraphInstantiate, "cuGraphInstantiate", CUresult (*)(CUgraphExec *, CUgraph, unsigned long long)) \
    X(cuGraphExecDestroy, "cuGraphExecDestroy", CUresult (*)(CUgraphExec))                 \
    X(cuGraphDestroy, "cuGraphDestroy", CUresult (*)(CUgraph))                             \
    X(cuGraphGetNodes, "cuGraphGetNodes", CUresult (*)(CUgraph, CUgraphNode *, size_t *))  \
    PTSZ(cuMemAllocAsync, "cuMemAllocAsync", CUresult (*)(CUdeviceptr *, size_t, CUstream)) \
    PTSZ(cuMemFreeAsync, "cuMemFreeAsync", CUresult (*)(CUdeviceptr, CUstream))            \
    PTSZ(cuMemcpy, "cuMemcpy", CUresult (*)(CUdeviceptr, CUdeviceptr, size_t))             \
    PTSZ(cuMemcpyAsync, "cuMemcpyAsync", CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream)) \
    PTSZ(cuMemsetD8, "cuMemsetD8", CUresult (*)(CUdeviceptr, unsigned char, size_t))       \
    PTSZ(cuMemsetD8Async, "cuMemsetD8Async", CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream)) \
    PTSZ(cuStreamSynchronize, "cuStreamSynchronize", CUresult (*)(CUstream))               \
    PTSZ(cuStreamQuery, "cuStreamQuery", CUresult (*)(CUstream))                           \
    PTSZ(cuStreamWaitEvent, "cuStreamWaitEvent", CUresult (*)(CUstream, CUevent, unsigned)) \
    PTSZ(cuStreamGetPriority, "cuStreamGetPriority", CUresult (*)(CUstream, int *))        \
    PTSZ(cuStreamGetFlags, "cuStreamGetFlags", CUresult (*)(CUstream, unsigned *))         \
    PTSZ(cuEventRecord, "cuEventRecord", CUresult (*)(CUevent, CUstream))                  \
    PTSZ(cuEventRecordWithFlags, "cuEventRecordWithFlags", CUresult (*)(CUevent, CUstream, unsigned)) \
    PTSZ(cuLaunchHostFunc, "cuLaunchHostFunc", CUresult (*)(CUstream, CUhostFn, void *))   \
    PTSZ(cuLaunchKernel, "cuLaunchKernel",                                                 \
         CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,        \
                      unsigned, unsigned, CUstream, void **, void **))

#define RT_FIELD(f, name, type) __typeof__(type) f;
#define RT_FIELD_PTSZ(f, name, type) __typeof__(type) f; __typeof__(type) f##_ptsz;
typedef struct rt_driver {
    CUresult (*cuGetProcAddress)(const char *, void **, int, cuuint64_t,
                                 CUdriverProcAddressQueryResult *);
    RT_DRIVER_FUNCS(RT_FIELD, RT_FIELD_PTSZ)
} rt_driver;
#undef RT_FIELD
#undef RT_FIELD_PTSZ

extern rt_driver rt_drv;

/* A driver call, picking the _ptsz entry point in per-thread variants. */
#define RT_DRV(f, ptsz) ((ptsz) ? rt_drv.f##_ptsz : rt_drv.f)

/* runtime_loader.c */
cudaError_t rt_init(void);                  /* driver loaded and initialised */
cudaError_t rt_enter(void);                 /* rt_init + a current context */
void rt_primary_was_reset(int device);      /* cudaDeviceReset destroyed it */
cudaError_t rt_error(CUresult r);           /* driver code -> runtime code */
cudaError_t rt_ret(cudaError_t e);          /* remember e as the last error */
cudaError_t rt_ret_drv(CUresult r);         /* rt_ret(rt_error(r)) */
cudaError_t rt_set_device(int device);
int         rt_current_device(void);

/* runtime_launch.c */
bool        rt_kernel_registered(const void *host_fun);
cudaError_t rt_launch(const void *func, dim3 grid, dim3 block, size_t shmem,
                      cudaStream_t s, bool ptsz);   /* checked, queued as a no-op */

/* runtime_errors.c */
const char *rt_error_name(cudaError_t e);   /* NULL if unknown */

/* Per-thread variants the public header only declares in its per-thread
 * build: declared here so the definitions have prototypes. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t s);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t s);
cudaError_t cudaMallocFromPoolAsync_ptsz(void **ptr, size_t size, cudaMemPool_t memPool,
                                         cudaStream_t s);
cudaError_t cudaMemcpy_ptds(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync_ptsz(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind,
                                 cudaStream_t s);
cudaError_t cudaMemset_ptds(void *p, int value, size_t n);
cudaError_t cudaMemsetAsync_ptsz(void *p, int value, size_t n, cudaStream_t s);
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t s);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned int flags);
cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int *priority);
cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned int *flags);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned int flags);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void *userData);
cudaError_t cudaLaunchKernel_ptsz(const void *func, dim3 grid, dim3 block, void **args,
                                  size_t shmem, cudaStream_t s);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **funcPtr, unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *status);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **funcPtr,
                                                  unsigned int cudaVersion, unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *status);

#endif /* VT_SIM_RUNTIME_INTERNAL_H */
