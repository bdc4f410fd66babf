/*
 * The I/O path's own cost: two tasks of one loop echo 16 bytes back and
 * forth over a socketpair, so every message is a send, a recv that parks,
 * a wait in the backend and a wake-up, with no network stack in between.
 *
 *   io_pingpong_BACKEND_round_trip   ns of CPU time per round trip (two
 *                            messages), the median of the rounds; BACKEND
 *                            is the one the loop runs on (epoll, poll,
 *                            io_uring)
 *
 *   usage: bench_io_pingpong [-r rounds] [-n round_trips] [-v]
 *
 * The backend is the loop's default, or WEFT_BACKEND. Timed, the figure is
 * mostly the four system calls. Its use is under callgrind, where the
 * instruction count is the same from run to run, as a change to the I/O
 * path is made. With `-r 1` a run is the warm-up round and one timed round,
 * 2n round trips, so the difference between the counts of `-r 1 -n 10000`
 * and `-r 1 -n 20000` (valgrind --tool=callgrind, WEFT_BACKEND=epoll),
 * divided by 20,000, is the instructions of one round trip with the set-up
 * taken out.
 */
#include "weft.h"

#include "bench.h"

#include <errno.h>
#include <sys/socket.h>

#define MSG 16
/* Each side reads into a buffer larger than the message, as a server
 * does: the short read tells a readiness backend that the socket is
 * drained, so its next recv waits without a system call first (io.c).
 * A buffer of exactly MSG bytes would add a recv failing with EAGAIN to
 * every message. */
#define BUF 4096

static int sv[2];
static bench_opts opts;

static void die(const char *what, long rc) {
  fprintf(stderr, "io_pingpong: %s: %s\n", what, weft_strerror((int)rc));
  exit(1);
}

/* The echoing side, until the other end closes. */
static void *echo(void *arg) {
  char buf[BUF];
  (void)arg;
  for (;;) {
    ssize_t n = weft_recv(sv[1], buf, sizeof buf, 0);
    if (n <= 0)
      return NULL;
    if (weft_write_all(sv[1], buf, (size_t)n) != n)
      return NULL;
  }
}

/* One message there and back; MSG bytes on a socketpair arrive whole. */
static void round_trip(char *buf) {
  ssize_t n = weft_write_all(sv[0], buf, MSG);
  if (n != MSG)
    die("weft_write_all", n);
  if ((n = weft_recv(sv[0], buf, BUF, 0)) != MSG)
    die("weft_recv", n < 0 ? n : -EIO);
}

static int run(void *arg) {
  (void)arg;
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
    die("socketpair", -errno);
  weft_task *t = weft_spawn(echo, NULL);
  if (!t)
    die("weft_spawn", -errno);
  char buf[BUF] = "ping", name[64];
  snprintf(name, sizeof name, "io_pingpong_%s_round_trip",
           weft_loop_backend(weft_loop_current()));
  bench_series s = {.name = name};
  for (int r = -1; r < opts.rounds; r++) { /* round -1: the warm-up */
    int64_t t0 = bench_now();
    for (long i = 0; i < opts.iters; i++)
      round_trip(buf);
    int64_t t1 = bench_now();
    if (r >= 0)
      bench_add(&s, &opts, (double)(t1 - t0) / (double)opts.iters);
  }
  weft_close(sv[0]); /* the echo task sees end of file */
  weft_join(t, NULL);
  weft_close(sv[1]);
  bench_report(&s, "ns");
  return 0;
}

int main(int argc, char **argv) {
  opts = bench_parse(argc, argv, 7, 100000);
  int rc = weft_main(run, NULL);
  if (rc < 0)
    die("weft_main", rc);
  return rc;
}
