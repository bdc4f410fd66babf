/*
 * Peer: libuv's timers, measured as timers.c measures weft's (the
 * workloads, the random numbers, the clock and the rounds are the same;
 * timers.c says why each is what it is).
 *
 *   timers_libuv_arm_fire  ns per timer: one callback arms N uv_timer_t
 *                          (uv_timer_start) with random 0-999 ms delays, and
 *                          uv_run runs until all have fired
 *   timers_libuv_rearm     ns per re-arm of one of L armed timers picked at
 *                          random, to a new random deadline far ahead:
 *                          uv_timer_start on the started timer, libuv's way
 *                          (inside, it stops the timer and starts it again)
 *
 * libuv's delays are whole milliseconds, as the other programs' are. A
 * handle is initialised once in its life (uv_timer_init puts it on the
 * loop's list of handles) and then started and stopped as often as wanted,
 * so the handles are initialised before anything is timed, and closed at
 * the end. They are the caller's memory; libuv's heap is intrusive (its
 * nodes are in the handles), so arming allocates nothing.
 */
#include "bench.h"

#include <uv.h>

#define LIVE 100000

static uv_loop_t loop;
static const bench_opts *opts;

static void check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "peer_timers_uv: %s: %s\n", what, uv_strerror(rc));
    exit(1);
  }
}

/* ---- arm and fire ------------------------------------------------------ */

static struct {
  long n, fired;
  int64_t t0, t1;
  uv_timer_t *h; /* n handles */
} af;

static void on_fire(uv_timer_t *h) {
  (void)h;
  if (++af.fired == af.n)
    af.t1 = bench_cpu_now();
}

static void arm_all(uv_timer_t *kick) {
  (void)kick;
  bench_rng_seed();
  af.t0 = bench_cpu_now();
  for (long i = 0; i < af.n; i++)
    check(uv_timer_start(&af.h[i], on_fire, bench_rng_below(1000), 0),
          "uv_timer_start");
}

static double arm_fire_round(uv_timer_t *kick) {
  af.fired = 0;
  check(uv_timer_start(kick, arm_all, 0, 0), "uv_timer_start");
  check(uv_run(&loop, UV_RUN_DEFAULT), "uv_run");
  if (af.fired != af.n) {
    fprintf(stderr, "peer_timers_uv: %ld of %ld timers fired\n", af.fired,
            af.n);
    exit(1);
  }
  return (double)(af.t1 - af.t0) / (double)af.n;
}

/* ---- re-arm ------------------------------------------------------------ */

static uv_timer_t live[LIVE];

static void never(uv_timer_t *h) {
  (void)h;
  fprintf(stderr, "peer_timers_uv: a far-off timer fired\n");
  exit(1);
}

/* 1000 s plus up to 1000 s more in whole milliseconds, as in timers.c. */
static uint64_t far_delay(void) { return 1000000 + bench_rng_below(1000000); }

static double rearm_round(long m) {
  bench_rng_seed();
  int64_t t0 = bench_cpu_now();
  for (long k = 0; k < m; k++)
    check(uv_timer_start(&live[bench_rng_below(LIVE)], never, far_delay(), 0),
          "uv_timer_start");
  int64_t t1 = bench_cpu_now();
  return (double)(t1 - t0) / (double)m;
}

static void rearm_all(uv_timer_t *kick) {
  (void)kick;
  static bench_series s = {.name = "timers_libuv_rearm"};
  bench_rng_seed();
  for (long i = 0; i < LIVE; i++)
    check(uv_timer_start(&live[i], never, far_delay(), 0), "uv_timer_start");
  rearm_round(opts->iters); /* warm-up */
  for (int r = 0; r < opts->rounds; r++)
    bench_add(&s, opts, rearm_round(opts->iters));
  for (long i = 0; i < LIVE; i++)
    uv_timer_stop(&live[i]);
  bench_report(&s, "ns");
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 3, 1000000);
  opts = &o;
  check(uv_loop_init(&loop), "uv_loop_init");
  af.n = o.iters;
  af.h = malloc((size_t)af.n * sizeof *af.h);
  if (!af.h) {
    fprintf(stderr, "peer_timers_uv: no memory\n");
    return 1;
  }
  uv_timer_t kick;
  check(uv_timer_init(&loop, &kick), "uv_timer_init");
  for (long i = 0; i < af.n; i++)
    check(uv_timer_init(&loop, &af.h[i]), "uv_timer_init");
  for (long i = 0; i < LIVE; i++)
    check(uv_timer_init(&loop, &live[i]), "uv_timer_init");

  static bench_series s = {.name = "timers_libuv_arm_fire"};
  arm_fire_round(&kick); /* warm-up */
  for (int r = 0; r < o.rounds; r++)
    bench_add(&s, &o, arm_fire_round(&kick));
  bench_report(&s, "ns");

  check(uv_timer_start(&kick, rearm_all, 0, 0), "uv_timer_start");
  check(uv_run(&loop, UV_RUN_DEFAULT), "uv_run");

  /* Every handle is closed before the loop is: uv_loop_close says EBUSY
   * otherwise. */
  uv_close((uv_handle_t *)&kick, NULL);
  for (long i = 0; i < af.n; i++)
    uv_close((uv_handle_t *)&af.h[i], NULL);
  for (long i = 0; i < LIVE; i++)
    uv_close((uv_handle_t *)&live[i], NULL);
  check(uv_run(&loop, UV_RUN_DEFAULT), "uv_run");
  check(uv_loop_close(&loop), "uv_loop_close");
  free(af.h);
  return 0;
}
