#!/usr/bin/env bash
# Whole-process wall time of one `hydra-probe meta ENGINE SLOT` call (what a STATE_META
# answer costs a caller that shells out), against a fake writer publishing on 4 slots
# thousands of times per second. Prints min / median / p90 / max over RUNS calls, and the
# same for `/bin/true` as the process-spawn floor.
#
#   scripts/bench-probe-meta.sh            # RUNS=200
#   RUNS=1000 scripts/bench-probe-meta.sh
#
# Uses hyperfine when installed, else a bash loop timed with $EPOCHREALTIME (a builtin,
# so the timer adds no process of its own; falls back to `date +%s%N`).
set -euo pipefail

RUNS=${RUNS:-200}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
cargo build --quiet --release --manifest-path "$ROOT/Cargo.toml" -p hydra-probe-cli \
    --bin hydra-probe --example fake_writer
BIN=$CARGO_TARGET_DIR/release/hydra-probe
FAKE=$CARGO_TARGET_DIR/release/examples/fake_writer

WORK=$(mktemp -d)
FAKE_PID=
cleanup() {
    exec 3>&- 2>/dev/null || true          # EOF on the writer's stdin: it closes and exits
    if [[ -n $FAKE_PID ]]; then
        kill "$FAKE_PID" 2>/dev/null || true
        wait "$FAKE_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT

mkfifo "$WORK/stdin"
"$FAKE" "$WORK/segs" bench 4 600 <"$WORK/stdin" >"$WORK/ready" &
FAKE_PID=$!
exec 3>"$WORK/stdin"
for _ in $(seq 1 500); do                # wait for the segment, at most ~10 s
    grep -q fake-writer-ready "$WORK/ready" 2>/dev/null && break
    kill -0 "$FAKE_PID" 2>/dev/null || { echo "fake writer died" >&2; exit 1; }
    sleep 0.02
done
grep -q fake-writer-ready "$WORK/ready" || { echo "fake writer did not start" >&2; exit 1; }

CMD=("$BIN" --dir "$WORK/segs" meta bench 0)
"${CMD[@]}"   # show one answer
echo "command: hydra-probe --dir DIR meta bench 0   (runs: $RUNS, writer: 4 slots publishing)"

if command -v hyperfine >/dev/null; then
    hyperfine --warmup 20 --runs "$RUNS" -N "${CMD[*]}" /bin/true
    exit 0
fi

measure() {   # measure NAME CMD... -> prints stats in microseconds
    local name=$1; shift
    local samples=() i t0 t1
    for ((i = 0; i < 20; i++)); do "$@" >/dev/null; done   # warm-up
    for ((i = 0; i < RUNS; i++)); do
        if [[ -n ${EPOCHREALTIME:-} ]]; then
            # Builtin, read inline: no subshell inside the measured interval.
            t0=${EPOCHREALTIME/./}; "$@" >/dev/null; t1=${EPOCHREALTIME/./}
            samples+=($((10#$t1 - 10#$t0)))
        else
            t0=$(date +%s%N); "$@" >/dev/null; t1=$(date +%s%N)
            samples+=($(((t1 - t0) / 1000)))
        fi
    done
    printf '%s\n' "${samples[@]}" | sort -n | awk -v name="$name" '
        { v[NR] = $1 }
        END {
            med = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
            printf "%-24s min %6d us  median %6d us  p90 %6d us  max %6d us  (n=%d)\n",
                name, v[1], med, v[int(NR * 0.9)], v[NR], NR
        }'
}

measure "hydra-probe meta" "${CMD[@]}"
measure "/bin/true (spawn floor)" /bin/true
