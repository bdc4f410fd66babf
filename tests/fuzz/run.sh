#!/usr/bin/env bash
# Runs libFuzzer targets for a bounded time each (`make fuzz` calls it):
#
#   tests/fuzz/run.sh BUILD_DIR SECONDS TARGET...
#
# Each target starts from a scratch copy of its seed corpus,
# tests/fuzz/corpus/TARGET/, in BUILD_DIR/fuzz/TARGET/corpus, so the
# committed corpus is never modified; the inputs libFuzzer adds stay there
# until the next run. The run's log is BUILD_DIR/fuzz/TARGET/log, and what
# it prints is the summary: the final coverage line and libFuzzer's stats.
# A crash, a leak or a per-input timeout makes the target fail: its log's
# end and the failing input (hex) are printed, and the input is kept in
# BUILD_DIR/fuzz/TARGET/artifacts/ (reproduce with `TARGET INPUT`). Exits
# 1 if any target failed.
set -euo pipefail

[[ $# -ge 3 ]] || {
  echo "usage: $0 BUILD_DIR SECONDS TARGET..." >&2
  exit 2
}
build=$1 secs=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)

failed=0
for target in "$@"; do
  bin=$build/tests/fuzz/$target
  work=$build/fuzz/$target
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$here/corpus/$target/"* "$work/corpus/"
  echo "fuzz: $target for ${secs}s from $(ls "$work/corpus" | wc -l) seeds"
  rc=0
  # -timeout: an input that runs 10 s is a hang (the target's own watchdog
  # stops a waiting loop after 5 s; this catches a spinning one).
  "$bin" -max_total_time="$secs" -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/" "$work/corpus" > "$work/log" 2>&1 ||
    rc=$?
  # The last status line ("#N DONE cov: ... ft: ... corp: ... exec/s: ...")
  # and the stats.
  grep -E '^#[0-9]+' "$work/log" | tail -n 1 || true
  grep -E '^stat::' "$work/log" || true
  if [[ $rc -ne 0 ]]; then
    failed=1
    echo "fuzz: $target FAILED (exit $rc); the end of $work/log:"
    tail -n 40 "$work/log"
    for a in "$work/artifacts/"*; do
      [[ -f $a ]] || continue
      echo "fuzz: input $a:"
      od -A d -t x1 -v "$a" | head -n 40
    done
  else
    echo "fuzz: $target passed"
  fi
done
exit $failed
