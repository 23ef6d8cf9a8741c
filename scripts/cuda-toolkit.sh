#!/usr/bin/env bash
# A CUDA 13.0 toolkit assembled from NVIDIA's PyPI wheels (nvcc, nvvm, crt, cccl, runtime,
# nvrtc, cublas, curand): enough to build the engine's `cuda` feature (candle's kernels and
# cudarc's dynamic linking) on a machine without a GPU and without Debian's non-free
# component. Nothing of it enters the repository: it lives in a cache directory outside it,
# keyed by version, and is reused once there.
#
#   scripts/cuda-toolkit.sh install   install (once) and print the toolkit root (CUDA_HOME)
#   scripts/cuda-toolkit.sh check     exit 0 if installed, 1 if not (prints nothing)
#   scripts/cuda-toolkit.sh prefix    print the toolkit root (installed or not)
#   scripts/cuda-toolkit.sh version   print the toolkit version (13.0.88)
#   scripts/cuda-toolkit.sh env       install (once) and print the `export` lines that
#                                     point a cargo build at it: eval "$(... env)"
#
# The root is laid out like /usr/local/cuda: bin/nvcc, include/, lib64/ (with the unversioned
# .so links the linker wants), nvvm/. The wheels carry no libcuda (it comes with the NVIDIA
# driver), so lib64/stubs/ holds a link-time stub generated from cuda.h by
# scripts/cuda-driver-stub.py; every call into it fails with CUDA_ERROR_STUB_LIBRARY. A
# program built here runs on a machine with driver >= 580 and the CUDA 13 libraries; on a
# machine without a driver it starts only with lib64/stubs on LD_LIBRARY_PATH, and then
# every CUDA device fails to open (the CPU still works).
#
# CUDA 13 builds for compute capability 7.5 and newer only. Older GPUs (a P100 is 6.0)
# take CUDA 11.8, scripts/cuda-toolkit-debian.sh; see README "Running on a GPU". The cache
# layout, the install's lock and record and the command line are scripts/cuda-toolkit-lib.sh.
#
# Cache root: $HYDRA_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress.
# Progress goes to stderr, paths to stdout.
set -euo pipefail

CUDA_VERSION=13.0.88
# PyPI requirement pins: one CUDA 13.0 release (Update 1), the same major versions as the
# CUDA 13.0 builds of PyTorch bring along, so a binary built here runs against those.
wheels=(
  "nvidia-cuda-nvcc==13.0.88"
  "nvidia-nvvm==13.0.88"
  "nvidia-cuda-crt==13.0.88"
  "nvidia-cuda-cccl==13.0.85"
  "nvidia-cuda-runtime==13.0.96"
  "nvidia-cuda-nvrtc==13.0.88"
  "nvidia-cublas==13.0.2.14"
  "nvidia-curand==10.4.0.35"
)
# library | soname in the wheels: the linker wants lib<name>.so.
sonames=(
  "cudart|libcudart.so.13"
  "nvrtc|libnvrtc.so.13"
  "cublas|libcublas.so.13"
  "cublasLt|libcublasLt.so.13"
  "curand|libcurand.so.10"
)

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLKIT=cuda-toolkit
# shellcheck source=scripts/cuda-toolkit-lib.sh
. "$here/cuda-toolkit-lib.sh"

# Fetches the wheels into $1 and lays their CUDA tree out at $1/root (see the library).
fetch_into() {
  local staging=$1 t0=$SECONDS
  command -v python3 >/dev/null || die "python3 (with pip) is needed to fetch the wheels"
  command -v unzip >/dev/null || die "unzip is needed to unpack the wheels (apt-get install unzip)"
  command -v gcc >/dev/null || die "gcc is needed for the driver stub and as nvcc's host compiler"
  mkdir -p "$staging/wheels"
  say "fetching CUDA $CUDA_VERSION wheels (~650 MB) into $staging"
  python3 -m pip download --quiet --no-cache-dir --no-deps --only-binary :all: \
    -d "$staging/wheels" "${wheels[@]}" >&2
  FETCHED_S=$((SECONDS - t0))
  say "unpacking"
  local whl
  for whl in "$staging"/wheels/*.whl; do
    unzip -q -o "$whl" 'nvidia/cu13/*' -d "$staging/unpacked"
  done
  mv "$staging/unpacked/nvidia/cu13" "$staging/root"
  local root=$staging/root
  chmod +x "$root"/bin/* "$root"/nvvm/bin/*
  # nvcc.profile adds lib64 (and lib64/stubs) to the link path; cudarc looks there too.
  ln -s lib "$root/lib64"
  local entry lib so
  for entry in "${sonames[@]}"; do
    lib=${entry%%|*}
    so=${entry#*|}
    [ -f "$root/lib/$so" ] || die "no $so in the wheels"
    ln -s "$so" "$root/lib/lib$lib.so"
  done
  mkdir -p "$root/lib/stubs"
  python3 "$here/cuda-driver-stub.py" "$root/include/cuda.h" "$staging/libcuda-stub.c"
  gcc -shared -fPIC -O1 -Wl,-soname,libcuda.so.1 -o "$root/lib/stubs/libcuda.so.1" \
    "$staging/libcuda-stub.c"
  ln -s libcuda.so.1 "$root/lib/stubs/libcuda.so"
}

toolkit_main "$@"
