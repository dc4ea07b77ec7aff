/*
 * trace/interop/pytorch_build.c - a tiny snapshot builder for the PyTorch
 * pickle's importer: strings, frames and stack nodes interned in hash
 * tables as they are met (pytorch_internal.h).
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "pytorch_internal.h"

uint64_t vt__pt_mix(uint64_t h)
{
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h | 1; /* never 0 */
}

static uint64_t hash_bytes(const char *p, size_t n)
{
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ (unsigned char)p[i]) * 1099511628211ull;
    return vt__pt_mix(h);
}

static int table_grow(struct table *t)
{
    if ((t->used + 1) * 2 <= t->n)
        return 0;
    size_t n = t->n ? t->n * 2 : 1024;
    struct slot *s = calloc(n, sizeof *s);
    if (!s)
        return -ENOMEM;
    for (size_t i = 0; i < t->n; i++) {
        if (!t->slots[i].v)
            continue;
        size_t k = t->slots[i].h & (n - 1);
        while (s[k].v)
            k = (k + 1) & (n - 1);
        s[k] = t->slots[i];
    }
    free(t->slots);
    t->slots = s;
    t->n = n;
    return 0;
}

const char *vt__pt_str_at(const vt__snapshot_data *s, uint32_t i)
{
    return s->strings_blob + s->string_offsets[i];
}

/* Intern n bytes (a NUL inside is cut there: strings are C strings). */
static int intern(struct bld *b, const char *p, size_t n, uint32_t *out)
{
    const char *nul = memchr(p, 0, n);
    if (nul)
        n = (size_t)(nul - p);
    if (n == 0) {
        *out = 0;
        return 0;
    }
    if (table_grow(&b->strs))
        return -ENOMEM;
    vt__snapshot_data *s = b->s;
    uint64_t h = hash_bytes(p, n);
    size_t k = h & (b->strs.n - 1);
    for (; b->strs.slots[k].v; k = (k + 1) & (b->strs.n - 1)) {
        if (b->strs.slots[k].h != h)
            continue;
        const char *t = vt__pt_str_at(s, b->strs.slots[k].v - 1);
        if (!strncmp(t, p, n) && !t[n]) {
            *out = b->strs.slots[k].v - 1;
            return 0;
        }
    }
    if (s->strings_blob_size + n + 1 > UINT32_MAX || s->nstrings >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (vt__grow((void **)&s->strings_blob, &b->cap_blob, s->strings_blob_size + n + 1, 1) ||
        vt__grow((void **)&s->string_offsets, &b->cap_offs, s->nstrings + 1, sizeof(uint32_t)))
        return -ENOMEM;
    s->string_offsets[s->nstrings] = (uint32_t)s->strings_blob_size;
    memcpy(s->strings_blob + s->strings_blob_size, p, n);
    s->strings_blob[s->strings_blob_size + n] = 0;
    s->strings_blob_size += n + 1;
    *out = (uint32_t)s->nstrings++;
    b->strs.slots[k] = (struct slot){ h, *out + 1 };
    b->strs.used++;
    return 0;
}

int vt__pt_intern_c(struct bld *b, const char *text, uint32_t *out)
{
    return intern(b, text, strlen(text), out);
}

static uint32_t *cache_slot(struct bld *b, const vt__pv *v)
{
    if (!b->vcache || v < b->p->values || v >= b->p->values + b->p->nvalues)
        return NULL;
    return &b->vcache[v - b->p->values];
}

int vt__pt_intern_pv(struct bld *b, const vt__pv *v, uint32_t *out)
{
    *out = 0;
    if (!v || (v->type != VT_PV_STR && v->type != VT_PV_BYTES))
        return 0;
    uint32_t *slot = cache_slot(b, v);
    if (slot && *slot) {
        *out = *slot - 1;
        return 0;
    }
    int rc = intern(b, v->s, v->n, out);
    if (!rc && slot)
        *slot = *out + 1;
    return rc;
}

int vt__pt_intern_frame(struct bld *b, uint32_t fn, uint32_t file, uint32_t line, uint32_t *out)
{
    if (table_grow(&b->frames))
        return -ENOMEM;
    vt__snapshot_data *s = b->s;
    uint64_t h = vt__pt_mix(((uint64_t)fn << 32 | file) * 31 + line);
    size_t k = h & (b->frames.n - 1);
    for (; b->frames.slots[k].v; k = (k + 1) & (b->frames.n - 1)) {
        const vt__frame *f = &s->frames[b->frames.slots[k].v - 1];
        if (f->function == fn && f->file == file && f->line == line) {
            *out = b->frames.slots[k].v - 1;
            return 0;
        }
    }
    if (vt__grow((void **)&s->frames, &b->cap_frames, s->nframes + 1, sizeof *s->frames))
        return -ENOMEM;
    /* A Python (or symbolized C++) frame has no instruction pointer. A
     * Python one (its file a .py) is marked as the recorder marks the
     * frames it reads from the interpreter (module "python"), so that the
     * reports find the program's own lines in an imported stack too. */
    uint32_t module = 0;
    const char *path = vt__pt_str_at(s, file);
    size_t plen = strlen(path);
    if (plen > 3 && !strcmp(path + plen - 3, ".py")) {
        int rc = intern(b, "python", 6, &module);
        if (rc)
            return rc;
    }
    s->frames[s->nframes] = (vt__frame){ .function = fn, .file = file, .line = line,
                                        .module = module };
    *out = (uint32_t)s->nframes++;
    b->frames.slots[k] = (struct slot){ h, *out + 1 };
    b->frames.used++;
    return 0;
}

int vt__pt_intern_node(struct bld *b, uint32_t parent, uint32_t frame, uint32_t *out)
{
    if (table_grow(&b->nodes))
        return -ENOMEM;
    vt__snapshot_data *s = b->s;
    uint64_t h = vt__pt_mix((uint64_t)parent << 32 | frame);
    size_t k = h & (b->nodes.n - 1);
    for (; b->nodes.slots[k].v; k = (k + 1) & (b->nodes.n - 1)) {
        const vt__stack_node *nd = &s->stack_nodes[b->nodes.slots[k].v - 1];
        if (nd->parent == parent && nd->frame == frame) {
            *out = b->nodes.slots[k].v - 1;
            return 0;
        }
    }
    if (s->nstack_nodes >= UINT32_MAX - 1)
        return -EOVERFLOW;
    if (vt__grow((void **)&s->stack_nodes, &b->cap_nodes, s->nstack_nodes + 1, sizeof *s->stack_nodes))
        return -ENOMEM;
    s->stack_nodes[s->nstack_nodes] = (vt__stack_node){ parent, frame };
    *out = (uint32_t)s->nstack_nodes++;
    b->nodes.slots[k] = (struct slot){ h, *out + 1 };
    b->nodes.used++;
    return 0;
}

/* String 0 is "" (intern() never stores it), stack node 0 the root. */
int vt__pt_bld_start(struct bld *b)
{
    if (vt__grow((void **)&b->s->strings_blob, &b->cap_blob, 1, 1) ||
        vt__grow((void **)&b->s->string_offsets, &b->cap_offs, 1, sizeof(uint32_t)) ||
        vt__grow((void **)&b->s->stack_nodes, &b->cap_nodes, 1, sizeof(vt__stack_node)))
        return -ENOMEM;
    b->s->strings_blob[0] = 0;
    b->s->strings_blob_size = 1;
    b->s->string_offsets[0] = 0;
    b->s->nstrings = 1;
    b->s->stack_nodes[0] = (vt__stack_node){ 0, 0 };
    b->s->nstack_nodes = 1;
    return 0;
}

void vt__pt_bld_free(struct bld *b)
{
    free(b->strs.slots);
    free(b->frames.slots);
    free(b->nodes.slots);
    free(b->vcache);
}

/* PyTorch's `frames`: innermost first. Stack nodes are built outermost first. */
int vt__pt_stack_of(struct bld *b, const vt__pickle *p, const vt__pv *frames, uint32_t *out)
{
    *out = 0;
    if (!frames || (frames->type != VT_PV_LIST && frames->type != VT_PV_TUPLE))
        return 0;
    size_t n = frames->n < MAX_FRAMES_PER_STACK ? frames->n : MAX_FRAMES_PER_STACK;
    uint32_t node = 0;
    for (size_t i = n; i-- > 0;) {
        const vt__pv *f = vt__pickle_item(p, frames, i);
        if (!f || f->type != VT_PV_DICT)
            continue;
        uint32_t fn, file, fr;
        uint32_t *slot = cache_slot(b, f);
        int rc;
        if (slot && *slot) {
            if ((rc = vt__pt_intern_node(b, node, *slot - 1, &node)))
                return rc;
            continue;
        }
        rc = vt__pt_intern_pv(b, vt__pickle_get(p, f, "name"), &fn);
        if (!rc)
            rc = vt__pt_intern_pv(b, vt__pickle_get(p, f, "filename"), &file);
        if (rc)
            return rc;
        int64_t line = vt__pickle_int(vt__pickle_get(p, f, "line"), 0);
        if (line < 0 || line > UINT32_MAX)
            line = 0;
        if ((rc = vt__pt_intern_frame(b, fn, file, (uint32_t)line, &fr)) ||
            (rc = vt__pt_intern_node(b, node, fr, &node)))
            return rc;
        if (slot)
            *slot = fr + 1;
    }
    *out = node;
    return 0;
}

