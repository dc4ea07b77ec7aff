// tests/sim/test_sim_cub.cu - cub::CachingDeviceAllocator, compiled by nvcc
// with -cudart shared, running on the simulator: its allocations reach the
// sim (counters), the cache saves cudaMalloc calls, kernel launches from
// nvcc-generated stubs are accepted and counted. Exit 0 = pass.
#include <cub/util_allocator.cuh>
#include <cstdio>
#include <cstring>
#include <dlfcn.h>

#include "simcuda.h"

__global__ void fill(int *p, int n, int v)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        p[i] = v;
}

#define CHECK(cond)                                                         \
    do {                                                                    \
        if (!(cond)) {                                                      \
            std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__,     \
                         __LINE__, #cond);                                  \
            return 1;                                                       \
        }                                                                   \
    } while (0)

int main()
{
    simcuda_counters c0, c1;
    int (*stats)(int, simcuda_counters *) = nullptr;

    CHECK(cudaFree(0) == cudaSuccess);
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    CHECK(h != nullptr);
    void *sym = dlsym(h, "simcuda_stats");
    CHECK(sym != nullptr);
    std::memcpy(&stats, &sym, sizeof sym);
    CHECK(stats(0, &c0) == 0);

    {
        cub::CachingDeviceAllocator alloc;
        cudaStream_t s;
        CHECK(cudaStreamCreate(&s) == cudaSuccess);
        const int iters = 2000;
        for (int i = 0; i < iters; i++) {
            size_t bytes = 256u << (i % 6);          // 6 sizes, all cached
            void *p = nullptr;
            CHECK(alloc.DeviceAllocate(&p, bytes, s) == cudaSuccess);
            CHECK(p != nullptr);
            if (i % 100 == 0) {
                fill<<<1, 64, 0, s>>>(static_cast<int *>(p), 64, i);
                CHECK(cudaGetLastError() == cudaSuccess);
            }
            CHECK(alloc.DeviceFree(p) == cudaSuccess);
        }
        CHECK(cudaStreamSynchronize(s) == cudaSuccess);
        CHECK(stats(0, &c1) == 0);
        unsigned long long allocs = c1.allocs - c0.allocs;
        std::printf("cub: %d DeviceAllocate, %llu device allocations, %llu launches, "
                    "%llu event records\n", iters, allocs,
                    (unsigned long long)(c1.kernel_launches - c0.kernel_launches),
                    (unsigned long long)(c1.event_records - c0.event_records));
        // bins grow by 8 from 512 B: 256..8192 B fall in 3 bins, one allocation each
        CHECK(allocs == 3);
        CHECK(c1.kernel_launches - c0.kernel_launches == iters / 100);
        CHECK(c1.event_records - c0.event_records >= (unsigned long long)iters); // event per free
        CHECK(alloc.FreeAllCached() == cudaSuccess);
        CHECK(stats(0, &c1) == 0);
        CHECK(c1.bytes_in_use == c0.bytes_in_use);
        CHECK(cudaStreamDestroy(s) == cudaSuccess);
    }
    std::printf("ok\n");
    return 0;
}
