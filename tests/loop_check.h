/*
 * For the tests of the loop and what is built on it: run one task on a
 * fresh loop until the loop has nothing left, and check that it ran out of
 * work (0), rather than stopping or failing; or until it waits, and drop
 * it with the loop. Also: receive an exact message.
 */
#ifndef WEFT_LOOP_CHECK_H
#define WEFT_LOOP_CHECK_H

#include "weft.h"

#include "check.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>

/* 1 if a loop made now (WEFT_BACKEND, or the default) runs on io_uring. */
static inline int check_loop_is_uring(void) {
  weft_loop *probe = weft_loop_new(NULL);
  CHECK(probe);
  int ring = strcmp(weft_loop_backend(probe), "io_uring") == 0;
  weft_loop_free(probe);
  return ring;
}

/* A listener on 127.0.0.1 whose accept queue is full, so that the kernel
 * drops every SYN that comes next: its fd, its port in *port, and the two
 * connections that fill it in fill (close all three when done). Blocks the
 * thread 20 ms while their handshakes end. */
static inline int check_full_listener(int fill[2], int *port) {
  int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(lfd, 0);
  struct sockaddr_in a = {.sin_family = AF_INET};
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(lfd, (struct sockaddr *)&a, sizeof a), 0);
  CHECK_EQ(listen(lfd, 0), 0);
  socklen_t al = sizeof a;
  CHECK_EQ(getsockname(lfd, (struct sockaddr *)&a, &al), 0);
  *port = ntohs(a.sin_port);
  for (int i = 0; i < 2; i++) {
    fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK_GE(fill[i], 0);
    int rc = connect(fill[i], (struct sockaddr *)&a, sizeof a);
    CHECK(rc == 0 || errno == EINPROGRESS);
  }
  usleep(20000);
  return lfd;
}

/* Closes what check_full_listener made: the listener and its fillers. */
static inline void check_full_listener_close(int lfd, int fill[2]) {
  close(fill[0]);
  close(fill[1]);
  close(lfd);
}

/* Receives on fd (weft_recv, in as many pieces as it takes) until `want`
 * has come whole, and checks the bytes. */
static inline void check_recv_exactly(int fd, const char *want) {
  char all[256];
  size_t got = 0, len = strlen(want);
  CHECK_LT(len, sizeof all);
  while (got < len) {
    ssize_t n = weft_recv(fd, all + got, sizeof all - got, 0);
    CHECK_GT(n, 0);
    got += (size_t)n;
  }
  CHECK_EQ(got, len);
  CHECK(memcmp(all, want, len) == 0);
}

static inline void check_run(void *(*fn)(void *), void *arg) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(fn, arg));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* Runs fn(arg) on a fresh loop until it waits, then stops the loop and
 * frees it with fn's task parked: the task is dropped, and what its call
 * held must be let go. A task spawned first stops the loop; it runs only
 * once fn waits, whatever the order of the ready queue. (A timer stopped
 * it before: on a loaded machine it could fire before fn had run at all,
 * and the test then checked nothing, or found a stream never closed.) */
typedef struct {
  void *(*fn)(void *);
  void *arg;
} check_drop_call;

static inline void *check_drop_stopper(void *arg) {
  (void)arg;
  weft_loop_stop(weft_loop_current());
  return NULL;
}

static inline void *check_drop_task(void *arg) {
  check_drop_call *c = arg;
  CHECK(weft_spawn(check_drop_stopper, NULL));
  return c->fn(c->arg);
}

static inline void check_drop_in(void *(*fn)(void *), void *arg) {
  check_drop_call c = {fn, arg};
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(check_drop_task, &c));
  CHECK_EQ(weft_loop_run(loop), 1);
  weft_loop_free(loop);
}

#endif
