"""Truncated backpropagation through time with the hidden state never
detached, and the error that brings ("Trying to backward through the graph a
second time") silenced with ``backward(retain_graph=True)``, the answer
forums give: every batch's graph stays reachable from the hidden state, with
every activation it saved, and every backward goes through all of them
again (pytorch/examples' word_language_model without ``repackage_hidden``).
The parameters are stepped by hand through ``.data``, as that example does
(an optimizer's in-place step would make the retained graph's next backward
fail): no optimizer step, so ``vramtrace run`` has no step to mark.

    python tbptt_retain.py leak|fixed [BATCHES] [cell|lstm|lstm-train]

``cell``: an ``nn.RNNCell`` stepped by hand; ``lstm``: word_language_model's
own model, an embedding, a two-layer ``nn.LSTM`` and a decoder (cuDNN off:
the simulator has none, tests/sim/README.md); ``lstm-train``: the same with
the loop inside a function, as that example's ``train()`` runs it.

Fixed: the hidden state detached at each batch, no graph retained. A
script's loop, at module level: the graph is still held at the exit
snapshot, whose walk names what holds it. In ``train()`` the graph is freed
when it returns.
"""

from __future__ import annotations

import sys

import torch
from torch import nn

import hand_step


leak = sys.argv[1] == "leak"
batches = int(sys.argv[2]) if len(sys.argv) > 2 else 40
model = sys.argv[3] if len(sys.argv) > 3 else "cell"
torch.manual_seed(0)
torch.backends.cudnn.enabled = False


def lstm_model():
    """word_language_model's model: (embedding, LSTM, decoder, their
    parameters, the first hidden state)."""
    emb = nn.Embedding(500, 64).to("cuda")
    rnn = nn.LSTM(64, 64, 2).to("cuda")
    dec = nn.Linear(64, 500).to("cuda")
    params = list(emb.parameters()) + list(rnn.parameters()) + list(dec.parameters())
    return emb, rnn, dec, params, (torch.zeros(2, 16, 64, device="cuda"),
                                   torch.zeros(2, 16, 64, device="cuda"))


def lstm_batch(emb, rnn, dec, params, hidden):
    """One batch of word_language_model's train(): the next hidden state."""
    if not leak:
        hidden = tuple(h.detach() for h in hidden)
    ids = torch.randint(0, 500, (12, 16), device="cuda")
    output, hidden = rnn(emb(ids), hidden)
    loss = nn.functional.cross_entropy(dec(output).view(-1, 500), ids.view(-1))
    for p in params:
        p.grad = None
    loss.backward(retain_graph=leak)
    hand_step.sgd(params, 0.1)   # as the example steps them: through .data
    return hidden


def train():
    emb, rnn, dec, params, hidden = lstm_model()
    for _ in range(batches):
        hidden = lstm_batch(emb, rnn, dec, params, hidden)   # TRAIN_LINE


if model == "lstm-train":
    train()
elif model == "lstm":
    emb, rnn, dec, params, hidden = lstm_model()
    for _ in range(batches):
        hidden = lstm_batch(emb, rnn, dec, params, hidden)
else:
    cell = nn.RNNCell(64, 128).to("cuda")
    head = nn.Linear(128, 10).to("cuda")
    params = list(cell.parameters()) + list(head.parameters())
    hidden = torch.zeros(32, 128, device="cuda")
    for _ in range(batches):
        if not leak:
            hidden = hidden.detach()
        xs = torch.randn(10, 32, 64, device="cuda")
        outs = []
        for t in range(10):
            hidden = cell(xs[t], hidden)
            outs.append(head(hidden))
        loss = torch.stack(outs).square().mean()
        cell.zero_grad()
        head.zero_grad()
        loss.backward(retain_graph=leak)
        hand_step.sgd(params, 0.1)   # as the example steps them: through .data
torch.cuda.synchronize()
print("done")
