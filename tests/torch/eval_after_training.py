"""Training, then evaluation, as programs do: the last backward's gradients
stay on the parameters (nothing calls zero_grad after the last step). They
are the parameters' state, not a leak. Knows nothing of vramtrace but its
marks (evaluation has no optimizer steps to mark).

  python eval_after_training.py
"""

import torch
import torch.nn as nn

import vramtrace


def train(model: nn.Module) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(4):
        vramtrace.mark("train")
        loss = model(torch.randn(256, 64, device="cuda")).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def main() -> None:
    torch.manual_seed(0)
    torch.backends.cudnn.enabled = False
    model = nn.Sequential(nn.Linear(64, 512), nn.ReLU(), nn.Linear(512, 8)).cuda()
    train(model)
    with torch.no_grad():
        for _ in range(4):
            vramtrace.mark("eval")
            model(torch.randn(256, 64, device="cuda"))
    print("grads kept", sum(p.grad is not None for p in model.parameters()))


if __name__ == "__main__":
    main()
