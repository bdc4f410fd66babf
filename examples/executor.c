/*
 * The end of seed 003: CPU-bound code has no point where it gives control
 * back, so while it runs on the loop nothing else does; run_in_executor
 * moves it to a pool of threads and the loop goes on. Here a ticker task
 * ticks every 50 ms while count_primes (trial division, deliberately slow)
 * runs twice: first on the pool through weft_run_in_thread, then called
 * directly from a task. Each phase reports how often the ticker ticked
 * meanwhile: several times in the first, never in the second.
 *
 *   executor [--n N]    count the primes below N (default 1,500,000:
 *                       about 0.4 s per phase on the machine it was
 *                       written on)
 *
 * Its output is three lines, with numbers that vary from run to run:
 *
 *   in the pool: 412 ms, primes below 1500000: 114155, ticker ticked 8 times
 *   on the loop: 405 ms, primes below 1500000: 114155, ticker ticked 0 times
 *   (a sentence saying why)
 *
 * The second count is 0 by construction, not by luck: the ticker can only
 * run when the task calling count_primes gives the thread back, and it
 * does not until the function returns. The test (examples/executor.cmake)
 * checks that, and that the first count is at least 1.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "args.h"

#define TICK WEFT_MS(50)

static long n = 1500000; /* count the primes below n */
static int ticks;        /* how often the ticker has ticked so far */

/* The primes below *arg, by trial division: a stand-in for any work that
 * keeps a CPU busy without making a single blocking call. It touches no
 * weft function, as a job on the pool must not (weft.h). */
static void *count_primes(void *arg) {
  long limit = *(const long *)arg, count = 0;
  for (long k = 2; k < limit; k++) {
    long d = 2;
    while (d <= k / d && k % d != 0) /* d <= k / d: d * d could overflow */
      d++;
    count += d > k / d;
  }
  return (void *)(intptr_t)count;
}

static void *ticker(void *unused) {
  (void)unused;
  while (weft_sleep(TICK) == 0) /* until cancelled: -ECANCELED */
    ticks++;
  return NULL;
}

/* One phase: runs count_primes on the pool or on the loop, and prints how
 * long it took and how often the ticker ticked meanwhile. Returns 0 or a
 * negative errno from weft_run_in_thread. */
static int phase(const char *where, int in_pool) {
  int before = ticks;
  int64_t start = weft_now();
  void *res;
  if (in_pool) {
    int rc = weft_run_in_thread(count_primes, &n, &res);
    if (rc < 0)
      return rc;
  } else {
    res = count_primes(&n); /* the loop's own thread: nothing else runs */
  }
  int got = ticks - before;
  printf("%s: %lld ms, primes below %ld: %ld, ticker ticked %d time%s\n", where,
         (long long)((weft_now() - start) / WEFT_MS(1)), n, (long)(intptr_t)res,
         got, got == 1 ? "" : "s");
  return 0;
}

static int demo(void *unused) {
  (void)unused;
  weft_task *t = weft_spawn(ticker, NULL);
  if (!t) {
    fprintf(stderr, "executor: cannot spawn the ticker: %s\n",
            weft_strerror(-errno));
    return 1;
  }
  int rc = phase("in the pool", 1);
  if (rc == 0)
    rc = phase("on the loop", 0);
  weft_cancel(t);
  weft_join(t, NULL);
  if (rc < 0) {
    fprintf(stderr, "executor: weft_run_in_thread: %s\n", weft_strerror(rc));
    return 1;
  }
  printf("On the pool the count ran on a thread of its own and the loop "
         "kept ticking; called from a task, it held the loop's only thread, "
         "and no other task could run until it returned.\n");
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    char *end;
    if (strcmp(argv[i], "--n") == 0 && i + 1 < argc) {
      errno = 0;
      n = strtol(argv[++i], &end, 10);
      if (errno || *end || end == argv[i] || n < 2) {
        fprintf(stderr, "executor: --n wants a whole number of at least 2\n");
        return 2;
      }
    } else {
      fprintf(stderr, "usage: %s [--n N]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return exit_status("executor", weft_main(demo, NULL));
}
