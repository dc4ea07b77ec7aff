/* tests/bench/bench_pairs.h - the measured loop of bench_trace and of its
 * host-malloc twin bench_trace_host, written once so that both make the same
 * calls in the same frames. Include it after defining BENCH_ALLOC(size) and
 * BENCH_FREE(p, size): the calls are direct, as a program's would be (a
 * function pointer would add an indirect call to what is measured). */
#ifndef VT_TESTS_BENCH_PAIRS_H
#define VT_TESTS_BENCH_PAIRS_H

#include <stdint.h>

#include "bench_util.h"

static volatile uintptr_t sink;

/* ns taken by `pairs` allocate/free pairs of bench_trace's sizes. */
static uint64_t pairs_loop(long pairs)
{
    uint64_t t0 = bench_now_ns();
    for (long i = 0; i < pairs; i++) {
        void *p = BENCH_ALLOC(bench_trace_size(i));
        sink += (uintptr_t)p;
        BENCH_FREE(p, bench_trace_size(i));
    }
    return bench_now_ns() - t0;
}

/* pairs_loop() below `depth` frames of a synthetic call chain. */
__attribute__((noinline)) static uint64_t recurse(int depth, long pairs)
{
    if (depth <= 0)
        return pairs_loop(pairs);
    uint64_t r = recurse(depth - 1, pairs);
    sink += (uintptr_t)depth;   /* no tail call: every level keeps its frame */
    return r;
}

#endif /* VT_TESTS_BENCH_PAIRS_H */
