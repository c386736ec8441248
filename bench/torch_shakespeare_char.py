#!/usr/bin/env python3
"""The PyTorch peer of examples/lm/configs/shakespeare_char.toml (and, with --model llama, of
shakespeare_char_llama.toml: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU): nanoGPT's shakespeare_char
CPU recipe with a GPT-2 written from the architecture (pre-norm blocks, learned positions,
exact GELU as nanoGPT's nn.GELU(), causal attention, the head tied to the token embeddings, no biases, no dropout),
one process with every thread (Debian's python3-torch), the same data (the text's characters,
the first 90 % training), the same schedule (lr 1e-3, 100 warm-up iterations, cosine to 1e-4
at 2,000), AdamW (0.9, 0.99) with weight decay 0.1 on the matrices, clipping at 1, batch 12 x
64, evaluation every 250 iterations over 20 random batches of each split.

Prints each evaluation, the median milliseconds an iteration and the final model's loss over
--final-eval-iters validation batches, and with --json FILE appends one line {"peer":
"pytorch", "best_val_loss", "final_val_loss", "ms_per_iter", "iters", "threads"}.
Usage: python3 bench/torch_shakespeare_char.py [--text FILE] [--max-iters N] [--final-eval-iters N] [--json FILE]
"""
import argparse
import json
import math
import os
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


class LayerNorm(nn.Module):
    """LayerNorm without a bias (nanoGPT's bias=False; torch 1.13's nn.LayerNorm has both or neither)."""

    def __init__(self, e):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(e))

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, 1e-5)


class Block(nn.Module):
    def __init__(self, e, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = LayerNorm(e), LayerNorm(e)
        self.c_attn, self.c_proj = nn.Linear(e, 3 * e, bias=False), nn.Linear(e, e, bias=False)
        self.c_fc, self.mlp_proj = nn.Linear(e, 4 * e, bias=False), nn.Linear(4 * e, e, bias=False)

    def forward(self, x):
        b, t, e = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(e, dim=2)
        heads = lambda z: z.view(b, t, self.h, e // self.h).transpose(1, 2)  # noqa: E731
        att = (heads(q) @ heads(k).transpose(-2, -1)) / math.sqrt(e // self.h)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.c_proj((att @ heads(v)).transpose(1, 2).reshape(b, t, e))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x))))  # nanoGPT's nn.GELU(): the exact one


class RMSNorm(nn.Module):
    def __init__(self, e, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(e)), eps

    def forward(self, x):
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))


def rotary(x, theta=10000.0):  # x [B, heads, T, d], transformers' rotate_half layout
    t, d = x.size(2), x.size(3)
    inv = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
    emb = torch.outer(torch.arange(t, dtype=torch.float32), inv).repeat(1, 2)
    return x * emb.cos() + torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1) * emb.sin()


class LlamaLayer(nn.Module):
    def __init__(self, e, h, kv, m):
        super().__init__()
        self.h, self.kv, self.d = h, kv, e // h
        self.n1, self.n2 = RMSNorm(e), RMSNorm(e)
        self.q, self.k = nn.Linear(e, h * self.d, bias=False), nn.Linear(e, kv * self.d, bias=False)
        self.v, self.o = nn.Linear(e, kv * self.d, bias=False), nn.Linear(h * self.d, e, bias=False)
        self.gate, self.up, self.down = nn.Linear(e, m, bias=False), nn.Linear(e, m, bias=False), nn.Linear(m, e, bias=False)

    def forward(self, x):
        b, t, e = x.shape
        y = self.n1(x)
        q = rotary(self.q(y).view(b, t, self.h, self.d).transpose(1, 2))
        k = rotary(self.k(y).view(b, t, self.kv, self.d).transpose(1, 2)).repeat_interleave(self.h // self.kv, 1)
        v = self.v(y).view(b, t, self.kv, self.d).transpose(1, 2).repeat_interleave(self.h // self.kv, 1)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(self.d)
        att = att.masked_fill(torch.triu(torch.ones(t, t, dtype=torch.bool), 1), float("-inf")).softmax(-1)
        x = x + self.o((att @ v).transpose(1, 2).reshape(b, t, e))
        y = self.n2(x)
        return x + self.down(F.silu(self.gate(y)) * self.up(y))


class Llama(nn.Module):
    """shakespeare-char-llama: 128 wide, 4 layers, 4 heads on 2 key/value heads, SwiGLU 344, untied head."""

    def __init__(self, vocab, e=128, layers=4, h=4, kv=2, m=344):
        super().__init__()
        self.embed = nn.Embedding(vocab, e)
        self.blocks = nn.ModuleList(LlamaLayer(e, h, kv, m) for _ in range(layers))
        self.norm, self.head = RMSNorm(e), nn.Linear(e, vocab, bias=False)
        for p in self.parameters():  # transformers' LLaMA initialization
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets):
        x = self.embed(idx)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.norm(x))
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


class GPT(nn.Module):
    def __init__(self, vocab, block, e=128, layers=4, h=4):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, e), nn.Embedding(block, e)
        self.blocks = nn.ModuleList(Block(e, h) for _ in range(layers))
        self.ln_f = LayerNorm(e)
        for n, p in self.named_parameters():  # transformers' GPT-2 initialization
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers) if n.endswith("proj.weight") else 0.02)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1)))
        for blk in self.blocks:
            x = blk(x)
        logits = self.ln_f(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--text", default=os.path.join(HERE, "..", "..", "shared", "data", "tinyshakespeare", "input.txt"))
    ap.add_argument("--max-iters", type=int, default=2000)
    ap.add_argument("--final-eval-iters", type=int, default=200)
    ap.add_argument("--model", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--seed", type=int, default=1337)
    ap.add_argument("--json", default="")
    a = ap.parse_args()
    torch.manual_seed(a.seed)
    text = open(a.text, "rb").read()
    chars = sorted(set(text))
    data = torch.tensor([chars.index(c) for c in text], dtype=torch.long)
    n = int(len(data) * 0.9)
    splits = {"train": data[:n], "val": data[n:]}
    block, batch, iters = 64, 12, a.max_iters

    def get_batch(split):
        d = splits[split]
        ix = torch.randint(len(d) - block, (batch,))
        return torch.stack([d[i:i + block] for i in ix]), torch.stack([d[i + 1:i + 1 + block] for i in ix])

    model = GPT(len(chars), block) if a.model == "gpt2" else Llama(len(chars))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.99))

    def lr_at(it):  # nanoGPT's get_lr
        if it < 100:
            return 1e-3 * (it + 1) / 100
        r = min(1.0, (it - 100) / (2000 - 100))
        return 1e-4 + 0.5 * (1 + math.cos(math.pi * r)) * (1e-3 - 1e-4)

    @torch.no_grad()
    def estimate(n=20, splits_=("train", "val")):
        model.eval()
        out = {s: sum(model(*get_batch(s)).item() for _ in range(n)) / n for s in splits_}
        model.train()
        return out

    best, times = float("inf"), []
    for it in range(iters):
        for g in opt.param_groups:
            g["lr"] = lr_at(it)
        t0 = time.perf_counter()
        loss = model(*get_batch("train"))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        times.append(time.perf_counter() - t0)
        if (it + 1) % 250 == 0 or it + 1 == iters:
            e = estimate()
            best = min(best, e["val"])
            print(f"step {it + 1}: train loss {e['train']:.4f}, val loss {e['val']:.4f}", flush=True)
    ms = 1000 * statistics.median(times)
    final = estimate(a.final_eval_iters, ("val",))["val"] if a.final_eval_iters > 0 else float("nan")
    print(f"pytorch {torch.__version__}, {torch.get_num_threads()} threads: best val loss {best:.4f}, {ms:.1f} ms/iter "
          f"(median), final val loss {final:.4f} over {a.final_eval_iters} batches")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps({"peer": "pytorch", "model": a.model, "best_val_loss": best, "final_val_loss": final, "ms_per_iter": ms,
                                "iters": iters, "threads": torch.get_num_threads()}) + "\n")


if __name__ == "__main__":
    main()
