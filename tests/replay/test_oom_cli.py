"""`vramtrace oom` (and the short form `vramtrace run` prints) on a native
program recorded on the simulated device.

    test_oom_cli.py VRAMTRACE FRAG_PROG TEST_NAME

frag_prog "pins" (tests/replay/frag_prog.c) runs out of memory at 200 MiB
with fixed segments and fits with expandable segments: the report names
that fix, verified by replay, and the program run again with it fits.
"""
import json
import os
import subprocess
import sys
import tempfile

VT, FRAG = sys.argv[1:3]
MIB = 1 << 20
# removed when the script exits, failed or not (its assertions carry what
# the runs printed): a suite run leaves nothing in the temporary directory
_scratch = tempfile.TemporaryDirectory(prefix="vt-oom-")
TMP = _scratch.name
PINS = [FRAG, "1", "pins"]


def record(name, mem, conf=None, status=0, prog=PINS):
    snap = os.path.join(TMP, name + ".vtsnap")
    cmd = [VT, "run", "-o", snap] + (["--conf", conf] if conf else []) + ["--"] + prog
    p = subprocess.run(cmd, env=dict(os.environ, SIMCUDA_MEM=mem), capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == status, (cmd, p.returncode, p.stdout, p.stderr)
    return snap, p


def oom(*args, status=0):
    p = subprocess.run([VT, "oom", *args], capture_output=True, text=True, timeout=120)
    assert p.returncode == status, (args, p.returncode, p.stdout, p.stderr)
    return p


def test_fragmentation_is_explained_and_the_verified_fix_fits_live():
    snap, run = record("pins", "200M", status=3)
    # run's end: the short form, with the fix the replay verified
    assert "ran out of device memory: 12 MiB asked" in run.stderr, run.stderr
    assert "it went on" not in run.stderr, run.stderr   # it ended there
    assert "fixes that fit, checked by replaying the run: VRAMTRACE_CONF=expandable_segments:True" \
        in run.stderr, run.stderr
    assert f"vramtrace oom {snap}" in run.stderr, run.stderr
    text = oom(snap).stdout
    lines = text.splitlines()
    assert len(lines) <= 40, text
    assert lines[0].startswith("OUT OF MEMORY: 12 MiB asked on device 0"), text
    assert "frag_prog.c" in lines[1], text
    # 40 blocks of 5 MiB, one in four kept: 150 MiB free, all in 5 and 10 MiB pieces
    assert "150 MiB free" in text and "the largest 10 MiB" in text, text
    assert "150 MiB (100 % of the free bytes) in pieces smaller than the 12 MiB asked" in text, text
    assert "as recorded, the replay runs out of memory too" in text, text
    fixes = text[text.index("fixes that fit:"):text.index("tried, would not fit:")]
    assert "VRAMTRACE_CONF=expandable_segments:True  (fits" in fixes, text
    assert "a device with" in fixes, text
    assert "max_split_size_mb" not in fixes, text

    j = json.loads(oom(snap, "--json").stdout)
    assert j["schema"] == "vramtrace-oom" and j["allocator"] == "vramtrace", j
    q, d = j["request"], j["device"]
    assert q["size"] == 12 * MIB and q["device"] == 0 and "frag_prog.c" in q["line"], q
    assert d["total"] == 200 * MIB and d["reserved"] == d["allocated"] + d["pending_free"] + d["cache_free"], d
    assert d["free_in_smaller_pieces"] == d["cache_free"] == 150 * MIB and d["largest_free"] == 10 * MIB, d
    assert sum(g["bytes"] for g in d["free_by_pool"]) == d["cache_free"], d
    assert j["alive"]["lines"][0]["bytes"] >= j["alive"]["lines"][-1]["bytes"], j["alive"]
    assert j["replay"]["reproduced"] is True, j["replay"]
    for f in j["fixes"]:
        assert {"conf", "peak_reserved", "fits", "verified", "kind"} <= set(f), f
        assert f["verified"] == f["fits"], f   # reproduced: every fit is verified
    verified = [f["conf"] for f in j["fixes"] if f["verified"]]
    assert "expandable_segments:True" in verified, j["fixes"]
    exp = next(f for f in j["fixes"] if f["conf"] == "expandable_segments:True")
    assert exp["peak_reserved"] <= 200 * MIB, exp
    dev = next(f for f in j["fixes"] if f["kind"] == "device")
    assert dev["fits"] and dev["capacity"] > 200 * MIB and j["replay"]["min_capacity"] == dev["capacity"], dev
    # the fix, applied: the program fits live
    _, live = record("pins_expandable", "200M", conf="expandable_segments:True")
    assert "frag: ok" in live.stdout and "ran out of device memory" not in live.stderr, live


def test_a_program_that_caught_the_error_and_went_on_is_told_so():
    """A batch-size search catches the OOM and goes on: run's short form
    says so, with the allocations after it and how many OOMs there were."""
    snap, run = record("caught", "200M", prog=[FRAG, "1", "pins_caught"])
    n = int(run.stdout.split("frag: caught ")[1].split()[0])
    assert n >= 2, run.stdout    # each 12 MiB block after the first failed too
    assert "ran out of device memory: 12 MiB asked" in run.stderr, run.stderr
    assert f"  it went on: the error was caught, " in run.stderr, run.stderr
    assert f", {n} OOMs in all (this is the first)\n" in run.stderr, run.stderr
    j = json.loads(oom(snap, "--json").stdout)
    assert j["request"]["ooms_recorded"] == n and j["request"]["allocations_after"] >= 1, j["request"]


def test_fragmentation_older_than_the_ring_is_said_and_no_fix_verified():
    """frag_prog "pins_late" under a 1024-event ring: the 5 MiB blocks that
    pin every segment were made before the window. The replay makes the ten
    still held first, but packed into segments of its own, so the 12 MiB
    blocks fit there: the OOM is not reproduced, and neither run's summary
    nor `oom` may offer a fix; both say why (the ring), with the bytes held
    from before it."""
    snap, run = record("late", "200M", conf="max_events:1024", status=3,
                       prog=[FRAG, "1", "pins_late"])
    assert "ran out of device memory: 12 MiB asked" in run.stderr, run.stderr
    assert ("the 50 MiB allocated before the ring's window is made first, not as it lay "
            "in segments then; no fix is verified") in run.stderr, run.stderr
    assert "fixes that fit" not in run.stderr, run.stderr
    text = oom(snap).stdout
    assert "the ring overwrote the recording's first " in text, text
    assert ("the replay makes what they allocated first (50 MiB of it held at the OOM), "
            "but not as it lay in segments then, so no fix is verified") in text, text
    j = json.loads(oom(snap, "--json").stdout)
    assert j["replay"]["reproduced"] is False, j["replay"]
    assert j["replay"]["events_lost"] > 0 and j["replay"]["before_window_bytes"] == 50 * MIB, \
        j["replay"]
    assert not any(f["verified"] for f in j["fixes"]), j["fixes"]
    # what the replay made first, as `replay` reports it
    p = subprocess.run([VT, "replay", "--json", snap], capture_output=True, text=True,
                       timeout=120)
    r = json.loads(p.stdout)
    # the ten pinning blocks; and a filler block when the window's first
    # event is its free (where the ring cut falls varies by an event or two)
    assert r["seeded"] in (10, 11) and r["seeded_bytes"] == r["seeded"] * 5 * MIB, r
    assert r["skipped_frees"] == 0, r
    p = subprocess.run([VT, "replay", snap], capture_output=True, text=True, timeout=120)
    assert (f"note: {r['seeded']} allocations ({r['seeded'] * 5} MiB) made before the window "
            "and held when it opened are made first, in segments of the replay's choosing"
            in p.stdout), p.stdout


def test_free_pieces_on_another_stream_are_said_not_to_serve_the_request():
    """frag_prog "streams": 150 MiB free in the cache, in 15 MiB holes, and a
    12 MiB request fails: the holes are on the stream that made them, and the
    request is the default stream's (a two-rank FSDP2 job asked 13 KiB on
    a stream of FSDP2's own with 22 MiB free in the cache, all of it on
    other streams or in the other pool). Before, both views said "0 B of it in pieces smaller than
    the request" and nothing of why it did not fit."""
    snap, run = record("streams", "200M", status=3, prog=[FRAG, "1", "streams"])
    assert "150 MiB free in the cache, 0 B of it in pieces smaller than the request" in run.stderr, \
        run.stderr
    assert ("  none of the pieces big enough (150 MiB) is on the stream that asked, in its pool: "
            "a cached piece serves only the stream and pool it was made for\n") in run.stderr, \
        run.stderr
    text = oom(snap).stdout
    assert ("  none of it where this request is served: a cached piece serves only the stream "
            "and pool it was made for, and the large pool on stream 0x0 has no piece of 12 MiB; "
            "150 MiB in pieces that big are on other streams or in the other pool\n") in text, text
    d = json.loads(oom(snap, "--json").stdout)["device"]
    assert d["fit_where_served"] == 0 and d["fit_elsewhere"] == d["cache_free"] == 150 * MIB, d
    # the pinned holes of one stream ("pins"): too small, on the stream that asked
    snap, _ = record("pins_one_stream", "200M", status=3)
    text = oom(snap).stdout
    assert "none of it where this request is served" not in text, text
    d = json.loads(oom(snap, "--json").stdout)["device"]
    assert d["fit_where_served"] == d["fit_elsewhere"] == 0, d


def test_bad_input_and_no_oom_are_refused_with_one_line():
    assert "usage: vramtrace oom SNAPSHOT" in oom("--help").stdout
    p = oom(status=2)
    assert "missing SNAPSHOT" in p.stderr, p.stderr
    p = oom("--bogus", status=2)
    assert "unknown option '--bogus'" in p.stderr, p.stderr
    junk = os.path.join(TMP, "junk.vtsnap")
    with open(junk, "w") as f:
        f.write("not a snapshot\n")
    p = oom(junk, status=2)
    assert p.stdout == "" and len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = oom(os.path.join(TMP, "missing.vtsnap"), status=2)
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    p = oom(junk, junk, status=2)
    assert "one SNAPSHOT only" in p.stderr, p.stderr
    # a run that fitted: nothing to explain, exit 1 (as check's "nothing flagged" is 0)
    snap, run = record("fits", "1G")
    assert "ran out of device memory" not in run.stderr, run.stderr
    p = oom(snap, status=1)
    assert p.stdout == "" and "holds no out-of-memory event" in p.stderr, p.stderr


if __name__ == "__main__":
    globals()["test_" + sys.argv[3]]()
    print("ok", sys.argv[3])
