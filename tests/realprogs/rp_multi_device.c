/* rp_multi_device.c - two devices in the manner of cuda-samples'
 * simpleP2P and simpleMultiGPU: per-device buffers and streams, peer
 * access, peer copies, results gathered on the host. Leaks on purpose
 * 1 MiB on device 1. Run with SIMCUDA_DEVICES=2. */
#include <string.h>

#include "realprog.h"

#define N (4u << 20)

int main(void)
{
    int n = 0;
    CHECK(cudaGetDeviceCount(&n));
    if (n < 2) {   /* a machine of one GPU (scripts/gpu-check): run_realprog.py skips */
        printf("needs two devices, found %d\n", n);
        return 77;
    }
    int can01 = 0, can10 = 0;
    CHECK(cudaDeviceCanAccessPeer(&can01, 0, 1));
    CHECK(cudaDeviceCanAccessPeer(&can10, 1, 0));
    printf("peer access 0->1 %d, 1->0 %d\n", can01, can10);
    unsigned char *buf[2], *host;
    cudaStream_t s[2];
    CHECK(cudaMallocHost((void **)&host, N));
    for (int d = 0; d < 2; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaDeviceEnablePeerAccess(1 - d, 0));
        CHECK(cudaStreamCreateWithFlags(&s[d], cudaStreamNonBlocking));
        CHECK(cudaMalloc((void **)&buf[d], N));
        CHECK(cudaMemsetAsync(buf[d], 0x10 + d, N, s[d]));
    }
    for (int d = 0; d < 2; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaStreamSynchronize(s[d]));
    }
    CHECK(cudaSetDevice(0));
    CHECK(cudaMemcpyPeerAsync(buf[0] + N / 2, 0, buf[1], 1, N / 2, s[0]));
    CHECK(cudaMemcpyAsync(host, buf[0], N, cudaMemcpyDeviceToHost, s[0]));
    CHECK(cudaStreamSynchronize(s[0]));
    printf("gathered checksum %016llx\n", (unsigned long long)rp_checksum(host, N));
    unsigned char *kept;
    CHECK(cudaSetDevice(1));
    CHECK(cudaMalloc((void **)&kept, 1u << 20));
    for (int d = 0; d < 2; d++) {
        CHECK(cudaSetDevice(d));
        CHECK(cudaStreamDestroy(s[d]));
        CHECK(cudaFree(buf[d]));
    }
    CHECK(cudaFreeHost(host));
    rp_leak("device", 1u << 20);
    printf("PASSED\n");
    return 0;
}
