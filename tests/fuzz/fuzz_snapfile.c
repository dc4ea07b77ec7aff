/*
 * tests/fuzz/fuzz_snapfile.c - libFuzzer target for the snapshot reader, and
 * for the timeline, the checker and the data of the page of several ranks on
 * whatever the reader accepts; and for the event stream (the same bytes as
 * a file read in small chunks) and the timeline built from it: where both
 * readers accept, they give the same events.
 *
 * Run by `meson test --suite fuzz` through run_fuzz.sh, which builds it with
 * clang and FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (the reader then skips
 * its checksums, so mutations reach the decoders) and seeds it with the
 * small snapshot of tests/viz/gen_snapshot. By hand:
 *   tests/fuzz/run_fuzz.sh snapfile 600 /tmp/fz seed.vtsnap -- -Iinclude -Itrace -- \
 *     tests/fuzz/fuzz_snapfile.c trace/snap/snapfile_*.c trace/snap/snapshot.c trace/snap/checksum.c \
 *     trace/snap/timeline.c trace/snap/liveness.c trace/check/check*.c
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE   /* memfd_create */
#endif
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "event_stream.h"
#include "rank_data.h"
#include "snapfile.h"
#include "timeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int same_event(const vt__event *a, const vt__event *b)
{
    return a->seq == b->seq && a->time_ns == b->time_ns && a->stream == b->stream &&
           a->addr == b->addr && a->req_size == b->req_size && a->size == b->size &&
           a->aux == b->aux && a->aux2 == b->aux2 && a->thread == b->thread &&
           a->stack == b->stack && a->str == b->str && a->kind == b->kind &&
           a->device == b->device;
}

/* The bytes as a file, read as a stream in chunks of 16 bytes, then its
 * streamed timeline. `whole`: the reader's snapshot, NULL if it refused. */
static void fuzz_stream(const uint8_t *data, size_t size, const vt__snapshot_data *whole)
{
    int fd = memfd_create("fuzz", 0);
    if (fd < 0)
        return;
    char path[64], err[512], tlerr[512];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return;
    }
    vt__snapshot_data *s;
    vt__event_stream *es;
    if (vt__snapfile_open_stream(path, 16, &s, &es, err, sizeof err) == 0) {
        vt__event e;
        size_t i = 0;
        int rc;
        while ((rc = vt__event_stream_next(es, &e)) == 1) {
            if (whole && (i >= whole->nevents || !same_event(&e, &whole->events[i])))
                abort();
            i++;
        }
        if (rc == 0 && whole && i != whole->nevents)
            abort();
        vt__timeline *tl = NULL;
        if (vt__timeline_build_stream(s, es, VT_TL_STREAM_CURVES, &tl, tlerr, sizeof tlerr) == 0)
            vt__timeline_free(tl);
        vt__event_stream_close(es);
        vt__snapshot_free(s);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    vt__snapshot_data *s = NULL;
    if (vt__snapfile_decode(data, size, "fuzz", &s, err, sizeof err) == 0) {
        vt__timeline *tl = NULL;
        if (vt__timeline_build(s, &tl, err, sizeof err) == 0) {
            if (tl->nlifetimes)
                (void)vt__timeline_find(tl, tl->lifetimes[0].addr, 0);
            /* embedded in a <script>: no markup may come out, whatever the
             * labels hold */
            vt__buf b = { 0 };
            vt__viz_rank_json(&b, 0, "fuzz</script>", s, tl);
            if (!b.oom && (memchr(b.p, '<', b.n) || memchr(b.p, '>', b.n)))
                abort();
            vt__buf_free(&b);
            vt__timeline_free(tl);
        }
        /* Every rule, and both report writers, on what the reader accepted. */
        vt__check_options opt;
        vt__check_options_init(&opt);
        opt.rules = VT_CHECK_RULES_ALL;
        vt__check_report *r = NULL;
        if (vt__check_run(s, &opt, &r, err, sizeof err) == 0) {
            FILE *sink = fopen("/dev/null", "w");
            if (sink) {
                vt__check_report_print(sink, r, s, 0);
                vt__check_report_write_json(sink, r, s);
                fclose(sink);
            }
            vt__check_report_free(r);
        }
    }
    fuzz_stream(data, size, s);
    vt__snapshot_free(s);
    return 0;
}
