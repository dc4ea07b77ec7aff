/* rp_graphs.c - CUDA graphs in the manner of cuda-samples' simpleCudaGraphs
 * and graphMemoryNodes: a pipeline captured from two streams (fork and join
 * through events) with stream-ordered temporaries allocated and freed inside
 * the capture, instantiated once and launched many times while the program
 * allocates, fills and frees its own buffers between launches. Every launch
 * and every buffer is checked. The graph allocates a 256 KiB buffer and does
 * not free it: it is instantiated with cudaGraphInstantiateFlagAutoFreeOnLaunch
 * (without it a relaunch while the buffer is still allocated fails with
 * cudaErrorInvalidValue, as cudaGraphLaunch documents and an NVIDIA H200
 * did), so each launch frees the previous launch's buffer; the last one is
 * leaked on purpose (graph memory the program then owns). */
#include <string.h>

#include "realprog.h"

#define N (2u << 20)

int main(void)
{
    cudaStream_t s, side;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
    cudaEvent_t fork, join;
    CHECK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
    CHECK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
    unsigned char *in, *out, *host;
    CHECK(cudaMalloc((void **)&in, N));
    CHECK(cudaMalloc((void **)&out, N));
    CHECK(cudaMallocHost((void **)&host, N));
    rp_pattern(host, N, 11);
    CHECK(cudaMemcpy(in, host, N, cudaMemcpyHostToDevice));

    unsigned char *tmp, *side_tmp, *kept;
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    CHECK(cudaMallocAsync((void **)&tmp, N, s));
    CHECK(cudaMemcpyAsync(tmp, in, N, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaEventRecord(fork, s));
    CHECK(cudaStreamWaitEvent(side, fork, 0));
    CHECK(cudaMallocAsync((void **)&side_tmp, N / 2, side));
    CHECK(cudaMemsetAsync(side_tmp, 0x5c, N / 2, side));
    CHECK(cudaMemcpyAsync(tmp + N / 2, side_tmp, N / 2, cudaMemcpyDeviceToDevice, side));
    CHECK(cudaFreeAsync(side_tmp, side));
    CHECK(cudaEventRecord(join, side));
    CHECK(cudaStreamWaitEvent(s, join, 0));
    CHECK(cudaMallocAsync((void **)&kept, 256u << 10, s));
    CHECK(cudaMemcpyAsync(kept, tmp, 256u << 10, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaMemcpyAsync(out, tmp, N, cudaMemcpyDeviceToDevice, s));
    CHECK(cudaFreeAsync(tmp, s));
    cudaGraph_t graph;
    CHECK(cudaStreamEndCapture(s, &graph));
    cudaGraphExec_t exec;
    CHECK(cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch));
    CHECK(cudaGraphDestroy(graph));

    uint64_t acc = 0;
    int wrong = 0;
    for (int launch = 0; launch < 12; launch++) {
        /* the program's own work between launches, on both streams */
        unsigned char *mine;
        CHECK(cudaMallocAsync((void **)&mine, N, launch % 2 ? s : side));
        CHECK(cudaMemsetAsync(mine, launch, N, launch % 2 ? s : side));
        CHECK(cudaMemsetAsync(out, 0, N, s));
        CHECK(cudaGraphLaunch(exec, s));
        CHECK(cudaMemcpyAsync(host, out, N, cudaMemcpyDeviceToHost, s));
        CHECK(cudaStreamSynchronize(s));
        CHECK(cudaStreamSynchronize(side));
        acc = acc * 31 + rp_checksum(host, N);
        unsigned char probe[4096];
        CHECK(cudaMemcpy(probe, mine + N - sizeof probe, sizeof probe, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < sizeof probe; i++)
            wrong += probe[i] != (unsigned char)launch;
        CHECK(cudaFreeAsync(mine, launch % 2 ? s : side));
    }
    CHECK(cudaDeviceSynchronize());
    printf("12 launches, output checksum %016llx, program buffers overwritten: %d bytes\n",
           (unsigned long long)acc, wrong);
    unsigned char head[16];
    CHECK(cudaMemcpy(head, kept, sizeof head, cudaMemcpyDeviceToHost));
    printf("graph-allocated buffer kept: %016llx\n", (unsigned long long)rp_checksum(head, sizeof head));
    CHECK(cudaGraphExecDestroy(exec));
    CHECK(cudaEventDestroy(fork));
    CHECK(cudaEventDestroy(join));
    CHECK(cudaStreamDestroy(s));
    CHECK(cudaStreamDestroy(side));
    CHECK(cudaFree(in));
    CHECK(cudaFree(out));
    CHECK(cudaFreeHost(host));
    rp_leak("graph", 256u << 10);
    printf(wrong ? "FAILED\n" : "PASSED\n");
    return wrong ? 1 : 0;
}
