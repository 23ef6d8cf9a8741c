#!/usr/bin/env bash
# Crash loop, documented run: start an engine, start a long decode, SIGKILL it at a random
# moment, check the probe's verdict (dead, slot orphaned, last progress kept), restart with
# the same id, check it serves; N times (default 100; CI runs 10 inside `cargo test`).
# The seed of the kill moments is printed; pass it back to replay a run.
#
#   scripts/crash-loop.sh [N] [SEED]
set -euo pipefail
cd "$(dirname "$0")/.."
export HYDRA_CRASH_ROUNDS="${1:-100}"
if [[ -n "${2:-}" ]]; then export HYDRA_CRASH_SEED="$2"; fi
exec cargo test -p hydra-fault --test crash_loop -- --nocapture
