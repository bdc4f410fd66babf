/*
 * Layer 4: the loop. For now it runs tasks from the ready queue until none
 * is left; timers, callbacks and the I/O backends slot into the marked
 * places of weft_loop_run as they arrive.
 */
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* This thread's loops, newest first: the head is weft_loop_current(). */
static WEFT__TLS weft_loop *thread_loops;

int64_t weft_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int backend_known(const char *name) {
  return !name || !*name || !strcmp(name, "epoll") || !strcmp(name, "poll");
}

weft_loop *weft_loop_new(const weft_config *cfg) {
  const char *backend =
      cfg && cfg->backend ? cfg->backend : getenv("WEFT_BACKEND");
  if (!backend_known(backend)) {
    errno = EINVAL;
    return NULL;
  }
  weft_loop *loop = weft__calloc(1, sizeof *loop);
  if (!loop)
    return NULL;
  loop->thread = pthread_self();
  loop->stack_size = weft__stack_round(cfg ? cfg->stack_size : 0);
  weft__overflow_init();
  loop->next_on_thread = thread_loops;
  thread_loops = loop;
  return loop;
}

weft_loop *weft_loop_current(void) {
  return weft__loop_running ? weft__loop_running : thread_loops;
}

void weft_loop_stop(weft_loop *loop) {
  if (loop)
    loop->stop = 1;
}

void weft_loop_free(weft_loop *loop) {
  if (!loop || loop->running)
    return;
  for (weft_loop **p = &thread_loops; *p; p = &(*p)->next_on_thread)
    if (*p == loop) {
      *p = loop->next_on_thread;
      break;
    }
  weft__tasks_free(loop);
  weft__stack_trim();
  weft__free(loop);
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

int weft_loop_run(weft_loop *loop) {
  if (!loop || loop->running || weft__loop_running ||
      !pthread_equal(loop->thread, pthread_self()))
    return -EINVAL;
  int saved_errno = errno;
  weft_gen *saved_gen = weft__gen_running;
  weft__loop_running = loop;
  loop->running = 1;
  loop->stop = 0;
  int rc = 0;
  for (;;) {
    if (loop->stop) {
      rc = 1;
      break;
    }
    if (loop->ready_head) {
      weft__run_ready(loop);
      continue;
    }
    /* (next: expired timers, callbacks, then wait in the backend until the
     * nearest timer.) */
    if (loop->nlive == 0)
      break;
    if ((rc = deadlocked(loop)) < 0)
      break;
  }
  loop->running = 0;
  weft__loop_running = NULL;
  weft__gen_running = saved_gen;
  errno = saved_errno;
  return rc;
}

struct main_call {
  int (*fn)(void *);
  void *arg;
  int rc;
};

static void *main_task(void *p) {
  struct main_call *m = p;
  m->rc = m->fn(m->arg);
  return NULL;
}

int weft_main(int (*fn)(void *), void *arg) {
  if (!fn)
    return -EINVAL;
  weft_loop *loop = weft_loop_new(NULL);
  if (!loop)
    return -errno;
  struct main_call m = {fn, arg, 0};
  weft_task_opts opts = {.name = "main", .loop = loop};
  weft_task *t = weft_spawn_opts(main_task, &m, &opts);
  if (!t) {
    int err = errno;
    weft_loop_free(loop);
    return -err;
  }
  weft_detach(t);
  int rc = weft_loop_run(loop);
  weft_loop_free(loop);
  return rc < 0 ? rc : m.rc;
}
