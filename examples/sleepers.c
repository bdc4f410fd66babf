/*
 * Seed 003's first loop: countdown(5), sleeping 4 s between steps, and
 * countup(20), sleeping 1 s, interleaved by the loop's timer heap. When
 * both wake at the same moment, the one whose sleep was set first goes
 * first (timers are keyed by deadline, then sequence), as in the seed.
 *
 *   sleepers [--scale F]    F multiplies every sleep (default 1: 20 s in
 *                           all; the demo uses 0.1)
 *
 * The output is the seed's (examples/expected/sleepers.txt).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "args.h"

static double scale = 1.0;
static int64_t start; /* the loop's clock when the tasks began */

/* Sleeps until `s` seconds (scaled) after the start. The seed sleeps a
 * delay from each wake-up; on an idle machine the two are the same, but
 * delays add up the lateness of every wake-up, and on a slow one (under
 * valgrind) countup's drift would change the interleaving. Measured from
 * the start, the wake-ups keep the seed's timetable; where two fall on the
 * same instant, the sleep set first wakes first, as in the seed. */
static void sleep_until(double s) {
  weft_sleep(start + (int64_t)(s * scale * 1e9) - weft_loop_now());
}

static void *countdown(void *arg) {
  double t = 0;
  for (intptr_t n = (intptr_t)arg; n > 0; n--) {
    printf("Down %ld\n", (long)n);
    sleep_until(t += 4); /* sched.sleep(4) */
  }
  return NULL;
}

static void *countup(void *arg) {
  double t = 0;
  for (intptr_t x = 0; x < (intptr_t)arg; x++) {
    printf("Up %ld\n", (long)x);
    sleep_until(t += 1); /* sched.sleep(1) */
  }
  return NULL;
}

static int run(void *unused) {
  (void)unused;
  start = weft_loop_now();
  if (weft_go(countdown, (void *)5) < 0 || weft_go(countup, (void *)20) < 0)
    return 1;
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = arg_scale("sleepers", argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--scale F]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return exit_status("sleepers", weft_main(run, NULL));
}
