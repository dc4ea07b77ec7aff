"""An actor-learner split over torch.multiprocessing: a spawned actor makes
observations on the device and sends them to the learner (this process)
through a Queue, as CUDA IPC handles; the learner trains on each.

    python actor_learner.py leak|fixed [--steps N]

leak: the learner keeps every observation it received (``kept``, a module
list), as a replay buffer that is never trimmed; fixed keeps none. The
received tensors live in memory the learner's allocator never made (the
actor's blocks, mapped from their IPC handles).

The actor allocates through PyTorch's caching allocator and nothing else:
no cuBLAS, no allocator of vramtrace's set up in it.
"""
import argparse

import torch
import torch.multiprocessing as mp

kept = []


def actor(q, steps):
    for _ in range(steps):
        obs = torch.randn(256, 1024, device="cuda")   # 1 MiB each
        q.put(obs)
        del obs
    q.put(None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["leak", "fixed"])
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    mp.set_start_method("spawn", force=True)
    q = mp.Queue()
    a = mp.Process(target=actor, args=(q, args.steps))
    a.start()
    model = torch.nn.Linear(1024, 10).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    steps = 0
    while (obs := q.get()) is not None:
        loss = model(obs).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if args.kind == "leak":
            kept.append(obs)   # OBS_KEPT
        del obs
        steps += 1
    a.join()
    print(f"learner steps {steps}, actor exit {a.exitcode}", flush=True)


if __name__ == "__main__":
    main()
