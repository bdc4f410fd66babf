/*
 * Sockets on loopback (run once per backend).
 *
 *  - TCP over IPv4 and IPv6: listen on port 0, connect, accept with the
 *    peer's address printed as Python does, echo both ways; "[::1]" is
 *    ::1, and brackets around anything else are -EINVAL;
 *  - 200 clients at once against one accepting task, each checked;
 *  - errors: refused, connected already, address in use, a host that is
 *    not numeric, a bad port, Unix paths too long, missing or taken;
 *  - Unix stream sockets, a SOCK_SEQPACKET listener's connections (one
 *    message a read), and UDP (sendto / recvfrom with the address);
 *  - connect's own answers over IPv4 and IPv6, TCP and UDP: an address
 *    weft cannot read (-EFAULT), lengths too short, refused twice then
 *    made on one socket, -EISCONN, UDP's peer set again and dissolved
 *    with AF_UNSPEC;
 *  - a cancelled accept leaves the connection queued for the next one;
 *    a loop freed while a connect waits closes its socket (or leaves the
 *    caller's own, open);
 *  - a connect whose socket another task or a callback closes, or a
 *    callback forgets: -EBADF at once, and the number serves again;
 *  - listening works outside a task, and no fd is left open.
 */
#include "weft.h"

#include "check.h"
#include "loop_check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

/* Answers every chunk on fd with the same bytes until end of file. */
static void *echo_conn(void *arg) {
  int fd = (int)I(arg);
  char buf[4096];
  ssize_t n;
  while ((n = weft_recv(fd, buf, sizeof buf, 0)) > 0)
    CHECK_EQ(weft_write_all(fd, buf, (size_t)n), n);
  CHECK_EQ(n, 0);
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

/* Sends msg on fd and checks that it comes back. */
static void exchange(int fd, const char *msg) {
  size_t len = strlen(msg);
  CHECK_EQ(weft_send(fd, msg, len, 0), (ssize_t)len);
  check_recv_exactly(fd, msg);
}

/* ---- TCP, both families ----------------------------------------------- */
static void *tcp_client(void *arg) {
  const char *host = arg;
  int lfd = weft_tcp_listen(host, 0, 0);
  CHECK_GE(lfd, 0);
  int port = weft_sock_port(lfd);
  CHECK_GT(port, 0);
  int c = weft_tcp_connect(host, port);
  CHECK_GE(c, 0);
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int s = weft_accept(lfd, (struct sockaddr *)&ss, &len);
  CHECK_GE(s, 0);
  /* The peer's address, as the seed prints it. */
  char got[128], want[128];
  weft_addr_str((struct sockaddr *)&ss, got, sizeof got);
  if (strchr(host, ':'))
    snprintf(want, sizeof want, "('%s', %d, 0, 0)", host, weft_sock_port(c));
  else
    snprintf(want, sizeof want, "('%s', %d)", host, weft_sock_port(c));
  CHECK_STR_EQ(got, want);
  CHECK(weft_spawn(echo_conn, P(s)));
  exchange(c, "hello");
  exchange(c, "and again, longer this time");
  CHECK_EQ(weft_close(c), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

static int have_ipv6(void) {
  int fd = socket(AF_INET6, SOCK_STREAM, 0);
  if (fd < 0)
    return 0;
  struct sockaddr_in6 a = {.sin6_family = AF_INET6,
                           .sin6_addr = in6addr_loopback};
  int ok = bind(fd, (struct sockaddr *)&a, sizeof a) == 0;
  close(fd);
  return ok;
}

/* An IPv6 address in brackets, as URLs write it, is the address; brackets
 * around anything else are -EINVAL at once, never a name to look up. */
static void *bracketed(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("[::1]", 0, 0);
  CHECK_GE(lfd, 0);
  int c = weft_tcp_connect("[::1]", weft_sock_port(lfd));
  CHECK_GE(c, 0);
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  int s = weft_accept(lfd, (struct sockaddr *)&ss, &len);
  CHECK_GE(s, 0);
  CHECK_EQ(ss.ss_family, AF_INET6);
  CHECK_EQ(weft_close(s), 0);
  CHECK_EQ(weft_close(c), 0);
  CHECK_EQ(weft_close(lfd), 0);
  /* With a zone, which the resolver reads (glibc takes an interface's name
   * only for a link-local address; lo has none here: the bind fails). */
  lfd = weft_tcp_listen("[::1%1]", 0, 0);
  CHECK_GE(lfd, 0);
  c = weft_tcp_connect("[::1%1]", weft_sock_port(lfd));
  CHECK_GE(c, 0);
  CHECK_EQ(weft_close(c), 0);
  CHECK_EQ(weft_close(lfd), 0);
  CHECK_EQ(weft_tcp_listen("[fe80::1%lo]", 0, 0), -EADDRNOTAVAIL);
  static const char *const bad[] = {"[127.0.0.1]",    "[::1",     "[]",
                                    "[localhost]",    "[::1]:80", "[%lo]",
                                    "[localhost%lo]", "[::1%lo]"};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK_EQ(weft_tcp_connect(bad[i], 80), -EINVAL);
    CHECK_EQ(weft_tcp_listen(bad[i], 0, 0), -EINVAL);
  }
  return NULL;
}

static void test_tcp(void) {
  check_run(tcp_client, "127.0.0.1");
  if (have_ipv6()) {
    check_run(tcp_client, "::1");
    check_run(bracketed, NULL);
  } else
    printf("no IPv6 loopback here: the ::1 case is skipped\n");
}

/* ---- many clients ----------------------------------------------------- */
#define NCLIENTS 200
static int listen_port, clients_done;

static void *one_client(void *arg) {
  int c = weft_tcp_connect("127.0.0.1", listen_port);
  CHECK_GE(c, 0);
  char msg[64];
  snprintf(msg, sizeof msg, "client %d says hi", (int)I(arg));
  exchange(c, msg);
  CHECK_EQ(weft_close(c), 0);
  clients_done++;
  return NULL;
}

static void *acceptor(void *arg) {
  int lfd = (int)I(arg);
  for (int i = 0; i < NCLIENTS; i++) {
    int s = weft_accept(lfd, NULL, NULL);
    CHECK_GE(s, 0);
    CHECK_EQ(weft_go(echo_conn, P(s)), 0);
  }
  return NULL;
}

static void *many_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 0);
  CHECK_GE(lfd, 0);
  listen_port = weft_sock_port(lfd);
  weft_task *a = weft_spawn(acceptor, P(lfd));
  weft_task *t[NCLIENTS];
  for (int i = 0; i < NCLIENTS; i++)
    CHECK((t[i] = weft_spawn(one_client, P(i))));
  for (int i = 0; i < NCLIENTS; i++)
    CHECK_EQ(weft_join(t[i], NULL), 0);
  CHECK_EQ(weft_join(a, NULL), 0);
  CHECK_EQ(clients_done, NCLIENTS);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

static void test_many(void) { check_run(many_main, NULL); }

/* ---- errors ----------------------------------------------------------- */
static void *errors_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 0);
  CHECK_GE(lfd, 0);
  int port = weft_sock_port(lfd);
  CHECK_EQ(weft_tcp_listen("127.0.0.1", port, 0), -EADDRINUSE);
  /* An address without its length: -EFAULT at once, and the connection
   * stays queued for the next accept (io_uring's multishot accept once
   * closed every connection and waited for ever). */
  int c = weft_tcp_connect("127.0.0.1", port);
  CHECK_GE(c, 0);
  struct sockaddr_storage ss;
  CHECK_EQ(weft_accept(lfd, (struct sockaddr *)&ss, NULL), -EFAULT);
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(weft_write(c, "k", 1), 1);
  char k;
  CHECK_EQ(weft_read(a, &k, 1), 1);
  /* connect(2)'s own answers (io_uring: a connect request's): connected
   * already; a refused one below. */
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK_EQ(weft_connect(c, (struct sockaddr *)&sa, sizeof sa), -EISCONN);
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(c), 0);
  CHECK_EQ(weft_close(lfd), 0);
  /* Nobody listens there now. */
  CHECK_EQ(weft_tcp_connect("127.0.0.1", port), -ECONNREFUSED);
  /* A name is resolved (on the pool), then refused like the number. */
  CHECK_EQ(weft_tcp_connect("localhost", port), -ECONNREFUSED);
  CHECK_EQ(weft_tcp_connect(NULL, port), -EINVAL);
  CHECK_EQ(weft_tcp_connect("127.0.0.1", 65536), -EINVAL);
  /* Not a name either: no such host (-EAGAIN if a resolver was asked and
   * could not be reached: there is no network here). */
  int rc = weft_tcp_listen("not an address.invalid", 0, 0);
  CHECK(rc == -ENOENT || rc == -EAGAIN);
  CHECK_EQ(weft_tcp_listen("127.0.0.1", -1, 0), -EINVAL);
  char longpath[200];
  memset(longpath, 'a', sizeof longpath - 1);
  longpath[sizeof longpath - 1] = '\0';
  CHECK_EQ(weft_unix_listen(longpath, 0), -ENAMETOOLONG);
  CHECK_EQ(weft_unix_connect(longpath), -ENAMETOOLONG);
  CHECK_EQ(weft_unix_connect("/nonexistent/weft.sock"), -ENOENT);
  CHECK_EQ(weft_unix_listen("", 0), -EINVAL);
  CHECK_EQ(weft_sock_port(-1), -EBADF);
  return NULL;
}

static void test_errors(void) { check_run(errors_main, NULL); }

/* ---- Unix stream sockets ---------------------------------------------- */
static char upath[64];

static void *unix_main(void *arg) {
  (void)arg;
  snprintf(upath, sizeof upath, "/tmp/weft-test-net-%d.sock", (int)getpid());
  unlink(upath);
  int lfd = weft_unix_listen(upath, 0);
  CHECK_GE(lfd, 0);
  CHECK_EQ(weft_unix_listen(upath, 0), -EADDRINUSE);
  int c = weft_unix_connect(upath);
  CHECK_GE(c, 0);
  struct sockaddr_un peer;
  memset(&peer, 'A', sizeof peer);
  socklen_t len = sizeof peer;
  int s = weft_accept(lfd, (struct sockaddr *)&peer, &len);
  CHECK_GE(s, 0);
  char name[128];
  /* The client is unnamed: the kernel writes the family alone, and what
   * the buffer held is not printed as its path (it once was). */
  CHECK_EQ(len, (socklen_t)sizeof(sa_family_t));
  CHECK_STR_EQ(weft_addr_str((struct sockaddr *)&peer, name, sizeof name), "");
  struct sockaddr_un self;
  len = sizeof self;
  CHECK_EQ(getsockname(lfd, (struct sockaddr *)&self, &len), 0);
  CHECK_STR_EQ(weft_addr_str((struct sockaddr *)&self, name, sizeof name),
               upath);
  /* An abstract name (a NUL first): no length says where it ends, "". */
  int ab = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(ab, 0);
  struct sockaddr_un abs = {.sun_family = AF_UNIX};
  int an = snprintf(abs.sun_path + 1, sizeof abs.sun_path - 1, "weft-%d",
                    (int)getpid());
  CHECK_EQ(bind(ab, (struct sockaddr *)&abs,
                (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + an)),
           0);
  memset(&self, 'B', sizeof self);
  len = sizeof self;
  CHECK_EQ(getsockname(ab, (struct sockaddr *)&self, &len), 0);
  CHECK_EQ(self.sun_path[0], '\0');
  CHECK_STR_EQ(weft_addr_str((struct sockaddr *)&self, name, sizeof name), "");
  close(ab);
  CHECK(weft_spawn(echo_conn, P(s)));
  exchange(c, "over a unix socket");
  CHECK_EQ(weft_close(c), 0);
  CHECK_EQ(weft_close(lfd), 0);
  unlink(upath);
  return NULL;
}

/* A full backlog: Linux refuses a non-blocking Unix connect with EAGAIN;
 * weft_unix_connect waits and tries again until the listener takes it (or
 * its socket is closed meanwhile: -EBADF). */
static int full_connected;

static void *full_connector(void *arg) {
  int c = weft_unix_connect((const char *)arg);
  CHECK_GE(c, 0);
  full_connected++;
  CHECK_EQ(weft_close(c), 0);
  return NULL;
}

/* Closes the connecting task's socket while its connect waits for room,
 * puts another socket at the number, then makes room. */
static int bf_sock, bf_lfd;

static void *bf_closer(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0); /* the connect backs off meanwhile */
  int o = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(o, 0);
  CHECK_EQ(weft_close(bf_sock), 0);
  CHECK_EQ(dup2(o, bf_sock), bf_sock);
  close(o);
  int a = accept4(bf_lfd, NULL, NULL, SOCK_CLOEXEC);
  CHECK_GE(a, 0);
  close(a);
  return NULL;
}

static void *unix_full_main(void *arg) {
  (void)arg;
  snprintf(upath, sizeof upath, "/tmp/weft-test-full-%d.sock", (int)getpid());
  unlink(upath);
  int lfd = weft_unix_listen(upath, 1);
  CHECK_GE(lfd, 0);
  weft_task *t[5];
  for (int i = 0; i < 5; i++)
    CHECK(t[i] = weft_spawn(full_connector, upath));
  CHECK_EQ(weft_sleep(WEFT_MS(30)), 0);
  CHECK_LT(full_connected, 5); /* the backlog holds fewer */
  for (int i = 0; i < 5; i++) {
    int s = weft_accept(lfd, NULL, NULL);
    CHECK_GE(s, 0);
    CHECK_EQ(weft_close(s), 0);
  }
  for (int i = 0; i < 5; i++)
    CHECK_EQ(weft_join(t[i], NULL), 0);
  CHECK_EQ(full_connected, 5);
  CHECK_EQ(weft_close(lfd), 0);
  unlink(upath);
  /* Stopped by a deadline while it waits for room: -ETIMEDOUT, nothing
   * left. A listener no weft_accept has seen: io_uring's multishot accept
   * would take the connections out of the backlog (the connect then
   * succeeded, and the case tested nothing there). Linux queues one more
   * than the backlog: two connections fill a backlog of 1. */
  int fds = check_fd_count();
  lfd = weft_unix_listen(upath, 1);
  CHECK_GE(lfd, 0);
  int hold = weft_unix_connect(upath), hold2 = weft_unix_connect(upath);
  CHECK_GE(hold, 0);
  CHECK_GE(hold2, 0);
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + WEFT_MS(20));
  CHECK_EQ(weft_unix_connect(upath), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&sc), -ETIMEDOUT);
  /* Its socket closed by another task (and the number reused) while it
   * waits: -EBADF, and the socket now at the number stays unconnected. */
  bf_lfd = lfd;
  bf_sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(bf_sock, 0);
  weft_task *closer = weft_spawn(bf_closer, NULL);
  CHECK(closer != NULL);
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  strcpy(un.sun_path, upath);
  CHECK_EQ(weft_connect(bf_sock, (struct sockaddr *)&un, sizeof un), -EBADF);
  CHECK_EQ(weft_join(closer, NULL), 0);
  struct sockaddr_un peer;
  socklen_t plen = sizeof peer;
  errno = 0;
  CHECK_EQ(getpeername(bf_sock, (struct sockaddr *)&peer, &plen), -1);
  CHECK_EQ(errno, ENOTCONN);
  CHECK_EQ(close(bf_sock), 0);
  CHECK_EQ(weft_close(hold), 0);
  CHECK_EQ(weft_close(hold2), 0);
  CHECK_EQ(weft_close(lfd), 0);
  CHECK_EQ(check_fd_count(), fds);
  unlink(upath);
  return NULL;
}

/* A SOCK_SEQPACKET listener: each accepted connection reads one message a
 * call, and three queued before the accept all come (accept once took
 * every connection for a stream, where a short read means "drained": on
 * epoll the third then never came). */
static void *seqpacket_main(void *arg) {
  (void)arg;
  snprintf(upath, sizeof upath, "/tmp/weft-test-seq-%d.sock", (int)getpid());
  unlink(upath);
  int lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK_GE(lfd, 0);
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  strcpy(un.sun_path, upath);
  CHECK_EQ(bind(lfd, (struct sockaddr *)&un, sizeof un), 0);
  CHECK_EQ(listen(lfd, 8), 0);
  int c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  CHECK_GE(c, 0);
  CHECK_EQ(connect(c, (struct sockaddr *)&un, sizeof un), 0);
  const char *msgs[] = {"one", "two", "three"};
  for (int i = 0; i < 3; i++)
    CHECK_EQ(send(c, msgs[i], strlen(msgs[i]), 0), (ssize_t)strlen(msgs[i]));
  int s = weft_accept(lfd, NULL, NULL);
  CHECK_GE(s, 0);
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + WEFT_SEC(5));
  for (int i = 0; i < 3; i++) {
    char buf[100];
    CHECK_EQ(weft_read(s, buf, sizeof buf), (ssize_t)strlen(msgs[i]));
    CHECK(memcmp(buf, msgs[i], strlen(msgs[i])) == 0);
  }
  CHECK_EQ(weft_scope_exit(&sc), 0);
  CHECK_EQ(weft_close(s), 0);
  CHECK_EQ(close(c), 0);
  CHECK_EQ(weft_close(lfd), 0);
  unlink(upath);
  return NULL;
}

static void test_unix(void) {
  check_run(unix_main, NULL);
  check_run(unix_full_main, NULL);
  check_run(seqpacket_main, NULL);
}

/* ---- UDP -------------------------------------------------------------- */
static void *udp_echo(void *arg) {
  int fd = (int)I(arg);
  char buf[512];
  struct sockaddr_storage from;
  socklen_t flen = sizeof from;
  ssize_t n =
      weft_recvfrom(fd, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen);
  CHECK_GT(n, 0);
  CHECK_EQ(weft_sendto(fd, buf, (size_t)n, 0, (struct sockaddr *)&from, flen),
           n);
  return NULL;
}

static void *udp_main(void *arg) {
  (void)arg;
  int a = weft_udp_bind("127.0.0.1", 0);
  int b = weft_udp_bind("127.0.0.1", 0);
  CHECK_GE(a, 0);
  CHECK_GE(b, 0);
  weft_task *t = weft_spawn(udp_echo, P(a));
  CHECK(t);
  struct sockaddr_in to = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)weft_sock_port(a))};
  inet_pton(AF_INET, "127.0.0.1", &to.sin_addr);
  CHECK_EQ(weft_sendto(b, "datagram", 8, 0, (struct sockaddr *)&to, sizeof to),
           8);
  char buf[64];
  struct sockaddr_in from;
  socklen_t flen = sizeof from;
  /* An address without its length: -EFAULT on every backend, and the
   * datagram stays (epoll's recvfrom took it; io_uring dropped the
   * address and returned it). */
  CHECK_EQ(weft_recvfrom(b, buf, sizeof buf, 0, (struct sockaddr *)&from, NULL),
           -EFAULT);
  CHECK_EQ(
      weft_recvfrom(b, buf, sizeof buf, 0, (struct sockaddr *)&from, &flen), 8);
  CHECK(memcmp(buf, "datagram", 8) == 0);
  CHECK_EQ(ntohs(from.sin_port), weft_sock_port(a));
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(b), 0);
  return NULL;
}

static void test_udp(void) { check_run(udp_main, NULL); }

/* ---- connect's corners ---------------------------------------------------
 * What connect(2) answers, the same on every backend (io_uring: a connect
 * request for a TCP socket, connect(2) for the others). */
static struct sockaddr_in loopback4(int port) {
  return (struct sockaddr_in){.sin_family = AF_INET,
                              .sin_port = htons((uint16_t)port),
                              .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
}

/* A port nobody listens on (bound a moment ago, then closed). */
static int dead_port(int type) {
  int fd = socket(AF_INET, type | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  struct sockaddr_in a = loopback4(0);
  socklen_t len = sizeof a;
  CHECK_EQ(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_EQ(getsockname(fd, (struct sockaddr *)&a, &len), 0);
  CHECK_EQ(close(fd), 0);
  return ntohs(a.sin_port);
}

static void *connect_corners_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 4);
  CHECK_GE(lfd, 0);
  struct sockaddr_in la = loopback4(weft_sock_port(lfd));
  /* An address weft cannot read: the kernel's -EFAULT (io_uring read its
   * family to choose the way, and died of it). */
  void *none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CHECK(none != MAP_FAILED);
  int t = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(t, 0);
  if (!RUNNING_ON_VALGRIND) { /* which reports the pointer, as it should */
    CHECK_EQ(weft_connect(t, none, sizeof la), -EFAULT);
    CHECK_EQ(weft_connect(t, NULL, sizeof la), -EFAULT);
  }
  /* Lengths too short for the family: -EINVAL. */
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, 0), -EINVAL);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, 4), -EINVAL);
  /* Refused, twice on the same socket, then made with it, then -EISCONN. */
  struct sockaddr_in dead = loopback4(dead_port(SOCK_STREAM));
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&dead, sizeof dead),
           -ECONNREFUSED);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&dead, sizeof dead),
           -ECONNREFUSED);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, sizeof la), 0);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, sizeof la), -EISCONN);
  int s = weft_accept(lfd, NULL, NULL);
  CHECK_GE(s, 0);
  CHECK(weft_spawn(echo_conn, P(s)));
  exchange(t, "made at the third try");
  CHECK_EQ(weft_close(t), 0);
  /* UDP: connect sets the peer (again and again), AF_UNSPEC dissolves the
   * association, a dead port's refusal comes with the next recv. */
  int u = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK_GE(u, 0);
  int peer = weft_udp_bind("127.0.0.1", 0);
  CHECK_GE(peer, 0);
  struct sockaddr_in pa = loopback4(weft_sock_port(peer));
  if (!RUNNING_ON_VALGRIND)
    CHECK_EQ(weft_connect(u, none, sizeof pa), -EFAULT);
  CHECK_EQ(weft_connect(u, (struct sockaddr *)&pa, 4), -EINVAL);
  CHECK_EQ(weft_connect(u, (struct sockaddr *)&pa, sizeof pa), 0);
  CHECK_EQ(weft_connect(u, (struct sockaddr *)&pa, sizeof pa), 0);
  char buf[8];
  CHECK_EQ(weft_send(u, "dg", 2, 0), 2);
  CHECK_EQ(weft_recv(peer, buf, sizeof buf, 0), 2);
  struct sockaddr unspec = {.sa_family = AF_UNSPEC};
  CHECK_EQ(weft_connect(u, &unspec, sizeof unspec), 0);
  CHECK_EQ(weft_send(u, "dg", 2, 0), -EDESTADDRREQ);
  dead = loopback4(dead_port(SOCK_DGRAM));
  CHECK_EQ(weft_connect(u, (struct sockaddr *)&dead, sizeof dead), 0);
  CHECK_EQ(weft_send(u, "dg", 2, 0), 2);
  CHECK_EQ(weft_recv(u, buf, sizeof buf, 0), -ECONNREFUSED);
  CHECK_EQ(weft_close(u), 0);
  CHECK_EQ(weft_close(peer), 0);
  CHECK_EQ(munmap(none, 4096), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

/* The same over IPv6: TCP to ::1 (connected already: -EISCONN) and UDP. */
static void *connect_corners6_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("::1", 0, 4);
  CHECK_GE(lfd, 0);
  struct sockaddr_in6 la = {.sin6_family = AF_INET6,
                            .sin6_port = htons((uint16_t)weft_sock_port(lfd)),
                            .sin6_addr = in6addr_loopback};
  int t = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(t, 0);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, sizeof la - 8), -EINVAL);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, sizeof la), 0);
  CHECK_EQ(weft_connect(t, (struct sockaddr *)&la, sizeof la), -EISCONN);
  int s = weft_accept(lfd, NULL, NULL);
  CHECK_GE(s, 0);
  CHECK(weft_spawn(echo_conn, P(s)));
  exchange(t, "over ::1");
  CHECK_EQ(weft_close(t), 0);
  CHECK_EQ(weft_close(lfd), 0);
  int u = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  CHECK_GE(u, 0);
  int peer = weft_udp_bind("::1", 0);
  CHECK_GE(peer, 0);
  struct sockaddr_in6 pa = la;
  pa.sin6_port = htons((uint16_t)weft_sock_port(peer));
  CHECK_EQ(weft_connect(u, (struct sockaddr *)&pa, sizeof pa), 0);
  char buf[8];
  CHECK_EQ(weft_send(u, "dg6", 3, 0), 3);
  CHECK_EQ(weft_recv(peer, buf, sizeof buf, 0), 3);
  struct sockaddr unspec = {.sa_family = AF_UNSPEC};
  CHECK_EQ(weft_connect(u, &unspec, sizeof unspec), 0);
  CHECK_EQ(weft_send(u, "dg6", 3, 0), -EDESTADDRREQ);
  CHECK_EQ(weft_close(u), 0);
  CHECK_EQ(weft_close(peer), 0);
  return NULL;
}

static void test_connect_corners(void) {
  check_run(connect_corners_main, NULL);
  if (have_ipv6())
    check_run(connect_corners6_main, NULL);
  printf("  connect's corners: ok\n");
}

/* ---- a cancelled accept takes nothing --------------------------------- */
static void *accept_once(void *arg) {
  return P(weft_accept((int)I(arg), NULL, NULL));
}

static void *cancel_accept_main(void *arg) {
  int lfd = (int)I(arg); /* made outside any task */
  weft_task *t = weft_spawn(accept_once, P(lfd));
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_cancel(t), 0);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  int c = weft_tcp_connect("127.0.0.1", weft_sock_port(lfd));
  CHECK_GE(c, 0);
  int s = weft_accept(lfd, NULL, NULL);
  CHECK_GE(s, 0);
  CHECK(weft_spawn(echo_conn, P(s)));
  exchange(c, "still there");
  CHECK_EQ(weft_close(c), 0);
  return NULL;
}

static void test_cancel_accept(void) {
  int lfd = weft_tcp_listen("127.0.0.1", 0, 0); /* no loop yet */
  CHECK_GE(lfd, 0);
  check_run(cancel_accept_main, P(lfd));
  CHECK_EQ(weft_close(lfd), 0);
}

/* ---- a loop freed while a connect waits --------------------------------
 * The socket weft_unix_connect made is closed with the loop (it used to
 * stay open: only the call's own code closed it, and it never resumed). A
 * listener whose backlog is full makes the connect wait. */
static void *dropped_connect(void *arg) {
  weft_unix_connect(arg);
  CHECK(0); /* never resumed */
  return NULL;
}

static void test_connect_dropped(void) {
  struct sockaddr_un un = {.sun_family = AF_UNIX};
  snprintf(un.sun_path, sizeof un.sun_path, "/tmp/weft-test-net-%d.sock",
           (int)getpid());
  unlink(un.sun_path);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(lfd, 0);
  CHECK_EQ(bind(lfd, (struct sockaddr *)&un, sizeof un), 0);
  CHECK_EQ(listen(lfd, 0), 0);
  int fill[8], nfill = 0;
  for (;;) {
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK_GE(c, 0);
    if (connect(c, (struct sockaddr *)&un, sizeof un) < 0) {
      CHECK_EQ(errno, EAGAIN); /* the backlog is full */
      close(c);
      break;
    }
    CHECK_LT(nfill, 8);
    fill[nfill++] = c;
  }
  int fds = check_fd_count();
  check_drop_in(dropped_connect, un.sun_path);
  CHECK_EQ(check_fd_count(), fds);
  while (nfill)
    close(fill[--nfill]);
  close(lfd);
  unlink(un.sun_path);
  printf("  a loop freed while a connect waits: ok\n");
}

/* The same for a TCP connect to a name ("127.1" is one: inet_pton does not
 * take it), which holds the list of the name's addresses while it waits:
 * the loop frees it too (it leaked: ASan and valgrind see it). A listener
 * whose queue is full drops the next SYN, so that connect waits. */
static int dn_port;

/* Stops the loop once the lookup is done and the connect waits (a 100 ms
 * timer did, and on a slow lookup dropped the task in the lookup, testing
 * nothing). */
static void *dn_stopper(void *arg) {
  (void)arg;
  weft_loop *loop = weft_loop_current();
  while (weft_executor_pending(loop) > 0)
    CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_yield(), 0); /* the connecting task, woken, runs first */
  weft_loop_stop(loop);
  return NULL;
}

static void *dropped_name_connect(void *arg) {
  (void)arg;
  CHECK(weft_spawn(dn_stopper, NULL));
  weft_tcp_connect("127.1", dn_port);
  CHECK(0); /* never resumed */
  return NULL;
}

static void test_connect_dropped_name(void) {
  int fill[2];
  int lfd = check_full_listener(fill, &dn_port);
  int fds = check_fd_count();
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(dropped_name_connect, NULL));
  CHECK_EQ(weft_loop_run(loop), 1);
  CHECK_EQ(weft_executor_pending(loop), 0);
  weft_loop_free(loop);
  CHECK_EQ(check_fd_count(), fds);
  check_full_listener_close(lfd, fill);
  printf("  a loop freed while a connect to a name waits: ok\n");
}

/* The same for weft_connect of the caller's own TCP socket (a connect
 * request on io_uring: weft_loop_free cancels it, or waits for the SYN's
 * retries, two minutes). The socket stays the caller's, open. */
static struct sockaddr_in full_addr;

static void *dropped_raw_connect(void *arg) {
  weft_connect((int)I(arg), (struct sockaddr *)&full_addr, sizeof full_addr);
  CHECK(0); /* never resumed */
  return NULL;
}

static void test_connect_dropped_raw(void) {
  int fill[2], port;
  int lfd = check_full_listener(fill, &port);
  full_addr = loopback4(port);
  int fds = check_fd_count();
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(c, 0);
  int64_t t0 = weft_now();
  check_drop_in(dropped_raw_connect, P(c));
  CHECK_LT(weft_now() - t0, WEFT_SEC(1)); /* a SYN is sent again after 1 s */
  CHECK_EQ(check_fd_count(), fds + 1);
  CHECK_EQ(close(c), 0);
  check_full_listener_close(lfd, fill);
  printf("  a loop freed while a connect of the caller's socket waits: ok\n");
}

/* ---- a connect's socket closed under it ---------------------------------
 * A task waits in weft_connect to a listener whose queue is full (its SYN
 * is dropped; on io_uring the connect request waits in the kernel).
 * Another task's weft_close, a callback's weft_close (the request is
 * cancelled there and then) and a callback's weft_fd_forget each end the
 * call with -EBADF, at once; the number, free again at once, goes to the
 * next socket, which connects; no fd is left. Each before the loop's next
 * turn (io_uring: the request not yet submitted) and after it. */
static int cc_fd, cc_how, cc_late, cc_started;

static void *cc_connector(void *arg) {
  (void)arg;
  cc_started = 1;
  return P(
      weft_connect(cc_fd, (struct sockaddr *)&full_addr, sizeof full_addr));
}

/* 1 if the kernel has a TCP socket from port to full_addr in SYN_SENT. */
static int syn_sent(int port) {
  FILE *f = fopen("/proc/net/tcp", "r");
  CHECK(f);
  char line[256];
  int found = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned lp, rp, st;
    if (sscanf(line, " %*d: %*x:%x %*x:%x %x", &lp, &rp, &st) == 3 &&
        (int)lp == port && rp == ntohs(full_addr.sin_port) && st == 2)
      found = 1;
  }
  fclose(f);
  return found;
}

static void cc_close_cb(void *arg) {
  (void)arg;
  if (cc_how == 2) {
    CHECK_EQ(weft_fd_forget(cc_fd), 0);
    return;
  }
  /* The socket has ended when the close returns (a request still in the
   * kernel would hold it, connecting). */
  struct sockaddr_in self;
  socklen_t len = sizeof self;
  CHECK_EQ(getsockname(cc_fd, (struct sockaddr *)&self, &len), 0);
  int port = ntohs(self.sin_port);
  if (!cc_late && port == 0) { /* io_uring: the request not yet submitted */
    CHECK_EQ(weft_close(cc_fd), 0);
    return;
  }
  CHECK_EQ(syn_sent(port), 1);
  CHECK_EQ(weft_close(cc_fd), 0);
  CHECK_EQ(syn_sent(port), 0);
}

static void *connect_closed_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 4);
  CHECK_GE(lfd, 0);
  struct sockaddr_in good = loopback4(weft_sock_port(lfd));
  for (cc_how = 0; cc_how < 3; cc_how++)
    for (cc_late = 0; cc_late < 2; cc_late++) {
      cc_fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      CHECK_GE(cc_fd, 0);
      cc_started = 0;
      weft_task *t = weft_spawn(cc_connector, NULL);
      CHECK(t);
      while (!cc_started) /* then it waits */
        CHECK_EQ(weft_yield(), 0);
      if (cc_late)
        CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
      int64_t t0 = weft_now();
      if (cc_how == 0)
        CHECK_EQ(weft_close(cc_fd), 0);
      else
        CHECK_EQ(weft_call_soon(cc_close_cb, NULL), 0);
      void *r;
      CHECK_EQ(weft_join(t, &r), 0);
      CHECK_EQ(I(r), -EBADF);
      CHECK_LT(weft_now() - t0, WEFT_SEC(1));
      if (cc_how == 2) /* forgotten, not closed */
        CHECK_EQ(close(cc_fd), 0);
      int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      CHECK_EQ(c, cc_fd);
      CHECK_EQ(weft_connect(c, (struct sockaddr *)&good, sizeof good), 0);
      int s = weft_accept(lfd, NULL, NULL);
      CHECK_GE(s, 0);
      CHECK(weft_spawn(echo_conn, P(s)));
      exchange(c, "the number again");
      CHECK_EQ(weft_close(c), 0);
    }
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

static void test_connect_closed(void) {
  int fill[2], port;
  int lfd = check_full_listener(fill, &port);
  full_addr = loopback4(port);
  int fds = check_fd_count();
  check_run(connect_closed_main, NULL);
  CHECK_EQ(check_fd_count(), fds);
  check_full_listener_close(lfd, fill);
  printf("  a connect's socket closed or forgotten under it: ok\n");
}

/* ---- accept's corners (io_uring's multishot accept got each wrong) ------ */
static int plain_connect(int port) {
  int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(c, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(connect(c, (struct sockaddr *)&a, sizeof a), 0);
  return c;
}

static int ac_lfd, ac_port;
static void *ac_accept_one(void *arg) {
  (void)arg;
  int a = weft_accept(ac_lfd, NULL, NULL);
  CHECK(0); /* never resumed: the loop is stopped before it runs */
  return P(a);
}
/* Stops the loop once the acceptor is woken and not yet run (weft_dump
 * shows it "ready"): the backend's wait has seen the connection, on any
 * backend, however long that takes (a timer of 0 ms stopped the loop
 * before, and passed without testing anything if that wait had not). */
static int ac_turns;
static void ac_stop_when_woken(void *loop) {
  char dump[4096] = "";
  FILE *f = fmemopen(dump, sizeof dump - 1, "w");
  CHECK(f);
  weft_dump(f);
  fclose(f);
  for (char *line = strtok(dump, "\n"); line; line = strtok(NULL, "\n"))
    if (strstr(line, "acceptor") && strstr(line, "ready")) {
      weft_loop_stop(loop);
      return;
    }
  CHECK_LT(++ac_turns, 100000);
  CHECK(weft_call_later(0, ac_stop_when_woken, loop)); /* the next turn */
}

static void *corners_main(void *arg) {
  (void)arg;
  ac_lfd = weft_tcp_listen("127.0.0.1", 0, 16);
  CHECK_GE(ac_lfd, 0);
  ac_port = weft_sock_port(ac_lfd);
  /* A reset connection, accepted with an address: returned (what its peer
   * sent can be read), not passed over. */
  int c0 = plain_connect(ac_port);
  int a0 = weft_accept(ac_lfd, NULL, NULL); /* io_uring: multishot armed */
  CHECK_GE(a0, 0);
  int c = plain_connect(ac_port);
  CHECK_EQ(send(c, "hello", 5, 0), 5);
  struct linger lg = {1, 0};
  CHECK_EQ(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  CHECK_EQ(close(c), 0); /* RST */
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + WEFT_SEC(5));
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  int a = weft_accept(ac_lfd, (struct sockaddr *)&ss, &sl);
  CHECK_GE(a, 0);
  char b[8];
  CHECK_EQ(weft_recv(a, b, sizeof b, 0), 5);
  CHECK_EQ(weft_close(a), 0);
  /* weft_wait_fd on the listener sees a connection the multishot request
   * has taken already (without DEFER_TASKRUN its poll would not). */
  c = plain_connect(ac_port);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_wait_fd(ac_lfd, WEFT_READ), WEFT_READ);
  CHECK_EQ(weft_scope_exit(&sc), 0);
  a = weft_accept(ac_lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(weft_close(a), 0);
  close(c);
  /* Out of fds for a moment while a connection comes and nobody accepts:
   * once fds are back, the next accept takes it (the error was kept for
   * it, and weft_accept dropped the connection as if out of fds). The
   * limit is lowered before the listener's first accept: io_uring's
   * request reads it when it is made. */
  struct rlimit old, low;
  CHECK_EQ(getrlimit(RLIMIT_NOFILE, &old), 0);
  low = old;
  low.rlim_cur = 64;
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  int l2 = weft_tcp_listen("127.0.0.1", 0, 16);
  CHECK_GE(l2, 0);
  int c1 = plain_connect(weft_sock_port(l2));
  int a1 = weft_accept(l2, NULL, NULL);
  CHECK_GE(a1, 0);
  c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(c, 0);
  int dups[64], nd = 0;
  while (nd < 64 && (dups[nd] = dup(0)) >= 0)
    nd++;
  CHECK_LT(nd, 64);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons(weft_sock_port(l2))};
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(connect(c, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0); /* turns of the loop, out of fds */
  while (nd)
    close(dups[--nd]);
  weft_scope_enter(&sc, weft_now() + WEFT_SEC(5));
  a = weft_accept(l2, NULL, NULL);
  CHECK_EQ(weft_scope_exit(&sc), 0);
  CHECK_GE(a, 0);
  CHECK_EQ(setrlimit(RLIMIT_NOFILE, &old), 0);
  CHECK_EQ(weft_write(c, "x", 1), 1); /* c's connection is a's */
  CHECK_EQ(weft_read(a, b, 1), 1);
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(a1), 0);
  CHECK_EQ(weft_close(l2), 0);
  close(c);
  close(c1);
  CHECK_EQ(weft_close(a0), 0);
  close(c0);
  return NULL;
}

/* A connection handed to a waiting accept whose task has not run yet when
 * the loop is stopped and freed is closed with it (io_uring leaked it). */
static int ac_client = -1;
static void *ac_body(void *loop) {
  weft_task_opts o = {.name = "acceptor"};
  weft_task *t = weft_spawn_opts(ac_accept_one, NULL, &o);
  CHECK(t);
  CHECK_EQ(weft_detach(t), 0);
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0); /* the accept waits */
  ac_client = plain_connect(ac_port);
  ac_turns = 0;
  CHECK(weft_call_soon(ac_stop_when_woken, loop) == 0);
  weft_sleep(WEFT_SEC(10));
  CHECK(0); /* never resumed */
  return NULL;
}

static void test_accept_corners(void) {
  check_run(corners_main, NULL);
  CHECK_EQ(weft_close(ac_lfd), 0);
  int fds = check_fd_count();
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  ac_lfd = weft_tcp_listen("127.0.0.1", 0, 16);
  CHECK_GE(ac_lfd, 0);
  ac_port = weft_sock_port(ac_lfd);
  CHECK(weft_spawn(ac_body, loop));
  CHECK_EQ(weft_loop_run(loop), 1);
  weft_loop_free(loop);
  close(ac_client);
  close(ac_lfd);
  CHECK_EQ(check_fd_count(), fds);
  printf("  accept's corners: ok\n");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int fds = check_fd_count();
  test_tcp();
  test_many();
  test_errors();
  test_unix();
  test_udp();
  test_connect_corners();
  test_cancel_accept();
  test_connect_dropped();
  test_connect_dropped_name();
  test_connect_dropped_raw();
  test_connect_closed();
  test_accept_corners();
  CHECK_EQ(check_fd_count(), fds);
  printf("test_net: ok\n");
  return 0;
}
