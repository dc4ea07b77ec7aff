#!/bin/sh
# tests/demo/test_demo.sh - the demo's flow end to end, as ./scripts/demo runs
# it: the unmodified workload under `vramtrace run` on the simulated device,
# then summary, leaks, check and viz on its snapshot. Asserts what the demo
# is there to show: the history leak is found, with the path that holds it.
#
#   test_demo.sh VRAMTRACE_CLI DEMO_WORKLOAD SIM_LIBDIR OUTDIR
set -eu
vt=$1 prog=$2 sim=$3 out=$4
mkdir -p "$out"
snap="$out/demo.vtsnap"
rm -f "$snap"
fail() { echo "test_demo: $*" >&2; exit 1; }

LD_LIBRARY_PATH="$sim" SIMCUDA_MEM=2G "$vt" run -o "$snap" -- "$prog" > "$out/run.txt" 2>&1 ||
    fail "the workload failed under vramtrace run: $(cat "$out/run.txt")"
grep -q "^demo: 12 steps" "$out/run.txt" || fail "unexpected workload output: $(cat "$out/run.txt")"
[ -s "$snap" ] || fail "no snapshot at $snap"

"$vt" summary "$snap" > "$out/summary.txt" || fail "summary failed"
grep -q "marks 13" "$out/summary.txt" || fail "the workload's 13 marks are missing: $(cat "$out/summary.txt")"
grep -q "forward " "$out/summary.txt" || fail "no symbolized call site in the summary"

"$vt" leaks "$snap" > "$out/leaks.txt" || fail "leaks failed"
grep -q "^Leak of .* in 8 allocations" "$out/leaks.txt" ||
    fail "the 8 never-released history entries are not reported: $(head -3 "$out/leaks.txt")"

rc=0
"$vt" check "$snap" > "$out/check.txt" || rc=$?
[ $rc -eq 1 ] || fail "check should flag the history leak (exit 1), exited $rc"
grep -q "Trainer.history\[[0-7]\] → tensor 'layer5 out'" "$out/check.txt" ||
    fail "no retention path through Trainer.history: $(head -20 "$out/check.txt")"
if grep -q "tensor 'weight'" "$out/check.txt"; then
    fail "weights used every step were flagged"
fi

"$vt" viz "$snap" -o "$out/timeline.html" --check -q || fail "viz failed"
grep -q '"src":"check"' "$out/timeline.html" || fail "the timeline shows no finding"
echo "test_demo: ok ($out)"
