#!/usr/bin/env python3
"""Writes tests/nn/golden/gpt2_tiny/: a PyTorch GPT-2 written from the architecture (not
transformers): learned positions, pre-norm blocks, causal attention with 1/sqrt(d) scaling,
GELU-tanh, Conv1D weights [in, out], the head tied to the token embeddings, and
transformers' shifted loss (position t predicts labels[t + 1]). Dropout 0, fp32.

Files, in the layout of ../shared/golden's ViT cases:
  config.json           transformers' GPT2Config keys
  model.safetensors     the initial parameters under transformers' names (no lm_head.weight: tied)
  input.safetensors     input_ids I64 [B, T] (labels = input_ids)
  expected.safetensors  logits [B, T, V], loss [1], grad.<name> for every parameter,
                        train_losses [steps] and after_adamw.<name> after `steps` AdamW steps
Usage: python3 tools/make_gpt2_golden.py [OUT_DIR]
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from causal_lm_golden import shifted_loss, write_golden  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/nn/golden/gpt2_tiny"
CONFIG = {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": 65, "n_positions": 64,
          "n_ctx": 64, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_inner": None, "activation_function": "gelu_new",
          "resid_pdrop": 0.0, "embd_pdrop": 0.0, "attn_pdrop": 0.0, "layer_norm_epsilon": 1e-5,
          "initializer_range": 0.02, "scale_attn_weights": True, "tie_word_embeddings": True,
          "bos_token_id": 50256, "eos_token_id": 50256}
B, T, STEPS = 3, 16, 4
ADAMW = {"lr": 3e-3, "betas": (0.9, 0.99), "eps": 1e-8, "weight_decay": 0.1}


def init_params(gen):
    e, v, p, inner = CONFIG["n_embd"], CONFIG["vocab_size"], CONFIG["n_positions"], 4 * CONFIG["n_embd"]

    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    w = {"transformer.wte.weight": normal(v, e), "transformer.wpe.weight": normal(p, e)}
    for layer in range(CONFIG["n_layer"]):
        h = f"transformer.h.{layer}."
        for ln in ("ln_1", "ln_2"):  # non-trivial norms, so their gradients show
            w[h + ln + ".weight"] = 1 + normal(e, std=0.1)
            w[h + ln + ".bias"] = normal(e, std=0.1)
        for name, (i, o) in {"attn.c_attn": (e, 3 * e), "attn.c_proj": (e, e), "mlp.c_fc": (e, inner),
                             "mlp.c_proj": (inner, e)}.items():
            w[h + name + ".weight"] = normal(i, o)
            w[h + name + ".bias"] = normal(o, std=0.01)
    w["transformer.ln_f.weight"] = 1 + normal(e, std=0.1)
    w["transformer.ln_f.bias"] = normal(e, std=0.1)
    return {k: t.float().requires_grad_() for k, t in w.items()}


def logits_of(cfg, w, ids):
    """GPT-2's logits for transformers' config keys and tensor names (with or without the
    "transformer." prefix; biases optional, as nanoGPT's bias = False; gelu_new or the exact
    gelu; the head tied to wte unless lm_head.weight is given)."""
    w = {k[len("transformer."):] if k.startswith("transformer.") else k: v for k, v in w.items()}
    e, nh = cfg["n_embd"], cfg["n_head"]
    b, t = ids.shape
    d = e // nh
    eps = cfg.get("layer_norm_epsilon", 1e-5)
    ln = lambda x, p: torch.nn.functional.layer_norm(x, (e,), w[p + ".weight"], w.get(p + ".bias"), eps)  # noqa: E731
    conv1d = lambda x, p: x @ w[p + ".weight"] + (w[p + ".bias"] if p + ".bias" in w else 0)  # noqa: E731
    exact = cfg.get("activation_function", "gelu_new") == "gelu"
    x = w["wte.weight"][ids] + w["wpe.weight"][torch.arange(t)]
    mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
    for layer in range(cfg["n_layer"]):
        h = f"h.{layer}."
        q, k, v = conv1d(ln(x, h + "ln_1"), h + "attn.c_attn").split(e, dim=-1)
        heads = lambda z: z.view(b, t, nh, d).transpose(1, 2)  # noqa: E731
        att = torch.softmax(heads(q) @ heads(k).transpose(-1, -2) / math.sqrt(d) + mask, dim=-1)
        x = x + conv1d((att @ heads(v)).transpose(1, 2).reshape(b, t, e), h + "attn.c_proj")
        m = conv1d(ln(x, h + "ln_2"), h + "mlp.c_fc")
        m = torch.nn.functional.gelu(m) if exact else torch.nn.functional.gelu(m, approximate="tanh")
        x = x + conv1d(m, h + "mlp.c_proj")
    return ln(x, "ln_f") @ w.get("lm_head.weight", w["wte.weight"]).t()


def forward(w, ids):
    logits = logits_of(CONFIG, w, ids)
    return logits, shifted_loss(logits, ids)


def main():
    write_golden(OUT, CONFIG, init_params, forward, ADAMW, B, T, STEPS)


if __name__ == "__main__":
    main()
