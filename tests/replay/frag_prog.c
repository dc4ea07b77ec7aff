/*
 * tests/replay/frag_prog.c - a training loop whose batch sizes come in an
 * order that fragments a caching allocator.
 *
 * Epoch 1 runs a large batch (four 200 MiB activations), epoch 2 a small one
 * (eight 60 MiB activations, carved out of the cached 200 MiB blocks), of
 * which three stay alive (an accumulated statistic per segment); epoch 3 runs
 * two 300 MiB activations. Live: 3 x 60 + 2 x 300 = 780 MiB, which fits in a
 * 1000 MiB device with plain cudaMalloc; a cache that splits its big blocks
 * for the small batch keeps three 200 MiB segments pinned by 60 MiB each and
 * runs out of memory. max_split_size_mb below 200 keeps the big blocks whole.
 *
 * Each epoch ends with cudaDeviceSynchronize (as a loss read back does), so
 * the frees of an epoch are complete before the next one allocates, however
 * fast the device is.
 *
 * Prints "frag: ok" at the end, or "frag: out of memory at <what>" and exits
 * 3 when an allocation fails. Sizes scale with argv[1] (MiB per unit, default
 * 1).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>

static size_t unit = 1 << 20;

static void *get(size_t mib, const char *what)
{
    void *p = NULL;
    if (cudaMalloc(&p, mib * unit) != cudaSuccess) {
        printf("frag: out of memory at %s\n", what);
        exit(3);
    }
    return p;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        unit = (size_t)atoi(argv[1]) << 20;
    void *big[4], *small[8], *huge[2];
    for (int i = 0; i < 4; i++)
        big[i] = get(200, "epoch 1");
    for (int i = 0; i < 4; i++)
        cudaFree(big[i]);
    cudaDeviceSynchronize();   /* the epoch ends (a loss read back) */
    for (int i = 0; i < 8; i++)
        small[i] = get(60, "epoch 2");
    for (int i = 0; i < 8; i++)
        if (i % 3)          /* 0, 3, 6 stay: one per 200 MiB segment */
            cudaFree(small[i]);
    cudaDeviceSynchronize();
    for (int i = 0; i < 2; i++)
        huge[i] = get(300, "epoch 3");
    for (int i = 0; i < 2; i++)
        cudaFree(huge[i]);
    for (int i = 0; i < 8; i += 3)
        cudaFree(small[i]);
    printf("frag: ok\n");
    return 0;
}
