/*
 * alloc/replay/replay_alloc.c - vramtrace's rules: the recorded events
 * replayed through this process's own allocator (alloc/) on the host-only
 * device (alloc/backend_host.c), whose logical clock is the index of the
 * event being replayed, so that a fence recorded for a pending free
 * completes exactly when the recording says its free did. The allocator
 * reports what it does to replay_trace.c, as it would to the recorder.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allocator.h"
#include "backend_host.h"
#include "config.h"
#include "errbuf.h"
#include "replay_internal.h"
#include "vramtrace.h"

static bool used_once;

static int setup_config(const vt__snapshot_data *s, const vt__replay_options *opt,
                        vt__replay_result *r, char *err, size_t errlen)
{
    vt__conf cfg;
    vt__config_defaults(&cfg);
    char recorded[512] = "";
    bool expandable = false;
    if (!opt->ignore_recorded_conf)
        vt__replay_conf_from_meta(vt__snapshot_string(s, s->meta.config), recorded,
                                  sizeof recorded, &expandable);
    if (vt__config_parse(recorded, &cfg, NULL))
        return vt__errf(err, errlen, -EINVAL, "the recorded settings '%s' are not valid", recorded);
    if (expandable)   /* a PyTorch snapshot's expandable_segments=True */
        cfg.expandable_segments = true;
    /* ipc_safe:auto that switched on in the recorded run: on from the start
     * here (the replaying process has nothing to detect) */
    if (!opt->ignore_recorded_conf && (s->meta.flags & VT_META_IPC_SAFE) &&
        cfg.ipc_safe == VT_IPC_SAFE_AUTO)
        cfg.ipc_safe = VT_IPC_SAFE_ON;
    if (opt->conf && *opt->conf) {
        char msg[512];
        if (vt__config_check(opt->conf, &cfg, msg, sizeof msg))   /* a replay stops */
            return vt__errf(err, errlen, -EINVAL, "bad --conf '%s': %s", opt->conf, msg);
    }
    cfg.trace = true;
    cfg.dump_on_oom = false;
    vt__config_install(&cfg);
    char full[1024];
    vt__config_format(&cfg, full, sizeof full);
    /* keep the allocator's keys: the part before free_sync */
    char *cut = strstr(full, ",free_sync:");
    if (cut)
        *cut = '\0';
    snprintf(r->conf, sizeof r->conf, "%.511s", full);
    r->expandable_segments = cfg.expandable_segments;
    return 0;
}

/* ---- the engine ---------------------------------------------------------- */

typedef struct engine {
    vt__replay_result *r;
    size_t nevents;
    uint64_t peak[VT_REPLAY_MAX_DEVICES];
} engine;

static void now(void *self, size_t i, const vt__event *e)
{
    (void)self;
    vt__host_set_now(i);
    vt__books.now_event = i;
    vt__books.now_ns = e->time_ns;
}

static int do_malloc(void *self, const vt__event *e, uint64_t size, uint64_t *block,
                     uint64_t *stream)
{
    (void)self;
    uint64_t st = e->kind == VT_EV_ALLOC && (e->aux & VT_ALLOC_NO_STREAM) ? VT_NO_STREAM
                                                                          : e->stream;
    void *p = NULL;
    int a = vt__alloc_malloc(e->device, (size_t)size, st, &p);
    if (a == 2)   /* cudaErrorMemoryAllocation */
        return VT__REPLAY_OUT_OF_MEMORY;
    if (a || !p)
        return VT__REPLAY_REFUSED;
    *block = (uint64_t)(uintptr_t)p;
    *stream = st;
    return VT__REPLAY_SERVED;
}

static int do_free(void *self, int device, uint64_t block, uint64_t stream, size_t free_event,
                   uint64_t when)
{
    engine *g = self;
    (void)device;
    if (free_event != VT__REPLAY_AT_ONCE) {
        /* pending until the recorded FREE_COMPLETED: freed in the order of
         * a stream whose work is done exactly then, which the allocator
         * fences like any other stream (and waits for, when it must,
         * before it runs out of memory) */
        stream = vt__host_logical_stream(when == UINT64_MAX ? g->nevents : when);
    }
    vt__alloc_free((void *)(uintptr_t)block, stream, VT_FREE_ON_STREAM);
    return 0;
}

static int other(void *self, size_t i, const vt__event *e)
{
    (void)self;
    (void)i;
    switch (e->kind) {
    case VT_EV_STREAM_DESTROY:
        /* its segments go back (or wait for their last block) as the
         * recorded cache's did */
        vt__alloc_stream_destroyed(e->stream);
        return 1;
    case VT_EV_EMPTY_CACHE:
        vt__alloc_empty_cache(e->device);
        return 1;
    default:
        /* a STREAM_USE needs nothing: the recorded completion of the
         * block's free says when that stream's work was done */
        return 0;
    }
}

/* The reserved peak as the allocator's books say after each event. */
static void after(void *self, size_t i, const vt__event *e)
{
    engine *g = self;
    int d = e->device;
    int64_t res = vt__books.reserved[d];
    if (res > 0 && (uint64_t)res > g->peak[d]) {
        g->peak[d] = (uint64_t)res;
        g->r->devices[d].allocated_at_peak = (uint64_t)vt__books.allocated[d];
        g->r->devices[d].peak_event = i;
        g->r->devices[d].peak_time_ns = e->time_ns;
    }
}

static void oom(void *self, int d, vt__replay_oom *o)
{
    (void)self;
    o->allocated = (uint64_t)vt__books.allocated[d];
    o->requested = (uint64_t)vt__books.requested[d];
    o->live_blocks = (uint64_t)vt__books.live_blocks[d];
    o->reserved = vt__books.oom ? vt__books.oom_reserved : (uint64_t)vt__books.reserved[d];
    o->device_free = vt__books.oom_device_free;
}

/* The allocator's and the device's own counters into the result. */
static void finish(vt__replay_result *r)
{
    for (size_t d = 0; d < r->ndevices; d++) {
        vt__replay_device *o = &r->devices[d];
        vt_stats st;
        if (vt_get_stats((int)d, &st) == 0) {
            o->peak_allocated = (uint64_t)st.allocated_bytes[VT_STAT_ALL].peak;
            o->peak_reserved = (uint64_t)st.reserved_bytes[VT_STAT_ALL].peak;
            o->peak_held = o->peak_reserved;
            o->segment_allocs = st.num_backend_allocs;
            o->segment_frees = st.num_backend_frees;
            o->alloc_retries = st.num_alloc_retries;
            o->sync_all = st.num_sync_all;
            o->fence_events = st.num_fence_events;
        }
        vt__host_calls c;
        vt__host_get_calls((int)d, &c);
        o->device_mallocs = c.mallocs;
        o->device_failed_mallocs = c.failed_mallocs;
        o->device_frees = c.frees;
        o->device_maps = c.maps;
        o->device_unmaps = c.unmaps;
        o->event_creates = c.event_creates;
        o->event_records = c.event_records;
        o->event_queries = c.event_queries;
        o->event_syncs = c.event_syncs;
    }
}

int vt__replay_alloc(const vt__snapshot_data *s, vt__event_stream *es,
                     const vt__replay_options *opt, const vt__seeds *seeds,
                     vt__replay_result *r, char *err, size_t errlen)
{
    if (used_once)
        return vt__errf(err, errlen, -EBUSY, "this process has replayed once already");
    uint64_t cap[VT_REPLAY_MAX_DEVICES];
    for (size_t d = 0; d < r->ndevices; d++)
        cap[d] = r->devices[d].capacity;
    if (vt__host_setup((int)r->ndevices, cap))
        return vt__errf(err, errlen, -ENOMEM, "no memory for the replay device");
    int rc = setup_config(s, opt, r, err, errlen);
    if (rc) {
        vt__host_teardown();
        return rc;
    }
    used_once = true;

    engine g = { .r = r, .nevents = vt__event_stream_count(es) };
    uint64_t *rsegs = NULL;
    vt__completions done = { 0 };
    size_t nrsegs = 0;
    vt__recorded_scope all = { .seeds = seeds };
    memset(&vt__books, 0, sizeof vt__books);
    vt__books.trail.want_curve = opt->curve;
    rc = vt__replay_recorded(es, &all, r, &rsegs, &nrsegs, &done);
    const vt__replay_engine en = { .self = &g, .now = now, .malloc = do_malloc, .free = do_free,
                                   .other = other, .after = after, .oom = oom,
                                   .trail = &vt__books.trail };
    if (rc == 0 && (rc = vt__replay_walk(es, opt, &done, seeds, r, &en)) == 0
        && vt__books.failed)
        rc = -ENOMEM;
    if (rc == 0) {
        finish(r);
        vt__trail_finish(&vt__books.trail, rsegs, nrsegs, r);
    }
    vt__trail_free(&vt__books.trail);
    vt__completions_free(&done);
    free(rsegs);
    if (rc == -ENOMEM)
        return vt__errf(err, errlen, rc, "out of host memory");
    return rc < 0 ? vt__errf(err, errlen, rc, "the snapshot's events cannot be read") : 0;
}
