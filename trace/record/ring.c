/*
 * trace/record/ring.c - the event ring: fixed capacity, wait-free for writers,
 * oldest overwritten first.
 *
 * A writer takes the next sequence number with one fetch_add and owns slot
 * (seq & mask) for the time of the write: the slot's stamp becomes seq|BUSY,
 * the fields are stored, and the stamp becomes seq (release). A reader (the snapshot) accepts a slot only if
 * its stamp equals the seq it expects before and after copying the fields -
 * a seqlock per slot, so a torn or overwritten slot is detected and skipped,
 * and no writer ever waits for a reader.
 *
 * The physical ring is a power of two (index by mask, no division on the
 * event path) of at least the configured capacity N; readers keep only the
 * newest N, so the accounting is exact for any N: after N+k events, k are
 * counted as overwritten.
 *
 * The one case the stamps cannot order: the ring wrapped all the way round
 * while a thread was preempted in the middle of writing the same slot. Two
 * writers then mix one slot; a 16-bit check over the payload (in spare bits
 * of the last word) lets the reader reject the mix, and the event is counted
 * as overwritten.
 */
#include "rec_snap.h"
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define BUSY (UINT64_C(1) << 63)
#define NW 9                     /* payload words per slot */

typedef struct slot {
    _Atomic uint64_t stamp;      /* seq when complete, seq|BUSY while written */
    _Atomic uint64_t w[NW];      /* the event, packed (see vt__ring_write) */
} slot;

_Static_assert(sizeof(slot) == VT_RING_EVENT_BYTES, "ring:SIZE counts VT_RING_EVENT_BYTES a slot");

static slot *ring;               /* mmap'ed, pages committed on first touch */
static uint64_t mask;            /* physical slots - 1 */
/* The reader's seqlock check: the payload loads must complete before the
 * stamp is read again. ThreadSanitizer does not model fences (-Wtsan), so
 * under it the payload loads are acquire loads instead, which give the same
 * order in a form it can check. */
#if defined(__SANITIZE_THREAD__)
#define DATA_ORDER memory_order_acquire
#define READ_FENCE() ((void)0)
#else
#define DATA_ORDER memory_order_relaxed
#define READ_FENCE() atomic_thread_fence(memory_order_acquire)
#endif

static uint64_t capacity;        /* N: events a reader keeps */
static _Atomic uint64_t head;    /* last seq handed out (seq starts at 1) */

static void populate(uint64_t chunk);

int vt__ring_init(uint64_t cap)
{
    if (ring)
        return 0;
    if (cap < 16)
        cap = 16;
    uint64_t phys = 16;
    while (phys < cap)
        phys <<= 1;
    size_t bytes = (size_t)phys * sizeof(slot);
    void *p = vt__map_tables(bytes);
    if (p == NULL)
        return -errno;
    /* No MADV_HUGEPAGE: a huge-page fault may stall the writing thread in
     * direct compaction (bench_alloc's first lap, now and then, several
     * times slower). 4 KiB pages are committed ahead of the writers instead
     * (populate_ahead), on the first lap only. */
    ring = p;
    mask = phys - 1;
    capacity = cap;
    populate(0);
    populate(1);
    return 0;
}

/* Committing the ring's pages ahead of the writers. A slot on a page not yet
 * touched costs its writer a page fault (about 2.5 us with the kernel's
 * memory accounting, one per 51 events): on a PyTorch step of ~130 events,
 * 9 us of the 87 us that observing PyTorch's allocator added to a step of
 * bench_torch's loop (perf, the loop alone). MADV_POPULATE_WRITE (Linux
 * 5.14) commits a whole chunk in one call, without a fault a page: the
 * writer whose event starts a chunk commits the next one, so the writers
 * never meet an uncommitted page on the first lap (later laps find every
 * page committed). On an older kernel the call fails and the faults stay. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define CHUNK_SLOTS VT_RING_CHUNK_SLOTS   /* 80 KiB of slots */

static void populate(uint64_t chunk)
{
    uint64_t first = chunk * CHUNK_SLOTS;
    if (first > mask)
        return;                         /* beyond the ring: the first lap is over */
    uint64_t n = mask + 1 - first < CHUNK_SLOTS ? mask + 1 - first : CHUNK_SLOTS;
    /* the pages the chunk's slots lie on (its first and last may be shared
     * with the neighbouring chunks: committing a page twice is harmless) */
    uintptr_t lo = (uintptr_t)&ring[first] & ~(uintptr_t)4095;
    uintptr_t hi = (uintptr_t)&ring[first + n];
    (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

static inline void populate_ahead(uint64_t seq)
{
    /* seq's chunk was committed when the one before it began; commit the
     * next. Only on the first lap: seq <= mask there. */
    if (vt__unlikely((seq & (CHUNK_SLOTS - 1)) == 0) && seq <= mask)
        populate(seq / CHUNK_SLOTS + 1);
}

uint64_t vt__ring_capacity(void) { return capacity; }
uint64_t vt__ring_head(void) { return atomic_load_explicit(&head, memory_order_acquire); }
const void *vt__ring_slot(uint64_t seq) { return &ring[seq & mask]; }

/* 16 bits over the payload and seq: tells a slot mixed by two writers (a
 * lap during a write) from a clean one. */
static inline uint64_t check16(uint64_t seq, const uint64_t w[NW])
{
    uint64_t h = seq;
    for (int i = 0; i < NW - 1; i++)
        h = (h ^ w[i]) * UINT64_C(0x9E3779B97F4A7C15);
    h ^= w[NW - 1] & ~(UINT64_C(0xffff) << 16);
    h *= UINT64_C(0x9E3779B97F4A7C15);
    return (h >> 48) << 16;
}

VT_REC_TEXT uint64_t vt__ring_write(const vt__ring_rec *r)
{
    uint64_t seq = atomic_fetch_add_explicit(&head, 1, memory_order_relaxed) + 1;
    populate_ahead(seq);
    slot *s = &ring[seq & mask];
    /* The next event's fetch_add waits until this event's stores have left
     * the store buffer; to cold lines that is a cache miss each. Fetch the
     * lines a few events ahead, so that stores land in cache. */
    const char *ahead = (const char *)&ring[(seq + 6) & mask];
    __builtin_prefetch(ahead, 1, 3);
    __builtin_prefetch(ahead + 64, 1, 3);
    /* Plain stores, no locked instruction on the slot: its cache line is
     * usually cold, and a CAS would wait for it where stores just queue. */
    uint64_t w[NW] = {
        r->time_ns, r->stream, r->addr, r->req_size, r->size, r->aux, r->aux2,
        (uint64_t)r->thread << 32 | r->stack,
        (uint64_t)r->str << 32 | (uint64_t)r->kind << 8 | (uint8_t)r->device,
    };
    w[NW - 1] |= check16(seq, w);
    atomic_store_explicit(&s->stamp, seq | BUSY, memory_order_relaxed);
    /* Orders the BUSY stamp before the payload stores (seqlock writer). */
    atomic_thread_fence(memory_order_release);
    for (int i = 0; i < NW; i++)
        atomic_store_explicit(&s->w[i], w[i], memory_order_relaxed);
    atomic_store_explicit(&s->stamp, seq, memory_order_release);
    return seq;
}

/* Copy one slot if it still holds `seq`. @return true if consistent. */
static bool read_slot(uint64_t seq, vt__event *e, const vt__timecal *cal)
{
    slot *s = &ring[seq & mask];
    uint64_t s1 = atomic_load_explicit(&s->stamp, memory_order_acquire);
    /* A writer of exactly this seq still in flight: it finishes in a few
     * nanoseconds unless preempted, so wait a little, then give up. */
    for (int spin = 0; s1 == (seq | BUSY) && spin < 2000; spin++) {
        if (spin > 100)
            sched_yield();
        s1 = atomic_load_explicit(&s->stamp, memory_order_acquire);
    }
    if (s1 != seq)
        return false;
    uint64_t w[NW];
    for (int i = 0; i < NW; i++)
        w[i] = atomic_load_explicit(&s->w[i], DATA_ORDER);
    READ_FENCE();
    if (atomic_load_explicit(&s->stamp, memory_order_relaxed) != s1)
        return false;
    if ((w[NW - 1] & (UINT64_C(0xffff) << 16)) != check16(seq, w))
        return false;      /* two writers mixed this slot */
    *e = (vt__event){
        .seq = seq, .time_ns = w[0], .stream = w[1], .addr = w[2], .req_size = w[3],
        .size = w[4], .aux = w[5], .aux2 = w[6],
        .thread = (uint32_t)(w[7] >> 32), .stack = (uint32_t)w[7],
        .str = (uint32_t)(w[8] >> 32), .kind = (uint8_t)(w[8] >> 8), .device = (int8_t)(w[8] & 0xff),
    };
    e->time_ns = vt__time_to_ns(cal, e->time_ns);
    return true;
}

/* Copy the newest events (at most the capacity) in seq order into a new
 * array. Writers go on meanwhile; whatever they overwrite during the copy is
 * skipped and counted. The copy runs newest first: writers overwrite from
 * the oldest end, so going toward them it meets them last and keeps the
 * newest events. A copy can still lose the whole window - the copying
 * thread preempted right after reading the head while a busy writer (a
 * thread marking in a loop) laps the ring: seen as a snapshot of zero
 * events under ASan and on a loaded 2-core machine, where four tries in a
 * row once lost it - so a copy that kept nothing while the head moved is made
 * again from the new head, up to COPY_TRIES times. A lost try is cheap (every
 * slot fails its stamp check at once), so even the default million-event ring
 * bounds the retries to a fraction of a second.
 * @return 0 or -ENOMEM. */
#define COPY_TRIES 64

int vt__ring_copy(vt__event **out, size_t *nout, uint64_t *recorded, uint64_t *overwritten)
{
    *out = NULL;
    *nout = 0;
    *recorded = vt__ring_head();
    *overwritten = 0;
    if (!ring || *recorded == 0)
        return 0;
    vt__event *ev = NULL;
    size_t have = 0;   /* events ev has room for */
    vt__timecal cal;
    vt__time_calibrate(&cal);
    uint64_t h = 0, lo = 1;
    size_t n = 0, want = 0;
    for (int attempt = 0; attempt < COPY_TRIES; attempt++) {
        h = vt__ring_head();
        lo = h > capacity ? h - capacity + 1 : 1;
        want = (size_t)(h - lo + 1);
        if (want > have) {
            vt__event *more = realloc(ev, want * sizeof *ev);
            if (!more) {
                free(ev);
                return -ENOMEM;
            }
            ev = more;
            have = want;
        }
        n = 0;   /* events kept, at the end of ev's first want slots, in seq order */
        for (uint64_t seq = h; seq >= lo; seq--)
            if (read_slot(seq, &ev[want - 1 - n], &cal))
                n++;
        if (n > 0 || vt__ring_head() == h)
            break;
    }
    memmove(ev, ev + (want - n), n * sizeof *ev);
    /* Everything before the window, plus what vanished from it meanwhile. */
    *recorded = h;
    *overwritten = (lo - 1) + (want - n);
    *out = ev;
    *nout = n;
    return 0;
}
