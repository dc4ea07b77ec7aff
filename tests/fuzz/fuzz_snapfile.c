/*
 * tests/fuzz/fuzz_snapfile.c - libFuzzer target for the snapshot reader, and
 * for the timeline, the checker and the data of the page of several ranks on
 * whatever the reader accepts.
 *
 * Run by `meson test --suite fuzz` through run_fuzz.sh, which builds it with
 * clang and FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION (the reader then skips
 * its checksums, so mutations reach the decoders) and seeds it with the
 * small snapshot of tests/viz/gen_snapshot. By hand:
 *   tests/fuzz/run_fuzz.sh snapfile 600 /tmp/fz seed.vtsnap -- -Iinclude -Itrace -- \
 *     tests/fuzz/fuzz_snapfile.c trace/snap/snapfile_*.c trace/snap/snapshot.c trace/snap/checksum.c \
 *     trace/snap/timeline.c trace/snap/liveness.c trace/check/check*.c
 */
#include <stddef.h>
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "rank_data.h"
#include "snapfile.h"
#include "timeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    vt_snapshot_data *s = NULL;
    if (vt_snapfile_decode(data, size, "fuzz", &s, err, sizeof err) == 0) {
        vt_timeline *tl = NULL;
        if (vt_timeline_build(s, &tl, err, sizeof err) == 0) {
            if (tl->nlifetimes)
                (void)vt_timeline_find(tl, tl->lifetimes[0].addr, 0);
            /* embedded in a <script>: no markup may come out, whatever the
             * labels hold */
            vt__buf b = { 0 };
            vt__viz_rank_json(&b, 0, "fuzz</script>", s, tl);
            if (!b.oom && (memchr(b.p, '<', b.n) || memchr(b.p, '>', b.n)))
                abort();
            vt__buf_free(&b);
            vt_timeline_free(tl);
        }
        /* Every rule, and both report writers, on what the reader accepted. */
        vt_check_options opt;
        vt_check_options_init(&opt);
        opt.rules = VT_CHECK_RULES_ALL;
        vt_check_report *r = NULL;
        if (vt_check_run(s, &opt, &r, err, sizeof err) == 0) {
            FILE *sink = fopen("/dev/null", "w");
            if (sink) {
                vt_check_report_print(sink, r, s, 0);
                vt_check_report_write_json(sink, r, s);
                fclose(sink);
            }
            vt_check_report_free(r);
        }
        vt_snapshot_free(s);
    }
    return 0;
}
