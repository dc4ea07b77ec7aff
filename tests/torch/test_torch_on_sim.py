"""Real PyTorch 2.x on the simulated device: the device as torch sees it,
which libraries the process maps, a training loop's memory statistics,
cleanup to zero, out-of-memory, and PyTorch's own memory recorder.

Run by meson as `simrun --mem 1G -- python -m pytest` with LD_BIND_NOW=1,
so every symbol torch's libraries import from the sim's had to resolve at
load time. One process: importing torch costs seconds.
"""

from __future__ import annotations

import contextlib
import os
import pickle

import pytest
import torch

import mlp
import simdev

MIB = 1 << 20
CAPACITY = 1 << 30                     # simrun --mem 1G
CUBLAS_HANDLE_WORKSPACE = 32 * MIB     # cuBLAS's own, for an sm_90 device

torch.backends.cudnn.enabled = False   # cuDNN is a stub on the sim


def sim_used() -> int:
    free, total = torch.cuda.mem_get_info()
    return total - free


def release_everything() -> None:
    torch.cuda.synchronize()
    torch._C._cuda_clearCublasWorkspaces()   # cuBLAS workspaces torch keeps per handle/stream
    torch.cuda.empty_cache()


@contextlib.contextmanager
def memory_history(max_entries: int):
    """PyTorch's allocator records its history (_record_memory_history) for
    the block, and stops after it whatever happens."""
    torch.cuda.memory._record_memory_history(max_entries=max_entries)
    try:
        yield
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)


def dump_snapshot_and_peaks(path) -> tuple[int, int]:
    """Once the device is idle: PyTorch's snapshot (with the history) written
    to path, and its allocated and reserved peaks."""
    torch.cuda.synchronize()
    torch.cuda.memory._dump_snapshot(str(path))
    return torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()


def test_all_imports_resolved_at_load_time():
    # The suite runs this process with LD_BIND_NOW=1: had any symbol torch
    # imports been missing from the sim's libraries, `import torch` failed.
    assert os.environ.get("LD_BIND_NOW") == "1"
    assert torch.version.cuda and torch.version.cuda.startswith("13.")


def test_device_is_the_simulated_gpu():
    assert torch.cuda.is_available()
    assert torch.cuda.device_count() == 1
    p = torch.cuda.get_device_properties(0)
    assert p.name == "vramtrace simulated GPU"
    assert p.total_memory == CAPACITY == simdev.capacity(0)
    assert f"sm_{p.major}{p.minor}" in torch.cuda.get_arch_list()
    assert p.multi_processor_count > 0
    free, total = torch.cuda.mem_get_info()
    assert total == CAPACITY and 0 < free <= total


def test_no_real_nvidia_runtime_driver_blas_or_dnn_is_mapped():
    a = torch.randn(64, 64, device="cuda")
    (a @ a).sum().item()                 # runtime, driver and cuBLAS all used
    sim_dir = os.path.realpath(os.environ["VT_SIM_LIBDIR"])
    mapped = simdev.mapped_cuda_libraries()
    for name in ("libcuda.so.1", "libcudart.so.13", "libcublas.so.13", "libcublasLt.so.13",
                 "libcudnn.so.9"):
        assert name in mapped, f"{name} not mapped at all: {mapped}"
    outside = {n: p for n, p in mapped.items() if os.path.dirname(p) != sim_dir}
    assert not outside, f"real NVIDIA libraries mapped: {outside}"


def test_training_loop_statistics_match_tensor_sizes():
    release_everything()
    base_alloc = torch.cuda.memory_allocated()
    assert base_alloc == 0
    launches0 = simdev.counters()["kernel_launches"]

    model = mlp.make_model()
    params = mlp.param_block_bytes(model)
    assert torch.cuda.memory_allocated() == params

    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mlp.train(model, opt, steps=20)
    torch.cuda.synchronize()
    # Left alive after the loop: parameters, their gradients, and AdamW's
    # two moments per parameter (same shapes). Plus the cuBLAS/cuBLASLt
    # workspaces torch allocated for its handle, from its own allocator.
    opt.zero_grad(set_to_none=True)
    alive = torch.cuda.memory_allocated()
    workspaces = alive - 3 * params
    stats = torch.cuda.memory_stats()
    assert workspaces >= 0 and workspaces % MIB == 0, (alive, params)
    assert torch.cuda.max_memory_allocated() > alive            # activations came and went
    nparams = len(list(model.parameters()))
    assert stats["allocation.all.current"] >= 3 * nparams
    reserved = torch.cuda.memory_reserved()
    assert reserved >= alive and reserved % (2 * MIB) == 0
    # torch's segments plus the workspace each cuBLAS handle allocated for
    # itself is all the device holds. torch makes one handle per thread that
    # runs GEMMs: this one, and the autograd engine's device thread.
    handles_ws = sim_used() - reserved
    assert handles_ws in (CUBLAS_HANDLE_WORKSPACE, 2 * CUBLAS_HANDLE_WORKSPACE), handles_ws
    assert simdev.counters()["kernel_launches"] - launches0 > 20 * 10   # every op queued

    del model, opt
    release_everything()
    assert torch.cuda.memory_allocated() == 0
    assert torch.cuda.memory_reserved() == 0
    assert sim_used() == handles_ws


def test_out_of_memory_is_raised_and_the_program_goes_on():
    release_everything()
    before = sim_used()
    allocated = torch.cuda.memory_allocated()
    with pytest.raises(torch.OutOfMemoryError):
        torch.empty(2 * CAPACITY, dtype=torch.uint8, device="cuda")
    # Fill the device in 64 MiB tensors until it is full.
    held = []
    with pytest.raises(torch.OutOfMemoryError):
        for _ in range(CAPACITY // (64 * MIB) + 1):
            held.append(torch.empty(64 * MIB, dtype=torch.uint8, device="cuda"))
    assert 0 < len(held) < CAPACITY // (64 * MIB)
    assert simdev.counters()["failed_allocs"] >= 2
    del held
    release_everything()
    assert sim_used() == before
    t = torch.ones(1024, device="cuda")      # and it goes on
    assert torch.cuda.memory_allocated() == allocated + t.numel() * 4


def test_dot_products_and_an_lbfgs_step_run_on_the_device():
    # torch.dot/vdot reach cuBLAS's dot products in its device pointer mode;
    # LBFGS calls them every iteration (found on pytorch/examples'
    # time_sequence_prediction, which failed with CUBLAS_STATUS_NOT_SUPPORTED).
    launches0 = simdev.counters()["kernel_launches"]
    x = torch.ones(64, dtype=torch.float64, device="cuda")
    assert torch.dot(x, x).shape == ()
    z = torch.ones(8, dtype=torch.complex64, device="cuda")
    assert torch.vdot(z, z).dtype == torch.complex64
    h = torch.ones(16, dtype=torch.float16, device="cuda")
    assert torch.dot(h, h).dtype == torch.float16
    assert simdev.counters()["kernel_launches"] - launches0 >= 3
    model = torch.nn.Linear(4, 1).double().cuda()
    opt = torch.optim.LBFGS(model.parameters(), max_iter=3)
    data = torch.ones(8, 4, dtype=torch.float64, device="cuda")

    def closure():
        opt.zero_grad()
        loss = model(data).pow(2).mean()
        loss.backward()
        return loss

    opt.step(closure)
    torch.cuda.synchronize()


def test_copies_are_real_even_though_kernels_are_not():
    host = torch.arange(1000, dtype=torch.float32)
    dev = host.to("cuda")                     # host to device
    dev2 = dev.clone()                        # device to device: a copy, not a kernel
    assert torch.equal(dev2.cpu(), host)      # device to host
    pinned = torch.empty(1000).pin_memory()   # cudaHostAlloc
    pinned.copy_(dev, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(pinned, host)


def test_a_kernel_triton_compiles_at_run_time_loads_and_launches(tmp_path, monkeypatch):
    """torch 2.14 sends a batched outer product (attention over one new
    token, as every sampling loop without a fused kernel computes it) to a
    Triton kernel (torch._native) in eager mode: compiled to a cubin at first
    use, loaded with cuModuleLoadData and launched with cuLaunchKernelEx
    (tests/sim/driver_module.c). Before the sim had modules, Triton's helper
    library did not load (undefined symbol cuModuleGetFunction) and the
    program died (found on karpathy/makemore's sampling)."""
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))   # compiled here, now
    a = torch.randn(4, 8, 1, device="cuda")
    b = torch.randn(4, 1, 16, device="cuda")
    before = simdev.counters()["kernel_launches"]
    out = torch.bmm(a, b)
    torch.cuda.synchronize()
    assert out.shape == (4, 8, 16)
    cubins = list((tmp_path / "triton").rglob("*.cubin"))
    assert [c.name for c in cubins] == ["_bmm_outer_product_kernel.cubin"], cubins
    assert simdev.counters()["kernel_launches"] > before


def test_memory_history_snapshot_lists_the_runs_allocations_and_frees(tmp_path):
    release_everything()
    with memory_history(max_entries=100000):
        keep = torch.empty(3 * MIB, dtype=torch.uint8, device="cuda")
        drop = torch.empty(5 * MIB + 100, dtype=torch.uint8, device="cuda")
        keep_ptr, drop_ptr = keep.data_ptr(), drop.data_ptr()
        del drop
        path = tmp_path / "snapshot.pickle"
        torch.cuda.memory._dump_snapshot(str(path))
    with open(path, "rb") as f:
        snap = pickle.load(f)
    trace = snap["device_traces"][0]
    allocs = {e["addr"]: e["size"] for e in trace if e["action"] == "alloc"}
    frees = {e["addr"] for e in trace if e["action"] == "free_completed"}
    assert allocs.get(keep_ptr) == 3 * MIB
    assert allocs.get(drop_ptr) == 5 * MIB + 100          # the requested size
    assert drop_ptr in frees and keep_ptr not in frees
    assert any(e["action"] == "segment_alloc" for e in trace)
    assert any(e.get("frames") for e in trace if e["action"] == "alloc")
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    assert keep_ptr in {b["address"] for b in blocks}
    del keep


def test_pytorch_snapshot_imported_by_vramtrace_agrees_with_pytorchs_statistics(tmp_path):
    """A pickle written by PyTorch's own recorder on the simulated device,
    read by vramtrace (`json`, `leaks`, `import`): its peaks are PyTorch's
    max_memory_allocated/max_memory_reserved for the run, and what it calls
    alive at the end is what PyTorch says is still allocated."""
    import json
    import subprocess

    cli = os.environ["VRAMTRACE_CLI"]
    release_everything()
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.memory_reserved() == 0
    with memory_history(max_entries=1000000):
        model = mlp.make_model()
        opt = torch.optim.AdamW(model.parameters())
        mlp.train(model, opt, 5)
        path = tmp_path / "run.pickle"
        peak_allocated, peak_reserved = dump_snapshot_and_peaks(path)
        allocated = torch.cuda.memory_allocated()

    def vt(*args: str) -> str:
        p = subprocess.run([cli, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert p.returncode == 0, (args, p.stderr.decode())
        return p.stdout.decode()

    dev = json.loads(vt("json", str(path)))["devices"][0]
    assert dev["peak_allocated"] == peak_allocated, (dev["peak_allocated"], peak_allocated)
    assert dev["peak_reserved"] == peak_reserved, (dev["peak_reserved"], peak_reserved)
    assert dev["final_allocated"] == allocated, (dev["final_allocated"], allocated)
    # leaks lists the same bytes PyTorch still holds (weights, grads, optimizer state)
    with open(path, "rb") as f:
        live = [b for seg in pickle.load(f)["segments"] for b in seg["blocks"]
                if b["state"] == "active_allocated"]
    summary = [l for l in vt("leaks", str(path)).splitlines() if l.startswith("SUMMARY:")]
    assert live and summary and f" alive in {len(live)} allocations " in summary[0], \
        (summary, len(live))
    # the checker's native rules run on it (0: nothing flagged, 1: findings; 2 would be
    # a file it could not read)
    p = subprocess.run([cli, "check", "--json", str(path)], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE)
    assert p.returncode in (0, 1), p.stderr.decode()
    assert isinstance(json.loads(p.stdout)["findings"], list)
    # imported into a .vtsnap, the same figures
    out = tmp_path / "run.vtsnap"
    vt("import", str(path), "-o", str(out))
    dev2 = json.loads(vt("json", str(out)))["devices"][0]
    assert (dev2["peak_allocated"], dev2["peak_reserved"], dev2["final_allocated"]) == \
        (peak_allocated, peak_reserved, allocated)
    del model, opt


def test_a_pickle_with_cpp_stacks_reads_in_the_programs_lines(tmp_path):
    """_record_memory_history(stacks="all") puts PyTorch's own unwinder at the
    top of every stack (torch::unwind::unwind, CapturedTraceback::gather):
    the reports fold it as vramtrace folds its own frames, and lead with the
    program's lines (imported .py frames are Python frames)."""
    import subprocess

    cli = os.environ["VRAMTRACE_CLI"]
    release_everything()
    torch.cuda.memory._record_memory_history(max_entries=100000, stacks="all")
    try:
        model = mlp.make_model()
        opt = torch.optim.AdamW(model.parameters())
        mlp.train(model, opt, 3)
        path = tmp_path / "all.pickle"
        dump_snapshot_and_peaks(path)
    finally:
        torch.cuda.memory._record_memory_history(enabled=None)

    def vt(*args: str) -> str:
        p = subprocess.run([cli, *args, str(path)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)
        assert p.returncode in (0, 1), (args, p.stderr)
        return p.stdout

    summary = vt("summary")
    sites = summary[summary.index("top call sites"):].splitlines()[1:4]
    assert "mlp.py:" in sites[0] and not any("torch::unwind" in l for l in sites), sites
    leaks = vt("leaks")
    assert "torch::unwind" not in leaks and "CapturedTraceback" not in leaks, leaks[:3000]
    first = leaks.split("Leak of ")[1].splitlines()
    assert "mlp.py:" in first[1] or "test_torch_on_sim.py:" in first[1], first[:4]
    del model, opt


def test_pytorch_trace_replayed_by_vramtrace_lands_near_pytorchs_peak(tmp_path):
    """A trace PyTorch's recorder wrote on the simulated device (a training
    loop, then activations of varying batch sizes with one small tensor of
    each batch kept), replayed by `vramtrace replay` at PyTorch's settings:
    the same allocated peak, the same number of segments, and a reserved
    peak within 1 % of PyTorch's. The difference is the segment size of
    mid-size requests (1 to 10 MiB): PyTorch carves them from 20 MiB
    segments, vramtrace from a whole number of the request (3 MiB -> 18 MiB),
    so vramtrace's peak is at most 2 MiB lower per such segment (docs/replay.md,
    "Replay: would it fit?")."""
    import json
    import subprocess

    cli = os.environ["VRAMTRACE_CLI"]
    release_everything()
    torch.cuda.reset_peak_memory_stats()
    with memory_history(max_entries=1000000):
        model = mlp.make_model()
        opt = torch.optim.AdamW(model.parameters())
        mlp.train(model, opt, 3)
        keep = []
        for bs in [3, 64, 8, 48, 16, 96, 24, 40, 6]:
            acts = [torch.empty(bs * MIB // 4 + 1000 * i, device="cuda") for i in range(4)]
            small = [torch.empty(bs * 1024, device="cuda") for _ in range(8)]
            keep.append(small[3])
            del acts, small
        mlp.train(model, opt, 2)
        path = tmp_path / "replay.pickle"
        peak_allocated, peak_reserved = dump_snapshot_and_peaks(path)
    # vramtrace's own allocator's rules (auto would model PyTorch's: to the byte)
    p = subprocess.run([cli, "replay", str(path), "--rules", "vramtrace", "--json"],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    d = r["devices"][0]
    print(f"replay of a torch trace: PyTorch peak reserved {peak_reserved}, vramtrace "
          f"{d['peak_reserved']} ({d['peak_reserved'] - peak_reserved:+d})")
    assert r["oom"] is None and r["skipped_frees"] == 0, r
    assert d["recorded"]["peak_reserved"] == peak_reserved, d
    assert d["peak_allocated"] == peak_allocated, (d, peak_allocated)
    assert d["segment_allocs"] == d["recorded"]["segment_allocs"], d
    assert abs(d["peak_reserved"] - peak_reserved) <= 0.01 * peak_reserved, (d, peak_reserved)
    assert peak_reserved - d["peak_reserved"] <= 2 * MIB * d["segment_allocs"], d
    del model, opt, keep


def test_expandable_segments_map_and_unmap_device_memory_in_2_mib_pieces():
    """PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (its own process:
    expandable_run.py): PyTorch reserves through cuMemCreate/cuMemMap, every
    byte it reserves is mapped on the device, a large tensor grows the
    existing segment, and empty_cache() unmaps and releases what is free,
    down to nothing."""
    import json
    import subprocess
    import sys

    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True")
    script = os.path.join(os.path.dirname(__file__), "expandable_run.py")
    p = subprocess.run([sys.executable, script], env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stderr[-4000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    points = [r["start"], *r["steps"], r["big_held"], r["big_freed"], r["end"]]
    # cuBLAS's handle workspaces are the only cuMemAlloc memory; all else is mapped VMM.
    handles_ws = r["end"]["mem_alloc"] * CUBLAS_HANDLE_WORKSPACE
    assert handles_ws in (CUBLAS_HANDLE_WORKSPACE, 2 * CUBLAS_HANDLE_WORKSPACE), r["end"]
    for pt in points:
        assert pt["reserved"] % (2 * MIB) == 0, pt
        assert pt["used"] - pt["reserved"] in (0, handles_ws), pt
    assert r["start"]["reserved"] == 0
    steps = r["steps"]
    assert steps[0]["reserved"] > 0 and steps[0]["vmm_create"] > 0
    assert all(s["reserved"] == steps[0]["reserved"] for s in steps), steps   # steady state
    assert r["expandable_segments"] and all(r["expandable_segments"]), r["expandable_segments"]

    held, freed = r["big_held"], r["big_freed"]
    grown = held["reserved"] - steps[-1]["reserved"]
    assert 100 * MIB <= grown < 120 * MIB, held
    assert held["vmm_create"] > steps[-1]["vmm_create"]
    assert held["segments"] == freed["segments"] == len(r["expandable_segments"])  # grown in place
    assert freed["reserved"] <= steps[-1]["reserved"] and freed["vmm_release"] > 0, freed
    assert held["used"] - freed["used"] == held["reserved"] - freed["reserved"]   # unmapped

    end = r["end"]
    assert end["reserved"] == 0 and end["allocated"] == 0
    assert end["used"] == handles_ws
    assert end["vmm_release"] == end["vmm_create"], end


def test_cuda_graph_capture_replays_and_private_pools_hold_its_memory():
    """torch.cuda.graph around `z = x * 3 + 1`: the capture records the two
    kernels (the sim counts them at capture; they run only at replay), z comes from the graph's private
    pool, and a pool shared through graph_pool_handle() serves two graphs;
    everything goes back once the graphs and their outputs are gone."""
    release_everything()
    base_alloc, base_reserved = torch.cuda.memory_allocated(), torch.cuda.memory_reserved()
    x = torch.ones(1024, device="cuda")
    s = torch.cuda.Stream()                     # warm-up on a side stream, as documented
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        _ = x * 3 + 1
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    del _
    before = torch.cuda.memory_allocated()

    g = torch.cuda.CUDAGraph()
    launches0 = simdev.counters()["kernel_launches"]
    with torch.cuda.graph(g):
        z = x * 3 + 1
    captured = simdev.counters()["kernel_launches"] - launches0
    # z (4 KiB) is alive in the graph's pool; the intermediate x * 3 was freed in it.
    assert torch.cuda.memory_allocated() - before == mlp.block_bytes(4096)
    assert captured == 2, captured             # the sim counts launch calls as captured
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()

    pool = torch.cuda.graph_pool_handle()
    g2, g3 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g2, pool=pool):
        w = x + 2
    with torch.cuda.graph(g3, pool=pool):
        v = w - 1
    assert torch.cuda.memory_allocated() - before == 3 * mlp.block_bytes(4096)
    g2.replay()
    g3.replay()
    torch.cuda.synchronize()

    del z, w, v
    assert torch.cuda.memory_allocated() - before == 0
    del g, g2, g3, x, s
    release_everything()
    assert torch.cuda.memory_allocated() == base_alloc
    assert torch.cuda.memory_reserved() == base_reserved


def test_track_mode_is_let_go_by_the_engine_threads_when_its_block_ends(monkeypatch):
    # A backward on the device copies the thread's state, track()'s dispatch
    # mode included, into its graph task, which the engine thread may drop
    # after the program has its gradients back; dropping it takes the GIL,
    # and a program that ended meanwhile aborted ("terminate called without
    # an active exception"). The block waits for them to let go.
    import sys
    import threading

    import vramtrace.torch as vtt
    monkeypatch.setenv("VRAMTRACE_TRACK_OBSERVER", "0")
    model = torch.nn.Linear(8, 8).cuda()
    x = torch.randn(4, 8, device="cuda")
    held = []
    # No switching between threads: the engine thread gets the GIL only
    # when the main thread lets it go (as a finalizing interpreter never does).
    was = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    try:
        for _ in range(10):
            with vtt.track() as tr:
                mode = tr._mode
                inside = sys.getrefcount(mode)   # the mode stack's and the tracker's too
                t = threading.Thread(target=lambda: (x * 2).relu())
                t.start()
                t.join()
                model(x).sum().backward()
            held.append(sys.getrefcount(mode) - (inside - 2))
            del mode
    finally:
        sys.setswitchinterval(was)
    assert held == [0] * 10
