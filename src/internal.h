/*
 * What the scheduler and the loop share. Layers, bottom up (no layer calls
 * one above it; each file's first comment names its layer):
 *
 *   0  alloc, error              the one allocator, error names
 *   1  ctx, stack, overflow      the switch, guarded stacks, the overflow
 *                                handler
 *   2  gen                       generators: ctx + stack, no loop
 *   3  task, scope, timer, clock tasks, the ready queue, park/wake,
 *                                cancellation; timers and callbacks; the
 *                                thread's loops and weft_now
 *   4  loop, io, backend_*       weft_loop_run, the fd table and the I/O
 *                                calls, the backends (backend.h)
 *   5  net, stream, future, ...  everything built on the public calls
 *
 * docs/architecture.md has the picture and what each file may call.
 */
#ifndef WEFT_INTERNAL_H
#define WEFT_INTERNAL_H

#include "weft.h"

#include "alloc.h"
#include "ctx.h"
#include "stack.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>

/* The code that every I/O call, park, wake-up and turn of the loop runs
 * through, kept together in .text.hot (GCC's `hot` attribute; the linker
 * gathers those sections, and the cold blocks of these functions still go
 * to .text.unlikely). On a kernel with page-table isolation and no PCID,
 * as on the VMs weft is measured on, every system call empties the TLB, so
 * each distinct page the code touches between two calls costs a page
 * walk: spread over the library, these functions covered thirteen pages,
 * six of them between one task's send and the next task's recv; together
 * they take three. Mark only what runs per operation: tests/hot_layout.sh
 * checks that they stay together. */
#define WEFT__HOT __attribute__((hot))

/* Task states. A task is READY in the ready queue, RUNNING on the CPU,
 * WAITING when parked on something, DONE once fn has returned. */
enum { TASK_READY, TASK_RUNNING, TASK_WAITING, TASK_DONE, TASK_FREE };

/* Task flags. */
#define TASK_DETACHED  1u /* no handle: recycle at the end */
#define TASK_JOINING   2u /* a joiner waits for it */
#define TASK_CANCELLED 4u /* weft_cancel was called: level-triggered */
#define TASK_YIELDED   8u /* in the ready queue by weft_yield */
#define TASK_UNJOINED  16u /* ended, its handle not joined or detached yet */

/* What a parked task may be taken off when it is cancelled: called with
 * the task and the argument given to weft__park, before the task wakes. */
typedef void (*weft__undo_fn)(weft_task *t, void *arg);

/* Something a task holds across a wait that only its own code would give
 * back (a socket it is connecting, a select's array of waiters): if the
 * loop is freed with the task parked, weft__tasks_unpark drops it. */
typedef struct weft__held weft__held;
struct weft__held {
  weft__held *next, *prev;
  void (*drop)(weft_loop *loop, weft__held *h);
};

/* What a parked task waits on, for weft_dump; the park's `detail` says
 * which one (an fd number, a deadline, an address, a task id). */
enum {
  WAIT_NONE,
  WAIT_FD_READ,      /* detail: the fd */
  WAIT_FD_WRITE,     /* detail: the fd */
  WAIT_TIMER,        /* detail: the deadline */
  WAIT_FUTURE,       /* detail: the future's address */
  WAIT_JOIN,         /* detail: the joined task's id */
  WAIT_GROUP,        /* detail: the group's address */
  WAIT_MUTEX,        /* detail: the mutex's address */
  WAIT_COND,         /* detail: the condition variable's address */
  WAIT_SEM,          /* detail: the semaphore's address */
  WAIT_EVENT,        /* detail: the event's address */
  WAIT_SEND,         /* detail: the channel's address */
  WAIT_RECV,         /* detail: the channel's address */
  WAIT_SELECT,       /* detail: the number of cases */
  WAIT_MAILBOX,      /* detail: the actor's address (its recv) */
  WAIT_MAILBOX_FULL, /* detail: the actor's address (a send to it) */
  WAIT_ACTOR_END,    /* detail: the actor's address (weft_actor_wait) */
  WAIT_EXECUTOR,     /* detail: the function running on the pool */
  WAIT_LOOP,         /* detail: the id of the loop a call runs on */
  WAIT_OTHER,        /* detail: an address */
};

/* Scope flags (weft_scope.priv_flags). */
#define SCOPE_ENTERED   1u /* between enter and exit */
#define SCOPE_CANCELLED 2u /* weft_scope_cancel was called */
#define SCOPE_EXPIRED   4u /* a blocking call inside met the deadline */
#define SCOPE_SHIELD    8u /* outer cancellation does not reach inside */

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
  weft_scope *scope;    /* its innermost cancel scope, or NULL */
  int64_t waits_detail; /* what it is parked on (WAIT_*), for weft_dump */
  weft__undo_fn undo;   /* takes it off that on cancellation */
  void *undo_arg;
  void *io; /* its request in the backend's hands (io_uring: a uring_op,
             * which quiesce cancels), or NULL */
  /* Called as the task ends, after fn returned (groups use it). */
  void (*on_exit)(weft_task *t, void *arg);
  void *on_exit_arg;
  weft_task *sib_prev; /* links among the children of its group */
  weft_task *sib_next;
  weft_gen *gen;      /* the generator running inside it, if any */
  int wake_rc;        /* what weft__park returns */
  int saved_errno;    /* errno while switched out */
  uint16_t gen_count; /* handle generation: bumped on each recycle */
  uint8_t state;      /* TASK_* */
  uint8_t flags;      /* TASK_DETACHED | ... */
  uint8_t waits_on;   /* WAIT_* while parked */
};

/* Records come from slabs owned by the loop, so spawn allocates nothing in
 * the steady state. */
typedef struct weft__slab weft__slab;

/* One entry of the timer heap (timer.c). The key (deadline, seq) lives in
 * the entry itself, so sifting never touches the timer records; `id` names
 * the record. */
typedef struct weft__heap_entry {
  int64_t deadline;
  uint32_t seq; /* order of arming, for equal deadlines */
  uint32_t id;  /* the timer record */
} weft__heap_entry;

typedef struct weft__timer_rec weft__timer_rec;

/* A queued weft_call_soon. */
typedef struct weft__callback {
  void (*cb)(void *);
  void *arg;
} weft__callback;

typedef struct weft__fd weft__fd;
typedef struct weft__backend weft__backend;
struct weft__op; /* one I/O operation (backend.h) */

struct weft_loop {
  weft__ctx ctx;         /* the loop's own flow (the thread's stack) */
  uint64_t thread;       /* the thread that made it (its token) */
  weft_task *current;    /* the task running now, or NULL */
  weft_task *ready_head; /* FIFO of READY tasks */
  weft_task *ready_tail;
  weft_task *live;           /* every task not yet DONE */
  size_t nlive;              /* how many */
  size_t unjoined;           /* ended, handle neither joined nor detached */
  weft_task *free_recs;      /* recycled records */
  weft__slab *slabs;         /* all record memory */
  size_t stack_size;         /* default for its tasks */
  weft_loop *next_on_thread; /* the thread's older loops (weft_loop_current) */
  uint64_t id;               /* unique in the process, never reused */
  weft_task *dead;           /* ended; its stack awaits release (reap) */
  unsigned batch;            /* hand-offs left before the loop runs again */
  weft_task *batch_last;     /* the last task this turn runs (NULL: done) */
  int running;               /* inside weft_loop_run */
  int *errno_at;             /* &errno of its thread (no call per switch) */
  int stop;                  /* weft_loop_stop was called */
  /* Signals weft_signal_wait blocked (signal.c) during this run: they
   * stay blocked, and pending, when weft_loop_run takes back what it
   * blocked itself (emptied as each run starts). */
  sigset_t sig_kept;

  /* Time and timers (timer.c). */
  int64_t now;   /* weft_now() as first read in this turn (weft__turn_now) */
  int vclock;    /* weft_config.virtual_clock: weft_now() is vnow */
  int64_t vnow;  /* the virtual clock's time */
  int now_fresh; /* now was read in this turn */
  unsigned busy_turns; /* turns with work waiting since the last poll */
  uint64_t rng;        /* weft_select's random choice (chan.c); 0: unseeded */
  /* WEFT_SEED=n (task.c): the turn's ready tasks run in an order drawn
   * from this generator, not FIFO; 0: FIFO. */
  uint64_t shuffle_rng;
  weft__heap_entry *heap_mem;     /* allocation holding the heap ... */
  weft__heap_entry *heap;         /* ... whose root is heap[0] */
  uint32_t heap_len, heap_cap;    /* entries, room */
  uint32_t seq_next;              /* next arming's sequence number */
  weft__timer_rec **timer_chunks; /* each chunk's records (timer.c) */
  uint32_t timer_nchunks;
  uint32_t timer_free;  /* first free record id + 1 (0: none) */
  uint32_t timer_frees; /* records freed since the free list was sorted */

  /* Callbacks: a ring of pending weft_call_soon (timer.c); cb_reserved
   * slots of it are kept free for futures that will complete. */
  weft__callback *cbs;
  size_t cb_head, cb_len, cb_cap, cb_reserved;

  /* From other threads (loop.c): weft_call_soon_threadsafe's queue, taken
   * whole at the start of a turn, and the eventfd that wakes the backend.
   * ts_pending is read without the lock: nonzero once something is queued. */
  pthread_mutex_t ts_lock;
  weft__callback *ts_q, *ts_run; /* queued; being run (swapped) */
  size_t ts_len, ts_cap, ts_run_cap;
  size_t ts_run_pos, ts_run_len; /* ts_run's next to run, and its end */
  int ts_pending;      /* atomic: ts_len != 0, or a batch a stop cut */
  int ts_signalled;    /* the eventfd was written since the loop last blocked */
  int ts_missed;       /* the loop's last try for ts_lock found it held */
  int wake_fd;         /* read end of the wake-up (eventfd), in fds[] */
  int wake_wfd;        /* its write end (the same fd for an eventfd) */
  int refs;            /* atomic: weft_loop_ref minus weft_loop_unref */
  int quit_fd;         /* WEFT_DEBUG: SIGQUIT's signalfd while running, or -1 */
  int quit_waits;      /* weft_signal_wait calls for SIGQUIT in progress */
  int debug;           /* WEFT_DEBUG was set when the run began */
  int64_t slice_start; /* WEFT_DEBUG: when the running task got the CPU */

  /* The executor (executor.c): its pool, NULL until the first job, and
   * the pool's size from the config (0: the default). Workers push the
   * jobs they finish onto jobs_done (atomic, lock-free) and wake the loop;
   * each turn hands the list to jobs_deliver (below). jobs_pending
   * counts jobs not yet delivered: they keep the loop alive. */
  void *executor;
  unsigned executor_max;
  void *jobs_done;
  size_t jobs_pending;

  /* Futures (future.c): freed records kept for reuse. */
  struct weft_future *future_cache;
  void *future_chunks; /* future.c: where the records come from */

  /* Actors (actor.c): the registry of names and the actor records, or
   * NULL before the first spawn. */
  void *actors;

  /* The state above keeps what layer 5 keeps on the loop; the loop (layer
   * 4) does not call up into those parts by name: each sets its hooks here
   * when it first attaches state, and the loop calls them back. */
  void (*jobs_deliver)(weft_loop *loop); /* executor.c: jobs_done, a turn */
  void (*pool_free)(weft_loop *loop);    /* executor.c: first in loop_free */
  void (*futures_free)(weft_loop *loop); /* future.c: the record cache */
  void (*actors_free)(weft_loop *loop);  /* actor.c: the registry */
  void (*groups_free)(weft_loop *loop);  /* group.c: the loop's groups */
  struct weft_group *groups;             /* every group of the loop (group.c) */
  weft__held *held;                      /* held across waits (task.c) */

  /* I/O (io.c and the backend). */
  const weft__backend *backend;
  /* backend->io and backend->per_wait, copied here because every I/O call
   * and fd wake-up reads them: the loop's own memory instead of one more
   * page (the backend's table) after each system call (see WEFT__HOT). */
  ssize_t (*io)(weft_loop *loop, struct weft__op *op);
  int per_wait;
  void *backend_data; /* the backend's own state */
  weft__fd *fds;      /* indexed by fd number, grown on demand */
  size_t nfds;        /* entries in fds */
  size_t nwaiters;    /* tasks parked on an fd */
  int spare_fd;       /* for EMFILE at accept (-1: none yet) */
  unsigned io_budget; /* I/O calls before the caller yields (io.c) */

  void *user_data; /* the program's (weft_loop_set_data) */
};

/* The generator running on this thread (innermost), or NULL. gen.c. */
extern WEFT__TLS weft_gen *weft__gen_running;

/* A task dropped by weft_loop_free while inside generators (g the
 * innermost): they will never run again. Each is marked done and its
 * stack goes back to the pool, frames abandoned; the records stay for the
 * program's weft_gen_free. gen.c. */
void weft__gen_abandon(weft_gen *g);
/* Where the flow that first resumed g's chain (g and the generators that
 * resumed it) left its own stack: a task running or parked inside
 * generators is there on its own stack (weft_dump). NULL if not known (the
 * ucontext build). */
void *weft__gen_outer_sp(const weft_gen *g);

/* The count of scopes g's body has entered and not left (scope.c keeps
 * it): g may not yield or return inside one. gen.c. */
uint32_t *weft__gen_scopes(weft_gen *g);

/* A task's or a generator's body returned with a scope still entered: the
 * scope lives in a frame that is gone. Says so on stderr ("task" or
 * "generator", and its id) and aborts. gen.c. */
__attribute__((noreturn, cold)) void weft__left_in_scope(const char *what,
                                                         uint64_t id);

/* The loop running on this thread, or NULL outside weft_loop_run. */
extern WEFT__TLS weft_loop *weft__loop_running;

/* The calling thread's token: a number never reused in the process,
 * taken at the thread's first call. What owners are recorded by, not the
 * pthread_t, which glibc gives an exited thread's successor (a loop left
 * behind by an exited thread would pass for the new one's). gen.c. */
uint64_t weft__thread_token(void);

/* The calling thread's token, 0 before it took one. */
extern WEFT__TLS uint64_t weft__thread_token_now;

/* Whether the caller is on the thread of `token` (one load, where
 * pthread_self is a call; a thread that took no token owns nothing). */
static inline int weft__on_thread(uint64_t token) {
  return token == weft__thread_token_now;
}

/* Whether the caller may use an object of `loop`, which was made on
 * `thread` (a token: a task, a channel, an actor): it is on that thread,
 * running no other loop. From anywhere else weft_call_soon_threadsafe is
 * the way in; the calls that check this refuse (-EINVAL) rather than race
 * with the loop. The thread is passed apart from the loop for objects that
 * may outlive it (a channel: the loop is then not read). */
static inline int weft__callers(const weft_loop *loop, uint64_t thread) {
  return weft__loop_running ? weft__loop_running == loop
                            : weft__on_thread(thread);
}

/* Suspends the running task until weft__wake(t, rc) and returns rc; `what`
 * shows in weft_dump. If the task is cancelled while parked, undo(t, arg)
 * takes it off what it waited on and park returns -ECANCELED; if it was
 * cancelled before, park returns -ECANCELED at once without suspending.
 * Must be called from a task. */
int weft__park(int what, int64_t detail, weft__undo_fn undo, void *arg);

/* weft__park for a caller that has the running task t at hand (the loop's
 * current): the I/O wait parks once per message, and spares the look-up. */
int weft__park_task(weft_task *t, int what, int64_t detail, weft__undo_fn undo,
                    void *arg);

/* Parks the running task without looking at cancellation, for a backend
 * that must see a request end before the caller's buffer may go: returns
 * the rc it is woken with, which a cancellation (-ECANCELED...) may also
 * give, early; the caller parks again until what it waits for is done. */
int weft__park_raw(int what, int64_t detail);

/* Makes a parked task ready with park's return value `rc`. No effect on a
 * task that is not parked. */
void weft__wake(weft_task *t, int rc);

/* A task parked in a FIFO queue (sync.c's mutex, cond, sem and event,
 * actor.c's senders and tasks waiting for an end, chan.c's senders and
 * receivers): a record on the task's stack, linked into the queue whose
 * head and tail pointers it names. */
typedef struct weft__queued {
  weft_task *task;
  struct weft__queued *prev, *next;
  void **head, **tail;
} weft__queued;

/* Links w, for task t, at the tail of the queue (*head, *tail). Inline:
 * a channel's hand-off does this and the next on every message. */
static inline void weft__enqueue(weft__queued *w, weft_task *t, void **head,
                                 void **tail) {
  *w = (weft__queued){t, *tail, NULL, head, tail};
  if (*tail)
    ((weft__queued *)*tail)->next = w;
  else
    *head = w;
  *tail = w;
}

/* Takes w off its queue. */
static inline void weft__unqueue(weft__queued *w) {
  if (w->prev)
    w->prev->next = w->next;
  else
    *w->head = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else
    *w->tail = w->prev;
}

/* Parks the running task t, with w (on its stack) at the tail of the queue
 * (*head, *tail), until weft__wake_first takes it off; a cancelled or
 * timed-out wait takes itself off. Returns what weft__park returns. */
int weft__park_queued(weft__queued *w, weft_task *t, void **head, void **tail,
                      int kind, const void *what);

/* Takes the first record off the queue and wakes its task with rc; the
 * record, or NULL if the queue is empty. */
weft__queued *weft__wake_first(void **head, int rc);

/* Runs the tasks that are ready, in order, until the queue is empty or
 * WEFT__BATCH of them have run; tasks hand the CPU to each other directly,
 * and the loop gets it back at the end (task.c). A task woken meanwhile
 * runs in this turn too, after those queued before it; one that yielded
 * waits for the next turn. */
void weft__run_ready(weft_loop *loop);

/* While tasks are ready, the loop looks at I/O (a poll that does not
 * block) once in this many turns; a turn runs at most WEFT__BATCH tasks. */
#define WEFT__BUSY_POLL 4
/* Busy turns with no waiter to poll between looks at the stack pool's
 * windows (weft__stack_tidy), while it keeps a burst's stacks warm. */
#define WEFT__STACK_TIDY_TURNS 64

/* Task switches in one turn of the loop before it looks at timers and I/O. */
#define WEFT__BATCH 64

/* I/O calls that complete at once, in a row (a call that parks starts the
 * count again), after which the calling task yields (io.c): a task whose socket
 * always has data cannot keep the others, or the loop's own poll, waiting. */
#define WEFT__IO_BUDGET 128

/* Counts one more such call (an I/O call, a stream read, a file read that
 * never waits): 1 when the budget is spent, the count started again, and
 * the caller is to yield. */
static inline int weft__io_budget_spent(weft_loop *loop) {
  if (__builtin_expect(--loop->io_budget != 0, 1))
    return 0;
  loop->io_budget = WEFT__IO_BUDGET;
  return 1;
}

/* Cancels every parked task of the loop: they can never be woken (task.c). */
void weft__cancel_parked(weft_loop *loop);

/* Frees every record and stack of the loop's tasks (task.c). */
void weft__tasks_unpark(weft_loop *loop); /* weft_loop_free: out of queues */

/* An accept that failed for want of fds or memory (-EMFILE, -ENFILE,
 * -ENOBUFS, -ENOMEM): the connection stays in the kernel's backlog and a
 * later accept can take it, so the error is not the listener's (io.c's
 * weft_accept backs off and retries; io_uring's multishot accept keeps no
 * such error for the next call). */
static inline int weft__accept_short_of(long err) {
  return err == -EMFILE || err == -ENFILE || err == -ENOBUFS || err == -ENOMEM;
}

/* h is held by the running task until weft__unhold (task.c). */
void weft__hold(weft__held *h, void (*drop)(weft_loop *, weft__held *));
void weft__unhold(weft__held *h);

/* The same for an fd: the loop closes it if the task is dropped (io.c,
 * for net.c connecting and signal.c waiting). */
typedef struct {
  weft__held h;
  int fd;
} weft__held_fd;
void weft__hold_fd(weft__held_fd *h, int fd);
void weft__tasks_free(weft_loop *loop);

/* Reads WEFT_SEED into the loop's generators (task.c). */
void weft__seed_init(weft_loop *loop);

/* weft_run_in_thread_with, which also says whether the job was queued:
 * *queued is 1 from the moment it is, and an error returned after that
 * (-ECANCELED, -ETIMEDOUT) means its result goes to opts->release; 0 with
 * an error means fn never runs (executor.c). `how`, weft's own jobs':
 * with WEFT__JOB_CHECK a caller cancelled (or past a deadline) already
 * gets the error with nothing queued (a user's job is queued all the
 * same, and the error then means fn runs); with WEFT__JOB_DROP, a job
 * whose caller stops waiting before a worker took it is not run at all:
 * its result is then `arg` itself, as it is when fn has run (fn must
 * return arg, and release must tell a job not run from arg alone).
 * Without it fn runs all the same. */
#define WEFT__JOB_CHECK 1
#define WEFT__JOB_DROP  2
int weft__run_in_thread(void *(*fn)(void *), void *arg, void **result,
                        const weft_submit_opts *opts, int *queued, int how);

/* A process-unique id for a task or a generator (gen.c). */
uint64_t weft__next_id(void);

/* The running task, or NULL. Inline: every I/O call asks, twice. */
static inline weft_task *weft__running_task(void) {
  weft_loop *loop = weft__loop_running;
  return loop ? loop->current : NULL;
}

/* What a blocking call of t must return now because of cancellation:
 * 0, -ECANCELED or -ETIMEDOUT (scope.c). */
int weft__cancel_status(weft_task *t);

/* 0, or -ECANCELED / -ETIMEDOUT if the running task has been cancelled or
 * is inside a scope past its deadline: the check every blocking call makes
 * first, even when it could complete at once. -EINVAL outside a task.
 * weft__checkpoint_task is the check for a caller that has the running
 * task t at hand. */
static inline int weft__checkpoint_task(weft_task *t) {
  if (__builtin_expect(!(t->flags & TASK_CANCELLED) && !t->scope, 1))
    return 0;
  return weft__cancel_status(t);
}

static inline int weft__checkpoint(void) {
  weft_task *t = weft__running_task();
  if (!t)
    return -EINVAL;
  return weft__checkpoint_task(t);
}

/* The task is about to park: arms the timer of the earliest deadline among
 * its scopes in effect, if it has none yet (scope.c). 0 or -ENOMEM. */
int weft__deadline_arm(weft_task *t);

/* Something about t's cancellation changed (weft_cancel, a scope cancelled,
 * expired or unshielded): if t is parked and must now stop, wake it with
 * the status; if it is parked and still waits, make sure the earliest
 * deadline has its timer (scope.c, task.c). */
void weft__cancel_recheck(weft_task *t);

/* The record behind a task handle, NULL if stale; cancelling a record
 * (task.c). */
weft_task *weft__task_record(const weft_task *h);
void weft__task_cancel(weft_task *t);

/* Wakes parked t with rc after undoing its wait (task.c). */
void weft__cancel_parked_task(weft_task *t, int rc);

/* Timers for the layers above (timer.c): arm a callback at an absolute
 * deadline (NULL: no memory), and disarm one that has not fired. */
weft__timer_rec *weft__timer_arm(weft_loop *loop, int64_t deadline,
                                 void (*cb)(void *), void *arg);
void weft__timer_disarm(weft__timer_rec *r);

/* Callback slots kept for futures (timer.c): reserve makes sure a later
 * weft__call_soon_reserved cannot fail (0 or -ENOMEM); unreserve gives a
 * reservation back unused. */
int weft__call_soon_reserve(weft_loop *loop);
void weft__call_soon_unreserve(weft_loop *loop);
void weft__call_soon_reserved(weft_loop *loop, void (*cb)(void *), void *arg);
/* The same at the head of the queue: it runs before every callback queued
 * (a run cut short by weft_loop_stop puts its rest back there). */
void weft__call_soon_first(weft_loop *loop, void (*cb)(void *), void *arg);

/* Runs the callbacks other threads queued (loop.c). */
void weft__threadsafe_run(weft_loop *loop);

/* For weft_loop_free's hooks: hands each callback other threads queued
 * that has not run (a batch a stop cut short, then the queue) to visit,
 * and forgets it; none runs (loop.c). */
void weft__threadsafe_drain(weft_loop *loop,
                            void (*visit)(const weft__callback *c));

/* Wakes the loop if it waits in its backend: from any thread (loop.c). */
void weft__loop_wake(weft_loop *loop);

/* The same for work pushed onto one of the loop's lock-free lists
 * (jobs_done), with weft_call_soon_threadsafe's economy: no write while
 * the loop has been woken since it last blocked, or from its own thread.
 * The push must be sequentially consistent (loop.c's ts_arm). */
void weft__loop_nudge(weft_loop *loop);

/* A pending future of `loop`, one reference; NULL (ENOMEM) (future.c). */
weft_future *weft__future_new_in(weft_loop *loop);

/* A future's reference count (future.c). */
uint32_t weft__future_refs(const weft_future *f);

/* f (a weft_submit future about to get its value, or an actor's reply)
 * hands a value nobody took (weft_await, weft_future_result) to
 * release(value, arg) when its last reference goes (future.c). */
void weft__future_releases(weft_future *f, void (*release)(void *, void *),
                           void *arg);

/* f is a job's future (weft_submit, weft_submit_to_loop), marked when
 * made; weft__future_job_loop is then its loop, if the caller is on that
 * loop's thread, else NULL (and for any other future) (future.c). */
void weft__future_mark_job(weft_future *f);
weft_loop *weft__future_job_loop(const weft_future *f);

/* Forgets what the loop knows of fd, waking its waiters with -EBADF: what
 * weft_close does before close() (io.c). */
void weft__fd_forget(weft_loop *loop, int fd);

/* WEFT_DEBUG's SIGQUIT signalfd is readable: print the dump (loop.c). */
void weft__quit_fd_read(weft_loop *loop);
/* Closes that signalfd, if open: at the end of the run, or when a task
 * waits for SIGQUIT itself (signal.c: the program's wait gets it). */
void weft__quit_close(weft_loop *loop);

/* The eventfd that wakes the loop fired: drain it (loop.c). */
void weft__wake_fd_drain(weft_loop *loop);

/* Timers and callbacks (timer.c). weft__timers_fire runs every timer due
 * at loop->now; weft__callbacks_run the callbacks queued before it was
 * called. weft__timers_next is the nearest deadline or WEFT_NEVER; it
 * may move heap entries (a root left behind by a lazy re-arm sinks). */
void weft__timers_fire(weft_loop *loop);
void weft__callbacks_run(weft_loop *loop);
int64_t weft__timers_next(weft_loop *loop);
void weft__timers_free(weft_loop *loop);

/* Sets the next sequence number (tests: to reach the renumbering that
 * keeps 32-bit sequence numbers ordered). */
void weft__timer_seq_set(weft_loop *loop, uint32_t seq);

/* The thread's loops and their clock (clock.c): CLOCK_MONOTONIC in ns;
 * the thread's list of loops, whose head is weft_loop_current(), which
 * weft_loop_new and weft_loop_free keep. */
int64_t weft__real_now(void);
void weft__thread_loop_add(weft_loop *loop);
void weft__thread_loop_remove(weft_loop *loop);
/* A child of fork(2): the parent's loops are not the thread's any more. */
void weft__thread_loops_forget(void);
/* Whether the loop of that id is one of this thread's and not yet freed. */
int weft__thread_loop_alive(uint64_t id);

/* loop's own clock (its virtual one, if it has it), whichever loop is
 * current: a timer of a loop that is not is measured on its loop's time. */
int64_t weft__clock_of(const weft_loop *loop);

/* The loop's clock in this turn: read at its start if timers are armed,
 * else at the first call that needs it (a clock read costs ~28 ns in this
 * VM, a quarter of a yield), then the same for the rest of the turn. */
static inline int64_t weft__turn_now(weft_loop *loop) {
  if (__builtin_expect(!loop->now_fresh, 0)) {
    loop->now = weft__clock_of(loop);
    loop->now_fresh = 1;
  }
  return loop->now;
}

/* The loop's clock for arming timers: loop->now while it runs, else now. */
int64_t weft__loop_clock(weft_loop *loop);

#endif
