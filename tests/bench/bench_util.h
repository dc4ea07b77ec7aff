/* tests/bench/bench_util.h - what the benchmarks share: the monotonic clock,
 * a seeded xorshift64 generator (the same workload on every run, so the sides
 * of a comparison see the same calls), the sizes of bench_trace's allocation
 * loop (its host-malloc twin uses them too), and for the allocator benchmarks
 * the list of (slot, size) operations one program replays. */
#ifndef VT_TESTS_BENCH_UTIL_H
#define VT_TESTS_BENCH_UTIL_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>

static inline uint64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static inline uint64_t bench_xorshift64(uint64_t *state)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return *state;
}

/* qsort order of doubles, for medians. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The size of call i of bench_trace's allocation loop and of bench_trace_host's
 * malloc loop (its twin). */
static inline size_t bench_trace_size(long i)
{
    static const size_t sizes[8] = { 4096, 65536, 512, 1 << 20, 24576, 131072, 2048, 8192 };
    return sizes[i & 7];
}

#ifdef BENCH_OPS
/* The workload an allocator benchmark replays (one per program): slot
 * gets an allocation of size, or is freed when size is 0. */
typedef struct op { uint32_t slot; uint64_t size; } op;

static op *ops;
static size_t nops, npairs;

static void push(uint32_t slot, uint64_t size)
{
    static size_t cap;
    if (nops == cap) {
        cap = cap ? cap * 2 : 4096;
        ops = realloc(ops, cap * sizeof *ops);
        if (!ops)
            exit(1);
    }
    ops[nops++] = (op){ slot, size };
    npairs += size != 0;
}
#endif

#endif /* VT_TESTS_BENCH_UTIL_H */
