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
 * which fits in 240 MiB with plain cudaMalloc (a 5 MiB block takes three
 * 2 MiB pages); fixed 20 MiB segments (four
 * blocks each) all stay pinned, fill the device and leave no room for a
 * 12 MiB segment; in one expandable range the freed neighbours coalesce
 * into 15 MiB holes.
 *
 * Prints "frag: ok" at the end, or "frag: out of memory at <what>" and exits
 * 3 when an allocation fails; with "pins_caught" the "pins" pattern goes on
 * after a failed allocation, as a program that catches the error does (a
 * batch-size search), asks for one unit more and prints "frag: caught".
 * With "pins_late", the "pins" pattern with 600 blocks of 5 MiB allocated
 * and freed between the two (a loop that reuses the holes): more events
 * than a 1024-event ring keeps, so the recording loses how the 5 MiB blocks
 * came to pin their segments.
 * With "streams", the holes are on another stream: forty 5 MiB blocks
 * allocated and freed on a stream of the program's (cudaMallocAsync), one in
 * four kept (each 20 MiB segment pinned, a 15 MiB hole beside it), then
 * nine 12 MiB blocks on the default stream, which the holes would fit but
 * a cache serves each stream from its own blocks.
 * Sizes scale with argv[1] (MiB per unit, default 1).
 */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t unit = 1 << 20;
static int go_on;    /* "pins_caught": a failed allocation gives NULL */
static int filler;   /* "pins_late": blocks allocated and freed between the two */
static int failed;   /* allocations that failed, with go_on */

static void *get(size_t mib, const char *what)
{
    void *p = NULL;
    if (cudaMalloc(&p, mib * unit) != cudaSuccess) {
        printf("frag: out of memory at %s\n", what);
        if (go_on) {
            failed++;
            return NULL;
        }
        exit(3);
    }
    return p;
}

/* n blocks of `mib` units each into p[0..n). */
static void get_n(void **p, int n, size_t mib, const char *what)
{
    for (int i = 0; i < n; i++)
        p[i] = get(mib, what);
}

/* Free p[first], p[first + step], ... below n. */
static void free_every(void **p, int n, int first, int step)
{
    for (int i = first; i < n; i += step)
        cudaFree(p[i]);
}

/* Holes no later request fits: n blocks of `mib` units, all freed but every
 * step-th from `first` (they pin their segments), the device synchronized
 * (the step ends); then m blocks of `big` units, freed, then the pinning
 * blocks. */
static void pin_holes(int n, size_t mib, int first, int step, const char *what, int m, size_t big,
                      const char *big_what)
{
    void *p[64], *q[64];
    get_n(p, n, mib, what);
    for (int i = 0; i < n; i++)
        if (i < first || (i - first) % step)
            cudaFree(p[i]);
    cudaDeviceSynchronize();
    for (int i = 0; i < filler; i++)
        cudaFree(get(mib, "the filler"));
    get_n(q, m, big, big_what);
    free_every(q, m, 0, 1);
    free_every(p, n, first, step);
}

static int pins(void)
{
    pin_holes(40, 5, 1, 4, "the 5 MiB blocks", 9, 12, "the 12 MiB blocks");
    printf("frag: ok\n");
    return 0;
}

/* "streams": the pinned holes on one stream, the big requests on another. */
static int streams(void)
{
    cudaStream_t s;
    if (cudaStreamCreate(&s) != cudaSuccess) {
        printf("frag: no stream\n");
        return 1;
    }
    void *p[40], *q[9];
    for (int i = 0; i < 40; i++)
        if (cudaMallocAsync(&p[i], 5 * unit, s) != cudaSuccess) {
            printf("frag: out of memory at the 5 MiB blocks\n");
            return 3;
        }
    for (int i = 0; i < 40; i++)
        if (i % 4)
            cudaFreeAsync(p[i], s);
    cudaStreamSynchronize(s);
    get_n(q, 9, 12, "the 12 MiB blocks on the default stream");
    free_every(q, 9, 0, 1);
    for (int i = 0; i < 40; i += 4)
        cudaFreeAsync(p[i], s);
    cudaStreamSynchronize(s);
    cudaStreamDestroy(s);
    printf("frag: ok\n");
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1)
        unit = (size_t)atoi(argv[1]) << 20;
    if (argc > 2 && !strcmp(argv[2], "pins"))
        return pins();
    if (argc > 2 && !strcmp(argv[2], "streams"))
        return streams();
    if (argc > 2 && !strcmp(argv[2], "pins_late")) {
        filler = 600;
        return pins();
    }
    if (argc > 2 && !strcmp(argv[2], "pins_caught")) {
        go_on = 1;
        pin_holes(40, 5, 1, 4, "the 5 MiB blocks", 9, 12, "the 12 MiB blocks");
        cudaFree(get(1, "one unit after"));
        printf("frag: caught %d\n", failed);
        return 0;
    }
    void *big[4];
    get_n(big, 4, 200, "epoch 1");
    free_every(big, 4, 0, 1);
    cudaDeviceSynchronize();   /* the epoch ends (a loss read back) */
    /* epoch 2: 0, 3, 6 stay, one per 200 MiB segment; epoch 3 cannot use them */
    pin_holes(8, 60, 0, 3, "epoch 2", 2, 300, "epoch 3");
    printf("frag: ok\n");
    return 0;
}
