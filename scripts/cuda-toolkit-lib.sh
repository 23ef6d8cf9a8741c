# Sourced by the two CUDA toolkit scripts, scripts/cuda-toolkit.sh (CUDA 13 from NVIDIA's
# PyPI wheels) and scripts/cuda-toolkit-debian.sh (CUDA 11.8 from Debian's packages): what
# they share, so that each holds only where its toolkit comes from.
#
# - the cache: the root $HYDRA_CACHE_DIR, else ${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress,
#   and in it the toolkit at cuda-$CUDA_VERSION, laid out like /usr/local/cuda (bin/nvcc,
#   include/, lib64/ with lib64/stubs/libcuda.so);
# - one install at a time (a lock; a second caller waits, then finds it done), built in a
#   staging directory and moved into place whole, with a record of how long it took;
# - the `export` lines that point a cargo build at it, and the command line.
#
# The sourcing script sets TOOLKIT (its name in messages) and CUDA_VERSION, and defines
# `fetch_into STAGING`, which fetches into STAGING, leaves the toolkit root at
# STAGING/root, and sets FETCHED_S (seconds spent fetching). It may define `extra_env`
# (more `export` lines) and `extra_command NAME` (more commands: return 1 for an unknown
# one). Progress goes to stderr, paths to stdout.

cache_root=${HYDRA_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hydra-progress}
prefix=$cache_root/cuda-$CUDA_VERSION

say() { printf '%s: %s\n' "$TOOLKIT" "$*" >&2; }
die() { say "$*"; exit 1; }

usage() {
  awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2
  exit 2
}

is_installed() {
  [ -f "$prefix/.installed" ] && [ -x "$prefix/bin/nvcc" ] && [ -f "$prefix/lib64/stubs/libcuda.so" ]
}

install() {
  is_installed && return 0
  mkdir -p "$cache_root"
  exec 9>"$cache_root/.cuda-$CUDA_VERSION.lock"
  flock 9
  is_installed && return 0
  local t0=$SECONDS staging=$prefix.partial
  rm -rf "$staging"
  mkdir -p "$staging"
  FETCHED_S=0
  fetch_into "$staging"
  "$staging/root/bin/nvcc" --version | grep -q "release ${CUDA_VERSION%.*}" ||
    die "$staging/root/bin/nvcc is not CUDA ${CUDA_VERSION%.*}"
  rm -rf "$prefix"
  mv "$staging/root" "$prefix"
  rm -rf "$staging"
  local size
  size=$(du -sh "$prefix" | cut -f1)
  printf 'fetched in %d s, installed in %d s, %s\n' "$FETCHED_S" $((SECONDS - t0)) "$size" \
    >"$prefix/.installed"
  say "installed in $((SECONDS - t0)) s ($FETCHED_S s fetching), $size at $prefix"
}

print_env() {
  # CUDA_HOME: cudarc's link search and cudaforge's toolkit lookup; NVCC and PATH: the
  # compiler both run (cudarc reads the CUDA version from `nvcc --version`).
  printf 'export CUDA_HOME=%q\n' "$prefix"
  printf 'export NVCC=%q\n' "$prefix/bin/nvcc"
  printf 'export PATH=%q:"$PATH"\n' "$prefix/bin"
  if declare -F extra_env >/dev/null; then extra_env; fi
}

# The command line: install, check, prefix, version, env, and the script's own.
toolkit_main() {
  case "${1:-}" in
    install) install; echo "$prefix" ;;
    check) is_installed ;;
    prefix) echo "$prefix" ;;
    version) echo "$CUDA_VERSION" ;;
    env) install; print_env ;;
    *)
      if [ -n "${1:-}" ] && declare -F extra_command >/dev/null && extra_command "$1"; then
        return 0
      fi
      usage
      ;;
  esac
}
