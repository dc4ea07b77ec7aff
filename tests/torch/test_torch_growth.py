"""`vramtrace compare` on a four-rank job (torchrun, gloo; each rank on its
own simulated device, ranks_growth.py): the rank that keeps a buffer every
step is named with its line and its growth per step, the others are not,
among them the fixed twin (rank 3 receives the same buffer every step and
lets it go); compared without the leaking rank, nobody is. One job for both
(a four-rank torchrun job costs seconds); the same job under `run --track`
names what holds the growing line, and a job of a pipeline stage that keeps
each step's sent activation in a dict (ranks_stage.py) names the stage's dict. The program never imports
vramtrace: `vramtrace run` observes PyTorch's allocator and marks the
optimizer steps, which align the ranks.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from typing import List

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SIMRUN = os.path.join(os.environ["VT_SIM_LIBDIR"], "simrun")
CLI = os.environ["VRAMTRACE_CLI"]
SCRIPT = os.path.join(HERE, "ranks_growth.py")
STAGE = os.path.join(HERE, "ranks_stage.py")
RECV = 'recv_buf = torch.empty(256 * 1024, device="cuda")'
RECV_LINE = next(i for i, line in enumerate(open(SCRIPT), 1) if RECV in line)
MiB = 1 << 20


def run(cmd: List[str]) -> str:
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout[-3000:]
    return p.stdout


@pytest.fixture(scope="module")
def snaps(tmp_path_factory) -> List[str]:
    return job(tmp_path_factory.mktemp("job"))


@pytest.fixture(scope="module")
def tracked_snaps(tmp_path_factory) -> List[str]:
    return job(tmp_path_factory.mktemp("tracked"), ["--track"])


@pytest.fixture(scope="module")
def stage_snaps(tmp_path_factory) -> List[str]:
    return job(tmp_path_factory.mktemp("stage"), ["--track"], STAGE)


def job(tmp_path, options: List[str] = [], script: str = SCRIPT) -> List[str]:
    """The four ranks under `vramtrace run` (Python stacks only: the line is
    all the test reads, and native symbols cost seconds per rank)."""
    torchrun = os.path.join(os.path.dirname(sys.executable), "torchrun")
    run([SIMRUN, "--devices", "4", "--mem", "256M", "--", CLI, "run", *options, "--conf",
         "stacks:python", "-o", str(tmp_path / "rank%r.vtsnap"), "--", torchrun, "--standalone",
         "--log-dir", str(tmp_path / "torchrun-logs"),
         "--nproc_per_node", "4", script])
    snaps = sorted(str(p) for p in tmp_path.glob("rank*.vtsnap"))
    assert [os.path.basename(p) for p in snaps] == [f"rank{r}.vtsnap" for r in range(4)]
    return snaps


def named(out: str) -> List[str]:
    """compare's lines that name a rank for its growth."""
    return [line for line in out.splitlines() if re.match(r"rank \d+ (grows|shrinks) ", line)]


def test_compare_names_the_rank_that_grows_its_line_and_its_growth_per_step(snaps):
    out = run([CLI, "compare", *snaps])
    site = f"{RECV} (ranks_growth.py:{RECV_LINE})"   # the line as the user wrote it
    assert named(out) == [f"rank 2 grows 1 MiB per step from {site} "
                          "(the ranks' median: 0 B per step)"], out
    assert "the others are flat" in out.splitlines(), out
    growth = json.loads(run([CLI, "compare", "--json", *snaps]))["growth"]
    assert growth["marks"] == 8 and growth["labels"][:2] == ["step 1", "step 2"], growth
    ranks = {r["rank"]: r for r in growth["ranks"]}
    assert [r for r in sorted(ranks) if ranks[r]["differs"]] == [2], growth
    assert [ranks[r]["per_step"] for r in range(4)] == [0, 0, MiB, 0], growth
    alive = ranks[2]["alive"]
    assert [b - a for a, b in zip(alive, alive[1:])] == [MiB] * 7, alive
    # recorded without track(): what holds the buffers is not known
    assert ranks[2]["sites"] == [{"site": site, "per_step": MiB, "others_per_step": 0,
                                  "first_bytes": 2 * MiB, "last_bytes": 7 * MiB,
                                  "held_by": None}], growth
    assert "held by" not in out, out


def test_under_track_compare_names_what_holds_the_growing_line(tracked_snaps):
    """`vramtrace run --track`: the growing line's buffers are named with
    what keeps them, the program's list, as `check` names the cause."""
    out = run([CLI, "compare", *tracked_snaps])
    site = f"{RECV} (ranks_growth.py:{RECV_LINE})"
    assert named(out) == [f"rank 2 grows 1 MiB per step from {site} "
                          "(the ranks' median: 0 B per step)"], out
    held = f"module __main__.received \u2192 list[*] \u2192 tensor '{site}'"
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("    +1 MiB per step  " + site))
    assert lines[at + 1] == "      held by: " + held, out
    growth = json.loads(run([CLI, "compare", "--json", *tracked_snaps]))["growth"]
    (rank2,) = [r for r in growth["ranks"] if r["differs"]]
    assert rank2["rank"] == 2 and [s["held_by"] for s in rank2["sites"]] == [held], growth


def test_the_fixed_twin_names_no_rank(snaps):
    snaps = [snaps[0], snaps[1], snaps[3]]   # rank 3 lets its buffers go
    out = run([CLI, "compare", *snaps])
    assert named(out) == [], out
    assert "no rank's growth differs from the others': every rank is flat" in out, out
    growth = json.loads(run([CLI, "compare", "--json", *snaps]))["growth"]
    assert not any(r["differs"] or r["sites"] for r in growth["ranks"]), growth


def test_a_pipeline_stage_keeping_what_it_sent_is_named_with_its_dict(stage_snaps):
    """A stage object keeps each step's sent activation in a dict attribute
    (ranks_stage.py, written like a pipeline schedule's stage): compare
    names rank 2, the line that made what it keeps, and the stage's dict."""
    out = run([CLI, "compare", *stage_snaps])
    (line,) = named(out)
    assert line.startswith("rank 2 grows 256 KiB per step from ") and "ranks_stage.py:" in line, out
    held = [s["held_by"] for r in json.loads(run([CLI, "compare", "--json", *stage_snaps]))
            ["growth"]["ranks"] if r["differs"] for s in r["sites"]]
    assert held and held[0].startswith("module __main__.stage \u2192 Stage.sent \u2192 dict[*]"), held
