"""The recorder's Python frames, end to end without torch: alloc_shapes.py
calls cudaMalloc through ctypes on the simulated device, under `vramtrace
run`, with every CPython the recorder supports that is installed here; each
allocation's recorded Python frames must be exactly the stack the program
saw (generators, coroutines, exceptions unwinding, four threads at once).
A process without Python must record exactly what it did before."""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

from conftest import vt_cli

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = os.path.join(HERE, "pyframes", "alloc_shapes.py")
PYENV = os.environ.get("PYENV_ROOT", "/root/.pyenv")


def interpreter(minor: int) -> str:
    """A CPython 3.minor: this one, or pyenv's; skips when none is installed."""
    if sys.version_info[:2] == (3, minor):
        return sys.executable
    found = sorted(glob.glob(os.path.join(PYENV, "versions", f"3.{minor}.*", "bin",
                                          f"python3.{minor}")))
    if not found:
        pytest.skip(f"no CPython 3.{minor} installed (looked in {PYENV}/versions)")
    return found[-1]


def run(cmd, env=None) -> str:
    full = dict(os.environ)
    full.update(env or {})
    p = subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, f"{cmd}: {p.stderr[-3000:]}"
    return p.stdout


def snapshot_json(snap: str, events: bool = False) -> dict:
    """Snapshot file ``snap`` as `vramtrace json` reads it (``events``: with
    its events, `--events`)."""
    return json.loads(run([vt_cli(), "json", snap] + (["--events"] if events else [])))


def python_frames(sj: dict, stack: int):
    """[file, line, function, first_line] of the Python frames of a stack,
    outermost first."""
    out = []
    while stack:
        parent, frame = sj["stacks"][stack]
        fr = sj["frames"][frame]
        if fr["module"] == "python" and fr["ip"] == "0x0":
            out.append([fr["file"], fr["line"], fr["function"], fr["first_line"]])
        stack = parent
    return out[::-1]


def source_line(text: str) -> int:
    """The line of alloc_shapes.py that starts with `text`, read from the
    file, not from Python's code objects."""
    with open(SHAPES) as f:
        lines = [i + 1 for i, line in enumerate(f) if line.startswith(text)]
    assert len(lines) == 1, (text, lines)
    return lines[0]


def traced_shapes(tmp_path, python: str, shapes, conf: str = ""):
    snap = str(tmp_path / "shapes.vtsnap")
    cmd = [vt_cli(), "run", "-o", snap]
    if conf:
        cmd += ["--conf", conf]
    out = run(cmd + ["--", python, SHAPES, *shapes])
    expected = json.loads(out.strip().splitlines()[-1])
    return snapshot_json(snap), expected, snap


@pytest.mark.parametrize("minor", [10, 11, 12, 13])
def test_python_frames_match_the_programs_stack_in_every_shape(tmp_path, minor):
    sj, expected, _ = traced_shapes(tmp_path, interpreter(minor),
                                    ["plain", "generator", "async", "exception", "threads"])
    by_addr = {lt["addr"]: lt for lt in sj["lifetimes"]}
    assert len(expected) == 1 + 3 + 3 + 2 + 80
    # [file, line, function, first line]: the first lines as the program's
    # code objects have them, for every shape
    for addr, want in expected.items():
        got = python_frames(sj, by_addr[addr]["alloc_stack"])
        assert got == want, f"{addr}: recorded {got}, the program saw {want}"


def test_python_frames_are_interleaved_inside_the_eval_loops_native_frame(tmp_path):
    sj, expected, snap = traced_shapes(tmp_path, interpreter(sys.version_info[1]), ["plain"])
    addr = next(iter(expected))
    stack = next(lt["alloc_stack"] for lt in sj["lifetimes"] if lt["addr"] == addr)
    names = []
    while stack:
        parent, frame = sj["stacks"][stack]
        names.append(sj["frames"][frame]["function"])
        stack = parent
    # innermost first: cudaMalloc, ctypes, the Python frames, then the eval loop
    assert names[0] == "cudaMalloc", names
    first_py = names.index("alloc")
    assert names[first_py:first_py + 3] == ["alloc", "plain", "<module>"], names
    assert "_PyEval_EvalFrameDefault" in names[first_py + 3:], names
    assert "_PyEval_EvalFrameDefault" not in names[:first_py], names
    leaks = run([vt_cli(), "leaks", snap])
    assert f"alloc {SHAPES}:" in leaks and "_PyEval_EvalFrameDefault" not in leaks, leaks
    summary = run([vt_cli(), "summary", snap])
    assert f"alloc {SHAPES}:" in summary[summary.index("top call sites"):], summary


@pytest.mark.parametrize("minor", [10, 11, 12, 13])
def test_python_frames_carry_the_line_their_function_is_defined_at(tmp_path, minor):
    """Each Python frame's first line is where its function is defined in
    the file (the decorator's line for a decorated one, 1 for the module),
    in the JSON and in leaks and summary as "(def at line N)"."""
    sj, expected, snap = traced_shapes(tmp_path, interpreter(minor), ["plain", "decorated"])
    defs = {"alloc": source_line("def alloc("), "plain": source_line("def plain("),
            "decorated": source_line("@passthrough"), "<module>": 1}
    assert defs["decorated"] + 1 == source_line("def decorated(")
    by_addr = {lt["addr"]: lt for lt in sj["lifetimes"]}
    seen = set()
    for addr in expected:
        for file, line, fn, first in python_frames(sj, by_addr[addr]["alloc_stack"]):
            assert file == SHAPES
            assert first == defs[fn], f"{fn} at line {line}: first line {first}, not {defs[fn]}"
            seen.add(fn)
    assert seen == set(defs), seen
    alloc_line = source_line("    rc = rt.cudaMalloc(")
    site = f"alloc {SHAPES}:{alloc_line} (def at line {defs['alloc']})"
    leaks = run([vt_cli(), "leaks", snap])
    assert site in leaks, leaks
    assert f"decorated {SHAPES}:{defs['decorated'] + 2} (def at line {defs['decorated']})" in leaks
    assert "<module> " in leaks and "(def at line 1)" not in leaks, leaks
    summary = run([vt_cli(), "summary", snap])
    assert site in summary[summary.index("top call sites"):], summary


def test_signal_snapshots_while_python_threads_allocate(tmp_path):
    """Snapshots on a signal are written by vramtrace's thread from stacks
    already interned, while three Python threads go on allocating; the
    program runs to its end and the exit snapshot's frames are exact."""
    sj, expected, _ = traced_shapes(tmp_path, interpreter(sys.version_info[1]), ["signal"],
                                    conf="signal:SIGUSR1")
    assert len(expected) > 3
    by_addr = {lt["addr"]: lt for lt in sj["lifetimes"]}
    for addr, want in expected.items():
        assert python_frames(sj, by_addr[addr]["alloc_stack"]) == want
    signal_snaps = [f for f in os.listdir(tmp_path) if f != "shapes.vtsnap"]
    assert signal_snaps, os.listdir(tmp_path)
    for f in signal_snaps:
        signal_sj = snapshot_json(str(tmp_path / f))
        assert any(fr["module"] == "python" for fr in signal_sj["frames"])


def test_stacks_native_records_no_python_frames(tmp_path):
    sj, expected, _ = traced_shapes(tmp_path, interpreter(sys.version_info[1]), ["plain"],
                                    conf="stacks:native")
    assert "stacks:native" in sj["meta"]["config"]
    assert not any(f["module"] == "python" for f in sj["frames"])
    assert any(f["function"] == "_PyEval_EvalFrameDefault" for f in sj["frames"])


def test_stacks_python_records_only_python_frames(tmp_path):
    sj, expected, _ = traced_shapes(tmp_path, interpreter(sys.version_info[1]), ["plain"],
                                    conf="stacks:python")
    addr = next(iter(expected))
    stack = next(lt["alloc_stack"] for lt in sj["lifetimes"] if lt["addr"] == addr)
    assert python_frames(sj, stack) == expected[addr]
    n = 0
    while stack:
        stack = sj["stacks"][stack][0]
        n += 1
    assert n == len(expected[addr])


def stacks_of(sj: dict):
    """Every lifetime's allocation stack as function names."""
    out = []
    for lt in sj["lifetimes"]:
        names, stack = [], lt["alloc_stack"]
        while stack:
            parent, frame = sj["stacks"][stack]
            names.append(sj["frames"][frame]["function"])
            stack = parent
        out.append((lt["size"], names))
    return out


def test_a_process_without_python_records_as_before(tmp_path):
    """A C program: stacks:all (the default) and stacks:native record the
    same stacks, and no Python frame."""
    demo = os.environ.get("VT_DEMO_WORKLOAD")
    if not demo or not os.path.exists(demo):
        pytest.skip("VT_DEMO_WORKLOAD not set (run through meson test)")
    snaps = []
    for conf in ("stacks:all", "stacks:native"):
        snap = str(tmp_path / f"{conf.replace(':', '_')}.vtsnap")
        run([vt_cli(), "run", "-o", snap, "--conf", conf, "--", demo])
        snaps.append(snapshot_json(snap))
    # the workload's sizes vary from run to run; its call paths do not
    paths = [{tuple(names) for _, names in stacks_of(sj)} for sj in snaps]
    assert paths[0] == paths[1]
    assert any(len(p) > 3 for p in paths[0]), paths[0]
    assert not any(f["module"] == "python" for f in snaps[0]["frames"])
