/* rp_threads_churn.c - several host threads, each with its own stream,
 * allocating, filling, copying and freeing in a loop (the pattern of a
 * multi-threaded server or data loader), every result checked. No leak. */
#include <pthread.h>
#include <string.h>

#include "realprog.h"

#define THREADS 4
/* build-tsan runs this program instrumented, where each round's byte-wise
 * checksum and copies are ten times slower: a third of the rounds there,
 * each thread still going through sizes from 4 KiB to 800 KiB and every
 * kind of call. */
#if defined(__SANITIZE_THREAD__)
#define ROUNDS 50
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define ROUNDS 50
#endif
#endif
#ifndef ROUNDS
#define ROUNDS 150
#endif

static uint64_t results[THREADS];
static int bad[THREADS];

static void *worker(void *arg)
{
    int id = (int)(intptr_t)arg;
    CHECK(cudaSetDevice(0));
    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, id % 2 ? cudaStreamNonBlocking : cudaStreamDefault));
    unsigned char *host = malloc(1u << 20);
    uint64_t acc = 0;
    for (int r = 0; r < ROUNDS; r++) {
        size_t n = 4096u * (size_t)(1 + (r * 7 + id * 13) % 200);
        unsigned char *a, *b;
        if (r % 3 == 0) {
            CHECK(cudaMallocAsync((void **)&a, n, s));
        } else {
            CHECK(cudaMalloc((void **)&a, n));
        }
        CHECK(cudaMalloc((void **)&b, n));
        CHECK(cudaMemsetAsync(a, (id * 31 + r) & 0xff, n, s));
        CHECK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
        CHECK(cudaMemcpyAsync(host, b, n, cudaMemcpyDeviceToHost, s));
        if (r % 3 == 0) {
            CHECK(cudaFreeAsync(a, s));
        } else {
            CHECK(cudaFree(a));
        }
        CHECK(cudaStreamSynchronize(s));
        for (size_t i = 0; i < n; i += 512)
            if (host[i] != ((id * 31 + r) & 0xff))
                bad[id]++;
        acc = acc * 31 + rp_checksum(host, n);
        CHECK(cudaFree(b));
    }
    CHECK(cudaStreamDestroy(s));
    free(host);
    results[id] = acc;
    return NULL;
}

int main(void)
{
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, worker, (void *)(intptr_t)i);
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int errors = 0;
    for (int i = 0; i < THREADS; i++) {
        printf("thread %d: checksum %016llx, wrong bytes %d\n", i, (unsigned long long)results[i], bad[i]);
        errors += bad[i];
    }
    printf(errors ? "FAILED\n" : "PASSED\n");
    return errors ? 1 : 0;
}
