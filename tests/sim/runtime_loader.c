/* tests/sim/runtime_loader.c - how the runtime reaches the driver, and the
 * per-thread state every runtime call shares.
 *
 * Exactly as the real runtime >= 11.3 does it, so that a tool hooking the
 * driver sees the same sequence: on the first runtime call, once,
 *   dlopen("libcuda.so.1"), dlsym(h, "cuGetProcAddress_v2"),
 *   cuGetProcAddress_v2("cuGetProcAddress", ..., CUDA_VERSION, 0) first,
 *   then every entry point through the pointer it returned, by base name,
 *   flags 0, and again with CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
 *   for the stream-taking ones; finally cuInit(0).
 * No cu* symbol is linked. The once-initializer never calls the runtime.
 */
#include "runtime_internal.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

rt_driver rt_drv;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static cudaError_t    load_error = cudaErrorInitializationError;

/* Per thread: the device cudaSetDevice chose (0 until then) and the last error. */
static __thread int         tls_device;
static __thread cudaError_t tls_last_error;

/* The primary context of each device, retained once by the runtime. */
#define RT_MAX_DEVICES 16
static pthread_mutex_t      primary_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(CUcontext)   primary[RT_MAX_DEVICES];

static int lookup(const char *name, void *field, cuuint64_t flags)
{
    void *fn = NULL;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (rt_drv.cuGetProcAddress(name, &fn, CUDA_VERSION, flags, &status) != CUDA_SUCCESS ||
        status != CU_GET_PROC_ADDRESS_SUCCESS || !fn)
        return -1;
    memcpy(field, &fn, sizeof fn);      /* object pointer to function pointer */
    return 0;
}

static void load_driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        load_error = cudaErrorInsufficientDriver;
        return;
    }
    void *sym = dlsym(h, "cuGetProcAddress_v2");
    if (!sym) {
        load_error = cudaErrorInsufficientDriver;
        return;
    }
    CUresult (*bootstrap)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
    memcpy(&bootstrap, &sym, sizeof sym);
    void *gpa = NULL;
    CUdriverProcAddressQueryResult status;
    if (bootstrap("cuGetProcAddress", &gpa, CUDA_VERSION, 0, &status) != CUDA_SUCCESS || !gpa) {
        load_error = cudaErrorInsufficientDriver;
        return;
    }
    memcpy(&rt_drv.cuGetProcAddress, &gpa, sizeof gpa);

    int missing = 0;
#define RT_LOOK(f, name, type) missing |= lookup(name, &rt_drv.f, 0);
#define RT_LOOK_PTSZ(f, name, type)                                                     \
    missing |= lookup(name, &rt_drv.f, 0);                                              \
    missing |= lookup(name, &rt_drv.f##_ptsz, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
    RT_DRIVER_FUNCS(RT_LOOK, RT_LOOK_PTSZ)
#undef RT_LOOK
#undef RT_LOOK_PTSZ
    if (missing) {
        load_error = cudaErrorInsufficientDriver;
        return;
    }
    CUresult r = rt_drv.cuInit(0);
    if (r == CUDA_ERROR_NO_DEVICE) {
        load_error = cudaErrorNoDevice;
        return;
    }
    load_error = r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInitializationError;
}

cudaError_t rt_init(void)
{
    pthread_once(&load_once, load_driver);
    return load_error;
}

/* ---- errors ------------------------------------------------------------- */

/* The runtime's codes are numbered like the driver's wherever both have
 * one (CUDA_ERROR_OUT_OF_MEMORY 2 = cudaErrorMemoryAllocation 2,
 * CUDA_ERROR_INVALID_HANDLE 400 = cudaErrorInvalidResourceHandle, ...).
 * A driver code with no runtime twin is cudaErrorUnknown. */
cudaError_t rt_error(CUresult r)
{
    if (r == CUDA_SUCCESS)
        return cudaSuccess;
    if (r == CUDA_ERROR_DEINITIALIZED)
        return cudaErrorCudartUnloading;
    return rt_error_name((cudaError_t)r) ? (cudaError_t)r : cudaErrorUnknown;
}

/* "Not ready" is not an error (cudaErrorNotReady's own description): it is
 * returned but not remembered. */
cudaError_t rt_ret(cudaError_t e)
{
    if (rt_unlikely(e != cudaSuccess) && e != cudaErrorNotReady)
        tls_last_error = e;
    return e;
}

cudaError_t rt_ret_drv(CUresult r)
{
    return rt_ret(rt_error(r));
}

RT_API cudaError_t cudaGetLastError(void)
{
    cudaError_t e = tls_last_error;
    tls_last_error = cudaSuccess;
    return e;
}

RT_API cudaError_t cudaPeekAtLastError(void)
{
    return tls_last_error;
}

/* ---- contexts ----------------------------------------------------------- */

static CUcontext primary_ctx(int device)
{
    CUcontext c = atomic_load_explicit(&primary[device], memory_order_acquire);
    if (c)
        return c;
    pthread_mutex_lock(&primary_lock);
    c = atomic_load_explicit(&primary[device], memory_order_relaxed);
    if (!c && rt_drv.cuDevicePrimaryCtxRetain(&c, device) == CUDA_SUCCESS)
        atomic_store_explicit(&primary[device], c, memory_order_release);
    pthread_mutex_unlock(&primary_lock);
    return c;
}

cudaError_t rt_set_device(int device)
{
    int count = 0;
    rt_drv.cuDeviceGetCount(&count);
    if (device < 0 || device >= count || device >= RT_MAX_DEVICES)
        return cudaErrorInvalidDevice;
    CUcontext c = primary_ctx(device);
    if (!c)
        return cudaErrorInitializationError;
    CUresult r = rt_drv.cuCtxSetCurrent(c);
    if (r != CUDA_SUCCESS)
        return rt_error(r);
    tls_device = device;
    return cudaSuccess;
}

/* cudaDeviceReset destroyed device's primary context: forget the handle,
 * so that the next rt_set_device retains it again. */
void rt_primary_was_reset(int device)
{
    pthread_mutex_lock(&primary_lock);
    atomic_store_explicit(&primary[device], NULL, memory_order_release);
    pthread_mutex_unlock(&primary_lock);
}

/* Like the real runtime, adopt whatever context the thread has current
 * (cuCtxSetCurrent from driver code included); with none, make the primary
 * context of this thread's device current. A current primary context that a
 * reset destroyed (cudaDeviceReset, or cuDevicePrimaryCtxReset from driver
 * code) is retained again first, as the real runtime makes it anew at its
 * next call (a guess for the driver's reset: tests/sim/README.md). */
cudaError_t rt_enter(void)
{
    cudaError_t e = rt_init();
    if (rt_unlikely(e != cudaSuccess))
        return e;
    CUcontext c = NULL;
    rt_drv.cuCtxGetCurrent(&c);
    if (c) {
        CUdevice d;
        if (!rt_unlikely(rt_drv.cuCtxGetDevice(&d, NULL) == CUDA_ERROR_CONTEXT_IS_DESTROYED))
            return cudaSuccess;
        rt_primary_was_reset(tls_device);
    }
    return rt_set_device(tls_device);
}

int rt_current_device(void)
{
    CUcontext c = NULL;
    CUdevice d;
    rt_drv.cuCtxGetCurrent(&c);
    if (c && rt_drv.cuCtxGetDevice(&d, NULL) == CUDA_SUCCESS)
        return d;
    return tls_device;
}
