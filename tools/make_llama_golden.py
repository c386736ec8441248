#!/usr/bin/env python3
"""Writes tests/nn/golden/llama_tiny/: a PyTorch LLaMA written from the architecture (not
transformers): RMSNorm in f32, rotary embeddings as transformers applies them (inverse
frequencies theta^(-2i/d), cos and sin of cat(freqs, freqs), x cos + rotate_half(x) sin with
rotate_half(x) = cat(-x2, x1)), grouped-query attention (repeat_kv: each key/value head
serves consecutive query heads), causal softmax with 1/sqrt(d) scaling, the SwiGLU MLP
down(silu(gate(x)) * up(x)), an untied head, and transformers' shifted loss. fp32.

Files as tools/make_gpt2_golden.py writes them (config.json, model.safetensors,
input.safetensors, expected.safetensors with logits, loss, grad.<name>, train_losses and
after_adamw.<name>).
Usage: python3 tools/make_llama_golden.py [OUT_DIR]
"""
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from causal_lm_golden import shifted_loss, write_golden  # noqa: E402

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/nn/golden/llama_tiny"
CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 65, "hidden_size": 32,
          "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
          "hidden_act": "silu", "max_position_embeddings": 64, "initializer_range": 0.02, "rms_norm_eps": 1e-6,
          "rope_theta": 500.0, "attention_bias": False, "mlp_bias": False, "tie_word_embeddings": False,
          "bos_token_id": 1, "eos_token_id": 2}
B, T, STEPS = 3, 16, 4
ADAMW = {"lr": 3e-3, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1}


def init_params(gen):
    c = CONFIG
    e, v, m, h, kv = c["hidden_size"], c["vocab_size"], c["intermediate_size"], c["num_attention_heads"], \
        c["num_key_value_heads"]
    d = e // h

    def normal(*shape, std=0.05):
        return torch.randn(*shape, generator=gen) * std

    w = {"model.embed_tokens.weight": normal(v, e, std=0.5)}
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        for norm in ("input_layernorm", "post_attention_layernorm"):  # non-trivial norms, so their gradients show
            w[p + norm + ".weight"] = 1 + normal(e, std=0.1)
        shapes = {"self_attn.q_proj": (h * d, e), "self_attn.k_proj": (kv * d, e), "self_attn.v_proj": (kv * d, e),
                  "self_attn.o_proj": (e, h * d), "mlp.gate_proj": (m, e), "mlp.up_proj": (m, e),
                  "mlp.down_proj": (e, m)}
        for name, shape in shapes.items():
            w[p + name + ".weight"] = normal(*shape, std=0.2)
    w["model.norm.weight"] = 1 + normal(e, std=0.1)
    w["lm_head.weight"] = normal(v, e, std=0.2)
    return {k: t.float().requires_grad_() for k, t in w.items()}


def rms(x, weight):
    return weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + CONFIG["rms_norm_eps"]))


def rotary(x, t, d):  # x [B, heads, T, d]
    inv = 1.0 / (CONFIG["rope_theta"] ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    freqs = torch.outer(torch.arange(t, dtype=torch.float32), inv)
    emb = torch.cat((freqs, freqs), dim=-1)
    half = d // 2
    rotate_half = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * emb.cos() + rotate_half * emb.sin()


def forward(w, ids):
    c = CONFIG
    e, h, kv = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    b, t = ids.shape
    d = e // h
    x = w["model.embed_tokens.weight"][ids]
    mask = torch.triu(torch.full((t, t), float("-inf")), diagonal=1)
    for layer in range(c["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        lin = lambda z, n: z @ w[p + n + ".weight"].t()  # noqa: E731
        y = rms(x, w[p + "input_layernorm.weight"])
        q = rotary(lin(y, "self_attn.q_proj").view(b, t, h, d).transpose(1, 2), t, d)
        k = rotary(lin(y, "self_attn.k_proj").view(b, t, kv, d).transpose(1, 2), t, d)
        v = lin(y, "self_attn.v_proj").view(b, t, kv, d).transpose(1, 2)
        k, v = k.repeat_interleave(h // kv, dim=1), v.repeat_interleave(h // kv, dim=1)  # repeat_kv
        att = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(d) + mask, dim=-1)
        x = x + lin((att @ v).transpose(1, 2).reshape(b, t, e), "self_attn.o_proj")
        y = rms(x, w[p + "post_attention_layernorm.weight"])
        x = x + lin(torch.nn.functional.silu(lin(y, "mlp.gate_proj")) * lin(y, "mlp.up_proj"), "mlp.down_proj")
    logits = rms(x, w["model.norm.weight"]) @ w["lm_head.weight"].t()
    return logits, shifted_loss(logits, ids)


def main():
    write_golden(OUT, CONFIG, init_params, forward, ADAMW, B, T, STEPS)


if __name__ == "__main__":
    main()
