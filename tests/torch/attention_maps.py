"""A two-layer graph attention network (the shape of pytorch/examples'
gat/main.py: dense attention over a node graph, an Adam loop, an
evaluation under no_grad after each step) whose layers keep their attention
maps for a plot, each in a list of its own:
``self.attention_log.append(attention)`` keeps every forward's (a node
count squared per head, train and evaluation alike); the fixed twin keeps
the last one only, detached. Under `run --track` the cause is one line held
through both layers: ``GAT._modules → dict[*] → GraphAttentionLayer.attention_log``.

  python attention_maps.py leak|fixed [EPOCHS]
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch import nn


class GraphAttentionLayer(nn.Module):
    def __init__(self, n_in: int, n_out: int, heads: int, keep_all: bool) -> None:
        super().__init__()
        self.heads, self.n_out, self.keep_all = heads, n_out, keep_all
        self.W = nn.Parameter(torch.randn(n_in, heads * n_out) * 0.1)
        self.a = nn.Parameter(torch.randn(heads, 2 * n_out, 1) * 0.1)
        self.attention_log: list = []

    def forward(self, h: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        n = h.shape[0]
        ht = (h @ self.W).view(n, self.heads, self.n_out).permute(1, 0, 2)
        src = ht @ self.a[:, :self.n_out, :]
        dst = ht @ self.a[:, self.n_out:, :]
        e = F.leaky_relu(src + dst.mT, 0.2)
        e = torch.where(adj > 0, e, torch.full_like(e, -9e15))
        attention = F.softmax(e, dim=-1)
        if self.keep_all:
            self.attention_log.append(attention)   # LEAK_LINE
        else:
            self.attention_log = [attention.detach()]
        return (attention @ ht).mean(dim=0)


class GAT(nn.Module):
    def __init__(self, n_in: int, hidden: int, classes: int, keep_all: bool) -> None:
        super().__init__()
        self.gat1 = GraphAttentionLayer(n_in, hidden, 2, keep_all)
        self.gat2 = GraphAttentionLayer(hidden, classes, 1, keep_all)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.gat2(F.elu(self.gat1(x, adj)), adj), dim=1)


def main(leak: bool, epochs: int) -> None:
    torch.manual_seed(0)
    nodes, features, classes = 256, 32, 4
    x = torch.randn(nodes, features, device="cuda")
    adj = (torch.rand(nodes, nodes, device="cuda") < 0.05).float() + torch.eye(nodes, device="cuda")
    labels = torch.randint(0, classes, (nodes,), device="cuda")
    model = GAT(features, 16, classes, keep_all=leak).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    for epoch in range(epochs):
        model.train()
        opt.zero_grad()
        loss = F.nll_loss(model(x, adj), labels)
        loss.backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            acc = (model(x, adj).argmax(1) == labels).float().mean()
        del acc
    print(f"epochs {epochs}, maps {len(model.gat1.attention_log) + len(model.gat2.attention_log)}")


if __name__ == "__main__":
    main(sys.argv[1] == "leak", int(sys.argv[2]) if len(sys.argv) > 2 else 30)
