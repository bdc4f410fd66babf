/*
 * Task-aware synchronisation: mutex, condition variable, semaphore, event.
 *
 *  - mutex: FIFO hand-off with no barging (the owner unlocks and its own
 *    trylock right after is -EBUSY, because the first waiter owns it now;
 *    waiters acquire in the order they came); -EDEADLK on a relock by the
 *    owner (nothing changes); -EPERM unlocking a mutex never locked, or
 *    held by another task (the owner keeps it); trylock; a blocked lock
 *    cancelled (from another task, or before the task ran: -ECANCELED even
 *    when it was free) is not acquired and leaves the queue intact, the
 *    next waiter still gets it; a scope's deadline: -ETIMEDOUT, the same;
 *    a lock handed over before the cancellation came stands;
 *  - cond: signal wakes the first waiter only, broadcast every one; a
 *    signal with no waiter is lost (as pthread's); wait returns with the
 *    mutex held, and one cut short by a cancellation or a deadline returns
 *    -ECANCELED / -ETIMEDOUT with the mutex held too (taken back only once
 *    its holder lets go); one cancelled before it waits never lets the
 *    mutex go (a task queued on it does not get it in between); -EPERM when
 * waiting without holding the mutex; a cancelled waiter leaves the queue, a
 * later signal goes to the next; -EDEADLK, without the mutex, when the
 * mutex got another loop's waiters while the task waited;
 *  - sem: counting, trywait -EAGAIN, FIFO hand-off on post (a trywait right
 *    after the post finds nothing: the unit went to the waiter), value,
 *    cancellation and deadlines (no unit taken), -EOVERFLOW at SIZE_MAX;
 *  - event: set wakes every waiter (even if cleared before they run); a
 *    wait on a set event returns 0 at once, but is still a cancellation
 *    point; clear; cancellation; deadline;
 *  - WEFT_MUTEX_INIT, WEFT_COND_INIT, WEFT_EVENT_INIT work without _init;
 *  - a task dropped holding a mutex (its loop freed) leaves it held, and
 *    the next loop's task on the same handle is not taken for its owner;
 *  - misuse: NULL, outside a task.
 *
 * Each case runs in a subtest of its own on a fresh loop, which must end at
 * once with no task, timer or callback left.
 */
#include "weft.h"

#include "internal.h"

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LATE     WEFT_SEC(5)
#define DEADLINE WEFT_MS(20)
#define PENDING  12345

/* ---- running a case ------------------------------------------------------ */
#define CASE_LATE LATE
#include "case_check.h"

static void settle(void) {
  for (int i = 0; i < 4; i++)
    CHECK_EQ(weft_yield(), 0);
}

#define JOIN(t) CHECK_EQ(weft_join((t), NULL), 0)

/* The order things happened in: "B" when task B acquired, and so on. */
static char trace[256];
static void note(const char *s) {
  CHECK_LT(strlen(trace) + strlen(s), sizeof trace);
  strcat(trace, s);
}

/* ---- a task that waits on one primitive ---------------------------------- */
enum { W_LOCK, W_COND, W_SEM, W_EVENT };

typedef struct waiter {
  int kind;
  const char *name; /* noted in the trace when the wait returns 0 */
  weft_mutex *m;
  weft_cond *c;
  weft_sem *s;
  weft_event *e;
  int64_t timeout; /* > 0: in a scope with a deadline this far ahead */
  int hold;        /* yields to hold the mutex for before unlocking */
  int rc;          /* the wait's result (PENDING until it returns) */
  int scope_rc;    /* weft_scope_exit's */
  int unlock_rc;   /* the unlock after the wait (W_LOCK, W_COND) */
  int next_rc;     /* a weft_yield after it all */
  int held_after;  /* W_COND: trylock by another task saw it held */
} waiter;

static void *waiter_main(void *arg) {
  waiter *w = arg;
  weft_scope sc;
  if (w->timeout)
    weft_scope_enter(&sc, weft_now() + w->timeout);
  switch (w->kind) {
  case W_LOCK: w->rc = weft_mutex_lock(w->m); break;
  case W_COND:
    CHECK_EQ(weft_mutex_lock(w->m), 0);
    w->rc = weft_cond_wait(w->c, w->m);
    break;
  case W_SEM: w->rc = weft_sem_wait(w->s); break;
  case W_EVENT: w->rc = weft_event_wait(w->e); break;
  }
  if (w->timeout)
    w->scope_rc = weft_scope_exit(&sc);
  if (w->rc == 0 && w->name)
    note(w->name);
  if (w->kind == W_LOCK || w->kind == W_COND) {
    /* Hold it a while (in a shield: a cancelled holder still lets go at
     * the end, and its yields are not cut short). */
    weft_scope shield;
    weft_scope_enter(&shield, WEFT_NEVER);
    weft_scope_shield(&shield, true);
    for (int i = 0; i < w->hold; i++)
      CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_scope_exit(&shield), 0);
    w->unlock_rc = weft_mutex_unlock(w->m);
  }
  w->next_rc = weft_yield();
  return NULL;
}

static weft_task *start(waiter *w, int kind, const char *name) {
  w->kind = kind;
  w->name = name;
  w->rc = w->scope_rc = w->unlock_rc = w->next_rc = PENDING;
  weft_task *t = weft_spawn(waiter_main, w);
  CHECK(t);
  return t;
}

/* ---- mutex --------------------------------------------------------------- */
static void *mutex_basic_main(void *arg) {
  (void)arg;
  weft_mutex m;
  weft_mutex_init(&m);
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM); /* never locked */
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_trylock(&m), -EBUSY); /* the caller included */
  CHECK_EQ(weft_mutex_lock(&m), -EDEADLK);
  CHECK_EQ(weft_mutex_unlock(&m), 0); /* the relock changed nothing */
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM);
  CHECK_EQ(weft_mutex_lock(&m), 0);
  CHECK_EQ(weft_mutex_lock(&m), -EDEADLK);
  CHECK_EQ(weft_mutex_trylock(&m), -EBUSY);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  /* Static initialiser. */
  static weft_mutex sm = WEFT_MUTEX_INIT;
  CHECK_EQ(weft_mutex_unlock(&sm), -EPERM);
  CHECK_EQ(weft_mutex_lock(&sm), 0);
  CHECK_EQ(weft_mutex_trylock(&sm), -EBUSY);
  CHECK_EQ(weft_mutex_unlock(&sm), 0);

  /* No waiter: lock and unlock never block, many times. */
  for (int i = 0; i < 1000; i++) {
    CHECK_EQ(weft_mutex_lock(&m), 0);
    CHECK_EQ(weft_mutex_unlock(&m), 0);
  }
  return NULL;
}

/* Held by another task: unlock is -EPERM, trylock -EBUSY, and the owner
 * keeps it. */
static weft_mutex shared_m;
static int other_rc[3];
static void *other_tries(void *arg) {
  (void)arg;
  other_rc[0] = weft_mutex_unlock(&shared_m);
  other_rc[1] = weft_mutex_trylock(&shared_m);
  other_rc[2] = weft_mutex_unlock(&shared_m);
  return NULL;
}

static void *mutex_other_main(void *arg) {
  (void)arg;
  weft_mutex_init(&shared_m);
  CHECK_EQ(weft_mutex_lock(&shared_m), 0);
  weft_task *t = weft_spawn(other_tries, NULL);
  CHECK(t);
  JOIN(t);
  CHECK_EQ(other_rc[0], -EPERM);
  CHECK_EQ(other_rc[1], -EBUSY);
  CHECK_EQ(other_rc[2], -EPERM);
  CHECK_EQ(weft_mutex_trylock(&shared_m), -EBUSY); /* still ours */
  CHECK_EQ(weft_mutex_unlock(&shared_m), 0);
  /* Free now: the other task can take it. */
  t = weft_spawn(other_tries, NULL);
  CHECK(t);
  JOIN(t);
  CHECK_EQ(other_rc[0], -EPERM);
  CHECK_EQ(other_rc[1], 0);
  CHECK_EQ(other_rc[2], 0);
  CHECK_EQ(weft_mutex_trylock(&shared_m), 0);
  CHECK_EQ(weft_mutex_unlock(&shared_m), 0);
  return NULL;
}

/* A holds, B and C queue; A unlocks and cannot take it back at once. */
static void *mutex_fifo_main(void *arg) {
  (void)arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  trace[0] = '\0';
  waiter b = {.m = &m, .hold = 2}, c = {.m = &m, .hold = 2};
  CHECK_EQ(weft_mutex_lock(&m), 0);
  weft_task *tb = start(&b, W_LOCK, "B"), *tc = start(&c, W_LOCK, "C");
  settle();
  CHECK_EQ(b.rc, PENDING);
  CHECK_EQ(c.rc, PENDING);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  CHECK_EQ(weft_mutex_trylock(&m), -EBUSY); /* B owns it now */
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM);
  /* Our own lock queues behind C. */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  note("A");
  CHECK_STR_EQ(trace, "BCA");
  CHECK_EQ(b.rc, 0);
  CHECK_EQ(c.rc, 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  JOIN(tb);
  JOIN(tc);
  CHECK_EQ(b.unlock_rc, 0);
  CHECK_EQ(c.unlock_rc, 0);
  CHECK_EQ(b.next_rc, 0);
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  /* Ten waiters, in order. */
  trace[0] = '\0';
  static const char *const names[10] = {"0", "1", "2", "3", "4",
                                        "5", "6", "7", "8", "9"};
  waiter w[10];
  weft_task *t[10];
  CHECK_EQ(weft_mutex_lock(&m), 0);
  for (int i = 0; i < 10; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].m = &m;
    w[i].hold = i % 3;
    t[i] = start(&w[i], W_LOCK, names[i]);
  }
  settle();
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  for (int i = 0; i < 10; i++) {
    JOIN(t[i]);
    CHECK_EQ(w[i].rc, 0);
    CHECK_EQ(w[i].unlock_rc, 0);
  }
  CHECK_STR_EQ(trace, "0123456789");
  return NULL;
}

static void *mutex_cancel_main(void *arg) {
  (void)arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  trace[0] = '\0';

  /* B, C, D queue; C is cancelled: not locked, and B then D get it. */
  waiter b = {.m = &m, .hold = 1}, c = {.m = &m, .hold = 1},
         d = {.m = &m, .hold = 1};
  CHECK_EQ(weft_mutex_lock(&m), 0);
  weft_task *tb = start(&b, W_LOCK, "B"), *tc = start(&c, W_LOCK, "C"),
            *td = start(&d, W_LOCK, "D");
  settle();
  CHECK_EQ(weft_cancel(tc), 0);
  JOIN(tc);
  CHECK_EQ(c.rc, -ECANCELED);
  CHECK_EQ(c.unlock_rc, -EPERM); /* it never had it */
  CHECK_EQ(c.next_rc, -ECANCELED);
  CHECK_EQ(weft_mutex_trylock(&m), -EBUSY); /* still ours */
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  JOIN(tb);
  JOIN(td);
  CHECK_STR_EQ(trace, "BD");
  CHECK_EQ(b.rc, 0);
  CHECK_EQ(d.rc, 0);
  CHECK_EQ(b.unlock_rc, 0);
  CHECK_EQ(d.unlock_rc, 0);
  CHECK_EQ(weft_mutex_trylock(&m), 0); /* free again */
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  /* The only waiter cancelled: the mutex stays the owner's, and is free
   * after its unlock (nobody to hand it to). */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  tc = start(&c, W_LOCK, NULL);
  settle();
  CHECK_EQ(weft_cancel(tc), 0);
  JOIN(tc);
  CHECK_EQ(c.rc, -ECANCELED);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  /* Handed over, then cancelled before it ran: the lock stands (it owns
   * the mutex and can unlock it), and the cancellation holds after. */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  tb = start(&b, W_LOCK, NULL);
  settle();
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  CHECK_EQ(weft_cancel(tb), 0);
  JOIN(tb);
  CHECK_EQ(b.rc, 0);
  CHECK_EQ(b.unlock_rc, 0);
  CHECK_EQ(b.next_rc, -ECANCELED);
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  /* Cancelled before it ran, the mutex free: -ECANCELED all the same,
   * and not locked. */
  tb = start(&b, W_LOCK, NULL);
  CHECK_EQ(weft_cancel(tb), 0);
  JOIN(tb);
  CHECK_EQ(b.rc, -ECANCELED);
  CHECK_EQ(b.unlock_rc, -EPERM);
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  return NULL;
}

static void *mutex_deadline_main(void *arg) {
  (void)arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  trace[0] = '\0';
  waiter b = {.m = &m, .hold = 1}, c = {.m = &m, .timeout = DEADLINE},
         d = {.m = &m, .hold = 1};
  CHECK_EQ(weft_mutex_lock(&m), 0);
  int64_t t0 = weft_now();
  weft_task *tb = start(&b, W_LOCK, "B"), *tc = start(&c, W_LOCK, "C"),
            *td = start(&d, W_LOCK, "D");
  JOIN(tc);
  CHECK_GE(weft_now() - t0, DEADLINE);
  CHECK_EQ(c.rc, -ETIMEDOUT);
  CHECK_EQ(c.scope_rc, -ETIMEDOUT);
  CHECK_EQ(c.unlock_rc, -EPERM);
  CHECK_EQ(c.next_rc, 0);
  CHECK_EQ(b.rc, PENDING);
  CHECK_EQ(d.rc, PENDING);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  JOIN(tb);
  JOIN(td);
  CHECK_STR_EQ(trace, "BD");

  /* A deadline already past, the mutex free: -ETIMEDOUT, not locked. */
  weft_scope s;
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_mutex_lock(&m), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM);

  /* Acquired before a far deadline: 0, and no timer left behind. */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  c = (waiter){.m = &m, .timeout = WEFT_SEC(30)};
  tc = start(&c, W_LOCK, NULL);
  settle();
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  JOIN(tc);
  CHECK_EQ(c.rc, 0);
  CHECK_EQ(c.scope_rc, 0);
  CHECK_EQ(c.unlock_rc, 0);
  return NULL;
}

/* ---- condition variable -------------------------------------------------- */
static void *cond_main(void *arg) {
  (void)arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_cond c;
  weft_cond_init(&c);
  trace[0] = '\0';

  /* Not holding the mutex (never locked): -EPERM; cond_perm_main has
   * the mutex held by another task. */
  CHECK_EQ(weft_cond_wait(&c, &m), -EPERM);
  CHECK_EQ(weft_mutex_unlock(&m), -EPERM); /* it did not lock m either */
  static weft_cond sc = WEFT_COND_INIT;

  /* Signal: the first waiter only, FIFO; it returns with m held. */
  waiter w[3];
  weft_task *wt[3];
  static const char *const names[3] = {"1", "2", "3"};
  for (int i = 0; i < 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].m = &m;
    w[i].c = &c;
    w[i].hold = 1;
    wt[i] = start(&w[i], W_COND, names[i]);
  }
  settle();
  for (int i = 0; i < 3; i++)
    CHECK_EQ(w[i].rc, PENDING);
  CHECK_EQ(weft_mutex_trylock(&m), 0); /* each waiter let go of m */
  weft_cond_signal(&c);
  settle();
  CHECK_EQ(w[0].rc, PENDING); /* woken, but m is ours */
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  settle();
  CHECK_EQ(w[0].rc, 0);
  CHECK_EQ(w[0].unlock_rc, 0); /* it held m */
  CHECK_EQ(w[1].rc, PENDING);
  CHECK_EQ(w[2].rc, PENDING);
  CHECK_STR_EQ(trace, "1");
  weft_cond_signal(&c);
  settle();
  CHECK_STR_EQ(trace, "12");
  CHECK_EQ(w[2].rc, PENDING);
  weft_cond_signal(&c);
  for (int i = 0; i < 3; i++) {
    JOIN(wt[i]);
    CHECK_EQ(w[i].rc, 0);
    CHECK_EQ(w[i].unlock_rc, 0);
  }
  CHECK_STR_EQ(trace, "123");

  /* A signal with no waiter is lost. */
  weft_cond_signal(&c);
  weft_cond_broadcast(&c);
  memset(&w[0], 0, sizeof w[0]);
  w[0].m = &m;
  w[0].c = &c;
  wt[0] = start(&w[0], W_COND, NULL);
  settle();
  CHECK_EQ(w[0].rc, PENDING);
  settle();
  CHECK_EQ(w[0].rc, PENDING);
  weft_cond_signal(&c);
  JOIN(wt[0]);
  CHECK_EQ(w[0].rc, 0);
  CHECK_EQ(w[0].unlock_rc, 0);

  /* Broadcast: every waiter; each returns holding m, one at a time. */
  trace[0] = '\0';
  for (int i = 0; i < 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].m = &m;
    w[i].c = &sc; /* the static one */
    w[i].hold = 2;
    wt[i] = start(&w[i], W_COND, names[i]);
  }
  settle();
  weft_cond_broadcast(&sc);
  for (int i = 0; i < 3; i++) {
    JOIN(wt[i]);
    CHECK_EQ(w[i].rc, 0);
    CHECK_EQ(w[i].unlock_rc, 0);
  }
  CHECK_STR_EQ(trace, "123");
  weft_cond_signal(&sc); /* nobody left */
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  weft_cond_signal(NULL);
  weft_cond_broadcast(NULL);
  return NULL;
}

/* The mutex held by another task: cond_wait there is -EPERM. */
static weft_cond perm_c = WEFT_COND_INIT;
static int perm_rc;
static void *wait_unheld(void *arg) {
  (void)arg;
  perm_rc = weft_cond_wait(&perm_c, &shared_m);
  return NULL;
}

static void *cond_perm_main(void *arg) {
  (void)arg;
  weft_mutex_init(&shared_m);
  CHECK_EQ(weft_mutex_lock(&shared_m), 0);
  perm_rc = PENDING;
  weft_task *t = weft_spawn(wait_unheld, NULL);
  CHECK(t);
  JOIN(t);
  CHECK_EQ(perm_rc, -EPERM);
  CHECK_EQ(weft_mutex_unlock(&shared_m), 0); /* still ours */
  return NULL;
}

static void *cond_cancel_main(void *arg) {
  (void)arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_cond c = WEFT_COND_INIT;
  trace[0] = '\0';

  /* Cancelled while waiting: -ECANCELED, with m held (its unlock is 0). */
  waiter w1 = {.m = &m, .c = &c}, w2 = {.m = &m, .c = &c};
  weft_task *t1 = start(&w1, W_COND, "1");
  settle();
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);
  CHECK_EQ(w1.unlock_rc, 0);
  CHECK_EQ(w1.next_rc, -ECANCELED);
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  /* Cancelled while another task holds m: it takes m back before it
   * returns, so it returns only once the holder lets go. */
  t1 = start(&w1, W_COND, NULL);
  settle();
  CHECK_EQ(weft_mutex_lock(&m), 0);
  CHECK_EQ(weft_cancel(t1), 0);
  settle();
  CHECK_EQ(w1.rc, PENDING);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);
  CHECK_EQ(w1.unlock_rc, 0);

  /* A cancelled waiter leaves the queue: the next signal goes to the
   * second one. */
  trace[0] = '\0';
  t1 = start(&w1, W_COND, "1");
  weft_task *t2 = start(&w2, W_COND, "2");
  settle();
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);
  weft_cond_signal(&c);
  JOIN(t2);
  CHECK_EQ(w2.rc, 0);
  CHECK_EQ(w2.unlock_rc, 0);
  CHECK_STR_EQ(trace, "2");

  /* Signalled, then cancelled before it ran: the wait completed (0). */
  t1 = start(&w1, W_COND, NULL);
  settle();
  weft_cond_signal(&c);
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, 0);
  CHECK_EQ(w1.unlock_rc, 0);
  CHECK_EQ(w1.next_rc, -ECANCELED);

  /* A scope's deadline: -ETIMEDOUT, with m held. */
  w1 = (waiter){.m = &m, .c = &c, .timeout = DEADLINE};
  int64_t t0 = weft_now();
  t1 = start(&w1, W_COND, NULL);
  JOIN(t1);
  CHECK_GE(weft_now() - t0, DEADLINE);
  CHECK_EQ(w1.rc, -ETIMEDOUT);
  CHECK_EQ(w1.scope_rc, -ETIMEDOUT);
  CHECK_EQ(w1.unlock_rc, 0);
  CHECK_EQ(w1.next_rc, 0);

  /* Cancelled before it waits: -ECANCELED at once, and m was never let
   * go: a task queued on m does not get it in between. */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  waiter w3 = {.m = &m};
  weft_task *t3 = start(&w3, W_LOCK, NULL);
  settle();
  CHECK_EQ(w3.rc, PENDING);
  weft_scope cs;
  weft_scope_enter(&cs, WEFT_NEVER);
  weft_scope_cancel(&cs);
  CHECK_EQ(weft_cond_wait(&c, &m), -ECANCELED);
  CHECK_EQ(w3.rc, PENDING);
  CHECK_EQ(weft_scope_exit(&cs), -ECANCELED);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  JOIN(t3);
  CHECK_EQ(w3.rc, 0);
  CHECK_EQ(w3.unlock_rc, 0);

  /* A deadline already past: -ETIMEDOUT, with m still held. */
  CHECK_EQ(weft_mutex_lock(&m), 0);
  weft_scope s;
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_cond_wait(&c, &m), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_mutex_unlock(&m), 0);

  weft_cond_signal(&c); /* nobody waits: no-op */
  CHECK_EQ(weft_mutex_trylock(&m), 0);
  CHECK_EQ(weft_mutex_unlock(&m), 0);
  return NULL;
}

/* ---- semaphore ----------------------------------------------------------- */
static void *sem_main(void *arg) {
  (void)arg;
  weft_sem s;
  weft_sem_init(&s, 2);
  CHECK_EQ(weft_sem_value(&s), 2);
  CHECK_EQ(weft_sem_wait(&s), 0);
  CHECK_EQ(weft_sem_value(&s), 1);
  CHECK_EQ(weft_sem_trywait(&s), 0);
  CHECK_EQ(weft_sem_value(&s), 0);
  CHECK_EQ(weft_sem_trywait(&s), -EAGAIN);
  CHECK_EQ(weft_sem_value(&s), 0);
  static weft_sem st = WEFT_SEM_INIT(2); /* the static form */
  CHECK_EQ(weft_sem_value(&st), 2);
  CHECK_EQ(weft_sem_trywait(&st), 0);
  CHECK_EQ(weft_sem_trywait(&st), 0);
  CHECK_EQ(weft_sem_trywait(&st), -EAGAIN);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_value(&s), 3);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_sem_wait(&s), 0);
  CHECK_EQ(weft_sem_trywait(&s), -EAGAIN);

  /* FIFO hand-off: each post goes to the first waiter; a trywait right
   * after finds nothing. */
  trace[0] = '\0';
  waiter w[3];
  weft_task *t[3];
  static const char *const names[3] = {"1", "2", "3"};
  for (int i = 0; i < 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].s = &s;
    t[i] = start(&w[i], W_SEM, names[i]);
  }
  settle();
  for (int i = 0; i < 3; i++)
    CHECK_EQ(w[i].rc, PENDING);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_value(&s), 0);
  CHECK_EQ(weft_sem_trywait(&s), -EAGAIN); /* no barging */
  settle();
  CHECK_STR_EQ(trace, "1");
  CHECK_EQ(w[1].rc, PENDING);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_value(&s), 0);
  for (int i = 0; i < 3; i++) {
    JOIN(t[i]);
    CHECK_EQ(w[i].rc, 0);
  }
  CHECK_STR_EQ(trace, "123");
  CHECK_EQ(weft_sem_post(&s), 0); /* nobody waits: counted */
  CHECK_EQ(weft_sem_value(&s), 1);
  CHECK_EQ(weft_sem_trywait(&s), 0);

  /* The limit. */
  weft_sem big;
  weft_sem_init(&big, SIZE_MAX);
  CHECK_EQ(weft_sem_value(&big), SIZE_MAX);
  CHECK_EQ(weft_sem_post(&big), -EOVERFLOW);
  CHECK_EQ(weft_sem_value(&big), SIZE_MAX);
  CHECK_EQ(weft_sem_trywait(&big), 0);
  CHECK_EQ(weft_sem_post(&big), 0);
  CHECK_EQ(weft_sem_value(&big), SIZE_MAX);

  /* Zero units from the start. */
  weft_sem z;
  weft_sem_init(&z, 0);
  CHECK_EQ(weft_sem_value(&z), 0);
  CHECK_EQ(weft_sem_trywait(&z), -EAGAIN);
  return NULL;
}

static void *sem_cancel_main(void *arg) {
  (void)arg;
  weft_sem s;
  weft_sem_init(&s, 0);
  trace[0] = '\0';
  waiter w1 = {.s = &s}, w2 = {.s = &s};

  /* The first of two waiters cancelled: the post goes to the second. */
  weft_task *t1 = start(&w1, W_SEM, "1"), *t2 = start(&w2, W_SEM, "2");
  settle();
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);
  CHECK_EQ(w1.next_rc, -ECANCELED);
  CHECK_EQ(weft_sem_value(&s), 0);
  CHECK_EQ(weft_sem_post(&s), 0);
  JOIN(t2);
  CHECK_EQ(w2.rc, 0);
  CHECK_STR_EQ(trace, "2");
  CHECK_EQ(weft_sem_value(&s), 0);
  CHECK_EQ(weft_sem_post(&s), 0); /* nobody waits now */
  CHECK_EQ(weft_sem_value(&s), 1);
  CHECK_EQ(weft_sem_trywait(&s), 0);

  /* The unit handed over, then cancelled before it ran: it has it. */
  t1 = start(&w1, W_SEM, NULL);
  settle();
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, 0);
  CHECK_EQ(w1.next_rc, -ECANCELED);
  CHECK_EQ(weft_sem_value(&s), 0); /* not given back, not counted twice */

  /* Cancelled before it ran, a unit free: -ECANCELED, no unit taken. */
  CHECK_EQ(weft_sem_post(&s), 0);
  t1 = start(&w1, W_SEM, NULL);
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);
  CHECK_EQ(weft_sem_value(&s), 1);
  CHECK_EQ(weft_sem_trywait(&s), 0);

  /* A scope's deadline: -ETIMEDOUT, no unit taken; a later post counts. */
  w1 = (waiter){.s = &s, .timeout = DEADLINE};
  int64_t t0 = weft_now();
  t1 = start(&w1, W_SEM, NULL);
  JOIN(t1);
  CHECK_GE(weft_now() - t0, DEADLINE);
  CHECK_EQ(w1.rc, -ETIMEDOUT);
  CHECK_EQ(w1.scope_rc, -ETIMEDOUT);
  CHECK_EQ(w1.next_rc, 0);
  CHECK_EQ(weft_sem_post(&s), 0);
  CHECK_EQ(weft_sem_value(&s), 1);
  CHECK_EQ(weft_sem_trywait(&s), 0);
  return NULL;
}

/* ---- event --------------------------------------------------------------- */
static void *event_main(void *arg) {
  (void)arg;
  weft_event e;
  weft_event_init(&e);
  CHECK(!weft_event_is_set(&e));

  /* set wakes every waiter. */
  trace[0] = '\0';
  waiter w[3];
  weft_task *t[3];
  static const char *const names[3] = {"1", "2", "3"};
  for (int i = 0; i < 3; i++) {
    memset(&w[i], 0, sizeof w[i]);
    w[i].e = &e;
    t[i] = start(&w[i], W_EVENT, names[i]);
  }
  settle();
  for (int i = 0; i < 3; i++)
    CHECK_EQ(w[i].rc, PENDING);
  weft_event_set(&e);
  CHECK(weft_event_is_set(&e));
  for (int i = 0; i < 3; i++) {
    JOIN(t[i]);
    CHECK_EQ(w[i].rc, 0);
  }
  CHECK_STR_EQ(trace, "123");

  /* Set: a wait returns at once, as often as asked. */
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_event_wait(&e), 0);
  weft_event_set(&e); /* twice: still set */
  CHECK(weft_event_is_set(&e));

  /* Cleared: a wait waits again. */
  weft_event_clear(&e);
  CHECK(!weft_event_is_set(&e));
  weft_event_clear(&e);
  CHECK(!weft_event_is_set(&e));
  t[0] = start(&w[0], W_EVENT, NULL);
  settle();
  CHECK_EQ(w[0].rc, PENDING);
  weft_event_set(&e);
  JOIN(t[0]);
  CHECK_EQ(w[0].rc, 0);

  /* Set and cleared again before the waiters ran: they were woken. */
  weft_event_clear(&e);
  for (int i = 0; i < 2; i++)
    t[i] = start(&w[i], W_EVENT, NULL);
  settle();
  weft_event_set(&e);
  weft_event_clear(&e);
  for (int i = 0; i < 2; i++) {
    JOIN(t[i]);
    CHECK_EQ(w[i].rc, 0);
  }
  CHECK(!weft_event_is_set(&e));

  /* Static initialiser. */
  static weft_event se = WEFT_EVENT_INIT;
  CHECK(!weft_event_is_set(&se));
  memset(&w[0], 0, sizeof w[0]);
  w[0].e = &se;
  t[0] = start(&w[0], W_EVENT, NULL);
  settle();
  CHECK_EQ(w[0].rc, PENDING);
  weft_event_set(&se);
  JOIN(t[0]);
  CHECK_EQ(w[0].rc, 0);
  CHECK_EQ(weft_event_wait(&se), 0);

  weft_event_set(NULL);
  weft_event_clear(NULL);
  return NULL;
}

static void *event_cancel_main(void *arg) {
  (void)arg;
  weft_event e = WEFT_EVENT_INIT;
  waiter w1 = {.e = &e}, w2 = {.e = &e};

  /* One of two waiters cancelled; the other still woken by set. */
  weft_task *t1 = start(&w1, W_EVENT, NULL), *t2 = start(&w2, W_EVENT, NULL);
  settle();
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);
  CHECK_EQ(w1.next_rc, -ECANCELED);
  CHECK_EQ(w2.rc, PENDING);
  CHECK(!weft_event_is_set(&e));
  weft_event_set(&e);
  JOIN(t2);
  CHECK_EQ(w2.rc, 0);

  /* Woken by set, then cancelled before it ran: 0. */
  weft_event_clear(&e);
  t1 = start(&w1, W_EVENT, NULL);
  settle();
  weft_event_set(&e);
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, 0);
  CHECK_EQ(w1.next_rc, -ECANCELED);

  /* A set event is still a cancellation point. */
  CHECK(weft_event_is_set(&e));
  t1 = start(&w1, W_EVENT, NULL);
  CHECK_EQ(weft_cancel(t1), 0);
  JOIN(t1);
  CHECK_EQ(w1.rc, -ECANCELED);

  /* A scope's deadline. */
  weft_event_clear(&e);
  w1 = (waiter){.e = &e, .timeout = DEADLINE};
  int64_t t0 = weft_now();
  t1 = start(&w1, W_EVENT, NULL);
  JOIN(t1);
  CHECK_GE(weft_now() - t0, DEADLINE);
  CHECK_EQ(w1.rc, -ETIMEDOUT);
  CHECK_EQ(w1.scope_rc, -ETIMEDOUT);
  CHECK_EQ(w1.next_rc, 0);
  CHECK(!weft_event_is_set(&e));

  /* A deadline already past, the event set: -ETIMEDOUT. */
  weft_event_set(&e);
  weft_scope s;
  weft_scope_enter(&s, weft_now() - 1);
  CHECK_EQ(weft_event_wait(&e), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_event_wait(&e), 0);
  return NULL;
}

/* ---- misuse -------------------------------------------------------------- */
static void *misuse_main(void *arg) {
  (void)arg;
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_cond c = WEFT_COND_INIT;
  CHECK_EQ(weft_mutex_lock(NULL), -EINVAL);
  CHECK_EQ(weft_mutex_trylock(NULL), -EINVAL);
  CHECK_EQ(weft_mutex_unlock(NULL), -EINVAL);
  CHECK_EQ(weft_mutex_lock(&m), 0);
  CHECK_EQ(weft_cond_wait(NULL, &m), -EINVAL);
  CHECK_EQ(weft_cond_wait(&c, NULL), -EINVAL);
  CHECK_EQ(weft_mutex_unlock(&m), 0); /* still held after those */
  CHECK_EQ(weft_sem_wait(NULL), -EINVAL);
  CHECK_EQ(weft_sem_trywait(NULL), -EINVAL);
  CHECK_EQ(weft_sem_post(NULL), -EINVAL);
  CHECK_EQ(weft_event_wait(NULL), -EINVAL);
  weft_mutex_init(NULL);
  weft_cond_init(NULL);
  weft_sem_init(NULL, 1);
  weft_event_init(NULL);
  CHECK_EQ(weft_yield(), 0); /* none of it cancelled us */
  return NULL;
}

/* Outside a task, the waits are -EINVAL and change nothing. */
static void test_outside_task(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_mutex m = WEFT_MUTEX_INIT;
  weft_cond c = WEFT_COND_INIT;
  weft_sem s;
  weft_sem_init(&s, 0);
  weft_event e = WEFT_EVENT_INIT;
  CHECK_EQ(weft_mutex_lock(&m), -EINVAL);
  CHECK_EQ(weft_cond_wait(&c, &m), -EINVAL);
  CHECK_EQ(weft_sem_wait(&s), -EINVAL);
  CHECK_EQ(weft_event_wait(&e), -EINVAL);
  CHECK_EQ(weft_sem_value(&s), 0);
  CHECK_EQ(weft_sem_post(&s), 0); /* not a wait: works anywhere */
  CHECK_EQ(weft_sem_trywait(&s), 0);
  weft_event_set(&e);
  CHECK(weft_event_is_set(&e));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* A task that ends holding a mutex leaves it held, and a task on its
 * recycled record is not taken for the owner (it once was: its unlock
 * returned 0, its lock -EDEADLK). */
static weft_mutex ended_m = WEFT_MUTEX_INIT;
static void *locks_and_ends(void *arg) {
  (void)arg;
  CHECK_EQ(weft_mutex_lock(&ended_m), 0);
  return NULL;
}
static void *after_it(void *arg) {
  (void)arg;
  CHECK_EQ(weft_mutex_unlock(&ended_m), -EPERM);
  CHECK_EQ(weft_mutex_trylock(&ended_m), -EBUSY);
  return NULL;
}

static void test_ended_owner(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK_EQ(weft_go(locks_and_ends, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  for (int i = 0; i < 4; i++) /* the record comes back (LIFO) */
    CHECK_EQ(weft_go(after_it, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* The same across loops: a task dropped holding a mutex when its loop is
 * freed leaves it held, and a task of the next loop on the thread is not
 * taken for its owner, not even the one whose record, at the same address
 * with the same generation, has the same handle (it once was: its unlock
 * returned 0, its lock -EDEADLK). An allocator that gives a freed block
 * back to the next request of its size, as glibc's often does, makes the
 * second loop's record the first one's. */
typedef struct reuse_blk {
  size_t size;
  struct reuse_blk *next; /* while free */
  max_align_t data[];
} reuse_blk;
static reuse_blk *reuse_free;
static void *reuse_malloc(size_t n) {
  for (reuse_blk **p = &reuse_free; *p; p = &(*p)->next)
    if ((*p)->size == n) {
      reuse_blk *b = *p;
      *p = b->next;
      return b->data;
    }
  reuse_blk *b = malloc(sizeof *b + n);
  if (!b)
    return NULL;
  b->size = n;
  return b->data;
}
static void reuse_free_fn(void *q) {
  if (!q)
    return;
  reuse_blk *b = (reuse_blk *)((char *)q - offsetof(reuse_blk, data));
  b->next = reuse_free;
  reuse_free = b;
}
static void *reuse_realloc(void *q, size_t n) {
  void *r = reuse_malloc(n);
  if (r && q) {
    reuse_blk *b = (reuse_blk *)((char *)q - offsetof(reuse_blk, data));
    memcpy(r, q, b->size < n ? b->size : n);
    reuse_free_fn(q);
  }
  return r;
}

static weft_mutex dropped_m = WEFT_MUTEX_INIT;
static weft_task *dropped_h[2];
static void *locks_and_is_dropped(void *loop) {
  dropped_h[0] = weft_self();
  CHECK_EQ(weft_mutex_lock(&dropped_m), 0);
  weft_loop_stop(loop);
  CHECK_EQ(weft_yield(), 0); /* dropped here, m held */
  CHECK(0);
  return NULL;
}
static void *next_loops_task(void *arg) {
  (void)arg;
  dropped_h[1] = weft_self();
  CHECK_EQ(weft_mutex_unlock(&dropped_m), -EPERM);
  CHECK_EQ(weft_mutex_trylock(&dropped_m), -EBUSY);
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(1));
  CHECK_EQ(weft_mutex_lock(&dropped_m), -ETIMEDOUT); /* waits: not -EDEADLK */
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  return NULL;
}

static void test_dropped_owner(void) {
  /* (A subtest's own process, with no weft object alive.) */
  CHECK_EQ(weft_replace_allocator(reuse_malloc, reuse_realloc, reuse_free_fn),
           0);
  weft_config cfg = {.virtual_clock = true};
  weft_loop *loop = weft_loop_new(&cfg);
  CHECK(loop);
  CHECK_EQ(weft_go(locks_and_is_dropped, loop), 0);
  CHECK_EQ(weft_loop_run(loop), 1);
  weft_loop_free(loop);
  loop = weft_loop_new(&cfg);
  CHECK(loop);
  CHECK_EQ(weft_go(next_loops_task, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  CHECK(dropped_h[0] == dropped_h[1]); /* the case this is about arose */
}

/* A deadlock while a cond wait locks its mutex again: B holds m through
 * two shielded waits nobody will end; A waits on the condition. The first
 * deadlock cancels A's wait (A then waits for m) and B's first wait; the
 * second cancels A's wait for m, which no shield holds off: A's cond wait
 * returns -EDEADLK, the one return without m held. */
static weft_mutex dl_m = WEFT_MUTEX_INIT;
static weft_cond dl_c = WEFT_COND_INIT;
static weft_event dl_never = WEFT_EVENT_INIT;
static int dl_rc[4];

static void *dl_a(void *arg) {
  (void)arg;
  CHECK_EQ(weft_mutex_lock(&dl_m), 0);
  dl_rc[0] = weft_cond_wait(&dl_c, &dl_m);
  dl_rc[1] = weft_mutex_unlock(&dl_m);
  return NULL;
}
static void *dl_b(void *arg) {
  (void)arg;
  CHECK_EQ(weft_yield(), 0); /* A waits first */
  CHECK_EQ(weft_mutex_lock(&dl_m), 0);
  weft_scope shield;
  weft_scope_enter(&shield, WEFT_NEVER);
  weft_scope_shield(&shield, true);
  dl_rc[2] = weft_event_wait(&dl_never);
  dl_rc[3] = weft_event_wait(&dl_never);
  weft_scope_exit(&shield);
  CHECK_EQ(weft_mutex_unlock(&dl_m), 0);
  return NULL;
}

static void test_cond_deadlock(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK_EQ(weft_go(dl_a, NULL), 0);
  CHECK_EQ(weft_go(dl_b, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_EQ(dl_rc[0], -EDEADLK); /* the relock was cut short ... */
  CHECK_EQ(dl_rc[1], -EPERM);   /* ... so A does not hold m */
  CHECK_EQ(dl_rc[2], -ECANCELED);
  CHECK_EQ(dl_rc[3], -ECANCELED);
  CHECK_EQ(dl_m.priv_owner, 0);
  weft_loop_free(loop);
}

/* A loop freed while tasks wait on a mutex, a condition, a semaphore and
 * an event that outlive it (static ones): the dropped tasks leave their
 * queues, so the next loop finds none of them. */
static weft_mutex lf_m = WEFT_MUTEX_INIT, lf_cm = WEFT_MUTEX_INIT;
static weft_cond lf_c = WEFT_COND_INIT;
static weft_sem lf_s = WEFT_SEM_INIT(0);
static weft_event lf_e = WEFT_EVENT_INIT;

static int lf_held, lf_parking;     /* (any order: WEFT_SEED shuffles) */
static void *lf_holder(void *arg) { /* holds lf_m until dropped */
  (void)arg;
  CHECK_EQ(weft_mutex_lock(&lf_m), 0);
  lf_held = 1;
  for (;;)
    CHECK_EQ(weft_yield(), 0);
  return NULL;
}
static void *lf_waiter(void *arg) {
  int which = (int)(intptr_t)arg;
  while (which == 0 && !lf_held)
    CHECK_EQ(weft_yield(), 0);
  lf_parking++;
  switch (which) {
  case 0: weft_mutex_lock(&lf_m); break;
  case 1:
    CHECK_EQ(weft_mutex_lock(&lf_cm), 0);
    weft_cond_wait(&lf_c, &lf_cm);
    break;
  case 2: weft_sem_wait(&lf_s); break;
  default: weft_event_wait(&lf_e);
  }
  CHECK(0); /* never resumed */
  return NULL;
}
static void *lf_stop(void *arg) {
  while (lf_parking < 4)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_yield(), 0); /* the last of them has parked too */
  weft_loop_stop(arg);
  return NULL;
}
static void *lf_after(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sem_post(&lf_s), 0);
  CHECK_EQ(weft_sem_value(&lf_s), 1); /* not handed to a dropped waiter */
  CHECK_EQ(weft_sem_wait(&lf_s), 0);
  weft_event_set(&lf_e);
  weft_cond_broadcast(&lf_c);
  CHECK_EQ(weft_mutex_lock(&lf_cm), 0); /* the cond's waiter gave it back */
  CHECK_EQ(weft_mutex_unlock(&lf_cm), 0);
  return NULL;
}

static void test_loop_freed(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(lf_holder, NULL));
  for (int i = 0; i < 4; i++)
    CHECK(weft_spawn(lf_waiter, (void *)(intptr_t)i));
  CHECK(weft_spawn(lf_stop, loop));
  CHECK_EQ(weft_loop_run(loop), 1);
  CHECK_EQ(loop->nlive, 5);
  weft_loop_free(loop);
  CHECK(lf_c.priv_head == NULL && lf_s.priv_head == NULL);
  CHECK(lf_e.priv_head == NULL && lf_m.priv_head == NULL);
  loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(lf_after, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* Objects whose waiters are another loop's tasks: a call from another
 * loop's task, or from another thread, that would queue behind them or
 * wake them is refused (-EINVAL, or for the calls that return nothing a
 * line on stderr) and changes nothing. It once went ahead: a post woke
 * the other loop's task from there. */
static weft_sem fl_s = WEFT_SEM_INIT(0);
static weft_event fl_e = WEFT_EVENT_INIT;
static weft_mutex fl_m = WEFT_MUTEX_INIT, fl_cm = WEFT_MUTEX_INIT;
static weft_cond fl_c = WEFT_COND_INIT;
static int fl_done;

static void *fl_waiter(void *arg) {
  switch ((intptr_t)arg) {
  case 0: CHECK_EQ(weft_sem_wait(&fl_s), 0); break;
  case 1: /* holds fl_m until fl_e is set; the one waiting for it comes
           * after it took it, whatever order the tasks run in */
    CHECK_EQ(weft_mutex_lock(&fl_m), 0);
    CHECK(weft_spawn(fl_waiter, (void *)2));
    CHECK_EQ(weft_event_wait(&fl_e), 0);
    CHECK_EQ(weft_mutex_unlock(&fl_m), 0);
    break;
  case 2: /* waits for fl_m */
    CHECK_EQ(weft_mutex_lock(&fl_m), 0);
    CHECK_EQ(weft_mutex_unlock(&fl_m), 0);
    break;
  default:
    CHECK_EQ(weft_mutex_lock(&fl_cm), 0);
    CHECK_EQ(weft_cond_wait(&fl_c, &fl_cm), 0);
    CHECK_EQ(weft_mutex_unlock(&fl_cm), 0);
  }
  fl_done++;
  return NULL;
}
static void *fl_stops(void *loop) {
  for (int i = 0; i < 8; i++) /* turns enough for every waiter to park */
    CHECK_EQ(weft_yield(), 0);
  weft_loop_stop(loop);
  return NULL;
}

/* What another loop's task, or another thread, may not do now. */
static int fl_refused(int in_task) {
  int ok = weft_sem_post(&fl_s) == -EINVAL && weft_sem_value(&fl_s) == 0;
  weft_event_set(&fl_e);
  weft_cond_signal(&fl_c);
  weft_cond_broadcast(&fl_c);
  ok = ok && !weft_event_is_set(&fl_e);
  if (in_task) {
    ok = ok && weft_sem_wait(&fl_s) == -EINVAL &&
         weft_event_wait(&fl_e) == -EINVAL &&
         weft_mutex_lock(&fl_m) == -EINVAL;    /* behind the other's waiter */
    ok = ok && weft_mutex_lock(&fl_cm) == 0 && /* idle: not checked */
         weft_cond_wait(&fl_c, &fl_cm) == -EINVAL &&
         weft_mutex_unlock(&fl_cm) == 0;
  }
  return ok && fl_done == 0;
}
static void *fl_other_loop(void *arg) {
  (void)arg;
  CHECK(fl_refused(1));
  return NULL;
}
static void *fl_other_thread(void *arg) {
  (void)arg;
  return (void *)(intptr_t)fl_refused(0);
}

static void test_foreign_waiters(void) {
  weft_loop *a = weft_loop_new(NULL);
  CHECK(a);
  for (intptr_t i = 0; i < 4; i++)
    if (i != 2) /* 1 spawns it */
      CHECK(weft_spawn(fl_waiter, (void *)i));
  CHECK(weft_spawn(fl_stops, a));
  CHECK_EQ(weft_loop_run(a), 1); /* stopped, its tasks waiting */
  weft_loop *b = weft_loop_new(NULL);
  CHECK(b);
  CHECK(weft_spawn(fl_other_loop, NULL));
  CHECK_EQ(weft_loop_run(b), 0);
  weft_loop_free(b);
  pthread_t th;
  void *ok = NULL;
  CHECK_EQ(pthread_create(&th, NULL, fl_other_thread, NULL), 0);
  CHECK_EQ(pthread_join(th, &ok), 0);
  CHECK(ok == (void *)1);
  /* On a's thread, outside any run, they are a's own calls. */
  CHECK_EQ(weft_sem_post(&fl_s), 0);
  weft_event_set(&fl_e);
  weft_cond_signal(&fl_c);
  CHECK_EQ(weft_loop_run(a), 0);
  CHECK_EQ(fl_done, 4);
  weft_loop_free(a);
}

/* A condition wait whose mutex, while it waited, got waiters of another loop
 * (run on the same thread while its own was stopped): taking the mutex back
 * would queue it behind them, which is refused, so it returns -EDEADLK
 * without the mutex, as after a deadlock, though there is none. */
static weft_mutex rf_m = WEFT_MUTEX_INIT;
static weft_cond rf_c = WEFT_COND_INIT;
static weft_event rf_go = WEFT_EVENT_INIT;
static int rf_rc[3] = {PENDING, PENDING, PENDING};

static void *rf_waiter(void *arg) { /* loop a's */
  (void)arg;
  CHECK_EQ(weft_mutex_lock(&rf_m), 0);
  rf_rc[0] = weft_cond_wait(&rf_c, &rf_m);
  rf_rc[1] = weft_mutex_unlock(&rf_m);
  return NULL;
}

static void *rf_holder(void *arg) { /* loop b's: holds rf_m until rf_go */
  (void)arg;
  CHECK_EQ(weft_mutex_lock(&rf_m), 0);
  CHECK_EQ(weft_event_wait(&rf_go), 0);
  CHECK_EQ(weft_mutex_unlock(&rf_m), 0);
  return NULL;
}

static void *rf_queued(void *arg) { /* loop b's: waits for rf_m */
  (void)arg;
  rf_rc[2] = weft_mutex_lock(&rf_m);
  if (rf_rc[2] == 0)
    CHECK_EQ(weft_mutex_unlock(&rf_m), 0);
  return NULL;
}

static void *rf_stop(void *loop) {
  for (int i = 0; i < 4; i++)
    CHECK_EQ(weft_yield(), 0);
  weft_loop_stop(loop);
  return NULL;
}

static void test_cond_relock_foreign(void) {
  weft_loop *a = weft_loop_new(NULL);
  CHECK(a);
  CHECK_EQ(weft_go(rf_waiter, NULL), 0);
  CHECK_EQ(weft_go(rf_stop, a), 0);
  CHECK_EQ(weft_loop_run(a), 1); /* rf_waiter in the wait, rf_m free */
  weft_loop *b = weft_loop_new(NULL);
  CHECK(b);
  CHECK_EQ(weft_go(rf_holder, NULL), 0);
  CHECK_EQ(weft_go(rf_queued, NULL), 0);
  CHECK_EQ(weft_go(rf_stop, b), 0);
  CHECK_EQ(weft_loop_run(b), 1); /* rf_m held, b's task queued on it */
  weft_cond_signal(&rf_c);       /* a's own call: a's waiter wakes */
  CHECK_EQ(weft_loop_run(a), 0);
  CHECK_EQ(rf_rc[0], -EDEADLK); /* not -EINVAL: rf_m was let go */
  CHECK_EQ(rf_rc[1], -EPERM);   /* and is not held */
  weft_loop_free(a);
  weft_event_set(&rf_go);
  CHECK_EQ(weft_loop_run(b), 0);
  CHECK_EQ(rf_rc[2], 0); /* b's own tasks were not disturbed */
  weft_loop_free(b);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int fds = check_fd_count();
  RUN(mutex_basic_main);
  RUN(mutex_other_main);
  RUN(mutex_fifo_main);
  RUN(mutex_cancel_main);
  RUN(mutex_deadline_main);
  RUN(cond_main);
  RUN(cond_perm_main);
  RUN(cond_cancel_main);
  RUN(sem_main);
  RUN(sem_cancel_main);
  RUN(event_main);
  RUN(event_cancel_main);
  RUN(misuse_main);
  CHECK_SUBTEST(test_outside_task);
  CHECK_SUBTEST(test_cond_deadlock);
  CHECK_SUBTEST(test_ended_owner);
  CHECK_SUBTEST(test_dropped_owner);
  CHECK_SUBTEST(test_foreign_waiters);
  CHECK_SUBTEST(test_loop_freed);
  CHECK_SUBTEST(test_cond_relock_foreign);
  CHECK_EQ(check_fd_count(), fds);
  if (check_subtest_failures) {
    fprintf(stderr, "test_sync: %d case(s) failed\n", check_subtest_failures);
    return 1;
  }
  printf("test_sync: ok\n");
  return 0;
}
