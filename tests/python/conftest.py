"""Shared fixtures: the recording fake library, the real one, and track()'s
op observer."""

from __future__ import annotations

import gc
import json
import os
import shutil
import subprocess
import sys
from typing import List, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(HERE)), "scripts")
for p in (SCRIPTS, HERE):
    if p not in sys.path:
        sys.path.insert(0, p)

import vramtrace  # noqa: E402
from fakelib import FakeLib  # noqa: E402


@pytest.fixture
def fake():
    """vramtrace bound to a FakeLib for the duration of the test."""
    lib = FakeLib()
    old = vramtrace.set_library(lib)
    try:
        yield lib
    finally:
        vramtrace.set_library(old)


@pytest.fixture
def real_lib():
    """The built libvramtrace (VRAMTRACE_LIB), loaded fresh."""
    if not os.environ.get("VRAMTRACE_LIB"):
        pytest.skip("VRAMTRACE_LIB not set (run through meson test)")
    old = vramtrace.set_library(None)
    try:
        yield vramtrace._lib.get_library()
    finally:
        vramtrace.set_library(old)


@pytest.fixture(scope="module")
def observer():
    """track()'s op observer (vramtrace/_trackobs.py), built at first use
    into VRAMTRACE_CACHE_DIR: the test_track_observer_*.py files' subject."""
    from vramtrace import _trackobs
    mod = _trackobs.load()
    if mod is None:
        pytest.fail("the op observer could not be built (torch.utils.cpp_extension, "
                    "g++ and ninja are in the test environment)")
    return mod


@pytest.fixture
def no_gc():
    """Automatic gc off for the test (a long-lived program's cycles sit in
    generation 2 for many steps); one collection afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()
        gc.collect()


# ---- end-to-end helpers: one traced program, then `vramtrace check` ---------

def vt_cli() -> str:
    """The built `vramtrace` command; skips outside meson test."""
    cli = os.environ.get("VRAMTRACE_CLI") or shutil.which("vramtrace")
    if not cli or not os.environ.get("VRAMTRACE_LIB"):
        pytest.skip("VRAMTRACE_LIB / VRAMTRACE_CLI not set (run through meson test)")
    return cli


DEVICES = ["cpu", "cuda"]


def run_traced(script: str, args: List[str], out: str, extra_path: Tuple[str, ...] = (),
               timeout: int = 300, device: str = "cpu") -> dict:
    """Run a leak program (it prints one JSON line last) that writes snapshot `out`.

    device "cuda": its tensors are on the simulated device (the program's
    `cuda` argument), under `vramtrace run` with PyTorch's own cache off, so
    that every storage is an allocation of vramtrace's allocator (these tests
    run under simrun: the child finds the simulated CUDA libraries)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([SCRIPTS, HERE, *extra_path, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, script, *args]
    if device == "cuda":
        env["PYTORCH_NO_CUDA_MEMORY_CACHING"] = "1"
        cmd = [vt_cli(), "run", "-o", out + ".atexit", "--", *cmd, "cuda"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    info = json.loads(r.stdout.strip().splitlines()[-1])
    info["snap"] = out
    return info


def vt_check(snap: str, timeout: int = 120) -> tuple:
    """(exit status, report) of `vramtrace check SNAP --json`: 0 clean, 1 findings."""
    r = subprocess.run([vt_cli(), "check", snap, "--json"], capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, json.loads(r.stdout)


def line_of(path: str, tag: str) -> int:
    """The number of the first line of ``path`` that holds ``tag`` (a comment
    marking the line a test expects a report to name)."""
    with open(path) as f:
        return next(i for i, text in enumerate(f, 1) if tag in text)


def storage_nbytes(t):
    """(bytes, address) of tensor t's storage."""
    st = t.untyped_storage() if hasattr(t, "untyped_storage") else t.storage()
    return st.nbytes(), st.data_ptr()


def made_by(name, op):
    """A tensor's name says the op that made it, after the user's line:
    "b = a @ a.t() (test_track_names.py:31, aten.mm out[0])"."""
    return name == op or name.endswith(f", {op})") or name.startswith(f"{op} at ")


def new_by_name(lib, op):
    """The fake library's TENSOR_NEW calls of tensors op made."""
    return [e for e in lib.of("tensor_new") if made_by(e[5], op)]
