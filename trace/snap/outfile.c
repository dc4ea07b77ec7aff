/*
 * trace/snap/outfile.c - a temporary file renamed into place, and only over a
 * regular file (rules in outfile.h).
 *
 * rename() replaces whatever the target is: run as root, `-o /dev/null`
 * replaced the machine's /dev/null with a snapshot. The target is checked with
 * lstat() before the temporary file is made and again right before the
 * rename, so a special file is never touched.
 */
#include "errbuf.h"
#include "outfile.h"
#include "path_split.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* A temporary file whose writer is gone is swept once it is this old: a
 * writer on another host sharing the directory (same pid, other machine)
 * keeps touching its file while it writes. */
#define STALE_AFTER_S 60

static const char *kind_of(mode_t m)
{
    static const struct {
        mode_t type;
        const char *name;
    } kinds[] = {
        { S_IFDIR, "a directory" },   { S_IFCHR, "a character device" },
        { S_IFBLK, "a block device" }, { S_IFIFO, "a FIFO" },
        { S_IFSOCK, "a socket" },      { S_IFLNK, "a symbolic link" },
    };
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++)
        if ((m & S_IFMT) == kinds[i].type)
            return kinds[i].name;
    return "not a regular file";
}

int vt__outfile_check(const char *path, char *err, size_t errlen)
{
    struct stat st;
    if (!path || !*path)
        return vt__errf(err, errlen, -EINVAL, "no output path");
    if (lstat(path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        int rc = -errno;
        return vt__errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    if (S_ISREG(st.st_mode))
        return 0;
    return vt__errf(err, errlen, S_ISDIR(st.st_mode) ? -EISDIR : -EEXIST,
                "%s is %s, not a regular file: not replaced%s", path, kind_of(st.st_mode),
                S_ISLNK(st.st_mode) ? " (give the path it points to)" : "");
}

/* Remove BASE.tmp.PID files in `dir` whose process is gone and that have
 * not changed for STALE_AFTER_S. Best effort: errors are ignored. */
static void sweep_stale(const char *dir, const char *base)
{
    size_t bl = strlen(base);
    DIR *d = opendir(dir);
    if (!d)
        return;
    time_t now = time(NULL);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        const char *n = e->d_name;
        if (strncmp(n, base, bl) != 0 || strncmp(n + bl, ".tmp.", 5) != 0)
            continue;
        const char *digits = n + bl + 5;
        char *end;
        long pid = strtol(digits, &end, 10);
        if (end == digits || *end != '\0' || pid <= 0 || pid > INT_MAX)
            continue;
        if (pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        struct stat st;
        if (fstatat(dirfd(d), n, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)
            || now - st.st_mtime < STALE_AFTER_S)
            continue;
        unlinkat(dirfd(d), n, 0);
    }
    closedir(d);
}

int vt__outfile_create(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen)
{
    int rc = vt__outfile_check(path, err, errlen);
    if (rc)
        return rc;
    if ((size_t)snprintf(tmp, tmplen, "%s.tmp.%ld", path, (long)getpid()) >= tmplen)
        return vt__errf(err, errlen, -ENAMETOOLONG, "cannot write %s: path too long", path);
    char dir[PATH_MAX];
    const char *base;
    vt__path_split(path, dir, sizeof dir, &base);
    sweep_stale(dir, base);
    for (int attempt = 0;; attempt++) {
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd >= 0)
            return fd;
        rc = -errno;
        /* Our own pid's leftover (an earlier image of this process, killed
         * during a write): ours to replace. */
        if (rc == -EEXIST && attempt == 0) {
            struct stat st;
            if (lstat(tmp, &st) == 0 && S_ISREG(st.st_mode) && unlink(tmp) == 0)
                continue;
        }
        return vt__errf(err, errlen, rc, "cannot create %s: %s", tmp, strerror(-rc));
    }
}

int vt__outfile_commit(const char *tmp, const char *path, int flags, char *err, size_t errlen)
{
    int rc = vt__outfile_check(path, err, errlen);
    if (rc == 0 && (flags & VT_OUTFILE_NO_REPLACE)) {
        /* link() never replaces: the name is taken atomically or not at all. */
        if (link(tmp, path) != 0) {
            rc = -errno;
            /* no hard links on this file system: checked, then renamed */
            if ((rc == -EPERM || rc == -EOPNOTSUPP || rc == -ENOSYS))
                rc = access(path, F_OK) == 0 ? -EEXIST : rename(tmp, path) == 0 ? 0 : -errno;
            if (rc)
                vt__errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
        }
        unlink(tmp);
    } else if (rc == 0 && rename(tmp, path) != 0) {
        rc = -errno;
        vt__errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    }
    if (rc) {
        unlink(tmp);
        return rc;
    }
    char dir[PATH_MAX];
    const char *base;
    vt__path_split(path, dir, sizeof dir, &base);
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return 0;
}

FILE *vt__outfile_open(const char *path, char *tmp, size_t tmplen, char *err, size_t errlen)
{
    int fd = vt__outfile_create(path, tmp, tmplen, err, errlen);
    if (fd < 0)
        return NULL;
    FILE *f = fdopen(fd, "wb");
    if (!f) {
        vt__errf(err, errlen, -errno, "cannot write %s: %s", tmp, strerror(errno));
        close(fd);
        unlink(tmp);
        return NULL;
    }
    setvbuf(f, NULL, _IOFBF, 1 << 16);
    return f;
}

int vt__outfile_close(FILE *f, int ok, const char *tmp, const char *path, int flags, char *err,
                      size_t errlen)
{
    int bad = ferror(f);
    int rc = fclose(f) != 0 ? -errno : bad ? -EIO : 0;
    if (rc && ok)
        vt__errf(err, errlen, rc, "cannot write %s: %s", path, strerror(-rc));
    if (rc || !ok) {
        unlink(tmp);
        return rc ? rc : -ECANCELED;   /* the writer's own message stands */
    }
    return vt__outfile_commit(tmp, path, flags, err, errlen);
}
