/* tests/gpucheck/kernel_race.cu - a freed block reused while a real kernel
 * still writes to it, for scripts/gpu-check on a GPU.
 *
 *   kernel_race            prints one line per case, exit 0 when all are right
 *
 * Each case starts a kernel that waits ~100 ms (the GPU's own clock) and then
 * fills a buffer with 0xA on stream A, frees the buffer at once, allocates the
 * same size and fills it with 0xB on stream B without waiting. Plain CUDA
 * orders this (cudaFree waits for the device; the stream-ordered pool reuses
 * only what is known complete). Under the preload the cache must too: it
 * fences a free of unknown stream against every stream, and a stream-ordered
 * free against its stream. Had it handed out the block before stream A's
 * kernel finished, that kernel's late 0xA would overwrite the 0xB. Each line
 * says whether the new buffer is the old block (the case was really tested).
 *
 * Kernels do not run on the simulated device: there it prints one "skip"
 * line and exits 0. Built with `nvcc -cudart shared` (tests/gpucheck). */
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include <cuda_runtime.h>

#define CK(x)                                                                       \
    do {                                                                            \
        cudaError_t e_ = (x);                                                       \
        if (e_ != cudaSuccess) {                                                    \
            printf("error: %s: %s\n", #x, cudaGetErrorString(e_));                  \
            exit(2);                                                                \
        }                                                                           \
    } while (0)

static const size_t N = (size_t)1 << 22;        /* ints: 16 MiB */
static const unsigned long long WAIT_NS = 100000000ull;

__device__ unsigned long long now_ns()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

__global__ void wait_then_fill(int *p, size_t n, int v, unsigned long long wait_ns)
{
    if (wait_ns) {
        unsigned long long t0 = now_ns();
        while (now_ns() - t0 < wait_ns) {
        }
    }
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v;
}

/* Elements of the device buffer `p` that are not `v`, after the device is idle. */
static size_t wrong(const int *p, int v)
{
    std::vector<int> h(N);
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), p, N * sizeof(int), cudaMemcpyDeviceToHost));
    size_t bad = 0;
    for (size_t i = 0; i < N; i++)
        bad += h[i] != v;
    return bad;
}

static int report(const char *name, int *old_p, int *new_p, size_t bad)
{
    printf("%s: %s (%zu of %zu wrong; the new buffer %s the freed block)\n", name,
           bad ? "CORRUPTED" : "ok", bad, N, new_p == old_p ? "is" : "is not");
    return bad != 0;
}

int main()
{
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    if (strstr(prop.name, "simulated")) {
        printf("skip: kernels do not run on the %s\n", prop.name);
        return 0;
    }
    cudaStream_t a, b;
    CK(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking));
    int failed = 0;

    /* cudaFree (no stream) while stream A's kernel is still to write */
    for (int round = 0; round < 3; round++) {
        int *x, *y;
        CK(cudaMalloc(&x, N * sizeof(int)));
        wait_then_fill<<<256, 256, 0, a>>>(x, N, 0xA, WAIT_NS);
        CK(cudaGetLastError());
        CK(cudaFree(x));
        CK(cudaMalloc(&y, N * sizeof(int)));
        wait_then_fill<<<256, 256, 0, b>>>(y, N, 0xB, 0);
        CK(cudaGetLastError());
        char name[64];
        snprintf(name, sizeof name, "cudaFree then reuse on another stream, round %d", round);
        failed |= report(name, x, y, wrong(y, 0xB));
        CK(cudaFree(y));
    }

    /* cudaFreeAsync on stream A, cudaMallocAsync on stream B */
    for (int round = 0; round < 3; round++) {
        int *x, *y;
        CK(cudaMallocAsync(&x, N * sizeof(int), a));
        wait_then_fill<<<256, 256, 0, a>>>(x, N, 0xA, WAIT_NS);
        CK(cudaGetLastError());
        CK(cudaFreeAsync(x, a));
        CK(cudaMallocAsync(&y, N * sizeof(int), b));
        wait_then_fill<<<256, 256, 0, b>>>(y, N, 0xB, 0);
        CK(cudaGetLastError());
        char name[64];
        snprintf(name, sizeof name, "cudaFreeAsync then cudaMallocAsync elsewhere, round %d",
                 round);
        failed |= report(name, x, y, wrong(y, 0xB));
        CK(cudaFreeAsync(y, b));
    }
    CK(cudaDeviceSynchronize());
    CK(cudaStreamDestroy(a));
    CK(cudaStreamDestroy(b));
    return failed;
}
