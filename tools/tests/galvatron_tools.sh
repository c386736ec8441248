#!/usr/bin/env bash
# Galvatron's tools end to end, small: the hardware and model profilers on 2 ranks (ViT-Ti at
# 32 x 32, two rounds of the model profile whose timed figures are medians), the files they
# write in Galvatron's formats with plausible values (every timing non-negative, ZeRO-3's
# cost and the optimizer's present, no tensor-parallel degree that does not divide the 3
# heads), then galvatron_search over them writing a plan (tp 1: the heads) that
# galvatron_search --predict costs again; ViT-S profiled under Ulysses too and searched with
# --sp-space tp+sp; bad arguments are refused by name.
# Usage: galvatron_tools.sh MPIEXEC BUILD_DIR
set -euo pipefail
mpiexec=$1 build=$2
work=$(mktemp -d) && trap 'rm -rf "$work"' EXIT && cd "$work"
run2() { "$mpiexec" -np 2 --oversubscribe "$@"; }
run2 "$build/tools/galvatron_profile_hardware" --out P --mb 1 --iters 2 > hw.log 2>&1 || { cat hw.log; exit 1; }
run2 "$build/tools/galvatron_profile_model" --model vit-tiny --image-size 32 --batch 4 --precision fp32 --iters 2 \
  --rounds 2 --out P > model.log 2>&1 || { cat model.log; exit 1; }
grep -E "^round (1|2):" model.log
[ "$(grep -c '^round [12]:' model.log)" = 2 ] || { cat model.log; echo "FAIL: two rounds expected"; exit 1; }
ls P
python3 - <<'PY'
import json, sys
c = json.load(open("P/computation_profiling_fp32_vit-tiny.json"))
m = json.load(open("P/memory_profiling_fp32_vit-tiny.json"))
need = ["layertype_0_fwd_bwd_tp1_bsz4_seq5", "layertype_0_tp1_bsz4_seq5",
        "optimizer_ms_per_param", "zero3_ms_per_layer", "zero3_group"]
missing = [k for k in need if k not in c]
if missing:
    sys.exit(f"FAIL: the computation profile lacks {missing}: {sorted(c)}")
negative = {k: v for k, v in c.items() if isinstance(v, (int, float)) and v < 0}
if negative:
    sys.exit(f"FAIL: negative timings {negative}")
if any("tp2" in k for k in c):  # ViT-Ti's 3 heads do not split over 2 ranks
    sys.exit(f"FAIL: tp 2 profiled for a model of 3 heads: {sorted(c)}")
if c.get("max_tp_deg") != 1:
    sys.exit(f"FAIL: the profile does not limit tensor parallelism to 1 for 3 heads: {c.get('max_tp_deg')}")
o = m["other_memory"]
if not (0.9 < o["embed_parameter_share"] <= 1 and 0 <= o["embed_activation_share"] <= 1
        and 0 <= c["layertype_other_embed_share"] <= 1):  # the embeddings hold nearly all of ViT-Ti's rest
    sys.exit(f"FAIL: the embeddings' shares: {o}, {c['layertype_other_embed_share']}")
if c["zero3_group"] != 2 or m["layertype_0"]["parameter_count"] <= 0:
    sys.exit("FAIL: the profiles' ZeRO-3 group or parameter count")
print("profiles ok:", {k: round(c[k], 6) for k in need})
PY
"$build/tools/galvatron_search" --model vit-tiny --world 2 --memory-mb 4000 --global-batch 8 --precision fp32 \
  --profiles P --output plan.json > search.log 2>&1 || { cat search.log; exit 1; }
tail -3 search.log
grep -q "tensor parallelism up to 1: the model profile of vit-tiny allows no more" search.log || { echo "FAIL: the heads' limit"; exit 1; }
grep -q '"tp_sizes_enc": "1,1,1' plan.json || { cat plan.json; echo "FAIL: the plan splits 3 heads"; exit 1; }
"$build/tools/galvatron_search" --model vit-tiny --world 2 --memory-mb 4000 --global-batch 8 --precision fp32 \
  --profiles P --predict plan.json > predict.log 2>&1 || { cat predict.log; exit 1; }
grep -q '"predicted_ms"' predict.log || { cat predict.log; echo "FAIL: --predict gave no cost"; exit 1; }
# Ulysses: ViT-Ti's profile has none (3 heads), so --sp-space sp is refused naming why; ViT-S
# (6 heads) is profiled under Ulysses 2 too (its tp 2 under Megatron-SP), and the search weighs it.
if "$build/tools/galvatron_search" --model vit-tiny --world 2 --memory-mb 4000 --global-batch 8 --precision fp32 \
  --profiles P --sp-space sp > nosp.log 2>&1; then echo "FAIL: --sp-space sp without Ulysses figures"; exit 1; fi
grep -q "has no Ulysses figures" nosp.log || { cat nosp.log; echo "FAIL: the error does not say why"; exit 1; }
mkdir S && cp P/allreduce_* P/p2p_* P/overlap_coefficient.json S/
run2 "$build/tools/galvatron_profile_model" --model vit-small --image-size 32 --batch 2 --precision fp32 --iters 1 \
  --rounds 1 --sequence-parallel --out S > small.log 2>&1 || { cat small.log; exit 1; }
grep "^Ulysses 2:" small.log || { cat small.log; echo "FAIL: no Ulysses figures for ViT-S"; exit 1; }
python3 - <<'PY'
import json, sys
c = json.load(open("S/computation_profiling_fp32_vit-small.json"))
m = json.load(open("S/memory_profiling_fp32_vit-small.json"))
for k in ["layertype_0_sp2_bsz2_seq5", "layertype_0_fwd_bwd_sp2_bsz2_seq5"]:
    if not (k in c and c[k] >= 0):
        sys.exit(f"FAIL: the computation profile lacks {k}: {sorted(c)}")
sp = m["layertype_0"].get("sp_activation_per_bsz_dict", {})
if c.get("sequence_parallel") != 1:
    sys.exit("FAIL: the profile does not record --sequence-parallel")
if not (list(sp) == ["2"] and 0 < sp["2"] < m["layertype_0"]["tp_activation_per_bsz_dict"]["1"]):
    sys.exit(f"FAIL: Ulysses 2's activations {sp} (a share of the tokens: below tp 1's)")
PY
"$build/tools/galvatron_search" --model vit-small --world 2 --memory-mb 4000 --global-batch 8 --precision fp32 \
  --profiles S --sp-space tp+sp --output sp.json > sp.log 2>&1 || { cat sp.log; exit 1; }
grep -q '"use_sp"' sp.json || { cat sp.json; echo "FAIL: no use_sp in the plan"; exit 1; }
grep -q "run the plan with \[plugin\] sequence_parallel = true" sp.log || { cat sp.log; echo "FAIL: Megatron-SP not said"; exit 1; }
if run2 "$build/tools/galvatron_profile_model" --model vit-tiny --image-size 32 --rounds 0 --out P > bad.log 2>&1; then
  echo "FAIL: --rounds 0 was accepted"; exit 1
fi
grep -q -- "--rounds and --iters must be at least 1" bad.log || { cat bad.log; echo "FAIL: the error does not name --rounds"; exit 1; }
echo PASS
