/* rp_stream_ordered_pools.c - stream-ordered allocation in the manner of
 * cuda-samples' streamOrderedAllocation and streamOrderedAllocationP2P:
 * cudaMallocAsync/cudaFreeAsync on several streams with events between
 * them, the default pool's release threshold raised, an explicit pool with
 * cudaMallocFromPoolAsync, then that pool made the device's current one.
 * Leaks on purpose: 2 MiB from the explicit pool and 512 KiB from
 * cudaMallocAsync while the explicit pool is current. */
#include <string.h>

#include "realprog.h"

#define N (3u << 20)

int main(void)
{
    cudaMemPool_t def;
    CHECK(cudaDeviceGetDefaultMemPool(&def, 0));
    unsigned long long thr = ~0ull;
    CHECK(cudaMemPoolSetAttribute(def, cudaMemPoolAttrReleaseThreshold, &thr));
    cudaStream_t a, b;
    CHECK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    cudaEvent_t ready;
    CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    unsigned char *host;
    CHECK(cudaMallocHost((void **)&host, N));
    uint64_t sum = 0;
    for (int it = 0; it < 20; it++) {
        unsigned char *x, *y;
        CHECK(cudaMallocAsync((void **)&x, N, a));
        CHECK(cudaMemsetAsync(x, it, N, a));
        CHECK(cudaEventRecord(ready, a));
        CHECK(cudaStreamWaitEvent(b, ready, 0));
        CHECK(cudaMallocAsync((void **)&y, N, b));
        CHECK(cudaMemcpyAsync(y, x, N, cudaMemcpyDeviceToDevice, b));
        CHECK(cudaMemsetAsync(y + it * 1000, 0xff, 1000, b));
        CHECK(cudaFreeAsync(x, b));     /* freed on the stream that last used it */
        CHECK(cudaMemcpyAsync(host, y, N, cudaMemcpyDeviceToHost, b));
        CHECK(cudaFreeAsync(y, b));
        CHECK(cudaStreamSynchronize(b));
        sum ^= rp_checksum(host, N) + (uint64_t)it;
    }
    printf("default pool rounds checksum %016llx\n", (unsigned long long)sum);

    struct cudaMemPoolProps props;
    memset(&props, 0, sizeof props);
    props.allocType = cudaMemAllocationTypePinned;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = 0;
    cudaMemPool_t pool;
    CHECK(cudaMemPoolCreate(&pool, &props));
    struct cudaMemAccessDesc acc = { .location = { .type = cudaMemLocationTypeDevice, .id = 0 },
                                     .flags = cudaMemAccessFlagsProtReadWrite };
    CHECK(cudaMemPoolSetAccess(pool, &acc, 1));
    unsigned char *p, *kept;
    CHECK(cudaMallocFromPoolAsync((void **)&p, N, pool, a));
    CHECK(cudaMallocFromPoolAsync((void **)&kept, 2u << 20, pool, a));
    CHECK(cudaMemsetAsync(p, 0x33, N, a));
    CHECK(cudaMemsetAsync(kept, 0x44, 2u << 20, a));
    CHECK(cudaMemcpyAsync(host, p, N, cudaMemcpyDeviceToHost, a));
    CHECK(cudaFreeAsync(p, a));
    CHECK(cudaStreamSynchronize(a));
    printf("explicit pool checksum %016llx\n", (unsigned long long)rp_checksum(host, N));

    CHECK(cudaDeviceSetMemPool(0, pool));
    unsigned char *q, *left;
    CHECK(cudaMallocAsync((void **)&q, N, b));
    CHECK(cudaMallocAsync((void **)&left, 512u << 10, b));
    CHECK(cudaMemsetAsync(q, 0x77, N, b));
    CHECK(cudaMemcpyAsync(host, q, N, cudaMemcpyDeviceToHost, b));
    CHECK(cudaFreeAsync(q, b));
    CHECK(cudaStreamSynchronize(b));
    printf("current pool checksum %016llx\n", (unsigned long long)rp_checksum(host, N));

    CHECK(cudaEventDestroy(ready));
    CHECK(cudaStreamDestroy(a));
    CHECK(cudaStreamDestroy(b));
    CHECK(cudaFreeHost(host));
    rp_leak("pool", (2u << 20) + (512u << 10));
    printf("PASSED\n");
    return 0;
}
