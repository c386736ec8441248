#!/usr/bin/env bash
# DDP scaling efficiency on one machine: ViT step at batch 16/rank on 1 rank x 1 thread,
# then 2 ranks x 1 thread, alternated `rounds` times; prints each line and the ratio.
# Usage: ddp_scaling.sh [model] [batch per rank] [steps] [rounds] [fp32|bf16|fp16]
set -euo pipefail
cd "$(dirname "$0")/.."
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1
model=${1:-vit-tiny} batch=${2:-16} steps=${3:-4} rounds=${4:-2} precision=${5:-fp32}
for r in $(seq "$rounds"); do
  one=$(mpirun -np 1 --oversubscribe build/bench/ddp_bench "$model" "$batch" "$steps" "$precision")
  two=$(mpirun -np 2 --oversubscribe build/bench/ddp_bench "$model" "$batch" "$steps" "$precision")
  echo "$one"; echo "$two"
  a=$(echo "$one" | sed -E 's/.*img\/s=([0-9.]+).*/\1/'); b=$(echo "$two" | sed -E 's/.*img\/s=([0-9.]+).*/\1/')
  awk -v a="$a" -v b="$b" 'BEGIN { printf "scaling efficiency: %.3f\n", b / (2 * a) }'
done
