/* tests/alloc/alloc_test_util.h - what the allocator's tests on the
 * simulated device share: sizes, the allocator's and the device's counters,
 * the invariant check, capturing stderr and counting its lines, streams
 * created and destroyed as the hooks announce them, a host function that
 * uses a block late. Include after harness.h. */
#ifndef VT_TESTS_ALLOC_TEST_UTIL_H
#define VT_TESTS_ALLOC_TEST_UTIL_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "alloc_internal.h"
#include "harness.h"
#include "simcuda.h"
#include "vramtrace.h"

#define KiB (1ull << 10)
#define MiB (1ull << 20)

static inline vt_stats stats(int dev)
{
    vt_stats s;
    ASSERT_EQ(vt_get_stats(dev, &s), 0);
    return s;
}

/* A non-blocking stream, announced to the allocator as the hooks do. */
static inline cudaStream_t new_stream(void)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    vt__alloc_stream_created(0, (uint64_t)(uintptr_t)s);
    return s;
}

/* A stream destroyed, the allocator told first, as the hooks do. */
static inline void destroy_stream(cudaStream_t s)
{
    vt__alloc_stream_destroyed((uint64_t)(uintptr_t)s);   /* what the hooks do */
    ASSERT_OK(cudaStreamDestroy(s));
}

/* Queued on a stream with cudaLaunchHostFunc, late_writer stands in for a
 * kernel still using a block: it writes the block 50 ms later. */
struct late_write { unsigned char *p; size_t n; };

static inline void late_writer(void *arg)
{
    struct late_write *w = arg;
    struct timespec ts = { 0, 50 * 1000 * 1000 };
    nanosleep(&ts, NULL);
    memset(w->p, 0x5A, w->n);   /* the kernel on stream A that used the block */
}

#define CHECK_INVARIANTS() ASSERT_EQ(vt__alloc_check_invariants(-1), 0)

/* Capture what the code under test prints on stderr, between
 * capture_begin() and capture_end() (which returns it; one capture at a
 * time: a test process is one test). */
static char cap_path[64];
static int saved_fd = -1;

static inline void capture_begin(void)
{
    fflush(stderr);
    strcpy(cap_path, "/tmp/vt_alloc_stderr_XXXXXX");
    int fd = mkstemp(cap_path);
    ASSERT(fd >= 0);
    saved_fd = dup(2);
    dup2(fd, 2);
    close(fd);
}

static inline char *capture_end(void)
{
    fflush(stderr);
    dup2(saved_fd, 2);
    close(saved_fd);
    FILE *f = fopen(cap_path, "r");
    ASSERT(f);
    static char buf[65536];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    unlink(cap_path);
    return buf;
}

/* Each report is one line: a captured stderr's count of them. */
static inline int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* The simulated device's counters of device 0. */
static inline simcuda_counters sim(void)
{
    simcuda_counters c;
    static int inited;
    if (!inited++)
        ASSERT_OK(cudaFree(NULL));   /* initializes the driver if nothing did */
    ASSERT_EQ(simcuda_stats_or_skip(0, &c), 0);
    return c;
}

#endif /* VT_TESTS_ALLOC_TEST_UTIL_H */
