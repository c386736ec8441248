#!/usr/bin/env python3
"""Writes tests/optim/golden/adamw_near_zero.safetensors: PyTorch's AdamW on gradients that
are mostly near zero, where Adam magnifies rounding (an element whose gradient is tiny moves
by about lr whatever its rounding noise), so the order of operations shows.

Two parameters of shapes unlike the shared ViT golden cases ([333] without weight decay,
[96, 70] with it), 6 steps, one gradient per step: 45 % of the elements near zero (1e-10 to
1e-6), 10 % exactly zero, the rest N(0, 1e-3). PyTorch's single-tensor AdamW (foreach off,
as torch.optim.AdamW on CPU in 1.13), fp32.

Tensors: param.<name> (initial), grad.<step>.<name>, after_adamw.<name>; the metadata holds
the hyperparameters. Usage: python3 tools/make_adamw_golden.py [OUT]
"""
import json
import struct
import sys

import torch

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/optim/golden/adamw_near_zero.safetensors"
LR, BETAS, EPS, WD, STEPS = 1e-3, (0.9, 0.999), 1e-8, 0.05, 6
SHAPES = {"norm.bias": [333], "dense.weight": [96, 70]}
DECAY = {"norm.bias": 0.0, "dense.weight": WD}


def gradient(shape, gen):
    n = int(torch.tensor(shape).prod())
    g = torch.randn(n, generator=gen) * 1e-3
    kind = torch.rand(n, generator=gen)
    tiny = torch.exp(torch.empty(n).uniform_(-23.0, -13.8, generator=gen))  # 1e-10 .. 1e-6
    sign = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0)
    g = torch.where(kind < 0.45, tiny * sign, g)
    g = torch.where((kind >= 0.45) & (kind < 0.55), torch.zeros(n), g)
    return g.view(shape)


def save(path, tensors, metadata):
    """A safetensors file of F32 and I64 tensors (the golden files' writer, shared)."""
    header, blobs, offset = {"__metadata__": metadata}, [], 0
    for name, t in tensors.items():
        data = t.contiguous().numpy().tobytes()
        dtype = {torch.float32: "F32", torch.int64: "I64"}[t.dtype]
        header[name] = {"dtype": dtype, "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def main():
    gen = torch.Generator().manual_seed(20261126)
    out = {}
    params = {}
    for name, shape in SHAPES.items():
        params[name] = torch.nn.Parameter(torch.randn(shape, generator=gen) * 0.02)
        out["param." + name] = params[name].detach().clone()
    groups = [{"params": [params[n]], "weight_decay": DECAY[n]} for n in SHAPES]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=EPS, foreach=False)
    for step in range(STEPS):
        for name, shape in SHAPES.items():
            g = gradient(shape, gen)
            out[f"grad.{step}.{name}"] = g.clone()
            params[name].grad = g
        opt.step()
    for name in SHAPES:
        out["after_adamw." + name] = params[name].detach().clone()
    meta = {"torch": torch.__version__, "lr": repr(LR), "beta1": repr(BETAS[0]), "beta2": repr(BETAS[1]),
            "eps": repr(EPS), "steps": str(STEPS), "weight_decay": json.dumps(DECAY)}
    save(OUT, out, meta)
    print(f"wrote {OUT}: {len(out)} tensors, torch {torch.__version__}")


if __name__ == "__main__":
    main()
