"""Shared fixtures: the recording fake library, and the real one."""

from __future__ import annotations

import gc
import os
import sys

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
