#!/bin/sh
# tests/bench/bench_import.sh - reading a big PyTorch memory snapshot:
# vramtrace next to PyTorch's own tools on the same file.
#
#   meson test -C BUILD --benchmark bench_import -v
#
# Writes a PyTorch-shaped snapshot of VT_BENCH_ENTRIES trace entries (default
# 1,000,000; gen_big_pickle.py, pickled by Python's own pickle), then times,
# with /usr/bin/time (wall seconds, peak RSS):
#   vramtrace import       safe pickle reader + mapping + .vtsnap write
#   vramtrace summary      read the pickle directly (converted in bounded
#   vramtrace leaks        memory into a temporary .vtsnap, then streamed),
#   vramtrace check        timeline, report
#   python pickle.load     Python's C unpickler alone (no view at all)
#   torch _memory_viz stats / trace   PyTorch's text tools (need $VT_TORCH_PYTHON)
# Last line:
#   RESULT entries=N pickle_mb=M import_s=S import_rss_mb=R rss_per_file=X
#          summary_s=S pickle_load_s=S torch_stats_s=S torch_trace_s=S
#          summary_rss_mb=R leaks_s=S leaks_rss_mb=R check_s=S check_rss_mb=R
# (torch_* are "nan" without a Python with torch, ">L" when one ran past
# VT_BENCH_TORCH_LIMIT seconds, default 300: its `trace` looks up the segment
# of every allocation by a linear scan over all segments.)
set -eu
: "${VT_CLI:?}"
here=$(cd "$(dirname "$0")" && pwd)
entries=${VT_BENCH_ENTRIES:-1000000}
py=${VT_TORCH_PYTHON:-}
limit=${VT_BENCH_TORCH_LIMIT:-300}   # seconds each PyTorch tool may take
work=$(mktemp -d "${TMPDIR:-/tmp}/vt-bench-import.XXXXXX")
trap 'rm -rf "$work"' EXIT

python3 "$here/gen_big_pickle.py" "$work/big.pickle" "$entries"
pickle_mb=$(ls -l "$work/big.pickle" | awk '{printf "%.1f", $5 / 1e6}')

# measure NAME CMD...: prints "NAME: S s, R MB" and sets m_s, m_mb; an exit
# status up to $accept (default 0) is a success
accept=0
measure() {
    name=$1
    shift
    rc=0
    /usr/bin/time -f "%e %M" -o "$work/time" "$@" > "$work/out" 2> "$work/err" || rc=$?
    if [ $rc -eq 124 ]; then
        m_s=">$limit" m_mb=nan
        printf '%-28s %8s s (stopped: VT_BENCH_TORCH_LIMIT)\n' "$name" "$m_s"
        return 0
    elif [ $rc -gt "$accept" ]; then
        echo "$name: failed"; tail -3 "$work/err"; m_s=nan; m_mb=nan; return 0
    fi
    m_s=$(awk '{print $1}' "$work/time")
    m_mb=$(awk '{printf "%.0f", $2 / 1024}' "$work/time")
    printf '%-28s %8s s %8s MB\n' "$name" "$m_s" "$m_mb"
}

echo "file: $entries trace entries, $pickle_mb MB pickle; load average $(cut -d' ' -f1 /proc/loadavg)"
measure "vramtrace import" "$VT_CLI" import "$work/big.pickle" -o "$work/big.vtsnap"
import_s=$m_s import_mb=$m_mb
measure "vramtrace summary (pickle)" "$VT_CLI" summary "$work/big.pickle"
summary_s=$m_s summary_mb=$m_mb
measure "vramtrace leaks (pickle)" "$VT_CLI" leaks "$work/big.pickle"
leaks_s=$m_s leaks_mb=$m_mb
accept=1   # check: 1 = findings
measure "vramtrace check (pickle)" "$VT_CLI" check "$work/big.pickle"
check_s=$m_s check_mb=$m_mb
accept=0
measure "vramtrace summary (vtsnap)" "$VT_CLI" summary "$work/big.vtsnap"
measure "python pickle.load" python3 -c "import pickle,sys; pickle.load(open(sys.argv[1],'rb'))" "$work/big.pickle"
load_s=$m_s
torch_stats_s=nan torch_trace_s=nan
if [ -n "$py" ] && "$py" -c "import torch.cuda._memory_viz" 2>/dev/null; then
    export PYTHONWARNINGS=ignore
    measure "torch _memory_viz stats" timeout "$limit" "$py" -m torch.cuda._memory_viz stats "$work/big.pickle"
    torch_stats_s=$m_s
    measure "torch _memory_viz trace" timeout "$limit" "$py" -m torch.cuda._memory_viz trace "$work/big.pickle"
    torch_trace_s=$m_s
else
    echo "torch columns skipped: set VT_TORCH_PYTHON (meson -Dtorch_python=...) to a Python with torch"
fi
ratio=$(echo "$import_mb $pickle_mb" | awk '{ if ($1 == "nan") print "nan"; else printf "%.1f", $1 / $2 }')
echo "RESULT entries=$entries pickle_mb=$pickle_mb import_s=$import_s import_rss_mb=$import_mb" \
     "rss_per_file=$ratio summary_s=$summary_s pickle_load_s=$load_s" \
     "torch_stats_s=$torch_stats_s torch_trace_s=$torch_trace_s summary_rss_mb=$summary_mb" \
     "leaks_s=$leaks_s leaks_rss_mb=$leaks_mb check_s=$check_s check_rss_mb=$check_mb"
