/*
 * trace/check/check_sampled.c - storages the program revisits at random: the
 * entries of a replay buffer (the PyTorch DQN tutorial's ReplayMemory, a
 * deque of transitions sampled 128 at a time), a memory bank drawn from.
 *
 * Such an entry is used when it is made and then again now and then, at
 * steps no rule can foresee: between two draws it is unused for a few steps
 * as a matter of course, and after its last draw it waits for its eviction.
 * LINGER's usual gap (the median of one storage's gaps) is no grace for it:
 * the DQN tutorial under `run --track` had every transition flagged (1,062
 * findings with a buffer still filling, 715 with a full one of 200, each
 * entry unused for 2 to 19 steps before the end or its eviction), and a
 * fresh entry, not drawn yet, shows no gap of its own at all.
 *
 * What tells them apart is their call site's: storages made at one place
 * that are each used in several steps after the one that made them, at
 * irregular distances (draws), where a leak's are used in the step that
 * made them (and maybe the next) and never again, and state is used at
 * regular ones (every step, every validation). For such a site the gaps
 * are those of draws at a rate p a step, P(unused for g steps) = (1-p)^g:
 * its storages' grace is the g at which that chance falls under
 * VT_CHECK_SAMPLED_CHANCE, with p read from the site's gaps in the last half
 * of the marks (a buffer filling up is drawn from less and less). A site
 * whose draws stopped in that half (training over, the buffer still held)
 * has no recent gaps and is judged as any other.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check_internal.h"

/* A storage's gaps between the distinct steps it was used in, in order
 * (gaps[0] the one after its first use's step); returns how many, and the
 * step of its last use in *last_step. gaps has room for st->nuses. */
size_t vt__ck_use_step_gaps(const ck_model *m, const ck_storage *st, uint64_t *gaps,
                            uint32_t *last_step)
{
    const ck_use *u = &m->uses[st->first_use];
    size_t ng = 0;
    uint32_t prev = vt__ck_step_of(m, u[0].seq);
    for (uint32_t k = 1; k < st->nuses; k++) {
        uint32_t sk = vt__ck_step_of(m, u[k].seq);
        if (sk != prev)
            gaps[ng++] = sk - prev;
        prev = sk;
    }
    *last_step = prev;
    return ng;
}

typedef struct {
    uint32_t irregular;   /* storages with >= VT_CHECK_SAMPLED_MIN_GAPS gaps, not all equal */
    uint32_t regular;     /* as many gaps or more, all equal (used every k steps) */
    uint64_t gap_sum;     /* the steps of the gaps ending in the last half of the
                             marks, and of the waits from a last draw to a free */
    uint64_t ngaps;       /* the gaps (the draws that ended them) */
} site_draws;

int vt__ck_sampled_init(ck_sampled *s, const ck_model *m)
{
    memset(s, 0, sizeof *s);
    if (m->nmarks < 2 * VT_CHECK_SAMPLED_MIN_GAPS)
        return 0;   /* too few steps to tell draws from anything */
    if (vt__u64map_init(&s->site, 64) < 0)
        return -ENOMEM;
    site_draws *d = NULL;
    size_t nd = 0, capd = 0, capgaps = 0;
    uint64_t *gaps = NULL;
    uint32_t half = (uint32_t)(m->nmarks / 2);
    int rc = 0;
    for (size_t i = 0; i < m->nst; i++) {
        const ck_storage *st = &m->st[i];
        if (!st->ntensors || st->nuses < 2 || st->fate_unknown || st->gc_freed)
            continue;
        if (CK_GROW(gaps, capgaps, st->nuses) < 0) {
            rc = -ENOMEM;
            break;
        }
        uint32_t last;
        size_t ng = vt__ck_use_step_gaps(m, st, gaps, &last);
        if (!ng)
            continue;   /* used in one step: a fresh entry's site says what it is */
        uint32_t k = vt__u64map_get(&s->site, st->alloc_stack);
        if (k == VT__U64MAP_NONE) {
            if (CK_GROW(d, capd, nd + 1) < 0 ||
                vt__u64map_put(&s->site, st->alloc_stack, (uint32_t)nd) < 0) {
                rc = -ENOMEM;
                break;
            }
            memset(&d[nd], 0, sizeof d[nd]);
            k = (uint32_t)nd++;
        }
        uint64_t lo = gaps[0], hi = gaps[0];
        for (size_t g = 1; g < ng; g++) {
            lo = gaps[g] < lo ? gaps[g] : lo;
            hi = gaps[g] > hi ? gaps[g] : hi;
        }
        if (ng >= VT_CHECK_SAMPLED_MIN_GAPS)
            *(hi > lo ? &d[k].irregular : &d[k].regular) += 1;
        /* the gaps that end in the last half: walked back from the last use */
        uint32_t end = last;
        for (size_t g = ng; g-- > 0 && end >= half; end -= (uint32_t)gaps[g]) {
            d[k].gap_sum += gaps[g];
            d[k].ngaps++;
        }
        /* A freed one's wait from its last draw to its free (an eviction) is
         * a gap that no draw ended: steps of exposure without a draw. (Those
         * of a FIFO's entries are its longest: without them the rate read
         * from the others is too high.) One alive at the end may be one
         * nothing draws from any more (a leak): its wait is not counted. */
        uint32_t freed_at = st->freed ? vt__ck_step_of(m, st->free_seq) : 0;
        if (freed_at >= half && freed_at > last)
            d[k].gap_sum += freed_at - last;
    }
    free(gaps);
    if (rc == 0 && nd && !(s->grace = calloc(nd, sizeof *s->grace)))
        rc = -ENOMEM;
    if (rc == 0 && nd && !(s->mean_gap = calloc(nd, sizeof *s->mean_gap)))
        rc = -ENOMEM;
    for (size_t k = 0; rc == 0 && k < nd; k++) {
        if (d[k].irregular < VT_CHECK_SAMPLED_MIN_STORAGES || d[k].irregular <= d[k].regular ||
            !d[k].ngaps)
            continue;
        double mean = (double)d[k].gap_sum / (double)d[k].ngaps;
        if (mean <= 1.0)
            continue;   /* drawn every step lately: the usual gap is its grace */
        /* (1 - 1/mean)^g < chance */
        double g = ceil(log(VT_CHECK_SAMPLED_CHANCE) / log1p(-1.0 / mean));
        s->grace[k] = g > (double)UINT32_MAX ? UINT32_MAX : (uint32_t)g;
        s->mean_gap[k] = mean;
    }
    free(d);
    if (rc)
        vt__ck_sampled_free(s);
    return rc;
}

uint32_t vt__ck_sampled_grace(const ck_sampled *s, const ck_storage *st, double *mean_gap)
{
    uint32_t k = s->grace ? vt__u64map_get(&s->site, st->alloc_stack) : VT__U64MAP_NONE;
    if (k == VT__U64MAP_NONE || !s->grace[k])
        return 0;
    *mean_gap = s->mean_gap[k];
    return s->grace[k];
}

void vt__ck_sampled_free(ck_sampled *s)
{
    vt__u64map_free(&s->site);
    free(s->grace);
    free(s->mean_gap);
    memset(s, 0, sizeof *s);
}
