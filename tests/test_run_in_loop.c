/*
 * Calls into another thread's loop: weft_run_in_loop and
 * weft_submit_to_loop.
 *
 *  - fn runs as a task of the other loop, on its thread, and may wait
 *    there; 200 callers at once get their own results, and the other
 *    loop's state needs no lock (TSan);
 *  - the caller's own loop as the target; another loop of the caller's
 *    thread (-EDEADLK); bad arguments (-EINVAL);
 *  - a caller whose deadline passes returns -ETIMEDOUT at once, fn's task
 *    is cancelled there, and what it returns goes to opts->release, once,
 *    on the caller's thread;
 *  - a caller that gave up before the other loop got to the call: fn runs
 *    all the same, cancelled from the start, and its result is released;
 *  - a task cancelled before the call: -ECANCELED at once, and fn runs
 *    all the same, cancelled from its start, its result released;
 *  - futures gathered from two other loops and the caller's own, from a
 *    task and from outside one;
 *  - 2,000 calls racing deadlines: every result returned or released once;
 *  - fn's task is one of the other loop's: its deadlock rule cancels it;
 *  - fn stops its loop, which is then freed: the answer comes back, also
 *    when the caller gave up and its cancellation has not yet run there;
 *  - weft_loop_free of a loop with calls out (to another loop, and to
 *    itself): they are cancelled and waited for, nothing leaks (ASan,
 *    valgrind);
 *  - weft_loop_free of a loop with calls in it, fn's task waiting there or
 *    not yet started (also in a loop that has run no call yet): they come
 *    back -ESHUTDOWN, nothing released; two loops freed at once with calls
 *    into each other both end.
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

static void begin(const char *name) {
  check_case(name, RUNNING_ON_VALGRIND ? 110 : 60);
}

/* ---- another thread running a loop ------------------------------------ */
/* KEPT: it holds a reference of its own until other_stop, so it keeps
 * running with nothing to do. NAP: none; a task sleeping 200 ms keeps it
 * that long, and then only what it is given. STOPPED: a reference never
 * dropped; a weft_loop_stop ends the run. `block`, when set, is a POSIX
 * semaphore the loop's first callback waits on: the thread is busy, as a
 * loop in a long callback is. The thread frees the loop when the run
 * ends. */
enum { KEPT, NAP, STOPPED };

typedef struct other {
  pthread_t thread;
  weft_loop *loop;
  sem_t ready;
  sem_t *block;
  sem_t *hold; /* when set, waited on between the run and the free */
  int mode;
} other;

static void block_cb(void *arg) { sem_wait(arg); }

static void *nap(void *arg) {
  (void)arg;
  weft_sleep(200 * 1000000);
  return NULL;
}

static void *other_main(void *arg) {
  other *o = arg;
  o->loop = weft_loop_new(NULL);
  CHECK(o->loop != NULL);
  if (o->mode == NAP)
    CHECK_EQ(weft_go(nap, NULL), 0);
  else
    weft_loop_ref(o->loop);
  if (o->block)
    CHECK_EQ(weft_call_soon_threadsafe(o->loop, block_cb, o->block), 0);
  sem_post(&o->ready);
  CHECK_EQ(weft_loop_run(o->loop), o->mode == STOPPED);
  if (o->hold)
    sem_wait(o->hold);
  weft_loop_free(o->loop);
  return NULL;
}

static void other_start_mode(other *o, sem_t *block, int mode) {
  o->block = block;
  o->mode = mode;
  sem_init(&o->ready, 0, 0);
  CHECK_EQ(pthread_create(&o->thread, NULL, other_main, o), 0);
  sem_wait(&o->ready);
}

static void other_start(other *o, sem_t *block) {
  other_start_mode(o, block, KEPT);
}

static void other_stop(other *o) {
  if (o->mode == KEPT)
    weft_loop_unref(o->loop);
  CHECK_EQ(pthread_join(o->thread, NULL), 0);
  sem_destroy(&o->ready);
}

static int64_t elapsed_ms(int64_t since) {
  return (weft_now() - since) / 1000000;
}

/* ---- fn: what runs on the other loop ---------------------------------- */
static other o1, o2;
static pthread_t main_thread;
static int served; /* touched by o1's thread only */

typedef struct req {
  int n;         /* in */
  pthread_t ran; /* out: the thread fn ran on */
  int in_task;   /* out: fn ran in a task */
  weft_loop *on; /* out: its loop */
} req;

static void *square(void *arg) {
  req *r = arg;
  r->ran = pthread_self();
  r->in_task = weft_self() != NULL;
  r->on = weft_loop_current();
  /* A task there: it may wait. */
  CHECK_EQ(weft_sleep(1000000), 0);
  served++;
  return P(r->n * r->n);
}

/* ---- many callers ----------------------------------------------------- */
#define NCALLERS 200

static void *caller(void *arg) {
  req *r = arg;
  void *res = NULL;
  CHECK_EQ(weft_run_in_loop(o1.loop, square, r, &res), 0);
  CHECK_EQ(I(res), r->n * r->n);
  CHECK(pthread_equal(r->ran, o1.thread));
  CHECK_EQ(r->in_task, 1);
  CHECK_PTR_EQ(r->on, o1.loop);
  return NULL;
}

static int many_main(void *arg) {
  (void)arg;
  static req reqs[NCALLERS];
  weft_task *t[NCALLERS];
  for (int i = 0; i < NCALLERS; i++) {
    reqs[i].n = i;
    t[i] = weft_spawn(caller, &reqs[i]);
    CHECK(t[i] != NULL);
  }
  for (int i = 0; i < NCALLERS; i++)
    CHECK_EQ(weft_join(t[i], NULL), 0);
  CHECK_EQ(weft_executor_pending(weft_loop_current()), 0);
  /* result may be NULL */
  req r = {.n = 3};
  CHECK_EQ(weft_run_in_loop(o1.loop, square, &r, NULL), 0);
  return 0;
}

static void *read_served(void *arg) {
  (void)arg;
  return P(served);
}

static int served_main(void *arg) {
  (void)arg;
  void *n = NULL;
  CHECK_EQ(weft_run_in_loop(o1.loop, read_served, NULL, &n), 0);
  return (int)I(n);
}

static void test_many(void) {
  begin("many callers");
  other_start(&o1, NULL);
  CHECK_EQ(weft_main(many_main, NULL), 0);
  /* served is o1's: read it there. */
  CHECK_EQ(weft_main(served_main, NULL), NCALLERS + 1);
  other_stop(&o1);
}

/* ---- the caller's own loop, another of its thread, bad arguments ------ */
static int misuse_main(void *arg) {
  weft_loop *idle = arg; /* made on this thread, not running */
  req r = {.n = 7};
  void *res = NULL;
  CHECK_EQ(weft_run_in_loop(weft_loop_current(), square, &r, &res), 0);
  CHECK_EQ(I(res), 49);
  CHECK(pthread_equal(r.ran, main_thread));
  CHECK_PTR_EQ(r.on, weft_loop_current());
  res = P(1);
  CHECK_EQ(weft_run_in_loop(idle, square, &r, &res), -EDEADLK);
  CHECK_EQ(I(res), 1);
  errno = 0;
  CHECK(weft_submit_to_loop(idle, square, &r) == NULL);
  CHECK_EQ(errno, EDEADLK);
  CHECK_EQ(weft_run_in_loop(NULL, square, &r, &res), -EINVAL);
  CHECK_EQ(weft_run_in_loop(o1.loop, NULL, &r, &res), -EINVAL);
  errno = 0;
  CHECK(weft_submit_to_loop(NULL, square, &r) == NULL);
  CHECK_EQ(errno, EINVAL);
  CHECK(weft_submit_to_loop(o1.loop, NULL, &r) == NULL);
  CHECK_EQ(errno, EINVAL);
  return 0;
}

static void test_misuse(void) {
  begin("own loop, another loop of the thread, bad arguments");
  other_start(&o1, NULL);
  req r = {.n = 2};
  /* Outside a task (and outside any loop). */
  CHECK_EQ(weft_run_in_loop(o1.loop, square, &r, NULL), -EINVAL);
  weft_loop *idle = weft_loop_new(NULL);
  CHECK(idle != NULL);
  CHECK_EQ(weft_main(misuse_main, idle), 0);
  weft_loop_free(idle);
  served = 0; /* (o1 has served nothing: its thread has not touched it) */
  other_stop(&o1);
}

/* ---- cancellation ----------------------------------------------------- */
static int slow_started, slow_cancelled; /* atomics: set on o1's thread */
static int released;                     /* the caller's thread only */
static void *released_value;
static pthread_t released_on;

static void *slow(void *arg) {
  (void)arg;
  __atomic_store_n(&slow_started, 1, __ATOMIC_RELEASE);
  int rc = weft_sleep(10 * (int64_t)1000000000);
  __atomic_store_n(&slow_cancelled, rc == -ECANCELED, __ATOMIC_RELEASE);
  return malloc(16); /* the caller's, all the same: release frees it */
}

static void on_release(void *result, void *arg) {
  CHECK_EQ(I(arg), 42);
  released++;
  released_value = result;
  released_on = pthread_self();
  free(result);
}

static const weft_submit_opts rel = {on_release, P(42)};

/* The same for results that are no pointers. */
static void on_release_int(void *result, void *arg) {
  (void)arg;
  released++;
  released_value = result;
}

static const weft_submit_opts rel_int = {on_release_int, NULL};

static int deadline_main(void *arg) {
  (void)arg;
  int64_t t0 = weft_now();
  void *res = P(1);
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + 50 * 1000000);
  int rc = weft_run_in_loop_with(o1.loop, slow, NULL, &res, &rel);
  weft_scope_exit(&sc);
  CHECK_EQ(rc, -ETIMEDOUT);
  CHECK_EQ(I(res), 1);
  CHECK_LT(elapsed_ms(t0), 2000);
  CHECK_EQ(released, 0); /* fn's task has not come back yet */
  /* The loop waits for the call to come back before it ends. */
  return 0;
}

static void test_deadline(void) {
  begin("a caller's deadline cancels fn there");
  other_start(&o1, NULL);
  int64_t t0 = weft_now();
  CHECK_EQ(weft_main(deadline_main, NULL), 0);
  CHECK_LT(elapsed_ms(t0), 5000); /* not fn's 10 s */
  CHECK_EQ(__atomic_load_n(&slow_started, __ATOMIC_ACQUIRE), 1);
  CHECK_EQ(__atomic_load_n(&slow_cancelled, __ATOMIC_ACQUIRE), 1);
  CHECK_EQ(released, 1);
  CHECK(released_value != NULL);
  CHECK(pthread_equal(released_on, main_thread));
  other_stop(&o1);
}

static int never_runs; /* atomic */

static void *must_not_run(void *arg) {
  (void)arg;
  __atomic_store_n(&never_runs, 1, __ATOMIC_RELEASE);
  return malloc(1); /* what release frees, if it is called */
}

static void *release_block(void *arg) {
  weft_sleep(100 * 1000000); /* past the caller's deadline */
  sem_post(arg);
  return NULL;
}

/* fn of a call its caller gave up before the other loop got to it: it
 * runs all the same, cancelled from the start, so that what it owns (arg,
 * its result) is freed. */
static int late_ran, late_sleep_rc; /* atomics */

static void *starts_cancelled(void *arg) {
  __atomic_store_n(&late_ran, 1, __ATOMIC_RELEASE);
  __atomic_store_n(&late_sleep_rc, weft_sleep(1000000), __ATOMIC_RELEASE);
  free(arg); /* the heap arg the caller could not free */
  return malloc(16);
}

static int gave_up_main(void *arg) {
  CHECK_EQ(weft_go(release_block, arg), 0);
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + 20 * 1000000);
  int rc =
      weft_run_in_loop_with(o1.loop, starts_cancelled, malloc(8), NULL, &rel);
  weft_scope_exit(&sc);
  CHECK_EQ(rc, -ETIMEDOUT);
  return 0;
}

/* A caller cancelled before the call still makes it: -ECANCELED at once,
 * and fn runs, cancelled from its start, so that a heap arg is never left
 * to a caller who cannot tell whether it was sent. */
static int precancelled_main(void *arg) {
  (void)arg;
  CHECK_EQ(weft_cancel(weft_self()), 0);
  CHECK_EQ(
      weft_run_in_loop_with(o1.loop, starts_cancelled, malloc(8), NULL, &rel),
      -ECANCELED);
  errno = 0;
  return 0;
}

static void test_gave_up(void) {
  begin("a caller that gave up before fn started: fn runs, cancelled");
  sem_t block;
  sem_init(&block, 0, 0);
  other_start(&o1, &block); /* o1's thread waits on `block` */
  released = 0;
  CHECK_EQ(weft_main(gave_up_main, &block), 0);
  CHECK_EQ(__atomic_load_n(&late_ran, __ATOMIC_ACQUIRE), 1);
  CHECK_EQ(__atomic_load_n(&late_sleep_rc, __ATOMIC_ACQUIRE), -ECANCELED);
  CHECK_EQ(released, 1);
  __atomic_store_n(&late_ran, 0, __ATOMIC_RELEASE);
  __atomic_store_n(&late_sleep_rc, 0, __ATOMIC_RELEASE);
  CHECK_EQ(weft_main(precancelled_main, NULL), 0);
  CHECK_EQ(__atomic_load_n(&late_ran, __ATOMIC_ACQUIRE), 1);
  CHECK_EQ(__atomic_load_n(&late_sleep_rc, __ATOMIC_ACQUIRE), -ECANCELED);
  CHECK_EQ(released, 2);
  other_stop(&o1);
  sem_destroy(&block);
}

/* ---- futures: gathering ----------------------------------------------- */
static void *whose(void *arg) {
  weft_sleep(1000000);
  return P(I(arg) * 10 + (weft_loop_current() == o1.loop   ? 1
                          : weft_loop_current() == o2.loop ? 2
                                                           : 3));
}

static void *gather_task(void *arg) {
  weft_future **pre = arg; /* submitted before the loop ran */
  weft_future *f[3] = {
      weft_submit_to_loop(o1.loop, whose, P(1)),
      weft_submit_to_loop(o2.loop, whose, P(2)),
      weft_submit_to_loop(weft_loop_current(), whose, P(3)),
  };
  for (int i = 0; i < 3; i++) {
    CHECK(f[i] != NULL);
    void *v = NULL;
    CHECK_EQ(weft_await(f[i], &v), 0);
    CHECK_EQ(I(v), (i + 1) * 10 + i + 1);
    weft_future_release(f[i]);
  }
  void *v = NULL;
  CHECK_EQ(weft_await(*pre, &v), 0);
  CHECK_EQ(I(v), 42);
  weft_future_release(*pre);
  return NULL;
}

static void test_gather(void) {
  begin("futures from two loops and the caller's own");
  other_start(&o1, NULL);
  other_start(&o2, NULL);
  weft_loop *l = weft_loop_new(NULL); /* this thread's current loop */
  CHECK(l != NULL);
  weft_future *pre = weft_submit_to_loop(o2.loop, whose, P(4));
  CHECK(pre != NULL);
  CHECK_EQ(weft_executor_pending(l), 1);
  weft_task_opts lo = {.loop = l};
  weft_task *t = weft_spawn_opts(gather_task, &pre, &lo);
  CHECK(t != NULL);
  CHECK_EQ(weft_loop_run(l), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  weft_loop_free(l);
  other_stop(&o1);
  other_stop(&o2);
}

/* ---- cancellation racing completion --------------------------------- */
/* Callers with deadlines drawn from 0 to `span` against fn that returns
 * at once or after a yield or a short sleep: every result fn makes is
 * either returned or released, once (ASan and valgrind see a leak or a
 * double free; the counts see a loss). The span follows the calls, a
 * little shorter after each that returned and longer after each that timed
 * out, so that about half do either way however slow the build (valgrind
 * and TSan take tens of times longer over a hop, and a caller that gives
 * up leaves fn to run there all the same). */
#define RACE_TASKS 20
#define RACE_CALLS 100

static int race_ran; /* atomic: fn's results made */
static int race_got, race_released;
static int64_t race_span = 1000000;

static void *race_fn(void *arg) {
  switch (I(arg) % 3) {
  case 1: weft_yield(); break;
  case 2: weft_sleep(50000); break;
  }
  __atomic_add_fetch(&race_ran, 1, __ATOMIC_RELAXED);
  return malloc(8);
}

static void race_release(void *result, void *arg) {
  (void)arg;
  race_released++;
  free(result);
}

static void *race_caller(void *arg) {
  unsigned seed = (unsigned)I(arg);
  const weft_submit_opts ro = {race_release, NULL};
  for (int i = 0; i < RACE_CALLS; i++) {
    seed = seed * 1103515245 + 12345;
    weft_scope sc;
    weft_scope_enter(&sc,
                     weft_now() + race_span * ((seed >> 8) & 0xffff) / 0x10000);
    void *res = NULL;
    int rc = weft_run_in_loop_with(o1.loop, race_fn, P(seed >> 4), &res, &ro);
    weft_scope_exit(&sc);
    if (rc == 0) {
      CHECK(res != NULL);
      race_got++;
      free(res);
      race_span -= race_span / 16;
    } else {
      CHECK_EQ(rc, -ETIMEDOUT);
      race_span += race_span / 16 + 1;
    }
  }
  return NULL;
}

static int race_main(void *arg) {
  (void)arg;
  for (int i = 0; i < RACE_TASKS; i++)
    CHECK_EQ(weft_go(race_caller, P(i + 1)), 0);
  return 0;
}

static void test_race(void) {
  begin("cancellation racing completion");
  other_start(&o1, NULL);
  CHECK_EQ(weft_main(race_main, NULL), 0);
  other_stop(&o1);
  int ran = __atomic_load_n(&race_ran, __ATOMIC_RELAXED);
  CHECK_EQ(race_got + race_released, ran);
  CHECK_LE(ran, RACE_TASKS * RACE_CALLS);
  /* Both outcomes happened (the deadlines are chosen so). */
  CHECK_GT(race_got, 0);
  CHECK_GT(race_released, 0);
  /* (fn does not run for a call whose deadline had passed when it was
   * made: that caller gets -ETIMEDOUT before anything is sent.) */
  printf("race: %d returned, %d released, %d never sent\n", race_got,
         race_released, RACE_TASKS * RACE_CALLS - ran);
}

/* ---- the other loop's deadlock rule ----------------------------------- */
/* A loop with no reference of its own, kept for 200 ms by a sleeping
 * task: fn's task, waiting there for a future nobody completes, is then
 * all it has, and its deadlock rule cancels it; the call comes back. */
static void *wait_forever(void *arg) {
  (void)arg;
  weft_future *f = weft_future_new();
  int rc = weft_await(f, NULL);
  weft_future_release(f);
  return P(rc);
}

static int deadlock_main(void *arg) {
  other *o = arg;
  void *res = NULL;
  CHECK_EQ(weft_run_in_loop(o->loop, wait_forever, NULL, &res), 0);
  CHECK_EQ(I(res), -ECANCELED);
  return 0;
}

/* A call into the caller's own loop is no job of the loop's: both tasks
 * parked for ever, the deadlock rule cancels them. */
static int own_deadlock_main(void *arg) {
  (void)arg;
  released = 0;
  CHECK_EQ(weft_run_in_loop_with(weft_loop_current(), wait_forever, NULL, NULL,
                                 &rel_int),
           -ECANCELED);
  CHECK_EQ(released, 0); /* fn ends after its caller */
  return 0;
}

static void test_deadlock_rule(void) {
  begin("the deadlock rule reaches fn's task, on another loop and its own");
  other t = {0};
  other_start_mode(&t, NULL, NAP);
  CHECK_EQ(weft_main(deadlock_main, &t), 0);
  other_stop(&t);
  CHECK_EQ(weft_main(own_deadlock_main, NULL), 0);
  CHECK_EQ(released, 1);
  CHECK_EQ(I(released_value), -ECANCELED);
}

/* ---- the other loop stopped and freed as fn returns --------------------- */
/* Answers go back at the other loop's next turn, all together; fn stops
 * its loop, whose thread then frees it: the answer still comes back (the
 * loop's free sends what it holds). */
static void *stop_and_answer(void *arg) {
  weft_loop_stop(weft_loop_current());
  return arg;
}

static int stopped_main(void *arg) {
  other *o = arg;
  void *res = NULL;
  CHECK_EQ(weft_run_in_loop(o->loop, stop_and_answer, P(77), &res), 0);
  CHECK_EQ(I(res), 77);
  return 0;
}

static void test_stopped(void) {
  begin("the other loop stopped and freed as fn returns");
  other t = {0};
  other_start_mode(&t, NULL, STOPPED);
  CHECK_EQ(weft_main(stopped_main, &t), 0);
  other_stop(&t);
}

/* The same with the caller gone: fn holds its loop's thread while the
 * caller's deadline passes (its cancellation is queued there, behind fn),
 * then stops the loop and returns. The call was left to the cancellation,
 * which the stop leaves queued and the loop's free would drop with its
 * callbacks: the free runs it, and the call comes back (the caller's loop
 * waited for it for ever: the second run_in_loop review's probe). */
static sem_t gone;

static void *stop_after_gone(void *arg) {
  sem_wait(&gone);
  weft_loop_stop(weft_loop_current());
  return arg;
}

static int stopped_gone_main(void *arg) {
  other *o = arg;
  void *res = NULL;
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + 20 * 1000000);
  int rc =
      weft_run_in_loop_with(o->loop, stop_after_gone, P(78), &res, &rel_int);
  weft_scope_exit(&sc);
  CHECK_EQ(rc, -ETIMEDOUT);
  sem_post(&gone); /* the cancellation was sent before rc came back */
  return 0;
}

static void test_stopped_gone(void) {
  begin("the other loop stopped and freed as fn returns, the caller gone");
  other t = {0};
  sem_init(&gone, 0, 0);
  released = 0;
  other_start_mode(&t, NULL, STOPPED);
  CHECK_EQ(weft_main(stopped_gone_main, &t), 0);
  other_stop(&t);
  CHECK_EQ(released, 1);
  CHECK_EQ(I(released_value), 78);
  sem_destroy(&gone);
}

/* ---- weft_loop_free with calls out ------------------------------------ */
static void stop_cb(void *arg) { weft_loop_stop(arg); }

static void *to_o1(void *arg) {
  (void)arg;
  weft_run_in_loop_with(o1.loop, slow, NULL, NULL, &rel);
  CHECK(0); /* never comes back: its loop is stopped and freed */
  return NULL;
}

static void *to_self(void *arg) {
  weft_run_in_loop_with(arg, slow, NULL, NULL, &rel);
  CHECK(0);
  return NULL;
}

static void test_free(void) {
  begin("weft_loop_free with calls out");
  other_start(&o1, NULL);
  weft_loop *l = weft_loop_new(NULL);
  CHECK(l != NULL);
  weft_task_opts lo = {.loop = l};
  CHECK(weft_spawn_opts(to_o1, NULL, &lo) != NULL);
  CHECK(weft_spawn_opts(to_self, l, &lo) != NULL);
  __atomic_store_n(&slow_started, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&slow_cancelled, 0, __ATOMIC_RELAXED);
  released = 0;
  CHECK(weft_call_later(20 * 1000000, stop_cb, l) != NULL);
  int64_t t0 = weft_now();
  CHECK_EQ(weft_loop_run(l), 1);
  CHECK_EQ(weft_executor_pending(l), 1); /* (the call into itself: none) */
  weft_loop_free(l); /* cancels both, waits for o1's */
  CHECK_LT(elapsed_ms(t0), 5000);
  CHECK_EQ(__atomic_load_n(&slow_cancelled, __ATOMIC_ACQUIRE), 1);
  /* o1's fn returned a value, released; the loop's own never ran again. */
  CHECK_EQ(released, 1);
  other_stop(&o1);
}

/* ---- weft_loop_free with calls in it ---------------------------------- */
/* The other loop is stopped with two fns waiting there (a caller waiting,
 * and a future's) and a call it never started, then freed: the three come
 * back -ESHUTDOWN, without a result to release (the callers waited for
 * ever). */
static int nappers; /* atomic */

static void *naps_an_hour(void *arg) {
  __atomic_add_fetch(&nappers, 1, __ATOMIC_RELEASE);
  weft_sleep(3600 * (int64_t)1000000000);
  return arg;
}

static void *call_napper(void *arg) {
  other *o = arg;
  return P(weft_run_in_loop_with(o->loop, naps_an_hour, NULL, NULL, &rel_int));
}

static int freed_main(void *arg) {
  other *o = arg;
  weft_task *caller = weft_spawn(call_napper, o);
  CHECK(caller != NULL);
  weft_future *waiting =
      weft_submit_to_loop_with(o->loop, naps_an_hour, NULL, &rel_int);
  CHECK(waiting != NULL);
  while (__atomic_load_n(&nappers, __ATOMIC_ACQUIRE) < 2)
    CHECK_EQ(weft_sleep(1000000), 0);
  /* Callbacks from one thread run in order: the stop ends the run first. */
  CHECK_EQ(weft_call_soon_threadsafe(o->loop, stop_cb, o->loop), 0);
  weft_future *queued =
      weft_submit_to_loop_with(o->loop, must_not_run, NULL, &rel_int);
  CHECK(queued != NULL);
  sem_post(o->hold); /* and the loop is freed */
  void *v = P(1), *rc = P(1);
  CHECK_EQ(weft_await(queued, &v), -ESHUTDOWN);
  CHECK_EQ(weft_await(waiting, &v), -ESHUTDOWN);
  CHECK_EQ(I(v), 1);
  CHECK_EQ(weft_join(caller, &rc), 0);
  CHECK_EQ(I(rc), -ESHUTDOWN);
  weft_future_release(queued);
  weft_future_release(waiting);
  return 0;
}

/* main_fn, given a stopped loop whose thread frees it at sem_post(hold):
 * nothing was released, and must_not_run never ran. */
static void freed_case(const char *name, int (*main_fn)(void *)) {
  begin(name);
  other t = {0};
  sem_t hold;
  sem_init(&hold, 0, 0);
  t.hold = &hold;
  __atomic_store_n(&never_runs, 0, __ATOMIC_RELAXED);
  released = 0;
  other_start_mode(&t, NULL, STOPPED);
  CHECK_EQ(weft_main(main_fn, &t), 0);
  other_stop(&t);
  CHECK_EQ(released, 0);
  CHECK_EQ(__atomic_load_n(&never_runs, __ATOMIC_ACQUIRE), 0);
  sem_destroy(&hold);
}

static void test_freed_with_calls(void) {
  freed_case("the other loop freed with calls in it", freed_main);
}

/* The same for a loop that has run no call yet, so has no pool: its call
 * still queued when it is freed comes back -ESHUTDOWN (it was dropped with
 * the loop's callbacks, and its caller waited for ever). */
static int freed_new_main(void *arg) {
  other *o = arg;
  CHECK_EQ(weft_call_soon_threadsafe(o->loop, stop_cb, o->loop), 0);
  weft_future *queued =
      weft_submit_to_loop_with(o->loop, must_not_run, NULL, &rel_int);
  CHECK(queued != NULL);
  sem_post(o->hold); /* and the loop is freed */
  void *v = P(1);
  CHECK_EQ(weft_await(queued, &v), -ESHUTDOWN);
  weft_future_release(queued);
  return 0;
}

static void test_freed_new_with_call(void) {
  freed_case("the other loop freed with a call in it, before its first",
             freed_new_main);
}

/* Two loops, each with a task calling into the other and waiting there,
 * stop and are freed at once: each free sends back the other's call
 * before it waits for its own (they waited for each other for ever). */
static weft_loop *pair[2];
static int pair_started; /* atomic */
static sem_t pair_made, pair_go;

static void *pair_fn(void *arg) {
  __atomic_add_fetch(&pair_started, 1, __ATOMIC_RELEASE);
  weft_sleep(3600 * (int64_t)1000000000); /* (or cancelled by the free) */
  return arg;
}

static void *pair_caller(void *arg) {
  /* Dropped with its loop, or back first from the other's free. */
  CHECK_EQ(weft_run_in_loop(arg, pair_fn, NULL, NULL), -ESHUTDOWN);
  return NULL;
}

static void *pair_stopper(void *arg) {
  (void)arg;
  while (__atomic_load_n(&pair_started, __ATOMIC_ACQUIRE) < 2)
    CHECK_EQ(weft_sleep(1000000), 0);
  weft_loop_stop(weft_loop_current());
  return NULL;
}

static void *pair_main(void *arg) {
  intptr_t i = I(arg);
  pair[i] = weft_loop_new(NULL);
  CHECK(pair[i] != NULL);
  weft_loop_ref(pair[i]); /* never dropped: the stop ends the run */
  sem_post(&pair_made);
  sem_wait(&pair_go);
  weft_task_opts lo = {.loop = pair[i]};
  CHECK(weft_spawn_opts(pair_caller, pair[1 - i], &lo) != NULL);
  CHECK(weft_spawn_opts(pair_stopper, NULL, &lo) != NULL);
  CHECK_EQ(weft_loop_run(pair[i]), 1);
  weft_loop_free(pair[i]);
  return NULL;
}

static void test_free_each_other(void) {
  begin("two loops freed with calls into each other");
  pthread_t th[2];
  sem_init(&pair_made, 0, 0);
  sem_init(&pair_go, 0, 0);
  for (intptr_t i = 0; i < 2; i++)
    CHECK_EQ(pthread_create(&th[i], NULL, pair_main, P(i)), 0);
  sem_wait(&pair_made);
  sem_wait(&pair_made);
  sem_post(&pair_go);
  sem_post(&pair_go);
  for (int i = 0; i < 2; i++)
    CHECK_EQ(pthread_join(th[i], NULL), 0); /* (the case's alarm, if not) */
  CHECK_EQ(pair_started, 2);
  sem_destroy(&pair_made);
  sem_destroy(&pair_go);
}

int main(void) {
  main_thread = pthread_self();
  int fds = check_fd_count();
  test_many();
  test_misuse();
  test_deadline();
  test_gave_up();
  test_gather();
  test_race();
  test_deadlock_rule();
  test_stopped();
  test_stopped_gone();
  test_free();
  test_freed_with_calls();
  test_freed_new_with_call();
  test_free_each_other();
  CHECK_EQ(check_fd_count(), fds);
  printf("test_run_in_loop: ok\n");
  return 0;
}
