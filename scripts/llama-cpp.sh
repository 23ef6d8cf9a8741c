#!/usr/bin/env bash
# llama.cpp as a reference: its source (vocab test vectors), and llama-server, llama-bench
# and libllama.so built from it. Nothing of it enters the repository: everything lives in
# a cache directory outside it, keyed by version, and is reused once there.
#
#   scripts/llama-cpp.sh src      print the vendored llama.cpp source directory
#   scripts/llama-cpp.sh vocab    print the directory of ggml-vocab-*.gguf{,.inp,.out}
#   scripts/llama-cpp.sh build    build (once) and print the install prefix, which holds
#                                 bin/llama-server, bin/llama-bench and lib/libllama.so
#   scripts/llama-cpp.sh check    exit 0 if the build is there, 1 if not (prints nothing)
#   scripts/llama-cpp.sh prefix   print the install prefix (built or not)
#   scripts/llama-cpp.sh bench-tools  also build bin/llama-quantize and bin/llama-perplexity
#                                 into the prefix (benchmarks only; tests and CI never do)
#
# The source is llama.cpp commit 0c1e570 as vendored by the PyPI sdist
# llama-cpp-python==0.3.36. Cache root: $HYDRA_CACHE_DIR, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress. Progress goes to stderr, the path to
# stdout, so callers can write `prefix=$(scripts/llama-cpp.sh build)`.
set -euo pipefail

SDIST_VERSION=0.3.36
LLAMA_COMMIT=0c1e570
cache_root=${HYDRA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress}
sdist_dir=$cache_root/llama-cpp-python-$SDIST_VERSION
src=$sdist_dir/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp
prefix=$cache_root/llama.cpp-$LLAMA_COMMIT

say() { printf 'llama-cpp: %s\n' "$*" >&2; }

usage() {
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Download and unpack the sdist once; a marker file says the unpack finished.
fetch_source() {
  [ -f "$sdist_dir/.unpacked" ] && return 0
  command -v python3 >/dev/null || { say "python3 is needed to fetch the sdist"; exit 1; }
  mkdir -p "$sdist_dir"
  say "fetching llama-cpp-python==$SDIST_VERSION (sdist, ~75 MB) into $sdist_dir"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$SDIST_VERSION" -d "$sdist_dir" >&2
  tar -xzf "$sdist_dir/llama_cpp_python-$SDIST_VERSION.tar.gz" -C "$sdist_dir"
  [ -f "$src/CMakeLists.txt" ] || { say "no llama.cpp source in the sdist at $src"; exit 1; }
  touch "$sdist_dir/.unpacked"
}

is_built() {
  [ -x "$prefix/bin/llama-server" ] && [ -x "$prefix/bin/llama-bench" ] && [ -f "$prefix/.built" ]
}

build() {
  is_built && return 0
  # One build at a time: a second caller waits for the first and then finds it built.
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.llama.cpp-$LLAMA_COMMIT.lock"
  flock 9
  is_built && return 0
  fetch_source
  command -v cmake >/dev/null || { say "cmake is needed (apt-get install cmake)"; exit 1; }
  local b=$cache_root/llama.cpp-$LLAMA_COMMIT-build
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  say "building llama.cpp $LLAMA_COMMIT (llama-server, llama-bench, libllama.so) into $prefix"
  local t0=$SECONDS
  # -mno-amx-*: some VMs advertise AMX in cpuid but fault on its instructions; the
  # flags are harmless where AMX is absent. RPATH to $ORIGIN/../lib so the binaries find
  # the shared libllama/ggml next to them without LD_LIBRARY_PATH.
  cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON >&2
  cmake --build "$b" -j "$jobs" --target llama-server llama-bench >&2
  mkdir -p "$prefix/bin" "$prefix/lib"
  cp -a "$b"/bin/llama-server "$b"/bin/llama-bench "$prefix/bin/"
  find "$b" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$prefix/lib/" \;
  echo "built in $((SECONDS - t0)) s on $jobs cores" >"$prefix/.built"
  say "built in $((SECONDS - t0)) s"
}

# llama-quantize and llama-perplexity from the same configured build, for benchmarks.
bench_tools() {
  local tools=(llama-quantize llama-perplexity) t
  build
  for t in "${tools[@]}"; do [ -x "$prefix/bin/$t" ] || break; done
  [ -x "$prefix/bin/$t" ] && return 0
  exec 8>"$cache_root/.llama.cpp-$LLAMA_COMMIT.tools.lock"
  flock 8
  say "building ${tools[*]} into $prefix/bin"
  cmake --build "$cache_root/llama.cpp-$LLAMA_COMMIT-build" -j "$(nproc 2>/dev/null || echo 2)" \
    --target "${tools[@]}" >&2
  for t in "${tools[@]}"; do cp -a "$cache_root/llama.cpp-$LLAMA_COMMIT-build/bin/$t" "$prefix/bin/"; done
  # Each tool links a library of its own (libllama-quantize-impl.so, ...).
  find "$cache_root/llama.cpp-$LLAMA_COMMIT-build" -name '*.so*' \( -type f -o -type l \) \
    -exec cp -a {} "$prefix/lib/" \;
}

case "${1:-}" in
  src) fetch_source; echo "$src" ;;
  vocab) fetch_source; echo "$src/models" ;;
  build) build; echo "$prefix" ;;
  check) is_built ;;
  prefix) echo "$prefix" ;;
  bench-tools) bench_tools; echo "$prefix" ;;
  *) usage ;;
esac
