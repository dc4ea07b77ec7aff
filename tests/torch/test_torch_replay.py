"""`vramtrace replay` under PyTorch's rules against real PyTorch on the
simulated device: replay_prog.py (sizes across the small/large and 10 MiB
boundaries, frees out of order, a side stream with record_stream,
empty_cache) recorded once under `vramtrace run` with PyTorch's default
settings; replayed with a setting, it must give the max_memory_reserved()
that a real run with that PYTORCH_CUDA_ALLOC_CONF prints (within 1 %).

The program sets a per-process memory fraction in every run (the
garbage_collection_threshold acts only under one); a recording holds it and
the PYTORCH_CUDA_ALLOC_CONF the program ran with (format 1.7), and a replay
starts from them. Each case runs one PyTorch process; this driver never
imports torch.
"""

from __future__ import annotations

import functools
import json
import os
import re
import sys
from typing import List, Tuple

import pytest

import procs

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
PROG = os.path.join(HERE, "replay_prog.py")
FRACTION = "0.7"   # of the simulated 1 GiB: the GC threshold below acts under it


# Each of its processes is one small PyTorch program: five minutes at most.
run = functools.partial(procs.run, timeout=300)


def prog(conf: str = "", snap: str = "", pickle_path: str = "", fraction: str = FRACTION,
         oom: List[int] | None = None) -> int:
    """replay_prog.py on the device (under `vramtrace run -o SNAP` when
    SNAP is given, with PYTORCH_CUDA_ALLOC_CONF=CONF); torch's own
    max_memory_reserved(). A list `oom` receives the size of the request
    torch refused, if it refused one."""
    cmd = [SIMRUN, "--mem", "1G", "--"]
    if snap:
        cmd += [CLI, "run", "-o", snap, "--"]
    cmd += [sys.executable, PROG, "--fraction", fraction]
    if pickle_path:
        cmd += ["--pickle", pickle_path]
    env = {"PYTORCH_CUDA_ALLOC_CONF": conf} if conf else {}
    rc, out = run(cmd, env)
    assert rc == 0, out[-4000:]
    m = re.search(r"^max_reserved (\d+)$", out, re.M)
    assert m, out[-3000:]
    refused = re.search(r"^oom_at \d+ (\d+)$", out, re.M)
    if oom is not None and refused:
        oom.append(int(refused.group(1)))
    return int(m.group(1))


def replay(snap: str, *args: str) -> dict:
    rc, out = run([CLI, "replay", snap, "--json", *args])
    assert rc == 0, out[-3000:]
    return json.loads(out)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Tuple[str, str, int]:
    """The default-settings run, recorded: (vtsnap, PyTorch pickle of the
    same run, its max_memory_reserved())."""
    d = tmp_path_factory.mktemp("replay")
    snap, pkl = str(d / "run.vtsnap"), str(d / "run.pickle")
    return snap, pkl, prog(snap=snap, pickle_path=pkl)


def agree(replayed: int, torch: int) -> None:
    assert abs(replayed - torch) <= torch / 100, (replayed, torch)


def test_replay_of_a_recorded_pytorch_run_gives_its_max_reserved(recorded):
    snap, _, torch_max = recorded
    r = replay(snap, "--conf", f"per_process_memory_fraction:{FRACTION}")
    assert r["rules"] == "pytorch", r["rules"]   # auto: the recording is PyTorch's allocator
    dev = r["devices"][0]
    agree(dev["peak_reserved"], torch_max)
    assert dev["recorded"]["peak_reserved"] == torch_max
    assert r["segments_identical"], r
    assert r["oom"] is None
    # vramtrace's own rules stay one --rules away
    assert replay(snap, "--rules", "vramtrace")["rules"] == "vramtrace"
    # the fraction the program set is in the recording: as recorded, the same
    r = replay(snap)
    assert "per_process_memory_fraction:0.7" in r["settings"], r["settings"]
    assert r["settings_origin"] == "as recorded", r["settings_origin"]
    agree(r["devices"][0]["peak_reserved"], torch_max)


def test_the_recording_keeps_the_settings_a_program_changes_while_it_runs(tmp_path):
    """PYTORCH_CUDA_ALLOC_CONF, then _set_allocator_settings twice (the last value
    of a key wins) and the memory fraction: the recording holds what PyTorch ran
    with at the end, and a replay starts from it."""
    snap = str(tmp_path / "changed.vtsnap")
    prog_text = ("import torch\n"
                 "torch.cuda.set_per_process_memory_fraction(0.5)\n"
                 "for v in ('64', '128'):\n"
                 "    torch.cuda.memory._set_allocator_settings(f'max_split_size_mb:{v}')\n"
                 "x = torch.empty(1000, device='cuda')\n")
    rc, out = run([SIMRUN, "--mem", "1G", "--", CLI, "run", "-o", snap, "--",
                   sys.executable, "-c", prog_text],
                  {"PYTORCH_CUDA_ALLOC_CONF": "garbage_collection_threshold:0.6"})
    assert rc == 0, out[-3000:]
    rc, text = run([CLI, "json", snap])
    assert json.loads(text)["meta"]["framework_settings"] == (
        "garbage_collection_threshold:0.6,max_split_size_mb:128,per_process_memory_fraction:0.5")
    settings = replay(snap)["settings"]
    assert "max_split_size_mb:128" in settings and "per_process_memory_fraction:0.5" in settings, \
        settings


def test_a_run_recorded_with_a_setting_replays_as_recorded_to_its_max_reserved(tmp_path):
    """PYTORCH_CUDA_ALLOC_CONF and the fraction the program ran with are in
    its recording: replayed with nothing given, torch's own figure."""
    snap = str(tmp_path / "expandable.vtsnap")
    torch_max = prog("expandable_segments:True", snap=snap)
    r = replay(snap)
    assert "expandable_segments:True" in r["settings"], r["settings"]
    assert r["expandable_segments"] and r["oom"] is None, r
    agree(r["devices"][0]["peak_reserved"], torch_max)


@pytest.mark.parametrize("conf", [
    "expandable_segments:True",
    "max_split_size_mb:40",
    "garbage_collection_threshold:0.6",
    "roundup_power2_divisions:4",
])
def test_a_run_with_a_setting_matches_the_replay_of_the_default_run_with_it(recorded, conf):
    snap, _, default_max = recorded
    torch_max = prog(conf)
    assert torch_max != default_max, "the setting changes nothing: the case proves nothing"
    r = replay(snap, "--conf", f"per_process_memory_fraction:{FRACTION},{conf}")
    assert r["rules"] == "pytorch"
    assert r["oom"] is None
    agree(r["devices"][0]["peak_reserved"], torch_max)


@pytest.mark.parametrize("fraction", ["0.5", "0.4"])
def test_a_smaller_memory_fraction_retries_and_runs_out_of_memory_as_in_replay(recorded, fraction):
    """Under 0.5 of the device PyTorch's cudaMalloc fails and it frees its
    cache and tries again (the retry path) and fits; under 0.4 it runs out
    of memory: the replay of the run recorded under 0.7 does the same, with
    the same reserved bytes and the same request refused."""
    snap, _, _ = recorded
    refused: List[int] = []
    torch_max = prog(fraction=fraction, oom=refused)
    r = replay(snap, "--conf", f"per_process_memory_fraction:{fraction}")
    dev = r["devices"][0]
    assert dev["alloc_retries"] > 0, dev
    agree(dev["peak_reserved"], torch_max)
    if refused:
        assert r["oom"] is not None and r["oom"]["size"] == refused[0], (r["oom"], refused)
    else:
        assert r["oom"] is None, r["oom"]
    assert bool(refused) == (fraction == "0.4")


def test_imported_pytorch_snapshot_replays_to_its_recorded_max_reserved(recorded):
    _, pkl, torch_max = recorded
    r = replay(pkl, "--rules", "pytorch")
    assert r["rules"] == "pytorch"
    dev = r["devices"][0]
    assert dev["recorded"]["peak_reserved"] == torch_max
    agree(dev["peak_reserved"], torch_max)
    # its empty_cache() calls are not events in the pickle: inferred from the
    # runs of segment frees no allocation explains
    assert dev["segment_frees"] == dev["recorded"]["segment_frees"] > 0
    assert r["segments_identical"], r
