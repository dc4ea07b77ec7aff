"""Hogwild training on one CUDA model shared by two processes, shaped after
pytorch/examples' mnist_hogwild: the model is moved to the device and
``share_memory()``'d, two processes started with spawn (CUDA does not
survive fork) each train it with their own optimizer on the same
parameters, which reach them as CUDA IPC handles (torch.multiprocessing's
reductions: a memory handle and an interprocess event per storage).

    python hogwild.py leak|fixed [--steps N]

leak: each trainer keeps every step's hidden activations in a module-level
list (``history``), as code that keeps them for a plot does; fixed keeps
their mean on the host. Each trainer writes its step count into a CUDA
tensor the parent shared (host-to-device copies, which the simulated device
carries between processes), and the parent prints what it reads back.
"""
import argparse

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F

history = []


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 512)
        self.fc2 = torch.nn.Linear(512, 10)

    def forward(self, x):
        h = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(h), dim=1), h


def train(rank, kind, steps, model, counts):
    torch.manual_seed(1 + rank)
    data = torch.utils.data.TensorDataset(torch.randn(64 * steps, 256),
                                          torch.randint(0, 10, (64 * steps,)))
    loader = torch.utils.data.DataLoader(data, batch_size=64)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.5)
    done = 0
    for x, y in loader:
        optimizer.zero_grad()
        out, h = model(x.cuda())
        loss = F.nll_loss(out, y.cuda())
        loss.backward()
        optimizer.step()
        if kind == "leak":
            history.append(h)
        else:
            history.append(h.detach().mean().item())
        done += 1
    counts[rank:rank + 1].copy_(torch.tensor([float(done)]))
    torch.cuda.synchronize()
    print(f"trainer {rank}: {done} steps", flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["leak", "fixed"])
    ap.add_argument("--steps", type=int, default=12)
    args = ap.parse_args()
    torch.manual_seed(0)
    mp.set_start_method("spawn", force=True)
    model = Net().cuda()
    model.share_memory()
    counts = torch.zeros(2, device="cuda")
    procs = [mp.Process(target=train, args=(rank, args.kind, args.steps, model, counts))
             for rank in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    print("exit codes", [p.exitcode for p in procs])
    print("steps read back", counts.cpu().tolist())


if __name__ == "__main__":
    main()
