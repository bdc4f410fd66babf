/*
 * Seed 003's opening listing: countdown(5) and countup(5), each on a thread
 * of its own, printing once a second ("Down 5" ... "Down 1", "Up 0" ...
 * "Up 4"). The seed shows it as what threads cost before building its
 * event loop (examples/sleepers.c is the loop's answer). Here the two run
 * on two worker threads of the loop's pool (weft_run_in_thread), blocking
 * in nanosleep as the seed's threads block in time.sleep, while two tasks
 * wait for them without blocking the loop.
 *
 *   threads [--scale F]    F multiplies every sleep (default 1: 5 s)
 *
 * As with the seed's threads, which of "Down n" and "Up x" comes first in
 * a given second is up to the kernel: the test compares each thread's
 * lines in order (examples/expected/threads.txt), not their interleaving.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <weft.h>

#include "args.h"

static double scale = 1.0;

static void sleep_seconds(double s) { /* time.sleep(s) */
  int64_t ns = (int64_t)(s * scale * 1e9);
  struct timespec ts = {(time_t)(ns / 1000000000), (long)(ns % 1000000000)};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static void *countdown(void *arg) {
  for (intptr_t n = (intptr_t)arg; n > 0; n--) {
    printf("Down %ld\n", (long)n);
    sleep_seconds(1);
  }
  return NULL;
}

static void *countup(void *arg) {
  for (intptr_t x = 0; x < (intptr_t)arg; x++) {
    printf("Up %ld\n", (long)x);
    sleep_seconds(1);
  }
  return NULL;
}

/* threading.Thread(target=..., args=(5,)).start(), each in a task that
 * waits for its thread: 0, or why it could not run. */
static void *down_thread(void *unused) {
  (void)unused;
  return (void *)(intptr_t)weft_run_in_thread(countdown, (void *)5, NULL);
}

static void *up_thread(void *unused) {
  (void)unused;
  return (void *)(intptr_t)weft_run_in_thread(countup, (void *)5, NULL);
}

static int run(void *unused) {
  (void)unused;
  weft_task *down = weft_spawn(down_thread, NULL);
  weft_task *up = weft_spawn(up_thread, NULL);
  void *rc_down = (void *)-1, *rc_up = (void *)-1;
  if (down)
    weft_join(down, &rc_down);
  if (up)
    weft_join(up, &rc_up);
  return rc_down || rc_up;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = arg_scale("threads", argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--scale F]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return exit_status("threads", weft_main(run, NULL));
}
