/*
 * What the scheduler and the loop share. Layers, bottom up (no layer calls
 * one above it):
 *
 *   ctx, stack, alloc   the switch, guarded stacks, the one allocator
 *   gen                 generators: ctx + stack, no loop
 *   task                tasks, the ready queue, park/wake, cancellation
 *   loop                the loop object and weft_loop_run / weft_main
 *
 * docs/architecture.md has the picture.
 */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "weft.h"

#include "alloc.h"
#include "ctx.h"
#include "stack.h"

#include <pthread.h>
#include <stdint.h>

/* Task states. A task is READY in the ready queue, RUNNING on the CPU,
 * WAITING when parked on something, DONE once fn has returned. */
enum { TASK_READY, TASK_RUNNING, TASK_WAITING, TASK_DONE, TASK_FREE };

/* Task flags. */
#define TASK_DETACHED  1u /* no handle: recycle at the end */
#define TASK_JOINING   2u /* a joiner waits for it */
#define TASK_CANCELLED 4u /* weft_cancel was called: level-triggered */

/* What a parked task may be taken off when it is cancelled: called with
 * the task and the argument given to weft__park, before the task wakes. */
typedef void (*weft__undo_fn)(weft_task *t, void *arg);

struct weft_task {
  weft__ctx ctx;         /* where the task is suspended */
  weft__stack *stack;    /* its stack; NULL once finished */
  weft_loop *loop;       /* the loop it belongs to */
  void *(*fn)(void *);   /* what it runs ... */
  void *arg;             /* ... with this */
  void *result;          /* fn's return value, for the joiner */
  uint64_t id;           /* unique in the process, from 1 */
  char *name;            /* owned copy, or NULL */
  weft_task *next_ready; /* link in the loop's ready queue */
  weft_task *prev_live;  /* links in the loop's list of live tasks */
  weft_task *next_live;
  weft_task *joiner;    /* the task waiting in weft_join, if any */
  const char *waits_on; /* what it is parked on, for weft_dump */
  weft__undo_fn undo;   /* takes it off that on cancellation */
  void *undo_arg;
  weft_gen *gen;      /* the generator running inside it, if any */
  int wake_rc;        /* what weft__park returns */
  int saved_errno;    /* errno while switched out */
  uint16_t gen_count; /* handle generation: bumped on each recycle */
  uint8_t state;      /* TASK_* */
  uint8_t flags;      /* TASK_DETACHED | ... */
};

/* Records come from slabs owned by the loop, so spawn allocates nothing in
 * the steady state. */
typedef struct weft__slab weft__slab;

struct weft_loop {
  weft__ctx ctx;         /* the loop's own flow (the thread's stack) */
  pthread_t thread;      /* the thread that made it */
  weft_task *current;    /* the task running now, or NULL */
  weft_task *ready_head; /* FIFO of READY tasks */
  weft_task *ready_tail;
  weft_task *live;           /* every task not yet DONE */
  size_t nlive;              /* how many */
  weft_task *free_recs;      /* recycled records */
  weft__slab *slabs;         /* all record memory */
  size_t stack_size;         /* default for its tasks */
  weft_loop *next_on_thread; /* the thread's older loops (weft_loop_current) */
  weft_task *dead;           /* ended; its stack awaits release (reap) */
  unsigned batch;            /* hand-offs left before the loop runs again */
  int running;               /* inside weft_loop_run */
  int stop;                  /* weft_loop_stop was called */
};

/* The generator running on this thread (innermost), or NULL. gen.c. */
extern WEFT__TLS weft_gen *weft__gen_running;

/* The loop running on this thread, or NULL outside weft_loop_run. */
extern WEFT__TLS weft_loop *weft__loop_running;

/* Suspends the running task until weft__wake(t, rc) and returns rc; `what`
 * shows in weft_dump. If the task is cancelled while parked, undo(t, arg)
 * takes it off what it waited on and park returns -ECANCELED; if it was
 * cancelled before, park returns -ECANCELED at once without suspending.
 * Must be called from a task. */
int weft__park(const char *what, weft__undo_fn undo, void *arg);

/* Makes a parked task ready with park's return value `rc`. No effect on a
 * task that is not parked. */
void weft__wake(weft_task *t, int rc);

/* Runs ready tasks, in order, until none is ready or WEFT__BATCH of them
 * have run; tasks hand the CPU to each other directly, and the loop gets it
 * back at the end (task.c). */
void weft__run_ready(weft_loop *loop);

/* Task switches in one turn of the loop before it looks at timers and I/O. */
#define WEFT__BATCH 64

/* Cancels every parked task of the loop: they can never be woken (task.c). */
void weft__cancel_parked(weft_loop *loop);

/* Frees every record and stack of the loop's tasks (task.c). */
void weft__tasks_free(weft_loop *loop);

/* A process-unique id for a task or a generator (task.c). */
uint64_t weft__next_id(void);

#endif
