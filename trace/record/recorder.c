/*
 * trace/record/recorder.c - the recorder's state: initialization, thread numbers and
 * the one function every event goes through (vt__trace_event, called as vt__trace).
 *
 * Initialization runs once, from the library constructor or from the first
 * event, whichever comes first. It never calls CUDA. With trace:0 it sets the
 * state to OFF and every entry point costs one predictable branch from then on.
 */
#include "rec_snap.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include "config.h"

_Atomic int vt__rec_state = VT_REC_UNINIT;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static _Atomic uint32_t next_thread = 1;
/* initial-exec: no __tls_get_addr call on the event path. 4 bytes of static
 * TLS, well inside what glibc reserves for dlopen'ed libraries (ctypes). */
static __thread uint32_t my_thread __attribute__((tls_model("initial-exec")));

static _Atomic(vt__state_provider) provider;

bool vt__time_tsc;
static uint64_t tsc0, mono0;    /* calibration start, taken at init */

/* A raw TSC reading next to CLOCK_MONOTONIC, the TSC read on both sides. */
static void tsc_pair(uint64_t *tsc, uint64_t *ns)
{
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < 5; i++) {
        uint64_t a = vt__now_raw(), n = vt__now_ns(), b = vt__now_raw();
        if (b - a < best) {
            best = b - a;
            *tsc = a + (b - a) / 2;
            *ns = n;
        }
    }
}

static void time_init(void)
{
#if defined(__x86_64__)
    unsigned a, b, c, d;
    bool invariant = __get_cpuid(0x80000007, &a, &b, &c, &d) && (d & (1u << 8));
    char cs[32] = "";
    int fd = open("/sys/devices/system/clocksource/clocksource0/current_clocksource",
                  O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        ssize_t n = read(fd, cs, sizeof cs - 1);
        cs[n > 0 ? n : 0] = '\0';
        close(fd);
    }
    vt__time_tsc = invariant && strncmp(cs, "tsc", 3) == 0;
    if (vt__time_tsc)
        tsc_pair(&tsc0, &mono0);
#endif
}

void vt__time_calibrate(vt__timecal *cal)
{
    if (!vt__time_tsc) {
        *cal = (vt__timecal){ 0, 0, 1.0 };
        return;
    }
    uint64_t tsc1, mono1;
    tsc_pair(&tsc1, &mono1);
    double ratio = tsc1 > tsc0 && mono1 > mono0
                 ? (double)(mono1 - mono0) / (double)(tsc1 - tsc0) : 0.0;
    if (ratio == 1.0)
        ratio = 1.0 + 1e-12;   /* 1.0 means "raw is ns" */
    *cal = (vt__timecal){ tsc0, mono0, ratio };
}

static void init_once_fn(void)
{
    const vt__conf *c = vt__config();
    time_init();
    if (!c->trace) {
        atomic_store_explicit(&vt__rec_state, VT_REC_OFF, memory_order_release);
        return;
    }
    int rc = vt__ring_init(c->max_events);
    if (rc == 0)
        rc = vt__stacks_init(c->stack_depth);
    if (rc != 0) {
        fprintf(stderr, "vramtrace: cannot set up the event ring (%s); tracing is off\n",
                strerror(-rc));
        atomic_store_explicit(&vt__rec_state, VT_REC_OFF, memory_order_release);
        return;
    }
    atomic_store_explicit(&vt__rec_state, VT_REC_ON, memory_order_release);
}

int vt__rec_init(void)
{
    pthread_once(&init_once, init_once_fn);
    return atomic_load_explicit(&vt__rec_state, memory_order_acquire);
}

/* Tracing starts before main, so that allocations of other constructors are
 * recorded too. Nothing here touches CUDA. */
__attribute__((constructor)) static void recorder_ctor(void)
{
    vt__rec_init();
}

bool vt__trace_enabled(void)
{
    return vt__rec_on();
}

uint32_t vt__rec_thread_id(void)
{
    uint32_t t = my_thread;
    if (vt__unlikely(t == 0))
        my_thread = t = atomic_fetch_add_explicit(&next_thread, 1, memory_order_relaxed);
    return t;
}

uint64_t vt__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

VT_REC_TEXT uint64_t vt__trace_event(const vt__event_rec *e)
{
    if (vt__unlikely(!vt__rec_on()))
        return 0;
    vt__ring_rec r = {
        .time_ns = vt__now_raw(), .stream = e->stream, .addr = e->addr,
        .req_size = e->req_size, .size = e->size, .aux = e->aux, .aux2 = e->aux2,
        .thread = vt__rec_thread_id(), .stack = e->stack, .str = e->str, .kind = e->kind,
        .device = (int8_t)(e->device < -128 ? -1 : e->device > 127 ? 127 : e->device),
    };
    return vt__ring_write(&r);
}

/* This process used a device: it set up an allocator of ours, began to
 * observe a framework's (vt_pool_observe: PyTorch's, at CUDA's start; a
 * process that only allocates through it, an actor sending CUDA tensors to
 * its learner, sets up none of ours), or hit an OOM. A forked child starts
 * without (auto_snapshot.c forgets it there). */
static _Atomic bool activity;

void vt__note_activity(void) { atomic_store_explicit(&activity, true, memory_order_relaxed); }
bool vt__activity_noted(void) { return atomic_load_explicit(&activity, memory_order_relaxed); }
void vt__activity_forget(void) { atomic_store_explicit(&activity, false, memory_order_relaxed); }

void vt__trace_set_state_provider(vt__state_provider fn)
{
    vt__note_activity();      /* this process set up an allocator */
    atomic_store_explicit(&provider, fn, memory_order_release);
}

vt__state_provider vt__trace_state_provider(void)
{
    return atomic_load_explicit(&provider, memory_order_acquire);
}
