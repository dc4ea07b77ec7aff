"""The pytest plugin (vramtrace/pytest_plugin.py), run as pytest users run it:
pytest in a child process on the example suites in pytest_examples/. Exactly
the leaking tests fail, each message naming the holder and the line that made
the tensor; the fixed twins, a module's own globals, a module-scoped fixture's
tensors and a function-scoped fixture torn down in time pass; the limit marker
fails only the test over it; two xdist workers give the same verdicts."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Dict, List, Tuple

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(HERE, "pytest_examples")
LEAKS = os.path.join(EXAMPLES, "test_leaks_example.py")
LIMITS = os.path.join(EXAMPLES, "test_limit_example.py")
from conftest import SCRIPTS, line_of, vt_cli  # noqa: E402

LEAKING = {"test_cycle_leak", "test_cache_leak", "test_hook_leak", "test_graph_leak"}
OVER = {"test_over_limit"}
LEAK_ARGS = ["--vramtrace-leaks", "--vramtrace-ignore", "*torch.full*"]


def _pytest(args: List[str], env_path: Tuple[str, ...] = (), timeout: int = 120
            ) -> Tuple[int, str, Dict[str, str]]:
    """(exit status, output, test name -> PASSED/FAILED/ERROR) of a child pytest."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*env_path, SCRIPTS, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-p", "vramtrace.pytest_plugin", "-p",
           "no:cacheprovider", "--confcutdir", EXAMPLES, "--rootdir", EXAMPLES, "-rA",
           "-W", "ignore::UserWarning", *args]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                       cwd=EXAMPLES)
    out = r.stdout + r.stderr
    verdicts = {m.group(2): m.group(1) for m in
                re.finditer(r"^(PASSED|FAILED|ERROR) \S*::(\w+)", out, re.M)}
    return r.returncode, out, verdicts


def _section(out: str, test: str) -> str:
    m = re.search(r"^_+ " + test + r" _+$(.*?)(?=^_{5,} \w|^=+ )", out, re.M | re.S)
    assert m, f"no failure section for {test}:\n{out[-4000:]}"
    return m.group(1)


@pytest.fixture(scope="module")
def leak_run(tmp_path_factory):
    vt_cli()
    out_dir = str(tmp_path_factory.mktemp("snaps"))
    rc, out, verdicts = _pytest([*LEAK_ARGS, "--vramtrace-out", out_dir, LEAKS, LIMITS])
    return rc, out, verdicts, out_dir


def test_exactly_the_leaking_tests_fail(leak_run):
    rc, out, verdicts, _ = leak_run
    assert rc == 1, out[-4000:]
    failed = {t for t, v in verdicts.items() if v != "PASSED"}
    assert failed == LEAKING | OVER, out[-6000:]
    # the twins, the module's global, the fixtures (a module-scoped one's
    # parameters and the gradients a test leaves on them among them), the
    # allowed and the ignored leak and the test under its limit: all ran
    # and passed
    assert len(verdicts) == 15, verdicts


@pytest.mark.parametrize("test,tag,holder", [
    ("test_cycle_leak", "LEAK_CYCLE", "(cycle) Node.other → Node.other → Node.buf → tensor"),
    ("test_cache_leak", "LEAK_CACHE", "module test_leaks_example.CACHE → list[0] → tensor"),
    ("test_hook_leak", "LEAK_HOOK", "Linear._forward_hooks → OrderedDict[0] → function "
                                    "<lambda at test_leaks_example.py:"),
])
def test_each_leak_names_its_holder_and_line(leak_run, test, tag, holder):
    _, out, _, _ = leak_run
    text = _section(out, test)
    assert "tensor storage made by this test outlived it" in text, text
    assert f"test_leaks_example.py:{line_of(LEAKS, tag)}" in text, text
    held = [ln for ln in text.splitlines() if "held by:" in ln]
    assert any(holder in ln for ln in held), text
    if test == "test_hook_leak":
        assert any("closure cell 'seen'" in ln for ln in held), text
    if test == "test_cycle_leak":
        assert "only the garbage collector freed it" in text, text


def test_a_kept_graph_is_one_cause_named_by_what_keeps_it(leak_run):
    """A loss kept with its graph leaves a storage for every activation and
    parameter under it (11 here), each with its own chain through the
    graph: the failure says them as `check` does, one cause held by the
    loss's list, then its first finding in full (it listed each storage
    with its chain: 31 entries, 130 lines, for a GPT-2's kept loss)."""
    _, out, _, _ = leak_run
    text = _section(out, "test_graph_leak")
    head = text.strip().splitlines()[0]
    assert re.match(r"vramtrace: \d+ tensor storages made by this test outlived it "
                    r"\(.*\), from 1 cause:$", head), text
    n = int(head.split()[1])
    assert n >= 8, text
    assert f"  {n} × [linger] " in text, text
    held = [ln.strip() for ln in text.splitlines() if "held by:" in ln]
    assert held[0].startswith("held by: module test_leaks_example.LOSSES → list[*] → tensor "), held
    assert held[0].endswith(f"(test_leaks_example.py:{line_of(LEAKS, 'LOSS_LINE')})'.grad_fn "
                            "→ (the autograd graph it keeps)"), held
    assert len(held) == 2 and text.count("\n#") == 1, text   # the cause, its first finding
    assert f"({n - 1} more findings of this cause: `vramtrace check`" in text, text


def test_limit_over_names_the_peak_and_its_line(leak_run):
    _, out, _, _ = leak_run
    text = _section(out, "test_over_limit")
    assert "peak memory allocated by this test on host is 2 MiB, over the limit of 1 MiB" \
        in text, text
    assert f"test_limit_example.py:{line_of(LIMITS, 'OVER_LINE')}" in text, text


def test_failing_tests_keep_a_snapshot_that_check_reads(leak_run):
    _, _, _, out_dir = leak_run
    snaps = sorted(os.listdir(out_dir))
    assert len(snaps) == len(LEAKING | OVER), snaps
    cache = next(s for s in snaps if "test_cache_leak" in s)
    r = subprocess.run([vt_cli(), "check", os.path.join(out_dir, cache)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 1 and "test_leaks_example.CACHE" in r.stdout, r.stdout[-3000:]


def test_two_xdist_workers_give_the_same_verdicts(leak_run):
    pytest.importorskip("xdist")
    _, _, single, _ = leak_run
    rc, out, verdicts = _pytest(["-n", "2", *LEAK_ARGS, LEAKS, LIMITS], timeout=180)
    assert rc == 1, out[-4000:]
    assert verdicts == single, out[-6000:]
    assert f"test_leaks_example.py:{line_of(LEAKS, 'LEAK_CACHE')}" in _section(out, "test_cache_leak")


def test_without_the_option_only_limits_gate(tmp_path):
    vt_cli()
    rc, out, verdicts = _pytest([LEAKS, LIMITS])
    failed = {t for t, v in verdicts.items() if v != "PASSED"}
    assert failed == OVER, out[-6000:]


def test_missing_torch_is_said_once(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('torch hidden for this test')\n")
    suite = tmp_path / "test_plain.py"
    suite.write_text("def test_a():\n    pass\n\ndef test_b():\n    pass\n\n"
                     "def test_c():\n    pass\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), SCRIPTS])
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "vramtrace.pytest_plugin",
                        "-p", "no:cacheprovider", "--vramtrace-leaks", str(suite)],
                       env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-3000:]
    assert r.stdout.count("vramtrace: torch") == 1, r.stdout
    assert "3 passed" in r.stdout


def test_a_cuda_leak_is_flagged_through_pytorchs_observed_allocator():
    """On the (simulated) device: the leaking test fails naming its line and
    holder, its clean twin passes; PyTorch's allocator is observed, not replaced.
    A test that keeps a 4-byte result fails too: `check`'s floor of minor
    findings is not the gate's (it asks with --min-bytes 0)."""
    import torch
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device (the suite runs on the simulated one)")
    cuda = os.path.join(EXAMPLES, "test_cuda_example.py")
    rc, out, verdicts = _pytest(["--vramtrace-leaks", cuda])
    assert verdicts == {"test_cuda_cache_leak": "FAILED", "test_cuda_clean": "PASSED"}, out[-4000:]
    text = _section(out, "test_cuda_cache_leak")
    assert "on cuda:0" in text, text
    assert f"test_cuda_example.py:{line_of(cuda, 'CUDA_LEAK_LINE')}" in text, text
    assert "module test_cuda_example.KEPT → list[0]" in text, text
    small = os.path.join(EXAMPLES, "test_cuda_small_example.py")
    rc, out, verdicts = _pytest(["--vramtrace-leaks", small])
    assert verdicts == {"test_cuda_small_leak": "FAILED"}, out[-4000:]
    text = _section(out, "test_cuda_small_leak")
    assert f"test_cuda_small_example.py:{line_of(small, 'CUDA_SMALL_LEAK_LINE')}" in text, text
