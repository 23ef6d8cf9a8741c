#!/usr/bin/env bash
# llama.cpp as a reference: its source (vocab test vectors), and llama-server, llama-bench
# and libllama.so built from it. Nothing of it enters the repository: everything lives in
# a cache directory outside it, keyed by version, and is reused once there.
#
#   scripts/llama-cpp.sh src      print the vendored llama.cpp source directory
#   scripts/llama-cpp.sh vocab    print the directory of ggml-vocab-*.gguf{,.inp,.out}
#   scripts/llama-cpp.sh build    build (once) and print the install prefix, which holds
#                                 bin/llama-server, the ggml RPC peer bin/ggml-rpc-server
#                                 and lib/libllama.so (shared ggml, with its RPC backend)
#   scripts/llama-cpp.sh bench    as build, and bin/llama-bench as well (the benchmarks)
#   scripts/llama-cpp.sh check    exit 0 if the build is there, 1 if not (prints nothing)
#   scripts/llama-cpp.sh prefix   print the install prefix (built or not)
#   scripts/llama-cpp.sh bench-tools  as bench, and bin/llama-quantize and
#                                 bin/llama-perplexity (benchmarks only; tests and CI never do)
#   scripts/llama-cpp.sh rpc-server  print the RPC peer's name in this generation
#                                 (ggml-rpc-server; legacy-rpc-server: rpc-server)
#   scripts/llama-cpp.sh legacy-build|legacy-check|legacy-prefix|legacy-src
#                                 the same for the older API generation (llama_decode,
#                                 llama_memory_seq_rm): llama-server and bin/rpc-server
#   scripts/llama-cpp.sh valgrind-bench
#                                 llama-bench of 0c1e570 for AVX2 (no AVX-512), which
#                                 valgrind can run (scripts/bench-preload.sh)
#   scripts/llama-cpp.sh avx2-bench
#                                 as valgrind-bench, and bin/llama-server of the same AVX2
#                                 build (scripts/bench-vs-llamacpp.sh --isa avx2; benchmarks
#                                 only)
#
# The source is llama.cpp commit 0c1e570 as vendored by the PyPI sdist
# llama-cpp-python==0.3.36; the older generation is the llama.cpp vendored by
# llama-cpp-python==0.3.16. Cache root: $HYDRA_CACHE_DIR, else
# ${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress. Progress goes to stderr, the path to
# stdout, so callers can write `prefix=$(scripts/llama-cpp.sh build)`.
set -euo pipefail

cache_root=${HYDRA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress}
native=(-DGGML_NATIVE=ON)

# generation current|legacy: the sdist, its source directory, the install prefix (keyed by
# version) and its ggml RPC peer's target, which the tests' two-peer rig runs.
generation() {
  case "$1" in
    current)
      SDIST_VERSION=0.3.36
      key=0c1e570
      rpc_target=ggml-rpc-server
      ;;
    legacy)
      SDIST_VERSION=0.3.16
      key=llama-cpp-python-0.3.16
      rpc_target=rpc-server
      ;;
    avx2)
      # 0c1e570 without -march=native: AVX2/FMA/F16C only, which valgrind (3.19) decodes
      # (it has no AVX-512); for the instruction counts of scripts/bench-preload.sh.
      SDIST_VERSION=0.3.36
      key=0c1e570-avx2
      rpc_target=ggml-rpc-server
      native=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
        -DGGML_AVX512=OFF -DGGML_BMI2=ON)
      ;;
  esac
  sdist_dir=$cache_root/llama-cpp-python-$SDIST_VERSION
  src=$sdist_dir/llama_cpp_python-$SDIST_VERSION/vendor/llama.cpp
  prefix=$cache_root/llama.cpp-$key
}
generation current

say() { printf 'llama-cpp: %s\n' "$*" >&2; }

usage() {
  sed -n '2,29p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

# Download and unpack the sdist once; a marker file says the unpack finished.
fetch_source() {
  [ -f "$sdist_dir/.unpacked" ] && return 0
  command -v python3 >/dev/null || { say "python3 is needed to fetch the sdist"; exit 1; }
  mkdir -p "$sdist_dir"
  say "fetching llama-cpp-python==$SDIST_VERSION (sdist, ~50-75 MB) into $sdist_dir"
  python3 -m pip download --quiet --no-deps --no-binary llama-cpp-python \
    "llama-cpp-python==$SDIST_VERSION" -d "$sdist_dir" >&2
  tar -xzf "$sdist_dir/llama_cpp_python-$SDIST_VERSION.tar.gz" -C "$sdist_dir"
  [ -f "$src/CMakeLists.txt" ] || { say "no llama.cpp source in the sdist at $src"; exit 1; }
  # The sdists keep the submodule's `.git` file (`gitdir: ../../.git/modules/...`), whose
  # target is not in the tarball. llama.cpp's build-info step follows it (and git, asked
  # for HEAD there, fails or finds an unrelated repository above the cache); without the
  # file the build says "unknown" for the commit, which is the truth here.
  if [ -f "$src/.git" ]; then
    local gitdir
    gitdir=$(sed -n 's/^gitdir: //p' "$src/.git")
    case "$gitdir" in /*) ;; *) gitdir=$src/$gitdir ;; esac
    [ -d "$gitdir" ] || rm -f "$src/.git"
  fi
  touch "$sdist_dir/.unpacked"
}

# has TOOL...: the install prefix holds these binaries and the build finished.
has() {
  [ -f "$prefix/.built" ] || return 1
  local t
  for t in "$@"; do [ -x "$prefix/bin/$t" ] || return 1; done
}

# build TOOL...: build these targets (once; more later go into the same build directory),
# shared libraries always, and install them with every shared library into $prefix.
build() {
  has "$@" && return 0
  # One build at a time: a second caller waits for the first and then finds it built.
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.llama.cpp-$key.lock"
  flock 9
  has "$@" && return 0
  fetch_source
  command -v cmake >/dev/null || { say "cmake is needed (apt-get install cmake)"; exit 1; }
  local b=$cache_root/llama.cpp-$key-build
  local jobs
  jobs=$(nproc 2>/dev/null || echo 2)
  say "building llama.cpp $key ($* and the shared libllama/ggml) into $prefix"
  local t0=$SECONDS
  # -mno-amx-*: some VMs advertise AMX in cpuid but fault on its instructions; the
  # flags are harmless where AMX is absent. RPATH to $ORIGIN/../lib so the binaries find
  # the shared libllama/ggml next to them without LD_LIBRARY_PATH. GGML_RPC: the RPC
  # backend in libggml and the peer target (a cache built without it is reconfigured in
  # its build directory: only ggml's RPC files and the links are new). GIT_CEILING_DIRECTORIES:
  # the build-info step must not take the commit of a repository that holds the cache.
  GIT_CEILING_DIRECTORIES=$cache_root cmake -S "$src" -B "$b" -DCMAKE_BUILD_TYPE=Release \
    "${native[@]}" -DGGML_RPC=ON -DBUILD_SHARED_LIBS=ON -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON \
    -DCMAKE_C_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DCMAKE_CXX_FLAGS="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16" \
    -DCMAKE_INSTALL_PREFIX="$prefix" -DCMAKE_INSTALL_RPATH='$ORIGIN/../lib' \
    -DCMAKE_BUILD_WITH_INSTALL_RPATH=ON >&2
  GIT_CEILING_DIRECTORIES=$cache_root cmake --build "$b" -j "$jobs" --target "$@" >&2
  mkdir -p "$prefix/bin" "$prefix/lib"
  local t
  for t in "$@"; do cp -a "$b/bin/$t" "$prefix/bin/"; done
  find "$b" -name '*.so*' \( -type f -o -type l \) -exec cp -a {} "$prefix/lib/" \;
  echo "built $* in $((SECONDS - t0)) s on $jobs cores" >>"$prefix/.built"
  say "built in $((SECONDS - t0)) s"
}

# The tests need llama-server and the RPC peer; the benchmarks need llama-bench too (bench).
case "${1:-}" in
  src) fetch_source; echo "$src" ;;
  vocab) fetch_source; echo "$src/models" ;;
  build) build llama-server "$rpc_target"; echo "$prefix" ;;
  bench) build llama-server "$rpc_target" llama-bench; echo "$prefix" ;;
  bench-tools) build llama-server "$rpc_target" llama-bench llama-quantize llama-perplexity; echo "$prefix" ;;
  check) has llama-server "$rpc_target" ;;
  prefix) echo "$prefix" ;;
  rpc-server) echo "$rpc_target" ;;
  legacy-src) generation legacy; fetch_source; echo "$src" ;;
  legacy-build) generation legacy; build llama-server "$rpc_target"; echo "$prefix" ;;
  legacy-check) generation legacy; has llama-server "$rpc_target" ;;
  legacy-rpc-server) generation legacy; echo "$rpc_target" ;;
  legacy-prefix) generation legacy; echo "$prefix" ;;
  valgrind-bench) generation avx2; build llama-bench; echo "$prefix" ;;
  avx2-bench) generation avx2; build llama-bench llama-server; echo "$prefix" ;;
  *) usage ;;
esac
