/*
 * Layer 5: task groups (structured concurrency).
 *
 * A group keeps its running children in a list through their records
 * (sib_prev, sib_next); a child's on_exit hook takes it off and wakes the
 * waiter when the last one goes. The children are detached tasks: their
 * records recycle themselves, and the group never holds a stale pointer,
 * because a child leaves the list before its record can be reused.
 *
 * If weft_group_wait is cancelled (or its deadline passes), it cancels the
 * children and waits for them inside a shielded scope: a group's wait
 * never returns while a child is still running.
 *
 * weft_group_fail keeps the first error and cancels the group; the wait
 * returns that error when nothing cut the wait itself short.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>

struct weft_group {
  weft_loop *loop;     /* NULL once the loop was freed under the group */
  weft_task *children; /* running, newest first */
  size_t nchildren;
  /* The task in weft_group_wait, from its call until it returns (even
   * while it is woken and not yet resumed: no second waiter slips in). */
  weft_task *waiter;
  int cancelled; /* weft_group_cancel, or a wait that was cut short */
  int err;       /* the first weft_group_fail's error (negative), or 0 */
  int freed;     /* weft_group_free was called: the last one out frees it */
  /* Every group of the loop (loop->groups): weft_loop_free drops the
   * children without running them to their end, and then frees the groups
   * already given up and tells the others that their children are gone. */
  struct weft_group *prev, *next;
};

static void unlink_group(weft_group *g) {
  if (g->prev)
    g->prev->next = g->next;
  else
    g->loop->groups = g->next;
  if (g->next)
    g->next->prev = g->prev;
}

/* Frees g if it was given up and nothing of it runs any more. */
static void free_if_done(weft_group *g) {
  if (!g->freed || g->nchildren || g->waiter)
    return;
  if (g->loop)
    unlink_group(g);
  weft__free(g);
}

/* weft_loop_free: the children were dropped, not ended (the loop's
 * groups_free hook). A group still held by the program forgets them and
 * its loop, so weft_group_free frees it and the other calls see -EINVAL. */
static void groups_free(weft_loop *loop) {
  while (loop->groups) {
    weft_group *g = loop->groups;
    loop->groups = g->next;
    g->loop = NULL;
    g->children = NULL;
    g->nchildren = 0;
    g->waiter = NULL;
    if (g->freed)
      weft__free(g);
  }
}

weft_group *weft_group_new(void) {
  weft_loop *loop = weft_loop_current();
  if (!loop) {
    errno = EINVAL;
    return NULL;
  }
  weft_group *g = weft__calloc(1, sizeof *g);
  if (!g)
    return NULL;
  g->loop = loop;
  g->next = loop->groups;
  if (g->next)
    g->next->prev = g;
  loop->groups = g;
  loop->groups_free = groups_free;
  return g;
}

static void child_exit(weft_task *t, void *arg) {
  weft_group *g = arg;
  if (t->sib_prev)
    t->sib_prev->sib_next = t->sib_next;
  else
    g->children = t->sib_next;
  if (t->sib_next)
    t->sib_next->sib_prev = t->sib_prev;
  t->sib_prev = t->sib_next = NULL;
  if (--g->nchildren > 0)
    return;
  if (g->waiter)
    weft__wake(g->waiter, 0);
  else
    free_if_done(g);
}

weft_task *weft_group_spawn(weft_group *g, void *(*fn)(void *), void *arg) {
  return weft_group_spawn_opts(g, fn, arg, NULL);
}

weft_task *weft_group_spawn_opts(weft_group *g, void *(*fn)(void *), void *arg,
                                 const weft_task_opts *o) {
  if (!g || g->freed || !g->loop || !fn ||
      (o && o->loop && o->loop != g->loop)) {
    errno = EINVAL;
    return NULL;
  }
  weft_task_opts opts = o ? *o : (weft_task_opts){0};
  opts.loop = g->loop;
  weft_task *h = weft_spawn_opts(fn, arg, &opts);
  if (!h)
    return NULL;
  weft_detach(h); /* the group owns it; the handle stays valid until it ends */
  if (g->cancelled)
    weft_cancel(h);
  weft_task *t = weft__task_record(h);
  t->on_exit = child_exit;
  t->on_exit_arg = g;
  t->sib_next = g->children;
  if (g->children)
    g->children->sib_prev = t;
  g->children = t;
  g->nchildren++;
  return h;
}

static void cancel_children(weft_group *g) {
  for (weft_task *t = g->children; t; t = t->sib_next)
    weft__task_cancel(t);
}

/* Whether the caller may act on g: on its loop's thread (any loop of it,
 * as weft_cancel allows), or anywhere once that loop is gone. From another
 * thread, cancelling would push the children onto the loop's ready queue
 * while the loop runs: ignored, and said on stderr (the call returns
 * nothing), as weft_cancel refuses it (-EINVAL). */
static int on_group_thread(const weft_group *g, const char *what) {
  if (!g->loop || weft__on_thread(g->loop->thread))
    return 1;
  fprintf(stderr, "weft: %s called off the loop's thread: ignored\n", what);
  return 0;
}

void weft_group_cancel(weft_group *g) {
  if (!g || !on_group_thread(g, "weft_group_cancel"))
    return;
  g->cancelled = 1;
  cancel_children(g);
}

int weft_group_fail(weft_group *g, int err) {
  if (!g || err >= 0 || !g->loop || !weft__callers(g->loop, g->loop->thread))
    return -EINVAL;
  if (!g->err)
    g->err = err;
  weft_group_cancel(g);
  return 0;
}

int weft_group_error(const weft_group *g) { return g ? g->err : -EINVAL; }

/* Waits until g has no child: one spawned between the last exit's wake-up
 * and the resume counts too. No undo: the claim on g (g->waiter) stays
 * until the wait returns. */
static int wait_children(weft_group *g) {
  int rc = 0;
  while (rc == 0 && g->nchildren)
    rc = weft__park(WAIT_GROUP, (int64_t)(uintptr_t)g, NULL, NULL);
  return rc;
}

int weft_group_wait(weft_group *g) {
  weft_task *self = weft__running_task();
  if (!g || !self || self->loop != g->loop)
    return -EINVAL;
  /* A child would wait for itself: for ever (as weft_join of oneself). So
   * would a child of a group whose waiter is a child of g, and so on up:
   * both waits are shielded once cancelled, so the deadlock rule would
   * only wake them to park again, turn after turn. */
  for (weft_task *t = self; t && t->on_exit == child_exit;) {
    weft_group *parent = t->on_exit_arg;
    if (parent == g)
      return -EDEADLK;
    t = parent->waiter;
  }
  if (g->waiter)
    return -EINVAL;
  g->waiter = self;
  int rc = weft__checkpoint();
  if (rc == 0)
    rc = wait_children(g);
  if (rc < 0 && rc != -ENOMEM) {
    /* Cancelled, or out of time: the group is cancelled (an empty one
     * too), children spawned from now on too, and they are waited for with
     * nothing from outside able to interrupt. (-ENOMEM, a deadline's timer
     * that could not be made, cancels nothing: the children run on, and a
     * later wait waits for them.) */
    weft_group_cancel(g);
    weft_scope shield;
    weft_scope_enter(&shield, WEFT_NEVER);
    weft_scope_shield(&shield, true);
    while (wait_children(g) < 0)
      ; /* only a deadlock's forced cancellation, which shields ignore */
    weft_scope_exit(&shield);
  }
  if (rc == 0)
    rc = g->err; /* the caller's own -ECANCELED or -ETIMEDOUT wins */
  g->waiter = NULL;
  free_if_done(g); /* given up by another task meanwhile */
  return rc;
}

void weft_group_free(weft_group *g) {
  if (!g || !on_group_thread(g, "weft_group_free"))
    return;
  g->freed = 1;
  if (g->nchildren || g->waiter)
    weft_group_cancel(g); /* and the last one out frees it */
  else
    free_if_done(g);
}
