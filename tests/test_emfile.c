/*
 * Out of file descriptors at accept (run once per backend).
 *
 * With RLIMIT_NOFILE a few fds above what the process has, a child process
 * opens 40 connections to the listener and holds them. The server accepts
 * until it has no fd left; from then on weft_accept must neither spin nor
 * fail: it drops queued connections (through its spare fd) and backs off.
 * The test checks that the loop used little CPU meanwhile, then frees the
 * server's fds and has the child (which closed its first connections)
 * connect 3 more: each must be served ("ping" -> "pong").
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

#define HOLD  40 /* connections the child opens and holds */
#define LATER 3  /* connections it opens once the server has fds again */

static int port, ctl[2];

/* The client, in a child process with fds to spare: plain blocking calls. */
static int connect_blocking(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return -1;
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static void client(void) {
  int held[HOLD];
  for (int i = 0; i < HOLD; i++)
    if ((held[i] = connect_blocking()) < 0)
      _exit(10);
  unsigned char server_held;
  if (read(ctl[1], &server_held, 1) != 1) /* the server has fds again */
    _exit(11);
  /* The server closed the ones it held; the ones it dropped through its
   * spare fd are closed too, so more are at end of file than it held. */
  int eof = 0;
  for (int i = 0; i < HOLD; i++) {
    char c;
    struct timeval tv = {0, 200000};
    setsockopt(held[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (recv(held[i], &c, 1, 0) == 0)
      eof++;
    close(held[i]);
  }
  if (eof <= server_held) {
    fprintf(stderr, "client: %d at end of file, server held %d\n", eof,
            server_held);
    _exit(14);
  }
  for (int i = 0; i < LATER; i++) {
    int fd = connect_blocking();
    if (fd < 0)
      _exit(12);
    struct timeval tv = {10, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    char buf[8] = {0};
    if (write(fd, "ping", 4) != 4 || recv(fd, buf, 4, MSG_WAITALL) != 4 ||
        memcmp(buf, "pong", 4) != 0)
      _exit(13);
    close(fd);
  }
  _exit(0);
}

/* ---- the server ------------------------------------------------------- */
static int held[64], nheld, pongs;

/* Serves one connection: "ping" gets "pong"; anything else (end of file,
 * an error) ends it. */
static void *conn(void *arg) {
  int fd = (int)I(arg);
  char buf[4];
  if (weft_recv(fd, buf, 4, MSG_WAITALL) == 4 && memcmp(buf, "ping", 4) == 0 &&
      weft_send(fd, "pong", 4, 0) == 4)
    pongs++;
  weft_close(fd);
  return NULL;
}

static int serving; /* hand each accepted fd to a task, not to held[] */

static void *acceptor(void *arg) {
  int lfd = (int)I(arg);
  for (;;) {
    int fd = weft_accept(lfd, NULL, NULL);
    if (fd < 0)
      return P(fd); /* cancelled at the end */
    if (serving)
      CHECK_EQ(weft_go(conn, P(fd)), 0);
    else
      held[nheld++] = fd;
    CHECK_LT(nheld, 64);
  }
}

static void *server_main(void *arg) {
  int lfd = (int)I(arg);
  weft_task *a = weft_spawn(acceptor, P(lfd));
  CHECK(a);
  /* Let the child's connections pile up and the fds run out. */
  int64_t deadline = weft_now() + WEFT_SEC(10);
  while (nheld == 0 && weft_now() < deadline)
    CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_GT(nheld, 0);
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  /* Out of fds now, before the window and after it (a dup says so; the
   * client still has connections waiting): the acceptor must be idle, not
   * spinning. */
  errno = 0;
  CHECK_EQ(dup(lfd), -1);
  CHECK_EQ(errno, EMFILE);
  int64_t c0 = check_cpu_ns();
  CHECK_EQ(weft_sleep(WEFT_MS(300)), 0);
  int64_t cpu = check_cpu_ns() - c0;
  printf("held %d connections; 300 ms out of fds cost %.2f ms CPU\n", nheld,
         cpu / 1e6);
  errno = 0;
  CHECK_EQ(dup(lfd), -1);
  CHECK_EQ(errno, EMFILE);
  CHECK_LT(nheld, HOLD); /* the client has more waiting */
  if (!RUNNING_ON_VALGRIND)
    CHECK_LT(cpu, WEFT_MS(30));
  /* fds come back; the listener is still there and serves again. */
  serving = 1;
  for (int i = 0; i < nheld; i++)
    CHECK_EQ(weft_close(held[i]), 0);
  unsigned char n = (unsigned char)nheld;
  CHECK_EQ(write(ctl[0], &n, 1), 1);
  deadline = weft_now() + WEFT_SEC(20);
  while (pongs < LATER && weft_now() < deadline)
    CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(pongs, LATER);
  CHECK_EQ(weft_cancel(a), 0);
  void *r;
  CHECK_EQ(weft_join(a, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* valgrind keeps fds of its own above the limit it shows the program,
   * and enforces that limit only on the calls it sees: an accept done by
   * the ring is not one, so the fds never run out. */
  const char *b = getenv("WEFT_BACKEND");
  if (RUNNING_ON_VALGRIND && b && !strcmp(b, "io_uring"))
    SKIP("under valgrind, io_uring's accepts are not held to RLIMIT_NOFILE");
  int fds = check_fd_count();
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, ctl), 0);
  int lfd = weft_tcp_listen("127.0.0.1", 0, 128);
  CHECK_GE(lfd, 0);
  port = weft_sock_port(lfd);
  fflush(stdout);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    close(lfd);
    client();
  }
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  /* Room for a few connections, no more: a new fd takes the lowest free
   * number, and the limit is on numbers, so it goes right above the 6th
   * free one (fds inherited above it stay usable). */
  int limit = 0;
  for (int free_slots = 0; free_slots < 6; limit++)
    if (fcntl(limit, F_GETFD) < 0)
      free_slots++;
  struct rlimit old, low;
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = (rlim_t)limit;
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  CHECK(weft_spawn(server_main, P(lfd)));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "client: %s\n", check_status_str(status));
    CHECK(0);
  }
  CHECK_EQ(weft_close(lfd), 0);
  close(ctl[0]);
  close(ctl[1]);
  CHECK_EQ(check_fd_count(), fds);
  printf("test_emfile: ok\n");
  return 0;
}
