/*
 * tests/trace/fuzz_snapfile.c - libFuzzer target for the snapshot reader and
 * the timeline built on what it accepts.
 *
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -Itrace -Iinclude \
 *     tests/trace/fuzz_snapfile.c trace/snapfile_read.c trace/snapfile_write.c \
 *     trace/snapshot.c trace/checksum.c trace/timeline.c -lzstd -o fuzz_snapfile
 *   ./fuzz_snapfile -max_len=65536 corpus/
 *
 * Seed the corpus with any small .vtsnap. Sections are CRC-protected, so
 * random mutations mostly stop at the checksum; the decoders behind it are
 * exercised by the structure-aware mutation test in test_format.c
 * (mutations_inside_sections_never_crash), which re-checksums its damage.
 */
#include <stddef.h>
#include <stdint.h>

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
            vt_timeline_free(tl);
        }
        vt_snapshot_free(s);
    }
    return 0;
}
