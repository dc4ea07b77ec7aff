/*
 * trace/snap/snapfile_missing.c - what to say of a snapshot file that is not
 * there.
 *
 * Where a run's processes each write a snapshot (`vramtrace run -o run.vtsnap`
 * with spawned workers or ranks, OOM and signal snapshots), each file takes
 * the name with a tag added before its extension: run-12345.vtsnap,
 * run-rank1-12345.vtsnap, run-12345-oom-1.vtsnap. A user who then asks for
 * run.vtsnap got only "No such file or directory"; the message now names the
 * files beside it that carry such a tag.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "snapfile.h"

#define HINT_NAMES 4   /* named; the rest counted */

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void vt__snapfile_missing_hint(const char *path, char *err, size_t errlen)
{
    size_t used = strlen(err);
    if (used + 1 >= errlen)
        return;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    char dir[4096];
    if (slash) {
        size_t n = (size_t)(slash - path);
        if (n >= sizeof dir)
            return;
        memcpy(dir, path, n);
        dir[n] = '\0';
        if (n == 0)
            strcpy(dir, "/");
    } else {
        strcpy(dir, ".");
    }
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    const char *ext = dot && dot != base ? dot : "";
    if (stem == 0)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    char **names = NULL;
    size_t count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *name = e->d_name;
        size_t len = strlen(name), elen = strlen(ext);
        /* STEM-TAG.EXT, the tag beginning with a digit or "rank" */
        if (len <= stem + 1 + elen || strncmp(name, base, stem) != 0 || name[stem] != '-' ||
            strcmp(name + len - elen, ext) != 0)
            continue;
        const char *tag = name + stem + 1;
        if (!(tag[0] >= '0' && tag[0] <= '9') && strncmp(tag, "rank", 4) != 0)
            continue;
        if (count == cap) {
            size_t ncap = cap ? 2 * cap : 8;
            char **grown = realloc(names, ncap * sizeof *names);
            if (!grown)
                break;
            names = grown;
            cap = ncap;
        }
        if ((names[count] = strdup(name)) == NULL)
            break;
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
