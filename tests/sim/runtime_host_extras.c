/* tests/sim/runtime_host_extras.c - the remaining host-side runtime calls a
 * PyTorch build links: stream callbacks, the profiler switches, host
 * registration (kept by the driver).
 */
#include "runtime_internal.h"

#include <cuda_profiler_api.h>
#include <stdint.h>
#include <stdlib.h>

/* cudaStreamAddCallback: a host function in stream order that also gets the
 * stream and a status (always cudaSuccess: no kernel can fail here). */
typedef struct stream_callback {
    cudaStreamCallback_t fn;
    cudaStream_t         stream;
    void                *user;
} stream_callback;

static void run_callback(void *arg)
{
    stream_callback c = *(stream_callback *)arg;
    free(arg);
    c.fn(c.stream, cudaSuccess, c.user);
}

RT_API cudaError_t cudaStreamAddCallback(cudaStream_t stream, cudaStreamCallback_t callback, void *userData,
                                         unsigned int flags)
{
    if (!callback || flags != 0)
        return rt_ret(cudaErrorInvalidValue);
    RT_TRY(rt_enter());
    stream_callback *c = malloc(sizeof *c);
    if (!c)
        return rt_ret(cudaErrorMemoryAllocation);
    *c = (stream_callback){ callback, stream, userData };
    CUresult r = rt_drv.cuLaunchHostFunc((CUstream)stream, run_callback, c);
    if (r != CUDA_SUCCESS)
        free(c);
    return rt_ret_drv(r);
}

/* No profiler is ever attached: both are documented no-ops then. */
RT_API cudaError_t cudaProfilerStart(void) { return cudaSuccess; }
RT_API cudaError_t cudaProfilerStop(void)  { return cudaSuccess; }

/* Page-locking existing host memory: the driver remembers the range, so
 * copies with it are asynchronous like those with cudaMallocHost memory. */
RT_API cudaError_t cudaHostRegister(void *ptr, size_t size, unsigned int flags)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuMemHostRegister(ptr, size, flags));
}

RT_API cudaError_t cudaHostUnregister(void *ptr)
{
    RT_TRY(rt_enter());
    return rt_ret_drv(rt_drv.cuMemHostUnregister(ptr));
}
