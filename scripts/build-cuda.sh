#!/usr/bin/env bash
# The CUDA build of hydra-engine (`--features cuda`) and hydra-probe, against the CUDA 13.0
# toolkit of scripts/cuda-toolkit.sh (compute capability 7.5 and newer) or, for older GPUs
# (a P100 is 6.0), the CUDA 11.8 toolkit of scripts/cuda-toolkit-debian.sh, in a cargo
# target directory kept in the cache (outside the repository, keyed by the toolkit version)
# so that later builds are incremental.
#
#   scripts/build-cuda.sh build       build (incrementally); print the directory holding
#                                     hydra-engine and hydra-probe
#   scripts/build-cuda.sh env         build, then print the `export` lines the CUDA binary
#                                     test (engine/cli/tests/cuda_binary.rs) reads:
#                                     HYDRA_CUDA_ENGINE, HYDRA_CUDA_LIBRARY_PATH
#   scripts/build-cuda.sh cargo-env   install the toolkit (once), then print the `export`
#                                     lines under which `cargo build|check --release
#                                     --features cuda -p hydra-engine` uses it and the
#                                     cached target directory
#   scripts/build-cuda.sh unit-tests  run the engine's CUDA-only unit tests (device::cuda:
#                                     error classification; no GPU needed)
#   scripts/build-cuda.sh bundle-path print where `bundle` writes the bundle
#   scripts/build-cuda.sh bundle      build, then write target/hydra-cuda.tar.xz (for
#                                     compute capability 9.0; hydra-cuda-smNN.tar.xz for
#                                     another): the
#                                     stripped binaries, a `run` wrapper that finds the
#                                     CUDA libraries of the machine's PyTorch wheels,
#                                     scripts/device-check.sh and what it needs (the GGUF
#                                     generator, its `gguf` package, a vocabulary)
#
# CUDA_COMPUTE_CAP (default 90: an H100/H200) selects the GPU generation candle's kernels
# are compiled for: PTX for compute_90a, which the driver compiles at load, plus SASS for
# sm_90a for the kernels linked in as a static library. 60 (a P100) and 86 (an RTX 3060) are
# the deployment's other GPUs; below 75 the build takes the CUDA 11.8 toolkit. Each value
# has a target directory of its own (target_dir below). Progress goes to stderr.
set -euo pipefail
# `out=$(build)` and the like: a failed build inside stops the script too (bash leaves
# errexit off in command substitutions otherwise, and the caller took a stale binary).
shopt -s inherit_errexit

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache_root=${HYDRA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress}
compute_cap=${CUDA_COMPUTE_CAP:-90}
[[ $compute_cap =~ ^[1-9][0-9]$ ]] || {
  echo "build-cuda: CUDA_COMPUTE_CAP=$compute_cap is not a compute capability such as 60, 86 or 90" >&2
  exit 2
}
# CUDA 13 starts at compute capability 7.5; CUDA 11.8 reaches down to 3.5.
if ((compute_cap < 75)); then
  toolkit="$root/scripts/cuda-toolkit-debian.sh"
else
  toolkit="$root/scripts/cuda-toolkit.sh"
fi
if ((compute_cap == 90)); then
  bundle=$root/target/hydra-cuda.tar.xz
else
  bundle=$root/target/hydra-cuda-sm$compute_cap.tar.xz
fi
# Pure-Python packages the device check's model generator imports, carried in the bundle
# (the GPU machine has numpy but no `gguf`; `gguf` imports `yaml`, which runs without its
# optional C extension whatever the Python version).
bundle_wheels=("gguf==0.19.0" "PyYAML==6.0.2")

say() { printf 'build-cuda: %s\n' "$*" >&2; }

# The cached target directory: one per toolkit version and compute capability, since
# candle-kernels' build script compiles for one capability and reruns whenever it changes
# (two capabilities in one directory would rebuild candle's kernels at each alternation).
# Each toolkit's own capability (9.0 for CUDA 13, which the test suite builds; 6.0 for
# CUDA 11.8) keeps the directory named by the version alone.
target_dir() {
  local version
  version=$("$toolkit" version)
  case $compute_cap in
    90 | 60) echo "$cache_root/cuda-target-$version" ;;
    *) echo "$cache_root/cuda-target-$version-sm$compute_cap" ;;
  esac
}

# The toolkit's `export` lines plus the build's own: the cached target directory and the
# compute capability.
cargo_env() {
  "$toolkit" env
  printf 'export CARGO_TARGET_DIR=%q\n' "$(target_dir)"
  printf 'export CUDA_COMPUTE_CAP=%q\n' "$compute_cap"
}

# vendor/candle-kernels in a fresh clone (every CI run) has new mtimes, and cargo judges a
# path dependency by its files' mtimes: the cached target would rebuild candle-kernels and
# all of candle after it each time (measured: 222 s for the CUDA build, 73 s before the
# vendored crate). So after each build the git tree id of the vendored crate is recorded
# beside the target; when the next build finds that same tree, with no change to it in the
# checkout, its files get the time of the commit that last changed them, older than that
# build. Any other content keeps its new mtimes and is rebuilt.
vendored=vendor/candle-kernels

# The vendored crate's tree id at HEAD, when the checkout has no change to it.
vendored_tree() {
  [ -z "$(git -C "$root" status --porcelain -- "$vendored" 2>/dev/null)" ] || return 1
  git -C "$root" rev-parse -q --verify "HEAD:$vendored" 2>/dev/null
}

settle_vendored_mtimes() {
  local tree when
  tree=$(vendored_tree) || return 0
  local stamp=$CARGO_TARGET_DIR/.vendored-tree
  [ "$(cat "$stamp" 2>/dev/null)" = "$tree" ] || { rm -f "$stamp"; return 0; }
  when=$(git -C "$root" log -1 --format=%ct -- "$vendored")
  find "$root/$vendored" -exec touch -h -d "@$when" {} +
  # Until this build ends, the target is not known to hold this tree (a build stopped
  # half way on other content must not be taken for it).
  rm -f "$stamp"
}

record_vendored_tree() {
  local tree
  if tree=$(vendored_tree); then echo "$tree" >"$CARGO_TARGET_DIR/.vendored-tree"; fi
}

# Runs cargo (the arguments) in the repository on the cached target, with the vendored
# crate's mtimes settled before and its tree recorded after a build that succeeded.
cargo_on_target() {
  settle_vendored_mtimes
  (cd "$root" && nice -n 5 cargo "$@") || return
  record_vendored_tree
}

build() {
  local env
  env=$(cargo_env)
  eval "$env"
  say "cargo build --release --features cuda (hydra-engine, hydra-probe) into $CARGO_TARGET_DIR"
  local t0=$SECONDS
  cargo_on_target build --release --locked --quiet -p hydra-engine -p hydra-probe-cli \
    --features hydra-engine/cuda
  say "built in $((SECONDS - t0)) s"
  echo "$CARGO_TARGET_DIR/release"
}

print_test_env() {
  local out prefix
  out=$(build)
  prefix=$("$toolkit" prefix)
  printf 'export HYDRA_CUDA_ENGINE=%q\n' "$out/hydra-engine"
  # The toolkit's libraries, and its driver stub for machines without the NVIDIA driver.
  printf 'export HYDRA_CUDA_LIBRARY_PATH=%q\n' "$prefix/lib64:$prefix/lib64/stubs"
}

unit_tests() {
  local env prefix
  env=$(cargo_env)
  eval "$env"
  prefix=$("$toolkit" prefix)
  # The test binary links the CUDA libraries: the toolkit's, and its driver stub.
  LD_LIBRARY_PATH="$prefix/lib64:$prefix/lib64/stubs" \
    cargo_on_target test --release --locked -p hydra-engine-core --features cuda --lib device
}

make_bundle() {
  local out stage
  out=$(build)
  command -v xz >/dev/null || { say "xz is needed (apt-get install xz-utils)"; exit 1; }
  stage=$(mktemp -d)
  trap 'rm -rf "$stage"' RETURN
  local b=$stage/hydra-cuda
  mkdir -p "$b/bin" "$b/python" "$b/models"
  strip -o "$b/bin/hydra-engine" "$out/hydra-engine"
  strip -o "$b/bin/hydra-probe" "$out/hydra-probe"
  cp "$root/scripts/cuda-run.sh" "$b/run"
  cp "$root/scripts/device-check.sh" "$root/scripts/device_check.py" "$b/"
  cp "$root/engine/core/tests/models/make_gguf.py" "$b/models/make_gguf.py"
  cp "$("$root/scripts/llama-cpp.sh" vocab)/ggml-vocab-llama-spm.gguf" "$b/models/"
  python3 -m pip download --quiet --no-deps --only-binary :all: -d "$stage/wheels" \
    "${bundle_wheels[@]}" >&2
  local whl
  for whl in "$stage"/wheels/*.whl; do
    unzip -q -o "$whl" -x '*.dist-info/*' -d "$b/python"
  done
  {
    echo "hydra-progress $(git -C "$root" describe --always --dirty 2>/dev/null || echo unknown)"
    echo "CUDA toolkit $(basename "$("$toolkit" prefix)"), CUDA_COMPUTE_CAP=$compute_cap"
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$b/BUILD-INFO"
  mkdir -p "$(dirname "$bundle")"
  tar -C "$stage" -cf - hydra-cuda | xz -T0 -6 >"$bundle.tmp"
  mv "$bundle.tmp" "$bundle"
  say "bundle $(du -h "$bundle" | cut -f1) ($(du -sh "$b" | cut -f1) unpacked)"
  echo "$bundle"
}

case "${1:-}" in
  build) build ;;
  bundle-path) echo "$bundle" ;;
  env) print_test_env ;;
  cargo-env) cargo_env ;;
  unit-tests) unit_tests ;;
  bundle) make_bundle ;;
  *) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
esac
