/*
 * Layer 5: the executor, a pool of worker threads per loop for work that
 * would block it (seed 003's run_in_executor): CPU-bound code, blocking
 * calls, getaddrinfo, files.
 *
 * A job is a record the loop allocates (and keeps for reuse). Submitting
 * queues it under the pool's lock and wakes an idle worker, or starts a
 * thread if none is idle and the pool is not full. The worker runs fn and
 * pushes the job onto the loop's list of finished jobs (lock-free: a
 * compare-and-swap on the list head); the push that finds the list empty
 * writes the loop's wake-up eventfd, so a batch of completions costs one
 * wake-up. At its next turn the loop takes the whole list and delivers
 * each job: it wakes the task waiting in weft_run_in_thread, or completes
 * the future of weft_submit, or, when nobody is there to take the result
 * any more, hands it to the job's release callback.
 *
 * Only the loop's thread touches a job before it is queued and after it
 * is delivered; a worker owns it in between.
 *
 * A call into another loop (weft_run_in_loop, weft_submit_to_loop) is the
 * same record with another loop as its worker: the caller's thread sends
 * it there with weft_call_soon_threadsafe, a task of that loop runs fn, and
 * the record comes back through the same list of finished jobs, so the
 * answer needs no memory and cannot fail. The other loop stays while the
 * call is there: its queued callback, then fn's task, keep it running, and
 * a task that ends with a cancellation on its way to it takes a reference
 * until that has arrived.
 */
#include "backend.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct job {
  void *(*fn)(void *);
  void *arg;
  void *result;
  struct job *next;    /* in the pool's queue, the done list, the cache,
                        * the handed list */
  struct job *prev;    /* in the handed list */
  weft_task *task;     /* weft_run_in_thread's caller while it waits, or NULL */
  weft_future *future; /* weft_submit's future (the job holds a reference) */
  void (*release)(void *result, void *arg);
  void *release_arg;
  /* A call into another loop; to is NULL for a job of the pool. */
  weft_loop *to;             /* where fn runs */
  weft_loop *home;           /* the caller's loop, where the job comes back */
  weft_task *remote;         /* fn's task there while it runs (to's thread) */
  struct job *rnext, *rprev; /* in the pool's list of calls out */
  struct job *anext;         /* in the other loop's answers to send */
  struct job *inext, *iprev; /* in the other loop's calls whose fn runs */
  struct pool *left_in;      /* the other loop's pool, where call_end counted
                              * it as left to its cancellation, or NULL */
  int state;                 /* atomic: CALL_* */
  int droppable; /* weft's own job: not run if its caller left first */
  int err; /* why there is no result (-ENOMEM, -ECANCELED, -ESHUTDOWN), or 0 */
} job;

/* A call's state, set by the two loops' threads. */
#define CALL_CANCEL_SENT 1 /* the caller's loop sent a cancellation */
#define CALL_CANCEL_RUN  2 /* ... which ran on the other loop */
#define CALL_ENDED       4 /* fn has returned there (or never started) */
#define CALL_LEFT        8 /* ... and left the call to the cancellation */

typedef struct pool {
  pthread_mutex_t lock;
  pthread_cond_t work; /* idle workers wait here */
  job *head, *tail;    /* queued jobs, FIFO */
  size_t queued;       /* how many */
  unsigned idle;       /* workers waiting on `work` */
  unsigned nthreads;   /* started (atomic: read by weft_executor_threads) */
  unsigned max;        /* the pool's size */
  int stopping;        /* weft_loop_free: drain the queue, then exit */
  pthread_t *threads;  /* cap of them, grown as workers start */
  unsigned cap;
  weft_loop *loop;
  job *cache; /* delivered records, for reuse (loop thread) */
  size_t cached;
  /* Finished jobs whose caller was woken and has not yet taken the result
   * (loop thread): a loop freed before the caller runs again releases it
   * (opts->release), so nothing a result owns is lost with the task. */
  job *handed;
  /* Calls into other loops not yet delivered (loop thread), and how many
   * of them have not come back (the other loops count them down: the last
   * touch of this loop's memory); weft_loop_free waits for the last. */
  job *calls;
  size_t calls_out; /* atomic */
  /* Calls from other loops whose fn has returned here in this turn, sent
   * back together at the next (answers_send), oldest first. */
  job *answers, *answers_tail;
  /* Calls from other loops whose fn's task runs here (loop thread): a
   * loop freed with them sends them back without a result. */
  job *incoming;
  int freeing; /* weft_loop_free: answers go back at once */
  /* Calls from other loops whose fn ended here with a cancellation on its
   * way (call_end), not yet sent back (atomic): weft_loop_free runs those
   * cancellations, which it would otherwise drop with its callbacks. */
  size_t left;
} pool;

/* Job records kept per loop for reuse; beyond this many they are freed. */
#define JOB_CACHE_MAX 256

static unsigned default_threads(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n < 2 ? 2 : (unsigned)n;
}

static void executor_deliver(weft_loop *loop);
static void executor_free(weft_loop *loop);

static pool *pool_get(weft_loop *loop) {
  if (loop->executor)
    return loop->executor;
  pool *p = weft__calloc(1, sizeof *p);
  if (!p)
    return NULL;
  p->max = loop->executor_max ? loop->executor_max : default_threads();
  pthread_mutex_init(&p->lock, NULL);
  pthread_cond_init(&p->work, NULL);
  p->loop = loop;
  loop->executor = p;
  loop->jobs_deliver = executor_deliver;
  /* (Atomic: call_send may set it too, from another thread.) */
  __atomic_store_n(&loop->pool_free, executor_free, __ATOMIC_RELAXED);
  return p;
}

/* ---- the workers ------------------------------------------------------ */
/* A finished job goes onto the loop's list; the push that finds it empty
 * wakes the loop (unless it was woken since it last blocked), which takes
 * the whole list at its next turn. */
static int push_quiet(weft_loop *loop, job *j) {
  job *old = __atomic_load_n((job **)&loop->jobs_done, __ATOMIC_RELAXED);
  do
    j->next = old;
  while (!__atomic_compare_exchange_n((job **)&loop->jobs_done, &old, j, 1,
                                      __ATOMIC_SEQ_CST, __ATOMIC_RELAXED));
  return !old;
}

static void push_done(weft_loop *loop, job *j) {
  if (push_quiet(loop, j))
    weft__loop_nudge(loop);
}

static void *worker(void *arg) {
  pool *p = arg;
  pthread_mutex_lock(&p->lock);
  for (;;) {
    while (!p->head && !p->stopping) {
      p->idle++;
      pthread_cond_wait(&p->work, &p->lock);
      p->idle--;
    }
    job *j = p->head;
    if (!j)
      break; /* stopping, and nothing is left to run */
    p->head = j->next;
    if (!p->head)
      p->tail = NULL;
    p->queued--;
    pthread_mutex_unlock(&p->lock);
    j->result = j->fn(j->arg);
    push_done(p->loop, j); /* j is the loop's again: touch it no more */
    pthread_mutex_lock(&p->lock);
  }
  pthread_mutex_unlock(&p->lock);
  return NULL;
}

/* Starts one more worker, with every signal blocked (the loop's thread,
 * or weft_signal_wait, is where signals belong). Called with the lock. */
static int start_worker(pool *p) {
  if (p->nthreads == p->cap) { /* a pool of a million threads costs none */
    unsigned cap = p->cap ? 2 * p->cap : 4;
    if (cap > p->max)
      cap = p->max;
    pthread_t *v = weft__realloc(p->threads, cap * sizeof *v);
    if (!v)
      return -ENOMEM;
    p->threads = v;
    p->cap = cap;
  }
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int rc = pthread_create(&p->threads[p->nthreads], NULL, worker, p);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (rc != 0)
    return -rc;
  __atomic_store_n(&p->nthreads, p->nthreads + 1, __ATOMIC_RELAXED);
  return 0;
}

/* Queues j. Returns 0, or -EAGAIN if the pool has no thread and none could
 * be started (j is not queued). */
static int pool_queue(pool *p, job *j) {
  j->next = NULL;
  pthread_mutex_lock(&p->lock);
  if (p->tail)
    p->tail->next = j;
  else
    p->head = j;
  p->tail = j;
  p->queued++;
  int rc = 0;
  if (p->queued <= p->idle) {
    pthread_cond_signal(&p->work);
  } else if (p->nthreads < p->max && (rc = start_worker(p)) < 0 &&
             !p->nthreads) {
    p->head = p->tail = NULL; /* j was the only one queued */
    p->queued = 0;
    rc = rc == -ENOMEM ? rc : -EAGAIN; /* the table of threads, or a thread */
  } else {
    rc = 0; /* queued: the workers there are will take it */
  }
  pthread_mutex_unlock(&p->lock);
  return rc;
}

/* ---- jobs on the loop's side ----------------------------------------- */
static job *job_new(weft_loop *loop, void *(*fn)(void *), void *arg,
                    const weft_submit_opts *opts) {
  pool *p = pool_get(loop);
  if (!p)
    return NULL;
  job *j = p->cache;
  if (j) {
    p->cache = j->next;
    p->cached--;
  } else if (!(j = weft__malloc(sizeof *j))) {
    return NULL;
  }
  j->fn = fn;
  j->arg = arg;
  j->result = NULL;
  j->task = NULL;
  j->future = NULL;
  j->release = opts ? opts->release : NULL;
  j->release_arg = opts ? opts->release_arg : NULL;
  j->to = NULL;
  j->err = 0;
  j->droppable = 0;
  return j;
}

static void job_free(pool *p, job *j) {
  if (p->cached < JOB_CACHE_MAX) {
    j->next = p->cache;
    p->cache = j;
    p->cached++;
  } else {
    weft__free(j);
  }
}

/* Queues j and counts it as the loop's work; on failure frees it. */
static int job_submit(weft_loop *loop, job *j) {
  pool *p = loop->executor;
  int rc = pool_queue(p, j);
  if (rc < 0) {
    job_free(p, j);
    return rc;
  }
  loop->jobs_pending++;
  return 0;
}

static void job_drop_result(job *j) {
  if (j->release && !j->err) /* a call whose fn never ran has no result */
    j->release(j->result, j->release_arg);
}

/* A finished job, on the loop's thread. */
static void deliver(weft_loop *loop, job *j) {
  pool *p = loop->executor;
  if (j->to != loop) /* (a call into the loop itself is not counted) */
    loop->jobs_pending--;
  if (j->to) { /* a call: off the list of calls out */
    if (j->rprev)
      j->rprev->rnext = j->rnext;
    else
      p->calls = j->rnext;
    if (j->rnext)
      j->rnext->rprev = j->rprev;
  }
  if (j->task) { /* its caller still waits: it takes the result */
    j->prev = NULL;
    j->next = p->handed;
    if (j->next)
      j->next->prev = j;
    p->handed = j;
    weft__wake(j->task, 0);
    return;
  }
  weft_future *f = j->future;
  /* The job holds one reference: with no other, nobody can see a value. */
  if (f && !weft_future_done(f) && weft__future_refs(f) > 1) {
    if (j->err)
      weft_future_set_error(f, -j->err);
    else {
      if (j->release)
        weft__future_releases(f, j->release, j->release_arg);
      weft_future_set_result(f, j->result);
    }
  } else {
    job_drop_result(j);
  }
  weft_future_release(f);
  job_free(p, j);
}

/* Delivers the jobs workers finished since the last turn, on
 * loop->jobs_done (the loop's jobs_deliver hook, called when the list is
 * not empty). They were pushed newest first: deliver oldest first. */
static void executor_deliver(weft_loop *loop) {
  job *j =
      __atomic_exchange_n((job **)&loop->jobs_done, NULL, __ATOMIC_ACQUIRE);
  job *fifo = NULL;
  while (j) {
    job *next = j->next;
    j->next = fifo;
    fifo = j;
    j = next;
  }
  while (fifo) {
    job *next = fifo->next;
    deliver(loop, fifo);
    fifo = next;
  }
}

/* ---- calls into other loops ------------------------------------------ */
/* The call is done with the other loop: back onto its caller's list of
 * finished jobs, and counted back, the last touch of the caller's loop
 * (weft_loop_free waits for the count). From either thread; j is the
 * caller's loop's from the push on. */
static void call_back(job *j) {
  pool *p = j->home->executor;
  push_done(j->home, j);
  __atomic_sub_fetch(&p->calls_out, 1, __ATOMIC_RELEASE);
}

/* The same for a call whose end was left to its cancellation: the other
 * loop's reference, taken then, is dropped. */
static void call_back_late(job *j) {
  weft_loop *to = j->to;
  pool *p = j->left_in;
  call_back(j);
  weft_loop_unref(to);
  /* The last touch of `to`, whose weft_loop_free waits for the count. */
  if (p)
    __atomic_sub_fetch(&p->left, 1, __ATOMIC_RELEASE);
}

/* Sends back the calls whose fn returned in the last turn: all of a
 * caller's loop's are on its list before it is woken, once. Each sent as
 * its fn returned, the first woke the caller's loop, which, where the two
 * share a CPU, took it at once for that one answer: they took turns at
 * nearly every call, at three times the CPU per call. */
static void answers_send(void *arg) {
  pool *p = arg;
  job *j = p->answers;
  p->answers = p->answers_tail = NULL;
  while (j) {
    weft_loop *home = j->home;
    size_t n = 0;
    int wake = 0;
    while (j && j->home == home) { /* a run of one caller's loop's */
      job *next = j->anext;
      wake |= push_quiet(home, j);
      n++;
      j = next;
    }
    if (wake)
      weft__loop_nudge(home);
    __atomic_sub_fetch(&((pool *)home->executor)->calls_out, n,
                       __ATOMIC_RELEASE); /* the last touch of home */
  }
}

/* A call whose fn returned goes back with the others of this turn, at the
 * next; if no callback can be queued for that, at once. */
static void answer(job *j) {
  pool *p = pool_get(j->to);
  if (p &&
      (p->freeing || (!p->answers && weft_call_soon(answers_send, p) != 0)))
    p = NULL;
  if (!p) {
    call_back(j);
    return;
  }
  j->anext = NULL;
  if (p->answers_tail)
    p->answers_tail->anext = j;
  else
    p->answers = j;
  p->answers_tail = j;
}

/* fn has returned on the other loop, or will never run: the call goes
 * back, unless a cancellation was sent that has not yet arrived, which
 * then sends it back: it needs j, and the other loop, until it has run,
 * so the loop is kept (its task is ending, and the cancellation may not
 * be queued yet). */
static void call_end(job *j) {
  /* (NULL only if call_start found no memory for it; set before the
   * fetch_or that hands j to whichever thread sends it back.) */
  pool *p = j->left_in = j->to->executor;
  int old = __atomic_fetch_or(&j->state, CALL_ENDED, __ATOMIC_ACQ_REL);
  if (!(old & CALL_CANCEL_SENT) || (old & CALL_CANCEL_RUN)) {
    answer(j);
    return;
  }
  if (p)
    __atomic_add_fetch(&p->left, 1, __ATOMIC_RELAXED);
  weft_loop_ref(j->to);
  /* (For call_cancel, whose message may have failed meanwhile: then it
   * sends the call back, undoing the two above, once they are done.) */
  __atomic_fetch_or(&j->state, CALL_LEFT, __ATOMIC_RELEASE);
}

/* fn's task t runs on the other loop: on its list of incoming calls,
 * which its weft_loop_free sends back (calls_in_drop). */
static void call_in_add(job *j, weft_task *t) {
  pool *p = j->to->executor;
  j->remote = t;
  j->iprev = NULL;
  j->inext = p->incoming;
  if (j->inext)
    j->inext->iprev = j;
  p->incoming = j;
}

/* fn's task is no longer the loop's to drop: off its list of incoming
 * calls. */
static void call_in_remove(job *j) {
  if (j->iprev)
    j->iprev->inext = j->inext;
  else
    ((pool *)j->to->executor)->incoming = j->inext;
  if (j->inext)
    j->inext->iprev = j->iprev;
  j->remote = NULL;
}

static void *call_task(void *arg) {
  job *j = arg;
  j->result = j->fn(j->arg);
  call_in_remove(j);
  call_end(j);
  return NULL;
}

/* On the other loop: fn starts in a task of its own, cancelled already if
 * the caller has given up (so that fn still runs, and what it owns, arg
 * or its result, has an owner). (The cancellation, sent after this from
 * the same thread, arrives after it.) */
static void call_start(void *arg) {
  job *j = arg;
  /* (The pool first: call_end counts there.) */
  weft_task *t = pool_get(j->to) ? weft_spawn(call_task, j) : NULL;
  if (!t) {
    j->err = -ENOMEM;
    call_end(j);
    return;
  }
  weft_detach(t);
  call_in_add(j, t);
  if (__atomic_load_n(&j->state, __ATOMIC_ACQUIRE) & CALL_CANCEL_SENT)
    weft_cancel(t);
}

/* On the other loop: the caller's cancellation arrives. */
static void call_cancel_run(void *arg) {
  job *j = arg;
  int old = __atomic_fetch_or(&j->state, CALL_CANCEL_RUN, __ATOMIC_ACQ_REL);
  if (old & CALL_ENDED)
    call_back_late(j); /* fn ended first, and left the rest to this */
  else
    weft_cancel(j->remote);
}

/* On the caller's loop: cancels fn's task, unless fn has ended there. */
static void call_cancel(job *j) {
  int old = __atomic_load_n(&j->state, __ATOMIC_RELAXED);
  do {
    if (old & (CALL_ENDED | CALL_CANCEL_SENT))
      return;
  } while (!__atomic_compare_exchange_n(&j->state, &old, old | CALL_CANCEL_SENT,
                                        0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED));
  if (weft_call_soon_threadsafe(j->to, call_cancel_run, j) == 0)
    return;
  /* No memory for the message: fn runs to its end. If it has ended since
   * and left the call to the message, send it back here, once its end has
   * taken the reference and the count that call_back_late gives back (a
   * few instructions on the other thread: rare, and only without memory). */
  old = __atomic_fetch_and(&j->state, ~CALL_CANCEL_SENT, __ATOMIC_ACQ_REL);
  if (!(old & CALL_ENDED))
    return;
  while (!(__atomic_load_n(&j->state, __ATOMIC_ACQUIRE) & CALL_LEFT))
    sched_yield();
  call_back_late(j);
}

/* Sends j, made by job_new on the caller's loop `home`, to run on `to`.
 * Returns 0, or a negative errno with j freed and nothing sent. */
static int call_send(weft_loop *home, weft_loop *to, job *j) {
  pool *p = home->executor;
  j->to = to;
  j->home = home;
  j->remote = NULL;
  j->state = 0;
  /* A loop freed before it has run a call sends it back (executor_free,
   * which makes it a pool then): its free must call that, pool or not. */
  if (!__atomic_load_n(&to->pool_free, __ATOMIC_RELAXED))
    __atomic_store_n(&to->pool_free, executor_free, __ATOMIC_RELAXED);
  __atomic_add_fetch(&p->calls_out, 1, __ATOMIC_RELAXED);
  int rc = weft_call_soon_threadsafe(to, call_start, j);
  if (rc < 0) {
    __atomic_sub_fetch(&p->calls_out, 1, __ATOMIC_RELAXED);
    job_free(p, j);
    return rc;
  }
  j->rprev = NULL;
  j->rnext = p->calls;
  if (j->rnext)
    j->rnext->rprev = j;
  p->calls = j;
  /* A call into the loop itself keeps it running as its own parts do (the
   * callback queued, fn's task, the record on jobs_done), and its deadlock
   * rule sees through it: counted as a job, it would keep the loop waiting
   * for a fn that can never wake. */
  if (to != home)
    home->jobs_pending++;
  return 0;
}

/* weft_loop_free: the calls from other loops whose fn's task is here go
 * back without a result: the task is dropped with the loop. */
static void calls_in_drop(pool *p) {
  while (p->incoming) {
    job *j = p->incoming;
    call_in_remove(j);
    j->err = -ESHUTDOWN;
    call_end(j);
  }
}

/* weft_loop_free: the calls still out are cancelled, and waited for (they
 * come back to this loop's memory). Those into the loop itself have come
 * back already (calls_in_end): they are ended, and call_cancel leaves
 * them. */
static void calls_wait(pool *p) {
  for (job *j = p->calls; j; j = j->rnext)
    call_cancel(j);
  /* Polled: a loop freed with calls out is rare, and the other loops then
   * need no lock and no condition to signal on every call. */
  while (__atomic_load_n(&p->calls_out, __ATOMIC_ACQUIRE))
    nanosleep(&(struct timespec){0, 1000000}, NULL);
}

/* weft_loop_free, for each callback still queued from other threads: a
 * call whose fn never started goes back without a result; a cancellation
 * of a call whose fn ended and left the rest to it sends the call back.
 * The other callbacks are dropped with the loop. */
static void call_at_free(const weft__callback *c) {
  job *j = c->arg;
  if (c->cb == call_start) {
    j->err = -ESHUTDOWN;
    call_end(j);
  } else if (c->cb == call_cancel_run) {
    /* (Its call has ended: calls_in_drop ended those whose fn had started,
     * and a call's start is queued before its cancellation. call_end ran
     * on this thread: CALL_LEFT is set.) */
    int old = __atomic_fetch_or(&j->state, CALL_CANCEL_RUN, __ATOMIC_ACQ_REL);
    if (old & CALL_ENDED)
      call_back_late(j);
  }
}

/* weft_loop_free: the calls from other loops still queued are sent back,
 * and so are those left to cancellations; a cancellation whose sender has
 * marked it sent and not yet queued it is waited for (polled: rare, and
 * the sender is in the middle of weft_call_soon_threadsafe). */
static void calls_in_end(weft_loop *loop, pool *p) {
  calls_in_drop(p);
  for (;;) {
    weft__threadsafe_drain(loop, call_at_free);
    if (!__atomic_load_n(&p->left, __ATOMIC_ACQUIRE))
      return;
    nanosleep(&(struct timespec){0, 1000000}, NULL);
  }
}

/* weft_loop_free (the loop's pool_free hook): let the workers finish what
 * was queued, join them, and release the results nobody will take now (no
 * task runs again). */
static void executor_free(weft_loop *loop) {
  /* (No pool yet: calls from other loops may still be queued, call_send.) */
  pool *p = pool_get(loop);
  if (!p)
    return;
  answers_send(p); /* (their callback is dropped with the loop) */
  p->freeing = 1;
  calls_in_end(loop, p);
  calls_wait(p);
  pthread_mutex_lock(&p->lock);
  p->stopping = 1;
  pthread_cond_broadcast(&p->work);
  pthread_mutex_unlock(&p->lock);
  for (unsigned i = 0; i < p->nthreads; i++)
    pthread_join(p->threads[i], NULL);
  job *j =
      __atomic_exchange_n((job **)&loop->jobs_done, NULL, __ATOMIC_ACQUIRE);
  while (j) {
    job *next = j->next;
    job_drop_result(j);
    weft_future_release(j->future);
    weft__free(j);
    j = next;
  }
  while ((j = p->handed)) { /* their callers will never run again */
    p->handed = j->next;
    job_drop_result(j);
    weft__free(j);
  }
  while ((j = p->cache)) {
    p->cache = j->next;
    weft__free(j);
  }
  loop->jobs_pending = 0;
  pthread_cond_destroy(&p->work);
  pthread_mutex_destroy(&p->lock);
  weft__free(p->threads);
  weft__free(p);
  loop->executor = NULL;
}

/* ---- the public calls ------------------------------------------------- */
/* Takes j off the queue if no worker has taken it yet; 1 if it did. */
/* Takes a job no worker has started off the queue: j itself, or the job
 * of future f (j NULL). Returns the job, or NULL if it was not queued. */
static job *pool_unqueue(pool *p, const job *j, const weft_future *f) {
  job *found = NULL;
  pthread_mutex_lock(&p->lock);
  for (job **at = &p->head, *prev = NULL; *at; prev = *at, at = &(*at)->next)
    if (*at == j || (!j && (*at)->future == f)) {
      found = *at;
      *at = found->next;
      if (p->tail == found)
        p->tail = prev;
      p->queued--;
      break;
    }
  pthread_mutex_unlock(&p->lock);
  return found;
}

/* The caller was cancelled: the job is nobody's now; delivery releases it.
 * One of weft's own that no worker has started is not run at all (a
 * cancelled lookup or file read behind busy workers would otherwise run
 * later for nobody, and weft_loop_run wait for it): it is delivered here,
 * its result being its arg (weft__run_in_thread). */
static void undo_run(weft_task *t, void *arg) {
  job *j = arg;
  j->task = NULL;
  if (j->droppable && pool_unqueue(t->loop->executor, j, NULL)) {
    j->result = j->arg;
    deliver(t->loop, j);
  }
}

/* The caller, woken by delivery, takes the result and the record goes. */
static void *take_result(pool *p, job *j) {
  if (j->prev)
    j->prev->next = j->next;
  else
    p->handed = j->next;
  if (j->next)
    j->next->prev = j->prev;
  void *result = j->result;
  job_free(p, j);
  return result;
}

int weft__run_in_thread(void *(*fn)(void *), void *arg, void **result,
                        const weft_submit_opts *opts, int *queued, int how) {
  *queued = 0;
  weft_task *t = weft__running_task();
  if (!t || !fn)
    return -EINVAL;
  int rc;
  if ((how & WEFT__JOB_CHECK) && (rc = weft__checkpoint()) < 0)
    return rc;
  /* The timer of a deadline around the call is armed before the job is
   * queued, so that its failing (-ENOMEM) leaves nothing queued; the park
   * below then finds it armed. */
  if (t->scope && (rc = weft__deadline_arm(t)) < 0)
    return rc;
  weft_loop *loop = t->loop;
  job *j = job_new(loop, fn, arg, opts);
  if (!j)
    return -ENOMEM;
  j->task = t;
  j->droppable = (how & WEFT__JOB_DROP) != 0;
  if ((rc = job_submit(loop, j)) < 0)
    return rc;
  *queued = 1;
  /* Woken by delivery (the job waits on the handed list for us to take
   * its result), or cancelled: then undo_run has made the job nobody's,
   * and delivery releases its result. (A caller cancelled already, or
   * past its deadline, gets here too, unless `how` checked first: the
   * park returns the error at once, the job queued all the same.) */
  rc = weft__park(WAIT_EXECUTOR, (int64_t)(uintptr_t)fn, undo_run, j);
  if (rc == 0) {
    void *out = take_result(loop->executor, j);
    if (result)
      *result = out;
  }
  return rc;
}

int weft_run_in_thread_with(void *(*fn)(void *), void *arg, void **result,
                            const weft_submit_opts *opts) {
  int queued; /* a user's job: -ECANCELED and -ETIMEDOUT mean fn runs */
  return weft__run_in_thread(fn, arg, result, opts, &queued, 0);
}

int weft_run_in_thread(void *(*fn)(void *), void *arg, void **result) {
  return weft_run_in_thread_with(fn, arg, result, NULL);
}

/* A job of `loop` whose result goes to a future: on the pool, or, with
 * `to`, a call into that loop. */
static weft_future *submit_future(weft_loop *loop, weft_loop *to,
                                  void *(*fn)(void *), void *arg,
                                  const weft_submit_opts *opts) {
  weft_future *f = weft_future_new();
  if (!f)
    return NULL;
  job *j = job_new(loop, fn, arg, opts);
  if (!j) {
    weft_future_release(f);
    errno = ENOMEM;
    return NULL;
  }
  j->future = weft_future_ref(f);
  weft__future_mark_job(f);
  int rc = to ? call_send(loop, to, j) : job_submit(loop, j);
  if (rc < 0) {
    weft_future_release(f);
    weft_future_release(f);
    errno = -rc;
    return NULL;
  }
  return f;
}

weft_future *weft_submit_with(void *(*fn)(void *), void *arg,
                              const weft_submit_opts *opts) {
  weft_loop *loop =
      weft__loop_running ? weft__loop_running : weft_loop_current();
  if (!loop || !fn) {
    errno = EINVAL;
    return NULL;
  }
  return submit_future(loop, NULL, fn, arg, opts);
}

weft_future *weft_submit(void *(*fn)(void *), void *arg) {
  return weft_submit_with(fn, arg, NULL);
}

int weft_submit_cancel(weft_future *f) {
  weft_loop *loop = weft__future_job_loop(f);
  if (!loop)
    return -EINVAL;
  /* (A call into another loop is never queued here: 0.) */
  job *j = loop->executor ? pool_unqueue(loop->executor, NULL, f) : NULL;
  if (!j)
    return 0;         /* started, or done */
  j->err = ECANCELED; /* fn never ran: no result to release */
  weft_future_cancel(f);
  deliver(loop, j);
  return 1;
}

/* The caller of weft_run_in_loop was cancelled: the call is nobody's now
 * (delivery releases its result), and fn's task is cancelled. */
static void undo_call(weft_task *t, void *arg) {
  job *j = arg;
  (void)t;
  j->task = NULL;
  call_cancel(j);
}

int weft_run_in_loop_with(weft_loop *loop, void *(*fn)(void *), void *arg,
                          void **result, const weft_submit_opts *opts) {
  weft_task *t = weft__running_task();
  if (!t || !fn || !loop)
    return -EINVAL;
  /* Another loop of this thread cannot run before this one returns. */
  if (loop != t->loop && weft__on_thread(loop->thread))
    return -EDEADLK;
  /* No checkpoint first: a caller cancelled already (or past its
   * deadline) sends the call all the same, and the park returns at once
   * and cancels it there, so -ECANCELED and -ETIMEDOUT always mean the
   * call was made (fn runs, cancelled from its start; its result goes to
   * release), never "nothing sent". */
  int rc;
  if (t->scope && (rc = weft__deadline_arm(t)) < 0)
    return rc; /* (as in weft__run_in_thread) */
  /* Once the call is sent, `loop` may run it, end and be freed before
   * this task parks: read what the dump shows of it first. */
  int64_t id = (int64_t)loop->id;
  job *j = job_new(t->loop, fn, arg, opts);
  if (!j)
    return -ENOMEM;
  j->task = t;
  if ((rc = call_send(t->loop, loop, j)) < 0)
    return rc;
  rc = weft__park(WAIT_LOOP, id, undo_call, j);
  if (rc == 0) {
    rc = j->err;
    void *out = take_result(t->loop->executor, j);
    if (result && rc == 0)
      *result = out;
  }
  return rc;
}

int weft_run_in_loop(weft_loop *loop, void *(*fn)(void *), void *arg,
                     void **result) {
  return weft_run_in_loop_with(loop, fn, arg, result, NULL);
}

weft_future *weft_submit_to_loop_with(weft_loop *loop, void *(*fn)(void *),
                                      void *arg, const weft_submit_opts *opts) {
  weft_loop *home =
      weft__loop_running ? weft__loop_running : weft_loop_current();
  if (!home || !loop || !fn) {
    errno = EINVAL;
    return NULL;
  }
  if (loop != home && weft__on_thread(loop->thread)) {
    errno = EDEADLK;
    return NULL;
  }
  return submit_future(home, loop, fn, arg, opts);
}

weft_future *weft_submit_to_loop(weft_loop *loop, void *(*fn)(void *),
                                 void *arg) {
  return weft_submit_to_loop_with(loop, fn, arg, NULL);
}

size_t weft_executor_pending(const weft_loop *loop) {
  return loop ? loop->jobs_pending : 0;
}

unsigned weft_executor_threads(const weft_loop *loop) {
  const pool *p = loop ? loop->executor : NULL;
  return p ? __atomic_load_n(&p->nthreads, __ATOMIC_RELAXED) : 0;
}
