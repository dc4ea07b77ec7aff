/* tests/alloc/trace_fake.c - see trace_fake.h. */
#include "trace_fake.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "recorder.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static vt__event *events;
static size_t nevents, capevents;
static atomic_bool enabled = true;
static atomic_size_t stacks, ooms;
static uint64_t seq;
static _Atomic(vt__state_provider) provider;

void fake_trace_enable(bool on) { atomic_store(&enabled, on); }
size_t fake_stack_captures(void) { return atomic_load(&stacks); }
size_t fake_oom_calls(void) { return atomic_load(&ooms); }

void fake_trace_reset(void)
{
    pthread_mutex_lock(&mu);
    nevents = 0;
    pthread_mutex_unlock(&mu);
}

size_t fake_trace_count(int kind)
{
    size_t n = 0;
    pthread_mutex_lock(&mu);
    for (size_t i = 0; i < nevents; i++)
        n += events[i].kind == kind;
    pthread_mutex_unlock(&mu);
    return n;
}

bool fake_trace_last(int kind, vt__event *out)
{
    bool found = false;
    pthread_mutex_lock(&mu);
    for (size_t i = nevents; i-- > 0;)
        if (events[i].kind == kind) {
            *out = events[i];
            found = true;
            break;
        }
    pthread_mutex_unlock(&mu);
    return found;
}

bool vt__trace_enabled(void) { return atomic_load(&enabled); }

uint32_t vt__stack_capture(void)
{
    if (!atomic_load(&enabled))
        return 0;
    atomic_fetch_add(&stacks, 1);
    return 42;
}

uint32_t vt__stack_capture_free(void) { return vt__stack_capture() ? 43 : 0; }
uint32_t vt__string_intern(const char *s) { return s ? 1 : 0; }

uint64_t vt__trace_event(const vt__event_rec *e)
{
    uint8_t kind = e->kind;
    int device = e->device;
    uint64_t stream = e->stream, addr = e->addr, req_size = e->req_size, size = e->size;
    uint64_t aux = e->aux, aux2 = e->aux2;
    uint32_t stack = e->stack, str = e->str;
    if (!atomic_load(&enabled))
        return 0;
    pthread_mutex_lock(&mu);
    if (nevents == capevents) {
        size_t ncap = capevents ? capevents * 2 : 4096;
        vt__event *n = realloc(events, ncap * sizeof *n);
        if (!n) {
            pthread_mutex_unlock(&mu);
            return 0;
        }
        events = n;
        capevents = ncap;
    }
    uint64_t s = ++seq;
    events[nevents++] = (vt__event){ .seq = s, .stream = stream, .addr = addr,
                                    .req_size = req_size, .size = size, .aux = aux,
                                    .aux2 = aux2, .stack = stack, .str = str,
                                    .kind = kind, .device = (int8_t)device };
    pthread_mutex_unlock(&mu);
    return s;
}

void vt__trace_set_state_provider(vt__state_provider fn) { atomic_store(&provider, fn); }

int vt__snapshot_add_segment(vt__snapshot_data *snap, const vt__snap_segment *seg)
{
    vt__snap_segment *n = realloc(snap->segments, (snap->nsegments + 1) * sizeof *n);
    if (!n)
        return -1;
    snap->segments = n;
    n[snap->nsegments] = *seg;
    n[snap->nsegments].first_block = (uint32_t)snap->nblocks;
    n[snap->nsegments].nblocks = 0;
    snap->nsegments++;
    return 0;
}

int vt__snapshot_add_block(vt__snapshot_data *snap, const vt__snap_block *block)
{
    vt__snap_block *n = realloc(snap->blocks, (snap->nblocks + 1) * sizeof *n);
    if (!n || !snap->nsegments)
        return -1;
    snap->blocks = n;
    n[snap->nblocks++] = *block;
    snap->segments[snap->nsegments - 1].nblocks++;
    return 0;
}

int vt__snapshot_add_device(vt__snapshot_data *snap, int ordinal, const char *name,
                            uint64_t total_bytes)
{
    vt__snap_device *n = realloc(snap->devices, (snap->ndevices + 1) * sizeof *n);
    if (!n)
        return -1;
    snap->devices = n;
    n[snap->ndevices++] = (vt__snap_device){ .ordinal = ordinal, .name = name ? 1 : 0,
                                            .total_bytes = total_bytes };
    return 0;
}

void vt__trace_out_of_memory(void) { atomic_fetch_add(&ooms, 1); }

vt__snapshot_data *fake_snapshot(void)
{
    vt__state_provider p = atomic_load(&provider);
    if (!p)
        return NULL;
    vt__snapshot_data *s = calloc(1, sizeof *s);
    if (s && p(s) != 0) {
        fake_snapshot_free(s);
        return NULL;
    }
    return s;
}

void fake_snapshot_free(vt__snapshot_data *s)
{
    if (!s)
        return;
    free(s->segments);
    free(s->blocks);
    free(s->devices);
    free(s);
}
