/*
 * Layer 5: task-aware mutex, condition variable, semaphore and event.
 *
 * All four are a FIFO of parked tasks (a waiter on each one's stack) plus
 * a little state. Whatever is released goes straight to the first waiter
 * (the mutex's ownership, the semaphore's unit) before it runs, so a task
 * that comes later cannot take it first: no barging, and a waiter woken
 * this way has what it waited for even if it is cancelled before it runs
 * (a wait that completed reports success). A cancelled wait takes its
 * waiter off the queue: nothing else changes.
 */
#include "internal.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>

/* ---- one loop's -------------------------------------------------------
 * The objects record no loop (they are the caller's structs, made with a
 * static initialiser too), but their waiters do: a call that would queue
 * a task behind another loop's, or wake another loop's task from another
 * loop's code or from another thread, is refused, changing nothing. It
 * would race with that loop, as a channel's would (chan.c). Only calls
 * that find a waiter look, so an uncontended lock costs nothing more. */

/* The first waiter of the queue is of a loop the caller may not touch. */
static int foreign(void *head) {
  const weft__queued *w = head;
  return w && !weft__callers(w->task->loop, w->task->loop->thread);
}

/* The same, for the calls that return nothing: they say so on stderr. */
static int refused(void *head, const char *what) {
  if (!foreign(head))
    return 0;
  fprintf(stderr,
          "weft: %s from another thread or loop than its waiters': "
          "ignored\n",
          what);
  return 1;
}

/* The queue holds another loop's tasks than t's: t may not wait in it. */
static int others_queue(void *head, const weft_task *t) {
  return head && ((weft__queued *)head)->task->loop != t->loop;
}

/* Parks the running task t at the tail of the queue (head, tail) until
 * wake_first; returns what park returns, or -EINVAL if the queue holds
 * another loop's tasks. */
static int wait_in(weft_task *t, void **head, void **tail, int kind,
                   const void *what) {
  if (others_queue(*head, t))
    return -EINVAL;
  weft__queued w;
  return weft__park_queued(&w, t, head, tail, kind, what);
}

/* Wakes the first waiter of the queue with 0; whether there was one. */
static int wake_first(void **head) { return weft__wake_first(head, 0) != 0; }

/* ---- mutex ------------------------------------------------------------
 * The owner is recorded by the task's id (unique in the process, never
 * reused), not by its record or its handle: a task that ends holding the
 * mutex leaves it held (as a thread would), and no later task finds itself
 * the owner: not one on the recycled record, and not one of a later loop
 * whose record has the address and generation of a task that was dropped
 * holding the mutex when its loop was freed (a handle would be equal). */

void weft_mutex_init(weft_mutex *m) {
  if (m)
    *m = (weft_mutex)WEFT_MUTEX_INIT;
}

int weft_mutex_lock(weft_mutex *m) {
  weft_task *t = weft__running_task();
  if (!m || !t)
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  uint64_t self = t->id;
  if (!m->priv_owner) {
    m->priv_owner = self;
    return 0;
  }
  if (m->priv_owner == self)
    return -EDEADLK;
  /* The unlocker makes us the owner before waking us. */
  return wait_in(t, &m->priv_head, &m->priv_tail, WAIT_MUTEX, m);
}

int weft_mutex_trylock(weft_mutex *m) {
  weft_task *t = weft__running_task();
  if (!m || !t)
    return -EINVAL;
  if (m->priv_owner)
    return -EBUSY;
  m->priv_owner = t->id;
  return 0;
}

/* Hands m to its first waiter, or frees it. */
static void release(weft_mutex *m) {
  weft__queued *w = m->priv_head;
  m->priv_owner = w ? w->task->id : 0;
  if (w)
    wake_first(&m->priv_head);
}

int weft_mutex_unlock(weft_mutex *m) {
  weft_task *t = weft__running_task();
  if (!m || !t)
    return -EINVAL;
  if (m->priv_owner != t->id)
    return -EPERM;
  if (foreign(m->priv_head))
    return -EINVAL;
  release(m);
  return 0;
}

/* ---- condition variable ----------------------------------------------- */
void weft_cond_init(weft_cond *c) {
  if (c)
    *c = (weft_cond)WEFT_COND_INIT;
}

int weft_cond_wait(weft_cond *c, weft_mutex *m) {
  weft_task *t = weft__running_task();
  if (!c || !m || !t)
    return -EINVAL;
  if (m->priv_owner != t->id)
    return -EPERM;
  if (foreign(m->priv_head) || others_queue(c->priv_head, t))
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  release(m);
  rc = wait_in(t, &c->priv_head, &c->priv_tail, WAIT_COND, c);
  /* Locked again in every case, cancelled or not: under a shield, so that
   * the cancellation that cut the wait short cannot also stop this. */
  weft_scope shield;
  weft_scope_enter(&shield, WEFT_NEVER);
  weft_scope_shield(&shield, true);
  int lrc = weft_mutex_lock(m);
  weft_scope_exit(&shield);
  /* Only a deadlock's forced cancellation, which no shield holds off, stops
   * the lock, or a refusal (-EINVAL) because m got another loop's waiters
   * while c was waited on: m is not held, which no other return value
   * would say. */
  return lrc < 0 ? -EDEADLK : rc;
}

void weft_cond_signal(weft_cond *c) {
  if (c && !refused(c->priv_head, "weft_cond_signal"))
    wake_first(&c->priv_head);
}

void weft_cond_broadcast(weft_cond *c) {
  if (c && !refused(c->priv_head, "weft_cond_broadcast"))
    while (wake_first(&c->priv_head))
      ;
}

/* ---- semaphore -------------------------------------------------------- */
void weft_sem_init(weft_sem *s, size_t count) {
  if (s)
    *s = (weft_sem){count, NULL, NULL};
}

int weft_sem_wait(weft_sem *s) {
  weft_task *t = weft__running_task();
  if (!s || !t)
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  if (s->priv_count > 0) {
    s->priv_count--;
    return 0;
  }
  return wait_in(t, &s->priv_head, &s->priv_tail, WAIT_SEM, s); /* post hands one */
}

int weft_sem_trywait(weft_sem *s) {
  if (!s)
    return -EINVAL;
  if (s->priv_count == 0)
    return -EAGAIN;
  s->priv_count--;
  return 0;
}

int weft_sem_post(weft_sem *s) {
  if (!s || foreign(s->priv_head))
    return -EINVAL;
  if (wake_first(&s->priv_head))
    return 0; /* the unit went to the first waiter */
  if (s->priv_count == SIZE_MAX)
    return -EOVERFLOW;
  s->priv_count++;
  return 0;
}

size_t weft_sem_value(const weft_sem *s) { return s ? s->priv_count : 0; }

/* ---- event ------------------------------------------------------------ */
void weft_event_init(weft_event *e) {
  if (e)
    *e = (weft_event)WEFT_EVENT_INIT;
}

void weft_event_set(weft_event *e) {
  if (!e || refused(e->priv_head, "weft_event_set"))
    return;
  e->priv_set = 1;
  while (wake_first(&e->priv_head))
    ;
}

void weft_event_clear(weft_event *e) {
  if (e)
    e->priv_set = 0;
}

bool weft_event_is_set(const weft_event *e) { return e && e->priv_set; }

int weft_event_wait(weft_event *e) {
  weft_task *t = weft__running_task();
  if (!e || !t)
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc < 0 || e->priv_set)
    return rc;
  return wait_in(t, &e->priv_head, &e->priv_tail, WAIT_EVENT, e);
}
