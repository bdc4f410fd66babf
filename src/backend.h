/*
 * The backend interface: what waits for events, and how one I/O operation
 * is carried out. One file per backend implements it:
 *
 *   backend_epoll.c   readiness, edge-triggered, one registration per fd
 *   backend_poll.c    readiness, level-triggered, only fds being waited on
 *   backend_uring.c   completions: each operation is an io_uring request
 *
 * The unit is the operation (weft__op: a recv, a send, an accept...), not
 * the readiness event, so that a completion backend (io_uring) can submit
 * the operation itself and wake the task with its result. The readiness
 * backends share weft__io_readiness (io.c): try the call; on EAGAIN park
 * the task on the fd until the backend reports it ready; try again.
 */
#ifndef WEFT_BACKEND_H
#define WEFT_BACKEND_H

#include "internal.h"

#include <sys/socket.h>
#include <sys/types.h>

/* What an operation does: the POSIX call of the same name. */
enum {
  OP_READ,
  OP_WRITE,
  OP_RECV,
  OP_SEND,
  OP_RECVFROM,
  OP_SENDTO,
  OP_ACCEPT,
  OP_CONNECT,
  OP_FILE_READ, /* file.c's try of the page cache (fault.h only) */
};

/* The operations that wait for input (readable), the others for output. */
static inline __attribute__((always_inline)) int weft__op_is_input(int kind) {
  return kind == OP_READ || kind == OP_RECV || kind == OP_RECVFROM ||
         kind == OP_ACCEPT;
}

/* One I/O operation and its arguments; it lives on the caller's stack. */
typedef struct weft__op {
  int kind;              /* OP_* */
  int fd;                /* the file descriptor */
  void *buf;             /* data (const for the writes) */
  size_t len;            /* its length */
  int flags;             /* MSG_* for recv/send */
  struct sockaddr *addr; /* recvfrom, accept: out; sendto, connect: in */
  socklen_t *addrlen;    /* recvfrom, accept: in/out */
  socklen_t addrlen_in;  /* sendto, connect */
  uint8_t plain;         /* io_uring: a request of its own, not the
                          * multishot recv's queue */
} weft__op;

/* A task parked on an fd (on its own stack while it waits). */
typedef struct weft__waiter {
  weft_task *task;
  int fd;
  int events;                /* WEFT_READ | WEFT_WRITE it waits for */
  int revents;               /* what woke it */
  struct weft__waiter *prev; /* links in the fd's list of waiters */
  struct weft__waiter *next;
} weft__waiter;

/* fd entry flags. (FD_EXCEPT: a short read no longer tells that the fd is
 * drained; see WEFT__EXCEPT. Set from the start on a pipe, which a writer
 * with O_DIRECT fills with packets, and on a Unix stream socket once a read
 * stopped short at a message that carried fds: io.c's top.) */
#define FD_KNOWN      1u /* probed: non-blocking, the flags below are set */
#define FD_UNIX       2u /* a Unix stream socket: read with recvmsg */
#define FD_STREAM     4u  /* stream socket or pipe: a short read drains it */
#define FD_WATCHED    8u  /* the backend watches it (epoll: registered) */
#define FD_UNPOLLABLE 16u /* a regular file: calls never wait */
#define FD_SOCKET     32u /* a socket: write() becomes send(MSG_NOSIGNAL) */
#define FD_EXCEPT     64u /* hang-up, error or urgent data seen */
#define FD_WAKE       128u /* the loop's own wake-up eventfd (loop.c) */

/* weft__fd.file bits (file.c): CLOSING, weft_file_close waits for
 * file_jobs to end; PROBED, NO_NOWAIT is known; NO_NOWAIT, reads are not
 * tried from the page cache (O_DIRECT, or RWF_NOWAIT refused). */
#define FD_FILE_CLOSING   1u
#define FD_FILE_PROBED    2u
#define FD_FILE_NO_NOWAIT 4u

/* With WEFT_READ / WEFT_WRITE in weft__fd_event's events: the backend saw a
 * hang-up or an error, which stays pending after a short read, or urgent
 * data (TCP's MSG_OOB), at whose mark a read stops short with data behind
 * it. */
#define WEFT__EXCEPT 4

/* What the loop knows about one fd number (loop->fds[fd]). */
struct weft__fd {
  weft__waiter *waiters; /* tasks parked on it, in the order they came */
  uint8_t flags;         /* FD_* */
  uint8_t ready;         /* WEFT_READ|WEFT_WRITE: may be ready, try first */
  uint8_t wanted;        /* union of the waiters' events */
  uint8_t file;          /* FD_FILE_*: what file.c knows of it */
  uint32_t slot; /* the backend's own index (poll: pollfd slot) */
  uint32_t file_jobs; /* file reads, writes, fsyncs on the pool (file.c) */
  /* Bumped when the number is closed or given to a new fd (weft_close,
   * weft__fd_adopt): a task woken for the old fd, not yet resumed, sees
   * that its fd is gone (wait_on), whatever the number names now. */
  uint32_t gen;
};

struct weft__backend {
  const char *name;
  /* 1 if watch/unwatch must hear of every change of an fd's `wanted`
   * (poll); 0 if the registration made at first sight covers every wait
   * (epoll), which spares a wait two calls. */
  int per_wait;
  /* Sets up loop->backend_data. Returns 0 or a negative errno. */
  int (*init)(weft_loop *loop);
  /* Releases what init made. */
  void (*fini)(weft_loop *loop);
  /* Waits at most `timeout` ns (-1: no limit, 0: do not block) and passes
   * every event to weft__fd_event. Returns the number of events or a
   * negative errno (EINTR is not an error: it returns 0). */
  int (*poll)(weft_loop *loop, int64_t timeout);
  /* Does one operation for the running task, suspending it as long as it
   * takes. Returns what the call returns, or a negative errno. */
  ssize_t (*io)(weft_loop *loop, weft__op *op);
  /* Readiness backends: start watching fd for e->wanted (called when a task
   * parks on it, or when the fd is first seen, by epoll). Returns 0 or a
   * negative errno (-EPERM: this fd cannot be watched). */
  int (*watch)(weft_loop *loop, int fd, weft__fd *e);
  /* Stop watching: e->wanted dropped to 0 (closing is 0), or the fd is
   * being closed (closing is 1). */
  void (*unwatch)(weft_loop *loop, int fd, weft__fd *e, int closing);
  /* Optional (completion backends). close: closes fd for the running task
   * (weft_file_close, after weft__fd_forget), waiting as the pool's close
   * would; returns 0 or a negative errno.
   * file: one weft_file_* call (FILE_READ...) done by the backend, or
   * -ENOSYS to leave it to the pool. quiesce: weft_loop_free calls it
   * before the tasks' stacks go: it waits out every request still in the
   * kernel, since one may still write into a stack. */
  int (*close)(weft_loop *loop, int fd);
  /* Optional. forget: fd was closed behind weft's back and its number is
   * in use again (or weft_close, after `closing`): drop what the backend
   * keeps for it. input_queued: nonzero if the backend
   * holds data received on fd that no call has taken (weft_wait_fd is
   * then ready at once). */
  void (*forget)(weft_loop *loop, int fd);
  /* Optional. closing: weft_close is about to close(2) fd, or
   * weft_fd_forget to let it go (called before weft__fd_forget, while the
   * fd's waiters are still on its list): nothing the backend asked of the
   * kernel for fd may outlive the call, whether submitted or not. */
  void (*closing)(weft_loop *loop, int fd);
  int (*input_queued)(weft_loop *loop, int fd);
  ssize_t (*file)(weft_loop *loop, int op, int fd, void *buf, size_t len,
                  off_t offset);
  /* Optional. open: weft_file_open (flags with O_CLOEXEC) done by the
   * backend: the fd or a negative errno, or -ENOSYS, before anything is
   * tried, to leave it to the pool. */
  int (*open)(weft_loop *loop, const char *path, int flags, mode_t mode);
  void (*quiesce)(weft_loop *loop);
};

/* What the backends' `file` does. */
enum { FILE_READ, FILE_WRITE, FILE_FSYNC };

extern const weft__backend weft__backend_epoll;
extern const weft__backend weft__backend_poll;
#ifdef WEFT_HAVE_URING
extern const weft__backend weft__backend_uring;
/* Why the last io_uring init on this thread failed, if it knows better
 * than the errno (a missing feature), else NULL. */
const char *weft__uring_why_not(void);
#endif

/* The entry for fd, growing the table if needed; NULL if fd < 0 or out of
 * memory. Pointers into the table move when it grows: re-read after
 * anything that may run other tasks. */
weft__fd *weft__fd_get(weft_loop *loop, int fd);

/* The entry of fd, probed (non-blocking, flags known) the first time it
 * is seen; NULL with *rc set (-EBADF, -ENOMEM...) on failure. Inline for
 * the usual case, an fd already in the table and probed; the rest is
 * weft__fd_entry_new (io.c). */
weft__fd *weft__fd_entry_new(weft_loop *loop, int fd, int *rc);

static inline weft__fd *weft__fd_entry(weft_loop *loop, int fd, int *rc) {
  /* (A negative fd is past the table as a size_t: one comparison.) */
  if ((size_t)fd < loop->nfds && (loop->fds[fd].flags & FD_KNOWN))
    return &loop->fds[fd];
  return weft__fd_entry_new(loop, fd, rc);
}

/* Links w at the end of its fd's waiters, counted in loop->nwaiters, and
 * takes it off again (telling a per_wait backend if less is wanted). A
 * waiter with events 0 is woken by nothing but weft_close (-EBADF). */
void weft__waiter_link(weft_loop *loop, weft__waiter *w);
void weft__waiter_unlink(weft_loop *loop, weft__waiter *w);

/* The backend saw `events` (WEFT_READ | WEFT_WRITE) on fd: wake the tasks
 * waiting for them, or remember them as ready hints if none is. */
void weft__fd_event(weft_loop *loop, int fd, int events);

/* An fd's waiters are a list in the order they came: e->waiters is the
 * first, and the first's prev is the last (a waiter appends in O(1), so
 * that many tasks parked on one fd, each waking and parking again, do not
 * walk the list each time); the last's next is NULL. */
static inline void weft__waiter_remove(weft__fd *e, weft__waiter *w) {
  weft__waiter *first = e->waiters;
  if (w == first)
    e->waiters = w->next;
  else
    w->prev->next = w->next;
  if (w->next)
    w->next->prev = w->prev;
  else if (w != first)
    first->prev = w->prev; /* w was the last */
}

/* After waiters left e's list: tells the backend if less is wanted. */
void weft__wanted_again(weft_loop *loop, int fd, weft__fd *e);

/* weft__fd_event itself, for the epoll backend's loop over the events of
 * a wait to take in: one call, and its frame, fewer per event (20
 * instructions per round trip of bench_io_pingpong). The other backends
 * call weft__fd_event, which keeps the hot code the smaller. */
static inline __attribute__((always_inline)) void
weft__fd_event_inline(weft_loop *loop, int fd, int events) {
  if ((size_t)fd >= loop->nfds) /* (a negative fd too) */
    return;
  weft__fd *e = &loop->fds[fd];
  if (__builtin_expect(e->flags & FD_WAKE, 0)) { /* the loop's own */
    if (fd == loop->wake_fd)
      weft__wake_fd_drain(loop);
    else
      weft__quit_fd_read(loop);
    return;
  }
  if (events & WEFT__EXCEPT) {
    e->flags |= FD_EXCEPT;
    events &= ~WEFT__EXCEPT;
  }
  e->ready |= (uint8_t)events;
  weft__waiter *w = e->waiters;
  int left = 0; /* waiters with events that left the list */
  while (w) {
    weft__waiter *next = w->next;
    if (w->events & events) {
      w->revents = w->events & events;
      w->fd = -1;
      weft__waiter_remove(e, w);
      loop->nwaiters--;
      left |= w->events;
      weft__wake(w->task, 0);
    }
    w = next;
  }
  /* What is still wanted, once for them all (poll: the list is walked). */
  if (loop->per_wait && left)
    weft__wanted_again(loop, fd, e);
}

/* Marks a fd weft just created (accept, socket) as known: a non-blocking
 * socket, with `kind` (FD_STREAM, FD_UNIX, FD_EXCEPT: weft__sock_kind).
 * Its old entry, if any, was stale. */
int weft__fd_adopt(int fd, unsigned kind);
/* The FD_STREAM and FD_UNIX bits that a socket of this family and type
 * starts with. */
unsigned weft__sock_kind(int family, int type);
/* A new fd weft made at this number (a file opened, a signalfd): the
 * entry starts afresh, to be probed at first use. NULL: no memory. */
weft__fd *weft__fd_fresh(weft_loop *loop, int fd);

/* Frees the fd table and the spare fd (loop_free). */
void weft__fds_free(weft_loop *loop);

/* The shared implementation of `io` for readiness backends. */
ssize_t weft__io_readiness(weft_loop *loop, weft__op *op);

#endif
