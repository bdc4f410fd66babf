/*
 * Layer 5: futures (seed 002's Future, seed 003's Future.cancel).
 *
 * A future is pending until it gets its one outcome: a value, an error or
 * a cancellation. Tasks waiting in weft_await are parked on it (a waiter on
 * each one's stack, in a list); done-callbacks are records in a FIFO. On
 * completion the waiters are woken and, if there are callbacks, one run of
 * them is queued with weft_call_soon. The slot for that run is reserved in
 * the loop's callback ring when the first callback is added, so completing
 * a future never fails for want of memory.
 *
 * Records are kept per loop for reuse: create, set and await allocate
 * nothing in the steady state.
 */
#include "internal.h"

#include <errno.h>

enum { PENDING, HAS_VALUE, HAS_ERROR, CANCELLED };

typedef struct waiter {
  weft_task *task;
  weft_future *future;
  struct waiter *prev, *next;
} waiter;

typedef struct done_cb {
  void (*cb)(weft_future *f, void *arg);
  void *arg;
  struct done_cb *next;
} done_cb;

struct weft_future {
  weft_loop *loop;
  uint32_t refs;
  uint8_t state;    /* PENDING, ... */
  uint8_t reserved; /* holds a reserved callback slot of the loop */
  uint8_t queued;   /* a run of its callbacks is queued */
  int err;          /* HAS_ERROR: the positive errno value */
  void *value;      /* HAS_VALUE */
  waiter *waiters, *waiters_tail;
  done_cb *cbs, *cbs_tail;
  weft_task *task;           /* weft_async's task (a detached handle) */
  void *(*async_fn)(void *); /* ... and what it runs */
  void *async_arg;
  weft_future *next_free; /* in the loop's cache */
};

/* Freed records kept per loop; beyond this many they go back to malloc. */
#define CACHE_MAX 1024

weft_future *weft_future_new(void) {
  weft_loop *loop = weft__loop_running ? weft__loop_running : weft_loop_current();
  if (!loop) {
    errno = EINVAL;
    return NULL;
  }
  weft_future *f = loop->future_cache;
  if (f) {
    loop->future_cache = f->next_free;
    loop->future_cached--;
  } else if (!(f = weft__malloc(sizeof *f))) {
    return NULL;
  }
  /* Field by field: every one a pending future reads. */
  f->loop = loop;
  f->refs = 1;
  f->state = PENDING;
  f->reserved = f->queued = 0;
  f->waiters = f->waiters_tail = NULL;
  f->cbs = f->cbs_tail = NULL;
  f->task = NULL;
  return f;
}

uint32_t weft__future_refs(const weft_future *f) { return f->refs; }

weft_future *weft_future_ref(weft_future *f) {
  if (f)
    f->refs++;
  return f;
}

static void future_free(weft_future *f) {
  weft_loop *loop = f->loop;
  while (__builtin_expect(f->cbs != NULL, 0)) {
    done_cb *c = f->cbs;
    f->cbs = c->next;
    weft__free(c);
  }
  if (f->reserved)
    weft__call_soon_unreserve(loop);
  if (loop->future_cached < CACHE_MAX) {
    f->next_free = loop->future_cache;
    loop->future_cache = f;
    loop->future_cached++;
  } else {
    weft__free(f);
  }
}

void weft_future_release(weft_future *f) {
  if (f && --f->refs == 0)
    future_free(f);
}

void weft__futures_free(weft_loop *loop) {
  while (loop->future_cache) {
    weft_future *f = loop->future_cache;
    loop->future_cache = f->next_free;
    weft__free(f);
  }
  loop->future_cached = 0;
}

/* ---- completion ------------------------------------------------------- */
static void run_callbacks(void *arg) {
  weft_future *f = arg;
  /* The callbacks there are now; one added while they run is queued for
   * the next turn, as weft_call_soon's would be (a callback that re-adds
   * itself cannot keep the loop in this turn). */
  done_cb *c = f->cbs;
  f->cbs = f->cbs_tail = NULL;
  f->queued = 0;
  while (c) {
    done_cb *next = c->next;
    c->cb(f, c->arg);
    weft__free(c);
    c = next;
  }
  weft_future_release(f); /* the queued run's reference */
}

/* Queues the run of f's callbacks, in the slot reserved for it. */
static void queue_callbacks(weft_future *f) {
  f->reserved = 0;
  f->queued = 1;
  f->refs++;
  weft__call_soon_reserved(f->loop, run_callbacks, f);
}

static int complete(weft_future *f, int state, void *value, int err) {
  if (!f || f->state != PENDING)
    return -EINVAL;
  f->state = (uint8_t)state;
  f->value = value;
  f->err = err;
  while (f->waiters) {
    waiter *w = f->waiters;
    f->waiters = w->next;
    weft__wake(w->task, 0);
  }
  f->waiters_tail = NULL;
  if (f->cbs)
    queue_callbacks(f);
  return 0;
}

int weft_future_set_result(weft_future *f, void *value) {
  return complete(f, HAS_VALUE, value, 0);
}

int weft_future_set_error(weft_future *f, int err) {
  if (err <= 0)
    return -EINVAL;
  return complete(f, HAS_ERROR, NULL, err);
}

int weft_future_cancel(weft_future *f) {
  if (!f)
    return -EINVAL;
  if (f->state != PENDING)
    return 0;
  complete(f, CANCELLED, NULL, 0);
  if (f->task)
    weft_cancel(f->task); /* -ESRCH if it just ended: nothing to do */
  return 1;
}

bool weft_future_done(const weft_future *f) { return f && f->state != PENDING; }

int weft_future_result(const weft_future *f, void **value) {
  if (!f)
    return -EINVAL;
  switch (f->state) {
  case PENDING: return -EAGAIN;
  case HAS_ERROR: return -f->err;
  case CANCELLED: return -ECANCELED;
  }
  if (value)
    *value = f->value;
  return 0;
}

int weft_future_add_done_callback(weft_future *f,
                                  void (*cb)(weft_future *f, void *arg),
                                  void *arg) {
  if (!f || !cb)
    return -EINVAL;
  done_cb *c = weft__malloc(sizeof *c);
  if (!c)
    return -ENOMEM;
  *c = (done_cb){cb, arg, NULL};
  /* The run that will call it needs a slot: reserved now if pending (the
   * completion cannot fail), taken now if done. */
  if (!f->queued && !f->reserved) {
    if (weft__call_soon_reserve(f->loop) < 0) {
      weft__free(c);
      return -ENOMEM;
    }
    f->reserved = 1;
  }
  if (f->cbs_tail)
    f->cbs_tail->next = c;
  else
    f->cbs = c;
  f->cbs_tail = c;
  if (f->state != PENDING && !f->queued)
    queue_callbacks(f);
  return 0;
}

/* ---- waiting ---------------------------------------------------------- */
static void undo_await(weft_task *t, void *arg) {
  waiter *w = arg;
  weft_future *f = w->future;
  (void)t;
  if (w->prev)
    w->prev->next = w->next;
  else
    f->waiters = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    f->waiters_tail = w->prev;
}

int weft_await(weft_future *f, void **value) {
  weft_task *t = weft__running_task();
  if (!f || !t || t->loop != f->loop)
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc < 0 || f->state != PENDING)
    return rc < 0 ? rc : weft_future_result(f, value);
  waiter w = {t, f, f->waiters_tail, NULL};
  if (f->waiters_tail)
    f->waiters_tail->next = &w;
  else
    f->waiters = &w;
  f->waiters_tail = &w;
  f->refs++; /* f stays while the task waits, whoever releases it */
  rc = weft__park(WAIT_FUTURE, (int64_t)(uintptr_t)f, undo_await, &w);
  if (rc == 0)
    rc = weft_future_result(f, value);
  weft_future_release(f);
  return rc;
}

/* ---- weft_async ------------------------------------------------------- */
static void *async_main(void *arg) {
  weft_future *f = arg;
  void *r = f->async_fn(f->async_arg);
  f->task = NULL;
  if (f->state == PENDING)
    weft_future_set_result(f, r);
  weft_future_release(f); /* the task's reference */
  return NULL;
}

weft_future *weft_async(void *(*fn)(void *), void *arg) {
  if (!fn) {
    errno = EINVAL;
    return NULL;
  }
  weft_future *f = weft_future_new();
  if (!f)
    return NULL;
  f->async_fn = fn;
  f->async_arg = arg;
  f->refs++; /* one for the caller, one for the task */
  weft_task *t = weft_spawn(async_main, f);
  if (!t) {
    int err = errno;
    future_free(f);
    errno = err;
    return NULL;
  }
  weft_detach(t);
  f->task = t;
  return f;
}
