/*
 * tests/fuzz/fuzz_pickle.c - libFuzzer target for the safe pickle reader and
 * the PyTorch snapshot importer, then the timeline and the PyTorch exporter
 * on whatever the importer accepts (and the exporter's output read back).
 * The converter that reads a pickle in bounded memory (vt__pytorch_convert)
 * must agree with the importer: the same message for what they refuse, the
 * same snapshot (once encoded) for what it converts.
 *
 * The importer's work is bounded by its dict lookups: a large dict (one
 * that memo references may make appear many times) is searched through a
 * sorted index, never scanned. Every dict's lookups are checked here
 * against a scan for the last binding, as Python reads it.
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

#include <string.h>

#include <unistd.h>

#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"
#include "snapfile_encode.h"
#include "spill.h"
#include "timeline.h"

static void check_lookups(const uint8_t *data, size_t size)
{
    char err[512], key[256];
    vt__pickle *p = NULL;
    if (vt__pickle_parse(data, size, "fuzz", &p, err, sizeof err) != 0)
        return;
    for (size_t v = 0; v < p->nvalues; v++) {
        const vt__pv *d = &p->values[v];
        if (d->type != VT_PV_DICT || d->container >= p->ncontainers)
            continue;
        const vt__pv_container *c = &p->containers[d->container];
        for (uint32_t i = 0; i + 1 < c->n && i < 128; i += 2) {
            const vt__pv *kv = &p->values[c->items[i]];
            if (kv->type != VT_PV_STR || kv->n >= sizeof key || (kv->n && memchr(kv->s, 0, kv->n)))
                continue;
            if (kv->n)
                memcpy(key, kv->s, kv->n);
            key[kv->n] = 0;
            if (vt__pickle_get(p, d, key) != vt__pickle_scan(p, c, key, kv->n))
                abort();
        }
        if (vt__pickle_get(p, d, "no such key") != vt__pickle_scan(p, c, "no such key", 11))
            abort();
    }
    vt__pickle_free(p);
}

/* The importer's answer (rc, err, s) against the converter's on the same
 * bytes, its steps small so that it collects the graph often. */
static void check_convert(const uint8_t *data, size_t size, int rc, const char *err,
                          const vt__snapshot_data *s)
{
    char cerr[512], path[64];
    int fd = vt__tmpfile(cerr, sizeof cerr);
    if (fd < 0)
        return;
    const vt__pytorch_convert_opts opts = { .collect_min = 16 };
    int crc = vt__pytorch_convert(data, size, "fuzz", &opts, fd, cerr, sizeof cerr);
    if (crc < 0 && (crc != rc || strcmp(cerr, err))) {
        fprintf(stderr, "converter: %d %s; importer: %d %s\n", crc, cerr, rc, err);
        abort();
    }
    if (crc == 0) {
        vt__snapshot_data *back = NULL;
        void *a = NULL, *b = NULL;
        size_t na = 0, nb = 0;
        snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
        if (rc != 0 || vt__snapfile_read(path, &back, cerr, sizeof cerr) != 0 ||
            vt__snapfile_encode(s, &a, &na, cerr, sizeof cerr) != 0 ||
            vt__snapfile_encode(back, &b, &nb, cerr, sizeof cerr) != 0 || na != nb ||
            memcmp(a, b, na)) {
            fprintf(stderr, "converted, but not the importer's snapshot (%d %s)\n", rc, cerr);
            abort();
        }
        free(a);
        free(b);
        vt__snapshot_free(back);
    }
    close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    check_lookups(data, size);
    vt__snapshot_data *s = NULL;
    int rc = vt__pytorch_import(data, size, "fuzz", &s, err, sizeof err);
    check_convert(data, size, rc, err, s);
    if (rc != 0)
        return 0;
    vt__timeline *tl = NULL;
    if (vt__timeline_build(s, &tl, err, sizeof err) == 0)
        vt__timeline_free(tl);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f) {
        int rc = vt__pytorch_export(s, f, err, sizeof err);
        fclose(f);
        if (rc == 0) {
            /* what we write, we read back */
            vt__snapshot_data *back = NULL;
            if (vt__pytorch_import(buf, len, "fuzz-export", &back, err, sizeof err) != 0) {
                fprintf(stderr, "exported pickle not readable: %s\n", err);
                abort();
            }
            vt__snapshot_free(back);
        }
        free(buf);
    }
    vt__snapshot_free(s);
    return 0;
}
