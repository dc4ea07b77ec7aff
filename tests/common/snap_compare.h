/* tests/common/snap_compare.h - the one field-by-field comparison of two
 * vt__snapshot_data, for the tests that write a snapshot and read it back
 * (tests/trace/test_format.c, test_recorder.c).
 *
 * Each record's fields are listed once, numbers apart from string ids. A
 * string field is compared either as the id (both snapshots share one string
 * table: an encode/decode round trip) or as the text it names (tables built
 * separately). A test that adds a field to a record adds it here, and every
 * round trip checks it. */
#ifndef VT_TESTS_SNAP_COMPARE_H
#define VT_TESTS_SNAP_COMPARE_H

#include "harness.h"
#include "snapshot.h"

enum snap_strings { SNAP_STRINGS_BY_ID, SNAP_STRINGS_BY_TEXT };

#define SNAP_META_NUMBERS(X)                                                \
    X(pid) X(rank) X(clock_base_monotonic_ns) X(clock_base_realtime_ns)     \
    X(snapshot_time_ns) X(events_recorded) X(events_overwritten)            \
    X(stacks_dropped) X(stacks_truncated) X(flags)
#define SNAP_META_STRINGS(X) X(host) X(command_line) X(config) X(library_version)
#define SNAP_EVENT_NUMBERS(X)                                               \
    X(seq) X(time_ns) X(stream) X(addr) X(req_size) X(size) X(aux) X(aux2)  \
    X(thread) X(stack) X(kind) X(device)
#define SNAP_EVENT_STRINGS(X) X(str)
#define SNAP_FRAME_NUMBERS(X) X(ip) X(module_offset) X(line) X(first_line) X(flags)
#define SNAP_FRAME_STRINGS(X) X(module) X(build_id) X(function) X(file)
#define SNAP_NODE_NUMBERS(X) X(parent) X(frame)
#define SNAP_SEGMENT_NUMBERS(X)                                             \
    X(addr) X(size) X(stream) X(first_block) X(nblocks) X(device) X(pool) X(private_pool)
#define SNAP_BLOCK_NUMBERS(X)                                               \
    X(addr) X(size) X(req_size) X(stream) X(alloc_seq) X(stack) X(state)
#define SNAP_DEVICE_NUMBERS(X)                                              \
    X(ordinal) X(total_bytes) X(peak_allocated) X(peak_reserved) X(peak_active)
#define SNAP_DEVICE_STRINGS(X) X(name)
#define SNAP_NO_STRINGS(X)

static inline void snap_same_string(const vt__snapshot_data *a, uint32_t ia,
                                    const vt__snapshot_data *b, uint32_t ib,
                                    enum snap_strings how)
{
    if (how == SNAP_STRINGS_BY_TEXT)
        ASSERT_STR_EQ(vt__snapshot_string(a, ia), vt__snapshot_string(b, ib));
    else
        ASSERT_EQ(ia, ib);
}

#define SNAP_SAME_NUMBER_(f) ASSERT_EQ(x->f, y->f);
#define SNAP_SAME_STRING_(f) snap_same_string(a, x->f, b, y->f, how);

/* One record x of a and its twin y of b agree on every listed field. */
#define SNAP_SAME_RECORD_(NUMBERS, STRINGS) NUMBERS(SNAP_SAME_NUMBER_) STRINGS(SNAP_SAME_STRING_)

/* a's and b's arrays `arr` (counted by `count`) agree, record by record. */
#define SNAP_SAME_ARRAY_(type, arr, count, NUMBERS, STRINGS)                 \
    do {                                                                    \
        ASSERT_EQ(a->count, b->count);                                      \
        for (size_t i_ = 0; i_ < a->count; i_++) {                          \
            const type *x = &a->arr[i_], *y = &b->arr[i_];                  \
            SNAP_SAME_RECORD_(NUMBERS, STRINGS)                             \
        }                                                                   \
    } while (0)

static inline void snap_same_meta(const vt__snapshot_data *a, const vt__snapshot_data *b,
                                  enum snap_strings how)
{
    const vt__snapshot_meta *x = &a->meta, *y = &b->meta;
    SNAP_SAME_RECORD_(SNAP_META_NUMBERS, SNAP_META_STRINGS)
}

static inline void snap_same_events(const vt__snapshot_data *a, const vt__snapshot_data *b,
                                    enum snap_strings how)
{
    SNAP_SAME_ARRAY_(vt__event, events, nevents, SNAP_EVENT_NUMBERS, SNAP_EVENT_STRINGS);
}

static inline void snap_same_frames(const vt__snapshot_data *a, const vt__snapshot_data *b,
                                    enum snap_strings how)
{
    SNAP_SAME_ARRAY_(vt__frame, frames, nframes, SNAP_FRAME_NUMBERS, SNAP_FRAME_STRINGS);
}

static inline void snap_same_stack_nodes(const vt__snapshot_data *a, const vt__snapshot_data *b)
{
    SNAP_SAME_ARRAY_(vt__stack_node, stack_nodes, nstack_nodes, SNAP_NODE_NUMBERS,
                     SNAP_NO_STRINGS);
}

static inline void snap_same_segments(const vt__snapshot_data *a, const vt__snapshot_data *b)
{
    SNAP_SAME_ARRAY_(vt__snap_segment, segments, nsegments, SNAP_SEGMENT_NUMBERS, SNAP_NO_STRINGS);
}

static inline void snap_same_blocks(const vt__snapshot_data *a, const vt__snapshot_data *b)
{
    SNAP_SAME_ARRAY_(vt__snap_block, blocks, nblocks, SNAP_BLOCK_NUMBERS, SNAP_NO_STRINGS);
}

static inline void snap_same_devices(const vt__snapshot_data *a, const vt__snapshot_data *b,
                                     enum snap_strings how)
{
    SNAP_SAME_ARRAY_(vt__snap_device, devices, ndevices, SNAP_DEVICE_NUMBERS,
                     SNAP_DEVICE_STRINGS);
}

/* Every string, index by index, has the same text. */
static inline void snap_same_strings(const vt__snapshot_data *a, const vt__snapshot_data *b)
{
    ASSERT_EQ(a->nstrings, b->nstrings);
    for (size_t i = 0; i < a->nstrings; i++)
        ASSERT_STR_EQ(vt__snapshot_string(a, (uint32_t)i), vt__snapshot_string(b, (uint32_t)i));
}

#endif /* VT_TESTS_SNAP_COMPARE_H */
