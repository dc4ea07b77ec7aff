"""A training loop whose model torch.compile builds with its default
backend (inductor): Triton kernels compiled at run time, loaded with
cuModuleLoad and launched on the device (on the simulated one:
tests/sim/driver_module.c). Prints memory_allocated() after each step: the
figures a run under vramtrace must print alike.

``python compiled_loop.py [leak]``: leak keeps each step's logits in a module
list, every other step a row of them (a view). The model is shaped as nanoGPT's (karpathy/nanoGPT model.py): an
embedding, a layer, a head without bias, and the loss computed inside
``forward`` from ``logits.view(-1, V)``, so no op outside the compiled code
touches the logits: the tensor the program gets is inductor's
``reinterpret_tensor`` of the mm's buffer, which no op shows.
"""

import sys

import torch
import torch.nn.functional as F

V = 65   # nanoGPT's shakespeare_char vocabulary


class TinyGPT(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = torch.nn.Embedding(V, 64)
        self.fc = torch.nn.Linear(64, 128)
        self.lm_head = torch.nn.Linear(128, V, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor):
        logits = self.lm_head(F.gelu(self.fc(self.wte(idx))))
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss


torch.manual_seed(0)
model = TinyGPT().cuda()
opt = torch.optim.AdamW(model.parameters())
compiled = torch.compile(model)
kept = []
for step in range(6):
    idx = torch.randint(0, V, (32, 64), device="cuda")
    targets = torch.randint(0, V, (32, 64), device="cuda")
    logits, loss = compiled(idx, targets)   # OUT_LINE
    opt.zero_grad()
    loss.backward()
    opt.step()
    if "leak" in sys.argv[1:]:
        # the logits whole (no op of the program uses them), or a row of
        # them, as nanoGPT's users keep one (a slice: an op that uses them)
        kept.append(logits if step % 2 == 0 else logits[:, -1, :])
    torch.cuda.synchronize()
    print("step", step, torch.cuda.memory_allocated(), flush=True)
