#!/usr/bin/env python3
"""The PyTorch peer of bench/lm_benchmark: a GPT-2 training step (forward, backward, AdamW) in
one process with every thread it is given (Debian's python3-torch), the model written from
the architecture as llm.c trains it (learned positions, pre-norm blocks with biases, the tanh
GELU, causal attention, the head tied to the token embeddings, no dropout) and llm.c's
optimizer (AdamW lr 1e-4, betas 0.9 / 0.999, eps 1e-8, no weight decay).

Weights: --init FILE reads llm.c's gpt2_124M.bin layout (a 256-int32 header: magic 20240326,
version 3, max_seq_len, vocab_size, num_layers, num_heads, channels, padded_vocab_size; fp32
tensors in llm.c's order, linears [out, in]); otherwise normal(0, 0.02) from --seed.
Tokens: --tokens FILE reads llm.c's token file (a 256-int32 header: magic 20240520, version 1,
the count; uint16 tokens) in consecutive batches of B*T+1 tokens as llm.c's loader without
shuffling; otherwise random ids from --seed.

Prints "step N: train loss X (took Y ms)" for each step (llm.c's line) and a last line
"step_s=S tokens_s=R peak_rss_mb=M loss=L" (S the median step after the first, L the last
step's loss). --bf16 runs the step under torch.autocast(bfloat16) (its oneDNN path).
--ddp N runs N processes (torch.multiprocessing, each with --threads threads and its own
--batch rows of random tokens) under DistributedDataParallel over gloo: the step times are rank
0's, tokens_s counts every rank's tokens, peak_rss_mb is the largest rank's.
Usage: python3 bench/torch_lm_bench.py --batch 4 --seq 256 --steps 5 [--init F] [--tokens F] [--threads N] [--bf16] [--ddp N]
"""
import argparse
import math
import os
import resource
import socket
import statistics
import struct
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

SHAPES = {"gpt2": (50257, 1024, 12, 12, 768), "gpt2-medium": (50257, 1024, 24, 16, 1024),
          "gpt2-tiny": (65, 64, 2, 2, 32)}  # vocab, max_seq_len, layers, heads, channels


class Block(nn.Module):
    def __init__(self, c, h):
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(c), nn.LayerNorm(c)
        self.c_attn, self.c_proj = nn.Linear(c, 3 * c), nn.Linear(c, c)
        self.c_fc, self.mlp_proj = nn.Linear(c, 4 * c), nn.Linear(4 * c, c)

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda z: z.view(b, t, self.h, c // self.h).transpose(1, 2)  # noqa: E731
        att = (heads(q) @ heads(k).transpose(-2, -1)) / math.sqrt(c // self.h)
        att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(-1)
        x = x + self.c_proj((att @ heads(v)).transpose(1, 2).reshape(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, vocab, max_t, layers, heads, c):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, c), nn.Embedding(max_t, c)
        self.h = nn.ModuleList(Block(c, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(c)
        # a plain attribute, not a buffer: gloo cannot broadcast DDP's bool buffers
        self.mask = torch.triu(torch.ones(max_t, max_t, dtype=torch.bool), 1)

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(t))
        for blk in self.h:
            x = blk(x, self.mask)
        logits = self.ln_f(x) @ self.wte.weight.t()  # the tied head
        return F.cross_entropy(logits.float().view(-1, logits.size(-1)), targets.reshape(-1))


def load_llmc(path):
    with open(path, "rb") as f:
        head = struct.unpack("256i", f.read(1024))
        if head[0] != 20240326 or head[1] != 3:
            raise SystemExit(f"{path}: not an llm.c fp32 GPT-2 checkpoint (magic {head[0]}, version {head[1]})")
        max_t, v, layers, heads, c, vp = head[2:8]
        body = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    model = GPT(v, max_t, layers, heads, c)
    sizes = [vp * c, max_t * c] + [layers * s for s in (c, c, 3 * c * c, 3 * c, c * c, c, c, c, 4 * c * c, 4 * c,
                                                         4 * c * c, c)] + [c, c]
    if body.numel() != sum(sizes):
        raise SystemExit(f"{path}: {body.numel()} floats after the header, its sizes say {sum(sizes)}")
    parts = list(torch.split(body, sizes))
    with torch.no_grad():
        model.wte.weight.copy_(parts[0].view(vp, c)[:v])
        model.wpe.weight.copy_(parts[1].view(max_t, c))
        names = ["ln_1.weight", "ln_1.bias", "c_attn.weight", "c_attn.bias", "c_proj.weight", "c_proj.bias",
                 "ln_2.weight", "ln_2.bias", "c_fc.weight", "c_fc.bias", "mlp_proj.weight", "mlp_proj.bias"]
        for name, part in zip(names, parts[2:14]):
            per = part.view(layers, -1)
            for i, blk in enumerate(model.h):
                p = blk.get_parameter(name)
                p.copy_(per[i].view(p.shape))  # nn.Linear keeps [out, in], as llm.c
        model.ln_f.weight.copy_(parts[14])
        model.ln_f.bias.copy_(parts[15])
    return model


def token_batches(path, b, t):
    with open(path, "rb") as f:
        head = struct.unpack("256i", f.read(1024))
        if head[0] != 20240520 or head[1] != 1:
            raise SystemExit(f"{path}: not an llm.c token file (magic {head[0]}, version {head[1]})")
        tokens = torch.frombuffer(bytearray(f.read(2 * head[2])), dtype=torch.int16).to(torch.int64) & 0xFFFF
    n = (tokens.numel() - 1) // (b * t)
    step = 0
    while True:
        i = (step % n) * b * t
        chunk = tokens[i:i + b * t + 1]
        yield chunk[:-1].view(b, t), chunk[1:].view(b, t)
        step += 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=sorted(SHAPES))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--bf16", action="store_true")
    ap.add_argument("--init", help="llm.c's gpt2_124M.bin layout")
    ap.add_argument("--tokens", help="llm.c's token file")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--ddp", type=int, default=1, help="processes under DistributedDataParallel (gloo)")
    a = ap.parse_args()
    if a.ddp > 1:
        if a.init or a.tokens:
            raise SystemExit("--ddp trains on random tokens from --seed (no --init, --tokens)")
        os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(free_port())
        torch.multiprocessing.spawn(run, args=(a,), nprocs=a.ddp)
    else:
        run(0, a)


def run(rank, a):
    ddp = a.ddp > 1
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    if ddp:
        torch.distributed.init_process_group("gloo", rank=rank, world_size=a.ddp)
    torch.manual_seed(a.seed)
    if a.init:
        model = load_llmc(a.init)
    else:
        model = GPT(*SHAPES[a.model])
        for name, p in model.named_parameters():
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
    v = model.wte.weight.size(0)
    torch.manual_seed(a.seed + rank)  # each rank its own rows
    if ddp:
        model = nn.parallel.DistributedDataParallel(model)
    if a.tokens:
        batches = token_batches(a.tokens, a.batch, a.seq)
    else:
        def random_batches():
            while True:
                x = torch.randint(0, v, (a.batch, a.seq + 1))
                yield x[:, :-1], x[:, 1:]
        batches = random_batches()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    times, loss = [], float("nan")
    for step in range(a.steps):
        x, y = next(batches)
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.bf16):
            out = model(x, y)
        opt.zero_grad(set_to_none=True)
        out.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        loss = out.item()
        if rank == 0:
            print(f"step {step}: train loss {loss:.6f} (took {times[-1] * 1e3:.6f} ms)", flush=True)
    step_s = statistics.median(times[1:] if len(times) > 1 else times)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024])
    if ddp:
        torch.distributed.all_reduce(rss, op=torch.distributed.ReduceOp.MAX)
        torch.distributed.destroy_process_group()
    if rank == 0:
        print(f"step_s={step_s:.6f} tokens_s={a.ddp * a.batch * a.seq / step_s:.3f} peak_rss_mb={rss.item():.1f} "
              f"loss={loss:.6f}")


if __name__ == "__main__":
    main()
