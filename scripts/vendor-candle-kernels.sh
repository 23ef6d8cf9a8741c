#!/usr/bin/env bash
# vendor/candle-kernels is candle-kernels 0.11.1 as published, with the small patch
# vendor/candle-kernels.patch applied, so that its CUDA kernels build for compute
# capability 6.0 (a P100) as well as for every later GPU. The workspace's Cargo.toml
# [patch.crates-io] puts it in place of the published crate; it is compiled only by the CUDA
# builds (--features cuda). What the patch changes, and why, is in its own header.
#
#   scripts/vendor-candle-kernels.sh check    fetch the published crate (cargo vendor, with
#                                             the lockfile's checksum check), apply the
#                                             patch, and fail when vendor/candle-kernels
#                                             differs from the result
#   scripts/vendor-candle-kernels.sh update   rewrite vendor/candle-kernels the same way
#   scripts/vendor-candle-kernels.sh diff     write the patch again from
#                                             vendor/candle-kernels (after editing it)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=0.11.1
vendored=$root/vendor/candle-kernels
patch_file=$root/vendor/candle-kernels.patch
# What the published crate ships and the vendored copy keeps (its Cargo.lock, .orig
# manifest and VCS note are cargo's packaging, not sources).
keep=(Cargo.toml build.rs README.md src)

say() { printf 'vendor-candle-kernels: %s\n' "$*" >&2; }

# Scratch space for the published crate, removed on exit.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Prints a directory holding the published crate's files (under $tmp).
published() {
  mkdir -p "$tmp/fetch/src"
  cat >"$tmp/fetch/Cargo.toml" <<EOF
[package]
name = "fetch-candle-kernels"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
candle-kernels = "=$version"

[workspace]
EOF
  : >"$tmp/fetch/src/lib.rs"
  (cd "$tmp/fetch" && cargo vendor --quiet --versioned-dirs "$tmp/vendor" >/dev/null)
  mkdir "$tmp/crate"
  for f in "${keep[@]}"; do cp -r "$tmp/vendor/candle-kernels-$version/$f" "$tmp/crate/"; done
  echo "$tmp/crate"
}

# Prints a directory holding the published crate with the patch applied.
patched() {
  local dir
  dir=$(published)
  patch --quiet -p1 -d "$dir" <"$patch_file" >&2
  echo "$dir"
}

case "${1:-}" in
check)
  dir=$(patched)
  if ! diff -r "$dir" "$vendored" >&2; then
    say "vendor/candle-kernels is not candle-kernels $version with vendor/candle-kernels.patch" \
      "(the differences above); run '$0 diff' after editing it, or '$0 update'"
    exit 1
  fi
  say "vendor/candle-kernels is candle-kernels $version with its patch"
  ;;
update)
  dir=$(patched)
  rm -rf "$vendored"
  cp -r "$dir" "$vendored"
  say "vendor/candle-kernels rewritten from candle-kernels $version and the patch"
  ;;
diff)
  dir=$(published)
  # The patch's header (everything above its first "diff" line) is kept.
  header=$(sed '/^diff /,$d' "$patch_file" 2>/dev/null || true)
  # Without the files' times in its ---/+++ lines: the patch changes only with its content.
  body=$(cd "$dir/.." && mv crate a && cp -r "$vendored" b && { diff -ruN a b || true; } |
    sed -E 's/^(---|\+\+\+) ([^\t]+)\t.*/\1 \2/')
  printf '%s\n%s\n' "$header" "$body" >"$patch_file"
  say "wrote vendor/candle-kernels.patch"
  ;;
*)
  echo "usage: scripts/vendor-candle-kernels.sh check|update|diff" >&2
  exit 2
  ;;
esac
