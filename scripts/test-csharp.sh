#!/usr/bin/env bash
# The C# library (bindings/csharp, Hydra.Progress) against the real native library, a live
# engine, the hostile corpus and the C header:
#   1. checks Hydra.Progress.csproj (well-formed XML; its Compile list equals src/*.cs),
#   2. builds libhydra_probe_ffi.so, hydra-engine, hydra-probe and hydra-fault-corpus (dev
#      profile, the workspace's own target directory),
#   3. compiles the library and the test program with Mono's mcs (warnings are errors),
#   4. writes the hostile corpus, and runs the tests with mono.
# Exits non-zero on any failure. Needs mcs, mono (Debian: mono-mcs, mono-runtime), python3
# and a C compiler; without them it fails, unless HYDRA_ALLOW_SKIP=1 (then it skips).
#
#   scripts/test-csharp.sh            # all tests
#   scripts/test-csharp.sh corpus     # the tests whose name contains "corpus"
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
CS=$ROOT/bindings/csharp

missing=()
for tool in mcs mono python3 "${CC:-cc}"; do
    command -v "$tool" >/dev/null || missing+=("$tool")
done
if ((${#missing[@]})); then
    msg="scripts/test-csharp.sh needs: ${missing[*]} (Debian: apt-get install mono-mcs mono-runtime gcc python3; scripts/setup.sh installs them)"
    if [[ ${HYDRA_ALLOW_SKIP:-} == 1 ]]; then
        echo "SKIPPED (HYDRA_ALLOW_SKIP=1): $msg" >&2
        exit 0
    fi
    echo "error: $msg" >&2
    exit 1
fi

echo "== Hydra.Progress.csproj"
python3 - "$CS" <<'PY'
import pathlib, sys, xml.etree.ElementTree as ET
cs = pathlib.Path(sys.argv[1])
proj = ET.parse(cs / "Hydra.Progress.csproj").getroot()   # raises on malformed XML
assert proj.tag == "Project" and proj.get("Sdk") == "Microsoft.NET.Sdk", "an SDK-style project"
props = {e.tag: (e.text or "").strip() for g in proj.findall("PropertyGroup") for e in g}
want = {"TargetFramework": "netstandard2.0", "AllowUnsafeBlocks": "true", "EnableDefaultCompileItems": "false"}
for k, v in want.items():
    assert props.get(k) == v, f"<{k}> must be {v}, is {props.get(k)!r}"
listed = [c.get("Include") for g in proj.findall("ItemGroup") for c in g.findall("Compile")]
assert len(listed) == len(set(listed)), f"a source is listed twice: {listed}"
on_disk = sorted(p.relative_to(cs).as_posix() for p in (cs / "src").glob("*.cs"))
assert sorted(listed) == on_disk, f"Compile items {sorted(listed)} != src/*.cs {on_disk}"
print(f"well-formed; {len(listed)} sources listed, the same as src/*.cs")
PY

echo "== cargo test --workspace --no-run (hydra-engine, hydra-probe, hydra-fault-corpus) and the capi library"
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
# The binaries: the same command line (and so the same feature resolution, dev-dependencies
# included) as scripts/test.sh's `cargo test --workspace`, which has built them just before;
# a `cargo build -p hydra-engine ...` resolves features without dev-dependencies and would
# compile candle and the engine a second time (minutes on a cold machine). The cdylib is not
# among a test build's outputs, so it is built from the capi crate alone (no candle in its
# tree).
cargo test --workspace --no-run --quiet --manifest-path "$ROOT/Cargo.toml"
cargo build --quiet --manifest-path "$ROOT/Cargo.toml" -p hydra-probe-capi --lib
BIN=$CARGO_TARGET_DIR/debug
for f in libhydra_probe_ffi.so hydra-engine hydra-probe hydra-fault-corpus; do
    [[ -e $BIN/$f ]] || { echo "error: $BIN/$f missing after the build" >&2; exit 1; }
done

OUT=$(mktemp -d "${TMPDIR:-/tmp}/hydra-csharp.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

echo "== mcs"
mcs -nologo -warnaserror -target:library -unsafe -r:System.Numerics \
    -doc:"$OUT/Hydra.Progress.xml" -out:"$OUT/Hydra.Progress.dll" "$CS"/src/*.cs
mcs -nologo -warnaserror -target:exe -r:"$OUT/Hydra.Progress.dll" -r:System.Numerics \
    -out:"$OUT/Hydra.Progress.Tests.exe" "$CS"/tests/*.cs
# The benchmark compiles too (it runs only from bindings/csharp/bench/run.sh).
mcs -nologo -warnaserror -target:exe -r:"$OUT/Hydra.Progress.dll" \
    -out:"$OUT/Hydra.Progress.Bench.exe" "$CS"/bench/*.cs "$CS"/tests/EngineProcess.cs
"${CC:-cc}" -std=c11 -Wall -Werror -fsyntax-only -I "$ROOT/include" "$CS/bench/native_bench.c"

echo "== hostile corpus"
"$BIN/hydra-fault-corpus" "$OUT/corpus"

echo "== tests"
# Every test names its own directory; this keeps anything else off the real one.
mkdir -p "$OUT/progress"
HYDRA_PROGRESS_DIR=$OUT/progress \
HYDRA_PROBE_LIB=$BIN/libhydra_probe_ffi.so \
HYDRA_ENGINE_BIN=$BIN/hydra-engine \
HYDRA_PROBE_BIN=$BIN/hydra-probe \
HYDRA_CORPUS_DIR=$OUT/corpus \
HYDRA_PROBE_HEADER=$ROOT/include/hydra_probe.h \
    mono --debug "$OUT/Hydra.Progress.Tests.exe" "$@"
