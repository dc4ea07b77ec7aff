"""`vramtrace replay` on programs recorded on the simulated device.

    test_replay_cli.py VRAMTRACE FRAG_PROG DEMO_WORKLOAD PROG_STREAMS STREAMS_PROG TEST_NAME

Each program runs under `vramtrace run` (the sim's libraries come from
LD_LIBRARY_PATH, its capacity from SIMCUDA_MEM, both set per run here); the
replay of its snapshot is compared with what the recording says and with
what the program does live.
"""
import json
import os
import subprocess
import sys
import tempfile

VT, FRAG, DEMO, STREAMS, STREAMS_PROG = sys.argv[1:6]
MIB = 1 << 20
# removed when the script exits, failed or not (its assertions carry what
# the runs printed): a suite run leaves nothing in the temporary directory
_scratch = tempfile.TemporaryDirectory(prefix="vt-replay-")
TMP = _scratch.name


def record(name, argv, mem, conf=None, status=0):
    snap = os.path.join(TMP, name + ".vtsnap")
    env = dict(os.environ, SIMCUDA_MEM=mem)
    cmd = [VT, "run", "-o", snap] + (["--conf", conf] if conf else []) + ["--"] + argv
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == status, (cmd, p.returncode, p.stdout, p.stderr)
    return snap, p.stdout


def replay(*args, status=0):
    p = subprocess.run([VT, "replay", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == status, (args, p.returncode, p.stdout, p.stderr)
    return p


def replay_json(*args):
    return json.loads(replay(*args, "--json").stdout)


def true_peak_reserved(snap):
    """The allocator's own peak as the snapshot records it (vt_get_stats)."""
    dev = json.loads(subprocess.run([VT, "json", snap], capture_output=True, text=True,
                                    check=True).stdout)["devices"][0]
    return dev["true_peak_reserved"] if dev.get("true_peak_reserved") is not None \
        else dev["peak_reserved"]


def check_reproduces(snap):
    r = replay_json(snap)
    d = r["devices"][0]
    assert r["segments_identical"], r
    assert d["segment_allocs"] == d["recorded"]["segment_allocs"] > 0, d
    assert d["peak_reserved"] == d["recorded"]["peak_reserved"], d
    assert d["peak_reserved"] == true_peak_reserved(snap), (d, true_peak_reserved(snap))
    assert d["peak_allocated"] == d["recorded"]["peak_allocated"], d
    assert r["oom"] is None and r["skipped_frees"] == 0, r
    return r


def test_replay_with_recorded_settings_reproduces_segments_and_peak_reserved():
    # one stream, plain cudaMalloc/cudaFree (the demo's training loop)
    snap, _ = record("demo", [DEMO], "2G")
    check_reproduces(snap)
    # recorded under other settings: the replay takes them from the snapshot
    snap, _ = record("demo_conf", [DEMO], "2G",
                     conf="max_split_size_mb:8,roundup_power2_divisions:4")
    r = check_reproduces(snap)
    assert "max_split_size_mb:8,roundup_power2_divisions:4" in r["settings"], r["settings"]
    # many streams and threads: stream-ordered frees, frees on other streams,
    # per-thread default streams, cudaMalloc beside cudaMallocAsync on stream 0
    for seed in ("1", "2", "3"):
        snap, _ = record("churn" + seed, [STREAMS, "churn", seed], "4G")
        r = check_reproduces(snap)
        assert r["devices"][0]["fence_events"] > 0, r   # pending frees were fenced
    snap, _ = record("shapes", [STREAMS, "shapes"], "4G")
    check_reproduces(snap)


def test_fragmentation_oom_at_capacity_is_found_and_a_swept_setting_fits_live():
    cap = "1000M"
    # the program itself: plain cudaMalloc fits in 1000 MiB ...
    p = subprocess.run([FRAG], env=dict(os.environ, SIMCUDA_MEM=cap), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "frag: ok" in p.stdout, (p.returncode, p.stdout, p.stderr)
    # ... recorded on a bigger device with the defaults
    snap, _ = record("frag", [FRAG], "4G")
    r = replay_json(snap)
    assert r["oom"] is None and r["segments_identical"], r
    # at 1000 MiB the replay runs out of memory in epoch 3, at the second 300 MiB
    r = replay_json(snap, "--capacity", cap)
    oom = r["oom"]
    assert oom and oom["size"] == 300 * MIB, r
    assert oom["live_bytes"] == 3 * 60 * MIB + 300 * MIB, oom
    assert "frag_prog.c" in (oom["call_site"] or ""), oom   # the call site, symbolized
    text = replay(snap, "--capacity", cap).stdout
    assert "OUT OF MEMORY at event %d" % oom["event_index"] in text, text
    # and so does the program, live, at that capacity with the defaults
    _, out = record("frag_live_default", [FRAG], cap, status=3)
    assert "out of memory at epoch 3" in out, out
    # the sweep finds settings that fit, ranked first
    sweep = json.loads(replay(snap, "--capacity", cap, "--sweep", "--json").stdout)
    runs = sweep["runs"]
    assert sweep["capacity"] == 1000 * MIB
    assert not [x for x in runs if x["label"].startswith("as recorded")][0]["fits"]
    fits = [x for x in runs if x.get("fits")]
    assert fits and runs[0]["fits"], runs[:3]
    assert [x["rank"] for x in runs] == list(range(1, len(runs) + 1))
    peaks = [x["devices"][0]["peak_reserved"] for x in fits]
    assert peaks == sorted(peaks), peaks
    best = runs[0]["label"]
    # run live with the best one at 1000 MiB: no out-of-memory
    _, out = record("frag_live_best", [FRAG], cap, conf=best)
    assert "frag: ok" in out, (best, out)
    # the text form says which fit
    text = replay(snap, "--capacity", cap, "--sweep").stdout
    assert "%d of %d settings fit in 1000 MiB; the recorded settings do not" % (
        len(fits), len(runs)) in text, text
    # and ends with the one to use, as a user writes it (defaults left out)
    short = ",".join(kv for kv in best.split(",") if kv not in (
        "max_split_size_mb:unlimited", "roundup_power2_divisions:0",
        "garbage_collection_threshold:0", "expandable_segments:0"))
    assert text.splitlines()[-1].startswith(
        f"recommendation: VRAMTRACE_CONF={short} fits, peaking at "), text[-600:]
    assert text.splitlines()[-1].endswith(" of 1000 MiB; the recorded settings ran out"), text


def test_pinned_fragmentation_fits_with_expandable_segments_in_replay_and_live():
    cap = "200M"
    pins = [FRAG, "1", "pins"]
    # plain cudaMalloc takes whole 2 MiB pages (a 5 MiB block takes 6, as on
    # an NVIDIA H200: tests/sim/README.md, "Footprint"): the forty 5 MiB
    # blocks fit in 240 MiB, not in 200, where expandable segments fit
    p = subprocess.run(pins, env=dict(os.environ, SIMCUDA_MEM="240M"), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0 and "frag: ok" in p.stdout, (p.returncode, p.stdout, p.stderr)
    snap, _ = record("pins", pins, "1G")
    # fixed segments run out of memory at 200 MiB, in the replay and live
    r = replay_json(snap, "--capacity", cap)
    assert r["oom"] and r["oom"]["size"] == 12 * MIB and not r["expandable_segments"], r
    _, out = record("pins_live_default", pins, cap, status=3)
    assert "out of memory at the 12 MiB blocks" in out, out
    # expandable segments fit, in the replay and live
    r = replay_json(snap, "--capacity", cap, "--conf", "expandable_segments:1")
    assert r["oom"] is None and r["expandable_segments"], r
    assert "expandable_segments:1" in r["settings"], r["settings"]
    assert r["devices"][0]["peak_reserved"] <= 200 * MIB, r
    live, out = record("pins_live_expandable", pins, cap, conf="expandable_segments:1")
    assert "frag: ok" in out, out
    # a recording made with them replays to the same segment maps and peak
    r = check_reproduces(live)
    assert "expandable_segments:1" in r["settings"], r["settings"]
    # the sweep tries them: at 200 MiB only settings with them fit
    sweep = json.loads(replay(snap, "--capacity", cap, "--sweep", "--json").stdout)
    runs = sweep["runs"]
    fits = [x["label"] for x in runs if x.get("fits")]
    assert fits and all("expandable_segments:1" in x for x in fits), fits
    assert [x for x in runs if "expandable_segments:0" in x["label"]], runs[:3]
    # where nothing fits, the sweep says so instead of naming a setting
    text = replay(snap, "--capacity", "60M", "--sweep").stdout
    assert text.splitlines()[-1].startswith(
        "recommendation: none: no setting tried fits in 60 MiB; the least reserved when it "
        "ran out was "), text[-600:]
    # on the device it was recorded on (1 GiB): the lowest that fits, and by how much
    text = replay(snap, "--sweep").stdout
    assert text.splitlines()[-1] == (
        "recommendation: VRAMTRACE_CONF=expandable_segments:1 peaks at 200 MiB reserved, "
        "108 MiB (35.1%) less than the recorded settings' 308 MiB"), text[-600:]


def test_fragmentation_fits_with_expandable_segments_live_and_in_replay():
    # frag_prog: before failing, the OOM chain unmaps the whole free chunks
    # between the blocks that stay live and at the end of the range (as
    # PyTorch's release of cached blocks does), and epoch 3 maps its 300 MiB
    # at the end: it fits 1000 MiB live, and the replay agrees, both of the
    # recording made with them and of one made without them
    snap, out = record("frag_live_expandable", [FRAG], "1000M", conf="expandable_segments:1")
    assert "frag: ok" in out, out
    # recorded with the best setting the sweep knows: it says to keep it
    text = replay(snap, "--sweep").stdout
    assert text.splitlines()[-1] == ("recommendation: keep the recorded settings: no setting "
                                     "tried peaks lower (800 MiB reserved)"), text[-600:]
    dev = json.loads(subprocess.run([VT, "json", snap], capture_output=True, text=True,
                                    check=True).stdout)["devices"][0]
    assert dev["peak_reserved"] == dev["true_peak_reserved"] == 800 * MIB, dev
    r = check_reproduces(snap)
    d = r["devices"][0]
    assert d["segment_frees"] == d["recorded"]["segment_frees"] > 0, d   # the unmappings
    fixed, _ = record("frag_fixed", [FRAG], "4G")
    r = replay_json(fixed, "--capacity", "1000M", "--conf", "expandable_segments:1")
    assert r["oom"] is None and r["expandable_segments"], r
    assert r["devices"][0]["peak_reserved"] == 800 * MIB, r


def test_recorded_oom_is_replayed_as_the_allocation_it_refused():
    snap, out = record("frag_oom", [FRAG], "1000M", status=3)
    r = replay_json(snap)
    assert r["recorded_ooms"] == 1 and r["oom"] is not None, r
    assert r["segments_identical"], r
    # with max_split_size_mb:100 the refused request is served
    r = replay_json(snap, "--conf", "max_split_size_mb:100")
    assert r["oom"] is None and r["recorded_ooms_served"] == 1, r


def test_destroyed_streams_and_an_emptied_cache_give_back_the_same_segments_in_replay():
    snap, out = record("streams", [STREAMS_PROG], "1G")
    assert "streams: ok" in out, out
    counts = json.loads(subprocess.run([VT, "json", snap], capture_output=True, text=True,
                                       check=True).stdout)["counts"]
    assert counts.get("STREAM_DESTROY") == 3 and counts.get("EMPTY_CACHE") == 1, counts
    r = check_reproduces(snap)
    d = r["devices"][0]
    # every segment the program's cache gave back, the replay gives back too:
    # at the destructions (stream 1's 8 MiB one at its block's free), at the
    # emptying, and stream 2's last one at its destruction
    assert d["segment_frees"] == d["recorded"]["segment_frees"] == 8, d
    assert d["segment_allocs"] == d["recorded"]["segment_allocs"] == 8, d
    # 3 x (big + 16 MiB) = 198 MiB; the 100 MiB block comes once 112 MiB are
    # back (a replay that kept the destroyed streams' segments: 298 MiB)
    assert d["peak_reserved"] == 198 * MIB, d


def test_replay_refuses_bad_input_with_one_line():
    snap, _ = record("bad", [DEMO], "2G")
    cases = [
        ([], "usage: vramtrace replay"),
        ([os.path.join(TMP, "missing.vtsnap")], "cannot open"),
        ([snap, "--capacity", "40Q"], "bad --capacity '40Q'"),
        ([snap, "--capacity"], "--capacity needs a value"),
        ([snap, "--conf", "max_split_size_mb:0"], "bad --conf 'max_split_size_mb:0'"),
        ([snap, "--conf", "nope:1"], "unknown VRAMTRACE_CONF key 'nope'"),
        ([snap, "--frobnicate"], "unknown option '--frobnicate'"),
        ([snap, snap], "one snapshot at a time"),
        ([snap, "--jobs", "0", "--sweep"], "bad --jobs '0'"),
        ([snap, "--rules", "tensorflow"], "bad --rules 'tensorflow'"),
        ([snap, "--rules", "pytorch", "--conf", "nope:1"],
         "unknown key 'nope' for PyTorch's allocator"),
        ([snap, "--rules", "pytorch", "--conf", "roundup_power2_divisions:3"],
         "bad value '3' for roundup_power2_divisions"),
    ]
    for args, msg in cases:
        p = replay(*args, status=2)   # the commands' convention: 2 for bad input
        assert msg in p.stderr, (args, p.stderr)
        assert p.stdout == "", p.stdout
        if args:
            assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    not_snap = os.path.join(TMP, "not.vtsnap")
    with open(not_snap, "w") as f:
        f.write("hello")
    p = replay(not_snap, status=2)
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    h = replay("--help")
    assert "--capacity SIZE" in h.stdout and "--sweep" in h.stdout and "--rules" in h.stdout
    # a recording of vramtrace's own allocator keeps its rules unless asked
    assert replay_json(snap)["rules"] == "vramtrace"
    assert replay_json(snap, "--rules", "pytorch")["rules"] == "pytorch"
    assert "rules: vramtrace" in replay(snap).stdout
    for cap, want in (("40G", 40 << 30), ("40GiB", 40 << 30), ("40GB", 40 * 10**9),
                      ("81920M", 80 << 30), ("1.5T", 3 << 39)):
        assert replay_json(snap, "--capacity", cap)["devices"][0]["capacity"] == want, cap
    assert replay_json(snap, "--capacity", "unlimited")["devices"][0]["capacity"] is None


if __name__ == "__main__":
    globals()["test_" + sys.argv[6]]()
    print("ok")
