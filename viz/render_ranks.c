/*
 * viz/render_ranks.c - the page of several snapshots, one per rank
 * (`vramtrace viz A B ... -o OUT.html`): viz/ranks.html filled in.
 *
 * The page holds every rank's own timeline page (vt__viz_render, unchanged),
 * base64-encoded, shown one at a time in an iframe by a rank selector, and an
 * overview with every rank's allocated-bytes curve on one time axis, aligned
 * by wall clock or by each rank's first mark (a training step); the curves
 * and marks come from rank_data.c, embedded as every page embeds data; the
 * page's script is ranks.js (after ticks.js), compiled in as the timeline's
 * is. No network request of any kind.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"
#include "errbuf.h"
#include "rank_data.h"
#include "render.h"

/* The page's assets (viz/embed.py, NUL-terminated). */
extern const char vt__viz_ranks_html[];
extern const char vt__viz_ranks_js[];
extern const char vt__viz_ticks_js[];   /* before either page's script */

/* What the page puts in place of each @@VT_NAME@@ marker of ranks.html. */
struct ranks_parts {
    const vt__viz_rank *ranks;
    size_t n;
    const vt__buf *data;   /* every rank's curve and marks, a JSON array */
    char *err;             /* a rank page's own failure, named by its file */
    size_t errlen;
};

/* Rank k's own timeline page, base64 in the script element its selector
 * button opens: rendered one at a time, never all of them in memory. */
static int write_rank_page(FILE *out, const vt__viz_rank *k, char *err, size_t errlen)
{
    char *html = NULL, why[1024] = "";
    size_t len = 0;
    FILE *m = open_memstream(&html, &len);
    int rc = m ? vt__viz_render(m, k->s, k->tl, k->report, NULL, why, sizeof why) : -ENOMEM;
    if (m && fclose(m) != 0 && !rc)
        rc = -ENOMEM;
    if (rc) {
        free(html);
        return vt__errf_in(err, errlen, rc, k->file, "%s", why[0] ? why : "out of memory");
    }
    if (fprintf(out, "<script type=\"application/octet-stream\" data-rank-page=\"%d\">",
                k->rank) < 0 ||
        vt__write_base64(out, (const unsigned char *)html, len) != 0 ||
        fputs("</script>\n", out) < 0)
        rc = -EIO;
    free(html);
    return rc;
}

static int fill_ranks(FILE *out, const char *key, size_t klen, void *ctx)
{
    const struct ranks_parts *p = ctx;
    if (klen == 5 && !strncmp(key, "RANKS", 5))
        return fwrite(p->data->p, 1, p->data->n, out) == p->data->n ? 0 : -EIO;
    if (klen == 5 && !strncmp(key, "PAGES", 5)) {
        for (size_t i = 0; i < p->n; i++) {
            int rc = write_rank_page(out, &p->ranks[i], p->err, p->errlen);
            if (rc)
                return rc;
        }
        return 0;
    }
    if (klen == 6 && !strncmp(key, "SCRIPT", 6))
        return fputs(vt__viz_ticks_js, out) < 0 || fputs(vt__viz_ranks_js, out) < 0 ? -EIO : 0;
    return -EINVAL;
}

int vt__viz_render_ranks(FILE *out, const vt__viz_rank *ranks, size_t n, char *err, size_t errlen)
{
    vt__buf data = { 0 };
    vt__put_u8(&data, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            vt__put_u8(&data, ',');
        vt__viz_rank_json(&data, ranks[i].rank, ranks[i].file, ranks[i].s, ranks[i].tl);
    }
    vt__put_u8(&data, ']');
    if (data.oom) {
        vt__buf_free(&data);
        return vt__errf(err, errlen, -ENOMEM, "out of memory");
    }
    if (errlen)
        err[0] = 0;
    int rc = vt__write_template(out, vt__viz_ranks_html, fill_ranks,
                                &(struct ranks_parts){ .ranks = ranks, .n = n, .data = &data,
                                                       .err = err, .errlen = errlen });
    if (rc && errlen && !err[0])
        vt__errf(err, errlen, rc, "viz: %s", rc == -EIO ? "write failed" : "bad page template");
    vt__buf_free(&data);
    return rc;
}
