/*
 * cli/viz_ranks.c - `vramtrace viz A B ... -o OUT.html`: several snapshots
 * (one per rank) in one self-contained page.
 *
 * The page holds every rank's own timeline page (viz/render.c, unchanged),
 * base64-encoded, shown one at a time in an iframe by a rank selector, and an
 * overview with every rank's allocated-bytes curve on one time axis, aligned
 * by wall clock or by each rank's first mark (a training step); the curves
 * and marks come from viz/rank_data.c, embedded as every page embeds data.
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
    "#overview{display:block;width:100%;height:170px;background:#fff;border-bottom:1px solid #ddd}\n"
    "#view{display:block;width:100%;height:calc(100vh - 220px);border:0}\n"
    "</style></head><body>\n<header><b id=\"title\"></b><span id=\"ranks\"></span>\n"
    "<label>align <select id=\"align\"><option value=\"wall\">wall clock</option>"
    "<option value=\"mark\">first mark (step)</option></select></label></header>\n"
    "<svg id=\"overview\" viewBox=\"0 0 1000 170\" preserveAspectRatio=\"none\"></svg>\n"
    "<iframe id=\"view\" title=\"rank timeline\"></iframe>\n"
    "<script id=\"vt-ranks\" type=\"application/json\">";

/* Selector, overview drawing, and decoding of the embedded pages. */
static const char page_script[] =
    "</script>\n<script>\n"
    "'use strict';\n"
    "const R = JSON.parse(document.getElementById('vt-ranks').textContent);\n"
    "const pages = Array.from(document.querySelectorAll('script[data-rank-page]'));\n"
    "const colors = ['#2b6cb0','#c05621','#2f855a','#9b2c2c','#6b46c1','#b7791f','#2c7a7b','#97266d'];\n"
    "const fmt = b => b < 1024 ? b + ' B' : b < 1048576 ? (b/1024).toFixed(1) + ' KiB' :\n"
    "  b < 1073741824 ? (b/1048576).toFixed(1) + ' MiB' : (b/1073741824).toFixed(2) + ' GiB';\n"
    "document.getElementById('title').textContent = R.length + ' ranks';\n"
    "let current = -1;\n"
    "function show(i) {\n"
    "  if (i === current) return;\n"
    "  current = i;\n"
    "  const bin = atob(pages[i].textContent.trim());\n"
    "  const bytes = new Uint8Array(bin.length);\n"
    "  for (let k = 0; k < bin.length; k++) bytes[k] = bin.charCodeAt(k);\n"
    "  document.getElementById('view').srcdoc = new TextDecoder().decode(bytes);\n"
    "  document.querySelectorAll('#ranks button').forEach((b, k) => b.classList.toggle('sel', k === i));\n"
    "  draw();\n"
    "}\n"
    "const nav = document.getElementById('ranks');\n"
    "R.forEach((r, i) => {\n"
    "  const b = document.createElement('button');\n"
    "  b.textContent = 'rank ' + r.rank + ' (' + fmt(r.peak) + ')';\n"
    "  b.title = r.file; b.dataset.rank = r.rank;\n"
    "  b.style.borderLeft = '6px solid ' + colors[i % colors.length];\n"
    "  b.onclick = () => show(i);\n"
    "  nav.appendChild(b);\n"
    "});\n"
    "function offset(r) {\n"
    "  if (document.getElementById('align').value === 'mark' && r.marks.length) return r.marks[0][0];\n"
    "  return 0;\n"
    "}\n"
    "function draw() {\n"
    "  const svg = document.getElementById('overview');\n"
    "  while (svg.firstChild) svg.removeChild(svg.firstChild);\n"
    "  let t0 = Infinity, t1 = -Infinity, ymax = 1;\n"
    "  for (const r of R) { const o = offset(r); for (const p of r.points) {\n"
    "    t0 = Math.min(t0, p[0] - o); t1 = Math.max(t1, p[0] - o); ymax = Math.max(ymax, p[1]); } }\n"
    "  if (!(t1 > t0)) t1 = t0 + 1;\n"
    "  const ns = 'http://www.w3.org/2000/svg';\n"
    "  R.forEach((r, i) => {\n"
    "    const o = offset(r);\n"
    "    const pts = [];\n"
    "    let prev = 160;\n"
    "    for (const p of r.points) {\n"
    "      const x = (p[0] - o - t0) / (t1 - t0) * 990 + 5, y = 160 - p[1] / ymax * 150;\n"
    "      pts.push(x.toFixed(1) + ',' + prev.toFixed(1), x.toFixed(1) + ',' + y.toFixed(1)); prev = y;\n"
    "    }\n"
    "    const pl = document.createElementNS(ns, 'polyline');\n"
    "    pl.setAttribute('points', pts.join(' '));\n"
    "    pl.setAttribute('fill', 'none');\n"
    "    pl.setAttribute('stroke', colors[i % colors.length]);\n"
    "    pl.setAttribute('stroke-width', i === current ? '2.5' : '1');\n"
    "    pl.setAttribute('vector-effect', 'non-scaling-stroke');\n"
    "    pl.dataset.rank = r.rank;\n"
    "    pl.style.cursor = 'pointer';\n"
    "    pl.onclick = () => show(i);\n"
    "    const t = document.createElementNS(ns, 'title');\n"
    "    t.textContent = 'rank ' + r.rank + ': peak ' + fmt(r.peak);\n"
    "    pl.appendChild(t);\n"
    "    svg.appendChild(pl);\n"
    "  });\n"
    "}\n"
    "document.getElementById('align').onchange = draw;\n"
    "let highest = 0;\n"
    "R.forEach((r, i) => { if (r.peak > R[highest].peak) highest = i; });\n"
    "show(highest);\n"
    "</script>\n</body></html>\n";

struct rank_page {
    const char *file;
    int rank;
    char *html;
    size_t len;
    vt_snapshot_data *s;
    vt_timeline *tl;
};

static int cmp_page(const void *a, const void *b)
{
    const struct rank_page *x = a, *y = b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

int vt__viz_ranks(const char *const *inputs, size_t n, const char *out, int check,
                  const vt_check_options *opt, int quiet)
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
        if (vt_snapshot_load(inputs[i], &p[i].s, err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: %s\n", err);
            goto done;
        }
        if (vt_timeline_build(p[i].s, &p[i].tl, err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: %s: %s\n", inputs[i], err);
            goto done;
        }
        p[i].rank = p[i].s->meta.rank >= 0 ? p[i].s->meta.rank : (int)i;
        vt_check_report *rep = NULL;
        if (check && vt_check_run(p[i].s, opt, &rep, err, sizeof err) != 0) {
            fprintf(stderr, "vramtrace viz: check: %s: %s\n", inputs[i], err);
            goto done;
        }
        FILE *m = open_memstream(&p[i].html, &p[i].len);
        int rc = m ? vt__viz_render(m, p[i].s, p[i].tl, rep, NULL, err, sizeof err) : -ENOMEM;
        if (m && fclose(m) != 0 && !rc)
            rc = -ENOMEM;
        vt_check_report_free(rep);
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
    fputs(page_script, f);
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
        vt_timeline_free(p[i].tl);
        vt_snapshot_free(p[i].s);
    }
    free(p);
    return status;
}
