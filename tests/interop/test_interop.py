#!/usr/bin/env python3
"""PyTorch snapshots in, PyTorch pickles and Perfetto JSON out.

usage: test_interop.py VRAMTRACE_EXE TEST_NAME

Snapshots are generated here with Python's pickle module from dicts shaped
exactly like PyTorch 2.x's (torch_snapshot.py), with the answers computed by
the generator's own model. Tests that need real PyTorch use the Python named
by $VT_TORCH_PYTHON and are skipped (exit 77) with the reason when it is
unset or has no torch.
"""
import json
import os
import pickle
import pickletools
import subprocess
import sys
import tempfile

import torch_snapshot as ts
from interop_script import run_named_test, vramtrace_runner

exe = os.path.abspath(sys.argv[1])
name = sys.argv[2]
# removed when the script exits, failed or not (its assertions carry what
# the runs printed): a suite run leaves nothing in the temporary directory
_scratch = tempfile.TemporaryDirectory(prefix="vt-interop-")
tmp = _scratch.name
SKIP = 77


vt = vramtrace_runner(exe)


def path(n):
    return os.path.join(tmp, n)


def snap_json(f, events=False):
    return json.loads(vt("json", f, *(["--events"] if events else [])).stdout)


def write(sim_or_obj, fname, protocol=4):
    obj = sim_or_obj.snapshot() if isinstance(sim_or_obj, ts.Sim) else sim_or_obj
    ts.dump(obj, path(fname), protocol)
    return path(fname)


def alive_of(j):
    return sorted((int(l["addr"], 16), l["size"]) for l in j["lifetimes"]
                  if "alive" in l["flags"])


def test_import_finds_the_snapshots_own_peaks_and_live_blocks():
    sim = ts.training_run()
    ans = sim.answers()
    for proto in (2, 3, 4, 5):
        f = write(sim, f"s{proto}.pickle", proto)
        j = snap_json(f)
        (d,) = j["devices"]
        got = (d["peak_allocated"], d["peak_reserved"], d["final_allocated"], d["final_reserved"])
        want = (ans["peak_allocated"], ans["peak_reserved"], ans["final_allocated"],
                ans["final_reserved"])
        assert got == want, f"protocol {proto}: {got} != {want}"
        assert alive_of(j) == ans["alive"], f"protocol {proto}: {alive_of(j)} != {ans['alive']}"


def test_every_reading_command_reads_a_pickle_directly():
    f = write(ts.training_run(), "s.pickle")
    out = vt("summary", f).stdout.decode()
    assert "forward_big train.py:21" in out, out
    leaks = vt("leaks", f).stdout.decode()
    # steps 0, 2, 4 leak their 700-byte activation; weights and bias stay
    assert "in 3 allocations from" in leaks and "forward_small train.py:22" in leaks, leaks
    p = vt("check", f, check=False)
    assert p.returncode in (0, 1) and p.stdout, p.stderr
    vt("viz", f, "-o", path("s.html"), "-q")
    assert os.path.getsize(path("s.html")) > 1000
    assert snap_json(f)["devices"]


def test_import_writes_a_vtsnap_that_reads_the_same_as_the_pickle():
    f = write(ts.training_run(), "s.pickle")
    p = vt("import", f)
    assert p.stdout.decode().strip().endswith(path("s.vtsnap")), p.stdout
    a, b = snap_json(f, True), snap_json(path("s.vtsnap"), True)
    for k in ("devices", "lifetimes", "segments", "marks", "events", "frames", "stacks"):
        assert a.get(k) == b.get(k), k
    p = vt("import", f, "-o", path("other.vtsnap"))
    assert os.path.exists(path("other.vtsnap"))


def test_pickle_reports_are_its_whole_imports():
    # A reading command converts a pickle into a temporary .vtsnap in bounded
    # memory; `import` imports it whole. The reports must not tell them
    # apart (but for the file's name), on every shape the importer's tests
    # make (several devices whose times interleave, frames shared through
    # the memo, OOM entries, segment state, the shapes that fall back) and
    # on a pickle PyTorch's own recorder wrote.
    here = os.path.dirname(os.path.abspath(__file__))
    d = path("shapes")
    os.mkdir(d)
    subprocess.run([sys.executable, os.path.join(here, "gen_import_pickles.py"), d], check=True)
    files = sorted(os.path.join(d, f) for f in os.listdir(d) if f.endswith(".pickle"))
    real = path("pytorch_2_14_mlp.pickle")
    with open(os.path.join(here, "data", "pytorch_2_14_mlp.pickle"), "rb") as src:
        with open(real, "wb") as dst:
            dst.write(src.read())
    files.append(real)
    assert len(files) > 20, files
    for f in files:
        snap = f[:-len(".pickle")] + ".vtsnap"
        vt("import", f, "-o", snap)
        for cmd in (["summary"], ["leaks"], ["check"], ["json", "--events"]):
            a = vt(*cmd, f, check=False)
            b = vt(*cmd, snap, check=False)
            same = [x.replace(snap.encode(), f.encode()) for x in (b.stdout, b.stderr)]
            assert (a.returncode, a.stdout, a.stderr) == (b.returncode, *same), \
                (f, cmd, a.returncode, b.returncode, a.stderr, b.stderr)
            assert a.stdout, (f, cmd)


def test_annotations_become_marks_and_user_metadata_is_kept():
    f = write(ts.training_run(steps=3), "s.pickle")
    j = snap_json(f, True)
    labels = [m["label"] for m in j["marks"]]
    assert labels == [f"step {i} {st}" for i in range(3) for st in ("START", "END")], labels
    text = json.dumps(j["events"])
    for step in range(3):
        assert f"step={step}" in text, step
    settings = j["meta"]["config"]
    assert "max_split_size=-1" in settings and "expandable_segments=False" in settings, settings


def test_oom_entry_keeps_request_and_device_free():
    sim = ts.training_run(steps=1)
    sim.oom(80 << 30, 123456789)
    j = snap_json(write(sim, "s.pickle"), True)
    (oom,) = [e for e in j["events"] if e["kind"] == "OOM"]
    assert oom["req_size"] == 80 << 30 and oom["aux"] == 123456789, oom


def test_a_cuda_graphs_pool_id_is_read_and_written_back():
    """PyTorch's trace entries carry the pool a segment serves ("pool_id",
    (capture id, 0) for a CUDA graph's; (0, 0) the default pool). A pickle
    whose graph pool keeps a 32 MiB segment holding its output and a wholly
    free one, then asks more than the rest of the device: `oom` on it counts
    the pool apart from the cache and verifies deleting the graph (before,
    the import dropped pool_id: the free segment read as the cache's and the
    replay did not run out there). Exported back, the segments keep their
    pool_id and segment_pool_id, and the export reads as the pickle did;
    without the trace's pool_id the segments' segment_pool_id says it."""
    MIB = 1 << 20
    sim = ts.Sim()
    sim.alloc(32 * MIB, "make_input", 3)
    captured = []
    for _ in range(2):
        captured.append(sim.alloc(32 * MIB, "capture_step", 7))
        seg = next(e for e in reversed(sim.trace) if e["action"] == "segment_alloc")
        seg["pool_id"] = (1, 0)
        seg["stream"] = 0x55aa
    sim.free(captured[1])
    sim.oom(176 * MIB, 160 * MIB)
    orig = sim.snapshot()
    for g in orig["segments"]:
        if g["address"] != min(s["address"] for s in orig["segments"]):
            g["segment_pool_id"] = (1, 0)
    f = write(orig, "graph.pickle")
    j = json.loads(vt("oom", f, "--json").stdout)
    pools = j["device"]["graph_pools"]
    assert pools["reserved"] == 64 * MIB and pools["free_segments"] == 32 * MIB, pools
    assert j["device"]["cache_free"] == 0 and j["replay"]["reproduced"], j
    assert [x["kind"] for x in j["fixes"] if x["verified"]][0] == "delete_graphs", j["fixes"]
    vt("export", "--format", "torch", f, "-o", path("graph_out.pickle"))
    out = pickle.load(open(path("graph_out.pickle"), "rb"))
    ids = [e.get("pool_id", (0, 0)) for e in out["device_traces"][0] if e["action"] == "segment_alloc"]
    assert ids == [(0, 0), (1, 0), (1, 0)], ids
    assert [g["segment_pool_id"] for g in out["segments"]] == \
        [g["segment_pool_id"] for g in orig["segments"]], out["segments"]
    assert json.loads(vt("oom", path("graph_out.pickle"), "--json").stdout)["device"] == j["device"]
    # a history that lost the capture's entries (max_entries): the segments'
    # segment_pool_id still says whose they are
    for e in orig["device_traces"][0]:
        e.pop("pool_id", None)
    f = write(orig, "graph_state.pickle")
    assert json.loads(vt("oom", f, "--json").stdout)["device"]["graph_pools"] == pools


def test_legacy_bare_list_of_segments_with_history_is_read():
    seg = {"device": 0, "address": 0x1000000, "total_size": 2 << 20, "allocated_size": 4096,
           "active_size": 4096, "stream": 0, "segment_type": "small",
           "blocks": [
               {"size": 4096, "state": "active_allocated",
                "history": [{"addr": 0x1000000, "real_size": 4000,
                             "frames": ts.frames("old_site", 12)}]},
               {"size": (2 << 20) - 4096, "state": "inactive", "history": []},
           ]}
    f = write([seg], "legacy.pickle", 2)
    j = snap_json(f)
    assert j["devices"][0]["final_allocated"] == 4096 and j["devices"][0]["final_reserved"] == 2 << 20
    (l,) = [l for l in j["lifetimes"] if "alive" in l["flags"]]
    assert l["addr"] == "0x1000000" and l["req_size"] == 4000, l
    assert "old_site train.py:12" in vt("leaks", f).stdout.decode()


def test_trace_window_that_starts_mid_run_is_reconciled():
    # max_entries dropped the oldest entries: the weights' allocs and the
    # first activation's alloc are gone, its free and the state remain
    sim = ts.training_run(steps=2)
    snap = sim.snapshot()
    tr = snap["device_traces"][0]
    cut = next(i for i, e in enumerate(tr) if e["action"] == "alloc"
               and e["frames"][0]["name"] == "forward") + 1
    first_act = tr[cut - 1]["addr"]
    snap["device_traces"][0] = tr[cut:]
    j = snap_json(write(snap, "window.pickle"))
    (d,) = j["devices"]
    ans = sim.answers()
    assert d["final_allocated"] == ans["final_allocated"], d
    assert alive_of(j) == ans["alive"]
    before = {l["addr"] for l in j["lifetimes"] if "before_window" in l["flags"]}
    assert hex(first_act) in before, (hex(first_act), before)
    assert d["initial_allocated"] > 0 and d["initial_reserved"] > 0, d


def offset_of(data, opname):
    for op, _arg, pos in pickletools.genops(data):
        if op.name == opname:
            return pos
    raise AssertionError(opname)


class Evil:
    def __reduce__(self):
        return (os.system, ("touch " + path("pwned"),))


def test_pickle_that_names_a_global_is_refused_and_never_run():
    cases = []
    for proto, op in ((2, "GLOBAL"), (4, "STACK_GLOBAL"), (5, "STACK_GLOBAL")):
        data = pickle.dumps({"segments": [], "device_traces": [[Evil()]]}, protocol=proto)
        cases.append((data, op, offset_of(data, op)))
    cases.append((b"\x80\x02N)R.", "REDUCE", 4))           # REDUCE on plain values
    cases.append((b"\x80\x02}N)b.", "BUILD", 5))
    cases.append((b"\x80\x04(N)\x81.", "NEWOBJ", 5))
    cases.append((b"\x80\x02(i\n.", "INST", 3))
    cases.append((b"\x80\x02(o.", "OBJ", 3))
    cases.append((b"\x80\x02K\x01Q.", "BINPERSID", 4))
    cases.append((b"\x80\x02\x82\x01.", "EXT1", 2))
    for i, (data, op, off) in enumerate(cases):
        f = path(f"evil{i}.pickle")
        with open(f, "wb") as fh:
            fh.write(data)
        for cmd in (["summary", f], ["import", f, "-o", path("e.vtsnap")]):
            p = vt(*cmd, check=False)
            err = p.stderr.decode()
            assert p.returncode == 2, (op, p.returncode, err)
            assert err.count("\n") == 1, err
            assert f"pickle opcode {op} at byte offset {off} names a global" in err, (op, err)
            assert "refusing to run code" in err, err
    assert not os.path.exists(path("pwned"))
    assert not os.path.exists(path("e.vtsnap"))


def test_truncated_or_corrupt_pickles_fail_with_one_line():
    data = pickle.dumps(ts.training_run(steps=1).snapshot(), protocol=4)
    f = path("cut.pickle")
    for n in list(range(2, 200)) + list(range(200, len(data) - 1, 97)):
        with open(f, "wb") as fh:
            fh.write(data[:n])
        p = vt("summary", f, check=False)
        err = p.stderr.decode()
        assert p.returncode == 2 and err.count("\n") == 1 and "cut.pickle" in err, (n, p.returncode, err)
    # flipped bytes: never a crash, a clean status either way
    for i in range(2, len(data), 13):
        bad = bytearray(data)
        bad[i] ^= 0x5A
        with open(f, "wb") as fh:
            fh.write(bad)
        p = vt("summary", f, check=False)
        assert p.returncode in (0, 2), (i, p.returncode, p.stderr)
        if p.returncode:
            assert p.stderr.decode().count("\n") == 1, p.stderr


def test_self_containing_list_does_not_hang():
    lst = []
    lst.append(lst)
    f = write({"segments": lst, "device_traces": [lst]}, "loop.pickle")
    p = vt("summary", f, check=False)
    assert p.returncode == 2 and b"segment 0 is not a dict" in p.stderr, p.stderr
    d = {}
    d["segments"] = []
    d["device_traces"] = [[{"action": "alloc", "addr": 4096, "size": 10, "frames": [d],
                            "time_us": 1}]]
    f = write(d, "loop2.pickle")
    assert "allocs 1" in vt("summary", f).stdout.decode()


def test_pickle_that_is_not_a_snapshot_is_refused():
    f = write({"hello": 1}, "other.pickle")
    p = vt("summary", f, check=False)
    assert p.returncode == 2 and b"not a PyTorch memory snapshot" in p.stderr, p.stderr
    # an empty tuple built before anything was pushed (found by the fuzzer under UBSan)
    f = path("empty_tuple.pickle")
    with open(f, "wb") as fh:
        fh.write(b"\x80\x02(t.")
    p = vt("summary", f, check=False)
    assert p.returncode == 2 and b"top level is neither a dict nor a list" in p.stderr, p.stderr


def test_one_large_dict_referenced_many_times_imports_in_linear_time():
    # a 550 KB pickle: 100,000 segments that are memo references to one dict
    # of 30,000 keys (Python loads it in milliseconds; key scans took 20 s)
    seg = {f"k{i}": i for i in range(30000)}
    seg.update({"device": 0, "address": 0x10000, "total_size": 2 << 20, "stream": 0,
                "segment_type": "large", "allocated_size": 0, "active_size": 0,
                "blocks": []})
    f = write({"segments": [seg] * 100000, "device_traces": [[]]}, "shared.pickle")
    p = subprocess.run([exe, "summary", f], capture_output=True, timeout=10)
    assert p.returncode == 0 and b"snapshot " in p.stdout, p.stderr


def test_export_torch_round_trips_through_import():
    sim = ts.training_run()
    f = write(sim, "s.pickle")
    vt("export", "--format", "torch", f, "-o", path("out.pickle"))
    with open(path("out.pickle"), "rb") as fh:
        data = fh.read()
    assert data[:2] == b"\x80\x04"
    ops = {op.name for op, _a, _p in pickletools.genops(data)}
    assert not ops & {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "NEWOBJ"}, ops
    out = pickle.loads(data)
    orig = sim.snapshot()
    # the same segments and blocks, and the same trace (sizes are requests)
    strip = lambda segs: [{k: v for k, v in s.items()} for s in segs]
    assert strip(out["segments"]) == strip(orig["segments"])
    key = lambda e: (e["action"], e["addr"], e["size"], e["time_us"], e.get("frames"))
    assert [key(e) for e in out["device_traces"][0]] == [key(e) for e in orig["device_traces"][0]]
    assert out["external_annotations"] == orig["external_annotations"]
    a, b = snap_json(f), snap_json(path("out.pickle"))
    assert a["devices"] == b["devices"]
    # a .vtsnap exports too
    vt("import", f, "-o", path("s.vtsnap"))
    vt("export", "--format=torch", path("s.vtsnap"), "-o", path("out2.pickle"))
    assert pickle.load(open(path("out2.pickle"), "rb")) == out


def torch_python():
    py = os.environ.get("VT_TORCH_PYTHON", "")
    if not py:
        print("SKIP: VT_TORCH_PYTHON is not set (a Python with torch; meson -Dtorch_python=...)")
        sys.exit(SKIP)
    p = subprocess.run([py, "-c", "import torch.cuda._memory_viz"], capture_output=True)
    if p.returncode:
        print(f"SKIP: {py} cannot import torch.cuda._memory_viz: {p.stderr.decode()[-300:]}")
        sys.exit(SKIP)
    return py


VIZ_SCRIPT = r"""
import pickle, sys, io, contextlib
from torch.cuda import _memory_viz as mv
def run(path):
    data = pickle.load(open(path, "rb"))
    out = {"stats": mv.segsum(data), "trace": mv.trace(data),
           "segments": mv.segments(data, format_flamegraph=lambda s: s),
           "memory": mv.memory(data, format_flamegraph=lambda s: s)}
    return out
a, b = run(sys.argv[1]), run(sys.argv[2])
for k in a:
    if a[k] != b[k]:
        print("DIFF", k); print(a[k][:2000]); print("----"); print(b[k][:2000]); sys.exit(1)
print("same", {k: len(v) for k, v in a.items()})
"""


def test_export_torch_is_read_by_pytorchs_own_memory_viz():
    py = torch_python()
    sim = ts.training_run()
    f = write(sim, "s.pickle")
    vt("import", f, "-o", path("s.vtsnap"))
    vt("export", "--format", "torch", path("s.vtsnap"), "-o", path("out.pickle"))
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    # the command line a user runs
    for cmd in ("stats", "trace"):
        p = subprocess.run([py, "-m", "torch.cuda._memory_viz", cmd, path("out.pickle")],
                           capture_output=True, env=env, timeout=120)
        assert p.returncode == 0 and p.stdout, (cmd, p.stderr.decode()[-2000:])
    # and the same text as from the original snapshot, for every text view
    p = subprocess.run([py, "-c", VIZ_SCRIPT, f, path("out.pickle")], capture_output=True,
                       env=env, timeout=120)
    assert p.returncode == 0, p.stdout.decode()[-4000:] + p.stderr.decode()[-2000:]


def test_export_perfetto_counters_equal_the_timeline():
    # and one slice per allocation, instants for marks, OOMs and findings
    sim = ts.training_run()
    sim.oom(80 << 30, 1 << 30)
    f = write(sim, "s.pickle")
    vt("export", "--format", "perfetto", f, "-o", path("t.json"))
    with open(path("t.json")) as fh:
        t = json.load(fh)
    ev = t["traceEvents"]
    j = snap_json(f)
    (d,) = j["devices"]
    t0 = d["curve"][0][1]
    counters = [(round(e["ts"], 3), e["args"]["allocated"], e["args"]["reserved"])
                for e in ev if e["ph"] == "C" and e["pid"] == 2]
    curve = [(round((c[1] - t0) / 1000, 3), c[2], c[3]) for c in d["curve"]]
    assert counters == curve, (counters[:5], curve[:5])
    begins = [e for e in ev if e["ph"] == "b"]
    ends = [e for e in ev if e["ph"] == "e"]
    assert len(begins) == len(ends) == len(j["lifetimes"])
    assert {e["id"] for e in begins} == {e["id"] for e in ends}
    big = [e for e in begins if e["args"]["size"] == 6 << 20]
    assert big and big[0]["args"]["frames"][0] == "forward_big train.py:21", big[:1]
    assert big[0]["args"]["stream"] == "0x0"
    marks = [e["name"] for e in ev if e["ph"] == "i" and e["cat"] == "mark"]
    assert marks == [m["label"] for m in j["marks"]]
    ooms = [e for e in ev if e["ph"] == "i" and e["cat"] == "oom"]
    assert len(ooms) == 1 and ooms[0]["args"]["device_free"] == 1 << 30
    # the checker's findings: the leaked activations of steps 0, 2, 4
    findings = [e for e in ev if e["ph"] == "i" and e["cat"] == "finding"]
    leak = [f for f in findings if f["args"]["frames"][:1] == ["forward_small train.py:22"]]
    assert len(leak) == 1 and leak[0]["args"]["bytes"] == 3 * 700, findings
    assert leak[0]["args"]["rule"] == "never-freed" and leak[0]["args"]["allocations"] == 3
    # 2,100 B in a trace whose peak is over 6 MiB: under the checker's floor, marked so
    assert leak[0]["args"]["minor"] is True and leak[0]["name"] == "minor never-freed: 2.05 KiB"
    names = {(e["name"], e["args"]["name"]) for e in ev if e["ph"] == "M"}
    assert ("process_name", "GPU 0") in names and ("thread_name", "default stream") in names
    for e in ev:
        assert e["ph"] in "MCbei" and isinstance(e["pid"], int), e


def test_export_refuses_bad_arguments_with_one_line():
    f = write(ts.training_run(steps=1), "s.pickle")
    for args, text in ((["export", f, "-o", path("x")], "missing --format"),
                       (["export", "--format", "svg", f, "-o", path("x")], "unknown format"),
                       (["export", "--format", "torch", f], "missing -o OUT"),
                       (["export", "--format", "torch", path("nope"), "-o", path("x")], "nope")):
        p = vt(*args, check=False)
        assert p.returncode == 2 and text in p.stderr.decode(), (args, p.stderr)
        assert p.stderr.decode().count("\n") == 1, p.stderr
    assert not os.path.exists(path("x"))
    for cmd in ("import", "export"):
        p = vt(cmd, "--help")
        assert p.returncode == 0 and f"usage: vramtrace {cmd}" in p.stdout.decode()


run_named_test(globals(), name)
