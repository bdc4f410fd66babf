#!/bin/sh
# The tour of the seeds' examples, run by `make demo`: each example in turn,
# under a heading. Exits non-zero if any example fails.
set -eu
bin=${1:-build/examples}

run() {
  name=$1
  what=$2
  shift 2
  printf '\n=== %s: %s\n\n' "$name" "$what"
  "$bin/$name" "$@"
}

run hello      "the README's example: two tasks, joined"
run countdown  "seed 000's TaskScheduler: three tasks taking turns"
run generators "seed 000's generators: send, throw, close, yield from"
run threads    "seed 003's first listing: countdown and countup on two threads (the pool's), 10x faster" \
               --scale 0.1
run sleepers   "seed 003's countdown(5) and countup(20) on the timer heap, 10x faster" \
               --scale 0.1
run tornado_style "seed 002's tornado coroutines: futures, weft_async, a sleep future, 10x faster" \
               --scale 0.1
run cancel     "seed 003's stalled_read cancelled by timeout_after, 10x faster" \
               --scale 0.1
run actors     "seed 000's ActorScheduler: the printer and the counter (from 10 here; the test runs the seed's 10000)" 10
run echo_demo  "seed 000's echo server and a client, two tasks of one program"
run executor   "seed 003's last point: CPU-bound work stalls the loop unless it runs on the pool (the numbers vary)"
printf '\n(examples/echo_server and examples/echo_raw are the servers themselves:\n'
printf ' run one and talk to it with `nc 127.0.0.1 16000` or `nc 127.0.0.1 30000`;\n'
printf ' Ctrl-C makes echo_server stop accepting and exit once its clients are done.)\n'
printf '\n=== the tour finished\n'
