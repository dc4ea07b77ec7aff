/* tests/hooks/hk_snapshot.h - a snapshot of the preloaded library's state,
 * taken and read back by a test running under the preload (vt_snapshot is
 * looked up by name: the tests never link vramtrace). Include after
 * harness.h; the caller frees the result with vt__snapshot_free(). */
#ifndef HK_SNAPSHOT_H
#define HK_SNAPSHOT_H

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "snapfile.h"

static inline vt__snapshot_data *hk_take_snapshot(void)
{
    char path[] = "/tmp/hk_snapXXXXXX";
    int fd = mkstemp(path);
    ASSERT(fd >= 0);
    close(fd);
    int (*snap)(const char *);
    void *p = dlsym(RTLD_DEFAULT, "vt_snapshot");
    ASSERT(p != NULL);
    memcpy(&snap, &p, sizeof p);
    ASSERT_EQ(snap(path), 0);
    vt__snapshot_data *sn = NULL;
    char err[256];
    int rc = vt__snapfile_read(path, &sn, err, sizeof err);
    unlink(path);
    ASSERT_MSG(rc == 0, "%s", err);
    return sn;
}

#endif /* HK_SNAPSHOT_H */
