/*
 * cli/viz_ranks.c - `vramtrace viz A B ... -o OUT.html`: several snapshots
 * (one per rank) in one self-contained page.
 *
 * The page holds every rank's own timeline page (viz/render.c, unchanged),
 * base64-encoded, shown one at a time in an iframe by a rank selector, and an
 * overview with every rank's allocated-bytes curve on one time axis, aligned
 * by wall clock or by each rank's first mark (a training step); the curves
 * and marks come from viz/rank_data.c, embedded as every page embeds data;
 * the page's script is viz/ranks.js, compiled in as the timeline's is.
 * Written through the one checked output writer (outfile.h). No network
 * request of any kind.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "commands.h"
#include "emit.h"
#include "outfile.h"
#include "pytorch.h"
#include "rank_data.h"
#include "render.h"
#include "report_util.h"
#include "timeline.h"
#include "viz_ranks.h"

static const char page_head[] =
    "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
    "<title>vramtrace: ranks</title>\n<style>\n"
    "body{margin:0;font:13px system-ui,sans-serif;color:#222;background:#fafafa}\n"
    "header{padding:6px 10px;display:flex;gap:14px;align-items:center;border-bottom:1px solid #ddd}\n"
    "#ranks button{margin-right:4px;border:1px solid #aaa;background:#fff;padding:3px 8px;cursor:pointer}\n"
    "#ranks button.sel{background:#2b6cb0;color:#fff;border-color:#2b6cb0}\n"
    "#overview{display:block;width:100%;height:190px;background:#fff;border-bottom:1px solid #ddd;font-size:11px}\n"
    "#overview text{fill:#555}#overview .legend text{fill:#222}#overview .legend .caption{fill:#6b6b70}\n"
    "#align-note{color:#6b6b70}\n"
    "#ov-tip{position:fixed;z-index:10;pointer-events:none;background:rgba(20,20,24,.94);color:#fff;"
    "padding:6px 8px;border-radius:4px;font-size:12px;white-space:nowrap}\n"
    "#ov-tip[hidden]{display:none}\n"
    "#view{display:block;width:100%;height:calc(100vh - 240px);border:0}\n"
    "</style></head><body>\n<header><b id=\"title\"></b><span id=\"ranks\"></span>\n"
    "<label>align <select id=\"align\"><option value=\"wall\">wall clock</option>"
    "<option value=\"mark\">first mark (step)</option></select></label> <span id=\"align-note\"></span></header>\n"
    "<svg id=\"overview\" role=\"img\" aria-label=\"allocated bytes of every rank\"></svg>\n"
    "<div id=\"ov-tip\" hidden></div>\n"
    "<iframe id=\"view\" title=\"rank timeline\"></iframe>\n"
    "<script id=\"vt-ranks\" type=\"application/json\">";

struct rank_page {
    const char *file;
    int rank;
    char *html;
    size_t len;
    vt__snapshot_data *s;
    vt_timeline *tl;
};

static int cmp_page(const void *a, const void *b)
{
    const struct rank_page *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int vt__viz_ranks(const char *const *inputs, size_t n, const char *out, int check,
                  const vt__check_options *opt, int quiet)
{
    struct rank_page *p = calloc(n, sizeof *p);
    char err[1024] = "";
    FILE *f = NULL;
    int status = VT_EXIT_FAILURE;
    if (!p) {
        fprintf(stderr, "vramtrace viz: out of memory\n");
        return VT_EXIT_FAILURE;
    }
    for (size_t i = 0; i < n; i++) {
        p[i].file = inputs[i];
        if (vt__snapshot_load(inputs[i], &p[i].s, err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: %s\n", err);
            goto done;
        }
        if (vt__timeline_build(p[i].s, &p[i].tl, err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: %s: %s\n", inputs[i], err);
            goto done;
        }
        p[i].rank = p[i].s->meta.rank >= 0 ? p[i].s->meta.rank : (int)i;
        vt_check_report *rep = NULL;
        if (check && vt__check_run(p[i].s, opt, &rep, err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: check: %s: %s\n", inputs[i], err);
            goto done;
        }
        FILE *m = open_memstream(&p[i].html, &p[i].len);
        int rc = m ? vt__viz_render(m, p[i].s, p[i].tl, rep, NULL, err, sizeof err) : -ENOMEM;
        if (m && fclose(m) != 0 && !rc)
            rc = -ENOMEM;
        vt__check_report_free(rep);
        if (rc) {
            fprintf(stderr, "vramtrace viz: %s: %s\n", inputs[i], err[0] ? err : "out of memory");
            goto done;
        }
    }
    qsort(p, n, sizeof *p, cmp_page);

    vt__buf data = { 0 };
    vt__put_u8(&data, '[');
    for (size_t i = 0; i < n; i++) {
        if (i)
            vt__put_u8(&data, ',');
        vt__viz_rank_json(&data, p[i].rank, p[i].file, p[i].s, p[i].tl);
    }
    vt__put_u8(&data, ']');
    if (data.oom) {
        fprintf(stderr, "vramtrace viz: out of memory\n");
        vt__buf_free(&data);
        goto done;
    }
    char tmp[4096];
    f = vt__outfile_open(out, tmp, sizeof tmp, err, sizeof err);
    if (!f) {
        fprintf(stderr, "vramtrace viz: %s\n", err);
        vt__buf_free(&data);
        goto done;
    }
    fputs(page_head, f);
    fwrite(data.p, 1, data.n, f);
    vt__buf_free(&data);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "</script>\n<script type=\"application/octet-stream\" data-rank-page=\"%d\">",
                p[i].rank);
        vt__write_base64(f, (const unsigned char *)p[i].html, p[i].len);
    }
    fputs("</script>\n<script>\n", f);
    fputs(vt__viz_ticks_js, f);
    fputs(vt__viz_ranks_js, f);
    fputs("</script>\n</body></html>\n", f);
    int rc = vt__outfile_close(f, 1, tmp, out, 0, err, sizeof err);
    f = NULL;
    if (rc != 0) {
        fprintf(stderr, "vramtrace viz: %s\n", err);
        goto done;
    }
    if (!quiet)
        printf("wrote %s: %zu ranks\n", out, n);
    status = 0;
done:
    for (size_t i = 0; i < n; i++) {
        free(p[i].html);
        vt__timeline_free(p[i].tl);
        vt__snapshot_free(p[i].s);
    }
    free(p);
    return status;
}
