#!/usr/bin/env python3
"""The gradient noise scale of a trained Fashion-MNIST ViT (McCandlish et al., 2018, "An
Empirical Model of Large-Batch Training", appendix A): how large a batch can grow before it
stops saving optimizer steps. At fixed weights, with G_b the gradient of a batch of b
training images (augmented as in training, the run's label smoothing):

    |G|^2 ~ (B |G_B|^2 - b |G_b|^2) / (B - b)      tr(S) ~ (|G_b|^2 - |G_B|^2) / (1/b - 1/B)
    B_simple = tr(S) / |G|^2

with b the small batch and B the large one (8,192 = 32 batches of 256: |G_b|^2 averaged over
the 32, G_B their mean), both averaged over --repeats disjoint sets before the ratio. The
empirical model then says a batch B takes (1 + B / B_simple) times the fewest images to reach
a loss, and 1 + B_simple / B times the fewest steps.

The weights are a vit_train checkpoint (step folder) of the vit-fashion-mnist preset,
exported by the build's export_hf and loaded into the PyTorch peer's model
(torch_fmnist_train.py); the test accuracy is printed to show they loaded whole.
Usage: fmnist_noise_scale.py --build build CHECKPOINT... [--small 256] [--large 8192] [--repeats 4]
"""
import argparse, json, os, struct, subprocess, sys, tempfile

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_fmnist_train import MEAN, PRESETS, STD, ViT, augment, load, test_accuracy  # noqa: E402


def read_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        if t["dtype"] != "F32":
            sys.exit(f"{path}: {name} is {t['dtype']}, expected F32")
        b, e = t["data_offsets"]
        out[name] = torch.from_numpy(np.frombuffer(data[b:e], np.float32).copy()).reshape(t["shape"])
    return out


def load_model(build, step_dir):
    cfg_json = json.load(open(os.path.join(step_dir, "config.json")))
    d, L = cfg_json["hidden_size"], cfg_json["num_hidden_layers"]
    preset = PRESETS["vit-fashion-mnist"]
    if (d, L, cfg_json["num_attention_heads"], cfg_json["patch_size"]) != (preset["d"], preset["L"], preset["h"], preset["p"]):
        sys.exit(f"{step_dir}: not the vit-fashion-mnist preset")
    with tempfile.TemporaryDirectory() as out:
        subprocess.run([os.path.join(build, "tools", "export_hf"), step_dir, out], check=True, stdout=subprocess.DEVNULL)
        w = read_safetensors(os.path.join(out, "model.safetensors"))
    model = ViT(d, L, preset["h"], preset["mlp"], preset["p"], preset["ch"], cfg_json["image_size"], cfg_json["num_labels"])
    e, sd = "vit.embeddings.", {}
    sd["patch.weight"], sd["patch.bias"] = w[e + "patch_embeddings.projection.weight"], w[e + "patch_embeddings.projection.bias"]
    sd["cls"], sd["pos"] = w[e + "cls_token"], w[e + "position_embeddings"]
    for i in range(L):
        p, q = f"vit.encoder.layer.{i}.", f"blocks.{i}."
        for kind in ("weight", "bias"):
            sd[q + "qkv." + kind] = torch.cat([w[p + f"attention.attention.{n}.{kind}"] for n in ("query", "key", "value")])
            for ours, theirs in (("proj", "attention.output.dense"), ("fc1", "intermediate.dense"), ("fc2", "output.dense"),
                                 ("ln1", "layernorm_before"), ("ln2", "layernorm_after")):
                sd[q + ours + "." + kind] = w[p + theirs + "." + kind]
    for kind in ("weight", "bias"):
        sd["ln." + kind], sd["head." + kind] = w["vit.layernorm." + kind], w["classifier." + kind]
    model.load_state_dict(sd, strict=True)
    return model


def grad_sq_norms(model, x, y, small, smoothing):
    """|G_b|^2 averaged over the batches of `small` in x, and |G_B|^2 of their mean."""
    total, sq = None, 0.0
    for i in range(0, len(x), small):
        model.zero_grad()
        F.cross_entropy(model(x[i:i + small]), y[i:i + small], label_smoothing=smoothing).backward()
        g = torch.cat([p.grad.flatten() for p in model.parameters()])
        sq += float(g @ g)
        total = g.clone() if total is None else total + g
    k = len(x) // small
    mean = total / k
    return sq / k, float(mean @ mean)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("checkpoints", nargs="+", help="vit_train step folders (runs/<name>/checkpoints/step-N)")
    ap.add_argument("--build", default="build")
    ap.add_argument("--small", type=int, default=256)
    ap.add_argument("--large", type=int, default=8192)
    ap.add_argument("--repeats", type=int, default=4)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.large % a.small or a.large <= a.small:
        sys.exit("--large must be a multiple of --small, and larger")
    root = "/usr/share/datasets/fashion-mnist"
    tx, ty = load(root, True, 0)
    vx, vy = load(root, False, 0)
    if a.repeats * a.large > len(tx):
        sys.exit(f"--repeats {a.repeats} x --large {a.large} is more than the {len(tx)} training images")
    for step_dir in a.checkpoints:
        model = load_model(a.build, step_dir)
        acc = test_accuracy(model, vx, vy)
        model.train()
        gen = torch.Generator().manual_seed(a.seed)
        order = torch.randperm(len(tx), generator=gen)
        small_sq, large_sq = 0.0, 0.0
        for r in range(a.repeats):
            idx = order[r * a.large:(r + 1) * a.large]
            x = (augment(tx[idx], gen) - MEAN) / STD
            s, l = grad_sq_norms(model, x, ty[idx], a.small, a.label_smoothing)
            small_sq, large_sq = small_sq + s / a.repeats, large_sq + l / a.repeats
        b, B = a.small, a.large
        g2 = (B * large_sq - b * small_sq) / (B - b)
        trace = (small_sq - large_sq) / (1 / b - 1 / B)
        bn = trace / g2 if g2 > 0 else float("inf")
        print(json.dumps({"checkpoint": step_dir, "test_accuracy": round(acc, 4), "grad_sq_small": small_sq,
                          "grad_sq_large": large_sq, "G2": g2, "trace_sigma": trace, "B_simple": round(bn, 1),
                          "epochs_factor_large_over_small": round((1 + B / bn) / (1 + b / bn), 2)}), flush=True)


if __name__ == "__main__":
    main()
