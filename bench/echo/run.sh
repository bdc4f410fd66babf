#!/usr/bin/env bash
# The echo benchmark: weft's one-task-per-connection echo server against a
# hand-written epoll server (the limit) and the peers, all driven by the
# same load generator (bench/echo/loadgen.c). Prints on stdout one "name
# value unit" line per figure (the median over the rounds of each of the
# load generator's figures, then ratios to epoll); each round's figures,
# notes, build output and, at the end, markdown tables go to stderr. With
# the defaults it takes 3 minutes, up to twice that if many runs have to
# be done again (STEAL_MAX).
#
#   bench/echo/run.sh            (or bench/run.sh echo)
#   URING=1 bench/echo/run.sh    (or bench/run.sh echo-uring) the io_uring
#                                comparison alone: SERVERS="weft weft_uring
#                                weft_uring_pbuf uring epoll" CONFIGS="50:64:1
#                                50:4096:1 50:64:16 1000:64:1" unless those
#                                are set
#
# For each configuration (N connections, S-byte messages, P in flight on
# each) and each server present: the server starts pinned to CPU 0, the
# load generator runs pinned to CPU 1 (WARMUP s, then DURATION s measured),
# the server is stopped. That is one round; REPEAT rounds run, each going
# through every configuration and server, so that a burst of noise from the
# host hits all of them alike, and every figure printed is the median of
# its rounds (each round's figures go to stderr as they come). The figures
# are named echo_SERVER_nN_sS_pP_*:
#   _msgs        messages echoed per second
#   _p99         99th percentile latency of a message, µs
#   _cpu_total   server CPU time (user + system) per message, µs
#   _cpu_user    the same, user mode only
#   _server_busy, _loadgen_busy   CPU time / wall time of each side, %
#   _ticks_total, _ticks_user     the clock ticks those CPU figures rest on
#   _steal       CPU time the hypervisor gave to others meanwhile, % of all
#                CPUs: on a shared VM the figures of a run with much of it
#                (more than a few %) are disturbed
#   _sc_*        with SYSCALLS=1: the server's system calls per message
#   _cpu_user_ticks, _samples_user   with SAMPLE_HZ: the tick-sampled user
#                figure, and the perf samples that _cpu_user then rests on
# and, for every server but epoll and each configuration,
#   echo_ratio_SERVER_vs_epoll_nN_sS_pP_cpu_total   x (and _cpu_user)
# its median CPU per message over the epoll server's; and when weft and
# weft_uring (or weft_uring_pbuf) ran,
#   echo_ratio_weft_uring_vs_weft_nN_sS_pP_cpu_total   x (and _cpu_user)
# weft on its io_uring backend over weft on its epoll backend. With
# REPEAT > 1 each ratio also comes as NAME_paired: the median of the same
# ratio taken round by round.
#
# The servers: weft (bench/echo/weft_server.c, on weft's epoll backend:
# WEFT_BACKEND=epoll), weft_uring (the same program with WEFT_BACKEND=io_uring; a run in
# which it has no io_uring instance, weft having fallen back to epoll, is
# reported and left out), weft_uring_pbuf (the same with WEFT_URING_PBUF=1:
# multishot recv into provided buffers instead of a recv request per call), epoll (epoll_server.c, the limit for epoll),
# uring (uring_server.c, liburing: the limit for io_uring), uring_fixed (the
# same with URING_FIXED=1: each socket a registered file, named by its slot),
# uring_pf (the same with URING_POLL_FIRST=1: each recv waits for data
# before it tries, IORING_RECVSEND_POLL_FIRST),
# and the peers uv, ev, go, asyncio, uvloop.
#
# Environment:
#   BUILD      the CMake build directory (default: $WEFT_BUILD_DIR, as the
#              top-level Makefile passes it, else build/ of this repo)
#   DURATION   seconds measured per run (default 5)
#   WARMUP     seconds run before measuring (default 1)
#   REPEAT     rounds (default 1; each costs about DURATION + WARMUP + 0.5 s
#              per configuration and server: 27 runs with the defaults)
#   STEAL_MAX  a run during which the hypervisor stole more than this % of
#              the CPUs (the load generator's _steal) is run once more, and
#              the run with less steal is kept (default 10; 100: never)
#   SERVERS    the servers to run (default: weft weft_uring epoll uring uv
#              ev go asyncio uvloop); those whose package is missing are
#              skipped
#   CONFIGS    N:S:P triples (default "50:64:1 50:4096:1 50:64:16")
#   URING      1: the io_uring comparison's defaults for the two above
#              (see the top)
#   PYTHON     the interpreter of the Python peers (default /usr/bin/python3,
#              where Debian's python3-uvloop goes, else python3)
#   ECHO_PORT  the first port tried on 127.0.0.1 (default 17480)
#   SYSCALLS   1: also count the server's system calls with `perf stat`
#              (tracepoints raw_syscalls and syscalls:sys_enter_*) over the
#              measured interval, as _sc_* figures and a table (_sc_uring:
#              io_uring_enter, which submits and waits for the io_uring
#              servers; their recvs and sends are not system calls). perf
#              is Debian's linux-perf package (installed with CI=true as
#              root). The tracing costs the server some CPU, so the CPU
#              figures of such a run are a little high. Default 0.
#   SAMPLE_HZ  N > 0: split the server's CPU time into user and system
#              mode from perf samples of its cpu-clock at N Hz over the
#              measured interval (perf record), instead of from clock ticks:
#              _cpu_user is then _cpu_total times the share of samples taken
#              in user mode. At 2000 Hz a run has 8 times the user samples
#              that ticks give at 250 Hz, so the sampling noise is a third
#              (the samples cost the server about 1%). perf is Debian's
#              linux-perf package; it must be allowed to sample the kernel
#              too (root, or kernel.perf_event_paranoid at most 1), else
#              every sample would count as user time. 0: from ticks.
#              Default 2000 where perf can, else 0 (with a note).
#   CI         with CI=true, as root, missing peer packages are installed
#   WEFT_BASE  the server weft_base: an echo_server_weft built from another
#              tree (the commit before a change, say), run on epoll in the
#              same rounds as weft; then weft's CPU figures over its come too
#              (echo_ratio_weft_vs_weft_base_*, and a table), the paired
#              ratio being the one to judge a change by
#
# Descriptors: the soft RLIMIT_NOFILE is raised to the hard limit for the
# servers and the load generator (1000 connections need over 1000 on each
# side; the load generator raises its own too).
#
# Two CPUs is what this needs: one for the server, one for the client. The
# CPU figures are the server's alone (from /proc/PID/stat), so they hold
# even when the client, not the server, sets the pace; the _busy figures
# tell which one did. On loopback the server's system time includes the
# kernel's delivery of what it sends to the client's socket (loopback
# processes a packet in the sender's system call), so most of the total is
# the TCP stack, the same for every server; the user figure is the
# server's own code. That split is sampled per clock tick (loadgen.c): with
# u user ticks in a run it is uncertain by about 1/sqrt(u), which is why
# _ticks_user is given and why REPEAT > 1 (and SAMPLE_HZ) is worth it when
# user time is what is being compared.
set -u

here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-${WEFT_BUILD_DIR:-$src/build}}
DURATION=${DURATION:-5}
WARMUP=${WARMUP:-1}
REPEAT=${REPEAT:-1}
STEAL_MAX=${STEAL_MAX:-10}
SYSCALLS=${SYSCALLS:-0}
SAMPLE_HZ=${SAMPLE_HZ:-2000}
URING=${URING:-0}
if [ "$URING" = 1 ]; then
  SERVERS=${SERVERS:-weft weft_uring weft_uring_pbuf uring epoll}
  CONFIGS=${CONFIGS:-50:64:1 50:4096:1 50:64:16 1000:64:1}
fi
SERVERS=${SERVERS:-weft weft_uring epoll uring uv ev go asyncio uvloop}
CONFIGS=${CONFIGS:-50:64:1 50:4096:1 50:64:16}
ECHO_PORT=${ECHO_PORT:-17480}
if [ -z "${PYTHON:-}" ]; then
  if [ -x /usr/bin/python3 ]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi

note() { echo "bench: echo: $*" >&2; }
die() { note "$*"; exit 1; }

[ $# = 0 ] || die "usage: $0 (no arguments; see the environment variables)"
for v in DURATION WARMUP REPEAT STEAL_MAX SAMPLE_HZ; do
  case ${!v} in
    '' | *[!0-9]*) die "$v must be a whole number (it is '${!v}')" ;;
  esac
done
if [ "$DURATION" -lt 1 ] || [ "$REPEAT" -lt 1 ]; then
  die "DURATION and REPEAT must be at least 1"
fi
for c in $CONFIGS; do
  case $c in
    [1-9]*:[1-9]*:[1-9]*) ;;
    *) die "bad configuration '$c' in CONFIGS (N:S:P, e.g. 50:64:1)" ;;
  esac
done
# Enough descriptors for the connections, on both sides (children inherit
# the limit): the soft limit goes up to the hard one.
hardn=$(ulimit -Hn)
[ "$hardn" != unlimited ] || hardn=1048576
[ "$(ulimit -Sn)" = unlimited ] || [ "$(ulimit -Sn)" -ge "$hardn" ] ||
  ulimit -Sn "$hardn" 2>/dev/null || note "could not raise ulimit -n to $hardn"
for c in $CONFIGS; do
  n=${c%%:*}
  if [ "$(ulimit -Sn)" != unlimited ] && [ $((n + 64)) -gt "$(ulimit -Sn)" ]; then
    note "warning: $n connections need more descriptors than ulimit -n" \
      "($(ulimit -Sn)) allows"
  fi
done
mkdir -p "$BUILD" || die "cannot make the build directory $BUILD"
BUILD=$(cd "$BUILD" && pwd)
bin=$BUILD/bench/echo

# ---- peer packages ----------------------------------------------------
# As in bench/run.sh: a missing package is installed when that is clearly
# wanted (root in CI); otherwise its peer is skipped, saying how to get it.
installed=0
want_peer() { # peer package -> 0 if the package is there (now)
  local peer=$1 pkg=$2
  if ! command -v dpkg >/dev/null 2>&1; then
    return 0 # not Debian: the build or the import below tells
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

declare -A have=()
for s in $SERVERS; do
  case $s in
    weft | weft_uring | weft_uring_pbuf | epoll) have[$s]=1 ;;
    weft_base)
      if [ -x "${WEFT_BASE:-}" ]; then
        have[weft_base]=1
      else
        note "the weft_base server is skipped: WEFT_BASE is not an" \
          "executable echo_server_weft"
      fi
      ;;
    uring | uring_fixed | uring_pf) want_peer uring liburing-dev && have[$s]=1 ;;
    uv) want_peer uv libuv1-dev && have[uv]=1 ;;
    ev) want_peer ev libev-dev && have[ev]=1 ;;
    go) want_peer go golang-go && have[go]=1 ;;
    asyncio) want_peer asyncio python3 && have[asyncio]=1 ;;
    uvloop) want_peer uvloop python3-uvloop && have[uvloop]=1 ;;
    *) die "unknown server '$s' (weft weft_uring weft_uring_pbuf weft_base" \
      "epoll uring uring_fixed uring_pf uv ev go asyncio uvloop)" ;;
  esac
done

# ---- build ------------------------------------------------------------
# Configure if needed (again after an install, so that CMake finds libuv,
# libev and liburing; also when a peer wanted has no program yet: its
# package may have come after the build was configured, and CMake looks
# again only when asked). If weft itself does not build, the rest still
# runs.
reconfigure=$installed
for s in "${!have[@]}"; do
  case $s in
    uv | ev) [ -x "$bin/echo_server_$s" ] || reconfigure=1 ;;
    uring*) [ -x "$bin/echo_server_uring" ] || reconfigure=1 ;;
  esac
done
if [ ! -f "$BUILD/CMakeCache.txt" ] || [ $reconfigure = 1 ]; then
  cmake -S "$src" -B "$BUILD" >&2 || die "cmake could not configure $BUILD"
fi
# A program that fails to build is not run, even if an old binary of it is
# still there: its figures would not be this tree's.
declare -A stale=()
if ! cmake --build "$BUILD" --target bench_echo -j2 >&2; then
  note "bench_echo did not build whole; building its programs one by one"
  for t in echo_loadgen echo_server_epoll echo_server_uv echo_server_ev \
    echo_server_uring echo_server_weft; do
    if ! cmake --build "$BUILD" --target "$t" -j2 >/dev/null 2>&1; then
      note "$t did not build"
      stale[$t]=1
    fi
  done
fi
if [ ! -x "$bin/echo_loadgen" ] || [ -n "${stale[echo_loadgen]:-}" ]; then
  die "no $bin/echo_loadgen (is add_subdirectory(echo) in bench/CMakeLists.txt?)"
fi
btype=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
# An empty cache entry is the project's default, which CMakeLists.txt sets.
[ -n "$btype" ] || btype=RelWithDebInfo
sanitize=$(sed -n 's/^WEFT_SANITIZE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
case $btype in
  Release | RelWithDebInfo | MinSizeRel) ;;
  *) note "warning: $BUILD is a '$btype' build: the figures are not weft's" ;;
esac
[ -z "$sanitize" ] || note "warning: $BUILD is built with $sanitize sanitizer"

for s in weft weft_uring weft_uring_pbuf epoll uring uring_fixed uring_pf uv ev; do
  b=${s%_uring*} # weft_uring, weft_uring_pbuf: echo_server_weft
  [[ $s != uring* ]] || b=uring
  if [ -n "${have[$s]:-}" ] && { [ ! -x "$bin/echo_server_$b" ] ||
    [ -n "${stale[echo_server_$b]:-}" ]; }; then
    note "the $s server is skipped: it was not built (see above)"
    unset "have[$s]"
  fi
done
if [ -n "${have[go]:-}" ]; then
  # No modules, no network: the program uses the standard library only.
  if command -v go >/dev/null 2>&1 &&
    env GOCACHE="$BUILD/bench/go/cache" GOPATH="$BUILD/bench/go/path" \
      GO111MODULE=off GOFLAGS= \
      go build -o "$bin/echo_server_go" "$here/go_server/main.go" >&2; then
    :
  else
    note "the go peer is skipped: go build failed (or go is missing)"
    unset "have[go]"
  fi
fi
if [ -n "${have[asyncio]:-}" ] && ! "$PYTHON" -c 'import asyncio' 2>/dev/null; then
  note "the asyncio peer is skipped: $PYTHON cannot import asyncio (set PYTHON)"
  unset "have[asyncio]"
fi
if [ -n "${have[uvloop]:-}" ] && ! "$PYTHON" -c 'import uvloop' 2>/dev/null; then
  note "the uvloop peer is skipped: $PYTHON cannot import uvloop (set PYTHON"
  note "  to the interpreter python3-uvloop installed for, or pip install uvloop)"
  unset "have[uvloop]"
fi

# The tracepoints SYSCALLS=1 counts, those this kernel has: the _sc_ name
# each adds to, then the event.
sc_events=()
# perf serves both SYSCALLS=1 and SAMPLE_HZ.
if { [ "$SYSCALLS" = 1 ] || [ "$SAMPLE_HZ" -gt 0 ]; } &&
  ! command -v perf >/dev/null 2>&1; then
  want_peer perf linux-perf || true
fi
if [ "$SYSCALLS" = 1 ]; then
  if ! command -v perf >/dev/null 2>&1 ||
    ! perf stat -e raw_syscalls:sys_enter -o /dev/null true 2>/dev/null; then
    note "SYSCALLS=1: perf cannot count tracepoints here (perf missing, or"
    note "  kernel.perf_event_paranoid too high, or no tracefs): not counted"
    SYSCALLS=0
  else
    known=$(perf list tracepoint 2>/dev/null)
    for pair in all:raw_syscalls:sys_enter \
      wait:syscalls:sys_enter_epoll_wait wait:syscalls:sys_enter_epoll_pwait \
      wait:syscalls:sys_enter_epoll_pwait2 \
      recv:syscalls:sys_enter_recvfrom recv:syscalls:sys_enter_read \
      recv:syscalls:sys_enter_readv recv:syscalls:sys_enter_recvmsg \
      send:syscalls:sys_enter_sendto send:syscalls:sys_enter_write \
      send:syscalls:sys_enter_writev send:syscalls:sys_enter_sendmsg \
      ctl:syscalls:sys_enter_epoll_ctl \
      uring:syscalls:sys_enter_io_uring_enter; do
      ev=${pair#*:}
      [ "$ev" = raw_syscalls:sys_enter ] || grep -q "$ev " <<<"$known" ||
        continue
      sc_events+=("$pair")
    done
  fi
fi

# Samples in kernel mode must be seen, or the user share would be 100%:
# perf quietly drops them for an unprivileged user at paranoid 2.
paranoid=$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo 3)
if [ "$SAMPLE_HZ" -gt 0 ] && { ! command -v perf >/dev/null 2>&1 ||
  { [ "$(id -u)" != 0 ] && [ "$paranoid" -gt 1 ]; } ||
  ! perf record -q -e cpu-clock -F "$SAMPLE_HZ" -o /dev/null true \
    >/dev/null 2>&1; }; then
  note "SAMPLE_HZ=$SAMPLE_HZ: perf cannot sample cpu-clock with the kernel"
  note "  here (perf missing, or not root and kernel.perf_event_paranoid"
  note "  is $paranoid, over 1): user time from clock ticks"
  SAMPLE_HZ=0
fi

# ---- running ----------------------------------------------------------
pin0=()
pin1=()
if command -v taskset >/dev/null 2>&1 && taskset -c 1 true 2>/dev/null; then
  pin0=(taskset -c 0)
  pin1=(taskset -c 1)
else
  note "not pinned: taskset or CPU 1 is missing (the figures mean less)"
fi
note "build $BUILD ($btype), $(git -C "$src" describe --always --dirty 2>/dev/null || echo '?')"
note "${WARMUP}s warm-up, ${DURATION}s measured per run; python: $PYTHON"

status=0
all=$(mktemp)
one=$(mktemp)
perfout=$(mktemp)
samples=$(mktemp)
server_pid=
perf_pid=
sample_pid=
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2>/dev/null
  [ -z "$perf_pid" ] || kill "$perf_pid" 2>/dev/null
  [ -z "$sample_pid" ] || kill "$sample_pid" 2>/dev/null
  rm -f "$all" "$one" "$one.first" "$perfout" "$samples"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# True when something accepts connections on 127.0.0.1:$1. The probe is a
# connection opened and closed at once: an echo server just sees EOF.
listening() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# True when process $1 has an io_uring instance open: how a weft server
# asked for WEFT_BACKEND=io_uring shows that it did not fall back to epoll
# (the server itself prints nothing about its backend).
has_uring() {
  local f
  for f in /proc/"$1"/fd/*; do
    [ "$(readlink "$f" 2>/dev/null)" != "anon_inode:[io_uring]" ] || return 0
  done
  return 1
}

server_cmd() { # server -> the command, in the array cmd
  case $1 in
    asyncio | uvloop) cmd=("$PYTHON" "$here/${1}_server.py") ;;
    go) cmd=(env GOMAXPROCS=1 "$bin/echo_server_go") ;;
    weft_uring) cmd=(env WEFT_BACKEND=io_uring "$bin/echo_server_weft") ;;
    weft_uring_pbuf)
      cmd=(env WEFT_BACKEND=io_uring WEFT_URING_PBUF=1 "$bin/echo_server_weft")
      ;;
    weft) cmd=(env WEFT_BACKEND=epoll "$bin/echo_server_weft") ;;
    weft_base) cmd=(env WEFT_BACKEND=epoll "$WEFT_BASE") ;;
    uring_fixed) cmd=(env URING_FIXED=1 "$bin/echo_server_uring") ;;
    uring_pf) cmd=(env URING_POLL_FIRST=1 "$bin/echo_server_uring") ;;
    *) cmd=("$bin/echo_server_$1") ;;
  esac
}

# Counts the server's system calls from about when the load generator
# starts measuring (the warm-up after it connects) for DURATION s.
perf_start() {
  local evs=() pair
  for pair in "${sc_events[@]}"; do evs+=(-e "${pair#*:}"); done
  (sleep "$WARMUP" && exec perf stat -x, -o "$perfout" "${evs[@]}" \
    -p "$server_pid" -- sleep "$DURATION") 2>/dev/null &
  perf_pid=$!
}

# Adds the counts as _sc_* figures per message to $one.
perf_report() { # prefix
  local sc
  wait "$perf_pid" 2>/dev/null
  perf_pid=
  sc=$(awk -F, -v prefix="$1" -v d="$DURATION" -v map="${sc_events[*]}" '
    FNR == NR { split($0, w, " "); if (w[1] == prefix "_msgs") msgs = w[2] * d
                next }
    BEGIN { n = split(map, m, " ")
            for (i = 1; i <= n; i++) {
              k = m[i]; sub(/:.*/, "", k); ev = m[i]; sub(/^[^:]*:/, "", ev)
              key[ev] = k } }
    $3 in key && $1 ~ /^[0-9]+$/ { c[key[$3]] += $1; seen = 1 }
    END {
      if (!seen || msgs <= 0) exit
      known = c["wait"] + c["recv"] + c["send"] + c["ctl"] + c["uring"]
      printf "%s_sc_all %.3f /msg\n", prefix, c["all"] / msgs
      printf "%s_sc_wait %.3f /msg\n", prefix, c["wait"] / msgs
      printf "%s_sc_recv %.3f /msg\n", prefix, c["recv"] / msgs
      printf "%s_sc_send %.3f /msg\n", prefix, c["send"] / msgs
      printf "%s_sc_ctl %.3f /msg\n", prefix, c["ctl"] / msgs
      printf "%s_sc_uring %.3f /msg\n", prefix, c["uring"] / msgs
      printf "%s_sc_other %.3f /msg\n", prefix, (c["all"] - known) / msgs
    }' "$one" "$perfout")
  [ -z "$sc" ] || echo "$sc" >>"$one"
}

# SAMPLE_HZ: samples the server's cpu-clock over the measured interval.
sample_start() {
  (sleep "$WARMUP" && exec perf record -q -e cpu-clock -F "$SAMPLE_HZ" \
    -o "$samples" -p "$server_pid" -- sleep "$DURATION") >/dev/null 2>&1 &
  sample_pid=$!
}

# Puts the sampled user figure in $one in place of the tick-based one
# (kept as _cpu_user_ticks): _cpu_total times the share of the samples
# whose instruction pointer is in user space (kernel addresses have the
# top bit set on x86-64 and aarch64).
sample_report() { # prefix
  local share
  wait "$sample_pid" 2>/dev/null
  sample_pid=
  share=$(perf script -i "$samples" -F ip 2>/dev/null | awk '
    { if (tolower($1) ~ /^ffff/) k++; else u++ }
    END { if (u + k > 0) printf "%.6f %d", u / (u + k), u }')
  if [ -z "$share" ]; then
    note "$1: no perf samples: user time from ticks"
    return
  fi
  awk -v prefix="$1" -v share="${share% *}" -v nu="${share#* }" '
    $1 == prefix "_cpu_total" { total = $2 }
    $1 == prefix "_cpu_user" { $1 = prefix "_cpu_user_ticks" }
    { print }
    END {
      printf "%s_cpu_user %.2f us\n", prefix, total * share
      printf "%s_samples_user %d samples\n", prefix, nu
    }' "$one" >"$one.tmp" && mv "$one.tmp" "$one"
}

# One run: a fresh server, the load generator against it; its figures go
# to $one. Returns 1 if there are none.
run_once() { # server conns size depth
  local name=$1 n=$2 size=$3 depth=$4 port=$ECHO_PORT i rc=0
  local prefix=echo_${name}_n${n}_s${size}_p${depth}
  : >"$one"
  while listening "$port"; do port=$((port + 1)); done # taken: the next
  server_cmd "$name"
  # exec: the pid is the server's own (taskset and env exec too), which is
  # whose /proc/PID/stat the load generator reads.
  ${pin0[@]+"${pin0[@]}"} "${cmd[@]}" "$port" >&2 &
  server_pid=$!
  for ((i = 0; i < 100; i++)); do
    listening "$port" && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.1
  done
  if ! listening "$port"; then
    note "$prefix: the $name server did not listen on port $port"
    rc=1
  elif [[ $name == weft_uring* ]] && ! has_uring "$server_pid"; then
    note "$prefix: weft has no io_uring instance with WEFT_BACKEND=io_uring"
    note "  (it fell back to epoll, or the backend does not exist yet): skipped"
    rc=2
  else
    [ "$SYSCALLS" != 1 ] || perf_start
    [ "$SAMPLE_HZ" = 0 ] || sample_start
    if ${pin1[@]+"${pin1[@]}"} "$bin/echo_loadgen" -c "$n" -s "$size" \
      -p "$depth" -d "$DURATION" -w "$WARMUP" --prefix "$prefix" \
      127.0.0.1 "$port" "$server_pid" >"$one"; then
      [ "$SYSCALLS" != 1 ] || perf_report "$prefix"
      [ "$SAMPLE_HZ" = 0 ] || sample_report "$prefix"
    else
      note "$prefix: the load generator failed"
      rc=1
    fi
    if [ -n "$perf_pid" ]; then
      kill "$perf_pid" 2>/dev/null
      wait "$perf_pid" 2>/dev/null
      perf_pid=
    fi
    if [ -n "$sample_pid" ]; then
      kill "$sample_pid" 2>/dev/null
      wait "$sample_pid" 2>/dev/null
      sample_pid=
    fi
  fi
  kill -0 "$server_pid" 2>/dev/null || note "$prefix: the server had exited"
  kill "$server_pid" 2>/dev/null
  { wait "$server_pid"; } 2>/dev/null
  server_pid=
  return $rc
}

steal_of() { awk '$1 ~ /_steal$/ { print $2 + 0 }' "$1"; }

# A run, and once more if the hypervisor stole more than STEAL_MAX % of
# the CPUs during it; the run with less steal is kept, in $all.
run1() { # server conns size depth
  local s1 s2 rc
  run_once "$@"
  rc=$?
  if [ $rc != 0 ]; then
    [ $rc = 2 ] || status=1 # 2: weft_uring on epoll, said above
    return
  fi
  s1=$(steal_of "$one")
  if [ "${s1:-0}" -gt "$STEAL_MAX" ]; then
    sed "s/^/bench: echo: round $round, first try: /" "$one" >&2
    cp "$one" "$one.first"
    note "steal was ${s1}% (over STEAL_MAX=$STEAL_MAX): running it again"
    if run_once "$@"; then
      s2=$(steal_of "$one")
      if [ "${s2:-0}" -gt "$s1" ]; then
        note "steal was ${s2}% this time: keeping the first run"
        cp "$one.first" "$one"
      fi
    else
      cp "$one.first" "$one"
    fi
    rm -f "$one.first"
  fi
  sed "s/^/bench: echo: round $round: /" "$one" >&2
  cat "$one" >>"$all"
}

order=()
for s in $SERVERS; do [ -z "${have[$s]:-}" ] || order+=("$s"); done
[ ${#order[@]} -gt 0 ] || die "no server to run"
nconfigs=$(wc -w <<<"$CONFIGS")
runs=$((REPEAT * nconfigs * ${#order[@]}))
note "$runs runs (${REPEAT} x $nconfigs configurations x ${#order[@]}" \
  "servers), about $((runs * (DURATION + WARMUP))) s, more for runs done again"
for ((round = 1; round <= REPEAT; round++)); do
  for c in $CONFIGS; do
    IFS=: read -r n size depth <<<"$c"
    for s in "${order[@]}"; do run1 "$s" "$n" "$size" "$depth"; done
  done
done

# ---- the figures ------------------------------------------------------
# The median of each figure over the rounds (the mean of the middle two for
# an even count), in the order first seen; then each server's CPU figures
# over epoll's, from those medians; and, with more than one round, the
# median of the ratios taken round by round (_paired): the two runs of a
# pair came one after the other in their round, so a drift of the machine
# between rounds, which moves both, cancels out of it.
med=$(mktemp)
awk -v servers="${order[*]}" -v configs="$CONFIGS" '
  # The median of s[1..m], which it sorts (insertion sort: m is small).
  function median(s, m,    a, b, x) {
    for (a = 2; a <= m; a++) {
      x = s[a]
      for (b = a - 1; b >= 1 && s[b] > x; b--) s[b + 1] = s[b]
      s[b + 1] = x
    }
    return m % 2 ? s[(m + 1) / 2] : (s[m / 2] + s[m / 2 + 1]) / 2
  }
  # The CPU figures of server `name` over those of `base` in configuration
  # c: the ratio of the medians, and the median of the per-round ratios
  # when both have a figure from every round.
  function ratios(name, base, c,    q, fig, a, b, r, m, t) {
    for (q = 1; q <= 2; q++) {
      fig = q == 1 ? "_cpu_total" : "_cpu_user"
      a = "echo_" name c fig; b = "echo_" base c fig
      if (!(a in mv) || !(b in mv) || mv[b] < 0.005) # shown as 0.00: none
        continue
      printf "echo_ratio_%s_vs_%s%s%s %.2f x\n", name, base, c, fig,
             mv[a] / mv[b]
      if (n[a] != n[b] || n[a] < 2)
        continue
      m = 0
      for (t = 1; t <= n[a]; t++)
        if (v[b, t] + 0 >= 0.005)
          r[++m] = v[a, t] / v[b, t]
      if (m == n[a])
        printf "echo_ratio_%s_vs_%s%s%s_paired %.2f x\n", name, base, c,
               fig, median(r, m)
    }
  }
  { if (!($1 in n)) { order[++k] = $1; unit[$1] = $3 }
    v[$1, ++n[$1]] = $2 }
  END {
    for (i = 1; i <= k; i++) {
      name = order[i]; m = n[name]
      for (a = 1; a <= m; a++) s[a] = v[name, a] + 0
      md = median(s, m)
      fmt = "%.0f"
      if (name ~ /_cpu_(total|user|user_ticks)$/) fmt = "%.2f"
      else if (name ~ /_p99$/) fmt = "%.1f"
      else if (name ~ /_sc_[a-z]+$/) fmt = "%.3f"
      printf "%s " fmt " %s\n", name, md, unit[name]
      mv[name] = md
    }
    ns = split(servers, srv, " "); nc = split(configs, cfg, " ")
    for (j = 1; j <= nc; j++) {
      split(cfg[j], f, ":"); c = "_n" f[1] "_s" f[2] "_p" f[3]
      for (i = 1; i <= ns; i++) {
        if (srv[i] != "epoll")
          ratios(srv[i], "epoll", c)
        if (srv[i] ~ /^weft_uring/) # over weft on epoll: the backend alone
          ratios(srv[i], "weft", c)
        if (srv[i] == "weft_base") # weft over the other tree
          ratios("weft", "weft_base", c)
      }
    }
  }' "$all" >"$med"
cat "$med"

# ---- the tables --------------------------------------------------------
# One row per server, one group of columns per configuration: messages per
# second and the server's CPU µs per message, in all and in user mode; then
# the same CPU figures over epoll's; with SYSCALLS=1, system calls per
# message. All from the medians above.
{
  echo
  echo "Echo, 127.0.0.1, server on CPU 0 and load generator on CPU 1," \
    "${DURATION} s per run, median of $REPEAT round(s); CPU = the server's" \
    "CPU time per message echoed."
  echo
  awk -v servers="${order[*]}" -v configs="$CONFIGS" -v sc="$SYSCALLS" \
    -v hz="$SAMPLE_HZ" '
    { v[$1] = $2 }
    function hdr(cols, rule,    j, f, h) {
      h = "| server |"
      for (j = 1; j <= nc; j++) {
        split(cfg[j], f, ":")
        h = h sprintf(" N=%s S=%s P=%s " cols, f[1], f[2], f[3])
      }
      print h
      h = "|:--|"
      for (j = 1; j <= nc; j++) h = h rule
      print h
    }
    function key(i, j,    f) {
      split(cfg[j], f, ":")
      return "echo_" srv[i] "_n" f[1] "_s" f[2] "_p" f[3]
    }
    # One cell: a ratio, and the paired one after it where there is one.
    function cell(p) {
      if ((p "_paired") in v)
        return sprintf(" %.2fx (%.2fx) |", v[p], v[p "_paired"])
      return sprintf(" %.2fx |", v[p])
    }
    # A row: the CPU figures of server i over those of server base.
    function ratio_row(i, base,    j, f, p, row) {
      row = "| " srv[i] " |"
      for (j = 1; j <= nc; j++) {
        split(cfg[j], f, ":")
        p = "echo_ratio_" srv[i] "_vs_" base "_n" f[1] "_s" f[2] "_p" f[3]
        if ((p "_cpu_total") in v)
          row = row cell(p "_cpu_total") cell(p "_cpu_user")
        else
          row = row " - | - |"
      }
      print row
    }
    END {
      ns = split(servers, srv, " "); nc = split(configs, cfg, " ")
      hdr("msgs/s | cpu µs | user µs |", "--:|--:|--:|")
      for (i = 1; i <= ns; i++) {
        row = "| " srv[i] " |"
        for (j = 1; j <= nc; j++) {
          p = key(i, j)
          if ((p "_msgs") in v)
            row = row sprintf(" %d | %.2f | %.2f |", v[p "_msgs"],
                              v[p "_cpu_total"], v[p "_cpu_user"])
          else
            row = row " - | - | - |"
        }
        print row
      }
      fewest = -1
      what = hz > 0 ? "_samples_user$" : "_ticks_user$"
      for (name in v)
        if (name ~ what && (fewest < 0 || v[name] < fewest))
          fewest = v[name]
      if (fewest >= 0 && hz > 0)
        printf "\nUser-mode CPU is the share of perf samples at %d Hz taken" \
               " in user mode: the fewest user samples behind a figure" \
               " above is %d (about %.0f%% noise).\n", hz,
               fewest, (fewest > 0 ? 100 / sqrt(fewest) : 100)
      else if (fewest >= 0)
        printf "\nUser-mode CPU is sampled per clock tick: the fewest user" \
               " ticks behind a figure above is %d (about %.0f%% noise).\n",
               fewest, (fewest > 0 ? 100 / sqrt(fewest) : 100)
      has_ratio = 0; has_uratio = 0; has_bratio = 0; paired = 0
      for (name in v) {
        if (name ~ /_paired$/) paired = 1
        if (name ~ /^echo_ratio_.*_vs_epoll_/) has_ratio = 1
        if (name ~ /^echo_ratio_weft_uring(_pbuf)?_vs_weft_/) has_uratio = 1
        if (name ~ /^echo_ratio_weft_vs_weft_base_/) has_bratio = 1
      }
      if (has_ratio) {
        print ""
        print "Server CPU per message over the epoll server'"'"'s:"
        print ""
        hdr("cpu | user |", "--:|--:|")
        for (i = 1; i <= ns; i++)
          if (srv[i] != "epoll")
            ratio_row(i, "epoll")
        if (paired)
          print "\nIn parentheses: the median of the ratios taken round by" \
                " round (the two runs of a round follow each other)."
      }
      if (has_uratio) {
        print ""
        print "weft on its io_uring backend over weft on epoll, server CPU" \
              " per message:"
        print ""
        hdr("cpu | user |", "--:|--:|")
        for (i = 1; i <= ns; i++)
          if (srv[i] ~ /^weft_uring/)
            ratio_row(i, "weft")
      }
      if (has_bratio) {
        print ""
        print "weft over weft_base (WEFT_BASE), server CPU per message:"
        print ""
        hdr("cpu | user |", "--:|--:|")
        for (i = 1; i <= ns; i++)
          if (srv[i] == "weft")
            ratio_row(i, "weft_base")
      }
      if (sc == 1) {
        print ""
        print "System calls of the server per message (perf stat):" \
              " all = wait (epoll_wait/pwait/pwait2) + recv (recvfrom, read," \
              " readv, recvmsg) + send (sendto, write, writev, sendmsg) +" \
              " ctl (epoll_ctl) + uring (io_uring_enter) + other."
        print ""
        hdr("all | wait | recv | send | ctl | uring | other |",
            "--:|--:|--:|--:|--:|--:|--:|")
        for (i = 1; i <= ns; i++) {
          row = "| " srv[i] " |"
          for (j = 1; j <= nc; j++) {
            p = key(i, j)
            if ((p "_sc_all") in v)
              row = row sprintf(" %.2f | %.3f | %.2f | %.2f | %.3f | %.3f |" \
                                " %.3f |",
                                v[p "_sc_all"], v[p "_sc_wait"],
                                v[p "_sc_recv"], v[p "_sc_send"],
                                v[p "_sc_ctl"], v[p "_sc_uring"],
                                v[p "_sc_other"])
            else
              row = row " - | - | - | - | - | - | - |"
          }
          print row
        }
      }
    }' "$med"
  awk '$1 ~ /_steal$/ { n++; s += $2
                        if (wn == "" || $2 > w) { w = $2; wn = $1 } }
    END { if (n) printf "\nSteal (the hypervisor running others) during" \
            " the runs: mean %.0f%%, worst %d%% (%s).\n", s / n, w, wn }' "$all"
} >&2
rm -f "$med"
exit $status
