/*
 * trace/check/check_tape.c - TAPE: retention inside a step (see check.h,
 * "Rules"). A tape that keeps every intermediate until the end of backward
 * frees them all within the step that made them, so no mark ever sees them
 * alive; what they cost is the step's peak. A storage is flagged when it was
 * freed in the complete step of its last use, stayed alive after that use
 * for at least VT_CHECK_TAPE_PCT % of the step's uses, and was alive and unused at
 * the step's peak (the first moment the step's live bytes were highest):
 * without it, that peak would have been lower.
 *
 * The step's work is counted in tensor uses (the ops the tracker saw), not
 * time and not events: a tracker's own pauses record nothing but stretch
 * time, and the other events scale with how storages are recorded (on a
 * device each tensor's life is also the allocator's ALLOC and FREE, on the
 * CPU it is not), so a tape's mass free at the end of a step weighed twice
 * as much on CUDA as on the CPU.
 */
#include <errno.h>
#include <stdlib.h>

#include "bsearch.h"
#include "check_internal.h"

/* Every use's seq, sorted: uses in a seq interval by two binary searches. */
static uint64_t *sorted_use_seqs(const ck_model *m)
{
    uint64_t *s = malloc((m->nuses ? m->nuses : 1) * sizeof *s);
    if (!s)
        return NULL;
    for (size_t i = 0; i < m->nuses; i++)
        s[i] = m->uses[i].seq;
    qsort(s, m->nuses, sizeof *s, vt__qsort_u64);
    return s;
}

/* How many uses have lo < seq < hi. */
static uint64_t uses_between(const uint64_t *s, size_t n, uint64_t lo, uint64_t hi)
{
    size_t a, b;
    VT__PARTITION_POINT(n, i, s[i] <= lo, a);
    VT__PARTITION_POINT(n, i, s[i] < hi, b);
    return b > a ? b - a : 0;
}

typedef struct delta {
    uint64_t seq, time;
    int64_t bytes;
} delta;

static int cmp_delta(const void *a, const void *b)
{
    const delta *x = a, *y = b;
    if (x->seq != y->seq)
        return x->seq < y->seq ? -1 : 1;
    return (x->bytes > y->bytes) - (x->bytes < y->bytes);   /* frees first */
}

/* peak_seq[s], peak_time[s], peak_bytes[s]: the first event at which step s
 * (1-based, between marks s-1 and s) reached its highest live bytes. */
static int step_peaks(const ck_model *m, uint64_t *peak_seq, uint64_t *peak_time,
                      uint64_t *peak_bytes)
{
    delta *d = malloc((2 * m->nst + 1) * sizeof *d);
    if (!d)
        return -ENOMEM;
    size_t n = 0;
    int64_t live = 0;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        int64_t b = (int64_t)vt__ck_storage_bytes(st);
        if (st->alloc_seq)
            d[n++] = (delta){ st->alloc_seq, st->alloc_time, b };
        else
            live += b;
        if (st->freed)
            d[n++] = (delta){ st->free_seq, st->free_time, -b };
    }
    qsort(d, n, sizeof *d, cmp_delta);
    for (size_t k = 0; k <= m->nmarks; k++)
        peak_seq[k] = peak_time[k] = peak_bytes[k] = 0;
    for (size_t i = 0; i < n; i++) {
        live += d[i].bytes;
        uint32_t s = vt__ck_step_of(m, d[i].seq);
        if (live > 0 && (uint64_t)live > peak_bytes[s]) {
            peak_bytes[s] = (uint64_t)live;
            peak_seq[s] = d[i].seq;
            peak_time[s] = d[i].time;
        }
    }
    free(d);
    return 0;
}

int vt__ck_rule_tape(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                     vt__check_report *r)
{
    if (m->nmarks < 2)
        return 0;
    uint64_t *peak_seq = malloc((m->nmarks + 1) * sizeof *peak_seq);
    uint64_t *peak_time = malloc((m->nmarks + 1) * sizeof *peak_time);
    uint64_t *peak_bytes = malloc((m->nmarks + 1) * sizeof *peak_bytes);
    uint64_t *useq = sorted_use_seqs(m);
    int rc = peak_seq && peak_time && peak_bytes && useq
                 ? step_peaks(m, peak_seq, peak_time, peak_bytes) : -ENOMEM;
    for (size_t i = 0; i < m->nst && !rc; i++) {
        ck_storage *st = &m->st[i];
        if (!st->freed || !st->ntensors || !st->nuses || st->fate_unknown || st->gc_freed ||
            st->lingered)
            continue;
        const ck_use *last = &m->uses[st->first_use + st->nuses - 1];
        /* Freed by another thread than the one that used it last: on a
         * device, the autograd engine's thread releasing what a backward
         * node saved, right after the node read it. track()'s op observer
         * records that read only for a tensor that outlives the backward
         * (scripts/vramtrace/native/trackobs/observer.cpp, engine_ops), so
         * the last use seen is the forward's and the true one is unknown, at
         * most the free: not judged (on clean training loops, all of the
         * rule's findings but a program's 11 of 4,100 were such). */
        if (st->free_thread != st->last_use_thread)
            continue;
        uint32_t j = vt__ck_step_of(m, last->seq);
        /* a complete step (between two marks) that also saw the free */
        if (j == 0 || j >= m->nmarks || vt__ck_step_of(m, st->free_seq) != j)
            continue;
        /* Measured in uses: the program's own work (see the top). */
        uint64_t step_uses = uses_between(useq, m->nuses, m->mark_seq[j - 1], m->mark_seq[j]);
        uint64_t idle_uses = uses_between(useq, m->nuses, last->seq, st->free_seq);
        if (!step_uses || idle_uses * 100 < step_uses * (uint64_t)VT_CHECK_TAPE_PCT)
            continue;
        uint64_t step_ns = m->mark_time[j] - m->mark_time[j - 1];
        uint64_t idle_ns = st->free_time > last->time ? st->free_time - last->time : 0;
        if (!(last->seq < peak_seq[j] && peak_seq[j] < st->free_seq))
            continue;
        vt__check_finding *f =
            vt__ck_open_use_finding(m, opt, fs, r, (uint32_t)i, last, VT_CHECK_RULE_TAPE, &rc);
        if (!f)
            continue;   /* ignored, or out of memory: rc ends the loop */
        f->grace_mode = VT_CHECK_GRACE_STEPS;
        f->linger_from_seq = peak_seq[j];
        f->linger_from_time_ns = peak_time[j];
        f->linger_ns = idle_ns;
        f->byte_seconds = (double)f->bytes * ((double)idle_ns / 1e9);
        f->step_ns = step_ns;
        f->step_peak_bytes = peak_bytes[j];
        f->step_idle_pct = (uint32_t)(idle_uses * 100 / step_uses);
        /* What held it at the peak. */
        f->path_seq = peak_seq[j];
    }
    free(peak_seq);
    free(peak_time);
    free(peak_bytes);
    free(useq);
    return rc;
}
