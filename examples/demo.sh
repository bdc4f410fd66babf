#!/bin/sh
# The tour of the seeds' examples, run by `make demo`: each example in turn,
# under a heading. Exits non-zero if any example fails.
set -eu
bin=${1:-build/examples}

run() {
  name=$1
  shift
  printf '\n=== %s: %s\n\n' "$name" "$*"
  "$bin/$name"
}

run hello      "the README's example: two tasks, joined"
run countdown  "seed 000's TaskScheduler: three tasks taking turns"
run generators "seed 000's generators: send, throw, close, yield from"
printf '\n=== the tour finished\n'
