/*
 * Timers: what it costs to arm them, fire them and move them.
 *
 *   timers_weft_arm_fire  ns per timer: one callback arms N timers
 *                         (weft_call_later) with random 0-999 ms delays, and
 *                         the loop runs until every one has fired; the time
 *                         from the first arming to the last firing, over N
 *   timers_weft_rearm     ns per re-arm: with L timers armed far in the
 *                         future, M times one of them picked at random is
 *                         moved to a new random deadline with
 *                         weft_timer_rearm (one sift, as libev's
 *                         ev_timer_again)
 *   timers_weft_cancel_arm the same with weft_timer_cancel, then
 *                         weft_call_later (two heap operations)
 *
 *   usage: bench_timers [-r rounds] [-n N] [-v]
 *
 * N (-n) is both the timers of arm_fire and the re-arms M of a rearm round
 * (1,000,000); L is 100,000. peer_timers_ev.c and peer_timers_uv.c do the
 * same with libev and libuv: the same workloads, the same random numbers
 * (bench_rng_below), the same clock (bench_cpu_now), the same output.
 *
 * The clock is CPU time, as bench.h explains, but of the process
 * (CLOCK_PROCESS_CPUTIME_ID), not the thread: were a library to do timer
 * work on a thread of its own, it would be counted. None of the three does.
 * An arm_fire round takes about a second of real time, the deadlines being
 * real; the loop sleeps through most of it, and sleeping costs no CPU time.
 * The ~1000 wake-ups (one per distinct millisecond) are in the figure, for
 * all three programs alike.
 *
 * Everything happens inside a running loop, from a callback: the loop's
 * clock is then read once per turn, not once per arming (outside a running
 * loop weft_call_later reads weft_now() every time). libev and libuv cache
 * their clock the same way.
 *
 * Each round is the same work: the generator is re-seeded at its start. A
 * warm-up round comes first (it also makes the loop allocate its timer
 * records and heap once, as a long-running program's loop would have), then
 * the timed rounds; each figure is their median (see bench.h). The default
 * is 3 rounds: arm_fire rounds are slow.
 */
#include "weft.h"

#include "bench.h"

#define LIVE 100000 /* timers armed during the rearm rounds */

/* ---- arm and fire ------------------------------------------------------ */

static struct {
  long n;         /* timers to arm */
  long fired;     /* how many have fired so far */
  int64_t t0, t1; /* first arming, last firing */
} af;

static void on_fire(void *arg) {
  (void)arg;
  if (++af.fired == af.n)
    af.t1 = bench_cpu_now();
}

static void arm_all(void *arg) {
  (void)arg;
  bench_rng_seed();
  af.t0 = bench_cpu_now();
  for (long i = 0; i < af.n; i++)
    if (!weft_call_later(WEFT_MS(bench_rng_below(1000)), on_fire, NULL)) {
      perror("timers: weft_call_later");
      exit(1);
    }
}

/* One round on `loop`: returns ns per timer. */
static double arm_fire_round(weft_loop *loop, long n) {
  af.n = n;
  af.fired = 0;
  if (weft_call_soon(arm_all, NULL) != 0) {
    fprintf(stderr, "timers: weft_call_soon failed\n");
    exit(1);
  }
  int rc = weft_loop_run(loop);
  if (rc != 0 || af.fired != n) {
    fprintf(stderr, "timers: %ld of %ld timers fired (weft_loop_run: %d)\n",
            af.fired, n, rc);
    exit(1);
  }
  return (double)(af.t1 - af.t0) / (double)n;
}

/* ---- re-arm ------------------------------------------------------------ */

static weft_timer *live[LIVE];

static void never(void *arg) {
  (void)arg;
  fprintf(stderr, "timers: a far-off timer fired\n");
  exit(1);
}

/* 1000 s, plus up to 1000 s more in whole milliseconds: far enough never to
 * fire, spread enough that few deadlines tie. */
static int64_t far_delay(void) {
  return WEFT_SEC(1000) + WEFT_MS(bench_rng_below(1000000));
}

static void arm(long i) {
  live[i] = weft_call_later(far_delay(), never, NULL);
  if (!live[i]) {
    perror("timers: weft_call_later");
    exit(1);
  }
}

/* One round: m re-arms, with weft_timer_rearm (as libev's ev_timer_again
 * and libuv's uv_timer_start on an active timer: one sift) or, if
 * `cancel_arm`, with a cancel and a new timer (two); ns per re-arm. */
static double rearm_round(long m, int cancel_arm) {
  bench_rng_seed();
  int64_t t0 = bench_cpu_now();
  for (long k = 0; k < m; k++) {
    uint32_t i = bench_rng_below(LIVE);
    if (!cancel_arm) {
      if (weft_timer_rearm(live[i], far_delay()) != 0) {
        fprintf(stderr, "timers: weft_timer_rearm failed\n");
        exit(1);
      }
      continue;
    }
    if (weft_timer_cancel(live[i]) != 0) {
      fprintf(stderr, "timers: weft_timer_cancel failed\n");
      exit(1);
    }
    arm(i);
  }
  int64_t t1 = bench_cpu_now();
  return (double)(t1 - t0) / (double)m;
}

static const bench_opts *opts;

static void rearm_all(void *arg) {
  (void)arg;
  static bench_series s = {.name = "timers_weft_rearm"};
  static bench_series c = {.name = "timers_weft_cancel_arm"};
  bench_rng_seed();
  for (long i = 0; i < LIVE; i++)
    arm(i);
  rearm_round(opts->iters, 0); /* warm-up */
  for (int r = 0; r < opts->rounds; r++)
    bench_add(&s, opts, rearm_round(opts->iters, 0));
  for (int r = 0; r < opts->rounds; r++)
    bench_add(&c, opts, rearm_round(opts->iters, 1));
  for (long i = 0; i < LIVE; i++)
    if (weft_timer_cancel(live[i]) != 0) {
      fprintf(stderr, "timers: weft_timer_cancel failed\n");
      exit(1);
    }
  bench_report(&s, "ns");
  bench_report(&c, "ns");
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 3, 1000000);
  opts = &o;
  weft_loop *loop = weft_loop_new(NULL);
  if (!loop) {
    perror("timers: weft_loop_new");
    return 1;
  }

  static bench_series s = {.name = "timers_weft_arm_fire"};
  arm_fire_round(loop, o.iters); /* warm-up */
  for (int r = 0; r < o.rounds; r++)
    bench_add(&s, &o, arm_fire_round(loop, o.iters));
  bench_report(&s, "ns");

  /* The rearm rounds run on the loop that has just run arm_fire, records
   * and all: what a long-running program's loop would have behind it. */
  if (weft_call_soon(rearm_all, NULL) != 0 || weft_loop_run(loop) != 0) {
    fprintf(stderr, "timers: the rearm rounds did not run\n");
    return 1;
  }
  weft_loop_free(loop);
  return 0;
}
