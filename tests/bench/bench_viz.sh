#!/bin/sh
# tests/bench/bench_viz.sh - how big and how fast the HTML timeline is.
#
#   meson test -C BUILD --benchmark bench_viz -v
#
# Generates a snapshot of VT_BENCH_EVENTS events (default 1,000,000) with
# tests/viz/gen_snapshot, renders it with `vramtrace viz --check`, then opens
# the page in headless Chromium (tests/bench/bench_viz.mjs) and reads the
# moment of the first timeline draw the page reports (performance.now()
# since navigation start). Last line:
#   RESULT html_mb=<MB> render_s=<s> first_paint_s=<s>
# first_paint_s is "nan" when chromium or tests/viz/node_modules is missing.
set -eu
: "${VT_CLI:?}" "${VT_GEN:?}"
events=${VT_BENCH_EVENTS:-1000000}
work=$(mktemp -d "${TMPDIR:-/tmp}/vt-bench-viz.XXXXXX")
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")" && pwd)

"$VT_GEN" big "$work/big.vtsnap" "$events"
ls -l "$work/big.vtsnap" | awk '{printf "snapshot: %.2f MB\n", $5 / 1e6}'

now() { date +%s.%N; }
t0=$(now)
"$VT_CLI" viz "$work/big.vtsnap" -o "$work/big.html" --check
t1=$(now)
render_s=$(echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}')
html_mb=$(ls -l "$work/big.html" | awk '{printf "%.2f", $5 / 1e6}')

first_paint_s=nan
if out=$(node "$here/bench_viz.mjs" "$work/big.html"); then
    echo "$out"
    first_paint_s=$(echo "$out" | sed -n 's/^first_paint_s=//p')
else
    echo "browser part skipped or failed (see above)"
fi
echo "RESULT html_mb=$html_mb render_s=$render_s first_paint_s=$first_paint_s"
