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

#define BENCH_ALLOC(size) malloc(size)
#define BENCH_FREE(p, size) free(p)
#include "bench_pairs.h"

int main(int argc, char **argv)
{
    long pairs = argc > 1 ? atol(argv[1]) : 100000;
    int depth = argc > 2 ? atoi(argv[2]) : 32;
    recurse(depth / 2, pairs / 10);              /* warm up malloc and the tool */
    printf("loop_ns=%llu\n", (unsigned long long)recurse(depth, pairs));
    return 0;
}
