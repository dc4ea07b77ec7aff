/* trace/common/path_split.h - a path's folder ("." when none, "/" for the
 * root) into dir, and its last component (a pointer into path). The folder
 * is cut at dirlen. Header-only. */
#ifndef VT_COMMON_PATH_SPLIT_H
#define VT_COMMON_PATH_SPLIT_H

#include <stdio.h>
#include <string.h>

static inline void vt__path_split(const char *path, char *dir, size_t dirlen, const char **base)
{
    const char *slash = strrchr(path, '/');
    if (!slash) {
        snprintf(dir, dirlen, ".");
        *base = path;
    } else if (slash == path) {
        snprintf(dir, dirlen, "/");
        *base = slash + 1;
    } else {
        snprintf(dir, dirlen, "%.*s", (int)(slash - path), path);
        *base = slash + 1;
    }
}

#endif
