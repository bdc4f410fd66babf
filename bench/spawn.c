/*
 * The cost of a short-lived task with the stack pool warm.
 *
 *   spawn_join  ns per `t = weft_spawn(fn, NULL); weft_join(t, NULL);` from
 *               inside weft_main, where fn returns at once. One iteration
 *               is the whole life of a task: a record and a stack from the
 *               pools, the first switch into it, its end, the wake-up of
 *               the joiner and the record going back.
 *
 *   spawn_join_batch  ns per task when the main task spawns BATCH tasks,
 *               then joins them all: the children run back to back (one
 *               switch each from one to the next) instead of one switch
 *               there and one back per task, so the difference from
 *               spawn_join is what the ping-pong of switches costs.
 *
 *   spawn_join_burst  ns per task when the main task spawns BURST (1,000)
 *               tasks that each touch two pages of stack, then joins them
 *               all, burst after burst: more than the 256 stacks the pool
 *               keeps at least, so this is what keeping a recent burst's
 *               stacks warm is for (docs/stacks.md; 14-22 µs a task when
 *               each burst faulted its stacks in again).
 *
 * The warm-up round fills the record slab and the stack pool, so the timed
 * rounds reuse warm stacks and touch no fresh page. Each figure is the
 * median of the timed rounds (see bench.h).
 */
#include "weft.h"

#include "bench.h"

static void *nothing(void *arg) { return arg; }

/* One round: n spawn + join; returns ns per iteration. */
static double spawn_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_task *t = weft_spawn(nothing, NULL);
    if (!t || weft_join(t, NULL) != 0) {
      perror("spawn: weft_spawn / weft_join");
      exit(1);
    }
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

/* Fewer than the pool keeps warm at least (256 stacks). */
#define BATCH 64
/* More than that: the pool keeps them warm because such bursts recur. */
#define BURST 1000

/* Two pages of frame: the top one, which the descriptor shares, and one
 * more. */
static void *two_pages(void *arg) {
  volatile char frame[6000];
  __asm__ volatile("" : : "r"(frame) : "memory"); /* kept whole (clang) */
  frame[0] = 1;
  frame[sizeof frame - 1] = 1;
  return arg;
}

/* One round: n tasks running fn, spawned `size` (at most BURST) at a time
 * and then joined; returns ns per task. */
static double batch_round(long n, int size, void *(*fn)(void *)) {
  static weft_task *t[BURST];
  long batches = (n + size - 1) / size;
  int64_t t0 = bench_now();
  for (long b = 0; b < batches; b++) {
    for (int i = 0; i < size; i++)
      if (!(t[i] = weft_spawn(fn, NULL))) {
        perror("spawn: weft_spawn");
        exit(1);
      }
    for (int i = 0; i < size; i++)
      if (weft_join(t[i], NULL) != 0) {
        perror("spawn: weft_join");
        exit(1);
      }
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)(batches * size);
}

static int spawn_main(void *p) {
  const bench_opts *o = p;
  static bench_series s = {.name = "spawn_join"};
  static bench_series sb = {.name = "spawn_join_batch"};
  spawn_round(o->iters); /* warm-up: the pools and the caches */
  for (int r = 0; r < o->rounds; r++)
    bench_add(&s, o, spawn_round(o->iters));
  batch_round(o->iters, BATCH, nothing);
  for (int r = 0; r < o->rounds; r++)
    bench_add(&sb, o, batch_round(o->iters, BATCH, nothing));
  static bench_series sc = {.name = "spawn_join_burst"};
  batch_round(o->iters / 10, BURST, two_pages);
  for (int r = 0; r < o->rounds; r++)
    bench_add(&sc, o, batch_round(o->iters / 10, BURST, two_pages));
  bench_report(&s, "ns");
  bench_report(&sb, "ns");
  bench_report(&sc, "ns");
  return 0;
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 500000);
  int rc = weft_main(spawn_main, &o);
  if (rc != 0) {
    fprintf(stderr, "spawn: weft_main: %s\n", weft_strerror(rc));
    return 1;
  }
  return 0;
}
