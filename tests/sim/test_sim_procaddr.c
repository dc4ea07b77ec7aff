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

/* What cuGetProcAddress_v2 answers for a base name, a version and flags:
 * the exported function it must give. The rows are grouped by what they
 * show; each test checks its group. */
typedef enum entry_topic {
    ABI_BY_VERSION,                      /* a newer version gets the newer ABI */
    PER_THREAD_FLAG,                     /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
    CONTEXT_ABIS,                        /* the 12.5 - 13.0 context and stream ABIs */
} entry_topic;

#define PTDS CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM

static const struct entry_case {
    entry_topic topic;
    const char *name;
    int         version;
    cuuint64_t  flags;
    const char *symbol;
} entry_cases[] = {
    { ABI_BY_VERSION, "cuGetProcAddress", 13000, 0, "cuGetProcAddress_v2" },   /* the runtime's first request */
    { ABI_BY_VERSION, "cuGetProcAddress", 11030, 0, "cuGetProcAddress" },
    { ABI_BY_VERSION, "cuMemAlloc", 13000, 0, "cuMemAlloc_v2" },
    { ABI_BY_VERSION, "cuMemFree", 3020, 0, "cuMemFree_v2" },
    { ABI_BY_VERSION, "cuStreamDestroy", 13000, 0, "cuStreamDestroy_v2" },
    { ABI_BY_VERSION, "cuStreamDestroy", 3020, 0, "cuStreamDestroy" },
    { ABI_BY_VERSION, "cuCtxPushCurrent", 13000, 0, "cuCtxPushCurrent_v2" },
    { ABI_BY_VERSION, "cuEventElapsedTime", 12000, 0, "cuEventElapsedTime" },
    { ABI_BY_VERSION, "cuEventElapsedTime", 12080, 0, "cuEventElapsedTime_v2" },
    { PER_THREAD_FLAG, "cuStreamSynchronize", 13000, PTDS, "cuStreamSynchronize_ptsz" },
    { PER_THREAD_FLAG, "cuStreamSynchronize", 13000, CU_GET_PROC_ADDRESS_LEGACY_STREAM, "cuStreamSynchronize" },
    { PER_THREAD_FLAG, "cuMemcpyHtoDAsync", 13000, PTDS, "cuMemcpyHtoDAsync_v2_ptsz" },
    { PER_THREAD_FLAG, "cuMemcpyDtoH", 13000, PTDS, "cuMemcpyDtoH_v2_ptds" },
    { PER_THREAD_FLAG, "cuMemAllocAsync", 13000, PTDS, "cuMemAllocAsync_ptsz" },
    { PER_THREAD_FLAG, "cuMemAlloc", 13000, PTDS, "cuMemAlloc_v2" },      /* no per-thread variant */
    { CONTEXT_ABIS, "cuCtxGetDevice", 12090, 0, "cuCtxGetDevice" },
    { CONTEXT_ABIS, "cuCtxGetDevice", 13000, 0, "cuCtxGetDevice_v2" },
    { CONTEXT_ABIS, "cuCtxSynchronize", 12000, 0, "cuCtxSynchronize" },
    { CONTEXT_ABIS, "cuCtxSynchronize", 13000, 0, "cuCtxSynchronize_v2" },
    { CONTEXT_ABIS, "cuStreamGetCtx", 12040, 0, "cuStreamGetCtx" },
    { CONTEXT_ABIS, "cuStreamGetCtx", 13000, 0, "cuStreamGetCtx_v2" },
    { CONTEXT_ABIS, "cuStreamGetCtx", 13000, PTDS, "cuStreamGetCtx_v2_ptsz" },
    { CONTEXT_ABIS, "cuStreamGetDevice", 12080, 0, "cuStreamGetDevice" },
    { CONTEXT_ABIS, "cuStreamGetDevice", 13000, PTDS, "cuStreamGetDevice_ptsz" },
};

/* cuGetProcAddress_v2 has no function for `name` at `version`: it
 * succeeds, gives NULL, and the status says why. */
static void expect_no_entry(const char *name, int version, CUdriverProcAddressQueryResult why)
{
    gpa_v2_fn gpa = bootstrap(driver());
    void *fn = (void *)1;
    CUdriverProcAddressQueryResult st = 99;
    ASSERT_OK(gpa(name, &fn, version, 0, &st));
    ASSERT_PTR_EQ(fn, NULL);
    ASSERT_EQ(st, why);
}

static void expect_entries(entry_topic topic)
{
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    int checked = 0;
    for (size_t i = 0; i < sizeof entry_cases / sizeof entry_cases[0]; i++) {
        const struct entry_case *e = &entry_cases[i];
        if (e->topic != topic)
            continue;
        void *fn = NULL;
        CUdriverProcAddressQueryResult st = 99;
        ASSERT_MSG(gpa(e->name, &fn, e->version, e->flags, &st) == CUDA_SUCCESS, "%s at %d", e->name, e->version);
        ASSERT_MSG(st == CU_GET_PROC_ADDRESS_SUCCESS, "%s at %d: status %d", e->name, e->version, (int)st);
        ASSERT_MSG(fn == sym(h, e->symbol), "%s at %d, flags %llu: not %s", e->name, e->version,
                   (unsigned long long)e->flags, e->symbol);
        checked++;
    }
    ASSERT(checked > 0);
}

TEST(get_proc_address_picks_abi_by_version)
{
    expect_entries(ABI_BY_VERSION);
}

TEST(get_proc_address_per_thread_flag)
{
    expect_entries(PER_THREAD_FLAG);
}

TEST(get_proc_address_not_found_and_version_not_sufficient)
{
    /* Documented for the _v2 ABI: success, NULL, and the status says why. */
    expect_no_entry("cuNoSuchFunction", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    expect_no_entry("cuMemAlloc_v2", 13000, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);   /* base names only */
    expect_no_entry("cuMemAllocAsync", 11000, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT); /* new in 11.2 */
    void *h = driver();
    gpa_v2_fn gpa = bootstrap(h);
    void *fn;
    CUdriverProcAddressQueryResult st;
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
    expect_entries(CONTEXT_ABIS);
    expect_no_entry("cuStreamGetDevice", 12070, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
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
