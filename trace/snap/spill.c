/*
 * trace/snap/spill.c - byte streams in an unlinked temporary file
 * (spill.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "errbuf.h"
#include "grow.h"
#include "spill.h"

int vt__tmpfile(char *err, size_t errlen)
{
    const char *dir = getenv("TMPDIR");
    if (!dir || !dir[0])
        dir = "/tmp";
    int fd = -1;
#ifdef O_TMPFILE
    fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
#endif
    if (fd < 0) {   /* a file system without O_TMPFILE: a name, unlinked at once */
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/vramtrace.XXXXXX", dir) >= (int)sizeof path)
            return vt__errf(err, errlen, -ENAMETOOLONG, "temporary directory %s: name too long",
                            dir);
        fd = mkostemp(path, O_CLOEXEC);
        if (fd >= 0)
            unlink(path);
    }
    if (fd < 0) {
        int rc = -errno;
        return vt__errf(err, errlen, rc, "cannot make a temporary file in %s: %s", dir,
                        strerror(-rc));
    }
    return fd;
}

int vt__spill_open(vt__spill *sp, char *err, size_t errlen)
{
    *sp = (vt__spill){ .fd = -1 };
    int fd = vt__tmpfile(err, errlen);
    if (fd < 0)
        return fd;
    sp->fd = fd;
    return 0;
}

void vt__spill_close(vt__spill *sp)
{
    if (sp->fd >= 0)
        close(sp->fd);
    sp->fd = -1;
}

int vt__write_at(int fd, const void *data, size_t n, uint64_t off)
{
    const unsigned char *p = data;
    while (n) {
        ssize_t w = pwrite(fd, p, n, (off_t)off);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return w < 0 ? -errno : -EIO;
        p += w;
        n -= (size_t)w;
        off += (uint64_t)w;
    }
    return 0;
}

int vt__spill_chain_init(vt__spill_chain *c, vt__spill *sp, size_t chunk)
{
    *c = (vt__spill_chain){ .sp = sp, .size = chunk };
    return 0;
}

int vt__spill_flush(vt__spill_chain *c)
{
    vt__spill *sp = c->sp;
    if (c->n) {
        if (sp->err)
            return sp->err;
        if (vt__grow((void **)&c->chunks, &c->cap, c->nchunks + 1, sizeof *c->chunks))
            return -ENOMEM;
        int rc = vt__write_at(sp->fd, c->buf, c->n, sp->end);
        if (rc)
            return sp->err = rc;
        c->chunks[c->nchunks++] = (struct vt__spill_chunk){ sp->end, c->n };
        sp->end += c->n;
        c->n = 0;
    }
    free(c->buf);
    c->buf = NULL;
    return 0;
}

unsigned char *vt__spill_room(vt__spill_chain *c, size_t n)
{
    if (n > c->size)
        return NULL;
    if (c->buf && c->size - c->n < n && vt__spill_flush(c))
        return NULL;
    if (!c->buf && !(c->buf = malloc(c->size)))
        return NULL;
    return c->buf + c->n;
}

int vt__spill_put(vt__spill_chain *c, const void *p, size_t n)
{
    const unsigned char *b = p;
    while (n) {
        size_t k = n < c->size ? n : c->size;
        unsigned char *at = vt__spill_room(c, k);
        if (!at)
            return c->sp->err ? c->sp->err : -ENOMEM;
        memcpy(at, b, k);
        vt__spill_used(c, k);
        b += k;
        n -= k;
    }
    return 0;
}

void vt__spill_chain_free(vt__spill_chain *c)
{
    free(c->chunks);
    free(c->buf);
    *c = (vt__spill_chain){ 0 };
}

int vt__spill_reader_init(vt__spill_reader *r, const vt__spill_chain *c)
{
    *r = (vt__spill_reader){ .c = c };
    r->buf = malloc(c->size ? c->size : 1);
    return r->buf ? 0 : -ENOMEM;
}

int vt__spill_read_chunk(vt__spill_reader *r)
{
    const vt__spill_chain *c = r->c;
    if (r->next >= c->nchunks)
        return 0;
    size_t len = c->chunks[r->next].len, got = 0;
    uint64_t off = c->chunks[r->next++].off;
    while (got < len) {
        ssize_t k = pread(c->sp->fd, r->buf + got, len - got, (off_t)(off + got));
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        got += (size_t)k;
    }
    r->n = len;
    return 1;
}

void vt__spill_reader_free(vt__spill_reader *r)
{
    free(r->buf);
    r->buf = NULL;
}
