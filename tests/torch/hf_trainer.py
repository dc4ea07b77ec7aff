"""Training with Hugging Face's Trainer (transformers' own loop, accelerate's
wrapped optimizer and its DataLoader), knowing nothing of vramtrace: a small
GPT-2 (random weights from its config, no download) whose Trainer subclass
keeps something of every step's outputs for a metric computed at the end, as
the forums' "memory grows every step with Trainer" reports do.

  python hf_trainer.py leak|fixed

``leak``: ``compute_loss`` keeps ``outputs.logits`` (on the device, with
its graph's top) in a list on the class. ``fixed``: it keeps the predicted
ids on the host. Prints the device memory allocated at the end, then
"done N" (the optimizer steps taken) last."""

import sys
import tempfile

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

kind = sys.argv[1]
torch.manual_seed(0)
STEPS = 12


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n, length, vocab):
        self.x = torch.randint(0, vocab, (n, length), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


class KeepingTrainer(Trainer):
    kept = []

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)   # MODEL_LINE
        if kind == "leak":
            self.kept.append(outputs.logits)
        else:
            self.kept.append(outputs.logits.argmax(-1).cpu())
        return (outputs.loss, outputs) if return_outputs else outputs.loss


config = GPT2Config(vocab_size=2000, n_positions=128, n_embd=64, n_layer=2, n_head=2)
with tempfile.TemporaryDirectory() as out:
    args = TrainingArguments(output_dir=out, per_device_train_batch_size=8, max_steps=STEPS,
                             report_to=[], save_strategy="no", logging_steps=1000,
                             disable_tqdm=True)
    trainer = KeepingTrainer(model=GPT2LMHeadModel(config), args=args,
                             train_dataset=Tokens(8 * STEPS, 128, config.vocab_size))
    trainer.train()
print("allocated", torch.cuda.memory_allocated())
print("done", trainer.state.global_step)
