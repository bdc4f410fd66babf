/*
 * The echo benchmark's limit: the smallest hand-written epoll echo server,
 * against which weft's one-task-per-connection server is measured.
 *
 *   echo_server_epoll PORT     listens on 127.0.0.1:PORT until killed
 *
 * One thread, level-triggered epoll, non-blocking sockets. A connection is
 * either reading (EPOLLIN: one recv of up to 64 KiB, then one send of what
 * came) or, after a short send, writing (EPOLLOUT only: the rest goes out
 * before anything more is read, so a slow reader holds at most one buffer).
 * Every accepted socket gets TCP_NODELAY, as every server in bench/echo
 * does (Go's net package does it by default), so that Nagle's algorithm
 * never holds back an echo.
 */
#ifndef _GNU_SOURCE /* CMake defines it for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFSIZE 65536

typedef struct conn {
  int fd;
  size_t off; /* bytes of buf already sent */
  size_t len; /* bytes of buf to send; off == len: reading */
  char buf[BUFSIZE];
} conn;

static int epfd;

static void die(const char *what) {
  fprintf(stderr, "echo_server_epoll: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void drop(conn *c) {
  close(c->fd); /* also takes it out of the epoll set */
  free(c);
}

static void watch(conn *c, int op, unsigned events) {
  struct epoll_event ev = {.events = events, .data.ptr = c};
  if (epoll_ctl(epfd, op, c->fd, &ev) < 0)
    die("epoll_ctl");
}

/* Sends what is left of buf. Returns 0 when all of it went out, 1 when the
 * socket is full, -1 when the connection is gone. */
static int send_rest(conn *c) {
  while (c->off < c->len) {
    ssize_t n = send(c->fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      return errno == EAGAIN || errno == EWOULDBLOCK ? 1 : -1;
    }
    c->off += (size_t)n;
  }
  c->off = c->len = 0;
  return 0;
}

static void on_event(conn *c) {
  if (c->len > 0) { /* writing: the rest of the last recv */
    int rc = send_rest(c);
    if (rc < 0)
      drop(c);
    else if (rc == 0)
      watch(c, EPOLL_CTL_MOD, EPOLLIN);
    return;
  }
  ssize_t n = recv(c->fd, c->buf, BUFSIZE, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (n <= 0) { /* end of file or an error */
    drop(c);
    return;
  }
  c->len = (size_t)n;
  int rc = send_rest(c);
  if (rc < 0)
    drop(c);
  else if (rc == 1)
    watch(c, EPOLL_CTL_MOD, EPOLLOUT);
}

static void on_listener(int lfd) {
  for (;;) {
    int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK)
        return;
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      die("accept4");
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = malloc(sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->fd = fd;
    c->off = c->len = 0;
    watch(c, EPOLL_CTL_ADD, EPOLLIN);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: echo_server_epoll PORT\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (lfd < 0)
    die("socket");
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0)
    die("bind");
  if (listen(lfd, SOMAXCONN) < 0)
    die("listen");
  epfd = epoll_create1(EPOLL_CLOEXEC);
  if (epfd < 0)
    die("epoll_create1");
  /* The listener is told apart from connections by a NULL pointer. */
  struct epoll_event lev = {.events = EPOLLIN, .data.ptr = NULL};
  if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &lev) < 0)
    die("epoll_ctl");

  struct epoll_event evs[256];
  for (;;) {
    int n = epoll_wait(epfd, evs, 256, -1);
    if (n < 0) {
      if (errno == EINTR)
        continue;
      die("epoll_wait");
    }
    for (int i = 0; i < n; i++) {
      if (evs[i].data.ptr == NULL)
        on_listener(lfd);
      else
        on_event(evs[i].data.ptr);
    }
  }
}
