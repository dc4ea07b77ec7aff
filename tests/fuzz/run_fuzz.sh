#!/bin/sh
# tests/fuzz/run_fuzz.sh - build one libFuzzer target with clang and run it
# for a bounded time; any crash, sanitizer report or timeout fails the test.
#
#   run_fuzz.sh NAME SECONDS OUTDIR SEED -- CFLAGS... -- SOURCES...
#
# Built with FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION, so the snapshot reader
# skips its checksums and random mutations reach the decoders behind them.
# Exits 77 (skipped) when clang cannot build libFuzzer targets here.
set -eu
name=$1 seconds=$2 out=$3 seed=$4
shift 4
[ "$1" = "--" ] && shift
cflags=""
while [ $# -gt 0 ] && [ "$1" != "--" ]; do cflags="$cflags $1"; shift; done
[ $# -gt 0 ] && shift

mkdir -p "$out/corpus-$name"
if ! command -v clang >/dev/null 2>&1; then
    echo "run_fuzz: clang with libFuzzer is not available: skipped"
    exit 77
fi

# The target is built again only when the command (clang's version, the
# flags, the sources) differs from the last build's, or a source or a file
# of an include directory is newer than the target: fuzzed is always what
# the tree holds now.
exe="$out/fuzz_$name"
stamp="$exe.command"
incdirs=$(for f in $cflags; do case "$f" in -I*) echo "${f#-I}" ;; esac; done)
command="$(clang --version | head -1) | -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -D_GNU_SOURCE -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION $cflags $* -lzstd -lm"
# shellcheck disable=SC2086
if [ -x "$exe" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$command" ] &&
   [ -z "$(find "$@" "$0" $incdirs -newer "$exe" -print 2>/dev/null | head -1)" ]; then
    echo "run_fuzz: fuzz_$name is up to date"
else
    probe="$out/probe.c"
    echo 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { (void)d; (void)n; return 0; }' > "$probe"
    if ! clang -fsanitize=fuzzer "$probe" -o "$out/probe" 2>/dev/null; then
        echo "run_fuzz: clang with libFuzzer is not available: skipped"
        exit 77
    fi
    rm -f "$stamp"
    # shellcheck disable=SC2086
    clang -g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -D_GNU_SOURCE -DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION $cflags "$@" -lzstd -lm -o "$exe"
    echo "$command" > "$stamp"
fi
cp "$seed" "$out/corpus-$name/" 2>/dev/null || true
cd "$out"
echo "run_fuzz: $name for ${seconds}s (corpus $out/corpus-$name)"
rc=0
# libFuzzer's own exit status for a crash or a timeout is 77, which meson
# reads as skipped: a finding must fail the test.
"$exe" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=2048 \
    -error_exitcode=1 -timeout_exitcode=1 \
    -print_final_stats=1 "corpus-$name" > "fuzz-$name.log" 2>&1 || rc=$?
tail -25 "fuzz-$name.log"
[ $rc -eq 0 ] || echo "run_fuzz: $name failed (status $rc); the input is in $out (crash-*, timeout-*)"
exit $rc
