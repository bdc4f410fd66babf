/*
 * Futures, weft_async, and waking a loop from other threads.
 *
 *  - set_result / set_error / cancel: the first outcome stands, a second
 *    set is -EINVAL (cancel: 0), bad errors are -EINVAL and change nothing;
 *    weft_future_result of each outcome, -EAGAIN while pending;
 *  - done-callbacks never run inside the call that completed the future,
 *    nor inside add_done_callback on a done future: they run from the loop
 *    at its next turn, in the order they were added, with (f, arg); a
 *    callback added from a callback waits for the next turn; a released
 *    pending future's callbacks never run;
 *  - a hundred tasks awaiting one future each get its outcome (a value, an
 *    error, a cancellation), woken in the order they came; a done future
 *    returns at once but is still a cancellation point; a cancelled awaiter
 *    leaves the future pending (the first of two too: completing the future
 *    then wakes the second only);
 *  - references: a future whose other holders let go while a task awaits
 *    it stays valid for the waiter; a callback may drop the last reference;
 *  - weft_async: the tornado shape (await the future of a routine), chains
 *    of routines, cancelling the future cancels the task (whose later
 *    return value does not replace the cancellation), cancelling the
 *    awaiter does not;
 *  - weft_call_soon_threadsafe: a future completed from another pthread
 *    while the loop is held by weft_loop_ref; an unref that drops the last
 *    reference wakes the loop; a ref'd loop with no task waits for the
 *    callback; 4 threads x 250,000 callbacks (scaled down under valgrind),
 *    each counted once, each thread's in order;
 *  - the deadlock rule: a task awaiting a future nobody can complete is
 *    cancelled (its await returns -ECANCELED) and weft_loop_run returns 0;
 *    the same through weft_main;
 *  - misuse: NULL, no loop, outside a task, another loop's future.
 */
#include "weft.h"

#include "internal.h"

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

#define FOREVER WEFT_SEC(30)
#define LATE    WEFT_SEC(5)

static char trace[8192];
static size_t ntrace;

static void note(const char *s) {
  size_t n = strlen(s);
  CHECK_LT(ntrace + n, sizeof trace);
  memcpy(trace + ntrace, s, n + 1);
  ntrace += n;
}

static void trace_reset(void) {
  ntrace = 0;
  trace[0] = '\0';
}

/* Runs fn as the only task of a fresh loop, which must run out of work at
 * once (0) with nothing left. */
static void run(void *(*fn)(void *), void *arg) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(fn, arg));
  int64_t t0 = weft_now();
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_LT(weft_now() - t0, LATE);
  CHECK_EQ(loop->nlive, 0);
  CHECK_EQ(loop->heap_len, 0);
  CHECK_EQ(loop->cb_len, 0);
  weft_loop_free(loop);
}

/* ---- misuse ------------------------------------------------------------- */
static void cb_never(weft_future *f, void *arg) {
  (void)f;
  (void)arg;
  CHECK(0);
}

static void plain_never(void *arg) {
  (void)arg;
  CHECK(0);
}

static void *quick(void *arg) { return arg; }

static void test_misuse(void) {
  errno = 0;
  CHECK(weft_future_new() == NULL); /* no loop */
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(weft_async(quick, NULL) == NULL);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(weft_future_set_result(NULL, P(1)), -EINVAL);
  CHECK_EQ(weft_future_set_error(NULL, EIO), -EINVAL);
  CHECK_EQ(weft_future_cancel(NULL), -EINVAL);
  CHECK_EQ(weft_future_result(NULL, NULL), -EINVAL);
  CHECK_EQ(weft_future_add_done_callback(NULL, cb_never, NULL), -EINVAL);
  CHECK_EQ(weft_await(NULL, NULL), -EINVAL);
  weft_future_release(NULL);
  weft_loop_ref(NULL);
  weft_loop_unref(NULL);
  CHECK_EQ(weft_call_soon_threadsafe(NULL, plain_never, NULL), -EINVAL);

  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK_EQ(weft_call_soon_threadsafe(loop, NULL, NULL), -EINVAL);
  errno = 0;
  CHECK(weft_async(NULL, NULL) == NULL);
  CHECK_EQ(errno, EINVAL);
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_add_done_callback(f, NULL, NULL), -EINVAL);
  CHECK_EQ(weft_await(f, NULL), -EINVAL); /* not in a task */
  CHECK(!weft_future_done(f));
  weft_future_release(f);
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* A future of one loop, awaited from a task of another: -EINVAL. */
static weft_future *foreign;

static void *await_foreign(void *arg) {
  (void)arg;
  CHECK_EQ(weft_await(foreign, NULL), -EINVAL);
  CHECK_EQ(weft_yield(), 0); /* not cancelled by it */
  return NULL;
}

static void test_foreign_loop(void) {
  weft_loop *a = weft_loop_new(NULL);
  CHECK(a);
  foreign = weft_future_new();
  CHECK(foreign);
  weft_loop *b = weft_loop_new(NULL); /* now the current one */
  CHECK(b);
  CHECK(weft_spawn(await_foreign, NULL));
  CHECK_EQ(weft_loop_run(b), 0);
  weft_loop_free(b);
  CHECK(!weft_future_done(foreign));
  weft_future_release(foreign);
  weft_loop_free(a);
}

/* ---- setting once -------------------------------------------------------- */
static void test_set_once(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  void *v;

  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK(!weft_future_done(f));
  CHECK_EQ(weft_future_result(f, &v), -EAGAIN);
  CHECK_EQ(weft_future_set_error(f, 0), -EINVAL);
  CHECK_EQ(weft_future_set_error(f, -EIO), -EINVAL);
  CHECK(!weft_future_done(f)); /* the misuse changed nothing */
  CHECK_EQ(weft_future_set_result(f, P(1)), 0);
  CHECK(weft_future_done(f));
  CHECK_EQ(weft_future_set_result(f, P(2)), -EINVAL);
  CHECK_EQ(weft_future_set_error(f, EIO), -EINVAL);
  CHECK_EQ(weft_future_cancel(f), 0);
  v = NULL;
  CHECK_EQ(weft_future_result(f, &v), 0);
  CHECK_EQ(I(v), 1);
  CHECK_EQ(weft_future_result(f, NULL), 0);
  CHECK_PTR_EQ(weft_future_ref(f), f);
  weft_future_release(f);
  CHECK_EQ(weft_future_result(f, &v), 0); /* one reference left */
  weft_future_release(f);

  weft_future *g = weft_future_new();
  CHECK(g);
  CHECK_EQ(weft_future_set_error(g, EIO), 0);
  CHECK(weft_future_done(g));
  CHECK_EQ(weft_future_set_result(g, P(2)), -EINVAL);
  CHECK_EQ(weft_future_set_error(g, EPIPE), -EINVAL);
  CHECK_EQ(weft_future_cancel(g), 0);
  CHECK_EQ(weft_future_result(g, &v), -EIO);
  weft_future_release(g);

  weft_future *h = weft_future_new();
  CHECK(h);
  CHECK_EQ(weft_future_cancel(h), 1);
  CHECK(weft_future_done(h));
  CHECK_EQ(weft_future_cancel(h), 0);
  CHECK_EQ(weft_future_set_result(h, P(3)), -EINVAL);
  CHECK_EQ(weft_future_set_error(h, EIO), -EINVAL);
  CHECK_EQ(weft_future_result(h, &v), -ECANCELED);
  weft_future_release(h);

  /* A NULL value is a value. */
  weft_future *n = weft_future_new();
  CHECK(n);
  CHECK_EQ(weft_future_set_result(n, NULL), 0);
  v = P(9);
  CHECK_EQ(weft_future_result(n, &v), 0);
  CHECK_PTR_EQ(v, NULL);
  weft_future_release(n);

  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* ---- done-callbacks ------------------------------------------------------- */
static weft_future *cb_fut;
static int cb_in_call; /* set while a weft call that must not run them runs */

static void cb_note(weft_future *f, void *arg) {
  CHECK_EQ(cb_in_call, 0);
  CHECK_PTR_EQ(f, cb_fut);
  CHECK(weft_future_done(f));
  note(arg);
}

static void plain_note(void *arg) { note(arg); }

static void *callbacks_main(void *arg) {
  (void)arg;
  trace_reset();
  cb_fut = weft_future_new();
  CHECK(cb_fut);
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "A"), 0);
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "B"), 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK_STR_EQ(trace, ""); /* pending: nothing runs */
  cb_in_call = 1;
  CHECK_EQ(weft_future_set_result(cb_fut, P(1)), 0);
  /* Done now: a callback added is queued, not run here. */
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "C"), 0);
  cb_in_call = 0;
  CHECK_STR_EQ(trace, "");
  CHECK_EQ(weft_yield(), 0); /* the loop's next turn runs them */
  CHECK_STR_EQ(trace, "ABC");
  CHECK_EQ(weft_yield(), 0);
  CHECK_STR_EQ(trace, "ABC"); /* once each */
  cb_in_call = 1;
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "D"), 0);
  CHECK_EQ(weft_call_soon(plain_note, "X"), 0);
  /* A run of cb_fut's is queued (D's): E joins it, ahead of X (weft.h). */
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "E"), 0);
  cb_in_call = 0;
  CHECK_STR_EQ(trace, "ABC");
  CHECK_EQ(weft_yield(), 0);
  CHECK_STR_EQ(trace, "ABCDEX");
  weft_future_release(cb_fut);
  return NULL;
}

/* Errors and cancellations run the callbacks too; the callback sees the
 * outcome. */
static void cb_outcome(weft_future *f, void *arg) {
  void *v = NULL;
  int rc = weft_future_result(f, &v);
  char buf[32];
  snprintf(buf, sizeof buf, "%s%d;", (const char *)arg, rc == 0 ? (int)I(v) : rc);
  note(buf);
}

static void *outcomes_main(void *arg) {
  (void)arg;
  trace_reset();
  weft_future *a = weft_future_new(), *b = weft_future_new(),
              *c = weft_future_new();
  CHECK(a && b && c);
  CHECK_EQ(weft_future_add_done_callback(a, cb_outcome, "a"), 0);
  CHECK_EQ(weft_future_add_done_callback(b, cb_outcome, "b"), 0);
  CHECK_EQ(weft_future_add_done_callback(c, cb_outcome, "c"), 0);
  CHECK_EQ(weft_future_set_result(a, P(5)), 0);
  CHECK_EQ(weft_future_set_error(b, EIO), 0);
  CHECK_EQ(weft_future_cancel(c), 1);
  CHECK_STR_EQ(trace, "");
  CHECK_EQ(weft_yield(), 0);
  char want[64];
  snprintf(want, sizeof want, "a5;b%d;c%d;", -EIO, -ECANCELED);
  CHECK_STR_EQ(trace, want);
  weft_future_release(a);
  weft_future_release(b);
  weft_future_release(c);
  return NULL;
}

/* A callback that adds one to its (done) future: that one waits for the
 * next turn. A callback that completes another future: its callbacks run
 * at the turn after. */
static weft_future *chain_next;

static void cb_later(weft_future *f, void *arg) {
  (void)f;
  (void)arg;
  note("L");
}

static void cb_adder(weft_future *f, void *arg) {
  (void)arg;
  note("1");
  CHECK_EQ(weft_future_add_done_callback(f, cb_later, NULL), 0);
  CHECK_EQ(weft_future_set_result(chain_next, P(2)), 0);
  note("2"); /* nothing ran inside those calls */
}

static void cb_chained(weft_future *f, void *arg) {
  (void)f;
  (void)arg;
  note("N");
}

static void *chain_main(void *arg) {
  (void)arg;
  trace_reset();
  weft_future *f = weft_future_new();
  chain_next = weft_future_new();
  CHECK(f && chain_next);
  CHECK_EQ(weft_future_add_done_callback(chain_next, cb_chained, NULL), 0);
  CHECK_EQ(weft_future_add_done_callback(f, cb_adder, NULL), 0);
  CHECK_EQ(weft_future_set_result(f, NULL), 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK_STR_EQ(trace, "12");
  CHECK_EQ(weft_yield(), 0);
  CHECK_STR_EQ(trace, "12LN");
  weft_future_release(f);
  weft_future_release(chain_next);
  return NULL;
}

/* A callback that re-adds itself to its done future runs once per turn:
 * tasks and the loop get their turns in between (weft_call_soon's rule),
 * instead of the callback spinning in one turn for ever. */
static int self_adds, ticks;
static void cb_again(weft_future *f, void *arg) {
  (void)arg;
  if (++self_adds < 100)
    CHECK_EQ(weft_future_add_done_callback(f, cb_again, NULL), 0);
}

static void *ticking(void *arg) {
  (void)arg;
  while (self_adds < 100) {
    ticks++;
    CHECK_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *readd_main(void *arg) {
  (void)arg;
  self_adds = ticks = 0;
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_set_result(f, NULL), 0);
  CHECK_EQ(weft_future_add_done_callback(f, cb_again, NULL), 0);
  weft_task *t = weft_spawn(ticking, NULL);
  CHECK(t);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(self_adds, 100);
  CHECK_GE(ticks, 99); /* one turn each */
  weft_future_release(f);
  return NULL;
}

/* Regression tests for callbacks added from a callback: a subtest each,
 * so that the rest of the program goes on if they fail. */
static void test_callback_added_from_callback(void) { run(chain_main, NULL); }
static void test_callback_readds_itself(void) { run(readd_main, NULL); }

/* A thousand callbacks, in order. */
static int seq_next;
static void cb_seq(weft_future *f, void *arg) {
  (void)f;
  CHECK_EQ(I(arg), seq_next);
  seq_next++;
}

static void *many_callbacks_main(void *arg) {
  (void)arg;
  seq_next = 0;
  weft_future *f = weft_future_new();
  CHECK(f);
  for (int i = 0; i < 500; i++)
    CHECK_EQ(weft_future_add_done_callback(f, cb_seq, P(i)), 0);
  CHECK_EQ(weft_future_set_error(f, ENOENT), 0);
  for (int i = 500; i < 1000; i++)
    CHECK_EQ(weft_future_add_done_callback(f, cb_seq, P(i)), 0);
  CHECK_EQ(seq_next, 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(seq_next, 1000);
  weft_future_release(f);
  return NULL;
}

/* A callback holding the last reference may drop it. */
static int released_in_cb;
static void cb_release(weft_future *f, void *arg) {
  (void)arg;
  void *v = NULL;
  CHECK_EQ(weft_future_result(f, &v), 0);
  CHECK_EQ(I(v), 4);
  weft_future_release(f);
  released_in_cb = 1;
}

static void test_callbacks(void) {
  run(callbacks_main, NULL);
  run(outcomes_main, NULL);
  CHECK_SUBTEST(test_callback_added_from_callback);
  CHECK_SUBTEST(test_callback_readds_itself);
  run(many_callbacks_main, NULL);

  /* Completed outside the running loop: the callbacks wait for it. */
  trace_reset();
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  cb_fut = weft_future_new();
  CHECK(cb_fut);
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "x"), 0);
  CHECK_EQ(weft_future_set_result(cb_fut, NULL), 0);
  CHECK_EQ(weft_future_add_done_callback(cb_fut, cb_note, "y"), 0);
  CHECK_STR_EQ(trace, "");
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_STR_EQ(trace, "xy");
  weft_future_release(cb_fut);

  /* Released while pending: never completes, its callbacks never run. */
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_add_done_callback(f, cb_never, NULL), 0);
  weft_future_release(f);
  CHECK_EQ(weft_loop_run(loop), 0);

  /* The holder hands its reference to the callback. */
  released_in_cb = 0;
  f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_add_done_callback(f, cb_release, NULL), 0);
  CHECK_EQ(weft_future_set_result(f, P(4)), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_EQ(released_in_cb, 1);
  weft_loop_free(loop);
}

/* ---- many waiters ---------------------------------------------------------- */
#define NWAITERS 100
static weft_future *shared;
static int waiting, woken;

static int wake_order[NWAITERS]; /* the arrival number of each woken */

static void *waiter(void *arg) {
  (void)arg;
  void *v = P(-1);
  int me = waiting++;
  int rc = weft_await(shared, &v);
  wake_order[woken++] = me;
  return P(rc == 0 ? I(v) : rc);
}

static void many_waiters(int how, intptr_t want) {
  weft_task *t[NWAITERS];
  shared = weft_future_new();
  CHECK(shared);
  waiting = woken = 0;
  for (int i = 0; i < NWAITERS; i++)
    CHECK(t[i] = weft_spawn(waiter, NULL));
  while (waiting < NWAITERS)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(woken, 0);
  switch (how) {
  case 0: CHECK_EQ(weft_future_set_result(shared, P(want)), 0); break;
  case 1: CHECK_EQ(weft_future_set_error(shared, (int)-want), 0); break;
  case 2: CHECK_EQ(weft_future_cancel(shared), 1); break;
  }
  for (int i = 0; i < NWAITERS; i++) {
    void *r;
    CHECK_EQ(weft_join(t[i], &r), 0);
    CHECK_EQ(I(r), want);
  }
  CHECK_EQ(woken, NWAITERS);
  /* Woken in the order they came (WEFT_SEED shuffles the order they run). */
  if (!check_seeded())
    for (int i = 0; i < NWAITERS; i++)
      CHECK_EQ(wake_order[i], i);
  weft_future_release(shared);
}

static void *await_done_cancelled(void *arg) {
  weft_future *f = arg;
  /* Cancelled before it ran: a done future is still a checkpoint. */
  CHECK_EQ(weft_await(f, NULL), -ECANCELED);
  return NULL;
}

static void *await_cancelled(void *arg) {
  return P(weft_await(arg, NULL));
}

static void *waiters_main(void *arg) {
  (void)arg;
  many_waiters(0, 42);
  many_waiters(1, -EIO);
  many_waiters(2, -ECANCELED);

  /* A done future returns at once, as often as asked. */
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_set_result(f, P(8)), 0);
  for (int i = 0; i < 3; i++) {
    void *v = NULL;
    CHECK_EQ(weft_await(f, &v), 0);
    CHECK_EQ(I(v), 8);
  }
  CHECK_EQ(weft_await(f, NULL), 0);
  weft_task *t = weft_spawn(await_done_cancelled, f);
  CHECK(t);
  CHECK_EQ(weft_cancel(t), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  weft_future_release(f);

  /* A cancelled waiter leaves the future pending; it completes later. */
  f = weft_future_new();
  CHECK(f);
  t = weft_spawn(await_cancelled, f);
  CHECK(t);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), 0);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  CHECK(!weft_future_done(f));
  CHECK_EQ(weft_future_set_error(f, EPIPE), 0);
  CHECK_EQ(weft_await(f, NULL), -EPIPE);
  weft_future_release(f);
  return NULL;
}

/* The first of two awaiters leaves (its scope cancelled) and goes on to
 * wait on something else: completing the future wakes the second only. */
static weft_future *head_f;
static weft_scope *head_scope;
static weft_event head_e = WEFT_EVENT_INIT;
static int head_state; /* 1: in await, 2: out of it, 3: past the event */

static void *head_leaver(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, WEFT_NEVER);
  head_scope = &s;
  head_state = 1;
  CHECK_EQ(weft_await(head_f, NULL), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED);
  head_state = 2;
  CHECK_EQ(weft_event_wait(&head_e), 0);
  head_state = 3;
  return NULL;
}

static void *head_stayer(void *arg) {
  (void)arg;
  void *v = NULL;
  CHECK_EQ(weft_await(head_f, &v), 0);
  return v;
}

static void *head_leaves_main(void *arg) {
  (void)arg;
  head_f = weft_future_new();
  CHECK(head_f);
  head_state = 0;
  weft_event_clear(&head_e);
  weft_task *a = weft_spawn(head_leaver, NULL);
  CHECK(a);
  while (head_state != 1)
    CHECK_EQ(weft_yield(), 0);
  weft_task *b = weft_spawn(head_stayer, NULL);
  CHECK(b);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_yield(), 0);
  weft_scope_cancel(head_scope);
  while (head_state != 2)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_future_set_result(head_f, P(9)), 0);
  void *r;
  CHECK_EQ(weft_join(b, &r), 0);
  CHECK_EQ(I(r), 9);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(head_state, 2); /* still on the event */
  weft_event_set(&head_e);
  CHECK_EQ(weft_join(a, NULL), 0);
  CHECK_EQ(head_state, 3);
  weft_future_release(head_f);
  return NULL;
}

static void test_waiters(void) {
  run(waiters_main, NULL);
  run(head_leaves_main, NULL);
}

/* ---- references --------------------------------------------------------------- */
static void complete_and_release(void *arg) {
  CHECK_EQ(weft_future_set_result(arg, P(21)), 0);
  weft_future_release(arg);
}

static void *await_value(void *arg) {
  void *v = NULL;
  int rc = weft_await(arg, &v);
  return P(rc == 0 ? I(v) : rc);
}

static void *refs_main(void *arg) {
  (void)arg;
  /* The completer (a timer) holds one reference, we hold one, the waiter
   * takes its own. We let go while it waits; then the completer does. */
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK(weft_call_later(WEFT_MS(5), complete_and_release, weft_future_ref(f)));
  weft_task *t = weft_spawn(await_value, f);
  CHECK(t);
  CHECK_EQ(weft_yield(), 0);
  weft_future_release(f);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 21);
  return NULL;
}

/* Every holder lets go while a task waits: the waiter's own reference
 * keeps the future; nobody can complete it, so the loop's deadlock rule
 * cancels the waiter, and the future goes when the waiter lets go. */
static int orphan_rc;
static void *orphan_waiter(void *arg) {
  orphan_rc = weft_await(arg, NULL);
  /* Cancelled for good: cleanup sees it too. */
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  return NULL;
}

static void *orphan_main(void *arg) {
  (void)arg;
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_go(orphan_waiter, f), 0);
  CHECK_EQ(weft_yield(), 0);
  weft_future_release(f);
  return NULL;
}

static void test_refs(void) {
  run(refs_main, NULL);
  orphan_rc = 1;
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_task *t = weft_spawn(orphan_main, NULL);
  CHECK(t);
  CHECK_EQ(weft_detach(t), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_EQ(orphan_rc, -ECANCELED);
  CHECK_EQ(loop->nlive, 0); /* every task ended */
  weft_loop_free(loop);
}

/* ---- weft_async --------------------------------------------------------------- */
static int ran;

static void *add_one(void *arg) {
  ran = 1;
  CHECK_EQ(weft_yield(), 0);
  return P(I(arg) + 1);
}

/* tornado's shape: a routine whose result is awaited, routines awaiting
 * routines. */
static void *depth(void *arg) {
  intptr_t n = I(arg);
  if (n == 0)
    return P(0);
  weft_future *f = weft_async(depth, P(n - 1));
  CHECK(f);
  void *r = NULL;
  CHECK_EQ(weft_await(f, &r), 0);
  weft_future_release(f);
  return P(I(r) + 1);
}

static int slow_rc, slow_ended;
static void *slow(void *arg) {
  (void)arg;
  slow_rc = weft_sleep(FOREVER);
  slow_ended = 1;
  return P(123);
}

static void *slow_then_value(void *arg) {
  (void)arg;
  slow_rc = weft_sleep(WEFT_MS(10));
  slow_ended = 1;
  return P(55);
}

static void *async_main(void *arg) {
  (void)arg;
  void *r = NULL;
  ran = 0;
  weft_future *f = weft_async(add_one, P(41));
  CHECK(f);
  CHECK_EQ(ran, 0); /* a task, not a call: it runs later */
  CHECK(!weft_future_done(f));
  CHECK_EQ(weft_await(f, &r), 0);
  CHECK_EQ(I(r), 42);
  CHECK_EQ(ran, 1);
  CHECK_EQ(weft_future_result(f, &r), 0);
  CHECK_EQ(I(r), 42);
  weft_future_release(f);

  f = weft_async(depth, P(10));
  CHECK(f);
  CHECK_EQ(weft_await(f, &r), 0);
  CHECK_EQ(I(r), 10);
  weft_future_release(f);

  /* Finished before anyone awaited: done, with its value. */
  f = weft_async(quick, P(6));
  CHECK(f);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_yield(), 0);
  CHECK(weft_future_done(f));
  CHECK_EQ(weft_await(f, &r), 0);
  CHECK_EQ(I(r), 6);
  weft_future_release(f);

  /* Cancelling the future cancels the task; the value it returns then does
   * not replace the cancellation. */
  slow_rc = 1;
  slow_ended = 0;
  int64_t t0 = weft_now();
  f = weft_async(slow, NULL);
  CHECK(f);
  CHECK_EQ(weft_yield(), 0); /* it sleeps */
  CHECK_EQ(weft_future_cancel(f), 1);
  CHECK_EQ(weft_future_result(f, &r), -ECANCELED);
  while (!slow_ended)
    CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(slow_rc, -ECANCELED);
  CHECK_LT(weft_now() - t0, LATE);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_future_result(f, &r), -ECANCELED);
  CHECK_EQ(weft_await(f, &r), -ECANCELED);
  weft_future_release(f);

  /* Cancelled before the task first ran: its first blocking call sees it. */
  slow_rc = 1;
  slow_ended = 0;
  f = weft_async(slow, NULL);
  CHECK(f);
  CHECK_EQ(weft_future_cancel(f), 1);
  while (!slow_ended)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(slow_rc, -ECANCELED);
  weft_future_release(f);

  /* A cancelled awaiter does not cancel the routine. */
  slow_rc = 1;
  slow_ended = 0;
  f = weft_async(slow_then_value, NULL);
  CHECK(f);
  weft_task *w = weft_spawn(await_value, f);
  CHECK(w);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(w), 0);
  CHECK_EQ(weft_join(w, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  CHECK(!weft_future_done(f));
  CHECK_EQ(weft_await(f, &r), 0);
  CHECK_EQ(I(r), 55);
  CHECK_EQ(slow_rc, 0);
  weft_future_release(f);

  /* The future's only holder lets go at once: the routine still runs to
   * its end (and the future goes with its task). */
  ran = 0;
  f = weft_async(add_one, P(1));
  CHECK(f);
  weft_future_release(f);
  while (!ran)
    CHECK_EQ(weft_yield(), 0);
  return NULL;
}

static void test_async(void) { run(async_main, NULL); }

/* ---- from other threads ------------------------------------------------------- */
static pthread_t loop_thread;
static weft_loop *ts_loop;

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
    ;
}

static void ts_complete(void *arg) {
  CHECK(pthread_equal(pthread_self(), loop_thread));
  CHECK(weft_loop_current() == ts_loop);
  CHECK_EQ(weft_future_set_result(arg, P(5)), 0);
  weft_future_release(arg);
}

/* Posts the completion after 50 ms, then lets the loop go. */
static void *poster(void *arg) {
  sleep_ms(50);
  CHECK_EQ(weft_call_soon_threadsafe(ts_loop, ts_complete, arg), 0);
  weft_loop_unref(ts_loop);
  return NULL;
}

/* Only lets the loop go, after 30 ms. */
static void *unreffer(void *arg) {
  (void)arg;
  sleep_ms(30);
  weft_loop_unref(ts_loop);
  return NULL;
}

static void *threadsafe_main(void *arg) {
  (void)arg;
  weft_future *f = weft_future_new();
  CHECK(f);
  /* The reference is taken before the thread exists: from then on the
   * loop waits for it rather than find this task deadlocked. */
  weft_loop_ref(ts_loop);
  pthread_t th;
  int64_t t0 = weft_now();
  CHECK_EQ(pthread_create(&th, NULL, poster, weft_future_ref(f)), 0);
  void *v = NULL;
  CHECK_EQ(weft_await(f, &v), 0);
  CHECK_EQ(I(v), 5);
  CHECK_GE(weft_now() - t0, WEFT_MS(50));
  CHECK_EQ(pthread_join(th, NULL), 0);
  weft_future_release(f);
  return NULL;
}

static void *unref_wakes_main(void *arg) {
  (void)arg;
  weft_future *f = weft_future_new();
  CHECK(f);
  weft_loop_ref(ts_loop);
  pthread_t th;
  int64_t t0 = weft_now();
  CHECK_EQ(pthread_create(&th, NULL, unreffer, NULL), 0);
  /* Nothing will complete it: once the last reference goes the loop finds
   * this task deadlocked and cancels it. */
  CHECK_EQ(weft_await(f, NULL), -ECANCELED);
  CHECK_GE(weft_now() - t0, WEFT_MS(30));
  CHECK_LT(weft_now() - t0, LATE);
  CHECK_EQ(pthread_join(th, NULL), 0);
  CHECK(!weft_future_done(f));
  weft_future_release(f);
  return NULL;
}

static int plain_ran;
static void plain_cb(void *arg) {
  CHECK(pthread_equal(pthread_self(), loop_thread));
  plain_ran += (int)I(arg);
}

static void *post_plain(void *arg) {
  (void)arg;
  sleep_ms(30);
  CHECK_EQ(weft_call_soon_threadsafe(ts_loop, plain_cb, P(1)), 0);
  weft_loop_unref(ts_loop);
  return NULL;
}

/* From the loop's own thread, from a task: it runs at a later turn. */
static void *same_thread_main(void *arg) {
  (void)arg;
  plain_ran = 0;
  CHECK_EQ(weft_call_soon_threadsafe(ts_loop, plain_cb, P(10)), 0);
  CHECK_EQ(plain_ran, 0);
  for (int i = 0; i < 100 && !plain_ran; i++)
    CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(plain_ran, 10);
  return NULL;
}

static void test_threadsafe(void) {
  loop_thread = pthread_self();
  ts_loop = weft_loop_new(NULL);
  CHECK(ts_loop);
  CHECK(weft_spawn(threadsafe_main, NULL));
  CHECK_EQ(weft_loop_run(ts_loop), 0);
  CHECK_EQ(ts_loop->nlive, 0);

  CHECK(weft_spawn(unref_wakes_main, NULL));
  CHECK_EQ(weft_loop_run(ts_loop), 0);
  CHECK_EQ(ts_loop->nlive, 0);

  /* No task at all: a reference still keeps the loop for the callback. */
  plain_ran = 0;
  weft_loop_ref(ts_loop);
  pthread_t th;
  int64_t t0 = weft_now();
  CHECK_EQ(pthread_create(&th, NULL, post_plain, NULL), 0);
  CHECK_EQ(weft_loop_run(ts_loop), 0);
  CHECK_EQ(plain_ran, 1);
  CHECK_GE(weft_now() - t0, WEFT_MS(30));
  CHECK_EQ(pthread_join(th, NULL), 0);

  /* Queued before the loop runs (from its own thread): the first turn. */
  plain_ran = 0;
  CHECK_EQ(weft_call_soon_threadsafe(ts_loop, plain_cb, P(2)), 0);
  CHECK_EQ(weft_call_soon_threadsafe(ts_loop, plain_cb, P(3)), 0);
  CHECK_EQ(plain_ran, 0);
  CHECK_EQ(weft_loop_run(ts_loop), 0);
  CHECK_EQ(plain_ran, 5);

  CHECK(weft_spawn(same_thread_main, NULL));
  CHECK_EQ(weft_loop_run(ts_loop), 0);
  weft_loop_free(ts_loop);
  ts_loop = NULL;
}

/* ---- stress: 4 threads x 250,000 callbacks --------------------------------------- */
#define NTHREADS 4
static long per_thread;
static long counted;
static long next_seq[NTHREADS];

static void count_cb(void *arg) {
  uintptr_t a = (uintptr_t)arg;
  int th = (int)(a & 3);
  long seq = (long)(a >> 2);
  CHECK_EQ(seq, next_seq[th]); /* one thread's callbacks keep their order */
  next_seq[th]++;
  counted++;
}

static void *flooder(void *arg) {
  uintptr_t th = (uintptr_t)arg;
  for (long i = 0; i < per_thread; i++)
    CHECK_EQ(weft_call_soon_threadsafe(ts_loop, count_cb,
                                       (void *)(((uintptr_t)i << 2) | th)),
             0);
  weft_loop_unref(ts_loop);
  return NULL;
}

/* A task that sleeps in small steps while the flood comes in, so that the
 * loop waits in the backend with a timeout too. */
static void *ticker(void *arg) {
  (void)arg;
  long total = per_thread * NTHREADS;
  int64_t t0 = weft_now();
  while (counted < total && weft_now() - t0 < WEFT_SEC(60))
    CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  return NULL;
}

static void test_stress(void) {
  per_thread = RUNNING_ON_VALGRIND ? 5000 : 250000;
  counted = 0;
  memset(next_seq, 0, sizeof next_seq);
  loop_thread = pthread_self();
  ts_loop = weft_loop_new(NULL);
  CHECK(ts_loop);
  CHECK(weft_spawn(ticker, NULL));
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++)
    weft_loop_ref(ts_loop);
  int64_t t0 = weft_now();
  for (uintptr_t i = 0; i < NTHREADS; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, flooder, (void *)i), 0);
  CHECK_EQ(weft_loop_run(ts_loop), 0);
  int64_t dt = weft_now() - t0;
  for (int i = 0; i < NTHREADS; i++)
    CHECK_EQ(pthread_join(th[i], NULL), 0);
  CHECK_EQ(counted, per_thread * NTHREADS);
  for (int i = 0; i < NTHREADS; i++)
    CHECK_EQ(next_seq[i], per_thread);
  printf("%d threads x %ld callbacks: %.1f ms\n", NTHREADS, per_thread,
         dt / 1e6);
  weft_loop_free(ts_loop);
  ts_loop = NULL;
}

/* ---- the deadlock rule ------------------------------------------------------------- */
static int stuck_rc, stuck_after, joiner_rc;

static void *stuck(void *arg) {
  stuck_rc = weft_await(arg, NULL);
  /* It can clean up; it stays cancelled. */
  stuck_after = weft_yield();
  return P(7);
}

static void *stuck_joiner(void *arg) {
  void *r = NULL;
  joiner_rc = weft_join(arg, &r);
  return NULL;
}

static void test_deadlock(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_future *f = weft_future_new();
  CHECK(f);
  weft_task *t = weft_spawn(stuck, f);
  CHECK(t);
  weft_task *j = weft_spawn(stuck_joiner, t);
  CHECK(j);
  stuck_rc = stuck_after = joiner_rc = 1;
  int64_t t0 = weft_now();
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_LT(weft_now() - t0, LATE);
  CHECK_EQ(stuck_rc, -ECANCELED);
  CHECK_EQ(stuck_after, -ECANCELED);
  /* Both were parked when the loop found them stuck: both cancelled. */
  CHECK_EQ(joiner_rc, -ECANCELED);
  CHECK_EQ(loop->nlive, 0);
  CHECK(!weft_future_done(f)); /* left as it was */
  weft_future_release(f);
  void *r = NULL;
  CHECK_EQ(weft_join(t, &r), 0); /* its join failed: t is still ours */
  CHECK_EQ(I(r), 7);
  CHECK_EQ(weft_join(j, NULL), 0);
  weft_loop_free(loop);
}

/* A loop freed while it still refers to futures the program has let go
 * of: a weft_async task's, a parked awaiter's, a queued run of
 * done-callbacks'. They go with the loop, callbacks and all: every block
 * the allocator handed out comes back (they used to leak). */
static long alloc_live; /* blocks handed out and not yet freed (atomic:
                         * the pool's threads allocate too) */
static void *c_malloc(size_t n) {
  void *p = malloc(n);
  __atomic_add_fetch(&alloc_live, p != NULL, __ATOMIC_RELAXED);
  return p;
}
static void *c_realloc(void *p, size_t n) {
  void *q = realloc(p, n);
  __atomic_add_fetch(&alloc_live, q && !p, __ATOMIC_RELAXED);
  return q;
}
static void c_free(void *p) {
  __atomic_sub_fetch(&alloc_live, p != NULL, __ATOMIC_RELAXED);
  free(p);
}

static int lf_parked; /* lf_routine and lf_awaiter about to park */

static void *lf_routine(void *arg) {
  (void)arg;
  lf_parked++;
  weft_sleep(WEFT_SEC(30));
  CHECK(0); /* never resumed */
  return NULL;
}
static void *lf_awaiter(void *arg) {
  lf_parked++;
  weft_await(arg, NULL);
  CHECK(0);
  return NULL;
}
static void lf_stop(void *arg) { weft_loop_stop(arg); }
/* Stops the loop once both have parked, in any order of the ready queue (a
 * 1 ms timer stopped it before, and could fire before they ran). */
static void *lf_stopper(void *arg) {
  while (lf_parked < 2)
    CHECK_EQ(weft_yield(), 0);
  weft_loop_stop(arg);
  return NULL;
}
static void lf_never(weft_future *f, void *arg) {
  (void)f;
  (void)arg;
  CHECK(0); /* queued, never run */
}

static void test_loop_freed(void) {
  weft_loop *loop = weft_loop_new(NULL); /* the thread's caches, made once */
  CHECK(loop);
  CHECK_EQ(weft_go(lf_awaiter, weft_future_new()), 0);
  weft_loop_free(loop);
  long live = __atomic_load_n(&alloc_live, __ATOMIC_RELAXED);
  loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_future *a = weft_async(lf_routine, NULL);
  weft_future *b = weft_future_new(), *c = weft_future_new();
  CHECK(a && b && c);
  CHECK_EQ(weft_go(lf_awaiter, b), 0);
  CHECK_EQ(weft_future_add_done_callback(c, lf_never, NULL), 0);
  CHECK_EQ(weft_future_add_done_callback(c, lf_never, NULL), 0);
  lf_parked = 0;
  CHECK(weft_spawn(lf_stopper, loop));
  CHECK_EQ(weft_loop_run(loop), 1);
  CHECK_EQ(lf_parked, 2);
  CHECK_EQ(weft_call_soon(lf_stop, loop), 0);
  CHECK_EQ(weft_future_set_result(c, NULL), 0); /* its run queued after */
  CHECK_EQ(weft_loop_run(loop), 1);
  weft_future_release(a);
  weft_future_release(b);
  weft_future_release(c);
  weft_loop_free(loop);
  CHECK_EQ(__atomic_load_n(&alloc_live, __ATOMIC_RELAXED), live);
}

static int main_fn(void *arg) {
  (void)arg;
  weft_future *f = weft_future_new();
  CHECK(f);
  int rc = weft_await(f, NULL);
  weft_future_release(f);
  return rc == -ECANCELED ? 7 : 99;
}

static void test_deadlock_main(void) { CHECK_EQ(weft_main(main_fn, NULL), 7); }

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(RUNNING_ON_VALGRIND ? 110 : 60);
  CHECK_EQ(weft_replace_allocator(c_malloc, c_realloc, c_free), 0);
  int fds = check_fd_count();
  test_misuse();
  test_foreign_loop();
  test_set_once();
  test_callbacks();
  test_waiters();
  test_refs();
  test_async();
  test_threadsafe();
  test_stress();
  test_deadlock();
  test_deadlock_main();
  test_loop_freed();
  CHECK_EQ(check_fd_count(), fds);
  CHECK_EQ(check_subtest_failures, 0);
  printf("test_future: ok\n");
  return 0;
}
