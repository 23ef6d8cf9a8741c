#!/usr/bin/env bash
# The GPU device check, one prepared run for a GPU machine without Rust: measures the CUDA
# bundle of scripts/build-cuda.sh on one GPU and writes the results to $OUT (or ./out) as
# device-check.json and device-check.md (a table). What it measures and how: see
# scripts/device_check.py. It stops itself after --deadline seconds (default 480), so a
# run fits a 10-minute command limit with room to spare.
#
#   scripts/device-check.sh [BUNDLE.tar.xz | smNN] [device_check.py options]
#
# BUNDLE defaults to target/hydra-cuda.tar.xz (compute capability 9.0); smNN names the
# bundle scripts/build-cuda.sh wrote for another (CUDA_COMPUTE_CAP=NN): sm60 is
# target/hydra-cuda-sm60.tar.xz, for a P100. It is unpacked into a temporary directory.
# Inside an unpacked bundle, `./device-check.sh` uses the bundle it sits in. The machine
# needs driver >= 580, PyTorch's CUDA 13 `nvidia-*` wheels (see the bundle's `run`),
# Python 3 with numpy, xz and tar. Exit status: 0 when every step passed, 1 when one
# failed (the JSON says which and why), 2 on bad usage.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
out=${OUT:-$PWD/out}

if [ -x "$here/bin/hydra-engine" ]; then
  bundle_dir=$here
else
  # The bundle's name is build-cuda.sh's to say (one per compute capability).
  cap=90
  tarball=""
  if [[ ${1:-} =~ ^sm([1-9][0-9])$ ]]; then
    cap=${BASH_REMATCH[1]}
    shift
  elif [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
    tarball=$1
    shift
  fi
  how="scripts/build-cuda.sh bundle makes one"
  if [ -z "$tarball" ]; then
    tarball=$(CUDA_COMPUTE_CAP=$cap "$here/build-cuda.sh" bundle-path)
    how="CUDA_COMPUTE_CAP=$cap $how"
  fi
  [ -f "$tarball" ] || {
    echo "device-check: no bundle at $tarball ($how)" >&2
    exit 2
  }
  unpack=$(mktemp -d)
  trap 'rm -rf "$unpack"' EXIT
  tar -xJf "$tarball" -C "$unpack"
  bundle_dir=$unpack/hydra-cuda
fi

python=${HYDRA_PYTHON:-python3}
"$python" -c 'import numpy' 2>/dev/null || {
  echo "device-check: $python has no numpy (set HYDRA_PYTHON to a Python with numpy)" >&2
  exit 2
}
mkdir -p "$out"
status=0
"$python" "$bundle_dir/device_check.py" --bundle "$bundle_dir" --out "$out" "$@" || status=$?
exit "$status"
