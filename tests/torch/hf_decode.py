"""Inference as people write it with Hugging Face transformers, knowing
nothing of vramtrace: a small GPT-2 (random weights from its config, no
download) decodes greedily with its KV cache (transformers' DynamicCache),
prompt after prompt; no optimizer, so no step for `vramtrace run` to mark.

  python hf_decode.py leak|fixed [PROMPTS]

``leak``: each prompt's last model output is kept in a list, and with it
the whole KV cache of its decoding (``out.past_key_values``).
``fixed``: only the generated ids are kept, on the host.
The decoding loop is of fixed length (16 tokens): the simulated device runs
no kernel, so generate()'s data-dependent stop would never come.
Prints "done N" last."""

import sys
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

kind = sys.argv[1]
prompts = int(sys.argv[2]) if len(sys.argv) > 2 else 12
torch.manual_seed(0)
config = GPT2Config(n_layer=4, n_head=4, n_embd=256, vocab_size=5000, n_positions=256)
model = GPT2LMHeadModel(config).cuda().eval()


def decode(ids: torch.Tensor, steps: int = 16):
    past, tokens = None, ids
    with torch.no_grad():
        for _ in range(steps):
            out = model(input_ids=tokens, past_key_values=past, use_cache=True)   # MODEL_LINE
            past = out.past_key_values
            tokens = out.logits[:, -1:].argmax(-1)
            ids = torch.cat([ids, tokens], dim=1)
    return ids, out


def serve(prompt: torch.Tensor):
    """One request, as a server's handler: what it returns is kept."""
    ids, out = decode(prompt)
    return out if kind == "leak" else ids.cpu()


kept = []
for _ in range(prompts):
    kept.append(serve(torch.randint(0, config.vocab_size, (4, 32), device="cuda")))
    time.sleep(0.05)   # the rest of a real server's work per request
print("done", len(kept))
