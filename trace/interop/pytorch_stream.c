/*
 * trace/interop/pytorch_stream.c - the PyTorch snapshot pickle of a
 * snapshot whose events are read as a stream (vt__pytorch_export_stream,
 * pytorch.h): the bytes vt__pytorch_export writes from the whole snapshot,
 * written to the file as they are made (vt__pw_flush), in memory that
 * follows the frees pending and the distinct strings (the writer's memo).
 * The events are read once for the devices they name, once per device
 * trace, once for the marks (pytorch_write.h's order).
 */
#include <errno.h>

#include "errbuf.h"
#include "event_stream.h"
#include "free_match.h"
#include "pickle.h"
#include "pytorch.h"
#include "pytorch_write.h"

/* Which FREE_COMPLETED completes a free that needed no wait, without the
 * timeline: the one that completes a FREE_REQUESTED with aux 0 by the
 * timeline's rule (free_match.h). A request with aux 1 is dropped from the
 * matching at once: its completion is written whether it matches or not,
 * so memory follows the frees with no wait whose completion has not come. */
static int note_event(vt__free_match *m, const vt__event *e, uint32_t i, int *plain)
{
    uint32_t request;
    if (vt__free_match_event(m, e, i, &request))
        return -ENOMEM;
    if (e->kind == VT_EV_FREE_REQUESTED && e->aux)
        vt__free_match_drop(m, e->addr);
    *plain = e->kind == VT_EV_FREE_COMPLETED && request != VT__FREE_MATCH_NONE;
    return 0;
}

/* Writes out what the writer holds beyond this (the last time: all). */
#define FLUSH_AT (1u << 20)

/* Device d's trace. */
static int put_device_trace(vt__pickle_writer *w, const vt__snapshot_data *s,
                            vt__event_stream *es, int d, FILE *out)
{
    vt__free_match m;
    int rc = vt__free_match_init(&m) ? -ENOMEM : vt__event_stream_rewind(es);
    vt__event e;
    vt__pw_list_begin(w);
    for (uint32_t i = 0; rc == 0 && (rc = vt__event_stream_next(es, &e)) == 1; i++) {
        int plain;
        if ((rc = note_event(&m, &e, i, &plain)))
            break;
        if (vt__pt_in_trace(&e, d)) {
            vt__pt_event(w, s, &e, plain);
            rc = vt__pw_flush(w, out, FLUSH_AT);
        }
    }
    vt__pw_list_end(w);
    vt__free_match_free(&m);
    return rc;
}

int vt__pytorch_export_stream(const vt__snapshot_data *s, vt__event_stream *es, FILE *out,
                              char *err, size_t errlen)
{
    vt__pickle_writer *w = vt__pickle_writer_new();
    if (!w)
        return vt__errf(err, errlen, -ENOMEM, "out of memory");
    /* the devices the events name: one reading */
    int maxdev = vt__snapshot_max_device(s);
    vt__event e;
    int rc = vt__event_stream_rewind(es);
    while (rc == 0 && (rc = vt__event_stream_next(es, &e)) == 1) {
        rc = 0;
        if (e.device > maxdev)
            maxdev = e.device;
    }
    if (maxdev < 0)
        maxdev = 0;   /* a trace for device 0 even when nothing names one */
    if (rc < 0)
        goto out;
    vt__pt_head(w, s);
    for (int d = 0; rc == 0 && d <= maxdev; d++)
        rc = put_device_trace(w, s, es, d, out);
    if (rc)
        goto out;
    vt__pt_middle(w);
    rc = vt__event_stream_rewind(es);
    while (rc == 0 && (rc = vt__event_stream_next(es, &e)) == 1) {
        rc = 0;
        if (e.kind == VT_EV_MARK) {
            vt__pt_annotation(w, s, &e);
            rc = vt__pw_flush(w, out, FLUSH_AT);
        }
    }
    if (rc < 0)
        goto out;
    vt__pt_tail(w);
    rc = vt__pw_flush(w, out, 0);
out:
    if (rc == -ENOMEM)
        vt__errf(err, errlen, rc, "out of memory");
    else if (rc == -EIO)
        vt__errf(err, errlen, rc, "write error");
    vt__pickle_writer_free(w);
    return rc < 0 ? rc : 0;
}
