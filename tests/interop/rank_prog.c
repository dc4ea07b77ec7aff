/*
 * tests/interop/rank_prog.c - one rank of a "distributed" job on the
 * simulated device, as a plain process with RANK set: every rank runs the
 * same steps; the rank named by IMBALANCED_RANK (default 1) also holds a
 * 32 MiB buffer from hold_extra_buffers_on_this_rank() until exit, so
 * `vramtrace compare` must name that rank and that call site.
 */
#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime_api.h>

/* Exported (not static): the optimizer would otherwise specialize them into
 * clones named like "fn.constprop.0". */
void *alloc_weights(size_t n);
void *alloc_activations(size_t n);
void *hold_extra_buffers_on_this_rank(size_t n);

/* `what` also keeps the three callers below distinct: identical bodies
 * would be folded into one function by the optimizer (-fipa-icf), and the
 * call sites would then carry one name. */
static void *must_alloc(size_t n, const char *what)
{
    void *p = NULL;
    if (cudaMalloc(&p, n) != cudaSuccess) {
        fprintf(stderr, "rank_prog: cudaMalloc(%zu) for %s failed\n", n, what);
        exit(1);
    }
    return p;
}

__attribute__((noinline)) void *alloc_weights(size_t n) { return must_alloc(n, "weights"); }
__attribute__((noinline)) void *alloc_activations(size_t n) { return must_alloc(n, "activations"); }
__attribute__((noinline)) void *hold_extra_buffers_on_this_rank(size_t n)
{
    return must_alloc(n, "extra buffers");
}

int main(void)
{
    const char *r = getenv("RANK"), *imb = getenv("IMBALANCED_RANK");
    int rank = r ? atoi(r) : 0, imbalanced = imb ? atoi(imb) : 1;
    void *weights = alloc_weights(8u << 20);
    void *extra = NULL;
    for (int step = 0; step < 3; step++) {
        void *act = alloc_activations(16u << 20);
        if (step == 1 && rank == imbalanced)
            extra = hold_extra_buffers_on_this_rank(32u << 20);
        cudaMemset(act, step, 16u << 20);
        cudaFree(act);
    }
    cudaDeviceSynchronize();
    printf("rank %d done\n", rank);
    (void)weights;
    (void)extra;
    return 0;
}
