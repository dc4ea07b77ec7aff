/* viz/rank_data.c - one rank's data in the page of several ranks (see
 * rank_data.h). */
#include "rank_data.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "json_str.h"

__attribute__((format(printf, 2, 3)))
static void put_fmt(vt__buf *b, const char *fmt, ...)
{
    char tmp[128];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        vt__put_bytes(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A recorded time on the wall clock, in ms. Unsigned arithmetic: clock
 * bases are whatever the file says, and must not overflow a signed sum. */
static double wall_ms(const vt__snapshot_data *s, uint64_t t)
{
    uint64_t wall = t + s->meta.clock_base_realtime_ns - s->meta.clock_base_monotonic_ns;
    return (double)(int64_t)wall / 1e6;
}

/* The tool's pauses (PAUSE events: track()'s marks and walks), [start,
 * end] on the wall clock, those that can show on an axis as long as the
 * trace: at least VT_RANK_MIN_PAUSE_NS and 1/VT_RANK_POINTS of it (so
 * VT_RANK_POINTS of them at most; a mark's 0.1 ms at every step is none). */
static void put_pauses(vt__buf *b, const vt__snapshot_data *s)
{
    if (!s->nevents)
        return;
    uint64_t t0 = s->events[0].time_ns, t1 = s->events[s->nevents - 1].time_ns;
    uint64_t least = t1 > t0 ? (t1 - t0) / VT_RANK_POINTS : 0;
    if (least < VT_RANK_MIN_PAUSE_NS)
        least = VT_RANK_MIN_PAUSE_NS;
    int first = 1;
    for (size_t i = 0; i < s->nevents; i++) {
        const vt__event *e = &s->events[i];
        if (e->kind != VT_EV_PAUSE || e->time_ns - vt__pause_start(e) < least)
            continue;
        put_fmt(b, "%s[%.3f,%.3f]", first ? "" : ",", wall_ms(s, vt__pause_start(e)),
                wall_ms(s, e->time_ns));
        first = 0;
    }
}

void vt__viz_rank_json(vt__buf *b, int rank, const char *file, const vt__snapshot_data *s,
                       const vt__timeline *tl)
{
    const vt__tl_device *dev = NULL;
    for (size_t d = 0; d < tl->ndevices; d++)
        if (!dev || tl->devices[d].peak_allocated > dev->peak_allocated)
            dev = &tl->devices[d];
    put_fmt(b, "{\"rank\":%d,\"file\":", rank);
    vt__put_json_str(b, file, 1);
    put_fmt(b, ",\"device\":%d,\"peak\":%" PRIu64 ",\"points\":[", dev ? dev->device : -1,
            dev ? dev->peak_allocated : 0);
    if (dev) {
        size_t n = dev->npoints, step = n > VT_RANK_POINTS ? (n + VT_RANK_POINTS - 1) / VT_RANK_POINTS : 1;
        for (size_t i = 0; i < n; i += step) {
            size_t best = i;
            for (size_t k = i; k < i + step && k < n; k++)
                if (dev->points[k].allocated > dev->points[best].allocated)
                    best = k;
            /* wall clock in ms (a double keeps µs precision for years) */
            put_fmt(b, "%s[%.3f,%" PRIu64 "]", i ? "," : "",
                    wall_ms(s, dev->points[best].time_ns),
                    dev->points[best].allocated);
        }
    }
    put_fmt(b, "],\"marks\":[");
    for (size_t m = 0; m < tl->nmarks; m++) {
        put_fmt(b, "%s[%.3f,", m ? "," : "", wall_ms(s, tl->marks[m].time_ns));
        vt__put_json_str(b, vt__snapshot_string(s, tl->marks[m].label), 1);
        vt__put_u8(b, ']');
    }
    put_fmt(b, "],\"pauses\":[");
    put_pauses(b, s);
    put_fmt(b, "]}");
}
