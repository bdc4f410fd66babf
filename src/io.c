/*
 * Layer 4: the fd table and the I/O calls.
 *
 * Every call becomes a weft__op handed to the loop's backend (backend.h).
 * The readiness backends (epoll, poll) share weft__io_readiness below:
 *
 *   try the call ── done ──> return its result
 *       │ EAGAIN
 *       v
 *   park on the fd (a weft__waiter on the task's stack) until the backend
 *   reports it ready, then try again
 *
 * Each fd has `ready` hints, one per direction: "try the call first". They
 * start set, are cleared by EAGAIN and set again by the backend's events.
 * A short read from a stream socket or a pipe, or a short write, also
 * clears its hint: the buffer was drained (or filled) at that moment, so
 * the next call would only fail with EAGAIN; it waits for the event
 * instead, which saves a syscall per message on a busy connection. (The
 * event cannot be missed: epoll's registration is made when the fd is
 * first seen, and reports every new arrival; poll is level-triggered.)
 * Not so once the peer has hung up or an error is pending (FD_EXCEPT): that
 * stays after the data is drained, and edge-triggered epoll reported it
 * only once, so the next read must be tried; nor once urgent data has come
 * (FD_EXCEPT too): a read stops short at its mark, data behind it; nor
 * on a pipe (FD_EXCEPT from the start), which a writer with O_DIRECT fills
 * with packets, read one a call (the read end cannot tell: the flag is the
 * writer's). A Unix stream socket's read stops short after a message that
 * carried fds (SCM_RIGHTS, which a read drops) or credentials (with
 * SO_PASSCRED), with more queued: it is read with recvmsg and no room for
 * those (FD_UNIX), and the MSG_CTRUNC that says it met them sets
 * FD_EXCEPT. Short reads of a Unix socket that never carries them still
 * spare the next read's system call.
 *
 * A call that is not about the queue of bytes (no bytes, MSG_OOB,
 * MSG_ERRQUEUE) neither reads nor clears the hints: an urgent byte or an
 * empty error queue says nothing of the data behind them.
 *
 * Every system call of an operation first asks weft__fault_hook (fault.h),
 * which the tests set to inject failures; it is NULL otherwise, and costs
 * a load and a branch.
 */
#include "backend.h"
#include "fault.h"

#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <stddef.h>
#include <poll.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

/* ---- the fd table ----------------------------------------------------- */
weft__fd *weft__fd_get(weft_loop *loop, int fd) {
  if (fd < 0)
    return NULL;
  if ((size_t)fd >= loop->nfds) {
    size_t n = loop->nfds ? loop->nfds : 64;
    while (n <= (size_t)fd)
      n *= 2;
    weft__fd *v = weft__realloc(loop->fds, n * sizeof *v);
    if (!v)
      return NULL;
    memset(v + loop->nfds, 0, (n - loop->nfds) * sizeof *v);
    loop->fds = v;
    loop->nfds = n;
  }
  return &loop->fds[fd];
}

void weft__fds_free(weft_loop *loop) {
  weft__free(loop->fds);
  loop->fds = NULL;
  loop->nfds = 0;
  if (loop->spare_fd >= 0)
    close(loop->spare_fd);
  loop->spare_fd = -1;
}

/* Tells the backend about a fd it has not watched yet; a regular file
 * (which epoll refuses) is marked as one whose calls never wait. */
static void first_watch(weft_loop *loop, int fd, weft__fd *e) {
  if (loop->backend->watch(loop, fd, e) == -EPERM)
    e->flags |= FD_UNPOLLABLE;
}

/* weft__sock_kind of socket fd, asked of the kernel (a family it will not
 * tell is taken for AF_UNIX: no short read is then taken for drained). */
static unsigned sock_kind_of(int fd) {
  int type = 0, family = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) < 0)
    return 0;
  if (type == SOCK_STREAM &&
      getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &family, &len) < 0)
    family = AF_UNIX;
  return weft__sock_kind(family, type);
}

/* Learns what fd is, the first time weft sees it: whether a short read
 * drains it, and makes it non-blocking. */
static int probe(weft_loop *loop, int fd, weft__fd *e) {
  struct stat st;
  if (fstat(fd, &st) < 0)
    return -errno;
  uint8_t flags = FD_KNOWN;
  if (S_ISREG(st.st_mode) || S_ISDIR(st.st_mode) || S_ISBLK(st.st_mode))
    flags |= FD_UNPOLLABLE;
  else if (S_ISFIFO(st.st_mode))
    flags |= FD_STREAM | FD_EXCEPT; /* FD_EXCEPT: see the top */
  else if (S_ISSOCK(st.st_mode))
    flags |= (uint8_t)(FD_SOCKET | sock_kind_of(fd));
  int fl = fcntl(fd, F_GETFL);
  if (fl < 0)
    return -errno;
  if (!(fl & O_NONBLOCK) && fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return -errno;
  e->flags = flags;
  e->ready = WEFT_READ | WEFT_WRITE;
  e->wanted = 0;
  if (loop->backend->forget) /* a number weft saw closed behind its back */
    loop->backend->forget(loop, fd);
  if (!(flags & FD_UNPOLLABLE))
    first_watch(loop, fd, e);
  return 0;
}

weft__fd *weft__fd_entry_new(weft_loop *loop, int fd, int *rc) {
  /* A number past the table is checked before the table grows to it: a
   * bad one (say 10^8) is -EBADF, not gigabytes of zeroed entries. */
  if (fd >= 0 && (size_t)fd >= loop->nfds && fcntl(fd, F_GETFD) < 0) {
    *rc = -errno;
    return NULL;
  }
  weft__fd *e = weft__fd_get(loop, fd);
  if (!e) {
    *rc = fd < 0 ? -EBADF : -ENOMEM;
    return NULL;
  }
  if (!(e->flags & FD_KNOWN) && (*rc = probe(loop, fd, e)) < 0)
    return NULL;
  return e;
}

/* The fd at this number is gone: its watch ends, the entry is cleared,
 * and its generation moves on (a task woken for the old fd sees that:
 * wait_on). The count of file calls still on the pool stays, for file.c
 * to count down. */
static void entry_wipe(weft_loop *loop, int fd, weft__fd *e) {
  if (e->flags & FD_WATCHED)
    loop->backend->unwatch(loop, fd, e, 1);
  uint32_t jobs = e->file_jobs, gen = e->gen + 1;
  memset(e, 0, sizeof *e);
  e->file_jobs = jobs;
  e->gen = gen;
}

weft__fd *weft__fd_fresh(weft_loop *loop, int fd) {
  weft__fd *e = weft__fd_get(loop, fd);
  if (!e)
    return NULL;
  /* Whatever the table said of this number was about an fd closed behind
   * weft's back: start afresh. */
  if (loop->backend->forget)
    loop->backend->forget(loop, fd);
  entry_wipe(loop, fd, e);
  return e;
}

unsigned weft__sock_kind(int family, int type) {
  if (type != SOCK_STREAM)
    return 0;
  return family == AF_UNIX ? FD_STREAM | FD_UNIX : FD_STREAM;
}

int weft__fd_adopt(int fd, unsigned kind) {
  weft_loop *loop = weft_loop_current();
  if (!loop)
    return 0;
  weft__fd *e = weft__fd_fresh(loop, fd);
  if (!e)
    return -ENOMEM;
  e->flags = (uint8_t)(FD_KNOWN | FD_SOCKET |
                       (kind & (FD_STREAM | FD_UNIX | FD_EXCEPT)));
  e->ready = WEFT_READ | WEFT_WRITE;
  first_watch(loop, fd, e);
  return 0;
}

/* ---- waiting on an fd ------------------------------------------------- */
static uint8_t wanted_by(const weft__fd *e) {
  uint8_t w = 0;
  for (const weft__waiter *x = e->waiters; x; x = x->next)
    w |= (uint8_t)x->events;
  return w;
}

void weft__wanted_again(weft_loop *loop, int fd, weft__fd *e) {
  uint8_t wanted = wanted_by(e);
  if (wanted != e->wanted) {
    e->wanted = wanted;
    loop->backend->unwatch(loop, fd, e, 0);
  }
}

/* Takes w off its fd's list and tells the backend if less is wanted. */
WEFT__HOT void weft__waiter_unlink(weft_loop *loop, weft__waiter *w) {
  const int fd = w->fd;
  weft__fd *e = &loop->fds[fd];
  w->fd = -1; /* off the list: a second unlink is a bug the owner avoids */
  weft__waiter_remove(e, w);
  loop->nwaiters--;
  if (!loop->per_wait || !w->events) /* events 0: wanted stays */
    return;
  weft__wanted_again(loop, fd, e);
}

static void undo_wait(weft_task *t, void *arg) {
  weft__waiter_unlink(t->loop, arg);
}

WEFT__HOT void weft__waiter_link(weft_loop *loop, weft__waiter *w) {
  weft__fd *e = &loop->fds[w->fd];
  weft__waiter *first = e->waiters;
  w->next = NULL;
  if (!first) {
    w->prev = w;
    e->waiters = w;
  } else { /* append: waiters are woken in the order they came */
    w->prev = first->prev;
    first->prev->next = w;
    first->prev = w;
  }
  loop->nwaiters++;
}

/* Parks the running task until fd has one of `events`; 0 and *revents, or
 * a negative errno (-ECANCELED, -EBADF when weft_close closes fd). Called
 * from a task: loop is the running loop, and its current the task. */
static WEFT__HOT int wait_on(weft_loop *loop, int fd, int events,
                             int *revents) {
  weft__fd *e = &loop->fds[fd];
  weft_task *t = loop->current;
  weft__waiter w = {t, fd, events, 0, NULL, NULL};
  weft__waiter_link(loop, &w);
  uint8_t old = e->wanted;
  e->wanted |= (uint8_t)events;
  if (!(e->flags & FD_WATCHED) || (loop->per_wait && e->wanted != old)) {
    int rc = loop->backend->watch(loop, fd, e);
    if (rc < 0) {
      weft__waiter_unlink(loop, &w);
      return rc;
    }
  }
  loop->io_budget = WEFT__IO_BUDGET; /* it blocks: the count starts again */
  uint32_t gen = e->gen;
  int rc = weft__park_task(t, events & WEFT_READ ? WAIT_FD_READ : WAIT_FD_WRITE,
                           fd, undo_wait, &w);
  if (rc < 0)
    return rc;
  /* Woken, then closed (and the number perhaps reused) before this task
   * ran: the fd it waited on is gone. */
  if (__builtin_expect(loop->fds[fd].gen != gen, 0))
    return -EBADF;
  /* Woken, then cancelled (or past a deadline) before it ran: nothing has
   * been done yet, so the call can still not happen. */
  if ((rc = weft__checkpoint_task(t)) < 0)
    return rc;
  *revents = w.revents;
  return 0;
}

WEFT__HOT void weft__fd_event(weft_loop *loop, int fd, int events) {
  weft__fd_event_inline(loop, fd, events);
}

/* A Unix stream socket's read (FD_UNIX): no room for fds or credentials,
 * which the kernel then drops, as a plain read drops them, and says so
 * with MSG_CTRUNC, having stopped there: from then on a short read of
 * this socket is not taken for a drained one (io.c's top). */
static __attribute__((noinline)) ssize_t
unix_recv(int fd, void *buf, weft__fd *e, size_t len, int flags) {
  /* recv and read cut a length past INT_MAX; recvmsg would refuse it */
  struct iovec iov = {buf, len > INT_MAX ? INT_MAX : len};
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
  ssize_t n = recvmsg(fd, &msg, flags);
  if (n > 0 && (msg.msg_flags & MSG_CTRUNC))
    e->flags |= FD_EXCEPT;
  return n;
}

/* ---- the readiness way of doing an operation -------------------------- */
/* One attempt at the call, moving at most len bytes (op->len, unless the
 * fault hook asks for less). */
static inline __attribute__((always_inline)) ssize_t
try_op(int kind, const weft__op *op, weft__fd *e, size_t len) {
  switch (kind) {
  case OP_READ: /* (a read of 0 bytes returns 0 where recvmsg waits) */
    if ((e->flags & FD_UNIX) && len)
      return unix_recv(op->fd, op->buf, e, len, MSG_DONTWAIT);
    return read(op->fd, op->buf, len);
  case OP_WRITE:
    /* On a socket, send: MSG_NOSIGNAL keeps SIGPIPE away. */
    if (e->flags & FD_SOCKET)
      return send(op->fd, op->buf, len, MSG_NOSIGNAL);
    return write(op->fd, op->buf, len);
  case OP_RECV:
    if (e->flags & FD_UNIX)
      return unix_recv(op->fd, op->buf, e, len, op->flags | MSG_DONTWAIT);
    return recv(op->fd, op->buf, len, op->flags | MSG_DONTWAIT);
  case OP_SEND:
    return send(op->fd, op->buf, len, op->flags | MSG_DONTWAIT | MSG_NOSIGNAL);
  case OP_RECVFROM:
    return recvfrom(op->fd, op->buf, len, op->flags | MSG_DONTWAIT, op->addr,
                    op->addrlen);
  case OP_SENDTO:
    return sendto(op->fd, op->buf, len, op->flags | MSG_DONTWAIT | MSG_NOSIGNAL,
                  op->addr, op->addrlen_in);
  case OP_ACCEPT:
    return accept4(op->fd, op->addr, op->addrlen, SOCK_NONBLOCK | SOCK_CLOEXEC);
  }
  errno = EINVAL;
  return -1;
}

/* A short transfer drained (or filled) the buffer: see the top. `len` is
 * what the system call was asked for (less than op->len only when the
 * fault hook shortened it: the kernel then gave all it was asked, which
 * says nothing about the buffer). */
static inline __attribute__((always_inline)) void
note_short(int kind, weft__fd *e, const weft__op *op, ssize_t n, size_t len) {
  if (n <= 0 || (size_t)n >= len || !(e->flags & FD_STREAM) ||
      (e->flags & FD_EXCEPT) ||
      (op->flags & (MSG_PEEK | MSG_OOB | MSG_ERRQUEUE)))
    return;
  if (kind == OP_READ || kind == OP_RECV)
    e->ready &= (uint8_t)~WEFT_READ;
  else if (kind == OP_WRITE || kind == OP_SEND)
    e->ready &= (uint8_t)~WEFT_WRITE;
}

/* ---- failure injection (fault.h) -------------------------------------- */
WEFT__TLS weft__fault_fn weft__fault_hook;
WEFT__TLS void *weft__fault_arg;

/* try_op and note_short when the fault hook is set: the hook decides
 * whether the call is made, and with how many bytes. A call it shortened
 * that moved all it was asked clears no hint (see note_short). Out of line
 * and cold: only the tests get here. */
static __attribute__((noinline, cold)) ssize_t
faulty_op(int kind, const weft__op op_copy, weft__fd *e) {
  const weft__op *op = &op_copy;
  size_t len = op->len;
  int f = weft__fault_hook(kind, op->fd, len, weft__fault_arg);
  if (f > 0) {
    errno = f;
    return -1;
  }
  if (f < 0 && (size_t)(-(long)f) < len)
    len = (size_t)(-(long)f);
  ssize_t n = try_op(kind, op, e, len);
  if (n >= 0)
    note_short(kind, e, op, n, len);
  return n;
}

/* The fd's generation, which weft_close moves on: a call that waited or
 * yielded and finds it changed had its fd closed under it (-EBADF), and
 * must not act on whatever file has the number now. */
static uint32_t fd_gen(const weft_loop *loop, int fd) {
  return (size_t)fd < loop->nfds ? loop->fds[fd].gen : 0;
}

/* Sleeps *backoff for a call on fd that must try again later, and doubles
 * it up to max: 0, the sleep's error (cancelled, past a deadline), or
 * -EBADF if fd was closed meanwhile. */
static int back_off(weft_loop *loop, int fd, int64_t *backoff, int64_t max) {
  uint32_t gen = fd_gen(loop, fd);
  int rc = weft_sleep(*backoff);
  if (rc < 0)
    return rc;
  if (fd_gen(loop, fd) != gen) /* closed while it slept */
    return -EBADF;
  if (*backoff < max)
    *backoff *= 2;
  return 0;
}

/* One connect(), unless the fault hook fails it. */
static int try_connect(const weft__op *op) {
  if (__builtin_expect(weft__fault_hook != NULL, 0)) {
    int f = weft__fault_hook(OP_CONNECT, op->fd, 0, weft__fault_arg);
    if (f > 0) {
      errno = f;
      return -1;
    }
  }
  return connect(op->fd, op->addr, op->addrlen_in);
}

/* Starts the connection: 0 (made at once), -EINPROGRESS (going on) or the
 * error. After EINTR the connection may go on in the background (POSIX)
 * or may never have started; waiting for it in the second case would wait
 * for ever (epoll) or spin (poll: an unconnected socket polls writable).
 * So connect is called again, and its answer tells: EALREADY, going on;
 * 0 or EISCONN, made; anything else, its error. */
static int start_connect(const weft__op *op) {
  int interrupted = 0;
  for (;;) {
    if (try_connect(op) == 0)
      return 0;
    if (errno == EINTR) {
      interrupted = 1;
      continue;
    }
    if (errno == EINPROGRESS || (interrupted && errno == EALREADY))
      return -EINPROGRESS;
    if (interrupted && errno == EISCONN)
      return 0;
    return -errno;
  }
}

/* A Unix stream connect to a listener whose backlog is full fails with
 * EAGAIN, and nothing tells the client when there is room: back off and
 * try again, as accept does when out of fds (a blocking connect would
 * wait). */
#define CONNECT_BACKOFF_MIN WEFT_MS(1)
#define CONNECT_BACKOFF_MAX WEFT_MS(100)

/* connect: start it, wait until the socket is writable, then ask connect
 * again: Linux answers for the connection itself, 0 once it is made (the
 * socket is marked connected then: a later connect is -EISCONN, as on
 * io_uring, whose request asks again too), its error (-ECONNREFUSED...),
 * or EALREADY for a wake-up that came before it was made (epoll can report
 * a fresh socket writable). One call, where getsockopt(SO_ERROR) and
 * getpeername took two (and left a second connect answering 0). */
static int do_connect(weft_loop *loop, const weft__op op_copy) {
  const weft__op *op = &op_copy;
  int started = start_connect(op);
  int64_t backoff = CONNECT_BACKOFF_MIN;
  while (started == -EAGAIN && op->addr && op->addr->sa_family == AF_UNIX) {
    int rc = back_off(loop, op->fd, &backoff, CONNECT_BACKOFF_MAX);
    if (rc < 0)
      return rc;
    started = start_connect(op);
  }
  if (started != -EINPROGRESS)
    return started;
  for (;;) {
    loop->fds[op->fd].ready &= (uint8_t)~WEFT_WRITE;
    int revents, rc = wait_on(loop, op->fd, WEFT_WRITE, &revents);
    if (rc < 0)
      return rc;
    int r;
    do
      r = connect(op->fd, op->addr, op->addrlen_in);
    while (r < 0 && errno == EINTR);
    if (r == 0 || errno == EISCONN)
      return 0;
    if (errno != EALREADY && errno != EINPROGRESS)
      return -errno;
  }
}

/* After WEFT__IO_BUDGET calls in a row that did not block (parking resets
 * the count) the caller goes to the back of the ready queue first, so the loop
 * polls and the other tasks run (the fairness that tokio's budget gives:
 * without it, a task that always finds data ready would run alone as long as
 * its peer keeps up). */
static __attribute__((noinline)) int take_turn(weft_loop *loop, int fd) {
  /* An fd not seen before gets its entry now, so that a weft_close during
   * the yield moves its generation on (a bad one fails after: the call's
   * own answer). */
  int rc;
  (void)weft__fd_entry(loop, fd, &rc);
  uint32_t gen = fd_gen(loop, fd);
  (void)weft_yield(); /* a cancellation is seen by the checkpoint next */
  if (fd_gen(loop, fd) != gen) /* closed meanwhile: the call had begun */
    return -EBADF;
  return 0;
}

/* A call whose answer is not about the fd's queue of bytes (none asked
 * for, urgent data, the error queue): tried whatever the hint says, it
 * waits only after its own EAGAIN, and leaves the hint alone. */
static inline int is_aside(const weft__op *op, int kind) {
  return (op->len == 0 && kind != OP_ACCEPT) || /* accept has no length */
         (op->flags & (MSG_OOB | MSG_ERRQUEUE));
}

static __attribute__((noinline, cold)) ssize_t
aside(weft_loop *loop, const weft__op op_copy, int kind, int dir) {
  const weft__op *op = &op_copy;
  for (;;) {
    weft__fd *e = &loop->fds[op->fd];
    ssize_t n = weft__fault_hook ? faulty_op(kind, *op, e)
                                 : try_op(kind, op, e, op->len);
    if (n >= 0) {
      if (op->flags & MSG_OOB) /* the urgent mark is ahead: see the top */
        e->flags |= FD_EXCEPT;
      return n;
    }
    if (errno == EINTR)
      continue;
    if ((errno != EAGAIN && errno != EWOULDBLOCK) || (e->flags & FD_UNPOLLABLE))
      return -errno;
    if (op->flags & MSG_DONTWAIT)
      return -EAGAIN;
    int revents, rc = wait_on(loop, op->fd, dir, &revents);
    if (rc < 0)
      return rc;
  }
}

/* Inlined into each public call with `kind` a constant (a local copy:
 * op->kind would be reloaded after every call), so that the compiler drops
 * the dispatch on it; weft__io_readiness is the same for the backend
 * table. The functions it calls out of line take the op's fields, or a
 * copy of the op, never its address: the public call's op then never
 * leaves registers (stored to the stack, its fields were reloaded after
 * every call; 28 instructions per round trip of bench_io_pingpong). */
static inline __attribute__((always_inline)) ssize_t
readiness(weft_loop *loop, weft__op *op, const int kind) {
  /* Read before any call, while the compiler still knows them (the
   * public calls' constant flags, above all). */
  const int aside_call = is_aside(op, kind);
  int rc;
  if (weft__io_budget_spent(loop) && (rc = take_turn(loop, op->fd)) < 0)
    return rc;
  if ((rc = weft__checkpoint()) < 0)
    return rc;
  const int fd = op->fd;
  weft__fd *e = weft__fd_entry(loop, fd, &rc);
  if (!e)
    return rc;
  if (kind == OP_CONNECT)
    return do_connect(loop, *op);
  const int dir = weft__op_is_input(kind) ? WEFT_READ : WEFT_WRITE;
  if (__builtin_expect(aside_call, 0))
    return aside(loop, *op, kind, dir);
  for (;;) {
    /* MSG_DONTWAIT asks for the call's own answer now, EAGAIN included:
     * it never parks, whatever the hint says. */
    if (!(e->ready & dir) && !(e->flags & FD_UNPOLLABLE) &&
        !(op->flags & MSG_DONTWAIT)) {
      int revents;
      if ((rc = wait_on(loop, fd, dir, &revents)) < 0)
        return rc;
      e = &loop->fds[fd]; /* the table may have moved while parked */
      continue;
    }
    ssize_t n;
    if (__builtin_expect(weft__fault_hook != NULL, 0)) {
      if ((n = faulty_op(kind, *op, e)) >= 0)
        return n;
      e = &loop->fds[fd]; /* (the hook is the tests' code: anything goes) */
    } else if ((n = try_op(kind, op, e, op->len)) >= 0) {
      note_short(kind, e, op, n, op->len);
      return n;
    }
    if (errno == EINTR)
      continue;
    if ((errno != EAGAIN && errno != EWOULDBLOCK) || (e->flags & FD_UNPOLLABLE))
      return -errno;
    e->ready &= (uint8_t)~dir;
    if (op->flags & MSG_DONTWAIT)
      return -EAGAIN;
  }
}

ssize_t weft__io_readiness(weft_loop *loop, weft__op *op) {
  return readiness(loop, op, op->kind);
}

/* ---- the public calls ------------------------------------------------- */
static inline __attribute__((always_inline)) ssize_t run_op(weft__op *op,
                                                            const int kind) {
  weft_loop *loop = weft__loop_running;
  if (!loop || !loop->current)
    return -EINVAL;
  if (__builtin_expect(loop->io == weft__io_readiness, 1))
    return readiness(loop, op, kind);
  weft__op copy = *op;
  return loop->io(loop, &copy);
}

WEFT__HOT ssize_t weft_read(int fd, void *buf, size_t len) {
  weft__op op = {.kind = OP_READ, .fd = fd, .buf = buf, .len = len};
  return run_op(&op, OP_READ);
}

WEFT__HOT ssize_t weft_write(int fd, const void *buf, size_t len) {
  weft__op op = {.kind = OP_WRITE, .fd = fd, .buf = (void *)buf, .len = len};
  return run_op(&op, OP_WRITE);
}

/* recv with MSG_WAITALL on a readiness backend: the flag means nothing to
 * a call made with MSG_DONTWAIT, so the pieces are gathered here, waiting
 * between them, until len bytes, the end of the stream or an error (the
 * bytes already in buf are returned then, as recv(2) does). io_uring hands
 * the flag to the kernel. */
static __attribute__((noinline)) ssize_t recv_all(weft__op op_copy) {
  weft__op *op = &op_copy;
  weft_loop *loop = weft__loop_running;
  if (!loop || !loop->current)
    return -EINVAL;
  if (loop->io != weft__io_readiness || (op->flags & MSG_DONTWAIT))
    return loop->io(loop, op);
  char *buf = op->buf;
  size_t len = op->len, done = 0;
  op->flags &= ~MSG_WAITALL;
  do {
    op->buf = buf + done;
    op->len = len - done;
    ssize_t n = readiness(loop, op, OP_RECV);
    if (n <= 0)
      return done ? (ssize_t)done : n;
    done += (size_t)n;
  } while (done < len && (loop->fds[op->fd].flags & FD_STREAM));
  return (ssize_t)done; /* a datagram is whole in one call */
}

/* MSG_WAITALL with MSG_PEEK: what is there, on every backend (io_uring's
 * kernel retries a short peek into the rest of the buffer, which peeks the
 * same bytes again). MSG_ERRQUEUE never waits in the kernel (an empty
 * queue is EAGAIN, blocking socket or not): nor in weft, on any backend
 * (a wait for readable would come back at once while data is queued). */
static inline int input_flags(int flags) {
  if (__builtin_expect(flags & MSG_ERRQUEUE, 0))
    flags |= MSG_DONTWAIT;
  return flags & MSG_PEEK ? flags & ~MSG_WAITALL : flags;
}

WEFT__HOT ssize_t weft_recv(int fd, void *buf, size_t len, int flags) {
  weft__op op = {.kind = OP_RECV,
                 .fd = fd,
                 .buf = buf,
                 .len = len,
                 .flags = input_flags(flags)};
  if (__builtin_expect(op.flags & MSG_WAITALL, 0))
    return recv_all(op);
  return run_op(&op, OP_RECV);
}

WEFT__HOT ssize_t weft_send(int fd, const void *buf, size_t len, int flags) {
  weft__op op = {.kind = OP_SEND,
                 .fd = fd,
                 .buf = (void *)buf,
                 .len = len,
                 .flags = flags};
  return run_op(&op, OP_SEND);
}

ssize_t weft_recvfrom(int fd, void *buf, size_t len, int flags,
                      struct sockaddr *addr, socklen_t *addrlen) {
  /* The system call would take the datagram and then fail; io_uring's
   * would drop the address. */
  if (addr && !addrlen)
    return -EFAULT;
  weft__op op = {.kind = OP_RECVFROM,
                 .fd = fd,
                 .buf = buf,
                 .len = len,
                 .flags = input_flags(flags),
                 .addr = addr,
                 .addrlen = addrlen};
  return run_op(&op, OP_RECVFROM);
}

ssize_t weft_sendto(int fd, const void *buf, size_t len, int flags,
                    const struct sockaddr *addr, socklen_t addrlen) {
  weft__op op = {.kind = OP_SENDTO,
                 .fd = fd,
                 .buf = (void *)buf,
                 .len = len,
                 .flags = flags,
                 .addr = (struct sockaddr *)addr,
                 .addrlen_in = addrlen};
  return run_op(&op, OP_SENDTO);
}

WEFT__HOT ssize_t weft_write_all(int fd, const void *buf, size_t len) {
  const char *p = buf;
  size_t done = 0;
  while (done < len) {
    ssize_t n = weft_write(fd, p + done, len - done);
    if (n < 0)
      return done ? (ssize_t)done : n;
    done += (size_t)n;
  }
  if (len == 0)
    return weft_write(fd, buf, 0);
  return (ssize_t)done;
}

int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen) {
  weft__op op = {.kind = OP_CONNECT,
                 .fd = fd,
                 .addr = (struct sockaddr *)addr,
                 .addrlen_in = addrlen};
  return (int)run_op(&op, OP_CONNECT);
}

/* Out of fds at accept: drop the connection at the head of the queue with
 * the help of the spare fd, so the listener does not see it again at once,
 * and get the spare back (libuv's trick). */
static void drop_one(weft_loop *loop, int fd) {
  if (loop->spare_fd < 0)
    return;
  close(loop->spare_fd);
  int c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
  if (c >= 0)
    close(c);
  loop->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* What a connection accepted on fd starts with: FD_STREAM, FD_UNIX,
 * FD_EXCEPT (weft__sock_kind of the listener's family and type; a
 * listener that has seen an exception passes FD_EXCEPT on too, which only
 * costs its connections a read that finds nothing after a short one). */
static unsigned listener_kind(const weft_loop *loop, int fd) {
  if ((size_t)fd < loop->nfds && (loop->fds[fd].flags & FD_KNOWN))
    return loop->fds[fd].flags & (FD_STREAM | FD_UNIX | FD_EXCEPT);
  return sock_kind_of(fd);
}

#define ACCEPT_BACKOFF_MIN WEFT_MS(1)
#define ACCEPT_BACKOFF_MAX WEFT_MS(100)

int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen) {
  weft_loop *loop = weft__loop_running;
  if (!weft__running_task())
    return -EINVAL;
  /* accept4's own answer on every backend (io_uring's multishot accept
   * asks getpeername for the address, which cannot tell this apart). */
  if (addr && !addrlen)
    return -EFAULT;
  /* The spare is taken while fds are still to be had. */
  if (loop->spare_fd < 0)
    loop->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  int64_t backoff = ACCEPT_BACKOFF_MIN;
  const socklen_t room = addr && addrlen ? *addrlen : 0;
  for (;;) {
    weft__op op = {
        .kind = OP_ACCEPT, .fd = fd, .addr = addr, .addrlen = addrlen};
    ssize_t c = loop->io(loop, &op);
    if (c >= 0) {
      /* An unnamed Unix peer: the kernel writes the family alone, and the
       * path left in the caller's buffer would be printed as the peer's
       * (weft_addr_str); it is made empty, as Python shows it. */
      const socklen_t path_at = offsetof(struct sockaddr_un, sun_path);
      if (room > path_at && *addrlen <= path_at && addr->sa_family == AF_UNIX)
        ((struct sockaddr_un *)addr)->sun_path[0] = '\0';
      /* A connection is of its listener's type: a SOCK_SEQPACKET one is
       * not a stream, whose short read would mean "drained"; and of its
       * family (a Unix one's short read need not be either). */
      weft__fd_adopt((int)c, listener_kind(loop, fd));
      return (int)c;
    }
    /* The connection went away before it could be taken (reset while it
     * waited in the queue): the listener is fine, take the next. */
    if (c == -ECONNABORTED || c == -EPROTO)
      continue;
    if (!weft__accept_short_of(c))
      return (int)c;
    if (c == -EMFILE || c == -ENFILE)
      drop_one(loop, fd);
    int rc = back_off(loop, fd, &backoff, ACCEPT_BACKOFF_MAX);
    if (rc < 0)
      return rc;
  }
}

int weft_wait_fd(int fd, int events) {
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  if (events & ~(WEFT_READ | WEFT_WRITE) || !events)
    return -EINVAL;
  weft_loop *loop = weft__loop_running;
  if (!weft__fd_entry(loop, fd, &rc))
    return rc;
  /* Data the backend has already taken from the kernel (io_uring's
   * multishot recv) is input ready. */
  if ((events & WEFT_READ) && loop->backend->input_queued &&
      loop->backend->input_queued(loop, fd))
    return WEFT_READ;
  /* Ready now? (The hints may be stale; poll is exact.) */
  struct pollfd p = {fd,
                     (short)((events & WEFT_READ ? POLLIN : 0) |
                             (events & WEFT_WRITE ? POLLOUT : 0)),
                     0};
  int n;
  do
    n = poll(&p, 1, 0);
  while (n < 0 && errno == EINTR);
  if (n < 0)
    return -errno;
  if (p.revents & POLLNVAL)
    return -EBADF;
  if (n > 0) {
    if (p.revents & (POLLERR | POLLHUP))
      return events;
    return (p.revents & POLLIN ? WEFT_READ : 0) |
           (p.revents & POLLOUT ? WEFT_WRITE : 0);
  }
  loop->fds[fd].ready &= (uint8_t)~events;
  int revents;
  if ((rc = wait_on(loop, fd, events, &revents)) < 0)
    return rc;
  return revents;
}

void weft__fd_forget(weft_loop *loop, int fd) {
  if (!loop || fd < 0 || (size_t)fd >= loop->nfds)
    return;
  weft__fd *e = &loop->fds[fd];
  /* (The backend hears once, from entry_wipe, not as each waiter goes.) */
  while (e->waiters) {
    weft__waiter *w = e->waiters;
    w->fd = -1;
    weft__waiter_remove(e, w);
    loop->nwaiters--;
    weft__wake(w->task, -EBADF);
  }
  entry_wipe(loop, fd, e);
}

static void drop_fd(weft_loop *loop, weft__held *h) {
  int fd = ((weft__held_fd *)h)->fd;
  weft__fd_forget(loop, fd);
  close(fd);
}

void weft__hold_fd(weft__held_fd *h, int fd) {
  h->fd = fd;
  weft__hold(&h->h, drop_fd);
}

/* What weft_close does before it closes the fd outside the ring (and
 * weft_fd_forget): what the backend asked of the kernel for it ends
 * (io_uring's requests), the fd's waiters go, and so does all that the
 * loop and its backend keep of it. */
static void forget_all(weft_loop *loop, int fd) {
  if (loop->backend->closing)
    loop->backend->closing(loop, fd);
  weft__fd_forget(loop, fd);
  if (loop->backend->forget)
    loop->backend->forget(loop, fd);
}

int weft_fd_forget(int fd) {
  if (fd < 0)
    return -EBADF;
  weft_loop *loop = weft_loop_current();
  if (!loop)
    return -EINVAL;
  forget_all(loop, fd);
  return 0;
}

int weft_close(int fd) {
  if (fd < 0)
    return -EBADF;
  weft_loop *loop = weft_loop_current();
  if (loop && loop->backend->close && weft__running_task() &&
      weft__loop_running == loop) {
    weft__fd_forget(loop, fd);
    return loop->backend->close(loop, fd);
  }
  if (loop)
    forget_all(loop, fd);
  /* Linux frees the fd even when close fails with EINTR: never retry. */
  if (close(fd) < 0 && errno != EINTR)
    return -errno;
  return 0;
}
