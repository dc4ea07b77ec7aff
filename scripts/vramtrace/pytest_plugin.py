"""pytest plugin: tensor leak and peak-memory gates for a test suite.

Installed with the package (the ``pytest11`` entry point ``vramtrace``)::

    pytest --vramtrace-leaks                      # a test that leaks a tensor fails
    @pytest.mark.vramtrace_limit("256 MiB")       # a test whose peak exceeds it fails
    @pytest.mark.vramtrace_allow_leaks            # this test may leak

How a leak is found. The session runs under one :func:`vramtrace.torch.track`
(entered before collection, so the tensors a test module makes at import are
known as the module's, not as a test's). Before a test's setup the plugin
notes the tracked storages alive; after its teardown (its function-scoped
fixtures are gone), the storages alive that were not, less those made by the
setup of a wider-scoped fixture, are the test's survivors, and the tracker's
count of tensors a garbage collection freed says whether a reference cycle
held one. Only when either is non-zero (a passing suite pays for nothing
else) the plugin collects the cycles recording what held each tensor, writes
a snapshot and runs ``vramtrace check --json`` on it: its findings on the
survivors' memory, and those a collection freed that the test made, are the
test's leaks, printed as ``vramtrace check`` prints them (the user's line
that made each, the holder chain). ``--vramtrace-ignore`` passes its
patterns to the checker's ``--ignore``.

The peak a ``vramtrace_limit`` compares is of memory allocated during the
test, per device: for host tensors, the tracked CPU storages (from the
trace's external storages); for a CUDA device, the allocations vramtrace
recorded (its allocator, or ``vramtrace run`` observing PyTorch's), else
PyTorch's own ``max_memory_allocated()``.
"""

from __future__ import annotations

import importlib.util
import sys
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from typing import Any, Dict, List, Optional, Set, Tuple

import pytest

_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000 ** 2, "mb": 1000 ** 2,
          "mib": 1024 ** 2, "g": 1000 ** 3, "gb": 1000 ** 3, "gib": 1024 ** 3,
          "t": 1000 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_SIZE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?)\s*([a-zA-Z]*)\s*$")


def parse_size(text: Any) -> int:
    """Bytes of ``"256 MiB"``, ``"1.5GB"``, ``"4096"`` or an int."""
    if isinstance(text, int):
        return text
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or unit not in _UNITS:
        raise ValueError(f"vramtrace_limit: not a size: {text!r} (e.g. \"256 MiB\", \"1GB\")")
    return int(float(m.group(1)) * _UNITS[unit])


def fmt_bytes(n: float) -> str:
    """Sizes as the command line writes them: ``3.91 KiB``, ``40 B``."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{int(n)} B" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024.0
    return f"{n:.3g} GiB"


def _where(stack: List[Dict[str, Any]]) -> str:
    """The innermost frame of the user's own code in a finding's stack: the
    frames `check --json` and `vramtrace json` give say which are
    (``user_code``: the one rule, trace/common/user_code.h)."""
    for fr in stack or ():
        if fr.get("user_code"):
            return f"{fr.get('function')} ({fr.get('file')}:{fr.get('line')})"
    return "(no Python frame recorded)"


def _device_name(dev: int) -> str:
    return "host" if dev < 0 else f"cuda:{dev}"


# --------------------------------------------------------------------------
# Options, markers, the header
# --------------------------------------------------------------------------

def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("vramtrace", "tensor leak gates (vramtrace)")
    group.addoption("--vramtrace-leaks", action="store_true", default=False,
                    help="fail a test that leaves a tensor it made alive after its "
                         "function-scoped fixtures are done, or that only the garbage "
                         "collector freed (held by a reference cycle)")
    group.addoption("--vramtrace-ignore", action="append", default=[], metavar="PATTERN",
                    help="do not count tensors whose name or any function of the stack "
                         "that made them matches PATTERN (fnmatch; repeatable)")
    group.addoption("--vramtrace-out", metavar="DIR", default=None,
                    help="keep a snapshot per failing test in DIR (for vramtrace viz)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", "vramtrace_limit(size): fail the test when the peak memory it allocates "
                   "on a device (or in tracked host tensors) exceeds size, e.g. \"256 MiB\"")
    config.addinivalue_line(
        "markers", "vramtrace_allow_leaks: do not fail this test for tensors it leaves alive")
    config.pluginmanager.register(_Gate(config), "vramtrace-gate")


def _is_xdist_controller(config: Any) -> bool:
    return not hasattr(config, "workerinput") and \
        getattr(config.option, "dist", "no") not in (None, "no") and \
        bool(getattr(config.option, "numprocesses", None) or getattr(config.option, "tx", None))


class _Gate:
    """The per-session state: the tracker, and what each test is judged by."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.leaks = bool(config.getoption("vramtrace_leaks"))
        self.ignore: List[str] = list(config.getoption("vramtrace_ignore") or [])
        self.out: Optional[str] = config.getoption("vramtrace_out")
        self.tracker: Any = None
        self.why_not: Optional[str] = None   # said once, in the header
        self.exempt: Set[int] = set()        # storages of wider-scoped fixtures
        self._tmp: Optional[str] = None
        self._snaps = 0
        self._said = False                   # why_not was in the header

    # -- the session -------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: Any) -> None:
        # Leak gates: the tracker starts before collection, so that what a
        # test module makes at import is the module's. A limit alone starts
        # it at the first test that has one.
        if self.leaks:
            self._start()

    def _start(self) -> None:
        if self.tracker is not None or self.why_not is not None:
            return
        if importlib.util.find_spec("torch") is None:
            self.why_not = "torch is not installed: tests run without leak or limit gates"
            return
        if _is_xdist_controller(self.config):
            return   # the workers run the tests, each under its own tracker
        try:
            import torch  # noqa: F401
        except ImportError as exc:
            self.why_not = f"torch cannot be imported ({exc}): tests run without leak or " \
                           "limit gates"
            return
        try:
            import vramtrace.torch as vtt
            self.tracker = vtt.track().__enter__()
        except Exception as exc:   # no library, torch broken: say so, test on
            self.why_not = f"cannot track tensors ({exc}): tests run without leak or limit gates"
            self.tracker = None
            return
        # CUDA tensors live in blocks of PyTorch's caching allocator: observe
        # it from CUDA's initialization on, as `vramtrace run` does
        from . import _autorun
        _autorun.observe_when_cuda_starts(sys.modules.get("torch"))

    def pytest_report_header(self, config: Any) -> Optional[str]:
        if self.why_not:
            self._said = True
            return f"vramtrace: {self.why_not}"
        if self.tracker is not None:
            return f"vramtrace: leak gates on (track(), ops seen by {self.tracker.ops_seen_by})" \
                if self.leaks else "vramtrace: limit gates on"
        return None

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.why_not and not self._said:   # found at a test's limit, not at the start
            terminalreporter.write_line(f"vramtrace: {self.why_not}")

    def pytest_sessionfinish(self, session: Any) -> None:
        tr, self.tracker = self.tracker, None
        if tr is not None:
            try:
                tr.__exit__(None, None, None)
                tr.close()
            except Exception:
                pass
        if self._tmp:
            shutil.rmtree(self._tmp, ignore_errors=True)

    # -- fixtures of wider scope keep their tensors on purpose -----------------
    @pytest.hookimpl(hookwrapper=True)
    def pytest_fixture_setup(self, fixturedef: Any, request: Any) -> Any:
        tr = self.tracker
        if tr is None or fixturedef.scope == "function":
            yield
            return
        keys = set(tr.storages_now())
        yield
        self.exempt.update(k for k in tr.storages_now() if k not in keys)

    # -- one test ------------------------------------------------------------
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: Any, nextitem: Any) -> Optional[bool]:
        limit_mark = item.get_closest_marker("vramtrace_limit")
        gate_leaks = self.leaks and item.get_closest_marker("vramtrace_allow_leaks") is None
        if limit_mark is not None:
            self._start()
        tr = self.tracker
        if tr is None or (not gate_leaks and limit_mark is None):
            return None
        from _pytest.runner import runtestprotocol
        limit = parse_size(limit_mark.args[0]) if limit_mark is not None else None
        ihook = item.ihook
        ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        before = set(tr.storages_now())
        gc_before = tr.gc_freed
        cuda = self._cuda_peaks_reset() if limit is not None else {}
        t0 = time.monotonic_ns()
        reports = runtestprotocol(item, nextitem=nextitem, log=False)
        problems: List[str] = []
        snap: Optional[str] = None
        try:
            if gate_leaks:
                msg, snap = self._leaks(item, before, gc_before, t0)
                if msg:
                    problems.append(msg)
            if limit is not None:
                msg, snap = self._limit(item, limit, t0, cuda, snap)
                if msg:
                    problems.append(msg)
            failed = problems or any(r.failed for r in reports)
            if failed and self.out and snap is None:
                snap = self._snapshot(item)
            if snap is not None and not (failed and self.out):
                os.unlink(snap)
            elif snap is not None:
                problems.append(f"vramtrace: snapshot kept in {snap} (vramtrace viz {snap})")
        except Exception as exc:   # the gate's own failure is the test's, said plainly
            problems.append(f"vramtrace: could not check this test: {exc!r}")
        finally:
            self.exempt.intersection_update(tr.storages_now())
        if problems:
            _fail(reports, "\n\n".join(problems))
        for rep in reports:
            ihook.pytest_runtest_logreport(report=rep)
        ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
        return True

    # -- leaks -------------------------------------------------------------
    def _leaks(self, item: Any, before: Set[int], gc_before: int, t0: int
               ) -> Tuple[Optional[str], Optional[str]]:
        tr = self.tracker
        now = tr.storages_now()
        survivors = [k for k in now if k not in before and k not in self.exempt]
        if survivors:
            # the gradients a test leaves on a wider-scoped fixture's
            # parameters: the parameters' state, not the test's leak (asked
            # only when something survived: a passing test pays nothing)
            grads = tr.grads_on(self.exempt)
            survivors = [k for k in survivors if k not in grads]
        if not survivors and tr.gc_freed == gc_before:
            return None, None
        # Free the cycles among them, recording what held each tensor, then
        # ask the checker about the rest. Two marks: the survivors then sit a
        # complete step unused, so that `vramtrace check` on the snapshot,
        # with its default grace, flags them too.
        import vramtrace
        tr.collect_cycles = True
        try:
            vramtrace.mark(f"vramtrace: end of {item.nodeid}")
        finally:
            tr.collect_cycles = False
        vramtrace.mark(f"vramtrace: checked {item.nodeid}")
        alive = tr.storages_now()
        addrs = {alive[k][0] for k in survivors if k in alive}
        snap = self._snapshot(item)
        # every survivor counts: what a test leaves behind is the test's leak,
        # however small beside the session's peak (check's floor of minor
        # findings is for a program's results kept on purpose)
        args = ["check", snap, "--json", "--grace", "0s", "--rules", "linger,pinned,cycle",
                "--min-bytes", "0"]
        for pat in self.ignore:
            args += ["--ignore", pat]
        rep = _run_cli(args)
        mine = [f for f in rep["findings"] if _made_by_test(f, addrs, t0)]
        if not mine:
            return None, snap
        return _leak_message(mine, rep.get("groups") or []), snap

    # -- the peak ------------------------------------------------------------
    @staticmethod
    def _cuda_peaks_reset() -> Dict[int, int]:
        """Devices PyTorch's CUDA allocator serves: their allocated bytes now,
        peaks reset."""
        import torch
        got: Dict[int, int] = {}
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for d in range(torch.cuda.device_count()):
                torch.cuda.reset_peak_memory_stats(d)
                got[d] = torch.cuda.memory_allocated(d)
        return got

    def _limit(self, item: Any, limit: int, t0: int, cuda: Dict[int, int],
               snap: Optional[str]) -> Tuple[Optional[str], Optional[str]]:
        if snap is None:
            snap = self._snapshot(item)
        dump = _run_cli(["json", snap, "--events"])
        peaks = _trace_peaks(dump, t0)
        import torch
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            for d in range(torch.cuda.device_count()):
                if d not in peaks:   # vramtrace saw none of its allocations
                    got = torch.cuda.max_memory_allocated(d) - cuda.get(d, 0)
                    peaks[d] = (max(0, got), [])
        over = [(d, p, sites) for d, (p, sites) in sorted(peaks.items()) if p > limit]
        if not over:
            return None, snap
        lines = []
        for d, p, sites in over:
            lines.append(f"vramtrace: peak memory allocated by this test on "
                         f"{_device_name(d)} is {fmt_bytes(p)}, over the limit of "
                         f"{fmt_bytes(limit)}")
            if sites:
                lines.append("  top call sites at the peak:")
                lines += [f"    {fmt_bytes(b):>10}  {n} allocation{'s' if n != 1 else ''}  "
                          f"at {where}" for where, b, n in sites[:5]]
        return "\n".join(lines), snap

    # -- files ---------------------------------------------------------------
    def _snapshot(self, item: Any) -> str:
        import vramtrace
        if self.out:
            os.makedirs(self.out, exist_ok=True)
            base = re.sub(r"[^A-Za-z0-9_.-]+", "_", item.nodeid).strip("_")
            path = os.path.join(self.out, base + ".vtsnap")
        else:
            if self._tmp is None:
                self._tmp = tempfile.mkdtemp(prefix="vramtrace-pytest-")
            self._snaps += 1
            path = os.path.join(self._tmp, f"{self._snaps}.vtsnap")
        vramtrace.snapshot(path)
        return path


def _run_cli(args: List[str]) -> Dict[str, Any]:
    from vramtrace.__main__ import cli_path
    exe = cli_path()
    if exe is None:
        raise RuntimeError("no vramtrace command to run (install the wheel, or set "
                           "VRAMTRACE_CLI to a built vramtrace)")
    r = subprocess.run([exe, *args], capture_output=True, text=True, timeout=300)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"vramtrace {args[0]} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def _made_by_test(f: Dict[str, Any], addrs: Set[int], t0: int) -> bool:
    """A finding on memory the test made: a storage it left alive, or one it
    made that a collection freed during it."""
    if f["rule"] == "cycle":
        gc_at = f.get("collected_by_gc") or {}
        return (f.get("alloc") or {}).get("time_ns", -1) >= t0 and gc_at.get("time_ns", -1) >= t0
    return f.get("freed") is None and int(f["addr"], 16) in addrs


_DETAILED_CAUSES = 5   # causes whose first finding a failure details


def _leak_message(findings: List[Dict[str, Any]], groups: List[Dict[str, Any]]) -> str:
    """The test's findings as `check` reports them: one line a cause (the
    checker's groups: the same holder, the same owner line, chains through
    the same autograd graph) with what holds it, then the first finding of
    each cause in full. A list of every storage, each with its own chain
    through the graph, was 31 entries and 130 lines for one kept loss."""
    total = sum(f["bytes"] for f in findings)
    n = len(findings)
    # group index -> its findings, in the checker's order (the largest
    # first); a finding the JSON puts in no group is a cause of its own
    causes: Dict[Tuple[str, int], List[Dict[str, Any]]] = {}
    for i, f in enumerate(findings):
        g = f.get("group")
        key = ("group", g) if isinstance(g, int) and 0 <= g < len(groups) else ("finding", i)
        causes.setdefault(key, []).append(f)
    head = (f"vramtrace: {n} tensor storage{'s' if n != 1 else ''} made by this test "
            f"outlived it ({fmt_bytes(total)})")
    if len(causes) == n:   # a cause each: the findings are their causes
        return "\n".join([head] + _finding_lines(findings))
    lines = [f"{head}, from {len(causes)} cause{'s' if len(causes) != 1 else ''}:"]
    for (kind, k), fs in causes.items():
        grp = groups[k] if kind == "group" else {}
        owner = grp.get("owner") or (fs[0].get("owner") or {}).get("name")
        more = grp.get("lines", 1) - 1 if grp.get("count") == len(fs) else 0   # the test's alone
        what = (f", tensor '{owner}'" + (f" and those of {more} more line{'s' if more > 1 else ''}"
                                         if more > 0 else "")) if owner else ""
        lines.append(f"  {len(fs)} × [{fs[0]['rule']}] {fmt_bytes(sum(f['bytes'] for f in fs))}"
                     + what)
        path = (grp.get("held_by") or grp.get("path")
                or next((p["text"] for p in fs[0].get("paths") or []), ""))
        lines.append(f"     held by: {path or 'no recorded reference'}")
    firsts = [fs[0] for fs in causes.values()]
    lines += _finding_lines(firsts[:_DETAILED_CAUSES])
    left = n - min(len(firsts), _DETAILED_CAUSES)
    if left:
        lines.append(f"({left} more finding{'s' if left != 1 else ''} of "
                     f"{'these causes' if len(causes) > 1 else 'this cause'}: `vramtrace check` "
                     "on the test's snapshot, which --vramtrace-out DIR keeps, lists them all)")
    return "\n".join(lines)


def _finding_lines(findings: List[Dict[str, Any]]) -> List[str]:
    """Each finding in full, numbered as listed."""
    lines: List[str] = []
    for i, f in enumerate(findings, 1):
        how = ("held by a reference cycle: only the garbage collector freed it"
               if f["rule"] == "cycle" else "still alive after the test")
        lines.append(f"#{i} [{f['rule']}] storage {f['addr']} on {_device_name(f['device'])}, "
                     f"{fmt_bytes(f['bytes'])}: {how}")
        owner = (f.get("owner") or {}).get("name")
        if owner:
            lines.append(f"   tensor '{owner}'")
        lines.append(f"   made at {_where((f.get('alloc') or {}).get('stack'))}")
        paths = f.get("paths") or []
        if not paths:
            lines.append("   held by: no recorded reference")
        for p in paths:
            lines.append(f"   held by: {p['text']}")
    return lines


def _trace_peaks(dump: Dict[str, Any], t0: int
                 ) -> Dict[int, Tuple[int, List[Tuple[str, int, int]]]]:
    """Per device (-1: tracked host storages): the peak of the bytes
    allocated since ``t0`` and still alive, with the call sites of what was
    alive at the peak (user line, bytes, count), largest first."""
    frames = dump.get("frames") or []
    stacks = dump.get("stacks") or []
    live: Dict[int, Dict[str, Tuple[int, int]]] = {}
    cur: Dict[int, int] = {}
    peak: Dict[int, Tuple[int, Dict[str, Tuple[int, int]]]] = {}
    for ev in dump.get("events") or ():
        if ev["time_ns"] < t0:
            continue
        kind = ev["kind"]
        if kind in ("STORAGE_EXTERNAL", "ALLOC"):
            d = ev["device"] if kind == "ALLOC" else -1
            live.setdefault(d, {})[ev["addr"]] = (ev["size"], ev["stack"])
            cur[d] = cur.get(d, 0) + ev["size"]
            if cur[d] > peak.get(d, (-1, {}))[0]:
                peak[d] = (cur[d], dict(live[d]))
        elif kind in ("STORAGE_EXTERNAL_FREE", "FREE_COMPLETED"):
            d = ev["device"] if kind == "FREE_COMPLETED" else -1
            got = live.get(d, {}).pop(ev["addr"], None)
            if got is not None:
                cur[d] -= got[0]
    out: Dict[int, Tuple[int, List[Tuple[str, int, int]]]] = {}
    for d, (p, alive) in peak.items():
        sites: Dict[str, List[int]] = {}
        for size, stack in alive.values():
            s = sites.setdefault(_stack_where(stack, stacks, frames), [0, 0])
            s[0] += size
            s[1] += 1
        out[d] = (p, sorted(((w, b, n) for w, (b, n) in sites.items()), key=lambda x: -x[1]))
    return out


def _stack_where(stack: int, stacks: List[Any], frames: List[Dict[str, Any]]) -> str:
    chain = []
    while stack and stack < len(stacks) and stacks[stack] is not None:
        parent, frame = stacks[stack]
        chain.append(frames[frame])
        stack = parent
    return _where(chain)


def _fail(reports: List[Any], text: str) -> None:
    """The test's call fails with ``text``; where it failed already (or its
    setup did), ``text`` is added to what it says."""
    call = next((r for r in reports if r.when == "call"), None)
    if call is not None and call.passed:
        call.outcome = "failed"
        call.longrepr = text
        return
    target = call if call is not None else reports[-1]
    target.sections.append(("vramtrace", text))
