/* trace/common/cuda_errors.h - the CUDA error codes vramtrace returns where it
 * stands in for CUDA (allocation, free, the backend contract), defined once.
 * They are cudaError_t's numbers; the driver's CUresult has the same number
 * for each of them except VT_CUDA_ERR_INSUFFICIENT_DRIVER, which only the
 * runtime returns. Everything else fails with a negative errno (vramtrace.h). */
#ifndef VT_COMMON_CUDA_ERRORS_H
#define VT_COMMON_CUDA_ERRORS_H

enum {
    VT_CUDA_SUCCESS = 0,
    VT_CUDA_ERR_INVALID_VALUE = 1,         /* cudaErrorInvalidValue */
    VT_CUDA_ERR_OOM = 2,                   /* cudaErrorMemoryAllocation */
    VT_CUDA_ERR_NOT_INITIALIZED = 3,       /* cudaErrorInitializationError */
    VT_CUDA_ERR_INSUFFICIENT_DRIVER = 35,  /* cudaErrorInsufficientDriver */
    VT_CUDA_ERR_NO_DEVICE = 100,           /* cudaErrorNoDevice */
    VT_CUDA_ERR_INVALID_DEVICE = 101,      /* cudaErrorInvalidDevice */
    VT_CUDA_ERR_NOT_READY = 600,           /* cudaErrorNotReady */
};

#endif
