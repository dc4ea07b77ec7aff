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
 * Expandable segments fit too: before failing, the cache unmaps the free
 * chunks between the three live blocks, and epoch 3 maps 300 MiB more at the
 * end of the range (780 MiB reserved).
 *
 * Each epoch ends with cudaDeviceSynchronize (as a loss read back does), so
 * the frees of an epoch are complete before the next one allocates, however
 * fast the device is.
 *
 * With "pins" as argv[2], another pattern: forty 5 MiB blocks of which one
 * in four stays alive, then nine 12 MiB ones. Live at most 50 + 108 MiB,
 * which fits in 200 MiB with plain cudaMalloc; fixed 20 MiB segments (four
 * blocks each) all stay pinned, fill the device and leave no room for a
 * 12 MiB segment; in one expandable range the freed neighbours coalesce
 * into 15 MiB holes.
 *
 * Prints "frag: ok" at the end, or "frag: out of memory at <what>" and exits
 * 3 when an allocation fails. Sizes scale with argv[1] (MiB per unit, default
 * 1).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static int pins(void)
{
    void *p[40], *q[9];
    for (int i = 0; i < 40; i++)
        p[i] = get(5, "the 5 MiB blocks");
    for (int i = 0; i < 40; i++)
        if (i % 4 != 1)
            cudaFree(p[i]);
    cudaDeviceSynchronize();
    for (int i = 0; i < 9; i++)
        q[i] = get(12, "the 12 MiB blocks");
    for (int i = 0; i < 9; i++)
        cudaFree(q[i]);
    for (int i = 1; i < 40; i += 4)
        cudaFree(p[i]);
    printf("frag: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        unit = (size_t)atoi(argv[1]) << 20;
    if (argc > 2 && !strcmp(argv[2], "pins"))
        return pins();
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
