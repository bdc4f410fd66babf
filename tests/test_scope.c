/*
 * Cancel scopes: deadlines, cancellation of a region, shields.
 *
 *  - nesting: the deadline in force is the earliest around the call (an
 *    inner, later deadline does not extend an outer one); a scope absorbs
 *    only its own expiry: an inner one that expired reports -ETIMEDOUT and
 *    the outer code runs on normally; when the outer one expired, the inner
 *    exit returns 0 and the outer's next call returns -ETIMEDOUT;
 *  - a deadline is level-triggered inside its scope; sleeps shorter than it
 *    complete until it has passed; a deadline that passes while the task
 *    makes no blocking call is not reported (exit 0) until a call meets it;
 *  - weft_scope_cancel, from another task, from the task itself, on an
 *    outer scope: the blocked call returns -ECANCELED, later calls in the
 *    scope too, exit returns -ECANCELED, the code after it runs normally;
 *    a call in a cancelled scope still meets an outer scope's deadline;
 *  - weft_cancel of the task inside a scope: the exit returns 0, the next
 *    call after it still -ECANCELED; -ECANCELED wins over -ETIMEDOUT;
 *  - shields: weft_cancel, an outer deadline and an outer scope's
 *    cancellation do not reach a shielded scope (its sleep completes), and
 *    reach the code after it; its own deadline and its own cancellation
 *    still apply; a cancelled task's cleanup in a shielded scope completes;
 *    turning the shield off lets the cancellation in, also into a sleep
 *    in progress when another task turns it off;
 *  - weft_scope_set_deadline: pushed back by another task while the call
 *    waits (it ends at the new deadline), brought forward to a time past
 *    (it ends at once), lifted by the task itself before it parks, and an
 *    inner deadline moved past the outer one's (the outer one's timer
 *    takes over); -EINVAL for NULL, a scope exited, one entered outside a
 *    task, or from another thread;
 *  - misuse: exit out of order (-EINVAL, nothing changes), twice, from
 *    another task, of a scope entered outside a task;
 *  - a generator's body: its scopes are its own (no yield inside one, no
 *    exit of its caller's, a return inside one aborts);
 *  - cost: entering and leaving a scope with a deadline arms no timer when
 *    nothing inside blocks, and every timer a scope armed is gone at exit.
 */
#include "weft.h"

#include "internal.h"

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

#define FOREVER WEFT_SEC(30)
#define LATE    WEFT_SEC(5)

/* Runs fn as the only task of a fresh loop (made with cfg), which must end
 * at once with no task or timer left. */
static void run_with(const weft_config *cfg, void *(*fn)(void *), void *arg) {
  weft_loop *loop = weft_loop_new(cfg);
  CHECK(loop);
  CHECK(weft_spawn(fn, arg));
  int64_t t0 = weft_now();
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_LT(weft_now() - t0, LATE);
  CHECK_EQ(loop->nlive, 0);
  CHECK_EQ(loop->heap_len, 0);
  CHECK_EQ(loop->nwaiters, 0);
  CHECK_EQ(loop->cb_len, 0);
  weft_loop_free(loop);
}

static void run(void *(*fn)(void *), void *arg) { run_with(NULL, fn, arg); }

static uint32_t timers_armed(void) { return weft_loop_current()->heap_len; }

/* The call returned because `deadline` passed, and soon after. */
static void check_reached(int64_t deadline) {
  int64_t now = weft_now();
  CHECK_GE(now, deadline);
  CHECK_LT(now - deadline, LATE);
}

/* ---- nesting --------------------------------------------------------------- */
static void *outer_earlier(void *arg) {
  (void)arg;
  weft_scope outer, inner;
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&outer, d);
  weft_scope_enter(&inner, weft_now() + WEFT_SEC(10));
  /* The inner, later deadline does not extend the outer one. */
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_sleep(0), -ETIMEDOUT);
  /* Not the inner one's expiry: not reported there, not absorbed. */
  CHECK_EQ(weft_scope_exit(&inner), 0);
  CHECK_EQ(weft_yield(), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(WEFT_MS(1)), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&outer), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_yield(), 0);
  return NULL;
}

static void *inner_earlier(void *arg) {
  (void)arg;
  weft_scope outer, inner;
  weft_scope_enter(&outer, weft_now() + WEFT_SEC(10));
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&inner, d);
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&inner), -ETIMEDOUT);
  /* The outer code runs on normally. */
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_scope_exit(&outer), 0);
  return NULL; /* run(): the outer's 10 s timer did not keep the loop */
}

static void *three_levels(void *arg) {
  (void)arg;
  weft_scope a, b, c;
  weft_scope_enter(&a, weft_now() + WEFT_SEC(10));
  int64_t d = weft_now() + WEFT_MS(30);
  weft_scope_enter(&b, d);
  weft_scope_enter(&c, weft_now() + WEFT_SEC(5));
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&c), 0);
  CHECK_EQ(weft_sleep(0), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&b), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_scope_exit(&a), 0);
  return NULL;
}

/* Short sleeps complete until the deadline has passed. */
static void *steps_to_deadline(void *arg) {
  (void)arg;
  weft_scope s;
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&s, d);
  int n = 0, rc;
  while ((rc = weft_sleep(WEFT_MS(3))) == 0)
    n++;
  CHECK_EQ(rc, -ETIMEDOUT);
  check_reached(d);
  CHECK_GE(n, 1);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  /* Yields too meet it. */
  d = weft_now() + WEFT_MS(10);
  weft_scope_enter(&s, d);
  while ((rc = weft_yield()) == 0)
    CHECK_LT(weft_now() - d, LATE);
  CHECK_EQ(rc, -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  return NULL;
}

/* A deadline that passes while no blocking call is made: reported by the
 * first call that meets it, not before. */
static void *passes_unseen(void *arg) {
  (void)arg;
  weft_scope s;
  int64_t d = weft_now() + WEFT_MS(5);
  weft_scope_enter(&s, d);
  while (weft_now() < d + WEFT_MS(5))
    ;
  CHECK_EQ(weft_scope_exit(&s), 0);
  CHECK_EQ(weft_yield(), 0);

  d = weft_now() + WEFT_MS(5);
  weft_scope_enter(&s, d);
  while (weft_now() < d + WEFT_MS(5))
    ;
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);

  /* Already past at enter; WEFT_NEVER. */
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  weft_scope_enter(&s, WEFT_NEVER);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_scope_exit(&s), 0);
  return NULL;
}

/* Regression test: a deadline that passed earlier in the current turn of
 * the loop (or 1 ns before enter) is past: a call that could complete at
 * once (a done future, a byte waiting) returns -ETIMEDOUT and does not
 * happen. Comparing with the clock read at the start of the turn lets it
 * go ahead. */
static void *passed_in_this_turn(void *arg) {
  (void)arg;
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_set_result(f, P(1)), 0);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CHECK_EQ(send(sv[1], "x", 1, 0), 1);
  char c = 0;
  weft_scope s;
  int64_t d = weft_now() + WEFT_MS(2);
  weft_scope_enter(&s, d);
  while (weft_now() <= d + WEFT_MS(1))
    ; /* no blocking call: the same turn */
  CHECK_EQ(weft_await(f, NULL), -ETIMEDOUT);
  CHECK_EQ(weft_recv(sv[0], &c, 1, 0), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_await(f, NULL), -ETIMEDOUT);
  CHECK_EQ(weft_recv(sv[0], &c, 1, 0), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_recv(sv[0], &c, 1, 0), 1); /* it was not consumed */
  CHECK_EQ(c, 'x');
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  weft_future_release(f);
  return NULL;
}

static void test_deadline_passed_in_this_turn(void) {
  run(passed_in_this_turn, NULL);
}

/* One task's scope is its own: another task sleeps through it. */
static void *unscoped_sleeper(void *arg) {
  (void)arg;
  return P(weft_sleep(WEFT_MS(40)));
}

static void *scopes_are_per_task(void *arg) {
  (void)arg;
  weft_task *t = weft_spawn(unscoped_sleeper, NULL);
  CHECK(t);
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(10));
  CHECK_EQ(weft_join(t, NULL), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 0);
  return NULL;
}

static void test_nesting(void) {
  run(outer_earlier, NULL);
  run(inner_earlier, NULL);
  run(three_levels, NULL);
  run(steps_to_deadline, NULL);
  run(passes_unseen, NULL);
  run(scopes_are_per_task, NULL);
  CHECK_SUBTEST(test_deadline_passed_in_this_turn);
}

/* ---- weft_scope_cancel ------------------------------------------------------- */
static weft_scope *shared_scope;
static int parked;

static void *scope_victim(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, WEFT_NEVER);
  shared_scope = &s;
  parked = 1;
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_yield(), -ECANCELED);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED);
  shared_scope = NULL;
  /* The task itself was not cancelled. */
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_yield(), 0);
  return P(1);
}

static void *scope_cancel_main(void *arg) {
  (void)arg;
  parked = 0;
  weft_task *t = weft_spawn(scope_victim, NULL);
  CHECK(t);
  while (!parked)
    CHECK_EQ(weft_yield(), 0);
  weft_scope_cancel(shared_scope);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 1);
  return NULL;
}

static void *scope_cancel_self(void *arg) {
  (void)arg;
  weft_scope s;
  /* Cancelled with no blocking call inside: still reported. */
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_cancel(&s);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED);
  CHECK_EQ(weft_yield(), 0);
  /* Cancelled, then a call: -ECANCELED at once. */
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_cancel(&s);
  int64_t t0 = weft_now();
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_LT(weft_now() - t0, LATE);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED);
  CHECK_EQ(weft_sleep(0), 0);
  /* -ECANCELED wins over a deadline that has passed. */
  weft_scope_enter(&s, weft_now() - 1);
  weft_scope_cancel(&s);
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED); /* both: -ECANCELED */
  CHECK_EQ(weft_sleep(0), 0);
  /* An inner scope cancelled inside an outer one past its deadline: the
   * call returns -ECANCELED, and it met the outer deadline all the same
   * (the outer exit returned 0: the walk stopped at the inner scope). */
  weft_scope outer;
  weft_scope_enter(&outer, weft_now() - 1);
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_cancel(&s);
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&outer), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(0), 0);
  /* The other way round: the outer scope cancelled, the inner past its
   * deadline. The call gives -ECANCELED, and the inner exit its own
   * expiry, which the call met all the same (weft.h). */
  weft_scope_enter(&outer, WEFT_NEVER);
  weft_scope_cancel(&outer);
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&outer), -ECANCELED);
  CHECK_EQ(weft_sleep(0), 0);
  return NULL;
}

/* The outer scope cancelled while the task blocks in an inner one. */
static void *outer_victim(void *arg) {
  (void)arg;
  weft_scope outer, inner;
  weft_scope_enter(&outer, WEFT_NEVER);
  weft_scope_enter(&inner, WEFT_NEVER);
  shared_scope = &outer;
  parked = 1;
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&inner), 0); /* not its own */
  CHECK_EQ(weft_yield(), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&outer), -ECANCELED);
  shared_scope = NULL;
  CHECK_EQ(weft_yield(), 0);
  return P(2);
}

static void *outer_cancel_main(void *arg) {
  (void)arg;
  parked = 0;
  weft_task *t = weft_spawn(outer_victim, NULL);
  CHECK(t);
  while (!parked)
    CHECK_EQ(weft_yield(), 0);
  weft_scope_cancel(shared_scope);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 2);
  return NULL;
}

/* weft_cancel of the task: not the scope's, so exit is 0; after it the
 * task is still cancelled. */
static void *task_cancel_victim(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_SEC(10));
  parked = 1;
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), 0);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  CHECK_EQ(weft_yield(), -ECANCELED);
  /* And in a scope whose deadline has passed, -ECANCELED wins. */
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  /* s's own expiry, met by the call all the same (weft.h). */
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  return P(3);
}

static void *task_cancel_main(void *arg) {
  (void)arg;
  parked = 0;
  weft_task *t = weft_spawn(task_cancel_victim, NULL);
  CHECK(t);
  while (!parked)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), 0);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 3);
  return NULL;
}

static void test_cancel(void) {
  run(scope_cancel_main, NULL);
  run(scope_cancel_self, NULL);
  run(outer_cancel_main, NULL);
  run(task_cancel_main, NULL);
}

/* ---- shields ---------------------------------------------------------------- */
static int cancel_sent;

static void *shielded_sleeper(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_shield(&s, true);
  parked = 1;
  int64_t t0 = weft_loop_now(); /* what the sleep is measured from */
  CHECK_EQ(weft_sleep(WEFT_MS(30)), 0); /* not interrupted */
  CHECK_GE(weft_now() - t0, WEFT_MS(30));
  CHECK_EQ(cancel_sent, 1); /* the cancellation came while it slept */
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_scope_exit(&s), 0);
  /* Out of the shield, the cancellation is there. */
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_yield(), -ECANCELED);
  return P(4);
}

static void *shield_task_cancel_main(void *arg) {
  (void)arg;
  parked = cancel_sent = 0;
  weft_task *t = weft_spawn(shielded_sleeper, NULL);
  CHECK(t);
  while (!parked)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), 0);
  cancel_sent = 1;
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 4);
  return NULL;
}

static void *shield_own_deadline(void *arg) {
  (void)arg;
  weft_scope s;
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&s, d);
  weft_scope_shield(&s, true);
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(0), 0);
  return NULL;
}

static void *shield_outer_deadline(void *arg) {
  (void)arg;
  weft_scope outer, inner;
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&outer, d);
  weft_scope_enter(&inner, WEFT_NEVER);
  weft_scope_shield(&inner, true);
  /* Sleeps that go past the outer deadline complete. */
  while (weft_now() < d + WEFT_MS(5))
    CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_scope_exit(&inner), 0);
  CHECK_EQ(weft_sleep(0), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&outer), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(0), 0);
  /* A shield with its own, later deadline: the outer one still does not
   * reach in, its own does. */
  d = weft_now() + WEFT_MS(10);
  weft_scope_enter(&outer, d);
  int64_t d2 = weft_now() + WEFT_MS(40);
  weft_scope_enter(&inner, d2);
  weft_scope_shield(&inner, true);
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d2);
  CHECK_EQ(weft_scope_exit(&inner), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(0), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&outer), -ETIMEDOUT);
  return NULL;
}

/* The outer scope cancelled while the task sleeps in a shielded inner
 * one; then the shielded one itself. */
static weft_scope *inner_scope;

static void *shield_outer_victim(void *arg) {
  (void)arg;
  weft_scope outer, inner;
  weft_scope_enter(&outer, WEFT_NEVER);
  weft_scope_enter(&inner, WEFT_NEVER);
  weft_scope_shield(&inner, true);
  shared_scope = &outer;
  inner_scope = &inner;
  parked = 1;
  CHECK_EQ(weft_sleep(WEFT_MS(30)), 0);
  CHECK_EQ(cancel_sent, 1);
  /* Its own cancellation does reach it. */
  parked = 2;
  CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&inner), -ECANCELED);
  CHECK_EQ(weft_sleep(0), -ECANCELED); /* the outer's, now */
  CHECK_EQ(weft_scope_exit(&outer), -ECANCELED);
  CHECK_EQ(weft_sleep(0), 0);
  return P(5);
}

static void *shield_outer_cancel_main(void *arg) {
  (void)arg;
  parked = cancel_sent = 0;
  weft_task *t = weft_spawn(shield_outer_victim, NULL);
  CHECK(t);
  while (parked != 1)
    CHECK_EQ(weft_yield(), 0);
  weft_scope_cancel(shared_scope);
  cancel_sent = 1;
  while (parked != 2)
    CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  weft_scope_cancel(inner_scope);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 5);
  return NULL;
}

/* A task already cancelled does its cleanup in a shield; turning the
 * shield off lets the cancellation in. */
static void *cleanup_in_shield(void *arg) {
  (void)arg;
  CHECK_EQ(weft_cancel(weft_self()), 0);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  weft_scope s;
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_shield(&s, true);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_yield(), 0);
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_set_result(f, P(1)), 0);
  CHECK_EQ(weft_await(f, NULL), 0);
  weft_future_release(f);
  weft_scope_shield(&s, false);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), 0); /* the task's, not the scope's */
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  /* A shield inside a scope that is not shielded: the same. */
  weft_scope outer, inner;
  weft_scope_enter(&outer, WEFT_NEVER);
  weft_scope_enter(&inner, WEFT_NEVER);
  weft_scope_shield(&inner, true);
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_scope_exit(&inner), 0);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  CHECK_EQ(weft_scope_exit(&outer), 0);
  return NULL;
}

/* The shield turned off by another task while the shielded one sleeps,
 * cancelled: the cancellation it held back reaches the sleep at once. */
static weft_scope *off_scope;

static void *shield_off_victim(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_shield(&s, true);
  off_scope = &s;
  parked = 1;
  int rc = weft_sleep(WEFT_SEC(10));
  parked = 2;
  CHECK_EQ(rc, -ECANCELED);
  CHECK_EQ(weft_scope_exit(&s), 0); /* the task's, not the scope's */
  return P(6);
}

static void *shield_off_main(void *arg) {
  (void)arg;
  parked = 0;
  weft_task *t = weft_spawn(shield_off_victim, NULL);
  CHECK(t);
  while (!parked)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), 0);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(parked, 1); /* shielded: still asleep */
  weft_scope_shield(off_scope, false);
  for (int i = 0; i < 3 && parked != 2; i++)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(parked, 2);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 6);
  return NULL;
}

static void test_shield(void) {
  run(shield_task_cancel_main, NULL);
  run(shield_own_deadline, NULL);
  run(shield_outer_deadline, NULL);
  run(shield_outer_cancel_main, NULL);
  run(cleanup_in_shield, NULL);
  run(shield_off_main, NULL);
}

/* ---- misuse ---------------------------------------------------------------- */
static void *out_of_order(void *arg) {
  (void)arg;
  weft_scope outer, inner;
  weft_scope_enter(&outer, WEFT_NEVER);
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&inner, d);
  CHECK_EQ(weft_scope_exit(&outer), -EINVAL);
  /* Nothing changed: the inner scope's deadline is in force. */
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&outer), -EINVAL);
  CHECK_EQ(weft_scope_exit(&inner), -ETIMEDOUT);
  CHECK_EQ(weft_sleep(0), 0);
  CHECK_EQ(weft_scope_exit(&outer), 0);
  /* Twice: neither is the innermost any more. */
  CHECK_EQ(weft_scope_exit(&outer), -EINVAL);
  CHECK_EQ(weft_scope_exit(&inner), -EINVAL);
  /* Never entered. */
  weft_scope z;
  memset(&z, 0, sizeof z);
  CHECK_EQ(weft_scope_exit(&z), -EINVAL);
  CHECK_EQ(weft_yield(), 0);
  return NULL;
}

/* Entered twice (directly, and with another scope between): the second
 * enter does nothing. It once linked the scope to itself, and the next
 * blocking call went round the chain for ever. */
static void *entered_twice(void *arg) {
  (void)arg;
  weft_scope s, mid;
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&s, d);
  weft_scope_enter(&s, WEFT_NEVER); /* its deadline stays */
  CHECK_EQ(weft_yield(), 0);
  weft_scope_enter(&mid, WEFT_NEVER);
  weft_scope_enter(&s, WEFT_NEVER);
  CHECK_EQ(weft_scope_exit(&s), -EINVAL); /* mid is the innermost */
  CHECK_EQ(weft_scope_exit(&mid), 0);
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -EINVAL);
  CHECK_EQ(weft_sleep(0), 0);
  return NULL;
}

static void *foreign_exit(void *arg) {
  CHECK_EQ(weft_scope_exit(arg), -EINVAL); /* not this task's */
  return NULL;
}

static void *other_task_exits(void *arg) {
  (void)arg;
  weft_scope s;
  int64_t d = weft_now() + WEFT_MS(20);
  weft_scope_enter(&s, d);
  weft_task *t = weft_spawn(foreign_exit, &s);
  CHECK(t);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT); /* still in force */
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  return NULL;
}

/* From another thread, weft_scope_cancel and weft_scope_shield are ignored,
 * as weft_cancel refuses it: they would wake the task onto its loop's ready
 * queue while the loop runs (they once did); weft_scope_set_deadline is
 * -EINVAL. The loop's thread is held in pthread_join meanwhile, so the
 * calls race with nothing here. */
static weft_scope *xs;
static int xs_rc = 1, xs_set_rc = 1;
static void *xs_victim(void *arg) {
  (void)arg;
  weft_scope s, in;
  weft_scope_enter(&s, WEFT_NEVER);
  weft_scope_enter(&in, WEFT_NEVER);
  weft_scope_shield(&in, true);
  weft_scope_cancel(&s); /* held back by the shield */
  xs = &in;
  xs_rc = weft_sleep(WEFT_MS(20));
  xs = NULL;
  CHECK_EQ(weft_scope_exit(&in), 0);
  CHECK_EQ(weft_scope_exit(&s), -ECANCELED);
  return NULL;
}
static void *xs_thread(void *arg) {
  weft_scope_shield(arg, false); /* would let s's cancellation through */
  weft_scope_cancel(arg);        /* would cancel the shielded scope */
  xs_set_rc = weft_scope_set_deadline(arg, 0); /* would end the sleep */
  return NULL;
}
static void *scope_from_thread(void *arg) {
  (void)arg;
  weft_task *v = weft_spawn(xs_victim, NULL);
  CHECK(v);
  CHECK_EQ(weft_yield(), 0); /* v parks in its sleep */
  CHECK(xs != NULL);
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, xs_thread, xs), 0);
  CHECK_EQ(pthread_join(th, NULL), 0);
  CHECK_EQ(weft_join(v, NULL), 0);
  CHECK_EQ(xs_rc, 0); /* neither cancelled nor unshielded, nor expired */
  CHECK_EQ(xs_set_rc, -EINVAL);
  return NULL;
}

static void test_misuse(void) {
  /* Outside any loop, and in a loop but outside a task. */
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(1));
  CHECK_EQ(weft_scope_set_deadline(&s, WEFT_NEVER), -EINVAL);
  CHECK_EQ(weft_scope_exit(&s), -EINVAL);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_scope_enter(&s, weft_now() + WEFT_MS(1));
  CHECK_EQ(loop->heap_len, 0);
  CHECK_EQ(weft_scope_exit(&s), -EINVAL);
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  run(out_of_order, NULL);
  run(entered_twice, NULL);
  run(other_task_exits, NULL);
  run(scope_from_thread, NULL);
}

/* ---- scopes in a generator's body -------------------------------------------
 * A scope the body enters is the body's: it may not yield inside it
 * (-EINVAL, and it goes on; the scope used to stay the task's innermost
 * after the yield, so that the caller's own exit failed and its calls met
 * the body's deadline), nor leave its caller's scope; and returning inside
 * one aborts, as a task's return does. */
static void *scoped_body(weft_gen *g, void *arg) {
  weft_scope *caller = arg, s;
  CHECK_EQ(weft_scope_exit(caller), -EINVAL); /* not the body's to leave */
  weft_scope_enter(&s, weft_now() + WEFT_MS(10));
  CHECK_EQ(weft_gen_yield(g, P(1), NULL), -EINVAL);
  CHECK_EQ(weft_sleep(WEFT_SEC(5)), -ETIMEDOUT); /* its own deadline */
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_gen_yield(g, P(2), NULL), 0); /* out of it: fine */
  return P(3);
}

static void *gen_scopes(void *arg) {
  (void)arg;
  weft_scope c;
  weft_scope_enter(&c, weft_now() + WEFT_SEC(10));
  weft_gen *g = weft_gen_new(scoped_body, &c, 0);
  CHECK(g);
  void *out = NULL;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_EQ(I(out), 2);
  CHECK_EQ(weft_sleep(WEFT_MS(20)), 0); /* not under the body's deadline */
  CHECK_EQ(weft_gen_send(g, NULL, &out), 0);
  CHECK_EQ(I(out), 3);
  weft_gen_free(g);
  CHECK_EQ(weft_scope_exit(&c), 0);
  return NULL;
}

static void *leaky_body(weft_gen *g, void *arg) {
  weft_scope *s = arg;
  (void)g;
  weft_scope_enter(s, weft_now() + WEFT_SEC(1));
  return NULL;
}

static void *leaky_task(void *arg) {
  (void)arg;
  static weft_scope s;
  weft_gen *g = weft_gen_new(leaky_body, &s, 0);
  weft_gen_send(g, NULL, NULL);
  CHECK(0); /* not reached */
  return NULL;
}

static void leaky_child(void *arg) { run(leaky_task, arg); }

static void *leaky_plain(void *arg) {
  (void)arg;
  static weft_scope s;
  weft_scope_enter(&s, WEFT_NEVER);
  return NULL; /* no weft_scope_exit */
}

static void leaky_plain_child(void *arg) { run(leaky_plain, arg); }

static void test_gen_scopes(void) {
  run(gen_scopes, NULL);
  check_child res;
  check_child_run(leaky_child, NULL, &res, 60);
  CHECK(WIFSIGNALED(res.status) && WTERMSIG(res.status) == SIGABRT);
  CHECK(strstr(res.err, "weft: generator ") &&
        strstr(res.err, " returned inside a scope (weft_scope_exit missing)"));
  /* A task's body, the same. */
  check_child_run(leaky_plain_child, NULL, &res, 60);
  CHECK(WIFSIGNALED(res.status) && WTERMSIG(res.status) == SIGABRT);
  CHECK(strstr(res.err, "weft: task ") &&
        strstr(res.err, " returned inside a scope (weft_scope_exit missing)"));
}

/* ---- timers --------------------------------------------------------------- */
static void *no_timer(void *arg) {
  (void)arg;
  CHECK_EQ(timers_armed(), 0);
  weft_scope a, b;
  weft_scope_enter(&a, weft_now() + WEFT_SEC(1));
  weft_scope_enter(&b, weft_now() + WEFT_MS(500));
  CHECK_EQ(timers_armed(), 0);
  /* Work that does not block, and a cancellation point that does not
   * wait. */
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_set_result(f, P(3)), 0);
  void *v = NULL;
  CHECK_EQ(weft_await(f, &v), 0);
  CHECK_EQ(I(v), 3);
  weft_future_release(f);
  CHECK_EQ(timers_armed(), 0);
  CHECK_EQ(weft_scope_exit(&b), 0);
  CHECK_EQ(weft_scope_exit(&a), 0);
  CHECK_EQ(timers_armed(), 0);
  /* A sleep inside: whatever the scope armed is gone at its exit. */
  weft_scope_enter(&a, weft_now() + WEFT_SEC(10));
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(weft_scope_exit(&a), 0);
  CHECK_EQ(timers_armed(), 0);
  /* The same after an expiry. */
  weft_scope_enter(&a, weft_now() + WEFT_MS(5));
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&a), -ETIMEDOUT);
  CHECK_EQ(timers_armed(), 0);
  /* Many scopes in a row cost nothing that stays. */
  for (int i = 0; i < 10000; i++) {
    weft_scope_enter(&a, weft_now() + WEFT_SEC(1));
    CHECK_EQ(weft_scope_exit(&a), 0);
  }
  CHECK_EQ(timers_armed(), 0);
  return NULL;
}

/* ---- moving a deadline -------------------------------------------------- */
/* An idle timeout: another task pushes the deadline back while the reader
 * is parked; the wait ends at the new deadline, not the old one. The
 * reader's result is checked by idle_main, which knows whether it was on
 * time: if its own 20 ms sleep ended after the old deadline (the machine
 * held the process off the CPU that long), both timers came due in one
 * turn and the reader's wait ended at the old deadline before the move,
 * as it should; the case then says so (idle_late) instead of checking. */
static weft_scope *idle_scope;
static int64_t idle_moved_to;
static int idle_rc, idle_late;
static int64_t idle_ended;

static void *idle_reader(void *arg) {
  int64_t old = *(int64_t *)arg;
  weft_scope s;
  weft_scope_enter(&s, old);
  idle_scope = &s;
  idle_rc = weft_sleep(FOREVER);
  idle_ended = weft_now();
  idle_scope = NULL;
  CHECK_EQ(weft_scope_exit(&s), idle_rc);
  return NULL;
}

static void *idle_main(void *arg) {
  (void)arg;
  int64_t old = weft_now() + WEFT_MS(60);
  weft_task *r = weft_spawn(idle_reader, &old);
  CHECK(r);
  CHECK_EQ(weft_sleep(WEFT_MS(20)), 0); /* the reader is parked */
  idle_late = weft_now() >= old;
  CHECK(idle_late || idle_scope != NULL);
  idle_moved_to = weft_now() + WEFT_MS(100);
  if (!idle_late)
    CHECK_EQ(weft_scope_set_deadline(idle_scope, idle_moved_to), 0);
  CHECK_EQ(weft_join(r, NULL), 0);
  if (idle_late)
    return NULL;
  CHECK_EQ(idle_rc, -ETIMEDOUT);
  CHECK_GE(idle_ended, idle_moved_to);
  CHECK_LT(idle_ended - idle_moved_to, LATE);
  return NULL;
}

/* Brought forward to a time past: the parked call ends at once. */
static void *now_reader(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, weft_now() + FOREVER);
  idle_scope = &s;
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  idle_scope = NULL;
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  return P(1);
}

static void *now_main(void *arg) {
  (void)arg;
  weft_task *r = weft_spawn(now_reader, NULL);
  CHECK(r);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK(idle_scope != NULL);
  int64_t t0 = weft_now();
  CHECK_EQ(weft_scope_set_deadline(idle_scope, t0 - 1), 0);
  void *res;
  CHECK_EQ(weft_join(r, &res), 0);
  CHECK_EQ(I(res), 1);
  CHECK_LT(weft_now() - t0, LATE);
  return NULL;
}

/* From the scope's own task: lifted (WEFT_NEVER) before the first park, a
 * sleep past the old deadline completes, and no timer is left armed;
 * moving an inner deadline past an outer one hands the wait to the outer
 * one's timer. Misuse: -EINVAL. */
static void *own_main(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(10));
  CHECK_EQ(weft_scope_set_deadline(&s, WEFT_NEVER), 0);
  CHECK_EQ(weft_sleep(WEFT_MS(30)), 0);
  CHECK_EQ(weft_scope_exit(&s), 0);

  weft_scope outer, inner;
  int64_t d = weft_now() + WEFT_MS(40);
  weft_scope_enter(&outer, d);
  weft_scope_enter(&inner, weft_now() + WEFT_MS(10));
  CHECK_EQ(weft_sleep(WEFT_MS(1)), 0); /* the inner one's timer is armed */
  CHECK_EQ(timers_armed(), 1);
  CHECK_EQ(weft_scope_set_deadline(&inner, weft_now() + FOREVER), 0);
  CHECK_EQ(timers_armed(), 0); /* disarmed; the next park arms outer's */
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  check_reached(d);
  CHECK_EQ(weft_scope_exit(&inner), 0);
  CHECK_EQ(weft_scope_exit(&outer), -ETIMEDOUT);

  weft_scope never;
  CHECK_EQ(weft_scope_set_deadline(NULL, 0), -EINVAL);
  weft_scope_enter(&never, WEFT_NEVER);
  CHECK_EQ(weft_scope_exit(&never), 0);
  CHECK_EQ(weft_scope_set_deadline(&never, 0), -EINVAL); /* exited */
  return NULL;
}

/* A deadline a call has met stays met, for the calls after it too
 * (level-triggered, as trio's cancel_called): pushing it back does not let
 * the code inside wait again. */
static void *met_main(void *arg) {
  (void)arg;
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(5));
  CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
  CHECK_EQ(weft_scope_set_deadline(&s, weft_now() + FOREVER), 0);
  CHECK_EQ(weft_sleep(WEFT_MS(1)), -ETIMEDOUT);
  CHECK_EQ(weft_yield(), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  return NULL;
}

static void test_set_deadline(void) {
  run(met_main, NULL);
  /* idle_main on the real clock: seen to fail (the reader's wait ended at
   * the old deadline, 100 ms before the new one) when the process was held
   * off the CPU past the old deadline during main's sleep; a run that was
   * that late is not a test, and runs again, up to 5 times in all. On the
   * virtual clock it always is one. */
  for (int tries = 1; tries <= 5; tries++) {
    run(idle_main, NULL);
    if (!idle_late)
      break;
    printf("  moving a deadline back: main woke past the old deadline (%s)\n",
           tries < 5 ? "again" : "not checked on the real clock");
  }
  weft_config vclock = {.virtual_clock = true};
  run_with(&vclock, idle_main, NULL);
  CHECK(!idle_late);
  run(now_main, NULL);
  /* On the virtual clock: its checks of which timer is armed after a 1 ms
   * sleep assume the inner deadline (10 ms) has not passed yet, and on the
   * real clock a loaded machine that held the process off the CPU for 10
   * ms let it pass (timers_armed() == 1 failed: 0 vs 1, once in 4 runs
   * beside two busy loops and the aarch64 suite). */
  run_with(&vclock, own_main, NULL);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  alarm(RUNNING_ON_VALGRIND ? 110 : 60);
  int fds = check_fd_count();
  test_nesting();
  test_cancel();
  test_shield();
  test_misuse();
  test_gen_scopes();
  test_set_deadline();
  run(no_timer, NULL);
  CHECK_EQ(check_fd_count(), fds);
  CHECK_EQ(check_subtest_failures, 0);
  printf("test_scope: ok\n");
  return 0;
}
