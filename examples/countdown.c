/*
 * Seed 000's TaskScheduler example: countdown(10), countdown(5) and
 * countup(15) taking turns. In Python each is a generator and the scheduler
 * calls next() on them round-robin; in weft each is a task, weft_yield is
 * the `yield`, and the loop's FIFO ready queue is the scheduler's deque.
 * The output is byte-identical to the Python program's
 * (examples/expected/countdown.txt).
 */
#include <stdint.h>
#include <stdio.h>
#include <weft.h>

static void *countdown(void *arg) {
  for (intptr_t n = (intptr_t)arg; n > 0; n--) {
    printf("T-minus %ld\n", (long)n);
    weft_yield();
  }
  printf("Blastoff!\n");
  return NULL;
}

static void *countup(void *arg) {
  for (intptr_t x = 0; x < (intptr_t)arg; x++) {
    printf("Counting up %ld\n", (long)x);
    weft_yield();
  }
  return NULL;
}

static int run(void *unused) {
  (void)unused;
  /* Spawned tasks run after the caller blocks or ends: the three start in
   * the order they are spawned, as sched.new_task() queues them. */
  if (weft_go(countdown, (void *)10) < 0 || weft_go(countdown, (void *)5) < 0 ||
      weft_go(countup, (void *)15) < 0)
    return 1;
  return 0;
}

int main(void) {
  int rc = weft_main(run, NULL);
  if (rc < 0)
    fprintf(stderr, "countdown: %s\n", weft_strerror(rc));
  return rc == 0 ? 0 : 1;
}
