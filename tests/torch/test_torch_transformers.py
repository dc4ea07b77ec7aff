"""vramtrace on other people's code: Hugging Face transformers' GPT-2 and its
KV cache (hf_decode.py), an inference script that never imports vramtrace,
under plain `vramtrace run` (the pool's blocks, judged by time: no optimizer
step to mark) and `vramtrace run --track` (its tensors and their holders).
The leak twin keeps each prompt's output and with it the whole cache of its
decoding; the fixed twin keeps the generated ids on the host."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

pytest.importorskip("transformers", reason="the test environment has no transformers "
                    "(scripts/setup installs it into .venv-test)")

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
PROG = os.path.join(HERE, "hf_decode.py")
MODEL_LINE = next(i for i, t in enumerate(open(PROG), 1) if "# MODEL_LINE" in t)


def _start(kind: str, track: bool, snap: str) -> subprocess.Popen:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    cmd = [SIMRUN, "--mem", "1G", "--", CLI, "run", *(["--track"] if track else []),
           "-o", snap, "--", sys.executable, PROG, kind]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


@pytest.fixture(scope="module")
def snaps(tmp_path_factory) -> Dict[Tuple[str, bool], str]:
    """The four runs, two at a time (each a few seconds of transformers'
    import and 192 forward calls): {(kind, tracked): snapshot}."""
    d = tmp_path_factory.mktemp("hf")
    out: Dict[Tuple[str, bool], str] = {}
    for track in (False, True):
        procs = {}
        for kind in ("leak", "fixed"):
            snap = str(d / f"{kind}{'-track' if track else ''}.vtsnap")
            procs[kind] = (_start(kind, track, snap), snap)
        for kind, (p, snap) in procs.items():
            stdout, stderr = p.communicate(timeout=300)
            assert p.returncode == 0 and "done 12" in stdout, stderr[-3000:]
            out[(kind, track)] = snap
    return out


def check(snap: str) -> Tuple[int, str]:
    r = subprocess.run([CLI, "check", snap], capture_output=True, text=True, timeout=120)
    assert r.returncode in (0, 1), r.stderr
    return r.returncode, r.stdout


def test_a_kept_kv_cache_is_never_freed_at_the_users_line_under_plain_run(snaps):
    rc, text = check(snaps[("leak", False)])
    assert rc == 1, text[:3000]
    assert "rules: never-freed,growth;" in text, text[:3000]
    assert "from 1 cause" in text and "× [never-freed]" in text, text[:3000]
    # the user's line that called the model, not transformers' cache_utils.py
    assert f"allocated at decode ({PROG}:{MODEL_LINE})" in text, text[:3000]
    assert "[growth]" not in text and "[linger]" not in text, text[:3000]
    rc, text = check(snaps[("fixed", False)])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]


def test_run_track_names_the_list_that_keeps_the_cache(snaps):
    rc, text = check(snaps[("leak", True)])
    assert rc == 1, text[:3000]
    assert "from 1 cause" in text, text[:3000]
    held = next(line for line in text.splitlines() if "held by:" in line)
    # kept → the output → its DynamicCache → a layer's keys
    assert held.strip().startswith("held by: module __main__.kept → list[*] → "), held
    assert "DynamicCache" in held and f"(hf_decode.py:{MODEL_LINE})'" in held, held
    rc, text = check(snaps[("fixed", True)])
    assert rc == 0 and "vramtrace check: 0 findings" in text, text[:3000]
