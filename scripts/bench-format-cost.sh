#!/usr/bin/env bash
# What format v1.3 costs against v1.2, side by side in one run, in instructions (callgrind
# and cachegrind: deterministic, whatever else the machine does).
#
#   scripts/bench-format-cost.sh [BASE_REV] [TOKENS]
#       BASE_REV: the tree to compare with (default 86918cd^, the last v1.2 writer)
#       TOKENS:   the engine's decode length (default 128)
#
# 1. The engine: scripts/bench-publish-cost.sh with BASE_REV's engine and with this
#    tree's, each publishing on and --no-publish. The kernels differ between the two trees,
#    so their totals are not compared; each tree's publishing cost per token (on - off)
#    is, against this tree's decode without publishing (K): the ratio v1.3 / v1.2 is
#    (K + base's cost) / (K + this tree's cost), the throughput this engine would keep if
#    its publishing cost what BASE_REV's did. Every change to what is published between
#    the two trees counts against v1.3 (the cost model's batched-decode fits included).
# 2. The preload: scripts/bench-preload.sh's instruction counts (llama-bench decode, one
#    thread, the AVX2 build under valgrind) with BASE_REV's libhydra_preload.so and this
#    tree's, each against no preload; the host is the same binary, so the ratio is
#    preloaded instructions per token, base over this tree's.
#
# BASE_REV is checked out in a temporary git worktree and built into this tree's target
# directory (the dependencies are shared, so only the workspace's crates build: minutes);
# the release builds of this tree's other binaries (probe, exporter) are cleaned with them.
# Needs what the two scripts need (valgrind, llama.cpp from scripts/llama-cpp.sh build).
# Not part of CI. Ends with one line: `RESULT ...`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base_rev=${1:-86918cd^}
tokens=${2:-128}
cd "$root"
base_sha=$(git rev-parse --verify "$base_rev^{commit}")
work=$(mktemp -d -t hydra-format-cost.XXXXXX)
cleanup() {
  git -C "$root" worktree remove --force "$work/tree" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# build TREE OUT: the release engine (features as in cargo bench) and the preload of TREE.
# Cargo names a workspace crate's artifacts without its path, and the other tree's may be
# newer than this tree's sources: the tree's own crates are cleaned first, so that each
# build compiles them from its sources (the dependencies stay shared).
build() {
  (cd "$1" && export CARGO_TARGET_DIR="$root/target" &&
    members=$(cargo metadata --no-deps --format-version 1 |
      python3 -c 'import json,sys;print(" ".join("-p "+p["name"] for p in json.load(sys.stdin)["packages"]))') &&
    # shellcheck disable=SC2086 # one word per -p NAME
    cargo clean --release --quiet $members &&
    cargo build --release --quiet -p hydra-engine --bench server --bin hydra-engine &&
    cargo build --release --quiet -p hydra-preload)
  cp "$root/target/release/hydra-engine" "$2-engine"
  cp "$root/target/release/libhydra_preload.so" "$2-preload.so"
}
echo "base: $base_rev = ${base_sha:0:9}; this tree: $(git rev-parse --short HEAD)$(git diff --quiet || echo ' (modified)')"
git worktree add --detach --force "$work/tree" "$base_sha" >/dev/null 2>&1
build "$work/tree" "$work/base"
build "$root" "$work/this"
echo "machine: $(nproc) CPUs, $(uptime)"

declare -A on off pre plain
for side in base this; do
  echo "== engine publishing cost, $side"
  line=$(HYDRA_ENGINE_BIN="$work/$side-engine" "$root/scripts/bench-publish-cost.sh" "$tokens" \
    | tee /dev/stderr | grep '^RESULT on ')
  read -r _ _ on[$side] _ off[$side] _ _ <<<"$line"
  echo "== preload instructions per decoded token, $side"
  line=$(HYDRA_PRELOAD_SO="$work/$side-preload.so" "$root/scripts/bench-preload.sh" 0 \
    | tee /dev/stderr | grep '^RESULT instructions')
  read -r _ _ _ _ _ plain[$side] _ pre[$side] _ <<<"$line"
done
echo "after: $(uptime)"
python3 - "$tokens" "${on[base]}" "${off[base]}" "${on[this]}" "${off[this]}" \
  "${plain[base]}" "${pre[base]}" "${plain[this]}" "${pre[this]}" <<'PY'
import sys
n = int(sys.argv[1])
on_b, off_b, on_t, off_t, plain_b, pre_b, plain_t, pre_t = map(float, sys.argv[2:])
cost_b, cost_t, k = (on_b - off_b) / n, (on_t - off_t) / n, off_t / n
engine = (k + cost_b) / (k + cost_t)
print(f"engine: decode without publishing {k:,.0f} instructions per token (this tree); "
      f"publishing base {cost_b:,.0f}, this tree {cost_t:,.0f} per token")
if plain_b != plain_t:
    print(f"note: the host's own count differs between the two runs ({plain_b:.0f} / {plain_t:.0f})")
preload = pre_b / pre_t
print(f"preload: preloaded llama-bench base {pre_b:,.0f}, this tree {pre_t:,.0f} instructions "
      f"per token (plain {plain_t:,.0f})")
print(f"RESULT v1.3 against v1.2 (throughput, instructions): engine {engine:.5f}, "
      f"preload {preload:.5f}")
PY
