/*
 * Futures, cancellation and cancel scopes: what each costs per operation.
 * Every figure is ns per operation, the median of the timed rounds (see
 * bench.h), measured inside weft_main's task on the thread's CPU clock.
 *
 *   future_set_await     f = weft_future_new(); weft_future_set_result(f,
 *                        x); weft_await(f, &v); weft_future_release(f): a
 *                        future that is done before it is awaited, so the
 *                        await does not suspend (it is still a
 *                        cancellation point).
 *   future_await_wake    a round trip between two tasks through futures:
 *                        the client makes a reply future, completes the
 *                        server's pending request future with it and
 *                        awaits the reply; the server wakes, completes the
 *                        reply and awaits its next request future. Per
 *                        round trip: two futures made and released, two
 *                        set_result, two awaits that really suspend, two
 *                        wake-ups and switches.
 *   cancel_recv          t = weft_spawn(f) where f calls weft_recv on one
 *                        end of a socketpair on which nothing is ever sent;
 *                        weft_yield() lets t run and block; then
 *                        weft_cancel(t) and weft_join(t), which returns
 *                        t's -ECANCELED. Per cancellation, the whole life
 *                        of the task included: spawn, first switch, the
 *                        recv that finds nothing and parks, the cancel,
 *                        the wake, the join.
 *   recv_wake            the same, but t is woken by one byte sent (a plain
 *                        send(2)) on the other end, and its recv returns 1:
 *                        the data path, for comparison with cancel_recv.
 *                        It has a backend wait (epoll_wait) in it that the
 *                        cancel does not need, and two more system calls.
 *                        (cancel_recv makes no system call at all once
 *                        warm: epoll's registration of the fd stays, and
 *                        weft knows from it that the fd is not readable,
 *                        so the recv parks without trying recv(2); and the
 *                        loop polls the backend only in a turn that has an
 *                        fd waiter, the one waiter here being the task
 *                        being cancelled.)
 *   cancel_recv_deliver  the cancel alone: BATCH tasks, each blocked in
 *                        weft_recv on a socketpair of its own, are spawned
 *                        and parked outside the clock; then weft_cancel(t)
 *                        + weft_join(t) for each, one after the other, is
 *                        timed: the cancel, the blocked task resuming with
 *                        -ECANCELED and returning, the joiner waking.
 *                        With the batch's other tasks still waiting on
 *                        their fds, every turn of the loop in it polls the
 *                        backend (epoll_wait, timeout 0), which
 *                        cancel_recv's turns skip: that is why this part
 *                        alone can cost more than the whole of cancel_recv.
 *   scope_deadline       weft_scope_enter(&s, weft_now() + WEFT_SEC(1));
 *                        weft_scope_exit(&s), nothing in between; the
 *                        weft_now() (clock_gettime, in the vDSO) included.
 *   scope_deadline_yield the same with one weft_yield() inside
 *   yield                weft_yield() alone, the baseline for the line
 *                        above: the scope's own cost is the difference.
 *                        Both yields are made by a task alone on the loop,
 *                        with no fd waited on: its turns then make no
 *                        system call (asyncio's and uvloop's poll the
 *                        selector on every turn).
 *
 * bench/peer_future.py does the same with Python's asyncio, on asyncio's
 * loop and on uvloop's (its header says what stands for what).
 *
 *   usage: bench_future [-r rounds] [-n N] [-v]
 *
 * -n N (default 2,000,000) is the operations per round of the cheapest
 * figures (future_set_await, scope_deadline); the others run a fixed
 * fraction of N (see the table in bench_main), chosen so that a round takes
 * roughly 50-100 ms here. Each figure has one warm-up round, thrown away:
 * it fills the task record slab and the stack pool, which the timed rounds
 * then reuse. 7 rounds by default.
 */
#include "weft.h"

#include "bench.h"

#include <errno.h>
#include <stdint.h>
#include <sys/socket.h>

static void die(const char *what, int rc) {
  fprintf(stderr, "future: %s: %s\n", what, weft_strerror(rc));
  exit(1);
}

/* ---- future_set_await --------------------------------------------------- */

static double set_await_round(long n) {
  void *v = NULL;
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_future *f = weft_future_new();
    if (!f)
      die("weft_future_new", -errno);
    int rc = weft_future_set_result(f, (void *)(intptr_t)i);
    if (rc != 0)
      die("weft_future_set_result", rc);
    if ((rc = weft_await(f, &v)) != 0)
      die("weft_await", rc);
    weft_future_release(f);
  }
  int64_t t1 = bench_now();
  if (v != (void *)(intptr_t)(n - 1)) {
    fprintf(stderr, "future: weft_await gave the wrong value\n");
    exit(1);
  }
  return (double)(t1 - t0) / (double)n;
}

/* ---- future_await_wake -------------------------------------------------- */

static weft_future *request; /* the server's pending request future */

/* Awaits requests; each carries the future to complete as the reply. A
 * NULL request ends it. */
static void *server(void *arg) {
  (void)arg;
  for (;;) {
    weft_future *req = weft_future_new();
    if (!req)
      die("weft_future_new", -errno);
    request = req;
    void *reply = NULL;
    int rc = weft_await(req, &reply);
    if (rc != 0)
      die("weft_await (server)", rc);
    weft_future_release(req);
    if (!reply)
      return NULL;
    if ((rc = weft_future_set_result(reply, reply)) != 0)
      die("weft_future_set_result (server)", rc);
  }
}

static double await_wake_round(long n) {
  request = NULL;
  weft_task *srv = weft_spawn(server, NULL);
  if (!srv)
    die("weft_spawn", -errno);
  weft_yield(); /* the server makes its first request and waits */
  if (!request) {
    fprintf(stderr, "future: the server did not run\n");
    exit(1);
  }
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_future *reply = weft_future_new();
    if (!reply)
      die("weft_future_new", -errno);
    int rc = weft_future_set_result(request, reply);
    if (rc != 0)
      die("weft_future_set_result", rc);
    void *v = NULL;
    if ((rc = weft_await(reply, &v)) != 0 || v != reply)
      die("weft_await (client)", rc);
    weft_future_release(reply);
  }
  int64_t t1 = bench_now();
  int rc = weft_future_set_result(request, NULL);
  if (rc != 0 || (rc = weft_join(srv, NULL)) != 0)
    die("ending the server", rc);
  return (double)(t1 - t0) / (double)n;
}

/* ---- cancel_recv, recv_wake, cancel_recv_deliver ------------------------ */

/* Tasks blocked at once in a cancel_recv_deliver batch: fewer than the
 * stack pool keeps warm (256, see spawn.c), each with its own socketpair. */
#define BATCH 64

static int pair[BATCH][2]; /* [i][0]: the blocked task's end */

static void *receiver(void *arg) {
  int fd = *(const int *)arg;
  char c;
  return (void *)(intptr_t)weft_recv(fd, &c, 1, 0);
}

/* Spawns a receiver on pair[i][0] and lets it block. */
static weft_task *spawn_blocked(int i) {
  weft_task *t = weft_spawn(receiver, &pair[i][0]);
  if (!t)
    die("weft_spawn", -errno);
  int rc = weft_yield();
  if (rc != 0)
    die("weft_yield", rc);
  return t;
}

static void join_expect(weft_task *t, intptr_t want) {
  void *r = NULL;
  int rc = weft_join(t, &r);
  if (rc != 0)
    die("weft_join", rc);
  if ((intptr_t)r != want) {
    fprintf(stderr, "future: the blocked recv returned %s (%ld), not %ld\n",
            weft_err_name((int)(intptr_t)r), (long)(intptr_t)r, (long)want);
    exit(1);
  }
}

static void cancel_expect(weft_task *t) {
  int rc = weft_cancel(t);
  if (rc != 0) /* -ESRCH: the task had finished, it never blocked */
    die("weft_cancel", rc);
}

static double cancel_recv_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_task *t = spawn_blocked(0);
    cancel_expect(t);
    join_expect(t, -ECANCELED);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

static double recv_wake_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_task *t = spawn_blocked(0);
    if (send(pair[0][1], "x", 1, MSG_NOSIGNAL) != 1) {
      perror("future: send");
      exit(1);
    }
    join_expect(t, 1);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

static double cancel_deliver_round(long n) {
  weft_task *t[BATCH];
  long batches = (n + BATCH - 1) / BATCH;
  int64_t spent = 0;
  for (long b = 0; b < batches; b++) {
    for (int i = 0; i < BATCH; i++)
      t[i] = spawn_blocked(i);
    int64_t t0 = bench_now();
    for (int i = 0; i < BATCH; i++) {
      cancel_expect(t[i]);
      join_expect(t[i], -ECANCELED);
    }
    spent += bench_now() - t0;
  }
  return (double)spent / (double)(batches * BATCH);
}

/* ---- scope_deadline, scope_deadline_yield, yield ------------------------ */

static double scope_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_scope s;
    weft_scope_enter(&s, weft_now() + WEFT_SEC(1));
    int rc = weft_scope_exit(&s);
    if (rc != 0)
      die("weft_scope_exit", rc);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

static double scope_yield_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    weft_scope s;
    weft_scope_enter(&s, weft_now() + WEFT_SEC(1));
    int rc = weft_yield();
    if (rc != 0)
      die("weft_yield (in a scope)", rc);
    if ((rc = weft_scope_exit(&s)) != 0)
      die("weft_scope_exit", rc);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

static double yield_round(long n) {
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    int rc = weft_yield();
    if (rc != 0)
      die("weft_yield", rc);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

/* ---- main --------------------------------------------------------------- */

typedef struct figure {
  const char *name;
  double (*round)(long n);
  long div; /* operations per round: N / div */
} figure;

static int bench_main(void *arg) {
  const bench_opts *o = arg;
  for (int i = 0; i < BATCH; i++)
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, pair[i]) != 0) {
      perror("future: socketpair");
      exit(1);
    }
  static const figure figs[] = {
      {"future_set_await", set_await_round, 1},
      {"future_await_wake", await_wake_round, 8},
      {"cancel_recv", cancel_recv_round, 10},
      {"recv_wake", recv_wake_round, 60},
      {"cancel_recv_deliver", cancel_deliver_round, 20},
      {"scope_deadline", scope_round, 1},
      {"scope_deadline_yield", scope_yield_round, 4},
      {"yield", yield_round, 3},
  };
  static bench_series s[sizeof figs / sizeof figs[0]];
  for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++) {
    long n = o->iters / figs[f].div;
    if (n < 1)
      n = 1;
    s[f].name = figs[f].name;
    figs[f].round(n); /* warm-up */
    for (int r = 0; r < o->rounds; r++)
      bench_add(&s[f], o, figs[f].round(n));
    bench_report(&s[f], "ns");
  }
  for (int i = 0; i < BATCH; i++) {
    weft_close(pair[i][0]);
    close(pair[i][1]);
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 2000000);
  int rc = weft_main(bench_main, &o);
  if (rc != 0) {
    fprintf(stderr, "future: weft_main: %s\n", weft_strerror(rc));
    return 1;
  }
  return 0;
}
