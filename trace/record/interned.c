/*
 * trace/record/interned.c - the process-wide interned strings that events point to.
 *
 * Mark labels, tensor, holder and reference names come with events, and a
 * program may give every event a new one ("epoch 3 step N" five million
 * times): kept forever, they would grow without bound and make every
 * snapshot carry all of them. So they are kept as long as the events are.
 * They live in generations: tables of fixed size (GEN_STRINGS strings,
 * GEN_BYTES bytes) that are never resized or moved. Interning looks a string
 * up in the current generation only and appends it there; a full generation
 * is retired, stamped with the ring's head, and a new one takes its place
 * (one allocation, no copying). A retired generation is freed once the ring
 * has moved a whole capacity past that stamp: every event that could name
 * one of its strings has been overwritten by then. A label used again after
 * its generation retired is interned again in the current one, under a new
 * index, so a string index is never reused for another string while an event
 * may still name it (indexes grow monotonically; after 2^31 they start over,
 * skipping ranges still alive). Memory is therefore bounded by the strings
 * of the events the ring keeps, plus two generations.
 *
 * Strings that stack nodes name (the frames of vt_stack_intern_frames) live
 * as long as the nodes, that is forever, in a second set of generations
 * ("pinned": indexes with bit 31 set) that doubles in size up to PINNED_MAX
 * strings and is searched whole; stack nodes are bounded, so are they.
 *
 * One mutex guards both, held only for a lookup and an append, or for linking
 * a new generation: no interning thread ever waits for a copy or a resize. A
 * snapshot does not copy the table under the lock: it holds the strings
 * (vt__strings_hold) while it copies the ring and builds, which only
 * postpones freeing, then exports the strings its events name, one short
 * lookup at a time. Generations that became free meanwhile go when the last
 * hold is released. Freeing happens outside the lock.
 */
#include "rec_snap.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define GEN_STRINGS 32768u                 /* strings per generation */
#define GEN_BYTES (UINT32_C(2) << 20)      /* string bytes per generation */
#define MAX_STRING 65535u                  /* longer strings are cut (UTF-8 safe) */
#define PINNED (UINT32_C(1) << 31)         /* index bit of pinned strings */
#define PINNED_FIRST 4096u                 /* strings in the first pinned generation */
#define PINNED_MAX (UINT32_C(1) << 21)     /* pinned strings in all */

typedef struct gen {
    struct gen *next;      /* the next older generation of its list */
    uint32_t first;        /* index of its first string (PINNED bit included) */
    uint32_t cap, n;       /* strings it can hold / holds */
    uint32_t mask;         /* slots - 1 */
    uint32_t bytes, blob_cap;  /* string bytes used / available */
    uint64_t end_seq;      /* ring head when it was retired */
    size_t alloc;          /* bytes allocated for it in all */
    uint32_t *off;         /* [i] offset of string first + i in blob */
    uint32_t *slots;       /* open addressing: i + 1, 0 = empty */
    char *blob;            /* NUL-terminated strings back to back */
} gen;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static gen *events_gens;   /* the current generation first, then the retired */
static gen *pinned_gens;   /* the newest (the one that takes strings) first */
static uint32_t next_first = 1;   /* index of the next event generation's first string */
static uint32_t pinned_count;     /* pinned strings handed out */
static unsigned holds;            /* snapshots that hold the strings */
static uint64_t refused;          /* strings not interned (out of memory, limits) */

/* fork() while another thread holds the lock would leave it locked forever
 * in the child (a DataLoader worker that names a tensor would hang): hold it
 * across the fork, so both sides start with it free and the tables whole.
 * The snapshots that held the strings are the parent's threads': none runs
 * in the child, which would otherwise never free a generation again. */
static void fork_prepare(void) { pthread_mutex_lock(&lock); }
static void fork_parent(void) { pthread_mutex_unlock(&lock); }
static void fork_child(void)
{
    holds = 0;
    pthread_mutex_unlock(&lock);
}

__attribute__((constructor)) static void interned_atfork(void)
{
    pthread_atfork(fork_prepare, fork_parent, fork_child);
}

static gen *gen_new(uint32_t first, uint32_t cap, uint32_t blob_cap)
{
    uint32_t slots = 1;
    while (slots < 2 * cap)
        slots *= 2;
    size_t alloc = sizeof(gen) + (size_t)cap * sizeof(uint32_t) +
                   (size_t)slots * sizeof(uint32_t) + blob_cap;
    /* Mapped, not malloc'ed: fresh zero pages of which only those used are
     * ever touched, and all of them given back when it is freed (malloc
     * would soon serve these sizes from its heap, zeroing them whole). */
    gen *g = mmap(NULL, alloc, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (g == MAP_FAILED)
        return NULL;
    g->first = first;
    g->cap = cap;
    g->mask = slots - 1;
    g->blob_cap = blob_cap;
    g->alloc = alloc;
    g->off = (uint32_t *)(g + 1);
    g->slots = g->off + cap;
    g->blob = (char *)(g->slots + slots);
    return g;
}

static void gens_free(gen *g)
{
    while (g) {
        gen *next = g->next;
        munmap(g, g->alloc);
        g = next;
    }
}

/* @return the index of s in g, 0 if absent; *slot: where it would go. */
static uint32_t gen_find(const gen *g, const char *s, uint32_t len, uint64_t h, uint32_t *slot)
{
    uint32_t i = (uint32_t)h & g->mask;
    for (;; i = (i + 1) & g->mask) {
        uint32_t k = g->slots[i];
        if (k == 0)
            break;
        const char *c = g->blob + g->off[k - 1];
        if (memcmp(c, s, len) == 0 && c[len] == '\0')
            return g->first + k - 1;
    }
    *slot = i;
    return 0;
}

/* @return the new index of s in g, 0 if g is full. */
static uint32_t gen_add(gen *g, const char *s, uint32_t len, uint32_t slot)
{
    if (g->n == g->cap || g->blob_cap - g->bytes < len + 1)
        return 0;
    uint32_t k = g->n++;
    g->off[k] = g->bytes;
    memcpy(g->blob + g->bytes, s, len);
    g->blob[g->bytes + len] = '\0';
    g->bytes += len + 1;
    g->slots[slot] = k + 1;
    return g->first + k;
}

static const char *gen_get(const gen *g, uint32_t index)
{
    for (; g; g = g->next)
        if (index - g->first < g->n)
            return g->blob + g->off[index - g->first];
    return NULL;
}

static const char *find_index(uint32_t index)
{
    return gen_get(index & PINNED ? pinned_gens : events_gens, index);
}

/* The length to keep of s: at most MAX_STRING bytes, not ending inside a
 * UTF-8 sequence. */
static uint32_t clip(const char *s)
{
    size_t len = strnlen(s, MAX_STRING + 1);
    if (len <= MAX_STRING)
        return (uint32_t)len;
    len = MAX_STRING;
    while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
        len--;
    return (uint32_t)len;
}

/* Detach the retired generations that no kept event can name any more (the
 * list is newest first, so they are a tail). Under the lock. */
static gen *detach_freeable(void)
{
    if (holds || !events_gens)
        return NULL;
    uint64_t head = vt__ring_head(), cap = vt__ring_capacity();
    for (gen **p = &events_gens->next; *p; p = &(*p)->next)
        if (head >= (*p)->end_seq + cap) {
            gen *dead = *p;
            *p = NULL;
            return dead;
        }
    return NULL;
}

/* Whether [first, first + cap) meets a live generation's indexes. */
static bool range_in_use(uint32_t first, uint32_t cap)
{
    for (const gen *g = events_gens; g; g = g->next)
        if (first < g->first + g->cap && g->first < first + cap)
            return true;
    return false;
}

/* Retire the current generation and start a new one. Under the lock.
 * @return the new one, NULL if none could be made (*dead: to free). */
static gen *next_generation(gen **dead)
{
    uint32_t first = next_first;
    if (first > PINNED - GEN_STRINGS)
        first = 1;                  /* 2^31 indexes used: start over */
    if (range_in_use(first, GEN_STRINGS))
        return NULL;
    gen *g = gen_new(first, GEN_STRINGS, GEN_BYTES);
    if (!g)
        return NULL;
    next_first = first + GEN_STRINGS;
    if (events_gens)
        events_gens->end_seq = vt__ring_head();
    g->next = events_gens;
    events_gens = g;
    *dead = detach_freeable();
    return g;
}

uint32_t vt__string_intern(const char *s)
{
    if (!s || !*s)
        return 0;
    uint32_t len = clip(s), slot = 0;
    uint64_t h = vt__str_hash(s, len);
    gen *dead = NULL;
    pthread_mutex_lock(&lock);
    gen *g = events_gens;
    uint32_t i = g ? gen_find(g, s, len, h, &slot) : 0;
    if (!i && g)
        i = gen_add(g, s, len, slot);
    if (!i && (g = next_generation(&dead)) != NULL) {
        gen_find(g, s, len, h, &slot);
        i = gen_add(g, s, len, slot);
    }
    refused += !i;
    pthread_mutex_unlock(&lock);
    gens_free(dead);
    /* Out of memory: the event goes without its string. */
    return i;
}

uint32_t vt__string_intern_pinned(const char *s)
{
    if (!s || !*s)
        return 0;
    uint32_t len = clip(s), slot = 0, i = 0;
    uint64_t h = vt__str_hash(s, len);
    pthread_mutex_lock(&lock);
    for (gen *g = pinned_gens; g && !i; g = g->next)
        i = gen_find(g, s, len, h, g == pinned_gens ? &slot : &(uint32_t){ 0 });
    if (!i && pinned_gens)
        i = gen_add(pinned_gens, s, len, slot);
    if (!i && pinned_count < PINNED_MAX) {
        uint32_t cap = pinned_gens ? pinned_gens->cap * 2 : PINNED_FIRST;
        if (cap > PINNED_MAX - pinned_count)
            cap = PINNED_MAX - pinned_count;
        /* room for the average frame text, and for one string of any length */
        uint32_t blob = cap * 128 > MAX_STRING + 1 ? cap * 128 : MAX_STRING + 1;
        gen *g = gen_new(PINNED | (pinned_count + 1), cap, blob);
        if (g) {
            pinned_count += cap;
            g->next = pinned_gens;
            pinned_gens = g;
            gen_find(g, s, len, h, &slot);
            i = gen_add(g, s, len, slot);
        }
    }
    refused += !i;
    pthread_mutex_unlock(&lock);
    return i;
}

int vt__strings_get(uint32_t index, char *buf, size_t len)
{
    int n = -1;
    pthread_mutex_lock(&lock);
    const char *s = index ? find_index(index) : "";
    if (s) {
        size_t l = strlen(s);
        if (len) {
            size_t c = l < len - 1 ? l : len - 1;
            memcpy(buf, s, c);
            buf[c] = '\0';
        }
        n = (int)l;
    }
    pthread_mutex_unlock(&lock);
    return n;
}

void vt__strings_hold(void)
{
    pthread_mutex_lock(&lock);
    holds++;
    pthread_mutex_unlock(&lock);
}

void vt__strings_release(void)
{
    pthread_mutex_lock(&lock);
    if (holds)
        holds--;
    gen *dead = detach_freeable();
    pthread_mutex_unlock(&lock);
    gens_free(dead);
}

/* While held, a generation is not freed: the pointer stays valid. */
static const char *held_string(uint32_t index)
{
    pthread_mutex_lock(&lock);
    const char *s = find_index(index);
    pthread_mutex_unlock(&lock);
    return s;
}

#define REMAP_SLOTS 4096

int vt__strings_export(vt__snapshot_data *s, vt__strtab *st)
{
    /* Events naming one string tend to come together (a tensor's name on its
     * new and its uses): a small direct-mapped cache spares most lookups. */
    static const uint32_t none = UINT32_MAX;
    uint32_t (*cache)[2] = malloc(REMAP_SLOTS * sizeof *cache);
    if (!cache)
        return -ENOMEM;
    for (size_t i = 0; i < REMAP_SLOTS; i++)
        cache[i][0] = none;
    int rc = 0;
    size_t nrefs = s->nevents + s->ndevices;
    for (size_t i = 0; i < nrefs && rc == 0; i++) {
        uint32_t *ref = i < s->nevents ? &s->events[i].str
                                       : &s->devices[i - s->nevents].name;
        uint32_t old = *ref;
        if (old == 0)
            continue;
        uint32_t *c = cache[(old ^ old >> 12) & (REMAP_SLOTS - 1)];
        if (c[0] == old) {
            *ref = c[1];
            continue;
        }
        const char *str = held_string(old);
        uint32_t nw = str ? vt__strtab_add(st, str) : 0;
        if (nw == UINT32_MAX) {
            rc = -ENOMEM;
            nw = 0;
        }
        c[0] = old;
        c[1] = nw;
        *ref = nw;
    }
    free(cache);
    return rc;
}

void vt__strings_stats(vt__strings_usage *out)
{
    *out = (vt__strings_usage){ 0 };
    pthread_mutex_lock(&lock);
    for (const gen *g = events_gens; g; g = g->next) {
        out->event_strings += g->n;
        out->event_generations++;
        out->bytes += g->alloc;
    }
    for (const gen *g = pinned_gens; g; g = g->next) {
        out->pinned_strings += g->n;
        out->bytes += g->alloc;
    }
    out->refused = refused;
    pthread_mutex_unlock(&lock);
}
