/* tests/alloc/trace_fake.h - a recorder for the allocator's unit tests.
 *
 * trace_fake.c implements trace/record/recorder.h by keeping every event in memory,
 * so tests can check what the allocator recorded without the real recorder
 * (which the integration test links instead). */
#ifndef VT_TESTS_ALLOC_TRACE_FAKE_H
#define VT_TESTS_ALLOC_TRACE_FAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "snapshot.h"

void fake_trace_enable(bool on);             /* default on */
size_t fake_trace_count(int kind);           /* events of a kind so far */
bool fake_trace_last(int kind, vt__event *out);
size_t fake_stack_captures(void);            /* vt__stack_capture calls */
size_t fake_oom_calls(void);                 /* vt__trace_out_of_memory calls */
void fake_trace_reset(void);
/* Run the registered state provider into a fresh snapshot (free with
 * fake_snapshot_free). NULL if no provider. */
vt__snapshot_data *fake_snapshot(void);
void fake_snapshot_free(vt__snapshot_data *s);

#endif
