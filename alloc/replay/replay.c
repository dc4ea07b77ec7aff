/*
 * alloc/replay/replay.c - the replay engine: see replay.h.
 *
 * Two passes over the events. The first finds, for every FREE_REQUESTED,
 * the index of its FREE_COMPLETED and whether the free completed at once
 * (no allocator event of its device in between, or not marked pending). The
 * second drives the allocator, setting the host device's logical clock to
 * the index of the event being replayed, so that a fence recorded for a
 * pending free completes exactly when the recording says its free did.
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

#define NO_COMPLETION UINT64_MAX

static bool used_once;

static bool allocator_event(uint8_t kind)
{
    return kind == VT_EV_ALLOC || kind == VT_EV_FREE_REQUESTED || kind == VT_EV_FREE_COMPLETED
           || kind == VT_EV_SEGMENT_ALLOC || kind == VT_EV_SEGMENT_FREE || kind == VT_EV_STREAM_USE
           || kind == VT_EV_STREAM_DESTROY || kind == VT_EV_EMPTY_CACHE;
}

/* First pass: completion[i] for every FREE_REQUESTED i: the index of its
 * FREE_COMPLETED (NO_COMPLETION when the window ends first); immediate[i]
 * when it completed at once. */
int vt__replay_find_completions(const vt_snapshot_data *s, uint64_t *completion,
                                uint8_t *immediate)
{
    vt__rmap open;
    if (vt__rmap_init(&open, 1024))
        return -ENOMEM;
    uint64_t count[VT_REPLAY_MAX_DEVICES] = { 0 };  /* allocator events so far */
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES || !allocator_event(e->kind))
            continue;
        count[e->device]++;
        if (e->kind == VT_EV_FREE_REQUESTED) {
            completion[i] = NO_COMPLETION;
            immediate[i] = e->aux == 0;
            vt__rmap_entry *x = vt__rmap_put(&open, e->addr);
            if (!x) {
                vt__rmap_destroy(&open);
                return -ENOMEM;
            }
            x->value = i;
            x->stream = count[e->device];   /* allocator events up to the request */
            x->device = e->device;
        } else if (e->kind == VT_EV_FREE_COMPLETED) {
            vt__rmap_entry *x = vt__rmap_get(&open, e->addr);
            if (x && x->device == e->device) {
                completion[x->value] = i;
                if (count[e->device] == x->stream + 1)
                    immediate[x->value] = 1;
                vt__rmap_del(&open, x);
            }
        }
    }
    vt__rmap_destroy(&open);
    return 0;
}

static int setup_config(const vt_snapshot_data *s, const vt_replay_options *opt,
                        vt_replay_result *r, char *err, size_t errlen)
{
    vt_config cfg;
    vt__config_defaults(&cfg);
    char recorded[512] = "";
    bool expandable = false;
    if (!opt->ignore_recorded_conf)
        vt__replay_conf_from_meta(vt_snapshot_string(s, s->meta.config), recorded,
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
        char msg[512] = "";
        FILE *f = fmemopen(msg, sizeof msg - 1, "w");
        int problems = vt__config_parse(opt->conf, &cfg, f);
        if (f)
            fclose(f);
        if (problems) {
            char *cut = strchr(msg, '\n');
            if (cut)
                *cut = '\0';
            /* the parser speaks of VRAMTRACE_CONF keeping its default; a
             * replay stops instead */
            if ((cut = strstr(msg, "; keeping the default")) || (cut = strstr(msg, "; ignored")))
                *cut = '\0';
            return vt__errf(err, errlen, -EINVAL, "bad --conf '%s': %s", opt->conf,
                        *msg ? msg + (strncmp(msg, "vramtrace: ", 11) ? 0 : 11) : "not valid");
        }
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

static int setup_devices(const vt_snapshot_data *s, const vt_replay_options *opt,
                         vt_replay_result *r, bool host, char *err, size_t errlen)
{
    int n = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->kind != VT_EV_ALLOC || e->device < 0)
            continue;
        if (e->device >= VT_REPLAY_MAX_DEVICES)
            return vt__errf(err, errlen, -EINVAL, "device %d: a replay handles devices 0 to %d",
                        e->device, VT_REPLAY_MAX_DEVICES - 1);
        if (e->device + 1 > n)
            n = e->device + 1;
    }
    if (n == 0)
        return vt__errf(err, errlen, -EINVAL, "the snapshot holds no allocation to replay");
    uint64_t cap[VT_REPLAY_MAX_DEVICES];
    for (int d = 0; d < n; d++) {
        cap[d] = opt->capacity;
        if (!cap[d]) {
            cap[d] = VT_REPLAY_UNLIMITED;
            for (size_t k = 0; k < s->ndevices; k++)
                if (s->devices[k].ordinal == d && s->devices[k].total_bytes)
                    cap[d] = s->devices[k].total_bytes;
        }
        r->devices[d].ordinal = d;
        r->devices[d].capacity = cap[d];
    }
    r->ndevices = (size_t)n;
    if (host && vt__host_setup(n, cap))
        return vt__errf(err, errlen, -ENOMEM, "no memory for the replay device");
    return 0;
}

/* The recording's own peaks and segment sequence, from its events. */
static int recorded_books(const vt_snapshot_data *s, vt_replay_result *r, uint64_t **segs,
                          size_t *nsegs)
{
    int64_t reserved[VT_REPLAY_MAX_DEVICES] = { 0 }, allocated[VT_REPLAY_MAX_DEVICES] = { 0 };
    size_t n = 0;
    for (size_t i = 0; i < s->nevents; i++)
        n += s->events[i].kind == VT_EV_SEGMENT_ALLOC || s->events[i].kind == VT_EV_SEGMENT_FREE;
    *segs = malloc((n ? n : 1) * sizeof **segs);
    if (!*segs)
        return -ENOMEM;
    *nsegs = 0;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt_event *e = &s->events[i];
        if (e->device < 0 || e->device >= VT_REPLAY_MAX_DEVICES)
            continue;
        vt_replay_device *d = &r->devices[e->device];
        switch (e->kind) {
        case VT_EV_SEGMENT_ALLOC:
        case VT_EV_SEGMENT_FREE: {
            bool is_free = e->kind == VT_EV_SEGMENT_FREE;
            reserved[e->device] += is_free ? -(int64_t)e->size : (int64_t)e->size;
            if (reserved[e->device] > (int64_t)d->recorded_peak_reserved)
                d->recorded_peak_reserved = (uint64_t)reserved[e->device];
            d->recorded_segment_allocs += !is_free;
            d->recorded_segment_frees += is_free;
            if (!is_free)
                (*segs)[(*nsegs)++] = vt__seg_code(false, e->device, e->size);
            break;
        }
        case VT_EV_ALLOC:
            allocated[e->device] += (int64_t)e->size;
            if (allocated[e->device] > (int64_t)d->recorded_peak_allocated)
                d->recorded_peak_allocated = (uint64_t)allocated[e->device];
            break;
        case VT_EV_FREE_REQUESTED:
            allocated[e->device] -= (int64_t)e->size;
            break;
        case VT_EV_OOM:
            r->recorded_ooms++;
            break;
        default:
            break;
        }
    }
    return 0;
}

static void note_oom(const vt_snapshot_data *s, size_t i, vt_replay_result *r)
{
    const vt_event *e = &s->events[i];
    vt_replay_oom *o = &r->oom;
    o->happened = true;
    o->event_index = i;
    o->seq = e->seq;
    o->time_ns = e->time_ns;
    o->device = e->device;
    o->stream = e->stream;
    o->req_size = e->req_size;
    o->stack = e->stack;
    o->allocated = (uint64_t)vt__books.allocated[e->device];
    o->requested = (uint64_t)vt__books.requested[e->device];
    o->live_blocks = (uint64_t)vt__books.live_blocks[e->device];
    o->reserved = vt__books.oom ? vt__books.oom_reserved : (uint64_t)vt__books.reserved[e->device];
    o->device_free = vt__books.oom_device_free;
}

/* Free what is due before event `i`: each allocation still live as it was
 * allocated at its ALLOC, on its own stream. */
static int early_due(vt__early *ef, const vt_snapshot_data *s, vt__rmap *live, size_t i,
                     vt_replay_result *r)
{
    uint64_t addr;
    while (vt__early_due(ef, s, i, &addr)) {
        vt__rmap_entry *x = vt__rmap_get(live, addr);
        if (!x || !x->early)
            continue;   /* freed by the recording already */
        vt__alloc_free((void *)(uintptr_t)x->value, x->stream, VT_FREE_ON_STREAM);
        vt__rmap_del(live, x);
        if (vt__early_freed(ef, addr))
            return -ENOMEM;
        r->early_frees++;
        r->replayed++;
    }
    return 0;
}

static int drive(const vt_snapshot_data *s, const vt_replay_options *opt, vt_replay_result *r,
                 const uint64_t *completion, const uint8_t *immediate)
{
    vt__rmap live;
    vt__early ef;
    if (vt__rmap_init(&live, 4096))
        return -ENOMEM;
    if (vt__early_init(&ef, s, opt)) {
        vt__early_destroy(&ef);
        vt__rmap_destroy(&live);
        return -ENOMEM;
    }
    uint64_t peak[VT_REPLAY_MAX_DEVICES] = { 0 };
    int rc = 0;
    for (size_t i = 0; i < s->nevents && rc == 0; i++) {
        const vt_event *e = &s->events[i];
        if (ef.n && (rc = early_due(&ef, s, &live, i, r)))
            break;
        if (e->device < 0 || e->device >= (int)r->ndevices)
            continue;
        int d = e->device;
        vt__host_set_now(i);
        vt__books.now_event = i;
        vt__books.now_ns = e->time_ns;
        switch (e->kind) {
        case VT_EV_ALLOC: {
            vt__rmap_entry *x = vt__rmap_get(&live, e->addr);
            if (x)   /* allocated again without a free in the window: forget it */
                vt__rmap_del(&live, x);
            void *p = NULL;
            uint64_t req = e->req_size ? e->req_size : e->size;
            uint64_t stream = e->aux & VT_ALLOC_NO_STREAM ? VT_NO_STREAM : e->stream;
            int a = vt__alloc_malloc(d, (size_t)req, stream, &p);
            r->replayed++;
            if (a == 2) {
                note_oom(s, i, r);
                goto done;
            }
            if (a || !p)
                break;
            x = vt__rmap_put(&live, e->addr);
            if (!x) {
                rc = -ENOMEM;
                break;
            }
            x->value = (uint64_t)(uintptr_t)p;
            x->stream = stream;
            x->device = (int8_t)d;
            x->early = ef.marked && ef.marked[i];
            break;
        }
        case VT_EV_FREE_REQUESTED: {
            vt__rmap_entry *x = vt__rmap_get(&live, e->addr);
            if (!x || x->device != d) {
                if (!vt__early_recorded_free(&ef, e->addr))   /* not one freed early */
                    r->skipped_frees++;
                break;
            }
            void *p = (void *)(uintptr_t)x->value;
            if (immediate[i]) {
                vt__alloc_free(p, x->stream, VT_FREE_ON_STREAM);
            } else {
                /* pending until the recorded FREE_COMPLETED: freed in the
                 * order of a stream whose work is done exactly then, which
                 * the allocator fences like any other stream (and waits
                 * for, when it must, before it runs out of memory) */
                uint64_t when = completion[i] == NO_COMPLETION ? s->nevents : completion[i];
                vt__alloc_free(p, vt__host_logical_stream(when), VT_FREE_ON_STREAM);
            }
            r->replayed++;
            vt__rmap_del(&live, x);
            break;
        }
        case VT_EV_OOM: {
            /* the recorded program asked here and was refused: ask again */
            if (!e->req_size)
                break;
            void *p = NULL;
            int a = vt__alloc_malloc(d, (size_t)e->req_size, e->stream, &p);
            r->replayed++;
            if (a == 2) {
                note_oom(s, i, r);
                goto done;
            }
            /* served now: the recording does not say what the program
             * would have done with it; it goes back at once */
            if (!a && p) {
                vt__alloc_free(p, e->stream, VT_FREE_ON_STREAM);
                r->recorded_ooms_served++;
            }
            break;
        }
        case VT_EV_STREAM_DESTROY:
            /* its segments go back (or wait for their last block) as the
             * recorded cache's did */
            vt__alloc_stream_destroyed(e->stream);
            r->replayed++;
            break;
        case VT_EV_EMPTY_CACHE:
            vt__alloc_empty_cache(d);
            r->replayed++;
            break;
        case VT_EV_STREAM_USE:
            /* the block's free waits for that stream's work: the recorded
             * completion of its free says when it was done */
            continue;
        default:
            continue;
        }
        int64_t res = vt__books.reserved[d];
        if (res > 0 && (uint64_t)res > peak[d]) {
            peak[d] = (uint64_t)res;
            r->devices[d].allocated_at_peak = (uint64_t)vt__books.allocated[d];
            r->devices[d].peak_event = i;
        }
    }
done:
    vt__early_destroy(&ef);
    vt__rmap_destroy(&live);
    return rc;
}

static void finish(vt_replay_result *r)
{
    for (size_t d = 0; d < r->ndevices; d++) {
        vt_replay_device *o = &r->devices[d];
        vt_stats st;
        if (vt_get_stats((int)d, &st) == 0) {
            o->peak_allocated = (uint64_t)st.allocated_bytes[VT_STAT_ALL].peak;
            o->peak_reserved = (uint64_t)st.reserved_bytes[VT_STAT_ALL].peak;
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

vt_replay_rules vt_replay_auto_rules(const vt_snapshot_data *s)
{
    return s && vt__replay_is_torch(s) ? VT_REPLAY_RULES_PYTORCH : VT_REPLAY_RULES_VRAMTRACE;
}

const char *vt_replay_rules_name(vt_replay_rules rules)
{
    switch (rules) {
    case VT_REPLAY_RULES_VRAMTRACE: return "vramtrace";
    case VT_REPLAY_RULES_PYTORCH: return "pytorch";
    default: return "auto";
    }
}

/* PyTorch's rules: a model, no allocator of this process involved. */
static int replay_torch(const vt_snapshot_data *s, const vt_replay_options *opt,
                        vt_replay_result *out, char *err, size_t errlen)
{
    int rc = setup_devices(s, opt, out, false, err, errlen);
    if (rc)
        return rc;
    out->rules = VT_REPLAY_RULES_PYTORCH;
    out->events = s->nevents;
    out->events_lost = s->meta.events_overwritten;
    uint64_t *completion = malloc((s->nevents ? s->nevents : 1) * sizeof *completion);
    uint8_t *immediate = calloc(s->nevents ? s->nevents : 1, 1);
    if (!completion || !immediate || vt__replay_find_completions(s, completion, immediate)) {
        free(completion);
        free(immediate);
        return vt__errf(err, errlen, -ENOMEM, "out of host memory");
    }
    rc = vt__replay_torch(s, opt, out, completion, immediate, err, errlen);
    free(completion);
    free(immediate);
    return rc;
}

int vt_replay_run(const vt_snapshot_data *s, const vt_replay_options *opt,
                  vt_replay_result *out, char *err, size_t errlen)
{
    static const vt_replay_options defaults = { 0 };
    if (!opt)
        opt = &defaults;
    if (err && errlen)
        err[0] = '\0';
    memset(out, 0, sizeof *out);
    if (!s)
        return vt__errf(err, errlen, -EINVAL, "no snapshot");
    vt_replay_rules rules = opt->rules == VT_REPLAY_RULES_AUTO ? vt_replay_auto_rules(s)
                                                              : opt->rules;
    if (rules != VT_REPLAY_RULES_VRAMTRACE && rules != VT_REPLAY_RULES_PYTORCH)
        return vt__errf(err, errlen, -EINVAL, "unknown replay rules %d", (int)opt->rules);
    if (rules == VT_REPLAY_RULES_PYTORCH)
        return replay_torch(s, opt, out, err, errlen);
    if (used_once)
        return vt__errf(err, errlen, -EBUSY, "this process has replayed once already");
    int rc = setup_devices(s, opt, out, true, err, errlen);
    if (rc)
        return rc;
    out->rules = VT_REPLAY_RULES_VRAMTRACE;
    if ((rc = setup_config(s, opt, out, err, errlen))) {
        vt__host_teardown();
        return rc;
    }
    used_once = true;
    out->events = s->nevents;
    out->events_lost = s->meta.events_overwritten;

    uint64_t *completion = malloc((s->nevents ? s->nevents : 1) * sizeof *completion);
    uint8_t *immediate = calloc(s->nevents ? s->nevents : 1, 1);
    uint64_t *rsegs = NULL;
    size_t nrsegs = 0;
    memset(&vt__books, 0, sizeof vt__books);
    vt__books.want_curve = opt->curve;
    if (!completion || !immediate || recorded_books(s, out, &rsegs, &nrsegs)
        || vt__replay_find_completions(s, completion, immediate)
        || (rc = drive(s, opt, out, completion, immediate)) || vt__books.failed) {
        free(completion);
        free(immediate);
        free(rsegs);
        free(vt__books.segs);
        free(vt__books.curve);
        return vt__errf(err, errlen, -ENOMEM, "out of host memory");
    }
    finish(out);
    /* the segment allocations, in order */
    size_t n = nrsegs < vt__books.nsegs ? nrsegs : vt__books.nsegs;
    size_t k = 0;
    while (k < n && rsegs[k] == vt__books.segs[k])
        k++;
    out->segments_identical = k == n && nrsegs == vt__books.nsegs;
    out->segments_compared = n;
    out->first_segment_difference = k;
    out->curve = vt__books.curve;
    out->ncurve = vt__books.ncurve;
    vt__books.curve = NULL;
    free(vt__books.segs);
    vt__books.segs = NULL;
    free(completion);
    free(immediate);
    free(rsegs);
    return 0;
}

void vt_replay_result_free(vt_replay_result *r)
{
    if (!r)
        return;
    free(r->curve);
    r->curve = NULL;
    r->ncurve = 0;
}
