/*
 * The cost of a switch, two ways.
 *
 *   switch_gen_oneway  ns per one-way switch between a caller and a
 *                      generator: N weft_gen_send calls, each resuming a
 *                      generator that yields straight back, are 2N switches.
 *   switch_yield       ns per weft_yield with two tasks alternating: each of
 *                      two tasks calls weft_yield M times; the total time of
 *                      the 2M yields divided by 2M. A yield is the
 *                      ready-queue work plus the switch to the other task
 *                      (straight there, or through the loop's own context:
 *                      that is src/task.c's business, and this figure is
 *                      what it costs either way).
 *
 * Each figure is the median of the timed rounds (see bench.h).
 */
#include "weft.h"

#include "bench.h"

/* ---- generators -------------------------------------------------------- */

/* Yields until closed (the yield then returns -ECANCELED). */
static void *echo_gen(weft_gen *g, void *arg) {
  (void)arg;
  while (weft_gen_yield(g, NULL, NULL) == 0)
    ;
  return NULL;
}

/* One round: n round trips, returns ns per one-way switch. */
static double gen_round(weft_gen *g, long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++)
    if (weft_gen_send(g, NULL, NULL) != 1) {
      fprintf(stderr, "switch: weft_gen_send did not yield\n");
      exit(1);
    }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (2.0 * (double)n);
}

static void bench_gen(const bench_opts *o) {
  weft_gen *g = weft_gen_new(echo_gen, NULL, 0);
  if (!g) {
    perror("switch: weft_gen_new");
    exit(1);
  }
  static bench_series s = {.name = "switch_gen_oneway"};
  gen_round(g, o->iters); /* warm-up: stack pages, caches, branch predictors */
  for (int r = 0; r < o->rounds; r++)
    bench_add(&s, o, gen_round(g, o->iters));
  weft_gen_free(g);
  bench_report(&s, "ns");
}

/* ---- tasks yielding to each other -------------------------------------- */

static void *yielder(void *p) {
  long m = *(const long *)p;
  for (long i = 0; i < m; i++)
    if (weft_yield() != 0)
      return (void *)1;
  return NULL;
}

/* One round: two tasks alternate m yields each; returns ns per yield. The
 * main task waits in weft_join, so only the two yielders are ready. */
static double yield_round(long m) {
  int64_t t0 = bench_now();
  weft_task *a = weft_spawn(yielder, &m);
  weft_task *b = weft_spawn(yielder, &m);
  if (!a || !b) {
    perror("switch: weft_spawn");
    exit(1);
  }
  void *ra = NULL, *rb = NULL;
  if (weft_join(a, &ra) < 0 || weft_join(b, &rb) < 0 || ra || rb) {
    fprintf(stderr, "switch: a yielder failed\n");
    exit(1);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (2.0 * (double)m);
}

static int yield_main(void *p) {
  const bench_opts *o = p;
  static bench_series s = {.name = "switch_yield"};
  yield_round(o->iters); /* warm-up */
  for (int r = 0; r < o->rounds; r++)
    bench_add(&s, o, yield_round(o->iters));
  bench_report(&s, "ns");
  return 0;
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 2000000);
  bench_gen(&o);
  int rc = weft_main(yield_main, &o);
  if (rc != 0) {
    fprintf(stderr, "switch: weft_main: %s\n", weft_strerror(rc));
    return 1;
  }
  return 0;
}
