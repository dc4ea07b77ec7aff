/*
 * trace/check/check_clock.c - the program's clock as the rules read it from
 * the model: steps (the marks), whether the program freed anything between
 * two moments (a trace without marks), and the program's own time, a
 * trace's times less the pauses vramtrace recorded for its own work (PAUSE
 * events: a tracked program's marks and ticks, whose holder walks stop the
 * program), which the time rules (linger, pinned) leave out of a tensor's
 * held time.
 *
 * The model collects the pauses as its walk meets them
 * (vt__ck_push_pause) and orders them once (vt__ck_order_pauses): in time
 * order, overlaps merged, each with the paused time before it, so that the
 * paused time between two moments is two binary searches.
 */
#include <errno.h>
#include <stdlib.h>

#include "bsearch.h"
#include "check_internal.h"

int vt__ck_push_pause(ck_model *m, const vt__event *e)
{
    if (!e->aux)
        return 0;
    if (CK_GROW(m->pause, m->cappause, m->npause + 1) < 0)
        return -ENOMEM;
    m->pause[m->npause++] = (struct ck_pause){ vt__pause_start(e), e->time_ns, 0 };
    return 0;
}

static int cmp_pause(const void *a, const void *b)
{
    const struct ck_pause *x = a, *y = b;
    return vt__order(x->from, y->from);
}

void vt__ck_order_pauses(ck_model *m)
{
    if (!m->npause)
        return;
    qsort(m->pause, m->npause, sizeof *m->pause, cmp_pause);
    size_t n = 0;
    for (size_t i = 0; i < m->npause; i++) {
        if (n && m->pause[i].from <= m->pause[n - 1].to) {
            if (m->pause[i].to > m->pause[n - 1].to)
                m->pause[n - 1].to = m->pause[i].to;
            continue;
        }
        m->pause[n++] = m->pause[i];
    }
    m->npause = n;
    uint64_t before = 0;
    for (size_t i = 0; i < n; i++) {
        m->pause[i].before = before;
        before += m->pause[i].to - m->pause[i].from;
    }
}

/* Paused time before moment t: the whole pauses that ended by t, and the
 * part of the one t falls in. */
static uint64_t paused_before(const ck_model *m, uint64_t t)
{
    size_t k;
    VT__PARTITION_POINT(m->npause, i, m->pause[i].from < t, k);
    if (k == 0)
        return 0;
    const struct ck_pause *p = &m->pause[k - 1];
    return p->before + ((t < p->to ? t : p->to) - p->from);
}

uint64_t vt__ck_paused_time(const ck_model *m, uint64_t a, uint64_t b)
{
    return b <= a ? 0 : paused_before(m, b) - paused_before(m, a);
}

uint64_t vt__ck_program_time(const ck_model *m, uint64_t a, uint64_t b)
{
    return b <= a ? 0 : (b - a) - vt__ck_paused_time(m, a, b);
}

uint64_t vt__ck_program_time_after(const ck_model *m, uint64_t a, uint64_t d)
{
    uint64_t t = a + d;
    size_t k;
    VT__PARTITION_POINT(m->npause, i, m->pause[i].to <= a, k);
    /* each pause that begins before the moment reached pushes it on */
    for (; k < m->npause && m->pause[k].from < t; k++)
        t += m->pause[k].to - (m->pause[k].from > a ? m->pause[k].from : a);
    return t;
}

/* Step of an event: the number of marks at or before it. */
uint32_t vt__ck_step_of(const ck_model *m, uint64_t seq)
{
    size_t lo;
    VT__PARTITION_POINT(m->nmarks, i, m->mark_seq[i] <= seq, lo);
    return (uint32_t)lo;
}

const char *vt__ck_step_label(const ck_model *m, uint32_t step)
{
    if (step == 0 || step > m->nmarks || !m->mark_label)
        return "";
    return vt__ck_string(m->s, m->mark_label[step - 1]);
}

int vt__ck_freed_between(const ck_model *m, uint64_t a, uint64_t b)
{
    size_t lo;
    VT__PARTITION_POINT(m->nfree_time, i, m->free_time[i] <= a, lo);
    return lo < m->nfree_time && m->free_time[lo] < b;
}

/* A run that marks its steps and then goes on without them (an evaluation
 * after the last training step, which has no optimizer step for `run` to
 * mark; the tracker ticks there for the same reason: vramtrace/torch/
 * _marks.py, _QUIET_STEPS): NEVER-FREED judges that time in steps of the
 * run's usual length. Before, nothing made after the last mark could be
 * found: a BERT fine-tuning script whose final evaluation (without
 * no_grad) kept every batch's graph, 260 MiB alive at its end, got "0
 * findings". Counted in the program's own time: a tool's pause (a holder
 * walk at exit) makes no step. (LINGER and OUTLIER do not judge that time:
 * tried, they flagged what a program keeps on purpose to its end, its
 * optimizer's state, the results of its last evaluation.) */
int vt__ck_quiet_tail(ck_model *m)
{
    m->quiet_steps = 0;
    if (m->nmarks < 2)
        return 0;
    uint64_t *gaps = malloc((m->nmarks - 1) * sizeof *gaps);
    if (!gaps)
        return -ENOMEM;
    size_t ng = 0;
    for (size_t i = 1; i < m->nmarks; i++)
        if (m->mark_time[i] > m->mark_time[i - 1])
            gaps[ng++] = vt__ck_program_time(m, m->mark_time[i - 1], m->mark_time[i]);
    uint64_t gap = vt__ck_median(gaps, ng);
    free(gaps);
    uint64_t last = m->mark_time[m->nmarks - 1];
    uint64_t tail = m->last_event_time > last ? vt__ck_program_time(m, last, m->last_event_time)
                                              : 0;
    if (!gap || tail / gap < CK_QUIET_STEPS)
        return 0;
    m->quiet_from = last;
    m->quiet_gap = gap;
    m->quiet_steps = tail / gap > UINT32_MAX / 2 ? UINT32_MAX / 2 : (uint32_t)(tail / gap);
    return 0;
}

uint32_t vt__ck_quiet_step_of(const ck_model *m, uint64_t time)
{
    if (!m->quiet_steps || time < m->quiet_from)
        return UINT32_MAX;
    uint64_t k = vt__ck_program_time(m, m->quiet_from, time) / m->quiet_gap;
    return k < m->quiet_steps ? (uint32_t)(m->nmarks + k) : UINT32_MAX;
}
