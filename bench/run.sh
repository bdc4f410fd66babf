#!/usr/bin/env bash
# Runs weft's benchmarks and their peers and prints one "name value unit"
# line per figure on stdout; notes, the figures of every run and build
# output go to stderr.
#
#   bench/run.sh [switch|spawn|tasks|timers|future|chan|executor|files|io|
#                 pages]                   (no argument: all ten; io is two
#                                          tasks echoing over a socketpair,
#                                          and loopback TCP connections of
#                                          one message each;
#                                          pages is the machine's cost of a
#                                          page after a system call, no weft)
#   bench/run.sh echo                      the echo servers: bench/echo/run.sh
#                                          (its own environment: DURATION, ...)
#   bench/run.sh echo-uring                the same, the io_uring comparison
#                                          alone (URING=1 bench/echo/run.sh)
#
# Environment:
#   BUILD         the CMake build directory (default: $WEFT_BUILD_DIR, as
#                 the top-level Makefile passes it, else build/ of this repo)
#   REPEAT        runs of each micro-benchmark (default 5); each run is a
#                 fresh process reporting the median of its own 7 rounds,
#                 and the figure printed is the median of the runs
#   TASKS_N       tasks (and goroutines) for the tasks benchmark (1000000)
#   TASKS_REPEAT  runs of the tasks benchmark (default 1: a million tasks
#                 take 20-50 s here, a million goroutines about as long)
#   TIMERS_REPEAT runs of the timers benchmark and its peers (default 3: a
#                 run of the three takes about 20 s, its arm_fire rounds
#                 waiting out real deadlines of up to a second)
#   PYTHON        the interpreter of the Python peers (bench/peer_future.py,
#                 bench/peer_executor.py: asyncio, and uvloop if it
#                 imports); default: the first of
#                 python3 and /usr/bin/python3 that imports uvloop (Debian's
#                 python3-uvloop is for /usr/bin/python3, which a pyenv or
#                 venv python3 earlier on PATH does not see), else python3.
#                 The chan benchmark's actor peer (bench/peer_actors.py, the
#                 standard library only) runs on $PYTHON, else python3
#   FILES_UNCACHED  1 (default): the files benchmark also runs uncached
#                 (O_DIRECT, bench/files.c -u); 0: cached only
#   FILES_READS   reads per run of the files benchmark (default 200000)
#   CI            with CI=true, as root, missing peer packages are installed
#
# Why runs and rounds: on a small shared VM one run is not a figure. The
# programs time CPU time, not wall time (bench.h says why), which takes out
# other processes' slices but not the host's noise; and one process can be
# steadily faster or slower than the next (seen here as two clusters of
# per-process figures, most likely from the address layout ASLR chose).
# So: several processes, the median of each one's rounds, the median of
# those. Runs of the programs being compared are interleaved, so that a
# burst of load hits weft and its peers alike. Everything runs pinned to
# CPU 1 when taskset and a CPU 1 exist; the programs meant to use two CPUs
# (Go with GOMAXPROCS=2, the executor's) also run unpinned.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(dirname "$here")
BUILD=${BUILD:-${WEFT_BUILD_DIR:-$src/build}}
REPEAT=${REPEAT:-5}
TASKS_N=${TASKS_N:-1000000}
TASKS_REPEAT=${TASKS_REPEAT:-1}
TIMERS_REPEAT=${TIMERS_REPEAT:-3}
FILES_UNCACHED=${FILES_UNCACHED:-1}
FILES_READS=${FILES_READS:-200000}

note() { echo "bench: $*" >&2; }
die() { note "$*"; exit 1; }

usage="usage: $0 [switch|spawn|tasks|timers|future|chan|executor|files|io|pages|echo|echo-uring]"
what=${1:-all}
case $what in
  all | switch | spawn | tasks | timers | future | chan | executor | files | \
    io | pages | echo | echo-uring) ;;
  -h | --help) echo "$usage"; exit 0 ;;
  *) die "$usage" ;;
esac
mkdir -p "$BUILD" || die "cannot make the build directory $BUILD"
BUILD=$(cd "$BUILD" && pwd)
bin=$BUILD/bench

# The echo benchmark has its own peers, build (its programs only, so that
# it does not depend on the other benchmarks building), runs and table.
if [ "$what" = echo ]; then
  BUILD=$BUILD exec "$here/echo/run.sh"
fi
if [ "$what" = echo-uring ]; then
  BUILD=$BUILD URING=1 exec "$here/echo/run.sh"
fi

# ---- peer packages ----------------------------------------------------
# Each peer needs one package. A missing one is installed when that is
# clearly wanted (root in CI); otherwise its peer is skipped, saying how to
# get it.
installed=0
want_peer() { # peer package -> 0 if the package is there (now)
  local peer=$1 pkg=$2
  if ! command -v dpkg >/dev/null 2>&1; then
    return 0 # not Debian: the build below tells whether the peer exists
  fi
  dpkg -s "$pkg" >/dev/null 2>&1 && return 0
  if [ "$(id -u)" = 0 ] && [ "${CI:-}" = true ]; then
    note "installing $pkg for the $peer peer"
    if DEBIAN_FRONTEND=noninteractive apt-get install -y "$pkg" >&2 ||
      { apt-get update >&2 &&
        DEBIAN_FRONTEND=noninteractive apt-get install -y "$pkg" >&2; }; then
      installed=1
      return 0
    fi
    note "could not install $pkg: the $peer peer is skipped"
    return 1
  fi
  note "the $peer peer is skipped: $pkg is not installed. To install it:"
  note "  apt-get install -y $pkg"
  return 1
}
have_fcontext=0
have_go=0
have_libev=0
have_libuv=0
if [ "$what" = all ] || [ "$what" = switch ]; then
  want_peer fcontext libboost-context-dev && have_fcontext=1
fi
if [ "$what" = all ] || [ "$what" = timers ]; then
  want_peer libev libev-dev && have_libev=1
fi
if [ "$what" = all ] || [ "$what" = timers ] || [ "$what" = executor ]; then
  want_peer libuv libuv1-dev && have_libuv=1
fi
have_uvloop_pkg=0
if [ "$what" = all ] || [ "$what" = future ] || [ "$what" = executor ]; then
  want_peer uvloop python3-uvloop && have_uvloop_pkg=1
fi
want_peer go golang-go && have_go=1

# ---- build ------------------------------------------------------------
# Configure if needed (again after an install, so that CMake finds Boost;
# also when a peer's package is there and the build was configured before
# it came: CMake looks again only when asked), then build the benchmarks
# and what they link.
reconfigure=$installed
cache=$BUILD/CMakeCache.txt
if [ -f "$cache" ]; then
  if { [ $have_libev = 1 ] && grep -q '^WEFT_LIBEV_LIB:.*NOTFOUND' "$cache"; } ||
    { [ $have_fcontext = 1 ] &&
      grep -q '^WEFT_BOOST_CONTEXT_LIB:.*NOTFOUND' "$cache"; } ||
    { [ $have_libuv = 1 ] && ! grep -q '^WEFT_LIBUV_FOUND:INTERNAL=1' "$cache"; }; then
    reconfigure=1
  fi
fi
if [ ! -f "$cache" ] || [ $reconfigure = 1 ]; then
  cmake -S "$src" -B "$BUILD" >&2 || die "cmake could not configure $BUILD"
fi
cmake --build "$BUILD" --target benchmarks -j2 >&2 ||
  die "the benchmarks did not build in $BUILD"
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
# An empty cache entry is the project's default, which CMakeLists.txt sets.
[ -n "$btype" ] || btype=RelWithDebInfo
sanitize=$(sed -n 's/^WEFT_SANITIZE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
case $btype in
  Release | RelWithDebInfo | MinSizeRel) ;;
  *) note "warning: $BUILD is a '$btype' build: the figures are not weft's" ;;
esac
[ -z "$sanitize" ] || note "warning: $BUILD is built with $sanitize sanitizer"

if [ $have_fcontext = 1 ] && [ ! -x "$bin/bench_peer_fcontext" ]; then
  note "the fcontext peer is skipped: CMake did not find Boost.Context"
  have_fcontext=0
fi
if [ $have_libev = 1 ] && [ ! -x "$bin/bench_peer_timers_ev" ]; then
  note "the libev peer is skipped: CMake did not find libev"
  have_libev=0
fi
if [ $have_libuv = 1 ] && { [ ! -x "$bin/bench_peer_timers_uv" ] ||
  [ ! -x "$bin/bench_peer_async_uv" ]; }; then
  note "the libuv peers are skipped: CMake did not find libuv (pkg-config)"
  have_libuv=0
fi
if [ $have_go = 1 ]; then
  # No modules, no network: the program uses the standard library only.
  if command -v go >/dev/null 2>&1 &&
    env GOCACHE="$bin/go/cache" GOPATH="$bin/go/path" GO111MODULE=off \
      GOFLAGS= go build -o "$bin/bench_peer_go" "$here/peer_go/main.go" >&2; then
    :
  else
    note "the go peer is skipped: go build failed (or go is missing)"
    have_go=0
  fi
fi
have_go_chan=0
if [ $have_go = 1 ] && { [ "$what" = all ] || [ "$what" = chan ]; }; then
  if env GOCACHE="$bin/go/cache" GOPATH="$bin/go/path" GO111MODULE=off \
    GOFLAGS= go build -o "$bin/bench_peer_go_chan" \
    "$here/peer_go_chan/main.go" >&2; then
    have_go_chan=1
  else
    note "the go chan peer is skipped: go build failed"
  fi
fi

# The future and executor peers: Python's asyncio, and uvloop when the
# interpreter chosen can import it (see PYTHON above).
py=
have_uvloop=0
if [ "$what" = all ] || [ "$what" = future ] || [ "$what" = executor ]; then
  if [ -n "${PYTHON:-}" ]; then
    cands=("$PYTHON")
  else
    cands=(python3 /usr/bin/python3)
  fi
  for c in "${cands[@]}"; do
    if "$c" -c 'import uvloop' >/dev/null 2>&1; then
      py=$c
      have_uvloop=1
      break
    fi
  done
  if [ -z "$py" ]; then
    for c in "${cands[@]}"; do
      if "$c" -c 'import asyncio' >/dev/null 2>&1; then
        py=$c
        break
      fi
    done
    if [ -z "$py" ]; then
      note "the asyncio and uvloop peers are skipped: no ${cands[*]} runs"
    elif [ $have_uvloop_pkg = 1 ]; then
      note "the uvloop peer is skipped: $py cannot import uvloop (PYTHON=...)"
    fi
  fi
  [ -z "$py" ] || note "python peers: $py ($("$py" -c 'import sys; print(sys.version.split()[0])'))"
fi

# The actor peer of the chan benchmark: the seed's ActorScheduler, plain
# Python (generators and a deque), on $PYTHON or python3.
pya=
if [ "$what" = all ] || [ "$what" = chan ]; then
  c=${PYTHON:-python3}
  if "$c" -c 'import collections' >/dev/null 2>&1; then
    pya=$c
    note "actor peer: $pya ($("$pya" -c 'import sys; print(sys.version.split()[0])'))"
  else
    note "the python actor peer is skipped: $c does not run"
  fi
fi

# ---- running ----------------------------------------------------------
pin=()
if command -v taskset >/dev/null 2>&1 && taskset -c 1 true 2>/dev/null; then
  pin=(taskset -c 1)
else
  note "not pinned: taskset or CPU 1 is missing"
fi
note "build $BUILD ($btype), $(git -C "$src" describe --always --dirty 2>/dev/null || echo '?')"

status=0
out=$(mktemp)
trap 'rm -f "$out"' EXIT

# One run of a program; its figures are added to $out.
run1() {
  if ! ${pin[@]+"${pin[@]}"} "$@" >>"$out"; then
    note "failed: $*"
    status=1
  fi
}

# The same, not pinned: for a program meant to use two CPUs.
run1_unpinned() {
  if ! "$@" >>"$out"; then
    note "failed: $*"
    status=1
  fi
}

# The same, not pinned, with SUFFIX added to every figure's name: for a
# second set of figures from the same program.
run1_unpinned_as() { # suffix command...
  local suffix=$1 tmp
  shift
  tmp=$(mktemp)
  if ! "$@" >"$tmp"; then
    note "failed: $*"
    status=1
  fi
  awk -v s="$suffix" 'NF == 3 { print $1 s, $2, $3 }' "$tmp" >>"$out"
  rm -f "$tmp"
}

# Prints the median of each figure in $out (the mean of the two middle
# values for an even count), in the order first seen, with every run's
# values on stderr. Then empties $out.
report() {
  awk '
    { if (!($1 in n)) { order[++k] = $1; unit[$1] = $3 }
      v[$1, ++n[$1]] = $2 }
    END {
      for (i = 1; i <= k; i++) {
        name = order[i]; m = n[name]
        for (a = 1; a <= m; a++) s[a] = v[name, a] + 0
        for (a = 2; a <= m; a++) {           # insertion sort: m is small
          x = s[a]
          for (b = a - 1; b >= 1 && s[b] > x; b--) s[b + 1] = s[b]
          s[b + 1] = x
        }
        med = m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
        runs = ""
        for (a = 1; a <= m; a++) runs = runs " " s[a]
        printf "bench: %s runs:%s\n", name, runs > "/dev/stderr"
        fmt = unit[name] == "ns" ? "%s %.1f %s\n" : \
              unit[name] == "us" ? "%s %.3f %s\n" : \
              unit[name] == "faults" || unit[name] == "pct" ? \
              "%s %.2f %s\n" : "%s %.0f %s\n"
        printf fmt, name, med, unit[name]
        med_of[name] = med
      }
      # The switch target is a ratio: give it from the same runs.
      if (("switch_gen_oneway" in med_of) &&
          ("peer_fcontext_switch_oneway" in med_of) &&
          med_of["peer_fcontext_switch_oneway"] > 0)
        printf "ratio_switch_gen_vs_fcontext %.2f x\n",
          med_of["switch_gen_oneway"] / med_of["peer_fcontext_switch_oneway"]
      # So are the timers targets: the weft figure over each peer figure
      # (below 1: weft is faster). No apostrophes: this is in single quotes.
      split("arm_fire rearm", fig, " ")
      split("libev libuv", peer, " ")
      for (f = 1; f <= 2; f++)
        for (p = 1; p <= 2; p++) {
          w = "timers_weft_" fig[f]; o = "timers_" peer[p] "_" fig[f]
          if ((w in med_of) && (o in med_of) && med_of[o] > 0)
            printf "ratio_timers_%s_weft_vs_%s %.2f x\n", fig[f], peer[p],
              med_of[w] / med_of[o]
        }
      # The future figures the other way round: the Python loop figure over
      # weft (above 1: weft is faster, by that factor).
      nop = split("future_set_await future_await_wake cancel_recv " \
        "recv_wake cancel_recv_deliver scope_deadline " \
        "scope_deadline_yield yield", op, " ")
      split("uvloop asyncio", py, " ")
      for (p = 1; p <= 2; p++)
        for (f = 1; f <= nop; f++) {
          o = py[p] "_" op[f]
          if ((op[f] in med_of) && (o in med_of) && med_of[op[f]] > 0)
            printf "%s_vs_%s %.2f x\n", op[f], py[p], med_of[o] / med_of[op[f]]
        }
      # The chan figures, each as "how many times faster weft is" (above
      # 1: weft is faster): the Go ns over weft ns, and weft msgs/s over
      # the peer msgs/s. go: GOMAXPROCS=1, go_p2: GOMAXPROCS=2 (unpinned).
      nop = split("chan_pingpong_unbuffered chan_pingpong_buffered " \
        "select_pingpong mutex_uncontended mutex_contended", op, " ")
      split("go go_p2", gp, " ")
      for (p = 1; p <= 2; p++)
        for (f = 1; f <= nop; f++) {
          o = gp[p] "_" op[f]
          if ((op[f] in med_of) && (o in med_of) && med_of[op[f]] > 0)
            printf "%s_vs_%s %.2f x\n", op[f], gp[p], med_of[o] / med_of[op[f]]
        }
      # The executor figures, as "how many times faster weft is" (above
      # 1: weft is faster): the peer ns over weft ns, weft jobs/s over the
      # peer jobs/s; the storm against libuv, the queue figure being the
      # like-for-like one (executor.c, peer_async_uv.c).
      # Pinned, then on two CPUs (the "_2cpu" figures).
      split("uvloop asyncio", py, " ")
      split("queue async", ua, " ")
      nsx = split("- _2cpu", sx, " "); sx[1] = ""
      for (x = 1; x <= nsx; x++) {
        for (p = 1; p <= 2; p++) {
          w = "run_in_thread_rtt" sx[x]; o = py[p] "_run_in_executor_rtt" sx[x]
          if ((w in med_of) && (o in med_of) && med_of[w] > 0)
            printf "%s_vs_%s %.2f x\n", w, py[p], med_of[o] / med_of[w]
          w = "run_in_thread_64" sx[x]; o = py[p] "_run_in_executor_64" sx[x]
          if ((w in med_of) && (o in med_of) && med_of[o] > 0)
            printf "%s_vs_%s %.2f x\n", w, py[p], med_of[w] / med_of[o]
        }
        for (p = 1; p <= 2; p++) {
          w = "storm_weft" sx[x]; o = "storm_libuv_" ua[p] sx[x]
          if ((w in med_of) && (o in med_of) && med_of[w] > 0)
            printf "%s_vs_libuv_%s %.2f x\n", w, ua[p], med_of[o] / med_of[w]
        }
      }
      split("go go_p2 python", ap, " ")
      for (p = 1; p <= 3; p++) {
        o = ap[p] "_actor_msgs_per_s"
        if (("actor_msgs_per_s" in med_of) && (o in med_of) && med_of[o] > 0)
          printf "actor_msgs_per_s_vs_%s %.2f x\n", ap[p],
            med_of["actor_msgs_per_s"] / med_of[o]
      }
    }' "$out"
  : >"$out"
}

bench_switch() {
  local i
  for ((i = 0; i < REPEAT; i++)); do
    run1 "$bin/bench_switch"
    [ $have_fcontext = 0 ] || run1 "$bin/bench_peer_fcontext"
    run1 "$bin/bench_peer_ucontext"
    [ $have_go = 0 ] || run1 "$bin/bench_peer_go" switch
  done
  report
}

bench_spawn() {
  local i
  for ((i = 0; i < REPEAT; i++)); do
    run1 "$bin/bench_spawn"
    [ $have_go = 0 ] || run1 "$bin/bench_peer_go" spawn
  done
  report
}

bench_tasks() {
  local i
  note "tasks: $TASKS_N tasks, then as many goroutines (~20 s a million each)"
  for ((i = 0; i < TASKS_REPEAT; i++)); do
    run1 "$bin/bench_tasks" "$TASKS_N"
    [ $have_go = 0 ] || run1 "$bin/bench_peer_go" tasks "$TASKS_N"
  done
  report
}

# Runs of the three programs interleave, as everywhere; each run is the
# median of its own 3 rounds per figure (timers.c).
bench_timers() {
  local i
  note "timers: each run of each program waits out ~4 s of real deadlines"
  for ((i = 0; i < TIMERS_REPEAT; i++)); do
    run1 "$bin/bench_timers"
    [ $have_libev = 0 ] || run1 "$bin/bench_peer_timers_ev"
    [ $have_libuv = 0 ] || run1 "$bin/bench_peer_timers_uv"
  done
  report
}

# weft and the two Python loops, interleaved; each run reports the median
# of its own 7 rounds per figure (future.c, peer_future.py).
bench_future() {
  local i
  for ((i = 0; i < REPEAT; i++)); do
    run1 "$bin/bench_future"
    [ -z "$py" ] || run1 "$py" "$here/peer_future.py" asyncio
    [ $have_uvloop = 0 ] || run1 "$py" "$here/peer_future.py" uvloop
  done
  report
}

# weft, Go (GOMAXPROCS=1, pinned like the rest; then GOMAXPROCS=2, not
# pinned, so that its two Ps can be on two CPUs) and the seed's Python
# ActorScheduler, interleaved; each run reports the median of its own 7
# rounds per figure (chan.c, peer_go_chan/main.go, peer_actors.py).
bench_chan() {
  local i
  for ((i = 0; i < REPEAT; i++)); do
    run1 "$bin/bench_chan"
    [ $have_go_chan = 0 ] || run1 "$bin/bench_peer_go_chan"
    [ -z "$pya" ] || run1 "$pya" "$here/peer_actors.py"
    [ $have_go_chan = 0 ] || run1_unpinned "$bin/bench_peer_go_chan" -p 2
  done
  report
}

# weft, asyncio's and uvloop's run_in_executor, and libuv's uv_async_send,
# interleaved; each run reports the median of its own 7 rounds per figure
# (executor.c, peer_executor.py, peer_async_uv.c). The Python pools get
# the size weft's pool had (its executor_threads line).
#
# Each program runs twice. Pinned to CPU 1, like everything else: the
# loop, the workers (and the storm's sender) then take turns on one CPU,
# and every hand-over is a switch on it; that is the library's own cost,
# and steady. Then unpinned, with "_2cpu" added to the names: threads on
# two CPUs, where a hand-over to a sleeping thread wakes the other CPU. On
# this VM (2 vCPUs) that wake-up is most of a round trip, some 60 us where
# the pinned one takes 6: the hypervisor's cost, not the library's, and
# noisier, but the case the executor is for. The Python peers do a fifth
# of their work there (-n), their round trips then taking some 150 us; the
# C programs keep theirs, as a shorter storm (a few ms) can be over before
# the loop's CPU has woken. About 15 s per repeat here.
bench_executor() {
  local i threads
  local -a t
  for ((i = 0; i < REPEAT; i++)); do
    run1 "$bin/bench_executor"
    threads=$(awk '$1 == "executor_threads" { t = $2 } END { print t }' "$out")
    t=()
    [ -z "$threads" ] || t=(-t "$threads")
    [ -z "$py" ] ||
      run1 "$py" "$here/peer_executor.py" asyncio ${t[@]+"${t[@]}"}
    [ $have_uvloop = 0 ] ||
      run1 "$py" "$here/peer_executor.py" uvloop ${t[@]+"${t[@]}"}
    [ $have_libuv = 0 ] || run1 "$bin/bench_peer_async_uv"

    run1_unpinned_as _2cpu "$bin/bench_executor"
    [ -z "$py" ] || run1_unpinned_as _2cpu "$py" "$here/peer_executor.py" \
      asyncio -n 1280 ${t[@]+"${t[@]}"}
    [ $have_uvloop = 0 ] || run1_unpinned_as _2cpu "$py" \
      "$here/peer_executor.py" uvloop -n 1280 ${t[@]+"${t[@]}"}
    [ $have_libuv = 0 ] ||
      run1_unpinned_as _2cpu "$bin/bench_peer_async_uv"
  done
  report
}

# 4 KiB random reads at queue depth 32 through weft_file_read
# (bench/files.c), on the epoll backend (the calls go to the pool) and on
# io_uring (the ring), interleaved, pinned like the rest; cached (the page
# cache), then uncached (O_DIRECT) unless FILES_UNCACHED=0. Each run is a
# fresh process timing FILES_READS reads once; the figure is the median
# of the REPEAT runs. Its names carry the backend weft reports: if the
# io_uring run says epoll, weft fell back (said below). The file, 256 MiB
# in $TMPDIR or /var/tmp, is written by the first run and reused.
bench_files() {
  local i b u
  local -a modes=("")
  [ "$FILES_UNCACHED" = 0 ] || modes+=(-u)
  for ((i = 0; i < REPEAT; i++)); do
    for u in "${modes[@]}"; do
      for b in epoll io_uring; do
        run1 env WEFT_BACKEND=$b "$bin/bench_files" -n "$FILES_READS" \
          ${u:+"$u"}
      done
    done
  done
  grep -q '^files_io_uring' "$out" ||
    note "files: no io_uring figures: weft has no io_uring backend here" \
      "(it fell back to epoll)"
  report
}

# Two tasks echoing over a socketpair (bench/io_pingpong.c), on each
# backend: the I/O path without a network stack. Then connections that
# carry one message each (bench/connect.c): connect, accept and close.
bench_io() {
  local i b
  for ((i = 0; i < REPEAT; i++)); do
    for b in epoll poll io_uring; do
      run1 env WEFT_BACKEND=$b "$bin/bench_io_pingpong"
      run1 env WEFT_BACKEND=$b "$bin/bench_connect"
    done
  done
  report
}

# What a page costs right after a system call (bench/pages.c): the
# machine's figure behind WEFT__HOT, for reading the echo figures.
bench_pages() {
  local i
  for ((i = 0; i < REPEAT; i++)); do run1 "$bin/bench_pages"; done
  report
}

case $what in
  all)
    bench_switch; bench_spawn; bench_tasks; bench_timers; bench_future
    bench_chan; bench_executor; bench_files; bench_io; bench_pages
    ;;
  *) "bench_$what" ;;
esac
exit $status
