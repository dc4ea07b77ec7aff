/* tests/common/streamed_vs_whole.h - what the tests of a view read as a
 * stream share (tests/viz/test_render_stream.c, tests/interop/
 * test_export_stream.c and test_compare_stream.c, tests/replay/
 * test_replay_stream.c): each writes its snapshots to a file of its own,
 * makes gen_snapshot's shapes, and asks that the streamed output be the
 * whole snapshot's byte for byte. */
#ifndef VT_TESTS_STREAMED_VS_WHOLE_H
#define VT_TESTS_STREAMED_VS_WHOLE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "snapfile.h"

/* s written to DIR/s.vtsnap in a new directory /tmp/vt-test-TAG-XXXXXX
 * (dir: 64 bytes); the caller unlinks path and removes dir. */
static inline void svw_write_snapshot(const vt__snapshot_data *s, const char *tag, char *dir,
                                      char *path, size_t len)
{
    char err[512];
    snprintf(dir, 64, "/tmp/vt-test-%s-XXXXXX", tag);
    ASSERT(mkdtemp(dir) != NULL);
    snprintf(path, len, "%s/s.vtsnap", dir);
    ASSERT_MSG(vt__snapfile_write(s, path, err, sizeof err) == 0, "%s", err);
}

/* gen_snapshot (VT_GEN, set by meson test) writes shape `kind` to path; the
 * "big" shape with `big` events. */
static inline void svw_gen_shape(const char *kind, const char *path, unsigned long big)
{
    const char *gen = getenv("VT_GEN");
    ASSERT_MSG(gen && gen[0], "VT_GEN is not set (run through meson test)");
    char cmd[512], n[32] = "";
    if (!strcmp(kind, "big"))
        snprintf(n, sizeof n, "%lu", big);
    snprintf(cmd, sizeof cmd, "'%s' %s '%s' %s >/dev/null", gen, kind, path, n);
    ASSERT_MSG(system(cmd) == 0, "%s", cmd);
}

/* The whole snapshot's output w and the streamed one c, byte for byte;
 * else where they part, with some of either around it. `thing`: what they
 * are ("page", "export", "report"). */
static inline void svw_same_bytes(const char *w, size_t nw, const char *c, size_t nc,
                                  const char *what, const char *thing)
{
    size_t i = 0;
    while (i < nw && i < nc && w[i] == c[i])
        i++;
    if (i == nw && i == nc)
        return;
    size_t from = i > 120 ? i - 120 : 0;
    ASSERT_MSG(0, "%s: the streamed %s parts from the whole one at byte %zu of %zu/%zu\n"
               "--- whole:    %.400s\n--- streamed: %.400s", what, thing, i, nw, nc, w + from,
               c + from);
}

#endif /* VT_TESTS_STREAMED_VS_WHOLE_H */
