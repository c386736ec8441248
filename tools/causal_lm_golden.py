"""What the causal-LM golden writers share (tools/make_gpt2_golden.py, make_llama_golden.py):
from a model's parameter initializer and forward, the folder tests/nn/lm_golden_test.cpp
reads: config.json, model.safetensors (the initial parameters), input.safetensors
(input_ids I64 [B, T]; labels = input_ids), expected.safetensors (logits, loss, grad.<name>,
train_losses of `steps` AdamW steps and after_adamw.<name>, with torch's version, the steps
and the AdamW arguments as metadata).
"""
import json
import os

import torch

from make_adamw_golden import save  # one safetensors writer for the goldens


def shifted_loss(logits, ids):
    """transformers' causal LM loss: position t predicts ids[t + 1]."""
    return torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))


def write_golden(out, config, init_params, forward, adamw, b, t, steps, seed=20261128):
    gen = torch.Generator().manual_seed(seed)
    os.makedirs(out, exist_ok=True)
    w = init_params(gen)
    ids = torch.randint(0, config["vocab_size"], (b, t), generator=gen)
    save(os.path.join(out, "model.safetensors"), {k: v.detach() for k, v in w.items()}, {"format": "pt"})
    save(os.path.join(out, "input.safetensors"), {"input_ids": ids}, {"format": "pt"})
    logits, loss = forward(w, ids)
    loss.backward()
    expected = {"logits": logits.detach(), "loss": loss.detach().reshape(1)}
    expected.update({"grad." + k: v.grad.clone() for k, v in w.items()})
    opt = torch.optim.AdamW(list(w.values()), foreach=False, **adamw)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        _, step_loss = forward(w, ids)
        losses.append(step_loss.item())
        step_loss.backward()
        opt.step()
    expected["train_losses"] = torch.tensor(losses)
    expected.update({"after_adamw." + k: v.detach().clone() for k, v in w.items()})
    meta = {"torch": torch.__version__, "steps": str(steps), "adamw": json.dumps(adamw)}
    save(os.path.join(out, "expected.safetensors"), expected, meta)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    print(f"wrote {out}: loss {loss.item():.6f}, {len(expected)} expected tensors, torch {torch.__version__}")
