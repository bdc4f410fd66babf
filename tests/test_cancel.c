/*
 * The cancellation matrix (run once per backend). Every kind of blocking
 * call (yield, sleep, join, await, group_wait, recv, read on a pipe, send
 * and write_all on a full socket, accept, connect to a full backlog,
 * wait_fd, stream_readline) is cancelled
 *
 *   (a) before the task first ran: the call returns -ECANCELED at once, even
 *       when it could have completed, and does not happen;
 *   (b) while blocked, from another task and from a timer's callback, in
 *       the same turn as whatever would have let it complete: -ECANCELED,
 *       and the operation did not happen (a recv consumed nothing, a send
 *       sent nothing, an accept left the connection queued, a readline
 *       kept its partial line); on io_uring, where the request is in the
 *       kernel already, it may instead complete, and the call returns its
 *       result (the data, the sent count, the accepted fd): nothing is
 *       lost either way;
 *   (c) after the call completed: its result stands, and the next blocking
 *       call and every one after it returns -ECANCELED (level-triggered);
 *
 * then the same with a scope's deadline instead of weft_cancel:
 *
 *   (d) a deadline 20 ms ahead: -ETIMEDOUT once it has passed, and from
 *       every later call inside the scope; weft_scope_exit returns
 *       -ETIMEDOUT and the code after it runs normally;
 *   (e) a deadline already past at enter: -ETIMEDOUT at once, even when the
 *       call could have completed;
 *   (f) completion before a far deadline: the call's result, exit 0, and
 *       the scope's timer gone (the loop does not wait for it).
 *
 * After each case the loop ends at once with no task, timer, callback or
 * fd wait left (the loop's own counters, from internal.h), and no fd is
 * left open.
 *
 * Also: weft_cancel is -ESRCH for a task that has finished (joined,
 * detached and ended, or just ended), -EINVAL for NULL, 0 twice in a row;
 * a task that cancels itself; a completion that woke the task before the
 * cancellation came (join, await, sleep) stands; write_all cancelled
 * midway returns what went out, and the peer got exactly that; 600
 * connects to a listener with room, each stopped at another moment, end
 * made (and usable), -ECANCELED or -ETIMEDOUT.
 *
 * connect: a second connection to a loopback listener with a backlog of 0
 * stays in SYN_SENT (Linux drops the SYN while the accept queue is full).
 * main() checks that this holds here first; where it does not, the connect
 * rows are skipped (and say so).
 */
#include "weft.h"

#include "internal.h"

#include "check.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

/* A blocking call that is not cancelled waits this long (or for ever): a
 * case that takes more than LATE failed to cancel something. */
#define FOREVER WEFT_SEC(30)
#define LATE    WEFT_SEC(5)

enum {
  K_YIELD,
  K_SLEEP,
  K_JOIN,
  K_AWAIT,
  K_GROUP,
  K_RECV,
  K_READ,
  K_SEND,
  K_WRITE_ALL,
  K_ACCEPT,
  K_CONNECT,
  K_WAIT_FD,
  K_READLINE,
  NKINDS
};
static const char *const kind_name[NKINDS] = {
    "yield",     "sleep",  "join",    "await",   "group_wait",
    "recv",      "read",   "send",    "write_all", "accept",
    "connect",   "wait_fd", "readline"};

enum {
  M_BEFORE,   /* (a) */
  M_TASK,     /* (b) from another task */
  M_TIMER,    /* (b) from a timer's callback */
  M_AFTER,    /* (c) */
  M_DEADLINE, /* (d) */
  M_PAST,     /* (e) */
  M_BEAT,     /* (f) */
  NMODES
};
static const char *const mode_name[NMODES] = {
    "cancelled before it ran", "cancelled by a task",
    "cancelled by a timer",    "cancelled after it completed",
    "deadline while blocked",  "deadline already past",
    "completed before the deadline"};

static int connect_blocks; /* main()'s probe: connect can be made to wait */

/* ---- raw helpers (no weft: usable from callbacks) ---------------------- */
static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  CHECK_GE(fl, 0);
  CHECK_EQ(fcntl(fd, F_SETFL, fl | O_NONBLOCK), 0);
}

/* Reads everything fd has now; checks it is "abc" repeated (pattern) or
 * anything (pattern NULL). Returns the count. */
static size_t drain(int fd, const char *pattern) {
  static char buf[1 << 16];
  size_t total = 0;
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n > 0) {
      if (pattern)
        for (ssize_t i = 0; i < n; i++)
          CHECK_EQ(buf[i], pattern[(total + (size_t)i) % strlen(pattern)]);
      total += (size_t)n;
      continue;
    }
    CHECK_EQ(n, -1);
    CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
    return total;
  }
}

/* drain, but through weft on a socket (from a task): what io_uring's
 * multishot recv brought before the call was cancelled is in weft's queue,
 * for the next call, not in the kernel. */
static size_t drain_weft(int fd, const char *pattern) {
  static char buf[1 << 16];
  size_t total = 0;
  for (;;) {
    ssize_t n = weft_recv(fd, buf, sizeof buf, MSG_DONTWAIT);
    if (n == -ENOTSOCK)
      return drain(fd, pattern); /* a pipe */
    if (n <= 0) {
      CHECK_EQ(n, -EAGAIN);
      return total;
    }
    for (ssize_t i = 0; i < n; i++)
      CHECK_EQ(buf[i], pattern[(total + (size_t)i) % strlen(pattern)]);
    total += (size_t)n;
  }
}

/* Fills the socket's buffer (fd's sending side) until it takes no more. */
static size_t fill(int fd) {
  static char chunk[4096];
  size_t total = 0;
  for (size_t step = sizeof chunk; step; step = step > 1 ? 1 : 0) {
    for (;;) {
      ssize_t n = send(fd, chunk, step, MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0) {
        CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
        break;
      }
      total += (size_t)n;
    }
  }
  CHECK_GT(total, 0);
  return total;
}

static int listen_on(struct sockaddr_in *addr, int backlog) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  memset(addr, 0, sizeof *addr);
  addr->sin_family = AF_INET;
  addr->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  CHECK_EQ(bind(fd, (struct sockaddr *)addr, sizeof *addr), 0);
  CHECK_EQ(listen(fd, backlog), 0);
  socklen_t len = sizeof *addr;
  CHECK_EQ(getsockname(fd, (struct sockaddr *)addr, &len), 0);
  set_nonblock(fd);
  return fd;
}

/* Starts a connection without waiting for it. */
static int connect_raw(const struct sockaddr_in *addr) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  int rc = connect(fd, (const struct sockaddr *)addr, sizeof *addr);
  CHECK(rc == 0 || errno == EINPROGRESS);
  return fd;
}

/* 1 once fd's connection is made (within ms), 0 if it is still pending. */
static int connected_within(int fd, int ms) {
  struct pollfd p = {fd, POLLOUT, 0};
  int n = poll(&p, 1, ms);
  CHECK_GE(n, 0);
  if (n == 0)
    return 0;
  int err = -1;
  socklen_t len = sizeof err;
  CHECK_EQ(getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len), 0);
  CHECK_EQ(err, 0);
  return 1;
}

/* Whether a connection to a full backlog stays pending here. */
static int probe_connect(void) {
  struct sockaddr_in a;
  int lfd = listen_on(&a, 0);
  int c1 = connect_raw(&a);
  int ok = connected_within(c1, 2000);
  int c2 = connect_raw(&a);
  ok = ok && !connected_within(c2, 100);
  close(c2);
  close(c1);
  close(lfd);
  return ok;
}

/* ---- the fixture: one case's objects ----------------------------------- */
typedef struct fixture {
  int kind, mode;
  int rd, wr;                  /* socketpair or pipe: the two ends */
  int lfd;                     /* accept: the listener; connect: full */
  int lfd2;                    /* connect: a listener with room */
  struct sockaddr_in addr;     /* of lfd */
  struct sockaddr_in addr2;    /* of lfd2 */
  int filler;                  /* connect: fills lfd's accept queue */
  int cfd;                     /* connect: the victim's socket */
  int clients[8];              /* accept: connections made to lfd */
  int nclients;
  int conns_queued;            /* accept: connections not accepted */
  size_t avail;                /* recv, read, wait_fd: bytes in rd */
  size_t queued;               /* send, write_all: bytes in flight to rd */
  size_t early;                /* of those, taken by fx_make_ready's drain */
  int partial;                 /* readline: "par" is in, unreturned */
  const char *line;            /* readline: what the next one must return */
  weft_stream *stream;         /* readline: wraps rd */
  weft_future *fut;            /* await */
  int fut_set;                 /* it has its result (77) */
  weft_task *target;           /* join: sleeps until cancelled */
  weft_group *group;           /* group_wait: one child like target */
  int child_rc, child_done;    /* what that child's sleep returned */
  weft_task *victim;           /* the task whose call is cancelled */
  int entering;                /* it is about to make the call */
  int op_done;                 /* (c): its first call has returned */
  int timer_fired;             /* (b): the cancelling timer ran */
  int64_t deadline;            /* (d), (e), (f) */
} fixture;

static fixture fx;

static void *sleep_until_cancelled(void *arg) {
  (void)arg;
  return P(weft_sleep(FOREVER));
}

static void *group_child(void *arg) {
  fixture *f = arg;
  f->child_rc = weft_sleep(FOREVER);
  f->child_done = 1;
  return NULL;
}

static void *quick(void *arg) { return arg; }

static void *quick_sleeper(void *arg) {
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  *(int *)arg = 1;
  return NULL;
}

/* In the controller task, before the victim exists. */
static void fx_setup(fixture *f) {
  int sv[2];
  switch (f->kind) {
  case K_JOIN:
    f->target = weft_spawn(sleep_until_cancelled, NULL);
    CHECK(f->target);
    break;
  case K_AWAIT:
    f->fut = weft_future_new();
    CHECK(f->fut);
    break;
  case K_GROUP:
    f->group = weft_group_new();
    CHECK(f->group);
    CHECK(weft_group_spawn(f->group, group_child, f));
    break;
  case K_READ:
    CHECK_EQ(pipe(sv), 0);
    f->rd = sv[0];
    f->wr = sv[1];
    set_nonblock(f->rd);
    set_nonblock(f->wr);
    break;
  case K_RECV:
  case K_SEND:
  case K_WRITE_ALL:
  case K_WAIT_FD:
  case K_READLINE:
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
    f->rd = sv[0];
    f->wr = sv[1];
    set_nonblock(f->rd);
    set_nonblock(f->wr);
    if (f->kind == K_SEND || f->kind == K_WRITE_ALL)
      f->queued = fill(f->wr);
    if (f->kind == K_READLINE) {
      f->stream = weft_stream_new(f->rd, 0);
      CHECK(f->stream);
      CHECK_EQ(send(f->wr, "par", 3, MSG_NOSIGNAL), 3);
      f->partial = 1;
    }
    break;
  case K_ACCEPT:
    f->lfd = listen_on(&f->addr, 16);
    break;
  case K_CONNECT:
    f->lfd = listen_on(&f->addr, 0);
    f->filler = connect_raw(&f->addr);
    CHECK(connected_within(f->filler, 2000));
    f->lfd2 = listen_on(&f->addr2, 16);
    f->cfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    CHECK_GE(f->cfd, 0);
    break;
  }
}

/* Makes the call possible at once, without weft (a callback may do it):
 * data to read, room to write, a connection to accept. `in_turn` is for
 * (b), where it happens in the same turn as the cancellation: a future is
 * not completed then (that is the case of completion before cancellation,
 * tested on its own below). */
/* io_uring: a request already in the kernel when the cancellation comes
 * may complete all the same, and then the call returns what it did (its
 * data is not lost; src/backend_uring.c). */
static int on_uring(void) {
  return strcmp(weft_loop_backend(weft_loop_current()), "io_uring") == 0;
}

static void fx_make_ready(fixture *f, int in_turn) {
  switch (f->kind) {
  case K_AWAIT:
    if (!in_turn) {
      CHECK_EQ(weft_future_set_result(f->fut, P(77)), 0);
      f->fut_set = 1;
    }
    break;
  case K_RECV:
  case K_WAIT_FD:
    CHECK_EQ(send(f->wr, "abc", 3, MSG_NOSIGNAL), 3);
    f->avail += 3;
    break;
  case K_READ:
    CHECK_EQ(write(f->wr, "abc", 3), 3);
    f->avail += 3;
    break;
  case K_SEND:
  case K_WRITE_ALL: {
    /* On io_uring a request in the kernel may finish its send during the
     * drain's recv calls (without DEFER_TASKRUN, as under valgrind: the
     * kernel retries it on the way out of any system call), and the drain
     * takes those bytes too. */
    size_t got = drain(f->rd, NULL);
    CHECK_GE(got, f->queued);
    f->early = got - f->queued;
    if (!on_uring())
      CHECK_EQ(f->early, 0);
    f->queued = 0;
    break;
  }
  case K_ACCEPT:
    CHECK_LT(f->nclients, 8);
    f->clients[f->nclients++] = connect_raw(&f->addr);
    f->conns_queued++;
    break;
  case K_READLINE:
    CHECK_EQ(send(f->wr, "tial\n", 5, MSG_NOSIGNAL), 5);
    f->line = "partial\n";
    break;
  }
}

static void make_ready_cb(void *arg) { fx_make_ready(arg, 0); }

/* The call, made where it would block (or, made ready, complete). Returns
 * what it returned. */
static long fx_block(fixture *f) {
  char buf[64];
  void *v;
  memset(buf, 'b', sizeof buf);
  switch (f->kind) {
  case K_YIELD: {
    /* It never blocks: yield until it says something other than 0. */
    int64_t t0 = weft_now();
    int rc;
    while ((rc = weft_yield()) == 0)
      if (weft_now() - t0 > LATE)
        break;
    return rc;
  }
  case K_SLEEP: return weft_sleep(FOREVER);
  case K_JOIN: return weft_join(f->target, &v);
  case K_AWAIT: return weft_await(f->fut, &v);
  case K_GROUP: {
    int rc = weft_group_wait(f->group);
    /* Cancelled or timed out, the wait still waited for the child. */
    if (rc < 0) {
      CHECK_EQ(f->child_done, 1);
      CHECK_EQ(f->child_rc, -ECANCELED);
    }
    return rc;
  }
  case K_RECV: return weft_recv(f->rd, buf, sizeof buf, 0);
  case K_READ: return weft_read(f->rd, buf, sizeof buf);
  case K_SEND: return weft_send(f->wr, "x", 1, 0);
  case K_WRITE_ALL: return weft_write_all(f->wr, buf, sizeof buf);
  case K_ACCEPT: {
    /* With an address (on io_uring, from the multishot request's queue
     * too, the address from getpeername). */
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    return weft_accept(f->lfd, (struct sockaddr *)&ss, &sl);
  }
  case K_CONNECT:
    return weft_connect(f->cfd, (struct sockaddr *)&f->addr, sizeof f->addr);
  case K_WAIT_FD: return weft_wait_fd(f->rd, WEFT_READ);
  case K_READLINE: return weft_stream_readline(f->stream, buf, sizeof buf);
  }
  CHECK(0);
  return 0;
}

/* A call of the kind that blocks a little and then completes; checks its
 * result and notes what it did. */
static void fx_complete(fixture *f) {
  char buf[64];
  void *v = NULL;
  static const int via_timer[NKINDS] = {
      [K_AWAIT] = 1, [K_RECV] = 1,      [K_READ] = 1,   [K_SEND] = 1,
      [K_WRITE_ALL] = 1, [K_ACCEPT] = 1, [K_WAIT_FD] = 1, [K_READLINE] = 1};
  if (via_timer[f->kind])
    CHECK(weft_call_later(WEFT_MS(2), make_ready_cb, f));
  switch (f->kind) {
  case K_YIELD: CHECK_EQ(weft_yield(), 0); break;
  case K_SLEEP: CHECK_EQ(weft_sleep(WEFT_MS(2)), 0); break;
  case K_JOIN: {
    weft_task *t = weft_spawn(quick, P(5));
    CHECK(t);
    CHECK_EQ(weft_join(t, &v), 0);
    CHECK_EQ(I(v), 5);
    break;
  }
  case K_AWAIT:
    CHECK_EQ(weft_await(f->fut, &v), 0);
    CHECK_EQ(I(v), 77);
    break;
  case K_GROUP: {
    int flag = 0;
    weft_group *g = weft_group_new();
    CHECK(g);
    CHECK(weft_group_spawn(g, quick_sleeper, &flag));
    CHECK_EQ(weft_group_wait(g), 0);
    CHECK_EQ(flag, 1);
    weft_group_free(g);
    break;
  }
  case K_RECV:
  case K_READ:
    CHECK_EQ(f->kind == K_RECV ? weft_recv(f->rd, buf, sizeof buf, 0)
                               : weft_read(f->rd, buf, sizeof buf),
             3);
    CHECK(memcmp(buf, "abc", 3) == 0);
    f->avail -= 3;
    break;
  case K_SEND:
    CHECK_EQ(weft_send(f->wr, "x", 1, 0), 1);
    f->queued += 1;
    break;
  case K_WRITE_ALL:
    memset(buf, 'w', sizeof buf);
    CHECK_EQ(weft_write_all(f->wr, buf, sizeof buf), sizeof buf);
    f->queued += sizeof buf;
    break;
  case K_ACCEPT: {
    int c = weft_accept(f->lfd, NULL, NULL);
    CHECK_GE(c, 0);
    CHECK_EQ(weft_close(c), 0);
    f->conns_queued--;
    break;
  }
  case K_CONNECT:
    CHECK_EQ(weft_connect(f->cfd, (struct sockaddr *)&f->addr2,
                          sizeof f->addr2),
             0);
    break;
  case K_WAIT_FD: CHECK_EQ(weft_wait_fd(f->rd, WEFT_READ), WEFT_READ); break;
  case K_READLINE:
    CHECK_EQ(weft_stream_readline(f->stream, buf, sizeof buf), 8);
    CHECK_STR_EQ(buf, "partial\n");
    f->line = NULL;
    f->partial = 0;
    break;
  }
}

/* In the controller, once the victim has ended: the cancelled call did not
 * happen. Then everything is closed. */
static void fx_verify_and_close(fixture *f) {
  void *r;
  char buf[64];
  switch (f->kind) {
  case K_JOIN:
    /* The victim's join failed: the handle is still good. */
    CHECK_EQ(weft_cancel(f->target), 0);
    CHECK_EQ(weft_join(f->target, &r), 0);
    CHECK_EQ(I(r), -ECANCELED);
    break;
  case K_AWAIT:
    if (f->fut_set) {
      r = NULL;
      CHECK_EQ(weft_future_result(f->fut, &r), 0);
      CHECK_EQ(I(r), 77);
    } else {
      CHECK(!weft_future_done(f->fut)); /* left as it was */
      CHECK_EQ(weft_future_result(f->fut, &r), -EAGAIN);
    }
    weft_future_release(f->fut);
    break;
  case K_GROUP:
    if (!f->child_done) {
      weft_group_cancel(f->group);
      CHECK_EQ(weft_group_wait(f->group), 0);
    }
    CHECK_EQ(f->child_done, 1);
    CHECK_EQ(f->child_rc, -ECANCELED);
    CHECK_EQ(weft_group_wait(f->group), 0);
    weft_group_free(f->group);
    break;
  case K_RECV:
  case K_READ:
  case K_WAIT_FD:
    CHECK_EQ(drain_weft(f->rd, "abc"), f->avail);
    CHECK_EQ(weft_close(f->rd), 0);
    CHECK_EQ(weft_close(f->wr), 0);
    break;
  case K_SEND:
  case K_WRITE_ALL:
    CHECK_EQ(f->early + drain(f->rd, NULL), f->queued);
    CHECK_EQ(weft_close(f->rd), 0);
    CHECK_EQ(weft_close(f->wr), 0);
    break;
  case K_ACCEPT: {
    /* Each connection is there for the next accept, once: in the kernel's
     * backlog, or (io_uring) in the queue its multishot request fills. */
    weft_scope sc;
    weft_scope_enter(&sc, weft_now() + WEFT_SEC(5));
    for (int i = 0; i < f->conns_queued; i++) {
      int c = weft_accept(f->lfd, NULL, NULL);
      CHECK_GE(c, 0);
      CHECK_EQ(weft_close(c), 0);
    }
    CHECK_EQ(weft_scope_exit(&sc), 0);
    weft_scope_enter(&sc, weft_now() + WEFT_MS(20));
    CHECK_EQ(weft_accept(f->lfd, NULL, NULL), -ETIMEDOUT);
    weft_scope_exit(&sc);
    CHECK_EQ(accept4(f->lfd, NULL, NULL, SOCK_CLOEXEC), -1);
    CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
    for (int i = 0; i < f->nclients; i++)
      CHECK_EQ(weft_close(f->clients[i]), 0);
    CHECK_EQ(weft_close(f->lfd), 0);
    break;
  }
  case K_CONNECT:
    CHECK_EQ(weft_close(f->cfd), 0);
    CHECK_EQ(weft_close(f->filler), 0);
    CHECK_EQ(weft_close(f->lfd), 0);
    CHECK_EQ(weft_close(f->lfd2), 0);
    break;
  case K_READLINE:
    if (f->partial && !f->line) {
      CHECK_EQ(send(f->wr, "tial\n", 5, MSG_NOSIGNAL), 5);
      f->line = "partial\n";
    }
    if (f->line) {
      CHECK_EQ(weft_stream_readline(f->stream, buf, sizeof buf),
               (long)strlen(f->line));
      CHECK_STR_EQ(buf, f->line);
    }
    CHECK_EQ(weft_stream_close(f->stream), 0);
    CHECK_EQ(weft_close(f->wr), 0);
    break;
  }
}

/* Inside the loop, once only the caller is left: nothing is registered. */
static void check_quiet(void) {
  weft_loop *loop = weft_loop_current();
  CHECK_EQ(loop->nwaiters, 0);
  CHECK_EQ(loop->heap_len, 0);
  CHECK_EQ(loop->cb_len, 0);
  CHECK_EQ(loop->nlive, 1);
}

/* What such a call did (see on_uring), noted as fx_complete notes it. */
static void fx_took(fixture *f, long rc) {
  switch (f->kind) {
  case K_RECV:
  case K_READ:
    CHECK_EQ(rc, 3);
    f->avail -= 3;
    break;
  case K_SEND:
    CHECK_EQ(rc, 1);
    f->queued += 1;
    break;
  case K_WRITE_ALL:
    CHECK(rc > 0);
    f->queued += (size_t)rc;
    break;
  case K_ACCEPT:
    CHECK_GE(rc, 0);
    CHECK_EQ(weft_close((int)rc), 0);
    f->conns_queued--;
    break;
  case K_READLINE:
    CHECK_EQ(rc, 8);
    f->line = NULL;
    f->partial = 0;
    break;
  default: CHECK_EQ(rc, -ECANCELED);
  }
}

/* ---- the victim and the controller -------------------------------------- */
static void *victim(void *arg) {
  fixture *f = arg;
  weft_scope s;
  long rc;
  switch (f->mode) {
  case M_BEFORE:
  case M_TASK:
  case M_TIMER:
    f->entering = 1;
    rc = fx_block(f);
    if (rc != -ECANCELED && f->mode != M_BEFORE && on_uring())
      fx_took(f, rc);
    else
      CHECK_EQ(rc, -ECANCELED);
    if (f->mode == M_TIMER)
      CHECK_EQ(f->timer_fired, 1);
    /* Level-triggered: every later call too. */
    CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
    if (f->kind != K_GROUP)
      CHECK_EQ(fx_block(f), -ECANCELED);
    CHECK_EQ(weft_yield(), -ECANCELED);
    return P(rc);
  case M_AFTER:
    fx_complete(f);
    f->op_done = 1;
    { /* the controller cancels us while we yield (at once in FIFO order;
       * under WEFT_SEED, when it is drawn to run first) */
      int yrc, n = 0;
      while ((yrc = weft_yield()) == 0 && ++n < 10000)
        ;
      CHECK_EQ(yrc, -ECANCELED);
    }
    CHECK_EQ(fx_block(f), -ECANCELED);
    if (f->kind != K_GROUP)
      CHECK_EQ(fx_block(f), -ECANCELED);
    CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
    return NULL;
  case M_DEADLINE: {
    f->deadline = weft_now() + WEFT_MS(20);
    weft_scope_enter(&s, f->deadline);
    rc = fx_block(f);
    CHECK_EQ(rc, -ETIMEDOUT);
    int64_t now = weft_now();
    CHECK_GE(now, f->deadline);
    CHECK_LT(now - f->deadline, LATE);
    CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
    if (f->kind != K_GROUP)
      CHECK_EQ(fx_block(f), -ETIMEDOUT);
    CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
    /* The scope took its expiry with it. */
    CHECK_EQ(weft_sleep(0), 0);
    CHECK_EQ(weft_yield(), 0);
    return NULL;
  }
  case M_PAST: {
    int64_t t0 = weft_now();
    weft_scope_enter(&s, t0 - WEFT_MS(1));
    CHECK_EQ(fx_block(f), -ETIMEDOUT);
    CHECK_EQ(weft_sleep(FOREVER), -ETIMEDOUT);
    CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
    CHECK_LT(weft_now() - t0, LATE);
    CHECK_EQ(weft_yield(), 0);
    return NULL;
  }
  case M_BEAT:
    weft_scope_enter(&s, weft_now() + WEFT_SEC(10));
    fx_complete(f);
    CHECK_EQ(weft_scope_exit(&s), 0);
    CHECK_EQ(weft_yield(), 0);
    return NULL;
  }
  CHECK(0);
  return NULL;
}

static void cancel_cb(void *arg) {
  fixture *f = arg;
  fx_make_ready(f, 1);
  f->timer_fired = 1;
  CHECK_EQ(weft_cancel(f->victim), 0);
}

static void *controller(void *arg) {
  fixture *f = arg;
  fx_setup(f);
  if (f->mode == M_BEFORE || f->mode == M_PAST)
    fx_make_ready(f, 0);
  f->victim = weft_spawn(victim, f);
  CHECK(f->victim);
  switch (f->mode) {
  case M_BEFORE: CHECK_EQ(weft_cancel(f->victim), 0); break;
  case M_TASK:
    /* When the victim has set the flag, its call has parked (a yield: it
     * is behind us in the ready queue). */
    while (!f->entering)
      CHECK_EQ(weft_yield(), 0);
    fx_make_ready(f, 1);
    CHECK_EQ(weft_cancel(f->victim), 0);
    break;
  case M_TIMER: CHECK(weft_call_later(WEFT_MS(5), cancel_cb, f)); break;
  case M_AFTER:
    while (!f->op_done)
      CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_cancel(f->victim), 0);
    break;
  default: break;
  }
  void *r;
  CHECK_EQ(weft_join(f->victim, &r), 0);
  fx_verify_and_close(f);
  check_quiet();
  return NULL;
}

/* ---- running a case ------------------------------------------------------ */
#define CASE_LATE LATE
#include "case_check.h"

static void test_matrix(void) {
  char name[128];
  for (int k = 0; k < NKINDS; k++) {
    if (k == K_CONNECT && !connect_blocks) {
      printf("  connect: skipped (a connect to a full backlog does not "
             "wait here)\n");
      continue;
    }
    for (int m = 0; m < NMODES; m++) {
      memset(&fx, 0, sizeof fx);
      fx.kind = k;
      fx.mode = m;
      fx.rd = fx.wr = fx.lfd = fx.lfd2 = fx.cfd = fx.filler = -1;
      snprintf(name, sizeof name, "%s, %s", kind_name[k], mode_name[m]);
      run_case(name, controller, &fx);
    }
    printf("  %s: ok\n", kind_name[k]);
  }
}

/* ---- a completion that woke the task before the cancellation stands ----- */
static int step;
static weft_future *race_fut;
static weft_task *race_victim;

static void *await_racer(void *arg) {
  (void)arg;
  void *v = NULL;
  step = 1;
  CHECK_EQ(weft_await(race_fut, &v), 0);
  CHECK_EQ(I(v), 9);
  CHECK_EQ(weft_yield(), -ECANCELED);
  return NULL;
}

static void *await_race_main(void *arg) {
  (void)arg;
  step = 0;
  race_fut = weft_future_new();
  CHECK(race_fut);
  race_victim = weft_spawn(await_racer, NULL);
  CHECK(race_victim);
  while (!step)
    CHECK_EQ(weft_yield(), 0);
  /* Woken by the result, not yet run: the result stands. */
  CHECK_EQ(weft_future_set_result(race_fut, P(9)), 0);
  CHECK_EQ(weft_cancel(race_victim), 0);
  CHECK_EQ(weft_join(race_victim, NULL), 0);
  weft_future_release(race_fut);
  check_quiet();
  return NULL;
}

static void cancel_victim_cb(void *arg) {
  (void)arg;
  CHECK_EQ(weft_cancel(race_victim), 0);
}

static void *join_target(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  /* Runs after this task has ended and woken its joiner, before the
   * joiner runs (a task made ready now waits for the next turn). */
  CHECK_EQ(weft_call_soon(cancel_victim_cb, NULL), 0);
  return P(11);
}

static void *join_racer(void *arg) {
  void *r = NULL;
  CHECK_EQ(weft_join(arg, &r), 0);
  CHECK_EQ(I(r), 11);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  return NULL;
}

static void *join_race_main(void *arg) {
  (void)arg;
  weft_task *t = weft_spawn(join_target, NULL);
  CHECK(t);
  race_victim = weft_spawn(join_racer, t);
  CHECK(race_victim);
  CHECK_EQ(weft_join(race_victim, NULL), 0);
  check_quiet();
  return NULL;
}

static int64_t race_deadline;

static void *sleep_racer(void *arg) {
  (void)arg;
  /* A sleep's deadline is weft_loop_now() + delay. */
  race_deadline = weft_loop_now() + WEFT_MS(3);
  step = 1;
  CHECK_EQ(weft_sleep(WEFT_MS(3)), 0);
  CHECK_EQ(weft_sleep(0), -ECANCELED);
  return NULL;
}

static void *sleep_race_main(void *arg) {
  (void)arg;
  step = 0;
  race_victim = weft_spawn(sleep_racer, NULL);
  CHECK(race_victim);
  while (!step)
    CHECK_EQ(weft_yield(), 0);
  /* The same deadline, set after the sleep's: it fires right after it in
   * the same turn, when the sleeper is woken but has not run. */
  CHECK(weft_call_at(race_deadline, cancel_victim_cb, NULL));
  CHECK_EQ(weft_join(race_victim, NULL), 0);
  check_quiet();
  return NULL;
}

static void test_completed_first(void) {
  run_case("await woken, then cancelled", await_race_main, NULL);
  run_case("join woken, then cancelled", join_race_main, NULL);
  run_case("sleep woken, then cancelled", sleep_race_main, NULL);
}

/* ---- write_all cancelled midway ------------------------------------------ */
#define BIG (4 << 20)
static int wa_sv[2];
static int wa_entering;

static void *big_writer(void *arg) {
  unsigned char *buf = arg;
  wa_entering = 1;
  ssize_t n = weft_write_all(wa_sv[1], buf, BIG);
  /* Some went out before the cancellation, not all. */
  CHECK_GT(n, 0);
  CHECK_LT(n, BIG);
  /* The next call reports the cancellation. */
  CHECK_EQ(weft_write_all(wa_sv[1], buf, BIG), -ECANCELED);
  return P(n);
}

static void *write_all_main(void *arg) {
  (void)arg;
  unsigned char *buf = malloc(BIG);
  CHECK(buf);
  for (int i = 0; i < BIG; i++)
    buf[i] = (unsigned char)(i * 13 + i / 509);
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wa_sv), 0);
  set_nonblock(wa_sv[0]);
  wa_entering = 0;
  weft_task *t = weft_spawn(big_writer, buf);
  CHECK(t);
  while (!wa_entering)
    CHECK_EQ(weft_yield(), 0);
  /* Long enough for the first write to reach the kernel (on io_uring a
   * request cancelled in the turn it was made never does). */
  CHECK_EQ(weft_sleep(WEFT_MS(10)), 0);
  CHECK_EQ(weft_cancel(t), 0);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  /* The peer got exactly what write_all said went out. */
  unsigned char *got = malloc(BIG);
  CHECK(got);
  size_t have = 0;
  for (;;) {
    ssize_t n = read(wa_sv[0], got + have, BIG - have);
    if (n <= 0) {
      CHECK_EQ(n, -1);
      CHECK(errno == EAGAIN || errno == EWOULDBLOCK);
      break;
    }
    have += (size_t)n;
  }
  CHECK_EQ(have, I(r));
  CHECK(memcmp(got, buf, have) == 0);
  free(got);
  free(buf);
  CHECK_EQ(weft_close(wa_sv[0]), 0);
  CHECK_EQ(weft_close(wa_sv[1]), 0);
  check_quiet();
  return NULL;
}

/* ---- weft_cancel's return values ------------------------------------------ */
static int ended;

static void *mark_end(void *arg) {
  (void)arg;
  ended = 1;
  return P(3);
}

static void *esrch_main(void *arg) {
  (void)arg;
  CHECK_EQ(weft_cancel(NULL), -EINVAL);
  /* Joined. */
  weft_task *t = weft_spawn(quick, P(1));
  CHECK(t);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(weft_cancel(t), -ESRCH);
  /* Its record reused by a new task: still -ESRCH, and the new task is not
   * the one cancelled. */
  weft_task *u = weft_spawn(sleep_until_cancelled, NULL);
  CHECK(u);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), -ESRCH);
  CHECK_EQ(weft_cancel(u), 0);
  CHECK_EQ(weft_cancel(u), 0); /* twice: still 0 */
  void *r;
  CHECK_EQ(weft_join(u, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  /* Detached, then ended. */
  ended = 0;
  t = weft_spawn(mark_end, NULL);
  CHECK(t);
  CHECK_EQ(weft_detach(t), 0);
  while (!ended)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), -ESRCH);
  /* Ended, not joined yet: -ESRCH, and the handle still joins. */
  ended = 0;
  t = weft_spawn(mark_end, NULL);
  CHECK(t);
  while (!ended)
    CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(t), -ESRCH);
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 3);
  check_quiet();
  return NULL;
}

/* -ECANCELED keeps coming until the task returns; a task may cancel itself. */
static void *self_canceller(void *arg) {
  (void)arg;
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(weft_self()), 0);
  weft_future *f = weft_future_new();
  CHECK(f);
  CHECK_EQ(weft_future_set_result(f, P(1)), 0);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  CHECK_EQ(send(sv[1], "d", 1, 0), 1);
  char c;
  for (int i = 0; i < 100; i++) {
    CHECK_EQ(weft_yield(), -ECANCELED);
    CHECK_EQ(weft_sleep(0), -ECANCELED);
    CHECK_EQ(weft_sleep(FOREVER), -ECANCELED);
    CHECK_EQ(weft_await(f, NULL), -ECANCELED); /* done: still a checkpoint */
    CHECK_EQ(weft_recv(sv[0], &c, 1, 0), -ECANCELED);
    CHECK_EQ(weft_wait_fd(sv[0], WEFT_READ), -ECANCELED);
    CHECK_EQ(weft_send(sv[1], "e", 1, 0), -ECANCELED);
  }
  /* Nothing was consumed, nothing sent. */
  CHECK_EQ(recv(sv[0], &c, 1, MSG_DONTWAIT), 1);
  CHECK_EQ(c, 'd');
  CHECK_EQ(recv(sv[0], &c, 1, MSG_DONTWAIT), -1);
  CHECK_EQ(errno, EAGAIN);
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  weft_future_release(f);
  return P(1);
}

static void *self_cancel_main(void *arg) {
  (void)arg;
  weft_task *t = weft_spawn(self_canceller, NULL);
  CHECK(t);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), 1);
  CHECK_EQ(weft_cancel(t), -ESRCH);
  check_quiet();
  return NULL;
}

/* Calls that could complete at once are cancellation points all the same,
 * and do not happen: a join of a finished task (the handle stays), stream
 * calls the buffer could serve (nothing consumed, nothing queued). They
 * once returned their result. */
static void *finishes(void *arg) { return arg; }

static void *could_complete_main(void *arg) {
  (void)arg;
  weft_task *t = weft_spawn(finishes, (void *)9);
  CHECK(t);
  CHECK_EQ(weft_yield(), 0); /* t has finished */
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(write(sv[1], "one\ntwo\n", 8), 8);
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK(s);
  char buf[16];
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 4); /* "two" buffered */
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() - 1);
  void *r;
  CHECK_EQ(weft_join(t, &r), -ETIMEDOUT);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), -ETIMEDOUT);
  CHECK_EQ(weft_stream_read(s, buf, 2), -ETIMEDOUT);
  CHECK_EQ(weft_stream_read_exact(s, buf, 2), -ETIMEDOUT);
  CHECK_EQ(weft_stream_write(s, "x", 1), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&sc), -ETIMEDOUT);
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK(r == (void *)9);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 4);
  CHECK(memcmp(buf, "two\n", 4) == 0);
  CHECK_EQ(weft_stream_flush(s), 0); /* nothing was queued */
  CHECK_EQ(recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), -1);
  t = weft_spawn(finishes, NULL);
  CHECK(t);
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_cancel(weft_self()), 0);
  CHECK_EQ(weft_join(t, NULL), -ECANCELED);
  CHECK_EQ(weft_detach(t), 0); /* the handle stayed valid */
  CHECK_EQ(weft_stream_close(s), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* ---- a connect stopped as it completes ----------------------------------
 * CR_ROUNDS connects to a loopback listener with room, each stopped at
 * another moment: weft_cancel from this task after 0-4 yields or from a
 * callback queued then, or a deadline 0-40 us ahead. Each returns 0 (the
 * connection is made: a byte goes there and back), -ECANCELED or
 * -ETIMEDOUT, and nothing else (io_uring's connect request may complete
 * although cancelled: then 0); one cancelled before its task ran is
 * -ECANCELED. Every socket ends with a reset (no TIME_WAIT pile-up), and
 * run_case finds nothing left. */
#define CR_ROUNDS 600
static struct sockaddr_in cr_addr;
static int64_t cr_deadline; /* -1: none */

static void *cr_echo(void *arg) {
  int fd = (int)I(arg);
  char c;
  ssize_t n = weft_recv(fd, &c, 1, 0);
  if (n == 1)
    CHECK_EQ(weft_send(fd, &c, 1, 0), 1);
  else
    CHECK(n == 0 || n == -ECONNRESET); /* a stopped connect, made after */
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

static void *cr_server(void *arg) {
  int lfd = (int)I(arg);
  for (;;) {
    int s = weft_accept(lfd, NULL, NULL);
    if (s == -ECANCELED)
      return NULL;
    CHECK_GE(s, 0);
    CHECK_EQ(weft_go(cr_echo, P(s)), 0);
  }
}

static void *cr_connector(void *arg) {
  int fd = (int)I(arg);
  if (cr_deadline < 0)
    return P(weft_connect(fd, (struct sockaddr *)&cr_addr, sizeof cr_addr));
  weft_scope sc;
  weft_scope_enter(&sc, weft_now() + cr_deadline);
  int rc = weft_connect(fd, (struct sockaddr *)&cr_addr, sizeof cr_addr);
  int ex = weft_scope_exit(&sc);
  if (rc == -ETIMEDOUT)
    CHECK_EQ(ex, -ETIMEDOUT);
  else
    CHECK_EQ(rc, 0); /* ex: the deadline may have come as it completed */
  return P(rc);
}

static int cr_cb_ran;

/* -ESRCH if the connect was over before the callback came. */
static void cr_cancel_cb(void *arg) {
  int rc = weft_cancel(arg);
  CHECK(rc == 0 || rc == -ESRCH);
  cr_cb_ran = 1;
}

static void *connect_race_main(void *arg) {
  (void)arg;
  int lfd = listen_on(&cr_addr, 64);
  weft_task *server = weft_spawn(cr_server, P(lfd));
  CHECK(server);
  int made = 0, cancelled = 0, timed_out = 0;
  for (int i = 0; i < CR_ROUNDS; i++) {
    int how = i % 3, yields = (i / 3) % 5;
    cr_cb_ran = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    CHECK_GE(fd, 0);
    cr_deadline = how == 2 ? yields * (int64_t)10000 : -1;
    weft_task *t = weft_spawn(cr_connector, P(fd));
    CHECK(t);
    if (how == 2) {
      /* the deadline stops it */
    } else if (how == 0 && yields == 0) {
      CHECK_EQ(weft_cancel(t), 0); /* before it ran */
    } else {
      for (int k = 0; k < yields; k++)
        CHECK_EQ(weft_yield(), 0);
      if (how == 0) {
        int rc = weft_cancel(t); /* -ESRCH: over already */
        CHECK(rc == 0 || rc == -ESRCH);
      } else
        CHECK_EQ(weft_call_soon(cr_cancel_cb, t), 0);
    }
    while (how == 1 && !cr_cb_ran) /* t's handle is good until joined */
      CHECK_EQ(weft_yield(), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    if (how == 0 && yields == 0)
      CHECK_EQ(I(r), -ECANCELED);
    if (I(r) == 0) {
      made++;
      CHECK_EQ(weft_send(fd, "k", 1, 0), 1);
      char c = 0;
      CHECK_EQ(weft_recv(fd, &c, 1, 0), 1);
      CHECK_EQ(c, 'k');
    } else if (I(r) == -ECANCELED) {
      CHECK_NE(how, 2);
      cancelled++;
    } else {
      CHECK_EQ(I(r), -ETIMEDOUT);
      CHECK_EQ(how, 2);
      timed_out++;
    }
    struct linger lg = {1, 0};
    CHECK_EQ(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
    CHECK_EQ(weft_close(fd), 0);
  }
  CHECK_GT(made, 0);
  CHECK_GT(cancelled, 0);
  CHECK_GT(timed_out, 0);
  CHECK_EQ(weft_cancel(server), 0);
  CHECK_EQ(weft_join(server, NULL), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
    int fds = check_fd_count();
  connect_blocks = probe_connect();
  test_matrix();
  test_completed_first();
  run_case("write_all cancelled midway", write_all_main, NULL);
  run_case("weft_cancel's -ESRCH", esrch_main, NULL);
  run_case("a task cancels itself", self_cancel_main, NULL);
  run_case("calls that could complete at once", could_complete_main, NULL);
  run_case("connects stopped as they complete", connect_race_main, NULL);
  CHECK_EQ(check_fd_count(), fds);
  printf("test_cancel: ok\n");
  return 0;
}
