#!/usr/bin/env bash
# tests/wheel/test_wheel.sh - `pip install vramtrace` as a user does it:
# build the wheel from this source tree (meson-python, build isolation, the
# build requirements from the package index), install it into a fresh virtual
# environment, and use only the installed copy, from outside the source tree:
# the command, `python -m vramtrace`, `vramtrace run` on a CUDA program on the
# simulated device, the Python package, `vramtrace viz`; then uninstall and
# check that nothing is left behind.
#
#   test_wheel.sh SRCDIR CUDA_ROOT SIM_LIBDIR CUDA_PROGRAM WORKDIR SIMRUN [TORCH_PYTHON]
#
# TORCH_PYTHON, when given, is a Python with torch 2.x: the installed package
# is then also used with real torch (track() on the CPU, use_allocator() on
# the simulated device), by putting torch's site directory behind the venv's.
set -euo pipefail
src=$1 cuda=$2 simlib=$3 prog=$4 work=$5 simrun=$6 torch_py=${7:-}
# meson passes built programs relative to the build dir; this script moves.
src=$(realpath "$src") simlib=$(realpath "$simlib") prog=$(realpath "$prog")
work=$(realpath -m "$work")

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "== $*"; }

rm -rf "$work"
mkdir -p "$work/dist"
cd "$work"    # never the source tree: the installed copy must stand alone

step "pip wheel (meson-python)"
python3 -m pip wheel --no-deps -q -w "$work/dist" \
    -Csetup-args=-Dcudatoolkit="$cuda" -Cbuild-dir="$work/build" "$src" ||
    fail "pip wheel of $src failed"
wheel=$(ls "$work"/dist/vramtrace-*.whl)
[[ -f $wheel ]] || fail "no wheel in $work/dist"

step "wheel contents"
listing=$(python3 -m zipfile -l "$wheel")
for f in vramtrace/libvramtrace.so vramtrace/_bin/vramtrace vramtrace/__init__.py \
         vramtrace/__main__.py vramtrace/torch/__init__.py vramtrace/torch/_tracker.py vramtrace/_trackobs.py \
         vramtrace/native/trackobs/observer.cpp vramtrace/native/trackobs/tensor_facts.h \
         vramtrace/native/trackobs/held_args.h vramtrace/native/trackobs/frames_of_memory.h \
         vramtrace/native/trackobs/storage_reads.h \
         vramtrace/native/pool_observer.cpp vramtrace/_boot/sitecustomize.py \
         vramtrace/_autorun.py vramtrace/_pool_observer.py vramtrace/_native_build.py; do
    grep -q " *$f " <<<"$listing" || grep -q "^$f " <<<"$listing" || fail "wheel lacks $f"
done
meta=$(python3 - "$wheel" <<'PY'
import sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
print(z.read(next(n for n in z.namelist() if n.endswith("dist-info/METADATA"))).decode())
PY
)
# track()'s per-op path in C, built for the Python that built the wheel
grep -Eq 'vramtrace/_trackfast\.[^ ]*\.so' <<<"$listing" || fail "wheel lacks vramtrace/_trackfast*.so"
grep -q '^Version: ' <<<"$meta" || fail "METADATA has no version"
grep -q '^Requires-Python: ' <<<"$meta" || fail "METADATA has no Requires-Python"
grep -q '^Requires-Dist: torch.*extra == "torch"' <<<"$meta" || fail "torch is not an optional extra"
if grep '^Requires-Dist:' <<<"$meta" | grep -vq 'extra =='; then
    fail "the wheel has a hard dependency: $(grep '^Requires-Dist:' <<<"$meta")"
fi

step "install into a fresh venv"
python3 -m venv "$work/venv"
venv_py="$work/venv/bin/python"
"$work/venv/bin/pip" install -q --no-deps "$wheel" || fail "pip install of the wheel failed"
site=$("$venv_py" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
before_uninstall=$(find "$work/venv" -iname '*vramtrace*' | wc -l)
((before_uninstall > 0)) || fail "nothing named vramtrace in the venv after install"

# Nothing of the source or build tree may be reachable.
export PATH="$work/venv/bin:/usr/bin:/bin"
unset VRAMTRACE_LIB VRAMTRACE_CLI PYTHONPATH || true

step "vramtrace --help (the entry point on PATH)"
[[ $(command -v vramtrace) == "$work/venv/bin/vramtrace" ]] || fail "vramtrace on PATH is $(command -v vramtrace)"
vramtrace --help | grep -q '^usage: vramtrace' || fail "vramtrace --help printed no usage"
"$venv_py" -m vramtrace --help | grep -q '^usage: vramtrace' || fail "python -m vramtrace --help printed no usage"

step "import vramtrace finds the library inside the package"
libpath=$("$venv_py" -c 'import vramtrace; print(vramtrace.library_path())')
[[ $libpath == "$site/vramtrace/libvramtrace.so" ]] || fail "library_path() is $libpath, not inside $site/vramtrace"
"$venv_py" -c 'import vramtrace, sys; v = vramtrace.version(); sys.exit(0 if v.count(".") == 2 else 1)' ||
    fail "vramtrace.version() is not a version"

step "vramtrace run on the simulated device"
LD_LIBRARY_PATH="$simlib" SIMCUDA_MEM=1G vramtrace run -o "$work/run.vtsnap" -- "$prog" > "$work/run.out" ||
    fail "vramtrace run failed: $(cat "$work/run.out")"
grep -q 'bad=0' "$work/run.out" || fail "the program read back wrong data under the wheel's library"
vramtrace summary "$work/run.vtsnap" > "$work/summary.txt" || fail "summary failed"
grep -q 'allocs 600, frees 600' "$work/summary.txt" || fail "summary does not count the program's 600 allocations: $(cat "$work/summary.txt")"

step "vramtrace viz and vramtrace-viz"
vramtrace viz "$work/run.vtsnap" -o "$work/run.html" -q || fail "vramtrace viz failed"
grep -q '<html' "$work/run.html" || fail "viz wrote no HTML"
vramtrace-viz "$work/run.vtsnap" -o "$work/run2.html" -q || fail "vramtrace-viz failed"
[[ -s $work/run2.html ]] || fail "vramtrace-viz wrote nothing"

step "python -m vramtrace run (exit status passes through)"
rc=0
LD_LIBRARY_PATH="$simlib" "$venv_py" -m vramtrace run -- sh -c 'exit 7' || rc=$?
((rc == 7)) || fail "python -m vramtrace run -- sh -c 'exit 7' exited $rc"

if [[ -n $torch_py ]]; then
    step "the package with real torch"
    torch_site=$("$torch_py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    echo "$torch_site" > "$site/zz_torch_from_test_env.pth"
    # the op observer is built from the installed source into the work dir
    VRAMTRACE_CACHE_DIR="$work/cache" "$venv_py" - <<'PY' ||
import torch, vramtrace, vramtrace.torch as vt
from vramtrace import _trackobs
assert vramtrace.library_path().startswith(vramtrace.__file__.rsplit("/", 1)[0])
with vt.track() as t:
    assert t._fast is not None, "track() did not load the installed _trackfast"
    assert t.ops_seen_by == "observer", _trackobs.why_not
    a = torch.ones(1000)
    b = a * 2
    assert t.ops >= 2 and t.tensor_id(b) != 0
print("track ok", float(b.sum()))
PY
        fail "vramtrace.torch on the CPU with real torch"
    "$simrun" --mem 1G -- "$venv_py" - <<'PY' ||
import torch, vramtrace, vramtrace.torch as vt
vt.use_allocator()
x = torch.empty(1 << 20, device="cuda")
s = vramtrace.stats()
assert s["allocated_bytes"]["all"]["current"] >= 4 << 20, s
del x
print("use_allocator ok")
PY
        fail "vramtrace.torch.use_allocator() with real torch on the simulated device"
    # the installed `vramtrace run` observes PyTorch's allocator in a script
    # that never imports vramtrace (its bootstrap comes from the package)
    printf 'import torch\nx = torch.ones(1000, device="cuda")\ny = x * 2\n' > "$work/plain_torch.py"
    VRAMTRACE_CACHE_DIR="$work/cache" "$simrun" --mem 1G -- \
        vramtrace run -o "$work/torch.vtsnap" -- "$venv_py" "$work/plain_torch.py" \
        > "$work/torch.out" 2>&1 || fail "vramtrace run on torch: $(tail -5 "$work/torch.out")"
    json=$(vramtrace json "$work/torch.vtsnap") || fail "vramtrace json of the torch run failed"
    grep -q '"framework_allocator":"observed"' <<<"$json" ||
        fail "the installed vramtrace run did not observe PyTorch: $(tail -5 "$work/torch.out")"
    # the pytest plugin comes with the package (its pytest11 entry point): no -p
    # (the whole help read first: grep -q stopping early would break pytest's pipe)
    help=$("$venv_py" -m pytest --help 2>&1) || fail "pytest --help failed: $help"
    grep -q -- "--vramtrace-leaks" <<<"$help" ||
        fail "pytest did not load the installed plugin (pytest11 entry point)"
    rm -f "$site/zz_torch_from_test_env.pth"
fi

step "uninstall leaves nothing behind"
"$work/venv/bin/pip" uninstall -y -q vramtrace || fail "pip uninstall failed"
left=$(find "$work/venv" -iname '*vramtrace*')
[[ -z $left ]] || fail "left after uninstall: $left"
echo "wheel: built, installed, used and uninstalled"
