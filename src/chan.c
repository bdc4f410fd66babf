/*
 * Layer 5: channels and select (Go's, with errors instead of panics).
 *
 * A channel is a ring of `cap` elements and two FIFOs of parked tasks:
 * senders (each with the element it offers) and receivers (each with
 * where the element goes). The invariants: receivers wait only while the
 * ring is empty and no sender waits; senders wait only while the ring is
 * full (always, for an unbuffered channel) and no receiver waits.
 *
 * The task that completes an operation does the other side's part too: a
 * sender that finds a receiver waiting copies its element straight into
 * the receiver's buffer and wakes it with the result. So a woken task has
 * nothing left to do, and a cancellation that arrives after that cannot
 * undo an element that was handed over (the operation completed: it
 * reports success). A cancellation before it takes the waiter off the
 * queue, and the channel is as it was.
 *
 * A blocked select puts one waiter in the queue of each of its cases'
 * channels; the first channel to complete one of them takes the others
 * off their queues before waking the task.
 */
#include "internal.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct select_wait select_wait;

/* A task parked on a channel, on its stack. */
typedef struct cwaiter {
  weft__queued q;   /* first: its task, and its links in one of the queues */
  void *elem;       /* the element offered (send) or its destination */
  int queued;       /* in that queue */
  int *result;      /* select: the case's result field */
  select_wait *sel; /* the select it belongs to, or NULL */
  size_t index;     /* its case in that select */
} cwaiter;

struct select_wait {
  weft_task *task;
  cwaiter *w;   /* one per case with a channel */
  size_t n;     /* how many */
  size_t fired; /* the case that completed */
};

struct weft_chan {
  uint64_t loop_id; /* its loop's (an id: the channel may outlive the loop) */
  uint64_t thread;  /* the loop's (its token) */
  size_t elem_size, cap;
  unsigned char *ring; /* cap elements */
  size_t head, len;
  int closed;
  void *senders, *senders_tail;     /* cwaiters (weft__queued first) */
  void *receivers, *receivers_tail; /* the same */
};

/* c's loop was freed, and c is this thread's to use and free. */
static int orphaned(const weft_chan *c) {
  return weft__on_thread(c->thread) && !weft__thread_loop_alive(c->loop_id);
}

/* Another thread is refused, and so is another loop's code while c's loop
 * lives. */
static int foreign(const weft_chan *c) {
  const weft_loop *r = weft__loop_running;
  if (r && r->id == c->loop_id)
    return 0;
  if (!r)
    return !weft__on_thread(c->thread);
  return !orphaned(c);
}

/* ---- queues ----------------------------------------------------------- */
/* Queues w, task t's, among c's senders (op WEFT_SEND) or receivers. */
static void q_push(weft_chan *c, cwaiter *w, weft_task *t, int op) {
  if (op == WEFT_SEND)
    weft__enqueue(&w->q, t, &c->senders, &c->senders_tail);
  else
    weft__enqueue(&w->q, t, &c->receivers, &c->receivers_tail);
  w->queued = 1;
}

static void q_remove(cwaiter *w) {
  weft__unqueue(&w->q);
  w->queued = 0;
}

/* The other side has done w's operation, with result rc: wake its task
 * (a select's other waiters leave their queues first). */
static void complete(cwaiter *w, int rc) {
  q_remove(w);
  select_wait *sel = w->sel;
  if (!sel) {
    weft__wake(w->q.task, rc);
    return;
  }
  *w->result = rc;
  sel->fired = w->index;
  for (size_t i = 0; i < sel->n; i++)
    if (sel->w[i].queued)
      q_remove(&sel->w[i]);
  weft__wake(sel->task, 0);
}

/* ---- the ring --------------------------------------------------------- */
/* The i-th element from the head (i < cap, head < cap: no division). */
static unsigned char *slot(const weft_chan *c, size_t i) {
  size_t k = c->head + i;
  if (k >= c->cap)
    k -= c->cap;
  return c->ring + k * c->elem_size;
}

/* Copies one element. The common sizes become plain moves, not a call:
 * on a ping-pong the call to memcpy was 4% of a message. memmove, because
 * the two may overlap, or be one: a try_send from the very buffer a
 * waiting receiver gave (memcpy's behaviour is undefined then); at these
 * sizes it compiles to the same loads and stores. */
static inline void copy_elem(void *to, const void *from, size_t n) {
  switch (n) {
  case 1: memmove(to, from, 1); break;
  case 2: memmove(to, from, 2); break;
  case 4: memmove(to, from, 4); break;
  case 8: memmove(to, from, 8); break;
  case 16: memmove(to, from, 16); break;
  default: memmove(to, from, n); break;
  }
}

/* Sends *elem if that can be done now: 0, -EPIPE, or -EAGAIN. */
static int send_now(weft_chan *c, const void *elem) {
  if (c->closed)
    return -EPIPE;
  if (c->receivers) {
    cwaiter *w = c->receivers;
    copy_elem(w->elem, elem, c->elem_size);
    complete(w, 0);
    return 0;
  }
  if (c->len < c->cap) {
    copy_elem(slot(c, c->len), elem, c->elem_size);
    c->len++;
    return 0;
  }
  return -EAGAIN;
}

/* Receives into *elem if that can be done now: 0, -EPIPE, or -EAGAIN. */
static int recv_now(weft_chan *c, void *elem) {
  if (c->len > 0) {
    copy_elem(elem, slot(c, 0), c->elem_size);
    if (++c->head == c->cap)
      c->head = 0;
    c->len--;
    if (c->senders) { /* its element takes the slot just freed */
      cwaiter *w = c->senders;
      copy_elem(slot(c, c->len), w->elem, c->elem_size);
      c->len++;
      complete(w, 0);
    }
    return 0;
  }
  if (c->senders) {
    cwaiter *w = c->senders;
    copy_elem(elem, w->elem, c->elem_size);
    complete(w, 0);
    return 0;
  }
  return c->closed ? -EPIPE : -EAGAIN;
}

static int ready(const weft_chan *c, int op) {
  if (op == WEFT_SEND)
    return c->closed || c->receivers || c->len < c->cap;
  return c->len > 0 || c->senders || c->closed;
}

/* ---- channels --------------------------------------------------------- */
weft_chan *weft_chan_new(size_t elem_size, size_t capacity) {
  weft_loop *loop = weft_loop_current();
  if (!loop || elem_size == 0 ||
      (capacity && elem_size > SIZE_MAX / capacity)) {
    errno = EINVAL;
    return NULL;
  }
  weft_chan *c = weft__calloc(1, sizeof *c);
  if (!c)
    return NULL;
  if (capacity && !(c->ring = weft__malloc(capacity * elem_size))) {
    weft__free(c);
    return NULL;
  }
  c->loop_id = loop->id;
  c->thread = loop->thread;
  c->elem_size = elem_size;
  c->cap = capacity;
  return c;
}

static void undo_wait(weft_task *t, void *arg) {
  (void)t;
  cwaiter *w = arg;
  if (w->queued)
    q_remove(w);
}

/* Parks the running task t on c until the other side completes op. */
static int wait_op(weft_task *t, weft_chan *c, int op, void *elem) {
  if (t->loop->id != c->loop_id)
    return -EINVAL;
  cwaiter w = {.elem = elem};
  q_push(c, &w, t, op);
  return weft__park(op == WEFT_SEND ? WAIT_SEND : WAIT_RECV,
                    (int64_t)(uintptr_t)c, undo_wait, &w);
}

/* weft_chan_send and weft_chan_recv: done now if it can be, else the
 * task waits for the other side (outside a task that is -EINVAL). Inlined
 * into each with `op` a constant, so neither tests it at run time. */
static inline __attribute__((always_inline)) int chan_op(weft_chan *c,
                                                         void *elem, int op) {
  weft_task *t = weft__running_task();
  /* Another loop's task or callback, another thread: -EINVAL even when it
   * could be done at once (it would wake a task of the other loop, perhaps
   * on another thread), as weft_select says. */
  if (!c || !elem || foreign(c))
    return -EINVAL;
  int rc = t ? weft__checkpoint() : 0;
  if (rc < 0)
    return rc;
  rc = op == WEFT_SEND ? send_now(c, elem) : recv_now(c, elem);
  if (rc != -EAGAIN)
    return rc;
  if (!t)
    return -EINVAL; /* it would have to wait, and only a task can */
  return wait_op(t, c, op, elem);
}

/* The four public calls are not inlined into their callers by LTO: there,
 * with the element's size known, GCC would warn about copy_elem's other
 * cases (-Wstringop-overflow), which cannot be taken. A call is little
 * next to a channel operation. */
#define CHAN_ENTRY __attribute__((noinline))

CHAN_ENTRY int weft_chan_send(weft_chan *c, const void *elem) {
  return chan_op(c, (void *)elem, WEFT_SEND);
}

CHAN_ENTRY int weft_chan_recv(weft_chan *c, void *elem) {
  return chan_op(c, elem, WEFT_RECV);
}

CHAN_ENTRY int weft_chan_try_send(weft_chan *c, const void *elem) {
  if (!c || !elem || foreign(c))
    return -EINVAL;
  return send_now(c, elem);
}

CHAN_ENTRY int weft_chan_try_recv(weft_chan *c, void *elem) {
  if (!c || !elem || foreign(c))
    return -EINVAL;
  return recv_now(c, elem);
}

/* close and free from another thread (or another loop's code) would race
 * with the loop: they do nothing, and say so. */
static int refused(const weft_chan *c, const char *what) {
  if (!foreign(c))
    return 0;
  fprintf(stderr,
          "weft: %s from another thread or loop than the channel's: "
          "ignored\n",
          what);
  return 1;
}

void weft_chan_close(weft_chan *c) {
  if (!c || c->closed || refused(c, "weft_chan_close"))
    return;
  c->closed = 1;
  /* Receivers wait only on an empty ring: they all get -EPIPE now. */
  while (c->receivers)
    complete(c->receivers, -EPIPE);
  while (c->senders)
    complete(c->senders, -EPIPE);
}

void weft_chan_free(weft_chan *c) {
  if (!c || refused(c, "weft_chan_free"))
    return;
  weft_chan_close(c);
  weft__free(c->ring);
  weft__free(c);
}

size_t weft_chan_len(const weft_chan *c) { return c ? c->len : 0; }
size_t weft_chan_cap(const weft_chan *c) { return c ? c->cap : 0; }

/* ---- select ----------------------------------------------------------- */
/* The generator's state when the thread has no loop (a select on
 * channels whose loop was freed). */
static WEFT__TLS uint64_t loopless_rng;

/* xorshift64*: the loop's generator for select's random choice (the
 * thread's, with no loop). */
static uint64_t next_random(weft_loop *loop) {
  uint64_t *state = loop ? &loop->rng : &loopless_rng;
  uint64_t x = *state;
  if (!x)
    x = (uint64_t)weft_now() ^ (uint64_t)(uintptr_t)state ^ 0x9e3779b97f4a7c15u;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *state = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* True with probability 1/k, without a division: the top 32 bits of the
 * random number scaled to [0, k). The first case (k = 1) draws nothing. */
static int one_in(weft_loop *loop, size_t k) {
  if (k == 1)
    return 1;
  uint32_t r = (uint32_t)(next_random(loop) >> 32);
  return (((uint64_t)r * k) >> 32) == 0;
}

/* A select's array of waiters, when it is not on the stack. */
typedef struct {
  weft__held h;
  cwaiter *w;
} held_array;

static void drop_array(weft_loop *loop, weft__held *h) {
  (void)loop;
  weft__free(((held_array *)h)->w);
}

static void undo_select(weft_task *t, void *arg) {
  (void)t;
  select_wait *sel = arg;
  for (size_t i = 0; i < sel->n; i++)
    if (sel->w[i].queued)
      q_remove(&sel->w[i]);
}

/* Cases waited on without allocating; more take one allocation. */
#define SELECT_STACK 8

int weft_select(weft_select_case *cases, size_t n, int flags) {
  weft_task *t = weft__running_task();
  /* Only a task waits, on its loop's channels; what is done at once may
   * use any channel the thread's code may use (as weft_chan_try_send: a
   * live loop's outside any run, one whose loop was freed), even with no
   * loop left on the thread. */
  weft_loop *loop = t ? t->loop : weft_loop_current();
  if ((n && !cases) || n > INT_MAX || (flags & ~WEFT_NOWAIT))
    return -EINVAL;
  size_t nwait = 0; /* the cases with a channel: a waiter each */
  int orphans = 0;  /* channels it cannot wait on (no task, loop gone) */
  for (size_t i = 0; i < n; i++) {
    weft_select_case *k = &cases[i];
    if (!k->chan)
      continue;
    nwait++;
    if ((k->op != WEFT_SEND && k->op != WEFT_RECV) || !k->elem)
      return -EINVAL;
    if (foreign(k->chan))
      return -EINVAL; /* another loop's, or another thread's */
    if (!t || k->chan->loop_id != t->loop->id)
      orphans = 1; /* cannot be waited on */
  }
  if (t) {
    int rc = weft__checkpoint();
    if (rc < 0)
      return rc;
  }
  /* Among the cases ready now, one at random (reservoir sampling: the
   * k-th ready case replaces the choice with probability 1/k). */
  size_t chosen = SIZE_MAX, nready = 0;
  for (size_t i = 0; i < n; i++)
    if (cases[i].chan && ready(cases[i].chan, cases[i].op) &&
        one_in(loop, ++nready))
      chosen = i;
  if (chosen != SIZE_MAX) {
    weft_select_case *k = &cases[chosen];
    k->result = k->op == WEFT_SEND ? send_now(k->chan, k->elem)
                                   : recv_now(k->chan, k->elem);
    return (int)chosen;
  }
  if (flags & WEFT_NOWAIT)
    return -EAGAIN;
  if (!t || orphans)
    return -EINVAL;
  cwaiter stack_w[SELECT_STACK];
  cwaiter *w =
      nwait <= SELECT_STACK ? stack_w : weft__malloc(nwait * sizeof *w);
  if (!w)
    return -ENOMEM;
  select_wait sel = {t, w, nwait, SIZE_MAX};
  for (size_t i = 0, j = 0; i < n; i++) {
    if (!cases[i].chan)
      continue;
    w[j] = (cwaiter){.elem = cases[i].elem,
                     .result = &cases[i].result,
                     .sel = &sel,
                     .index = i};
    q_push(cases[i].chan, &w[j++], t, cases[i].op);
  }
  held_array held = {.w = w};
  if (w != stack_w)
    weft__hold(&held.h, drop_array); /* freed by the loop if t is dropped */
  int rc = weft__park(WAIT_SELECT, (int64_t)n, undo_select, &sel);
  if (w != stack_w) {
    weft__unhold(&held.h);
    weft__free(w);
  }
  return rc < 0 ? rc : (int)sel.fired;
}
