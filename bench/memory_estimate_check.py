#!/usr/bin/env python3
"""booster_estimate against measurement on this machine.

For each run config given (CONFIG, or CONFIG:key=value,key=value to set [plugin] keys),
vit_benchmark measures training steps under its plugin (lm_benchmark with --lm-config: the
language model of that lm_train config under each row's [plugin] tables) (the allocator's peak over the timed
steps, and the process's peak RSS) and booster_estimate predicts each rank's peak from this
machine's profiles; one row a config, with the estimate's error against the allocator's peak.
Profile first (same world, model, precision):
  mpirun -np 2 build/tools/galvatron_profile_hardware --out P
  mpirun -np 2 build/tools/galvatron_profile_model --model vit-small --batch 8 --precision fp32 --out P
  bench/memory_estimate_check.py --build build --world 2 --model vit-small --batch 8 --profiles P \\
      examples/vit/configs/torch_ddp.toml examples/vit/configs/gemini.toml:min_chunk_size_m=32
--max-error makes the exit status 1 when a row's error exceeds it (the ctest's use).
"""
import argparse, json, os, subprocess, sys, tempfile

# The precision key each plugin takes (the Booster's for torch_ddp).
PRECISION_KEY = {"torch_ddp": "booster.mixed_precision", "low_level_zero": "plugin.precision",
                 "gemini": "plugin.precision", "hybrid_parallel": "plugin.precision",
                 "galvatron": "plugin.mixed_precision", "torch_fsdp": "plugin.mixed_precision.param_dtype"}


def split_plugin(text):
    """(the [plugin] table and its subtables, the rest) of a TOML text."""
    plugin, rest, inside = [], [], False
    for line in text.splitlines():
        head = line.strip()
        if head.startswith("["):
            inside = head == "[plugin]" or head.startswith("[plugin.")
        (plugin if inside else rest).append(line)
    return plugin, rest


def set_keys(plugin, keys):
    """The [plugin] lines with `keys` (key=value, TOML values) set in its main table."""
    names = {k.split("=", 1)[0].strip(): k for k in keys}
    out, main = [], False
    for line in plugin:
        head = line.strip()
        if head.startswith("["):
            if main:
                out += list(names.values())
                names = {}
            main = head == "[plugin]"
        elif main and head.split("=", 1)[0].strip() in names:
            continue  # replaced
        out.append(line)
    if names:
        out += (["[plugin]"] if not any(l.strip() == "[plugin]" for l in plugin) else []) + list(names.values())
    return out


def run_config(row_path, keys, lm_config):
    """The run's config: the row's (its [plugin] keys set), or the language-model run config
    with the row's [plugin] tables. Written beside the row's file (a strategy file's relative
    path still resolves); returns (path, whether it was written)."""
    if not keys and not lm_config:
        return row_path, False
    plugin, rest = split_plugin(open(row_path).read())
    if lm_config:
        rest = split_plugin(open(lm_config).read())[1]
    text = "\n".join(set_keys(plugin, keys) + [""] + rest) + "\n"
    fd, new = tempfile.mkstemp(prefix=".estimate_check_", suffix=".toml", dir=os.path.dirname(os.path.abspath(row_path)))
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return new, True


def plugin_name(path):
    plugin, _ = split_plugin(open(path).read())
    for line in plugin:
        key, _, value = line.partition("=")
        if key.strip() == "name":
            return value.split("#")[0].strip().strip('"')
    return "torch_ddp"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--model", default="vit-small", help="the ViT preset (vit_train configs)")
    ap.add_argument("--lm-config", help="an lm_train run config: each row's [plugin] tables on its model, measured "
                    "with lm_benchmark (its text tokenized into a temporary folder)")
    ap.add_argument("--batch", type=int, default=8, help="train.batch_size: rows a data-parallel replica")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--profiles", required=True)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--max-error", type=float, default=0, help="fail when |estimate / measured - 1| exceeds this")
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    work = tempfile.mkdtemp(prefix="estimate_check_")
    print(f"{'config':<44} {'estimate':>9} {'measured':>9} {'error':>7} {'RSS':>8}  peak at")
    worst, made = 0.0, []
    try:
        for row in a.configs:
            path, _, keys = row.partition(":")
            cfg, written = run_config(path, [k for k in keys.split(",") if k], a.lm_config)
            if written:
                made.append(cfg)
            sets = ["--set", f"{PRECISION_KEY[plugin_name(cfg)]}=\"{a.precision}\"", "--set", f"train.batch_size={a.batch}"]
            sets += ["--set", f"data.cache_dir=\"{work}/cache\""] if a.lm_config else ["--set", f"model.preset=\"{a.model}\""]
            est = subprocess.run([f"{a.build}/tools/booster_estimate", "--config", cfg, "--world", str(a.world),
                                  "--profiles", a.profiles, "--json"] + sets, env=env, capture_output=True, text=True)
            if est.returncode != 0:
                sys.exit(f"{row}: booster_estimate failed ({est.returncode}): {est.stderr.strip()}")
            est = json.loads(est.stdout.strip())
            out = os.path.join(work, "measured.json")
            if os.path.exists(out):
                os.remove(out)  # vit_benchmark appends a line a row
            common = ["--configs", cfg, "--precisions", a.precision, "--batch", str(est["batch_per_replica"]),
                      "--steps", str(a.steps), "--rounds", "1", "--json", out]
            if a.lm_config:  # lm_benchmark on the run config's model and block
                bench = [f"{a.build}/examples/lm/lm_benchmark", "--run-config", cfg, "--run-set",
                         f"data.cache_dir=\"{work}/cache\"", "--seq", str(est["seq"]), "--profile-steps", "0"]
            else:
                bench = [f"{a.build}/examples/vit/vit_benchmark", "--model", a.model, "--no-peer"]
            run = subprocess.run(["mpirun", "-np", str(a.world), "--oversubscribe"] + bench + common,
                                 env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{row}: {os.path.basename(bench[0])} failed ({run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
            m = json.loads(open(out).read().strip().splitlines()[-1])
            err = est["estimated_mb"] / m["step_peak_mb"] - 1
            worst = max(worst, abs(err))
            print(f"{row:<44} {est['estimated_mb']:>9.1f} {m['step_peak_mb']:>9.1f} {err:>+7.1%} {m.get('os_peak_mb', m.get('peak_rss_mb', 0)):>8.1f}  "
                  f"{est['peak_at']}", flush=True)
    finally:
        for f in made:
            os.remove(f)
    print(f"largest error {worst:.1%}")
    if a.max_error and worst > a.max_error:
        print(f"an estimate is off by more than {a.max_error:.1%}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
