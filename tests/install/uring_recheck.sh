#!/bin/sh
# The liburing re-check test (registered by tests/install/CMakeLists.txt):
#   uring_recheck.sh CMAKE SOURCE_DIR WORK_DIR [SKIP]
# Run where the io_uring backend is built. Configures a scratch build whose
# cache holds a failed liburing check (WEFT_URING_LINKS empty, as a first
# configure without liburing-dev leaves it) and checks that the configure
# asks again and builds the backend: a user who installs liburing-dev
# after a first build, as scripts/deps.sh advises, must get it at the next
# make or make install. Exits 0 on success, 77 when skipped, 1 on failure.
set -eu

cmake=$1 src=$2 work=$3 skip=${4:-}
if [ -n "$skip" ]; then
  echo "liburing re-check test skipped: $skip"
  exit 77
fi
scratch=$(mktemp -d "$work/uring_recheck.XXXXXX")
trap 'if [ $? -eq 0 ]; then rm -rf "$scratch";
      else echo "liburing re-check test failed; see $scratch" >&2; fi' EXIT

"$cmake" -S "$src" -B "$scratch" -DWEFT_URING_LINKS= -DWEFT_LTO=OFF \
  >"$scratch/configure.log" 2>&1 || { cat "$scratch/configure.log"; exit 1; }
if ! grep -q 'weft: io_uring backend ON' "$scratch/configure.log"; then
  grep 'io_uring' "$scratch/configure.log" >&2
  echo "FAIL: a cached failed liburing check was not asked again" >&2
  exit 1
fi
echo "liburing re-check: ok"
