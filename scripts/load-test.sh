#!/usr/bin/env bash
# Load test, documented run: 100 reader processes (50 `hydra-probe watch` CLI loops at
# 100 ms, 50 probe-library loops at 100 Hz) plus exporter scrapes at 10 Hz while the
# engine decodes; decode throughput with the readers running versus stopped (SIGSTOP), in
# alternating ABBA pairs; zero torn snapshots asserted. Dev profile, like `cargo test`
# (dependencies such as candle are optimised there; see the root Cargo.toml).
#
#   scripts/load-test.sh [ROUNDS] [TOKENS]      (defaults 10 pairs of 1024-token decodes)
#   PIN=1 scripts/load-test.sh                  engine on CPU 0, readers and exporter on CPU 1
#   READERS=N HZ=N scripts/load-test.sh         other reader counts and rates
set -euo pipefail
cd "$(dirname "$0")/.."
export HYDRA_LOAD_ROUNDS="${1:-10}"
export HYDRA_LOAD_TOKENS="${2:-1024}"
export HYDRA_LOAD_PIN="${PIN:-0}"
export HYDRA_LOAD_READERS="${READERS:-100}"
export HYDRA_LOAD_HZ="${HZ:-100}"
echo "machine: $(nproc) CPUs, $(uptime)"
exec cargo test -p hydra-fault --test load -- --nocapture
