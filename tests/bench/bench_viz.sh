#!/bin/sh
# tests/bench/bench_viz.sh - how big and how fast the HTML timeline is.
#
#   meson test -C BUILD --benchmark bench_viz -v
#
# Generates a snapshot of VT_BENCH_EVENTS events (default 1,000,000) with
# tests/viz/gen_snapshot, renders it with `vramtrace viz --check`, then opens
# the page in headless Chromium (tests/bench/bench_viz.mjs) and reads the
# moment of the first timeline draw the page reports (performance.now()
# since navigation start) and the slowest redraw while it is zoomed and
# panned (the draw time the page reports). Rendering and page load run
# VT_BENCH_RUNS times (default 5); each prints its median (min-max) and the
# first run apart. Last line (medians; bytes per event of the page):
#   RESULT events=<n> html_mb=<MB> bytes_per_event=<B> render_s=<s> first_paint_s=<s> redraw_ms=<ms>
# first_paint_s and redraw_ms are "nan" when chromium or
# tests/viz/node_modules is missing.
set -eu
: "${VT_CLI:?}" "${VT_GEN:?}"
events=${VT_BENCH_EVENTS:-1000000}
work=$(mktemp -d "${TMPDIR:-/tmp}/vt-bench-viz.XXXXXX")
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")" && pwd)

"$VT_GEN" big "$work/big.vtsnap" "$events"
ls -l "$work/big.vtsnap" | awk '{printf "snapshot: %.2f MB\n", $5 / 1e6}'

runs=${VT_BENCH_RUNS:-5}
now() { date +%s.%N; }
# "median (min-max)" and the median alone, of numbers one per line
spread() { sort -g | awk '{v[NR] = $1} END {
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%.3f (%.3f-%.3f) %.3f\n", m, v[1], v[NR], m }'; }

: >"$work/render"
for i in $(seq "$runs"); do
    t0=$(now)
    "$VT_CLI" viz "$work/big.vtsnap" -o "$work/big.html" --check
    t1=$(now)
    echo "$t0 $t1" | awk '{printf "%.3f\n", $2 - $1}' >>"$work/render"
done
html_mb=$(ls -l "$work/big.html" | awk '{printf "%.2f", $5 / 1e6}')
bytes_per_event=$(ls -l "$work/big.html" | awk -v n="$events" '{printf "%.2f", $5 / n}')
render=$(spread <"$work/render")
echo "vramtrace viz --check, $runs runs: ${render% *} s (median (min-max)); first run $(head -n 1 "$work/render") s"
render_s=${render##* }

first_paint_s=nan redraw_ms=nan
: >"$work/paint"
: >"$work/redraw"
for i in $(seq "$runs"); do
    if out=$(node "$here/bench_viz.mjs" "$work/big.html"); then
        [ "$i" -eq 1 ] && echo "$out"
        echo "$out" | sed -n 's/^first_paint_s=//p' >>"$work/paint"
        echo "$out" | sed -n 's/^slowest_redraw_ms=//p' >>"$work/redraw"
    else
        echo "browser part skipped or failed (see above)"
        break
    fi
done
if [ -s "$work/paint" ]; then
    paint=$(spread <"$work/paint")
    echo "first paint, $(wc -l <"$work/paint") page loads: ${paint% *} s (median (min-max))"
    first_paint_s=${paint##* }
    redraw=$(spread <"$work/redraw")
    echo "slowest redraw, $(wc -l <"$work/redraw") page loads: ${redraw% *} ms (median (min-max))"
    redraw_ms=${redraw##* }
fi
echo "RESULT events=$events html_mb=$html_mb bytes_per_event=$bytes_per_event render_s=$render_s first_paint_s=$first_paint_s redraw_ms=$redraw_ms"
