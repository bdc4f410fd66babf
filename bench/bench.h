/*
 * What the benchmark programs share: a clock, the median of a few rounds,
 * the command line and the output format.
 *
 * Every figure is one line on stdout, "name value unit", so that run.sh and
 * anything downstream can read it with a plain split. Progress and notes go
 * to stderr. A micro-benchmark runs a warm-up round that is thrown away,
 * then `rounds` timed rounds, and reports their median: on a shared, noisy
 * VM the median shrugs off the round that another process interrupted,
 * where a mean would not.
 *
 * The peers written in C and C++ include this header too, so every program
 * measures and reports the same way.
 */
#ifndef WEFT_BENCH_H
#define WEFT_BENCH_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Nanoseconds of CPU time this thread has used (user and system).
 *
 * Not wall time: on a 2-CPU VM shared with builds and test runs, a process
 * pinned to one CPU still shares it, and wall time would charge it for the
 * slices other processes ran in. Every program measured here runs on one
 * thread, so its CPU time is the cost we mean; page faults and system
 * calls (ucontext's sigprocmask) are in it. The call is a system call, so
 * it is read only around whole rounds. */
static inline int64_t bench_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int bench_cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts v in place); the mean of the middle two when
 * n is even. */
static inline double bench_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, bench_cmp);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* One figure. Times get one decimal, per-task fault counts two, other
 * counts and bytes none. */
static inline void bench_print(const char *name, double value,
                               const char *unit) {
  if (strcmp(unit, "ns") == 0)
    printf("%s %.1f %s\n", name, value, unit);
  else if (strcmp(unit, "faults") == 0)
    printf("%s %.2f %s\n", name, value, unit);
  else
    printf("%s %.0f %s\n", name, value, unit);
  fflush(stdout);
}

/* The options every micro-benchmark takes:
 *   -r ROUNDS  timed rounds (the median is reported); default `rounds`
 *   -n ITERS   iterations per round; default `iters`
 *   -v         print every round's figure to stderr
 * Exits with a usage message on anything else (on stdout and 0 for -h and
 * --help). */
typedef struct bench_opts {
  int rounds;
  long iters;
  int verbose;
} bench_opts;

static inline bench_opts bench_parse(int argc, char **argv, int rounds,
                                     long iters) {
  bench_opts o = {rounds, iters, 0};
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
    printf("usage: %s [-r rounds] [-n iterations] [-v]\n", argv[0]);
    exit(0);
  }
  int c;
  opterr = 0; /* one usage line says it all */
  while ((c = getopt(argc, argv, "r:n:v")) != -1) {
    switch (c) {
    case 'r': o.rounds = atoi(optarg); break;
    case 'n': o.iters = atol(optarg); break;
    case 'v': o.verbose = 1; break;
    default: o.rounds = 0; break;
    }
  }
  if (o.rounds < 1 || o.rounds > 1000 || o.iters < 1 || optind != argc) {
    fprintf(stderr, "usage: %s [-r rounds] [-n iterations] [-v]\n", argv[0]);
    exit(2);
  }
  return o;
}

/* Keeps the rounds of one figure. */
#define BENCH_MAX_ROUNDS 1000

typedef struct bench_series {
  const char *name;
  double v[BENCH_MAX_ROUNDS];
  int n;
} bench_series;

static inline void bench_add(bench_series *s, const bench_opts *o, double x) {
  if (o->verbose)
    fprintf(stderr, "%s round %d: %.2f\n", s->name, s->n + 1, x);
  if (s->n < BENCH_MAX_ROUNDS)
    s->v[s->n++] = x;
}

static inline void bench_report(bench_series *s, const char *unit) {
  bench_print(s->name, bench_median(s->v, s->n), unit);
}

/* CPU time of the whole process, in ns: for benchmarks whose library might
 * do work on a thread of its own (the timers), where bench_now's thread
 * clock would miss it. */
static inline int64_t bench_cpu_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* xorshift64 (Marsaglia) with a fixed seed, so that weft and its peers draw
 * the same numbers in the same order. Fast and reproducible, not good. */
static inline uint64_t *bench_rng_state(void) {
  static uint64_t state;
  return &state;
}
static inline void bench_rng_seed(void) {
  *bench_rng_state() = 0x9e3779b97f4a7c15ULL;
}
static inline uint32_t bench_rng_below(uint32_t n) {
  uint64_t x = *bench_rng_state();
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  *bench_rng_state() = x;
  return (uint32_t)((x >> 32) % n);
}

#endif
