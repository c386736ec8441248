#!/usr/bin/env python3
"""Galvatron's cost model against measurement on this machine.

For each strategy JSON given, vit_benchmark measures a training step under GalvatronPlugin
(step time, the allocator's peak over the timed steps) and galvatron_search --predict gives
what the cost model predicts from this machine's profiles; one row a plan, with the ratios.
Profile first (same world, model, precision):
  mpirun -np 2 build/tools/galvatron_profile_hardware --out P
  mpirun -np 2 build/tools/galvatron_profile_model --model vit-small --batch 8 --precision fp32 --out P
  bench/galvatron_cost_check.py --build build --world 2 --model vit-small --batch 8 --profiles P bench/galvatron/*.json
With --profile-each-round the model is profiled again before every round (the hardware
profile of P kept) and a plan's prediction is the median of the rounds' predictions: the
profile samples the same minutes of this shared machine as the measurement it is set against.
"""
import argparse, json, os, shutil, statistics, subprocess, sys, tempfile


def predict(a, env, plan, gbs, profiles):
    """galvatron_search --predict: the cost model's candidate for one plan."""
    out = subprocess.run([f"{a.build}/tools/galvatron_search", "--model", a.model, "--world", str(a.world),
                          "--memory-mb", "1", "--global-batch", str(gbs), "--precision", a.precision,
                          "--profiles", profiles, "--predict", plan],
                         env=env, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("plans", nargs="+")
    ap.add_argument("--build", default="build")
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--model", default="vit-small")
    ap.add_argument("--batch", type=int, default=8, help="rows a rank feeds (the embeddings' share)")
    ap.add_argument("--global-batch", type=int, default=0, help="the same global batch for every plan (each rank feeds "
                    "its data-parallel share)")
    ap.add_argument("--precision", default="fp32")
    ap.add_argument("--profiles", required=True)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="each runs every plan once, in turn")
    ap.add_argument("--profile-each-round", action="store_true", help="galvatron_profile_model before every round "
                    "(--profile-batch rows, --profile-iters forwards)")
    ap.add_argument("--profile-batch", type=int, default=8)
    ap.add_argument("--profile-iters", type=int, default=10)
    a = ap.parse_args()
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    work = tempfile.mkdtemp(prefix="galvatron_check_")
    # Every round runs every plan once, in turn (plans interleaved, not one plan's rounds in a
    # row): a drift of this shared machine's speed during the run falls on all plans alike.
    # A plan's time is the median over rounds, its memory the largest peak.
    runs, profiles = {}, []
    for rnd in range(a.rounds):
        if a.profile_each_round:
            rdir = os.path.join(work, f"profiles.{rnd}")
            shutil.copytree(a.profiles, rdir)
            subprocess.run(["mpirun", "-np", str(a.world), "--oversubscribe", f"{a.build}/tools/galvatron_profile_model",
                            "--model", a.model, "--batch", str(a.profile_batch), "--precision", a.precision, "--iters",
                            str(a.profile_iters), "--rounds", "1", "--out", rdir], env=env, check=True, stdout=subprocess.DEVNULL)
            profiles.append(rdir)
        for plan in a.plans:
            p = json.load(open(plan))
            pp, vtp = int(p.get("pp_deg", 1)), int(p.get("vtp", 1))
            dp = a.world // pp // vtp
            batch = a.global_batch // dp if a.global_batch else a.batch
            toml = os.path.join(work, os.path.basename(plan) + ".toml")
            with open(toml, "w") as f:
                f.write(f"[plugin]\nname = 'galvatron'\ngalvatron_config_path = '{os.path.abspath(plan)}'\n")
            out = os.path.join(work, f"{os.path.basename(plan)}.{rnd}.jsonl")
            run = subprocess.run(["mpirun", "-np", str(a.world), "--oversubscribe", f"{a.build}/examples/vit/vit_benchmark",
                                  "--configs", toml, "--precisions", a.precision, "--model", a.model, "--batch",
                                  str(batch), "--no-peer", "--steps", str(a.steps), "--rounds", "1", "--json", out],
                                 env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
            if run.returncode != 0:
                fatal = [l for l in run.stderr.splitlines() if "fatal" in l]
                print(f"{os.path.basename(plan)}: vit_benchmark failed: {fatal[0] if fatal else run.returncode}")
                continue
            m = [json.loads(l) for l in open(out)][-1]
            runs.setdefault(plan, {"gbs": batch * dp, "ms": [], "mb": []})
            runs[plan]["ms"].append(batch * dp / m["images_per_s"] * 1e3)
            runs[plan]["mb"].append(m["step_peak_mb"])
    rows = []
    for plan in a.plans:
        if plan not in runs:
            continue
        r = runs[plan]
        preds = [predict(a, env, plan, r["gbs"], prof) for prof in (profiles or [a.profiles])]
        c = dict(preds[0], predicted_ms=statistics.median(p["predicted_ms"] for p in preds),
                 predicted_mb=statistics.median(p["predicted_mb"] for p in preds))
        rows.append((os.path.basename(plan), c["layers"], c["predicted_ms"], statistics.median(r["ms"]),
                     c["predicted_mb"], max(r["mb"])))
    print(f"{'plan':34} {'pred ms':>9} {'meas ms':>9} {'ratio':>6} {'pred MB':>8} {'meas MB':>8} {'ratio':>6}  layers")
    worst_t = worst_m = 0
    for name, layers, pt, mt, pm, mm in rows:
        print(f"{name:34} {pt:9.1f} {mt:9.1f} {pt / mt:6.3f} {pm:8.1f} {mm:8.1f} {pm / mm:6.3f}  {layers}")
        worst_t, worst_m = max(worst_t, abs(pt / mt - 1)), max(worst_m, abs(pm / mm - 1))
    print(f"largest error: time {100 * worst_t:.1f} %, memory {100 * worst_m:.1f} %")
    json.dump([dict(zip(["plan", "layers", "pred_ms", "meas_ms", "pred_mb", "meas_mb"], r)) for r in rows],
              open(os.path.join(work, "rows.json"), "w"))
    print(f"rows: {work}/rows.json")


if __name__ == "__main__":
    sys.exit(main())
