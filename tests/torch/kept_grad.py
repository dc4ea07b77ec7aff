"""A gradient kept after its model is gone: `keep = model.fc1.weight.grad`,
then the model deleted and the program goes on (marked steps). The grad is a
finding, named after its parameter ("Net.fc1.weight.grad"), not by the line
whose backward made it. Knows nothing of vramtrace but its marks.

  python kept_grad.py
"""

import torch
import torch.nn as nn

import vramtrace


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(128, 1024)   # its gradient: 512 KiB, over check's floor
        self.fc2 = nn.Linear(1024, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x).relu())


torch.manual_seed(0)
torch.backends.cudnn.enabled = False
model = Net().cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    loss = model(torch.randn(256, 128, device="cuda")).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
keep = model.fc1.weight.grad
del model, opt, loss
for i in range(4):
    vramtrace.mark(f"after {i}")
print("kept", tuple(keep.shape))
