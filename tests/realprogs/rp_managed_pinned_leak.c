/* rp_managed_pinned_leak.c - unified and pinned memory in the manner of
 * cuda-samples' UnifiedMemoryStreams and simpleZeroCopy, leaking on
 * purpose: 24 MiB managed, 3 MiB pinned host (2 allocated, 1 registered)
 * and 1 MiB device. The reports must show all of it, each kind apart. */
#include <string.h>

#include "realprog.h"

int main(void)
{
    CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
    unsigned char *m;
    CHECK(cudaMallocManaged((void **)&m, 24u << 20, cudaMemAttachGlobal));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle));
    struct cudaMemLocation here = { .type = cudaMemLocationTypeDevice, .id = 0 };
    CHECK(cudaMemPrefetchAsync(m, 24u << 20, here, 0, s));
    CHECK(cudaMemsetAsync(m, 0x5a, 24u << 20, s));
    CHECK(cudaStreamSynchronize(s));
    printf("managed checksum %016llx\n", (unsigned long long)rp_checksum(m, 24u << 20));

    unsigned char *pinned, *mapped_dev;
    CHECK(cudaHostAlloc((void **)&pinned, 2u << 20, cudaHostAllocMapped));
    CHECK(cudaHostGetDevicePointer((void **)&mapped_dev, pinned, 0));
    CHECK(cudaMemsetAsync(mapped_dev, 0x11, 2u << 20, s));
    CHECK(cudaStreamSynchronize(s));
    printf("zero-copy checksum %016llx\n", (unsigned long long)rp_checksum(pinned, 2u << 20));

    static unsigned char registered[1u << 20] __attribute__((aligned(4096)));
    rp_pattern(registered, sizeof registered, 7);
    CHECK(cudaHostRegister(registered, sizeof registered, cudaHostRegisterDefault));
    unsigned char *d;
    CHECK(cudaMalloc((void **)&d, 1u << 20));
    CHECK(cudaMemcpyAsync(d, registered, sizeof registered, cudaMemcpyHostToDevice, s));
    memset(registered, 0, 16);   /* after the copy is queued: a pinned copy reads late */
    CHECK(cudaStreamSynchronize(s));
    unsigned char back[1u << 12];
    CHECK(cudaMemcpy(back, d + 4096, sizeof back, cudaMemcpyDeviceToHost));
    printf("registered copy checksum %016llx\n", (unsigned long long)rp_checksum(back, sizeof back));
    CHECK(cudaStreamDestroy(s));
    rp_leak("managed", 24u << 20);
    rp_leak("pinned host", (2u << 20) + (1u << 20));
    rp_leak("device", 1u << 20);
    printf("PASSED\n");
    return 0;
}
