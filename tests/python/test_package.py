"""The `vramtrace` package: loading the library, errors, thin wrappers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import vramtrace
from vramtrace import _lib


def _run_py(code: str, env_extra: dict) -> subprocess.CompletedProcess:
    from conftest import SCRIPTS
    env = dict(os.environ)
    env["PYTHONPATH"] = SCRIPTS + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=60)


def test_missing_library_names_every_place_it_looked(tmp_path):
    bogus = str(tmp_path / "nope" / "libvramtrace.so")
    r = _run_py("import vramtrace\n"
                "try:\n    vramtrace.mark('x')\n"
                "except vramtrace.LibraryNotFoundError as e:\n    print('ERR', e)\n",
                {"VRAMTRACE_LIB": bogus})
    assert r.returncode == 0, r.stderr
    assert "ERR cannot load libvramtrace.so" in r.stdout
    assert bogus in r.stdout and "no such file" in r.stdout
    assert "VRAMTRACE_LIB" in r.stdout


def test_unloadable_library_is_a_clear_error(tmp_path):
    junk = tmp_path / "libvramtrace.so"
    junk.write_text("not an ELF file")
    r = _run_py("import vramtrace\n"
                "try:\n    vramtrace.snapshot('/tmp/x.vtsnap')\n"
                "except vramtrace.VramtraceError as e:\n    print('ERR', e)\n",
                {"VRAMTRACE_LIB": str(junk)})
    assert "ERR cannot load libvramtrace.so" in r.stdout, r.stdout + r.stderr
    assert str(junk) in r.stdout


def test_library_not_found_error_is_an_oserror():
    assert issubclass(vramtrace.LibraryNotFoundError, OSError)
    assert issubclass(vramtrace.LibraryNotFoundError, vramtrace.VramtraceError)


def test_candidates_start_with_the_environment(monkeypatch):
    monkeypatch.setenv("VRAMTRACE_LIB", "/x/libvramtrace.so")
    cands = _lib.find_library_candidates()
    assert cands[0] == ("$VRAMTRACE_LIB", "/x/libvramtrace.so")
    origins = [o for o, _ in cands]
    assert "next to the package" in origins
    assert origins[-1] == "dynamic linker search"


def test_wrappers_reach_the_library(fake):
    vramtrace.mark("step 1")
    vramtrace.snapshot("/tmp/a.vtsnap")
    vramtrace.record_stream(0x1000, 7)
    tid = vramtrace.tensor_new(0x2000, 64, 0, "w")
    vramtrace.tensor_use(tid)
    hid = vramtrace.holder_new("list")
    vramtrace.ref(hid, tid, "[0]")
    vramtrace.unref(hid, tid)
    vramtrace.tensor_drop(tid)
    vramtrace.storage_external(0x2000, 64, -1)
    vramtrace.storage_external_free(0x2000)
    kinds = [e[0] for e in fake.events]
    assert kinds == ["mark", "snapshot", "record_stream", "tensor_new", "use", "holder",
                     "ref", "unref", "drop", "storage", "storage_free"]
    assert fake.events[0] == ("mark", "step 1")


def test_mark_hooks_run_before_the_mark(fake):
    seen = []

    def hook(kind, arg):
        seen.append((kind, arg, len(fake.events)))

    vramtrace.add_mark_hook(hook)
    try:
        vramtrace.mark("a")
        vramtrace.snapshot("/tmp/b.vtsnap")
    finally:
        vramtrace.remove_mark_hook(hook)
    vramtrace.mark("c")
    assert seen == [("mark", "a", 0), ("snapshot", "/tmp/b.vtsnap", 1)]
    # the snapshot was asked for before its hooks ran, and the request forgotten after
    assert fake.requests == [True, False]


def test_mark_rejects_non_strings(fake):
    with pytest.raises(TypeError):
        vramtrace.mark(3)  # type: ignore[arg-type]
    with pytest.raises(vramtrace.VramtraceError):
        vramtrace.snapshot("")


# -- against the built library ------------------------------------------------

def test_real_library_loads_from_vramtrace_lib(real_lib):
    assert os.path.realpath(real_lib.path) == os.path.realpath(os.environ["VRAMTRACE_LIB"])
    assert vramtrace.version().count(".") == 2
    for name in ("vt_mark", "vt_snapshot", "vt_tensor_new", "vt_holder_new", "vt_ref",
                 "vt_stack_intern_frames", "vt_tensor_use_stack", "vt_get_stats",
                 "vt_tensor_new_stack", "vt_storage_external_stack",
                 "vt_storage_external_free_stack", "vt_tensor_name", "vt_thread_python_stack"):
        assert real_lib.has(name), name
    assert real_lib.can_rename


def test_real_tensor_name_rejects_bad_arguments(real_lib):
    with pytest.raises(vramtrace.VramtraceError) as ei:
        real_lib.tensor_name(0, "x")
    assert "vt_tensor_name" in str(ei.value)
    real_lib.tensor_name(real_lib.tensor_new(0, 0, 0, "t", 0), "renamed")


def test_real_mark_and_snapshot_write_a_file(real_lib, tmp_path):
    vramtrace.mark("unit test")
    out = tmp_path / "s.vtsnap"
    assert vramtrace.snapshot(out) == str(out)
    assert out.stat().st_size > 0


def test_real_snapshot_time_is_its_request_not_after_its_hooks(real_lib, tmp_path):
    """What a snapshot's hooks do first (vramtrace.torch's holder walk,
    seconds on a large heap) is vramtrace's own work: the snapshot's time,
    where `check` ends the program's time, is the moment it was asked for.
    Before: the moment it was written, after the hooks (an OOM in a first
    step then read as a second of every tensor lingering). Ordered against
    marks the hook records after its work, not timed."""
    import json
    import time

    def slow_hook(kind, arg):
        if kind == "snapshot":
            time.sleep(0.05)               # the hook's work, then a mark after it
            real_lib.mark("hook done")      # the library's own call: no hooks run

    vramtrace.mark("before")
    vramtrace.add_mark_hook(slow_hook)
    try:
        paths = [str(tmp_path / "s.vtsnap"), str(tmp_path / "again.vtsnap")]
        for path in paths:
            vramtrace.snapshot(path)
    finally:
        vramtrace.remove_mark_hook(slow_hook)
    doc = [json.loads(subprocess.run([os.environ["VRAMTRACE_CLI"], "json", path],
                                     capture_output=True, text=True, check=True).stdout)
           for path in paths]
    marks = [(m["label"], m["time_ns"]) for m in doc[1]["marks"]]
    before = [t for label, t in marks if label == "before"][-1]
    hook_done = [t for label, t in marks if label == "hook done"][-2:]
    first, second = doc[0]["meta"]["snapshot_time_ns"], doc[1]["meta"]["snapshot_time_ns"]
    assert before <= first < hook_done[0], (before, first, hook_done)
    # the second snapshot has a request of its own, not the first one's
    assert hook_done[0] < second < hook_done[1], (first, second, hook_done)


def test_real_trace_window_counts_the_events_and_the_rings_room(real_lib):
    """vt_trace_window: the events this process recorded so far and the
    most the ring keeps (the tracker declares its holders again before the
    ring would lose them)."""
    recorded, capacity = real_lib.trace_window()
    real_lib.mark("one more event")
    again, same = real_lib.trace_window()
    assert again == recorded + 1 and same == capacity > 0, (recorded, again, capacity)


def test_real_paused_records_a_pause_with_the_gil_held(real_lib, tmp_path):
    """vt_paused (format 1.9): a PAUSE event of the given length, which
    `check`'s time rule leaves out. The tracker calls it, and every other
    recording call, inside its hold of the collector's count: with the GIL
    held (ctypes.PyDLL), not let go as ctypes calls a CDLL's functions (then
    another thread's objects made meanwhile were forgotten with the
    tracker's, and the differential suite's count per step moved by -24
    under run --track)."""
    import ctypes
    import json
    real_lib.paused(250_000_000)
    real_lib.paused(0)                     # nothing recorded for 0
    out = str(tmp_path / "p.vtsnap")
    vramtrace.snapshot(out)
    doc = json.loads(subprocess.run([os.environ["VRAMTRACE_CLI"], "json", "--events", out],
                                    capture_output=True, text=True, check=True).stdout)
    assert [e["aux"] for e in doc["events"] if e["kind"] == "PAUSE"] == [250_000_000]
    held = {name for name in _lib._GIL_HELD if real_lib.has(name)}
    assert "vt_paused" in held and "vt_ref" in held, held
    for name in held:
        assert real_lib.raw(name)._flags_ & ctypes._FUNCFLAG_PYTHONAPI, name
    # a snapshot's writing (seconds) lets the program's threads run
    assert not real_lib.raw("vt_snapshot")._flags_ & ctypes._FUNCFLAG_PYTHONAPI


def test_real_snapshot_to_a_bad_path_raises(real_lib, tmp_path):
    with pytest.raises(vramtrace.VramtraceError) as ei:
        vramtrace.snapshot(str(tmp_path / "no" / "such" / "dir" / "s.vtsnap"))
    assert "vt_snapshot" in str(ei.value)


def test_real_stats_without_cuda_is_sensible(real_lib):
    # No CUDA device here: either counters at zero or one clear error.
    try:
        st = vramtrace.stats(0)
    except vramtrace.VramtraceError as exc:
        assert "vt_get_stats" in str(exc)
    else:
        assert st["allocated_bytes"]["all"]["current"] == 0
        assert st["num_ooms"] == 0
    with pytest.raises(vramtrace.VramtraceError):
        vramtrace.stats(10_000)


def test_real_record_stream_of_unknown_pointer_raises(real_lib):
    with pytest.raises(vramtrace.VramtraceError) as ei:
        vramtrace.record_stream(0xdead0000, 0)
    # not a CUDA call: a negative errno (vramtrace.h), named by vt_strerror
    assert "(-22)" in str(ei.value) and "Invalid argument" in str(ei.value), str(ei.value)


def test_real_error_texts_come_from_the_library(real_lib):
    assert real_lib.strerror(0) == "success"
    assert real_lib.strerror(2) == "cudaErrorMemoryAllocation: out of memory"
    assert real_lib.strerror(-22) == os.strerror(22)
    assert real_lib.strerror(12345) == "CUDA error 12345"


def test_real_annotation_ids_are_distinct(real_lib):
    vramtrace.storage_external(0x10000, 256, -1)
    t = vramtrace.tensor_new(0x10000, 256, 0, "t")
    h = vramtrace.holder_new("h")
    assert t and h and t != h
    vramtrace.ref(h, t, "x")
    vramtrace.unref(h, t)
    vramtrace.tensor_drop(t)
    vramtrace.storage_external_free(0x10000)
    sid = real_lib.intern_stack([("f", "a.py", 3), ("<module>", "b.py", 1)])
    assert sid == real_lib.intern_stack([("f", "a.py", 3), ("<module>", "b.py", 1)])


def test_use_allocator_on_cpu_torch_is_a_clear_error(fake, monkeypatch):
    torch = pytest.importorskip("torch")
    import vramtrace.torch as vtt
    # The tests run on the simulated device, where CUDA is there: make this
    # torch look like one without a usable device (use_allocator with CUDA
    # is tested in tests/torch).
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(vramtrace.VramtraceError) as ei:
        vtt.use_allocator()
    msg = str(ei.value)
    assert "use_allocator()" in msg
    if not hasattr(torch.cuda.memory, "CUDAPluggableAllocator"):
        assert "CUDAPluggableAllocator" in msg and "vramtrace run" in msg
    else:
        assert "CUDA" in msg


def test_notes_never_go_through_the_programs_stderr(tmp_path, monkeypatch, capfd):
    """vramtrace's own notes (a walk cut short, an observer not built) are
    not the program's output: a program that captures sys.stderr sees none
    of them. Under `vramtrace run` they go to the run's notes file (run says
    them after the program), else to file descriptor 2."""
    import contextlib
    import io

    from vramtrace import _autorun
    seen = io.StringIO()
    monkeypatch.setenv("VRAMTRACE_RUN_DIR", str(tmp_path))
    with contextlib.redirect_stderr(seen):
        _autorun.note("under run")
    assert seen.getvalue() == ""
    assert (tmp_path / "notes").read_text() == f"{os.getpid()}\tunder run\n"
    assert capfd.readouterr().err == ""

    monkeypatch.delenv("VRAMTRACE_RUN_DIR")
    with contextlib.redirect_stderr(seen):
        _autorun.note("alone")
    assert seen.getvalue() == ""
    assert capfd.readouterr().err == "vramtrace: alone\n"

    # a run directory that cannot be written: said on fd 2 instead
    monkeypatch.setenv("VRAMTRACE_RUN_DIR", str(tmp_path / "gone"))
    with contextlib.redirect_stderr(seen):
        _autorun.note("lost dir")
    assert seen.getvalue() == ""
    assert capfd.readouterr().err == "vramtrace: lost dir\n"


def _part_compiled_by_a_stand_in(tmp_path, monkeypatch, seconds: float = 0.0):
    """_native_build with its compile a stand-in (it writes an empty .so and
    the stamp, taking `seconds`) and its loader one that names the file, the
    cache in tmp_path: (the module, a source file, the names it compiled)."""
    pytest.importorskip("torch")
    import time
    from vramtrace import _native_build as nb
    monkeypatch.setenv("VRAMTRACE_CACHE_DIR", str(tmp_path))
    src = tmp_path / "part.cpp"
    src.write_text("// a part\n")
    compiled = []

    def compile_part(name, sources, *, folder, stamp, want, loader, **_):
        compiled.append(name)
        time.sleep(seconds)
        target = os.path.join(folder, f"{name}.so")
        open(target, "w").close()
        with open(stamp, "w") as f:
            f.write(want + "\n")
        return loader(target)

    monkeypatch.setattr(nb, "_build_locked", compile_part)
    monkeypatch.setattr(nb.ctypes, "CDLL", lambda path: ("loaded", path))
    return nb, src, compiled


def test_a_part_built_at_first_use_is_built_once_by_ranks_starting_together(tmp_path,
                                                                            monkeypatch):
    """The ranks of a job start together and each finds a part built at
    first use (the op observer, the allocator's observer) missing: one builds
    it and announces it, the others wait for it and load what it built (a
    two-rank FSDP job under `run --track` said "building" twice for each
    part). Two threads stand for the ranks: the lock is per open file, as
    between processes; the compile is a stand-in that takes its time."""
    import threading
    nb, src, builds = _part_compiled_by_a_stand_in(tmp_path, monkeypatch, seconds=0.3)
    together = threading.Barrier(2)
    got = []

    def rank() -> None:
        together.wait()
        got.append(nb.build("part", "vt_part", [str(src)], what="a part"))

    ranks = [threading.Thread(target=rank) for _ in range(2)]
    for t in ranks:
        t.start()
    for t in ranks:
        t.join(30)
    assert builds == ["vt_part"], builds
    assert len(got) == 2 and got[0] == got[1] and got[0][1].endswith("vt_part.so"), got


def test_the_flags_a_part_is_built_with_name_folders_by_their_real_path(tmp_path, monkeypatch):
    """A part built at first use is known by its sources and flags (its
    stamp): the CUDA headers' folder reached through a link (a venv behind a
    symbolic link, its Python started by either path) is the same folder,
    so the part is not built again at each change of path (the suite's
    venv, linked from .venv-test: the allocator's observer was rebuilt
    whenever a program ran by the other path)."""
    from vramtrace import _native_build as nb
    real = tmp_path / "cuda-13.0"
    (real / "include").mkdir(parents=True)
    (real / "include" / "cuda_runtime_api.h").write_text("/* stand-in */\n")
    link = tmp_path / "cuda"
    link.symlink_to(real)
    monkeypatch.setenv("CUDA_HOME", str(link))
    dirs = nb.cuda_include_dirs()
    assert os.path.realpath(real / "include") in dirs, dirs
    assert str(link / "include") not in dirs, dirs
    assert all(d == os.path.realpath(d) for d in dirs), dirs


def test_a_part_is_built_where_the_file_system_has_no_locks(tmp_path, monkeypatch):
    """A cache folder on a file system without locks (flock: ENOLCK) builds
    the part as it did before there was a lock, not "could not be built"."""
    import errno
    nb, src, built = _part_compiled_by_a_stand_in(tmp_path, monkeypatch)

    def no_locks(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(nb.fcntl, "flock", no_locks)
    got = nb.build("part", "vt_part", [str(src)], what="a part")
    assert built == ["vt_part"] and got[1].endswith("vt_part.so"), (built, got)
