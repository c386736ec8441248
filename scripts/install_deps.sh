#!/usr/bin/env bash
# Installs exactly the Debian packages booster-cpp builds and runs with; idempotent.
# Runs apt-get only when something is missing. Needs root (or sudo) for that case.
# --peer adds what the PyTorch peer benchmarks run with (python3-torch, python3-pil, libopenblas0-openmp).
set -euo pipefail

PACKAGES=(
  g++ cmake ninja-build make pkg-config
  libdnnl-dev                 # oneDNN: matmul, conv, norm, softmax, eltwise kernels
  ocl-icd-opencl-dev          # Debian's oneDNN is built with an OpenCL GPU runtime: its CMake config needs it
  libopenmpi-dev openmpi-bin  # collectives and mpirun
  libspdlog-dev               # logging
  libtoml11-dev               # run configs
  libprotobuf-dev protobuf-compiler  # checkpoints
  libgtest-dev libgmock-dev   # tests
  libbenchmark-dev            # benchmarks
  libjpeg62-turbo-dev libpng-dev     # image decoding
  zlib1g-dev                  # gzip-compressed IDX files
  dataset-fashion-mnist       # Fashion-MNIST (IDX, gzip): the large-batch recipe's dataset
  libxxhash-dev               # checkpoint checksums
  nlohmann-json3-dev          # safetensors headers, HF config.json
  libcli11-dev                # command lines
  libpcre2-dev                # the byte-level BPE pre-tokenizer (Unicode letter and number classes)
  gnuplot-nox                 # the example's loss and accuracy curves (PNG)
  python3-protobuf python3-xxhash  # tools/read_checkpoint.py, the reference reader a ctest runs
  slurmctld slurmd slurm-client munge  # the SLURM ctest's one-node cluster (sbatch, srun with PMIx)
)
[ "${1:-}" = "--peer" ] && PACKAGES+=(python3-torch python3-pil libopenblas0-openmp)  # without OpenBLAS, torch falls back to reference BLAS

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi
echo "install_deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
