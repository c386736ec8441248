#!/usr/bin/env python3
"""An independent reader of a PEFT LoRA folder (adapter_config.json + adapter_model.safetensors,
as booster.save_lora_as_pretrained writes it): applies the adapters to the base model's Hugging
Face folder as PEFT merges them (W + lora_alpha / r * B @ A, transposed for fan_in_fan_out; rsLoRA
scales by lora_alpha / sqrt(r); rank_pattern / alpha_pattern by the end of the module path; the
modules_to_save tensors replace the base's) and runs the model (GPT-2 or LLaMA, written from the
architecture with Debian's torch; no transformers, no peft) on fixed token ids. Where a third
folder is given (the model with the adapters merged, as export_hf writes a LoRA run's
checkpoint), its logits must equal these within 1e-5 relative to the largest logit.
Prints PASS, or FAIL with the reason, and exits 1 on failure.
Usage: check_peft_adapters.py BASE_HF_DIR ADAPTER_DIR [MERGED_HF_DIR]
"""
import json
import math
import os
import re
import struct
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_gpt2_golden  # noqa: E402  (its GPT-2 forward)
import make_llama_golden  # noqa: E402  (its LLaMA forward)

PREFIX = "base_model.model."


def load_safetensors(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    dtypes = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I64": torch.int64}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=dtypes[e["dtype"]]) if b > a else torch.empty(0)
        out[name] = t.reshape(e["shape"]).float()
    return out


def load_folder(d):
    cfg = json.load(open(os.path.join(d, "config.json")))
    return cfg, load_safetensors(os.path.join(d, "model.safetensors"))


def gpt2_forward(cfg, w, ids):
    return make_gpt2_golden.logits_of(cfg, w, ids)


def llama_forward(cfg, w, ids):
    make_llama_golden.CONFIG = dict(cfg, rope_theta=cfg.get("rope_theta", 10000.0), rms_norm_eps=cfg.get("rms_norm_eps", 1e-6))
    w = dict(w)
    w.setdefault("lm_head.weight", w["model.embed_tokens.weight"])
    return make_llama_golden.forward(w, ids)[0]


def by_pattern(patterns, path, fallback):
    for key, v in patterns.items():
        if re.fullmatch(r"(.*\.)?" + key, path):
            return v
    return fallback


def apply_adapters(base, adapter_dir):
    conf = json.load(open(os.path.join(adapter_dir, "adapter_config.json")))
    assert conf.get("peft_type") == "LORA", conf
    tensors = load_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"))
    w = dict(base)
    bare = lambda n: n[len("transformer."):] if n.startswith("transformer.") else n  # noqa: E731
    names = {bare(k): k for k in w}
    applied = 0
    for key, a in tensors.items():
        assert key.startswith(PREFIX), key
        path = key[len(PREFIX):]
        if path.endswith(".lora_A.weight"):
            module = path[: -len(".lora_A.weight")]
            bmat = tensors[PREFIX + module + ".lora_B.weight"]
            r = by_pattern(conf.get("rank_pattern") or {}, module, conf["r"])
            alpha = by_pattern(conf.get("alpha_pattern") or {}, module, conf["lora_alpha"])
            assert a.shape[0] == r and bmat.shape[1] == r, (module, a.shape, bmat.shape, r)
            scale = alpha / math.sqrt(r) if conf.get("use_rslora") else alpha / r
            delta = scale * (bmat @ a)
            target = names[bare(module + ".weight")]
            if conf.get("fan_in_fan_out"):
                delta = delta.t()
            assert w[target].shape == delta.shape, (target, w[target].shape, delta.shape)
            w[target] = w[target] + delta
            applied += 1
        elif ".lora_B." in path:
            continue
        else:  # a modules_to_save tensor or a bias the bias mode trains: it replaces the base's
            target = names[bare(path.replace(".base_layer.", "."))]
            w[target] = a
    return conf, w, applied


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    cfg, base = load_folder(sys.argv[1])
    conf, w, applied = apply_adapters(base, sys.argv[2])
    forward = {"gpt2": gpt2_forward, "llama": llama_forward}.get(cfg.get("model_type"))
    if forward is None:
        print(f"FAIL: model_type {cfg.get('model_type')} (gpt2 or llama)")
        return 1
    ids = torch.randint(0, cfg["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        logits = forward(cfg, w, ids)
        base_logits = forward(cfg, base, ids)
    moved = (logits - base_logits).abs().max().item()
    print(f"{applied} adapted layers (r {conf['r']}, lora_alpha {conf['lora_alpha']}, targets {conf['target_modules']}); "
          f"the adapters move the logits by up to {moved:.3g}")
    if applied == 0 or moved == 0:
        print("FAIL: no adapter changes the model")
        return 1
    if len(sys.argv) > 3:
        mcfg, merged = load_folder(sys.argv[3])
        with torch.no_grad():
            want = forward(mcfg, merged, ids)
        err = (logits - want).abs().max().item() / max(want.abs().max().item(), 1e-6)
        print(f"against the merged model's logits: largest difference {err:.3g} of the largest logit")
        if err > 1e-5:
            print("FAIL: the adapters applied here do not give the merged model's logits")
            return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
