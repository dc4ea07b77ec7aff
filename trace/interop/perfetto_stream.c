/*
 * trace/interop/perfetto_stream.c - the Trace Event Format export of a
 * snapshot whose events are read as a stream (vt__perfetto_export_stream,
 * perfetto.h): the bytes vt__perfetto_export writes from the whole snapshot
 * and its timeline, in memory that follows what is alive at once plus 32
 * bytes per allocation the events settle (timeline_walk.c).
 *
 * The file's order is the whole export's (perfetto_write.h): every device's
 * curve in turn, then one slice per lifetime in the timeline's order, then
 * the events drawn as instants. So:
 *  1. the streamed timeline (two readings) tells the timeline's walk each
 *     lifetime it retires; it gives the window, the devices and the
 *     lifetimes left at the end;
 *  2. per device, the streamed timeline again (two readings each), told
 *     every point of the curves: the device's are written as they come;
 *  3. the walk (one reading) hands out every lifetime in order: its slice;
 *  4. one reading for the instants.
 */
#include <errno.h>
#include <stdlib.h>

#include "errbuf.h"
#include "event_stream.h"
#include "perfetto.h"
#include "perfetto_write.h"

/* Step 2: the points of one device. */
struct device_points {
    vt__pf *w;
    size_t device;
};

static void on_point(void *ctx, size_t device, const vt__tl_point *pt)
{
    struct device_points *x = ctx;
    if (device == x->device)
        vt__pf_point(x->w, device, pt);
}

static void on_lifetime(void *ctx, const vt__lifetime *l)
{
    vt__pf_slice(ctx, l);
}

/* Step 4. */
static int write_instants(vt__pf *w, vt__event_stream *es)
{
    vt__event e;
    int rc = vt__event_stream_rewind(es);
    if (rc)
        return rc;
    while ((rc = vt__event_stream_next(es, &e)) == 1)
        vt__pf_instant(w, &e);
    return rc;
}

int vt__perfetto_export_stream(FILE *o, const vt__snapshot_data *s, vt__event_stream *es,
                               const vt__perfetto_options *opt, char *err, size_t errlen)
{
    vt__tl_walk *walk = NULL;
    vt__timeline *tl = NULL;
    vt__pf w;
    /* Step 1: the walk told each lifetime the streamed timeline retires. */
    int rc = vt__tl_walk_build(s, es, "perfetto", &walk, &tl, err, errlen);
    if (rc)
        goto out;
    vt__pf_begin(&w, o, s, tl, opt);
    struct device_points dp = { .w = &w };
    vt__tl_stream_hooks h2 = { .point = on_point, .ctx = &dp };
    for (dp.device = 0; rc == 0 && dp.device < tl->ndevices; dp.device++) {
        vt__timeline *again = NULL;
        rc = vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &h2, &again, err, errlen);
        vt__timeline_free(again);
    }
    if (rc == 0 && (rc = vt__tl_walk_run(walk, es, tl, on_lifetime, &w)) == -ENOMEM)
        vt__errf(err, errlen, rc, "perfetto: out of memory");
    if (rc == 0)
        rc = write_instants(&w, es);
    int erc = vt__pf_end(&w);
    if (rc == 0 && erc)
        rc = vt__errf(err, errlen, erc, "perfetto: write error");
out:
    vt__tl_walk_close(walk);
    vt__timeline_free(tl);
    return rc < 0 ? rc : 0;
}
