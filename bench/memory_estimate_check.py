#!/usr/bin/env python3
"""booster_estimate against measurement on this machine.

For each run config given (CONFIG, or CONFIG:key=value,key=value to set [plugin] keys),
vit_benchmark measures training steps under its plugin (the allocator's peak over the timed
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


def with_plugin_keys(path, keys, work):
    """The config with `keys` (key=value, TOML values) set in its [plugin] table, written beside
    the original (relative paths in it, a strategy file, still resolve) or in `work`."""
    if not keys:
        return path
    lines, out, in_plugin, done = open(path).read().splitlines(), [], False, set()
    names = {k.split("=", 1)[0].strip(): k for k in keys}
    for line in lines:
        head = line.strip()
        if head.startswith("["):
            if in_plugin:
                out += [names[n] for n in names if n not in done]
                done |= set(names)
            in_plugin = head == "[plugin]"
        elif in_plugin and head.split("=", 1)[0].strip() in names:
            continue  # replaced
        out.append(line)
    if in_plugin:
        out += [names[n] for n in names if n not in done]
    fd, new = tempfile.mkstemp(prefix=".estimate_check_", suffix=".toml", dir=os.path.dirname(os.path.abspath(path)))
    with os.fdopen(fd, "w") as f:
        f.write("\n".join(out) + "\n")
    return new


def plugin_name(path):
    in_plugin = False
    for line in open(path):
        head = line.strip()
        if head.startswith("["):
            in_plugin = head == "[plugin]"
        elif in_plugin and head.startswith("name"):
            return head.split("=", 1)[1].split("#")[0].strip().strip('"')
    return "torch_ddp"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("configs", nargs="+")
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--model", default="vit-small")
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
            cfg = with_plugin_keys(path, [k for k in keys.split(",") if k], work)
            if cfg != path:
                made.append(cfg)
            sets = ["--set", f"{PRECISION_KEY[plugin_name(cfg)]}=\"{a.precision}\"", "--set",
                    f"train.batch_size={a.batch}", "--set", f"model.preset=\"{a.model}\""]
            est = subprocess.run([f"{a.build}/tools/booster_estimate", "--config", cfg, "--world", str(a.world),
                                  "--profiles", a.profiles, "--json"] + sets, env=env, capture_output=True, text=True)
            if est.returncode != 0:
                sys.exit(f"{row}: booster_estimate failed ({est.returncode}): {est.stderr.strip()}")
            est = json.loads(est.stdout.strip())
            out = os.path.join(work, "measured.json")
            if os.path.exists(out):
                os.remove(out)  # vit_benchmark appends a line a row
            run = subprocess.run(["mpirun", "-np", str(a.world), "--oversubscribe", f"{a.build}/examples/vit/vit_benchmark",
                                  "--configs", cfg, "--precisions", a.precision, "--model", a.model, "--batch",
                                  str(est["batch_per_replica"]), "--no-peer", "--steps", str(a.steps), "--rounds", "1", "--json", out],
                                 env=env, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"{row}: vit_benchmark failed ({run.returncode}):\n{run.stdout[-2000:]}{run.stderr[-2000:]}")
            m = json.loads(open(out).read().strip().splitlines()[-1])
            err = est["estimated_mb"] / m["step_peak_mb"] - 1
            worst = max(worst, abs(err))
            print(f"{row:<44} {est['estimated_mb']:>9.1f} {m['step_peak_mb']:>9.1f} {err:>+7.1%} {m['os_peak_mb']:>8.1f}  "
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
