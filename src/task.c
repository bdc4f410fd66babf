/*
 * Layer 3: tasks. A task is a function running on its own stack, switched
 * in when it is ready and out when it parks, yields or ends. A task that
 * gives up the CPU hands it straight to the next ready one (task -> task;
 * the loop's own context gets it back at the end of the turn), and the
 * ready queue stays the one place where order is decided.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

WEFT__TLS weft_loop *weft__loop_running;

/* ---- handles ----------------------------------------------------------
 * A weft_task * given to users carries the record's generation in its top
 * 16 bits (user-space addresses fit in 48 on Linux x86-64 and aarch64).
 * Records are recycled, so a stale handle (a task joined twice, a detached
 * task that ended) would otherwise name whatever task reused the record;
 * with the generation it is recognised and refused. */
#if UINTPTR_MAX > 0xffffffffu
#define GEN_SHIFT 48
#define ADDR_MASK ((((uintptr_t)1) << GEN_SHIFT) - 1)
static weft_task *handle_of(weft_task *t) {
  return (weft_task *)((uintptr_t)t | ((uintptr_t)t->gen_count << GEN_SHIFT));
}
/* The record a handle points at, stale or not. */
static weft_task *address_of(const weft_task *h) {
  return (weft_task *)((uintptr_t)h & ADDR_MASK);
}
static weft_task *record_of(const weft_task *h) {
  if (!h)
    return NULL;
  weft_task *t = address_of(h);
  if (t->state == TASK_FREE ||
      t->gen_count != (uint16_t)((uintptr_t)h >> GEN_SHIFT))
    return NULL;
  return t;
}
#else
static weft_task *handle_of(weft_task *t) { return t; }
static weft_task *address_of(const weft_task *h) { return (weft_task *)h; }
static weft_task *record_of(const weft_task *h) {
  return h && h->state != TASK_FREE ? (weft_task *)h : NULL;
}
#endif

/* ---- records ---------------------------------------------------------- */
#define SLAB_RECORDS 64

struct weft__slab {
  weft__slab *next;
  weft_task recs[SLAB_RECORDS];
};

static weft_task *record_new(weft_loop *loop) {
  if (!loop->free_recs) {
    weft__slab *s = weft__malloc(sizeof *s);
    if (!s)
      return NULL;
    s->next = loop->slabs;
    loop->slabs = s;
    for (int i = SLAB_RECORDS - 1; i >= 0; i--) {
      s->recs[i].state = TASK_FREE;
      s->recs[i].gen_count = 0;
      s->recs[i].name = NULL;
      s->recs[i].loop = loop; /* for good: a stale handle still names it */
      s->recs[i].next_ready = loop->free_recs;
      loop->free_recs = &s->recs[i];
    }
  }
  weft_task *t = loop->free_recs;
  loop->free_recs = t->next_ready;
  return t;
}

static void record_free(weft_loop *loop, weft_task *t) {
  if (t->flags & TASK_UNJOINED)
    loop->unjoined--;
  weft__free(t->name);
  t->name = NULL;
  t->state = TASK_FREE;
  /* A generation that wrapped would make the handle of 65,536 tasks ago
   * valid again: such a record is retired instead (it stays in its slab,
   * unused; about 3 bytes per million spawns). */
  if (++t->gen_count == 0)
    return;
  t->next_ready = loop->free_recs;
  loop->free_recs = t;
}

/* ---- the ready queue -------------------------------------------------- */
static inline __attribute__((always_inline)) void push_ready(weft_loop *loop,
                                                             weft_task *t) {
  t->state = TASK_READY;
  t->next_ready = NULL;
  if (loop->ready_tail)
    loop->ready_tail->next_ready = t;
  else
    loop->ready_head = t;
  loop->ready_tail = t;
}

static weft_task *pop_ready(weft_loop *loop) {
  weft_task *t = loop->ready_head;
  loop->ready_head = t->next_ready;
  if (!loop->ready_head)
    loop->ready_tail = NULL;
  return t;
}

static void unlink_live(weft_loop *loop, weft_task *t) {
  if (t->prev_live)
    t->prev_live->next_live = t->next_live;
  else
    loop->live = t->next_live;
  if (t->next_live)
    t->next_live->prev_live = t->prev_live;
  loop->nlive--;
}

/* ---- switching --------------------------------------------------------
 * A task that blocks, yields or ends hands the CPU straight to the next
 * ready task: one switch, not two through the loop. The loop gets the CPU
 * back when nothing is ready, when a turn's WEFT__BATCH hand-offs are used
 * up (so timers and I/O are looked at), or when it was asked to stop.
 *
 * A task that ends cannot free the stack it is running on; it leaves
 * itself in loop->dead and whoever runs next calls reap(). */
static weft_task *running_task(void) {
  weft_loop *loop = weft__loop_running;
  return loop ? loop->current : NULL;
}

/* In whatever context runs after a task ended, off its stack. */
static void reap(weft_loop *loop) {
  weft_task *t = loop->dead;
  loop->dead = NULL;
  weft__stack_release(t->stack);
  t->stack = NULL;
  if (t->flags & TASK_DETACHED) {
    record_free(loop, t);
  } else if (!(t->flags & TASK_JOINING)) { /* (a joiner, woken, takes it) */
    /* Held for a weft_join or weft_detach: weft_dump counts it. */
    t->flags |= TASK_UNJOINED;
    loop->unjoined++;
  }
}

/* Who runs after the current task: the next ready one, or NULL for the
 * loop itself. */
static inline __attribute__((always_inline)) weft_task *
pick_next(weft_loop *loop) {
  weft_task *next = loop->ready_head;
  if (!next || loop->batch == 0 || loop->stop)
    return NULL;
  /* Past the tasks that were ready when the turn began, a task woken
   * during the turn runs in the same turn too, in the order it was woken
   * (a receiver woken by a send runs once the tasks queued before it
   * have), but a task that yielded waits for the next turn, after the
   * timers, callbacks and I/O. */
  if (!loop->batch_last && (next->flags & TASK_YIELDED))
    return NULL;
  loop->batch--;
  pop_ready(loop);
  if (next == loop->batch_last)
    loop->batch_last = NULL; /* the turn's last: what follows was woken */
  next->flags &= (uint8_t)~TASK_YIELDED;
  next->state = TASK_RUNNING;
  return next;
}

/* The context to switch to so that `next` runs (NULL: the loop), which
 * becomes the loop's current task. The task also travels as the switch's
 * value: a fresh task's entry receives it as its argument. */
static weft__ctx *ctx_for(weft_loop *loop, weft_task *next) {
  loop->current = next;
  return next ? &next->ctx : &loop->ctx;
}

/* WEFT_DEBUG: a task that held the CPU longer than this without yielding
 * or blocking is reported as it gives it up (asyncio's slow callbacks). */
#define SLOW_TASK WEFT_MS(100)

static int64_t real_clock(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* t gives up the CPU (or yields): report it if it ran too long; the next
 * task's time starts now. */
static __attribute__((noinline)) void slow_check(weft_loop *loop,
                                                 weft_task *t) {
  int64_t now = real_clock(), ran = now - loop->slice_start;
  if (loop->slice_start && ran > SLOW_TASK)
    fprintf(stderr, "weft: task %llu (%s) ran %.1f ms without yielding\n",
            (unsigned long long)t->id, t->name ? t->name : "unnamed",
            (double)ran / 1e6);
  loop->slice_start = now;
}

/* What every context does first when it gets the CPU back. */
static inline void arrived(weft_loop *loop) {
  if (__builtin_expect(loop->dead != NULL, 0))
    reap(loop);
}

/* Switches away from the running task t until something makes it run
 * again. errno and the innermost generator belong to the task, so they
 * travel with it. */
static inline __attribute__((always_inline)) void suspend(weft_task *t) {
  weft_loop *loop = t->loop;
  if (__builtin_expect(loop->debug, 0))
    slow_check(loop, t);
  weft_task *next = pick_next(loop);
  if (next == t)
    return; /* it yielded and is the only one ready: carry on */
  t->saved_errno = *loop->errno_at;
  t->gen = weft__gen_running;
  weft__ctx_switch(&t->ctx, ctx_for(loop, next), next);
  arrived(loop);
  weft__gen_running = t->gen;
  *loop->errno_at = t->saved_errno;
}

static void task_entry(void *p) {
  weft_task *t = p;
  weft_loop *loop = t->loop;
  weft__ctx_started(&t->ctx);
  arrived(loop);
  weft__gen_running = NULL;
  errno = 0;
  t->result = t->fn(t->arg);
  /* A scope still entered lives in a frame that is gone, and its timer
   * would fire into it: a bug in the program, caught here. */
  if (t->scope)
    weft__left_in_scope("task", t->id);
  if (t->on_exit)
    t->on_exit(t, t->on_exit_arg);
  /* The end: everything but the stack is settled here, so a joiner is
   * ready before the next task is picked. */
  t->state = TASK_DONE;
  unlink_live(loop, t);
  if (t->joiner)
    weft__wake(t->joiner, 0);
  loop->dead = t;
  if (__builtin_expect(loop->debug, 0))
    slow_check(loop, t);
  weft_task *next = pick_next(loop);
  weft__ctx_leave(&t->ctx, ctx_for(loop, next), next);
}

/* ---- WEFT_SEED -------------------------------------------------------- */
/* With WEFT_SEED=n the tasks that became ready since the last turn (which
 * the loop cannot tell apart in time) run in an order shuffled by a PRNG
 * seeded with n, instead of FIFO: a run that fails can be replayed with
 * the same seed, and a test that passes only in FIFO order shows itself. */
static uint64_t seed_next(weft_loop *loop) {
  uint64_t x = loop->shuffle_rng; /* xorshift64*, never 0 */
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  loop->shuffle_rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

void weft__seed_init(weft_loop *loop) {
  const char *s = getenv("WEFT_SEED");
  if (!s || !*s)
    return;
  char *end;
  errno = 0;
  uint64_t n = strtoull(s, &end, 0);
  if (*end || errno || *s == '-') { /* a typo would seed 0 unexplained */
    static int told;
    if (!__atomic_exchange_n(&told, 1, __ATOMIC_RELAXED))
      fprintf(stderr, "weft: WEFT_SEED=\"%s\" is not a number: ignored\n", s);
    return;
  }
  /* splitmix64 of n: a good start for any n, 0 included; never 0. */
  uint64_t z = n + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  loop->shuffle_rng = z ? z : 1;
  loop->rng = seed_next(loop) | 1; /* weft_select draws from it too */
}

/* A number in [0, n), n < 2^32. */
static size_t seed_below(weft_loop *loop, size_t n) {
  return (size_t)(((seed_next(loop) >> 32) * (uint64_t)n) >> 32);
}

/* Shuffles the n tasks of list h (linked by next_ready) and returns the
 * new head, its last in *tail: each half shuffled, then merged by drawing
 * from either with a chance in proportion to what it has left, which
 * makes every order equally likely. No memory needed (the one allocator
 * is not disturbed: the allocation-failure tests run seeded too). */
static weft_task *shuffle(weft_loop *loop, weft_task *h, size_t n,
                          weft_task **tail) {
  if (n == 1) {
    h->next_ready = NULL;
    *tail = h;
    return h;
  }
  size_t na = n / 2, nb = n - na;
  weft_task *p = h;
  for (size_t i = 1; i < na; i++)
    p = p->next_ready;
  weft_task *b = p->next_ready, *ta, *tb;
  weft_task *a = shuffle(loop, h, na, &ta);
  b = shuffle(loop, b, nb, &tb);
  weft_task *out = NULL, **link = &out;
  while (na && nb) {
    weft_task **from = seed_below(loop, na + nb) < na ? &a : &b;
    size_t *left = from == &a ? &na : &nb;
    *link = *from;
    link = &(*from)->next_ready;
    *from = (*from)->next_ready;
    (*left)--;
  }
  *link = na ? a : b;
  *tail = na ? ta : tb;
  return out;
}

static void shuffle_ready(weft_loop *loop) {
  size_t n = 0;
  for (weft_task *t = loop->ready_head; t; t = t->next_ready)
    n++;
  if (n > 1)
    loop->ready_head = shuffle(loop, loop->ready_head, n, &loop->ready_tail);
}

WEFT__HOT void weft__run_ready(weft_loop *loop) {
  /* A turn runs the tasks that were ready when it began, then those woken
   * meanwhile (pick_next); one that yields runs after the callbacks and
   * I/O of the next turn. */
  if (__builtin_expect(loop->shuffle_rng != 0, 0))
    shuffle_ready(loop);
  if (__builtin_expect(loop->debug, 0))
    loop->slice_start = real_clock();
  weft_task *last = loop->ready_tail;
  loop->batch = WEFT__BATCH - 1;
  weft_task *t = pop_ready(loop);
  loop->batch_last = t == last ? NULL : last;
  t->flags &= (uint8_t)~TASK_YIELDED;
  t->state = TASK_RUNNING;
  weft__ctx_switch(&loop->ctx, ctx_for(loop, t), t);
  loop->current = NULL;
  weft__gen_running = NULL;
  arrived(loop);
}

/* ---- parking ---------------------------------------------------------- */
static inline __attribute__((always_inline)) int
park_now(weft_task *t, int what, int64_t detail, weft__undo_fn undo,
         void *arg) {
  t->state = TASK_WAITING;
  t->waits_on = (uint8_t)what;
  t->waits_detail = detail;
  t->undo = undo;
  t->undo_arg = arg;
  suspend(t);
  return t->wake_rc;
}

/* (Out of line: weft__park, which LTO inlines into its callers, calls it
 * rather than giving each of them a copy of the switch.) */
WEFT__HOT __attribute__((noinline)) int weft__park_task(weft_task *t, int what,
                                                        int64_t detail,
                                                        weft__undo_fn undo,
                                                        void *arg) {
  if (t->flags & TASK_CANCELLED || t->scope) {
    /* Cancelled already, or past a deadline: do not wait at all. Else a
     * deadline around the call needs its timer now. Either way the caller
     * has set up its wait, so the undo takes it down. */
    int rc = weft__cancel_status(t);
    if (rc == 0)
      rc = weft__deadline_arm(t);
    if (rc < 0) {
      if (undo)
        undo(t, arg);
      return rc;
    }
  }
  return park_now(t, what, detail, undo, arg);
}

WEFT__HOT int weft__park(int what, int64_t detail, weft__undo_fn undo,
                         void *arg) {
  weft_task *t = running_task();
  if (!t)
    return -EINVAL;
  return weft__park_task(t, what, detail, undo, arg);
}

int weft__park_raw(int what, int64_t detail) {
  return park_now(running_task(), what, detail, NULL, NULL);
}

WEFT__HOT void weft__wake(weft_task *t, int rc) {
  if (t->state != TASK_WAITING)
    return;
  t->wake_rc = rc;
  t->waits_on = WAIT_NONE;
  t->undo = NULL;
  push_ready(t->loop, t);
}

/* ---- FIFO queues of parked tasks -------------------------------------- */
static void undo_queued(weft_task *t, void *arg) {
  (void)t;
  weft__unqueue(arg);
}

int weft__park_queued(weft__queued *w, weft_task *t, void **head, void **tail,
                      int kind, const void *what) {
  weft__enqueue(w, t, head, tail);
  return weft__park(kind, (int64_t)(uintptr_t)what, undo_queued, w);
}

weft__queued *weft__wake_first(void **head, int rc) {
  weft__queued *w = *head;
  if (w) {
    weft__unqueue(w);
    weft__wake(w->task, rc);
  }
  return w;
}

void weft__cancel_parked_task(weft_task *t, int rc) {
  if (t->state != TASK_WAITING)
    return;
  if (t->undo)
    t->undo(t, t->undo_arg);
  weft__wake(t, rc);
}

void weft__cancel_recheck(weft_task *t) {
  if (t->state != TASK_WAITING)
    return;
  int rc = weft__cancel_status(t);
  if (rc == 0)
    rc = weft__deadline_arm(t);
  if (rc < 0)
    weft__cancel_parked_task(t, rc);
}

void weft__cancel_parked(weft_loop *loop) {
  /* Nothing else could ever wake them: shields do not hold here. */
  for (weft_task *t = loop->live; t; t = t->next_live) {
    t->flags |= TASK_CANCELLED;
    weft__cancel_parked_task(t, -ECANCELED);
  }
}

/* ---- sleeping --------------------------------------------------------- */
static void wake_sleeper(void *arg) { weft__wake(arg, 0); }

static void undo_sleep(weft_task *t, void *arg) {
  (void)t;
  weft__timer_disarm(arg);
}

int weft_sleep(int64_t delay) {
  weft_task *t = running_task();
  if (!t)
    return -EINVAL;
  if (delay <= 0)
    return weft_yield();
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  weft_loop *loop = t->loop;
  int64_t deadline = delay > WEFT_NEVER - weft__turn_now(loop)
                         ? WEFT_NEVER
                         : loop->now + delay;
  /* Never: no timer, which could not fire and would keep the loop alive
   * for ever; the task waits for its cancellation, and the deadlock rule
   * sees that nothing else can wake it. */
  if (deadline == WEFT_NEVER)
    return weft__park(WAIT_TIMER, deadline, NULL, NULL);
  weft__timer_rec *r = weft__timer_arm(loop, deadline, wake_sleeper, t);
  if (!r)
    return -ENOMEM;
  return weft__park(WAIT_TIMER, deadline, undo_sleep, r);
}

void weft__tasks_unpark(weft_loop *loop) {
  /* A task parked on a channel, a semaphore, a mutex... has a waiter on its
   * stack in that object's queue, and the object may outlive the loop (a
   * static semaphore, a channel freed later). Each wait's undo takes it out,
   * as a cancellation would, but the task is not woken: it never runs
   * again. The undos run while everything they touch is still there (the
   * pool's jobs, the kernel's requests, the timers, the fd table). */
  for (weft_task *t = loop->live; t; t = t->next_live)
    if (t->state == TASK_WAITING && t->undo) {
      weft__undo_fn undo = t->undo;
      t->undo = NULL;
      undo(t, t->undo_arg);
    }
  /* Then what they hold, which their undos may have still used. */
  while (loop->held) {
    weft__held *h = loop->held;
    loop->held = h->next;
    h->drop(loop, h);
  }
}

void weft__hold(weft__held *h, void (*drop)(weft_loop *, weft__held *)) {
  weft_task *t = running_task();
  h->drop = t ? drop : NULL; /* outside a task, nothing can be dropped */
  if (!t)
    return;
  weft_loop *loop = t->loop;
  h->prev = NULL;
  h->next = loop->held;
  if (h->next)
    h->next->prev = h;
  loop->held = h;
}

void weft__unhold(weft__held *h) {
  if (!h->drop)
    return;
  if (h->prev)
    h->prev->next = h->next;
  else
    running_task()->loop->held = h->next;
  if (h->next)
    h->next->prev = h->prev;
}

void weft__tasks_free(weft_loop *loop) {
  /* Tasks that never finished are dropped where they stand, with the
   * generators they were inside. */
  while (loop->live) {
    weft_task *t = loop->live;
    unlink_live(loop, t);
    weft__gen_abandon(t->gen);
    t->gen = NULL;
    weft__stack_release_abandoned(t->stack);
    t->stack = NULL;
  }
  for (weft__slab *s = loop->slabs; s; s = s->next)
    for (int i = 0; i < SLAB_RECORDS; i++)
      weft__free(s->recs[i].name);
  while (loop->slabs) {
    weft__slab *s = loop->slabs;
    loop->slabs = s->next;
    weft__free(s);
  }
  loop->free_recs = NULL;
  loop->ready_head = loop->ready_tail = NULL;
}

/* ---- the public calls ------------------------------------------------- */
weft_task *weft_spawn_opts(void *(*fn)(void *), void *arg,
                           const weft_task_opts *opts) {
  weft_loop *loop = opts && opts->loop ? opts->loop : weft_loop_current();
  /* A loop is its thread's: another thread reaches it through
   * weft_call_soon_threadsafe, never by spawning into it. */
  if (!fn || !loop || !weft__on_thread(loop->thread)) {
    errno = EINVAL;
    return NULL;
  }
  weft_task *t = record_new(loop);
  if (!t)
    return NULL;
  /* Every field is set here (no memset: this is the spawn path), except
   * gen_count, which survives recycling, and ctx, set by weft__ctx_make. */
  t->name = NULL;
  t->flags = 0;
  t->result = NULL;
  t->joiner = NULL;
  t->scope = NULL;
  t->waits_on = WAIT_NONE;
  t->waits_detail = 0;
  t->on_exit = NULL;
  t->on_exit_arg = NULL;
  t->sib_prev = t->sib_next = NULL;
  t->undo = NULL;
  t->undo_arg = NULL;
  t->io = NULL;
  t->gen = NULL;
  t->wake_rc = 0;
  t->saved_errno = 0;
  t->prev_live = NULL;
  if (opts && opts->name && !(t->name = weft__strdup(opts->name)))
    goto fail;
  t->stack = weft__stack_acquire(opts && opts->stack_size ? opts->stack_size
                                                          : loop->stack_size);
  if (!t->stack)
    goto fail;
  t->fn = fn;
  t->arg = arg;
  t->id = weft__next_id();
  t->stack->region.owner_id = t->id;
  t->stack->region.owner_name = t->name;
  weft__ctx_make(&t->ctx, &t->stack->region, task_entry);
  t->next_live = loop->live;
  if (loop->live)
    loop->live->prev_live = t;
  loop->live = t;
  loop->nlive++;
  push_ready(loop, t);
  return handle_of(t);
fail:
  record_free(loop, t);
  errno = ENOMEM;
  return NULL;
}

weft_task *weft_spawn(void *(*fn)(void *), void *arg) {
  return weft_spawn_opts(fn, arg, NULL);
}

int weft_go(void *(*fn)(void *), void *arg) {
  weft_task *t = weft_spawn(fn, arg);
  if (!t)
    return -errno;
  record_of(t)->flags |= TASK_DETACHED;
  return 0;
}

/* Whether h, stale or not, is a task of a loop of this thread. The thread
 * is asked first, from the record's loop, which never changes: the
 * generation and state that record_of reads are the loop thread's, and
 * another thread reading them races with its writes. */
static bool on_its_thread(const weft_task *h) {
  return h && weft__on_thread(address_of(h)->loop->thread);
}

static void undo_join(weft_task *joiner, void *arg) {
  weft_task *t = arg;
  (void)joiner;
  t->joiner = NULL;
  t->flags &= (uint8_t)~TASK_JOINING;
}

int weft_join(weft_task *h, void **result) {
  if (!on_its_thread(h))
    return -EINVAL;
  weft_task *t = record_of(h), *self = running_task();
  if (!t || t == self || (t->flags & (TASK_DETACHED | TASK_JOINING)))
    return -EINVAL;
  /* A cancellation point even when t is done (the handle stays then). */
  int rc = self ? weft__checkpoint() : 0;
  if (rc < 0)
    return rc;
  if (t->state != TASK_DONE) {
    /* Waiting needs a task of the same loop; outside, t must be done. */
    if (!self || self->loop != t->loop)
      return -EINVAL;
    t->flags |= TASK_JOINING;
    t->joiner = self;
    rc = weft__park(WAIT_JOIN, (int64_t)t->id, undo_join, t);
    if (rc < 0) {
      /* Cancelled: park may have returned without parking (and so without
       * calling the undo), so take the claim back here as well; but only
       * our own: once the undo ran, another task may have claimed t. */
      if (t->joiner == self)
        undo_join(self, t);
      return rc;
    }
  }
  if (result)
    *result = t->result;
  record_free(t->loop, t);
  return 0;
}

int weft_detach(weft_task *h) {
  if (!on_its_thread(h))
    return -EINVAL;
  weft_task *t = record_of(h);
  if (!t || (t->flags & (TASK_DETACHED | TASK_JOINING)))
    return -EINVAL;
  if (t->state == TASK_DONE)
    record_free(t->loop, t);
  else
    t->flags |= TASK_DETACHED;
  return 0;
}

weft_task *weft_self(void) {
  weft_task *t = running_task();
  return t ? handle_of(t) : NULL;
}

WEFT__HOT int weft_yield(void) {
  weft_task *t = running_task();
  if (!t)
    return -EINVAL;
  t->flags |= TASK_YIELDED;
  push_ready(t->loop, t);
  suspend(t);
  return weft__checkpoint();
}

weft_task *weft__task_record(const weft_task *h) { return record_of(h); }

void weft__task_cancel(weft_task *t) {
  t->flags |= TASK_CANCELLED;
  weft__cancel_recheck(t); /* a shield may keep it waiting */
}

int weft_cancel(weft_task *h) {
  if (!on_its_thread(h))
    return -EINVAL;
  weft_task *t = record_of(h);
  if (!t || t->state == TASK_DONE)
    return -ESRCH; /* a stale handle names a task that ended */
  weft__task_cancel(t);
  return 0;
}

uint64_t weft_task_id(const weft_task *h) {
  weft_task *t = on_its_thread(h) ? record_of(h) : NULL;
  return t ? t->id : 0;
}

const char *weft_task_name(const weft_task *h) {
  weft_task *t = on_its_thread(h) ? record_of(h) : NULL;
  return t ? t->name : NULL;
}

/* ---- the dump --------------------------------------------------------- */
static const char *state_name(const weft_task *t) {
  switch (t->state) {
  case TASK_READY: return "ready";
  case TASK_RUNNING: return "running";
  case TASK_WAITING: return "waiting";
  default: return "done";
  }
}

static size_t stack_used(const weft_task *t) {
  const weft__region *r = &t->stack->region;
  uintptr_t top = (uintptr_t)r->lo + r->size, sp;
  /* Inside generators (running one, or parked in one), the task's own
   * stack was left where it first resumed a generator: the frame address
   * and the saved context are on a generator's stack. */
  const weft_gen *g = t->state == TASK_RUNNING ? weft__gen_running : t->gen;
  if (g)
    sp = (uintptr_t)weft__gen_outer_sp(g);
  else if (t->state == TASK_RUNNING)
    sp = (uintptr_t)__builtin_frame_address(0);
#ifdef WEFT_CTX_UCONTEXT
  else
    return 0; /* not tracked by the ucontext build */
#else
  else
    sp = (uintptr_t)t->ctx.sp;
#endif
  return sp < top && sp >= (uintptr_t)r->lo ? top - sp : 0;
}

/* What t waits on, in words: "fd 7 read", "timer in 12.5 ms", ... */
static void describe_wait(const weft_task *t, int64_t now, char *buf,
                          size_t len) {
  long long d = (long long)t->waits_detail;
  double ms = (double)(t->waits_detail - now) / 1e6;
  switch (t->waits_on) {
  case WAIT_FD_READ: snprintf(buf, len, "fd %lld read", d); break;
  case WAIT_FD_WRITE: snprintf(buf, len, "fd %lld write", d); break;
  case WAIT_TIMER:
    if (t->waits_detail == WEFT_NEVER)
      snprintf(buf, len, "sleep, forever");
    else
      snprintf(buf, len, "timer in %.1f ms", ms);
    break;
  case WAIT_FUTURE: snprintf(buf, len, "future %#llx", d); break;
  case WAIT_JOIN: snprintf(buf, len, "join of task %lld", d); break;
  case WAIT_GROUP: snprintf(buf, len, "group %#llx", d); break;
  case WAIT_MUTEX: snprintf(buf, len, "mutex %#llx", d); break;
  case WAIT_COND: snprintf(buf, len, "cond %#llx", d); break;
  case WAIT_SEM: snprintf(buf, len, "sem %#llx", d); break;
  case WAIT_EVENT: snprintf(buf, len, "event %#llx", d); break;
  case WAIT_SEND: snprintf(buf, len, "send on chan %#llx", d); break;
  case WAIT_RECV: snprintf(buf, len, "recv on chan %#llx", d); break;
  case WAIT_SELECT: snprintf(buf, len, "select of %lld cases", d); break;
  case WAIT_MAILBOX: snprintf(buf, len, "mailbox of actor %#llx", d); break;
  case WAIT_MAILBOX_FULL:
    snprintf(buf, len, "send to full mailbox of actor %#llx", d);
    break;
  case WAIT_ACTOR_END: snprintf(buf, len, "end of actor %#llx", d); break;
  case WAIT_EXECUTOR: snprintf(buf, len, "job %#llx on the pool", d); break;
  case WAIT_LOOP: snprintf(buf, len, "a call into loop %lld", d); break;
  case WAIT_OTHER: snprintf(buf, len, "%#llx", d); break;
  default: snprintf(buf, len, "-"); break;
  }
  /* The deadline that would end the wait, if a scope has one. */
  int64_t first = WEFT_NEVER;
  for (const weft_scope *s = t->scope; s; s = s->priv_outer) {
    if (s->priv_deadline < first)
      first = s->priv_deadline;
    if (s->priv_flags & SCOPE_SHIELD)
      break;
  }
  size_t n = strlen(buf);
  if (first != WEFT_NEVER && n < len)
    snprintf(buf + n, len - n, ", deadline in %.1f ms",
             (double)(first - now) / 1e6);
}

void weft_dump(FILE *out) {
  weft_loop *loop =
      weft__loop_running ? weft__loop_running : weft_loop_current();
  if (!out)
    return;
  if (!loop) {
    fprintf(out, "weft: no loop on this thread\n");
    return;
  }
  fprintf(out, "weft: %zu task%s", loop->nlive, loop->nlive == 1 ? "" : "s");
  /* Records a join cut short (by a cancellation) left behind pile up in
   * a long run: worth seeing. */
  if (loop->unjoined)
    fprintf(out, " (and %zu ended, never joined or detached)", loop->unjoined);
  fputc('\n', out);
  /* The "waits on" column as wide as its longest entry, so that the
   * columns after it line up. */
  char wait[96];
  int width = (int)strlen("waits on");
  const int64_t now = weft__loop_clock(loop); /* one reading: one width */
  for (const weft_task *t = loop->live; t; t = t->next_live) {
    describe_wait(t, now, wait, sizeof wait);
    if ((int)strlen(wait) > width)
      width = (int)strlen(wait);
  }
  fprintf(out, "%8s  %-8s %-*s %17s  %s\n", "id", "state", width, "waits on",
          "stack used/size", "name");
  for (const weft_task *t = loop->live; t; t = t->next_live) {
    char buf[32];
    snprintf(buf, sizeof buf, "%zu/%zu", stack_used(t),
             t->stack->region.nominal);
    describe_wait(t, now, wait, sizeof wait);
    fprintf(out, "%8llu  %-8s %-*s %17s  %s%s\n", (unsigned long long)t->id,
            state_name(t), width, wait, buf, t->name ? t->name : "-",
            (t->flags & TASK_CANCELLED) ? " (cancelled)" : "");
  }
}
