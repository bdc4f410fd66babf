/*
 * Layer 4: the loop. One turn reads the clock, runs the callbacks queued
 * before it, fires the timers that are due, runs the ready tasks, and then
 * waits in the backend: not at all if something is ready, else until the
 * nearest timer, or for ever if there is none (seed 003's select with a
 * timeout capped by the nearest timer). The loop ends when nothing is left.
 */
#include "backend.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#else
#include <fcntl.h>
#endif

/* The backend a name selects: NULL or "" is the platform's default.
 * "io_uring" in a build without liburing gives the default, with the
 * notice of a failed io_uring init. */
static const weft__backend *backend_named(const char *name) {
  static const weft__backend *const all[] = {
#ifdef __linux__
      &weft__backend_epoll,
#endif
      &weft__backend_poll,
#ifdef WEFT_HAVE_URING
      &weft__backend_uring,
#endif
  };
  if (!name || !*name)
    return all[0];
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (!strcmp(all[i]->name, name))
      return all[i];
  if (!strcmp(name, "io_uring"))
    return all[0];
  return NULL;
}

/* io_uring could not be had (no liburing at build time, a kernel without
 * it or without what weft uses, a seccomp filter, a memlock limit): the
 * loop falls back to the default backend, and says so once a process. */
static void uring_notice(int err) {
  static int said;
  if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    return;
#ifdef WEFT_HAVE_URING
  const char *why = weft__uring_why_not();
  fprintf(stderr, "weft: io_uring unavailable (%s); using %s\n",
          why ? why : strerror(err), backend_named(NULL)->name);
#else
  (void)err;
  fprintf(stderr,
          "weft: io_uring unavailable (built without liburing); "
          "using %s\n",
          backend_named(NULL)->name);
#endif
}

/* ---- wake-ups from other threads --------------------------------------
 * weft_call_soon_threadsafe appends to a queue under a short lock and, if
 * the loop has not been signalled since it last went to wait (ts_arm),
 * writes the eventfd the backend watches: one wake-up per batch, however
 * many calls.
 * The loop takes the whole queue at the start of a turn (swapping it with
 * an empty array, so the callbacks run without the lock); a stop in one
 * of them leaves the rest of that batch for the next run. */
static int wake_open(weft_loop *loop) {
#ifdef __linux__
  int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (fd < 0)
    return -errno;
  loop->wake_fd = loop->wake_wfd = fd;
#else
  int p[2];
  if (pipe(p) < 0)
    return -errno;
  for (int i = 0; i < 2; i++) {
    fcntl(p[i], F_SETFD, FD_CLOEXEC);
    fcntl(p[i], F_SETFL, O_NONBLOCK);
  }
  loop->wake_fd = p[0];
  loop->wake_wfd = p[1];
#endif
  weft__fd *e = weft__fd_get(loop, loop->wake_fd);
  if (!e)
    return -ENOMEM;
  e->flags = FD_KNOWN | FD_WAKE;
  e->wanted = WEFT_READ; /* for ever: no waiter list counts for it */
  return loop->backend->watch(loop, loop->wake_fd, e);
}

static void wake_close(weft_loop *loop) {
  if (loop->wake_wfd >= 0 && loop->wake_wfd != loop->wake_fd)
    close(loop->wake_wfd);
  if (loop->wake_fd >= 0)
    close(loop->wake_fd);
  loop->wake_fd = loop->wake_wfd = -1;
}

void weft__loop_wake(weft_loop *loop) {
  uint64_t one = 1;
  ssize_t n;
  do
    n = write(loop->wake_wfd, &one, sizeof one);
  while (n < 0 && errno == EINTR);
  /* EAGAIN: the counter (or the pipe) is full, so the loop wakes anyway. */
}

void weft__loop_nudge(weft_loop *loop) {
  /* The loop's own thread looks at its lists before it next blocks. */
  if (weft__loop_running == loop)
    return;
  /* (Sequentially consistent, as the caller's push and ts_arm's clear
   * and look: either the loop sees the push, or this sees the clear.) */
  if (!__atomic_exchange_n(&loop->ts_signalled, 1, __ATOMIC_SEQ_CST))
    weft__loop_wake(loop);
}

void weft__wake_fd_drain(weft_loop *loop) {
  uint64_t buf[8];
  while (read(loop->wake_fd, buf, sizeof buf) > 0)
    ;
}

static int on_loop_thread(const weft_loop *loop) {
  return weft__loop_running == loop;
}

int weft_call_soon_threadsafe(weft_loop *loop, void (*cb)(void *), void *arg) {
  if (!loop || !cb)
    return -EINVAL;
  pthread_mutex_lock(&loop->ts_lock);
  if (loop->ts_len == loop->ts_cap) {
    size_t cap = loop->ts_cap ? loop->ts_cap * 2 : 64;
    weft__callback *v = weft__realloc(loop->ts_q, cap * sizeof *v);
    if (!v) {
      pthread_mutex_unlock(&loop->ts_lock);
      return -ENOMEM;
    }
    loop->ts_q = v;
    loop->ts_cap = cap;
  }
  loop->ts_q[loop->ts_len++] = (weft__callback){cb, arg};
  __atomic_store_n(&loop->ts_pending, 1, __ATOMIC_RELEASE);
  /* The write is made under the lock, once per batch: once the lock is
   * released the callback may run, and the loop be freed, at any moment.
   * The loop's own thread needs no wake-up: it looks at the queue before
   * it next blocks. */
  if (!__atomic_load_n(&loop->ts_signalled, __ATOMIC_RELAXED) &&
      !on_loop_thread(loop)) {
    __atomic_store_n(&loop->ts_signalled, 1, __ATOMIC_RELAXED);
    weft__loop_wake(loop);
  }
  pthread_mutex_unlock(&loop->ts_lock);
  return 0;
}

/* Takes the queue whole, swapping it for the emptied array of the last
 * batch, and unlocks: the callbacks queued are ts_run's from 0 to the
 * returned count. Called with ts_lock held (the last batch run out). */
static size_t ts_take(weft_loop *loop) {
  weft__callback *run = loop->ts_q;
  size_t n = loop->ts_len, cap = loop->ts_cap;
  loop->ts_q = loop->ts_run;
  loop->ts_cap = loop->ts_run_cap;
  loop->ts_len = 0;
  loop->ts_run = run;
  loop->ts_run_cap = cap;
  loop->ts_run_pos = 0;
  loop->ts_run_len = n;
  __atomic_store_n(&loop->ts_pending, 0, __ATOMIC_RELAXED);
  pthread_mutex_unlock(&loop->ts_lock);
  return n;
}

void weft__threadsafe_run(weft_loop *loop) {
  /* A batch cut short by weft_loop_stop is finished first. */
  if (loop->ts_run_pos == loop->ts_run_len) {
    /* A sender holds the lock: take the queue at the next turn. Waiting
     * for the lock would put the loop to sleep on it, and on a shared CPU
     * the sender's unlock would then wake the loop and hand it the CPU,
     * for a batch of one or two, over and over. */
    if (pthread_mutex_trylock(&loop->ts_lock) != 0) {
      /* Missed twice in a row, the sender may have lost its CPU holding
       * the lock: turning without it would spin the loop (a zero-timeout
       * poll every few turns) until the sender runs again. Give the CPU up
       * once (where the two share one, the sender then finishes, and the
       * loop takes a whole batch later), then wait for the lock. */
      if (!loop->ts_missed++)
        return;
      sched_yield();
      if (pthread_mutex_trylock(&loop->ts_lock) != 0)
        pthread_mutex_lock(&loop->ts_lock);
    }
    loop->ts_missed = 0;
    /* ts_signalled stays: while the loop is busy, senders need not write
     * the eventfd (each write would wake and preempt it for a tiny
     * batch); ts_arm clears it just before the loop blocks. */
    ts_take(loop);
  }
  while (loop->ts_run_pos < loop->ts_run_len && !loop->stop) {
    weft__callback c = loop->ts_run[loop->ts_run_pos++];
    c.cb(c.arg);
  }
  /* Stopped: the rest stays for the next run, before anything newer. */
  if (loop->ts_run_pos < loop->ts_run_len)
    __atomic_store_n(&loop->ts_pending, 1, __ATOMIC_RELAXED);
}

void weft__threadsafe_drain(weft_loop *loop,
                            void (*visit)(const weft__callback *c)) {
  /* A batch a stop cut short first, then the queue, taken whole as a turn
   * takes it (visit may take the lock: weft_loop_unref). */
  for (;;) {
    while (loop->ts_run_pos < loop->ts_run_len)
      visit(&loop->ts_run[loop->ts_run_pos++]);
    pthread_mutex_lock(&loop->ts_lock);
    if (ts_take(loop) == 0)
      return;
  }
}

/* The loop is about to block for `timeout`: from now on a sender must
 * write the eventfd. Returns 0 if something was queued meanwhile (do not
 * block), else timeout. */
static int64_t ts_arm(weft_loop *loop, int64_t timeout) {
  /* Read without the lock: only the loop clears it, so a stale value can
   * only be a 0 for a 1, and then the eventfd was written: no wait. */
  if (timeout == 0 || !__atomic_load_n(&loop->ts_signalled, __ATOMIC_RELAXED))
    return timeout;
  pthread_mutex_lock(&loop->ts_lock);
  if (loop->ts_len)
    timeout = 0;
  else
    __atomic_store_n(&loop->ts_signalled, 0, __ATOMIC_SEQ_CST);
  pthread_mutex_unlock(&loop->ts_lock);
  /* A finished job pushed before the clear found the flag set and wrote
   * nothing (weft__loop_nudge): look at the list once more. */
  if (timeout != 0 && __atomic_load_n(&loop->jobs_done, __ATOMIC_SEQ_CST))
    timeout = 0;
  return timeout;
}

void weft_loop_ref(weft_loop *loop) {
  if (loop)
    __atomic_add_fetch(&loop->refs, 1, __ATOMIC_ACQ_REL);
}

void weft_loop_unref(weft_loop *loop) {
  if (!loop)
    return;
  /* The last reference gone, a loop blocked for it must look again. Under
   * the lock, as above: the loop may end (and be freed) as soon as it sees
   * no reference, and weft_loop_free takes the lock before it closes. */
  pthread_mutex_lock(&loop->ts_lock);
  if (__atomic_load_n(&loop->refs, __ATOMIC_ACQUIRE) == 0) {
    /* One unref too many: taken as held, the count would keep the loop
     * waiting for ever. */
    pthread_mutex_unlock(&loop->ts_lock);
    fprintf(stderr, "weft: weft_loop_unref without a reference: ignored\n");
    return;
  }
  if (__atomic_sub_fetch(&loop->refs, 1, __ATOMIC_ACQ_REL) == 0 &&
      !on_loop_thread(loop))
    weft__loop_wake(loop);
  pthread_mutex_unlock(&loop->ts_lock);
}

/* ---- loops ------------------------------------------------------------ */
/* The loop's backend, and the copies of its fields that the I/O paths
 * read (internal.h). */
static void use_backend(weft_loop *loop, const weft__backend *backend) {
  loop->backend = backend;
  loop->io = backend->io;
  loop->per_wait = backend->per_wait;
}

/* A child of fork(2) has copies of its parent's loops that are not its
 * own: their pools' threads are not in the child, and their epoll sets,
 * eventfds and rings are still the parent's. So the child's thread is
 * taken for a new one: a fresh token, with which every call on those loops
 * and their objects is refused as from another thread (weft_loop_free of
 * one frees nothing, rather than wait for ever to join the pool's threads),
 * and no loops of its own yet. A loop running in the thread that forked
 * stops as soon as the task that forked yields, blocks or ends (or the
 * callback returns), and its weft_loop_run returns -EINVAL: the parent's
 * other tasks do not run on in the child. (posix_spawn, system and popen
 * run no fork handlers; they need none.) */
static int forked_watch(weft_loop *loop, int fd, weft__fd *e) {
  (void)loop, (void)fd, (void)e;
  return 0;
}

static void forked_unwatch(weft_loop *loop, int fd, weft__fd *e, int closing) {
  (void)loop, (void)fd, (void)e, (void)closing;
}

static int forked_poll(weft_loop *loop, int64_t timeout) {
  (void)loop, (void)timeout;
  return -EINVAL;
}

/* The backend the running loop gets in the child: its epoll set and ring
 * are still the parent's, so the calls the child's task or callback makes
 * until it is done leave them alone. A call that does not wait is made
 * directly (weft_close is a plain close: an EPOLL_CTL_DEL of the shared set
 * would take the fd from the parent's registrations, and an SQE written
 * into the shared ring wedged the parent's); one that would wait parks
 * for ever. */
static weft__backend forked_backend = {
    .io = weft__io_readiness,
    .watch = forked_watch,
    .unwatch = forked_unwatch,
    .poll = forked_poll,
};

static void forked_child(void) {
  weft__thread_token_now = 0;
  weft__thread_loops_forget();
  if (weft__loop_running) {
    weft__loop_running->stop = 1;
    forked_backend.name = weft__loop_running->backend->name;
    use_backend(weft__loop_running, &forked_backend);
  }
}

static void watch_forks(void) { pthread_atfork(NULL, NULL, forked_child); }

weft_loop *weft_loop_new(const weft_config *cfg) {
  static pthread_once_t forks_once = PTHREAD_ONCE_INIT;
  pthread_once(&forks_once, watch_forks);
  const char *name =
      cfg && cfg->backend ? cfg->backend : getenv("WEFT_BACKEND");
  const weft__backend *backend = backend_named(name);
  if (!backend) { /* a typo in WEFT_BACKEND would otherwise go unexplained */
    fprintf(stderr, "weft: no backend named \"%s\" (epoll, poll, io_uring)\n",
            name);
    errno = EINVAL;
    return NULL;
  }
  int want_uring = name && !strcmp(name, "io_uring");
  if (want_uring && strcmp(backend->name, "io_uring"))
    uring_notice(ENOSYS);
  size_t stack_size = weft__stack_round(cfg ? cfg->stack_size : 0);
  if (!stack_size) { /* past any stack that could be mapped */
    errno = EINVAL;
    return NULL;
  }
  weft_loop *loop = weft__calloc(1, sizeof *loop);
  if (!loop)
    return NULL;
  static uint64_t ids;
  loop->id = __atomic_add_fetch(&ids, 1, __ATOMIC_RELAXED);
  loop->thread = weft__thread_token();
  loop->stack_size = stack_size;
  loop->executor_max = cfg ? cfg->executor_threads : 0;
  if (cfg && cfg->virtual_clock) {
    loop->vclock = 1;
    loop->vnow = weft__real_now();
  }
  loop->spare_fd = -1;
  loop->io_budget = WEFT__IO_BUDGET;
  use_backend(loop, backend);
  loop->wake_fd = loop->wake_wfd = -1;
  loop->quit_fd = -1;
  sigemptyset(&loop->sig_kept);
  int rc = backend->init(loop);
  /* Out of memory is an error, not a reason to change backends; the
   * kernel refusing a ring (a memlock limit) is a reason. */
#ifdef WEFT_HAVE_URING
  int kernel_said = rc < 0 && (rc != -ENOMEM || weft__uring_why_not());
#else
  int kernel_said = rc < 0 && rc != -ENOMEM;
#endif
  if (rc < 0 && want_uring && kernel_said) {
    uring_notice(-rc);
    use_backend(loop, backend = backend_named(NULL));
    rc = backend->init(loop);
  }
  if (rc < 0) {
    weft__free(loop);
    errno = -rc;
    return NULL;
  }
  if ((rc = wake_open(loop)) < 0) {
    weft__fds_free(loop);
    backend->fini(loop);
    wake_close(loop);
    weft__free(loop);
    errno = -rc;
    return NULL;
  }
  pthread_mutex_init(&loop->ts_lock, NULL);
  weft__seed_init(loop);
  weft__overflow_init();
  weft__thread_loop_add(loop);
  return loop;
}

void weft_loop_stop(weft_loop *loop) {
  if (loop)
    loop->stop = 1;
}

void weft_loop_free(weft_loop *loop) {
  if (!loop)
    return;
  /* The loop is its thread's: the thread's list of loops, its stack pool,
   * and (io_uring, SINGLE_ISSUER) the only ring that can wait out the
   * requests still writing into the tasks' stacks. Freed from another
   * thread, the loop is left as it is (and nothing of it is read: it may
   * be running there). */
  if (!weft__on_thread(loop->thread)) {
    fprintf(stderr, "weft: weft_loop_free called off the loop's thread "
                    "(or in a child of fork(2)): the loop is not freed\n");
    return;
  }
  if (loop->running)
    return; /* from inside its own run: see weft.h */
  weft__thread_loop_remove(loop);
  /* With WEFT_DEBUG (of the last run), handles that were never joined or
   * detached: each held a record until now (a join cut short by a
   * cancellation leaves one behind). */
  if (loop->debug && loop->unjoined)
    fprintf(stderr,
            "weft: %zu task%s ended but never joined or detached (their "
            "records were held until weft_loop_free)\n",
            loop->unjoined, loop->unjoined == 1 ? "" : "s");
  /* Tasks that never finished leave the queues they wait in, before the
   * pool and the kernel let go of what those waits refer to. */
  weft__tasks_unpark(loop);
  /* The pool next: a job may still be using a task's stack (its arg). */
  /* (Atomic: another loop's call may have set it, executor.c.) */
  void (*pool_free)(weft_loop *) =
      __atomic_load_n(&loop->pool_free, __ATOMIC_RELAXED);
  if (pool_free)
    pool_free(loop);
  /* And the kernel's: a request in flight may still write into a stack. */
  if (loop->backend->quiesce)
    loop->backend->quiesce(loop);
  /* The actors' leftover messages go to their release callbacks while the
   * loop's futures and callbacks are still there: a request's reply may be
   * cancelled and released there (its waiters have left it above; its
   * done-callbacks are queued and never run). */
  if (loop->actors_free)
    loop->actors_free(loop);
  weft__tasks_free(loop);
  weft__stack_trim();
  weft__timers_free(loop);
  if (loop->futures_free)
    loop->futures_free(loop);
  if (loop->groups_free) /* after the tasks: their children are gone */
    loop->groups_free(loop);
  weft__fds_free(loop);
  loop->backend->fini(loop);
  /* A thread may still be inside weft_call_soon_threadsafe or
   * weft_loop_unref, writing the eventfd: it holds the lock until done. */
  pthread_mutex_lock(&loop->ts_lock);
  wake_close(loop);
  pthread_mutex_unlock(&loop->ts_lock);
  pthread_mutex_destroy(&loop->ts_lock);
  weft__free(loop->ts_q);
  weft__free(loop->ts_run);
  weft__free(loop);
}

const char *weft_loop_backend(const weft_loop *loop) {
  return loop ? loop->backend->name : NULL;
}

void weft_loop_set_data(weft_loop *loop, void *data) {
  if (loop)
    loop->user_data = data;
}

void *weft_loop_data(const weft_loop *loop) {
  return loop ? loop->user_data : NULL;
}

int64_t weft_loop_now(void) {
  weft_loop *loop = weft__loop_running;
  return loop ? weft__turn_now(loop) : weft_now();
}

static int debug_enabled(void) {
  const char *d = getenv("WEFT_DEBUG");
  return d && *d && strcmp(d, "0") != 0;
}

/* Tasks are left, none is ready and nothing else could ever make one ready:
 * cancel them, so their blocking calls return -ECANCELED and they can
 * clean up (SPEC, "Running"). Returns -EDEADLK if that woke nobody. */
static int deadlocked(weft_loop *loop) {
  if (debug_enabled()) {
    fprintf(stderr, "weft: deadlock: no task can ever wake; cancelling them\n");
    weft_dump(stderr);
  }
  weft__cancel_parked(loop);
  return loop->ready_head ? 0 : -EDEADLK;
}

/* A write to a pipe whose reader is gone raises SIGPIPE, which kills the
 * process by default; sockets avoid it with MSG_NOSIGNAL, but pipes have no
 * such flag. So the loop's thread blocks SIGPIPE while the loop runs (the
 * write then fails with EPIPE); with WEFT_DEBUG, SIGQUIT too, which the
 * loop reads from a signalfd to print the task dump. On the way out it
 * takes back those that became pending meanwhile and unblocks only what
 * it blocked (weft_signal_wait's signals stay blocked), leaving the thread
 * as it found it. A SIGPIPE that another process sent (kill, sigqueue) or
 * that this one queued (sigqueue: SI_QUEUE) was not the loop's doing: it
 * is raised again once unblocked, for the program's disposition. The
 * kernel marks a write's SIGPIPE as sent by the writing process with kill
 * (SI_USER), so one this process sends itself with kill is taken back too
 * (and with raise or pthread_kill, which recent kernels mark SI_USER as
 * well). */
typedef struct {
  sigset_t mine;    /* what the guard blocked (was not blocked before) */
  sigset_t pending; /* of those, what was pending before: left be */
} sig_guard;

static void sig_block(sig_guard *g, int debug) {
  sigset_t want, old, pending;
  sigemptyset(&want);
  sigaddset(&want, SIGPIPE);
  if (debug)
    sigaddset(&want, SIGQUIT);
  pthread_sigmask(SIG_BLOCK, &want, &old);
  sigemptyset(&g->mine);
  sigemptyset(&g->pending);
  if (sigpending(&pending) != 0)
    sigemptyset(&pending);
  for (int sig = 1; sig < NSIG; sig++)
    if (sigismember(&want, sig) == 1 && !sigismember(&old, sig)) {
      sigaddset(&g->mine, sig);
      if (sigismember(&pending, sig) == 1)
        sigaddset(&g->pending, sig);
    }
}

static void sig_restore(sig_guard *g, const sigset_t *kept) {
  sigset_t pending, take;
  sigemptyset(&take);
  for (int sig = 1; sig < NSIG; sig++) /* weft_signal_wait's stay blocked */
    if (sigismember(kept, sig) == 1)
      sigdelset(&g->mine, sig);
  if (sigpending(&pending) == 0)
    for (int sig = 1; sig < NSIG; sig++)
      if (sigismember(&g->mine, sig) == 1 && sigismember(&pending, sig) == 1 &&
          !sigismember(&g->pending, sig))
        sigaddset(&take, sig);
  struct timespec zero = {0, 0};
  siginfo_t si;
  int sig, sent = 0;
  while (!sigisemptyset(&take) &&
         ((sig = sigtimedwait(&take, &si, &zero)) > 0 || errno == EINTR))
    if (sig == SIGPIPE && si.si_code <= 0 &&
        (si.si_code != SI_USER || si.si_pid != getpid()))
      sent = 1;
  pthread_sigmask(SIG_UNBLOCK, &g->mine, NULL);
  if (sent)
    raise(SIGPIPE);
}

/* ---- WEFT_DEBUG's SIGQUIT ---------------------------------------------
 * A signalfd for SIGQUIT, watched like the wake-up fd while the loop runs:
 * SIGQUIT prints the task dump (as Go's runtime does) at the loop's next
 * look at I/O. A task that never yields delays it, but then the slow-task
 * report names that task. */
#ifdef __linux__
static void quit_open(weft_loop *loop) {
  sigset_t quit;
  sigemptyset(&quit);
  sigaddset(&quit, SIGQUIT);
  int fd = signalfd(-1, &quit, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0)
    return;
  weft__fd *e = weft__fd_get(loop, fd);
  if (!e) {
    close(fd);
    return;
  }
  e->flags = FD_KNOWN | FD_WAKE;
  e->wanted = WEFT_READ;
  if (loop->backend->watch(loop, fd, e) < 0) {
    memset(e, 0, sizeof *e);
    close(fd);
    return;
  }
  loop->quit_fd = fd;
}

void weft__quit_close(weft_loop *loop) {
  if (loop->quit_fd < 0)
    return;
  weft__fd_forget(loop, loop->quit_fd);
  close(loop->quit_fd);
  loop->quit_fd = -1;
}
#else
static void quit_open(weft_loop *loop) { (void)loop; }
void weft__quit_close(weft_loop *loop) { (void)loop; }
#endif

void weft__quit_fd_read(weft_loop *loop) {
#ifdef __linux__
  struct signalfd_siginfo si;
  int n = 0;
  while (read(loop->quit_fd, &si, sizeof si) == (ssize_t)sizeof si)
    n++;
  if (n) {
    fprintf(stderr, "weft: SIGQUIT: the tasks of loop %p\n", (void *)loop);
    weft_dump(stderr);
  }
#else
  (void)loop;
#endif
}

/* The stack pool keeps a recent burst's stacks warm and gives their pages
 * back once its windows have passed (stack.h): the loop looks at it at each
 * poll, and wakes for it rather than sleep past it. */
static __attribute__((noinline)) int64_t stack_tidy(int64_t timeout) {
  int64_t again = weft__stack_tidy(weft__real_now());
  return again >= 0 && (timeout < 0 || timeout > again) ? again : timeout;
}

/* The turns of the loop, until nothing is left (0), it is stopped (1) or
 * the backend fails (its negative errno). Not inlined into weft_loop_run,
 * whose set-up is cold, so that it goes with the hot code. */
static WEFT__HOT __attribute__((noinline)) int run_turns(weft_loop *loop) {
  int rc = 0;
  for (;;) {
    /* The clock is read here only if a timer may be due; else lazily. */
    loop->now_fresh = 0;
    if (loop->heap_len)
      weft__turn_now(loop);
    if (__atomic_load_n(&loop->ts_pending, __ATOMIC_ACQUIRE))
      weft__threadsafe_run(loop);
    if (__atomic_load_n(&loop->jobs_done, __ATOMIC_RELAXED) && !loop->stop)
      loop->jobs_deliver(loop);
    /* What was queued before the turn runs before the timers that came
     * due meanwhile (seed 003 looks at its sleepers only when nothing is
     * ready; asyncio and tornado do the same). A turn with neither makes
     * neither call. */
    if (loop->cb_len)
      weft__callbacks_run(loop);
    if (loop->heap_len)
      weft__timers_fire(loop);
    if (loop->ready_head && !loop->stop)
      weft__run_ready(loop);
    if (loop->stop) {
      rc = 1;
      break;
    }
    /* Re-read everything: the callbacks and tasks just run may have armed
     * timers, queued callbacks, woken tasks or closed fds. */
    int64_t timeout, next;
    if (loop->ready_head || loop->cb_len ||
        __atomic_load_n(&loop->ts_pending, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&loop->jobs_done, __ATOMIC_RELAXED)) {
      /* Work is waiting, so the backend is only looked at, not waited
       * on; and only every WEFT__BUSY_POLL turns, or a loop whose tasks
       * wake each other would pay a system call per turn. (WEFT_DEBUG's
       * SIGQUIT fd counts as a waiter: the dump is for such a loop.) */
      if (loop->nwaiters == 0 && loop->quit_fd < 0) {
        /* Nothing to poll, so the pool's windows would never pass while
         * the tasks keep busy: tidy it every WEFT__STACK_TIDY_TURNS turns
         * instead (a clock read), and only while it holds a burst. */
        if (__builtin_expect(weft__stack_tidy_wanted, 0) &&
            ++loop->busy_turns >= WEFT__STACK_TIDY_TURNS) {
          loop->busy_turns = 0;
          stack_tidy(-1);
        }
        continue;
      }
      if (++loop->busy_turns < WEFT__BUSY_POLL)
        continue;
      timeout = 0;
    } else if (loop->heap_len &&
               (next = weft__timers_next(loop)) != WEFT_NEVER) {
      /* (Timers at WEFT_NEVER never fire: they count as none.) */
      int64_t now = weft_now();
      timeout = next <= now ? 0 : next - now;
      if (loop->vclock && timeout > 0) {
        /* Autojump: look at I/O without waiting; if nothing came, the
         * next deadline is now. */
        loop->busy_turns = 0;
        if ((rc = loop->backend->poll(loop, 0)) < 0)
          break;
        if (rc == 0 && !loop->ready_head && !loop->cb_len)
          loop->vnow = next;
        rc = 0;
        continue;
      }
    } else if (loop->nwaiters || loop->jobs_pending ||
               __atomic_load_n(&loop->refs, __ATOMIC_ACQUIRE)) {
      /* fd waits, jobs on the pool, or a reference held for a thread */
      timeout = -1;
    } else if (__atomic_load_n(&loop->ts_pending, __ATOMIC_ACQUIRE)) {
      /* A thread queued a callback between the look at the queue above
       * and dropping its reference (seen just now): run it first. */
      continue;
    } else if (loop->nlive == 0) {
      break; /* nothing is left */
    } else {
      if ((rc = deadlocked(loop)) < 0)
        break;
      continue;
    }
    loop->busy_turns = 0;
    if (__builtin_expect(weft__stack_tidy_wanted, 0))
      timeout = stack_tidy(timeout);
    timeout = ts_arm(loop, timeout);
    if ((rc = loop->backend->poll(loop, timeout)) < 0)
      break;
    rc = 0;
  }
  return rc;
}

int weft_loop_run(weft_loop *loop) {
  if (!loop || loop->running || weft__loop_running ||
      !weft__on_thread(loop->thread))
    return -EINVAL;
  if (loop->stop) { /* asked for before this run: it runs nothing */
    loop->stop = 0;
    return 1;
  }
  int saved_errno = errno;
  int debug = debug_enabled();
  sig_guard guard;
  sig_block(&guard, debug);
  /* What an earlier run's weft_signal_wait kept blocked is the program's
   * again (it may have unblocked it since): this run keeps only what its
   * own calls block. */
  sigemptyset(&loop->sig_kept);
  /* Called from inside a generator: the loop's own flow is inside none (a
   * callback's weft_gen_yield would suspend the loop half-run). */
  weft_gen *saved_gen = weft__gen_running;
  weft__gen_running = NULL;
  weft__loop_running = loop;
  loop->errno_at = &errno;
  loop->running = 1;
  loop->debug = debug;
  loop->slice_start = 0;
  /* (A weft_signal_wait for SIGQUIT closes it, and one still waiting
   * from an earlier run keeps it closed: signal.c.) */
  if (debug && !loop->quit_waits)
    quit_open(loop);
  int rc = run_turns(loop);
  if (!weft__on_thread(loop->thread)) { /* forked_child stopped it */
    fprintf(stderr, "weft: a child of fork(2) does not run its parent's "
                    "loop: weft_loop_run returns -EINVAL\n");
    rc = -EINVAL;
  }
  loop->stop = 0; /* a stop is for the run it ends */
  loop->running = 0;
  weft__loop_running = NULL;
  weft__gen_running = saved_gen;
  weft__quit_close(loop);
  sig_restore(&guard, &loop->sig_kept);
  errno = saved_errno;
  return rc;
}

struct main_call {
  int (*fn)(void *);
  void *arg;
  int rc;
  int done; /* fn has returned rc */
};

static void *main_task(void *p) {
  struct main_call *m = p;
  m->rc = m->fn(m->arg);
  m->done = 1;
  return NULL;
}

int weft_main(int (*fn)(void *), void *arg) {
  return weft_main_with(NULL, fn, arg);
}

int weft_main_with(const weft_config *cfg, int (*fn)(void *), void *arg) {
  if (!fn)
    return -EINVAL;
  weft_loop *loop = weft_loop_new(cfg);
  if (!loop)
    return -errno;
  struct main_call m = {fn, arg, 0, 0};
  weft_task_opts opts = {.name = "main", .loop = loop};
  weft_task *t = weft_spawn_opts(main_task, &m, &opts);
  if (!t) {
    int err = errno;
    weft_loop_free(loop);
    return -err;
  }
  weft_detach(t);
  int rc = weft_loop_run(loop);
  if (weft__on_thread(loop->thread)) /* not in a child of fork(2) */
    weft_loop_free(loop);
  if (rc < 0)
    return rc;
  /* Stopped (weft_loop_stop) before fn returned: it has no value. */
  return m.done ? m.rc : -EINTR;
}
