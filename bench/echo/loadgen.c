/*
 * The echo benchmark's load generator: plain C and epoll, no weft, so that
 * every server is measured by the same client.
 *
 *   echo_loadgen [options] HOST PORT SERVER_PID
 *     -c, --conns N      connections (default 50)
 *     -s, --size S       bytes per message (default 64)
 *     -p, --depth P      messages each connection keeps in flight (default 1)
 *     -d, --duration D   seconds measured (default 5)
 *     -w, --warmup W     seconds run first and not measured (default 1)
 *         --prefix NAME  prefix of the figures' names (default "echo")
 *
 * It opens N connections to HOST:PORT and keeps P messages of S bytes in
 * flight on each: whenever a message has come back whole, the next one is
 * sent. Every byte that comes back is compared with what was sent; message
 * k of connection c carries a pattern derived from (c, k), so an echo that
 * loses, duplicates, reorders or crosses bytes between connections is a
 * fatal error that says where. After the warm-up it measures for D seconds
 * and prints, as bench.h's programs do, "name value unit" lines:
 *
 *   NAME_msgs          messages echoed per second (all connections)
 *   NAME_p99           99th percentile of a message's latency, from the
 *                      moment it was queued for sending to the moment its
 *                      last byte came back, in µs
 *   NAME_cpu_total     CPU time of the server process (utime + stime from
 *                      /proc/SERVER_PID/stat) over the measured interval,
 *                      per message echoed, in µs
 *   NAME_cpu_user      the same, user mode only
 *   NAME_server_busy   the server's CPU time / the interval, in %
 *   NAME_loadgen_busy  this program's CPU time / the interval, in %: near
 *                      100 means the client, not the server, set the pace
 *   NAME_ticks_total   the server's CPU time over the interval, in clock
 *   NAME_ticks_user    ticks, all and user mode: how fine the CPU figures
 *                      above are (see below)
 *   NAME_steal         the time the hypervisor ran something else while
 *                      this machine's CPUs wanted to run (steal, from the
 *                      "cpu" line of /proc/stat), in % of all CPUs over the
 *                      interval: a run with much of it was disturbed
 *
 * /proc/PID/stat counts in clock ticks (10 ms where USER_HZ is 100), so the
 * CPU figures carry a resolution of one tick over the whole interval: 0.2%
 * of a server that is busy for 5 s. The total is the scheduler's exact run
 * time rounded to ticks; the split between user and system mode, unless
 * the kernel does precise (VIRT_CPU_ACCOUNTING) accounting, comes from
 * sampling which mode each tick found the process in, so a user figure
 * built on u ticks is uncertain by about 1/sqrt(u): NAME_ticks_user says u.
 */
#ifndef _GNU_SOURCE /* CMake defines it for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- errors, clock ------------------------------------------------------- */

static __attribute__((noreturn, format(printf, 1, 2))) void die(const char *fmt,
                                                                ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("loadgen: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

/* Wall time, monotonic, in ns: latencies and the measured interval. */
static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* This process's CPU time (user + system), in ns. */
static int64_t self_cpu_ns(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ((int64_t)ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL +
         ((int64_t)ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL;
}

/* ---- the server's CPU time ----------------------------------------------- */

typedef struct cpu_ticks {
  unsigned long long user; /* utime: field 14 of /proc/PID/stat */
  unsigned long long sys;  /* stime: field 15 */
} cpu_ticks;

/* Reads the server's utime and stime. Field 2, the command name, is in
 * parentheses and may itself hold spaces and ')', so the fields are counted
 * from the last ')'. */
static cpu_ticks read_ticks(int pid) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (!f)
    die("cannot open %s: %s (is the server running?)", path, strerror(errno));
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *p = strrchr(buf, ')');
  cpu_ticks t;
  /* After ')': state(3) ppid pgrp session tty_nr tpgid flags minflt cminflt
   * majflt cmajflt utime(14) stime(15). */
  if (!p ||
      sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu",
             &t.user, &t.sys) != 2)
    die("cannot parse %s", path);
  return t;
}

/* Steal ticks of all CPUs (field 9 of the "cpu" line of /proc/stat); 0
 * where the kernel has none to tell. */
static unsigned long long read_steal(void) {
  unsigned long long v[8] = {0};
  FILE *f = fopen("/proc/stat", "r");
  if (!f)
    return 0;
  if (fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
             &v[2], &v[3], &v[4], &v[5], &v[6], &v[7]) != 8)
    v[7] = 0;
  fclose(f);
  return v[7];
}

/* ---- latency histogram --------------------------------------------------- */

/* Log-linear buckets, as HdrHistogram has them: values below 2^SUB_BITS ns
 * have a bucket each; above, every power of two is cut into 2^(SUB_BITS-1)
 * buckets, so a bucket is never wider than 1/128 of its values (0.8%).
 * Recording is a few instructions and no allocation, whatever the rate. */
#define SUB_BITS 8
#define HALF     (1 << (SUB_BITS - 1))
#define NBUCKETS ((64 - SUB_BITS + 1) * HALF + HALF)

static uint64_t hist[NBUCKETS];
static uint64_t hist_count;

static int bucket_of(uint64_t v) {
  if (v < (1u << SUB_BITS))
    return (int)v;
  int msb = 63 - __builtin_clzll(v);
  int shift = msb - SUB_BITS + 1;
  /* v >> shift is in [HALF, 2 * HALF). */
  return shift * HALF + (int)(v >> shift);
}

/* The middle of bucket b, in ns. */
static double value_of(int b) {
  if (b < (1 << SUB_BITS))
    return b;
  int shift = b / HALF - 1;
  uint64_t low = (uint64_t)(b - shift * HALF) << shift;
  return (double)low + (double)(1ull << shift) / 2;
}

static void hist_add(int64_t ns) {
  hist[bucket_of(ns < 0 ? 0 : (uint64_t)ns)]++;
  hist_count++;
}

/* The value below which a fraction q of the recorded values lie. */
static double hist_quantile(double q) {
  uint64_t rank = (uint64_t)(q * (double)hist_count), seen = 0;
  for (int b = 0; b < NBUCKETS; b++) {
    seen += hist[b];
    if (seen > rank)
      return value_of(b);
  }
  return 0;
}

/* ---- messages ------------------------------------------------------------ */

/* splitmix64's finaliser: distinct inputs, unrelated outputs. */
static uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/* Writes message `msg` of connection `conn` into p[0..len). Each 8-byte word
 * differs from its neighbours and from the same word of any other message,
 * so a shifted, repeated or foreign chunk does not compare equal. */
static void fill(unsigned char *p, size_t len, uint32_t conn, uint64_t msg) {
  uint64_t seed = mix(((uint64_t)conn << 40) ^ msg ^ 0x5eedull);
  for (size_t j = 0; j < len; j += 8) {
    uint64_t w = seed + (j / 8 + 1) * 0x9e3779b97f4a7c15ull;
    memcpy(p + j, &w, len - j < 8 ? len - j : 8);
  }
}

/* ---- connections --------------------------------------------------------- */

/*
 * A connection's messages in flight live in a ring of P slots of S bytes:
 * message k, which starts at byte k*S of the stream, is in slot k % P, that
 * is at ring offset (k*S) % (P*S). The three stream offsets below then say
 * everything, and their ring offsets are where the bytes are:
 *
 *   ring:  [ slot 0 | slot 1 | ... | slot P-1 ]     P*S bytes
 *   stream:   rcvd  <=  sent  <=  queued  <=  rcvd + P*S
 *             (echoed)  (written) (filled in, waiting for send)
 *
 * A slot is refilled only once its message has come back whole, since the
 * next message is queued exactly then.
 */
typedef struct conn {
  int fd;
  uint32_t id;         /* index, part of the message pattern */
  uint64_t queued;     /* stream bytes filled into the ring */
  uint64_t sent;       /* stream bytes the socket took */
  uint64_t rcvd;       /* stream bytes echoed and checked */
  uint64_t next_msg;   /* index of the next message to queue */
  bool want_out;       /* EPOLLOUT is registered (a send was short) */
  int64_t *stamp;      /* [P] when the message in each slot was queued */
  unsigned char *ring; /* [P*S] the messages in flight */
} conn;

static size_t msg_size = 64; /* S */
static unsigned depth = 1;   /* P */
static int epfd;

static void set_events(conn *c, bool out) {
  struct epoll_event ev = {.events = EPOLLIN | (out ? EPOLLOUT : 0),
                           .data.ptr = c};
  if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
    die("epoll_ctl: %s", strerror(errno));
  c->want_out = out;
}

/* Fills in the next message and stamps it with `now`. */
static void queue_msg(conn *c, int64_t now) {
  unsigned slot = (unsigned)(c->next_msg % depth);
  fill(c->ring + (size_t)slot * msg_size, msg_size, c->id, c->next_msg);
  c->stamp[slot] = now;
  c->next_msg++;
  c->queued += msg_size;
}

/* Writes what is queued, as far as the socket takes it; waits for EPOLLOUT
 * only while something is left. */
static void flush(conn *c) {
  size_t ring_len = (size_t)depth * msg_size;
  while (c->sent < c->queued) {
    size_t pos = (size_t)(c->sent % ring_len);
    size_t len = c->queued - c->sent;
    if (len > ring_len - pos)
      len = ring_len - pos; /* up to the end of the ring; the rest next */
    ssize_t n = send(c->fd, c->ring + pos, len, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (!c->want_out)
          set_events(c, true);
        return;
      }
      if (errno == EINTR)
        continue;
      die("connection %u: send: %s", c->id, strerror(errno));
    }
    c->sent += (uint64_t)n;
  }
  if (c->want_out)
    set_events(c, false);
}

static bool measuring;     /* between the warm-up and the end */
static uint64_t completed; /* messages echoed while measuring */
static unsigned char scratch[65536];

/* Reports the first byte of got[0..len) that differs from the ring. */
static void mismatch(conn *c, const unsigned char *got, size_t len) {
  size_t ring_len = (size_t)depth * msg_size;
  const unsigned char *want = c->ring + c->rcvd % ring_len;
  size_t i = 0;
  while (i < len && got[i] == want[i])
    i++;
  uint64_t off = c->rcvd + i;
  die("connection %u: message %llu, byte %llu: sent 0x%02x, echoed 0x%02x",
      c->id, (unsigned long long)(off / msg_size),
      (unsigned long long)(off % msg_size), want[i], got[i]);
}

/* One recv, checked byte for byte against the ring; every message that is
 * now whole is counted and replaced by the next one. */
static void on_readable(conn *c) {
  ssize_t n = recv(c->fd, scratch, sizeof scratch, 0);
  if (n < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
      return;
    die("connection %u: recv: %s", c->id, strerror(errno));
  }
  if (n == 0)
    die("connection %u: the server closed the connection", c->id);
  int64_t now = now_ns(); /* every byte in scratch had arrived by now */
  size_t ring_len = (size_t)depth * msg_size, done = 0;
  while (done < (size_t)n) {
    if (c->rcvd >= c->sent)
      die("connection %u: %zd bytes echoed that were never sent", c->id,
          n - (ssize_t)done);
    uint64_t msg = c->rcvd / msg_size, end = (msg + 1) * msg_size;
    size_t len = (size_t)n - done;
    if (len > end - c->rcvd)
      len = (size_t)(end - c->rcvd); /* one message at a time */
    if (len > c->sent - c->rcvd)
      len = (size_t)(c->sent - c->rcvd); /* the check above reports more */
    if (memcmp(scratch + done, c->ring + c->rcvd % ring_len, len) != 0)
      mismatch(c, scratch + done, len);
    c->rcvd += len;
    done += len;
    if (c->rcvd == end) {
      if (measuring) {
        hist_add(now - c->stamp[msg % depth]);
        completed++;
      }
      queue_msg(c, now);
    }
  }
  flush(c);
}

/* Enough descriptors for n connections (and a few more): the soft limit is
 * raised, up to the hard one, if it is lower. */
static void raise_nofile(long n) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
    return;
  rlim_t want = (rlim_t)n + 32;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < want) {
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > want
                      ? want
                      : rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl); /* at worst socket() says EMFILE below */
  }
}

static void open_conn(conn *c, const struct addrinfo *ai, uint32_t id) {
  c->id = id;
  c->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (c->fd < 0)
    die("socket: %s%s", strerror(errno),
        errno == EMFILE ? " (raise ulimit -n)" : "");
  if (connect(c->fd, ai->ai_addr, ai->ai_addrlen) < 0)
    die("connection %u: connect: %s", id, strerror(errno));
  /* Messages go out the moment they are queued: Nagle's algorithm would
   * hold a small one back while an earlier one is unacknowledged. */
  int one = 1;
  setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) | O_NONBLOCK);
  c->stamp = calloc(depth, sizeof *c->stamp);
  c->ring = malloc((size_t)depth * msg_size);
  if (!c->stamp || !c->ring)
    die("out of memory");
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = c};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &ev) < 0)
    die("epoll_ctl: %s", strerror(errno));
}

/* ---- main ---------------------------------------------------------------- */

static void usage(void) {
  fprintf(stderr,
          "usage: echo_loadgen [-c conns] [-s size] [-p depth] "
          "[-d seconds] [-w seconds] [--prefix name] HOST PORT SERVER_PID\n");
  exit(2);
}

static long num_arg(const char *s, long min, long max) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (errno || end == s || *end || v < min || v > max)
    die("bad number '%s' (from %ld to %ld)", s, min, max);
  return v;
}

/* Runs the loop until `deadline` (monotonic ns). */
static void run_until(int64_t deadline) {
  struct epoll_event evs[256];
  for (;;) {
    int64_t left = deadline - now_ns();
    if (left <= 0)
      return;
    int ms = (int)((left + 999999) / 1000000);
    int n = epoll_wait(epfd, evs, 256, ms);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      die("epoll_wait: %s", strerror(errno));
    }
    for (int i = 0; i < n; i++) {
      conn *c = evs[i].data.ptr;
      if (evs[i].events & EPOLLOUT)
        flush(c);
      if (evs[i].events & (EPOLLIN | EPOLLERR | EPOLLHUP))
        on_readable(c);
    }
  }
}

int main(int argc, char **argv) {
  long nconns = 50, duration = 5, warmup = 1;
  const char *prefix = "echo";
  static const struct option longopts[] = {
      {"conns", required_argument, NULL, 'c'},
      {"size", required_argument, NULL, 's'},
      {"depth", required_argument, NULL, 'p'},
      {"duration", required_argument, NULL, 'd'},
      {"warmup", required_argument, NULL, 'w'},
      {"prefix", required_argument, NULL, 'x'},
      {NULL, 0, NULL, 0}};
  int opt;
  while ((opt = getopt_long(argc, argv, "c:s:p:d:w:", longopts, NULL)) != -1) {
    switch (opt) {
    case 'c': nconns = num_arg(optarg, 1, 100000); break;
    case 's': msg_size = (size_t)num_arg(optarg, 1, 1 << 24); break;
    case 'p': depth = (unsigned)num_arg(optarg, 1, 1 << 16); break;
    case 'd': duration = num_arg(optarg, 1, 3600); break;
    case 'w': warmup = num_arg(optarg, 0, 3600); break;
    case 'x': prefix = optarg; break;
    default: usage();
    }
  }
  if (argc - optind != 3)
    usage();
  const char *host = argv[optind], *port = argv[optind + 1];
  int pid = (int)num_arg(argv[optind + 2], 1, 1 << 30);

  struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                           .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
  struct addrinfo *ai;
  int rc = getaddrinfo(host, port, &hints, &ai);
  if (rc != 0)
    die("%s:%s: %s", host, port, gai_strerror(rc));
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0)
    die("epoll_create1: %s", strerror(errno));
  conn *conns = calloc((size_t)nconns, sizeof *conns);
  if (!conns)
    die("out of memory");
  read_ticks(pid); /* fail now, not after the warm-up, if there is none */
  raise_nofile(nconns);
  for (long i = 0; i < nconns; i++)
    open_conn(&conns[i], ai, (uint32_t)i);
  freeaddrinfo(ai);

  int64_t t = now_ns();
  for (long i = 0; i < nconns; i++) {
    for (unsigned k = 0; k < depth; k++)
      queue_msg(&conns[i], t);
    flush(&conns[i]);
  }
  run_until(t + warmup * 1000000000LL);

  cpu_ticks s0 = read_ticks(pid);
  unsigned long long steal0 = read_steal();
  int64_t self0 = self_cpu_ns(), t0 = now_ns();
  measuring = true;
  run_until(t0 + duration * 1000000000LL);
  measuring = false;
  int64_t t1 = now_ns(), self1 = self_cpu_ns();
  cpu_ticks s1 = read_ticks(pid);
  unsigned long long steal1 = read_steal();

  if (completed == 0)
    die("no message came back in %ld s", duration);
  double secs = (double)(t1 - t0) / 1e9;
  double us_per_tick = 1e6 / (double)sysconf(_SC_CLK_TCK);
  double user_us = (double)(s1.user - s0.user) * us_per_tick;
  double total_us = user_us + (double)(s1.sys - s0.sys) * us_per_tick;
  double msgs = (double)completed;
  printf("%s_msgs %.0f msgs/s\n", prefix, msgs / secs);
  printf("%s_p99 %.1f us\n", prefix, hist_quantile(0.99) / 1000.0);
  printf("%s_cpu_total %.2f us\n", prefix, total_us / msgs);
  printf("%s_cpu_user %.2f us\n", prefix, user_us / msgs);
  printf("%s_server_busy %.0f %%\n", prefix, total_us / 1e4 / secs);
  printf("%s_loadgen_busy %.0f %%\n", prefix,
         (double)(self1 - self0) / 1e7 / secs);
  printf("%s_ticks_total %llu ticks\n", prefix,
         (s1.user - s0.user) + (s1.sys - s0.sys));
  printf("%s_ticks_user %llu ticks\n", prefix, s1.user - s0.user);
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  printf("%s_steal %.0f %%\n", prefix,
         (double)(steal1 - steal0) * us_per_tick / 1e4 / secs /
             (double)(ncpu > 0 ? ncpu : 1));
  fflush(stdout);
  for (long i = 0; i < nconns; i++)
    close(conns[i].fd);
  return 0;
}
