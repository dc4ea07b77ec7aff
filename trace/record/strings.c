/*
 * trace/record/strings.c - the growable, deduplicating string table a snapshot is
 * built with: the strings its events name (exported from the interned ones,
 * see interned.c), module paths, function and file names.
 */
#include "rec_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"

uint64_t vt__str_hash(const char *s, size_t len)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325);     /* FNV-1a */
    for (size_t i = 0; i < len; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

int vt__strtab_init(vt__strtab *t)
{
    memset(t, 0, sizeof *t);
    t->cap = 4096;
    t->ncap = 256;
    t->mask = 511;
    t->blob = malloc(t->cap);
    t->offsets = malloc(t->ncap * sizeof *t->offsets);
    t->slots = calloc(t->mask + 1, sizeof *t->slots);
    if (!t->blob || !t->offsets || !t->slots) {
        vt__strtab_free(t);
        return -ENOMEM;
    }
    t->blob[0] = '\0';
    t->size = 1;
    t->offsets[0] = 0;
    t->n = 1;
    return 0;
}

void vt__strtab_free(vt__strtab *t)
{
    free(t->blob);
    free(t->offsets);
    free(t->slots);
    memset(t, 0, sizeof *t);
}

static int rehash(vt__strtab *t)
{
    size_t nmask = t->mask * 2 + 1;
    uint32_t *ns = calloc(nmask + 1, sizeof *ns);
    if (!ns)
        return -ENOMEM;
    for (uint32_t i = 1; i < t->n; i++) {
        const char *s = t->blob + t->offsets[i];
        size_t h = (size_t)vt__str_hash(s, strlen(s)) & nmask;
        while (ns[h])
            h = (h + 1) & nmask;
        ns[h] = i;
    }
    free(t->slots);
    t->slots = ns;
    t->mask = nmask;
    return 0;
}

uint32_t vt__strtab_add_len(vt__strtab *t, const char *s, size_t len)
{
    if (!s || len == 0)
        return 0;
    if (memchr(s, '\0', len))
        len = strlen(s);
    size_t h = (size_t)vt__str_hash(s, len) & t->mask;
    for (;;) {
        uint32_t i = t->slots[h];
        if (i == 0)
            break;
        const char *c = t->blob + t->offsets[i];
        if (strncmp(c, s, len) == 0 && c[len] == '\0')
            return i;
        h = (h + 1) & t->mask;
    }
    if (t->n >= UINT32_MAX - 1 || t->size + len + 1 > UINT32_MAX)
        return UINT32_MAX;
    if (vt__grow((void **)&t->blob, &t->cap, t->size + len + 1, 1) ||
        vt__grow((void **)&t->offsets, &t->ncap, t->n + 1, sizeof *t->offsets))
        return UINT32_MAX;
    uint32_t idx = (uint32_t)t->n++;
    t->offsets[idx] = (uint32_t)t->size;
    memcpy(t->blob + t->size, s, len);
    t->blob[t->size + len] = '\0';
    t->size += len + 1;
    t->slots[h] = idx;
    if (t->n * 2 > t->mask + 1 && rehash(t) != 0) {
        /* Still consistent: the table is just fuller than we like. */
    }
    return idx;
}

uint32_t vt__strtab_add(vt__strtab *t, const char *s)
{
    return s ? vt__strtab_add_len(t, s, strlen(s)) : 0;
}
