/*
 * Layer 4: the poll backend: portable, level-triggered. Only fds that some task
 * waits on are in the pollfd array (a slot each, found through the fd's
 * entry), so an fd nobody waits for never wakes the loop; when its last
 * waiter goes, its slot is given to the array's last fd.
 */
#include "backend.h"

#include <errno.h>
#include <poll.h>
#include <time.h>

typedef struct poll_state {
  struct pollfd *pfds; /* the fds being waited on */
  size_t len, cap;
  struct pollfd *fired; /* a copy of those that fired, dispatched after
                         * (cap entries too) */
} poll_state;

static int poll_init(weft_loop *loop) {
  poll_state *st = weft__calloc(1, sizeof *st);
  if (!st)
    return -ENOMEM;
  loop->backend_data = st;
  return 0;
}

static void poll_fini(weft_loop *loop) {
  poll_state *st = loop->backend_data;
  if (!st)
    return;
  weft__free(st->pfds);
  weft__free(st->fired);
  weft__free(st);
  loop->backend_data = NULL;
}

static short poll_events(uint8_t wanted) {
  return (short)((wanted & WEFT_READ ? POLLIN : 0) |
                 (wanted & WEFT_WRITE ? POLLOUT : 0));
}

static int poll_watch(weft_loop *loop, int fd, weft__fd *e) {
  poll_state *st = loop->backend_data;
  if (!e->wanted)
    return 0; /* first sight of the fd: nothing to wait for yet */
  if (e->flags & FD_WATCHED) {
    st->pfds[e->slot].events = poll_events(e->wanted);
    return 0;
  }
  if (st->len == st->cap) {
    /* fired grows with pfds, so that poll_poll never allocates: a failure
     * here goes back to the task that would wait. */
    size_t cap = st->cap ? st->cap * 2 : 64;
    struct pollfd *v = weft__realloc(st->pfds, cap * sizeof *v);
    if (!v)
      return -ENOMEM;
    st->pfds = v;
    if (!(v = weft__realloc(st->fired, cap * sizeof *v)))
      return -ENOMEM;
    st->fired = v;
    st->cap = cap;
  }
  st->pfds[st->len] = (struct pollfd){fd, poll_events(e->wanted), 0};
  e->slot = (uint32_t)st->len++;
  e->flags |= FD_WATCHED;
  return 0;
}

static void poll_unwatch(weft_loop *loop, int fd, weft__fd *e, int closing) {
  poll_state *st = loop->backend_data;
  (void)fd;
  if (!(e->flags & FD_WATCHED))
    return;
  if (!closing && e->wanted) {
    st->pfds[e->slot].events = poll_events(e->wanted);
    return;
  }
  struct pollfd last = st->pfds[--st->len];
  if (e->slot < st->len) {
    st->pfds[e->slot] = last;
    loop->fds[last.fd].slot = e->slot;
  }
  e->flags &= (uint8_t)~FD_WATCHED;
}

static WEFT__HOT int poll_poll(weft_loop *loop, int64_t timeout) {
  poll_state *st = loop->backend_data;
  struct timespec ts = {(time_t)(timeout / 1000000000),
                        (long)(timeout % 1000000000)};
  int n = ppoll(st->pfds, (nfds_t)st->len, timeout < 0 ? NULL : &ts, NULL);
  if (n < 0)
    return errno == EINTR ? 0 : -errno;
  if (n == 0)
    return 0;
  /* Waking a task changes the array (its slot goes): copy first, into
   * fired, which is as large as pfds. */
  size_t k = 0;
  for (size_t i = 0; i < st->len && k < (size_t)n; i++)
    if (st->pfds[i].revents)
      st->fired[k++] = st->pfds[i];
  for (size_t i = 0; i < k; i++) {
    short r = st->fired[i].revents;
    int events = 0;
    /* An error, a hang-up or a bad fd wakes both ways: the retried call
     * reports it. */
    if (r & (POLLIN | POLLPRI | POLLERR | POLLHUP | POLLNVAL))
      events |= WEFT_READ;
    if (r & (POLLOUT | POLLERR | POLLHUP | POLLNVAL))
      events |= WEFT_WRITE;
    weft__fd_event(loop, st->fired[i].fd, events);
  }
  return (int)k;
}

const weft__backend weft__backend_poll = {
    .name = "poll",
    .init = poll_init,
    .fini = poll_fini,
    .poll = poll_poll,
    .io = weft__io_readiness,
    .watch = poll_watch,
    .unwatch = poll_unwatch,
    .per_wait = 1,
};
