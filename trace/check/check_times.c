/*
 * trace/check/check_times.c - every event's time and seq, for the time rules'
 * search (vt__ck_seq_at_time): the first event at or after a moment.
 *
 * Only a trace judged by time needs it (no marks, or `--grace S`), and the
 * events are read a third time for it. Kept compact, as a delta stream in
 * blocks of CK_TIME_BLOCK events (a block's first time and seq whole, then
 * each event's differences from the one before it, zigzag varints: a few
 * bytes an event rather than 16), so that 100M events fit; the search is
 * the same binary search over the same values, decoding a block per probe.
 * Times are not sorted (threads' clocks jitter): the search's answer is
 * defined by its probes, which the encoding leaves exactly as they were.
 */
#include <errno.h>
#include <stdlib.h>

#include "buf.h"
#include "bsearch.h"
#include "check_internal.h"
#include "errbuf.h"
#include "event_stream.h"

#define CK_TIME_BLOCK 64

struct ck_times {
    uint64_t *time0, *seq0;  /* each block's first event's */
    size_t *off;             /* where each block's deltas start in d */
    vt__buf d;               /* the deltas of the events after each block's first */
    size_t n;
};

void vt__ck_times_free(ck_times *t)
{
    if (!t)
        return;
    free(t->time0);
    free(t->seq0);
    free(t->off);
    vt__buf_free(&t->d);
    free(t);
}

/* Event i's time and seq. */
static void event_at(const ck_times *t, size_t i, uint64_t *time, uint64_t *seq)
{
    size_t b = i / CK_TIME_BLOCK;
    uint64_t tm = t->time0[b], sq = t->seq0[b];
    vt__cur c = vt__cur_make(t->d.p + t->off[b], t->d.n - t->off[b]);
    for (size_t k = b * CK_TIME_BLOCK; k < i; k++) {
        tm += (uint64_t)vt__get_svarint(&c);
        sq += (uint64_t)vt__get_svarint(&c);
    }
    *time = tm;
    *seq = sq;
}

static uint64_t time_at(const ck_times *t, size_t i)
{
    uint64_t tm, sq;
    event_at(t, i, &tm, &sq);
    return tm;
}

uint64_t vt__ck_seq_at_time(const ck_model *m, uint64_t t, uint64_t limit)
{
    const ck_times *x = m->times;
    size_t lo, n = x ? x->n : 0;
    VT__PARTITION_POINT(n, i, time_at(x, i) < t, lo);
    uint64_t seq = UINT64_MAX, tm;
    if (lo < n)
        event_at(x, lo, &tm, &seq);
    if (limit && seq >= limit)
        seq = limit - 1;
    return seq;
}

int vt__ck_model_times(ck_model *m)
{
    if (m->times || !m->nevents)
        return 0;
    ck_times *t = calloc(1, sizeof *t);
    size_t nb = (m->nevents + CK_TIME_BLOCK - 1) / CK_TIME_BLOCK;
    if (!t || !(t->time0 = malloc(nb * sizeof *t->time0)) ||
        !(t->seq0 = malloc(nb * sizeof *t->seq0)) || !(t->off = malloc(nb * sizeof *t->off))) {
        vt__ck_times_free(t);
        return vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
    }
    m->times = t;
    vt__event e;
    uint64_t prev_t = 0, prev_s = 0;
    int rc = vt__event_stream_rewind(m->es);
    while (rc == 0 && t->n < m->nevents && (rc = vt__event_stream_next(m->es, &e)) == 1) {
        rc = 0;
        size_t b = t->n / CK_TIME_BLOCK;
        if (t->n % CK_TIME_BLOCK == 0) {
            t->time0[b] = e.time_ns;
            t->seq0[b] = e.seq;
            t->off[b] = t->d.n;
        } else {
            vt__put_svarint(&t->d, (int64_t)(e.time_ns - prev_t));
            vt__put_svarint(&t->d, (int64_t)(e.seq - prev_s));
        }
        prev_t = e.time_ns;
        prev_s = e.seq;
        t->n++;
    }
    if (rc < 0)
        return rc;   /* the stream's error, its line in m->err */
    if (t->d.oom)
        return vt__errf(m->err, m->errlen, -ENOMEM, "check: out of memory");
    return t->n == m->nevents ? 0 : vt__errf(m->err, m->errlen, -EIO, "check: events changed");
}
