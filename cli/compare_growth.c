/*
 * cli/compare_growth.c - growth across steps and ranks (`vramtrace compare`).
 *
 * Every rank's marks are its steps' ends (a program's own, or the optimizer
 * steps `vramtrace run` marks): the k-th mark of each rank is the same step,
 * so the ranks line up by step even when their clocks and speeds differ.
 * Per rank, the bytes allocated right after each mark (what outlives its
 * step), and per call site the bytes of its allocations alive there; each
 * series is judged by the checker's vt__check_growth_fit (warm-up skipped, a
 * robust slope per step), the one rule `check`'s growth finding uses too.
 *
 * Which ranks differ: the ranks' slopes per step against their median, as
 * a robust outlier test (one leaking rank cannot move the median of four):
 * a rank differs when its slope is further from the median than
 * VT_GROWTH_FLAT_PER_STEP (or a thousandth of the ranks' median bytes at
 * their last mark) and than 4 x the median of every rank's distance to it.
 * For each rank that differs, its call sites (the program's line, as
 * summary and leaks pick it: vt__report_site_frame) whose live bytes grow,
 * by how much more per step than the other ranks' median at the same line,
 * and what holds them where the recording knows (track(): the checker's
 * holder of that rank's largest finding made at the line, as `check` lists
 * its causes).
 *
 * A rank comes as its series (compare_series.c: its marks, and per call
 * site the bytes alive over each run of marks), collected while its
 * snapshot was read and let go; the holders come from the checker's report
 * on the ranks that differ, which the caller reads again for them.
 *
 * Cost: two binary searches per allocation (the series), O(marks) per call
 * site that outlives a step.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "compare_growth.h"
#include "grow.h"
#include "report_util.h"

/* Rows of the text table at most: the first few marks and the last ones. */
#define TABLE_HEAD 3
#define TABLE_TAIL 8

struct rank_growth {
    int rank;
    const char *label;   /* vt__growth_rank's */
    size_t nmarks;              /* the rank's own marks */
    uint64_t *alive;            /* bytes allocated at each aligned mark */
    vt__check_growth fit;
    int differs;
};

struct site_growth {
    char *name;                 /* its site, as vt__report_site_name says it */
    size_t rank;                /* index into ranks */
    vt__check_growth fit;
    int64_t others;             /* the other judged ranks' median per step at this site */
    char *held_by;              /* what holds its storages (shown sites only), or NULL */
};

struct vt__growth {
    struct rank_growth *ranks;
    size_t nranks;
    size_t nmarks;              /* aligned: the fewest marks of a rank that has some */
    char *const *labels;        /* the mark labels shown: those of the first rank
                                   with the fewest marks */
    size_t njudged;             /* ranks with enough marks for the fit */
    int64_t median;             /* the judged ranks' median per step */
    uint64_t flat;              /* growth per step that counts as flat */
    struct site_growth *sites;  /* growing or shrinking sites, by rank then excess */
    size_t nsites;
};

static int cmp_i64(const void *p, const void *q)
{
    int64_t x = *(const int64_t *)p, y = *(const int64_t *)q;
    return (x > y) - (x < y);
}

/* Lower median of v[0..n) (reorders v): of two ranks, the smaller. */
static int64_t lower_median(int64_t *v, size_t n)
{
    if (!n)
        return 0;
    qsort(v, n, sizeof *v, cmp_i64);
    return v[(n - 1) / 2];
}

static int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

/* Grow g->sites by one. @return it, or NULL. */
static struct site_growth *push_site(vt__growth *g, size_t *capsites)
{
    if (vt__grow_from((void **)&g->sites, capsites, g->nsites + 1, sizeof *g->sites, 64))
        return NULL;
    return &g->sites[g->nsites++];
}

/* The series of one rank on the aligned marks: its total and its sites
 * (appended to g->sites). A span's marks are the rank's own: clamped to
 * the aligned ones, what it is alive at among them. */
static int rank_series(vt__growth *g, size_t i, const vt__growth_series *gs, size_t *capsites)
{
    size_t nm = g->nmarks;
    struct rank_growth *rg = &g->ranks[i];
    int64_t *delta = malloc((nm + 1) * sizeof *delta);
    uint64_t *v = malloc((nm ? nm : 1) * sizeof *v);
    rg->alive = calloc(nm ? nm : 1, sizeof *rg->alive);
    int rc = 0;
    if (!delta || !v || !rg->alive) {
        rc = -ENOMEM;
        goto out;
    }
    int64_t live = 0;
    for (size_t k = 0; k < nm; k++) {
        live += gs->total[k];
        rg->alive[k] = (uint64_t)live;
    }
    if ((rc = vt__check_growth_fit(rg->alive, nm, &rg->fit)) != 0)
        goto out;
    const vt__growth_span *sp = gs->spans;
    size_t n = gs->nspans;   /* by site */
    for (size_t s0 = 0; s0 < n;) {
        size_t s1 = s0, seen = 0;
        memset(delta, 0, (nm + 1) * sizeof *delta);
        for (; s1 < n && sp[s1].key == sp[s0].key; s1++) {
            size_t a = sp[s1].a < nm ? sp[s1].a : nm, b = sp[s1].b < nm ? sp[s1].b : nm;
            if (a >= b)
                continue;   /* alive at no aligned step's end */
            delta[a] += (int64_t)sp[s1].size;
            delta[b] -= (int64_t)sp[s1].size;
            seen = 1;
        }
        if (!seen) {
            s0 = s1;
            continue;
        }
        live = 0;
        for (size_t k = 0; k < nm; k++) {
            live += delta[k];
            v[k] = (uint64_t)live;
        }
        vt__check_growth fit;
        if ((rc = vt__check_growth_fit(v, nm, &fit)) != 0)
            goto out;
        if (fit.judged && fit.per_step) {   /* a flat site is the same on every rank */
            struct site_growth *x = push_site(g, capsites);
            char *name = x ? strdup(gs->names[sp[s0].key]) : NULL;
            if (!name) {
                g->nsites -= x != NULL;
                rc = -ENOMEM;
                goto out;
            }
            *x = (struct site_growth){ name, i, fit, 0, NULL };
        }
        s0 = s1;
    }
out:
    free(delta);
    free(v);
    return rc;
}

static int cmp_site_name(const void *p, const void *q)
{
    const struct site_growth *x = p, *y = q;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->rank > y->rank) - (x->rank < y->rank);
}

/* What a site grows more per step on its rank than on the others. */
static int64_t excess(const struct site_growth *x) { return x->fit.per_step - x->others; }

static int cmp_site_shown(const void *p, const void *q)
{
    const struct site_growth *x = p, *y = q;
    if (x->rank != y->rank)
        return x->rank < y->rank ? -1 : 1;
    if (excess(x) != excess(y))
        return excess(x) > excess(y) ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* A site shown for a rank that differs: it grows there, more than on the
 * others. */
static int site_shown(const vt__growth *g, const struct site_growth *x)
{
    return g->ranks[x->rank].differs && x->fit.grows && excess(x) > 0;
}

bool vt__growth_differs(const vt__growth *g, size_t i)
{
    return g->ranks[i].differs;
}

int vt__growth_holders(vt__growth *g, size_t i, const vt__snapshot_data *s,
                       const vt__check_report *rep)
{
    char name[1024], held[2048];
    int rc = 0;
    for (size_t f = 0; f < rep->nfindings && !rc; f++) {
        const vt__check_finding *x = &rep->findings[f];
        if (!vt__check_finding_holder(x, held, sizeof held))
            continue;
        vt__report_site_name(s, vt__report_site_frame(s, x->alloc_stack), name, sizeof name);
        for (size_t k = 0; k < g->nsites && !rc; k++) {
            struct site_growth *site = &g->sites[k];
            if (site->rank == i && !site->held_by && site_shown(g, site) &&
                !strcmp(site->name, name) && !(site->held_by = strdup(held)))
                rc = -ENOMEM;
        }
    }
    return rc;
}

int vt__growth_build(const vt__growth_rank *r, size_t n, vt__growth **out)
{
    *out = NULL;
    vt__growth *g = calloc(1, sizeof *g);
    if (!g || !(g->ranks = calloc(n ? n : 1, sizeof *g->ranks))) {
        free(g);
        return -ENOMEM;
    }
    g->nranks = n;
    for (size_t i = 0; i < n; i++) {
        g->ranks[i].rank = r[i].rank;
        g->ranks[i].label = r[i].label;
        g->ranks[i].nmarks = r[i].series->nmarks;
        if (r[i].series->nmarks && (!g->labels || r[i].series->nmarks < g->nmarks)) {
            g->nmarks = r[i].series->nmarks;
            g->labels = r[i].series->labels;
        }
    }
    size_t capsites = 0;
    int64_t *tmp = malloc((n ? n : 1) * sizeof *tmp);
    int rc = tmp ? 0 : -ENOMEM;
    for (size_t i = 0; i < n && !rc; i++)
        if (r[i].series->nmarks)
            rc = rank_series(g, i, r[i].series, &capsites);
    if (rc)
        goto fail;
    /* Which ranks differ: their slopes against the median slope. */
    size_t nj = 0;
    for (size_t i = 0; i < n; i++)
        if (g->ranks[i].fit.judged)
            tmp[nj++] = (int64_t)g->ranks[i].fit.last_bytes;
    g->njudged = nj;
    g->flat = (uint64_t)lower_median(tmp, nj) / 1000;
    if (g->flat < VT_GROWTH_FLAT_PER_STEP)
        g->flat = VT_GROWTH_FLAT_PER_STEP;
    nj = 0;
    for (size_t i = 0; i < n; i++)
        if (g->ranks[i].fit.judged)
            tmp[nj++] = g->ranks[i].fit.per_step;
    g->median = lower_median(tmp, nj);
    nj = 0;
    for (size_t i = 0; i < n; i++)
        if (g->ranks[i].fit.judged)
            tmp[nj++] = abs64(g->ranks[i].fit.per_step - g->median);
    int64_t mad = lower_median(tmp, nj);
    for (size_t i = 0; i < n && g->njudged >= 2; i++) {
        int64_t d = abs64(g->ranks[i].fit.per_step - g->median);
        g->ranks[i].differs = g->ranks[i].fit.judged && d > (int64_t)g->flat && d > 4 * mad;
    }
    /* Each site against the other ranks' median at the same line (a rank
     * without it there: 0 per step). */
    if (g->nsites)
        qsort(g->sites, g->nsites, sizeof *g->sites, cmp_site_name);
    for (size_t s0 = 0; s0 < g->nsites;) {
        size_t s1 = s0;
        while (s1 < g->nsites && !strcmp(g->sites[s1].name, g->sites[s0].name))
            s1++;
        for (size_t k = s0; k < s1; k++) {
            size_t m = 0;
            for (size_t i = 0; i < n; i++) {
                if (i == g->sites[k].rank || !g->ranks[i].fit.judged)
                    continue;
                int64_t p = 0;
                for (size_t q = s0; q < s1; q++)
                    if (g->sites[q].rank == i)
                        p = g->sites[q].fit.per_step;
                tmp[m++] = p;
            }
            g->sites[k].others = lower_median(tmp, m);
        }
        s0 = s1;
    }
    if (g->nsites)
        qsort(g->sites, g->nsites, sizeof *g->sites, cmp_site_shown);
    free(tmp);
    *out = g;
    return 0;
fail:
    free(tmp);
    vt__growth_free(g);
    return rc;
}

void vt__growth_free(vt__growth *g)
{
    if (!g)
        return;
    for (size_t i = 0; i < g->nranks; i++)
        free(g->ranks[i].alive);
    for (size_t k = 0; k < g->nsites; k++) {
        free(g->sites[k].name);
        free(g->sites[k].held_by);
    }
    free(g->sites);
    free(g->ranks);
    free(g);
}

/* "+1 MiB" / "-512 KiB" / "0 B": a growth per step. */
static const char *fmt_signed(int64_t v, char buf[static VT_FMT_BYTES_LEN + 1])
{
    char b[VT_FMT_BYTES_LEN];
    vt__fmt_bytes((uint64_t)abs64(v), b);
    snprintf(buf, VT_FMT_BYTES_LEN + 1, "%s%s", v > 0 ? "+" : v < 0 ? "-" : "", b);
    return buf;
}

static const char *mark_label(const vt__growth *g, size_t k)
{
    return g->labels[k];
}

/* Whether a judged rank reads as flat: its slope within a thousandth of the
 * ranks' bytes a step (g->flat), and not growing by more than that over its
 * judged steps by the rule check's growth finding uses (minGPT-ddp keeping
 * each step's predictions: 35 KiB a step of 82 MiB on both ranks, 7 MiB over
 * 200 steps, read "every rank is flat"). */
static int rank_is_flat(const vt__growth *g, const struct rank_growth *rg)
{
    uint64_t step = (uint64_t)abs64(rg->fit.per_step);
    if (step > g->flat)
        return 0;
    return !(rg->fit.grows && step * (uint64_t)(rg->fit.last - rg->fit.first) > g->flat);
}

void vt__growth_print(FILE *f, const vt__growth *g, size_t top)
{
    char b1[VT_FMT_BYTES_LEN + 1], b2[VT_FMT_BYTES_LEN + 1], b3[VT_FMT_BYTES_LEN + 1],
        b4[VT_FMT_BYTES_LEN + 1];
    fprintf(f, "growth across steps (bytes allocated at each mark, the k-th mark of every rank"
               " the same step):\n");
    if (!g->nmarks) {
        fprintf(f, "  no rank has marks: growth is judged step by step (mark steps with"
                   " vramtrace.mark(), or record with `vramtrace run`, which marks optimizer"
                   " steps)\n");
        return;
    }
    for (size_t i = 0; i < g->nranks; i++)
        if (!g->ranks[i].nmarks)
            fprintf(f, "  %s has no marks: left out\n", g->ranks[i].label);
        else if (g->ranks[i].nmarks > g->nmarks)
            fprintf(f, "  %s has %zu marks: its first %zu are compared\n", g->ranks[i].label,
                    g->ranks[i].nmarks, g->nmarks);
    fprintf(f, "  %-5s %-16s", "mark", "label");
    for (size_t i = 0; i < g->nranks; i++)
        if (g->ranks[i].nmarks) {
            fprintf(f, " %11s", g->ranks[i].label);
        }
    fputc('\n', f);
    for (size_t k = 0; k < g->nmarks; k++) {
        if (g->nmarks > TABLE_HEAD + TABLE_TAIL + 1 && k == TABLE_HEAD) {
            fprintf(f, "  ... %zu marks\n", g->nmarks - TABLE_HEAD - TABLE_TAIL);
            k = g->nmarks - TABLE_TAIL;
        }
        fprintf(f, "  %-5zu %-16s", k + 1, mark_label(g, k));
        for (size_t i = 0; i < g->nranks; i++)
            if (g->ranks[i].nmarks)
                fprintf(f, " %11s", vt__fmt_bytes(g->ranks[i].alive[k], b1));
        fputc('\n', f);
    }
    if (!g->njudged) {
        fprintf(f, "  too few marks to judge growth: %d after a warm-up of a quarter of"
                   " them at least\n", VT_CHECK_GROWTH_MIN_STEPS);
        return;
    }
    const vt__check_growth *any = NULL;
    for (size_t i = 0; i < g->nranks && !any; i++)
        if (g->ranks[i].fit.judged)
            any = &g->ranks[i].fit;
    fprintf(f, "  per step (marks %u..%u; the first %u a warm-up):", any->first + 1,
            any->last + 1, any->first);
    for (size_t i = 0, sep = 0; i < g->nranks; i++)
        if (g->ranks[i].fit.judged)
            fprintf(f, "%s %s %s", sep++ ? "," : "", g->ranks[i].label,
                    fmt_signed(g->ranks[i].fit.per_step, b1));
    fputc('\n', f);
    if (g->njudged == 1) {
        const struct rank_growth *rg = g->ranks;
        while (!rg->fit.judged)
            rg++;
        if (rank_is_flat(g, rg))
            fprintf(f, "one rank to compare: %s is flat (at most %s per step)\n", rg->label,
                    vt__fmt_bytes(g->flat, b1));
        else
            fprintf(f, "one rank to compare: %s %s %s per step\n", rg->label,
                    rg->fit.per_step < 0 ? "shrinks" : "grows",
                    vt__fmt_bytes((uint64_t)abs64(rg->fit.per_step), b1));
        return;
    }
    size_t ndiffer = 0;
    int others_flat = 1;
    for (size_t i = 0; i < g->nranks; i++) {
        const struct rank_growth *rg = &g->ranks[i];
        if (!rg->differs) {
            if (rg->fit.judged && !rank_is_flat(g, rg))
                others_flat = 0;
            continue;
        }
        ndiffer++;
        fprintf(f, "%s %s %s per step", rg->label, rg->fit.per_step < 0 ? "shrinks" : "grows",
                vt__fmt_bytes((uint64_t)abs64(rg->fit.per_step), b1));
        const struct site_growth *first = NULL;
        size_t nshown = 0;
        for (size_t k = 0; k < g->nsites; k++)
            if (g->sites[k].rank == i && site_shown(g, &g->sites[k])) {
                first = first ? first : &g->sites[k];
                nshown++;
            }
        if (first)
            fprintf(f, " from %s", first->name);
        fprintf(f, " (the ranks' median: %s per step)%s\n", fmt_signed(g->median, b2),
                !first && rg->fit.per_step > g->median ? ": no one call site grows alone" : "");
        size_t shown = 0;
        for (size_t k = 0; k < g->nsites && nshown; k++) {
            const struct site_growth *x = &g->sites[k];
            if (x->rank != i || !site_shown(g, x))
                continue;
            if (shown++ == top) {
                fprintf(f, "    ... %zu more call sites\n", nshown - top);
                break;
            }
            fprintf(f, "    %s per step  %s  (%s at mark %u, %s at mark %u; the other ranks:"
                       " %s per step)\n", fmt_signed(x->fit.per_step, b1), x->name,
                    vt__fmt_bytes(x->fit.first_bytes, b2), x->fit.first + 1,
                    vt__fmt_bytes(x->fit.last_bytes, b3), x->fit.last + 1,
                    fmt_signed(x->others, b4));
            if (x->held_by)
                fprintf(f, "      held by: %s\n", x->held_by);
        }
    }
    if (!ndiffer)
        fprintf(f, "no rank's growth differs from the others': %s\n",
                others_flat ? "every rank is flat" : "they grow alike");
    else
        fprintf(f, "the others are %s\n", others_flat ? "flat" : "growing alike");
    if (others_flat)
        fprintf(f, "  (flat: at most %s per step)\n", vt__fmt_bytes(g->flat, b1));
}

void vt__growth_json(FILE *f, const vt__growth *g, size_t top)
{
    fprintf(f, "{\"marks\":%zu,\"labels\":[", g->nmarks);
    for (size_t k = 0; k < g->nmarks; k++) {
        if (k)
            fputc(',', f);
        vt__json_str(f, mark_label(g, k));
    }
    fprintf(f, "],\"median_per_step\":");
    if (g->njudged)
        fprintf(f, "%" PRId64, g->median);
    else
        fprintf(f, "null");
    fprintf(f, ",\"flat_per_step\":%" PRIu64 ",\"ranks\":[", g->flat);
    for (size_t i = 0; i < g->nranks; i++) {
        const struct rank_growth *rg = &g->ranks[i];
        fprintf(f, "%s\n {\"rank\":%d,\"label\":", i ? "," : "", rg->rank);
        vt__json_str(f, rg->label);
        fprintf(f, ",\"marks\":%zu,\"alive\":[", rg->nmarks);
        for (size_t k = 0; rg->nmarks && k < g->nmarks; k++)
            fprintf(f, "%s%" PRIu64, k ? "," : "", rg->alive[k]);
        fprintf(f, "],\"per_step\":");
        if (rg->fit.judged)
            fprintf(f, "%" PRId64 ",\"judged\":{\"first_mark\":%u,\"last_mark\":%u}",
                    rg->fit.per_step, rg->fit.first, rg->fit.last);
        else
            fprintf(f, "null,\"judged\":null");
        fprintf(f, ",\"flat\":%s",
                !rg->fit.judged ? "null" : rank_is_flat(g, rg) ? "true" : "false");
        fprintf(f, ",\"differs\":%s,\"sites\":[", rg->differs ? "true" : "false");
        size_t shown = 0;
        for (size_t k = 0; k < g->nsites && shown < top; k++) {
            const struct site_growth *x = &g->sites[k];
            if (x->rank != i || !site_shown(g, x))
                continue;
            fprintf(f, "%s{\"site\":", shown++ ? "," : "");
            vt__json_str(f, x->name);
            fprintf(f, ",\"per_step\":%" PRId64 ",\"others_per_step\":%" PRId64
                       ",\"first_bytes\":%" PRIu64 ",\"last_bytes\":%" PRIu64 ",\"held_by\":",
                    x->fit.per_step, x->others, x->fit.first_bytes, x->fit.last_bytes);
            if (x->held_by)
                vt__json_str(f, x->held_by);
            else
                fprintf(f, "null");
            fputc('}', f);
        }
        fprintf(f, "]}");
    }
    fprintf(f, "]}");
}
