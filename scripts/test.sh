#!/usr/bin/env bash
# The project's test command (README "Test"; .ci/run runs exactly this). It first installs
# whatever the suite needs and the machine lacks (scripts/setup.sh, quiet when nothing is
# missing), so it runs as is on a fresh machine.
#
# Tests that need the real model or an external tool fail when it is missing; set
# HYDRA_ALLOW_SKIP=1 to let them skip instead (a developer's quick loop, never CI).
#
# Each section's wall time is printed at the end (on failure too): where a cold run's time
# goes.
set -euo pipefail
cd "$(dirname "$0")/.."

section_name=""
section_start=$SECONDS
section_times=()
# Starts section "$1" (and ends the one before), printing its title.
section() {
  if [ -n "$section_name" ]; then
    section_times+=("$(printf '%6d s  %s' $((SECONDS - section_start)) "$section_name")")
  fi
  section_name=$1
  section_start=$SECONDS
  [ -z "$1" ] || echo "== $1"
}
report_times() {
  local rc=$?
  section ""
  echo "== times (rc $rc, $SECONDS s in all; $(scripts/disk-space.sh report))"
  printf '%s\n' "${section_times[@]}"
}
trap report_times EXIT

section "disk space (scripts/disk-space.sh)"
scripts/disk-space.sh check

section "setup (scripts/setup.sh)"
scripts/setup.sh

section "CUDA build: hydra-engine --features cuda (incremental; cached outside the repository)"
# Exports HYDRA_CUDA_ENGINE and HYDRA_CUDA_LIBRARY_PATH for engine/cli/tests/cuda_binary.rs
# (an assignment first, so that a failed build stops the run).
cuda_env=$(scripts/build-cuda.sh env)
eval "$cuda_env"
scripts/build-cuda.sh unit-tests
# The P100 route's inputs (its build is not run here: BENCHMARKS.md "CUDA build"): the
# vendored candle-kernels is the published crate plus its patch, and Debian's CUDA 11.8
# packages still resolve (a few seconds each).
scripts/vendor-candle-kernels.sh check
scripts/cuda-toolkit-debian.sh resolve

section "cargo test --workspace"
cargo test --workspace

section "C# library (bindings/csharp) against a live engine (mcs + mono)"
scripts/test-csharp.sh

section "loom model of the seqlock (cfg(loom), release)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p hydra-layout --release --lib loom_model

section "fuzz smoke: segment open + validation + snapshot (cargo-fuzz, libFuzzer, ASan)"
scripts/fuzz.sh smoke
