/*
 * cli/viz_ranks.c - `vramtrace viz A B ... -o OUT.html`: several snapshots
 * (one per rank) in one self-contained page.
 *
 * Loads each snapshot, builds its timeline (and runs the checker with
 * --check), orders them by rank; viz/render_ranks.c writes the page, through
 * the one page writer (vt__viz_write_file) every `viz -o` goes through.
 */
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "commands.h"
#include "pytorch.h"
#include "render.h"
#include "timeline.h"
#include "viz_ranks.h"

static int cmp_rank(const void *a, const void *b)
{
    const vt__viz_rank *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

struct ranks_page {
    const vt__viz_rank *ranks;
    size_t n;
};

static int write_ranks(FILE *out, void *ctx, char *err, size_t errlen)
{
    const struct ranks_page *p = ctx;
    return vt__viz_render_ranks(out, p->ranks, p->n, err, errlen);
}

int vt__viz_ranks(const char *const *inputs, size_t n, const char *out, int check,
                  const vt__check_options *opt, int quiet)
{
    /* owned here, lent to the page through its const view */
    vt__snapshot_data **snaps = calloc(n, sizeof *snaps);
    vt__timeline **tls = calloc(n, sizeof *tls);
    vt__check_report **reps = calloc(n, sizeof *reps);
    vt__viz_rank *r = calloc(n, sizeof *r);
    char err[1024] = "";
    int status = VT_EXIT_FAILURE;
    if (!snaps || !tls || !reps || !r) {
        fprintf(stderr, "vramtrace viz: out of memory\n");
        goto done;
    }
    for (size_t i = 0; i < n; i++) {
        if (vt__snapshot_load(inputs[i], &snaps[i], err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: %s\n", err);
            goto done;
        }
        if (vt__timeline_build(snaps[i], &tls[i], err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: %s: %s\n", inputs[i], err);
            goto done;
        }
        if (check && vt__check_run(snaps[i], opt, &reps[i], err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: check: %s: %s\n", inputs[i], err);
            goto done;
        }
        r[i] = (vt__viz_rank){ .rank = snaps[i]->meta.rank >= 0 ? snaps[i]->meta.rank : (int)i,
                               .file = inputs[i], .s = snaps[i], .tl = tls[i], .report = reps[i] };
    }
    qsort(r, n, sizeof *r, cmp_rank);
    if (vt__viz_write_file(out, write_ranks, &(struct ranks_page){ .ranks = r, .n = n }, err,
                           sizeof err) != 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err);
        goto done;
    }
    if (!quiet)
        printf("wrote %s: %zu ranks\n", out, n);
    status = 0;
done:
    for (size_t i = 0; i < n && snaps && tls && reps; i++) {
        vt__check_report_free(reps[i]);
        vt__timeline_free(tls[i]);
        vt__snapshot_free(snaps[i]);
    }
    free(snaps);
    free(tls);
    free(reps);
    free(r);
    return status;
}
