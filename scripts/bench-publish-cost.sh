#!/usr/bin/env bash
# Publishing cost in instructions, measured with callgrind (deterministic: the count does
# not depend on what else the machine is doing, unlike wall-clock throughput on a shared
# VM). Runs `hydra-engine serve --builtin` under callgrind twice, publishing on and
# `--no-publish`, decodes the same tokens greedily on slot 0, and counts the instructions
# the whole engine process executes during the decode request only (counters zeroed right
# before it and dumped right after it with callgrind_control).
#
#   scripts/bench-publish-cost.sh [TOKENS]        (default 128)
#
# HYDRA_ENGINE_BIN: an engine binary already built (default: cargo build --release of this
# tree), e.g. another revision's (scripts/bench-format-cost.sh). Ends with one line:
# `RESULT on ON off OFF tokens N` (instructions of the decode request).
# Needs valgrind (callgrind, callgrind_control). Release build.
set -euo pipefail
cd "$(dirname "$0")/.."
tokens="${1:-128}"
# Built together with a bench target so that features match `cargo bench` (dev-dependencies
# unify features), which keeps the cached release build of candle.
bin="${HYDRA_ENGINE_BIN:-}"
if [[ -z "$bin" ]]; then
    cargo build --release --quiet -p hydra-engine --bench server --bin hydra-engine
    bin="$PWD/target/release/hydra-engine"
fi
work="$(mktemp -d -t hydra-publish-cost.XXXXXX)"
trap 'pkill -f "callgrind.*$work" 2>/dev/null || true; rm -rf "$work"' EXIT

post() { curl -fsS -m 600 -H 'Content-Type: application/json' -d "$2" "$1" >/dev/null; }

measure() { # $1 = on|off
    local mode="$1" extra=() port log
    [[ "$mode" == off ]] && extra=(--no-publish)
    log="$work/$mode.log"
    valgrind --tool=callgrind --callgrind-out-file="$work/cg.$mode.%p" \
        "$bin" serve --builtin --slots 2 --ctx 1024 --threads 1 --engine-id "cost-$mode" \
        --progress-dir "$work" --listen 127.0.0.1:0 "${extra[@]}" >"$log" 2>"$work/$mode.err" &
    local pid=$!
    for _ in $(seq 1 600); do
        grep -q '^listening on ' "$log" 2>/dev/null && break
        sleep 0.5
    done
    local base
    base="$(sed -n 's/^listening on //p' "$log" | head -1)"
    [[ -n "$base" ]] || { echo "engine ($mode) did not start" >&2; cat "$work/$mode.err" >&2; exit 1; }
    post "$base/slots/0/prefill" '{"prompt":"Publishing cost: "}'
    callgrind_control -z "$pid" >/dev/null 2>&1
    post "$base/slots/0/decode" "{\"n_predict\":$tokens,\"ignore_eos\":true}"
    callgrind_control -d "decode-$mode" "$pid" >/dev/null 2>&1
    kill -TERM "$pid"; wait "$pid" || true
    # The dump made by `-d` is the numbered file part; its totals line is the decode's.
    local dump
    dump="$(grep -l "decode-$mode" "$work"/cg."$mode".* | head -1)"
    awk '/^(summary|totals):/ {print $2; exit}' "$dump"
}

echo "machine: $(nproc) CPUs, $(uptime)"
on="$(measure on)"
off="$(measure off)"
awk -v on="$on" -v off="$off" -v n="$tokens" 'BEGIN {
    printf "| decode of %d tokens, embedded model, 1 thread | instructions | per token |\n", n
    printf "|---|---:|---:|\n"
    printf "| publishing off (--no-publish) | %d | %d |\n", off, off / n
    printf "| publishing on | %d | %d |\n", on, on / n
    printf "publishing costs %d instructions per token: throughput ratio on/off = %.6f\n", (on - off) / n, off / on
}'
echo "RESULT on $on off $off tokens $tokens"
