/*
 * Seed 000's ActorScheduler example: a printer and a counter. The counter
 * receives n; at 0 it stops; otherwise it sends n to 'printer' and n - 1
 * to itself, a self-send that recursion does not bound. In Python the
 * actors are generators fed from one deque of (actor, message) pairs; in
 * weft each is a task with a mailbox, and weft_actor_recv is the
 * `msg = yield`. Because receiving lets the next ready actor run first
 * when its oldest message is older, the two keep in step as the seed's
 * single queue keeps them: each mailbox holds a message or two, whatever
 * the count, and messages are handled in the seed's order.
 *
 *   actors [N]    count down from N (default 10000, as in the seed)
 *
 * At the end the printer waits on its mailbox for ever, as the seed's
 * does; the loop sees that nothing can wake it, cancels it (its recv
 * returns -ECANCELED) and the program ends. The output is the seed's
 * (examples/expected/actors.txt).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <weft.h>

#include "args.h"

static void *printer(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0)
    printf("Got: %ld\n", (long)(intptr_t)msg);
  return NULL;
}

static void *counter(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0) { /* receive the current count */
    intptr_t n = (intptr_t)msg;
    if (n == 0)
      break;
    weft_actor_send("printer", (void *)n);       /* send to the printer */
    weft_actor_send("counter", (void *)(n - 1)); /* the next count */
  }
  return NULL;
}

static int run(void *arg) {
  if (!weft_actor_spawn("printer", printer, NULL) ||
      !weft_actor_spawn("counter", counter, NULL)) {
    perror("weft_actor_spawn");
    return 1;
  }
  /* Send an initial message to the counter to initiate. */
  return weft_actor_send("counter", arg) < 0;
}

int main(int argc, char **argv) {
  if (argc > 2) {
    fprintf(stderr, "usage: actors [count]\n");
    return 2;
  }
  long n = argc > 1 ? arg_long("actors", "the count", argv[1], 0, 1000000000)
                    : 10000;
  return exit_status("actors", weft_main(run, (void *)(intptr_t)n));
}
