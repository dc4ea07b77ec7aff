/*
 * trace/interop/pytorch_export.c - vt__snapshot_data as the pickle PyTorch's
 * `_dump_snapshot` writes (PyTorch 2.x field names), protocol 4 so that
 * MemoryViz.js (protocols 2..4) reads it too.
 *
 * The allocator state becomes `segments`; events become `device_traces`
 * (one list per device ordinal) with PyTorch's actions. PyTorch records a
 * free as free_requested then free_completed; a plain vramtrace free (bytes
 * released at once) is written as that pair at the same time, and its own
 * FREE_COMPLETED (which changes no counts) is left out. Marks become
 * external_annotations ("NAME START"/"NAME END" as that stage of NAME, any
 * other mark as a START). Sizes in
 * traces are the requested sizes, as PyTorch writes them.
 *
 * The parts of the pickle are written by functions of their own
 * (pytorch_write.h), which the streamed export (pytorch_stream.c) calls in
 * the same order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "pickle.h"
#include "pytorch.h"
#include "pytorch_write.h"
#include "timeline.h"

#define MAX_EXPORT_FRAMES 64

static void put_key_int(vt__pickle_writer *w, const char *k, int64_t v)
{
    vt__pw_str(w, k);
    vt__pw_int(w, v);
}

static void put_key_u64(vt__pickle_writer *w, const char *k, uint64_t v)
{
    vt__pw_str(w, k);
    vt__pw_uint(w, v);
}

static void put_key_str(vt__pickle_writer *w, const char *k, const char *v)
{
    vt__pw_str(w, k);
    vt__pw_str(w, v);
}

static void put_frames(vt__pickle_writer *w, const vt__snapshot_data *s, uint32_t stack)
{
    const vt__frame *fr[MAX_EXPORT_FRAMES];
    size_t n = vt__snapshot_stack_frames(s, stack, fr, MAX_EXPORT_FRAMES);
    if (n > MAX_EXPORT_FRAMES)
        n = MAX_EXPORT_FRAMES;
    vt__pw_str(w, "frames");
    vt__pw_list_begin(w);
    for (size_t i = 0; i < n; i++) { /* innermost first, as PyTorch */
        const vt__frame *f = fr[i];
        const char *fn = vt__snapshot_string(s, f->function);
        const char *file = vt__frame_file(s, f);
        char ipbuf[32];
        if (!*fn) {
            snprintf(ipbuf, sizeof ipbuf, "0x%" PRIx64, f->ip);
            fn = ipbuf;
        }
        vt__pw_dict_begin(w);
        put_key_str(w, "filename", *file ? file : "??");
        put_key_int(w, "line", f->line);
        put_key_str(w, "name", fn);
        vt__pw_dict_end(w);
    }
    vt__pw_list_end(w);
}

static const char *state_name(uint8_t st)
{
    return st == VT_BLOCK_ACTIVE_ALLOCATED      ? "active_allocated"
           : st == VT_BLOCK_ACTIVE_PENDING_FREE ? "active_pending_free"
                                                : "inactive";
}

/* A private pool (format 1.14; 0: the default) as PyTorch's MempoolId_t
 * pair under `key`, as the importer reads it back (private_pool_id in
 * pytorch_import.c): (capture id, 0) or (0, uid); (0, 0) the default. */
static void put_pool_id(vt__pickle_writer *w, const char *key, uint64_t id)
{
    vt__pw_str(w, key);
    vt__pw_tuple_begin(w);
    vt__pw_int(w, id && !(id & 1) ? (int64_t)(id >> 1) : 0);
    vt__pw_int(w, id & 1 ? (int64_t)(id >> 1) : 0);
    vt__pw_tuple_end(w);
}

static void put_segments(vt__pickle_writer *w, const vt__snapshot_data *s)
{
    vt__pw_str(w, "segments");
    vt__pw_list_begin(w);
    for (size_t i = 0; i < s->nsegments; i++) {
        const vt__snap_segment *g = &s->segments[i];
        uint64_t allocated = 0, active = 0, requested = 0;
        for (uint32_t k = 0; k < g->nblocks && g->first_block + k < s->nblocks; k++) {
            const vt__snap_block *b = &s->blocks[g->first_block + k];
            if (b->state == VT_BLOCK_ACTIVE_ALLOCATED)
                allocated += b->size;
            if (b->state != VT_BLOCK_INACTIVE) {
                active += b->size;
                requested += b->req_size;
            }
        }
        vt__pw_dict_begin(w);
        put_key_int(w, "device", g->device < 0 ? 0 : g->device);
        put_key_u64(w, "address", g->addr);
        put_key_u64(w, "total_size", g->size);
        put_key_u64(w, "allocated_size", allocated);
        put_key_u64(w, "active_size", active);
        put_key_u64(w, "requested_size", requested);
        put_key_u64(w, "stream", g->stream);
        put_key_str(w, "segment_type", vt__pool_kind(g->pool) == VT_POOL_SMALL ? "small" : "large");
        put_pool_id(w, "segment_pool_id", g->private_pool);
        vt__pw_str(w, "is_expandable");
        vt__pw_bool(w, 0);
        vt__pw_str(w, "frames");
        vt__pw_list_begin(w);
        vt__pw_list_end(w);
        vt__pw_str(w, "blocks");
        vt__pw_list_begin(w);
        for (uint32_t k = 0; k < g->nblocks && g->first_block + k < s->nblocks; k++) {
            const vt__snap_block *b = &s->blocks[g->first_block + k];
            vt__pw_dict_begin(w);
            put_key_u64(w, "address", b->addr);
            put_key_u64(w, "size", b->size);
            put_key_u64(w, "requested_size", b->state == VT_BLOCK_INACTIVE ? 0 : b->req_size);
            put_key_str(w, "state", state_name(b->state));
            put_frames(w, s, b->stack);
            vt__pw_dict_end(w);
        }
        vt__pw_list_end(w);
        vt__pw_dict_end(w);
    }
    vt__pw_list_end(w);
}

static uint64_t wall_us(const vt__snapshot_data *s, uint64_t mono_ns)
{
    int64_t ns = (int64_t)mono_ns - (int64_t)s->meta.clock_base_monotonic_ns +
                 (int64_t)s->meta.clock_base_realtime_ns;
    return ns > 0 ? (uint64_t)ns / 1000 : 0;
}

static void put_entry(vt__pickle_writer *w, const vt__snapshot_data *s, const vt__event *e,
                      const char *action, uint64_t size, int with_frames)
{
    vt__pw_dict_begin(w);
    put_key_str(w, "action", action);
    put_key_u64(w, "addr", e->addr);
    put_key_u64(w, "size", size);
    put_key_u64(w, "stream", e->stream);
    put_key_u64(w, "time_us", wall_us(s, e->time_ns));
    if (with_frames || e->stack) /* free_completed has frames only when recorded */
        put_frames(w, s, e->stack);
    const char *meta = vt__snapshot_string(s, e->str);
    if (*meta)
        put_key_str(w, "user_metadata", meta);
    if (e->kind == VT_EV_SEGMENT_ALLOC && e->aux2)
        put_pool_id(w, "pool_id", e->aux2);
    vt__pw_dict_end(w);
}

/* Is e in device `device`'s trace? (Device 0's takes the events of none.) */
int vt__pt_in_trace(const vt__event *e, int device)
{
    return e->device == device || (device == 0 && e->device < 0);
}

/* The entries of event e of a device trace. `plain_completion`: e is the
 * FREE_COMPLETED of a free that needed no wait, written with that free. */
void vt__pt_event(vt__pickle_writer *w, const vt__snapshot_data *s, const vt__event *e,
                  int plain_completion)
{
    uint64_t req = e->req_size ? e->req_size : e->size;
    switch (e->kind) {
    case VT_EV_ALLOC:
        put_entry(w, s, e, "alloc", req, 1);
        break;
    case VT_EV_FREE_REQUESTED:
        put_entry(w, s, e, "free_requested", req, 1);
        if (!e->aux)
            put_entry(w, s, e, "free_completed", req, 0);
        break;
    case VT_EV_FREE_COMPLETED:
        if (!plain_completion)
            put_entry(w, s, e, "free_completed", req, 0);
        break;
    case VT_EV_SEGMENT_ALLOC:
        put_entry(w, s, e, "segment_alloc", e->size, 1);
        break;
    case VT_EV_SEGMENT_FREE:
        put_entry(w, s, e, "segment_free", e->size, 1);
        break;
    case VT_EV_OOM:
        vt__pw_dict_begin(w);
        put_key_str(w, "action", "oom");
        put_key_u64(w, "addr", e->aux);
        put_key_u64(w, "device_free", e->aux);
        put_key_u64(w, "size", e->req_size);
        put_key_u64(w, "stream", e->stream);
        put_key_u64(w, "time_us", wall_us(s, e->time_ns));
        put_frames(w, s, e->stack);
        if (VT_OOM_POOL(e->addr))   /* asked into a private pool (1.15) */
            put_pool_id(w, "pool_id", VT_OOM_POOL(e->addr));
        vt__pw_dict_end(w);
        break;
    default:
        break;
    }
}

/* A MARK as an external annotation: "NAME START" / "NAME END" (what the
 * importer makes of an annotation) go back as that stage; any other mark
 * as a START. */
void vt__pt_annotation(vt__pickle_writer *w, const vt__snapshot_data *s, const vt__event *e)
{
    const char *label = vt__snapshot_string(s, e->str);
    size_t n = strlen(label);
    const char *stage = "START";
    if (n > 4 && !strcmp(label + n - 4, " END")) {
        stage = "END";
        n -= 4;
    } else if (n > 6 && !strcmp(label + n - 6, " START")) {
        n -= 6;
    }
    char *nm = strndup(label, n);
    vt__pw_dict_begin(w);
    put_key_str(w, "name", nm ? nm : label);
    put_key_str(w, "stage", stage);
    put_key_int(w, "device", e->device < 0 ? 0 : e->device);
    put_key_u64(w, "time_us", wall_us(s, e->time_ns));
    vt__pw_dict_end(w);
    free(nm);
}

/* The pickle up to the first device trace. */
void vt__pt_head(vt__pickle_writer *w, const vt__snapshot_data *s)
{
    vt__pw_begin(w);
    vt__pw_dict_begin(w);
    put_segments(w, s);
    vt__pw_str(w, "device_traces");
    vt__pw_list_begin(w);
}

/* From the end of the device traces to the first annotation. */
void vt__pt_middle(vt__pickle_writer *w)
{
    vt__pw_list_end(w);
    vt__pw_str(w, "allocator_settings");
    vt__pw_dict_begin(w);
    vt__pw_dict_end(w);
    vt__pw_str(w, "external_annotations");
    vt__pw_list_begin(w);
}

void vt__pt_tail(vt__pickle_writer *w)
{
    vt__pw_list_end(w);
    vt__pw_dict_end(w);
    vt__pw_end(w);
}

int vt__pytorch_export(const vt__snapshot_data *s, FILE *out, char *err, size_t errlen)
{
    vt__timeline *tl = NULL;
    int rc = vt__timeline_build(s, &tl, err, errlen);
    if (rc)
        return rc;
    vt__pickle_writer *w = vt__pickle_writer_new();
    if (!w) {
        vt__timeline_free(tl);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int maxdev = vt__snapshot_max_device(s);
    if (maxdev < 0)
        maxdev = 0;   /* a trace for device 0 even when nothing names one */

    vt__pt_head(w, s);
    for (int d = 0; d <= maxdev; d++) {
        vt__pw_list_begin(w);
        for (size_t i = 0; i < s->nevents; i++) {
            const vt__event *e = &s->events[i];
            if (!vt__pt_in_trace(e, d))
                continue;
            const vt__lifetime *l = e->kind == VT_EV_FREE_COMPLETED
                                    ? vt__timeline_event_lifetime(tl, s, i) : NULL;
            int plain = l && l->free_event != VT_TL_NONE && !s->events[l->free_event].aux;
            vt__pt_event(w, s, e, plain);
        }
        vt__pw_list_end(w);
    }
    vt__pt_middle(w);
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_MARK)
            vt__pt_annotation(w, s, &s->events[i]);
    vt__pt_tail(w);
    vt__timeline_free(tl);

    size_t size;
    const unsigned char *data = vt__pw_data(w, &size);
    rc = 0;
    if (!data) {
        snprintf(err, errlen, "out of memory");
        rc = -ENOMEM;
    } else if (fwrite(data, 1, size, out) != size) {
        snprintf(err, errlen, "write error");
        rc = -EIO;
    }
    vt__pickle_writer_free(w);
    return rc;
}
