/*
 * trace/interop/pickle.h - a safe reader of Python pickles made of plain data, and a
 * writer of the same.
 *
 * A pickle is a program for a stack machine that may import any global and
 * call it: a general unpickler runs code chosen by whoever wrote the file. This
 * reader runs only the opcodes that build plain containers and scalars
 * (protocols 2 to 5: dict, list, tuple, set, str, bytes, int of any width that
 * fits 64 bits, float, bool, None, memo and frame opcodes) and rejects every
 * opcode that names a global or calls a constructor (GLOBAL, STACK_GLOBAL,
 * REDUCE, BUILD, INST, OBJ, NEWOBJ, NEWOBJ_EX, PERSID, BINPERSID, EXT1/2/4,
 * buffers) with one message naming the opcode and its byte offset.
 *
 * The result is a value graph stored in two flat arrays (values and
 * container items) addressed by index: no pointer chasing, no recursion to
 * build or free it. Strings and bytes point into the caller's buffer (which
 * must outlive the result). Memory is bounded: every opcode adds at most one
 * value and one item, so the graph holds at most about 24 bytes per input
 * byte, usually far less. Note that memo references can make a container
 * contain itself: walkers of the graph must bound their depth (the PyTorch
 * importer walks a fixed shape and never recurses on data). Memo references
 * can also make one large dict appear many times: a lookup in a dict of more
 * than a few pairs is a binary search over its keys, sorted once after the
 * parse, so the work of a walk stays near linear in the input.
 */
#ifndef VT_TRACE_PICKLE_H
#define VT_TRACE_PICKLE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum vt__pv_type {
    VT_PV_NONE,
    VT_PV_BOOL,     /* i = 0/1 */
    VT_PV_INT,      /* i */
    VT_PV_UINT,     /* u: an int in [2^63, 2^64) */
    VT_PV_BIGINT,   /* an int beyond 64 bits: kept, but has no value */
    VT_PV_FLOAT,    /* f */
    VT_PV_STR,      /* s, n bytes of UTF-8 (not NUL-terminated) */
    VT_PV_BYTES,    /* s, n bytes */
    VT_PV_LIST,     /* n items from items[first] (also sets) */
    VT_PV_TUPLE,    /* n items */
    VT_PV_DICT,     /* n pairs: items[first + 2k] key, items[first + 2k + 1] value */
};

typedef struct vt__pv {
    uint8_t type;          /* enum vt__pv_type */
    uint32_t n;            /* STR/BYTES length, container item count (pairs for DICT) */
    union {
        int64_t i;
        uint64_t u;
        double f;
        const char *s;     /* into the input buffer */
        uint32_t container;/* index into vt__pickle.containers */
    };
} vt__pv;

/* A container's items live in their own growable array (lists grow by
 * APPENDS after they are created and memoized). */
typedef struct vt__pv_container {
    uint32_t *items;       /* value indexes */
    uint32_t n, cap;       /* n counts uint32 slots (2 per dict pair) */
    uint32_t *keys;        /* a large dict's str keys: pair numbers, sorted, last binding only */
    uint32_t nkeys;
} vt__pv_container;

typedef struct vt__pickle {
    vt__pv *values;                 size_t nvalues;
    vt__pv_container *containers;   size_t ncontainers;
    uint32_t root;                 /* index of the value STOP returned */
    int protocol;                  /* from PROTO, 0 when absent */
} vt__pickle;

/* Does `data` look like a pickle (PROTO opcode 0x80 with protocol 2..5)? */
int vt__pickle_sniff(const void *data, size_t size);

/* Parse a pickle held in `data` (which must outlive *out).
 * @return 0 and *out (free with vt__pickle_free), or a negative errno with a
 *         one-line message in err naming `name`, the opcode and the byte
 *         offset ("refusing to run code" for opcodes that name globals). */
int vt__pickle_parse(const void *data, size_t size, const char *name, vt__pickle **out,
                     char *err, size_t errlen);

void vt__pickle_free(vt__pickle *p);

/* A parse that streams the bulk of a pickle instead of keeping it: the
 * items appended to a list that is an item of the list bound to `key` in
 * the top-level dict (PyTorch's device_traces[d][i]) are handed to `take` as
 * each batch is appended (Python's pickler appends up to 1000 at a time), then
 * dropped with everything they hold, so that the graph holds one batch of
 * them at a time. An item that a memo GET reads again, or one a pickle does
 * not build in the pickler's way, is kept in its list as usual instead; a
 * pickle the first walk over its opcodes cannot follow is parsed whole. */
typedef struct vt__pickle_sink {
    const char *key;
    /* `item` (a dict) is appended to `list` (both value indexes); it and
     * all it holds are gone once this returns (read what is needed now).
     * @return 0, or a negative errno with one line in the parse's err. */
    int (*take)(void *ctx, const vt__pickle *p, uint32_t list, uint32_t item);
    void *ctx;
    /* Optional: a walk over the input reached byte `offset` (said every few
     * MiB; the parse walks the input twice, each time from 0). Bytes before
     * it are read again only where a value points into them (str, bytes):
     * a caller that mapped the file may let the kernel drop their pages. */
    void (*passed)(void *ctx, size_t offset);
    /* Optional: with it, the parse also drops the values that nothing can
     * reach any more (a memoized value after the last GET that reads it:
     * entries that share their frames through the memo), and the values
     * left move: value v is now newidx[v] (UINT32_MAX: gone), for v < n.
     * A sink that keeps value indexes (the `list` of take) moves them. */
    void (*moved)(void *ctx, const uint32_t *newidx, size_t n);
    /* 0: the defaults, passed every 8 MiB, values collected from 64 Ki on
     * (then each time they doubled); tests make them small. */
    size_t passed_every, collect_min;
} vt__pickle_sink;

/* vt__pickle_parse with a sink (NULL: the same as vt__pickle_parse). */
int vt__pickle_parse_sink(const void *data, size_t size, const char *name,
                          const vt__pickle_sink *sink, vt__pickle **out, char *err, size_t errlen);

/* Accessors that never fail: a wrong type or index yields NULL / 0. */
const vt__pv *vt__pickle_value(const vt__pickle *p, uint32_t index);
/* The value of key `key` (a str) in dict `dict`, or NULL. */
const vt__pv *vt__pickle_get(const vt__pickle *p, const vt__pv *dict, const char *key);
/* The last binding of str key `key` (`n` bytes) among dict container c's
 * pairs, by a scan, as Python reads it, or NULL: vt__pickle_get's lookup of
 * a dict without a sorted index, and what the fuzz target checks the
 * index's answers against. */
const vt__pv *vt__pickle_scan(const vt__pickle *p, const vt__pv_container *c, const char *key,
                              size_t n);
/* Item k of a list/tuple, or NULL. */
const vt__pv *vt__pickle_item(const vt__pickle *p, const vt__pv *seq, size_t k);
/* Integer value (bool, int, uint, float truncated), `dflt` when not a number. */
int64_t vt__pickle_int(const vt__pv *v, int64_t dflt);
uint64_t vt__pickle_u64(const vt__pv *v, uint64_t dflt);
/* Is v a str equal to `text`? */
int vt__pickle_str_is(const vt__pv *v, const char *text);

/* ---- writing (protocol 4, plain containers only) ---------------------- */

/* A growable output buffer with a memo of the strings written so far, so
 * repeated keys and frame names cost two bytes (BINGET) after the first. */
typedef struct vt__pickle_writer vt__pickle_writer;

vt__pickle_writer *vt__pickle_writer_new(void);
void vt__pickle_writer_free(vt__pickle_writer *w);
/* Start (PROTO 4) and end (STOP); then the bytes are w's buffer. */
void vt__pw_begin(vt__pickle_writer *w);
void vt__pw_end(vt__pickle_writer *w);
void vt__pw_bool(vt__pickle_writer *w, int b);
void vt__pw_int(vt__pickle_writer *w, int64_t v);
void vt__pw_uint(vt__pickle_writer *w, uint64_t v);
void vt__pw_str(vt__pickle_writer *w, const char *s);     /* memoized */
/* Containers: open, write items (dicts: key then value), close. */
void vt__pw_dict_begin(vt__pickle_writer *w);
void vt__pw_dict_end(vt__pickle_writer *w);
void vt__pw_list_begin(vt__pickle_writer *w);
void vt__pw_list_end(vt__pickle_writer *w);
void vt__pw_tuple_begin(vt__pickle_writer *w);
void vt__pw_tuple_end(vt__pickle_writer *w);
/* Write out the bytes buffered so far, when they are at least `at_least`,
 * and forget them (a writer that streams its pickle: the memo of strings
 * stays, so its memory is the strings', not the pickle's). vt__pw_data then
 * has only what came after. @return 0, -ENOMEM (memory ran out at some
 * point) or -EIO. */
int vt__pw_flush(vt__pickle_writer *w, FILE *out, size_t at_least);
/* The bytes written; NULL when memory ran out at some point. */
const unsigned char *vt__pw_data(const vt__pickle_writer *w, size_t *size);

#endif /* VT_TRACE_PICKLE_H */
