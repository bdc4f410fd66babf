/*
 * Layer 4: the io_uring backend: completions, not readiness. Each I/O call
 * becomes one request on the loop's ring, and the task parks until its
 * completion comes back:
 *
 *   weft_recv ── SQE (user_data: a uring_op on the task's stack) ── park
 *                                                                    │
 *   loop turn: io_uring_submit_and_wait_timeout: every SQE of the    │
 *   turn and the wait in one io_uring_enter, capped by the nearest   │
 *   timer ── CQE ── uring_op.res, wake ───────────────────────────────┘
 *
 * So a busy server pays one system call per turn, not two or three per
 * message.
 *
 * The buffer of a request belongs to the kernel until its completion is
 * reaped, even when the task is cancelled: the cancelled call submits an
 * IORING_OP_ASYNC_CANCEL and then waits, cancellation or not
 * (weft__park_raw), for the request's own completion. A recv that
 * completed anyway returns its data (the cancellation is level-triggered,
 * so the next call sees it); the same for a send, an accept (no fd is
 * lost) and a read. weft_loop_free waits out every request still in flight
 * (quiesce) before the stacks go.
 *
 * What has no completion form goes the readiness way (weft__io_readiness),
 * with IORING_OP_POLL_ADD, one-shot, in place of epoll: weft_wait_fd, the
 * loop's own eventfd, connect (rare, and its EINTR and EAGAIN rules are
 * there already), MSG_DONTWAIT (the call itself never blocks), and a pipe
 * or tty that answers -EAGAIN because it is O_NONBLOCK (weft makes the fds
 * it sees non-blocking, and io_uring honours that for pipes). weft_read and
 * weft_write of a regular file are plain read(2) and write(2), as on epoll
 * (see uring_io).
 *
 * user_data: 0 for what nobody waits for (a cancel, a poll removal); an
 * odd value for a poll watch: (slot << 32) | (fd << 1) | 1, where the slot
 * (weft__fd.slot: a generation << 2, and the events asked for) tells a
 * completion of the fd's current watch from a stale one; else the address
 * of the uring_op; that of a listener, with 2 added, for its multishot
 * accept; that of a receiver (struct rx), with 4 added, for its multishot
 * recv.
 */
#include "backend.h"

#ifdef WEFT_HAVE_URING

#include "fault.h"
#include "tools.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <liburing.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifdef WEFT_VALGRIND
#include <valgrind/memcheck.h>
/* The kernel wrote len bytes at p behind memcheck's back. */
#define KERNEL_WROTE(p, len) VALGRIND_MAKE_MEM_DEFINED((p), (len))
#else
#define KERNEL_WROTE(p, len) ((void)(p), (void)(len))
#endif

#define SQ_ENTRIES 256
#define TAG_ACCEPT 2u
#define TAG_RX     4u
#define TAG_MASK   7u
#define CQ_ENTRIES 4096

struct uring_op;

/* The calls waiting on a multishot request (a listener's or a receiver's),
 * in the order they came. */
typedef struct waitlist {
  struct uring_op *first, *last;
} waitlist;

/* One request of a task, on the task's stack from its SQE to its CQE. */
typedef struct uring_op {
  weft__waiter w;    /* on the fd's waiters (events 0): weft_close wakes it */
  int res;           /* the completion's result */
  uint8_t done;      /* the completion came */
  uint8_t linked;    /* w is on the fd's list, counted in loop->nwaiters */
  uint8_t retracted; /* made a no-op before submission: res stays */
  uint8_t closes;    /* weft_file_close's IORING_OP_CLOSE */
  uint8_t cancelled; /* its cancellation is asked already (uring_closing) */
  uint8_t drop_fd;   /* an open whose task the loop dropped: the fd it
                      * brings is closed (drop_opened) */
  struct io_uring_sqe *sqe;     /* its SQE, while it may not be submitted */
  unsigned batch;               /* uring_state.batch when it was prepared */
  uint8_t queued;               /* on a waitlist: the one below */
  struct uring_op *prev, *next; /* a call waiting on a multishot request:
                                 * its links in ... */
  waitlist *wl;                 /* ... this list, of ... */
  struct listener *l;           /* ... this listener, or ... */
  struct rx *r;                 /* ... this receiver */
} uring_op;

/* What a listener and a receiver (below) share: one multishot request
 * for an fd. While the fd is open its record is in a table indexed by fd;
 * weft_close detaches it, and a detached record whose request is still in
 * the kernel waits on the table's detached list until the request ends. */
typedef struct multishot {
  int fd;
  uint8_t armed;    /* its request is in the kernel */
  uint8_t detached; /* weft_close: freed when the request has ended */
  struct io_uring_sqe *sqe; /* its SQE, while it may not be submitted */
  unsigned batch;           /* uring_state.batch when it was prepared */
  waitlist waiting; /* the calls waiting on it */
  struct multishot *next_detached;
} multishot;

typedef struct mstable {
  multishot **v;       /* indexed by fd: the fd's record, or NULL */
  size_t n;            /* entries in v */
  multishot *detached; /* closed, their request not yet ended */
} mstable;

/* A listening socket accepted from with weft_accept: one multishot accept
 * request serves every call (the address, if wanted, comes from
 * getpeername), and the connections it brings while no call waits are
 * queued here. The queue is bounded: at LISTEN_QUEUE_MAX the request is
 * cancelled (the kernel's own backlog holds the rest), and the next call
 * that finds the queue empty asks again. */
#define LISTEN_QUEUE_MAX 64

typedef struct listener {
  multishot ms; /* first: a multishot * is a listener * (ls table) */
  int err;      /* a failure for the next call (0: none) */
  int *q;       /* accepted fds, q[head..head+len) in a ring of cap */
  unsigned head, len, cap;
} listener;

/* A stream socket read with a multishot recv (weft_recv, weft_read): the
 * kernel fills buffers of the loop's ring (st->bufs) as data comes, and
 * what no call has taken yet is queued here, in arrival order. */
#define RX_BGID      1    /* the buffer group of the ring */
#define RX_NBUFS     256  /* buffers in the ring (a power of two) ... */
#define RX_BUFSZ     4096 /* ... of this size: 1 MiB per loop */
#define RX_QUEUE_MAX 8    /* chunks queued before the request is stopped */

/* The queues of chunks: a buffer is in one socket's queue at most, so the
 * links live per buffer, after the buffers (st->links), and queueing a
 * chunk never allocates (an allocation that failed there once dropped the
 * chunk's bytes from the middle of the stream). */
typedef struct rx_links {
  uint16_t next[RX_NBUFS]; /* the buffer after it in its queue */
  uint32_t len[RX_NBUFS];  /* bytes in it */
} rx_links;

typedef struct rx {
  multishot ms;     /* first: a multishot * is an rx * (rxs table) */
  uint8_t stopping; /* a cancellation of the request is on its way */
  uint8_t eof;      /* the peer's end of stream, after the queue */
  uint8_t plain;    /* the kernel had no buffer (ENOBUFS): the next call
                     * that finds the queue empty reads the plain way */
  int err;          /* an error, for the call that finds the queue empty */
  uint16_t first, last; /* the queue: buffers linked by st->links */
  unsigned len;         /* ... how many */
  uint32_t off;         /* bytes of the first already taken */
  unsigned streak;      /* chunks taken since the reader last parked (below) */
} rx;

/* A completion taken out of the CQ without being run (uring_closing). */
typedef struct aside_cqe {
  uint64_t ud;
  int32_t res;
  uint32_t flags;
} aside_cqe;

typedef struct uring_state {
  struct io_uring ring;
  unsigned ninflight; /* requests of tasks whose completion has not come
                       * (each task has at most one: weft_task.io) */
  uint32_t gen;       /* the last watch generation handed out */
  unsigned batch;     /* bumped by each submission to the kernel */
  unsigned reaps;     /* bumped by get_sqe's reap (completions ran) */
  int valgrind;       /* RUNNING_ON_VALGRIND, asked once */
  mstable ls;         /* listeners: multishot accept state */
  mstable rxs;        /* receivers: multishot recv state */
  unsigned narmed;    /* multishot accepts and recvs in the kernel */
  int rx_on;          /* multishot recv: 0 not tried yet, 1 on, -1 off */
  struct io_uring_buf_ring *br; /* the provided buffer ring ... */
  size_t br_bytes;              /* ... its size (mmap'ed) ... */
  char *bufs;                   /* ... and the buffers it hands out */
  rx_links *links;              /* ... and the queues through them */
  int draining;                 /* quiesce: completions wake nobody */
  aside_cqe *aside; /* completions uring_closing moved out of a full CQ,
                     * not run yet: reap runs them before the CQ's */
  size_t naside, aside_head, aside_cap;
  int openat;  /* IORING_OP_OPENAT is there: weft_file_open is a request */
  int connect; /* IORING_OP_CONNECT is there: an IP connect is a request */
} uring_state;

static inline uring_state *state(weft_loop *loop) { return loop->backend_data; }

/* ---- setting up --------------------------------------------------------- */
/* The operations weft submits; a kernel without one of them is refused
 * (the loop falls back to epoll). IORING_OP_OPENAT and IORING_OP_CONNECT
 * are not needed: without them weft_file_open goes to the pool
 * (st->openat), and weft_connect waits for readiness (st->connect). */
static const struct {
  int op;
  const char *name;
} needed[] = {
    {IORING_OP_READ, "READ"},
    {IORING_OP_WRITE, "WRITE"},
    {IORING_OP_RECV, "RECV"},
    {IORING_OP_SEND, "SEND"},
    {IORING_OP_RECVMSG, "RECVMSG"},
    {IORING_OP_SENDMSG, "SENDMSG"},
    {IORING_OP_ACCEPT, "ACCEPT"},
    {IORING_OP_CLOSE, "CLOSE"},
    {IORING_OP_FSYNC, "FSYNC"},
    {IORING_OP_POLL_ADD, "POLL_ADD"},
    {IORING_OP_POLL_REMOVE, "POLL_REMOVE"},
    {IORING_OP_ASYNC_CANCEL, "ASYNC_CANCEL"},
};

/* Why init failed, for the loop's one-line notice (loop.c). */
static __thread const char *why_not;

const char *weft__uring_why_not(void) { return why_not; }

static int probe_ring(struct io_uring *ring, const struct io_uring_params *p,
                      uring_state *st) {
  /* EXT_ARG: the wait's timeout goes with io_uring_enter, no timeout SQE;
   * NODROP: a full completion queue loses nothing; RW_CUR_POS: offset -1
   * reads a pipe or a socket. */
  if (!(p->features & IORING_FEAT_EXT_ARG) ||
      !(p->features & IORING_FEAT_NODROP) ||
      !(p->features & IORING_FEAT_RW_CUR_POS)) {
    why_not = "the kernel lacks IORING_FEAT_EXT_ARG, NODROP or RW_CUR_POS";
    return -ENOSYS;
  }
  struct io_uring_probe *pr = io_uring_get_probe_ring(ring);
  if (!pr) {
    why_not = "io_uring_get_probe failed";
    return -ENOSYS;
  }
  int rc = 0;
  for (size_t i = 0; i < sizeof needed / sizeof needed[0] && !rc; i++)
    if (!io_uring_opcode_supported(pr, needed[i].op)) {
      static __thread char msg[64];
      snprintf(msg, sizeof msg, "the kernel lacks IORING_OP_%s",
               needed[i].name);
      why_not = msg;
      rc = -ENOSYS;
    }
  st->openat = io_uring_opcode_supported(pr, IORING_OP_OPENAT);
  st->connect = io_uring_opcode_supported(pr, IORING_OP_CONNECT);
  io_uring_free_probe(pr);
  return rc;
}

/* One NOP through io_uring_enter, waited for. Setting up a ring and
 * probing it take io_uring_setup and io_uring_register only, so a seccomp
 * filter that forbids io_uring_enter alone would pass them, and the loop's
 * first run would fail instead of falling back. One system call a loop. */
static int enter_once(struct io_uring *ring) {
  io_uring_prep_nop(io_uring_get_sqe(ring)); /* the queue is empty */
  int rc = io_uring_submit_and_wait(ring, 1);
  if (rc < 0) {
    static __thread char msg[64];
    snprintf(msg, sizeof msg, "io_uring_enter: %s", strerror(-rc));
    why_not = msg;
    return rc;
  }
  struct io_uring_cqe *cqe;
  if (io_uring_peek_cqe(ring, &cqe) == 0)
    io_uring_cqe_seen(ring, cqe);
  return 0;
}

/* WEFT_URING_PBUF asked for what this loop does not do: said on stderr,
 * once a process, as the fallback from io_uring is (loop.c). */
static void pbuf_notice(const char *value, const char *why) {
  static int said;
  if (__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
    return;
  fprintf(stderr, "weft: WEFT_URING_PBUF=%s: %s; a recv request per call\n",
          value, why);
}

static int uring_init(weft_loop *loop) {
  why_not = NULL; /* and -ENOMEM is weft's own allocation failing */
  uring_state *st = weft__calloc(1, sizeof *st);
  if (!st)
    return -ENOMEM;
  /* The loop is one thread's (SINGLE_ISSUER), and completions need only
   * be ready when the loop asks for them (DEFER_TASKRUN, Linux 6.1): the
   * kernel then does their work in the loop's io_uring_enter instead of
   * interrupting the task that runs. Older kernels refuse the flags. */
  static const unsigned tries[] = {
      IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN |
          IORING_SETUP_SUBMIT_ALL,
      IORING_SETUP_SUBMIT_ALL | IORING_SETUP_COOP_TASKRUN,
      0,
  };
  int rc = -EINVAL;
  struct io_uring_params p;
  /* Under valgrind the wait is a poll of the ring's fd (valgrind_poll),
   * which completions deferred to the loop's enter would not wake. */
  for (size_t i = RUNNING_ON_VALGRIND ? 1 : 0;
       i < sizeof tries / sizeof tries[0] && rc == -EINVAL; i++) {
    memset(&p, 0, sizeof p);
    p.flags = tries[i] | IORING_SETUP_CQSIZE;
    p.cq_entries = CQ_ENTRIES;
    rc = io_uring_queue_init_params(SQ_ENTRIES, &st->ring, &p);
  }
  if (rc < 0) {
    if (rc == -ENOMEM) /* the kernel's: told apart from weft's own */
      why_not = "the kernel could not allocate the ring (RLIMIT_MEMLOCK?)";
    weft__free(st);
    return rc;
  }
  if ((rc = probe_ring(&st->ring, &p, st)) < 0 ||
      (rc = enter_once(&st->ring)) < 0) {
    io_uring_queue_exit(&st->ring);
    weft__free(st);
    return rc;
  }
  st->valgrind = RUNNING_ON_VALGRIND;
  /* Multishot recv is off unless asked for (see "multishot recv" below);
   * asked, it is set up at the first read of a socket. */
  const char *env = getenv("WEFT_URING_PBUF");
  if (!env || strcmp(env, "1") != 0) {
    st->rx_on = -1;
    if (env && *env && strcmp(env, "0") != 0)
      pbuf_notice(env, "only 1 turns it on");
  }
  loop->backend_data = st;
  return 0;
}

static void ms_free_all(uring_state *st, mstable *t,
                        void (*free_fn)(uring_state *, multishot *));
static void listener_free(uring_state *st, multishot *m);
static void rx_free(uring_state *st, multishot *m);

static void uring_fini(weft_loop *loop) {
  uring_state *st = state(loop);
  if (!st)
    return;
  io_uring_queue_exit(&st->ring);
  ms_free_all(st, &st->ls, listener_free);
  ms_free_all(st, &st->rxs, rx_free);
  if (st->br)
    munmap(st->br, st->br_bytes);
  weft__free(st->bufs);
  weft__free(st->aside);
  weft__free(st);
  loop->backend_data = NULL;
}

/* ---- completions -------------------------------------------------------- */
static int reap(weft_loop *loop, uring_state *st);
static int set_aside(uring_state *st, int fd);

/* A free SQE: when the submission queue is full, what is in it goes to the
 * kernel first. Should the kernel push back (EBUSY: its completion backlog
 * is full; EAGAIN), the completions are moved aside, not run: a caller
 * walking a list (uring_closing's waiters, quiesce's receivers) must not
 * have a completion change it under the walk. Only without the memory for
 * that are they run here (reaps tells uring_closing to walk again). */
static struct io_uring_sqe *get_sqe(weft_loop *loop, uring_state *st) {
  for (;;) {
    struct io_uring_sqe *sqe = io_uring_get_sqe(&st->ring);
    if (sqe)
      return sqe;
    st->batch++;
    int rc = io_uring_submit(&st->ring);
    if (rc != -EBUSY && rc != -EAGAIN)
      continue;
    if (io_uring_cq_ready(&st->ring)) {
      if (set_aside(st, -1) < 0) {
        st->reaps++;
        reap(loop, st);
      }
    } else if (io_uring_cq_has_overflow(&st->ring)) {
      (void)io_uring_get_events(&st->ring); /* into the CQ, for the above */
    }
  }
}

/* The waiter of u leaves its fd's list, or the bare count of waiters. */
static void op_unlink(weft_loop *loop, uring_op *u) {
  if (u->linked) {
    if (u->w.fd >= 0) /* weft_close may have taken it off already */
      weft__waiter_unlink(loop, &u->w);
    u->linked = 0;
  }
}

static void arm(weft_loop *loop, uring_state *st, int fd, weft__fd *e);

/* A poll watch completed: pass the events on, and watch again if they are
 * still wanted (the poll is one-shot, so an fd nobody waits on costs
 * nothing). */
static void watch_done(weft_loop *loop, uring_state *st, uint64_t ud, int res) {
  int fd = (int)((uint32_t)ud >> 1);
  uint32_t slot = (uint32_t)(ud >> 32);
  if ((size_t)fd >= loop->nfds)
    return;
  weft__fd *e = &loop->fds[fd];
  if (!(e->flags & FD_WATCHED) || e->slot != slot)
    return; /* a watch removed since (the fd may be another one now) */
  e->flags &= (uint8_t)~FD_WATCHED;
  e->slot = 0;
  int events = 0;
  if (res < 0)
    events = WEFT_READ | WEFT_WRITE | WEFT__EXCEPT;
  else {
    if (res & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))
      events |= WEFT_READ;
    if (res & (POLLOUT | POLLHUP | POLLERR))
      events |= WEFT_WRITE;
    if (res & (POLLRDHUP | POLLHUP | POLLERR))
      events |= WEFT__EXCEPT;
  }
  weft__fd_event(loop, fd, events);
  e = &loop->fds[fd];
  if (e->wanted && !(e->flags & FD_WATCHED))
    arm(loop, st, fd, e);
}

static void accept_done(weft_loop *loop, uring_state *st, listener *l, int res,
                        unsigned flags);
static void rx_done(weft_loop *loop, uring_state *st, rx *r, int res,
                    unsigned flags);

static void complete(weft_loop *loop, uring_state *st, uint64_t ud, int res,
                     unsigned flags) {
  if (ud == 0)
    return;
  if ((ud & TAG_MASK) == TAG_ACCEPT) {
    accept_done(loop, st, (listener *)(uintptr_t)(ud & ~(uint64_t)TAG_MASK),
                res, flags);
    return;
  }
  if ((ud & TAG_MASK) == TAG_RX) {
    rx_done(loop, st, (rx *)(uintptr_t)(ud & ~(uint64_t)TAG_MASK), res, flags);
    return;
  }
  if (ud & 1) {
    if (!st->draining)
      watch_done(loop, st, ud, res);
    return;
  }
  uring_op *u = (uring_op *)(uintptr_t)ud;
  if (!u->retracted)
    u->res = res;
  u->done = 1;
  u->w.task->io = NULL;
  st->ninflight--;
  if (st->draining) {
    if (u->drop_fd && u->res >= 0)
      close(u->res);
    return;
  }
  op_unlink(loop, u);
  weft__wake(u->w.task, 0);
}

/* Takes every completion there is; returns how many. */
static int reap(weft_loop *loop, uring_state *st) {
  int n = 0;
  /* Those set aside first: they came before the CQ's. (By index: a
   * completion run may set more aside, or reap.) */
  while (st->aside_head < st->naside) {
    aside_cqe c = st->aside[st->aside_head++];
    complete(loop, st, c.ud, c.res, c.flags);
    n++;
  }
  st->aside_head = st->naside = 0;
  struct io_uring_cqe *cqe;
  while (io_uring_peek_cqe(&st->ring, &cqe) == 0) {
    uint64_t ud = cqe->user_data;
    int res = cqe->res;
    unsigned flags = cqe->flags;
    io_uring_cqe_seen(&st->ring, cqe);
    complete(loop, st, ud, res, flags);
    n++;
  }
  return n;
}

/* Valgrind (3.19) does not know that io_uring_enter may block: it keeps
 * its lock across the wait, so no other thread runs, and a wake-up from
 * the pool never comes. Under it, the wait is a poll(2) of the ring's fd
 * (readable once completions are there), which it does know. */
static int valgrind_poll(weft_loop *loop, uring_state *st, int64_t timeout) {
  int rc = io_uring_submit_and_get_events(&st->ring);
  if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN)
    return rc;
  if (!io_uring_cq_ready(&st->ring)) {
    struct pollfd p = {st->ring.ring_fd, POLLIN, 0};
    int64_t ms = timeout < 0 ? -1 : (timeout + 999999) / 1000000;
    if (poll(&p, 1, ms > INT_MAX ? INT_MAX : (int)ms) > 0)
      io_uring_get_events(&st->ring);
  }
  return reap(loop, st);
}

/* Submits the turn's SQEs and waits at most `timeout` ns (-1: no limit, 0:
 * not at all) for a completion, in one io_uring_enter. */
static int uring_poll(weft_loop *loop, int64_t timeout) {
  uring_state *st = state(loop);
  int rc;
  st->batch++;
  if (st->aside_head < st->naside)
    timeout = 0; /* completions are there, set aside: no waiting */
  if (st->valgrind && timeout != 0)
    return valgrind_poll(loop, st, timeout);
  if (timeout == 0)
    rc = io_uring_submit_and_get_events(&st->ring);
  else if (timeout < 0)
    rc = io_uring_submit_and_wait(&st->ring, 1);
  else {
    struct __kernel_timespec ts = {timeout / 1000000000, timeout % 1000000000};
    struct io_uring_cqe *cqe;
    rc = io_uring_submit_and_wait_timeout(&st->ring, &cqe, 1, &ts, NULL);
  }
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN)
    return rc;
  return reap(loop, st);
}

/* ---- watching fds (the readiness way) ----------------------------------- */
#define SLOT_EVENTS(slot) ((slot)&3u)

static uint64_t watch_tag(int fd, uint32_t slot) {
  return ((uint64_t)slot << 32) | ((uint64_t)(uint32_t)fd << 1) | 1u;
}

static void arm(weft_loop *loop, uring_state *st, int fd, weft__fd *e) {
  st->gen = (st->gen + 1) & 0x3fffffffu;
  if (st->gen == 0)
    st->gen = 1;
  uint32_t slot = st->gen << 2 | (e->wanted & 3u);
  unsigned mask = (e->wanted & WEFT_READ ? POLLIN | POLLRDHUP : 0) |
                  (e->wanted & WEFT_WRITE ? POLLOUT : 0);
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  e = &loop->fds[fd];
  io_uring_prep_poll_add(sqe, fd, mask);
  io_uring_sqe_set_data64(sqe, watch_tag(fd, slot));
  e->slot = slot;
  e->flags |= FD_WATCHED;
}

static void disarm(weft_loop *loop, uring_state *st, int fd, weft__fd *e) {
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  e = &loop->fds[fd];
  io_uring_prep_poll_remove(sqe, watch_tag(fd, e->slot));
  io_uring_sqe_set_data64(sqe, 0);
  e->flags &= (uint8_t)~FD_WATCHED;
  e->slot = 0;
}

static int uring_watch(weft_loop *loop, int fd, weft__fd *e) {
  uring_state *st = state(loop);
  if (!e->wanted)
    return 0; /* first sight of the fd: nothing to watch for yet */
  if (e->flags & FD_WATCHED) {
    if (SLOT_EVENTS(e->slot) == e->wanted)
      return 0;
    disarm(loop, st, fd, e);
  }
  arm(loop, st, fd, &loop->fds[fd]);
  return 0;
}

static void uring_unwatch(weft_loop *loop, int fd, weft__fd *e, int closing) {
  uring_state *st = state(loop);
  if (e->flags & FD_WATCHED) {
    if (!closing && SLOT_EVENTS(e->slot) == e->wanted)
      return;
    disarm(loop, st, fd, e);
  }
  e = &loop->fds[fd];
  if (!closing && e->wanted)
    arm(loop, st, fd, e);
}

/* ---- requests ----------------------------------------------------------- */
static void undo_op(weft_task *t, void *arg) { op_unlink(t->loop, arg); }

/* u becomes the record of the request just prepared in sqe, in flight. */
static void op_start(uring_state *st, uring_op *u, struct io_uring_sqe *sqe,
                     int fd) {
  io_uring_sqe_set_data(sqe, u);
  u->w.task = weft__running_task();
  u->w.fd = fd;
  u->w.events = 0;
  u->res = 0;
  u->done = u->linked = u->retracted = u->queued = u->closes = 0;
  u->cancelled = 0;
  u->drop_fd = 0;
  u->sqe = sqe;
  u->batch = st->batch;
  u->w.task->io = u;
  st->ninflight++;
}

/* u's request, in sqe and not yet submitted, becomes a no-op in place: the
 * kernel never sees the buffer, and the call returns res. */
static void op_retract(uring_op *u, struct io_uring_sqe *sqe, int res) {
  io_uring_prep_nop(sqe);
  io_uring_sqe_set_data(sqe, u);
  u->res = res;
  u->retracted = 1;
}

/* Parks the running task until the request just prepared (sqe, on fd)
 * completes, and returns its result. Cancelled, timed out or closed
 * meanwhile, it asks the kernel to cancel the request, waits for its
 * completion all the same, and returns the request's result if it
 * succeeded after all, else why it stopped. A file's request (`file`) is
 * not stopped by a close of its fd: as on the pool, it completes, and the
 * ring's close comes after it. */
static int await_op(weft_loop *loop, uring_state *st, uring_op *u,
                    struct io_uring_sqe *sqe, int what, int fd, int file) {
  op_start(st, u, sqe, fd);
  if (file) {
    loop->nwaiters++; /* the loop waits for it all the same */
  } else {
    weft__waiter_link(loop, &u->w);
    u->linked = 1;
  }
  int rc = weft__park(what, fd, undo_op, u);
  if (file)
    loop->nwaiters--;
  if (u->done && (rc == 0 || u->res >= 0))
    return u->res;
  /* Stopped early: u is off the fd's list (undo, or weft_close). */
  if (!u->done) {
    if (u->retracted || u->cancelled) {
      /* weft_close or weft_fd_forget saw to it (uring_closing). */
    } else if (u->batch == st->batch) {
      /* Not submitted yet (cancelled in the turn it was made): it becomes
       * a no-op in place, and the kernel never sees the buffer. */
      op_retract(u, u->sqe, -ECANCELED);
    } else {
      sqe = get_sqe(loop, st);
      io_uring_prep_cancel(sqe, u, 0);
      io_uring_sqe_set_data64(sqe, 0);
    }
    loop->nwaiters++;
    while (!u->done)
      (void)weft__park_raw(what, fd);
    loop->nwaiters--;
  }
  return u->res >= 0 ? u->res : rc;
}

/* The readiness way of waiting, for an O_NONBLOCK pipe that said EAGAIN:
 * one poll request, then the caller tries again. */
static int await_ready(weft_loop *loop, uring_state *st, int fd, int dir) {
  uring_op u;
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_poll_add(sqe, fd, dir == WEFT_READ ? POLLIN : POLLOUT);
  int rc = await_op(loop, st, &u, sqe,
                    dir == WEFT_READ ? WAIT_FD_READ : WAIT_FD_WRITE, fd, 0);
  return rc < 0 ? rc : 0;
}

static void msghdr_for(struct msghdr *msg, struct iovec *iov, void *buf,
                       size_t len) {
  *iov = (struct iovec){buf, len};
  *msg = (struct msghdr){.msg_iov = iov, .msg_iovlen = 1};
}

/* What the kernel wrote for a completed input request, told to memcheck. */
static void note_written(const weft__op *op, const struct msghdr *msg,
                         ssize_t n) {
  if (n < 0)
    return;
  if (op->kind == OP_ACCEPT) {
    if (op->addrlen)
      KERNEL_WROTE(op->addrlen, sizeof *op->addrlen);
    if (op->addr && op->addrlen)
      KERNEL_WROTE(op->addr, *op->addrlen);
    return;
  }
  if (n > 0)
    KERNEL_WROTE(op->buf, (size_t)n);
  if (op->kind == OP_RECVFROM && op->addr)
    KERNEL_WROTE(op->addr, msg->msg_namelen);
}

/* ---- the calls waiting on a multishot request --------------------------- */
static void waitlist_add(waitlist *wl, uring_op *u) {
  u->wl = wl;
  u->queued = 1;
  u->next = NULL;
  u->prev = wl->last;
  if (wl->last)
    wl->last->next = u;
  else
    wl->first = u;
  wl->last = u;
}

static void waitlist_del(uring_op *u) {
  waitlist *wl = u->wl;
  if (u->prev)
    u->prev->next = u->next;
  else
    wl->first = u->next;
  if (u->next)
    u->next->prev = u->prev;
  else
    wl->last = u->prev;
  u->queued = 0;
}

/* The request served u: off the list, off its fd, awake. */
static void waitlist_wake(weft_loop *loop, uring_op *u, int res) {
  waitlist_del(u);
  u->res = res;
  u->done = 1;
  op_unlink(loop, u);
  weft__wake(u->w.task, 0);
}

/* Parks the running task on wl (and on fd's waiters, for weft_close) until
 * the request serves it. Returns 1 if it did (u->res), else why not. */
static int waitlist_park(weft_loop *loop, waitlist *wl, uring_op *u, int fd,
                         weft__undo_fn undo) {
  u->w = (weft__waiter){.task = weft__running_task(), .fd = fd};
  u->done = 0;
  weft__waiter_link(loop, &u->w);
  u->linked = 1;
  waitlist_add(wl, u);
  int rc = weft__park(WAIT_FD_READ, fd, undo, u);
  if (u->done)
    return 1;
  if (u->queued) /* weft_close woke it (-EBADF) */
    waitlist_del(u);
  return rc;
}

/* ---- multishot records --------------------------------------------------- */
/* fd's record in t, or NULL. */
static multishot *ms_at(const mstable *t, int fd) {
  return (size_t)fd < t->n ? t->v[fd] : NULL;
}

/* fd's record in t (size bytes, a multishot first), made if there is
 * none; NULL when out of memory. */
static multishot *ms_of(mstable *t, int fd, size_t size) {
  if ((size_t)fd >= t->n) {
    size_t m = t->n ? t->n : 64;
    while (m <= (size_t)fd)
      m *= 2;
    multishot **v = weft__realloc(t->v, m * sizeof *v);
    if (!v)
      return NULL;
    memset(v + t->n, 0, (m - t->n) * sizeof *v);
    t->v = v;
    t->n = m;
  }
  if (!t->v[fd] && (t->v[fd] = weft__calloc(1, size)))
    t->v[fd]->fd = fd;
  return t->v[fd];
}

/* weft_close: takes fd's record out of t, and the calls that waited on it
 * (woken with -EBADF already, by weft__fd_forget) off it. NULL if fd has
 * none. The caller frees it, or, if its request is in the kernel, detaches
 * it (ms_detach) and cancels the request. */
static multishot *ms_take(mstable *t, int fd) {
  multishot *m = ms_at(t, fd);
  if (!m)
    return NULL;
  t->v[fd] = NULL;
  while (m->waiting.first)
    waitlist_del(m->waiting.first);
  return m;
}

/* m's request, if it was prepared in this batch and so not submitted yet,
 * becomes a no-op in place: the kernel never sees it (no connection is
 * taken, no byte read). Returns 1 if so: m is no longer armed. */
static int ms_retract(uring_state *st, multishot *m) {
  if (!m->armed || m->batch != st->batch)
    return 0;
  io_uring_prep_nop(m->sqe);
  io_uring_sqe_set_data64(m->sqe, 0);
  m->armed = 0;
  st->narmed--;
  return 1;
}

static void ms_detach(mstable *t, multishot *m) {
  m->detached = 1;
  m->next_detached = t->detached;
  t->detached = m;
}

/* The request of detached m has ended: m leaves the detached list (and
 * the caller frees it). */
static void ms_undetach(mstable *t, multishot *m) {
  for (multishot **p = &t->detached; *p; p = &(*p)->next_detached)
    if (*p == m) {
      *p = m->next_detached;
      return;
    }
}

/* Frees every record of t, attached or not, with free_fn (uring_fini). */
static void ms_free_all(uring_state *st, mstable *t,
                        void (*free_fn)(uring_state *, multishot *)) {
  for (size_t fd = 0; fd < t->n; fd++)
    if (t->v[fd])
      free_fn(st, t->v[fd]);
  weft__free(t->v);
  while (t->detached) {
    multishot *m = t->detached;
    t->detached = m->next_detached;
    free_fn(st, m);
  }
}

/* Doubles a ring of len elements of sz bytes (to min, the first time),
 * unwrapping it: its first is then at 0. */
static int ring_grow(void **q, unsigned *head, unsigned len, unsigned *cap,
                     size_t sz, unsigned min) {
  unsigned ncap = *cap ? 2 * *cap : min;
  char *v = weft__malloc(ncap * sz);
  if (!v)
    return -ENOMEM;
  for (unsigned i = 0; i < len; i++)
    memcpy(v + i * sz, (char *)*q + (size_t)((*head + i) % *cap) * sz, sz);
  weft__free(*q);
  *q = v;
  *head = 0;
  *cap = ncap;
  return 0;
}

/* ---- multishot accept ---------------------------------------------------- */
static listener *listener_of(uring_state *st, int fd) {
  return (listener *)ms_of(&st->ls, fd, sizeof(listener));
}

static int queue_push(listener *l, int c) {
  if (l->len == l->cap && ring_grow((void **)&l->q, &l->head, l->len, &l->cap,
                                    sizeof *l->q, 16) < 0)
    return -ENOMEM;
  l->q[(l->head + l->len++) % l->cap] = c;
  return 0;
}

static int queue_pop(listener *l) {
  int c = l->q[l->head];
  l->head = (l->head + 1) % l->cap;
  l->len--;
  return c;
}

static void listener_free(uring_state *st, multishot *m) {
  (void)st;
  listener *l = (listener *)m;
  while (l->len)
    close(queue_pop(l));
  weft__free(l->q);
  weft__free(l);
}

static void accept_arm(weft_loop *loop, uring_state *st, listener *l) {
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_multishot_accept(sqe, l->ms.fd, NULL, NULL,
                                 SOCK_NONBLOCK | SOCK_CLOEXEC);
  io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)l | TAG_ACCEPT);
  l->ms.sqe = sqe;
  l->ms.batch = st->batch;
  l->ms.armed = 1;
  st->narmed++;
}

static void accept_cancel(weft_loop *loop, uring_state *st, listener *l) {
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)l | TAG_ACCEPT, 0);
  io_uring_sqe_set_data64(sqe, 0);
}

/* The multishot accept brought a connection (res >= 0) or ended. */
static void accept_done(weft_loop *loop, uring_state *st, listener *l, int res,
                        unsigned flags) {
  if (!(flags & IORING_CQE_F_MORE)) {
    l->ms.armed = 0;
    st->narmed--;
  }
  if (l->ms.detached) { /* weft_close'd: nobody will take it */
    if (res >= 0)
      close(res);
    if (!l->ms.armed) {
      ms_undetach(&st->ls, &l->ms);
      listener_free(st, &l->ms);
    }
    return;
  }
  if (res >= 0 || res != -ECANCELED) {
    uring_op *u = l->ms.waiting.first;
    if (u && !st->draining) { /* straight to the call that waits */
      waitlist_wake(loop, u, res);
    } else if (res >= 0) {
      if (queue_push(l, res) < 0)
        close(res); /* out of memory: the client sees the end */
      if (l->len >= LISTEN_QUEUE_MAX && l->ms.armed)
        accept_cancel(loop, st, l);
      /* weft_wait_fd on the listener sees the queue: its poll may not,
       * the kernel's backlog being empty now. */
      if (!st->draining)
        weft__fd_event(loop, l->ms.fd, WEFT_READ);
    } else if (!weft__accept_short_of(res)) {
      l->err = -res; /* for the next call */
    }
    /* (Out of fds or memory with no call waiting: the connection stays in
     * the kernel's backlog, and the next call asks again. Kept for it,
     * the error made weft_accept drop a connection it could take.) */
  }
  if (!l->ms.armed && l->ms.waiting.first && !l->err && !st->draining)
    accept_arm(loop, st, l);
}

static void undo_accept(weft_task *t, void *arg) {
  uring_op *u = arg;
  op_unlink(t->loop, u);
  if (!u->queued)
    return;
  listener *l = u->l;
  waitlist_del(u);
  /* The last call waiting gave up: stop accepting for nobody (what the
   * request brings before the cancellation lands is queued, for the next
   * call). */
  if (!l->ms.waiting.first && l->ms.armed)
    accept_cancel(t->loop, state(t->loop), l);
}

/* An fd a request brought (a connection handed to a waiting accept, an
 * open's) whose task has not run yet is the task's: a loop freed before
 * it runs closes it (weft__hold). */
typedef struct {
  weft__held h;
  uring_op *u;
} held_fd;

static void drop_accepted(weft_loop *loop, weft__held *h) {
  uring_op *u = ((held_fd *)h)->u;
  (void)loop;
  if (u->done && u->res >= 0)
    close(u->res);
}

/* weft_accept: from the listener's queue, or wait for the multishot
 * request to bring one. A cancelled call has no request of its
 * own to wait for. NULL if the listener's record cannot be had (then a
 * single accept request does it). */
static ssize_t accept_multishot(weft_loop *loop, uring_state *st, int fd,
                                int *ok) {
  listener *l = listener_of(st, fd);
  if (!l) {
    *ok = 0;
    return 0;
  }
  *ok = 1;
  if (l->len)
    return queue_pop(l);
  if (l->err) {
    int err = l->err;
    l->err = 0;
    return -err;
  }
  if (!l->ms.armed)
    accept_arm(loop, st, l);
  uring_op u = {.l = l};
  held_fd held = {.u = &u};
  weft__hold(&held.h, drop_accepted);
  int rc = waitlist_park(loop, &l->ms.waiting, &u, fd, undo_accept);
  weft__unhold(&held.h);
  /* The fd, also if cancelled since: it is the caller's. */
  return rc == 1 ? u.res : rc;
}

/* weft_close of a listener: its queued connections are closed, and its
 * request is cancelled; the record goes when the request has ended. */
static void listener_close(weft_loop *loop, uring_state *st, int fd) {
  listener *l = (listener *)ms_take(&st->ls, fd);
  if (!l)
    return;
  if (!l->ms.armed || ms_retract(st, &l->ms)) {
    listener_free(st, &l->ms);
    return;
  }
  ms_detach(&st->ls, &l->ms);
  while (l->len)
    close(queue_pop(l));
  accept_cancel(loop, st, l);
}

/* ---- multishot recv ------------------------------------------------------ */
/* weft_recv and weft_read of a stream socket are served by one multishot
 * recv request per socket (Linux 6.0), which takes a buffer from a ring
 * the loop provides (IORING_REGISTER_PBUF_RING, 5.19) for each arrival and
 * stays in the kernel between calls: no request is prepared per call, and
 * data that came while no call waited is taken at once, without parking.
 * What came is queued on the socket in its ring buffers; a call copies
 * from them, and each buffer emptied goes back to the ring. At
 * RX_QUEUE_MAX chunks the request is cancelled (the socket's own buffer in
 * the kernel holds the rest) and the next call that finds the queue empty
 * asks again. A cancelled call leaves what came in the queue for the next
 * one: nothing is lost, whichever of the data and the cancellation came
 * first.
 *
 * It is off unless WEFT_URING_PBUF=1: measured (bench/echo/run.sh), it
 * saves no CPU in weft, where the caller's buffer is there, waiting, when
 * the data comes; it adds a copy out of a ring buffer that has gone cold
 * (the ring's 1 MiB cycles through the cache), and user time was 0.9-1.7x
 * that of a request per call, more in most configurations. Each call is then a
 * recv request of its own, into the caller's buffer; so, too, on a kernel
 * without buffer rings or multishot recv. */
#define RX_RING_MASK (RX_NBUFS - 1)

_Static_assert((RX_NBUFS & RX_RING_MASK) == 0, "a power of two");
_Static_assert(RX_NBUFS <= 65536, "buffer ids are 16 bits");

/* Sets up the buffer ring, the first time a socket is read (WEFT_URING_PBUF
 * was read by uring_init); 1 if multishot recv is on. */
static int rx_setup(uring_state *st) {
  if (st->rx_on)
    return st->rx_on > 0;
  st->rx_on = -1; /* until it works */
  size_t bytes = RX_NBUFS * sizeof(struct io_uring_buf);
  void *br = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (br == MAP_FAILED) {
    pbuf_notice("1", "no memory for the buffer ring");
    return 0;
  }
  char *bufs = weft__malloc((size_t)RX_NBUFS * RX_BUFSZ + sizeof(rx_links));
  struct io_uring_buf_reg reg = {
      .ring_addr = (uintptr_t)br, .ring_entries = RX_NBUFS, .bgid = RX_BGID};
  int rc = bufs ? io_uring_register_buf_ring(&st->ring, &reg, 0) : -ENOMEM;
  if (rc < 0) {
    /* An older kernel (EINVAL, before 5.19), or no memory. */
    pbuf_notice("1", rc == -EINVAL ? "the kernel has no buffer rings"
                                   : "no memory for the buffers");
    weft__free(bufs);
    munmap(br, bytes);
    return 0;
  }
  st->br = br;
  st->br_bytes = bytes;
  st->bufs = bufs;
  st->links = (rx_links *)(bufs + (size_t)RX_NBUFS * RX_BUFSZ);
  io_uring_buf_ring_init(st->br);
  for (unsigned i = 0; i < RX_NBUFS; i++)
    io_uring_buf_ring_add(st->br, bufs + (size_t)i * RX_BUFSZ, RX_BUFSZ,
                          (unsigned short)i, RX_RING_MASK, (int)i);
  io_uring_buf_ring_advance(st->br, RX_NBUFS);
  st->rx_on = 1;
  return 1;
}

static char *rx_buf(uring_state *st, uint16_t bid) {
  return st->bufs + (size_t)bid * RX_BUFSZ;
}

/* Gives a buffer back to the kernel. */
static void rx_recycle(uring_state *st, uint16_t bid) {
  io_uring_buf_ring_add(st->br, rx_buf(st, bid), RX_BUFSZ, bid, RX_RING_MASK,
                        0);
  io_uring_buf_ring_advance(st->br, 1);
}

static rx *rx_of(uring_state *st, int fd) {
  return (rx *)ms_of(&st->rxs, fd, sizeof(rx));
}

static void rx_push(uring_state *st, rx *r, uint16_t bid, uint32_t len) {
  st->links->len[bid] = len;
  if (r->len++)
    st->links->next[r->last] = bid;
  else
    r->first = bid;
  r->last = bid;
}

static void rx_pop(uring_state *st, rx *r) {
  uint16_t bid = r->first;
  r->streak++;
  r->first = st->links->next[bid];
  r->len--;
  r->off = 0;
  rx_recycle(st, bid);
}

static void rx_free(uring_state *st, multishot *m) {
  rx *r = (rx *)m;
  while (r->len)
    rx_pop(st, r);
  weft__free(r);
}

static void rx_arm(weft_loop *loop, uring_state *st, rx *r) {
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_recv_multishot(sqe, r->ms.fd, NULL, 0, 0);
  sqe->flags |= IOSQE_BUFFER_SELECT;
  sqe->buf_group = RX_BGID;
  io_uring_sqe_set_data64(sqe, (uint64_t)(uintptr_t)r | TAG_RX);
  r->ms.sqe = sqe;
  r->ms.batch = st->batch;
  r->ms.armed = 1;
  r->stopping = 0;
  st->narmed++;
}

static void rx_stop(weft_loop *loop, uring_state *st, rx *r) {
  if (!r->ms.armed || r->stopping || ms_retract(st, &r->ms))
    return;
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_cancel64(sqe, (uint64_t)(uintptr_t)r | TAG_RX, 0);
  io_uring_sqe_set_data64(sqe, 0);
  r->stopping = 1;
}

/* The multishot recv brought data (res > 0, in a buffer) or ended. */
static void rx_done(weft_loop *loop, uring_state *st, rx *r, int res,
                    unsigned flags) {
  if (!(flags & IORING_CQE_F_MORE)) {
    r->ms.armed = r->stopping = 0;
    st->narmed--;
  }
  int queued = 0;
  if (flags & IORING_CQE_F_BUFFER) {
    uint16_t bid = (uint16_t)(flags >> IORING_CQE_BUFFER_SHIFT);
    if (res > 0 && !r->ms.detached) {
      KERNEL_WROTE(rx_buf(st, bid), (size_t)res);
      rx_push(st, r, bid, (uint32_t)res);
      queued = 1;
    } else {
      rx_recycle(st, bid);
    }
  } else if (res == 0)
    r->eof = 1;
  else if (res == -ENOBUFS)
    r->plain = 1;
  else if (res == -EINVAL && !r->len) {
    st->rx_on = -1; /* a kernel without multishot recv: plain from now on */
    pbuf_notice("1", "the kernel has no multishot recv");
    r->plain = 1;
  } else if (res < 0 && res != -ECANCELED)
    r->err = -res;
  if (r->ms.detached) { /* weft_close'd: nobody will take it */
    if (!r->ms.armed) {
      ms_undetach(&st->rxs, &r->ms);
      rx_free(st, &r->ms);
    }
    return;
  }
  if (r->len >= RX_QUEUE_MAX)
    rx_stop(loop, st, r);
  if (st->draining)
    return;
  /* Every call waiting looks again (more than one task reading one stream
   * is rare); so does weft_wait_fd. */
  while (r->ms.waiting.first)
    waitlist_wake(loop, r->ms.waiting.first, 0);
  if (queued || r->eof || r->err)
    weft__fd_event(loop, r->ms.fd, WEFT_READ);
}

/* Copies up to len bytes from the queue; with peek, leaves them there. */
static size_t rx_take(uring_state *st, rx *r, char *dst, size_t len, int peek) {
  size_t n = 0;
  uint32_t off = r->off;
  uint16_t bid = r->first;
  for (unsigned i = 0; i < r->len && n < len; i++) {
    uint32_t clen = st->links->len[bid];
    size_t k = clen - off < len - n ? clen - off : len - n;
    memcpy(dst + n, rx_buf(st, bid) + off, k);
    n += k;
    off = k == clen - off ? 0 : off + (uint32_t)k;
    bid = st->links->next[bid];
  }
  if (peek)
    return n;
  for (size_t left = n; left;) {
    uint32_t clen = st->links->len[r->first];
    if (left < clen - r->off) {
      r->off += (uint32_t)left;
      break;
    }
    left -= clen - r->off;
    rx_pop(st, r);
  }
  return n;
}

static void undo_rx(weft_task *t, void *arg) {
  uring_op *u = arg;
  op_unlink(t->loop, u);
  if (u->queued)
    waitlist_del(u);
}

/* recv with flags 0, MSG_PEEK, MSG_WAITALL or MSG_DONTWAIT, or read, of a
 * stream socket: from the queue, or after waiting for the request to
 * bring something. Returns 1 with the call's result in *out, or 0 when
 * the call must go the plain way (no record, the kernel ran out of
 * buffers, multishot recv is off). */
static ssize_t uring_io(weft_loop *loop, weft__op *op);

static int rx_recv(weft_loop *loop, uring_state *st, const weft__op *op,
                   ssize_t *out) {
  rx *r = rx_of(st, op->fd);
  if (!r)
    return 0;
  const int peek = op->flags & MSG_PEEK, all = op->flags & MSG_WAITALL;
  size_t got = 0;
  int polled = 0;
  for (;;) {
    if (r->len) {
      got += rx_take(st, r, (char *)op->buf + got, op->len - got, peek);
      if (got == op->len || !all || peek)
        break;
      continue;
    }
    if (r->err) {
      if (got)
        break;
      *out = -r->err;
      r->err = 0;
      return 1;
    }
    /* read(2) of 0 bytes returns at once; recv(2) of 0 bytes waits for
     * data (or the end, or an error), as it would for 1. */
    if (r->eof || (!op->len && op->kind == OP_READ))
      break;
    if ((r->plain || st->rx_on < 0) && !r->ms.armed) {
      if (got && (!all || peek))
        break;
      r->plain = 0;
      if (!got)
        return 0;
      /* MSG_WAITALL with the ring out of buffers: the rest by a request
       * of its own (an error or a cancellation then returns what came). */
      weft__op rest = *op;
      rest.buf = (char *)op->buf + got;
      rest.len = op->len - got;
      rest.plain = 1;
      ssize_t n = uring_io(loop, &rest);
      *out = (ssize_t)got + (n > 0 ? n : 0);
      return 1;
    }
    if (op->flags & MSG_DONTWAIT) {
      if (!r->ms.armed && !got)
        return 0; /* the kernel holds what there is: ask it */
      if (!got && !polled) {
        /* The request may not have left this turn yet, and what came
         * since the loop last looked is not reaped: submit, take the
         * completions (one system call: the call's own answer, now). */
        polled = 1;
        st->batch++;
        io_uring_submit_and_get_events(&st->ring);
        reap(loop, st);
        continue;
      }
      *out = got ? (ssize_t)got : -EAGAIN;
      return 1;
    }
    if (!r->ms.armed)
      rx_arm(loop, st, r);
    uring_op u = {.r = r};
    uint32_t gen = loop->fds[op->fd].gen;
    r->streak = 0;
    int rc = waitlist_park(loop, &r->ms.waiting, &u, op->fd, undo_rx);
    if (rc != 1) {
      /* Cancelled, or closed: what was taken is the caller's (a
       * level-triggered cancellation stops the next call). */
      *out = got ? (ssize_t)got : rc;
      return 1;
    }
    if (loop->fds[op->fd].gen != gen) {
      /* Closed after the data woke us, before we ran: r is freed or
       * detached (and the number perhaps reused, its new record perhaps
       * at r's address, so r's address would not tell), and every way a
       * record leaves the table moves the fd's generation on. */
      *out = got ? (ssize_t)got : -EBADF;
      return 1;
    }
  }
  *out = (ssize_t)got;
  return 1;
}

/* weft_close of a socket read with multishot recv: its queue is dropped,
 * its request cancelled; the record goes when the request has ended. */
static void rx_close(weft_loop *loop, uring_state *st, int fd) {
  rx *r = (rx *)ms_take(&st->rxs, fd);
  if (!r)
    return;
  if (!r->ms.armed || ms_retract(st, &r->ms)) {
    rx_free(st, &r->ms);
    return;
  }
  while (r->len)
    rx_pop(st, r);
  ms_detach(&st->rxs, &r->ms);
  rx_stop(loop, st, r);
}

/* Whether rx_recv takes this input call, a stream socket's, once multishot
 * recv is set up: 1 if it does; 0 if a request of its own does; -ENOTSUP
 * for a flag that would need the stream's next bytes while they are the
 * multishot request's (MSG_TRUNC...), or for MSG_OOB: the request reads
 * past the urgent mark, and the kernel drops the urgent byte then. Flags
 * that change nothing for a recv (MSG_NOSIGNAL, MSG_CMSG_CLOEXEC) are no
 * reason to leave the queue; MSG_ERRQUEUE reads data that never enters
 * it. With the fault hook on (tests), only a socket whose data already
 * goes through it. */
static int rx_serves(uring_state *st, const weft__op *op, const weft__fd *e) {
  if ((e->flags & (FD_SOCKET | FD_STREAM)) != (FD_SOCKET | FD_STREAM))
    return 0;
  const rx *r = (const rx *)ms_at(&st->rxs, op->fd);
  int busy = r && (r->ms.armed || r->len);
  int flags = op->flags & ~(MSG_NOSIGNAL | MSG_CMSG_CLOEXEC);
  if (flags & MSG_ERRQUEUE)
    return 0;
  if (flags & ~(MSG_PEEK | MSG_WAITALL | MSG_DONTWAIT))
    return busy ? -ENOTSUP : 0;
  if (busy)
    return 1;
  if (weft__fault_hook)
    return 0;
  return st->rx_on > 0 || (st->rx_on == 0 && rx_setup(st));
}

#define RW_MAX ((size_t)0x7ffff000) /* INT_MAX rounded down to a page */

/* A reader served from its queue does not park, and the kernel fills the
 * queue well past RX_QUEUE_MAX before the cancellation lands (a multishot
 * recv takes all the socket holds at once: ~100 buffers from a peer that
 * floods). So after RX_QUEUE_MAX chunks taken without parking, the caller
 * goes to the back of the ready queue first, as io.c's budget does on the
 * readiness way: else the reader of a flooding peer runs alone while it
 * empties its queue (test_badpeer.io_uring_pbuf). */
static int rx_turn_spent(weft_loop *loop, uring_state *st, const weft__op *op) {
  if (!weft__op_is_input(op->kind) || op->kind == OP_ACCEPT || op->plain)
    return 0;
  rx *r = (rx *)ms_at(&st->rxs, op->fd);
  if (!r || r->streak < RX_QUEUE_MAX)
    return 0;
  r->streak = 0;
  uint32_t gen = loop->fds[op->fd].gen;
  (void)weft_yield(); /* a cancellation is seen by the checkpoint next */
  return loop->fds[op->fd].gen != gen ? -EBADF : 0; /* closed meanwhile */
}

/* weft_connect of a TCP socket is one IORING_OP_CONNECT request: the
 * kernel tries at once and waits for the handshake itself, where io.c's
 * way takes connect(2), a wait for writability, then a second connect(2)
 * for the result (two system calls more, each emptying the TLB on a VM
 * with page-table isolation). A Unix socket keeps io.c's way, with its
 * back-off while the listener's backlog is full (EAGAIN); so does a
 * connect while the fault hook is on (tests inject its errors there), and
 * one on a kernel without the opcode. The socket's kind (its entry: a
 * stream socket not of AF_UNIX) decides, not the address's family: the
 * address is the caller's memory, which the kernel reads (a bad pointer
 * is its -EFAULT, as on epoll; reading the family here died of it). A
 * datagram socket, whose connect(2) never waits, keeps io.c's way too: it
 * returns at once, where a request would wait for the loop's next turn. */
static int connect_serves(const uring_state *st, const weft__fd *e) {
  return st->connect && !weft__fault_hook &&
         (e->flags & (FD_SOCKET | FD_STREAM | FD_UNIX)) ==
             (FD_SOCKET | FD_STREAM);
}

/* Its result is connect(2)'s: 0, or why not (-ECONNREFUSED, -EISCONN,
 * -EALREADY...). Cancelled, the request is cancelled in the kernel, and
 * the socket is left connecting, as io.c's way leaves it (weft.h: close
 * it). */
static int uring_connect(weft_loop *loop, uring_state *st, weft__op *op) {
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_connect(sqe, op->fd, op->addr, op->addrlen_in);
  uring_op u;
  return await_op(loop, st, &u, sqe, WAIT_FD_WRITE, op->fd, 0);
}

static ssize_t uring_io(weft_loop *loop, weft__op *op) {
  int rc = rx_turn_spent(loop, state(loop), op);
  if (rc < 0)
    return rc;
  rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  weft__fd *e = weft__fd_entry(loop, op->fd, &rc);
  if (!e)
    return rc;
  /* What read(2) and write(2) say of a length no buffer can have (the
   * ring would move RW_MAX bytes, as recv and send do: see below). */
  if (op->len > SSIZE_MAX && (op->kind == OP_READ || (op->kind == OP_WRITE &&
                                                      !(e->flags & FD_SOCKET))))
    return -EFAULT;
  /* A regular file (a directory, a block device) is read and written the
   * plain way, at its position, as on epoll: ring requests at the current
   * position (offset -1) in flight together all start where the file is,
   * since the kernel moves it only as each completes, so tasks sharing the
   * fd read the same bytes twice (a cold page cache makes the requests
   * wait). weft_file_read and weft_file_write, at an offset, use the ring. */
  if ((e->flags & FD_UNPOLLABLE) &&
      (op->kind == OP_READ || op->kind == OP_WRITE))
    return weft__io_readiness(loop, op);
  uring_state *st = state(loop);
  if (op->kind == OP_CONNECT && connect_serves(st, e))
    return uring_connect(loop, st, op);
  int serves =
      weft__op_is_input(op->kind) && op->kind != OP_ACCEPT && !op->plain
          ? rx_serves(st, op, e)
          : 0;
  if (serves < 0)
    return serves;
  if (serves) {
    ssize_t n;
    if (rx_recv(loop, st, op, &n)) {
      if (op->kind == OP_RECVFROM && op->addrlen)
        *op->addrlen = 0; /* a stream socket's peer: not told */
      return n;
    }
  }
  /* With MSG_DONTWAIT the call itself never blocks. */
  if (op->kind == OP_CONNECT || (op->flags & MSG_DONTWAIT))
    return weft__io_readiness(loop, op);
  const int kind = op->kind, fd = op->fd;
  if (kind == OP_ACCEPT && !weft__fault_hook) {
    int ok;
    ssize_t c = accept_multishot(loop, st, fd, &ok);
    /* A multishot request cannot give each connection's address: the
     * connection tells it. One reset since it was taken no longer can,
     * but what its peer sent is still to be read (accept4 would return it
     * too, with the address): it comes with no address (length 0,
     * AF_UNSPEC). */
    if (ok && c >= 0 && op->addr &&
        getpeername((int)c, op->addr, op->addrlen) < 0) {
      int err = errno;
      if (err != ENOTCONN) {
        close((int)c);
        return -err;
      }
      if (*op->addrlen >= sizeof(sa_family_t))
        op->addr->sa_family = AF_UNSPEC;
      *op->addrlen = 0;
    }
    if (ok)
      return c;
  }
  const int dir = weft__op_is_input(kind) ? WEFT_READ : WEFT_WRITE;
  const int what = dir == WEFT_READ ? WAIT_FD_READ : WAIT_FD_WRITE;
  for (;;) {
    /* An SQE's length is 32 bits: more is what the system call would move
     * at most (Linux's MAX_RW_COUNT), not a length cut to its low bits. */
    size_t len = op->len < RW_MAX ? op->len : RW_MAX;
    if (rc == 1 && (rc = weft__checkpoint()) < 0)
      return rc; /* cancelled while it waited for readiness */
    if (__builtin_expect(weft__fault_hook != NULL, 0)) {
      int f = weft__fault_hook(kind, fd, len, weft__fault_arg);
      if (f == EINTR)
        continue;
      if (f == EAGAIN) {
        if ((rc = await_ready(loop, st, fd, dir)) < 0)
          return rc;
        rc = 1;
        continue;
      }
      if (f > 0)
        return -f;
      if (f < 0 && (size_t)(-(long)f) < len)
        len = (size_t)(-(long)f);
    }
    uint8_t flags = loop->fds[fd].flags;
    /* MSG_WAITALL means something to the kernel's recv of a stream only:
     * on a record socket (SOCK_SEQPACKET) the ring would retry a "short"
     * recv, joining records until the buffer is full, where recv(2)
     * returns one record. */
    int rflags = flags & FD_STREAM ? op->flags : op->flags & ~MSG_WAITALL;
    /* A send's MSG_WAITALL would have the kernel retry a short send until
     * all went out; send(2), and so epoll and poll, ignore it. */
    int sflags = (op->flags & ~MSG_WAITALL) | MSG_NOSIGNAL;
    struct io_uring_sqe *sqe = get_sqe(loop, st);
    struct iovec iov; /* recvfrom, sendto only */
    struct msghdr msg;
    switch (kind) {
    case OP_READ:
      io_uring_prep_read(sqe, fd, op->buf, (unsigned)len, -1);
      break;
    case OP_WRITE:
      /* On a socket, send: MSG_NOSIGNAL keeps SIGPIPE away. */
      if (flags & FD_SOCKET)
        io_uring_prep_send(sqe, fd, op->buf, len, MSG_NOSIGNAL);
      else
        io_uring_prep_write(sqe, fd, op->buf, (unsigned)len, -1);
      break;
    case OP_RECV: io_uring_prep_recv(sqe, fd, op->buf, len, rflags); break;
    case OP_SEND:
      io_uring_prep_send(sqe, fd, op->buf, len, sflags);
      break;
    case OP_RECVFROM:
      msghdr_for(&msg, &iov, op->buf, len);
      msg.msg_name = op->addr;
      msg.msg_namelen = op->addr && op->addrlen ? *op->addrlen : 0;
      io_uring_prep_recvmsg(sqe, fd, &msg, (unsigned)rflags);
      break;
    case OP_SENDTO:
      msghdr_for(&msg, &iov, op->buf, len);
      msg.msg_name = op->addr;
      msg.msg_namelen = op->addr ? op->addrlen_in : 0;
      io_uring_prep_sendmsg(sqe, fd, &msg, (unsigned)sflags);
      break;
    case OP_ACCEPT:
      io_uring_prep_accept(sqe, fd, op->addr, op->addrlen,
                           SOCK_NONBLOCK | SOCK_CLOEXEC);
      break;
    default: io_uring_prep_nop(sqe); break;
    }
    uring_op u;
    ssize_t n = await_op(loop, st, &u, sqe, what, fd, 0);
    if (st->valgrind)
      note_written(op, &msg, n);
    if (n >= 0) {
      if (kind == OP_RECVFROM && op->addr && op->addrlen)
        *op->addrlen = msg.msg_namelen;
      return n;
    }
    if (n == -EINTR)
      continue;
    if (n != -EAGAIN)
      return n;
    /* O_NONBLOCK honoured: a pipe waits for readiness; a regular file (no
     * readiness to wait for) reads the plain way, as on epoll. */
    if (loop->fds[fd].flags & FD_UNPOLLABLE)
      return weft__io_readiness(loop, op);
    if ((rc = await_ready(loop, st, fd, dir)) < 0)
      return rc;
    rc = 1;
  }
}

/* weft_file_close: the close goes through the ring, after the requests
 * already queued for the fd, so none of them can meet another file that
 * took the fd's number meanwhile; the caller waits for it, as it would for
 * the pool's close. A cancelled close still closes. */
static int uring_close(weft_loop *loop, int fd) {
  uring_state *st = state(loop);
  listener_close(loop, st, fd);
  rx_close(loop, st, fd);
  uring_op u;
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_close(sqe, fd);
  op_start(st, &u, sqe, -1);
  u.closes = 1;
  loop->nwaiters++;
  while (!u.done)
    (void)weft__park_raw(WAIT_OTHER, fd);
  loop->nwaiters--;
  /* Linux frees the fd even when close fails with EINTR. */
  return u.res == -EINTR ? 0 : u.res;
}

/* A socket closed behind weft's back and its number reused: its multishot
 * requests go. */
static void uring_forget(weft_loop *loop, int fd) {
  uring_state *st = state(loop);
  listener_close(loop, st, fd);
  rx_close(loop, st, fd);
}

/* Requests for fd prepared and not yet submitted (a turn that finds work
 * waiting does not always enter the kernel) become no-ops in place:
 * submitted after the close, they would act on whatever file takes the
 * number next (a recv would take another socket's bytes). A call's
 * returns -EBADF (its task, woken by weft__fd_forget, sees it in
 * await_op; a file's call, which a close does not wake, when the no-op
 * completes). Only the queue's entries not consumed by the kernel are
 * looked at: 256 at most. Returns 1 if the fd's watch was among them. */
static int retract_fd(uring_state *st, int fd) {
  struct io_uring_sq *sq = &st->ring.sq;
  int watch = 0;
  for (unsigned i = *sq->khead; i != sq->sqe_tail; i++) {
    struct io_uring_sqe *sqe = &sq->sqes[i & sq->ring_mask];
    if (sqe->fd != fd || (sqe->flags & IOSQE_FIXED_FILE))
      continue;
    uint64_t ud = sqe->user_data;
    if (ud && !(ud & TAG_MASK)) { /* a call's: it learns why */
      op_retract((uring_op *)(uintptr_t)ud, sqe, -EBADF);
    } else { /* a watch's: it is gone already */
      watch |= (int)(ud & 1);
      io_uring_prep_nop(sqe);
      io_uring_sqe_set_data64(sqe, 0);
    }
  }
  return watch;
}

/* 1 if m's request is in the kernel (armed, and submitted). */
static int ms_submitted(const uring_state *st, const multishot *m) {
  return m && m->armed && m->batch != st->batch;
}

/* 1 if cqe is the last of a request for fd that uring_closing ended: a
 * call's it cancelled, the watch's poll, or the last of a multishot
 * request whose record it detached. */
static int ends_for(uint64_t ud, unsigned flags, int fd) {
  if (!ud)
    return 0;
  if (ud & 1)
    return (int)((uint32_t)ud >> 1) == fd;
  if (ud & TAG_MASK) {
    const multishot *m =
        (const multishot *)(uintptr_t)(ud & ~(uint64_t)TAG_MASK);
    return m->detached && m->fd == fd && !(flags & IORING_CQE_F_MORE);
  }
  const uring_op *u = (const uring_op *)(uintptr_t)ud;
  return u->cancelled && u->w.fd == fd;
}

/* How many requests for fd have ended, their completions in the queue
 * (not reaped yet). */
static unsigned ended_for(uring_state *st, int fd) {
  unsigned head, n = 0;
  struct io_uring_cqe *cqe;
  io_uring_for_each_cqe(&st->ring, head, cqe) {
    n += (unsigned)ends_for(cqe->user_data, cqe->flags, fd);
  }
  return n;
}

/* Moves every completion in the CQ to st->aside, not run, to make room;
 * returns how many end requests for fd (as ended_for; none for fd -1), or
 * -1 without the memory for them. */
static int set_aside(uring_state *st, int fd) {
  unsigned ready = io_uring_cq_ready(&st->ring);
  if (st->naside + ready > st->aside_cap) {
    size_t cap = st->aside_cap ? st->aside_cap * 2 : CQ_ENTRIES;
    while (cap < st->naside + ready)
      cap *= 2;
    aside_cqe *v = weft__realloc(st->aside, cap * sizeof *v);
    if (!v)
      return -1;
    st->aside = v;
    st->aside_cap = cap;
  }
  unsigned head, n = 0, moved = 0;
  struct io_uring_cqe *cqe;
  io_uring_for_each_cqe(&st->ring, head, cqe) {
    st->aside[st->naside++] = (aside_cqe){cqe->user_data, cqe->res, cqe->flags};
    if (fd >= 0)
      n += (unsigned)ends_for(cqe->user_data, cqe->flags, fd);
    moved++;
  }
  io_uring_cq_advance(&st->ring, moved);
  return (int)n;
}

/* weft_close outside a task (in a task the ring's close, after the
 * cancellations, is waited for) and weft_fd_forget, before they let go of
 * fd: nothing weft asked of the kernel for fd may outlive the call.
 * Each request in the kernel holds the file, so a close(2) that left
 * them to be cancelled at the next turn would not end it at once (a
 * listener would still take connections, a peer not see the end), and a
 * multishot recv would take bytes meant for the loop the fd is handed to.
 * So: the requests not submitted become no-ops; those submitted (the
 * tasks' calls, the multishot accept or recv, the watch) are cancelled,
 * and the kernel is entered there and then to end them, only if there
 * were any: a connection closed after its last read completed costs only
 * its close(2). The tasks' calls learn -EBADF from weft__fd_forget. (A
 * file's request is not on the fd's list: as for the ring's close, it
 * completes.)
 *
 * A cancelled request ends in the work that an io_uring_enter does for
 * the ring (DEFER_TASKRUN), in order, and an enter does a bounded batch
 * of it (20 items on Linux 6.18): with more than that before the last of
 * fd's (64 tasks reading one socket; or other sockets' completions, in a
 * busy loop), the file lived on after the close (its peer saw no end).
 * So the kernel is entered again until every request's last completion
 * is in the queue, or an enter brings none (a request that ends in its
 * own time, in a kernel worker). Completions are not run here (a
 * cancelled call's would say -ECANCELED, not -EBADF), so several closes
 * in one callback pile them up: once the CQ is full, the kernel puts them
 * on its overflow list, where no count sees them, and an enter that
 * brings none stopped the loop with the file held (the 7th of 10 sockets
 * read by 300 tasks each kept its peer waiting). A full CQ is emptied
 * into st->aside first, unrun, for reap. */
static void uring_closing(weft_loop *loop, int fd) {
  uring_state *st = state(loop);
  int watch_retracted = retract_fd(st, fd);
  unsigned n = 0;
  if ((size_t)fd < loop->nfds) {
    /* The calls first, while those waiting on a multishot request are
     * on its list (queued): they have no request of their own. */
  walk:
    for (weft__waiter *w = loop->fds[fd].waiters; w; w = w->next) {
      uring_op *u = (uring_op *)w; /* events 0: a request's (op_start) */
      if (w->events || u->queued || u->done || u->retracted || u->cancelled)
        continue; /* a watch's, a multishot's (below), or ended */
      unsigned reaps = st->reaps;
      struct io_uring_sqe *sqe = get_sqe(loop, st);
      if (st->reaps != reaps) {
        /* A full SQ met a full CQ, and the completions reaped to make
         * room may have ended u or taken waiters off the list: the walk
         * starts again (those asked already are skipped). */
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, 0);
        goto walk;
      }
      io_uring_prep_cancel(sqe, u, 0);
      io_uring_sqe_set_data64(sqe, 0);
      u->cancelled = 1;
      n++;
    }
  }
  n += (unsigned)(ms_submitted(st, ms_at(&st->ls, fd)) +
                  ms_submitted(st, ms_at(&st->rxs, fd)));
  listener_close(loop, st, fd);
  rx_close(loop, st, fd);
  if ((size_t)fd < loop->nfds && (loop->fds[fd].flags & FD_WATCHED)) {
    n += !watch_retracted;
    disarm(loop, st, fd, &loop->fds[fd]);
  }
  if (!n)
    return;
  st->batch++; /* what was prepared is submitted now */
  (void)io_uring_submit_and_get_events(&st->ring);
  unsigned aside = 0; /* fd's, among those set aside here */
  while (aside + ended_for(st, fd) < n) {
    if (io_uring_cq_has_overflow(&st->ring) ||
        io_uring_cq_ready(&st->ring) >= st->ring.cq.ring_entries) {
      int k = set_aside(st, fd);
      if (k < 0)
        break;
      aside += (unsigned)k;
    }
    unsigned had = io_uring_cq_ready(&st->ring);
    (void)io_uring_get_events(&st->ring);
    if (io_uring_cq_ready(&st->ring) == had)
      break;
  }
}

static int uring_input_queued(weft_loop *loop, int fd) {
  uring_state *st = state(loop);
  const rx *r = (const rx *)ms_at(&st->rxs, fd);
  if (r && (r->len || r->eof || r->err))
    return 1;
  /* A listener's multishot accept took connections no call has taken. */
  const listener *l = (const listener *)ms_at(&st->ls, fd);
  return l && (l->len || l->err);
}

/* weft_file_read / write / fsync: straight to the ring, with the caller's
 * buffer (the call does not return before the kernel is done with it). A
 * request the kernel has started cannot be stopped; a cancelled call then
 * waits for it and returns its result. */
static ssize_t uring_file(weft_loop *loop, int op, int fd, void *buf,
                          size_t len, off_t offset) {
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  weft__fd *e = weft__fd_get(loop, fd);
  if (!e)
    return -ENOMEM;
  /* pread and pwrite refuse what cannot seek; the ring would read a pipe
   * or a socket at its current position instead. The fd is looked at
   * once (not made non-blocking: a file with O_NONBLOCK would make the
   * ring answer -EAGAIN instead of reading). */
  if (!(e->flags & FD_UNPOLLABLE) && op != FILE_FSYNC) {
    /* The kernel says, with a pread or pwrite of 0 bytes: -ESPIPE where
     * pread would (pipes, sockets, ttys, and eventfds, timerfds, epoll
     * fds, whose lseek succeeds without moving anything), a count on
     * files and on devices such as /dev/zero (any other error is the
     * request's to give). A device weft_read has used is known already,
     * as one that polls: it is asked each time (it once got -ESPIPE).
     * fsync needs no look: fsync(2) takes any fd (-EINVAL where it
     * cannot), and the ring's answers are its own. */
    ssize_t z = op == FILE_READ ? pread(fd, NULL, 0, 0)
                                : pwrite(fd, NULL, 0, 0);
    if (z >= 0) {
      if (!(e->flags & FD_KNOWN))
        e->flags |= FD_KNOWN | FD_UNPOLLABLE;
    } else if (errno == ESPIPE) {
      return -ESPIPE;
    }
  }
  uring_state *st = state(loop);
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  switch (op) {
  case FILE_READ:
    io_uring_prep_read(sqe, fd, buf, (unsigned)len, (uint64_t)offset);
    break;
  case FILE_WRITE:
    io_uring_prep_write(sqe, fd, buf, (unsigned)len, (uint64_t)offset);
    break;
  default: io_uring_prep_fsync(sqe, fd, 0); break;
  }
  uring_op u;
  ssize_t n = await_op(loop, st, &u, sqe,
                       op == FILE_READ ? WAIT_FD_READ : WAIT_FD_WRITE, fd, 1);
  if (st->valgrind && op == FILE_READ && n > 0)
    KERNEL_WROTE(buf, (size_t)n);
  return n;
}

/* A task dropped by weft_loop_free in weft_file_open: the fd its open
 * got, or will get while quiesce waits for the request, is closed. */
static void drop_opened(weft_loop *loop, weft__held *h) {
  uring_op *u = ((held_fd *)h)->u;
  (void)loop;
  if (!u->done)
    u->drop_fd = 1; /* complete() closes it */
  else if (u->res >= 0)
    close(u->res);
}

/* weft_file_open: an IORING_OP_OPENAT request, or -ENOSYS (said before
 * anything is tried) where the kernel lacks it: the pool's job. The
 * request is forced to the kernel's worker threads (IOSQE_ASYNC): tried
 * inline first, the kernel opens with O_NONBLOCK, so a FIFO with no
 * writer would open at once (-ENXIO with no reader), unlike open(2) and
 * the pool; a worker opens as open(2) does, and blocks as it does. A
 * cancellation reaches a worker asleep in such an open (it returns
 * -ERESTARTSYS, and the call why it stopped). The kernel copies the path
 * at submission, and the call returns after the completion in any case,
 * so the caller's path is enough. An open that completed although
 * cancelled returns its fd (as await_op returns what a request did). */
static int uring_open(weft_loop *loop, const char *path, int flags,
                      mode_t mode) {
  uring_state *st = state(loop);
  if (!st->openat)
    return -ENOSYS;
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  struct io_uring_sqe *sqe = get_sqe(loop, st);
  io_uring_prep_openat(sqe, AT_FDCWD, path, flags, mode);
  sqe->flags |= IOSQE_ASYNC;
  uring_op u;
  held_fd held = {.u = &u};
  weft__hold(&held.h, drop_opened);
  rc = await_op(loop, st, &u, sqe, WAIT_OTHER, -1, 1);
  weft__unhold(&held.h);
  return rc;
}

/* Before the stacks are freed: cancel what is still in flight, and wait
 * until the kernel has let go of every buffer. */
static void uring_quiesce(weft_loop *loop) {
  uring_state *st = state(loop);
  if (!st)
    return;
  st->draining = 1;
  reap(loop, st); /* those set aside: the waits below would not see them */
  for (weft_task *t = loop->live; t; t = t->next_live) {
    uring_op *u = t->io;
    if (!u || u->closes)
      continue; /* a close must happen: weft has forgotten the fd */
    if (u->batch == st->batch && !u->retracted) {
      /* Never submitted: it becomes a no-op in place, so a dropped task's
       * recv takes no bytes, its send sends none (as in await_op). */
      op_retract(u, u->sqe, -ECANCELED);
      continue;
    }
    struct io_uring_sqe *sqe = get_sqe(loop, st);
    io_uring_prep_cancel(sqe, u, 0);
    io_uring_sqe_set_data64(sqe, 0);
  }
  /* And the multishot requests: accepts, whose connections would leak as
   * fds, and recvs, which hold ring buffers. */
  for (size_t fd = 0; fd < st->ls.n; fd++)
    if (st->ls.v[fd] && st->ls.v[fd]->armed && !ms_retract(st, st->ls.v[fd]))
      accept_cancel(loop, st, (listener *)st->ls.v[fd]);
  for (size_t fd = 0; fd < st->rxs.n; fd++)
    if (st->rxs.v[fd])
      rx_stop(loop, st, (rx *)st->rxs.v[fd]);
  for (multishot *m = st->rxs.detached; m; m = m->next_detached)
    rx_stop(loop, st, (rx *)m);
  while (st->ninflight || st->narmed) {
    st->batch++;
    int rc = io_uring_submit_and_wait(&st->ring, 1);
    if (rc < 0 && rc != -EINTR && rc != -ETIME && rc != -EBUSY &&
        rc != -EAGAIN) {
      /* The ring is unusable (weft_loop_free refuses to come here from
       * another thread, which a SINGLE_ISSUER ring would refuse): say so. */
      fprintf(stderr,
              "weft: io_uring: cannot wait for %s (%s); "
              "abandoning the requests in flight\n",
              "their completions", strerror(-rc));
      break;
    }
    reap(loop, st);
  }
  reap(loop, st);
  st->draining = 0;
}

const weft__backend weft__backend_uring = {
    .name = "io_uring",
    .init = uring_init,
    .fini = uring_fini,
    .poll = uring_poll,
    .io = uring_io,
    .watch = uring_watch,
    .unwatch = uring_unwatch,
    .per_wait = 1,
    .close = uring_close,
    .forget = uring_forget,
    .closing = uring_closing,
    .input_queued = uring_input_queued,
    .file = uring_file,
    .open = uring_open,
    .quiesce = uring_quiesce,
};

#endif
