/*
 * trace/interop/snapshot_load.c - the one entry point of every reading view: a
 * snapshot file of either kind, told apart by its content (a .vtsnap starts
 * with its magic, a PyTorch pickle with the PROTO opcode), never by its name.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pickle.h"
#include "pytorch.h"
#include "snapfile.h"

int vt_snapshot_load(const char *path, vt_snapshot_data **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return vt_snapfile_read(path, out, err, errlen); /* its message for the error */
    unsigned char head[2] = { 0, 0 };
    ssize_t got = read(fd, head, sizeof head);
    if (got != (ssize_t)sizeof head || !vt_pickle_sniff(head, sizeof head)) {
        close(fd);
        return vt_snapfile_read(path, out, err, errlen);
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        snprintf(err, errlen, "%s: not a regular file", path);
        return -EINVAL;
    }
    size_t size = (size_t)st.st_size, have = 0;
    unsigned char *buf = malloc(size ? size : 1);
    if (!buf) {
        close(fd);
        snprintf(err, errlen, "%s: out of memory (%zu bytes)", path, size);
        return -ENOMEM;
    }
    while (have < size) {
        ssize_t n = pread(fd, buf + have, size - have, (off_t)have);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int rc = -errno;
            snprintf(err, errlen, "%s: read error at byte offset %zu: %s", path, have,
                     strerror(-rc));
            free(buf);
            close(fd);
            return rc;
        }
        if (n == 0)
            break;
        have += (size_t)n;
    }
    close(fd);
    int rc = vt_pytorch_import(buf, have, path, out, err, errlen);
    free(buf);
    return rc;
}
