#!/bin/sh
# tests/viz/test_viz_command.sh - `vramtrace viz` without a browser: it writes one
# self-contained page (no URL that could make a request), names the default
# output after the input, and fails cleanly on a bad snapshot.
set -eu
: "${VT_CLI:?}" "${VT_GEN:?}" "${VT_ARTIFACTS:?}"
dir="$VT_ARTIFACTS/cli"
rm -rf "$dir"
mkdir -p "$dir"
fail() { echo "FAIL: $*" >&2; exit 1; }

"$VT_GEN" small "$dir/run.vtsnap" >/dev/null
"$VT_CLI" viz "$dir/run.vtsnap" >"$dir/out.txt" || fail "viz failed"
[ -s "$dir/run.html" ] || fail "default output run.html missing"
grep -q "wrote $dir/run.html" "$dir/out.txt" || fail "no 'wrote' line: $(cat "$dir/out.txt")"

page="$dir/run.html"
grep -q '<script type="application/octet-stream" id="vt-data">' "$page" || fail "no data tag"
grep -q "Content-Security-Policy" "$page" || fail "no CSP"
# Nothing that loads anything: no src=, no href= other than the data: icon,
# no URL schemes, no leftover template markers.
if grep -Eo '(src|href)="[^"]*"' "$page" | grep -v 'href="data:,"' | grep -q .; then
    fail "page references a resource: $(grep -Eo '(src|href)="[^"]*"' "$page" | head -3)"
fi
grep -Eq 'https?://' "$page" && fail "page contains a URL: $(grep -Eo 'https?://[^ "]*' "$page" | head -3)"
grep -q '@@VT_' "$page" && fail "template marker left in the page"
grep -q 'fc1.weight' "$page" || fail "tensor name missing"
grep -q 'make_weights' "$page" || fail "function name missing"

"$VT_CLI" viz "$dir/run.vtsnap" -o "$dir/checked.html" --check -q >"$dir/out2.txt" || fail "viz --check failed"
[ -s "$dir/out2.txt" ] && fail "--quiet printed: $(cat "$dir/out2.txt")"
grep -q '"src":"check"' "$dir/checked.html" || fail "--check page has no checker finding"
grep -q 'Cache.entries' "$dir/checked.html" || fail "retention path missing"
grep -q "pinned: 'batch.padded' ([0-9.]* KiB) kept by 1 small view" "$dir/checked.html" ||
    fail "the pinned finding is missing or mistitled"
grep -q 'Loader.last_tokens' "$dir/checked.html" || fail "pinned finding's retention path missing"

# A bad snapshot: one clear message, exit 2, no output file left behind.
printf 'not a snapshot' >"$dir/bad.vtsnap"
rc=0; "$VT_CLI" viz "$dir/bad.vtsnap" -o "$dir/bad.html" 2>"$dir/err.txt" || rc=$?
[ "$rc" -eq 2 ] || fail "bad snapshot: exit $rc, expected 2"
[ -e "$dir/bad.html" ] && fail "output written for a bad snapshot"
[ "$(wc -l <"$dir/err.txt")" -eq 1 ] || fail "expected one error line, got: $(cat "$dir/err.txt")"
grep -q "vramtrace viz" "$dir/err.txt" || fail "error does not name the command"
ls "$dir" | grep -q '\.tmp\.' && fail "temporary file left behind"

# Counts read as English: one allocation, not "1 allocations".
"$VT_GEN" one "$dir/one.vtsnap" >/dev/null
"$VT_CLI" viz "$dir/one.vtsnap" -o "$dir/one.html" >"$dir/one.txt" || fail "viz of one allocation failed"
grep -q ", 1 allocation, 2 events, not checked (--check marks findings), " "$dir/one.txt" ||
    fail "singular counts, and no '0 findings' without --check: $(cat "$dir/one.txt")"
"$VT_CLI" viz "$dir/one.vtsnap" -o "$dir/one.html" --check >"$dir/one.txt" || fail "viz --check of one allocation failed"
grep -q ", 1 allocation, 2 events, 0 findings, " "$dir/one.txt" || fail "checked: $(cat "$dir/one.txt")"

# Usage errors.
"$VT_CLI" viz 2>/dev/null && fail "no arguments accepted"
"$VT_CLI" viz --bogus x 2>/dev/null && fail "unknown option accepted"
"$VT_CLI" viz --help | grep -q "self-contained" || fail "--help"
"$VT_CLI" viz --help | grep -q -- "--rules LIST" || fail "--help does not name --rules"
rc=0; "$VT_CLI" viz "$dir/run.vtsnap" -o "$dir/rules.html" --rules bogus 2>"$dir/rules.txt" || rc=$?
[ "$rc" -eq 2 ] || fail "--rules bogus: exit $rc, expected 2"
grep -q "bad --rules 'bogus'" "$dir/rules.txt" || fail "--rules bogus: $(cat "$dir/rules.txt")"
# --rules runs the checker with those rules: pinned alone finds the pinned
# view and not the lingering cache entry.
"$VT_CLI" viz "$dir/run.vtsnap" -o "$dir/rules.html" --rules pinned -q || fail "--rules pinned failed"
grep -q '"kind":"pinned"' "$dir/rules.html" || fail "--rules pinned: no pinned finding"
grep -q '"kind":"linger"' "$dir/rules.html" && fail "--rules pinned ran linger too"


# The wrapper script: via VRAMTRACE_CLI, and from a source tree layout
# (scripts/ next to build*/cli/vramtrace).
wrapper="$VT_VIZ_TESTS/../../scripts/vramtrace-viz"
VRAMTRACE_CLI="$VT_CLI" "$wrapper" "$dir/run.vtsnap" -o "$dir/wrapped.html" -q || fail "wrapper failed"
[ -s "$dir/wrapped.html" ] || fail "wrapper wrote nothing"
mkdir -p "$dir/tree/scripts" "$dir/tree/build-x/cli"
cp "$wrapper" "$dir/tree/scripts/"
ln -s "$VT_CLI" "$dir/tree/build-x/cli/vramtrace"
env -u VRAMTRACE_CLI "$dir/tree/scripts/vramtrace-viz" "$dir/run.vtsnap" -o "$dir/tree.html" -q || fail "wrapper in a source tree failed"
[ -s "$dir/tree.html" ] || fail "wrapper (source tree) wrote nothing"
echo "ok: wrapper"
