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
 * Records come from chunks the loop keeps until it is freed, and are
 * reused: create, set and await allocate nothing in the steady state, and
 * a future the loop still refers to when it is freed (a weft_async task's,
 * a parked awaiter's, a queued run of callbacks') goes with it, its
 * callbacks too. The memory is the most futures ever alive at once, as for
 * task records.
 *
 * The four calls of a future's common life (new, set_result, await,
 * release) are defined `inline`: weft.h declares them without it, so each
 * is still an ordinary external function, but in an LTO build (the
 * default, CMakeLists.txt) GCC at -O2 inlines a function into a caller in
 * another file only within the limits it gives functions declared inline.
 * Each is a few instructions around a noinline slow path; inlined, the
 * four together cost less than half of what the four calls do
 * (bench/future.c, README).
 */
#include "internal.h"

#include <errno.h>

enum { PENDING, HAS_VALUE, HAS_ERROR, CANCELLED };

/* A task in weft_await, on its own stack: a link in the future's circular
 * list of waiters (f->waiters is the first, its prev the last). */
typedef struct waiter {
  weft_task *task;
  weft_future *future;
  struct waiter *prev, *next;
} waiter;

/* A done-callback: a link in a circular list, f->cbs_last->next the first. */
typedef struct done_cb {
  void (*cb)(weft_future *f, void *arg);
  void *arg;
  struct done_cb *next;
  int rest_end; /* the last of a run cut short by a stop (run_rest) */
} done_cb;

/* The first word is what making a future writes and releasing it tests;
 * the lists are empty and `task` NULL in every record of the loop's cache,
 * so weft_future_new writes that word alone. The record is 64 bytes. */
struct weft_future {
  uint32_t refs;
  uint8_t state;    /* PENDING, ... */
  uint8_t reserved; /* holds a reserved callback slot of the loop */
  uint8_t queued;   /* a run of its callbacks is queued */
  uint8_t flags;    /* FUT_*, 0 when made (the first word is one store) */
  union {
    void *value;            /* HAS_VALUE */
    int err;                /* HAS_ERROR: the positive errno value */
    weft_future *next_free; /* in the loop's cache */
  } u;
  waiter *waiters;
  done_cb *cbs_last;
  weft_loop *loop;
  weft_task *task;           /* weft_async's task (a detached handle) */
  union {
    struct {                     /* weft_async's: */
      void *(*async_fn)(void *); /* what its task runs */
      void *async_arg;
    };
    struct { /* weft_submit's and actor replies', with FUT_RELEASES: for a
              * value nobody took */
      void (*release)(void *result, void *arg);
      void *release_arg;
    };
  };
};

#define FUT_TAKEN    1 /* its value was handed out (weft_await, _result) */
#define FUT_RELEASES 2 /* a value not taken goes to release at the end */
#define FUT_JOB      4 /* weft_submit's or weft_submit_to_loop's */

_Static_assert(sizeof(struct weft_future) == 64, "a record per cache line");

/* A chunk: a 64-byte header slot, then FUTURE_CHUNK records, each on its
 * own cache line. */
#define FUTURE_CHUNK 63
typedef struct future_chunk {
  struct future_chunk *next;
  void *mem; /* the allocation the chunk was aligned in */
} future_chunk;

static inline weft_future *chunk_records(future_chunk *c) {
  return (weft_future *)((char *)c + 64);
}

static inline void future_init(weft_future *f) {
  f->refs = 1;
  f->state = PENDING;
  f->reserved = f->queued = f->flags = 0;
}

static void futures_free(weft_loop *loop);

/* No record in the cache, or no loop running: a record of a new chunk, of
 * the thread's current loop. */
static __attribute__((noinline)) weft_future *future_new_slow(weft_loop *loop) {
  if (!loop && !(loop = weft_loop_current())) {
    errno = EINVAL;
    return NULL;
  }
  if (!loop->future_cache) {
    void *mem = weft__malloc((FUTURE_CHUNK + 1) * 64 + 63);
    if (!mem)
      return NULL;
    future_chunk *c = (future_chunk *)(((uintptr_t)mem + 63) & ~(uintptr_t)63);
    c->mem = mem;
    c->next = loop->future_chunks;
    loop->future_chunks = c;
    loop->futures_free = futures_free;
    weft_future *recs = chunk_records(c);
    for (int i = FUTURE_CHUNK; i-- > 0;) {
      weft_future *f = &recs[i];
      f->refs = 0; /* in the cache: futures_free tells them apart */
      f->waiters = NULL;
      f->cbs_last = NULL;
      f->loop = loop;
      f->task = NULL;
      f->u.next_free = loop->future_cache;
      loop->future_cache = f;
    }
  }
  weft_future *f = loop->future_cache;
  loop->future_cache = f->u.next_free;
  future_init(f);
  return f;
}

/* weft_future_new for a loop named by the caller (an actor's reply
 * belongs to the actor's loop, whichever loop runs, or none). */
inline weft_future *weft__future_new_in(weft_loop *loop) {
  weft_future *f = loop->future_cache;
  if (__builtin_expect(!f, 0))
    return future_new_slow(loop);
  loop->future_cache = f->u.next_free;
  future_init(f);
  return f;
}

inline weft_future *weft_future_new(void) {
  weft_loop *loop = weft__loop_running;
  if (__builtin_expect(!loop, 0))
    return future_new_slow(NULL);
  return weft__future_new_in(loop);
}

uint32_t weft__future_refs(const weft_future *f) { return f->refs; }

void weft__future_releases(weft_future *f, void (*release)(void *, void *),
                           void *arg) {
  f->release = release;
  f->release_arg = arg;
  f->flags |= FUT_RELEASES;
}

weft_future *weft_future_ref(weft_future *f) {
  if (f)
    f->refs++;
  return f;
}

/* Puts f back in its loop's cache. */
static inline void future_recycle(weft_future *f) {
  weft_loop *loop = f->loop;
  f->u.next_free = loop->future_cache;
  loop->future_cache = f;
}

/* Frees a future nobody holds any more that still has callbacks (it never
 * completed, or was released before their run came). A reserved slot
 * implies a callback, so the fast path tests cbs_last alone. */
static void free_callbacks(done_cb *last);

static __attribute__((noinline)) void future_free_callbacks(weft_future *f) {
  free_callbacks(f->cbs_last);
  f->cbs_last = NULL;
  if (f->reserved)
    weft__call_soon_unreserve(f->loop);
  future_recycle(f);
}

/* The last reference to a weft_submit future with a value nobody took:
 * the value goes to the job's release callback, as it would have had the
 * future been released before the job ended. */
static __attribute__((noinline)) void future_release_value(weft_future *f) {
  if (f->state == HAS_VALUE && !(f->flags & FUT_TAKEN))
    f->release(f->u.value, f->release_arg);
}

static inline void future_free(weft_future *f) {
  if (__builtin_expect(f->flags & FUT_RELEASES, 0))
    future_release_value(f);
  if (__builtin_expect(f->cbs_last != NULL, 0))
    future_free_callbacks(f);
  else
    future_recycle(f);
}

inline void weft_future_release(weft_future *f) {
  if (f && --f->refs == 0)
    future_free(f);
}

static void free_callbacks(done_cb *last) {
  done_cb *c = last->next;
  last->next = NULL;
  while (c) {
    done_cb *next = c->next;
    weft__free(c);
    c = next;
  }
}

/* Frees every record of the loop, with the callbacks of those still held
 * (the loop's futures_free hook). A value nobody took from a future still
 * held (by a task the loop dropped, say) goes to its release callback, as
 * it would have at the last release that now never comes. Records in the
 * cache have no reference left (refs 0), whatever their stale flags say. */
static void futures_free(weft_loop *loop) {
  while (loop->future_chunks) {
    future_chunk *c = loop->future_chunks;
    loop->future_chunks = c->next;
    weft_future *recs = chunk_records(c);
    for (int i = 0; i < FUTURE_CHUNK; i++) {
      if (recs[i].refs && (recs[i].flags & FUT_RELEASES))
        future_release_value(&recs[i]);
      if (recs[i].cbs_last)
        free_callbacks(recs[i].cbs_last);
    }
    weft__free(c->mem);
  }
  loop->future_cache = NULL;
}

/* ---- completion ------------------------------------------------------- */
/* Links the chain first..last into f's circular list of callbacks: after
 * them (at_tail), or before them. */
static void link_callbacks(weft_future *f, done_cb *first, done_cb *last,
                           int at_tail) {
  if (!f->cbs_last) {
    last->next = first;
    f->cbs_last = last;
    return;
  }
  last->next = f->cbs_last->next;
  f->cbs_last->next = first;
  if (at_tail)
    f->cbs_last = last;
}

static void queue_rest(weft_future *f, done_cb *rest);

/* Calls the callbacks of the list `c` (NULL-ended) in order. A
 * weft_loop_stop from one of them leaves the others queued, at the head of
 * the queue, as separate callbacks would be: a slot is reserved for that
 * when there are two or more (out of memory, they all run). */
static void call_list(weft_future *f, done_cb *c) {
  weft_loop *loop = f->loop;
  int slot = c->next && weft__call_soon_reserve(loop) == 0;
  while (c) {
    done_cb *next = c->next;
    c->cb(f, c->arg);
    weft__free(c);
    c = next;
    if (c && slot && loop->stop) {
      queue_rest(f, c); /* with the queued run's reference */
      return;
    }
  }
  if (slot)
    weft__call_soon_unreserve(loop);
  weft_future_release(f); /* the queued run's reference */
}

static void run_callbacks(void *arg) {
  weft_future *f = arg;
  /* The callbacks there are now; one added while they run is queued for
   * the next turn, as weft_call_soon's would be (a callback that re-adds
   * itself cannot keep the loop in this turn). */
  done_cb *c = f->cbs_last->next;
  f->cbs_last->next = NULL;
  f->cbs_last = NULL;
  f->queued = 0;
  call_list(f, c);
}

/* The run queue_rest puts first: the callbacks up to the one marked last
 * of the rest. Those after it were added since, and have a run queued of
 * their own (f->queued). */
static void run_rest(void *arg) {
  weft_future *f = arg;
  done_cb *first = f->cbs_last->next, *end = first;
  while (!end->rest_end)
    end = end->next;
  end->rest_end = 0;
  if (end == f->cbs_last)
    f->cbs_last = NULL;
  else
    f->cbs_last->next = end->next;
  end->next = NULL;
  call_list(f, first);
}

/* Puts `rest` (NULL-ended) back in front of f's callbacks, its last one
 * marked, and queues its run first in the loop's queue, in the slot
 * reserved for it. f->queued stays as it is: it says whether the
 * callbacks added since have a run of their own. */
static void queue_rest(weft_future *f, done_cb *rest) {
  done_cb *last = rest;
  while (last->next)
    last = last->next;
  last->rest_end = 1;
  link_callbacks(f, rest, last, 0);
  weft__call_soon_first(f->loop, run_rest, f);
}

/* Queues the run of f's callbacks, in the slot reserved for it. */
static void queue_callbacks(weft_future *f) {
  f->reserved = 0;
  f->queued = 1;
  f->refs++;
  weft__call_soon_reserved(f->loop, run_callbacks, f);
}

/* f has just completed and someone waits: wake the waiters, in the order
 * they came, and queue the callbacks. */
static __attribute__((noinline)) void wake_all(weft_future *f) {
  waiter *w;
  while ((w = f->waiters)) {
    if (w->next == w) {
      f->waiters = NULL;
    } else {
      w->prev->next = w->next;
      w->next->prev = w->prev;
      f->waiters = w->next;
    }
    weft__wake(w->task, 0);
  }
  if (f->cbs_last)
    queue_callbacks(f);
}

/* Sets the outcome of pending f (the caller checked); wakes whoever
 * waits. */
static inline void complete(weft_future *f, int state) {
  f->state = (uint8_t)state;
  if (__builtin_expect(f->waiters != NULL || f->cbs_last != NULL, 0))
    wake_all(f);
}

/* Whether the caller may complete f or add to it: on its loop's thread,
 * running no other loop (from anywhere else it would race with the loop:
 * weft_call_soon_threadsafe is the way in). */
static inline int mine(const weft_future *f) {
  return weft__callers(f->loop, f->loop->thread);
}

void weft__future_mark_job(weft_future *f) { f->flags |= FUT_JOB; }

weft_loop *weft__future_job_loop(const weft_future *f) {
  return f && (f->flags & FUT_JOB) && mine(f) ? f->loop : NULL;
}

inline int weft_future_set_result(weft_future *f, void *value) {
  if (__builtin_expect(!f || f->state != PENDING || !mine(f), 0))
    return -EINVAL;
  f->u.value = value;
  complete(f, HAS_VALUE);
  return 0;
}

int weft_future_set_error(weft_future *f, int err) {
  if (!f || f->state != PENDING || err <= 0 || !mine(f))
    return -EINVAL;
  f->u.err = err;
  complete(f, HAS_ERROR);
  return 0;
}

int weft_future_cancel(weft_future *f) {
  if (!f || !mine(f))
    return -EINVAL;
  if (f->state != PENDING)
    return 0;
  complete(f, CANCELLED);
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
  case HAS_ERROR: return -f->u.err;
  case CANCELLED: return -ECANCELED;
  }
  if (value) {
    *value = f->u.value;
    /* Bookkeeping, not the outcome: the value is the caller's now. */
    ((weft_future *)f)->flags |= FUT_TAKEN;
  }
  return 0;
}

int weft_future_add_done_callback(weft_future *f,
                                  void (*cb)(weft_future *f, void *arg),
                                  void *arg) {
  if (!f || !cb || !mine(f))
    return -EINVAL;
  done_cb *c = weft__malloc(sizeof *c);
  if (!c)
    return -ENOMEM;
  c->cb = cb;
  c->arg = arg;
  c->rest_end = 0;
  /* The run that will call it needs a slot: reserved now if pending (the
   * completion cannot fail), taken now if done. */
  if (!f->queued && !f->reserved) {
    if (weft__call_soon_reserve(f->loop) < 0) {
      weft__free(c);
      return -ENOMEM;
    }
    f->reserved = 1;
  }
  link_callbacks(f, c, c, 1);
  if (f->state != PENDING && !f->queued)
    queue_callbacks(f);
  return 0;
}

/* ---- waiting ---------------------------------------------------------- */
static void undo_await(weft_task *t, void *arg) {
  waiter *w = arg;
  weft_future *f = w->future;
  (void)t;
  if (w->next == w) {
    f->waiters = NULL;
  } else {
    w->prev->next = w->next;
    w->next->prev = w->prev;
    if (f->waiters == w)
      f->waiters = w->next;
  }
}

/* weft_await when the task may be cancelled, or f is not done with a
 * value: the checkpoint, then the outcome or the wait. */
static __attribute__((noinline)) int await_slow(weft_future *f, void **value,
                                                weft_task *t) {
  int rc = weft__checkpoint();
  if (rc < 0 || f->state != PENDING)
    return rc < 0 ? rc : weft_future_result(f, value);
  waiter w = {t, f, &w, &w};
  waiter *first = f->waiters;
  if (first) {
    w.prev = first->prev;
    w.next = first;
    first->prev->next = &w;
    first->prev = &w;
  } else {
    f->waiters = &w;
  }
  f->refs++; /* f stays while the task waits, whoever releases it */
  rc = weft__park(WAIT_FUTURE, (int64_t)(uintptr_t)f, undo_await, &w);
  if (rc == 0)
    rc = weft_future_result(f, value);
  weft_future_release(f);
  return rc;
}

inline int weft_await(weft_future *f, void **value) {
  weft_loop *loop = weft__loop_running;
  weft_task *t;
  if (__builtin_expect(!f || !loop || !(t = loop->current) || f->loop != loop,
                       0))
    return -EINVAL;
  /* The common case inline: not cancelled, in no scope, f holds a value. */
  if (__builtin_expect(
          (t->flags & TASK_CANCELLED) || t->scope || f->state != HAS_VALUE, 0))
    return await_slow(f, value, t);
  if (value) {
    *value = f->u.value;
    f->flags |= FUT_TAKEN;
  }
  return 0;
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
    f->refs = 0; /* back in the cache with none (futures_free) */
    future_free(f);
    errno = err;
    return NULL;
  }
  weft_detach(t);
  f->task = t;
  return f;
}
