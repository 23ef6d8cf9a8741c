#!/usr/bin/env bash
# Disk space for the test suite (scripts/test.sh): a cold run writes about NEED_GIB GiB
# into target/ (BENCHMARKS.md, "target size"), and a disk that fills half way fails the
# run 10 minutes in with rustc's "No space left on device (os error 28)", as one CI run
# did. So test.sh asks first, and prints what it used at the end.
#
#   scripts/disk-space.sh check    exit 1, saying how much is free and how much the run
#                                  needs, when the disk holding target/ has less free than
#                                  NEED_GIB less what target/ holds already;
#                                  HYDRA_MIN_FREE_GIB overrides NEED_GIB
#   scripts/disk-space.sh report   one line: target/'s size and the space left
set -euo pipefail
cd "$(dirname "$0")/.."

# A cold `cargo test --workspace` build wrote 2.8 GiB (BENCHMARKS.md, "target size"); the
# loom and fuzz targets, the release preload and the files tests write add under 1 GiB.
NEED_GIB=${HYDRA_MIN_FREE_GIB:-8}

gib_free() { df -P -BG . | awk 'NR == 2 { sub("G", "", $4); print $4 }'; }
gib_used() {
  if [ -d target ]; then du -s -BG target 2>/dev/null | awk '{ sub("G", "", $1); print $1 }'; else echo 0; fi
}

case "${1:-}" in
check)
  free=$(gib_free)
  held=$(gib_used)
  if ((free + held < NEED_GIB)); then
    echo "disk-space: $free GiB free on $(df -P . | awk 'NR == 2 { print $6 }'), target/ holds $held GiB;" \
      "a cold test run needs about $NEED_GIB GiB in all. Free some space (an old target" \
      "directory: cargo clean), or set HYDRA_MIN_FREE_GIB=0 to run anyway." >&2
    exit 1
  fi
  ;;
report)
  echo "target/ $(gib_used) GiB, $(gib_free) GiB free"
  ;;
*)
  echo "usage: scripts/disk-space.sh check|report" >&2
  exit 2
  ;;
esac
