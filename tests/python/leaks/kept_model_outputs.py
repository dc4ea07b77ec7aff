"""Each training step's whole model output kept in a list, as a
transformers model returns it (a ``ModelOutput``: a dict whose fields are
also attributes, with the logits, the loss and the key/value cache: a
cache object whose layers hold the keys and values as fields), where
the program meant to keep the loss (forum reports: "memory keeps growing
when I store the outputs", "CUDA out of memory: outputs appended for
metrics"). The model is written as Hugging Face's GPT-2 is: a causal mask
kept as a buffer that its scaled-dot-product attention never reads, a
``position_ids`` buffer, and a frozen auxiliary head this phase does not
call: model state, not findings, in either twin. Fixed: the history keeps
``out.loss.item()``.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import List

import torch
from torch import nn
from torch.nn import functional as F

B, T, C, V = 8, 32, 64, 128


class ModelOutput(OrderedDict):
    """transformers' ModelOutput: each field an item and an attribute."""

    def __init__(self, **fields: torch.Tensor) -> None:
        super().__init__(**fields)
        for k, v in fields.items():
            setattr(self, k, v)


class DynamicLayer:
    """transformers' cache layer: one layer's keys and values as fields."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor) -> None:
        self.keys, self.values = keys, values


class DynamicCache:
    """transformers' DynamicCache (past_key_values since 4.5x): its layers
    in a list."""

    def __init__(self, *layers: DynamicLayer) -> None:
        self.layers = list(layers)


class Attention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        # GPT-2's causal mask, kept for its eager attention; unused by SDPA
        self.register_buffer("bias", torch.tril(torch.ones(T, T)).view(1, 1, T, T),
                             persistent=False)

    def forward(self, x: torch.Tensor):
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (z.view(B, T, 2, C // 2).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C)), (k, v)


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.attn = Attention()
        self.lm_head = nn.Linear(C, V)
        self.aux_head = nn.Linear(C, V).requires_grad_(False)   # not called in this phase
        self.register_buffer("position_ids", torch.arange(T).unsqueeze(0), persistent=False)

    def forward(self, ids: torch.Tensor, labels: torch.Tensor) -> ModelOutput:
        h = self.wte(ids) + self.wpe(self.position_ids)
        a, cache = self.attn(h)
        logits = self.lm_head(h + a)
        loss = F.cross_entropy(logits.view(-1, V), labels.view(-1))
        return ModelOutput(loss=loss, logits=logits,
                           past_key_values=DynamicCache(DynamicLayer(*cache)))


class Program:
    holder = "history"

    def __init__(self, fixed: bool) -> None:
        self.fixed = fixed
        self.model = TinyLM()
        self.opt = torch.optim.AdamW(
            [p for p in self.model.parameters() if p.requires_grad], lr=1e-3)
        self.history: List[object] = []
        self._out = None

    def step(self, i: int) -> None:
        ids = torch.randint(0, V, (B, T))
        out = self.model(ids, ids)
        out.loss.backward()
        self.opt.step()
        self.opt.zero_grad(set_to_none=True)
        if self.fixed:
            self.history.append(out.loss.item())
        else:
            self.history.append(out)      # meant: the loss; kept: the whole output
            self._out = out

    def retained(self) -> List[torch.Tensor]:
        out = self._out
        layer = out.past_key_values.layers[0]
        return [out.loss, out.logits, layer.keys, layer.values]

    def forget_step(self) -> None:
        self._out = None
