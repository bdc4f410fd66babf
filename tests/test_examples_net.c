/*
 * The network examples, run as programs (once per backend):
 *
 *   test_examples_net ECHO_SERVER ECHO_RAW [WRAPPER...]
 *
 * (WRAPPER: a command the servers run under, such as the cross build's
 * qemu-aarch64.)
 * Each runs with --host 127.0.0.1 --port 0 --clients N; the port comes
 * from the line it writes on standard error. Clients (plain blocking
 * sockets, one after the other) check every reply, and the test checks
 * the server's standard output line by line, as the seeds print it, with
 * each client's own port in "('127.0.0.1', PORT)".
 *
 *  echo_server (seed 000): lines split across sends, a line of 1 MB (too
 *  long: skipped) followed by a short one, a last line without '\n'
 *  before the client's shutdown, lines at the 65,536-byte limit (a last
 *  one without '\n' too), a client that resets the connection.
 *  echo_raw (seed 003): chunks answered with "Got:" each, 25,000 bytes in
 *  one send (at most 10,000 per answer).
 *
 *  echo_server's shutdown, for SIGTERM and SIGINT (run without a --clients
 *  limit): after the signal a new connection is refused while the client
 *  already there is still answered, and the server exits 0 once it hangs
 *  up; with no client it exits at once; a second signal closes the
 *  clients' connections and it exits 1.
 */
#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

static char **wrapper; /* argv[3...]: what the servers run under */
static int nwrapper;

typedef struct server {
  pid_t pid;
  int port;
  FILE *out; /* its standard output */
  FILE *err; /* its standard error */
} server;

/* The next line of the server's standard error that is its own (one a
 * wrapper such as valgrind writes does not start with "echo_server:"),
 * into line; NULL at end of file. */
static char *err_line(server *s, char *line, int len) {
  while (fgets(line, len, s->err))
    if (strncmp(line, "echo_server:", 12) == 0 ||
        strncmp(line, "echo_raw:", 9) == 0)
      return line;
  return NULL;
}

static server start(const char *prog, int clients) {
  int out[2], err[2];
  CHECK_EQ(pipe(out), 0);
  CHECK_EQ(pipe(err), 0);
  fflush(stdout);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    dup2(out[1], 1);
    dup2(err[1], 2);
    close(out[0]);
    close(err[0]);
    char n[16];
    snprintf(n, sizeof n, "%d", clients);
    char *args[32];
    int k = 0;
    for (int i = 0; i < nwrapper && k < 24; i++)
      args[k++] = wrapper[i];
    const char *rest[] = {prog,        "--host", "127.0.0.1", "--port", "0",
                          "--clients", n};
    for (size_t i = 0; i < sizeof rest / sizeof *rest; i++)
      args[k++] = (char *)rest[i];
    args[k] = NULL;
    execvp(args[0], args);
    _exit(127);
  }
  close(out[1]);
  close(err[1]);
  server s = {pid, 0, fdopen(out[0], "r"), fdopen(err[0], "r")};
  char line[256];
  CHECK(err_line(&s, line, sizeof line));
  const char *colon = strrchr(line, ':');
  CHECK(colon);
  s.port = atoi(colon + 1);
  CHECK_GT(s.port, 0);
  return s;
}

/* The server must exit with status `code` within `seconds` (else it is
 * killed and the test fails), having written nothing more on stdout. */
static void finish_with(server *s, int code, int seconds) {
  int status = 0;
  pid_t got = 0;
  for (int i = 0; i < seconds * 100 && got == 0; i++) {
    got = waitpid(s->pid, &status, WNOHANG);
    if (got == 0)
      usleep(10000);
  }
  if (got == 0) {
    kill(s->pid, SIGKILL);
    waitpid(s->pid, &status, 0);
    fprintf(stderr, "server: still running after %d s\n", seconds);
    CHECK(0);
  }
  CHECK_EQ(got, s->pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != code) {
    fprintf(stderr, "server: %s, not exit %d\n", check_status_str(status),
            code);
    CHECK(0);
  }
  char extra[256];
  CHECK(fgets(extra, sizeof extra, s->out) == NULL); /* nothing more */
  fclose(s->out);
  fclose(s->err);
}

/* Under valgrind or qemu a server is slow to finish: give it time. */
static void finish(server *s) { finish_with(s, 0, 60); }

/* The next line of the server's output must be `want`. */
static void expect_line(server *s, const char *want) {
  char line[256];
  CHECK(fgets(line, sizeof line, s->out));
  line[strcspn(line, "\n")] = '\0';
  CHECK_STR_EQ(line, want);
}

static int dial(server *s, char *peer, size_t len) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(fd, 0);
  struct timeval tv = {20, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)s->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK_EQ(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
  struct sockaddr_in me;
  socklen_t mlen = sizeof me;
  CHECK_EQ(getsockname(fd, (struct sockaddr *)&me, &mlen), 0);
  snprintf(peer, len, "('127.0.0.1', %d)", ntohs(me.sin_port));
  return fd;
}

static void send_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    CHECK_GT(n, 0);
    p += n;
    len -= (size_t)n;
  }
}

static void recv_exact(int fd, const char *want) {
  size_t len = strlen(want), got = 0;
  char buf[512];
  CHECK_LT(len, sizeof buf);
  while (got < len) {
    ssize_t n = recv(fd, buf + got, len - got, 0);
    CHECK_GT(n, 0);
    got += (size_t)n;
  }
  buf[got] = '\0';
  CHECK_STR_EQ(buf, want);
}

/* The next bytes on fd must be "GOT:", n times ch, then '\n' if nl. */
static void recv_got_run(int fd, char ch, size_t n, int nl) {
  recv_exact(fd, "GOT:");
  size_t len = n + (nl ? 1 : 0), got = 0;
  char *buf = malloc(len);
  CHECK(buf);
  while (got < len) {
    ssize_t k = recv(fd, buf + got, len - got, 0);
    CHECK_GT(k, 0);
    got += (size_t)k;
  }
  for (size_t i = 0; i < n; i++)
    CHECK_EQ(buf[i], ch);
  if (nl)
    CHECK_EQ(buf[n], '\n');
  free(buf);
}

/* Sends n times ch, then '\n' if nl. */
static void send_run(int fd, char ch, size_t n, int nl) {
  char *buf = malloc(n + 1);
  CHECK(buf);
  memset(buf, ch, n);
  buf[n] = '\n';
  send_all(fd, buf, n + (nl ? 1 : 0));
  free(buf);
}

static void test_echo_server(const char *prog) {
  server s = start(prog, 5);
  char peer[64], line[128];

  /* Lines split across sends, two in one send. */
  int fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  send_all(fd, "hel", 3);
  usleep(20000);
  send_all(fd, "lo\nwor", 6);
  usleep(20000);
  send_all(fd, "ld\nagain\n", 9);
  recv_exact(fd, "GOT:hello\nGOT:world\nGOT:again\n");
  close(fd);
  expect_line(&s, "Client closed");

  /* A 1 MB line is skipped; the next one is answered. */
  fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  size_t big = 1 << 20;
  char *mb = malloc(big + 1);
  memset(mb, 'x', big);
  mb[big] = '\n';
  send_all(fd, mb, big + 1);
  free(mb);
  send_all(fd, "ok\n", 3);
  recv_exact(fd, "GOT:ok\n");
  /* The last line, unterminated, still gets its answer. */
  send_all(fd, "partial", 7);
  CHECK_EQ(shutdown(fd, SHUT_WR), 0);
  recv_exact(fd, "GOT:partial");
  char c;
  CHECK_EQ(recv(fd, &c, 1, 0), 0);
  close(fd);
  expect_line(&s, "Client closed");

  /* The limit, 65,536 bytes with the '\n': the longest line is answered,
   * one byte more is skipped, and a last line without '\n' of 65,536
   * bytes is answered too, as the seed answers it. */
  fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  send_run(fd, 'a', 65535, 1);
  recv_got_run(fd, 'a', 65535, 1);
  send_run(fd, 'b', 65536, 1);
  send_all(fd, "ok\n", 3);
  recv_exact(fd, "GOT:ok\n");
  send_run(fd, 'c', 65536, 0);
  CHECK_EQ(shutdown(fd, SHUT_WR), 0);
  recv_got_run(fd, 'c', 65536, 0);
  CHECK_EQ(recv(fd, &c, 1, 0), 0);
  close(fd);
  expect_line(&s, "Client closed");

  /* Reset mid-line. */
  fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  send_all(fd, "no end", 6);
  struct linger lg = {1, 0};
  CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  close(fd);
  expect_line(&s, "Client closed");

  /* Still serving. */
  fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  send_all(fd, "last\n", 5);
  recv_exact(fd, "GOT:last\n");
  close(fd);
  expect_line(&s, "Client closed");
  finish(&s);
}

static void test_echo_raw(const char *prog) {
  server s = start(prog, 2);
  char peer[64], line[128];
  int fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Connection from %s", peer);
  expect_line(&s, line);
  send_all(fd, "abc", 3);
  recv_exact(fd, "Got:abc");
  send_all(fd, "line\n", 5);
  recv_exact(fd, "Got:line\n");
  close(fd);
  expect_line(&s, "Connection closed");

  /* 25,000 bytes: answered in chunks of at most 10,000, each after Got:. */
  fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Connection from %s", peer);
  expect_line(&s, line);
  char *data = malloc(25000);
  memset(data, 'y', 25000);
  send_all(fd, data, 25000);
  free(data);
  CHECK_EQ(shutdown(fd, SHUT_WR), 0);
  size_t ys = 0, gots = 0, run = 0;
  char buf[4096];
  const char *tag = "Got:";
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, 0)) > 0)
    for (ssize_t i = 0; i < n; i++) {
      if (buf[i] == 'y') {
        CHECK_EQ(run, 0); /* not inside a "Got:" */
        ys++;
      } else {
        CHECK_EQ(buf[i], tag[run]);
        if (++run == 4) {
          run = 0;
          gots++;
        }
      }
    }
  CHECK_EQ(n, 0);
  CHECK_EQ(ys, 25000);
  CHECK_GE(gots, 3);
  close(fd);
  expect_line(&s, "Connection closed");
  finish(&s);
}

/* Whether a new connection to the server is accepted by the kernel (its
 * listener still open). */
static int can_connect(server *s) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  CHECK_GE(fd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET,
                          .sin_port = htons((uint16_t)s->port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int rc = connect(fd, (struct sockaddr *)&a, sizeof a);
  int err = errno;
  close(fd);
  if (rc < 0)
    CHECK_EQ(err, ECONNREFUSED);
  return rc == 0;
}

/* Sends sig and reads the server's line about it, which it writes once
 * the listener is closed; it must name the signal and contain `what`. */
static void signal_server(server *s, int sig, const char *what) {
  char line[256];
  CHECK_EQ(kill(s->pid, sig), 0);
  CHECK(err_line(s, line, sizeof line));
  CHECK_CONTAINS(line, sig == SIGINT ? "SIGINT" : "SIGTERM");
  CHECK_CONTAINS(line, what);
}

static void test_echo_server_signal(const char *prog, int sig) {
  char peer[64], line[128];

  /* One client: it finishes its conversation, no one else gets in. */
  server s = start(prog, 0);
  int fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  send_all(fd, "one\n", 4);
  recv_exact(fd, "GOT:one\n");
  signal_server(&s, sig, "no new connections; waiting for 1 client\n");
  CHECK(!can_connect(&s));
  send_all(fd, "two\n", 4);
  recv_exact(fd, "GOT:two\n");
  close(fd);
  expect_line(&s, "Client closed");
  finish_with(&s, 0, 20);

  /* No client: it exits at once. */
  s = start(prog, 0);
  signal_server(&s, sig, "waiting for 0 clients\n");
  finish_with(&s, 0, 20);

  /* A second signal closes the connection under the client: exit 1. */
  s = start(prog, 0);
  fd = dial(&s, peer, sizeof peer);
  snprintf(line, sizeof line, "Got connection from %s", peer);
  expect_line(&s, line);
  send_all(fd, "one\n", 4);
  recv_exact(fd, "GOT:one\n");
  signal_server(&s, sig, "waiting for 1 client\n");
  signal_server(&s, sig, "again: closing 1 client now\n");
  char c;
  CHECK_EQ(recv(fd, &c, 1, 0), 0);
  close(fd);
  expect_line(&s, "Client closed");
  finish_with(&s, 1, 20);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: %s ECHO_SERVER ECHO_RAW [WRAPPER...]\n", argv[0]);
    return 2;
  }
  wrapper = argv + 3;
  nwrapper = argc - 3;
  signal(SIGPIPE, SIG_IGN);
  test_echo_server(argv[1]);
  test_echo_raw(argv[2]);
  test_echo_server_signal(argv[1], SIGTERM);
  test_echo_server_signal(argv[1], SIGINT);
  printf("test_examples_net: ok\n");
  return 0;
}
