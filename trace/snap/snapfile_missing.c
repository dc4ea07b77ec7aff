/*
 * trace/snap/snapfile_missing.c - opening a snapshot file to read, and what
 * to say of one that is not there.
 *
 * Where a run's processes each write a snapshot (`vramtrace run -o run.vtsnap`
 * with spawned workers or ranks, OOM and signal snapshots), each file takes
 * the name with a tag added before its extension: run-12345.vtsnap,
 * run-rank1-12345.vtsnap, run-12345-oom-1.vtsnap. A user who then asks for
 * run.vtsnap got only "No such file or directory"; the message now names the
 * files beside it that carry such a tag.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "grow.h"
#include "path_split.h"
#include "snapfile.h"

#define HINT_NAMES 4   /* named; the rest counted */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Whether `name` is STEM-TAG.EXT, the tag a pid, a rank or "rank..." */
static int tagged(const char *name, const char *stem, size_t stemlen, const char *ext)
{
    size_t len = strlen(name), elen = strlen(ext);
    if (len <= stemlen + 1 + elen || strncmp(name, stem, stemlen) != 0 ||
        name[stemlen] != '-' || strcmp(name + len - elen, ext) != 0)
        return 0;
    const char *tag = name + stemlen + 1;
    return (tag[0] >= '0' && tag[0] <= '9') || strncmp(tag, "rank", 4) == 0;
}

static void missing_hint(const char *path, char *err, size_t errlen)
{
    if (!err || !errlen)   /* no message wanted (errbuf.h) */
        return;
    size_t used = strlen(err);
    char dir[PATH_MAX];
    const char *base;
    vt__path_split(path, dir, sizeof dir, &base);
    const char *dot = strrchr(base, '.');
    size_t stemlen = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    const char *ext = dot && dot != base ? dot : "";
    DIR *d = stemlen && used + 1 < errlen ? opendir(dir) : NULL;
    if (!d)
        return;
    char **names = NULL;
    size_t count = 0, cap = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        if (!tagged(e->d_name, base, stemlen, ext) ||
            vt__grow((void **)&names, &cap, count + 1, sizeof *names) != 0 ||
            (names[count] = strdup(e->d_name)) == NULL)
            continue;
        count++;
    }
    closedir(d);
    if (count) {
        qsort(names, count, sizeof *names, by_name);
        int w = snprintf(err + used, errlen - used, "; beside it, one per process of a run: ");
        for (size_t i = 0; i < count && i < HINT_NAMES && w > 0; i++) {
            used += (size_t)w;
            if (used >= errlen)
                break;
            w = snprintf(err + used, errlen - used, "%s%s", i ? ", " : "", names[i]);
        }
        if (w > 0 && (used += (size_t)w) < errlen && count > HINT_NAMES)
            snprintf(err + used, errlen - used, " and %zu more", count - HINT_NAMES);
    }
    for (size_t i = 0; i < count; i++)
        free(names[i]);
    free(names);
}

int vt__snapfile_open_read(const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0)
        return fd;
    int rc = vt__errf_in(err, errlen, -errno, path, "cannot open: %s", strerror(errno));
    if (rc == -ENOENT)
        missing_hint(path, err, errlen);
    return rc;
}
