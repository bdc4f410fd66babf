/*
 * Seed 003's cancellation demo: stalled_read waits on a socket that never
 * gets data, and timeout_after cancels it two seconds later. The recv
 * returns -ECANCELED at the point where it waited (the seed's
 * CancelledError at `await sched.recv`), the reader cleans up, and the
 * loop ends at once: the cancelled recv left no fd registered, no timer,
 * nothing for the loop to wait for.
 *
 *   cancel [--scale F]   F multiplies the 2 s timeout (the demo uses 0.1)
 *
 * The output is the seed's three lines (examples/expected/cancel.txt).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <weft.h>

#include "args.h"

static double scale = 1.0;

static void *stalled_read(void *arg) {
  int sock = *(int *)arg;
  char buf[1024];
  printf("[reader] waiting for data that will never arrive\n");
  ssize_t n = weft_recv(sock, buf, sizeof buf, 0);
  if (n == -ECANCELED)
    printf("[reader] cancelled, giving up on the read\n");
  else
    printf("[reader] got data (unexpected): %zd\n", n);
  return NULL;
}

typedef struct timeout {
  weft_task *task;
  int seconds;
} timeout;

static void *timeout_after(void *arg) {
  timeout *to = arg;
  weft_sleep((int64_t)(to->seconds * scale * 1e9));
  printf("[timeout] %ds elapsed, cancelling read\n", to->seconds);
  weft_cancel(to->task);
  return NULL;
}

static int demo_cancel_io(void *unused) {
  (void)unused;
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0) {
    perror("socketpair");
    return 1;
  }
  /* `b` (sv[1]) stays open and silent, as the seed keeps it alive. */
  weft_task *reader = weft_spawn(stalled_read, &sv[0]);
  timeout to = {reader, 2};
  weft_task *timer = weft_spawn(timeout_after, &to);
  if (!reader || !timer)
    return 1;
  weft_join(reader, NULL);
  weft_join(timer, NULL);
  weft_close(sv[0]);
  close(sv[1]);
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = arg_scale("cancel", argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--scale F]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return exit_status("cancel", weft_main(demo_cancel_io, NULL));
}
