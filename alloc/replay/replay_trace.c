/*
 * alloc/replay/replay_trace.c - trace/record/recorder.h for a replay.
 *
 * The allocator tells its recorder every block it hands out and takes back,
 * every segment and every OOM; during a replay that is exactly what the
 * replay measures, so this recorder keeps running totals (allocated,
 * reserved per device), the sequence of segment allocations (to compare
 * with the recording), the reserved curve when asked, and the last OOM. No stacks are
 * captured: the recorded allocation's stack is the call site.
 */
#include <errno.h>
#include <stdlib.h>

#include "recorder.h"
#include "replay_internal.h"

vt__replay_books vt__books;
static uint64_t seq;

static void segment_event(int device, bool is_free, uint64_t size)
{
    vt__replay_books *b = &vt__books;
    int64_t delta = is_free ? -(int64_t)size : (int64_t)size;
    b->reserved[device] += delta;
    if (vt__trail_reserved(&b->trail, device, delta, (uint64_t)b->reserved[device], b->now_event,
                           b->now_ns))
        b->failed = true;
}

uint64_t vt__trace_event(const vt__event_rec *e)
{
    uint8_t kind = e->kind;
    int device = e->device;
    uint64_t req_size = e->req_size, size = e->size, aux = e->aux, aux2 = e->aux2;
    vt__replay_books *b = &vt__books;
    if (device < 0 || device >= VT_REPLAY_MAX_DEVICES)
        return ++seq;
    switch (kind) {
    case VT_EV_ALLOC:
        b->allocated[device] += (int64_t)size;
        b->requested[device] += (int64_t)req_size;
        b->live_blocks[device]++;
        break;
    case VT_EV_FREE_REQUESTED:
        b->allocated[device] -= (int64_t)size;
        b->requested[device] -= (int64_t)req_size;
        b->live_blocks[device]--;
        break;
    case VT_EV_SEGMENT_ALLOC:
        segment_event(device, false, size);
        break;
    case VT_EV_SEGMENT_FREE:
        segment_event(device, true, size);
        break;
    case VT_EV_OOM:
        b->oom = true;
        b->oom_device_free = aux;
        b->oom_reserved = aux2;
        break;
    default:
        break;
    }
    return ++seq;
}

/* Stacks are not captured: a replayed allocation's stack is the recorded one. */
bool vt__trace_enabled(void) { return false; }
uint32_t vt__stack_capture(void) { return 0; }
uint32_t vt__stack_capture_free(void) { return 0; }
uint32_t vt__string_intern(const char *s) { return 0; }
void vt__trace_modules_changed(void) {}
void vt__trace_modules_loaded(void) {}
void vt__trace_out_of_memory(void) {}

/* A replay takes no snapshot of its allocator: the provider is never called. */
void vt__trace_set_state_provider(vt__state_provider fn) { (void)fn; }
int vt__snapshot_add_segment(vt__snapshot_data *s, const vt__snap_segment *g) { return -ENOSYS; }
int vt__snapshot_add_block(vt__snapshot_data *s, const vt__snap_block *b) { return -ENOSYS; }
int vt__snapshot_add_device(vt__snapshot_data *snap, int ordinal, const char *name,
                            uint64_t total_bytes)
{
    return -ENOSYS;
}
