/* tests/sim/test_sim_procaddr.c - the driver as the runtime and hook tools
 * reach it: dlopen("libcuda.so.1"), dlsym("cuGetProcAddress_v2"), then
 * everything through cuGetProcAddress. This program does not use the
 * runtime. */
#include <cuda.h>
#include <dlfcn.h>
#include <string.h>

#include "harness.h"
#include "simcuda.h"

typedef CUresult (*gpa_v2_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);
typedef CUresult (*gpa_v1_fn)(const char *, void **, int, cuuint64_t);

static void *driver(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    ASSERT_MSG(h != NULL, "dlopen libcuda.so.1: %s", dlerror());
    return h;
}

static void *sym(void *h, const char *name)
{
    void *p = dlsym(h, name);
    ASSERT_MSG(p != NULL, "dlsym %s", name);
    return p;
}

static gpa_v2_fn bootstrap(void *h)
{
    gpa_v2_fn gpa;
    void *p = sym(h, "cuGetProcAddress_v2");
    memcpy(&gpa, &p, sizeof p);
    return gpa;
}

TEST(get_proc_address_picks_abi_by_version)
{
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = 99;
    /* The runtime's first request. */
    ASSERT_OK(gpa("cuGetProcAddress", &fn, 13000, 0, &st));
    ASSERT_EQ(st, CU_GET_PROC_ADDRESS_SUCCESS);
    ASSERT_PTR_EQ(fn, sym(h, "cuGetProcAddress_v2"));
    ASSERT_OK(gpa("cuGetProcAddress", &fn, 11030, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuGetProcAddress"));
    ASSERT_OK(gpa("cuMemAlloc", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuMemAlloc_v2"));
    ASSERT_OK(gpa("cuMemFree", &fn, 3020, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuMemFree_v2"));
    ASSERT_OK(gpa("cuStreamDestroy", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamDestroy_v2"));
    ASSERT_OK(gpa("cuStreamDestroy", &fn, 3020, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamDestroy"));
    ASSERT_OK(gpa("cuCtxPushCurrent", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuCtxPushCurrent_v2"));
    ASSERT_OK(gpa("cuEventElapsedTime", &fn, 12000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuEventElapsedTime"));
    ASSERT_OK(gpa("cuEventElapsedTime", &fn, 12080, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuEventElapsedTime_v2"));
}

TEST(get_proc_address_per_thread_flag)
{
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st;
    const cuuint64_t ptds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    ASSERT_OK(gpa("cuStreamSynchronize", &fn, 13000, ptds, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamSynchronize_ptsz"));
    ASSERT_OK(gpa("cuStreamSynchronize", &fn, 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamSynchronize"));
    ASSERT_OK(gpa("cuMemcpyHtoDAsync", &fn, 13000, ptds, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuMemcpyHtoDAsync_v2_ptsz"));
    ASSERT_OK(gpa("cuMemcpyDtoH", &fn, 13000, ptds, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuMemcpyDtoH_v2_ptds"));
    ASSERT_OK(gpa("cuMemAllocAsync", &fn, 13000, ptds, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuMemAllocAsync_ptsz"));
    /* No per-thread variant: the legacy function. */
    ASSERT_OK(gpa("cuMemAlloc", &fn, 13000, ptds, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuMemAlloc_v2"));
}

TEST(get_proc_address_not_found_and_version_not_sufficient)
{
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    /* Documented for the _v2 ABI: success, NULL, and the status says why. */
    ASSERT_OK(gpa("cuNoSuchFunction", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, NULL);
    ASSERT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    ASSERT_OK(gpa("cuMemAlloc_v2", &fn, 13000, 0, &st));     /* base names only */
    ASSERT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    fn = (void *)1;
    ASSERT_OK(gpa("cuMemAllocAsync", &fn, 11000, 0, &st));   /* new in 11.2 */
    ASSERT_PTR_EQ(fn, NULL);
    ASSERT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    ASSERT_EQ(gpa("cuMemAlloc", &fn, 13010, 0, &st), CUDA_ERROR_INVALID_VALUE); /* newer than driver */
    ASSERT_EQ(gpa("cuMemAlloc", &fn, 13000, 4, &st), CUDA_ERROR_INVALID_VALUE);  /* unknown flag */
    /* The 11.3 ABI has no status: not found is an error. */
    gpa_v1_fn v1;
    void *p = sym(h, "cuGetProcAddress");
    memcpy(&v1, &p, sizeof p);
    ASSERT_EQ(v1("cuNoSuchFunction", &fn, 13000, 0), CUDA_ERROR_NOT_FOUND);
    ASSERT_OK(v1("cuInit", &fn, 13000, 0));
    ASSERT_PTR_EQ(fn, sym(h, "cuInit"));
}

TEST(driver_calls_need_init_and_context)
{
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    void *fn;
    CUdriverProcAddressQueryResult st;
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*init)(unsigned);
    CUresult (*retain)(CUcontext *, CUdevice);
    CUresult (*set_current)(CUcontext);
    CUresult (*mem_free)(CUdeviceptr);
    ASSERT_OK(gpa("cuMemAlloc", &fn, 13000, 0, &st));
    memcpy(&mem_alloc, &fn, sizeof fn);
    ASSERT_OK(gpa("cuMemFree", &fn, 13000, 0, &st));
    memcpy(&mem_free, &fn, sizeof fn);
    ASSERT_OK(gpa("cuInit", &fn, 13000, 0, &st));
    memcpy(&init, &fn, sizeof fn);
    ASSERT_OK(gpa("cuDevicePrimaryCtxRetain", &fn, 13000, 0, &st));
    memcpy(&retain, &fn, sizeof fn);
    ASSERT_OK(gpa("cuCtxSetCurrent", &fn, 13000, 0, &st));
    memcpy(&set_current, &fn, sizeof fn);

    CUdeviceptr d;
    ASSERT_EQ(mem_alloc(&d, 4096), CUDA_ERROR_NOT_INITIALIZED);
    ASSERT_OK(init(0));
    ASSERT_EQ(mem_alloc(&d, 4096), CUDA_ERROR_INVALID_CONTEXT);
    CUcontext ctx;
    ASSERT_OK(retain(&ctx, 0));
    ASSERT_OK(set_current(ctx));
    ASSERT_OK(mem_alloc(&d, 4096));
    ASSERT_OK(mem_free(d));
    simcuda_counters c;
    int (*stats)(int, simcuda_counters *);
    void *p = sym(h, "simcuda_stats");
    memcpy(&stats, &p, sizeof p);
    ASSERT_EQ(stats(0, &c), 0);
    ASSERT_EQ(c.mem_alloc_calls, 1);           /* calls without a context count nowhere */
    ASSERT_EQ(c.allocs, 1);
}

/* cudaTypedefs.h names each ABI PFN_<name>_v<first version>: CUDA 13.0
 * gave cuCtxGetDevice and cuCtxSynchronize a context argument, 12.5 gave
 * cuStreamGetCtx a green context, 12.8 added cuStreamGetDevice. A caller
 * asking with 13000 gets the new signature. */
TEST(get_proc_address_context_abis_change_with_version)
{
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    void *fn = NULL;
    CUdriverProcAddressQueryResult st = 99;
    ASSERT_OK(gpa("cuCtxGetDevice", &fn, 12090, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuCtxGetDevice"));
    ASSERT_OK(gpa("cuCtxGetDevice", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuCtxGetDevice_v2"));
    ASSERT_OK(gpa("cuCtxSynchronize", &fn, 12000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuCtxSynchronize"));
    ASSERT_OK(gpa("cuCtxSynchronize", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuCtxSynchronize_v2"));
    ASSERT_OK(gpa("cuStreamGetCtx", &fn, 12040, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamGetCtx"));
    ASSERT_OK(gpa("cuStreamGetCtx", &fn, 13000, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamGetCtx_v2"));
    ASSERT_OK(gpa("cuStreamGetCtx", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamGetCtx_v2_ptsz"));
    ASSERT_OK(gpa("cuStreamGetDevice", &fn, 12080, 0, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamGetDevice"));
    ASSERT_OK(gpa("cuStreamGetDevice", &fn, 13000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &st));
    ASSERT_PTR_EQ(fn, sym(h, "cuStreamGetDevice_ptsz"));
    ASSERT_OK(gpa("cuStreamGetDevice", &fn, 12070, 0, &st));
    ASSERT_PTR_EQ(fn, NULL);
    ASSERT_EQ(st, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
}

/* The 13.0 ABIs take the context; NULL is the current one. */
TEST(ctx_v2_entry_points_take_a_context)
{
    ASSERT_OK(cuInit(0));
    void *h = driver();
    CUresult (*get_dev)(CUdevice *, CUcontext);
    CUresult (*sync)(CUcontext);
    void *p = sym(h, "cuCtxGetDevice_v2");
    memcpy(&get_dev, &p, sizeof p);
    p = sym(h, "cuCtxSynchronize_v2");
    memcpy(&sync, &p, sizeof p);
    CUcontext ctx;
    CUdevice d = -1;
    ASSERT_OK(cuDevicePrimaryCtxRetain(&ctx, 0));
    ASSERT_OK(cuCtxSetCurrent(NULL));
    ASSERT_EQ(get_dev(&d, NULL), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_EQ(sync(NULL), CUDA_ERROR_INVALID_CONTEXT);
    ASSERT_OK(get_dev(&d, ctx));                /* no current context needed */
    ASSERT_EQ(d, 0);
    ASSERT_OK(sync(ctx));
    ASSERT_EQ(get_dev(NULL, ctx), CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cuCtxSetCurrent(ctx));
    d = -1;
    ASSERT_OK(get_dev(&d, NULL));
    ASSERT_EQ(d, 0);
    ASSERT_OK(sync(NULL));
}

TEST_MAIN()
