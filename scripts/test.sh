#!/usr/bin/env bash
# The project's test command (README "Test"; .ci/run runs exactly this).
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== cargo test --workspace"
cargo test --workspace

echo "== loom model of the seqlock (cfg(loom), release)"
RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom \
  cargo test -p hydra-layout --release --lib loom_model

echo "== fuzz smoke: segment open + validation + snapshot (cargo-fuzz, libFuzzer, ASan)"
scripts/fuzz.sh smoke
