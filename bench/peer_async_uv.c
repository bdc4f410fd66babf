/*
 * Peer of executor.c's wake-up storm: libuv's uv_async_send, the way a
 * libuv program wakes its loop from another thread. Measured as executor.c
 * measures weft_call_soon_threadsafe: a plain pthread makes C calls as fast
 * as it can while the loop runs (uv_run, kept alive by the async handle
 * until the thread is done); ns per call on the sender's CPU clock
 * (bench_now in that thread) and on its wall clock.
 *
 *   storm_libuv_async            uv_async_send(&async) alone. libuv
 *                                coalesces: the handle's callback runs once
 *                                for any number of sends since it last ran,
 *                                and carries no data. So the loop runs far
 *                                fewer callbacks than there were calls, and
 *                                each call is mostly an atomic exchange on
 *                                a flag that is already set, with a write
 *                                to the loop's eventfd when it was not.
 *   storm_libuv_async_wall       the same, wall ns per call on the sender
 *   storm_libuv_async_callbacks  async callbacks the loop ran per round
 *                                (the coalesced wake-ups; not C)
 *   storm_libuv_async_batches    the same count: with the bare handle a
 *                                callback is a batch
 *   storm_libuv_queue            the like-for-like figure: what a libuv
 *                                user writes to get weft_call_soon_
 *                                threadsafe's behaviour, one callback with
 *                                its argument run per call: lock a mutex,
 *                                append (callback, argument) to a growable
 *                                array, unlock, uv_async_send. The async
 *                                callback swaps the array for an empty one
 *                                under the lock and runs every entry, as
 *                                weft's loop does (src/loop.c).
 *   storm_libuv_queue_wall       the same, wall ns per call on the sender
 *   storm_libuv_queue_callbacks  entries run per round: C
 *   storm_libuv_queue_batches    async callbacks that ran them
 *   storm_libuv_calls            C, the calls per round (N * 10)
 *
 * weft's figures are different in kind from storm_libuv_async: every
 * weft_call_soon_threadsafe queues its own callback and argument, which
 * the loop runs; the eventfd is written once per batch, as libuv's is.
 *
 *   usage: bench_peer_async_uv [-r rounds] [-n N] [-v]
 *
 * -n N (default 100,000) as executor.c's: the storm makes N * 10 calls
 * per round. One warm-up round, 7 timed rounds by default.
 */
#include "bench.h"

#include <pthread.h>
#include <uv.h>

static uv_loop_t loop;

static void check(int rc, const char *what) {
  if (rc != 0) {
    fprintf(stderr, "peer_async_uv: %s: %s\n", what, uv_strerror(rc));
    exit(1);
  }
}

static int64_t wall_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

typedef struct fig {
  double cpu, wall, ran, batches;
} fig;

static struct {
  uv_async_t async;
  long n;
  long ran, batches; /* loop thread only */
  int done;          /* set by the sender (atomic) after its n calls */
  int64_t cpu, wall; /* the sender's time for the n calls */
} st;

/* ---- bare uv_async_send ------------------------------------------------ */

static void bare_cb(uv_async_t *h) {
  st.ran++;
  st.batches++;
  /* Every send the sender made happened before it set done; and libuv
   * runs the callback at least once after a send returns, so the send
   * made after setting done is seen here. */
  if (__atomic_load_n(&st.done, __ATOMIC_ACQUIRE))
    uv_close((uv_handle_t *)h, NULL);
}

static void *bare_sender(void *arg) {
  (void)arg;
  int64_t w0 = wall_now(), c0 = bench_now();
  for (long i = 0; i < st.n; i++)
    check(uv_async_send(&st.async), "uv_async_send");
  int64_t w1 = wall_now(), c1 = bench_now();
  st.wall = w1 - w0;
  st.cpu = c1 - c0;
  __atomic_store_n(&st.done, 1, __ATOMIC_RELEASE);
  check(uv_async_send(&st.async), "uv_async_send (done)");
  return NULL;
}

/* ---- a queue in front of uv_async_send --------------------------------- */

typedef struct item {
  void (*cb)(void *);
  void *arg;
} item;

static struct {
  pthread_mutex_t lock;
  item *q, *run; /* queued; being run (swapped, as weft's loop does) */
  size_t len, cap, run_cap;
} qu = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void queue_push(void (*cb)(void *), void *arg) {
  pthread_mutex_lock(&qu.lock);
  if (qu.len == qu.cap) {
    size_t cap = qu.cap ? qu.cap * 2 : 64;
    item *v = realloc(qu.q, cap * sizeof *v);
    if (!v) {
      fprintf(stderr, "peer_async_uv: out of memory\n");
      exit(1);
    }
    qu.q = v;
    qu.cap = cap;
  }
  qu.q[qu.len++] = (item){cb, arg};
  pthread_mutex_unlock(&qu.lock);
  check(uv_async_send(&st.async), "uv_async_send");
}

static void queue_cb(uv_async_t *h) {
  (void)h;
  pthread_mutex_lock(&qu.lock);
  item *run = qu.q;
  size_t n = qu.len, cap = qu.cap;
  qu.q = qu.run;
  qu.cap = qu.run_cap;
  qu.len = 0;
  qu.run = run;
  qu.run_cap = cap;
  pthread_mutex_unlock(&qu.lock);
  if (n)
    st.batches++;
  for (size_t i = 0; i < n; i++)
    run[i].cb(run[i].arg);
}

static void item_cb(void *arg) {
  if ((long)(intptr_t)arg != st.ran + 1) {
    fprintf(stderr, "peer_async_uv: queued callbacks out of order\n");
    exit(1);
  }
  st.ran++;
}

static void done_cb(void *arg) {
  (void)arg;
  uv_close((uv_handle_t *)&st.async, NULL);
}

static void *queue_sender(void *arg) {
  (void)arg;
  int64_t w0 = wall_now(), c0 = bench_now();
  for (long i = 0; i < st.n; i++)
    queue_push(item_cb, (void *)(intptr_t)(i + 1));
  int64_t w1 = wall_now(), c1 = bench_now();
  st.wall = w1 - w0;
  st.cpu = c1 - c0;
  queue_push(done_cb, NULL); /* runs after all the others */
  return NULL;
}

/* ---- rounds ------------------------------------------------------------ */

static fig round_of(uv_async_cb cb, void *(*sender)(void *), long n,
                    int every) {
  st.n = n;
  st.ran = st.batches = 0;
  st.done = 0;
  check(uv_async_init(&loop, &st.async, cb), "uv_async_init");
  pthread_t th;
  int rc = pthread_create(&th, NULL, sender, NULL);
  if (rc != 0) {
    fprintf(stderr, "peer_async_uv: pthread_create failed\n");
    exit(1);
  }
  check(uv_run(&loop, UV_RUN_DEFAULT), "uv_run");
  pthread_join(th, NULL);
  if (every && st.ran != n) {
    fprintf(stderr, "peer_async_uv: %ld of %ld callbacks ran\n", st.ran, n);
    exit(1);
  }
  return (fig){(double)st.cpu / (double)n, (double)st.wall / (double)n,
               (double)st.ran, (double)st.batches};
}

static void measure(const char *name, uv_async_cb cb, void *(*sender)(void *),
                    long n, int every, const bench_opts *o) {
  static char names[4][64];
  static bench_series s[4];
  static const char *suffix[4] = {"", "_wall", "_callbacks", "_batches"};
  for (int i = 0; i < 4; i++) {
    snprintf(names[i], sizeof names[i], "%s%s", name, suffix[i]);
    s[i].name = names[i];
    s[i].n = 0;
  }
  round_of(cb, sender, n, every); /* warm-up */
  for (int r = 0; r < o->rounds; r++) {
    fig x = round_of(cb, sender, n, every);
    bench_add(&s[0], o, x.cpu);
    bench_add(&s[1], o, x.wall);
    bench_add(&s[2], o, x.ran);
    bench_add(&s[3], o, x.batches);
  }
  bench_report(&s[0], "ns");
  bench_report(&s[1], "ns");
  bench_report(&s[2], "callbacks");
  bench_report(&s[3], "batches");
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 100000);
  check(uv_loop_init(&loop), "uv_loop_init");
  long n = o.iters * 10;
  measure("storm_libuv_async", bare_cb, bare_sender, n, 0, &o);
  measure("storm_libuv_queue", queue_cb, queue_sender, n, 1, &o);
  bench_print("storm_libuv_calls", (double)n, "calls");
  check(uv_loop_close(&loop), "uv_loop_close");
  free(qu.q);
  free(qu.run);
  return 0;
}
