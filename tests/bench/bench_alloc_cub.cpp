// tests/bench/bench_alloc_cub.cpp - cub::CachingDeviceAllocator for bench_alloc.
//
// The toolkit's header-only allocator behind four C functions, so the C
// benchmark can drive it like the others. Configured to cache the whole
// workload (power-of-two bins 512 B .. 64 MiB, no limit on cached bytes):
// cub at its best; its defaults (growth 8, bins up to 2 MiB, 6 MiB cached)
// would send every large request to cudaMalloc.
#include <cub/util_allocator.cuh>

namespace {
cub::CachingDeviceAllocator *alloc;
}

extern "C" {

void bench_cub_init(void)
{
    if (!alloc)
        alloc = new cub::CachingDeviceAllocator(2, 9, 26, cub::CachingDeviceAllocator::INVALID_SIZE,
                                                true);
}

void *bench_cub_alloc(size_t size, cudaStream_t stream)
{
    void *p = nullptr;
    if (alloc->DeviceAllocate(&p, size, stream) != cudaSuccess)
        return nullptr;
    return p;
}

void bench_cub_free(void *p, cudaStream_t stream)
{
    (void)stream;
    alloc->DeviceFree(p);
}

void bench_cub_release(void)
{
    alloc->FreeAllCached();
}

const char *bench_cub_config(void)
{
    return "bin_growth=2 bins 512B..64MiB, unlimited cache";
}

}  // extern "C"
