/* tests/sim/test_sim_util.h - small helpers shared by the sim conformance tests. */
#ifndef VT_TEST_SIM_UTIL_H
#define VT_TEST_SIM_UTIL_H

#include <cuda_runtime_api.h>
#include <time.h>

static inline void sleep_ms(int ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
    nanosleep(&ts, NULL);
}

static inline double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

/* A host function that sleeps, then stores a value: stands in for a slow
 * kernel writing memory. */
typedef struct slow_store {
    int *dst;
    int  value;
    int  delay_ms;
} slow_store;

static inline void CUDART_CB slow_store_fn(void *arg)
{
    slow_store *j = arg;
    sleep_ms(j->delay_ms);
    __atomic_store_n(j->dst, j->value, __ATOMIC_RELEASE);
}

/* Reads a flag at the time it runs, into *seen. */
typedef struct probe {
    int *flag;
    int  seen;
} probe;

static inline void CUDART_CB probe_fn(void *arg)
{
    probe *p = arg;
    p->seen = __atomic_load_n(p->flag, __ATOMIC_ACQUIRE);
}

static inline int load_flag(int *flag) { return __atomic_load_n(flag, __ATOMIC_ACQUIRE); }

#endif /* VT_TEST_SIM_UTIL_H */
