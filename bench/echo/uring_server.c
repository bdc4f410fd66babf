/*
 * The echo benchmark's limit for io_uring: the smallest hand-written
 * liburing echo server, as echo_server_epoll is the limit for epoll.
 *
 *   echo_server_uring PORT     listens on 127.0.0.1:PORT until killed
 *
 * One thread, one ring, blocking sockets (io_uring waits for them itself).
 * Each turn of the loop is one io_uring_submit_and_wait: it submits every
 * SQE queued since the last turn and waits for at least one completion;
 * then the completions are handled, queueing the next SQEs. A connection
 * always has exactly one operation in flight: a recv of up to 64 KiB, or,
 * once data came, a send of all of it (again for the rest after a short
 * send: nothing more is read until it has all gone out, so a slow reader
 * holds at most one buffer), then a recv again. The listener has a
 * multishot accept (one SQE, a CQE per connection) where the kernel has
 * it, else an accept re-armed after each connection. The ring is set up
 * with IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN where the
 * kernel has them (completion work then runs only inside our own
 * io_uring_enter, not as interrupting task work), else without.
 * Every accepted socket gets TCP_NODELAY, as every server in bench/echo
 * does. With URING_FIXED=1 in the environment each socket is also put in
 * the ring's registered file table, and its requests name it by slot
 * (IOSQE_FIXED_FILE): the kernel then takes no reference on the file per
 * request. (A plain close(2) would no longer close such a socket, which is
 * why weft does not do this.) With URING_POLL_FIRST=1 each recv carries
 * IORING_RECVSEND_POLL_FIRST: it waits for data before it first tries
 * (measured: no gain, docs/benchmarks.md).
 */
#ifndef _GNU_SOURCE /* CMake defines it for the whole project */
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <liburing.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#define BUFSIZE 65536
#define RING_ENTRIES 4096 /* SQ; the CQ gets twice as many */

typedef struct conn {
  int fd;
  int slot;   /* its index in the registered file table; -1: none */
  size_t off; /* bytes of buf already sent */
  size_t len; /* bytes of buf to send; 0: a recv is in flight */
  char buf[BUFSIZE];
} conn;

static struct io_uring ring;
static int lfd;
static int multishot = 1; /* cleared if the kernel refuses it */
static int fixed;         /* URING_FIXED=1: sockets as registered files */
static int poll_first;    /* URING_POLL_FIRST=1: recv waits first */
#define FIXED_SLOTS 4096
static int free_slots[FIXED_SLOTS], nfree;

static void die(const char *what, int err) {
  fprintf(stderr, "echo_server_uring: %s: %s\n", what, strerror(err));
  exit(1);
}

/* An SQE; if the SQ is full (only with more than RING_ENTRIES operations
 * queued in one turn), what is queued is submitted first. */
static struct io_uring_sqe *sqe_get(void) {
  struct io_uring_sqe *sqe = io_uring_get_sqe(&ring);
  while (!sqe) {
    int rc = io_uring_submit(&ring);
    if (rc < 0 && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
      die("io_uring_submit", -rc);
    sqe = io_uring_get_sqe(&ring);
  }
  return sqe;
}

/* The listener's operations carry user_data 0 (no connection). */
static void arm_accept(void) {
  struct io_uring_sqe *sqe = sqe_get();
  if (multishot)
    io_uring_prep_multishot_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
  else
    io_uring_prep_accept(sqe, lfd, NULL, NULL, SOCK_CLOEXEC);
  io_uring_sqe_set_data(sqe, NULL);
}

/* A registered connection names its slot, with IOSQE_FIXED_FILE: the
 * kernel skips looking the fd up (and its reference count) per request. */
static void target(struct io_uring_sqe *sqe, const conn *c) {
  if (c->slot >= 0) {
    sqe->fd = c->slot;
    sqe->flags |= IOSQE_FIXED_FILE;
  }
}

static void arm_recv(conn *c) {
  struct io_uring_sqe *sqe = sqe_get();
  io_uring_prep_recv(sqe, c->fd, c->buf, BUFSIZE, 0);
  if (poll_first)
    sqe->ioprio |= IORING_RECVSEND_POLL_FIRST;
  target(sqe, c);
  io_uring_sqe_set_data(sqe, c);
}

static void arm_send(conn *c) {
  struct io_uring_sqe *sqe = sqe_get();
  io_uring_prep_send(sqe, c->fd, c->buf + c->off, c->len - c->off,
                     MSG_NOSIGNAL);
  target(sqe, c);
  io_uring_sqe_set_data(sqe, c);
}

static void drop(conn *c) {
  if (c->slot >= 0) { /* out of the table first, or the socket stays open */
    int minus = -1;
    io_uring_register_files_update(&ring, (unsigned)c->slot, &minus, 1);
    free_slots[nfree++] = c->slot;
  }
  close(c->fd); /* nothing of it is in flight: its one operation ended */
  free(c);
}

static void on_accept(const struct io_uring_cqe *cqe) {
  int more = multishot && (cqe->flags & IORING_CQE_F_MORE);
  int fd = cqe->res;
  if (fd < 0) {
    if (fd == -EINVAL && multishot) { /* no multishot accept here */
      multishot = 0;
      fprintf(stderr, "echo_server_uring: no multishot accept in this "
                      "kernel: one accept at a time\n");
    } else if (fd != -EINTR && fd != -ECONNABORTED && fd != -EAGAIN &&
               fd != -EMFILE && fd != -ENFILE && fd != -ENOBUFS &&
               fd != -ENOMEM) {
      die("accept", -fd);
    }
  } else {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn *c = malloc(sizeof *c);
    if (!c) {
      close(fd);
    } else {
      c->fd = fd;
      c->slot = -1;
      if (fixed && nfree > 0 &&
          io_uring_register_files_update(&ring, (unsigned)free_slots[nfree - 1],
                                         &fd, 1) == 1)
        c->slot = free_slots[--nfree];
      c->off = c->len = 0;
      arm_recv(c);
    }
  }
  if (!more) /* a single-shot accept, or a multishot one that ended */
    arm_accept();
}

static void on_conn(conn *c, int res) {
  if (c->len == 0) { /* a recv ended */
    if (res <= 0) {  /* end of file or an error */
      if (res == -EINTR || res == -EAGAIN) {
        arm_recv(c);
        return;
      }
      drop(c);
      return;
    }
    c->off = 0;
    c->len = (size_t)res;
    arm_send(c);
    return;
  }
  /* A send ended. */
  if (res < 0) {
    if (res == -EINTR || res == -EAGAIN) {
      arm_send(c);
      return;
    }
    drop(c);
    return;
  }
  c->off += (size_t)res;
  if (c->off < c->len) { /* a short send: the rest */
    arm_send(c);
    return;
  }
  c->off = c->len = 0;
  arm_recv(c);
}

/* Enough descriptors for as many connections as the hard limit allows. */
static void raise_nofile(void) {
  struct rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: echo_server_uring PORT\n");
    return 2;
  }
  raise_nofile();
  lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0)
    die("socket", errno);
  int one = 1;
  setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_in sin = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)atoi(argv[1])),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (bind(lfd, (struct sockaddr *)&sin, sizeof sin) < 0)
    die("bind", errno);
  if (listen(lfd, SOMAXCONN) < 0)
    die("listen", errno);

  struct io_uring_params p;
  memset(&p, 0, sizeof p);
  p.flags = IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER |
            IORING_SETUP_DEFER_TASKRUN;
  p.cq_entries = 2 * RING_ENTRIES;
  int rc = io_uring_queue_init_params(RING_ENTRIES, &ring, &p);
  if (rc == -EINVAL) { /* a kernel before 6.1: without them */
    memset(&p, 0, sizeof p);
    p.flags = IORING_SETUP_CQSIZE;
    p.cq_entries = 2 * RING_ENTRIES;
    rc = io_uring_queue_init_params(RING_ENTRIES, &ring, &p);
  }
  if (rc < 0)
    die("io_uring_queue_init", -rc);
  const char *pf = getenv("URING_POLL_FIRST");
  poll_first = pf && strcmp(pf, "1") == 0;
  const char *fx = getenv("URING_FIXED");
  if (fx && strcmp(fx, "1") == 0) {
    rc = io_uring_register_files_sparse(&ring, FIXED_SLOTS);
    if (rc < 0)
      die("io_uring_register_files_sparse", -rc);
    fixed = 1;
    for (int i = FIXED_SLOTS - 1; i >= 0; i--)
      free_slots[nfree++] = i;
  }
  arm_accept();

  for (;;) {
    rc = io_uring_submit_and_wait(&ring, 1);
    if (rc < 0) {
      if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY)
        continue;
      die("io_uring_submit_and_wait", -rc);
    }
    struct io_uring_cqe *cqe;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      conn *c = io_uring_cqe_get_data(cqe);
      if (c == NULL)
        on_accept(cqe);
      else
        on_conn(c, cqe->res);
      seen++;
    }
    io_uring_cq_advance(&ring, seen);
  }
}
