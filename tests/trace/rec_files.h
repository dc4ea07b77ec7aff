/* tests/trace/rec_files.h - what the recorder's tests share to look at the
 * snapshots a process wrote by itself: a fresh folder, its files, whether a
 * file holds a mark, the name VRAMTRACE_OUT gives a process, a child's end. */
#ifndef VT_TESTS_TRACE_REC_FILES_H
#define VT_TESTS_TRACE_REC_FILES_H

#include <dirent.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../harness.h"
#include "snapfile.h"

static inline void make_tmpdir(char *dir, size_t len)
{
    snprintf(dir, len, "/tmp/vt-rec-XXXXXX");
    ASSERT(mkdtemp(dir) != NULL);
}

/* Remove everything in dir, then dir. */
static inline void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")
            && unlinkat(dirfd(d), e->d_name, 0) != 0)
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    closedir(d);
    rmdir(dir);
}

static inline int count_files(const char *dir)
{
    int n = 0;
    DIR *d = opendir(dir);
    ASSERT(d != NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* 1 if `path` reads back and holds a MARK `label`, 0 if not, -1 unreadable. */
static inline int has_mark(const char *path, const char *label)
{
    vt__snapshot_data *s = NULL;
    char err[512];
    if (vt__snapfile_read(path, &s, err, sizeof err) != 0)
        return -1;
    int found = 0;
    for (size_t i = 0; i < s->nevents; i++)
        if (s->events[i].kind == VT_EV_MARK && !strcmp(vt__snapshot_string(s, s->events[i].str), label))
            found = 1;
    vt__snapshot_free(s);
    return found;
}

/* VRAMTRACE_OUT (a pattern with %p) for process `pid`, with `suffix` put
 * before ".vtsnap". */
static inline void out_for(pid_t pid, const char *suffix, char *path, size_t len)
{
    const char *out = getenv("VRAMTRACE_OUT");
    ASSERT(out && strstr(out, "%p") && strstr(out, ".vtsnap"));
    const char *p = strstr(out, "%p");
    snprintf(path, len, "%.*s%d%.*s%s.vtsnap", (int)(p - out), out, (int)pid,
             (int)(strstr(out, ".vtsnap") - p - 2), p + 2, suffix);
}

static inline int wait_child(pid_t pid)
{
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    return status;
}

/* VRAMTRACE_OUT = dir/name: a pattern (%p, %t, ... are the recorder's). */
static inline void set_out(const char *dir, const char *name)
{
    char out[512];
    snprintf(out, sizeof out, "%s/%s", dir, name);
    ASSERT_EQ(setenv("VRAMTRACE_OUT", out, 1), 0);
}

/* A fresh folder in dir, where VRAMTRACE_OUT = dir/name puts the snapshots;
 * remove_out_dir() takes both away. */
static inline void out_in_fresh_dir(char *dir, size_t len, const char *name)
{
    make_tmpdir(dir, len);
    set_out(dir, name);
}

static inline void remove_out_dir(const char *dir)
{
    remove_tree(dir);
    unsetenv("VRAMTRACE_OUT");
}

/* The snapshot VRAMTRACE_OUT names for process `pid` (`suffix` before
 * ".vtsnap") holds a MARK `label`; then it is removed. */
static inline void assert_marked_and_remove(pid_t pid, const char *suffix, const char *label)
{
    char path[600];
    out_for(pid, suffix, path, sizeof path);
    ASSERT_MSG(has_mark(path, label) == 1, "%s: no readable snapshot with the mark '%s'",
               path, label);
    unlink(path);
}

#endif /* VT_TESTS_TRACE_REC_FILES_H */
