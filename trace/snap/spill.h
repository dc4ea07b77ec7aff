/*
 * trace/snap/spill.h - byte streams kept in one temporary file instead of in
 * memory: what lets a converter hold data that grows with the events (their
 * columns, runs of them waiting to be merged) in a few fixed buffers.
 *
 * The file is unlinked from the start (O_TMPFILE, else mkstemp and unlink,
 * in $TMPDIR or /tmp): nothing is left behind when it is closed, whether the
 * work succeeded, failed or the process died. A chain is one stream in it:
 * bytes are appended through the chain's buffer and written out a chunk at
 * a time (chunks of several chains interleave in the file), then read back
 * chunk by chunk. A record asked for whole (vt__spill_room) never straddles
 * two chunks, so a reader parses each chunk on its own.
 */
#ifndef VT_TRACE_SPILL_H
#define VT_TRACE_SPILL_H

#include <stddef.h>
#include <stdint.h>

typedef struct vt__spill {
    int fd;                /* the unlinked file, -1 when closed */
    uint64_t end;          /* bytes written: where the next chunk goes */
    int err;               /* sticky: the first write error (-errno) */
} vt__spill;

typedef struct vt__spill_chain {
    vt__spill *sp;
    struct vt__spill_chunk { uint64_t off; size_t len; } *chunks;  /* in the file */
    size_t nchunks, cap;
    unsigned char *buf;    /* the bytes not written yet (NULL once flushed) */
    size_t n, size;        /* used, and the chunk size */
    uint64_t total;        /* bytes appended in all */
} vt__spill_chain;

/* An unlinked temporary file, open for reading and writing.
 * @return the descriptor, or a negative errno with one line in err. */
int vt__tmpfile(char *err, size_t errlen);

/* Write n bytes at offset off of fd. @return 0 or a negative errno. */
int vt__write_at(int fd, const void *p, size_t n, uint64_t off);

/* Open *sp on a new temporary file. @return 0 or a negative errno (err). */
int vt__spill_open(vt__spill *sp, char *err, size_t errlen);
/* Close it (the file goes with it). A closed or zeroed one is fine. */
void vt__spill_close(vt__spill *sp);

/* An empty chain of sp with chunks of `chunk` bytes (nothing allocated
 * until the first byte). @return 0. */
int vt__spill_chain_init(vt__spill_chain *c, vt__spill *sp, size_t chunk);
/* Room for n contiguous bytes at the chain's end: write them there, then
 * say how many with vt__spill_used. @return NULL on an error (-ENOMEM, the
 * file's: sp->err; or n over the chunk size). */
unsigned char *vt__spill_room(vt__spill_chain *c, size_t n);
static inline void vt__spill_used(vt__spill_chain *c, size_t n)
{
    c->n += n;
    c->total += n;
}
/* Append n bytes (any length). @return 0 or a negative errno. */
int vt__spill_put(vt__spill_chain *c, const void *p, size_t n);
/* Write out what is buffered and free the buffer (appending again makes a
 * new one). @return 0 or a negative errno. */
int vt__spill_flush(vt__spill_chain *c);
void vt__spill_chain_free(vt__spill_chain *c);

/* Reading a flushed chain back, chunk by chunk. */
typedef struct vt__spill_reader {
    const vt__spill_chain *c;
    size_t next;           /* the next chunk */
    unsigned char *buf;    /* the current chunk's bytes */
    size_t n;
} vt__spill_reader;

/* @return 0 or -ENOMEM. */
int vt__spill_reader_init(vt__spill_reader *r, const vt__spill_chain *c);
/* The next chunk into r->buf, r->n. @return 1, 0 after the last, or a
 * negative errno (a read error, a file that shrank: -EIO). */
int vt__spill_read_chunk(vt__spill_reader *r);
void vt__spill_reader_free(vt__spill_reader *r);

#endif /* VT_TRACE_SPILL_H */
