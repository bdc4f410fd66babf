/*
 * The echo benchmark's libev peer.
 *
 *   echo_server_ev PORT     listens on 127.0.0.1:PORT until killed
 *
 * libev only says when a socket is ready; the reading and writing are the
 * program's, as in epoll_server.c: one watcher per connection, watching
 * EV_READ (one recv of up to 64 KiB, then one send) or, after a short send,
 * EV_WRITE until the rest is out. Accepted sockets get TCP_NODELAY, as in
 * every server of bench/echo.
 */
#ifndef _GNU_SOURCE /* CMake defines it for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <ev.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFSIZE 65536

typedef struct conn {
  ev_io io;   /* first: the watcher's address is the conn's */
  size_t off; /* bytes of buf already sent */
  size_t len; /* bytes of buf to send; 0: reading */
  char buf[BUFSIZE];
} conn;

static void drop(struct ev_loop *loop, conn *c) {
  ev_io_stop(loop, &c->io);
  close(c->io.fd);
  free(c);
}

/* Switches the watcher to `events`. */
static void rewatch(struct ev_loop *loop, conn *c, int events) {
  ev_io_stop(loop, &c->io);
  ev_io_set(&c->io, c->io.fd, events);
  ev_io_start(loop, &c->io);
}

/* Sends what is left of buf: 0 when all went out, 1 when the socket is
 * full, -1 when the connection is gone. */
static int send_rest(conn *c) {
  while (c->off < c->len) {
    ssize_t n = send(c->io.fd, c->buf + c->off, c->len - c->off, MSG_NOSIGNAL);
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

static void on_io(struct ev_loop *loop, ev_io *w, int revents) {
  conn *c = (conn *)w;
  (void)revents;
  if (c->len > 0) { /* writing */
    int rc = send_rest(c);
    if (rc < 0)
      drop(loop, c);
    else if (rc == 0)
      rewatch(loop, c, EV_READ);
    return;
  }
  ssize_t n = recv(w->fd, c->buf, BUFSIZE, 0);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
    return;
  if (n <= 0) {
    drop(loop, c);
    return;
  }
  c->len = (size_t)n;
  int rc = send_rest(c);
  if (rc < 0)
    drop(loop, c);
  else if (rc == 1)
    rewatch(loop, c, EV_WRITE);
}

static void on_accept(struct ev_loop *loop, ev_io *w, int revents) {
  (void)revents;
  for (;;) {
    int fd = accept4(w->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED)
        continue;
      return; /* EAGAIN, or an error the next readiness reports again */
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = malloc(sizeof *c);
    if (!c) {
      close(fd);
      continue;
    }
    c->off = c->len = 0;
    ev_io_init(&c->io, on_io, fd, EV_READ);
    ev_io_start(loop, &c->io);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: echo_server_ev PORT\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0 ||
      listen(lfd, SOMAXCONN) < 0) {
    fprintf(stderr, "echo_server_ev: listen: %s\n", strerror(errno));
    return 1;
  }
  struct ev_loop *loop = ev_default_loop(EVFLAG_AUTO);
  ev_io accept_w;
  ev_io_init(&accept_w, on_accept, lfd, EV_READ);
  ev_io_start(loop, &accept_w);
  ev_run(loop, 0);
  return 0;
}
