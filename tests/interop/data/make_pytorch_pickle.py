"""How data/pytorch_2_14_mlp.pickle was made: PyTorch 2.14.1's own memory
recorder (the CUDA 13 wheel) on the simulated device, three AdamW steps of a
small MLP, dumped with _dump_snapshot. Kept as a file so that the importer's
tests read what PyTorch writes (key order, memo use, frames) and not only what
tests/interop's generators write. Regenerate:
  build/tests/sim/simrun --mem 1G -- .venv-test/bin/python \
      tests/interop/data/make_pytorch_pickle.py tests/interop/data/pytorch_2_14_mlp.pickle
"""
import sys, torch, torch.nn as nn
torch.cuda.memory._record_memory_history(max_entries=100000)
model = nn.Sequential(nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)).cuda()
opt = torch.optim.AdamW(model.parameters())
for step in range(3):
    x = torch.randn(32, 64, device="cuda")
    loss = nn.functional.cross_entropy(model(x), torch.randint(0, 10, (32,), device="cuda"))
    opt.zero_grad(); loss.backward(); opt.step()
torch.cuda.memory._dump_snapshot(sys.argv[1])
