/*
 * alloc/cuda_driver.c - resolve the real CUDA driver entry points once.
 *
 * Why not plain dlsym: the hooks export cu* names and override the global
 * dlsym, so both would hand us our own hooks. We take the C library's dlsym
 * by version, open libcuda.so.1 ourselves and ask the driver's
 * cuGetProcAddress for every entry point by base name, as the CUDA runtime
 * itself does; the cudaVersion argument selects the ABI (_v2) version.
 *
 * Why no pthread_once: dlopen runs constructors and the driver may call
 * back into hooked symbols; a re-entrant call inside pthread_once would
 * deadlock. A small atomic state machine lets a re-entrant call fail fast
 * (NULL) and makes other threads wait for the one resolver.
 */
#include "cuda_driver.h"

#include <dlfcn.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef void *(*dlsym_fn)(void *, const char *);

static vt__driver_api api;
static atomic_int state;             /* 0 unresolved, 1 resolving, 2 done, 3 failed */
static _Thread_local int resolving;  /* this thread is inside resolve() */
static atomic_int cuinit_done;
static atomic_uintptr_t real_dlsym_fn;

void *vt__real_dlsym(void *handle, const char *name)
{
    dlsym_fn fn = (dlsym_fn)atomic_load_explicit(&real_dlsym_fn, memory_order_acquire);
    if (!fn) {
        static const char *const versions[] = { "GLIBC_2.34", "GLIBC_2.2.5" };
        /* RTLD_NEXT from here is libc when we are preloaded; RTLD_DEFAULT
         * covers a build where libc comes first (dlvsym by version never
         * returns an unversioned override). */
        for (int i = 0; i < 4 && !fn; i++)
            *(void **)&fn = dlvsym(i < 2 ? RTLD_NEXT : RTLD_DEFAULT, "dlsym", versions[i % 2]);
        if (!fn)
            return NULL;
        atomic_store_explicit(&real_dlsym_fn, (uintptr_t)fn, memory_order_release);
    }
    return fn(handle, name);
}

/* One entry point: by base name through cuGetProcAddress, else by its ABI
 * name straight from the library. `max_version` caps the version asked for,
 * pinning the ABI of the field: later versions changed the signature behind
 * some base names (cuCtxGetDevice and cuCtxSynchronize take a context from
 * 13000 on, cuStreamGetCtx a green context from 12050 on) and the table keeps
 * the old one; asking with 13000 would hand a one-argument field a
 * two-argument function. */
static void *entry(void *lib, const char *base, const char *abi, int max_version)
{
    void *p = NULL;
    int version = api.cuda_version < max_version ? api.cuda_version : max_version;
    if (api.cuGetProcAddress_v2) {
        CUdriverProcAddressQueryResult st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
        if (api.cuGetProcAddress_v2(base, &p, version,
                                    CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st) == CUDA_SUCCESS
            && st == CU_GET_PROC_ADDRESS_SUCCESS && p)
            return p;
        p = NULL;
    }
    return vt__real_dlsym(lib, abi);
}

#define ENTRY(field, base) \
    (*(void **)&api.field = entry(lib, base, #field, CUDA_VERSION))
/* A version below the one where the ABI of `base` changed. */
#define ENTRY_AT(field, base, version) \
    (*(void **)&api.field = entry(lib, base, #field, version))

static int resolve(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "vramtrace: cannot load the CUDA driver (libcuda.so.1): %s\n",
                dlerror());
        return -1;
    }
    if (!vt__real_dlsym(lib, "cuInit")) {
        fprintf(stderr, "vramtrace: cannot find the real dlsym or cuInit in libcuda.so.1\n");
        return -1;
    }
    *(void **)&api.cuDriverGetVersion = vt__real_dlsym(lib, "cuDriverGetVersion");
    int drv = 0;
    if (!api.cuDriverGetVersion || api.cuDriverGetVersion(&drv) != CUDA_SUCCESS || drv <= 0)
        drv = CUDA_VERSION;
    api.cuda_version = drv < CUDA_VERSION ? drv : CUDA_VERSION;

    /* The resolver itself: _v2 (CUDA >= 12) has the status out-parameter. */
    *(void **)&api.cuGetProcAddress_v2 = vt__real_dlsym(lib, "cuGetProcAddress_v2");
    if (!api.cuGetProcAddress_v2) {
        typedef CUresult (*gpa_v1)(const char *, void **, int, cuuint64_t);
        gpa_v1 v1;
        *(void **)&v1 = vt__real_dlsym(lib, "cuGetProcAddress");
        void *p = NULL;
        /* An old driver: ask it for the v2 resolver; without one we fall back
         * to ABI names through dlsym for every entry (entry() handles NULL). */
        if (v1 && v1("cuGetProcAddress", &p, api.cuda_version, 0) == CUDA_SUCCESS && p
            && api.cuda_version >= 12000)
            *(void **)&api.cuGetProcAddress_v2 = p;
    }

    ENTRY(cuInit, "cuInit");
    ENTRY(cuDeviceGet, "cuDeviceGet");
    ENTRY(cuDeviceGetCount, "cuDeviceGetCount");
    ENTRY(cuDeviceGetName, "cuDeviceGetName");
    ENTRY(cuDeviceTotalMem_v2, "cuDeviceTotalMem");
    ENTRY(cuGetErrorString, "cuGetErrorString");
    ENTRY(cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain");
    ENTRY(cuDevicePrimaryCtxRelease_v2, "cuDevicePrimaryCtxRelease");
    ENTRY(cuCtxGetCurrent, "cuCtxGetCurrent");
    ENTRY(cuCtxSetCurrent, "cuCtxSetCurrent");
    ENTRY_AT(cuCtxGetDevice, "cuCtxGetDevice", 12000);
    ENTRY(cuCtxPushCurrent_v2, "cuCtxPushCurrent");
    ENTRY(cuCtxPopCurrent_v2, "cuCtxPopCurrent");
    ENTRY_AT(cuCtxSynchronize, "cuCtxSynchronize", 12000);
    ENTRY(cuMemAlloc_v2, "cuMemAlloc");
    ENTRY(cuMemFree_v2, "cuMemFree");
    ENTRY(cuMemGetInfo_v2, "cuMemGetInfo");
    ENTRY(cuMemAllocAsync, "cuMemAllocAsync");
    ENTRY(cuMemFreeAsync, "cuMemFreeAsync");
    ENTRY(cuMemAllocManaged, "cuMemAllocManaged");
    ENTRY(cuMemAllocHost_v2, "cuMemAllocHost");
    ENTRY(cuMemFreeHost, "cuMemFreeHost");
    ENTRY(cuMemGetAddressRange_v2, "cuMemGetAddressRange");
    ENTRY(cuPointerGetAttribute, "cuPointerGetAttribute");
    ENTRY(cuMemGetAllocationGranularity, "cuMemGetAllocationGranularity");
    ENTRY(cuMemCreate, "cuMemCreate");
    ENTRY(cuMemRelease, "cuMemRelease");
    ENTRY(cuMemAddressReserve, "cuMemAddressReserve");
    ENTRY(cuMemAddressFree, "cuMemAddressFree");
    ENTRY(cuMemMap, "cuMemMap");
    ENTRY(cuMemUnmap, "cuMemUnmap");
    ENTRY(cuMemSetAccess, "cuMemSetAccess");
    ENTRY(cuStreamSynchronize, "cuStreamSynchronize");
    ENTRY(cuStreamGetDevice, "cuStreamGetDevice");
    ENTRY_AT(cuStreamGetCtx, "cuStreamGetCtx", 12000);
    ENTRY(cuStreamQuery, "cuStreamQuery");
    ENTRY(cuStreamIsCapturing, "cuStreamIsCapturing");
    ENTRY(cuThreadExchangeStreamCaptureMode, "cuThreadExchangeStreamCaptureMode");
    ENTRY(cuStreamWaitEvent, "cuStreamWaitEvent");
    ENTRY(cuEventCreate, "cuEventCreate");
    ENTRY(cuEventRecord, "cuEventRecord");
    ENTRY(cuEventQuery, "cuEventQuery");
    ENTRY(cuEventSynchronize, "cuEventSynchronize");
    ENTRY(cuEventDestroy_v2, "cuEventDestroy");

    /* The allocator cannot work without these. */
    if (!api.cuInit || !api.cuMemAlloc_v2 || !api.cuMemFree_v2 || !api.cuEventCreate
        || !api.cuEventRecord || !api.cuEventQuery || !api.cuEventSynchronize
        || !api.cuEventDestroy_v2 || !api.cuCtxGetCurrent || !api.cuCtxPushCurrent_v2
        || !api.cuCtxPopCurrent_v2 || !api.cuDevicePrimaryCtxRetain || !api.cuDeviceGet) {
        fprintf(stderr, "vramtrace: libcuda.so.1 lacks entry points the allocator needs\n");
        return -1;
    }
    return 0;
}

const vt__driver_api *vt__driver(void)
{
    int s = atomic_load_explicit(&state, memory_order_acquire);
    if (__builtin_expect(s == 2, 1))
        return &api;
    for (;;) {
        if (s == 3 || resolving)
            return NULL;   /* failed for good, or re-entered from inside resolve() */
        if (s == 0) {
            int expect = 0;
            if (atomic_compare_exchange_strong(&state, &expect, 1)) {
                resolving = 1;
                int rc = resolve();
                resolving = 0;
                atomic_store_explicit(&state, rc == 0 ? 2 : 3, memory_order_release);
                return rc == 0 ? &api : NULL;
            }
        }
        if (s == 1)
            sched_yield();   /* another thread resolves; it never waits on us */
        s = atomic_load_explicit(&state, memory_order_acquire);
        if (s == 2)
            return &api;
    }
}

CUresult vt__driver_init(void)
{
    if (__builtin_expect(atomic_load_explicit(&cuinit_done, memory_order_acquire), 1))
        return CUDA_SUCCESS;
    const vt__driver_api *d = vt__driver();
    if (!d)
        return CUDA_ERROR_NOT_INITIALIZED;
    CUresult r = d->cuInit(0);
    if (r == CUDA_SUCCESS)
        atomic_store_explicit(&cuinit_done, 1, memory_order_release);
    return r;
}
