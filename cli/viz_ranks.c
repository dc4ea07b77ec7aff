/*
 * cli/viz_ranks.c - `vramtrace viz A B ... -o OUT.html`: several snapshots
 * (one per rank) in one self-contained page.
 *
 * The page holds every rank's own timeline page (viz/render.c, unchanged),
 * base64-encoded, shown one at a time in an iframe by a rank selector, and an
 * overview with every rank's allocated-bytes curve on one time axis, aligned
 * by wall clock or by each rank's first mark (a training step). Curves are
 * reduced to at most OVERVIEW_POINTS points per rank, keeping each bucket's
 * maximum so no peak disappears. No network request of any kind.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pytorch.h"
#include "render.h"
#include "commands.h"
#include "report_util.h"
#include "timeline.h"
#include "viz_ranks.h"

#define OVERVIEW_POINTS 2000

static void put_base64(FILE *o, const unsigned char *d, size_t n)
{
    static const char tab[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char buf[4096];
    size_t k = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16 | (i + 1 < n ? (uint32_t)d[i + 1] << 8 : 0) |
                     (i + 2 < n ? d[i + 2] : 0);
        buf[k++] = tab[v >> 18 & 63];
        buf[k++] = tab[v >> 12 & 63];
        buf[k++] = i + 1 < n ? tab[v >> 6 & 63] : '=';
        buf[k++] = i + 2 < n ? tab[v & 63] : '=';
        if (k > sizeof buf - 4) {
            fwrite(buf, 1, k, o);
            k = 0;
        }
    }
    fwrite(buf, 1, k, o);
}

/* The overview data of one rank as a JSON object. */
static void put_rank_json(FILE *o, int rank, const char *file, const vt_snapshot_data *s,
                          const vt_timeline *tl)
{
    const vt_tl_device *dev = NULL;
    for (size_t d = 0; d < tl->ndevices; d++)
        if (!dev || tl->devices[d].peak_allocated > dev->peak_allocated)
            dev = &tl->devices[d];
    int64_t base = (int64_t)s->meta.clock_base_realtime_ns - (int64_t)s->meta.clock_base_monotonic_ns;
    fprintf(o, "{\"rank\":%d,\"file\":", rank);
    vt__json_str(o, file);
    fprintf(o, ",\"device\":%d,\"peak\":%" PRIu64 ",\"points\":[", dev ? dev->device : -1,
            dev ? dev->peak_allocated : 0);
    if (dev) {
        size_t n = dev->npoints, step = n > OVERVIEW_POINTS ? (n + OVERVIEW_POINTS - 1) / OVERVIEW_POINTS : 1;
        for (size_t i = 0; i < n; i += step) {
            size_t best = i;
            for (size_t k = i; k < i + step && k < n; k++)
                if (dev->points[k].allocated > dev->points[best].allocated)
                    best = k;
            /* wall clock in ms (a double keeps µs precision for years) */
            fprintf(o, "%s[%.3f,%" PRIu64 "]", i ? "," : "",
                    (double)((int64_t)dev->points[best].time_ns + base) / 1e6,
                    dev->points[best].allocated);
        }
    }
    fputs("],\"marks\":[", o);
    for (size_t m = 0; m < tl->nmarks; m++) {
        fprintf(o, "%s[%.3f,", m ? "," : "", (double)((int64_t)tl->marks[m].time_ns + base) / 1e6);
        vt__json_str(o, vt_snapshot_string(s, tl->marks[m].label));
        fputc(']', o);
    }
    fputs("]}", o);
}

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
    char *tmp = NULL;
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

    size_t tl_len = strlen(out) + 32;
    tmp = malloc(tl_len);
    if (!tmp) {
        fprintf(stderr, "vramtrace viz: out of memory\n");
        goto done;
    }
    snprintf(tmp, tl_len, "%s.tmp.%d", out, (int)getpid());
    f = fopen(tmp, "w");
    if (!f) {
        fprintf(stderr, "vramtrace viz: cannot create %s: %s\n", tmp, strerror(errno));
        goto done;
    }
    fputs(page_head, f);
    fputc('[', f);
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputc(',', f);
        put_rank_json(f, p[i].rank, p[i].file, p[i].s, p[i].tl);
    }
    fputc(']', f);
    for (size_t i = 0; i < n; i++) {
        fprintf(f, "</script>\n<script type=\"application/octet-stream\" data-rank-page=\"%d\">",
                p[i].rank);
        put_base64(f, (const unsigned char *)p[i].html, p[i].len);
    }
    fputs(page_script, f);
    int bad = ferror(f);
    if (fclose(f) != 0 || bad) {
        f = NULL;
        fprintf(stderr, "vramtrace viz: %s: write failed\n", out);
        unlink(tmp);
        goto done;
    }
    f = NULL;
    if (rename(tmp, out) != 0) {
        fprintf(stderr, "vramtrace viz: cannot rename %s to %s: %s\n", tmp, out, strerror(errno));
        unlink(tmp);
        goto done;
    }
    if (!quiet)
        printf("wrote %s: %zu ranks\n", out, n);
    status = 0;
done:
    if (f)
        fclose(f);
    free(tmp);
    for (size_t i = 0; i < n; i++) {
        free(p[i].html);
        vt_timeline_free(p[i].tl);
        vt_snapshot_free(p[i].s);
    }
    free(p);
    return status;
}
