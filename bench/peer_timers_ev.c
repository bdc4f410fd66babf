/*
 * Peer: libev's timers, measured as timers.c measures weft's (the
 * workloads, the random numbers, the clock and the rounds are the same;
 * timers.c says why each is what it is).
 *
 *   timers_libev_arm_fire  ns per timer: one callback arms N ev_timers
 *                          (ev_timer_set, ev_timer_start) with random 0-999
 *                          ms delays, and ev_run runs until all have fired
 *   timers_libev_rearm     ns per re-arm of one of L armed timers picked at
 *                          random, to a new random deadline far ahead
 *
 * The re-arm is libev's own way of moving a timer: set w->repeat to the new
 * delay and call ev_timer_again, which moves the armed timer to its new
 * place in the heap in one sift, where ev_timer_stop + ev_timer_start would
 * take it out and put it back in (the manual's "be smart about timeouts",
 * technique 2). The timers then count as repeating, which changes nothing
 * here: they never fire.
 *
 * libev's times are double seconds: the delays are whole milliseconds,
 * r / 1000.0, as in the other two programs. The watchers are the caller's
 * memory, one array allocated (and touched, by the warm-up round) before
 * anything is timed; libev's own heap grows in the warm-up round and stays.
 */
#include "bench.h"

#include <ev.h>

#define LIVE 100000

static struct ev_loop *loop;
static const bench_opts *opts;

/* ---- arm and fire ------------------------------------------------------ */

static struct {
  long n, fired;
  int64_t t0, t1;
  ev_timer *w; /* n watchers */
} af;

static void on_fire(struct ev_loop *l, ev_timer *w, int revents) {
  (void)l, (void)w, (void)revents;
  if (++af.fired == af.n)
    af.t1 = bench_cpu_now();
}

static void arm_all(struct ev_loop *l, ev_timer *kick, int revents) {
  (void)kick, (void)revents;
  bench_rng_seed();
  af.t0 = bench_cpu_now();
  for (long i = 0; i < af.n; i++) {
    ev_timer_set(&af.w[i], bench_rng_below(1000) / 1000.0, 0.);
    ev_timer_start(l, &af.w[i]);
  }
}

static double arm_fire_round(void) {
  ev_timer kick;
  af.fired = 0;
  ev_timer_init(&kick, arm_all, 0., 0.);
  ev_timer_start(loop, &kick);
  ev_run(loop, 0);
  if (af.fired != af.n) {
    fprintf(stderr, "peer_timers_ev: %ld of %ld timers fired\n", af.fired,
            af.n);
    exit(1);
  }
  return (double)(af.t1 - af.t0) / (double)af.n;
}

/* ---- re-arm ------------------------------------------------------------ */

static ev_timer live[LIVE];

static void never(struct ev_loop *l, ev_timer *w, int revents) {
  (void)l, (void)w, (void)revents;
  fprintf(stderr, "peer_timers_ev: a far-off timer fired\n");
  exit(1);
}

/* 1000 s plus up to 1000 s more in whole milliseconds, as in timers.c. */
static ev_tstamp far_delay(void) {
  return 1000. + bench_rng_below(1000000) / 1000.;
}

static double rearm_round(long m) {
  bench_rng_seed();
  int64_t t0 = bench_cpu_now();
  for (long k = 0; k < m; k++) {
    ev_timer *w = &live[bench_rng_below(LIVE)];
    w->repeat = far_delay();
    ev_timer_again(loop, w);
  }
  int64_t t1 = bench_cpu_now();
  return (double)(t1 - t0) / (double)m;
}

static void rearm_all(struct ev_loop *l, ev_timer *kick, int revents) {
  (void)kick, (void)revents;
  static bench_series s = {.name = "timers_libev_rearm"};
  bench_rng_seed();
  for (long i = 0; i < LIVE; i++) {
    ev_init(&live[i], never);
    live[i].repeat = far_delay();
    ev_timer_again(l, &live[i]); /* not active: starts it, repeat ahead */
  }
  rearm_round(opts->iters); /* warm-up */
  for (int r = 0; r < opts->rounds; r++)
    bench_add(&s, opts, rearm_round(opts->iters));
  for (long i = 0; i < LIVE; i++)
    ev_timer_stop(l, &live[i]);
  bench_report(&s, "ns");
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 3, 1000000);
  opts = &o;
  loop = ev_loop_new(EVFLAG_AUTO);
  af.n = o.iters;
  af.w = malloc((size_t)af.n * sizeof *af.w);
  if (!loop || !af.w) {
    fprintf(stderr, "peer_timers_ev: no loop or no memory\n");
    return 1;
  }
  for (long i = 0; i < af.n; i++)
    ev_init(&af.w[i], on_fire);

  static bench_series s = {.name = "timers_libev_arm_fire"};
  arm_fire_round(); /* warm-up */
  for (int r = 0; r < o.rounds; r++)
    bench_add(&s, &o, arm_fire_round());
  bench_report(&s, "ns");

  ev_timer kick;
  ev_timer_init(&kick, rearm_all, 0., 0.);
  ev_timer_start(loop, &kick);
  ev_run(loop, 0);

  free(af.w);
  ev_loop_destroy(loop);
  return 0;
}
