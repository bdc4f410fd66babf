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
 */
#include "internal.h"

#include <errno.h>

struct weft_group {
  weft_loop *loop;
  weft_task *children; /* running, newest first */
  size_t nchildren;
  weft_task *waiter; /* the task in weft_group_wait, if any */
  int cancelled;     /* weft_group_cancel was called */
  int freed;         /* weft_group_free was called: last child frees it */
  /* While freed and children still run: the loop's list of such groups
   * (loop->freed_groups), which weft_loop_free empties when it drops the
   * children without running them to their end. */
  struct weft_group *freed_prev, *freed_next;
};

/* weft_loop_free: the children of these groups were dropped, not ended
 * (the loop's groups_free hook). */
static void groups_free(weft_loop *loop) {
  while (loop->freed_groups) {
    weft_group *g = loop->freed_groups;
    loop->freed_groups = g->freed_next;
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
  else if (g->freed) {
    if (g->freed_prev)
      g->freed_prev->freed_next = g->freed_next;
    else
      g->loop->freed_groups = g->freed_next;
    if (g->freed_next)
      g->freed_next->freed_prev = g->freed_prev;
    weft__free(g);
  }
}

weft_task *weft_group_spawn(weft_group *g, void *(*fn)(void *), void *arg) {
  if (!g || g->freed || !fn) {
    errno = EINVAL;
    return NULL;
  }
  weft_task_opts opts = {.loop = g->loop};
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

void weft_group_cancel(weft_group *g) {
  if (!g)
    return;
  g->cancelled = 1;
  cancel_children(g);
}

static void undo_wait(weft_task *t, void *arg) {
  weft_group *g = arg;
  (void)t;
  g->waiter = NULL;
}

int weft_group_wait(weft_group *g) {
  weft_task *self = weft__running_task();
  if (!g || !self || self->loop != g->loop || g->waiter)
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc == 0 && g->nchildren) {
    g->waiter = self;
    rc = weft__park(WAIT_GROUP, (int64_t)(uintptr_t)g, undo_wait, g);
    g->waiter = NULL;
  }
  if (rc < 0 && g->nchildren) {
    /* Cancelled, or out of time: the children go too, and are waited for
     * with nothing from outside able to interrupt. */
    cancel_children(g);
    weft_scope shield;
    weft_scope_enter(&shield, WEFT_NEVER);
    weft_scope_shield(&shield, true);
    while (g->nchildren) {
      g->waiter = self;
      weft__park(WAIT_GROUP, (int64_t)(uintptr_t)g, undo_wait, g);
      g->waiter = NULL;
    }
    weft_scope_exit(&shield);
  }
  return rc;
}

void weft_group_free(weft_group *g) {
  if (!g)
    return;
  if (g->nchildren == 0) {
    weft__free(g);
    return;
  }
  g->freed = 1;
  weft_loop *loop = g->loop;
  g->freed_prev = NULL;
  g->freed_next = loop->freed_groups;
  if (g->freed_next)
    g->freed_next->freed_prev = g;
  loop->freed_groups = g;
  loop->groups_free = groups_free;
  weft_group_cancel(g);
}
