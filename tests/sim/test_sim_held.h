/* tests/sim/test_sim_held.h - what a sim test holds: streams, events and
 * buffers made through these helpers (each creation checked) are released,
 * newest first and each release checked, by release_held() at the test's
 * end, so a test states what it needs and not how each piece is let go.
 * Include after harness.h. */
#ifndef VT_TEST_SIM_HELD_H
#define VT_TEST_SIM_HELD_H

#include <cuda_runtime_api.h>

typedef enum held_kind { HELD_STREAM, HELD_EVENT, HELD_DEVICE, HELD_PINNED } held_kind;

#define HELD_MAX 16
static struct { held_kind kind; void *p; } held[HELD_MAX];
static int nheld;

static inline void *hold(held_kind kind, void *p)
{
    ASSERT_MSG(nheld < HELD_MAX, "a test holds more than %d things", HELD_MAX);
    held[nheld].kind = kind;
    held[nheld++].p = p;
    return p;
}

static inline cudaStream_t held_stream(unsigned flags)
{
    cudaStream_t s;
    ASSERT_OK(cudaStreamCreateWithFlags(&s, flags));
    return hold(HELD_STREAM, s);
}

static inline cudaEvent_t held_event(unsigned flags)
{
    cudaEvent_t e;
    ASSERT_OK(cudaEventCreateWithFlags(&e, flags));
    return hold(HELD_EVENT, e);
}

static inline unsigned char *held_device(size_t n)
{
    void *p = NULL;
    ASSERT_OK(cudaMalloc(&p, n));
    return hold(HELD_DEVICE, p);
}

static inline unsigned char *held_pinned(size_t n)
{
    void *p = NULL;
    ASSERT_OK(cudaMallocHost(&p, n));
    return hold(HELD_PINNED, p);
}

static inline void release_held(void)
{
    while (nheld > 0) {
        void *p = held[--nheld].p;
        switch (held[nheld].kind) {
        case HELD_STREAM: ASSERT_OK(cudaStreamDestroy((cudaStream_t)p)); break;
        case HELD_EVENT:  ASSERT_OK(cudaEventDestroy((cudaEvent_t)p)); break;
        case HELD_DEVICE: ASSERT_OK(cudaFree(p)); break;
        case HELD_PINNED: ASSERT_OK(cudaFreeHost(p)); break;
        }
    }
}

#endif /* VT_TEST_SIM_HELD_H */
