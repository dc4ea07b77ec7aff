/* tests/sim/test_sim_memory.c - capacity, errors, alignment, memory kinds.
 * Runs with SIMCUDA_MEM=4G (sim_env). */
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <signal.h>
#include <stdint.h>

#include "harness.h"
#include "simcuda.h"
#include "test_sim_util.h"

#define GiB ((size_t)1 << 30)

TEST(out_of_memory_at_capacity)
{
    ASSERT_EQ(simcuda_capacity(0), 4 * GiB);
    void *a, *b, *c;
    ASSERT_OK(cudaMalloc(&a, 3 * GiB));
    ASSERT_EQ(cudaMalloc(&b, 2 * GiB), cudaErrorMemoryAllocation);
    ASSERT_EQ(cudaGetLastError(), cudaErrorMemoryAllocation);
    ASSERT_OK(cudaMalloc(&c, GiB - 4096));           /* takes 1 GiB: whole 2 MiB pages */
    ASSERT_EQ(cuMemAlloc((CUdeviceptr *)&b, 8192), CUDA_ERROR_OUT_OF_MEMORY); /* no page left */
    simcuda_counters st;
    ASSERT_EQ(simcuda_stats(0, &st), 0);
    ASSERT_EQ(st.failed_allocs, 2);
    ASSERT_EQ(st.bytes_in_use, 4 * GiB - 4096);      /* the sizes asked for */
    ASSERT_OK(cudaFree(a));
    ASSERT_OK(cudaMalloc(&b, 2 * GiB));
    ASSERT_OK(cudaFree(b));
    ASSERT_OK(cudaFree(c));
    ASSERT_EQ(simcuda_stats(0, &st), 0);
    ASSERT_EQ(st.bytes_in_use, 0);
    ASSERT_EQ(st.peak_bytes, 4 * GiB - 4096);
}

TEST(bad_frees_are_invalid_value)
{
    char *p;
    int host;
    ASSERT_OK(cudaMalloc((void **)&p, 1 << 20));
    ASSERT_EQ(cudaFree(p + 256), cudaErrorInvalidValue);     /* interior */
    ASSERT_EQ(cudaFree(&host), cudaErrorInvalidValue);       /* not device memory */
    ASSERT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    ASSERT_OK(cudaFree(p));
    ASSERT_EQ(cudaFree(p), cudaErrorInvalidValue);           /* double free */
    ASSERT_EQ(cuMemFree((CUdeviceptr)(uintptr_t)p), CUDA_ERROR_INVALID_VALUE);
    simcuda_counters st;
    ASSERT_EQ(simcuda_stats(0, &st), 0);
    ASSERT_EQ(st.bad_frees, 4);
    ASSERT_EQ(st.frees, 1);
}

TEST(free_null_and_malloc_zero)
{
    ASSERT_OK(cudaFree(NULL));
    void *p = (void *)1;
    ASSERT_OK(cudaMalloc(&p, 0));
    ASSERT_PTR_EQ(p, NULL);
    CUdeviceptr d;
    ASSERT_EQ(cuMemAlloc(&d, 0), CUDA_ERROR_INVALID_VALUE);  /* the driver refuses 0 */
    ASSERT_EQ(cudaMallocManaged(&p, 0, cudaMemAttachGlobal), cudaErrorInvalidValue);
    ASSERT_EQ(cudaMalloc(NULL, 16), cudaErrorInvalidValue);
}

TEST(allocations_are_aligned_and_disjoint)
{
    void *p[64];
    for (int i = 0; i < 64; i++) {
        ASSERT_OK(cudaMalloc(&p[i], (size_t)(i * 37 + 1)));
        ASSERT_EQ((uintptr_t)p[i] % 256, 0);
        memset(p[i], i, (size_t)(i * 37 + 1));               /* device memory is host-visible */
    }
    for (int i = 0; i < 64; i++)
        ASSERT_EQ(((unsigned char *)p[i])[i * 37], i);
    void *big;
    ASSERT_OK(cudaMalloc(&big, 5 << 20));
    ASSERT_EQ((uintptr_t)big % (2 << 20), 0);                /* big ones 2 MiB aligned */
    for (int i = 0; i < 64; i++)
        ASSERT_OK(cudaFree(p[i]));
    ASSERT_OK(cudaFree(big));
}

TEST(mem_get_info_tracks_allocations)
{
    size_t f0, t0, f1, t1;
    ASSERT_OK(cudaMemGetInfo(&f0, &t0));
    ASSERT_EQ(t0, 4 * GiB);
    void *p;
    ASSERT_OK(cudaMalloc(&p, 100 << 20));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f0 - f1, 100 << 20);
    ASSERT_OK(cudaFree(p));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f1, f0);
    /* Memory is consumed in 2 MiB pages, as on an H200 (README.md,
     * "Footprint"): above 1 MiB an allocation takes whole pages, up to 1 MiB
     * allocations share them. */
    void *q[3];
    ASSERT_OK(cudaMalloc(&p, (3 << 20) + 1));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f0 - f1, 4 << 20);
    ASSERT_OK(cudaMalloc(&q[0], 1 << 20));
    ASSERT_OK(cudaMalloc(&q[1], 512));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f0 - f1, 6 << 20);                     /* one shared page */
    ASSERT_OK(cudaMalloc(&q[2], 1 << 20));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f0 - f1, 8 << 20);                     /* a second one */
    ASSERT_OK(cudaFree(q[2]));
    ASSERT_OK(cudaFree(q[1]));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f0 - f1, 6 << 20);
    ASSERT_OK(cudaFree(q[0]));
    ASSERT_OK(cudaFree(p));
    ASSERT_OK(cudaMemGetInfo(&f1, &t1));
    ASSERT_EQ(f1, f0);
}

TEST(use_after_free_faults)
{
    char *p;
    ASSERT_OK(cudaMalloc((void **)&p, 8192));
    p[0] = 1;
    ASSERT_OK(cudaFree(p));
    pid_t pid = fork();
    if (pid == 0) {
        signal(SIGSEGV, SIG_DFL);
        *(volatile char *)p = 2;
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    ASSERT(WIFSIGNALED(status));
    ASSERT_EQ(WTERMSIG(status), SIGSEGV);
}

TEST(counters_separate_allocation_paths)
{
    simcuda_counters a, b;
    ASSERT_OK(cudaFree(NULL));
    ASSERT_EQ(simcuda_stats(0, &a), 0);
    void *d, *m, *h, *x;
    ASSERT_OK(cudaMalloc(&d, 1000));
    ASSERT_OK(cudaMallocManaged(&m, 1000, cudaMemAttachGlobal));
    ASSERT_OK(cudaMallocAsync(&x, 1000, 0));
    ASSERT_OK(cudaMallocHost(&h, 1000));
    ASSERT_EQ(simcuda_stats(0, &b), 0);
    ASSERT_EQ(b.mem_alloc_calls - a.mem_alloc_calls, 1);
    ASSERT_EQ(b.mem_alloc_managed_calls - a.mem_alloc_managed_calls, 1);
    ASSERT_EQ(b.mem_alloc_async_calls - a.mem_alloc_async_calls, 1);
    ASSERT_EQ(b.mem_alloc_host_calls - a.mem_alloc_host_calls, 1);
    ASSERT_EQ(b.allocs - a.allocs, 3);                       /* host memory is not device memory */
    ASSERT_EQ(b.bytes_in_use - a.bytes_in_use, 3000);
    struct cudaPointerAttributes at;
    ASSERT_OK(cudaPointerGetAttributes(&at, d));
    ASSERT_EQ(at.type, cudaMemoryTypeDevice);
    ASSERT_OK(cudaPointerGetAttributes(&at, (char *)m + 10));
    ASSERT_EQ(at.type, cudaMemoryTypeManaged);
    ASSERT_OK(cudaPointerGetAttributes(&at, h));
    ASSERT_EQ(at.type, cudaMemoryTypeHost);
    int local;
    ASSERT_OK(cudaPointerGetAttributes(&at, &local));
    ASSERT_EQ(at.type, cudaMemoryTypeUnregistered);
    CUdeviceptr base;
    size_t size;
    ASSERT_OK(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)d + 999));
    ASSERT_EQ(base, (CUdeviceptr)(uintptr_t)d);
    ASSERT_EQ(size, 1000);
    ASSERT_OK(cudaFree(d));
    ASSERT_OK(cudaFree(m));
    ASSERT_OK(cudaFreeAsync(x, 0));
    ASSERT_OK(cudaFreeHost(h));
    ASSERT_EQ(cudaFreeHost(h), cudaErrorInvalidValue);
    ASSERT_OK(cudaDeviceSynchronize());
    ASSERT_EQ(simcuda_stats(0, &b), 0);
    ASSERT_EQ(b.bytes_in_use, a.bytes_in_use);
}

TEST(vmm_reserve_map_access_unmap)
{
    ASSERT_OK(cudaFree(NULL));
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t gran = 0;
    ASSERT_OK(cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    ASSERT_EQ(gran, 2 << 20);
    CUmemGenericAllocationHandle h;
    ASSERT_EQ(cuMemCreate(&h, gran + 1, &prop, 0), CUDA_ERROR_INVALID_VALUE);
    ASSERT_OK(cuMemCreate(&h, 2 * gran, &prop, 0));
    simcuda_counters st;
    ASSERT_EQ(simcuda_stats(0, &st), 0);
    ASSERT_EQ(st.bytes_in_use, 2 * gran);
    CUdeviceptr va, va2;
    ASSERT_OK(cuMemAddressReserve(&va, 8 * gran, 0, 0, 0));
    ASSERT_OK(cuMemAddressReserve(&va2, 2 * gran, 0, 0, 0));
    ASSERT_OK(cuMemMap(va, 2 * gran, 0, h, 0));
    ASSERT_OK(cuMemMap(va2, 2 * gran, 0, h, 0));            /* same memory twice */
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    ASSERT_EQ(cuMemSetAccess(va, 4 * gran, &acc, 1), CUDA_ERROR_INVALID_VALUE); /* half unmapped */
    ASSERT_OK(cuMemSetAccess(va, 2 * gran, &acc, 1));
    ASSERT_OK(cuMemSetAccess(va2, 2 * gran, &acc, 1));
    ((volatile char *)(uintptr_t)va)[12345] = 42;
    ASSERT_EQ(((volatile char *)(uintptr_t)va2)[12345], 42);
    ASSERT_OK(cuMemRelease(h));                              /* still mapped: stays */
    ASSERT_EQ(simcuda_stats(0, &st), 0);
    ASSERT_EQ(st.bytes_in_use, 2 * gran);
    ASSERT_OK(cuMemUnmap(va, 2 * gran));
    ASSERT_OK(cuMemUnmap(va2, 2 * gran));
    ASSERT_EQ(simcuda_stats(0, &st), 0);
    ASSERT_EQ(st.bytes_in_use, 0);
    ASSERT_EQ(cudaFree((void *)(uintptr_t)va), cudaErrorInvalidValue); /* not cudaMalloc memory */
    ASSERT_OK(cuMemAddressFree(va, 8 * gran));
    ASSERT_OK(cuMemAddressFree(va2, 2 * gran));
}

TEST_MAIN()
