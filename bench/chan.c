/*
 * Channels, select, the task-aware mutex and actors: what each costs. Every
 * figure is the median of the timed rounds (see bench.h), measured inside
 * weft_main's tasks on the thread's CPU clock.
 *
 *   chan_pingpong_unbuffered  ns per message, one direction: task A sends
 *                        i (a long) on c1, task B receives it and sends it
 *                        back on c2, A receives it; the time of the round
 *                        trips over twice their number. Unbuffered
 *                        channels: each send finds the other task parked in
 *                        its receive, copies the element into it and wakes
 *                        it; each receive parks. One switch per message.
 *   chan_pingpong_buffered    the same on channels of capacity 16 (at most
 *                        one element is ever in flight, so the capacity
 *                        changes the path taken, not how many switches).
 *   select_pingpong      the same on unbuffered channels with every
 *                        receive a weft_select of 2 cases: {WEFT_RECV c1,
 *                        WEFT_RECV quit}, where quit is a real channel on
 *                        which nothing is ever sent (a NULL case would be
 *                        skipped); the sends are plain weft_chan_send.
 *   mutex_uncontended    ns per weft_mutex_lock + weft_mutex_unlock, one
 *                        task, no waiter ever.
 *   mutex_contended      two tasks, each looping weft_mutex_lock;
 *                        weft_yield(); weft_mutex_unlock() on one mutex: ns
 *                        per lock taken, both tasks' locks counted.
 *   mutex_contended_handoffs  percent of those locks taken by the other
 *                        task than the last owner: 100 when the mutex is
 *                        handed over on every unlock (weft's is FIFO: the
 *                        unlocking task, looping to lock again, queues
 *                        behind the waiter it just woke), so that
 *                        mutex_contended is then ns per hand-off. Go's
 *                        sync.Mutex lets the unlocker take it again, and
 *                        its peer's percent says so.
 *   actor_msgs_per_s     seed 000's counter/printer pair: the actor
 *                        "counter" receives n; at 0 it ends; otherwise it
 *                        sends n to "printer" and n-1 to itself, by name
 *                        (weft_actor_send), as the seed does. The actor
 *                        "printer" counts what it receives and prints
 *                        nothing; the message 1 is the last it gets, and it
 *                        ends then. Both are spawned and N sent to the
 *                        counter, then the clock runs until both have said
 *                        they are done (a weft_sem each posts as it ends):
 *                        2N messages (N to each, and the 0) over that CPU
 *                        time. Unbounded mailboxes; each message is the
 *                        count itself, cast to a pointer.
 *
 * bench/peer_go_chan/main.go does the same with goroutines and Go channels
 * (GOMAXPROCS=1, and a GOMAXPROCS=2 run), bench/peer_actors.py the actor
 * pair with the seed's own ActorScheduler (Python generators and a deque).
 *
 *   usage: bench_chan [-r rounds] [-n N] [-v]
 *
 * -n N (default 1,000,000) sets the operations per round: N / 5 round trips
 * for the ping-pongs, N * 10 lock+unlock pairs, N / 5 locks per task for the
 * contended mutex, a count-down from N / 5 for the actors; the Go peer uses
 * the same table. Each figure has one warm-up round, thrown away; 7 timed
 * rounds by default.
 */
#include "weft.h"

#include "bench.h"

#include <errno.h>
#include <stdint.h>

static void die(const char *what, int rc) {
  fprintf(stderr, "chan: %s: %s\n", what, weft_strerror(rc));
  exit(1);
}

static weft_chan *chan_new(size_t capacity) {
  weft_chan *c = weft_chan_new(sizeof(long), capacity);
  if (!c)
    die("weft_chan_new", -errno);
  return c;
}

static weft_task *spawn(void *(*fn)(void *), void *arg) {
  weft_task *t = weft_spawn(fn, arg);
  if (!t)
    die("weft_spawn", -errno);
  return t;
}

/* ---- chan_pingpong_unbuffered, chan_pingpong_buffered ------------------- */

static weft_chan *c1, *c2, *quit1, *quit2;

/* B: echoes c1 to c2 until c1 is closed. */
static void *echo(void *arg) {
  (void)arg;
  long v;
  int rc;
  while ((rc = weft_chan_recv(c1, &v)) == 0)
    if ((rc = weft_chan_send(c2, &v)) != 0)
      die("weft_chan_send (echo)", rc);
  if (rc != -EPIPE)
    die("weft_chan_recv (echo)", rc);
  return NULL;
}

static double pingpong_round(long n, size_t capacity) {
  c1 = chan_new(capacity);
  c2 = chan_new(capacity);
  weft_task *b = spawn(echo, NULL);
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    long v;
    int rc = weft_chan_send(c1, &i);
    if (rc != 0)
      die("weft_chan_send", rc);
    if ((rc = weft_chan_recv(c2, &v)) != 0)
      die("weft_chan_recv", rc);
    if (v != i) {
      fprintf(stderr, "chan: ping-pong: sent %ld, got %ld back\n", i, v);
      exit(1);
    }
  }
  int64_t t1 = bench_now();
  weft_chan_close(c1);
  int rc = weft_join(b, NULL);
  if (rc != 0)
    die("weft_join", rc);
  weft_chan_free(c1);
  weft_chan_free(c2);
  return (double)(t1 - t0) / (double)(2 * n);
}

static double unbuffered_round(long n) { return pingpong_round(n, 0); }
static double buffered_round(long n) { return pingpong_round(n, 16); }

/* ---- select_pingpong ---------------------------------------------------- */

/* Receives from `from` through a 2-case select whose other case, a receive
 * from `quit`, never fires. */
static long select_recv(weft_chan *from, weft_chan *quit) {
  long v = 0, q = 0;
  weft_select_case cs[2] = {
      {from, WEFT_RECV, &v, 0},
      {quit, WEFT_RECV, &q, 0},
  };
  int i = weft_select(cs, 2, 0);
  if (i != 0)
    die("weft_select (the quit case, or an error)", i < 0 ? i : -EPROTO);
  if (cs[0].result != 0)
    die("weft_select's receive", cs[0].result);
  return v;
}

/* B: echoes c1 to c2 until it receives -1. */
static void *select_echo(void *arg) {
  (void)arg;
  for (;;) {
    long v = select_recv(c1, quit1);
    if (v < 0)
      return NULL;
    int rc = weft_chan_send(c2, &v);
    if (rc != 0)
      die("weft_chan_send (select echo)", rc);
  }
}

static double select_round(long n) {
  c1 = chan_new(0);
  c2 = chan_new(0);
  quit1 = chan_new(0);
  quit2 = chan_new(0);
  weft_task *b = spawn(select_echo, NULL);
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    int rc = weft_chan_send(c1, &i);
    if (rc != 0)
      die("weft_chan_send", rc);
    long v = select_recv(c2, quit2);
    if (v != i) {
      fprintf(stderr, "chan: select: sent %ld, got %ld back\n", i, v);
      exit(1);
    }
  }
  int64_t t1 = bench_now();
  long end = -1;
  int rc = weft_chan_send(c1, &end);
  if (rc != 0 || (rc = weft_join(b, NULL)) != 0)
    die("ending the select echo", rc);
  weft_chan_free(c1);
  weft_chan_free(c2);
  weft_chan_free(quit1);
  weft_chan_free(quit2);
  return (double)(t1 - t0) / (double)(2 * n);
}

/* ---- mutex_uncontended, mutex_contended --------------------------------- */

static double mutex_uncontended_round(long n) {
  weft_mutex m = WEFT_MUTEX_INIT;
  n *= 10;
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    int rc = weft_mutex_lock(&m);
    if (rc != 0)
      die("weft_mutex_lock", rc);
    if ((rc = weft_mutex_unlock(&m)) != 0)
      die("weft_mutex_unlock", rc);
  }
  int64_t t1 = bench_now();
  return (double)(t1 - t0) / (double)n;
}

static weft_mutex mu = WEFT_MUTEX_INIT;
static long locks_each, handoffs;
static intptr_t last_owner;

static void *taker(void *arg) {
  intptr_t id = (intptr_t)arg;
  for (long i = 0; i < locks_each; i++) {
    int rc = weft_mutex_lock(&mu);
    if (rc != 0)
      die("weft_mutex_lock (contended)", rc);
    if (last_owner != id) {
      handoffs++;
      last_owner = id;
    }
    if ((rc = weft_yield()) != 0)
      die("weft_yield (holding the mutex)", rc);
    if ((rc = weft_mutex_unlock(&mu)) != 0)
      die("weft_mutex_unlock (contended)", rc);
  }
  return NULL;
}

static double last_handoff_pct;

static double mutex_contended_round(long n) {
  weft_mutex_init(&mu);
  locks_each = n;
  handoffs = 0;
  last_owner = -1;
  int64_t t0 = bench_now();
  weft_task *a = spawn(taker, (void *)0);
  weft_task *b = spawn(taker, (void *)1);
  int rc = weft_join(a, NULL);
  if (rc != 0 || (rc = weft_join(b, NULL)) != 0)
    die("weft_join (contended)", rc);
  int64_t t1 = bench_now();
  last_handoff_pct = 100.0 * (double)handoffs / (double)(2 * n);
  return (double)(t1 - t0) / (double)(2 * n);
}

/* ---- actor_msgs_per_s --------------------------------------------------- */

static weft_sem actors_done;
static long printed;

static void *printer(void *arg) {
  (void)arg;
  for (;;) {
    void *msg;
    int rc = weft_actor_recv(&msg);
    if (rc != 0)
      die("weft_actor_recv (printer)", rc);
    printed++; /* the seed prints: print('Got:', msg) */
    if ((intptr_t)msg == 1)
      break; /* the last message the counter sends it */
  }
  weft_sem_post(&actors_done);
  return NULL;
}

static void *counter(void *arg) {
  (void)arg;
  for (;;) {
    void *msg;
    int rc = weft_actor_recv(&msg);
    if (rc != 0)
      die("weft_actor_recv (counter)", rc);
    intptr_t n = (intptr_t)msg;
    if (n == 0)
      break;
    if ((rc = weft_actor_send("printer", (void *)n)) != 0)
      die("weft_actor_send (to the printer)", rc);
    if ((rc = weft_actor_send("counter", (void *)(n - 1))) != 0)
      die("weft_actor_send (to itself)", rc);
  }
  weft_sem_post(&actors_done);
  return NULL;
}

static double actor_round(long n) {
  weft_sem_init(&actors_done, 0);
  printed = 0;
  int64_t t0 = bench_now();
  weft_actor *p = weft_actor_spawn("printer", printer, NULL);
  if (!p)
    die("weft_actor_spawn (printer)", -errno);
  weft_actor *c = weft_actor_spawn("counter", counter, NULL);
  if (!c)
    die("weft_actor_spawn (counter)", -errno);
  int rc = weft_actor_send("counter", (void *)(intptr_t)n);
  if (rc != 0)
    die("weft_actor_send (the first count)", rc);
  for (int i = 0; i < 2; i++)
    if ((rc = weft_sem_wait(&actors_done)) != 0)
      die("weft_sem_wait", rc);
  int64_t t1 = bench_now();
  if (printed != n) {
    fprintf(stderr, "chan: the printer got %ld messages, not %ld\n", printed,
            n);
    exit(1);
  }
  /* Both bodies have returned; let their tasks end, so that the names are
   * free for the next round. */
  while (weft_actor_task(p) || weft_actor_task(c))
    if ((rc = weft_yield()) != 0)
      die("weft_yield", rc);
  return 2.0 * (double)n / ((double)(t1 - t0) / 1e9);
}

/* ---- main --------------------------------------------------------------- */

typedef struct figure {
  const char *name;
  double (*round)(long n);
  long div; /* operations per round: N / div */
  const char *unit;
} figure;

static int bench_main(void *arg) {
  const bench_opts *o = arg;
  static const figure figs[] = {
      {"chan_pingpong_unbuffered", unbuffered_round, 5, "ns"},
      {"chan_pingpong_buffered", buffered_round, 5, "ns"},
      {"select_pingpong", select_round, 5, "ns"},
      {"mutex_uncontended", mutex_uncontended_round, 1, "ns"},
      {"mutex_contended", mutex_contended_round, 5, "ns"},
      {"actor_msgs_per_s", actor_round, 5, "msgs/s"},
  };
  static bench_series s[sizeof figs / sizeof figs[0]];
  static bench_series h = {"mutex_contended_handoffs", {0}, 0};
  for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++) {
    long n = o->iters / figs[f].div;
    if (n < 1)
      n = 1;
    s[f].name = figs[f].name;
    figs[f].round(n); /* warm-up */
    for (int r = 0; r < o->rounds; r++) {
      bench_add(&s[f], o, figs[f].round(n));
      if (figs[f].round == mutex_contended_round)
        bench_add(&h, o, last_handoff_pct);
    }
    bench_report(&s[f], figs[f].unit);
    if (figs[f].round == mutex_contended_round) /* two decimals */
      printf("%s %.2f pct\n", h.name, bench_median(h.v, h.n));
  }
  return 0;
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 1000000);
  int rc = weft_main(bench_main, &o);
  if (rc != 0) {
    fprintf(stderr, "chan: weft_main: %s\n", weft_strerror(rc));
    return 1;
  }
  return 0;
}
