/*
 * trace/interop/perfetto_export.c - a snapshot's timeline in the Trace
 * Event Format (perfetto.h).
 *
 * One process per device ("GPU N"), one thread per stream. Per device: a
 * counter "memory" whose args `allocated` and `reserved` are two tracks,
 * one point per point of the timeline's curve (the same values vt__timeline
 * computes: `vramtrace json` shows them as `curve`); one async slice (b/e,
 * since allocations overlap and need not nest) per allocation with its size,
 * stream, address and top frames as args; instants for marks (global), OOMs,
 * bad frees, FINDING events and the findings handed in (rule, bytes, site);
 * a slice per device for each of the tool's pauses.
 * Timestamps are microseconds since the first event; the wall clock of that
 * instant is in the metadata (otherData). Each kind of record is written by
 * a function of its own (perfetto_write.h), which the streamed export
 * (perfetto_stream.c) calls in the same order.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "format_bytes.h"
#include "grow.h"
#include "json_str.h"
#include "perfetto.h"
#include "perfetto_write.h"

#define TOP_FRAMES 5

static double ts_us(const vt__timeline *tl, uint64_t t_ns)
{
    return t_ns > tl->first_time_ns ? (double)(t_ns - tl->first_time_ns) / 1000.0 : 0.0;
}

static int pid_of(int device) { return device + 2; } /* -1 (host/unknown) -> 1 */

/* The separator before a record: none before the first. */
static const char *sep(vt__pf *w)
{
    if (w->first) {
        w->first = 0;
        return "";
    }
    return ",\n";
}

/* Streams get small thread ids, in order of first appearance. */
static int tid_of(vt__pf *w, uint64_t stream)
{
    for (size_t i = 0; i < w->nstreams; i++)
        if (w->streams[i] == stream)
            return (int)i + 1;
    uint64_t *v = vt__grow_push((void **)&w->streams, &w->cap_streams, &w->nstreams, sizeof *v);
    if (!v)
        return 1;
    *v = stream;
    return (int)w->nstreams;
}

static void frames_arg(FILE *o, const vt__snapshot_data *s, uint32_t stack)
{
    const vt__frame *fr[TOP_FRAMES];
    size_t n = vt__snapshot_stack_frames(s, stack, fr, TOP_FRAMES);
    if (n > TOP_FRAMES)
        n = TOP_FRAMES;
    fputs(",\"frames\":[", o);
    for (size_t i = 0; i < n; i++) {
        char buf[1024];
        const char *fn = vt__snapshot_string(s, fr[i]->function);
        const char *file = vt__frame_file(s, fr[i]);
        if (*fn)
            snprintf(buf, sizeof buf, "%s %s:%u", fn, file, fr[i]->line);
        else
            snprintf(buf, sizeof buf, "0x%" PRIx64 " %s", fr[i]->ip, file);
        if (i)
            fputc(',', o);
        vt__json_str(o, buf);
    }
    fputc(']', o);
}

static void slice_name(char *buf, size_t len, const vt__snapshot_data *s, const vt__lifetime *l,
                       const vt__perfetto_options *opt)
{
    char b[32];
    const vt__frame *f = NULL;
    if (opt->site_frame)
        f = opt->site_frame(s, l->alloc_stack);
    else
        vt__snapshot_stack_frames(s, l->alloc_stack, &f, 1);
    const char *fn = f ? vt__snapshot_string(s, f->function) : "";
    snprintf(buf, len, "%s%s%s", vt__fmt_bytes(l->size, b), *fn ? " " : "", fn);
}

void vt__pf_begin(vt__pf *w, FILE *o, const vt__snapshot_data *s, const vt__timeline *tl,
                  const vt__perfetto_options *opt)
{
    static const vt__perfetto_options none = { 0 };
    *w = (vt__pf){ .o = o, .s = s, .opt = opt ? opt : &none, .tl = tl, .first = 1 };
    char b[64];
    fprintf(o, "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"source\":\"vramtrace\","
               "\"first_event_wall_ns\":%" PRIu64 "},\"traceEvents\":[\n",
            tl->first_time_ns - s->meta.clock_base_monotonic_ns + s->meta.clock_base_realtime_ns);
    for (size_t d = 0; d < tl->ndevices; d++) {
        int dev = tl->devices[d].device;
        if (dev >= 0)
            snprintf(b, sizeof b, "GPU %d", dev);
        else
            snprintf(b, sizeof b, "host/unknown device");
        fprintf(o, "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"tid\":0,"
                   "\"args\":{\"name\":", sep(w), pid_of(dev));
        vt__json_str(o, b);
        fputs("}}", o);
    }
}

/* The counter "memory": exactly the timeline's curve. */
void vt__pf_point(vt__pf *w, size_t d, const vt__tl_point *pt)
{
    fprintf(w->o, "%s{\"ph\":\"C\",\"name\":\"memory\",\"pid\":%d,\"tid\":0,\"ts\":%.3f,"
                  "\"args\":{\"allocated\":%" PRIu64 ",\"reserved\":%" PRIu64 "}}",
            sep(w), pid_of(w->tl->devices[d].device), ts_us(w->tl, pt->time_ns), pt->allocated,
            pt->reserved);
}

/* One async slice per allocation. */
void vt__pf_slice(vt__pf *w, const vt__lifetime *l)
{
    const vt__timeline *tl = w->tl;
    FILE *o = w->o;
    size_t id = ++w->nslices;
    uint64_t t0 = l->alloc_time_ns ? l->alloc_time_ns : tl->first_time_ns;
    uint64_t t1 = l->release_time_ns ? l->release_time_ns : tl->last_time_ns;
    if (t1 < t0)
        t1 = t0;
    int tid = tid_of(w, l->stream);
    char name[512];
    slice_name(name, sizeof name, w->s, l, w->opt);
    fprintf(o, "%s{\"ph\":\"b\",\"cat\":\"allocation\",\"id\":\"0x%zx\",\"pid\":%d,"
               "\"tid\":%d,\"ts\":%.3f,\"name\":",
            sep(w), id, pid_of(l->device), tid, ts_us(tl, t0));
    vt__json_str(o, name);
    fprintf(o, ",\"args\":{\"size\":%" PRIu64 ",\"requested\":%" PRIu64 ",\"addr\":\"0x%" PRIx64
               "\",\"stream\":\"0x%" PRIx64 "\",\"alive_at_snapshot\":%s,"
               "\"before_window\":%s",
            l->size, l->req_size, l->addr, l->stream, l->flags & VT_LT_ALIVE ? "true" : "false",
            l->flags & VT_LT_BEFORE_WINDOW ? "true" : "false");
    frames_arg(o, w->s, l->alloc_stack);
    fputs("}}", o);
    fprintf(o, "%s{\"ph\":\"e\",\"cat\":\"allocation\",\"id\":\"0x%zx\",\"pid\":%d,"
               "\"tid\":%d,\"ts\":%.3f,\"name\":",
            sep(w), id, pid_of(l->device), tid, ts_us(tl, t1));
    vt__json_str(o, name);
    fputc('}', o);
}

/* What "vramtrace paused" slices are named: time the program did not run. */
#define PAUSE_NAME "vramtrace paused (not the program's time)"

/* Marks (global), OOMs, bad frees and FINDING events as instants; the
 * tool's pauses (PAUSE: track()'s holder walks, a snapshot's) as a slice on
 * each device's process, which the allocations' time would otherwise seem
 * the program's. */
void vt__pf_instant(vt__pf *w, const vt__event *e)
{
    const vt__snapshot_data *s = w->s;
    const vt__timeline *tl = w->tl;
    FILE *o = w->o;
    char b[64];
    if (e->kind == VT_EV_PAUSE) {
        uint64_t start = vt__pause_start(e);
        for (size_t d = 0; d < tl->ndevices; d++)
            fprintf(o, "%s{\"ph\":\"X\",\"cat\":\"vramtrace\",\"pid\":%d,\"tid\":0,"
                       "\"ts\":%.3f,\"dur\":%.3f,\"name\":\"" PAUSE_NAME "\"}",
                    sep(w), pid_of(tl->devices[d].device), ts_us(tl, start),
                    ts_us(tl, e->time_ns) - ts_us(tl, start));
    } else if (e->kind == VT_EV_MARK) {
        fprintf(o, "%s{\"ph\":\"i\",\"s\":\"g\",\"cat\":\"mark\",\"pid\":%d,\"tid\":0,"
                   "\"ts\":%.3f,\"name\":", sep(w), pid_of(e->device), ts_us(tl, e->time_ns));
        vt__json_str(o, vt__snapshot_string(s, e->str));
        fputc('}', o);
    } else if (e->kind == VT_EV_OOM || e->kind == VT_EV_BAD_FREE || e->kind == VT_EV_FINDING) {
        const char *cat = e->kind == VT_EV_OOM ? "oom" : e->kind == VT_EV_BAD_FREE
                                                          ? "bad_free" : "finding";
        char name[128];
        if (e->kind == VT_EV_OOM)
            snprintf(name, sizeof name, "OOM: %s requested", vt__fmt_bytes(e->req_size, b));
        else if (e->kind == VT_EV_BAD_FREE)
            snprintf(name, sizeof name, "bad free of 0x%" PRIx64, e->addr);
        else
            snprintf(name, sizeof name, "finding");
        fprintf(o, "%s{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,"
                   "\"ts\":%.3f,\"name\":", sep(w), cat, pid_of(e->device),
                tid_of(w, e->stream), ts_us(tl, e->time_ns));
        vt__json_str(o, name);
        fprintf(o, ",\"args\":{\"requested\":%" PRIu64 ",\"device_free\":%" PRIu64,
                e->req_size, e->kind == VT_EV_OOM ? e->aux : 0);
        const char *text = vt__snapshot_string(s, e->str);
        if (*text) {
            fputs(",\"text\":", o);
            vt__json_str(o, text);
        }
        frames_arg(o, s, e->stack);
        fputs("}}", o);
    }
}

int vt__pf_end(vt__pf *w)
{
    const vt__timeline *tl = w->tl;
    const vt__perfetto_options *opt = w->opt;
    FILE *o = w->o;
    char b[64];
    /* the findings, at the moment each became one */
    for (size_t i = 0; i < opt->nfindings; i++) {
        const vt__perfetto_finding *fd = &opt->findings[i];
        uint64_t t = fd->time_ns ? fd->time_ns : tl->first_time_ns;
        char name[160];
        snprintf(name, sizeof name, "%s%s: %s", fd->minor ? "minor " : "", fd->rule,
                 vt__fmt_bytes(fd->bytes, b));
        fprintf(o, "%s{\"ph\":\"i\",\"s\":\"p\",\"cat\":\"finding\",\"pid\":%d,\"tid\":0,"
                   "\"ts\":%.3f,\"name\":", sep(w), pid_of(fd->device), ts_us(tl, t));
        vt__json_str(o, name);
        fprintf(o, ",\"args\":{\"rule\":\"%s\",\"bytes\":%" PRIu64 ",\"addr\":\"0x%" PRIx64
                   "\",\"allocations\":%u,\"freed\":%s,\"minor\":%s",
                fd->rule, fd->bytes, fd->addr, fd->nallocs, fd->freed ? "true" : "false",
                fd->minor ? "true" : "false");
        frames_arg(o, w->s, fd->stack);
        fputs("}}", o);
    }
    /* thread names (streams), for every pid that used them */
    for (size_t d = 0; d < tl->ndevices; d++)
        for (size_t k = 0; k < w->nstreams; k++) {
            uint64_t st = w->streams[k];
            snprintf(b, sizeof b, st ? "stream 0x%" PRIx64 : "default stream", st);
            fprintf(o, "%s{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%zu,"
                       "\"args\":{\"name\":", sep(w), pid_of(tl->devices[d].device), k + 1);
            vt__json_str(o, b);
            fputs("}}", o);
        }
    fputs("\n]}\n", o);
    free(w->streams);
    w->streams = NULL;
    return ferror(o) ? -EIO : 0;
}

int vt__perfetto_export(FILE *o, const vt__snapshot_data *s, const vt__timeline *tl,
                        const vt__perfetto_options *opt)
{
    vt__pf w;
    vt__pf_begin(&w, o, s, tl, opt);
    for (size_t d = 0; d < tl->ndevices; d++)
        for (size_t p = 0; p < tl->devices[d].npoints; p++)
            vt__pf_point(&w, d, &tl->devices[d].points[p]);
    for (size_t i = 0; i < tl->nlifetimes; i++)
        vt__pf_slice(&w, &tl->lifetimes[i]);
    for (size_t i = 0; i < s->nevents; i++)
        vt__pf_instant(&w, &s->events[i]);
    return vt__pf_end(&w);
}
