/*
 * The executor: what a job on the worker pool costs, and what a wake-up
 * from another thread costs. Every figure is the median of the timed rounds
 * (see bench.h). Unlike the other programs, this one runs on several
 * threads (the pool's, the storm's sender), so it times with two clocks:
 * the wall clock (CLOCK_MONOTONIC), for latency and rate, and the CPU time
 * of the whole process (bench_cpu_now: every thread's, the workers'
 * included), for the cost. run.sh runs it pinned to one CPU, where the
 * threads take turns (the library's own cost), and unpinned, with "_2cpu"
 * after the names, where a hand-over wakes the other CPU (run.sh says what
 * that costs on a VM).
 *
 *   run_in_thread_rtt      ns (wall) per weft_run_in_thread(trivial, ...)
 *                          made by one task, one after the other: the job
 *                          handed to a worker, the worker woken, trivial()
 *                          run, its result queued back, the loop woken
 *                          through its eventfd, the task resumed. Nothing
 *                          else runs, so the loop sleeps in the backend for
 *                          every round trip, and so (mostly) does a worker.
 *   run_in_thread_rtt_cpu  the same calls, process CPU ns per call
 *   run_in_thread_64       jobs per second (wall) with 64 in flight: 64
 *                          tasks, each looping weft_run_in_thread(trivial)
 *                          N / 64 times (N: see -n below); from the
 *                          first spawn to the last join.
 *   run_in_thread_64_cpu   the same, process CPU ns per job
 *   submit_await_64        jobs per second with 64 in flight from one task:
 *                          weft_submit 64 futures, then, in turn, weft_await
 *                          the oldest, release it and submit a new one in
 *                          its place, N jobs in all (no task per job).
 *   submit_await_64_cpu    the same, process CPU ns per job
 *   run_in_loop_rtt        ns (wall) per weft_run_in_loop(other, trivial,
 *                          ...) made by one task, one after the other, into
 *                          a loop on a second thread that has nothing else
 *                          to do: the call sent with
 *                          weft_call_soon_threadsafe, the other loop woken,
 *                          a task spawned there to run trivial(), the call
 *                          pushed back, this loop woken, the task resumed.
 *   run_in_loop_rtt_cpu    the same calls, process CPU ns per call (both
 *                          loops' threads)
 *   run_in_loop_64         calls per second (wall) with 64 in flight: 64
 *                          tasks, each looping weft_run_in_loop(other,
 *                          trivial) N / 64 times.
 *   run_in_loop_64_cpu     the same, process CPU ns per call
 *   by_hand_64             the same calls made by hand, as a program did
 *                          before weft_run_in_loop: a future, a
 *                          weft_call_soon_threadsafe to the other loop
 *                          whose callback runs trivial() and sends a
 *                          second one back to complete the future (no task
 *                          there, no cancellation). calls/s
 *   by_hand_64_cpu         the same, process CPU ns per call
 *   executor_threads       threads the pool had started by the end (the
 *                          default size: the online CPUs, at least 2), the
 *                          size the Python peers' pools are given.
 *
 *   trivial(arg) returns arg; the result is checked.
 *
 *   storm_weft             a wake-up storm: a plain pthread makes C calls
 *                          weft_call_soon_threadsafe(loop, cb, ...) as fast
 *                          as it can, while the loop (kept alive by a
 *                          weft_loop_ref the thread drops when it is done)
 *                          runs the callbacks. ns per call on the sender's
 *                          CPU clock (bench_now in that thread).
 *   storm_weft_wall        the same calls, ns per call on the wall clock of
 *                          the sender (what it waited for the queue's lock
 *                          included).
 *   storm_weft_callbacks   callbacks the loop ran per round: C, always;
 *                          every weft_call_soon_threadsafe runs its own
 *                          callback, with its own argument.
 *   storm_weft_batches     loop turns that ran some of them (counted by the
 *                          callback as changes of weft_loop_now(), read
 *                          once per turn): C over this is how many calls
 *                          one wake-up carried. Many calls between two
 *                          turns cost one eventfd write.
 *   storm_calls            C, the storm's calls per round (N * 10)
 *
 * bench/peer_executor.py does the run_in_thread figures with asyncio's
 * loop.run_in_executor and a ThreadPoolExecutor of executor_threads
 * workers, on asyncio's loop and on uvloop's; bench/peer_async_uv.c the
 * storm with libuv's uv_async_send, bare (which coalesces: its callback
 * runs once per batch and carries no data) and with a mutex-protected
 * queue of (callback, argument) pairs in front of it, which is what a
 * libuv user must write to get what weft_call_soon_threadsafe gives: that
 * second one is the like-for-like figure.
 *
 *   usage: bench_executor [-r rounds] [-n N] [-v]
 *
 * -n N (default 100,000) is the jobs per round of the 64-in-flight
 * figures; the round trips are N / 20 per round and the storm's calls
 * N * 10 (1,000,000 by default), so that a round takes some 20-100 ms
 * here. Each figure has one warm-up round, thrown away (it also starts the
 * pool's threads and grows the storm's queue); 7 timed rounds by default.
 */
#include "weft.h"

#include "bench.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>

#define INFLIGHT 64

static void die(const char *what, int rc) {
  fprintf(stderr, "executor: %s: %s\n", what, weft_strerror(rc));
  exit(1);
}

/* Wall-clock ns (monotonic). */
static int64_t wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void *trivial(void *arg) { return arg; }

/* One round's two figures. */
typedef struct two {
  double wall, cpu;
} two;

/* ---- run_in_thread_rtt ------------------------------------------------- */

static two rtt_round(long n) {
  int64_t w0 = wall_now(), c0 = bench_cpu_now();
  for (long i = 0; i < n; i++) {
    void *r = NULL;
    int rc = weft_run_in_thread(trivial, (void *)(intptr_t)(i + 1), &r);
    if (rc != 0)
      die("weft_run_in_thread", rc);
    if (r != (void *)(intptr_t)(i + 1)) {
      fprintf(stderr, "executor: weft_run_in_thread gave the wrong result\n");
      exit(1);
    }
  }
  int64_t w1 = wall_now(), c1 = bench_cpu_now();
  return (two){(double)(w1 - w0) / (double)n, (double)(c1 - c0) / (double)n};
}

/* ---- run_in_thread_64 -------------------------------------------------- */

static void *looper(void *arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; i++) {
    void *r = NULL;
    int rc = weft_run_in_thread(trivial, (void *)(intptr_t)(i + 1), &r);
    if (rc != 0)
      die("weft_run_in_thread (64 tasks)", rc);
    if (r != (void *)(intptr_t)(i + 1)) {
      fprintf(stderr, "executor: weft_run_in_thread gave the wrong result\n");
      exit(1);
    }
  }
  return NULL;
}

/* 64 tasks, each running fn(N / 64): operations per second (wall), and
 * process CPU ns per operation. */
static two spawn64(void *(*fn)(void *), long n) {
  long each = n / INFLIGHT;
  if (each < 1)
    each = 1;
  weft_task *t[INFLIGHT];
  int64_t w0 = wall_now(), c0 = bench_cpu_now();
  for (int i = 0; i < INFLIGHT; i++)
    if (!(t[i] = weft_spawn(fn, (void *)(intptr_t)each)))
      die("weft_spawn", -errno);
  for (int i = 0; i < INFLIGHT; i++) {
    int rc = weft_join(t[i], NULL);
    if (rc != 0)
      die("weft_join", rc);
  }
  int64_t w1 = wall_now(), c1 = bench_cpu_now();
  double ops = (double)each * INFLIGHT;
  return (two){ops * 1e9 / (double)(w1 - w0), (double)(c1 - c0) / ops};
}

static two tasks64_round(long n) { return spawn64(looper, n); }

/* ---- run_in_loop_rtt, run_in_loop_64 ----------------------------------- */
/* The other loop: a thread whose loop holds a reference until the end. */
static weft_loop *other;
static pthread_t other_thread;
static int other_up; /* atomic */

static void *other_main(void *arg) {
  (void)arg;
  weft_loop *l = weft_loop_new(NULL);
  if (!l)
    die("weft_loop_new", -errno);
  weft_loop_ref(l);
  other = l;
  __atomic_store_n(&other_up, 1, __ATOMIC_RELEASE);
  int rc = weft_loop_run(l);
  if (rc != 0)
    die("weft_loop_run (the other loop)", rc);
  weft_loop_free(l);
  return NULL;
}

static void other_start(void) {
  if (pthread_create(&other_thread, NULL, other_main, NULL) != 0)
    die("pthread_create", -EAGAIN);
  while (!__atomic_load_n(&other_up, __ATOMIC_ACQUIRE))
    sched_yield();
}

static void other_stop(void) {
  weft_loop_unref(other);
  pthread_join(other_thread, NULL);
}

static void call_other(long i) {
  void *r = NULL;
  int rc = weft_run_in_loop(other, trivial, (void *)(intptr_t)(i + 1), &r);
  if (rc != 0)
    die("weft_run_in_loop", rc);
  if (r != (void *)(intptr_t)(i + 1)) {
    fprintf(stderr, "executor: weft_run_in_loop gave the wrong result\n");
    exit(1);
  }
}

static two loop_rtt_round(long n) {
  int64_t w0 = wall_now(), c0 = bench_cpu_now();
  for (long i = 0; i < n; i++)
    call_other(i);
  int64_t w1 = wall_now(), c1 = bench_cpu_now();
  return (two){(double)(w1 - w0) / (double)n, (double)(c1 - c0) / (double)n};
}

static void *loop_looper(void *arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; i++)
    call_other(i);
  return NULL;
}

/* By hand: the request carries its future and its loop. */
typedef struct hand_req {
  weft_future *f;
  weft_loop *home;
  void *v;
} hand_req;

static void hand_done(void *arg) {
  hand_req *r = arg;
  weft_future_set_result(r->f, r->v);
  weft_future_release(r->f);
  weft_loop_unref(r->home);
}

static void hand_run(void *arg) {
  hand_req *r = arg;
  r->v = trivial(r->v);
  if (weft_call_soon_threadsafe(r->home, hand_done, r) != 0)
    die("weft_call_soon_threadsafe (back)", -ENOMEM);
}

static void *hand_looper(void *arg) {
  long n = (long)(intptr_t)arg;
  for (long i = 0; i < n; i++) {
    hand_req r = {weft_future_new(), weft_loop_current(),
                  (void *)(intptr_t)(i + 1)};
    if (!r.f)
      die("weft_future_new", -ENOMEM);
    weft_future_ref(r.f); /* the answer's */
    weft_loop_ref(r.home);
    int rc = weft_call_soon_threadsafe(other, hand_run, &r);
    if (rc != 0)
      die("weft_call_soon_threadsafe", rc);
    void *v = NULL;
    if ((rc = weft_await(r.f, &v)) != 0)
      die("weft_await", rc);
    if (v != (void *)(intptr_t)(i + 1)) {
      fprintf(stderr, "executor: the hand-made call gave the wrong result\n");
      exit(1);
    }
    weft_future_release(r.f);
  }
  return NULL;
}

static two loop64_round(long n) { return spawn64(loop_looper, n); }

static two hand64_round(long n) { return spawn64(hand_looper, n); }

/* ---- submit_await_64 --------------------------------------------------- */

static weft_future *submit_one(long i) {
  weft_future *f = weft_submit(trivial, (void *)(intptr_t)(i + 1));
  if (!f)
    die("weft_submit", -errno);
  return f;
}

static void await_one(weft_future *f, long i) {
  void *r = NULL;
  int rc = weft_await(f, &r);
  if (rc != 0)
    die("weft_await", rc);
  if (r != (void *)(intptr_t)(i + 1)) {
    fprintf(stderr, "executor: weft_submit's future has the wrong result\n");
    exit(1);
  }
  weft_future_release(f);
}

static two submit64_round(long n) {
  if (n < INFLIGHT)
    n = INFLIGHT;
  weft_future *f[INFLIGHT];
  int64_t w0 = wall_now(), c0 = bench_cpu_now();
  for (long i = 0; i < INFLIGHT; i++)
    f[i] = submit_one(i);
  for (long i = INFLIGHT; i < n; i++) {
    await_one(f[i % INFLIGHT], i - INFLIGHT);
    f[i % INFLIGHT] = submit_one(i);
  }
  for (long i = n; i < n + INFLIGHT; i++)
    await_one(f[i % INFLIGHT], i - INFLIGHT);
  int64_t w1 = wall_now(), c1 = bench_cpu_now();
  return (two){(double)n * 1e9 / (double)(w1 - w0),
               (double)(c1 - c0) / (double)n};
}

/* ---- storm ------------------------------------------------------------- */

static struct {
  weft_loop *loop;
  weft_future *done; /* completed by the sender's last callback */
  long n;            /* calls to make */
  long ran;          /* callbacks run (loop thread only) */
  long batches;      /* turns that ran some (loop thread only) */
  int64_t turn;      /* weft_loop_now() of the last callback's turn */
  int64_t cpu, wall; /* the sender's time for the n calls */
} storm;

static void storm_cb(void *arg) {
  if ((long)(intptr_t)arg != storm.ran + 1) {
    fprintf(stderr, "executor: storm callbacks out of order\n");
    exit(1);
  }
  storm.ran++;
  int64_t now = weft_loop_now();
  if (now != storm.turn) {
    storm.turn = now;
    storm.batches++;
  }
}

static void storm_done(void *arg) {
  (void)arg;
  int rc = weft_future_set_result(storm.done, NULL);
  if (rc != 0)
    die("weft_future_set_result", rc);
}

static void *storm_sender(void *arg) {
  (void)arg;
  int64_t w0 = wall_now(), c0 = bench_now();
  for (long i = 0; i < storm.n; i++) {
    int rc = weft_call_soon_threadsafe(storm.loop, storm_cb,
                                       (void *)(intptr_t)(i + 1));
    if (rc != 0)
      die("weft_call_soon_threadsafe", rc);
  }
  int64_t w1 = wall_now(), c1 = bench_now();
  storm.wall = w1 - w0;
  storm.cpu = c1 - c0;
  /* Callbacks from one thread run in order: this one runs after all. */
  int rc = weft_call_soon_threadsafe(storm.loop, storm_done, NULL);
  if (rc != 0)
    die("weft_call_soon_threadsafe (done)", rc);
  weft_loop_unref(storm.loop);
  return NULL;
}

typedef struct storm_fig {
  double cpu, wall, ran, batches;
} storm_fig;

static storm_fig storm_round(long n) {
  storm.loop = weft_loop_current();
  storm.n = n;
  storm.ran = storm.batches = 0;
  storm.turn = -1;
  if (!(storm.done = weft_future_new()))
    die("weft_future_new", -errno);
  weft_loop_ref(storm.loop); /* the sender drops it when it is done */
  pthread_t th;
  int rc = pthread_create(&th, NULL, storm_sender, NULL);
  if (rc != 0)
    die("pthread_create", -rc);
  if ((rc = weft_await(storm.done, NULL)) != 0)
    die("weft_await (storm)", rc);
  weft_future_release(storm.done);
  pthread_join(th, NULL); /* it has sent its last; it is returning */
  if (storm.ran != n) {
    fprintf(stderr, "executor: %ld of %ld storm callbacks ran\n", storm.ran, n);
    exit(1);
  }
  return (storm_fig){(double)storm.cpu / (double)n,
                     (double)storm.wall / (double)n, (double)storm.ran,
                     (double)storm.batches};
}

/* ---- main -------------------------------------------------------------- */

typedef struct figure {
  const char *name;
  two (*round)(long n);
  long mul, div; /* operations per round: N * mul / div */
  const char *wall_unit;
} figure;

static int bench_main(void *arg) {
  const bench_opts *o = arg;
  static const figure figs[] = {
      {"run_in_thread_rtt", rtt_round, 1, 20, "ns"},
      {"run_in_thread_64", tasks64_round, 1, 1, "jobs/s"},
      {"submit_await_64", submit64_round, 1, 1, "jobs/s"},
      {"run_in_loop_rtt", loop_rtt_round, 1, 20, "ns"},
      {"run_in_loop_64", loop64_round, 1, 1, "calls/s"},
      {"by_hand_64", hand64_round, 1, 1, "calls/s"},
  };
  enum { NFIG = sizeof figs / sizeof figs[0] };
  other_start();
  static bench_series wall[NFIG], cpu[NFIG];
  static char cpu_name[NFIG][64];
  for (int f = 0; f < NFIG; f++) {
    long n = o->iters * figs[f].mul / figs[f].div;
    if (n < 1)
      n = 1;
    wall[f].name = figs[f].name;
    snprintf(cpu_name[f], sizeof cpu_name[f], "%s_cpu", figs[f].name);
    cpu[f].name = cpu_name[f];
    figs[f].round(n); /* warm-up */
    for (int r = 0; r < o->rounds; r++) {
      two x = figs[f].round(n);
      bench_add(&wall[f], o, x.wall);
      bench_add(&cpu[f], o, x.cpu);
    }
    bench_report(&wall[f], figs[f].wall_unit);
    bench_report(&cpu[f], "ns");
  }
  other_stop();
  bench_print("executor_threads", weft_executor_threads(weft_loop_current()),
              "threads");

  static bench_series s_cpu = {.name = "storm_weft"},
                      s_wall = {.name = "storm_weft_wall"},
                      s_ran = {.name = "storm_weft_callbacks"},
                      s_batch = {.name = "storm_weft_batches"};
  long n = o->iters * 10;
  storm_round(n); /* warm-up: grows the queue's arrays */
  for (int r = 0; r < o->rounds; r++) {
    storm_fig x = storm_round(n);
    bench_add(&s_cpu, o, x.cpu);
    bench_add(&s_wall, o, x.wall);
    bench_add(&s_ran, o, x.ran);
    bench_add(&s_batch, o, x.batches);
  }
  bench_report(&s_cpu, "ns");
  bench_report(&s_wall, "ns");
  bench_report(&s_ran, "callbacks");
  bench_report(&s_batch, "batches");
  bench_print("storm_calls", (double)n, "calls");
  return 0;
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 100000);
  int rc = weft_main(bench_main, &o);
  if (rc != 0) {
    fprintf(stderr, "executor: weft_main: %s\n", weft_strerror(rc));
    return 1;
  }
  return 0;
}
