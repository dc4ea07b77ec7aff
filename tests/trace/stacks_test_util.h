/*
 * tests/trace/stacks_test_util.h - what the stack tests (test_stacks*.c)
 * share: frames the compiler keeps (KEEP, FRAME), one call site for several
 * chains (via), and a snapshot holding one event of a given stack.
 *
 * A function whose file or line a test checks is defined in that test's
 * file, never here: test_stacks.c's chain_a -> chain_b -> chain_c.
 */
#ifndef VT_TESTS_TRACE_STACKS_TEST_UTIL_H
#define VT_TESTS_TRACE_STACKS_TEST_UTIL_H

#include "rec_snap.h"
#include "recorder.h"

#include "../harness.h"

static volatile int sink;
/* Loop bounds the compiler cannot see: no unrolling into distinct call sites. */
static volatile int two = 2, ten = 10, hundred_and_one = 101;

#define KEEP() __asm__ volatile("" ::: "memory")

/* A function with a frame of its own that calls `callee`: kept (no inlining,
 * no tail call), and adding its own `salt` to sink, so that no two of them
 * have equal bodies (GCC would fold those into one). One per line: the line
 * of the call is the line of the FRAME. */
#define FRAME(name, callee, salt)                                           \
    __attribute__((noinline)) static uint32_t name(void)                    \
    {                                                                       \
        uint32_t id = callee();                                             \
        KEEP();                                                             \
        __atomic_fetch_add(&sink, salt, __ATOMIC_RELAXED);                  \
        return id;                                                          \
    }

/* One call site for several chains: their stacks share everything outside. */
__attribute__((noinline, unused)) static uint32_t via(uint32_t (*fn)(void))
{
    uint32_t id = fn();
    KEEP();
    sink++;
    return id;
}

static inline vt__snapshot_data *snapshot_with_stack(uint32_t stack)
{
    vt__trace(.kind = VT_EV_ALLOC, .addr = 0x1000, .req_size = 1, .size = 1, .stack = stack);
    vt__snapshot_data *s = NULL;
    ASSERT_OK(vt__snapshot_build(&s));
    return s;
}

static inline const vt__event *last_event(const vt__snapshot_data *s)
{
    ASSERT_GT(s->nevents, 0);
    return &s->events[s->nevents - 1];
}

#endif /* VT_TESTS_TRACE_STACKS_TEST_UTIL_H */
