/*
 * Layer 3: the thread's loops and their clock. Which loop is this
 * thread's (weft_loop_current) and what time it is (weft_now) are what
 * the timers, the tasks and the scopes ask; the loop (layer 4) registers
 * each loop here when it is made and takes it off when it is freed.
 */
#include "internal.h"

#include <time.h>

/* This thread's loops, newest first: the head is weft_loop_current(). */
static WEFT__TLS weft_loop *thread_loops;

int64_t weft__real_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int64_t weft__clock_of(const weft_loop *loop) {
  if (__builtin_expect(loop && loop->vclock, 0))
    return loop->vnow;
  return weft__real_now();
}

/* The clock of the loop running on this thread (or, outside a run, of the
 * thread's current loop): the virtual one if that loop has it. */
int64_t weft_now(void) { return weft__clock_of(weft_loop_current()); }

weft_loop *weft_loop_current(void) {
  return weft__loop_running ? weft__loop_running : thread_loops;
}

void weft__thread_loop_add(weft_loop *loop) {
  loop->next_on_thread = thread_loops;
  thread_loops = loop;
}

int weft__thread_loop_alive(uint64_t id) {
  for (const weft_loop *l = thread_loops; l; l = l->next_on_thread)
    if (l->id == id)
      return 1;
  return 0;
}

void weft__thread_loops_forget(void) { thread_loops = NULL; }

void weft__thread_loop_remove(weft_loop *loop) {
  for (weft_loop **p = &thread_loops; *p; p = &(*p)->next_on_thread)
    if (*p == loop) {
      *p = loop->next_on_thread;
      return;
    }
}
