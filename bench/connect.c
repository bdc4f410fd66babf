/*
 * Connections that live for one message: a connection's whole life on
 * loopback TCP, both ends in one loop. CLIENTS tasks each connect, send a
 * byte, read it back and close, over and over; the server accepts and,
 * per connection, a task reads the byte, sends it back, waits for the end
 * and closes. What a short-lived-connection server and its clients pay
 * per connection: socket, connect, accept, close, and the waits.
 *
 *   connect_BACKEND_connection   ns of CPU time per connection (both
 *                                ends), the median of the rounds; BACKEND
 *                                is the one the loop runs on
 *
 *   usage: bench_connect [-r rounds] [-n connections] [-v]
 *
 * The backend is the loop's default, or WEFT_BACKEND. The client ends
 * each connection with a reset (SO_LINGER 0, one setsockopt more), not a
 * FIN: a FIN leaves the port in TIME_WAIT for a minute, and with tens of
 * thousands of those (a few runs in a row) the kernel's search for a free
 * port made connect cost up to twice as much, run to run.
 */
#include "weft.h"

#include "bench.h"

#include <errno.h>
#include <sys/socket.h>

#define CLIENTS 16

static bench_opts opts;
static int port;

static void die(const char *what, long rc) {
  fprintf(stderr, "connect: %s: %s\n", what, weft_strerror((int)rc));
  exit(1);
}

/* The server's side of one connection. */
static void *serve(void *arg) {
  int fd = (int)(intptr_t)arg;
  char c;
  if (weft_recv(fd, &c, 1, 0) == 1 && weft_send(fd, &c, 1, 0) == 1)
    (void)weft_recv(fd, &c, 1, 0); /* the client's end (a reset) */
  weft_close(fd);
  return NULL;
}

static void *acceptor(void *arg) {
  int lfd = (int)(intptr_t)arg;
  for (;;) {
    int fd = weft_accept(lfd, NULL, NULL);
    if (fd < 0)
      return NULL; /* cancelled: the benchmark is over */
    if (weft_go(serve, (void *)(intptr_t)fd) < 0)
      die("weft_go", -ENOMEM);
  }
}

/* arg: how many connections this client makes. */
static void *client(void *arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; i++) {
    int fd = weft_tcp_connect("127.0.0.1", port);
    if (fd < 0)
      die("weft_tcp_connect", fd);
    char c = 'x';
    ssize_t r = weft_send(fd, &c, 1, 0);
    if (r != 1 || (r = weft_recv(fd, &c, 1, 0)) != 1)
      die("the echo", r < 0 ? r : -EIO);
    struct linger l = {.l_onoff = 1, .l_linger = 0};
    if (setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l) < 0)
      die("SO_LINGER", -errno);
    weft_close(fd);
  }
  return NULL;
}

/* One round: opts.iters connections, CLIENTS at a time. */
static void round_of(void) {
  weft_task *t[CLIENTS];
  for (int i = 0; i < CLIENTS; i++) {
    long n = opts.iters / CLIENTS + (i < opts.iters % CLIENTS);
    if (!(t[i] = weft_spawn(client, (void *)(intptr_t)n)))
      die("weft_spawn", -errno);
  }
  for (int i = 0; i < CLIENTS; i++)
    weft_join(t[i], NULL);
}

static int run(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 0);
  if (lfd < 0)
    die("weft_tcp_listen", lfd);
  port = weft_sock_port(lfd);
  weft_task *a = weft_spawn(acceptor, (void *)(intptr_t)lfd);
  if (!a)
    die("weft_spawn", -errno);
  char name[64];
  snprintf(name, sizeof name, "connect_%s_connection",
           weft_loop_backend(weft_loop_current()));
  bench_series s = {.name = name};
  for (int r = -1; r < opts.rounds; r++) { /* round -1: the warm-up */
    int64_t t0 = bench_now();
    round_of();
    int64_t t1 = bench_now();
    if (r >= 0)
      bench_add(&s, &opts, (double)(t1 - t0) / (double)opts.iters);
  }
  weft_cancel(a);
  weft_join(a, NULL);
  weft_close(lfd);
  bench_report(&s, "ns");
  return 0;
}

int main(int argc, char **argv) {
  opts = bench_parse(argc, argv, 7, 2000);
  int rc = weft_main(run, NULL);
  if (rc < 0)
    die("weft_main", rc);
  return rc;
}
