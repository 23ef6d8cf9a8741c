#!/usr/bin/env bash
# A CUDA 11.8 toolkit from Debian 12's non-free packages (nvidia-cuda-toolkit 11.8.89), for
# the GPUs that CUDA 13 no longer builds for: compute capability 6.x and 7.0 (a P100 is 6.0).
# NVIDIA's CUDA 12 PyPI wheels cannot serve here: their nvcc wheels (12.1 to 12.9) carry
# ptxas only, no nvcc and no cicc, and CUDA 13 refuses compute_60.
#
# The packages are fetched with apt-get from a private source list (bookworm main contrib
# non-free) and unpacked, never installed: nothing of the system changes but the host
# compiler, g++-11 (CUDA 11.8 takes gcc <= 11; Debian 12's gcc is 12), which is installed
# with apt-get when missing. The tree lives in a cache directory outside the repository,
# keyed by version, laid out like /usr/local/cuda (bin/nvcc, include/, lib64/ with the
# runtime, cuBLAS, cuRAND and NVRTC libraries, lib64/stubs/libcuda.so from the packages).
#
#   scripts/cuda-toolkit-debian.sh install   install (once) and print the toolkit root
#   scripts/cuda-toolkit-debian.sh check     exit 0 if installed, 1 if not (prints nothing)
#   scripts/cuda-toolkit-debian.sh prefix    print the toolkit root (installed or not)
#   scripts/cuda-toolkit-debian.sh version   print the toolkit version (11.8.89)
#   scripts/cuda-toolkit-debian.sh env       install (once) and print the `export` lines
#                                            that point a cargo build at it
#   scripts/cuda-toolkit-debian.sh resolve   only ask the package index whether every
#                                            pinned package still resolves (a few seconds,
#                                            nothing downloaded but the index)
#
# Cache root: $HYDRA_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress.
# Progress goes to stderr, paths to stdout.
set -euo pipefail

CUDA_VERSION=11.8.89
debian=11.8.89~11.8.0-5~deb12u1
# The packages, pinned: the compiler (nvcc, cicc, ptxas; headers come with -dev), the
# header-only libraries it includes, and the libraries the engine links (cudarc's dynamic
# linking: cudart, cublas, cublasLt, curand, nvrtc).
packages=(
  "nvidia-cuda-toolkit=$debian"
  "nvidia-cuda-dev=$debian"
  "libnvvm4=$debian"
  "libcudart11.0=$debian"
  "libnvrtc11.2=$debian"
  "libnvrtc-builtins11.8=$debian"
  "libcublas11=11.11.3.6~11.8.0-5~deb12u1"
  "libcublaslt11=11.11.3.6~11.8.0-5~deb12u1"
  "libcurand10=11.1.1+~10.3.0.86~11.8.0-5~deb12u1"
  "libcu++-dev=1.8.1-2"
  "libcub-dev=1.17.2-2"
  "libthrust-dev=1.17.2-2"
)
# The libraries kept in lib64/ (the rest of nvidia-cuda-dev, 2.7 GB, is removed).
libraries=(cudart cublas cublasLt curand nvrtc nvrtc-builtins)
host_compiler=g++-11

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
TOOLKIT=cuda-toolkit-debian
# shellcheck source=scripts/cuda-toolkit-lib.sh
. "$here/cuda-toolkit-lib.sh"

# apt-get with a private source list, index and download cache under directory $1.
private_apt() {
  local dir=$1
  shift
  apt-get -q -o Dir::Etc::SourceList="$dir/sources.list" -o Dir::Etc::SourceParts=/dev/null \
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" \
    -o APT::Sandbox::User=root "$@"
}

# Writes a private source list under $1 and fetches its index.
private_index() {
  local dir=$1
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  echo "deb http://deb.debian.org/debian bookworm main contrib non-free" >"$dir/sources.list"
  private_apt "$dir" update >/dev/null
}

resolve() {
  local dir
  dir=$(mktemp -d)
  local found=0
  # One question for all: apt-get names each package or version it cannot find.
  private_index "$dir" && private_apt "$dir" --print-uris download "${packages[@]}" >/dev/null ||
    found=$?
  rm -rf "$dir"
  ((found == 0)) || die "the pinned packages no longer resolve in Debian 12's package index (above)"
  say "all ${#packages[@]} pinned packages resolve"
}

ensure_host_compiler() {
  command -v "$host_compiler" >/dev/null && return 0
  say "installing $host_compiler (nvcc 11.8's host compiler) with apt-get"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$host_compiler" >&2 ||
    die "could not install $host_compiler"
}

# Lays the unpacked packages in $1 out as a toolkit root at $2.
lay_out() {
  local deb=$1 root=$2 lib
  mkdir -p "$root/bin" "$root/lib64/stubs"
  local real=$deb/usr/lib/nvidia-cuda-toolkit/bin
  # nvcc finds cicc, ptxas and libdevice through nvcc.profile beside it ($(_HERE_)): the
  # package's profile is a link to /etc/nvcc.profile, with /usr paths.
  rm -f "$real/nvcc.profile"
  cat >"$real/nvcc.profile" <<'EOF'
NVVMIR_LIBRARY_DIR = $(_HERE_)/../libdevice
PATH		+= $(_HERE_):$(_HERE_)/../../../bin:
INCLUDES	+= "-I$(_HERE_)/../../../include" $(_SPACE_)
LIBRARIES	=+ $(_SPACE_) "-L$(_HERE_)/../../x86_64-linux-gnu/stubs" "-L$(_HERE_)/../../x86_64-linux-gnu"
EOF
  # A script, not a link: nvcc takes $(_HERE_) from where its binary lies. Relative, so
  # that the tree can move from the staging directory into place.
  printf '#!/bin/sh\nexec "$(dirname "$0")/../debian/usr/lib/nvidia-cuda-toolkit/bin/nvcc" "$@"\n' \
    >"$root/bin/nvcc"
  chmod +x "$root/bin/nvcc"
  ln -s ../debian/usr/include "$root/include"
  local libdir=$deb/usr/lib/x86_64-linux-gnu
  for lib in "${libraries[@]}"; do
    [ -e "$libdir/lib$lib.so" ] || die "no lib$lib.so in the packages"
    cp -P "$libdir"/lib"$lib".so* "$root/lib64/"
  done
  cp -P "$libdir/stubs/libcuda.so" "$root/lib64/stubs/libcuda.so"
  ln -s libcuda.so "$root/lib64/stubs/libcuda.so.1"
  # What the build does not use: static libraries, the other CUDA libraries, the tools.
  find "$libdir" -maxdepth 1 \( -name '*.a' -o -name 'lib*.so*' \) -delete
  rm -rf "$deb/usr/lib/x86_64-linux-gnu/stubs" "$deb/usr/share/doc"
}

# Fetches the packages into $1 and lays them out at $1/root (see the library).
fetch_into() {
  local staging=$1 t0=$SECONDS deb
  command -v apt-get >/dev/null || die "apt-get (Debian 12) is needed to fetch the packages"
  ensure_host_compiler
  mkdir -p "$staging/debs"
  say "fetching ${#packages[@]} Debian packages (~1.2 GB) into $staging"
  private_index "$staging/apt"
  (cd "$staging/debs" && private_apt "$staging/apt" download "${packages[@]}" >&2)
  FETCHED_S=$((SECONDS - t0))
  say "unpacking"
  mkdir -p "$staging/root/debian"
  for deb in "$staging"/debs/*.deb; do
    dpkg-deb -x "$deb" "$staging/root/debian"
  done
  lay_out "$staging/root/debian" "$staging/root"
}

# As the library's, and NVCC_CCBIN: the host compiler cudaforge hands nvcc.
extra_env() {
  printf 'export NVCC_CCBIN=%q\n' "$host_compiler"
}

extra_command() {
  case "$1" in
    resolve) resolve ;;
    *) return 1 ;;
  esac
}

toolkit_main "$@"
