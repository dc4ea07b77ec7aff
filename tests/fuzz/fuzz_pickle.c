/*
 * tests/fuzz/fuzz_pickle.c - libFuzzer target for the safe pickle reader and
 * the PyTorch snapshot importer, then the timeline and the PyTorch exporter
 * on whatever the importer accepts (and the exporter's output read back).
 *
 * Run by `meson test --suite fuzz` through run_fuzz.sh, seeded with a small
 * PyTorch-shaped snapshot (gen_pickle_seed.py). By hand:
 *   python3 tests/fuzz/gen_pickle_seed.py /tmp/seed.pickle
 *   tests/fuzz/run_fuzz.sh pickle 600 /tmp/fz /tmp/seed.pickle -- -Iinclude -Itrace -- \
 *     tests/fuzz/fuzz_pickle.c trace/interop/pickle_*.c trace/interop/pytorch_*.c trace/snap/snapshot.c \
 *     trace/snap/timeline.c trace/snap/liveness.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "pytorch.h"
#include "timeline.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    vt_snapshot_data *s = NULL;
    if (vt_pytorch_import(data, size, "fuzz", &s, err, sizeof err) != 0)
        return 0;
    vt_timeline *tl = NULL;
    if (vt_timeline_build(s, &tl, err, sizeof err) == 0)
        vt_timeline_free(tl);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        int rc = vt_pytorch_export(s, f, err, sizeof err);
        fclose(f);
        if (rc == 0) {
            /* what we write, we read back */
            vt_snapshot_data *back = NULL;
            if (vt_pytorch_import(buf, len, "fuzz-export", &back, err, sizeof err) != 0) {
                fprintf(stderr, "exported pickle not readable: %s\n", err);
                abort();
            }
            vt_snapshot_free(back);
        }
        free(buf);
    }
    vt_snapshot_free(s);
    return 0;
}
