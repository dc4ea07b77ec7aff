/* tests/hooks/hk_check.h - what the hook test programs share besides their
 * stats (hk_stats.h): stopping at the first failed CUDA call, a host function
 * that holds its stream back, and counting the bytes read back wrong.
 *
 * Each program picks what a failed call does where it checks it:
 *   #define CK(x) HK_CHECK(cudaError_t, cudaSuccess, x, return 1)
 * (or CUresult / CUDA_SUCCESS for the driver API, exit(1) away from main). */
#ifndef HK_CHECK_H
#define HK_CHECK_H

#include <stdint.h>
#include <stdio.h>
#include <time.h>

#define HK_CHECK(type, success, x, on_failure)                               \
    do {                                                                       \
        type e_ = (x);                                                         \
        if (e_ != (success)) {                                                 \
            printf("%s failed: %d (line %d)\n", #x, (int)e_, __LINE__);        \
            on_failure;                                                        \
        }                                                                      \
    } while (0)

/* How many of the n bytes at b are not v. */
static inline long hk_count_not(const unsigned char *b, size_t n, unsigned char v)
{
    long bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += b[i] != v;
    return bad;
}

#ifdef CUDART_CB
/* A host function (cudaLaunchHostFunc) that sleeps (intptr_t)arg ms: work
 * queued behind it on its stream waits that long. */
static inline void CUDART_CB hk_sleep_ms(void *arg)
{
    long ms = (long)(intptr_t)arg;
    struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}
#endif

#endif /* HK_CHECK_H */
