/*
 * Layer 3, with tasks: cancellation and cancel scopes (trio's model).
 *
 * A task's scopes form a list on its own stack, innermost first
 * (t->scope, then priv_outer), ending at the task itself, whose
 * weft_cancel acts as the outermost scope. What a blocking call must
 * return is read off that list, from the inside out, stopping at the
 * first shielded scope:
 *
 *   call ── inner scope ── outer scope (shield) ─╳─ outer ── task
 *             deadline        cancelled?            not looked at
 *
 * -ECANCELED if a scope (or the task) on the way was cancelled; else
 * -ETIMEDOUT if one was past its deadline; else 0. Every scope on the way
 * past its deadline is marked expired, cancelled ones around it or not.
 * The state is level-triggered: it holds for every call until the scope
 * exits.
 *
 * Deadlines cost nothing until a task parks: entering a scope only records
 * the deadline. When a task inside parks, the earliest deadline in effect
 * gets a timer, which stays until it fires or its scope exits; the timer
 * re-checks the parked task. A scope whose body never blocks never touches
 * the timer heap.
 */
#include "internal.h"

#include <stdio.h>

int weft__cancel_status(weft_task *t) {
  /* Deadlines are judged by the turn's clock first; one it has not reached
   * by a fresh reading (the task may have run long since the turn began),
   * so a call that could complete at once is still stopped by a deadline
   * just past. Only calls inside a scope with a deadline pay for that. */
  int64_t now = weft__turn_now(t->loop);
  int fresh = 0, rc = 0;
  for (weft_scope *s = t->scope; s; s = s->priv_outer) {
    /* A cancelled scope decides the result, but the walk goes on: the
     * call still meets the deadlines of the scopes around it. */
    if (s->priv_flags & SCOPE_CANCELLED)
      rc = -ECANCELED;
    if (s->priv_deadline != WEFT_NEVER && s->priv_deadline > now && !fresh) {
      now = weft__clock_of(t->loop);
      fresh = 1;
    }
    /* Met once, met for good: a deadline moved later by
     * weft_scope_set_deadline does not let calls through again. */
    if (s->priv_deadline <= now || (s->priv_flags & SCOPE_EXPIRED)) {
      s->priv_flags |= SCOPE_EXPIRED;
      if (!rc)
        rc = -ETIMEDOUT;
    }
    if (s->priv_flags & SCOPE_SHIELD)
      return rc;
  }
  return (t->flags & TASK_CANCELLED) ? -ECANCELED : rc;
}

static void scope_expired(void *arg) {
  weft_scope *s = arg;
  s->priv_timer = NULL;
  weft__cancel_recheck(s->priv_task);
}

int weft__deadline_arm(weft_task *t) {
  weft_scope *first = NULL;
  for (weft_scope *s = t->scope; s; s = s->priv_outer) {
    if (s->priv_deadline != WEFT_NEVER &&
        (!first || s->priv_deadline < first->priv_deadline))
      first = s;
    if (s->priv_flags & SCOPE_SHIELD)
      break;
  }
  if (!first || first->priv_timer)
    return 0;
  first->priv_timer =
      weft__timer_arm(t->loop, first->priv_deadline, scope_expired, first);
  return first->priv_timer ? 0 : -ENOMEM;
}

void weft_scope_enter(weft_scope *s, int64_t deadline) {
  weft_task *t = weft__running_task();
  if (!s)
    return;
  /* Entered already in this task: linking it again would make the chain
   * a cycle, which every walk of it would go round for ever. */
  if (t)
    for (const weft_scope *x = t->scope; x; x = x->priv_outer)
      if (x == s)
        return;
  s->priv_timer = NULL;
  s->priv_deadline = deadline;
  if (!t) {
    s->priv_outer = NULL;
    s->priv_task = NULL;
    s->priv_flags = 0; /* not entered: exit says -EINVAL */
    return;
  }
  s->priv_outer = t->scope;
  s->priv_task = t;
  s->priv_flags = SCOPE_ENTERED;
  t->scope = s;
  if (weft__gen_running) /* the body of a generator: it must leave s first */
    (*weft__gen_scopes(weft__gen_running))++;
}

int weft_scope_exit(weft_scope *s) {
  weft_task *t = weft__running_task();
  if (!s || !t || !(s->priv_flags & SCOPE_ENTERED) || s->priv_task != t ||
      t->scope != s)
    return -EINVAL;
  /* Inside a generator's body, the innermost scope is the body's own if it
   * has entered any (it cannot yield inside one), else its caller's. */
  uint32_t *body =
      weft__gen_running ? weft__gen_scopes(weft__gen_running) : NULL;
  if (body && !*body)
    return -EINVAL;
  if (body)
    (*body)--;
  if (s->priv_timer) {
    weft__timer_disarm(s->priv_timer);
    s->priv_timer = NULL;
  }
  t->scope = s->priv_outer;
  s->priv_flags &= ~SCOPE_ENTERED;
  if (s->priv_flags & SCOPE_CANCELLED)
    return -ECANCELED;
  if (s->priv_flags & SCOPE_EXPIRED)
    return -ETIMEDOUT;
  return 0;
}

/* Whether s is entered and the caller is on its task's thread (any loop
 * of it, as weft_cancel allows): from another thread, waking the task
 * would push it onto its loop's ready queue while the loop runs. */
static int on_scope_thread(const weft_scope *s, const char *what) {
  if (!s || !(s->priv_flags & SCOPE_ENTERED))
    return 0;
  if (weft__on_thread(s->priv_task->loop->thread))
    return 1;
  fprintf(stderr, "weft: %s called off the loop's thread: ignored\n", what);
  return 0;
}

void weft_scope_cancel(weft_scope *s) {
  if (!on_scope_thread(s, "weft_scope_cancel"))
    return;
  s->priv_flags |= SCOPE_CANCELLED;
  weft__cancel_recheck(s->priv_task);
}

int weft_scope_set_deadline(weft_scope *s, int64_t deadline) {
  if (!s || !(s->priv_flags & SCOPE_ENTERED) ||
      s->priv_task->loop != weft__loop_running)
    return -EINVAL;
  if (s->priv_timer) { /* armed for the old deadline */
    weft__timer_disarm(s->priv_timer);
    s->priv_timer = NULL;
  }
  s->priv_deadline = deadline;
  /* A task parked inside: judged again, and the earliest deadline in
   * force armed (this one, or an outer one's now first). A running task
   * arms it when it next parks. */
  weft__cancel_recheck(s->priv_task);
  return 0;
}

void weft_scope_shield(weft_scope *s, bool on) {
  if (!on_scope_thread(s, "weft_scope_shield"))
    return;
  if (on) {
    s->priv_flags |= SCOPE_SHIELD;
    return;
  }
  s->priv_flags &= ~SCOPE_SHIELD;
  weft__cancel_recheck(s->priv_task); /* what it held back may apply now */
}
