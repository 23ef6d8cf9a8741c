#!/usr/bin/env bash
# Fuzzes the segment reader (hydra-layout) and the probe (hydra-probe) with cargo-fuzz /
# libFuzzer: target `segment_open` in fuzz/ (see fuzz/README.md).
#
#   scripts/fuzz.sh smoke          CI smoke: build, then 30,000 executions from the committed
#                                  seeds (fresh scratch corpus); fails on any crash, panic,
#                                  timeout or out-of-memory.
#   scripts/fuzz.sh long [RUNS]    the documented long run: RUNS executions (default
#                                  1,000,000) on one core, corpus kept in fuzz/corpus/, then
#                                  the final libFuzzer stats.
#   scripts/fuzz.sh build          only build the target.
#
# Environment:
#   FUZZ_SANITIZER  cargo-fuzz sanitizer: address (default) or none.
#   FUZZ_SEED       libFuzzer -seed (default: random, printed in the log).
#   FUZZ_ARGS       extra libFuzzer flags, appended.
#
# The toolchain is stable; cargo-fuzz needs nightly-only rustc flags (-Zsanitizer,
# sancov passes), which RUSTC_BOOTSTRAP=1 unlocks on stable. When cargo-fuzz is missing,
# scripts/setup.sh installs it. The target writes its input files under
# $TMPDIR, which this script points at a scratch directory that it removes on exit.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
fuzz_dir="$root/fuzz"
target=segment_open
seeds="$fuzz_dir/seeds/$target"
# 3 control bytes + a 2-slot v1.3 segment (header, 2 records, the region directory, 2 slots'
# statistics and flight recorders, the devices: 7,424 + 2 x 14,592 bytes, FORMAT §16.3), so
# that inputs reach the regions; larger slot tables are still exercised up to that length.
max_len=36611

usage() {
    sed -n '2,20p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
    exit 2
}

mode="${1:-}"
case "$mode" in
    smoke | long | build) ;;
    *) usage ;;
esac

if ! cargo fuzz --version >/dev/null 2>&1; then
    # Installing is scripts/setup.sh's job (the one place that installs what tests need).
    "$root/scripts/setup.sh"
fi

export RUSTC_BOOTSTRAP=1
sanitizer="${FUZZ_SANITIZER:-address}"
build_flags=(--fuzz-dir "$fuzz_dir" --sanitizer "$sanitizer")

scratch="$(mktemp -d "${TMPDIR:-/tmp}/hydra-fuzz.XXXXXX")"
cleanup() { rm -rf -- "$scratch"; }
trap cleanup EXIT
mkdir -p "$scratch/tmp"

echo "fuzz.sh: building $target (sanitizer: $sanitizer)" >&2
cargo fuzz build "${build_flags[@]}" "$target"
[[ "$mode" == build ]] && exit 0

# Runs libFuzzer with the given corpus directory first (libFuzzer adds new inputs to the
# first one only; the committed seeds are never written) and the libFuzzer flags after it.
# Prints the final stats; returns libFuzzer's status.
run() {
    local corpus="$1" log="$2"
    shift 2
    local seed_flag=()
    [[ -n "${FUZZ_SEED:-}" ]] && seed_flag=(-seed="$FUZZ_SEED")
    local start end status
    start=$(date +%s)
    set +e
    # shellcheck disable=SC2086 # FUZZ_ARGS is a list of flags
    TMPDIR="$scratch/tmp" cargo fuzz run "${build_flags[@]}" "$target" "$corpus" "$seeds" -- \
        -max_len="$max_len" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
        "${seed_flag[@]}" "$@" ${FUZZ_ARGS:-} >"$log" 2>&1
    status=$?
    set -e
    end=$(date +%s)
    echo "---- libFuzzer ($((end - start)) s, exit status $status, log: $log) ----"
    grep -E '^INFO: Seed:|^#[0-9]+[[:space:]]+DONE|^stat::|^Done [0-9]+ runs' "$log" || true
    if [[ $status -ne 0 ]]; then
        echo "---- failure (last 60 lines of the log) ----"
        tail -n 60 "$log"
        grep -E '^(artifact_prefix|Test unit written to)' "$log" || true
    fi
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    return "$status"
}

case "$mode" in
    smoke)
        mkdir -p "$scratch/corpus"
        run "$scratch/corpus" "$fuzz_dir/fuzz-smoke.log" -runs=30000 -max_total_time=240
        ;;
    long)
        runs="${2:-1000000}"
        [[ "$runs" =~ ^[0-9]+$ ]] || usage
        corpus="$fuzz_dir/corpus/$target"
        mkdir -p "$corpus"
        echo "fuzz.sh: $runs executions, corpus $corpus, started $(date -u +%Y-%m-%dT%H:%M:%SZ)" >&2
        run "$corpus" "$fuzz_dir/fuzz-long.log" -runs="$runs"
        ;;
esac
