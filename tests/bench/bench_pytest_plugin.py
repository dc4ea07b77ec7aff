"""The pytest plugin's cost on a suite of small tests.

Writes a suite of small CPU tests (a few tensor ops each, a module-scoped
model, parametrized: TESTS tests) into a temporary directory and runs it
with pytest, without the plugin's gates and with ``--vramtrace-leaks``,
alternating, RUNS times each. Reported: the seconds from the first test's
start to the last one's end (the suite's own time: what the gates add per
test; timed by a conftest in the suite), the whole run's wall time (with
torch's import and the observer's load), and one RESULT line with the
ratios of the best runs. Exits 77 (skipped) without torch or pytest.

    python tests/bench/bench_pytest_plugin.py [TESTS] [RUNS]
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

SUITE = '''
import pytest
import torch

W = torch.randn(64, 64)


@pytest.fixture(scope="module")
def model():
    return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


@pytest.mark.parametrize("i", range({n}))
def test_small(i, model):
    x = torch.randn(16, 64)
    h = torch.tanh(x @ W)
    with torch.no_grad():
        y = model(h)
    assert y.shape == (16, 8)
'''

CONFTEST = '''
import os, time
_t = []

def pytest_runtest_logstart(nodeid, location):
    if not _t:
        _t.append(time.perf_counter())

def pytest_sessionfinish(session):
    if _t:
        with open(os.environ["BENCH_TIMES"], "w") as f:
            f.write(str(time.perf_counter() - _t[0]))
'''


def run(suite_dir: str, gated: bool) -> tuple:
    times = os.path.join(suite_dir, "times.txt")
    env = dict(os.environ, BENCH_TIMES=times)
    here = os.path.dirname(os.path.abspath(__file__))
    scripts = os.path.join(os.path.dirname(os.path.dirname(here)), "scripts")
    env["PYTHONPATH"] = os.pathsep.join([scripts, env.get("PYTHONPATH", "")])
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "vramtrace.pytest_plugin",
           "-p", "no:cacheprovider", "-W", "ignore::UserWarning", suite_dir]
    if gated:
        cmd.append("--vramtrace-leaks")
    began = time.perf_counter()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=suite_dir)
    wall = time.perf_counter() - began
    if r.returncode != 0:
        sys.exit(f"pytest failed ({r.returncode}):\n{r.stdout[-3000:]}{r.stderr[-2000:]}")
    with open(times) as f:
        return float(f.read()), wall


def main() -> int:
    tests = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    try:
        import pytest  # noqa: F401
        import torch  # noqa: F401
    except ImportError as exc:
        print(f"SKIP: {exc}")
        return 77
    with tempfile.TemporaryDirectory(prefix="vt-bench-pytest-") as d:
        with open(os.path.join(d, "test_suite.py"), "w") as f:
            f.write(SUITE.replace("{n}", str(tests)))
        with open(os.path.join(d, "conftest.py"), "w") as f:
            f.write(CONFTEST)
        run(d, True)   # builds track()'s op observer if not cached yet
        best = {False: (1e9, 1e9), True: (1e9, 1e9)}
        for i in range(runs):
            for gated in (False, True):
                suite_s, wall = run(d, gated)
                print(f"run {i} {'--vramtrace-leaks' if gated else 'plain           '}: "
                      f"tests {suite_s * 1e3:8.1f} ms ({suite_s / tests * 1e3:.3f} ms/test), "
                      f"whole run {wall:6.2f} s", flush=True)
                b = best[gated]
                best[gated] = (min(b[0], suite_s), min(b[1], wall))
    plain, gated = best[False], best[True]
    print(f"RESULT tests={tests} runs={runs} plain_ms_per_test={plain[0] / tests * 1e3:.3f} "
          f"gated_ms_per_test={gated[0] / tests * 1e3:.3f} ratio={gated[0] / plain[0]:.2f} "
          f"whole_run_ratio={gated[1] / plain[1]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
