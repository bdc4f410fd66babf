/*
 * The echo benchmark's weft server: one task per connection, written the
 * way weft means servers to be written, through weft.h only.
 *
 *   echo_server_weft PORT     listens on 127.0.0.1:PORT until killed
 *
 * The first task accepts; each connection gets a detached task that reads
 * up to 64 KiB (a buffer on its own stack) and writes back all of it, until
 * end of file or an error. Accepted sockets get TCP_NODELAY, as in every
 * server of bench/echo.
 */
#include "weft.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define BUFSIZE 65536

static void *echo_conn(void *arg) {
  int fd = (int)(intptr_t)arg;
  char buf[BUFSIZE];
  for (;;) {
    ssize_t n = weft_recv(fd, buf, sizeof buf, 0);
    if (n <= 0) /* end of file, or an error such as -ECONNRESET */
      break;
    if (weft_write_all(fd, buf, (size_t)n) != n)
      break;
  }
  weft_close(fd);
  return NULL;
}

static int serve(void *arg) {
  int port = *(int *)arg;
  int lfd = weft_tcp_listen("127.0.0.1", port, 0);
  if (lfd < 0) {
    fprintf(stderr, "echo_server_weft: listen on port %d: %s\n", port,
            weft_strerror(lfd));
    return 1;
  }
  for (;;) {
    int fd = weft_accept(lfd, NULL, NULL);
    if (fd < 0) {
      fprintf(stderr, "echo_server_weft: accept: %s\n", weft_strerror(fd));
      return 1;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int rc = weft_go(echo_conn, (void *)(intptr_t)fd);
    if (rc < 0) { /* the task never runs: the connection is ours to close */
      fprintf(stderr, "echo_server_weft: weft_go: %s\n", weft_strerror(rc));
      weft_close(fd);
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: echo_server_weft PORT\n");
    return 2;
  }
  int port = atoi(argv[1]);
  int rc = weft_main(serve, &port);
  if (rc < 0)
    fprintf(stderr, "echo_server_weft: %s\n", weft_strerror(rc));
  return rc != 0;
}
