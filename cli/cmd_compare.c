/*
 * cli/cmd_compare.c - `vramtrace compare A B ... [--json] [--top N]`: one
 * snapshot per rank, side by side.
 *
 * Per rank: peak allocated and reserved bytes (the highest device of that
 * rank) and when (seconds since the rank's first event, and wall clock, so
 * ranks line up); the spread of the peaks across ranks; and the call sites
 * whose bytes at each rank's allocated peak differ most between ranks (a
 * site is the frame summary/leaks show: the innermost frame that is not
 * vramtrace, CUDA or the C runtime, named "function file:line").
 *
 * Output (stable; tests and scripts read it):
 *   rank R  FILE
 *     allocated: peak X at T s (W: UTC wall clock, as "2026-11-28 09:15:03.123 UTC"), now Y
 *     reserved:  peak X at T s, now Y
 *   spread of peak allocated: MIN (rank a) .. MAX (rank b), +D
 *   spread of peak reserved:  MIN (rank a) .. MAX (rank b), +D
 *   call sites whose bytes at the peak differ most between ranks:
 *     +D  SITE   rank 0: X, rank 1: Y, ...
 *   growth across steps (...):       the ranks aligned by step (compare_growth.c)
 *     mark  label  rank 0  rank 1 ...    bytes allocated at each mark
 *     per step (marks A..B; ...): rank 0 +X, rank 1 +Y, ...
 *   rank R grows +X per step (the ranks' median: +M) from SITE
 *       +X per step  SITE  (...; the other ranks: +Y per step)
 *   the others are flat
 * A snapshot without a rank (RANK unset when it was taken) is ordered by its
 * position on the command line and named by its pid ("pid 1234"), or, where
 * it records none (a PyTorch pickle), by that position ("file 2"):
 * rank_label. Arguments with * or ? are globbed.
 *
 * The ranks are read one after another, each as a stream of its events
 * (the streamed timeline with its curves, whose hooks feed the rank's
 * growth series), and kept as their figures only: memory follows one
 * rank's live allocations and the figures of all, not the events. Only a
 * rank whose growth differs and that recorded holders is read again, for
 * the checker's holders (compare.h).
 */
#include <errno.h>
#include <glob.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "commands.h"
#include "compare.h"
#include "compare_growth.h"
#include "event_stream.h"
#include "grow.h"
#include "order.h"
#include "pytorch.h"
#include "report_util.h"

static const char usage_text[] =
    "usage: vramtrace " VT__USAGE_COMPARE "\n"
    "\n"
    "Compare the snapshots of several ranks or processes (.vtsnap or PyTorch\n"
    "pickles; a quoted glob such as 'rank*.vtsnap' is expanded; one without RANK\n"
    "is named by its pid, a pickle by its place: 'file 2'): per rank, peak\n"
    "allocated and reserved bytes and when; the spread across ranks; the call\n"
    "sites whose bytes at the allocated peak differ most between ranks. Then\n"
    "growth across steps, the ranks aligned by their marks (the k-th mark of each\n"
    "is the same step): the bytes allocated at each mark per rank, the ranks whose\n"
    "growth per step differs from the others' median, and their call sites that\n"
    "grow.\n"
    "  --json    one JSON document instead of text\n"
    "  --top N   call sites to list (default 10; growth: per rank)\n"
    VT_EXIT_HELP;

/* One rank: its figures, kept once its snapshot is let go. */
struct rank_info {
    const char *file;
    size_t pos;                 /* its place among the files: sites' bytes are by it */
    int rank;                   /* RANK, or its place where it has none: the order */
    char label[32];             /* what the text calls it (rank_label) */
    bool has_dev;               /* some device's memory was recorded */
    int device;                 /* the device with the highest allocated peak */
    uint64_t peak_alloc, peak_resv, final_alloc, final_resv;
    uint64_t peak_alloc_time, peak_resv_time; /* ns, monotonic */
    uint64_t first_time_ns;     /* the rank's first event */
    uint64_t clock_mono, clock_real; /* the snapshot's clock bases (wall clock) */
    bool refs;                  /* holders recorded: the checker can name them */
    vt__growth_series *series;
};

struct site {
    char *name;
    uint64_t *bytes;    /* per rank */
    uint64_t spread;
};

static double rel_s(const struct rank_info *r, uint64_t t)
{
    return t > r->first_time_ns ? (double)(t - r->first_time_ns) / 1e9 : 0.0;
}

/* "2026-11-28 09:15:03.123 UTC": when, on the clock a user compares logs by. */
static const char *wall_text(uint64_t ns, char *buf, size_t len)
{
    time_t sec = (time_t)(ns / 1000000000u);
    struct tm tm;
    if (!gmtime_r(&sec, &tm) || !strftime(buf, len, "%Y-%m-%d %H:%M:%S", &tm)) {
        snprintf(buf, len, "%" PRIu64 " ns", ns);
        return buf;
    }
    size_t n = strlen(buf);
    snprintf(buf + n, len - n, ".%03u UTC", (unsigned)(ns / 1000000u % 1000u));
    return buf;
}

static uint64_t wall_ns(const struct rank_info *r, uint64_t t)
{
    return t - r->clock_mono + r->clock_real;
}

/* Sites by name: an open-addressing index over the site array, so that a
 * snapshot with many call sites stays linear. */
struct site_set {
    struct site *v;
    size_t n, cap;
    int32_t *index;     /* site number + 1, 0 = empty */
    size_t nindex;
};

static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static int find_site(struct site_set *ss, const char *name, size_t nranks)
{
    if ((ss->n + 1) * 2 > ss->nindex) {
        size_t ni = ss->nindex ? ss->nindex * 2 : 256;
        int32_t *idx = calloc(ni, sizeof *idx);
        if (!idx)
            return -1;
        for (size_t i = 0; i < ss->n; i++) {
            size_t k = hash_name(ss->v[i].name) & (ni - 1);
            while (idx[k])
                k = (k + 1) & (ni - 1);
            idx[k] = (int32_t)i + 1;
        }
        free(ss->index);
        ss->index = idx;
        ss->nindex = ni;
    }
    size_t k = hash_name(name) & (ss->nindex - 1);
    for (; ss->index[k]; k = (k + 1) & (ss->nindex - 1))
        if (!strcmp(ss->v[ss->index[k] - 1].name, name))
            return ss->index[k] - 1;
    if (vt__grow_from((void **)&ss->v, &ss->cap, ss->n + 1, sizeof *ss->v, 64))
        return -1;
    struct site *st = &ss->v[ss->n];
    st->name = strdup(name);
    st->bytes = calloc(nranks, sizeof *st->bytes);
    st->spread = 0;
    if (!st->name || !st->bytes) {
        free(st->name);
        free(st->bytes);
        return -1;
    }
    ss->index[k] = (int32_t)ss->n + 1;
    return (int)ss->n++;
}

static int cmp_spread(const void *a, const void *b)
{
    const struct site *x = a, *y = b;
    if (x->spread != y->spread)
        return x->spread < y->spread ? 1 : -1;
    return strcmp(x->name, y->name);
}

/* What the text calls a snapshot: its rank ("rank 3"); one taken without a
 * rank (RANK unset: a spawned trainer, a DataLoader worker, a process of its
 * own) by its process ("pid 1234"), or where it names none (a PyTorch
 * pickle) by its place among the files ("file 2", from 1). */
static void rank_label(struct rank_info *r, const vt__snapshot_meta *m)
{
    if (m->rank >= 0)
        snprintf(r->label, sizeof r->label, "rank %d", m->rank);
    else if (m->pid > 0)
        snprintf(r->label, sizeof r->label, "pid %lld", (long long)m->pid);
    else
        snprintf(r->label, sizeof r->label, "file %zu", r->pos + 1);
}

static int cmp_rank(const void *a, const void *b)
{
    const struct rank_info *x = a, *y = b;
    if (x->rank != y->rank)
        return (x->rank > y->rank) - (x->rank < y->rank);
    return vt__order(x->pos, y->pos);   /* one rank twice: as given */
}

static void free_sites(struct site *v, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(v[i].name);
        free(v[i].bytes);
    }
    free(v);
}

struct vt__compare {
    struct rank_info *r;        /* by position until printed, then by rank */
    size_t n;                   /* ranks added */
    size_t nranks;              /* ranks to come */
    bool json;
    struct site_set ss;         /* bytes per call site at each rank's allocated peak */
};

int vt__compare_open(size_t nranks, bool json, vt__compare **out)
{
    vt__compare *c = calloc(1, sizeof *c);
    if (!c || !(c->r = calloc(nranks ? nranks : 1, sizeof *c->r))) {
        free(c);
        return -ENOMEM;
    }
    c->nranks = nranks;
    c->json = json;
    *out = c;
    return 0;
}

void vt__compare_free(vt__compare *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->n; i++)
        vt__growth_series_free(c->r[i].series);
    free(c->r);
    free_sites(c->ss.v, c->ss.n);
    free(c->ss.index);
    free(c);
}

int vt__compare_add(vt__compare *c, const char *file, const vt__snapshot_data *s,
                    const vt__timeline *tl, vt__growth_series *series)
{
    if (c->n == c->nranks) {   /* more ranks than opened for: not one of them */
        vt__growth_series_free(series);
        return -EINVAL;
    }
    size_t pos = c->n;
    struct rank_info *r = &c->r[c->n++];
    *r = (struct rank_info){ .file = file, .pos = pos, .series = series,
                             .first_time_ns = tl->first_time_ns,
                             .clock_mono = s->meta.clock_base_monotonic_ns,
                             .clock_real = s->meta.clock_base_realtime_ns,
                             .refs = tl->kind_counts[VT_EV_REF] != 0 };
    r->rank = s->meta.rank >= 0 ? s->meta.rank : (int)pos;
    rank_label(r, &s->meta);
    const vt__tl_device *dev = NULL;
    for (size_t d = 0; d < tl->ndevices; d++) {
        const vt__tl_device *dv = &tl->devices[d];
        if (!dev || dv->peak_allocated > dev->peak_allocated)
            dev = dv;
        if (dv->peak_reserved >= r->peak_resv) {
            r->peak_resv = dv->peak_reserved;
            r->peak_resv_time = dv->points[dv->peak_reserved_point].time_ns;
        }
        r->final_alloc += dv->final_allocated;
        r->final_resv += dv->final_reserved;
    }
    if (!dev)
        return 0;
    r->has_dev = true;
    r->device = dev->device;
    r->peak_alloc = dev->peak_allocated;
    r->peak_alloc_time = dev->points[dev->peak_allocated_point].time_ns;
    /* bytes per call site at the allocated peak */
    uint32_t ev = dev->points[dev->peak_allocated_point].event;
    for (size_t k = 0; k < tl->nlifetimes; k++) {
        const vt__lifetime *l = &tl->lifetimes[k];
        if (l->device != dev->device || !vt__lifetime_allocated_at(l, ev))
            continue;
        char name[512];
        vt__report_site_name(s, vt__report_site_frame(s, l->alloc_stack), name, sizeof name);
        int si = find_site(&c->ss, name, c->nranks);
        if (si < 0)
            return -ENOMEM;
        c->ss.v[si].bytes[pos] += l->size;
    }
    return 0;
}

/* The series and the condensed timeline are told the rank's lifetimes and
 * marks as the build reads them. */
struct reading {
    const vt__snapshot_data *s;
    vt__growth_series *series;
};

static void on_retired(void *ctx, const vt__lifetime *l)
{
    struct reading *x = ctx;
    vt__growth_series_lifetime(x->series, x->s, l);
}

static void on_mark(void *ctx, const vt__tl_mark *m)
{
    struct reading *x = ctx;
    vt__growth_series_mark(x->series, m);
}

/* The growth series of s and its streamed timeline: the lifetimes it
 * retired as it read (told as it went) and those it kept, but the retired
 * ones kept again for the peaks. */
static int read_rank(vt__compare *c, const char *file, const vt__snapshot_data *s,
                     vt__event_stream *es, vt__growth_series *gs, char *err, size_t errlen)
{
    struct reading x = { s, gs };
    vt__tl_stream_hooks h = { .retired = on_retired, .mark = on_mark, .ctx = &x };
    vt__timeline *tl;
    int rc = vt__timeline_build_stream_hooked(s, es, VT_TL_STREAM_CURVES, &h, &tl, err, errlen);
    if (rc)
        return rc;
    for (size_t k = 0; k + tl->npeak_kept < tl->nlifetimes; k++)
        vt__growth_series_lifetime(gs, s, &tl->lifetimes[k]);
    if ((rc = vt__growth_series_finish(gs, s)) != 0)
        snprintf(err, errlen, "out of memory");
    else if ((rc = vt__compare_add(c, file, s, tl, gs)) != 0)
        snprintf(err, errlen, "out of memory");
    vt__timeline_free(tl);
    return rc;
}

int vt__compare_add_stream(vt__compare *c, const char *file, vt__snapshot_data *s,
                           vt__event_stream *es, char *err, size_t errlen)
{
    vt__growth_series *gs = NULL;
    if ((!c->json && vt__report_text_names(s) != 0) || vt__growth_series_open(&gs) != 0) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t n = c->n;
    int rc = read_rank(c, file, s, es, gs, err, errlen);
    if (c->n == n)
        vt__growth_series_free(gs);   /* not added: still ours */
    return rc;
}

int vt__compare_read(vt__compare *c, const char *file)
{
    char err[1024], tlerr[1024];
    vt__snapshot_data *s;
    vt__event_stream *es;
    int rc = vt__report_open_stream("compare", file, &s, &es, err, sizeof err);
    if (rc)
        return rc;
    rc = vt__compare_add_stream(c, file, s, es, tlerr, sizeof tlerr);
    if (rc) {
        /* the timeline's own trouble (memory) as vt__report_load says it */
        vt__report_stream_failed("compare", file, err, tlerr);
        rc = VT_EXIT_FAILURE;
    }
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc;
}

/* The holders of rank r's growing sites: its snapshot read again, only for
 * a rank that differs and recorded them; the growth stands without them
 * when the checker cannot run. @return 0 or -ENOMEM. */
static int rank_holders(const vt__compare *c, vt__growth *g, size_t i)
{
    char err[1024];
    vt__snapshot_data *s;
    vt__event_stream *es;
    if (vt__snapshot_open(c->r[i].file, &s, &es, err, sizeof err) != 0)
        return 0;
    int rc = 0;
    vt__check_options opt;
    vt__check_options_init(&opt);
    vt__check_report *rep = NULL;
    if (!c->json && vt__report_text_names(s) != 0)
        rc = -ENOMEM;
    else if (vt__check_run_stream(s, es, &opt, &rep, err, sizeof err) == 0)
        rc = vt__growth_holders(g, i, s, rep);
    vt__check_report_free(rep);
    vt__event_stream_close(es);
    vt__snapshot_free(s);
    return rc;
}

int vt__compare_print(vt__compare *c, FILE *out, size_t top)
{
    struct rank_info *r = c->r;
    size_t total = c->n;
    vt__growth_rank *gr = calloc(total ? total : 1, sizeof *gr);
    vt__growth *growth = NULL;
    int rc = gr ? 0 : -ENOMEM;
    qsort(r, total, sizeof *r, cmp_rank);
    for (size_t i = 0; i < total && !rc; i++)
        gr[i] = (vt__growth_rank){ r[i].rank, r[i].label, r[i].series };
    if (!rc)
        rc = vt__growth_build(gr, total, &growth);
    for (size_t i = 0; i < total && !rc; i++)
        if (vt__growth_differs(growth, i) && r[i].refs)
            rc = rank_holders(c, growth, i);
    free(gr);
    if (rc) {
        vt__growth_free(growth);
        return rc;
    }
    struct site *sites = c->ss.v;
    size_t nsites = c->ss.n;
    for (size_t k = 0; k < nsites; k++) {
        uint64_t lo = UINT64_MAX, hi = 0;
        for (size_t i = 0; i < total; i++) {
            lo = sites[k].bytes[i] < lo ? sites[k].bytes[i] : lo;
            hi = sites[k].bytes[i] > hi ? sites[k].bytes[i] : hi;
        }
        sites[k].spread = hi - lo;
    }
    if (nsites)   /* none when no rank allocated anything: qsort wants an array */
        qsort(sites, nsites, sizeof *sites, cmp_spread);
    c->ss.nindex = 0;   /* the index no longer matches the order */
    free(c->ss.index);
    c->ss.index = NULL;
    int json = c->json;
    size_t lo_a = 0, hi_a = 0, lo_r = 0, hi_r = 0;
    for (size_t i = 1; i < total; i++) {
        if (r[i].peak_alloc < r[lo_a].peak_alloc) lo_a = i;
        if (r[i].peak_alloc > r[hi_a].peak_alloc) hi_a = i;
        if (r[i].peak_resv < r[lo_r].peak_resv) lo_r = i;
        if (r[i].peak_resv > r[hi_r].peak_resv) hi_r = i;
    }
    size_t nshow = (size_t)top < nsites ? (size_t)top : nsites;
    char b1[32], b2[32], b3[32];
    if (json) {
        fprintf(out, "{\"ranks\":[");
        for (size_t i = 0; i < total; i++) {
            fprintf(out, "%s\n {\"rank\":%d,\"label\":", i ? "," : "", r[i].rank);
            vt__json_str(out, r[i].label);
            fprintf(out, ",\"file\":");
            vt__json_str(out, r[i].file);
            fprintf(out, ",\"device\":%d,\"peak_allocated\":%" PRIu64 ",\"peak_allocated_time_s\":%.6f,"
                   "\"peak_allocated_wall_ns\":%" PRIu64 ",\"peak_reserved\":%" PRIu64
                   ",\"peak_reserved_time_s\":%.6f,\"peak_reserved_wall_ns\":%" PRIu64
                   ",\"final_allocated\":%" PRIu64 ",\"final_reserved\":%" PRIu64 "}",
                   r[i].has_dev ? r[i].device : -1, r[i].peak_alloc,
                   rel_s(&r[i], r[i].peak_alloc_time), wall_ns(&r[i], r[i].peak_alloc_time),
                   r[i].peak_resv, rel_s(&r[i], r[i].peak_resv_time),
                   wall_ns(&r[i], r[i].peak_resv_time), r[i].final_alloc, r[i].final_resv);
        }
        fprintf(out, "],\n\"spread\":{\"peak_allocated\":{\"min\":%" PRIu64 ",\"min_rank\":%d,\"max\":%"
               PRIu64 ",\"max_rank\":%d,\"difference\":%" PRIu64 "},\"peak_reserved\":{\"min\":%"
               PRIu64 ",\"min_rank\":%d,\"max\":%" PRIu64 ",\"max_rank\":%d,\"difference\":%" PRIu64
               "}},\n\"sites\":[",
               r[lo_a].peak_alloc, r[lo_a].rank, r[hi_a].peak_alloc, r[hi_a].rank,
               r[hi_a].peak_alloc - r[lo_a].peak_alloc, r[lo_r].peak_resv, r[lo_r].rank,
               r[hi_r].peak_resv, r[hi_r].rank, r[hi_r].peak_resv - r[lo_r].peak_resv);
        for (size_t k = 0; k < nshow; k++) {
            fprintf(out, "%s\n {\"site\":", k ? "," : "");
            vt__json_str(out, sites[k].name);
            fprintf(out, ",\"spread\":%" PRIu64 ",\"bytes\":{", sites[k].spread);
            for (size_t i = 0; i < total; i++)
                fprintf(out, "%s\"%d\":%" PRIu64, i ? "," : "", r[i].rank, sites[k].bytes[r[i].pos]);
            fprintf(out, "}}");
        }
        fprintf(out, "],\n\"growth\":");
        vt__growth_json(out, growth, (size_t)top);
        fprintf(out, "}\n");
    } else {
        for (size_t i = 0; i < total; i++) {
            fprintf(out, "%s  ", r[i].label);
            vt__text_str(out, r[i].file);   /* a globbed name is anyone's */
            fputc('\n', out);
            if (!r[i].has_dev) {
                fprintf(out, "  no device memory recorded\n");
                continue;
            }
            char wall[64];
            fprintf(out, "  allocated: peak %s at %.3f s (%s), now %s\n",
                   vt__fmt_bytes(r[i].peak_alloc, b1), rel_s(&r[i], r[i].peak_alloc_time),
                   wall_text(wall_ns(&r[i], r[i].peak_alloc_time), wall, sizeof wall),
                   vt__fmt_bytes(r[i].final_alloc, b2));
            fprintf(out, "  reserved:  peak %s at %.3f s, now %s\n", vt__fmt_bytes(r[i].peak_resv, b1),
                   rel_s(&r[i], r[i].peak_resv_time), vt__fmt_bytes(r[i].final_resv, b2));
        }
        fprintf(out, "spread of peak allocated: %s (%s) .. %s (%s), +%s\n",
               vt__fmt_bytes(r[lo_a].peak_alloc, b1), r[lo_a].label,
               vt__fmt_bytes(r[hi_a].peak_alloc, b2), r[hi_a].label,
               vt__fmt_bytes(r[hi_a].peak_alloc - r[lo_a].peak_alloc, b3));
        fprintf(out, "spread of peak reserved:  %s (%s) .. %s (%s), +%s\n",
               vt__fmt_bytes(r[lo_r].peak_resv, b1), r[lo_r].label,
               vt__fmt_bytes(r[hi_r].peak_resv, b2), r[hi_r].label,
               vt__fmt_bytes(r[hi_r].peak_resv - r[lo_r].peak_resv, b3));
        fprintf(out, "call sites whose bytes at the peak differ most between ranks:\n");
        size_t shown = 0;
        for (size_t k = 0; k < nshow; k++) {
            if (!sites[k].spread)
                break;
            fprintf(out, "  +%-10s %s  ", vt__fmt_bytes(sites[k].spread, b1), sites[k].name);
            for (size_t i = 0; i < total; i++)
                fprintf(out, "%s %s: %s", i ? "," : "", r[i].label,
                       vt__fmt_bytes(sites[k].bytes[r[i].pos], b2));
            fprintf(out, "\n");
            shown++;
        }
        if (!shown)
            fprintf(out, "  none: every call site holds the same bytes on every rank\n");
        vt__growth_print(out, growth, (size_t)top);
    }
    vt__growth_free(growth);
    return 0;
}

int vt__cmd_compare(int argc, char **argv)
{
    int json = 0;
    long top = 10;
    glob_t g = { 0 };
    int globbed = 0, status = VT_EXIT_FAILURE;
    char **files = calloc((size_t)argc, sizeof *files);
    size_t nfiles = 0;
    if (!files)
        return VT_EXIT_FAILURE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage_text, stdout);
            free(files);
            return 0;
        } else if (!strcmp(a, "--json")) {
            json = 1;
        } else if (!strcmp(a, "--top")) {
            char *end;
            if (++i >= argc || (top = strtol(argv[i], &end, 10), *end || top < 0)) {
                fprintf(stderr, "vramtrace compare: --top needs a count\n");
                free(files);
                return VT_EXIT_FAILURE;
            }
        } else if (a[0] == '-' && a[1]) {
            vt__cli_unknown_option("compare", a);
            free(files);
            return VT_EXIT_FAILURE;
        } else if (strpbrk(a, "*?[")) {
            if (glob(a, globbed ? GLOB_APPEND : 0, NULL, &g) == 0)
                globbed = 1;
            else
                files[nfiles++] = argv[i]; /* no match: reported as unreadable below */
        } else {
            files[nfiles++] = argv[i];
        }
    }
    size_t total = nfiles + (globbed ? g.gl_pathc : 0);
    if (total < 1) {
        fprintf(stderr, "vramtrace compare: no SNAPSHOT given (try --help)\n");
        free(files);
        return VT_EXIT_FAILURE;
    }
    vt__compare *c = NULL;
    if (vt__compare_open(total, json, &c) != 0) {
        fprintf(stderr, "vramtrace compare: out of memory\n");
        goto out;
    }
    for (size_t i = 0; i < total; i++)
        if (vt__compare_read(c, i < nfiles ? files[i] : g.gl_pathv[i - nfiles]))
            goto out;
    if (vt__compare_print(c, stdout, (size_t)top) != 0) {
        fprintf(stderr, "vramtrace compare: out of memory\n");
        goto out;
    }
    status = 0;
out:
    vt__compare_free(c);
    free(files);
    if (globbed)
        globfree(&g);
    return status;
}
