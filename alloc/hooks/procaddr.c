/*
 * alloc/hooks/procaddr.c - which driver functions we replace, and how we
 * recognize them when cuGetProcAddress or dlsym hands one out.
 *
 * The CUDA runtime (>= 11.3) asks cuGetProcAddress for every driver function
 * by BASE name plus the cudaVersion it was built for; that version selects
 * the ABI (cuMemAlloc at >= 3020 is cuMemAlloc_v2; cuGetProcAddress at
 * >= 12000 is cuGetProcAddress_v2), and the per-thread-stream flag selects
 * the _ptsz variant. We never guess the ABI from the name: the real
 * cuGetProcAddress is asked with exactly the caller's arguments and its
 * answer is compared with the real functions we hook (by identity). Only an
 * exact match is replaced, with the hook of that same ABI; anything else
 * (an old ABI, an unhooked function) goes back to the caller untouched.
 *
 * Identity is established two ways: the address libcuda.so.1 exports under
 * the ABI name (what dlsym returns), and, for drivers that hand out other
 * addresses through cuGetProcAddress, what the real cuGetProcAddress returns
 * for the base name at the version where that ABI began.
 */
#include <dlfcn.h>
#include <stdatomic.h>
#include <string.h>

#include <cuda.h>

#include "hooks_internal.h"

struct hk_entry {
    const char *abi;        /* exported name of this ABI version */
    const char *base;       /* name cuGetProcAddress knows it by */
    int since;              /* first cudaVersion with this ABI */
    bool ptds;              /* the per-thread default stream variant */
};

static const struct hk_entry entries[HK_DRV_COUNT] = {
    [HK_cuGetProcAddress]           = { "cuGetProcAddress", "cuGetProcAddress", 11030, false },
    [HK_cuGetProcAddress_v2]        = { "cuGetProcAddress_v2", "cuGetProcAddress", 12000, false },
    [HK_cuMemAlloc_v2]              = { "cuMemAlloc_v2", "cuMemAlloc", 3020, false },
    [HK_cuMemFree_v2]               = { "cuMemFree_v2", "cuMemFree", 3020, false },
    [HK_cuMemGetInfo_v2]            = { "cuMemGetInfo_v2", "cuMemGetInfo", 3020, false },
    [HK_cuMemAllocAsync]            = { "cuMemAllocAsync", "cuMemAllocAsync", 11020, false },
    [HK_cuMemAllocAsync_ptsz]       = { "cuMemAllocAsync_ptsz", "cuMemAllocAsync", 11020, true },
    [HK_cuMemFreeAsync]             = { "cuMemFreeAsync", "cuMemFreeAsync", 11020, false },
    [HK_cuMemFreeAsync_ptsz]        = { "cuMemFreeAsync_ptsz", "cuMemFreeAsync", 11020, true },
    [HK_cuStreamCreate]             = { "cuStreamCreate", "cuStreamCreate", 2000, false },
    [HK_cuStreamCreateWithPriority] = { "cuStreamCreateWithPriority", "cuStreamCreateWithPriority",
                                        5050, false },
    [HK_cuStreamDestroy]            = { "cuStreamDestroy", "cuStreamDestroy", 2000, false },
    [HK_cuStreamDestroy_v2]         = { "cuStreamDestroy_v2", "cuStreamDestroy", 4000, false },
    [HK_cuMemAllocHost_v2]          = { "cuMemAllocHost_v2", "cuMemAllocHost", 3020, false },
    [HK_cuMemHostAlloc]             = { "cuMemHostAlloc", "cuMemHostAlloc", 2020, false },
    [HK_cuMemFreeHost]              = { "cuMemFreeHost", "cuMemFreeHost", 2000, false },
    [HK_cuMemAllocManaged]          = { "cuMemAllocManaged", "cuMemAllocManaged", 6000, false },
    [HK_cuMemCreate]                = { "cuMemCreate", "cuMemCreate", 10020, false },
    [HK_cuMemRelease]               = { "cuMemRelease", "cuMemRelease", 10020, false },
    [HK_cuMemMap]                   = { "cuMemMap", "cuMemMap", 10020, false },
    [HK_cuMemUnmap]                 = { "cuMemUnmap", "cuMemUnmap", 10020, false },
    [HK_cuDevicePrimaryCtxReset]    = { "cuDevicePrimaryCtxReset", "cuDevicePrimaryCtxReset",
                                        7000, false },
    [HK_cuDevicePrimaryCtxReset_v2] = { "cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxReset",
                                        11000, false },
    [HK_cuCtxSynchronize]           = { "cuCtxSynchronize", "cuCtxSynchronize", 2000, false },
    [HK_cuCtxSynchronize_v2]        = { "cuCtxSynchronize_v2", "cuCtxSynchronize", 13000, false },
    [HK_cuStreamSynchronize]        = { "cuStreamSynchronize", "cuStreamSynchronize", 2000, false },
    [HK_cuStreamSynchronize_ptsz]   = { "cuStreamSynchronize_ptsz", "cuStreamSynchronize", 7000,
                                        true },
    [HK_cuEventSynchronize]         = { "cuEventSynchronize", "cuEventSynchronize", 2000, false },
    [HK_cuStreamQuery]              = { "cuStreamQuery", "cuStreamQuery", 2000, false },
    [HK_cuStreamQuery_ptsz]         = { "cuStreamQuery_ptsz", "cuStreamQuery", 7000, true },
    [HK_cuEventQuery]               = { "cuEventQuery", "cuEventQuery", 2000, false },
    [HK_cuMemcpy]                   = { "cuMemcpy", "cuMemcpy", 4000, false },
    [HK_cuMemcpy_ptds]              = { "cuMemcpy_ptds", "cuMemcpy", 7000, true },
    [HK_cuMemcpyHtoD_v2]            = { "cuMemcpyHtoD_v2", "cuMemcpyHtoD", 3020, false },
    [HK_cuMemcpyHtoD_v2_ptds]       = { "cuMemcpyHtoD_v2_ptds", "cuMemcpyHtoD", 7000, true },
    [HK_cuMemcpyDtoH_v2]            = { "cuMemcpyDtoH_v2", "cuMemcpyDtoH", 3020, false },
    [HK_cuMemcpyDtoH_v2_ptds]       = { "cuMemcpyDtoH_v2_ptds", "cuMemcpyDtoH", 7000, true },
    [HK_cuMemAllocPitch_v2]         = { "cuMemAllocPitch_v2", "cuMemAllocPitch", 3020, false },
    [HK_cuArrayCreate_v2]           = { "cuArrayCreate_v2", "cuArrayCreate", 3020, false },
    [HK_cuArray3DCreate_v2]         = { "cuArray3DCreate_v2", "cuArray3DCreate", 3020, false },
    [HK_cuArrayDestroy]             = { "cuArrayDestroy", "cuArrayDestroy", 2000, false },
    [HK_cuMemHostRegister_v2]       = { "cuMemHostRegister_v2", "cuMemHostRegister", 6050, false },
    [HK_cuMemHostUnregister]        = { "cuMemHostUnregister", "cuMemHostUnregister", 4000, false },
    [HK_cuMemAllocFromPoolAsync]    = { "cuMemAllocFromPoolAsync", "cuMemAllocFromPoolAsync",
                                        11020, false },
    [HK_cuMemAllocFromPoolAsync_ptsz] = { "cuMemAllocFromPoolAsync_ptsz",
                                          "cuMemAllocFromPoolAsync", 11020, true },
    [HK_cuDeviceSetMemPool]         = { "cuDeviceSetMemPool", "cuDeviceSetMemPool", 11020, false },
    [HK_cuMemPoolSetAttribute]      = { "cuMemPoolSetAttribute", "cuMemPoolSetAttribute", 11020,
                                        false },
    [HK_cuMemPoolSetAccess]         = { "cuMemPoolSetAccess", "cuMemPoolSetAccess", 11020, false },
    [HK_cuIpcGetMemHandle]          = { "cuIpcGetMemHandle", "cuIpcGetMemHandle", 4010, false },
    [HK_cuStreamBeginCapture_v2]    = { "cuStreamBeginCapture_v2", "cuStreamBeginCapture", 10010,
                                        false },
    [HK_cuStreamBeginCapture_v2_ptsz] = { "cuStreamBeginCapture_v2_ptsz", "cuStreamBeginCapture",
                                          10010, true },
    [HK_cuStreamBeginCaptureToGraph] = { "cuStreamBeginCaptureToGraph",
                                         "cuStreamBeginCaptureToGraph", 12030, false },
    [HK_cuStreamBeginCaptureToGraph_ptsz] = { "cuStreamBeginCaptureToGraph_ptsz",
                                              "cuStreamBeginCaptureToGraph", 12030, true },
    [HK_cuStreamEndCapture]         = { "cuStreamEndCapture", "cuStreamEndCapture", 10000, false },
    [HK_cuStreamEndCapture_ptsz]    = { "cuStreamEndCapture_ptsz", "cuStreamEndCapture", 10000,
                                        true },
};

static void *_Atomic real_fn[HK_DRV_COUNT];     /* exported by libcuda under .abi */
static atomic_bool real_tried[HK_DRV_COUNT];     /* looked up (found or not) */
static void *_Atomic gpa_fn[HK_DRV_COUNT];      /* cuGetProcAddress(base, since) */
static atomic_bool gpa_tried[HK_DRV_COUNT];
static void *_Atomic cuda_lib;

static void *driver_lib(void)
{
    void *lib = atomic_load_explicit(&cuda_lib, memory_order_acquire);
    if (lib)
        return lib;
    /* Loaded already in every process whose CUDA calls reach us; loading it
     * ourselves is the last resort (a hook called before anyone loaded it). */
    lib = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (!lib)
        lib = dlopen("libcuda.so.1", RTLD_LAZY);
    if (lib)
        atomic_store_explicit(&cuda_lib, lib, memory_order_release);
    return lib;
}

void *vt__hk_drv_real(enum vt__hk_drv e)
{
    void *p = atomic_load_explicit(&real_fn[e], memory_order_acquire);
    if (vt__likely(p != NULL) || atomic_load_explicit(&real_tried[e], memory_order_acquire))
        return p;
    void *lib = driver_lib();
    if (!lib)
        return NULL;   /* not marked tried: the driver may be loadable later */
    p = vt__hk_real_dlsym(lib, entries[e].abi);
    if (p && vt__hk_is_self(p))
        p = NULL;      /* never "resolve" to ourselves: that recurses */
    atomic_store_explicit(&real_fn[e], p, memory_order_release);
    atomic_store_explicit(&real_tried[e], true, memory_order_release);
    return p;
}

/* What the real cuGetProcAddress hands out for entry e's ABI. */
static void *gpa_identity(enum vt__hk_drv e)
{
    if (atomic_load_explicit(&gpa_tried[e], memory_order_acquire))
        return atomic_load_explicit(&gpa_fn[e], memory_order_acquire);
    void *p = NULL;
    void *gp = vt__hk_drv_real(HK_cuGetProcAddress_v2);
    cuuint64_t flags = entries[e].ptds ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                       : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    if (gp) {
        CUresult (*gpa)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
        memcpy(&gpa, &gp, sizeof gp);
        CUdriverProcAddressQueryResult st;
        if (gpa(entries[e].base, &p, entries[e].since, flags, &st) != CUDA_SUCCESS)
            p = NULL;
    } else if ((gp = vt__hk_drv_real(HK_cuGetProcAddress)) != NULL) {
        CUresult (*gpa)(const char *, void **, int, cuuint64_t);
        memcpy(&gpa, &gp, sizeof gp);
        if (gpa(entries[e].base, &p, entries[e].since, flags) != CUDA_SUCCESS)
            p = NULL;
    }
    atomic_store_explicit(&gpa_fn[e], p, memory_order_release);
    atomic_store_explicit(&gpa_tried[e], true, memory_order_release);
    return p;
}

HK_EARLY bool vt__hk_is_hooked_name(const char *name)
{
    if (name[0] != 'c' || name[1] != 'u')
        return false;
    for (int e = 0; e < HK_DRV_COUNT; e++)
        if (strcmp(name, entries[e].abi) == 0)
            return true;
    return false;
}

void *vt__hk_substitute(const char *symbol, void *p, uint64_t gpa_flags, bool from_gpa)
{
    (void)gpa_flags;
    /* Already ours: a driver whose table took our exported name's address. */
    if (!p || vt__hk_is_self(p))
        return p;
    for (int e = 0; e < HK_DRV_COUNT; e++)
        if (vt__hk_drv_real((enum vt__hk_drv)e) == p)
            return vt__hk_drv_hook((enum vt__hk_drv)e);
    if (from_gpa && symbol) {
        for (int e = 0; e < HK_DRV_COUNT; e++)
            if (strcmp(symbol, entries[e].base) == 0 && gpa_identity((enum vt__hk_drv)e) == p)
                return vt__hk_drv_hook((enum vt__hk_drv)e);
    }
    return p;
}
