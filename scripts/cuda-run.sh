#!/usr/bin/env bash
# `run` in the CUDA bundle (scripts/build-cuda.sh bundle): runs one of the bundle's
# binaries against the CUDA libraries of the machine's PyTorch wheels.
#
#   ./run hydra-engine serve --model M.gguf --device cuda:0
#   ./run hydra-probe ...
#   ./run --library-path        print the LD_LIBRARY_PATH it would use
#
# The bundle carries no CUDA library. The engine needs libcublas.so.13, libcublasLt.so.13,
# libcurand.so.10, libcudart.so.13 (the `nvidia-*` wheels PyTorch's CUDA 13
# builds install, under site-packages/nvidia/*/lib) and the driver's libcuda.so.1 (driver
# 580 or newer); a bundle built for compute capability below 7.5 (a P100: BUILD-INFO says
# CUDA toolkit cuda-11.8.89) needs the CUDA 11 ones instead, libcublas.so.11,
# libcublasLt.so.11, libcurand.so.10, libcudart.so.11.0 (PyTorch's CUDA 11.8 wheels, found
# the same way, or Debian's packages on LD_LIBRARY_PATH). The wheels are found through the
# Python of $HYDRA_PYTHON, else python3,
# else by looking for site-packages/nvidia under /opt, /usr and $HOME. Directories
# already on LD_LIBRARY_PATH come after them.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

# Every `lib` directory of the `nvidia` namespace package, one per line.
nvidia_lib_dirs() {
  local py=${HYDRA_PYTHON:-python3} found
  found=$("$py" -c '
import glob, os
try:
    import nvidia
except ImportError:
    raise SystemExit(0)
for root in nvidia.__path__:
    for d in sorted(glob.glob(os.path.join(root, "*", "lib"))):
        print(d)
' 2>/dev/null || true)
  if [ -z "$found" ]; then
    found=$(find /opt /usr "$HOME" -maxdepth 7 -type d -path '*-packages/nvidia/*/lib' \
      2>/dev/null | sort || true)
  fi
  printf '%s\n' "$found"
}

library_path() {
  local dirs
  dirs=$(nvidia_lib_dirs | paste -sd: -)
  [ -n "$dirs" ] || {
    echo "run: no CUDA libraries found (no site-packages/nvidia/*/lib; set HYDRA_PYTHON to the Python that has PyTorch's nvidia-* wheels)" >&2
    exit 1
  }
  echo "$dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

case "${1:-}" in
  --library-path) library_path ;;
  hydra-engine | hydra-probe)
    bin=$1
    shift
    LD_LIBRARY_PATH=$(library_path)
    export LD_LIBRARY_PATH
    exec "$here/bin/$bin" "$@"
    ;;
  *)
    sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
