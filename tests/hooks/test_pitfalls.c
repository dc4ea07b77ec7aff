/* tests/hooks/test_pitfalls.c - the known ways a CUDA preload goes wrong.
 *
 * Runs with LD_PRELOAD=libvramtrace.so on the simulated device (meson sets
 * the environment). Which function a pointer is, is read with dladdr: the
 * object it lives in and its exported name (our hooks carry the driver ABI
 * names, so "cuStreamDestroy" vs "cuStreamDestroy_v2" says which ABI we
 * handed out).
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "harness.h"
#include "simcuda.h"
#include "vramtrace.h"

/* Declared by the toolkit headers only in per-thread-stream builds. */
cudaError_t cudaMallocAsync_ptsz(void **devPtr, size_t size, cudaStream_t hStream);
cudaError_t cudaFreeAsync_ptsz(void *devPtr, cudaStream_t hStream);

typedef CUresult (*gpa2_fn)(const char *, void **, int, cuuint64_t,
                            CUdriverProcAddressQueryResult *);

static int in_vramtrace(const void *p)
{
    Dl_info i;
    return p && dladdr(p, &i) && i.dli_fname && strstr(i.dli_fname, "libvramtrace");
}

static const char *sym_name(const void *p)
{
    Dl_info i;
    if (!p || !dladdr(p, &i) || !i.dli_sname)
        return "?";
    return i.dli_sname;
}

static void *libcuda(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    ASSERT(h != NULL);
    return h;
}

static gpa2_fn our_gpa(void)
{
    void *p = dlsym(libcuda(), "cuGetProcAddress_v2");
    ASSERT_MSG(in_vramtrace(p), "dlsym(libcuda, cuGetProcAddress_v2) is not ours");
    gpa2_fn f;
    memcpy(&f, &p, sizeof p);
    return f;
}

static CUdriverProcAddressQueryResult last_status;

static void *gpa(const char *sym, int ver, cuuint64_t flags, CUresult *r)
{
    void *p = NULL;
    *r = our_gpa()(sym, &p, ver, flags, &last_status);
    return p;
}

static vt_stats stats(void)
{
    vt_stats s;
    int (*f)(int, vt_stats *);
    void *p = dlsym(RTLD_DEFAULT, "vt_get_stats");
    ASSERT(p != NULL);
    memcpy(&f, &p, sizeof p);
    ASSERT_EQ(f(0, &s), 0);
    return s;
}

static simcuda_counters sim(void)
{
    simcuda_counters c;
    ASSERT_EQ(simcuda_stats(0, &c), 0);
    return c;
}

/* The runtime's first driver call is cuGetProcAddress("cuGetProcAddress"):
 * it must get our resolver back, in the ABI it asked for. */
TEST(gpa_bootstrap_returns_our_resolver)
{
    CUresult r;
    void *p = gpa("cuGetProcAddress", CUDA_VERSION, 0, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT(in_vramtrace(p));
    ASSERT_STR_EQ(sym_name(p), "cuGetProcAddress_v2");
    p = gpa("cuGetProcAddress", 11030, 0, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT(in_vramtrace(p));
    ASSERT_STR_EQ(sym_name(p), "cuGetProcAddress");
}

/* Symbols are asked twice: flags 0 and the per-thread-stream flag. */
TEST(gpa_per_thread_flag_gets_ptsz_hook)
{
    CUresult r;
    void *p = gpa("cuMemAllocAsync", CUDA_VERSION, 0, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT_STR_EQ(sym_name(p), "cuMemAllocAsync");
    ASSERT(in_vramtrace(p));
    p = gpa("cuMemAllocAsync", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT(in_vramtrace(p));
    ASSERT_STR_EQ(sym_name(p), "cuMemAllocAsync_ptsz");
    p = gpa("cuMemFreeAsync", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r);
    ASSERT_STR_EQ(sym_name(p), "cuMemFreeAsync_ptsz");
    /* No per-thread variant: the plain hook for both flags. */
    p = gpa("cuMemAlloc", CUDA_VERSION, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM, &r);
    ASSERT(in_vramtrace(p));
    ASSERT_STR_EQ(sym_name(p), "cuMemAlloc_v2");
}

/* cudaVersion selects the ABI: exactly that one is wrapped, or none. */
TEST(gpa_version_selects_abi)
{
    CUresult r;
    void *p = gpa("cuStreamDestroy", 2000, 0, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT(in_vramtrace(p));
    ASSERT_STR_EQ(sym_name(p), "cuStreamDestroy");
    p = gpa("cuStreamDestroy", 4000, 0, &r);
    ASSERT_STR_EQ(sym_name(p), "cuStreamDestroy_v2");
    p = gpa("cuMemAlloc", 3020, 0, &r);
    ASSERT_STR_EQ(sym_name(p), "cuMemAlloc_v2");
    /* Older than the 64-bit ABI: the driver's answer, unchanged (12.0+:
     * success with the status saying why there is no function). */
    p = gpa("cuMemAlloc", 3010, 0, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT_EQ(last_status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
    ASSERT(p == NULL);
    /* Not hooked: the driver's own function. */
    p = gpa("cuMemcpy", CUDA_VERSION, 0, &r);
    ASSERT_EQ(r, CUDA_SUCCESS);
    ASSERT(!in_vramtrace(p));
    ASSERT_STR_EQ(sym_name(p), "cuMemcpy");
    p = gpa("cuNoSuchFunction", CUDA_VERSION, 0, &r);
    ASSERT(p == NULL);
    ASSERT_EQ(last_status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

/* cudarc/CuPy/XLA: dlopen the driver and dlsym the allocation calls; both
 * glibc versions of dlsym are ours. */
TEST(dlsym_on_libcuda_hands_out_hooks)
{
    void *h = libcuda();
    static const char *const hooked[] = { "cuMemAllocAsync", "cuMemFreeAsync", "cuMemAlloc_v2",
                                          "cuMemFree_v2", "cuMemGetInfo_v2", "cuStreamCreate",
                                          "cuStreamDestroy_v2", "cuGetProcAddress_v2",
                                          "cuMemAllocAsync_ptsz" };
    for (size_t i = 0; i < sizeof hooked / sizeof hooked[0]; i++) {
        void *p = dlsym(h, hooked[i]);
        ASSERT_MSG(in_vramtrace(p), "dlsym(libcuda, %s) not hooked", hooked[i]);
        ASSERT_STR_EQ(sym_name(p), hooked[i]);
    }
    void *p = dlsym(h, "cuMemcpy");
    ASSERT(p && !in_vramtrace(p));
    ASSERT(dlsym(h, "cuNoSuchFunction") == NULL);
    ASSERT(dlerror() != NULL);   /* the real dlsym's error state is kept */

    void *(*old_dlsym)(void *, const char *);
    void *(*new_dlsym)(void *, const char *);
    void *o = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.2.5");
    void *n = dlvsym(RTLD_DEFAULT, "dlsym", "GLIBC_2.34");
    ASSERT_MSG(in_vramtrace(o), "dlsym@GLIBC_2.2.5 is not ours");
    ASSERT_MSG(in_vramtrace(n), "dlsym@GLIBC_2.34 is not ours");
    memcpy(&old_dlsym, &o, sizeof o);
    memcpy(&new_dlsym, &n, sizeof n);
    ASSERT(in_vramtrace(old_dlsym(h, "cuMemFree_v2")));
    ASSERT(in_vramtrace(new_dlsym(h, "cuMemFree_v2")));
}

/* dlsym(RTLD_NEXT, ...) stays relative to the CALLER: from this executable
 * the next object is libvramtrace (preloaded first), whose vt_malloc and
 * cudaMalloc must be found; relative to libvramtrace there is no vt_malloc. */
TEST(dlsym_rtld_next_is_relative_to_caller)
{
    void *p = dlsym(RTLD_NEXT, "vt_malloc");
    ASSERT_MSG(p != NULL && in_vramtrace(p), "RTLD_NEXT from the program missed libvramtrace");
    p = dlsym(RTLD_NEXT, "cudaMalloc");
    ASSERT(in_vramtrace(p));
    p = dlsym(RTLD_NEXT, "strlen");
    ASSERT(p != NULL && !in_vramtrace(p));
    /* RTLD_DEFAULT from the program sees the preload too. */
    ASSERT(in_vramtrace(dlsym(RTLD_DEFAULT, "cuMemAlloc_v2")));
}

/* Versioned runtime symbols: what a binary linked against the toolkit's
 * libcudart.so.13 imports (cudaMalloc@libcudart.so.13) is ours. */
TEST(runtime_symbols_carry_libcudart_version)
{
    static const char *const names[] = { "cudaMalloc", "cudaFree", "cudaMallocAsync",
                                         "cudaFreeAsync", "cudaMemGetInfo", "cudaStreamCreate",
                                         "cudaStreamDestroy", "cudaDeviceReset" };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        void *v = dlvsym(RTLD_DEFAULT, names[i], "libcudart.so.13");
        ASSERT_MSG(in_vramtrace(v), "%s@libcudart.so.13 is not ours", names[i]);
        ASSERT(in_vramtrace(dlsym(RTLD_DEFAULT, names[i])));
    }
    /* This test binary itself links the (simulated) libcudart.so.13. */
    void *p = NULL;
    vt_stats before = stats();
    ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
    ASSERT_EQ(stats().allocation[VT_STAT_ALL].allocated,
              before.allocation[VT_STAT_ALL].allocated + 1);
    ASSERT_EQ(cudaFree(p), cudaSuccess);
}

/* cuMemGetInfo_v2(NULL, &total) and friends must not crash. */
TEST(null_outputs_do_not_crash)
{
    ASSERT_EQ(cudaFree(NULL), cudaSuccess);     /* initializes, as in CUDA */
    size_t f = 0, t = 0;
    CUresult r = cuMemGetInfo_v2(NULL, &t);
    ASSERT(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE);
    r = cuMemGetInfo_v2(&f, NULL);
    ASSERT(r == CUDA_SUCCESS || r == CUDA_ERROR_INVALID_VALUE);
    cudaError_t e = cudaMemGetInfo(NULL, NULL);
    ASSERT(e == cudaSuccess || e == cudaErrorInvalidValue);
    ASSERT_EQ(cuMemAlloc_v2(NULL, 100), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr d = 0;
    ASSERT_EQ(cuMemAlloc_v2(&d, 0), CUDA_ERROR_INVALID_VALUE);
    ASSERT_EQ(cudaMalloc(NULL, 100), cudaErrorInvalidValue);
    void *p = (void *)1;
    ASSERT_EQ(cudaMalloc(&p, 0), cudaSuccess);
    ASSERT_EQ(cuMemFree_v2(0), CUDA_SUCCESS);
}

/* A runtime call that comes back through the driver layer counts once; a
 * foreign pointer reaches the real free exactly once. */
TEST(runtime_and_driver_layers_count_once)
{
    void *p = NULL;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);      /* warm the cache */
    ASSERT_EQ(cudaFree(p), cudaSuccess);
    vt_stats s0 = stats();
    simcuda_counters c0 = sim();
    for (int i = 0; i < 10; i++) {
        ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
        ASSERT_EQ(cudaFree(p), cudaSuccess);
    }
    vt_stats s1 = stats();
    simcuda_counters c1 = sim();
    ASSERT_EQ(s1.allocation[VT_STAT_ALL].allocated - s0.allocation[VT_STAT_ALL].allocated, 10);
    ASSERT_EQ(c1.mem_alloc_calls, c0.mem_alloc_calls);
    ASSERT_EQ(c1.mem_free_calls, c0.mem_free_calls);
    /* Plain cudaFree no longer synchronizes the device. */
    ASSERT_EQ(c1.device_syncs, c0.device_syncs);

    int host;
    ASSERT_EQ(cudaFree(&host), cudaErrorInvalidValue);
    simcuda_counters c2 = sim();
    ASSERT_EQ(c2.mem_free_calls - c1.mem_free_calls, 1);
    ASSERT_EQ(c2.bad_frees - c1.bad_frees, 1);
    ASSERT_EQ(stats().num_bad_frees, s1.num_bad_frees);  /* not the cache's */
}

/* free_sync:1 (this test's environment): CUDA's exact behaviour. */
TEST(free_sync_synchronizes_device)
{
    void *p = NULL;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    simcuda_counters c0 = sim();
    ASSERT_EQ(cudaFree(p), cudaSuccess);
    simcuda_counters c1 = sim();
    ASSERT_GE(c1.device_syncs - c0.device_syncs, 1);
    ASSERT_EQ(c1.mem_free_calls, c0.mem_free_calls);   /* still cached */
}

/* The cache's unused bytes are free memory to the program. */
TEST(mem_get_info_counts_cache_as_free)
{
    void *p = NULL;
    size_t f0, t0, f1, t1;
    ASSERT_EQ(cudaMemGetInfo(&f0, &t0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&p, (size_t)64 << 20), cudaSuccess);
    ASSERT_EQ(cudaFree(p), cudaSuccess);
    ASSERT_EQ(cudaMemGetInfo(&f1, &t1), cudaSuccess);
    ASSERT_EQ(t0, t1);
    ASSERT_EQ(f0, f1);         /* the segment is still held, and counted free */
    simcuda_counters c = sim();
    ASSERT_GE(c.bytes_in_use, (size_t)64 << 20);    /* the device does hold it */
    size_t fd = 0, td = 0;
    ASSERT_EQ(cuMemGetInfo_v2(&fd, &td), CUDA_SUCCESS);
    ASSERT_EQ(fd, f1);
    ASSERT_EQ(td, t1);
}

TEST(device_reset_empties_cache)
{
    void *p = NULL;
    ASSERT_EQ(cudaMalloc(&p, (size_t)8 << 20), cudaSuccess);
    ASSERT_EQ(cudaFree(p), cudaSuccess);
    ASSERT_GT(stats().reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(cudaDeviceReset(), cudaSuccess);
    ASSERT_EQ(stats().reserved_bytes[VT_STAT_ALL].current, 0);
    ASSERT_EQ(cudaMalloc(&p, 1000), cudaSuccess);
    ASSERT_EQ(cudaMemset(p, 1, 1000), cudaSuccess);
    ASSERT_EQ(cudaFree(p), cudaSuccess);
}

/* No one-time initializer may call CUDA: many threads whose first call is a
 * hooked one, at once, must all finish (the test's timeout catches a hang). */
static void *first_call(void *arg)
{
    void *p = NULL;
    long i = (long)arg;
    if (i % 2 == 0) {
        if (cudaMalloc(&p, 1000 + (size_t)i) != cudaSuccess || cudaFree(p) != cudaSuccess)
            return (void *)1;
    } else {
        void *h = dlopen("libcuda.so.1", RTLD_NOW);
        void *f = h ? dlsym(h, "cuMemGetInfo_v2") : NULL;
        if (!f)
            return (void *)1;
    }
    return NULL;
}

TEST(first_calls_race_without_deadlock)
{
    pthread_t t[8];
    for (long i = 0; i < 8; i++)
        ASSERT_EQ(pthread_create(&t[i], NULL, first_call, (void *)i), 0);
    for (int i = 0; i < 8; i++) {
        void *rv;
        pthread_join(t[i], &rv);
        ASSERT(rv == NULL);
    }
}

/* Per-thread default stream entry points map stream 0 to cudaStreamPerThread. */
TEST(ptsz_entry_points_work)
{
    void *p = NULL;
    ASSERT_EQ(cudaMallocAsync_ptsz(&p, 5000, 0), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(p, 7, 5000, cudaStreamPerThread), cudaSuccess);
    ASSERT_EQ(cudaFreeAsync_ptsz(p, 0), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
}

/* RTLD_DEEPBIND can bypass the preload: said once on stderr. */
TEST(deepbind_is_reported_once)
{
    char path[] = "/tmp/hk_deepbindXXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    fflush(stderr);
    int saved = dup(2);
    dup2(fd, 2);
    void *h1 = dlopen("libcuda.so.1", RTLD_NOW | RTLD_DEEPBIND);
    void *h2 = dlopen("libcudart.so.13", RTLD_NOW | RTLD_DEEPBIND);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    ASSERT(h1 && h2);
    char buf[4096] = { 0 };
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    close(fd);
    unlink(path);
    ASSERT_GT(n, 0);
    ASSERT_MSG(strstr(buf, "RTLD_DEEPBIND") != NULL, "no warning: %s", buf);
    ASSERT(strstr(strstr(buf, "RTLD_DEEPBIND") + 1, "RTLD_DEEPBIND") == NULL);
}

/* The public API (PyTorch's pluggable allocator path) under the preload: the
 * allocator's own driver calls must not come back into the hooks, even when
 * the driver handed it our exported functions, and even as the process's
 * first CUDA call. */
TEST(public_api_under_preload_does_not_recurse)
{
    void *(*vmalloc)(ssize_t, int, cudaStream_t);
    void (*vfree)(void *, ssize_t, int, cudaStream_t);
    void *a = dlsym(RTLD_DEFAULT, "vt_malloc"), *b = dlsym(RTLD_DEFAULT, "vt_free");
    ASSERT(a && b);
    memcpy(&vmalloc, &a, sizeof a);
    memcpy(&vfree, &b, sizeof b);
    void *x = vmalloc(4096, 0, NULL);
    ASSERT(x != NULL);
    ASSERT_EQ(cudaMemset(x, 1, 4096), cudaSuccess);
    vfree(x, 4096, 0, NULL);
    x = vmalloc(4096, 0, NULL);
    ASSERT(x != NULL);
    ASSERT_EQ(cudaFree(x), cudaSuccess);    /* the hooks free cache pointers too */
    ASSERT_EQ(stats().num_bad_frees, 0);
}

TEST_MAIN()
