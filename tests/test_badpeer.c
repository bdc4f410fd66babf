/*
 * Bad peers never crash or stall a server (run once per backend).
 *
 * A line server of the echo example's shape ("GOT:" + line, streams with
 * bounded buffers, one task per client) faces, all at once:
 *   - a peer that resets the connection mid-line,
 *   - one that vanishes mid-line (FIN after half a line),
 *   - one that sends a 1 MB line, then a good one,
 *   - one that connects and says nothing,
 *   - one that sends 4 MB of lines and never reads the answers,
 * while a good client asks 20 questions, 10 ms apart: every answer must
 * come within a second. Then the silent and the deaf peers hang up, and
 * every server task must end, with no fd left open and memory bounded.
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

static int port, accepted, handlers_done, bad_done;
static int hang_up; /* set when the silent and deaf peers may go */

/* ---- the server -------------------------------------------------------- */
static void *handler(void *arg) {
  weft_stream *s = weft_stream_new((int)I(arg), 4096);
  CHECK(s);
  char line[1024];
  for (;;) {
    ssize_t n = weft_stream_readline(s, line, sizeof line);
    if (n == -EMSGSIZE) {
      if (weft_stream_write(s, "ERR too long\n", 13) < 0 ||
          weft_stream_flush(s) < 0)
        break;
      continue;
    }
    if (n <= 0)
      break;
    if (weft_stream_write(s, "GOT:", 4) < 0 ||
        weft_stream_write(s, line, (size_t)n) < 0 || weft_stream_flush(s) < 0)
      break;
  }
  weft_stream_close(s); /* its error does not matter: the peer is bad */
  handlers_done++;
  return NULL;
}

static void *acceptor(void *arg) {
  int lfd = (int)I(arg);
  for (;;) {
    int fd = weft_accept(lfd, NULL, NULL);
    if (fd < 0)
      return P(fd);
    accepted++;
    CHECK_EQ(weft_go(handler, P(fd)), 0);
  }
}

/* ---- the peers --------------------------------------------------------- */
static int dial(void) {
  int fd = weft_tcp_connect("127.0.0.1", port);
  CHECK_GE(fd, 0);
  return fd;
}

static void *resetter(void *arg) {
  (void)arg;
  int fd = dial();
  CHECK_EQ(weft_send(fd, "abc", 3, 0), 3);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  struct linger lg = {1, 0}; /* close sends RST */
  CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  CHECK_EQ(weft_close(fd), 0);
  bad_done++;
  return NULL;
}

static void *vanisher(void *arg) {
  (void)arg;
  int fd = dial();
  CHECK_EQ(weft_send(fd, "half a li", 9, 0), 9);
  CHECK_EQ(weft_close(fd), 0);
  bad_done++;
  return NULL;
}

static void *big_liner(void *arg) {
  (void)arg;
  int fd = dial();
  size_t big = 1 << 20;
  char *mb = malloc(big);
  memset(mb, 'x', big);
  CHECK_EQ(weft_write_all(fd, mb, big), (ssize_t)big);
  free(mb);
  CHECK_EQ(weft_write_all(fd, "\nok\n", 4), 4);
  weft_stream *s = weft_stream_new(fd, 0);
  char line[64];
  CHECK_EQ(weft_stream_readline(s, line, sizeof line), 13);
  CHECK_STR_EQ(line, "ERR too long\n");
  CHECK_EQ(weft_stream_readline(s, line, sizeof line), 7);
  CHECK_STR_EQ(line, "GOT:ok\n");
  CHECK_EQ(weft_stream_close(s), 0);
  bad_done++;
  return NULL;
}

static void *silent(void *arg) {
  (void)arg;
  int fd = dial();
  while (!hang_up)
    CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_close(fd), 0);
  bad_done++;
  return NULL;
}

static void *deaf(void *arg) {
  (void)arg;
  int fd = dial();
  /* 4 MB of short lines; the answers pile up unread until the server's
   * writes block (its task, not the others). */
  char chunk[4096];
  for (size_t i = 0; i < sizeof chunk; i += 2)
    memcpy(chunk + i, "x\n", 2);
  weft_stream *s = weft_stream_new(fd, 0);
  size_t sent = 0;
  while (!hang_up && sent < (4u << 20)) {
    /* Never block: once both sides' buffers are full the server stops
     * reading, so a blocking send would wait forever. */
    ssize_t n = weft_send(fd, chunk, sizeof chunk, MSG_DONTWAIT);
    if (n == -EAGAIN) {
      CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
      continue;
    }
    CHECK_GT(n, 0);
    sent += (size_t)n;
  }
  while (!hang_up)
    CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  weft_stream_close(s); /* unread data: the close resets */
  bad_done++;
  return NULL;
}

static void *good_client(void *arg) {
  (void)arg;
  weft_stream *s = weft_stream_new(dial(), 0);
  CHECK(s);
  /* Each answer's wait, in wall time and in this process's CPU time: the
   * CPU time is what the other tasks took meanwhile, and does not count
   * the time a loaded machine (or qemu-user's slower code) kept the
   * process off the CPU. */
  int64_t worst = 0, worst_cpu = 0;
  for (int i = 0; i < 20; i++) {
    char q[32], want[40], got[64];
    snprintf(q, sizeof q, "ping %d\n", i);
    snprintf(want, sizeof want, "GOT:%s", q);
    int64_t t0 = weft_now(), c0 = check_cpu_ns();
    CHECK_EQ(weft_stream_write(s, q, strlen(q)), (ssize_t)strlen(q));
    CHECK_EQ(weft_stream_flush(s), 0);
    CHECK_EQ(weft_stream_readline(s, got, sizeof got), (ssize_t)strlen(want));
    CHECK_STR_EQ(got, want);
    int64_t dt = weft_now() - t0, dc = check_cpu_ns() - c0;
    if (dt > worst)
      worst = dt;
    if (dc > worst_cpu)
      worst_cpu = dc;
    CHECK_EQ(weft_sleep(WEFT_MS(10)), 0);
  }
  printf("good client: slowest answer %.3f ms (%.3f ms CPU)\n", worst / 1e6,
         worst_cpu / 1e6);
  /* Without the I/O budget (io.c) the deaf peer's task ran alone for
   * 80-240 ms at a time here on epoll and poll; with it, 2-4 ms. (A bound
   * of 100 ms let poll pass without the budget once.) On io_uring every
   * call is a request that parks, so the task gives way at each one, and
   * the answer takes about 0.1 ms: the bound holds there without the
   * budget.
   *
   * The bound is on the CPU time: the wall time also counts the time the
   * process waited for a CPU. On a loaded 2-core machine under qemu-user
   * the answer took 79.6 ms (epoll) and 54.5 ms (poll) of wall time
   * against this bound; in a dozen runs under the same load it took 30-70
   * ms of wall time but 3.4-7.5 ms of CPU time (native, loaded: up to 33
   * ms of wall time, 3 ms of CPU). Without the budget the CPU time is
   * 100-200 ms, still far over it. The wall time has a loose bound of its
   * own: an answer held back by a timer or a missed wake-up costs no
   * CPU. */
  int64_t bound = RUNNING_ON_VALGRIND || CHECK_ASAN || CHECK_TSAN ? WEFT_SEC(2)
                                                                  : WEFT_MS(40);
  CHECK_LT(worst_cpu, bound);
  CHECK_LT(worst, WEFT_SEC(5));
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

static void *main_task(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 0);
  CHECK_GE(lfd, 0);
  port = weft_sock_port(lfd);
  weft_task *a = weft_spawn(acceptor, P(lfd));
  weft_task *bad[5] = {weft_spawn(resetter, NULL), weft_spawn(vanisher, NULL),
                       weft_spawn(big_liner, NULL), weft_spawn(silent, NULL),
                       weft_spawn(deaf, NULL)};
  for (int i = 0; i < 5; i++)
    CHECK(bad[i]);
  CHECK_EQ(weft_sleep(WEFT_MS(20)), 0);
  weft_task *g = weft_spawn(good_client, NULL);
  CHECK_EQ(weft_join(g, NULL), 0);
  hang_up = 1;
  for (int i = 0; i < 5; i++)
    CHECK_EQ(weft_join(bad[i], NULL), 0);
  CHECK_EQ(bad_done, 5);
  /* Every server task ends once its peer is gone. */
  int64_t deadline = weft_now() + WEFT_SEC(10);
  while (handlers_done < accepted && weft_now() < deadline)
    CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(accepted, 6);
  CHECK_EQ(handlers_done, 6);
  CHECK_EQ(weft_cancel(a), 0);
  CHECK_EQ(weft_join(a, NULL), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int fds = check_fd_count();
  size_t rss0 = check_rss();
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(main_task, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  size_t rss = check_rss();
  printf("resident memory grew by %zu KiB\n",
         rss > rss0 ? (rss - rss0) / 1024 : 0);
  if (!RUNNING_ON_VALGRIND && !CHECK_ASAN)
    CHECK_LT(rss, rss0 + (16u << 20));
  CHECK_EQ(check_fd_count(), fds);
  printf("test_badpeer: ok\n");
  return 0;
}
