/*
 * trace/interop/pickle_read.c - the safe pickle reader (see pickle.h).
 *
 * Opcode values and meanings follow Python's Lib/pickletools.py (the
 * documented pickle virtual machine). Only the data opcodes are executed;
 * anything that could import or call is refused before it does anything.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "errbuf.h"
#include "grow.h"
#include "order.h"
#include "pickle.h"

struct vm {
    const unsigned char *data;
    size_t size, pos;
    const char *name;
    char *err;
    size_t errlen;
    vt__pickle *p;
    size_t cap_values, cap_containers;
    uint32_t *stack;  size_t nstack, cap_stack;
    size_t *marks;    size_t nmarks, cap_marks;
    uint32_t *memo;   size_t nmemo, cap_memo;  /* UINT32_MAX = unset; with a sink, only
                                                  the keys some GET reads (memo_slot) */
    /* streaming (a sink): see offer() */
    const vt__pickle_sink *sink;
    uint8_t *read_keys; size_t nread_keys;     /* bit per memo key some GET reads */
    uint32_t *rank;                            /* read keys before each 64 keys */
    uint8_t *gets;                             /* GETs left per read key (255: many) */
    size_t gets_cap;
    size_t gc_at;                              /* values that make collect() run */
    struct put { uint32_t key, nvalues; } *puts;  /* puts of read keys, nvalues then */
    size_t nputs, cap_puts;
    uint8_t *kept;    size_t cap_kept;         /* per value of a handed-over batch */
    uint32_t *work;   size_t cap_work;         /* values to mark kept */
    struct fill { uint32_t box, newest; } *fills; /* containers given newer items, since */
    size_t nfills, cap_fills;                  /* the last batch: offer() keeps theirs */
};

/* "NAME: message" into the caller's buffer; returns rc. */
#define fail(m, rc, ...) vt__errf_in((m)->err, (m)->errlen, rc, (m)->name, __VA_ARGS__)

static int new_value(struct vm *m, vt__pv v, uint32_t *idx)
{
    vt__pickle *p = m->p;
    if (p->nvalues >= UINT32_MAX - 1)
        return fail(m, -EOVERFLOW, "too many values");
    if (vt__grow((void **)&p->values, &m->cap_values, p->nvalues + 1, sizeof *p->values))
        return fail(m, -ENOMEM, "out of memory");
    p->values[p->nvalues] = v;
    *idx = (uint32_t)p->nvalues++;
    return 0;
}

static int push_idx(struct vm *m, uint32_t idx)
{
    if (vt__grow((void **)&m->stack, &m->cap_stack, m->nstack + 1, sizeof *m->stack))
        return fail(m, -ENOMEM, "out of memory");
    m->stack[m->nstack++] = idx;
    return 0;
}

static int push(struct vm *m, vt__pv v)
{
    uint32_t idx = 0;
    int rc = new_value(m, v, &idx);
    return rc ? rc : push_idx(m, idx);
}

static int push_container(struct vm *m, uint8_t type)
{
    vt__pickle *p = m->p;
    if (p->ncontainers >= UINT32_MAX - 1)
        return fail(m, -EOVERFLOW, "too many containers");
    if (vt__grow((void **)&p->containers, &m->cap_containers, p->ncontainers + 1,
             sizeof *p->containers))
        return fail(m, -ENOMEM, "out of memory");
    p->containers[p->ncontainers] = (vt__pv_container){ 0 };
    vt__pv v = { .type = type, .container = (uint32_t)p->ncontainers++ };
    return push(m, v);
}

/* Append `n` value indexes to container value `cidx`. */
static int add_items(struct vm *m, uint32_t cidx, const uint32_t *items, size_t n)
{
    vt__pv *v = &m->p->values[cidx];
    vt__pv_container *c = &m->p->containers[v->container];
    if (n == 0)
        return 0;
    if ((size_t)c->n + n > UINT32_MAX - 2)
        return fail(m, -EOVERFLOW, "container too large");
    size_t cap = c->cap;
    if (vt__grow((void **)&c->items, &cap, c->n + n, sizeof *c->items))
        return fail(m, -ENOMEM, "out of memory");
    c->cap = (uint32_t)(cap > UINT32_MAX ? UINT32_MAX : cap);
    memcpy(c->items + c->n, items, n * sizeof *items);
    uint32_t newest = 0;
    for (size_t i = 0; m->sink && i < n; i++)
        newest = items[i] > newest ? items[i] : newest;
    if (newest > cidx) {
        if (vt__grow((void **)&m->fills, &m->cap_fills, m->nfills + 1, sizeof *m->fills))
            return fail(m, -ENOMEM, "out of memory");
        m->fills[m->nfills++] = (struct fill){ cidx, newest };
    }
    c->n += (uint32_t)n;
    v->n = v->type == VT_PV_DICT ? c->n / 2 : c->n;
    return 0;
}

static int need(struct vm *m, size_t n, const char *op, size_t at)
{
    if (m->size - m->pos < n)
        return fail(m, -EINVAL, "truncated pickle: %s at byte offset %zu needs %zu more bytes",
                    op, at, n);
    return 0;
}

static uint64_t le(const unsigned char *b, size_t n)
{
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++)
        v |= (uint64_t)b[i] << (8 * i);
    return v;
}

/* Little-endian two's complement of n bytes (LONG1/LONG4). */
static vt__pv long_value(const unsigned char *b, size_t n)
{
    vt__pv v = { .type = VT_PV_INT };
    if (n == 0)
        return v;
    int neg = b[n - 1] & 0x80;
    size_t sig = n; /* drop redundant sign-extension bytes */
    while (sig > 1 && b[sig - 1] == (neg ? 0xff : 0x00) && ((b[sig - 2] & 0x80) == (neg ? 0x80 : 0)))
        sig--;
    if (sig <= 8) {
        uint64_t u = le(b, sig);
        if (neg && sig < 8)
            u |= ~(uint64_t)0 << (8 * sig);
        v.i = (int64_t)u;
        return v;
    }
    if (sig == 9 && !neg && b[8] == 0) {
        v.type = VT_PV_UINT;
        v.u = le(b, 8);
        return v;
    }
    v.type = VT_PV_BIGINT;
    return v;
}

static int pop_mark(struct vm *m, const char *op, size_t at, size_t *base)
{
    if (!m->nmarks)
        return fail(m, -EINVAL, "pickle opcode %s at byte offset %zu without a MARK", op, at);
    *base = m->marks[--m->nmarks];
    if (*base > m->nstack)
        return fail(m, -EINVAL, "corrupt pickle stack at byte offset %zu", at);
    return 0;
}

static int top_container(struct vm *m, size_t below, uint8_t want1, uint8_t want2, const char *op,
                         size_t at, uint32_t *idx)
{
    if (m->nstack < below + 1)
        return fail(m, -EINVAL, "pickle opcode %s at byte offset %zu on an empty stack", op, at);
    *idx = m->stack[m->nstack - 1 - below];
    uint8_t t = m->p->values[*idx].type;
    if (t != want1 && t != want2)
        return fail(m, -EINVAL, "pickle opcode %s at byte offset %zu applied to a non-container",
                    op, at);
    return 0;
}

/* Does some GET read memo key `key` (scan_reads)? */
static bool read_key(const struct vm *m, uint64_t key)
{
    return key < m->nread_keys * 8 && (m->read_keys[key / 8] >> (key % 8) & 1);
}

/* A read key's place in the memo of a streamed parse: only keys that some
 * GET reads are stored there, numbered in key order (a pickler memoizes
 * every container, most never read again: a memo of all keys would grow
 * with the entries streamed). */
static size_t dense_key(const struct vm *m, uint64_t key)
{
    uint64_t word = 0;
    memcpy(&word, m->read_keys + key / 64 * 8, 8);
    word &= ((uint64_t)1 << (key % 64)) - 1;
    return m->rank[key / 64] + (size_t)__builtin_popcountll(word);
}

/* Where the memo keeps `key`: NULL in a streamed parse for a key no GET
 * reads (nothing needs it). */
static uint32_t *memo_slot(struct vm *m, uint64_t key)
{
    if (!m->rank)
        return &m->memo[key];
    return read_key(m, key) ? &m->memo[dense_key(m, key)] : NULL;
}

static int memo_put(struct vm *m, uint64_t key, size_t at)
{
    if (!m->nstack)
        return fail(m, -EINVAL, "pickle memo put at byte offset %zu on an empty stack", at);
    /* a pickler numbers its memo 0, 1, 2...: a key beyond the input's
     * size cannot be honest, and would let a tiny file claim a huge array */
    if (key > m->size + 16)
        return fail(m, -EINVAL, "pickle memo key %llu at byte offset %zu is out of range",
                    (unsigned long long)key, at);
    if (!m->rank) {
        size_t old = m->cap_memo;
        if (vt__grow((void **)&m->memo, &m->cap_memo, (size_t)key + 1, sizeof *m->memo))
            return fail(m, -ENOMEM, "out of memory");
        for (size_t i = old; i < m->cap_memo; i++)
            m->memo[i] = UINT32_MAX;
    }
    uint32_t *slot = memo_slot(m, key);
    if (slot)
        *slot = m->stack[m->nstack - 1];
    if (m->sink && read_key(m, key)) {
        if (vt__grow((void **)&m->puts, &m->cap_puts, m->nputs + 1, sizeof *m->puts))
            return fail(m, -ENOMEM, "out of memory");
        m->puts[m->nputs++] = (struct put){ (uint32_t)key, (uint32_t)m->p->nvalues };
    }
    if (key + 1 > m->nmemo)
        m->nmemo = (size_t)key + 1;
    return 0;
}

static int memo_get(struct vm *m, uint64_t key, size_t at)
{
    uint32_t *slot = key < m->nmemo ? memo_slot(m, key) : NULL;
    if (!slot || *slot == UINT32_MAX)
        return fail(m, -EINVAL, "pickle memo key %llu at byte offset %zu was never stored",
                    (unsigned long long)key, at);
    int rc = push_idx(m, *slot);
    if (m->rank) {
        /* after its last GET nothing reads the binding again: what only
         * it held can go (collect()) */
        uint8_t *left = &m->gets[dense_key(m, key)];
        if (*left < UINT8_MAX && --*left == 0)
            *slot = UINT32_MAX;
    }
    return rc;
}

/* Opcodes refused because they name a global, call a constructor or
 * reference data outside the pickle. */
static const char *refused_name(unsigned op)
{
    switch (op) {
    case 'c': return "GLOBAL";
    case 0x93: return "STACK_GLOBAL";
    case 'R': return "REDUCE";
    case 'b': return "BUILD";
    case 'i': return "INST";
    case 'o': return "OBJ";
    case 0x81: return "NEWOBJ";
    case 0x92: return "NEWOBJ_EX";
    case 'P': return "PERSID";
    case 'Q': return "BINPERSID";
    case 0x82: return "EXT1";
    case 0x83: return "EXT2";
    case 0x84: return "EXT4";
    case 0x97: return "NEXT_BUFFER";
    case 0x98: return "READONLY_BUFFER";
    default: return NULL;
    }
}

int vt__pickle_sniff(const void *data, size_t size)
{
    const unsigned char *b = data;
    return size >= 2 && b[0] == 0x80 && b[1] >= 2 && b[1] <= 5;
}

/* ---- streaming: items handed to a sink instead of kept ----------------- */

/* How often a walk tells the sink how far it got. */
#define PASSED_EVERY (8u << 20)
/* collect() runs when the values are twice what it kept, and at least this many. */
#define COLLECT_MIN (1u << 16)

/* Tell the sink the walk reached `pos`. @return where to tell it next. */
static size_t passed(struct vm *m, size_t pos)
{
    if (m->sink && m->sink->passed)
        m->sink->passed(m->sink->ctx, pos);
    return pos + (m->sink && m->sink->passed_every ? m->sink->passed_every : PASSED_EVERY);
}

static size_t collect_min(const struct vm *m)
{
    return m->sink->collect_min ? m->sink->collect_min : COLLECT_MIN;
}

/* Which memo keys does some GET read? A value memoized under any other key
 * can never be reached again once its container is gone, so only these
 * must outlive what the sink takes. A first walk over the opcodes, without
 * building anything. @return 0, or -1 where the walk cannot follow the
 * pickle (unknown opcode, truncation): the caller then keeps everything and
 * the full parse reports what is wrong. */
static int scan_reads(struct vm *m)
{
    size_t pos = 0, note = passed(m, 0);
    while (pos < m->size) {
        if (pos >= note)
            note = passed(m, pos);
        unsigned op = m->data[pos++];
        size_t w = 0, lenw = 0;   /* argument bytes; or a length of lenw bytes */
        bool get = false;
        switch (op) {
        case '.': return 0;
        case 0x80: case 'K': case 'q': w = 1; break;
        case 'M': w = 2; break;
        case 'J': case 'r': w = 4; break;
        case 0x95: case 'G': w = 8; break;
        case 'h': w = 1; get = true; break;
        case 'j': w = 4; get = true; break;
        case 0x8a: case 0x8c: case 'C': case 'U': lenw = 1; break;
        case 0x8b: case 'X': case 'B': case 'T': lenw = 4; break;
        case 0x8d: case 0x8e: case 0x96: lenw = 8; break;
        case '(': case '}': case ']': case 0x8f: case ')': case 't': case 'l': case 'd':
        case 0x91: case 0x85: case 0x86: case 0x87: case 'a': case 's': case 'e': case 'u':
        case 0x90: case '0': case '1': case '2': case 'N': case 0x88: case 0x89: case 0x94:
            break;
        default: return -1;
        }
        if (lenw) {
            if (m->size - pos < lenw)
                return -1;
            uint64_t n = le(m->data + pos, lenw);
            pos += lenw;
            if (n > m->size - pos)
                return -1;
            w = (size_t)n;
        }
        if (m->size - pos < w)
            return -1;
        if (get) {
            uint64_t key = le(m->data + pos, w);
            if (key > m->size + 16)
                return -1;
            size_t old = m->nread_keys, oldg = m->gets_cap;
            if (vt__grow((void **)&m->read_keys, &m->nread_keys, (size_t)key / 8 + 1, 1) ||
                vt__grow((void **)&m->gets, &m->gets_cap, (size_t)key + 1, 1))
                return -1;
            memset(m->read_keys + old, 0, m->nread_keys - old);
            memset(m->gets + oldg, 0, m->gets_cap - oldg);
            m->read_keys[key / 8] |= (uint8_t)(1u << (key % 8));
            if (m->gets[key] < UINT8_MAX)
                m->gets[key]++;
        }
        pos += w;
    }
    return 0;
}

/* The memo of a streamed parse (memo_slot): the read keys ranked, each
 * one's count of GETs in key order. @return 0 or -ENOMEM. */
static int index_reads(struct vm *m)
{
    size_t nwords = (m->nread_keys + 7) / 8;
    uint8_t *rk = realloc(m->read_keys, nwords ? nwords * 8 : 8);
    if (!rk)
        return -ENOMEM;
    memset(rk + m->nread_keys, 0, (nwords ? nwords * 8 : 8) - m->nread_keys);
    m->read_keys = rk;
    m->nread_keys = nwords * 8;
    if (!(m->rank = malloc((nwords + 1) * sizeof *m->rank)))
        return -ENOMEM;
    size_t n = 0;
    for (size_t w = 0; w < nwords; w++) {
        uint64_t word;
        memcpy(&word, rk + w * 8, 8);
        m->rank[w] = (uint32_t)n;
        n += (size_t)__builtin_popcountll(word);
    }
    m->rank[nwords] = (uint32_t)n;
    uint8_t *gets = malloc(n ? n : 1);
    m->memo = malloc((n ? n : 1) * sizeof *m->memo);
    if (!gets || !m->memo) {
        free(gets);
        return -ENOMEM;
    }
    size_t j = 0;
    for (size_t key = 0; key < nwords * 64; key++)
        if (read_key(m, key))
            gets[j++] = m->gets[key];
    free(m->gets);
    m->gets = gets;
    m->cap_memo = n;
    for (size_t i = 0; i < n; i++)
        m->memo[i] = UINT32_MAX;
    m->gc_at = collect_min(m);
    return 0;
}

/* Is the list at stack[j] an item of the list bound to the sink's key in
 * the top-level dict, while those are being built? Python's pickler leaves
 * exactly this on the stack: the dict, the pairs written so far (after one
 * MARK for SETITEMS, or none for a lone SETITEM), the key, its list, (after
 * a MARK when it has more than one) the item lists made so far, the last
 * being filled. The importer checks the finished graph agrees. */
static bool in_sink_list(const struct vm *m, size_t j)
{
    const vt__pv *v = m->p->values;
    size_t i = m->nmarks && m->marks[0] == 1, t = j - 1;
    if (i < m->nmarks && m->marks[i] <= j && m->marks[i] >= 1)
        t = m->marks[i++] - 1;  /* the key's list has its items since that MARK */
    for (; i < m->nmarks; i++)
        if (m->marks[i] <= j)
            return false;
    if (j < 3 || t < 2 || t % 2 || v[m->stack[0]].type != VT_PV_DICT)
        return false;
    for (size_t k = t; k <= j; k++)
        if (v[m->stack[k]].type != VT_PV_LIST)
            return false;
    const vt__pv *k = &v[m->stack[t - 1]];
    size_t n = strlen(m->sink->key);
    return k->type == VT_PV_STR && k->n == n && !memcmp(k->s, m->sink->key, n);
}

static int mark_kept(struct vm *m, uint32_t v0, uint32_t root)
{
    size_t nwork = 0;
    if (root == UINT32_MAX || root < v0 || m->kept[root - v0])
        return 0;
    m->kept[root - v0] = 1;
    m->work[nwork++] = root;
    while (nwork) {
        const vt__pv *v = &m->p->values[m->work[--nwork]];
        if (v->type != VT_PV_LIST && v->type != VT_PV_TUPLE && v->type != VT_PV_DICT)
            continue;
        const vt__pv_container *c = &m->p->containers[v->container];
        for (uint32_t i = 0; i < c->n; i++) {
            uint32_t x = c->items[i];
            if (x < v0 || m->kept[x - v0])
                continue;
            m->kept[x - v0] = 1;
            if (vt__grow((void **)&m->work, &m->cap_work, nwork + 1, sizeof *m->work))
                return fail(m, -ENOMEM, "out of memory");
            m->work[nwork++] = x;
        }
    }
    return 0;
}

/* Drop every value from v0 on but those marked kept (what a later GET
 * reads), which move down, the containers with them. */
static void compact(struct vm *m, uint32_t v0)
{
    vt__pickle *p = m->p;
    uint32_t end = (uint32_t)p->nvalues, nv = v0;
    uint32_t *newidx = m->work; /* sized for the range by offer() */
    for (uint32_t v = v0; v < end; v++)
        newidx[v - v0] = m->kept[v - v0] ? nv++ : UINT32_MAX;
    uint32_t c0 = UINT32_MAX, nc = 0;
    for (uint32_t v = v0; v < end; v++) {
        vt__pv *x = &p->values[v];
        bool box = x->type == VT_PV_LIST || x->type == VT_PV_TUPLE || x->type == VT_PV_DICT;
        if (box && c0 == UINT32_MAX)
            c0 = nc = x->container; /* containers are made in the order of their values */
        if (!m->kept[v - v0]) {
            if (box) {
                free(p->containers[x->container].items);
                free(p->containers[x->container].keys);
            }
            continue;
        }
        if (box) {
            vt__pv_container c = p->containers[x->container];
            for (uint32_t i = 0; i < c.n; i++)
                if (c.items[i] >= v0)
                    c.items[i] = newidx[c.items[i] - v0];
            p->containers[nc] = c;
            x->container = nc++;
        }
        p->values[newidx[v - v0]] = *x;
    }
    for (size_t k = m->nputs; k-- > 0 && m->puts[k].nvalues > v0;) {
        uint32_t *slot = memo_slot(m, m->puts[k].key);
        if (*slot != UINT32_MAX && *slot >= v0 && *slot < end)
            *slot = newidx[*slot - v0];
        if (m->puts[k].nvalues > nv)
            m->puts[k].nvalues = nv;
    }
    p->nvalues = nv;
    if (c0 != UINT32_MAX)
        p->ncontainers = nc;
}

/* Drop every value that nothing can reach any more: not the stack, not a
 * memo binding that a GET will still read (memo_get forgets a binding
 * after its last GET). A frames list that entries share through the memo,
 * for one, stays while an entry to come reads it and goes here after the
 * last. What stays moves down in order, as in compact(); the sink is told
 * where (its lists move too). Run when the values have doubled since the
 * last time, so that the work stays linear in the input. Only the stack's
 * first `nstack` values are alive (above them: the batch just dropped). */
static int collect(struct vm *m, size_t nstack)
{
    vt__pickle *p = m->p;
    size_t n = p->nvalues;
    if (vt__grow((void **)&m->kept, &m->cap_kept, n, 1) ||
        vt__grow((void **)&m->work, &m->cap_work, n, sizeof *m->work))
        return fail(m, -ENOMEM, "out of memory");
    memset(m->kept, 0, n);
    int rc = 0;
    for (size_t i = 0; i < nstack && !rc; i++)
        rc = mark_kept(m, 0, m->stack[i]);
    for (size_t i = 0; i < m->cap_memo && !rc; i++)
        rc = mark_kept(m, 0, m->memo[i]);
    if (rc)
        return rc;
    compact(m, 0);
    const uint32_t *newidx = m->work;
    for (size_t i = 0; i < nstack; i++)
        m->stack[i] = newidx[m->stack[i]];
    for (size_t i = 0; i < m->cap_memo; i++)
        if (m->memo[i] != UINT32_MAX)
            m->memo[i] = newidx[m->memo[i]];
    m->sink->moved(m->sink->ctx, newidx, n);
    m->gc_at = p->nvalues * 2 > collect_min(m) ? p->nvalues * 2 : collect_min(m);
    return 0;
}

/* The items above stack[lpos] are about to be appended to the list there.
 * When that list is one the sink streams and every item is a dict built
 * just now that no GET reads again, hand them to the sink, and drop them
 * and all they hold but what a later GET reads: the graph then holds one
 * batch of entries at a time. *taken: whether the
 * items were handed over (else they are appended as usual). */
static int offer(struct vm *m, size_t lpos, bool *taken)
{
    *taken = false;
    size_t n = m->nstack - lpos - 1;
    if (!m->sink || !n || !in_sink_list(m, lpos))
        return 0;
    const uint32_t *items = m->stack + lpos + 1;
    uint32_t v0 = items[0];
    for (size_t i = 0; i <= lpos; i++)
        if (m->stack[i] >= v0)
            return 0;
    for (size_t i = 0; i < n; i++)
        if (m->p->values[items[i]].type != VT_PV_DICT || (i && items[i] <= items[i - 1]))
            return 0;
    size_t span = m->p->nvalues - v0;
    if (vt__grow((void **)&m->kept, &m->cap_kept, span, 1) ||
        vt__grow((void **)&m->work, &m->cap_work, span, sizeof *m->work))
        return fail(m, -ENOMEM, "out of memory");
    memset(m->kept, 0, span);
    int rc;
    for (size_t k = m->nputs; k-- > 0 && m->puts[k].nvalues > v0;)
        if ((rc = mark_kept(m, v0, *memo_slot(m, m->puts[k].key))))
            return rc;
    for (size_t i = 0; i < n; i++)
        if (m->kept[items[i] - v0])
            return 0; /* the pickle reads this entry again: it stays */
    for (size_t i = 0; i < m->nfills; i++)
        if (m->fills[i].box < v0 && m->fills[i].newest >= v0)
            return 0; /* an older container holds a value of the batch */
    for (size_t i = 0; i < n; i++)
        if ((rc = m->sink->take(m->sink->ctx, m->p, m->stack[lpos], items[i])))
            return rc;
    compact(m, v0);
    m->nfills = 0; /* all before the next batch's first value */
    m->nputs = 0;  /* the same */
    *taken = true;
    if (m->rank && m->sink->moved && m->p->nvalues >= m->gc_at)
        return collect(m, lpos + 1);
    return 0;
}

static int run(struct vm *m)
{
    size_t note = passed(m, 0);
    while (m->pos < m->size) {
        size_t at = m->pos;
        if (at >= note)
            note = passed(m, at);
        unsigned op = m->data[m->pos++];
        const char *refused = refused_name(op);
        if (refused)
            return fail(m, -EPERM,
                        "pickle opcode %s at byte offset %zu names a global or builds an object; "
                        "refusing to run code from a pickle (only plain containers and scalars "
                        "are read)", refused, at);
        int rc = 0;
        size_t base;
        uint32_t idx;
        bool taken;
        const unsigned char *a = m->data + m->pos;
        switch (op) {
        case 0x80: /* PROTO */
            if ((rc = need(m, 1, "PROTO", at)))
                return rc;
            m->p->protocol = a[0];
            if (a[0] > 5)
                return fail(m, -EINVAL, "pickle protocol %u at byte offset %zu is not supported "
                            "(2 to 5 are)", a[0], at);
            m->pos += 1;
            break;
        case 0x95: /* FRAME: the next n bytes form a frame; they are inline */
            if ((rc = need(m, 8, "FRAME", at)))
                return rc;
            m->pos += 8;
            break;
        case '.': /* STOP */
            if (m->nstack != 1 || m->nmarks)
                return fail(m, -EINVAL, "pickle STOP at byte offset %zu leaves %zu values and "
                            "%zu marks (expected exactly one value)", at, m->nstack, m->nmarks);
            m->p->root = m->stack[0];
            return 0;
        case '(': /* MARK */
            if (vt__grow((void **)&m->marks, &m->cap_marks, m->nmarks + 1, sizeof *m->marks))
                return fail(m, -ENOMEM, "out of memory");
            m->marks[m->nmarks++] = m->nstack;
            break;
        case '}': rc = push_container(m, VT_PV_DICT); break;
        case ']': rc = push_container(m, VT_PV_LIST); break;
        case 0x8f: rc = push_container(m, VT_PV_LIST); break;  /* EMPTY_SET */
        case ')': rc = push_container(m, VT_PV_TUPLE); break;
        case 't':   /* TUPLE */
        case 'l':   /* LIST */
        case 'd':   /* DICT */
        case 0x91: { /* FROZENSET */
            const char *nm = op == 't' ? "TUPLE" : op == 'l' ? "LIST" : op == 'd' ? "DICT" : "FROZENSET";
            if ((rc = pop_mark(m, nm, at, &base)))
                return rc;
            size_t n = m->nstack - base;
            if (op == 'd' && n % 2)
                return fail(m, -EINVAL, "pickle DICT at byte offset %zu with an odd item count", at);
            uint32_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
            if (!tmp)
                return fail(m, -ENOMEM, "out of memory");
            if (n) /* the stack may still be unallocated */
                memcpy(tmp, m->stack + base, n * sizeof *tmp);
            m->nstack = base;
            rc = push_container(m, op == 't' ? VT_PV_TUPLE : op == 'd' ? VT_PV_DICT : VT_PV_LIST);
            if (!rc)
                rc = add_items(m, m->stack[m->nstack - 1], tmp, n);
            free(tmp);
            break;
        }
        case 0x85: case 0x86: case 0x87: { /* TUPLE1..3 */
            size_t n = op - 0x84;
            if (m->nstack < n)
                return fail(m, -EINVAL, "pickle TUPLE%zu at byte offset %zu on a short stack", n, at);
            uint32_t tmp[3];
            memcpy(tmp, m->stack + m->nstack - n, n * sizeof *tmp);
            m->nstack -= n;
            rc = push_container(m, VT_PV_TUPLE);
            if (!rc)
                rc = add_items(m, m->stack[m->nstack - 1], tmp, n);
            break;
        }
        case 'a': /* APPEND */
            if ((rc = top_container(m, 1, VT_PV_LIST, VT_PV_LIST, "APPEND", at, &idx)))
                return rc;
            if (!(rc = offer(m, m->nstack - 2, &taken)) && !taken)
                rc = add_items(m, idx, &m->stack[m->nstack - 1], 1);
            m->nstack--;
            break;
        case 's': /* SETITEM */
            if ((rc = top_container(m, 2, VT_PV_DICT, VT_PV_DICT, "SETITEM", at, &idx)))
                return rc;
            rc = add_items(m, idx, &m->stack[m->nstack - 2], 2);
            m->nstack -= 2;
            break;
        case 'e':   /* APPENDS */
        case 'u':   /* SETITEMS */
        case 0x90: { /* ADDITEMS */
            const char *nm = op == 'e' ? "APPENDS" : op == 'u' ? "SETITEMS" : "ADDITEMS";
            if ((rc = pop_mark(m, nm, at, &base)))
                return rc;
            if (base == 0)
                return fail(m, -EINVAL, "pickle %s at byte offset %zu has no container", nm, at);
            size_t n = m->nstack - base;
            uint8_t want = op == 'u' ? VT_PV_DICT : VT_PV_LIST;
            idx = m->stack[base - 1];
            if (m->p->values[idx].type != want)
                return fail(m, -EINVAL, "pickle %s at byte offset %zu applied to a non-container",
                            nm, at);
            if (op == 'u' && n % 2)
                return fail(m, -EINVAL, "pickle SETITEMS at byte offset %zu with an odd item count",
                            at);
            if (op != 'e' || (!(rc = offer(m, base - 1, &taken)) && !taken))
                rc = add_items(m, idx, m->stack + base, n);
            m->nstack = base;
            break;
        }
        case '0': /* POP */
            if (m->nstack)
                m->nstack--;
            else if (m->nmarks && m->marks[m->nmarks - 1] == 0)
                m->nmarks--; /* POP of a MARK (pickletools allows it) */
            else
                return fail(m, -EINVAL, "pickle POP at byte offset %zu on an empty stack", at);
            break;
        case '1': /* POP_MARK */
            if ((rc = pop_mark(m, "POP_MARK", at, &base)))
                return rc;
            m->nstack = base;
            break;
        case '2': /* DUP */
            if (!m->nstack)
                return fail(m, -EINVAL, "pickle DUP at byte offset %zu on an empty stack", at);
            rc = push_idx(m, m->stack[m->nstack - 1]);
            break;
        case 'N': rc = push(m, (vt__pv){ .type = VT_PV_NONE }); break;
        case 0x88: rc = push(m, (vt__pv){ .type = VT_PV_BOOL, .i = 1 }); break;
        case 0x89: rc = push(m, (vt__pv){ .type = VT_PV_BOOL, .i = 0 }); break;
        case 'J': /* BININT */
            if ((rc = need(m, 4, "BININT", at)))
                return rc;
            rc = push(m, (vt__pv){ .type = VT_PV_INT, .i = (int32_t)(uint32_t)le(a, 4) });
            m->pos += 4;
            break;
        case 'K': /* BININT1 */
            if ((rc = need(m, 1, "BININT1", at)))
                return rc;
            rc = push(m, (vt__pv){ .type = VT_PV_INT, .i = a[0] });
            m->pos += 1;
            break;
        case 'M': /* BININT2 */
            if ((rc = need(m, 2, "BININT2", at)))
                return rc;
            rc = push(m, (vt__pv){ .type = VT_PV_INT, .i = (int64_t)le(a, 2) });
            m->pos += 2;
            break;
        case 0x8a: case 0x8b: { /* LONG1, LONG4 */
            size_t w = op == 0x8a ? 1 : 4;
            if ((rc = need(m, w, op == 0x8a ? "LONG1" : "LONG4", at)))
                return rc;
            uint64_t n = le(a, w);
            m->pos += w;
            if ((rc = need(m, n, op == 0x8a ? "LONG1" : "LONG4", at)))
                return rc;
            rc = push(m, long_value(m->data + m->pos, (size_t)n));
            m->pos += (size_t)n;
            break;
        }
        case 'G': { /* BINFLOAT: big-endian IEEE 754 double */
            if ((rc = need(m, 8, "BINFLOAT", at)))
                return rc;
            uint64_t u = 0;
            for (int i = 0; i < 8; i++)
                u = u << 8 | a[i];
            vt__pv v = { .type = VT_PV_FLOAT };
            memcpy(&v.f, &u, sizeof v.f);
            rc = push(m, v);
            m->pos += 8;
            break;
        }
        case 0x8c: case 'X': case 0x8d:   /* SHORT_BINUNICODE, BINUNICODE, BINUNICODE8 */
        case 'C': case 'B': case 0x8e:    /* SHORT_BINBYTES, BINBYTES, BINBYTES8 */
        case 'U': case 'T':               /* SHORT_BINSTRING, BINSTRING (Python 2 str) */
        case 0x96: {                      /* BYTEARRAY8 */
            size_t w = (op == 0x8c || op == 'C' || op == 'U') ? 1
                     : (op == 0x8d || op == 0x8e || op == 0x96) ? 8 : 4;
            if ((rc = need(m, w, "a string opcode", at)))
                return rc;
            uint64_t n = le(a, w);
            m->pos += w;
            if ((rc = need(m, n, "a string opcode", at)))
                return rc;
            if (n > UINT32_MAX)
                return fail(m, -EOVERFLOW, "pickle string at byte offset %zu is over 4 GiB", at);
            int is_str = op == 0x8c || op == 'X' || op == 0x8d || op == 'U' || op == 'T';
            rc = push(m, (vt__pv){ .type = is_str ? VT_PV_STR : VT_PV_BYTES, .n = (uint32_t)n,
                                  .s = (const char *)m->data + m->pos });
            m->pos += (size_t)n;
            break;
        }
        case 0x94: /* MEMOIZE */
            rc = memo_put(m, m->nmemo, at);
            break;
        case 'q': /* BINPUT: 1-byte memo index */
        case 'r': /* LONG_BINPUT: 4-byte */
        case 'h': /* BINGET: 1-byte */
        case 'j': /* LONG_BINGET: 4-byte */ {
            size_t w = op == 'q' || op == 'h' ? 1 : 4;
            bool put = op == 'q' || op == 'r';
            const char *name = op == 'q' ? "BINPUT" : op == 'r' ? "LONG_BINPUT"
                             : op == 'h' ? "BINGET" : "LONG_BINGET";
            if ((rc = need(m, w, name, at)))
                return rc;
            m->pos += w;
            rc = put ? memo_put(m, le(a, w), at) : memo_get(m, le(a, w), at);
            break;
        }
        default:
            return fail(m, -EINVAL, "pickle opcode 0x%02x at byte offset %zu is not one vramtrace "
                        "reads (protocols 2 to 5, plain containers and scalars only)", op, at);
        }
        if (rc)
            return rc;
    }
    return fail(m, -EINVAL, "truncated pickle: no STOP opcode before the end (%zu bytes)", m->size);
}

/* Dicts up to this many pairs are scanned; larger ones get a sorted index. */
#define SCAN_PAIRS 8

/* Order of str keys: by length, then bytes, then pair number (so that the
 * last binding of a key ends its run). */
static int cmp_key(const void *a, const void *b, void *ctx)
{
    const vt__pickle *p = ((const void **)ctx)[0];
    const vt__pv_container *c = ((const void **)ctx)[1];
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    const vt__pv *kx = &p->values[c->items[2 * x]], *ky = &p->values[c->items[2 * y]];
    if (kx->n != ky->n)
        return kx->n < ky->n ? -1 : 1;
    int d = kx->n ? memcmp(kx->s, ky->s, kx->n) : 0;
    return d ? d : vt__order(x, y);
}

static int index_dict(vt__pickle *p, vt__pv_container *c)
{
    uint32_t npairs = c->n / 2, n = 0;
    c->keys = malloc(npairs * sizeof *c->keys);
    if (!c->keys)
        return -ENOMEM;
    for (uint32_t k = 0; k < npairs; k++)
        if (p->values[c->items[2 * k]].type == VT_PV_STR)
            c->keys[n++] = k;
    const void *ctx[2] = { p, c };
    qsort_r(c->keys, n, sizeof *c->keys, cmp_key, ctx);
    uint32_t m = 0;
    for (uint32_t i = 0; i < n; i++) {
        const vt__pv *a = &p->values[c->items[2 * c->keys[i]]];
        const vt__pv *b = i + 1 < n ? &p->values[c->items[2 * c->keys[i + 1]]] : NULL;
        if (!b || a->n != b->n || (a->n && memcmp(a->s, b->s, a->n)))
            c->keys[m++] = c->keys[i];   /* the last binding of its key */
    }
    c->nkeys = m;
    return 0;
}

static int index_dicts(vt__pickle *p)
{
    for (size_t i = 0; i < p->nvalues; i++) {
        const vt__pv *v = &p->values[i];
        if (v->type != VT_PV_DICT || v->container >= p->ncontainers)
            continue;
        vt__pv_container *c = &p->containers[v->container];
        if (c->n / 2 > SCAN_PAIRS && !c->keys && index_dict(p, c) != 0)
            return -ENOMEM;
    }
    return 0;
}

int vt__pickle_parse(const void *data, size_t size, const char *name, vt__pickle **out, char *err,
                     size_t errlen)
{
    return vt__pickle_parse_sink(data, size, name, NULL, out, err, errlen);
}

int vt__pickle_parse_sink(const void *data, size_t size, const char *name,
                          const vt__pickle_sink *sink, vt__pickle **out, char *err, size_t errlen)
{
    *out = NULL;
    if (errlen)
        err[0] = 0;
    struct vm m = { .data = data, .size = size, .name = name ? name : "(memory)", .err = err,
                    .errlen = errlen, .sink = sink };
    m.p = calloc(1, sizeof *m.p);
    if (!m.p)
        return fail(&m, -ENOMEM, "out of memory");
    int rc = 0;
    if (sink && scan_reads(&m) != 0)
        m.sink = NULL; /* the parse below says what is wrong */
    else if (sink && index_reads(&m) != 0)
        rc = fail(&m, -ENOMEM, "out of memory");
    if (!rc)
        rc = run(&m);
    if (rc == 0 && index_dicts(m.p) != 0)
        rc = fail(&m, -ENOMEM, "out of memory");
    free(m.stack);
    free(m.marks);
    free(m.memo);
    free(m.read_keys);
    free(m.rank);
    free(m.gets);
    free(m.puts);
    free(m.kept);
    free(m.work);
    free(m.fills);
    if (rc) {
        vt__pickle_free(m.p);
        return rc;
    }
    *out = m.p;
    return 0;
}

void vt__pickle_free(vt__pickle *p)
{
    if (!p)
        return;
    for (size_t i = 0; i < p->ncontainers; i++) {
        free(p->containers[i].items);
        free(p->containers[i].keys);
    }
    free(p->containers);
    free(p->values);
    free(p);
}
