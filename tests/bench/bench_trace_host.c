/*
 * tests/bench/bench_trace_host.c - the host-malloc twin of bench_trace's
 * allocator workload, for recording under heaptrack.
 *
 *   bench_trace_host PAIRS DEPTH
 *
 * Recurses DEPTH frames through a synthetic call chain, then does PAIRS
 * malloc/free pairs of the same sizes bench_trace uses, and prints the time of
 * that loop alone ("loop_ns=<ns>"), so heaptrack's start-up and its final
 * compression are not counted - only what it adds to each call.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "bench_util.h"

static volatile uintptr_t sink;

static uint64_t loop(long pairs)
{
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < pairs; i++) {
        void *p = malloc(bench_trace_size(i));
        sink += (uintptr_t)p;
        free(p);
    }
    return bench_now_ns() - t0;
}

__attribute__((noinline)) static uint64_t recurse(int depth, long pairs)
{
    if (depth <= 0)
        return loop(pairs);
    uint64_t r = recurse(depth - 1, pairs);
    sink += (uintptr_t)depth;   /* no tail call: every level keeps its frame */
    return r;
}

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 100000;
    int depth = argc > 2 ? atoi(argv[2]) : 32;
    recurse(depth / 2, pairs / 10);              /* warm up malloc and the tool */
    printf("loop_ns=%llu\n", (unsigned long long)recurse(depth, pairs));
    return 0;
}
