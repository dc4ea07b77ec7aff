/*
 * trace/snap/snapfile_reader.h - the reader's state, shared by the whole-file
 * reader (snapfile_read.c) and the event stream (event_stream.c), which
 * decode the same bytes with the same checks and the same messages (not
 * part of the snapfile.h contract).
 */
#ifndef VT_TRACE_SNAPFILE_READER_H
#define VT_TRACE_SNAPFILE_READER_H

#include <stddef.h>
#include <stdint.h>

#include "buf.h"
#include "errbuf.h"
#include "snapfile_encode.h"
#include "snapshot.h"

/* Fuzz builds skip the checksums, so that mutated inputs reach the decoders
 * behind them (the libFuzzer convention; tests/fuzz/run_fuzz.sh sets it). */
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
#define FUZZING 1
#else
#define FUZZING 0
#endif

#define NKNOWN 10
/* Section names for messages, by section id ("?" for 0). */
extern const char *const vt__section_names[NKNOWN + 1];

struct entry {
    uint32_t id, flags;
    uint64_t offset, stored, raw, count;
    uint32_t crc;
    int present;
};

struct rd {
    const char *name;
    char *err;
    size_t errlen;
    const unsigned char *data;      /* the whole file (but see events_streamed) */
    size_t size;
    unsigned major, minor;
    struct entry sec[NKNOWN + 1];   /* by section id */
    vt__snapshot_data *s;
    int events_streamed;            /* the EVENTS section's stored bytes are not in
                                       data: event_stream.c reads them */
    /* current section, for messages about its decompressed bytes */
    const char *cur_name;
    uint64_t cur_offset;
};

/* A malformed file: "NAME: message", -EINVAL. */
#define rfail(r, ...) vt__errf_in((r)->err, (r)->errlen, -EINVAL, (r)->name, __VA_ARGS__)

/* An error inside the decompressed bytes of the current section. */
#define SFAIL(r, off, fmt, ...)                                                          \
    rfail(r, "section '%s' (at byte offset %llu), byte %llu of its decoded data: " fmt, \
          (r)->cur_name, (unsigned long long)(r)->cur_offset, (unsigned long long)(off),  \
          __VA_ARGS__)

/* The header and the section table of r->data. @return 0 or -EINVAL. */
int vt__rd_parse_header(struct rd *r);

/* Every section into a new r->s (events too unless r->events_streamed).
 * @return 0 or a negative errno (r->s then freed and NULL). */
int vt__rd_decode_sections(struct rd *r);

/* The checks of section `id`'s table entry that need none of its bytes:
 * its declared sizes against its count and the compression ratio. Sets the
 * current section for messages. @return 0 or -EINVAL. */
int vt__rd_check_sizes(struct rd *r, int id);

/* The EVENTS section's layout: its header parsed and checked. */
struct vt__evcols {
    uint64_t n;                     /* events */
    size_t off[VT_COL_COUNT];       /* where each known column starts in the section */
    uint64_t len[VT_COL_COUNT];     /* its bytes */
};

/* Parse the EVENTS header from `head` (the section's first `nhead` bytes of
 * `raw_size`; nhead >= min(raw_size, VT_MAX_EVENTS_HEADER_BYTES)).
 * @return 0 or -EINVAL with the message a whole-section read gives. */
int vt__rd_events_layout(struct rd *r, const unsigned char *head, size_t nhead, size_t raw_size,
                         struct vt__evcols *out);

/* What decoding one event needs from the ones before it. */
struct vt__evstate {
    uint64_t next_seq, time;
    int64_t thread;
    uint64_t streams[VT_MTF_STREAMS], sizes[VT_MTF_SIZES];
    uint64_t last_addr[256];
};

/* Decode event i into *e. col[c] is a cursor on column c positioned at the
 * event's field, base[c] the section offset of col[c].start (for
 * messages). A cursor's reads must not run out before its column does: the
 * stream keeps a whole varint (10 bytes) ahead, or the column's end.
 * @return 0 or -EINVAL. */
int vt__rd_event(struct rd *r, struct vt__evstate *st, vt__cur *col, const size_t *base,
                 size_t i, vt__event *e);

/* After the last event: every column consumed exactly (to the end `lay`
 * gives it, which a stream's cursor need not hold yet), none malformed.
 * @return 0 or -EINVAL. */
int vt__rd_events_end(struct rd *r, const vt__cur *col, const size_t *base,
                      const struct vt__evcols *lay);

#endif /* VT_TRACE_SNAPFILE_READER_H */
