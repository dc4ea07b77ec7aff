/* tests/hooks/prog_cub.cu - a program with its own caching allocator
 * (cub::CachingDeviceAllocator), built with `nvcc -cudart shared`: it links
 * the toolkit's libcudart.so.13 and runs on the simulated one. cub calls
 * cudaMalloc only for blocks its bins do not hold; with the preload those few
 * calls are served by vramtrace's cache and counted once each. */
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <cub/util_allocator.cuh>

#include "hk_check.h"
#include "hk_stats.h"

#define CK(x) HK_CHECK(cudaError_t, cudaSuccess, x, return 1)

int main()
{
    cub::CachingDeviceAllocator cache(8, 3, 7, (size_t)-1, true);
    unsigned char *h = (unsigned char *)malloc(1 << 21);
    unsigned long long sum = 0;
    long bad = 0;
    for (int i = 0; i < 200; i++) {
        size_t n = (size_t)((i * 7919) % 500 + 1) * 1000;
        void *p = NULL;
        CK(cache.DeviceAllocate(&p, n));
        CK(cudaMemset(p, i & 0xff, n));
        CK(cudaMemcpy(h, p, n, cudaMemcpyDeviceToHost));
        for (size_t k = 0; k < n; k++) {
            sum += h[k];
            bad += h[k] != (unsigned char)(i & 0xff);
        }
        CK(cache.DeviceFree(p));
    }
    printf("cub: sum=%llu bad=%ld\n", sum, bad);
    CK(cache.FreeAllCached());
    hk_report_stats(0);
    free(h);
    return 0;
}
