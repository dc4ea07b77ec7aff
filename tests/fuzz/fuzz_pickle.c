/*
 * tests/fuzz/fuzz_pickle.c - libFuzzer target for the safe pickle reader and
 * the PyTorch snapshot importer, then the timeline and the PyTorch exporter
 * on whatever the importer accepts (and the exporter's output read back).
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

#include "pickle.h"
#include "pytorch.h"
#include "timeline.h"

/* The last binding of str key `k` (`n` bytes) in `dict`, by a scan. */
static const vt__pv *scan(const vt__pickle *p, const vt__pv_container *c, const char *k, size_t n)
{
    const vt__pv *found = NULL;
    for (uint32_t i = 0; i + 1 < c->n; i += 2) {
        const vt__pv *kv = &p->values[c->items[i]];
        if (kv->type == VT_PV_STR && kv->n == n && (!n || !memcmp(kv->s, k, n)))
            found = &p->values[c->items[i + 1]];
    }
    return found;
}

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
            if (vt__pickle_get(p, d, key) != scan(p, c, key, kv->n))
                abort();
        }
        if (vt__pickle_get(p, d, "no such key") != scan(p, c, "no such key", 11))
            abort();
    }
    vt__pickle_free(p);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    check_lookups(data, size);
    vt__snapshot_data *s = NULL;
    if (vt__pytorch_import(data, size, "fuzz", &s, err, sizeof err) != 0)
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
