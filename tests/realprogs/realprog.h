/* tests/realprogs/realprog.h - what the cuda-samples-like programs share:
 * checked calls that end the program the way a sample does (message, exit
 * status), a data checksum, and the line that declares an intended leak so
 * the runner can hold the reports to it.
 *
 * Output rules: nothing that differs between runs (no pointers, no times),
 * so a plain run and a run under vramtrace print the same bytes. */
#ifndef VT_REALPROG_H
#define VT_REALPROG_H

#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                              \
    do {                                                                         \
        cudaError_t e_ = (call);                                                 \
        if (e_ != cudaSuccess) {                                                 \
            printf("%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,          \
                   cudaGetErrorName(e_));                                        \
            exit(1);                                                             \
        }                                                                        \
    } while (0)

/* FNV-1a over bytes: the programs print it for what they read back. */
static inline uint64_t rp_checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Declares memory the program leaves allocated on purpose, by kind as the
 * reports name it ("device" for the cache's blocks). */
static inline void rp_leak(const char *kind, size_t bytes)
{
    printf("leak: %s %zu\n", kind, bytes);
}

/* A deterministic fill pattern. */
static inline void rp_pattern(unsigned char *p, size_t n, unsigned seed)
{
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13; x ^= x >> 17; x ^= x << 5;
        p[i] = (unsigned char)x;
    }
}

#endif /* VT_REALPROG_H */
