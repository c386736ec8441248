#!/usr/bin/env python3
"""PyTorch peer of the flagship job: the same ViT shape trained the same way on beans.

One process with --threads intra-op threads (what a PyTorch user runs on the same cores),
global batch = vit_train's batch_size x ranks, lr already multiplied by the world size.
Model: ../shared/bench/torch_vit_bench.py's ViT (the benchmark peer) at --image-size, with
Hugging Face's initialization (truncated normal 0.02, zero biases). Data: the ImageFolder
splits decoded once with PIL (vit_train caches decoded images too), RandomResizedCrop +
RandomHorizontalFlip with torchvision's algorithm, HF normalization (mean = std = 0.5).
Optimizer AdamW, linear warm-up then cosine to 0 per step (Colossal-AI's
CosineAnnealingWarmupLR), cross entropy with label smoothing.

Prints one JSON line per epoch: train time (s), images/s, train loss, validation accuracy.
Usage: torch_beans_train.py --data DIR --image-size 112 --batch 32 --lr 1e-3 --epochs 10 ...
   or: torch_beans_train.py --run runs/beans_small   (the settings of a vit_train run folder:
       its config.toml and launch shape; afterwards a side-by-side table of epoch times and
       accuracy against that run's metrics.jsonl, and a JSON summary line)
"""
import argparse, json, math, os, random, statistics, sys, time, tomllib

import torch
import torch.nn as nn
import torch.nn.functional as F
from PIL import Image

CLASSES_EXT = (".jpg", ".jpeg", ".png")


def load_split(root, split, size=None, limit=0):
    """[(PIL RGB image, label)] and class names; images resized to `size` when given;
    `limit` keeps N images spread over the split as vit_train's data.limit does."""
    d = os.path.join(root, split)
    classes = sorted(c for c in os.listdir(d) if os.path.isdir(os.path.join(d, c)))
    files = [(os.path.join(d, c, f), label) for label, c in enumerate(classes)
             for f in sorted(os.listdir(os.path.join(d, c))) if f.lower().endswith(CLASSES_EXT)]
    if 0 < limit < len(files):
        files = files[::len(files) // limit][:limit]
    items = []
    for path, label in files:
        img = Image.open(path).convert("RGB")
        items.append((img.resize((size, size), Image.BILINEAR) if size else img, label))
    return items, classes


def random_resized_crop_box(w, h, scale, rng):
    """torchvision.transforms.RandomResizedCrop.get_params: (left, top, width, height)."""
    area = w * h
    log_ratio = (math.log(3 / 4), math.log(4 / 3))
    for _ in range(10):
        target = area * rng.uniform(scale, 1.0)
        ar = math.exp(rng.uniform(*log_ratio))
        cw, ch = int(round(math.sqrt(target * ar))), int(round(math.sqrt(target / ar)))
        if 0 < cw <= w and 0 < ch <= h:
            return rng.randint(0, w - cw), rng.randint(0, h - ch), cw, ch
    ratio = w / h
    if ratio < 3 / 4:
        cw, ch = w, int(round(w / (3 / 4)))
    elif ratio > 4 / 3:
        ch, cw = h, int(round(h * (4 / 3)))
    else:
        cw, ch = w, h
    return (w - cw) // 2, (h - ch) // 2, cw, ch


def to_tensor(img):
    t = torch.frombuffer(bytearray(img.tobytes()), dtype=torch.uint8).view(img.size[1], img.size[0], 3)
    return (t.permute(2, 0, 1).float() / 255.0 - 0.5) / 0.5


class Train(torch.utils.data.Dataset):
    def __init__(s, items, size, augment, crop_scale_min, seed):
        s.items, s.size, s.augment, s.scale, s.seed = items, size, augment, crop_scale_min, seed
        s.epoch = 0

    def __len__(s):
        return len(s.items)

    def __getitem__(s, i):
        img, label = s.items[i]
        if s.augment:
            rng = random.Random(s.seed * 1_000_003 + s.epoch * 10_007 + i)
            l, t, cw, ch = random_resized_crop_box(img.size[0], img.size[1], s.scale, rng)
            img = img.resize((s.size, s.size), Image.BILINEAR, box=(l, t, l + cw, t + ch))
            if rng.random() < 0.5:
                img = img.transpose(Image.FLIP_LEFT_RIGHT)
        elif img.size != (s.size, s.size):
            img = img.resize((s.size, s.size), Image.BILINEAR)
        return to_tensor(img), label


def settings_from_run(a):
    """Overrides the arguments with a vit_train run's config.toml and launch shape."""
    with open(os.path.join(a.run, "config.toml"), "rb") as f:
        c = tomllib.load(f)
    runs = [json.loads(l) for l in open(os.path.join(a.run, "metrics.jsonl")) if '"type":"run"' in l]
    if not runs:
        sys.exit(f"{a.run}/metrics.jsonl has no run record (written by vit_train at start)")
    world, threads = runs[-1]["world_size"], runs[-1]["threads_per_rank"]
    m, t, d = c["model"], c["train"], c["data"]
    unsupported = {"model.pretrained": m["pretrained"] != "", "model.hidden_dropout_prob": m["hidden_dropout_prob"] > 0,
                   "train.mixup_alpha": t["mixup_alpha"] > 0,
                   "booster.mixed_precision = fp16": c["booster"]["mixed_precision"] == "fp16"}
    bad = [k for k, v in unsupported.items() if v]
    if bad:
        sys.exit(f"{a.run}/config.toml: the peer does not mirror {', '.join(bad)}")
    a.model = m["preset"].removeprefix("vit-")
    a.image_size, a.epochs, a.seed = m["image_size"], t["epochs"], t["seed"]
    a.patch_size = m["patch_size"] or (14 if a.model == "huge" else 16)
    a.batch, a.lr = t["batch_size"] * world, t["lr"] * world
    a.warmup_ratio, a.weight_decay, a.label_smoothing = t["warmup_ratio"], t["weight_decay"], t["label_smoothing"]
    a.max_norm = t["max_norm"]
    a.crop_scale_min, a.no_augment, a.no_shuffle = d["crop_scale_min"], not d["augment"], not d["shuffle"]
    a.data, a.limit = d["root"] or a.data, d["limit"]
    a.train_split, a.val_split = d["train_split"], d["val_split"]
    a.bf16 = c["booster"]["mixed_precision"] == "bf16"
    a.threads, a.workers = world * threads, d["num_workers"]
    return world, threads


def compare(run, peer_epochs):
    """Prints ours vs the peer per epoch and a JSON summary (median epoch time ratio)."""
    ours = {}
    for l in open(os.path.join(run, "metrics.jsonl")):
        r = json.loads(l)
        if r.get("type") == "epoch":
            ours[r["epoch"]] = r
    print(f"{'epoch':>5} {'ours s':>8} {'peer s':>8} {'speed-up':>8} {'ours acc':>9} {'peer acc':>9}")
    for p in peer_epochs:
        o = ours.get(p["epoch"])
        if o:
            print(f"{p['epoch']:>5} {o['epoch_seconds']:>8.1f} {p['train_s']:>8.1f} {p['train_s'] / o['epoch_seconds']:>7.2f}x"
                  f" {o['val_accuracy']:>9.4f} {p['val_accuracy']:>9.4f}")
    common = [e["epoch"] for e in peer_epochs if e["epoch"] in ours]
    if not common:
        return
    ours_s = statistics.median(ours[e]["epoch_seconds"] for e in common)
    peer_s = statistics.median(e["train_s"] for e in peer_epochs if e["epoch"] in ours)
    print(json.dumps({"event": "summary", "run": run, "epochs": len(common), "ours_median_epoch_s": round(ours_s, 2),
                      "peer_median_epoch_s": round(peer_s, 2), "speedup": round(peer_s / ours_s, 3),
                      "ours_best_accuracy": round(max(o["val_accuracy"] for o in ours.values()), 4),
                      "peer_best_accuracy": round(max(e["val_accuracy"] for e in peer_epochs), 4)}), flush=True)


def hf_init(model):
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)):
            nn.init.trunc_normal_(m.weight, std=0.02)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    nn.init.trunc_normal_(model.cls, std=0.02)
    nn.init.trunc_normal_(model.pos, std=0.02)


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--shared", default=os.path.join(here, "..", "..", "shared"))
    ap.add_argument("--data", default=None, help="ImageFolder root (default: <shared>/data/beans)")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--image-size", type=int, default=112)
    ap.add_argument("--patch-size", type=int, default=16)
    ap.add_argument("--batch", type=int, default=32, help="global batch")
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup-ratio", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--label-smoothing", type=float, default=0.1)
    ap.add_argument("--crop-scale-min", type=float, default=0.08)
    ap.add_argument("--no-augment", action="store_true")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--bf16", action="store_true", help="torch.autocast bf16")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--max-norm", type=float, default=0.0, help="gradient clipping (0: off)")
    ap.add_argument("--no-shuffle", action="store_true")
    ap.add_argument("--train-split", default="train")
    ap.add_argument("--val-split", default="validation")
    ap.add_argument("--limit", type=int, default=0, help="N images of each split, spread over it (0: all)")
    ap.add_argument("--run", default=None, help="mirror this vit_train run folder and compare with it")
    ap.add_argument("--max-epochs", type=int, default=0, help="stop after N epochs (the schedule keeps its length)")
    a = ap.parse_args()
    if a.run:
        world, threads = settings_from_run(a)
        print(json.dumps({"event": "mirror", "run": a.run, "ranks": world, "threads_per_rank": threads,
                          "peer_threads": a.threads, "global_batch": a.batch, "lr": a.lr, "image_size": a.image_size,
                          "precision": "bf16" if a.bf16 else "fp32"}), flush=True)

    sys.path.insert(0, os.path.join(a.shared, "bench"))
    from torch_vit_bench import CFG, ViT, fwd_flops  # the benchmark peer's model

    if a.model not in CFG:
        sys.exit(f"the peer model has no preset '{a.model}' (has {', '.join(CFG)})")
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    root = a.data or os.path.join(a.shared, "data", "beans")
    t0 = time.perf_counter()
    train_items, classes = load_split(root, a.train_split, limit=a.limit)
    val_items, _ = load_split(root, a.val_split, a.image_size, a.limit)
    print(json.dumps({"event": "data", "train": len(train_items), "validation": len(val_items),
                      "classes": classes, "decode_s": round(time.perf_counter() - t0, 2)}), flush=True)

    d, L, h = CFG[a.model]
    model = ViT(d, L, h, img=a.image_size, p=a.patch_size, ncls=len(classes))
    hf_init(model)
    decay = [p for n, p in model.named_parameters() if p.ndim > 1 and n not in ("cls", "pos")]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim > 1 and n not in ("cls", "pos"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=a.lr)
    train = Train(train_items, a.image_size, not a.no_augment, a.crop_scale_min, a.seed)
    loader = torch.utils.data.DataLoader(train, batch_size=a.batch, shuffle=not a.no_shuffle, drop_last=True,
                                         num_workers=a.workers, persistent_workers=a.workers > 0,
                                         worker_init_fn=lambda _: torch.set_num_threads(1))
    total = a.epochs * len(loader)
    warmup = int(a.warmup_ratio * total)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: (s + 1) / max(1, warmup) if s < warmup
        else 0.5 * (1 + math.cos(math.pi * (s - warmup) / max(1, total - warmup))))
    val_x = torch.stack([to_tensor(img) for img, _ in val_items])
    val_y = torch.tensor([y for _, y in val_items])
    flops = 3 * fwd_flops(d, L, a.image_size, a.patch_size)

    peer_epochs = []
    for epoch in range(a.max_epochs or a.epochs):
        model.train()
        train.epoch = epoch
        t = time.perf_counter()
        loss_sum, n = 0.0, 0
        for x, y in loader:
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
                loss = F.cross_entropy(model(x), y, label_smoothing=a.label_smoothing)
            opt.zero_grad()
            loss.backward()
            if a.max_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), a.max_norm)
            opt.step()
            sched.step()
            loss_sum += loss.item()
            n += 1
        train_s = time.perf_counter() - t
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            pred = torch.cat([model(val_x[i:i + 64]).argmax(-1) for i in range(0, len(val_x), 64)])
        acc = (pred == val_y).float().mean().item()
        ips = n * a.batch / train_s
        peer_epochs.append({"event": "epoch", "epoch": epoch + 1, "train_s": round(train_s, 2),
                            "epoch_s": round(time.perf_counter() - t, 2), "img_s": round(ips, 2),
                            "model_GFLOP_s": round(flops * ips / 1e9, 1), "train_loss": round(loss_sum / n, 4),
                            "val_accuracy": round(acc, 4), "precision": "bf16" if a.bf16 else "fp32"})
        print(json.dumps(peer_epochs[-1]), flush=True)
    if a.run:
        compare(a.run, peer_epochs)


if __name__ == "__main__":
    main()
