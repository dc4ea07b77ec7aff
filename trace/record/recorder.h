/*
 * trace/record/recorder.h - what the allocator and the hooks call to record.
 *
 * Every function here is safe to call from any thread at any time, including
 * before initialization finished and after tracing was switched off (then it
 * costs one predictable branch). None of them ever calls into CUDA or takes a
 * lock shared with the allocator.
 */
#ifndef VT_TRACE_RECORDER_H
#define VT_TRACE_RECORDER_H

#include <stdbool.h>
#include <stdint.h>

#include "snapshot.h"

/* True when events are being recorded (VRAMTRACE_CONF trace:1, the default). */
bool vt__trace_enabled(void);

/* Capture the calling thread's native stack with libunwind (our own frames
 * skipped) and intern it. Call it OUTSIDE every allocator lock.
 * @return the stack id, 0 when tracing or stack capture is off. */
uint32_t vt__stack_capture(void);

/* The same for a free (0 when free stacks are off: free_stacks:0). */
uint32_t vt__stack_capture_free(void);

/* Intern a string for an event's `str` field. @return its index, 0 for NULL. */
uint32_t vt__string_intern(const char *s);

/* One event as its caller describes it (field meaning per kind:
 * vramtrace/format.h); a field left out is 0. */
typedef struct vt__event_rec {
    uint8_t kind;            /* VT_EV_* */
    int device;              /* -1: none */
    uint64_t stream;
    uint64_t addr;
    uint64_t req_size;
    uint64_t size;
    uint32_t stack;          /* stack id, 0: none */
    uint64_t aux, aux2;
    uint32_t str;            /* string index, 0: none */
} vt__event_rec;

/* Record one event. Wait-free.
 * @return the event's sequence number, 0 when tracing is off. */
uint64_t vt__trace_event(const vt__event_rec *e);

/* vt__trace(.kind = VT_EV_ALLOC, .device = d, .addr = p, .size = n): the
 * event filled with designated initializers, the rest 0. */
#define vt__trace(...) vt__trace_event(&(vt__event_rec){ __VA_ARGS__ })

/* The allocator describes its live state (segments, blocks) into a snapshot
 * being built: it registers one provider at initialization, which the
 * snapshot code calls with no recorder lock held. The provider appends with
 * vt__snapshot_add_segment / vt__snapshot_add_block (blocks of a segment
 * right after it, in address order) and returns 0 or a negative errno.
 * Called with snap NULL before anything of a snapshot is built, it says
 * whether it can describe the state on this thread now: 0, or -EDEADLK when
 * the thread is inside the allocator (a signal handler interrupted it there)
 * and the snapshot must not be taken. */
typedef int (*vt__state_provider)(vt__snapshot_data *snap);
void vt__trace_set_state_provider(vt__state_provider fn);
int vt__snapshot_add_segment(vt__snapshot_data *snap, const vt__snap_segment *seg);
int vt__snapshot_add_block(vt__snapshot_data *snap, const vt__snap_block *block);
int vt__snapshot_add_device(vt__snapshot_data *snap, int ordinal, const char *name,
                            uint64_t total_bytes);

/* A library was unloaded (dlclose): cached unwind information and remembered
 * stack walks may describe code that is gone; forget them. */
void vt__trace_modules_changed(void);

/* A library is about to be loaded (dlopen) or looked up in (dlsym): a
 * process that had no Python when recording started may have one now, and
 * the next capture looks again (once per call, never once Python is found). */
void vt__trace_modules_loaded(void);

/* The allocator ran out of memory: records nothing by itself (the allocator
 * records the OOM event) but writes a snapshot when dump_on_oom:1. */
void vt__trace_out_of_memory(void);

/* True when `ret` (a hook's return address) lies in the code of an observed
 * framework allocator (vt_pool_observe): the call is one of its segments,
 * which goes to the device untouched and unrecorded. One branch when none is
 * observed. */
bool vt__pool_caller(const void *ret);

/* VT_META_POOL_* flags for a snapshot of this process. */
uint32_t vt__pool_meta_flags(void);
/* The devices an observed allocator ran out of memory on, with the total
 * memory it reported, added to `s` where the allocator's state lists none. */
void vt__pool_add_devices(vt__snapshot_data *s);
/* The observed allocator's settings (vt_pool_settings), "" when none. */
void vt__pool_settings(char *buf, size_t len);

/* The observed allocator's book of what it holds (pool_state.c), kept by
 * vt_pool_event: its blocks (ALLOC, FREE_REQUESTED, FREE_COMPLETED) and
 * segments (SEGMENT_ALLOC, SEGMENT_FREE). */
void vt__pool_state_alloc(int device, uint64_t addr, uint64_t size, uint64_t req_size,
                          uint64_t stream, uint64_t seq, uint32_t stack);
/* The block at addr freed by the program (pending until FREE_COMPLETED):
 * @return its allocation stack, 0 if the book does not have it. */
uint32_t vt__pool_state_free_requested(uint64_t addr);
void vt__pool_state_free_completed(uint64_t addr);
/* `private_pool`: the private pool it serves (a CUDA graph's), 0: the default. */
void vt__pool_state_segment_alloc(int device, uint64_t addr, uint64_t size, uint64_t stream,
                                  uint64_t seq, uint32_t stack, int pool, uint64_t private_pool);
void vt__pool_state_segment_free(uint64_t addr, uint64_t size);
/* vt_pool_block_at's answer: 1, 0, or -1 when the book cannot tell. */
int vt__pool_state_block_at(uint64_t addr);
/* vt_pool_block_stack's answer: the live block's allocation stack, 0: none. */
uint32_t vt__pool_state_block_stack(uint64_t addr, uint64_t *seq);
/* Add its segments (pools VT_POOL_FRAMEWORK_*), tiled by their live blocks
 * and free space, to `s`'s state. @return 0, or -ENOMEM (then none added). */
int vt__pool_state_add(vt__snapshot_data *s);

#endif /* VT_TRACE_RECORDER_H */
