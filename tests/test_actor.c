/*
 * Actors: named tasks with mailboxes (seed 000's ActorScheduler).
 *
 *  - names are unique per loop (EEXIST, and the refused actor never runs),
 *    lookup, self, anonymous actors; -ENOENT for unknown names and for
 *    actors that have ended, even once a new actor reuses the name and the
 *    record (handle generations); misuse (-EINVAL) and no loop;
 *  - an unbounded mailbox keeps order, also for sends made outside a task
 *    before the loop runs, and through a burst that grows and shrinks it;
 *  - a bounded mailbox: sends wait when it is full, blocked senders are
 *    served FIFO, a send that must wait outside a task is -EINVAL, an actor
 *    sending to its own full mailbox gets -EDEADLK;
 *  - a blocked send cancelled (-ECANCELED) or past a scope's deadline
 *    (-ETIMEDOUT) leaves nothing queued; one that completed before the
 *    cancellation reports 0;
 *  - weft_actor_recv cancelled (-ECANCELED, also when messages wait) and
 *    past a deadline (-ETIMEDOUT);
 *  - the release callback gets exactly the messages left when the actor
 *    ends (counted, in order), or when the loop is freed with the actor
 *    still there; senders blocked when it ends get -ENOENT and keep theirs;
 *  - fairness: seed 000's counter and printer keep in step, the printer's
 *    mailbox never holding more than 2 messages over a 100,000 countdown;
 *  - memory: a 1,000,000 countdown needs no more memory than a 100,000 one;
 *  - the deadlock rule: the printer left waiting for ever is cancelled,
 *    its recv returns -ECANCELED and weft_main returns 0;
 *  - weft_actor_wait: every waiter woken with 0 when the actor ends, after
 *    its mailbox was released; at once for an ended actor, also once its
 *    record serves another; cancelled, timed out, from the actor itself
 *    (-EDEADLK), misuse; weft_dump shows the wait; a release callback
 *    that blocks: waiters, also those that come meanwhile, return once
 *    it is done, and it gets -EDEADLK waiting for its own actor;
 *  - another loop's task cannot send to an actor, nor wait for it
 *    (-EINVAL);
 *  - request and reply through a future (docs/actors.md): an asker
 *    cancelled while it waits, and askers left when the actor ends, whose
 *    requests its release callback cancels;
 *  - ask and reply: round trips by name and handle, replies to sends and
 *    second replies refused, replies taken and answered later or with an
 *    error, asks left unanswered cancelled (at the actor's next recv, at
 *    its end, with the queued messages released first), reply_release for
 *    values nobody took (once), asks to full bounded mailboxes (deadline,
 *    the actor ending, EDEADLK), a loop freed with asks queued, and one
 *    freed with an answer not yet taken (released once, from there);
 *  - out of memory at each allocation in turn (sends and asks): clean
 *    failures, no leaks.
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))
#define STOP P(-1)

/* Waits until `a` has ended. */
static void wait_ended(weft_actor *a) {
  CHECK_EQ(weft_actor_wait(a), 0);
  CHECK(weft_actor_task(a) == NULL);
}

/* What an actor saw. */
#define MAXGOT 64
typedef struct seen {
  weft_actor *self;     /* weft_actor_self() inside it */
  intptr_t got[MAXGOT]; /* the messages it received, in order */
  int ngot;
  int rc; /* its last recv's return value */
  int ran;
  weft_future *gate; /* if set, awaited before the first recv */
  int take;          /* receive this many, then return (0: until STOP) */
} seen;

static void *recorder(void *arg) {
  seen *s = arg;
  s->ran = 1;
  s->self = weft_actor_self();
  if (s->gate)
    CHECK_EQ(weft_await(s->gate, NULL), 0);
  void *msg;
  while ((s->rc = weft_actor_recv(&msg)) == 0) {
    if (msg == STOP)
      break;
    CHECK_LT(s->ngot, MAXGOT);
    s->got[s->ngot++] = I(msg);
    if (s->take && s->ngot == s->take)
      break;
  }
  return NULL;
}

/* weft_dump's output `buf` shows a task waiting on `what` of actor a. */
static void check_shows(const char *buf, const char *what,
                        const weft_actor *a) {
  char want[96];
  snprintf(want, sizeof want, "%s of actor %#llx", what,
           (unsigned long long)(uintptr_t)a);
  CHECK(strstr(buf, want));
}

static void check_got(const seen *s, const intptr_t *want, int n) {
  CHECK_EQ(s->ngot, n);
  for (int i = 0; i < n; i++)
    CHECK_EQ(s->got[i], want[i]);
}

/* ---- names, lookup, self, ended actors -------------------------------- */
static void *never_runs(void *arg) {
  *(int *)arg = 1;
  return NULL;
}

static void *recv_null(void *arg) {
  *(int *)arg = weft_actor_recv(NULL);
  return NULL;
}

static int names_main(void *unused) {
  (void)unused;
  seen s1 = {0};
  int ran = 0;
  weft_actor *a = weft_actor_spawn("a", recorder, &s1);
  CHECK(a);
  errno = 0;
  CHECK(weft_actor_spawn("a", never_runs, &ran) == NULL);
  CHECK_EQ(errno, EEXIST);
  errno = 0;
  CHECK(weft_actor_spawn("b", NULL, NULL) == NULL);
  CHECK_EQ(errno, EINVAL);
  CHECK(weft_actor_lookup("b") == NULL); /* a failed spawn left nothing */

  CHECK_PTR_EQ(weft_actor_lookup("a"), a);
  CHECK(weft_actor_lookup("nobody") == NULL);
  CHECK(weft_actor_lookup(NULL) == NULL);
  CHECK(weft_actor_self() == NULL); /* a task, not an actor */
  CHECK(weft_actor_task(a) != NULL);
  CHECK(weft_actor_task(NULL) == NULL);
  void *msg;
  CHECK_EQ(weft_actor_recv(&msg), -EINVAL); /* not an actor */
  CHECK_EQ(weft_actor_send("nobody", P(1)), -ENOENT);
  CHECK_EQ(weft_actor_send(NULL, P(1)), -EINVAL);
  CHECK_EQ(weft_actor_send_to(NULL, P(1)), -EINVAL);

  /* Anonymous: only the handle finds it. */
  seen s2 = {0};
  weft_actor *anon = weft_actor_spawn(NULL, recorder, &s2);
  CHECK(anon);
  CHECK_PTR_NE(anon, a);
  int null_rc = 0;
  weft_actor *rn = weft_actor_spawn("recv_null", recv_null, &null_rc);
  CHECK(rn);

  CHECK_EQ(weft_actor_send("a", P(5)), 0);
  CHECK_EQ(weft_actor_send_to(a, P(6)), 0);
  CHECK_EQ(weft_actor_send("a", STOP), 0);
  CHECK_EQ(weft_actor_send_to(anon, P(7)), 0);
  CHECK_EQ(weft_actor_send_to(anon, STOP), 0);
  wait_ended(a);
  wait_ended(anon);
  wait_ended(rn);
  CHECK_EQ(null_rc, -EINVAL);
  CHECK_PTR_EQ(s1.self, a);
  CHECK_PTR_EQ(s2.self, anon);
  check_got(&s1, (intptr_t[]){5, 6}, 2);
  check_got(&s2, (intptr_t[]){7}, 1);
  CHECK_EQ(ran, 0); /* the refused spawn never ran */

  /* Ended: unregistered, and its handle refuses sends. */
  CHECK(weft_actor_lookup("a") == NULL);
  CHECK(weft_actor_task(a) == NULL);
  CHECK_EQ(weft_actor_send("a", P(1)), -ENOENT);
  CHECK_EQ(weft_actor_send_to(a, P(1)), -ENOENT);
  CHECK_EQ(weft_actor_send_to(anon, P(1)), -ENOENT);

  /* The name is free again; the new actor may reuse the old record, but
   * the old handle still names the actor that ended. */
  seen s3 = {0};
  weft_actor *a2 = weft_actor_spawn("a", recorder, &s3);
  CHECK(a2);
  CHECK_PTR_NE(a2, a);
  CHECK_PTR_EQ(weft_actor_lookup("a"), a2);
  CHECK_EQ(weft_actor_send_to(a, P(1)), -ENOENT);
  CHECK(weft_actor_task(a) == NULL);
  CHECK(weft_actor_task(a2) != NULL);
  CHECK_EQ(weft_actor_send_to(a2, P(8)), 0);
  CHECK_EQ(weft_actor_send("a", STOP), 0);
  wait_ended(a2);
  check_got(&s3, (intptr_t[]){8}, 1);
  CHECK_EQ(weft_actor_send_to(a2, P(1)), -ENOENT);
  return 0;
}

static void test_names(void) {
  /* No loop at all. */
  errno = 0;
  CHECK(weft_actor_spawn("x", never_runs, NULL) == NULL);
  CHECK_EQ(errno, EINVAL);
  CHECK(weft_actor_lookup("x") == NULL);
  CHECK_EQ(weft_actor_send("x", NULL), -EINVAL);
  void *msg;
  CHECK_EQ(weft_actor_recv(&msg), -EINVAL);
  CHECK(weft_actor_self() == NULL);
  CHECK_EQ(weft_main(names_main, NULL), 0);
}

/* Many actors, so the registry grows (and rehashes) with names in it. */
static int many_main(void *unused) {
  (void)unused;
  enum { N = 300 };
  static seen s[N];
  static weft_actor *h[N];
  char name[32];
  for (int i = 0; i < N; i++) {
    memset(&s[i], 0, sizeof s[i]);
    snprintf(name, sizeof name, "actor-%d", i);
    CHECK((h[i] = weft_actor_spawn(name, recorder, &s[i])));
  }
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "actor-%d", i);
    CHECK_PTR_EQ(weft_actor_lookup(name), h[i]);
    CHECK_EQ(weft_actor_send(name, P(i)), 0);
    CHECK_EQ(weft_actor_send(name, STOP), 0);
  }
  for (int i = 0; i < N; i++) {
    wait_ended(h[i]);
    check_got(&s[i], (intptr_t[]){i}, 1);
  }
  return 0;
}

static void test_many(void) { CHECK_EQ(weft_main(many_main, NULL), 0); }

/* ---- unbounded mailboxes ---------------------------------------------- */
typedef struct burst {
  intptr_t next; /* the message expected next */
  int rc;
} burst;

static void *in_order(void *arg) {
  burst *b = arg;
  void *msg;
  while ((b->rc = weft_actor_recv(&msg)) == 0 && msg != STOP)
    CHECK_EQ(I(msg), b->next++);
  return NULL;
}

static int burst_main(void *arg) {
  burst *b = arg;
  weft_actor *a = weft_actor_spawn("burst", in_order, b);
  CHECK(a);
  /* All queued before the actor first runs: the ring grows to hold them,
   * and shrinks as they drain. */
  for (int i = 0; i < 5000; i++)
    CHECK_EQ(weft_actor_send("burst", P(i)), 0);
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  wait_ended(a);
  return 0;
}

static void test_unbounded(void) {
  burst b = {0, 1};
  CHECK_EQ(weft_main(burst_main, &b), 0);
  CHECK_EQ(b.next, 5000);
  CHECK_EQ(b.rc, 0);

  /* Sent from outside any task, before the loop runs. */
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  burst c = {0, 1};
  weft_actor *a = weft_actor_spawn("outside", in_order, &c);
  CHECK(a);
  for (int i = 0; i < 100; i++)
    CHECK_EQ(weft_actor_send("outside", P(i)), 0);
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_EQ(c.next, 100);
  CHECK_EQ(weft_actor_send_to(a, P(1)), -ENOENT);
  weft_loop_free(loop);
}

/* ---- bounded mailboxes ------------------------------------------------ */
typedef struct send_job {
  weft_actor *to;
  intptr_t msg;
  int rc;
  int done;
  int64_t deadline; /* WEFT_NEVER: no scope */
  int scope_rc;
} send_job;

static void *sender_task(void *arg) {
  send_job *j = arg;
  if (j->deadline != WEFT_NEVER) {
    weft_scope s;
    weft_scope_enter(&s, j->deadline);
    j->rc = weft_actor_send_to(j->to, P(j->msg));
    j->scope_rc = weft_scope_exit(&s);
  } else {
    j->rc = weft_actor_send_to(j->to, P(j->msg));
  }
  j->done = 1;
  return NULL;
}

static weft_task *start_sender(send_job *j, weft_actor *to, intptr_t msg) {
  *j = (send_job){to, msg, 1, 0, WEFT_NEVER, 1};
  weft_task *t = weft_spawn(sender_task, j);
  CHECK(t);
  return t;
}

static void settle(void) {
  for (int i = 0; i < 10; i++)
    weft_yield();
}

static int fifo_main(void *unused) {
  (void)unused;
  weft_future *gate = weft_future_new();
  CHECK(gate);
  seen s = {.gate = gate};
  weft_actor_opts o = {.mailbox_bound = 2};
  weft_actor *a = weft_actor_spawn_opts("bounded", recorder, &s, &o);
  CHECK(a);
  /* Room for two: these do not wait. */
  CHECK_EQ(weft_actor_send_to(a, P(1)), 0);
  CHECK_EQ(weft_actor_send("bounded", P(2)), 0);
  send_job j[3];
  weft_task *t[3];
  for (int i = 0; i < 3; i++)
    t[i] = start_sender(&j[i], a, 10 + i);
  settle();
  for (int i = 0; i < 3; i++)
    CHECK_EQ(j[i].done, 0); /* all three wait, in that order */
  CHECK_EQ(s.ngot, 0);
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  CHECK_EQ(weft_actor_send_to(a, STOP), 0); /* waits behind them */
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(j[i].rc, 0);
  }
  wait_ended(a);
  check_got(&s, (intptr_t[]){1, 2, 10, 11, 12}, 5);
  weft_future_release(gate);
  return 0;
}

/* ---- try_send: never waits, no cancellation point -------------------- */
static int try_main(void *unused) {
  (void)unused;
  weft_future *gate = weft_future_new();
  CHECK(gate);
  seen s = {.gate = gate};
  weft_actor_opts o = {.mailbox_bound = 2};
  weft_actor *a = weft_actor_spawn_opts("try", recorder, &s, &o);
  CHECK(a);
  weft_scope sc; /* a deadline that has passed refuses a send, not a try */
  weft_scope_enter(&sc, weft_now() - 1);
  CHECK_EQ(weft_actor_send_to(a, P(9)), -ETIMEDOUT);
  CHECK_EQ(weft_actor_try_send_to(a, P(1)), 0);
  CHECK_EQ(weft_scope_exit(&sc), -ETIMEDOUT);
  CHECK_EQ(weft_actor_try_send("try", P(2)), 0);
  CHECK_EQ(weft_actor_try_send_to(a, P(3)), -EAGAIN); /* full */
  CHECK_EQ(weft_actor_pending(a), 2);
  send_job j;
  weft_task *t = start_sender(&j, a, 10);
  settle();
  CHECK_EQ(j.done, 0); /* waits for room */
  CHECK_EQ(weft_actor_pending(a), 2); /* a sender waiting is not counted */
  CHECK_EQ(weft_actor_try_send("try", P(4)), -EAGAIN);
  CHECK_EQ(weft_actor_try_send("nobody", P(5)), -ENOENT);
  CHECK_EQ(weft_actor_try_send(NULL, P(5)), -EINVAL);
  CHECK_EQ(weft_actor_try_send_to(NULL, P(5)), -EINVAL);
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(j.rc, 0);
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  wait_ended(a);
  check_got(&s, (intptr_t[]){1, 2, 10}, 3);
  CHECK_EQ(weft_actor_try_send_to(a, P(6)), -ENOENT); /* ended */
  CHECK_EQ(weft_actor_pending(a), 0);
  CHECK_EQ(weft_actor_pending(NULL), 0);
  weft_future_release(gate);
  return 0;
}

/* An actor sees its own backlog shrink as it receives: a writer flushes
 * at 0. */
static void *counter_of_pending(void *arg) {
  size_t *left = arg;
  void *msg;
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(weft_actor_recv(&msg), 0);
    left[i] = weft_actor_pending(weft_actor_self());
  }
  return NULL;
}

static int pending_main(void *unused) {
  (void)unused;
  size_t left[3] = {9, 9, 9};
  weft_actor *a = weft_actor_spawn(NULL, counter_of_pending, left);
  CHECK(a);
  CHECK_EQ(weft_actor_pending(a), 0);
  for (int i = 1; i <= 3; i++)
    CHECK_EQ(weft_actor_send_to(a, P(i)), 0);
  CHECK_EQ(weft_actor_pending(a), 3);
  wait_ended(a);
  CHECK_EQ(left[0], 2);
  CHECK_EQ(left[1], 1);
  CHECK_EQ(left[2], 0);
  return 0;
}

static void test_try_send(void) {
  CHECK_EQ(weft_main(pending_main, NULL), 0);
  CHECK_EQ(weft_main(try_main, NULL), 0);
  /* Outside a task, before the loop runs: a mailbox with room takes it,
   * a full one is -EAGAIN (a send would have to wait: -EINVAL). */
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  seen s = {.take = 1};
  weft_actor_opts o = {.mailbox_bound = 1};
  weft_actor *a = weft_actor_spawn_opts(NULL, recorder, &s, &o);
  CHECK(a);
  CHECK_EQ(weft_actor_try_send_to(a, P(7)), 0);
  CHECK_EQ(weft_actor_try_send_to(a, P(8)), -EAGAIN);
  CHECK_EQ(weft_actor_send_to(a, P(8)), -EINVAL);
  CHECK_EQ(weft_loop_run(loop), 0);
  check_got(&s, (intptr_t[]){7}, 1);
  weft_loop_free(loop);
}

static void *self_sender(void *arg) {
  int *rc = arg;
  CHECK_EQ(weft_actor_send_to(weft_actor_self(), P(1)), 0);
  rc[0] = weft_actor_send_to(weft_actor_self(), P(2)); /* full: only it */
  void *msg;
  rc[1] = weft_actor_recv(&msg);
  CHECK_EQ(I(msg), 1);
  return NULL;
}

static int deadlk_main(void *unused) {
  (void)unused;
  int rc[2] = {1, 1};
  weft_actor_opts o = {.mailbox_bound = 1};
  weft_actor *a = weft_actor_spawn_opts("self", self_sender, rc, &o);
  CHECK(a);
  wait_ended(a);
  CHECK_EQ(rc[0], -EDEADLK);
  CHECK_EQ(rc[1], 0);
  return 0;
}

static void test_bounded(void) {
  CHECK_EQ(weft_main(fifo_main, NULL), 0);
  CHECK_EQ(weft_main(deadlk_main, NULL), 0);

  /* Outside a task: a send that would wait is refused. */
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  seen s = {0};
  weft_actor_opts o = {.mailbox_bound = 1};
  weft_actor *a = weft_actor_spawn_opts("outside", recorder, &s, &o);
  CHECK(a);
  CHECK_EQ(weft_actor_send_to(a, P(1)), 0);
  CHECK_EQ(weft_actor_send_to(a, P(2)), -EINVAL);
  CHECK_EQ(weft_loop_run(loop), 0); /* takes 1, then the deadlock rule */
  check_got(&s, (intptr_t[]){1}, 1);
  CHECK_EQ(s.rc, -ECANCELED);
  weft_loop_free(loop);
}

/* ---- cancelled and timed-out sends ------------------------------------ */
static int send_cancel_main(void *unused) {
  (void)unused;
  weft_future *gate = weft_future_new();
  CHECK(gate);
  seen s = {.gate = gate};
  weft_actor_opts o = {.mailbox_bound = 1};
  weft_actor *a = weft_actor_spawn_opts("c", recorder, &s, &o);
  CHECK(a);
  CHECK_EQ(weft_actor_send_to(a, P(1)), 0);
  send_job j[3];
  weft_task *t0 = start_sender(&j[0], a, 2);
  weft_task *t1 = start_sender(&j[1], a, 3);
  settle();
  /* The first waiting sender is cancelled: its message never arrives,
   * and the one behind it moves up. */
  CHECK_EQ(weft_cancel(t0), 0);
  CHECK_EQ(weft_join(t0, NULL), 0);
  CHECK_EQ(j[0].rc, -ECANCELED);
  /* One whose deadline passes while it waits. */
  j[2] = (send_job){a, 4, 1, 0, weft_now() + WEFT_MS(20), 1};
  weft_task *t2 = weft_spawn(sender_task, &j[2]);
  CHECK(t2);
  CHECK_EQ(weft_join(t2, NULL), 0);
  CHECK_EQ(j[2].rc, -ETIMEDOUT);
  CHECK_EQ(j[2].scope_rc, -ETIMEDOUT);
  CHECK_EQ(j[1].done, 0);
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  CHECK_EQ(weft_join(t1, NULL), 0);
  CHECK_EQ(j[1].rc, 0);
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  wait_ended(a);
  check_got(&s, (intptr_t[]){1, 3}, 2);
  weft_future_release(gate);
  return 0;
}

/* An actor that, having received the message that let a waiting sender
 * in, cancels that sender: the send completed, and reports 0. */
typedef struct late {
  weft_future *gate; /* opened once the sender waits */
  weft_task *sender;
  intptr_t got[4];
  int ngot;
} late;

static void *late_canceller(void *arg) {
  late *l = arg;
  void *msg;
  CHECK_EQ(weft_await(l->gate, NULL), 0);
  CHECK_EQ(weft_actor_recv(&msg), 0); /* the sender's message moves in */
  l->got[l->ngot++] = I(msg);
  CHECK_EQ(weft_cancel(l->sender), 0);
  CHECK_EQ(weft_actor_recv(&msg), 0);
  l->got[l->ngot++] = I(msg);
  return NULL;
}

static int late_main(void *unused) {
  (void)unused;
  late l = {.gate = weft_future_new()};
  CHECK(l.gate);
  weft_actor_opts o = {.mailbox_bound = 1};
  weft_actor *a = weft_actor_spawn_opts("late", late_canceller, &l, &o);
  CHECK(a);
  CHECK_EQ(weft_actor_send_to(a, P(1)), 0);
  send_job j;
  l.sender = start_sender(&j, a, 2);
  settle();
  CHECK_EQ(j.done, 0); /* it waits for room */
  CHECK_EQ(weft_future_set_result(l.gate, NULL), 0);
  CHECK_EQ(weft_join(l.sender, NULL), 0);
  CHECK_EQ(j.rc, 0);
  wait_ended(a);
  CHECK_EQ(l.ngot, 2);
  CHECK_EQ(l.got[0], 1);
  CHECK_EQ(l.got[1], 2);
  weft_future_release(l.gate);
  return 0;
}

static void test_send_cancel(void) {
  CHECK_EQ(weft_main(send_cancel_main, NULL), 0);
  CHECK_EQ(weft_main(late_main, NULL), 0);
}

/* ---- cancelled and timed-out receives --------------------------------- */
typedef struct rstate {
  int rc_deadline, scope_rc, rc_after, rc_cancel;
  intptr_t after;
} rstate;

static void *receiver(void *arg) {
  rstate *r = arg;
  void *msg = NULL;
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(20));
  r->rc_deadline = weft_actor_recv(&msg);
  r->scope_rc = weft_scope_exit(&s);
  r->rc_after = weft_actor_recv(&msg); /* the deadline is gone */
  r->after = I(msg);
  r->rc_cancel = weft_actor_recv(&msg); /* until cancelled */
  return NULL;
}

typedef struct released {
  int n;
  intptr_t msgs[64];
  int ran;
} released;

static void record_release(void *msg, void *arg) {
  released *r = arg;
  CHECK_LT(r->n, 64);
  r->msgs[r->n++] = I(msg);
}

static void *must_not_recv(void *arg) {
  released *r = arg;
  r->ran = 1;
  void *msg = P(99);
  CHECK_EQ(weft_actor_recv(&msg), -ECANCELED); /* messages wait, even so */
  CHECK_EQ(I(msg), 99);
  return NULL;
}

static int recv_cancel_main(void *unused) {
  (void)unused;
  rstate r = {1, 1, 1, 1, 0};
  weft_actor *a = weft_actor_spawn("r", receiver, &r);
  CHECK(a);
  CHECK_EQ(weft_sleep(WEFT_MS(40)), 0);
  CHECK_EQ(r.rc_deadline, -ETIMEDOUT);
  CHECK_EQ(r.scope_rc, -ETIMEDOUT);
  CHECK_EQ(weft_actor_send_to(a, P(42)), 0);
  settle();
  CHECK_EQ(r.rc_after, 0);
  CHECK_EQ(r.after, 42);
  CHECK_EQ(r.rc_cancel, 1); /* waiting */
  CHECK_EQ(weft_cancel(weft_actor_task(a)), 0);
  wait_ended(a);
  CHECK_EQ(r.rc_cancel, -ECANCELED);

  /* Cancelled with messages waiting: recv returns -ECANCELED and takes
   * none, so all of them go to the release callback. */
  released rel = {0};
  weft_actor_opts o = {.release = record_release, .release_arg = &rel};
  weft_actor *b = weft_actor_spawn_opts("b", must_not_recv, &rel, &o);
  CHECK(b);
  for (int i = 1; i <= 3; i++)
    CHECK_EQ(weft_actor_send_to(b, P(i)), 0);
  CHECK_EQ(weft_cancel(weft_actor_task(b)), 0);
  wait_ended(b);
  CHECK_EQ(rel.ran, 1);
  CHECK_EQ(rel.n, 3);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(rel.msgs[i], i + 1);
  return 0;
}

static void test_recv_cancel(void) {
  CHECK_EQ(weft_main(recv_cancel_main, NULL), 0);
}

/* ---- release of leftovers --------------------------------------------- */
/* Messages are malloc'd, and freed by whoever ends up with them: the
 * actor, or the release callback. Valgrind and ASan see any that leak. */
typedef struct heapmsgs {
  int released;
  intptr_t sum; /* of the released values */
  int got;
} heapmsgs;

static void free_release(void *msg, void *arg) {
  heapmsgs *h = arg;
  h->released++;
  h->sum += *(intptr_t *)msg;
  free(msg);
  /* Called from the actor's task as it ends (not at weft_loop_free): it
   * has ended already, so sends to it fail, and nothing is queued. */
  if (weft_self()) {
    CHECK(weft_actor_self() == NULL);
    CHECK_EQ(weft_actor_send("leaky", P(1)), -ENOENT);
  }
}

static void *take_two(void *arg) {
  heapmsgs *h = arg;
  for (int i = 0; i < 2; i++) {
    void *msg;
    CHECK_EQ(weft_actor_recv(&msg), 0);
    CHECK_EQ(*(intptr_t *)msg, i + 1);
    free(msg);
    h->got++;
  }
  return NULL;
}

static void *heap_msg(intptr_t v) {
  intptr_t *p = malloc(sizeof *p);
  CHECK(p);
  *p = v;
  return p;
}

static void *gated_quitter(void *arg) {
  CHECK_EQ(weft_await(arg, NULL), 0);
  return NULL; /* without receiving */
}

static int release_main(void *unused) {
  (void)unused;
  heapmsgs h = {0};
  weft_actor_opts o = {.release = free_release, .release_arg = &h};
  weft_actor *a = weft_actor_spawn_opts("leaky", take_two, &h, &o);
  CHECK(a);
  for (int i = 1; i <= 5; i++)
    CHECK_EQ(weft_actor_send_to(a, heap_msg(i)), 0);
  wait_ended(a);
  CHECK_EQ(h.got, 2);
  CHECK_EQ(h.released, 3);
  CHECK_EQ(h.sum, 3 + 4 + 5);

  /* Senders still waiting when the actor ends get -ENOENT, and their
   * messages are not released: they were never queued. */
  weft_future *gate = weft_future_new();
  CHECK(gate);
  released rel = {0};
  weft_actor_opts ob = {
      .mailbox_bound = 1, .release = record_release, .release_arg = &rel};
  weft_actor *b = weft_actor_spawn_opts("quits", gated_quitter, gate, &ob);
  CHECK(b);
  CHECK_EQ(weft_actor_send_to(b, P(1)), 0);
  send_job j[2];
  weft_task *t0 = start_sender(&j[0], b, 2);
  weft_task *t1 = start_sender(&j[1], b, 3);
  settle();
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  CHECK_EQ(weft_join(t0, NULL), 0);
  CHECK_EQ(weft_join(t1, NULL), 0);
  CHECK_EQ(j[0].rc, -ENOENT);
  CHECK_EQ(j[1].rc, -ENOENT);
  wait_ended(b);
  CHECK_EQ(rel.n, 1);
  CHECK_EQ(rel.msgs[0], 1);
  weft_future_release(gate);
  return 0;
}

static void test_release(void) {
  CHECK_EQ(weft_main(release_main, NULL), 0);

  /* The loop freed with the actor never having run: its queued messages
   * are released all the same, and it never runs. */
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  heapmsgs h = {0};
  weft_actor_opts o = {.release = free_release, .release_arg = &h};
  int ran = 0;
  CHECK(weft_actor_spawn_opts("never", never_runs, &ran, &o));
  for (int i = 1; i <= 3; i++)
    CHECK_EQ(weft_actor_send("never", heap_msg(i * 10)), 0);
  weft_loop_free(loop);
  CHECK_EQ(ran, 0);
  CHECK_EQ(h.released, 3);
  CHECK_EQ(h.sum, 60);
}

/* ---- seed 000's counter and printer ----------------------------------- */
typedef struct countdown {
  intptr_t start;
  intptr_t expect;     /* the printer's next message */
  long sent, received; /* messages to the printer, sent and taken */
  long most_queued;    /* the most the printer's mailbox held */
  int printer_rc;      /* its last recv: -ECANCELED, by the deadlock rule */
  int sample_every;    /* 0: no RSS samples */
  size_t rss_max;
} countdown;

static countdown *cd;

static void *printer(void *unused) {
  (void)unused;
  void *msg;
  while ((cd->printer_rc = weft_actor_recv(&msg)) == 0) {
    CHECK_EQ(I(msg), cd->expect); /* print('Got:', msg) */
    cd->expect--;
    cd->received++;
    if (cd->sample_every && cd->received % cd->sample_every == 0) {
      size_t rss = check_rss();
      if (rss > cd->rss_max)
        cd->rss_max = rss;
    }
  }
  return NULL;
}

static void *counter(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0) {
    intptr_t n = I(msg);
    if (n == 0)
      break;
    CHECK_EQ(weft_actor_send("printer", P(n)), 0);
    cd->sent++;
    long queued = cd->sent - cd->received;
    if (queued > cd->most_queued)
      cd->most_queued = queued;
    CHECK_EQ(weft_actor_send("counter", P(n - 1)), 0);
  }
  return NULL;
}

static int countdown_main(void *unused) {
  (void)unused;
  CHECK(weft_actor_spawn("printer", printer, NULL));
  CHECK(weft_actor_spawn("counter", counter, NULL));
  CHECK_EQ(weft_actor_send("counter", P(cd->start)), 0);
  return 0; /* the actors run on; the printer is left waiting */
}

static void run_countdown(countdown *c, intptr_t n, int sample_every) {
  *c = (countdown){n, n, 0, 0, 0, 1, sample_every, 0};
  cd = c;
  CHECK_EQ(weft_main(countdown_main, NULL), 0);
  CHECK_EQ(c->expect, 0);
  CHECK_EQ(c->received, n);
  CHECK_EQ(c->printer_rc, -ECANCELED); /* the deadlock rule ended it */
}

static int scale_down(void) { return RUNNING_ON_VALGRIND || CHECK_ASAN; }

static void test_fairness(void) {
  countdown c;
  run_countdown(&c, scale_down() ? 10000 : 100000, 0);
  CHECK_LE(c.most_queued, 2);
  CHECK_GE(c.most_queued, 1);
}

static void test_memory(void) {
  intptr_t small = scale_down() ? 10000 : 100000, big = small * 10;
  countdown c1, c2;
  run_countdown(&c1, small, 1000);
  run_countdown(&c2, big, 1000);
  CHECK_LE(c1.most_queued, 2);
  CHECK_LE(c2.most_queued, 2);
  CHECK_GT(c1.rss_max, 0);
  /* Ten times the messages, no more memory (a mailbox that grew with the
   * count would hold 8 MB of pointers at a million). */
  CHECK_LT((long long)c2.rss_max - (long long)c1.rss_max, 1 << 20);
}

/* ---- the deadlock rule ------------------------------------------------ */
static void *waits_forever(void *arg) {
  int *rc = arg;
  void *msg;
  *rc = weft_actor_recv(&msg);
  return NULL;
}

static int forever_main(void *arg) {
  CHECK(weft_actor_spawn("forever", waits_forever, arg));
  return 0;
}

static void test_deadlock(void) {
  int rc = 1;
  CHECK_EQ(weft_main(forever_main, &rc), 0);
  CHECK_EQ(rc, -ECANCELED);
}

/* ---- waiting for the end ---------------------------------------------- */
static int releases;

static void count_release(void *msg, void *arg) {
  (void)msg;
  (void)arg;
  releases++;
}

typedef struct ender {
  weft_actor *a;
  int64_t deadline; /* of a scope around the wait (WEFT_NEVER: none) */
  int rc;
  int releases; /* seen when the wait returned */
} ender;

static void *ender_task(void *arg) {
  ender *e = arg;
  weft_scope s;
  weft_scope_enter(&s, e->deadline);
  e->rc = weft_actor_wait(e->a);
  e->releases = releases;
  (void)weft_scope_exit(&s);
  return NULL;
}

static void *self_waiter(void *arg) {
  *(int *)arg = weft_actor_wait(weft_actor_self());
  return NULL;
}

static int wait_main(void *unused) {
  (void)unused;
  weft_future *gate = weft_future_new();
  CHECK(gate);
  seen s = {.gate = gate};
  weft_actor_opts o = {.release = count_release};
  weft_actor *a = weft_actor_spawn_opts("w", recorder, &s, &o);
  CHECK(a);
  ender e[4];
  weft_task *t[4];
  for (int i = 0; i < 4; i++) {
    e[i] = (ender){a, i == 2 ? weft_now() + WEFT_MS(20) : WEFT_NEVER, 1, -1};
    CHECK((t[i] = weft_spawn(ender_task, &e[i])));
  }
  settle();
  char *buf = check_dump();
  check_shows(buf, "end", a);
  free(buf);
  CHECK_EQ(weft_join(t[2], NULL), 0); /* its deadline passes */
  CHECK_EQ(e[2].rc, -ETIMEDOUT);
  CHECK_EQ(weft_cancel(t[3]), 0);
  CHECK_EQ(weft_join(t[3], NULL), 0);
  CHECK_EQ(e[3].rc, -ECANCELED);
  CHECK_EQ(e[0].rc, 1); /* still waiting */
  /* It ends with a message left over, released before the waiters run. */
  releases = 0;
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  CHECK_EQ(weft_actor_send_to(a, P(7)), 0);
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  for (int i = 0; i < 2; i++) {
    CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(e[i].rc, 0);
    CHECK_EQ(e[i].releases, 1);
  }
  CHECK(weft_actor_task(a) == NULL);
  /* Ended: at once, also once its record and name serve a new actor,
   * which the old handle does not wait for. */
  CHECK_EQ(weft_actor_wait(a), 0);
  seen s2 = {0};
  weft_actor *b = weft_actor_spawn("w", recorder, &s2);
  CHECK(b && b != a);
  CHECK_EQ(weft_actor_wait(a), 0);
  CHECK(weft_actor_task(b));
  /* Still a cancellation point. */
  weft_scope sc;
  weft_scope_enter(&sc, weft_now());
  CHECK_EQ(weft_actor_wait(a), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&sc), -ETIMEDOUT);
  CHECK_EQ(weft_actor_send_to(b, STOP), 0);
  wait_ended(b);
  /* The actor itself; misuse. */
  int self_rc = 1;
  weft_actor *c = weft_actor_spawn(NULL, self_waiter, &self_rc);
  CHECK(c);
  wait_ended(c);
  CHECK_EQ(self_rc, -EDEADLK);
  CHECK_EQ(weft_actor_wait(NULL), -EINVAL);
  weft_future_release(gate);
  return 0;
}

static void test_wait(void) { CHECK_EQ(weft_main(wait_main, NULL), 0); }

/* The loop freed while an actor's release callback is blocked: the
 * messages it had not reached yet are released by weft_loop_free. */
static weft_event release_gate;
static intptr_t late_released[4];
static int nreleased;

static void stuck_release(void *msg, void *arg) {
  (void)arg;
  late_released[nreleased++] = I(msg);
  if (nreleased == 1)
    (void)weft_event_wait(&release_gate); /* never set: freed under it */
}

static void *stopper(void *arg) {
  (void)arg;
  settle();
  weft_loop_stop(weft_loop_current());
  return NULL;
}

static void test_free_in_release(void) {
  weft_event_init(&release_gate);
  nreleased = 0;
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  seen s = {.take = 1};
  weft_actor_opts o = {.release = stuck_release};
  weft_actor *a = weft_actor_spawn_opts("r", recorder, &s, &o);
  CHECK(a);
  for (intptr_t m = 1; m <= 4; m++)
    CHECK_EQ(weft_actor_send_to(a, P(m)), 0);
  CHECK(weft_spawn(stopper, NULL));
  CHECK_EQ(weft_loop_run(loop), 1); /* stopped */
  CHECK_EQ(nreleased, 1);           /* 2 is in the blocked callback */
  weft_loop_free(loop);
  CHECK_EQ(nreleased, 3);
  CHECK_EQ(late_released[0], 2);
  CHECK_EQ(late_released[1], 3);
  CHECK_EQ(late_released[2], 4);
}

/* A release callback that blocks: the waiters still see the mailbox
 * released when their wait returns, one that comes meanwhile waits too,
 * and the callback waiting for its own actor gets -EDEADLK. */
static weft_actor *blocking_actor;
static int blocking_self_rc = 1;

static void blocking_release(void *msg, void *arg) {
  (void)msg;
  (void)arg;
  settle();
  if (blocking_self_rc == 1)
    blocking_self_rc = weft_actor_wait(blocking_actor);
  releases++;
}

static int wait_release_main(void *unused) {
  (void)unused;
  seen s = {0};
  weft_actor_opts o = {.release = blocking_release};
  weft_actor *a = weft_actor_spawn_opts(NULL, recorder, &s, &o);
  CHECK(a);
  blocking_actor = a;
  releases = 0;
  ender e[2];
  weft_task *t[2];
  e[0] = (ender){a, WEFT_NEVER, 1, -1};
  CHECK((t[0] = weft_spawn(ender_task, &e[0])));
  settle();
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_actor_send_to(a, P(i)), 0);
  /* Runs the actor into its release callback, which blocks. */
  while (weft_actor_task(a))
    weft_yield();
  CHECK(releases < 3);
  e[1] = (ender){a, WEFT_NEVER, 1, -1};
  CHECK((t[1] = weft_spawn(ender_task, &e[1])));
  for (int i = 0; i < 2; i++) {
    CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(e[i].rc, 0);
    CHECK_EQ(e[i].releases, 3);
  }
  CHECK_EQ(blocking_self_rc, -EDEADLK);
  CHECK_EQ(weft_actor_wait(a), 0);
  return 0;
}

static void test_wait_release(void) {
  CHECK_EQ(weft_main(wait_release_main, NULL), 0);
}

/* ---- another loop ----------------------------------------------------- */
static weft_actor *other_loops;

static void *foreign_sender(void *arg) {
  int *rc = arg;
  rc[0] = weft_actor_send_to(other_loops, P(1));
  rc[1] = weft_actor_send("home", P(1)); /* names are per loop */
  rc[2] = weft_actor_wait(other_loops);
  rc[3] = weft_actor_try_send_to(other_loops, P(1));
  return NULL;
}

static void test_other_loop(void) {
  weft_loop *home = weft_loop_new(NULL);
  CHECK(home);
  int rc_home = 1;
  CHECK((other_loops = weft_actor_spawn("home", waits_forever, &rc_home)));
  weft_loop *away = weft_loop_new(NULL);
  CHECK(away);
  CHECK_EQ(weft_actor_wait(other_loops), -EINVAL); /* outside a task */
  int rc[4] = {1, 1, 1, 1};
  weft_task_opts to = {.loop = away};
  weft_task *t = weft_spawn_opts(foreign_sender, rc, &to);
  CHECK(t);
  CHECK_EQ(weft_loop_run(away), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(rc[0], -EINVAL);
  CHECK_EQ(rc[1], -ENOENT);
  CHECK_EQ(rc[2], -EINVAL);
  CHECK_EQ(rc[3], -EINVAL);
  weft_loop_free(away);
  CHECK_EQ(weft_loop_run(home), 0);
  CHECK_EQ(rc_home, -ECANCELED);
  weft_loop_free(home);
}

/* ---- out of memory ----------------------------------------------------
 * An allocator that fails its n-th call, for n = 1, 2, ... until a run
 * goes through without failing: every failure must be clean (a spawn that
 * failed gives NULL and ENOMEM, and its actor never runs; a send -ENOMEM,
 * and its message was not queued) and, once the loop is freed, nothing
 * may be left allocated. In a child process: the allocator is replaced
 * for good there. */
static long oom_calls, oom_fail_at, oom_outstanding, oom_failures;

static void *oom_malloc(size_t n) {
  if (oom_fail_at && ++oom_calls == oom_fail_at) {
    oom_failures++;
    return NULL;
  }
  void *p = malloc(n);
  oom_outstanding += p != NULL;
  return p;
}

static void *oom_realloc(void *p, size_t n) {
  if (oom_fail_at && ++oom_calls == oom_fail_at) {
    oom_failures++;
    return NULL;
  }
  void *q = realloc(p, n);
  oom_outstanding += q && !p;
  return q;
}

static void oom_free(void *p) {
  oom_outstanding -= p != NULL;
  free(p);
}

#define OOM_ACTORS 20 /* more than the registry's first 16 buckets */
#define OOM_MSGS   20 /* more than a mailbox's first 8 slots */

typedef struct oom_count {
  int started, spawned;
  long sent, received, released;
} oom_count;

static void oom_release(void *msg, void *arg) {
  (void)msg;
  ((oom_count *)arg)->released++;
}

static void *oom_actor(void *arg) {
  oom_count *c = arg;
  c->started++;
  void *msg;
  while (weft_actor_recv(&msg) == 0 && msg != STOP)
    c->received++;
  return NULL;
}

static int oom_main(void *arg) {
  oom_count *c = arg;
  weft_actor *h[OOM_ACTORS];
  char name[32];
  for (int i = 0; i < OOM_ACTORS; i++) {
    snprintf(name, sizeof name, "oom-%d", i);
    weft_actor_opts o = {.mailbox_bound = i % 2 ? 0 : OOM_MSGS,
                         .release = oom_release,
                         .release_arg = c};
    errno = 0;
    if (!(h[i] = weft_actor_spawn_opts(name, oom_actor, c, &o))) {
      CHECK_EQ(errno, ENOMEM);
      CHECK(weft_actor_lookup(name) == NULL);
      continue;
    }
    c->spawned++;
  }
  for (int i = 0; i < OOM_ACTORS; i++)
    for (int m = 0; h[i] && m < OOM_MSGS; m++) {
      int rc = weft_actor_send_to(h[i], P(m));
      if (rc != -ENOMEM) {
        CHECK_EQ(rc, 0);
        c->sent++;
      }
    }
  /* An ask each: a refused one (no future, or no room in the ring) queued
   * nothing; a queued one's reply is released at once, unanswered. */
  for (int i = 0; i < OOM_ACTORS; i++) {
    if (!h[i])
      continue;
    errno = 0;
    weft_future *f = weft_actor_ask_to(h[i], P(OOM_MSGS));
    if (!f) {
      CHECK_EQ(errno, ENOMEM);
      continue;
    }
    c->sent++;
    weft_future_release(f);
  }
  /* The actors are left waiting (or told to stop, memory permitting): the
   * deadlock rule ends those still there. */
  for (int i = 0; i < OOM_ACTORS; i++)
    if (h[i])
      (void)weft_actor_send_to(h[i], STOP);
  return 0;
}

static void oom_child(void *unused) {
  (void)unused;
  CHECK_EQ(weft_replace_allocator(oom_malloc, oom_realloc, oom_free), 0);
  for (long n = 1;; n++) {
    oom_count c = {0};
    oom_calls = oom_failures = 0;
    oom_fail_at = n;
    int rc = weft_main(oom_main, &c);
    oom_fail_at = 0;
    CHECK(rc == 0 || rc == -ENOMEM);
    CHECK_EQ(c.started, c.spawned);
    CHECK_EQ(c.received + c.released, c.sent);
    if (oom_outstanding != 0) {
      fprintf(stderr, "failing allocation %ld: %ld blocks left\n", n,
              oom_outstanding);
      exit(1);
    }
    if (!oom_failures) {
      CHECK_EQ(rc, 0);
      CHECK_EQ(c.spawned, OOM_ACTORS);
      CHECK_EQ(c.sent, OOM_ACTORS * (OOM_MSGS + 1));
      CHECK_GT(n, 20);
      break;
    }
  }
}

static void test_oom(void) {
  check_child res;
  check_child_run(oom_child, NULL, &res, 60);
  CHECK_EXITED(res, 0);
}

/* weft_dump tells an actor waiting for mail from a task waiting to send
 * to a full mailbox. */
static int dump_main(void *unused) {
  (void)unused;
  weft_future *gate = weft_future_new();
  CHECK(gate);
  seen full = {.gate = gate}, idle = {0};
  weft_actor_opts o = {.mailbox_bound = 1};
  weft_actor *a = weft_actor_spawn_opts("full", recorder, &full, &o);
  weft_actor *b = weft_actor_spawn("idle", recorder, &idle);
  CHECK(a && b);
  CHECK_EQ(weft_actor_send_to(a, P(1)), 0); /* the mailbox is full now */
  send_job j;
  weft_task *t = start_sender(&j, a, 2);
  settle();
  char *buf = check_dump();
  check_shows(buf, "send to full mailbox", a);
  check_shows(buf, "mailbox", b);
  free(buf);
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(j.rc, 0);
  CHECK_EQ(weft_actor_send_to(a, STOP), 0);
  CHECK_EQ(weft_actor_send_to(b, STOP), 0);
  wait_ended(a);
  wait_ended(b);
  check_got(&full, (intptr_t[]){1, 2}, 2);
  weft_future_release(gate);
  return 0;
}

static void test_dump(void) { CHECK_EQ(weft_main(dump_main, NULL), 0); }

/* ---- the seed's single FIFO -------------------------------------------
 * Seed 000's scheduler has one queue of (actor, message) pairs: messages
 * are handled in the order they were sent, across actors. Its counter,
 * printing each count, with the two sends in the seed's order and the
 * other way round (the order, produced by the seed's own code under
 * Python, used to differ: weft ran the printer as soon as it was woken). */
static char fifo_trace[256];
static int self_first;

static void fifo_note(const char *what, intptr_t n) {
  size_t len = strlen(fifo_trace);
  snprintf(fifo_trace + len, sizeof fifo_trace - len, "%s%ld ", what, (long)n);
}

static void *fifo_printer(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0)
    fifo_note("Got:", I(msg));
  return NULL;
}

static void *fifo_counter(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0) {
    intptr_t n = I(msg);
    fifo_note("count", n);
    if (n == 0)
      break;
    if (self_first)
      CHECK_EQ(weft_actor_send("counter", P(n - 1)), 0);
    CHECK_EQ(weft_actor_send("printer", P(n)), 0);
    if (!self_first)
      CHECK_EQ(weft_actor_send("counter", P(n - 1)), 0);
  }
  return NULL;
}

static int fifo_order_main(void *unused) {
  (void)unused;
  CHECK(weft_actor_spawn("printer", fifo_printer, NULL));
  CHECK(weft_actor_spawn("counter", fifo_counter, NULL));
  CHECK_EQ(weft_actor_send("counter", P(5)), 0);
  return 0;
}

static void test_fifo_order(void) {
  static const char *want[2] = {
      "count5 Got:5 count4 Got:4 count3 Got:3 count2 Got:2 count1 Got:1 "
      "count0 ",
      "count5 count4 Got:5 count3 Got:4 count2 Got:3 count1 Got:2 count0 "
      "Got:1 "};
  for (self_first = 0; self_first < 2; self_first++) {
    fifo_trace[0] = '\0';
    CHECK_EQ(weft_main(fifo_order_main, NULL), 0);
    if (!check_seeded()) /* the order of ready tasks is the point */
      CHECK_STR_EQ(fifo_trace, want[self_first]);
  }
}

/* ---- a backlog does not hold the loop off ------------------------------
 * An actor with many messages queued takes them without yielding only for
 * a turn's share of hand-offs: then the loop runs its callbacks (and its
 * timers and I/O), and the tasks behind an actor whose messages are newer
 * than the backlog get their turn. Before, both waited until the whole
 * backlog was handled. */
#define BACKLOG 10000

static long backlog_handled, handled_at_callback, handled_at_task,
    handled_at_newer;

static void *backlog_actor(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0)
    backlog_handled++;
  return NULL;
}

/* The actor whose one message is newer than the whole backlog. */
static void *newer_actor(void *unused) {
  (void)unused;
  void *msg;
  while (weft_actor_recv(&msg) == 0)
    handled_at_newer = backlog_handled;
  return NULL;
}

static void note_callback(void *unused) {
  (void)unused;
  handled_at_callback = backlog_handled;
}

static void *note_task(void *unused) {
  (void)unused;
  handled_at_task = backlog_handled;
  return NULL;
}

static int backlog_main(void *with_other) {
  backlog_handled = 0;
  handled_at_callback = handled_at_task = handled_at_newer = -1;
  weft_actor *a = weft_actor_spawn(NULL, backlog_actor, NULL);
  CHECK(a);
  weft_actor *b = NULL;
  if (with_other)
    CHECK((b = weft_actor_spawn(NULL, newer_actor, NULL)));
  for (int i = 0; i < BACKLOG; i++)
    CHECK_EQ(weft_actor_send_to(a, P(i)), 0);
  if (b) /* next in line after a, with a message newer than a's */
    CHECK_EQ(weft_actor_send_to(b, P(0)), 0);
  CHECK(weft_spawn(note_task, NULL));
  CHECK_EQ(weft_call_soon(note_callback, NULL), 0);
  return 0;
}

static void test_backlog(void) {
  for (intptr_t with_other = 0; with_other < 2; with_other++) {
    CHECK_EQ(weft_main(backlog_main, P(with_other)), 0);
    CHECK_EQ(backlog_handled, BACKLOG);
    CHECK_GE(handled_at_callback, 0);
    CHECK_LT(handled_at_callback, 1000);
    CHECK_GE(handled_at_task, 0);
    CHECK_LT(handled_at_task, 1000);
    /* The seed's order still: the newer message after the backlog. */
    if (with_other && !check_seeded())
      CHECK_EQ(handled_at_newer, BACKLOG);
  }
}

/* An actor holding an older message, but yielding in its own code until
 * another actor has handled a newer one, is not waited for: the other
 * takes its message (it used to yield back for as long as the first one
 * yielded). */
static int busy_flag;
static long busy_spins;

static void *busy_older(void *arg) {
  (void)arg;
  void *m;
  CHECK_EQ(weft_actor_recv(&m), 0);
  while (!busy_flag && busy_spins < 100000) {
    busy_spins++;
    CHECK_EQ(weft_yield(), 0);
  }
  CHECK_EQ(weft_actor_recv(&m), 0); /* the older message, still there */
  return NULL;
}

static void *sets_flag(void *arg) {
  (void)arg;
  void *m;
  CHECK_EQ(weft_actor_recv(&m), 0);
  busy_flag = 1;
  return NULL;
}

static int busy_older_main(void *arg) {
  (void)arg;
  weft_actor *b = weft_actor_spawn(NULL, busy_older, NULL);
  weft_actor *a = weft_actor_spawn(NULL, sets_flag, NULL);
  CHECK(a && b);
  CHECK_EQ(weft_actor_send_to(b, P(1)), 0);
  CHECK_EQ(weft_actor_send_to(b, P(2)), 0); /* older than a's */
  CHECK_EQ(weft_actor_send_to(a, P(3)), 0);
  return 0;
}

static void test_busy_older(void) {
  CHECK_EQ(weft_main(busy_older_main, NULL), 0);
  CHECK_EQ(busy_flag, 1);
  CHECK_LT(busy_spins, 100);
}

/* Request and reply (docs/actors.md): the request carries a future, the
 * asker and the actor hold a reference each. An asker cancelled while it
 * waits leaves the actor a live future to complete; the requests left when
 * the actor ends are cancelled by its release callback. */
typedef struct req {
  weft_future *reply;
  int x;
} req;

static void *server(void *arg) {
  (void)arg;
  void *msg;
  while (weft_actor_recv(&msg) == 0) {
    req *r = msg;
    (void)weft_sleep(WEFT_MS(20));
    CHECK_EQ(weft_future_set_result(r->reply, P(r->x * 2)), 0);
    weft_future_release(r->reply);
    free(r);
  }
  return NULL;
}

static void release_req(void *msg, void *arg) {
  req *r = msg;
  (*(int *)arg)++;
  CHECK_EQ(weft_future_cancel(r->reply), 1);
  weft_future_release(r->reply);
  free(r);
}

static weft_actor *ask_server;

static void *asker(void *arg) {
  req *r = malloc(sizeof *r);
  CHECK(r);
  r->x = (int)I(arg);
  r->reply = weft_future_new();
  CHECK(r->reply);
  weft_future *reply = weft_future_ref(r->reply);
  CHECK_EQ(weft_actor_send_to(ask_server, r), 0);
  void *v = NULL;
  int rc = weft_await(reply, &v);
  weft_future_release(reply);
  return rc == 0 ? v : P(rc);
}

static int ask_reply_main(void *arg) {
  (void)arg;
  int nleft = 0;
  weft_actor_opts o = {.release = release_req, .release_arg = &nleft};
  ask_server = weft_actor_spawn_opts("server", server, NULL, &o);
  CHECK(ask_server);
  weft_task *t[4];
  for (intptr_t i = 0; i < 4; i++)
    CHECK((t[i] = weft_spawn(asker, P(i + 1))));
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0); /* 1 is being served */
  CHECK_EQ(weft_cancel(t[1]), 0);      /* 2 gives up, still queued */
  void *v;
  CHECK_EQ(weft_join(t[1], &v), 0);
  CHECK_EQ(I(v), -ECANCELED);
  CHECK_EQ(weft_join(t[0], &v), 0);
  CHECK_EQ(I(v), 2);
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  /* Serving 2 (nobody waits) now; 3 and 4 never will be. */
  CHECK_EQ(weft_cancel(weft_actor_task(ask_server)), 0);
  CHECK_EQ(weft_join(t[2], &v), 0);
  CHECK_EQ(I(v), -ECANCELED);
  CHECK_EQ(weft_join(t[3], &v), 0);
  CHECK_EQ(I(v), -ECANCELED);
  wait_ended(ask_server);
  CHECK_EQ(nleft, 2);
  return 0;
}

static void test_ask_reply(void) {
  CHECK_EQ(weft_main(ask_reply_main, NULL), 0);
}

/* A server's loop freed with requests still queued (stopped with their
 * askers waiting, before the server took any): release_req runs from
 * weft_loop_free, and the replies it cancels and releases are still the
 * loop's (a use after free under ASan when the loop's futures went
 * first). */
static void *slow_server(void *arg) {
  (void)arg;
  (void)weft_sleep(WEFT_SEC(100));
  return NULL;
}

static void *stop_later(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  weft_loop_stop(weft_loop_current());
  return NULL;
}

static void test_ask_reply_freed(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  int nleft = 0;
  weft_actor_opts o = {.release = release_req, .release_arg = &nleft};
  CHECK((ask_server = weft_actor_spawn_opts("slow", slow_server, NULL, &o)));
  for (intptr_t i = 0; i < 4; i++)
    CHECK_EQ(weft_go(asker, P(i + 1)), 0);
  CHECK_EQ(weft_go(stop_later, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 1);
  CHECK_EQ(nleft, 0);
  weft_loop_free(loop);
  CHECK_EQ(nleft, 4);
}

/* ---- ask and reply ----------------------------------------------------
 * weft_actor_ask queues a message with a reply future; the actor answers
 * the message it received last (weft_actor_reply), or takes the future to
 * complete it later (weft_actor_take_reply). What the actor does with each
 * message is written in it: an `order`, on the stack of the test's main
 * task, which outlives the actors and the askers. */
enum {
  ANSWER,   /* reply 2x, then try a second reply */
  IGNORE,   /* no answer: the next recv cancels the reply */
  TAKE,     /* take the reply; a helper answers x + 1 once gate is set */
  TAKE_ERR, /* take the reply, complete it with EPERM */
  GATED,    /* await gate, then reply x */
  HOLD,     /* await gate, then return without answering */
  ASK_SELF, /* fill its own mailbox (bound 1), then ask itself */
  QUIT      /* return */
};

struct ask_job;

typedef struct order {
  int how;
  intptr_t x;
  weft_future *gate;
  int received;        /* times the actor got it */
  int released;        /* times the release callback got it */
  int rc[2];           /* what the actor's reply calls returned */
  weft_future *taken;  /* TAKE: the reply the actor took */
  struct ask_job *job; /* its asker, if a task asked it */
} order;

/* An asker task: asks `to` for o, waits (in a scope with that deadline,
 * unless WEFT_NEVER), releases the reply. */
typedef struct ask_job {
  weft_actor *to;
  order *o;
  int64_t deadline;
  int ask_errno; /* 0: asked; else weft_actor_ask_to's errno */
  int rc;        /* weft_await's */
  void *value;
  int scope_rc;
  int done;
} ask_job;

static void *ask_task(void *arg) {
  ask_job *j = arg;
  weft_scope sc;
  if (j->deadline != WEFT_NEVER)
    weft_scope_enter(&sc, j->deadline);
  errno = 0;
  weft_future *f = weft_actor_ask_to(j->to, j->o);
  if (!f) {
    j->ask_errno = errno;
  } else {
    j->rc = weft_await(f, &j->value);
    weft_future_release(f);
  }
  if (j->deadline != WEFT_NEVER)
    j->scope_rc = weft_scope_exit(&sc);
  j->done = 1;
  return NULL;
}

static weft_task *start_asker(ask_job *j, weft_actor *to, order *o,
                              int64_t deadline) {
  *j = (ask_job){.to = to, .o = o, .deadline = deadline, .rc = 1};
  o->job = j;
  weft_task *t = weft_spawn(ask_task, j);
  CHECK(t);
  return t;
}

/* Asks and waits: the value, or the error as a pointer. */
static intptr_t ask_wait(weft_actor *to, order *o) {
  weft_future *f = weft_actor_ask_to(to, o);
  CHECK(f);
  void *v = NULL;
  int rc = weft_await(f, &v);
  weft_future_release(f);
  return rc == 0 ? I(v) : rc;
}

/* What an ask test's actor was given, and what it and its callbacks saw. */
typedef struct asks_log {
  weft_future *gate;         /* awaited before the first recv, if set */
  int early_reply;           /* weft_actor_reply before the first message */
  int early_take_errno;      /* weft_actor_take_reply's errno then */
  int reply_releases;        /* reply_release calls ... */
  intptr_t released_value;   /* ... and the value of the last */
  int asker_done_at_release; /* release found an order's asker returned */
} asks_log;

static void count_reply_release(void *value, void *arg) {
  asks_log *log = arg;
  log->reply_releases++;
  log->released_value = I(value);
}

/* The release callback: each order once, before its asker has returned
 * (its reply is cancelled after the message is released). It yields, as
 * a release callback may, so that an asker told too early would run. */
static void release_order(void *msg, void *arg) {
  asks_log *log = arg;
  order *o = msg;
  o->released++;
  for (int i = 0; i < 3; i++)
    (void)weft_yield(); /* -ECANCELED in an actor that was cancelled */
  if (o->job && o->job->done)
    log->asker_done_at_release++;
}

static void *answer_later(void *arg) {
  order *o = arg;
  CHECK_EQ(weft_await(o->gate, NULL), 0);
  CHECK_EQ(weft_future_done(o->taken), false); /* the asker still waits */
  CHECK_EQ(weft_future_set_result(o->taken, P(o->x + 1)), 0);
  weft_future_release(o->taken);
  return NULL;
}

static void *answerer(void *arg) {
  asks_log *log = arg;
  if (log->gate && weft_await(log->gate, NULL) < 0)
    return NULL; /* cancelled before its first message */
  log->early_reply = weft_actor_reply(P(1));
  errno = 0;
  CHECK(weft_actor_take_reply() == NULL);
  log->early_take_errno = errno;
  void *m;
  while (weft_actor_recv(&m) == 0) {
    order *o = m;
    o->received++;
    switch (o->how) {
    case ANSWER:
      o->rc[0] = weft_actor_reply(P(o->x * 2));
      o->rc[1] = weft_actor_reply(P(0));
      break;
    case IGNORE: break;
    case TAKE:
    case TAKE_ERR: {
      weft_future *f = weft_actor_take_reply();
      CHECK(f);
      o->rc[0] = weft_actor_reply(P(0)); /* taken: nothing to answer */
      errno = 0;
      CHECK(weft_actor_take_reply() == NULL);
      o->rc[1] = -errno;
      if (o->how == TAKE_ERR) {
        CHECK_EQ(weft_future_set_error(f, EPERM), 0);
        weft_future_release(f);
      } else {
        o->taken = f;
        CHECK_EQ(weft_go(answer_later, o), 0);
      }
      break;
    }
    case GATED:
      CHECK_EQ(weft_await(o->gate, NULL), 0);
      o->rc[0] = weft_actor_reply(P(o->x));
      break;
    case HOLD: CHECK_EQ(weft_await(o->gate, NULL), 0); return NULL;
    case ASK_SELF: {
      /* Full at once, or by an ask waiting for room. */
      static order filler = {.how = IGNORE};
      (void)weft_actor_try_send_to(weft_actor_self(), &filler);
      errno = 0;
      CHECK(weft_actor_ask_to(weft_actor_self(), o) == NULL);
      o->rc[0] = -errno;
      break;
    }
    case QUIT: return NULL;
    }
  }
  return NULL;
}

static weft_actor *spawn_answerer(const char *name, asks_log *log,
                                  size_t bound) {
  weft_actor_opts opts = {.mailbox_bound = bound,
                          .release = release_order,
                          .release_arg = log,
                          .reply_release = count_reply_release,
                          .reply_release_arg = log};
  weft_actor *a = weft_actor_spawn_opts(name, answerer, log, &opts);
  CHECK(a);
  return a;
}

/* A round trip by name and by handle; a second reply, a reply to a plain
 * send, and replies before any message: -ENOENT; misuse. */
static int ask_basic_main(void *unused) {
  (void)unused;
  order o = {.how = ANSWER, .x = 1};
  CHECK_EQ(weft_actor_reply(P(1)), -EINVAL); /* not an actor */
  errno = 0;
  CHECK(weft_actor_take_reply() == NULL);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(weft_actor_ask("nobody", &o) == NULL);
  CHECK_EQ(errno, ENOENT);
  errno = 0;
  CHECK(weft_actor_ask(NULL, &o) == NULL);
  CHECK_EQ(errno, EINVAL);
  errno = 0;
  CHECK(weft_actor_ask_to(NULL, &o) == NULL);
  CHECK_EQ(errno, EINVAL);
  CHECK_EQ(o.received, 0);

  asks_log log = {0};
  weft_actor *a = spawn_answerer("answerer", &log, 0);
  order o1 = {.how = ANSWER, .x = 21}, o2 = {.how = ANSWER, .x = 5},
        o3 = {.how = ANSWER, .x = 4}, quit = {.how = QUIT};
  weft_future *f = weft_actor_ask("answerer", &o1);
  CHECK(f);
  void *v = NULL;
  CHECK_EQ(weft_await(f, &v), 0);
  CHECK_EQ(I(v), 42);
  weft_future_release(f);
  CHECK_EQ(weft_actor_send("answerer", &o2), 0); /* sent, not asked */
  CHECK_EQ(ask_wait(a, &o3), 8);                 /* after o2 */
  CHECK_EQ(weft_actor_send_to(a, &quit), 0);
  wait_ended(a);
  errno = 0;
  CHECK(weft_actor_ask_to(a, &o) == NULL); /* ended */
  CHECK_EQ(errno, ENOENT);
  CHECK_EQ(o.received + o.released, 0);

  CHECK_EQ(log.early_reply, -ENOENT);
  CHECK_EQ(log.early_take_errno, ENOENT);
  CHECK_EQ(o1.received, 1);
  CHECK_EQ(o1.rc[0], 0);
  CHECK_EQ(o1.rc[1], -ENOENT); /* answered already */
  CHECK_EQ(o2.received, 1);
  CHECK_EQ(o2.rc[0], -ENOENT); /* a plain send has no reply */
  CHECK_EQ(o2.rc[1], -ENOENT);
  CHECK_EQ(o3.rc[0], 0);
  CHECK_EQ(o3.rc[1], -ENOENT);
  /* Taken with weft_await: no value went to reply_release. */
  CHECK_EQ(log.reply_releases, 0);
  return 0;
}

static void test_ask_basic(void) {
  CHECK_EQ(weft_main(ask_basic_main, NULL), 0);
}

/* The actor takes a reply: a helper task answers it later, while the
 * actor goes on with the next message (whose recv must not cancel the
 * taken one); or it completes it with an error. */
static int ask_take_main(void *unused) {
  (void)unused;
  asks_log log = {0};
  weft_actor *a = spawn_answerer(NULL, &log, 0);
  weft_future *gate = weft_future_new();
  CHECK(gate);
  order o1 = {.how = TAKE, .x = 10, .gate = gate}, o2 = {.how = ANSWER, .x = 1},
        o3 = {.how = TAKE_ERR}, quit = {.how = QUIT};
  weft_future *f1 = weft_actor_ask_to(a, &o1);
  weft_future *f2 = weft_actor_ask_to(a, &o2);
  CHECK(f1 && f2);
  void *v = NULL;
  CHECK_EQ(weft_await(f2, &v), 0); /* the actor is past o1 ... */
  CHECK_EQ(I(v), 2);
  CHECK_EQ(weft_future_done(f1), false); /* ... which is still pending */
  CHECK_EQ(weft_future_set_result(gate, NULL), 0); /* the helper answers */
  CHECK_EQ(weft_await(f1, &v), 0);
  CHECK_EQ(I(v), 11);
  weft_future_release(f1);
  weft_future_release(f2);
  CHECK_EQ(o1.rc[0], -ENOENT); /* reply after take */
  CHECK_EQ(o1.rc[1], -ENOENT); /* take after take */
  CHECK_EQ(ask_wait(a, &o3), -EPERM);
  CHECK_EQ(o3.rc[0], -ENOENT);
  CHECK_EQ(weft_actor_send_to(a, &quit), 0);
  wait_ended(a);
  CHECK_EQ(log.reply_releases, 0);
  weft_future_release(gate);
  return 0;
}

static void test_ask_take(void) { CHECK_EQ(weft_main(ask_take_main, NULL), 0); }

/* Asks left unanswered: an asker whose message the actor received and
 * left is told so when the actor calls recv again, before any other
 * message comes; when the actor ends, the asker of the message it held
 * and those of the messages still queued get -ECANCELED, each queued
 * message goes to the release callback once, before its asker returns. */
static int ask_unanswered_main(void *unused) {
  (void)unused;
  asks_log log = {0};
  weft_actor *a = spawn_answerer("answerer", &log, 0);
  order ignored = {.how = IGNORE};
  CHECK_EQ(ask_wait(a, &ignored), -ECANCELED);
  CHECK_EQ(ignored.received, 1);
  CHECK_EQ(weft_actor_pending(a), 0u); /* no other message came */
  CHECK(weft_actor_task(a));           /* the actor waits in recv */

  weft_future *gate = weft_future_new();
  CHECK(gate);
  order o[4] = {{.how = HOLD, .gate = gate},
                {.how = ANSWER, .x = 1},
                {.how = ANSWER, .x = 2},
                {.how = ANSWER, .x = 3}};
  ask_job j[3];
  weft_task *t[3];
  t[0] = start_asker(&j[0], a, &o[0], WEFT_NEVER);
  for (int i = 0; i < 100 && !o[0].received; i++)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(o[0].received, 1); /* held ... */
  for (int i = 1; i < 3; i++)
    t[i] = start_asker(&j[i], a, &o[i], WEFT_NEVER);
  for (int i = 0; i < 100 && weft_actor_pending(a) < 2; i++)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_actor_pending(a), 2u);       /* ... and these two queued */
  CHECK_EQ(weft_actor_send_to(a, &o[3]), 0); /* and a plain send */
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(weft_join(t[i], NULL), 0);
    CHECK_EQ(j[i].ask_errno, 0);
    CHECK_EQ(j[i].rc, -ECANCELED);
  }
  wait_ended(a);
  CHECK_EQ(o[0].released, 0); /* received: the actor's, not released */
  for (int i = 1; i < 4; i++) {
    CHECK_EQ(o[i].received, 0);
    CHECK_EQ(o[i].released, 1);
  }
  CHECK_EQ(log.asker_done_at_release, 0);
  CHECK_EQ(log.reply_releases, 0);
  weft_future_release(gate);
  return 0;
}

static void test_ask_unanswered(void) {
  CHECK_EQ(weft_main(ask_unanswered_main, NULL), 0);
}

/* reply_release: a value whose asker timed out and released the reply is
 * released once, at the actor's release; one answered before the asker
 * let go unread, at the asker's; one whose asker cancelled the reply
 * itself, by weft_actor_reply. A value taken with weft_await is not. */
static int ask_release_main(void *unused) {
  (void)unused;
  asks_log log = {0};
  weft_actor *a = spawn_answerer(NULL, &log, 0);
  weft_future *gate = weft_future_new();
  CHECK(gate);

  order o1 = {.how = GATED, .x = 7, .gate = gate};
  ask_job j;
  weft_task *t = start_asker(&j, a, &o1, weft_now() + WEFT_MS(1));
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(j.rc, -ETIMEDOUT);
  CHECK_EQ(j.scope_rc, -ETIMEDOUT);
  CHECK_EQ(o1.received, 1);
  CHECK_EQ(log.reply_releases, 0); /* no answer yet */
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  order o2 = {.how = ANSWER, .x = 50};
  CHECK_EQ(ask_wait(a, &o2), 100); /* the actor is past o1 */
  CHECK_EQ(o1.rc[0], 0);
  CHECK_EQ(log.reply_releases, 1);
  CHECK_EQ(log.released_value, 7);

  order o3 = {.how = ANSWER, .x = 3}, o4 = {.how = ANSWER, .x = 4};
  weft_future *f3 = weft_actor_ask_to(a, &o3);
  CHECK(f3);
  CHECK_EQ(ask_wait(a, &o4), 8); /* o3 is answered, not taken */
  CHECK_EQ(log.reply_releases, 1);
  weft_future_release(f3);
  CHECK_EQ(log.reply_releases, 2);
  CHECK_EQ(log.released_value, 6);

  weft_future *gate2 = weft_future_new();
  CHECK(gate2);
  order o5 = {.how = GATED, .x = 9, .gate = gate2};
  weft_future *f5 = weft_actor_ask_to(a, &o5);
  CHECK(f5);
  CHECK_EQ(weft_future_cancel(f5), 1); /* the asker gives up itself */
  CHECK_EQ(weft_future_set_result(gate2, NULL), 0);
  order o6 = {.how = ANSWER, .x = 0};
  CHECK_EQ(ask_wait(a, &o6), 0);
  CHECK_EQ(o5.rc[0], 0);
  CHECK_EQ(log.reply_releases, 3);
  CHECK_EQ(log.released_value, 9);
  CHECK_EQ(weft_await(f5, NULL), -ECANCELED);
  weft_future_release(f5);
  CHECK_EQ(log.reply_releases, 3); /* once */

  order quit = {.how = QUIT};
  CHECK_EQ(weft_actor_send_to(a, &quit), 0);
  wait_ended(a);
  CHECK_EQ(log.reply_releases, 3);
  weft_future_release(gate);
  weft_future_release(gate2);
  return 0;
}

static void test_ask_release(void) {
  CHECK_EQ(weft_main(ask_release_main, NULL), 0);
}

/* A bounded mailbox: an ask to a full one waits as a send does (past a
 * deadline: NULL, ETIMEDOUT, the message not queued); one that got in
 * while it waited is answered; one whose actor ends while it waits is
 * NULL, ENOENT; an actor asking its own full mailbox, EDEADLK. */
static int ask_bounded_main(void *unused) {
  (void)unused;
  weft_future *gate = weft_future_new();
  CHECK(gate);
  asks_log log = {.gate = gate};
  weft_actor *a = spawn_answerer("bounded", &log, 1);
  order o1 = {.how = ANSWER, .x = 1}, o2 = {.how = ANSWER, .x = 2};
  CHECK_EQ(weft_actor_send_to(a, &o1), 0); /* full */
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + WEFT_MS(1));
  errno = 0;
  CHECK(weft_actor_ask_to(a, &o2) == NULL);
  CHECK_EQ(errno, ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&sc), -ETIMEDOUT);

  order o3 = {.how = ANSWER, .x = 3};
  ask_job j;
  weft_task *t = start_asker(&j, a, &o3, WEFT_NEVER);
  settle();
  CHECK_EQ(j.done, 0); /* waits for room */
  CHECK_EQ(weft_future_set_result(gate, NULL), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(j.ask_errno, 0);
  CHECK_EQ(j.rc, 0);
  CHECK_EQ(I(j.value), 6);

  order self = {.how = ASK_SELF};
  CHECK_EQ(weft_actor_send_to(a, &self), 0);
  order o4 = {.how = ANSWER, .x = 4};
  CHECK_EQ(ask_wait(a, &o4), 8); /* after self */
  CHECK_EQ(self.rc[0], -EDEADLK);

  /* An actor that ends while an ask waits for room. */
  weft_future *gate2 = weft_future_new();
  CHECK(gate2);
  asks_log log2 = {.gate = gate2};
  weft_actor *b = spawn_answerer(NULL, &log2, 1);
  order filled = {.how = ANSWER}, o5 = {.how = ANSWER, .x = 5};
  CHECK_EQ(weft_actor_send_to(b, &filled), 0);
  t = start_asker(&j, b, &o5, WEFT_NEVER);
  settle();
  CHECK_EQ(j.done, 0);
  CHECK_EQ(weft_cancel(weft_actor_task(b)), 0); /* ends before a recv */
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(j.ask_errno, ENOENT);
  wait_ended(b);
  CHECK_EQ(filled.released, 1);

  order quit = {.how = QUIT};
  CHECK_EQ(weft_actor_send_to(a, &quit), 0);
  wait_ended(a);
  /* Refused asks left their messages alone. */
  CHECK_EQ(o2.received + o2.released, 0);
  CHECK_EQ(o5.received + o5.released, 0);
  CHECK_EQ(o1.received, 1);
  CHECK_EQ(o3.received, 1);
  CHECK_EQ(log.reply_releases + log2.reply_releases, 0);
  weft_future_release(gate);
  weft_future_release(gate2);
  return 0;
}

static void test_ask_bounded(void) {
  CHECK_EQ(weft_main(ask_bounded_main, NULL), 0);
}

/* A loop freed with asks queued and one held by the actor, their askers
 * waiting: weft_loop_free releases the messages (heap ones, freed by the
 * callback: a leak otherwise) and cancels and drops every reply before
 * the loop's futures go (ASan and valgrind run this). */
typedef struct heap_order {
  int n;
} heap_order;

static int freed_released, freed_reply_releases;
static heap_order *freed_held;

static void free_heap_order(void *msg, void *arg) {
  (void)arg;
  freed_released++;
  free(msg);
}

static void count_freed_reply(void *value, void *arg) {
  (void)value, (void)arg;
  freed_reply_releases++;
}

static void *holding_actor(void *arg) {
  (void)arg;
  void *m;
  CHECK_EQ(weft_actor_recv(&m), 0);
  freed_held = m; /* held, unanswered, when the loop goes */
  (void)weft_sleep(WEFT_SEC(100));
  return NULL;
}

static void *heap_asker(void *arg) {
  heap_order *o = malloc(sizeof *o);
  CHECK(o);
  o->n = (int)I(arg);
  weft_future *f = weft_actor_ask("holder", o);
  CHECK(f);
  (void)weft_await(f, NULL); /* the loop is freed meanwhile */
  weft_future_release(f);
  return NULL;
}

static void test_ask_freed(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_actor_opts o = {.release = free_heap_order,
                       .reply_release = count_freed_reply};
  CHECK(weft_actor_spawn_opts("holder", holding_actor, NULL, &o));
  for (intptr_t i = 0; i < 4; i++)
    CHECK_EQ(weft_go(heap_asker, P(i)), 0);
  /* And one made outside a task, before the loop runs: its future is the
   * actor's loop's, held here until the loop is freed. */
  heap_order *first = malloc(sizeof *first);
  CHECK(first);
  weft_future *f = weft_actor_ask("holder", first);
  CHECK(f);
  CHECK_EQ(weft_go(stop_later, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 1);
  CHECK(freed_held == first); /* the first queued */
  CHECK_EQ(weft_future_done(f), false);
  weft_future_release(f);
  CHECK_EQ(freed_released, 0);
  weft_loop_free(loop);
  CHECK_EQ(freed_released, 4);
  CHECK_EQ(freed_reply_releases, 0); /* cancelled: no value */
  free(freed_held);
}

/* A loop freed with answers nobody has taken yet: the asker woken by the
 * answer never ran (the loop stopped first). Its value goes to
 * reply_release once, from weft_loop_free (it leaked before); a value
 * an asker took, still holding the future, does not. */
static int answered_releases;

static void free_answered(void *value, void *arg) {
  (void)arg;
  answered_releases++;
  free(value);
}

static void *answer_then_stop(void *arg) {
  (void)arg;
  void *m;
  while (weft_actor_recv(&m) == 0) {
    char *v = malloc(8);
    CHECK(v);
    CHECK_EQ(weft_actor_reply(v), 0);
    if (m == STOP) /* its asker is woken, not run yet */
      weft_loop_stop(weft_loop_current());
  }
  return NULL;
}

static void *taker_then_sleeps(void *arg) {
  (void)arg;
  weft_future *f = weft_actor_ask("answers", P(1));
  CHECK(f);
  void *v = NULL;
  CHECK_EQ(weft_await(f, &v), 0);
  free(v);
  (void)weft_sleep(WEFT_SEC(100)); /* holds f when the loop goes */
  weft_future_release(f);
  return NULL;
}

static void *asks_stop(void *arg) {
  (void)arg;
  weft_future *f = weft_actor_ask("answers", STOP);
  CHECK(f);
  (void)weft_await(f, NULL); /* never back: the loop stops first */
  weft_future_release(f);
  return NULL;
}

static void *ask_stop_later(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_go(asks_stop, NULL), 0);
  return NULL;
}

static void test_ask_freed_answered(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_actor_opts o = {.reply_release = free_answered};
  CHECK(weft_actor_spawn_opts("answers", answer_then_stop, NULL, &o));
  CHECK_EQ(weft_go(taker_then_sleeps, NULL), 0);
  CHECK_EQ(weft_go(ask_stop_later, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 1);
  CHECK_EQ(answered_releases, 0);
  weft_loop_free(loop);
  CHECK_EQ(answered_releases, 1);
}

int main(void) {
  test_names();
  test_many();
  test_unbounded();
  test_bounded();
  test_send_cancel();
  test_recv_cancel();
  test_release();
  test_fairness();
  test_fifo_order();
  test_backlog();
  test_try_send();
  test_busy_older();
  test_memory();
  test_deadlock();
  test_wait();
  test_free_in_release();
  test_wait_release();
  test_other_loop();
  test_ask_reply();
  test_ask_reply_freed();
  test_ask_basic();
  test_ask_take();
  test_ask_unanswered();
  test_ask_release();
  test_ask_bounded();
  test_ask_freed();
  test_ask_freed_answered();
  test_oom();
  test_dump();
  printf("test_actor: ok\n");
  return 0;
}
