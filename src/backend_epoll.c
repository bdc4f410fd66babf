/*
 * Layer 4: the epoll backend (Linux's default). Each fd is registered once,
 * when weft first sees it, for both directions and edge-triggered; the
 * registration stays until weft_close. So a wait costs no epoll_ctl: a
 * task that parks on an fd just links itself to the fd's entry, and an
 * event wakes whoever is linked there (io.c). Edge-triggering is what
 * makes that safe: an fd that stays readable while nobody waits is
 * reported once (it becomes a ready hint), not on every epoll_wait.
 */
#include "backend.h"
#include "tools.h"

#ifdef __linux__

#include <errno.h>
#include <limits.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

/* Events fetched per epoll_wait: grows while a wait fills the array. */
#define EVENTS_MIN 64
#define EVENTS_MAX 4096

typedef struct epoll_state {
  int epfd;
  int cap; /* room in events */
  struct epoll_event *events;
} epoll_state;

/* epoll_pwait2 is missing (ENOSYS: before Linux 5.11, or under a tool that
 * does not know it, like valgrind 3.19): learnt once per process. Relaxed
 * atomics: any thread may learn it first; a stale 0 costs one ENOSYS.
 * Under valgrind it is never tried: 3.19 prints a warning of many lines
 * for the first call. */
static int no_pwait2;

static int epoll_init(weft_loop *loop) {
  epoll_state *st = weft__calloc(1, sizeof *st);
  if (!st)
    return -ENOMEM;
  st->cap = EVENTS_MIN;
  st->events = weft__malloc((size_t)st->cap * sizeof *st->events);
  st->epfd = epoll_create1(EPOLL_CLOEXEC);
  if (!st->events || st->epfd < 0) {
    int err = st->events ? errno : ENOMEM;
    if (st->epfd >= 0)
      close(st->epfd);
    weft__free(st->events);
    weft__free(st);
    return -err;
  }
  loop->backend_data = st;
  if (RUNNING_ON_VALGRIND)
    __atomic_store_n(&no_pwait2, 1, __ATOMIC_RELAXED);
  return 0;
}

static void epoll_fini(weft_loop *loop) {
  epoll_state *st = loop->backend_data;
  if (!st)
    return;
  close(st->epfd);
  weft__free(st->events);
  weft__free(st);
  loop->backend_data = NULL;
}

/* One wait; ns precision with epoll_pwait2 (Linux 5.11), else whole
 * milliseconds rounded up, so that a timer is never woken for early. */
static WEFT__HOT int wait_events(epoll_state *st, int64_t timeout) {
  if (timeout < 0)
    return epoll_wait(st->epfd, st->events, st->cap, -1);
  if (!__atomic_load_n(&no_pwait2, __ATOMIC_RELAXED)) {
    struct timespec ts = {(time_t)(timeout / 1000000000),
                          (long)(timeout % 1000000000)};
    int n = epoll_pwait2(st->epfd, st->events, st->cap, &ts, NULL);
    if (n >= 0 || errno != ENOSYS)
      return n;
    __atomic_store_n(&no_pwait2, 1, __ATOMIC_RELAXED);
  }
  int64_t ms = (timeout + 999999) / 1000000;
  return epoll_wait(st->epfd, st->events, st->cap,
                    ms > INT_MAX ? INT_MAX : (int)ms);
}

static WEFT__HOT int epoll_poll(weft_loop *loop, int64_t timeout) {
  epoll_state *st = loop->backend_data;
  int n = wait_events(st, timeout);
  if (n < 0)
    return errno == EINTR ? 0 : -errno;
  for (int i = 0; i < n; i++) {
    uint32_t ev = st->events[i].events;
    int events = 0;
    if (ev & (EPOLLIN | EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
      events |= WEFT_READ;
    if (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))
      events |= WEFT_WRITE;
    if (ev & (EPOLLPRI | EPOLLRDHUP | EPOLLHUP | EPOLLERR))
      events |= WEFT__EXCEPT;
    weft__fd_event_inline(loop, st->events[i].data.fd, events);
  }
  if (n == st->cap && st->cap < EVENTS_MAX) {
    struct epoll_event *v =
        weft__realloc(st->events, 2 * (size_t)st->cap * sizeof *v);
    if (v) {
      st->events = v;
      st->cap *= 2;
    }
  }
  return n;
}

static int epoll_watch(weft_loop *loop, int fd, weft__fd *e) {
  if (e->flags & FD_WATCHED)
    return 0;
  epoll_state *st = loop->backend_data;
  struct epoll_event ev = {.events = EPOLLIN | EPOLLPRI | EPOLLOUT |
                                     EPOLLRDHUP | EPOLLET,
                           .data.fd = fd};
  /* The loop's own fds are only read. An eventfd is always writable, and
   * each read of it is a new EPOLLOUT edge: watched for it, every wake-up
   * from another thread (and the first wait) woke the loop a second time,
   * for nothing. */
  if (e->flags & FD_WAKE)
    ev.events = EPOLLIN | EPOLLET;
  if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
    /* EEXIST: a dup of a closed fd kept its registration; take it over. */
    if (errno != EEXIST || epoll_ctl(st->epfd, EPOLL_CTL_MOD, fd, &ev) < 0)
      return -errno;
  }
  e->flags |= FD_WATCHED;
  return 0;
}

static void epoll_unwatch(weft_loop *loop, int fd, weft__fd *e, int closing) {
  if (!closing || !(e->flags & FD_WATCHED))
    return; /* the registration covers both directions: keep it */
  epoll_state *st = loop->backend_data;
  epoll_ctl(st->epfd, EPOLL_CTL_DEL, fd, NULL);
  e->flags &= (uint8_t)~FD_WATCHED;
}

const weft__backend weft__backend_epoll = {
    .name = "epoll",
    .init = epoll_init,
    .fini = epoll_fini,
    .poll = epoll_poll,
    .io = weft__io_readiness,
    .watch = epoll_watch,
    .unwatch = epoll_unwatch,
    .per_wait = 0,
};

#endif
