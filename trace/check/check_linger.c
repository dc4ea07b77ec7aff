/*
 * trace/check/check_linger.c - LINGER: a storage alive after the last use of the
 * tensors on it for longer than its grace (see check.h, "Rules").
 *
 * The grace is counted in complete steps between marks when the trace has
 * marks (auto: the storage's usual gap between use steps, or what a call
 * site whose storages are drawn from at random gives them: check_sampled.c),
 * else in time
 * (auto: max(1 s, 10x its median use gap, 5% of the trace)) of the
 * program's own: the time the tool paused it (PAUSE events: a tracker's
 * holder walks) does not count.
 */
#include <errno.h>
#include <stdlib.h>

#include "check_internal.h"

int vt__ck_rule_linger(ck_model *m, const vt__check_options *opt, ck_findings *fs,
                       vt__check_report *r)
{
    int steps = opt->grace_mode == VT_CHECK_GRACE_STEPS ||
                (opt->grace_mode == VT_CHECK_GRACE_AUTO && m->nmarks > 0);
    r->grace_mode = steps ? VT_CHECK_GRACE_STEPS : VT_CHECK_GRACE_TIME;
    uint64_t dur = m->end_time > m->start_time ? m->end_time - m->start_time : 0;
    uint64_t frac = dur / 100 * VT_CHECK_TIME_FRACTION_PCT;
    uint64_t *gaps = NULL;
    size_t capgaps = 0;
    int rc = 0;

    for (size_t i = 0; i < m->nst && !rc; i++) {
        ck_storage *st = &m->st[i];
        if (!st->ntensors || !st->nuses || st->fate_unknown || st->gc_freed)
            continue;
        const ck_use *u = &m->uses[st->first_use];
        const ck_use *last = &u[st->nuses - 1];
        uint64_t end_time = st->freed ? st->free_time : m->end_time;
        if (CK_GROW(gaps, capgaps, st->nuses) < 0) {
            rc = -ENOMEM;
            break;
        }
        /* Median time gap between uses. */
        size_t ng = 0;
        for (uint32_t k = 1; k < st->nuses; k++)
            gaps[ng++] = u[k].time >= u[k - 1].time ? u[k].time - u[k - 1].time : 0;
        uint64_t gap_ns = vt__ck_median(gaps, ng);
        /* declared again (format 1.11): its gaps before the window, as the
         * tracker saw them (in marks; in ns where the program made none) */
        uint64_t rest = st->again_rest;
        if (!steps && rest > gap_ns)
            gap_ns = rest;

        uint32_t j = vt__ck_step_of(m, last->seq), need = 0, unused = 0, gap_steps = 0;
        uint32_t drawn_grace = 0;
        double drawn_gap = 0;
        uint64_t from_seq = 0, from_time = 0;
        int hit = 0;
        if (steps) {
            /* Median distance between consecutive distinct use steps. */
            ng = vt__ck_use_step_gaps(m, st, gaps, &j);
            gap_steps = (uint32_t)vt__ck_median(gaps, ng);
            if (rest && rest < UINT32_MAX && rest + 1 > gap_steps)
                gap_steps = (uint32_t)rest + 1;
            if (opt->grace_mode == VT_CHECK_GRACE_STEPS)
                need = opt->grace_steps;
            else
                need = gap_steps > 1 ? gap_steps : 1;
            /* an entry of a buffer drawn from: as long as a draw may miss it */
            if (opt->grace_mode == VT_CHECK_GRACE_AUTO)
                drawn_grace = vt__ck_sampled_grace(&m->drawn, st, &drawn_gap);
            if (drawn_grace > need)
                need = drawn_grace;
            else
                drawn_grace = 0;
            /* Complete steps after j the storage outlived: step k is complete
             * and outlived when mark k+1 exists and precedes the free. */
            uint32_t f = st->freed ? vt__ck_step_of(m, st->free_seq) : (uint32_t)m->nmarks;
            unused = f > j + 1 ? f - j - 1 : 0;
            /* Alive at mark j+1+need (0-based index j+need). */
            if ((size_t)j + need < m->nmarks) {
                uint64_t ms = m->mark_seq[j + need];
                if (!st->freed || st->free_seq > ms) {
                    hit = 1;
                    from_seq = ms;
                    from_time = m->mark_time[j + need];
                }
            }
        } else {
            uint64_t t = opt->grace_mode == VT_CHECK_GRACE_TIME ? opt->grace_ns : VT_CHECK_TIME_MIN_NS;
            if (opt->grace_mode != VT_CHECK_GRACE_TIME) {
                if (gap_ns && gap_ns * VT_CHECK_GAP_FACTOR / VT_CHECK_GAP_FACTOR == gap_ns &&
                    gap_ns * VT_CHECK_GAP_FACTOR > t)
                    t = gap_ns * VT_CHECK_GAP_FACTOR;
                if (frac > t)
                    t = frac;
            }
            /* the program's own time: the tool's pauses (a tracker's
             * holder walks) stretch a temporary's wall time, not its use */
            if (end_time > last->time && vt__ck_program_time(m, last->time, end_time) > t) {
                hit = 1;
                from_time = vt__ck_program_time_after(m, last->time, t);
                from_seq = vt__ck_seq_at_time(m, from_time, st->freed ? st->free_seq : 0);
                if (from_seq <= last->seq)
                    from_seq = last->seq + 1;
            }
        }
        if (!hit)
            continue;
        vt__check_finding *f =
            vt__ck_open_use_finding(m, opt, fs, r, (uint32_t)i, last, VT_CHECK_RULE_LINGER, &rc);
        if (!f)
            continue;   /* ignored, or out of memory: rc ends the loop */
        f->grace_mode = r->grace_mode;
        f->usual_gap_steps = gap_steps;
        f->sampled_grace_steps = drawn_grace;
        f->sampled_mean_gap = drawn_gap;
        f->usual_gap_ns = gap_ns;
        f->steps_unused = unused;
        f->linger_from_seq = from_seq;
        f->linger_from_time_ns = from_time;
        f->linger_ns = end_time > last->time ? end_time - last->time : 0;
        f->paused_ns = vt__ck_paused_time(m, last->time, end_time);
        f->byte_seconds = (double)f->bytes * ((double)f->linger_ns / 1e9);
        f->path_seq = st->freed ? from_seq : UINT64_MAX;
        st->lingered = 1;
        /* its owner dropped, what keeps it may be a small part of it */
        rc = vt__ck_linger_pinning(m, (uint32_t)i, r->pinned_ratio, f);
    }
    free(gaps);
    return rc;
}
