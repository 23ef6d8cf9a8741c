#!/usr/bin/env bash
# Per-call cost of the C# library (ReadMeta, ReadSlot) next to the Rust probe library's own
# (hydra_probe_meta_json, hydra_probe_read_slot called from C), on one live engine segment,
# in one run. The native library is built in the release profile (the figures are for
# optimised code); the engine, only the writer here, is the dev build the tests use.
#
#   bindings/csharp/bench/run.sh [CALLS_PER_ROUND] [ROUNDS]      # defaults 20000 7
#   HYDRA_BENCH_PROFILE=dev bindings/csharp/bench/run.sh          # the test build's library
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../../.." && pwd)
for tool in mcs mono cc; do
    command -v "$tool" >/dev/null || { echo "error: $tool is missing (apt-get install mono-mcs mono-runtime gcc)" >&2; exit 1; }
done
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
PROFILE=${HYDRA_BENCH_PROFILE:-release}
cargo build --quiet --profile "$PROFILE" --manifest-path "$ROOT/Cargo.toml" -p hydra-probe-capi
cargo build --quiet --manifest-path "$ROOT/Cargo.toml" -p hydra-engine
BIN=$CARGO_TARGET_DIR/$([[ $PROFILE == dev ]] && echo debug || echo "$PROFILE")
echo "native library: $BIN/libhydra_probe_ffi.so (profile $PROFILE)"
OUT=$CARGO_TARGET_DIR/csharp-bench
rm -rf "$OUT" && mkdir -p "$OUT"
CS=$ROOT/bindings/csharp
mcs -nologo -warnaserror -optimize+ -target:library -unsafe -r:System.Numerics \
    -out:"$OUT/Hydra.Progress.dll" "$CS"/src/*.cs
mcs -nologo -warnaserror -optimize+ -target:exe -r:"$OUT/Hydra.Progress.dll" \
    -out:"$OUT/Hydra.Progress.Bench.exe" "$CS"/bench/*.cs "$CS"/tests/EngineProcess.cs
cc -O2 -std=c11 -I "$ROOT/include" -o "$OUT/native_bench" "$CS/bench/native_bench.c" \
    -L "$BIN" -lhydra_probe_ffi -Wl,-rpath,"$BIN"
echo "load before: $(uptime)"
HYDRA_PROBE_LIB=$BIN/libhydra_probe_ffi.so HYDRA_ENGINE_BIN=$CARGO_TARGET_DIR/debug/hydra-engine \
    HYDRA_PROGRESS_DIR=$OUT/unused-progress-dir \
    mono --optimize=all "$OUT/Hydra.Progress.Bench.exe" "$OUT/native_bench" "$@"
echo "load after: $(uptime)"
