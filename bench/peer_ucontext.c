/*
 * Peer: ucontext's swapcontext, measured as switch.c measures weft's
 * generators: N round trips between main and a coroutine that switches
 * straight back are 2N one-way switches.
 *
 *   peer_ucontext_switch_oneway  ns per one-way swapcontext
 *
 * glibc's swapcontext saves and restores the signal mask with a system
 * call, which is most of its cost. The figure is the median of the timed
 * rounds (see bench.h).
 */
#include "bench.h"

#include <ucontext.h>

static ucontext_t main_uc, co_uc;

static void co_body(void) {
  for (;;)
    swapcontext(&co_uc, &main_uc);
}

static double uc_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++)
    swapcontext(&main_uc, &co_uc);
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (2.0 * (double)n);
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 50000);
  static char stack[64 * 1024] __attribute__((aligned(16)));
  if (getcontext(&co_uc) != 0) {
    perror("peer_ucontext: getcontext");
    return 1;
  }
  co_uc.uc_stack.ss_sp = stack;
  co_uc.uc_stack.ss_size = sizeof stack;
  co_uc.uc_link = NULL;
  makecontext(&co_uc, co_body, 0);

  static bench_series s = {.name = "peer_ucontext_switch_oneway"};
  uc_round(o.iters); /* warm-up */
  for (int r = 0; r < o.rounds; r++)
    bench_add(&s, &o, uc_round(o.iters));
  bench_report(&s, "ns");
  return 0;
}
