/*
 * Peer: Boost.Context's fcontext (the raw jump_fcontext / make_fcontext
 * layer under boost::context::fiber), measured as switch.c measures weft's
 * generators: N round trips between main and a context that jumps straight
 * back are 2N one-way switches.
 *
 *   peer_fcontext_switch_oneway  ns per one-way jump_fcontext, the two
 *                                loops calling jump_fcontext directly
 *   peer_fcontext_gen_oneway     the same through a minimal generator made
 *                                of fcontext: out-of-line send and yield
 *                                functions, as weft_gen_send and
 *                                weft_gen_yield are. It shows what the
 *                                call and return around each jump cost: a
 *                                return right after a stack switch is
 *                                mispredicted (the CPU's return-address
 *                                stack holds the other stack's returns),
 *                                and the direct loops above never return.
 *
 * The figure is the median of the timed rounds (see bench.h).
 */
#include <boost/context/detail/fcontext.hpp>

#include "bench.h"

namespace ctx = boost::context::detail;

/* Jumps back to whoever jumped here, forever. Each jump hands over the
 * context to return to. */
static void echo(ctx::transfer_t t) {
  for (;;)
    t = ctx::jump_fcontext(t.fctx, nullptr);
}

static double fc_round(ctx::fcontext_t *co, long n) {
  ctx::fcontext_t c = *co;
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++)
    c = ctx::jump_fcontext(c, nullptr).fctx;
  int64_t t1 = bench_now();
  *co = c;
  return (double)(t1 - t0) / (2.0 * (double)n);
}

/* The minimal generator: the context to jump to next, kept where both
 * sides find it. */
struct fc_gen {
  ctx::fcontext_t other;
};

__attribute__((noinline)) static void fc_send(fc_gen *g) {
  g->other = ctx::jump_fcontext(g->other, g).fctx;
}

__attribute__((noinline)) static void fc_yield(fc_gen *g) {
  g->other = ctx::jump_fcontext(g->other, nullptr).fctx;
}

static void gen_body(ctx::transfer_t t) {
  fc_gen *g = static_cast<fc_gen *>(t.data);
  g->other = t.fctx;
  for (;;)
    fc_yield(g);
}

static double gen_round(fc_gen *g, long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++)
    fc_send(g);
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (2.0 * (double)n);
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 2000000);
  static char stack[64 * 1024] __attribute__((aligned(16)));
  /* make_fcontext takes the top of the stack: it grows downwards. */
  ctx::fcontext_t co = ctx::make_fcontext(stack + sizeof stack, sizeof stack,
                                          echo);

  static bench_series s = {"peer_fcontext_switch_oneway", {0}, 0};
  fc_round(&co, o.iters); /* warm-up */
  for (int r = 0; r < o.rounds; r++)
    bench_add(&s, &o, fc_round(&co, o.iters));
  bench_report(&s, "ns");

  static char gen_stack[64 * 1024] __attribute__((aligned(16)));
  fc_gen g = {ctx::make_fcontext(gen_stack + sizeof gen_stack,
                                 sizeof gen_stack, gen_body)};
  static bench_series sg = {"peer_fcontext_gen_oneway", {0}, 0};
  gen_round(&g, o.iters); /* warm-up */
  for (int r = 0; r < o.rounds; r++)
    bench_add(&sg, &o, gen_round(&g, o.iters));
  bench_report(&sg, "ns");
  return 0;
}
