#!/usr/bin/env bash
# Checks that the Debian packages a make target needs are installed.
#
#   scripts/deps.sh SET...      SET is one of: core valgrind aarch64 bench fuzz
#                               clang uring
#   scripts/deps.sh --optional SET...   the same, but what is missing is only
#                               named (exit 0): the build goes on without it
#
# When something is missing it prints the apt-get line that installs it and
# exits 1; it never installs behind the user's back. The one exception is CI:
# as root with CI=true it runs `apt-get update` and installs the missing
# packages itself (once per call, so pass every set you need in one call).
set -euo pipefail

# Each set is a list of "package" or "package=command". With "=command" the
# package counts as present when the command is on PATH (so a cmake from
# elsewhere will do); without it, dpkg must have the package installed.
# To extend a set, add a word to it; to add a set, add a line.
declare -A need
need[core]="cmake=cmake make=make gcc=gcc libc6-dev pkg-config=pkg-config"
# Valgrind's headers (for the client requests in src/tools.h) come with the
# valgrind package. On Debian 12 memcheck cannot start without libc6-dbg: it
# needs the symbols of ld.so, which is shipped stripped.
need[valgrind]="valgrind libc6-dbg"
need[aarch64]="gcc-aarch64-linux-gnu=aarch64-linux-gnu-gcc
               libc6-dev-arm64-cross qemu-user=qemu-aarch64"
# What bench/run.sh compares weft against: Boost.Context (C++) and
# goroutines (Go). The programs time themselves (bench/bench.h); the other
# peers' packages bench/run.sh and bench/echo/run.sh install or skip.
need[bench]="g++=g++ libboost-context-dev golang-go=go"
# make fuzz: clang, and its runtimes (libFuzzer, ASan, UBSan), which
# Debian 12 ships apart from the compiler.
need[fuzz]="clang=clang libclang-rt-14-dev"
# make clang: the compiler alone.
need[clang]="clang=clang"
# The io_uring backend: optional, the build leaves it out without liburing.
need[uring]="liburing-dev"

usage() {
  local sets
  sets=$(printf '%s\n' "${!need[@]}" | sort | tr '\n' ' ')
  echo "usage: $0 SET...   (sets: ${sets% })" >&2
  exit 2
}

# Succeeds when the item ("package" or "package=command") is present.
present() {
  local pkg=${1%%=*} cmd=
  [[ $1 == *=* ]] && cmd=${1#*=}
  if [[ -n $cmd ]]; then
    command -v "$cmd" > /dev/null 2>&1
  elif ! command -v dpkg-query > /dev/null 2>&1; then
    # Not Debian: no package to ask about. Count it as there (a line below
    # says so), and let the build say what is missing.
    return 0
  else
    # dpkg -s also knows packages that were removed but not purged, so look
    # at the status itself.
    dpkg-query -W -f='${Status}' "$pkg" 2> /dev/null | grep -q 'ok installed'
  fi
}

missing_in() {
  local item
  for item in "$@"; do
    present "$item" || echo "${item%%=*}"
  done
}

optional=0
if [[ ${1:-} == --optional ]]; then
  optional=1
  shift
fi
[[ $# -gt 0 ]] || usage
items=()
for set in "$@"; do
  [[ -n ${need[$set]+x} ]] || {
    echo "deps.sh: unknown set '$set'" >&2
    usage
  }
  # shellcheck disable=SC2206 # the lists are meant to be split on spaces
  items+=(${need[$set]})
done

mapfile -t missing < <(missing_in "${items[@]}" | sort -u)
if ! command -v dpkg-query > /dev/null 2>&1; then
  echo "deps.sh: no dpkg-query (not Debian?): the packages of '$*' are" \
    "not checked, only the commands" >&2
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ ${CI:-} == true && $(id -u) -eq 0 ]]; then
  echo "deps.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
  mapfile -t still < <(missing_in "${items[@]}" | sort -u)
  if [[ ${#still[@]} -gt 0 ]]; then
    echo "deps.sh: still missing after apt-get install: ${still[*]}" >&2
    exit 1
  fi
  exit 0
fi

if ((optional)); then
  echo "deps.sh: optional, not installed: ${missing[*]} ('$*' is left out" \
    "of the build). To have it, as root: apt-get install -y ${missing[*]}" >&2
  exit 0
fi
echo "deps.sh: missing for '$*': ${missing[*]}. Install them with (as root):" >&2
echo "apt-get install -y ${missing[*]}"
exit 1
