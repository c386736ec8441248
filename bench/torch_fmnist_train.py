#!/usr/bin/env python3
"""PyTorch peer of vit_train's Fashion-MNIST recipes (the small-batch baseline and the
large-batch one), mirroring a vit_train run folder: same model shape, data, augmentation,
optimizer, schedule, accumulation, clipping and label smoothing, in one process with as many
intra-op threads as the run had in all (what a PyTorch user runs on the same cores).

Model: a Hugging Face-layout ViT (pre-norm blocks, LayerNorm eps 1e-12, exact GELU, class
token, learned positions, the head on the final norm's class token) of the run's preset,
with Hugging Face's initialization. Data: Debian's dataset-fashion-mnist IDX files, the
first data.limit images when set; RandomCrop(28, padding=4) + RandomHorizontalFlip, then
Normalize(0.2860, 0.3530). The random draws (initialization, order, augmentation) are
PyTorch's, not vit_train's: compare across seeds. Optimizers: torch's AdamW, or LAMB as
legacy Colossal-AI's (trust |w| / |u| per tensor, 1 when a norm is 0), with the run's betas,
eps, bias correction and exclusion of biases and norms from the trust ratio;
schedules per optimizer step as Colossal-AI's CosineAnnealingWarmupLR / LinearWarmupLR.

Prints one JSON line per epoch, then a table against the run's metrics.jsonl and a summary.
Usage: torch_fmnist_train.py --run runs/fashion_mnist [--seed S] [--max-epochs N]
"""
import argparse, gzip, json, math, os, sys, time, tomllib

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_beans_train import compare, hf_init  # noqa: E402  (the beans peer's, shared)

PRESETS = {"vit-fashion-mnist": dict(d=64, L=4, h=4, mlp=128, p=7, ch=1)}
MEAN, STD = 0.2860, 0.3530


def read_idx(path):
    with (gzip.open(path) if path.endswith(".gz") else open(path, "rb")) as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(root, train, limit):
    split = "train" if train else "t10k"
    x = read_idx(os.path.join(root, f"{split}-images-idx3-ubyte.gz"))
    y = read_idx(os.path.join(root, f"{split}-labels-idx1-ubyte.gz"))
    if limit:
        x, y = x[:limit], y[:limit]
    return torch.from_numpy(x.astype(np.float32) / 255.0).unsqueeze(1), torch.from_numpy(y.astype(np.int64))


def augment(x, gen):
    """RandomCrop(28, padding=4) and RandomHorizontalFlip per image, on a batch [B, 1, H, W]."""
    b, _, h, w = x.shape
    padded = F.pad(x, (4, 4, 4, 4))[:, 0]
    top = torch.randint(0, 9, (b, 1), generator=gen)
    left = torch.randint(0, 9, (b, 1), generator=gen)
    flip = torch.rand(b, 1, generator=gen) < 0.5
    rows = top + torch.arange(h)
    cols = left + torch.where(flip, torch.arange(w - 1, -1, -1), torch.arange(w))
    return padded[torch.arange(b)[:, None, None], rows[:, :, None], cols[:, None, :]].unsqueeze(1)


class Block(nn.Module):
    def __init__(s, d, h, mlp):
        super().__init__()
        s.h = h
        s.ln1, s.qkv, s.proj = nn.LayerNorm(d, eps=1e-12), nn.Linear(d, 3 * d), nn.Linear(d, d)
        s.ln2, s.fc1, s.fc2 = nn.LayerNorm(d, eps=1e-12), nn.Linear(d, mlp), nn.Linear(mlp, d)

    def forward(s, x):
        B, T, D = x.shape
        q, k, v = s.qkv(s.ln1(x)).view(B, T, 3, s.h, D // s.h).permute(2, 0, 3, 1, 4)
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2's fused attention
            a = F.scaled_dot_product_attention(q, k, v)
        else:
            a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D // s.h), -1) @ v
        x = x + s.proj(a.transpose(1, 2).reshape(B, T, D))
        return x + s.fc2(F.gelu(s.fc1(s.ln2(x))))


class ViT(nn.Module):
    def __init__(s, d, L, h, mlp, p, ch, img, ncls):
        super().__init__()
        s.patch = nn.Conv2d(ch, d, p, p)
        s.cls = nn.Parameter(torch.zeros(1, 1, d))
        s.pos = nn.Parameter(torch.zeros(1, (img // p) ** 2 + 1, d))
        s.blocks = nn.ModuleList([Block(d, h, mlp) for _ in range(L)])
        s.ln, s.head = nn.LayerNorm(d, eps=1e-12), nn.Linear(d, ncls)

    def forward(s, x):
        x = s.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([s.cls.expand(x.shape[0], -1, -1), x], 1) + s.pos
        for b in s.blocks:
            x = b(x)
        return s.head(s.ln(x)[:, 0])


class Lamb(torch.optim.Optimizer):
    """Legacy Colossal-AI's Lamb: u = m / (sqrt(v) + eps) + wd w, w -= lr' trust u, with
    lr' = lr sqrt(1 - b2^t) / (1 - b1^t) under bias correction; a group with adam=True
    (vit_train's train.exclude_from_layer_adaptation: biases and norms) takes trust 1."""

    def __init__(s, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, bias_correction=False,
                 adam=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay,
                                      bias_correction=bias_correction, adam=adam))

    @torch.no_grad()
    def step(s):
        for g in s.param_groups:
            b1, b2 = g["betas"]
            for p in g["params"]:
                if p.grad is None:
                    continue
                st = s.state[p]
                if not st:
                    st["m"], st["v"], st["t"] = torch.zeros_like(p), torch.zeros_like(p), 0
                st["t"] += 1
                st["m"].mul_(b1).add_(p.grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
                u = st["m"] / (st["v"].sqrt() + g["eps"]) + g["weight_decay"] * p
                wn, un = p.norm().item(), u.norm().item()
                trust = wn / un if wn > 0 and un > 0 and not g["adam"] else 1.0
                lr = g["lr"] * (math.sqrt(1 - b2 ** st["t"]) / (1 - b1 ** st["t"]) if g["bias_correction"] else 1.0)
                p.add_(u, alpha=-lr * trust)


def test_accuracy(model, vx, vy):
    """Accuracy over the test images, normalized as in training, in eval mode."""
    model.eval()
    with torch.no_grad():
        pred = torch.cat([model((vx[i:i + 1000] - MEAN) / STD).argmax(-1) for i in range(0, len(vx), 1000)])
    return (pred == vy).float().mean().item()


def schedule(name, total, warmup):
    if name == "cosine_warmup":  # CosineAnnealingWarmupLR: base (t+1)/W, then cosine to 0
        return lambda t: (t + 1) / warmup if t < warmup else 0.5 * (1 + math.cos(math.pi * (t - warmup) / max(1, total - warmup)))
    return lambda t: (t + 1) / (warmup + 1) if t < warmup else (total - t) / max(1, total - warmup)  # LinearWarmupLR


def settings(run):
    with open(os.path.join(run, "config.toml"), "rb") as f:
        c = tomllib.load(f)
    runs = [json.loads(l) for l in open(os.path.join(run, "metrics.jsonl")) if '"type":"run"' in l]
    if not runs:
        sys.exit(f"{run}/metrics.jsonl has no run record")
    if c["data"]["dataset"] != "fashion_mnist" or c["model"]["preset"] not in PRESETS:
        sys.exit(f"{run}: not a Fashion-MNIST run of a preset the peer knows ({', '.join(PRESETS)})")
    if c["train"]["mixup_alpha"] > 0 or c["train"]["optimizer"] not in ("adamw", "lamb"):
        sys.exit(f"{run}: the peer mirrors AdamW or LAMB without Mixup")
    return c, runs[-1]["world_size"], runs[-1]["threads_per_rank"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--run", required=True, help="a vit_train run folder on Fashion-MNIST")
    ap.add_argument("--seed", type=int, default=None, help="default: the run's train.seed")
    ap.add_argument("--max-epochs", type=int, default=0, help="stop after N epochs (the schedule keeps its length)")
    a = ap.parse_args()
    c, world, threads = settings(a.run)
    t, m, d = c["train"], c["model"], c["data"]
    seed = t["seed"] if a.seed is None else a.seed
    torch.set_num_threads(world * threads)
    torch.manual_seed(seed)
    gen = torch.Generator().manual_seed(seed)
    root = d["root"] or "/usr/share/datasets/fashion-mnist"
    tx, ty = load(root, True, d["limit"])
    vx, vy = load(root, False, d["limit"])
    k, per_rank = t["gradient_accumulation"], t["batch_size"]
    batch = per_rank * world  # one micro-step of the global batch; k of them make a step
    lr = t["lr"] * (world if t["lr_scaling"] == "dp" else 1)
    cfg = PRESETS[m["preset"]]
    model = ViT(cfg["d"], cfg["L"], cfg["h"], cfg["mlp"], cfg["p"], cfg["ch"], m["image_size"], 10)
    hf_init(model)
    decay = [p for p in model.parameters() if p.ndim > 1]
    groups = [{"params": decay, "weight_decay": t["weight_decay"]},
              {"params": [p for p in model.parameters() if p.ndim <= 1], "weight_decay": 0.0}]
    betas = tuple(t.get("betas", (0.9, 0.999)))
    if t["optimizer"] == "adamw":
        opt = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=t.get("eps", 0.0) or 1e-8)
    else:
        groups[1]["adam"] = t.get("exclude_from_layer_adaptation", False)
        opt = Lamb(groups, lr=lr, betas=betas, eps=t.get("eps", 0.0) or 1e-6,
                   bias_correction=t.get("bias_correction", False))
    steps_per_epoch = (len(tx) // batch) // k
    total = t["epochs"] * steps_per_epoch
    sched = torch.optim.lr_scheduler.LambdaLR(opt, schedule(t["lr_scheduler"], total, int(total * t["warmup_ratio"])))
    print(json.dumps({"event": "mirror", "run": a.run, "threads": world * threads, "global_batch": batch * k,
                      "optimizer": t["optimizer"], "lr": lr, "steps_per_epoch": steps_per_epoch, "seed": seed}), flush=True)
    peer_epochs = []
    for epoch in range(a.max_epochs or t["epochs"]):
        model.train()
        start = time.perf_counter()
        order = torch.randperm(len(tx), generator=gen)
        loss_sum, n = 0.0, 0
        for s in range(steps_per_epoch * k):
            idx = order[s * batch:(s + 1) * batch]
            x = augment(tx[idx], gen) if d["augment"] else tx[idx]
            x = (x - MEAN) / STD
            loss = F.cross_entropy(model(x), ty[idx], label_smoothing=t["label_smoothing"])
            (loss / k).backward()
            loss_sum, n = loss_sum + loss.item(), n + 1
            if (s + 1) % k:
                continue
            if t["max_norm"] > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), t["max_norm"])
            opt.step()
            opt.zero_grad()
            sched.step()
        train_s = time.perf_counter() - start
        acc = test_accuracy(model, vx, vy)
        peer_epochs.append({"event": "epoch", "epoch": epoch + 1, "train_s": round(train_s, 2),
                            "img_s": round(n * batch / train_s, 1), "train_loss": round(loss_sum / n, 4),
                            "val_accuracy": round(acc, 4)})
        print(json.dumps(peer_epochs[-1]), flush=True)
    compare(a.run, peer_epochs)


if __name__ == "__main__":
    main()
