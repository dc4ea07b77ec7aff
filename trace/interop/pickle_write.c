/*
 * trace/interop/pickle_write.c - a protocol-4 pickle writer of plain containers (see
 * pickle.h). What it writes is what Python's own pickler writes for dicts,
 * lists, tuples, str, int, float, bool and None, so any unpickler (Python's,
 * PyTorch's MemoryViz.js, ours) reads it. Strings are memoized: the keys of a
 * million trace entries cost two bytes each after the first.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
#include "json_str.h"
#include "pickle.h"

struct memo_slot {
    uint64_t hash;
    char *text;              /* owned copy, NULL = empty slot */
    uint32_t id;             /* memo id */
};

struct vt__pickle_writer {
    vt__buf out;             /* the pickle; out.oom: something failed */
    struct memo_slot *slots;
    size_t nslots, nused;
    uint32_t next_memo;
};

vt__pickle_writer *vt__pickle_writer_new(void)
{
    return calloc(1, sizeof(vt__pickle_writer));
}

void vt__pickle_writer_free(vt__pickle_writer *w)
{
    if (!w)
        return;
    for (size_t i = 0; i < w->nslots; i++)
        free(w->slots[i].text);
    free(w->slots);
    vt__buf_free(&w->out);
    free(w);
}

static void put(vt__pickle_writer *w, const void *p, size_t n) { vt__put_bytes(&w->out, p, n); }
static void put1(vt__pickle_writer *w, unsigned char c) { vt__put_u8(&w->out, c); }

void vt__pw_begin(vt__pickle_writer *w)
{
    put1(w, 0x80); /* PROTO 4 */
    put1(w, 4);
}

void vt__pw_end(vt__pickle_writer *w) { put1(w, '.'); }
void vt__pw_bool(vt__pickle_writer *w, int b) { put1(w, b ? 0x88 : 0x89); }

void vt__pw_int(vt__pickle_writer *w, int64_t v)
{
    if (v >= 0 && v < 256) {
        put1(w, 'K');
        put1(w, (unsigned char)v);
    } else if (v >= 0 && v < 65536) {
        put1(w, 'M');
        vt__put_le(&w->out, (uint64_t)v, 2);
    } else if (v >= INT32_MIN && v <= INT32_MAX) {
        put1(w, 'J');
        vt__put_le(&w->out, (uint64_t)v, 4);
    } else {
        /* LONG1: shortest little-endian two's complement */
        unsigned char n = 8;
        while (n > 1) {
            int64_t top = v >> (8 * (n - 1) - 1); /* the bits the dropped byte would hold */
            if (top != 0 && top != -1)
                break;
            n--;
        }
        put1(w, 0x8a);
        put1(w, n);
        vt__put_le(&w->out, (uint64_t)v, n);
    }
}

void vt__pw_uint(vt__pickle_writer *w, uint64_t v)
{
    if (v <= INT64_MAX) {
        vt__pw_int(w, (int64_t)v);
        return;
    }
    put1(w, 0x8a); /* 9 bytes: a zero byte keeps it positive */
    put1(w, 9);
    vt__put_le(&w->out, v, 8);
    put1(w, 0);
}

static uint64_t hash_str(const char *s, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static struct memo_slot *memo_find(vt__pickle_writer *w, const char *s, size_t n, uint64_t h)
{
    if (!w->nslots)
        return NULL;
    for (size_t i = h & (w->nslots - 1);; i = (i + 1) & (w->nslots - 1)) {
        struct memo_slot *sl = &w->slots[i];
        if (!sl->text || (sl->hash == h && !strncmp(sl->text, s, n) && !sl->text[n]))
            return sl;
    }
}

static int memo_grow(vt__pickle_writer *w)
{
    size_t n = w->nslots ? w->nslots * 2 : 1024;
    struct memo_slot *old = w->slots;
    size_t nold = w->nslots;
    w->slots = calloc(n, sizeof *w->slots);
    if (!w->slots) {
        w->slots = old;
        return -1;
    }
    w->nslots = n;
    for (size_t i = 0; i < nold; i++) {
        if (!old[i].text)
            continue;
        struct memo_slot *sl = memo_find(w, old[i].text, strlen(old[i].text), old[i].hash);
        *sl = old[i];
    }
    free(old);
    return 0;
}

void vt__pw_str(vt__pickle_writer *w, const char *s)
{
    if (!s)
        s = "";
    if (!vt__utf8_valid(s)) {
        /* A pickle str is UTF-8: one invalid byte (a Latin-1 path) and
         * pickle.load fails on the whole file. */
        vt__buf t = { 0 };
        vt__put_utf8_str(&t, s);
        vt__put_u8(&t, 0);
        if (t.oom)
            w->out.oom = 1;
        else
            vt__pw_str(w, (const char *)t.p);
        vt__buf_free(&t);
        return;
    }
    size_t n = strlen(s);
    uint64_t h = hash_str(s, n);
    struct memo_slot *sl = memo_find(w, s, n, h);
    if (sl && sl->text) {
        if (sl->id < 256) {
            put1(w, 'h');
            put1(w, (unsigned char)sl->id);
        } else {
            put1(w, 'j');
            vt__put_le(&w->out, sl->id, 4);
        }
        return;
    }
    if (n < 256) {
        put1(w, 0x8c);
        put1(w, (unsigned char)n);
    } else {
        put1(w, 'X');
        vt__put_le(&w->out, n, 4);
    }
    put(w, s, n);
    /* Memoize only what is worth it (short, likely repeated strings); every
     * memoized string costs the reader a memo slot. */
    if (n > 200 || w->next_memo == UINT32_MAX)
        return;
    if ((w->nused + 1) * 2 > w->nslots && memo_grow(w)) {
        w->out.oom = 1;
        return;
    }
    sl = memo_find(w, s, n, h);
    sl->text = strdup(s);
    if (!sl->text) {
        w->out.oom = 1;
        return;
    }
    sl->hash = h;
    sl->id = w->next_memo++;
    w->nused++;
    put1(w, 0x94); /* MEMOIZE */
}

void vt__pw_dict_begin(vt__pickle_writer *w) { put(w, "}(", 2); } /* EMPTY_DICT MARK */
void vt__pw_dict_end(vt__pickle_writer *w) { put1(w, 'u'); }      /* SETITEMS */
void vt__pw_list_begin(vt__pickle_writer *w) { put(w, "](", 2); } /* EMPTY_LIST MARK */
void vt__pw_list_end(vt__pickle_writer *w) { put1(w, 'e'); }      /* APPENDS */
void vt__pw_tuple_begin(vt__pickle_writer *w) { put1(w, '('); }   /* MARK */
void vt__pw_tuple_end(vt__pickle_writer *w) { put1(w, 't'); }     /* TUPLE */

int vt__pw_flush(vt__pickle_writer *w, FILE *out, size_t at_least)
{
    if (w->out.oom)
        return -ENOMEM;
    if (w->out.n < at_least)
        return 0;
    size_t n = w->out.n;
    w->out.n = 0;   /* the memo stays: later strings still refer to it */
    return fwrite(w->out.p, 1, n, out) == n ? 0 : -EIO;
}

const unsigned char *vt__pw_data(const vt__pickle_writer *w, size_t *size)
{
    *size = w->out.oom ? 0 : w->out.n;
    return w->out.oom ? NULL : w->out.p;
}
