/*
 * What only the io_uring backend has to get right (the rest of the suite
 * runs on it too, as test_x.io_uring):
 *
 *  - the fallback: with io_uring_setup failing (a seccomp filter makes it
 *    ENOSYS, then EPERM, in a child process), a loop asked for io_uring
 *    runs on epoll, and says so on stderr in one line, once a process;
 *  - cancel against completion, hammered: a recv and a send cancelled at
 *    every point of their life (before submission, in the kernel, racing
 *    the data) either return what they did or -ECANCELED, and not one
 *    byte is lost or duplicated; the stacks their buffers lived on are
 *    reused by the next round, so a late write would show (and ASan
 *    watches the rest);
 *  - weft_close of an fd with a request in the kernel: -EBADF for the
 *    waiter, the socket really closed (the peer sees the end), and a new
 *    fd that takes the number meanwhile is not touched by the old request;
 *  - a loop stopped and freed with requests in flight: weft_loop_free
 *    cancels them and waits, so none consumes data afterwards;
 *  - a cancelled file read whose request never left the turn does not
 *    touch the buffer;
 *  - weft_file_open of a FIFO waits for the other end, as open(2) does,
 *    and a loop freed with such an open in the kernel cancels it and
 *    leaks no fd; opens cancelled at every point return an fd or
 *    -ECANCELED and lose none; an open completed for a task the loop
 *    then drops has its fd closed;
 *  - a regular file weft_read by 8 tasks at its position, the page cache
 *    cold: each byte comes once (ring reads at offset -1 in flight together
 *    started at the same place);
 *  - multishot accept: 200 connections, each accepted once and in order
 *    while the listener's queue fills and is cancelled and asked again;
 *    a cancelled accept loses no connection; a listener closed with
 *    connections queued closes them, leaks none;
 *  - multishot recv into provided buffers: data that came while no call
 *    waited is in weft's queue (the kernel's socket buffer is empty) and
 *    comes out whole and in order, across calls of any size, with
 *    MSG_PEEK, MSG_WAITALL, MSG_NOSIGNAL and MSG_DONTWAIT (which sees data
 *    no turn has reaped yet), MSG_TRUNC refused while data is queued;
 * weft_wait_fd sees queued data; the end of stream comes after the data, and
 * stays; the queue is bounded (the request stops, the kernel holds the rest,
 * nothing lost); 40 sockets wanting more buffers than the ring has fall back to
 * plain recvs and lose nothing; 500 sockets closed with data queued give their
 * buffers back; the reader of a flooding peer lets the others run after 8
 * chunks taken from the queue; it is off by default (WEFT_URING_PBUF=1 turns it
 * on: everything above), and a kernel that refuses to register a buffer ring (a
 *    seccomp filter, in a child) leaves it off, and says so once on
 *    stderr, as does a value other than 1 or 0;
 *  - the cancel-against-completion rounds run both ways.
 *
 * Skipped (77) where the build or the kernel has no io_uring.
 */
#include "weft.h"

#include "check.h"
#include "internal.h" /* weft_task.io: a request in flight */

#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <netinet/in.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

static weft_config uring = {.backend = "io_uring"};

static weft_loop *uring_loop(void) {
  weft_loop *loop = weft_loop_new(&uring);
  CHECK(loop);
  CHECK_STR_EQ(weft_loop_backend(loop), "io_uring");
  return loop;
}

static void run_on_uring(void *(*fn)(void *), void *arg) {
  weft_loop *loop = uring_loop();
  CHECK(weft_spawn(fn, arg));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

static void pair(int sv[2]) {
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

/* ---- the fallback ------------------------------------------------------- */
/* From here on this process runs under the seccomp filter f. */
static void install_filter(struct sock_filter *f, size_t n) {
  struct sock_fprog prog = {(unsigned short)n, f};
  CHECK_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  CHECK_EQ(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog), 0);
}

/* From here on the system call nr fails with err in this process. */
static void forbid_syscall(long nr, int err) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 1),
      BPF_STMT(BPF_RET | BPF_K,
               SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  install_filter(f, sizeof f / sizeof f[0]);
}

static void *echo_once(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  char buf[8];
  CHECK_EQ(weft_send(sv[0], "ping", 4, 0), 4);
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, 0), 4);
  CHECK(memcmp(buf, "ping", 4) == 0);
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* Each forbidden system call, and the notice it gives. A filter that lets
 * the ring be set up and probed but forbids io_uring_enter must be caught
 * at the loop's creation too, not at its first run. */
static const struct {
  long nr;
  int err;
  const char *line;
} forbidden[] = {
    {__NR_io_uring_setup, ENOSYS,
     "weft: io_uring unavailable (Function not implemented); using epoll\n"},
    {__NR_io_uring_setup, EPERM,
     "weft: io_uring unavailable (Operation not permitted); using epoll\n"},
    {__NR_io_uring_register, EPERM,
     "weft: io_uring unavailable (io_uring_get_probe failed); using epoll\n"},
    {__NR_io_uring_enter, EPERM,
     "weft: io_uring unavailable (io_uring_enter: Operation not permitted); "
     "using epoll\n"},
};

static void fallback_child(void *arg) {
  size_t i = (size_t)I(arg);
  forbid_syscall(forbidden[i].nr, forbidden[i].err);
  for (int k = 0; k < 2; k++) { /* the notice comes once */
    weft_loop *loop = weft_loop_new(&uring);
    CHECK(loop);
    CHECK_STR_EQ(weft_loop_backend(loop), "epoll");
    CHECK(weft_spawn(echo_once, NULL));
    CHECK_EQ(weft_loop_run(loop), 0);
    weft_loop_free(loop);
  }
}

static void test_fallback(void) {
  for (size_t i = 0; i < sizeof forbidden / sizeof forbidden[0]; i++) {
    static check_child res;
    check_child_run(fallback_child, P(i), &res, 30);
    CHECK_EXITED(res, 0);
    CHECK_STR_EQ(res.err, forbidden[i].line);
  }
  printf("  fallback to epoll (setup ENOSYS, EPERM; register, enter "
         "EPERM): ok\n");
}

/* ---- cancel against completion ------------------------------------------ */
#define ROUNDS 3000
#define CHUNK  16

static int rsv[2];          /* the round's socketpair */
static weft_task *victim;   /* the task whose call is cancelled */
static long victim_rc;      /* what its call returned */
static unsigned char round_tag; /* the bytes of this round */

static void *receiver(void *arg) {
  (void)arg;
  unsigned char buf[CHUNK];
  memset(buf, 0xEE, sizeof buf);
  victim_rc = weft_recv(rsv[0], buf, sizeof buf, 0);
  if (victim_rc > 0)
    for (long i = 0; i < victim_rc; i++)
      CHECK_EQ(buf[i], round_tag);
  /* Anything the kernel writes here after the return would land in the
   * next round's stack (the pool reuses it) and break its check. */
  return NULL;
}

static void *sender(void *arg) {
  (void)arg;
  unsigned char buf[CHUNK];
  memset(buf, round_tag, sizeof buf);
  victim_rc = weft_send(rsv[0], buf, sizeof buf, 0);
  memset(buf, 0x55, sizeof buf); /* a late send would carry these */
  return NULL;
}

/* The controller's moves between starting the victim and cancelling it:
 * the data comes (recv) or room is made (send) before or after the
 * cancellation, with 0-2 yields (the request not yet submitted) or a turn
 * that polls (in the kernel) in between. */
static void steps(int how) {
  switch (how % 4) {
  case 0: break;
  case 1: CHECK_EQ(weft_yield(), 0); break;
  case 2:
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(weft_yield(), 0);
    break;
  case 3: CHECK_EQ(weft_sleep(50000), 0); break;
  }
}

static size_t fill(int fd) {
  static unsigned char junk[65536];
  size_t total = 0;
  ssize_t n;
  while ((n = send(fd, junk, sizeof junk, MSG_DONTWAIT)) > 0)
    total += (size_t)n;
  return total;
}

static size_t drain(int fd, unsigned char tag, int check) {
  static unsigned char buf[65536];
  size_t total = 0;
  ssize_t n;
  while ((n = recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    if (check)
      for (ssize_t i = 0; i < n; i++)
        CHECK_EQ(buf[i], tag);
    total += (size_t)n;
  }
  return total;
}

/* The same through weft_recv, checking every byte. */
static size_t weft_drain(int fd, unsigned char tag) {
  static unsigned char buf[65536];
  size_t total = 0;
  ssize_t n;
  while ((n = weft_recv(fd, buf, sizeof buf, MSG_DONTWAIT)) > 0) {
    for (ssize_t i = 0; i < n; i++)
      CHECK_EQ(buf[i], tag);
    total += (size_t)n;
  }
  CHECK_EQ(n, -EAGAIN);
  return total;
}

/* Drains the filler off the peer. Without DEFER_TASKRUN (under valgrind)
 * the kernel may finish the victim's send during the drain's own recv
 * calls (a request's retry runs on the way out of any system call), and
 * then the drain takes those bytes too: returns how many. */
static size_t drain_filler(size_t filled) {
  size_t got = drain(rsv[1], 0, 0);
  CHECK_GE(got, filled);
  CHECK_LE(got, filled + CHUNK);
  return got - filled;
}

static int got_data, got_cancel;

static void *race_main(void *arg) {
  int sending = arg != NULL;
  for (int r = 0; r < ROUNDS; r++) {
    round_tag = (unsigned char)(r * 7 + 1);
    pair(rsv);
    size_t filled = sending ? fill(rsv[0]) : 0;
    victim_rc = 0;
    victim = weft_spawn(sending ? sender : receiver, NULL);
    CHECK(victim);
    CHECK_EQ(weft_yield(), 0); /* the victim makes its call */
    int data_first = (r / 4) % 2;
    unsigned char b[CHUNK];
    memset(b, round_tag, sizeof b);
    size_t early = 0; /* the victim's bytes a drain took already */
    if (data_first && sending)
      early = drain_filler(filled);
    if (data_first && !sending)
      CHECK_EQ(send(rsv[1], b, sizeof b, 0), CHUNK);
    steps(r);
    int c = weft_cancel(victim); /* -ESRCH: it has finished already */
    CHECK(c == 0 || c == -ESRCH);
    if (!data_first && sending)
      early = drain_filler(filled);
    if (!data_first && !sending)
      CHECK_EQ(send(rsv[1], b, sizeof b, 0), CHUNK);
    CHECK_EQ(weft_join(victim, NULL), 0);
    if (victim_rc == -ECANCELED)
      got_cancel++;
    else {
      CHECK_GT(victim_rc, 0);
      got_data++;
    }
    /* Not one byte lost or twice: what the call did not take is there. */
    CHECK_EQ(weft_sleep(100000), 0); /* a late request would act */
    if (sending) {
      size_t left = drain(rsv[1], round_tag, 1);
      CHECK_EQ(early + left, victim_rc > 0 ? (size_t)victim_rc : 0);
    } else {
      /* Through weft: what a multishot recv brought is in weft's queue,
       * for the next call, not in the kernel. */
      size_t left = weft_drain(rsv[0], round_tag);
      CHECK_EQ(left + (victim_rc > 0 ? (size_t)victim_rc : 0), CHUNK);
    }
    CHECK_EQ(weft_close(rsv[0]), 0);
    CHECK_EQ(weft_close(rsv[1]), 0);
  }
  return NULL;
}

static void test_race(void) {
  int fds = check_fd_count();
  /* A recv request per call, a send; then recv with multishot recv on. */
  for (int pass = 0; pass < 3; pass++) {
    int sending = pass == 1;
    if (pass == 2)
      CHECK_EQ(setenv("WEFT_URING_PBUF", "1", 1), 0);
    got_data = got_cancel = 0;
    run_on_uring(race_main, P(sending));
    printf("  %s cancelled against completion, %d rounds: ok (%d returned "
           "data, %d -ECANCELED)\n",
           pass == 2 ? "multishot recv" : sending ? "send" : "recv", ROUNDS,
           got_data, got_cancel);
    /* Both outcomes were met, so both paths were exercised. */
    CHECK_GT(got_data, 0);
    CHECK_GT(got_cancel, 0);
  }
  CHECK_EQ(unsetenv("WEFT_URING_PBUF"), 0);
  CHECK_EQ(check_fd_count(), fds);
}

/* ---- weft_close with a request in the kernel ---------------------------- */
static int csv[2];

static void *blocked_recv(void *arg) {
  (void)arg;
  char buf[8];
  return P(weft_recv(csv[0], buf, sizeof buf, 0));
}

static void *close_main(void *arg) {
  (void)arg;
  pair(csv);
  weft_task *t = weft_spawn(blocked_recv, NULL);
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0); /* its recv is in the kernel */
  int old = csv[0];
  CHECK_EQ(weft_close(old), 0);
  /* The number is free again: a new socket takes it. */
  int nsv[2];
  pair(nsv);
  int reused = nsv[0] == old || nsv[1] == old;
  CHECK_EQ(send(nsv[1], "new", 3, 0), 3);
  CHECK_EQ(send(nsv[0], "new", 3, 0), 3);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), -EBADF);
  /* The old socket is closed for real: its peer reads the end. */
  char buf[8];
  CHECK_EQ(weft_recv(csv[1], buf, sizeof buf, 0), 0);
  /* The new one kept its data. */
  CHECK_EQ(weft_recv(nsv[0], buf, sizeof buf, 0), 3);
  CHECK_EQ(weft_recv(nsv[1], buf, sizeof buf, 0), 3);
  CHECK_EQ(weft_close(csv[1]), 0);
  CHECK_EQ(weft_close(nsv[0]), 0);
  CHECK_EQ(weft_close(nsv[1]), 0);
  printf("  weft_close with a recv in the kernel: ok (number %sreused)\n",
         reused ? "" : "not ");
  return NULL;
}

static void test_close(void) {
  int fds = check_fd_count();
  run_on_uring(close_main, NULL);
  CHECK_EQ(check_fd_count(), fds);
}

/* ---- a loop freed with requests in flight -------------------------------- */
#define NSTUCK 16
static int stuck[NSTUCK][2];

static void *stuck_recv(void *arg) {
  char buf[64];
  weft_recv(stuck[I(arg)][0], buf, sizeof buf, 0);
  CHECK(0); /* never returns: the loop is stopped and freed */
  return NULL;
}

static void *stopper(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  weft_loop_stop(weft_loop_current());
  return NULL;
}

static void *free_elsewhere(void *loop) {
  weft_loop_free(loop);
  return NULL;
}

static void test_free_in_flight(void) {
  weft_loop *loop = uring_loop();
  for (int i = 0; i < NSTUCK; i++) {
    pair(stuck[i]);
    CHECK(weft_spawn(stuck_recv, P(i)));
  }
  CHECK(weft_spawn(stopper, NULL));
  CHECK_EQ(weft_loop_run(loop), 1);
  /* Freed from another thread first: the ring (SINGLE_ISSUER) cannot be
   * waited on there, so the loop is left as it is, with a notice (the
   * call once spun for ever, on the ring's refusals); then freed on its
   * own thread. */
  pthread_t other;
  CHECK_EQ(pthread_create(&other, NULL, free_elsewhere, loop), 0);
  CHECK_EQ(pthread_join(other, NULL), 0);
  CHECK_STR_EQ(weft_loop_backend(loop), "io_uring"); /* still there */
  weft_loop_free(loop);
  /* No request is left to take what comes now. */
  for (int i = 0; i < NSTUCK; i++) {
    CHECK_EQ(send(stuck[i][1], "late", 4, 0), 4);
    char buf[8];
    CHECK_EQ(recv(stuck[i][0], buf, sizeof buf, MSG_DONTWAIT), 4);
    close(stuck[i][0]);
    close(stuck[i][1]);
  }
  printf("  loop freed with %d recvs in the kernel: ok\n", NSTUCK);
}

/* ---- a file read cancelled before it left the turn ----------------------- */
static char fbuf[64];

static void cancel_cb(void *task) { CHECK_EQ(weft_cancel(task), 0); }

static void *file_main(void *arg) {
  const char *path = arg;
  /* The open is a request on the ring (or, without IORING_OP_OPENAT, a
   * pool job): the loop blocks in its poll meanwhile, so the callback
   * below runs at the start of the next turn, before the loop submits
   * anything. */
  int fd = weft_file_open(path, O_RDONLY, 0);
  CHECK_GE(fd, 0);
  memset(fbuf, 0xAA, sizeof fbuf);
  CHECK_EQ(weft_call_soon(cancel_cb, weft_self()), 0);
  CHECK_EQ(weft_file_read(fd, fbuf, sizeof fbuf, 0), -ECANCELED);
  for (size_t i = 0; i < sizeof fbuf; i++)
    CHECK_EQ((unsigned char)fbuf[i], 0xAA);
  CHECK_EQ(weft_file_close(fd), -ECANCELED); /* closed all the same */
  return NULL;
}

static void *file_pos_main(void *arg) {
  const char *path = arg;
  /* As pread and pwrite: no offset -1 (which the ring takes for "the
   * current position"), no pipe (which it reads at its position). */
  int fd = weft_file_open(path, O_RDWR, 0);
  CHECK_GE(fd, 0);
  CHECK_EQ(weft_file_read(fd, fbuf, 4, -1), -EINVAL);
  CHECK_EQ(weft_file_write(fd, "ab", 2, -1), -EINVAL);
  CHECK_EQ(weft_file_read(fd, fbuf, 4, 2), 4);
  CHECK(memcmp(fbuf, "2345", 4) == 0);
  CHECK_EQ(lseek(fd, 0, SEEK_CUR), 0); /* the position never moved */
  CHECK_EQ(weft_file_close(fd), 0);
  int p[2];
  CHECK_EQ(pipe(p), 0);
  CHECK_EQ(write(p[1], "pipe", 4), 4);
  CHECK_EQ(weft_file_read(p[0], fbuf, 4, 0), -ESPIPE);
  CHECK_EQ(weft_file_write(p[1], "x", 1, 0), -ESPIPE);
  CHECK_EQ(read(p[0], fbuf, 4), 4); /* still there */
  CHECK_EQ(weft_close(p[0]), 0);
  CHECK_EQ(weft_close(p[1]), 0);
  return NULL;
}

/* weft_read of a regular file shared by several tasks: each byte once, as
 * read(2) gives it on epoll. Through the ring, reads at the current
 * position (offset -1) in flight together took the same position: with
 * the page cache cold, 8 tasks' first reads all returned the file's first
 * 64 KiB. */
#define SHARED_SIZE  (4 << 20)
#define SHARED_CHUNK (64 << 10)
#define SHARED_TASKS 8

static int shared_fd;
static unsigned char *shared_seen;
static size_t shared_total;

static void *shared_reader(void *arg) {
  (void)arg;
  uint32_t *b = malloc(SHARED_CHUNK);
  CHECK(b);
  ssize_t n;
  while ((n = weft_read(shared_fd, b, SHARED_CHUNK)) > 0) {
    shared_total += (size_t)n;
    for (ssize_t i = 0; i < n / 4; i++) {
      CHECK_LT(b[i], SHARED_SIZE / 4);
      CHECK_EQ(shared_seen[b[i]]++, 0);
    }
  }
  CHECK_EQ(n, 0);
  free(b);
  return NULL;
}

static void *shared_main(void *arg) {
  (void)arg;
  weft_task *t[SHARED_TASKS];
  for (int i = 0; i < SHARED_TASKS; i++)
    CHECK(t[i] = weft_spawn(shared_reader, NULL));
  for (int i = 0; i < SHARED_TASKS; i++)
    CHECK_EQ(weft_join(t[i], NULL), 0);
  CHECK_EQ(shared_total, SHARED_SIZE);
  return NULL;
}

static void test_file_shared(void) {
  char path[] = "/tmp/weft-uring-XXXXXX";
  shared_fd = mkstemp(path);
  CHECK_GE(shared_fd, 0);
  unlink(path);
  uint32_t *w = malloc(SHARED_SIZE);
  CHECK(w);
  for (uint32_t i = 0; i < SHARED_SIZE / 4; i++)
    w[i] = i;
  CHECK_EQ(write(shared_fd, w, SHARED_SIZE), SHARED_SIZE);
  free(w);
  /* Out of the page cache, so the reads are not done at submission. */
  CHECK_EQ(fsync(shared_fd), 0);
  CHECK_EQ(posix_fadvise(shared_fd, 0, 0, POSIX_FADV_DONTNEED), 0);
  CHECK_EQ(lseek(shared_fd, 0, SEEK_SET), 0);
  CHECK(shared_seen = calloc(SHARED_SIZE / 4, 1));
  run_on_uring(shared_main, NULL);
  free(shared_seen);
  CHECK_EQ(close(shared_fd), 0);
  printf("  a regular file read by %d tasks at its position: ok\n",
         SHARED_TASKS);
}

/* ---- lengths past 32 bits -------------------------------------------------
 */
/* An SQE's length is 32 bits: a recv of 4 GiB once asked for 0 bytes (and
 * returned 0, a false end of stream), a send of 4 GiB + 3 sent 3. They move
 * what the system calls would. The buffer is address space only. */
static void *huge_main(void *arg) {
  (void)arg;
  size_t big = ((size_t)1 << 32) + 3;
  char *buf = mmap(NULL, big, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  CHECK(buf != MAP_FAILED);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK_EQ(weft_send(sv[1], "hello", 5, 0), 5);
  CHECK_EQ(weft_recv(sv[0], buf, (size_t)1 << 32, 0), 5);
  CHECK_EQ(weft_send(sv[1], "again", 5, 0), 5);
  CHECK_EQ(weft_read(sv[0], buf, (size_t)1 << 32), 5);
  CHECK_GT(weft_write(sv[0], buf, (size_t)1 << 32), 0); /* not 0 */
  char sink[65536];
  while (weft_recv(sv[1], sink, sizeof sink, MSG_DONTWAIT) > 0)
    ;
  CHECK_GT(weft_send(sv[0], buf, big, 0), 3); /* what fits, not 3 */
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(munmap(buf, big), 0);
  return NULL;
}

static void test_huge(void) {
  run_on_uring(huge_main, NULL);
  printf("  lengths past 32 bits: ok\n");
}

static void test_file(void) {
  char path[] = "/tmp/weft-uring-XXXXXX";
  int fd = mkstemp(path);
  CHECK_GE(fd, 0);
  CHECK_EQ(write(fd, "0123456789", 10), 10);
  close(fd);
  int fds = check_fd_count();
  run_on_uring(file_main, path);
  run_on_uring(file_pos_main, path);
  CHECK_EQ(check_fd_count(), fds);
  unlink(path);
  printf("  file read cancelled at once, offset -1 and pipes refused: ok\n");
}

/* ---- file opens of a FIFO on the ring ----------------------------------- */
/* The ring's open behaves as open(2): a FIFO opened for reading waits for
 * a writer, and for writing, for a reader (the kernel's inline try, with
 * O_NONBLOCK, would open the first at once and fail the second with
 * -ENXIO: weft forces the request to a worker). Its fd is not left
 * O_NONBLOCK. */
static char fifo[64];

static void *fifo_peer(void *arg) {
  int flags = (int)I(arg);
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  /* The opener is in its open, counted as the FIFO's other end, so this
   * non-blocking open succeeds (it may take a few tries under load). */
  int fd = -1;
  for (int i = 0; i < 2000 && fd < 0; i++)
    if ((fd = open(fifo, flags | O_NONBLOCK | O_CLOEXEC)) < 0) {
      CHECK_EQ(errno, ENXIO);
      CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
    }
  CHECK_GE(fd, 0);
  return P(fd);
}

static void *fifo_open_main(void *arg) {
  int flags = (int)I(arg);
  int64_t t0 = weft_now();
  weft_task *peer =
      weft_spawn(fifo_peer, P(flags == O_RDONLY ? O_WRONLY : O_RDONLY));
  CHECK(peer);
  int fd = weft_file_open(fifo, flags, 0);
  CHECK_GE(fd, 0);
  CHECK_GE(weft_now() - t0, WEFT_MS(50)); /* it waited for the peer */
  CHECK_EQ(fcntl(fd, F_GETFL) & O_NONBLOCK, 0);
  void *other;
  CHECK_EQ(weft_join(peer, &other), 0);
  CHECK_EQ(close((int)I(other)), 0);
  CHECK_EQ(weft_file_close(fd), 0);
  return NULL;
}

/* Never returns: the loop is stopped and freed, which cancels the open. */
static void *fifo_stuck(void *arg) {
  (void)arg;
  weft_file_open(fifo, O_RDONLY, 0);
  CHECK(0);
  return NULL;
}

/* Opens (of the FIFO with O_NONBLOCK, which a reader opens at once)
 * cancelled at every point of their life: each
 * returns an fd (it completed first: the caller's, closed here) or
 * -ECANCELED, and none is lost (the fd count). */
#define OPEN_ROUNDS 2000
static int opens_done, opens_cancelled;

static void *open_one(void *arg) {
  (void)arg;
  int fd = weft_file_open(fifo, O_RDONLY | O_NONBLOCK, 0);
  if (fd >= 0) {
    opens_done++;
    CHECK_EQ(close(fd), 0);
  } else {
    CHECK_EQ(fd, -ECANCELED);
    opens_cancelled++;
  }
  return NULL;
}

static void *open_cancel_main(void *arg) {
  (void)arg;
  for (int i = 0; i < OPEN_ROUNDS; i++) {
    weft_task *t = weft_spawn(open_one, NULL);
    CHECK(t);
    for (int k = 0; k < i % 5; k++)
      CHECK_EQ(weft_yield(), 0);
    weft_cancel(t); /* 0, or -ESRCH once it has ended */
    CHECK_EQ(weft_join(t, NULL), 0);
  }
  return NULL;
}

/* An open whose completion was reaped, its caller woken but not yet run,
 * when a task ahead of it in the turn stops the loop, which is freed: the
 * fd the open got is closed (weft__hold), not lost with the task. */
static weft_task *opener;

static void *open_never_resumed(void *arg) {
  (void)arg;
  weft_file_open(fifo, O_RDONLY | O_NONBLOCK, 0);
  CHECK(0); /* never resumed */
  return NULL;
}

static void *open_stopper(void *arg) {
  (void)arg;
  while (!opener->io) /* until the open is in flight */
    CHECK_EQ(weft_yield(), 0);
  while (opener->io) /* until its completion is reaped: woken, not run */
    CHECK_EQ(weft_yield(), 0);
  weft_loop_stop(weft_loop_current());
  return NULL;
}

static void test_file_fifo(void) {
  char dir[] = "/tmp/weft-uring-XXXXXX";
  CHECK(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  CHECK_EQ(mkfifo(fifo, 0600), 0);
  int fds = check_fd_count();
  run_on_uring(fifo_open_main, P(O_RDONLY));
  run_on_uring(fifo_open_main, P(O_WRONLY));
  CHECK_EQ(check_fd_count(), fds);
  /* A loop freed with an open asleep in the kernel: weft_loop_free
   * cancels it and returns (a pool job there held the loop until a writer
   * came), and no fd is left. */
  weft_loop *loop = uring_loop();
  CHECK(weft_spawn(fifo_stuck, NULL));
  CHECK(weft_spawn(stopper, NULL));
  CHECK_EQ(weft_loop_run(loop), 1);
  int64_t t0 = weft_now();
  weft_loop_free(loop);
  CHECK_LT(weft_now() - t0, WEFT_SEC(2));
  CHECK_EQ(check_fd_count(), fds);
  run_on_uring(open_cancel_main, NULL);
  CHECK_EQ(check_fd_count(), fds);
  CHECK_EQ(opens_done + opens_cancelled, OPEN_ROUNDS);
  /* The stopper must run before the woken opener in the completion's
   * turn: an order WEFT_SEED shuffles. */
  if (!check_seeded()) {
    loop = uring_loop();
    CHECK(weft_spawn(open_stopper, NULL));
    CHECK((opener = weft_spawn(open_never_resumed, NULL)));
    CHECK_EQ(weft_loop_run(loop), 1);
    weft_loop_free(loop);
    CHECK_EQ(check_fd_count(), fds);
  }
  printf("  file opens cancelled, %d rounds: ok (%d returned an fd, %d "
         "-ECANCELED)\n",
         OPEN_ROUNDS, opens_done, opens_cancelled);
  CHECK_EQ(unlink(fifo), 0);
  CHECK_EQ(rmdir(dir), 0);
  printf("  file opens of a FIFO wait for the peer; freed loop cancels; "
         "a dropped opener's fd closed: ok\n");
}

/* ---- multishot accept ----------------------------------------------------- */
#define NCONN 200

static void *cancelled_accept(void *arg) {
  return P(weft_accept((int)I(arg), NULL, NULL));
}

static void *accept_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 256);
  CHECK_GE(lfd, 0);
  int port = weft_sock_port(lfd);
  /* More clients than the listener's queue holds, each saying its number:
   * every one is accepted once, in the order they connected. */
  static int clients[NCONN];
  for (int i = 0; i < NCONN; i++) {
    clients[i] = weft_tcp_connect("127.0.0.1", port);
    CHECK_GE(clients[i], 0);
    CHECK_EQ(weft_send(clients[i], &i, sizeof i, 0), (long)sizeof i);
    if (i % 50 == 49)
      CHECK_EQ(weft_sleep(WEFT_MS(2)), 0); /* the queue fills meanwhile */
  }
  for (int i = 0; i < NCONN; i++) {
    int c = weft_accept(lfd, NULL, NULL);
    CHECK_GE(c, 0);
    int n = -1;
    CHECK_EQ(weft_recv(c, &n, sizeof n, MSG_WAITALL), (long)sizeof n);
    CHECK_EQ(n, i);
    CHECK_EQ(weft_close(c), 0);
  }
  /* A cancelled accept loses nothing: a connection its request took is
   * the next call's. The client connects without parking (a plain
   * connect: the loop reaps no completion before the cancel), so the
   * call is cancelled with the connection made (weft_tcp_connect parked
   * for a turn, and the accept had taken it and returned by then). */
  weft_task *t = weft_spawn(cancelled_accept, P(lfd));
  CHECK(t);
  CHECK_EQ(weft_yield(), 0); /* it waits, its request in the ring */
  int cl = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  CHECK_GE(cl, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  CHECK_EQ(connect(cl, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_EQ(weft_cancel(t), 0);
  void *res;
  CHECK_EQ(weft_join(t, &res), 0);
  CHECK_EQ((int)I(res), -ECANCELED);
  int c0 = weft_accept(lfd, NULL, NULL);
  CHECK_GE(c0, 0);
  CHECK_EQ(weft_send(cl, "hi", 2, 0), 2);
  char hi[2];
  CHECK_EQ(weft_recv(c0, hi, 2, MSG_WAITALL), 2);
  CHECK_EQ(weft_close(c0), 0);
  CHECK_EQ(weft_close(cl), 0);
  /* Connections the request queued are seen by weft_wait_fd, and taken
   * by an accept that wants the address too (which once made a request of
   * its own, blind to the queue, and waited for a third client). */
  int two[2];
  for (int i = 0; i < 2; i++) {
    two[i] = weft_tcp_connect("127.0.0.1", port);
    CHECK_GE(two[i], 0);
    CHECK_EQ(weft_send(two[i], &i, sizeof i, 0), (long)sizeof i);
  }
  int a0 = weft_accept(lfd, NULL, NULL); /* arms it; the second is queued */
  CHECK_GE(a0, 0);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  weft_scope ws;
  weft_scope_enter(&ws, weft_now() + WEFT_SEC(5));
  CHECK_EQ(weft_wait_fd(lfd, WEFT_READ), WEFT_READ);
  struct sockaddr_storage peer;
  socklen_t plen = sizeof peer;
  int a1 = weft_accept(lfd, (struct sockaddr *)&peer, &plen);
  CHECK_EQ(weft_scope_exit(&ws), 0);
  CHECK_GE(a1, 0);
  CHECK_EQ(plen, (socklen_t)sizeof(struct sockaddr_in));
  CHECK_EQ(peer.ss_family, AF_INET);
  struct sockaddr_storage self;
  socklen_t slen = sizeof self;
  CHECK_EQ(getsockname(two[1], (struct sockaddr *)&self, &slen), 0);
  CHECK_EQ(((struct sockaddr_in *)&peer)->sin_port,
           ((struct sockaddr_in *)&self)->sin_port); /* the second client */
  int n1 = -1;
  CHECK_EQ(weft_recv(a1, &n1, sizeof n1, MSG_WAITALL), (long)sizeof n1);
  CHECK_EQ(n1, 1);
  CHECK_EQ(weft_close(a0), 0);
  CHECK_EQ(weft_close(a1), 0);
  CHECK_EQ(weft_close(two[0]), 0);
  CHECK_EQ(weft_close(two[1]), 0);
  /* Closed with connections queued (and its request in the kernel): they
   * are closed, their clients see the end, no fd is left. */
  int late[8];
  for (int i = 0; i < 8; i++) {
    late[i] = weft_tcp_connect("127.0.0.1", port);
    CHECK_GE(late[i], 0);
  }
  int c = weft_accept(lfd, NULL, NULL); /* arms it again; takes one */
  CHECK_GE(c, 0);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0); /* the rest arrive in the queue */
  CHECK_EQ(weft_close(lfd), 0);
  CHECK_EQ(weft_close(c), 0);
  char b;
  for (int i = 0; i < 8; i++) {
    ssize_t r = weft_recv(late[i], &b, 1, 0);
    CHECK(r == 0 || r == -ECONNRESET);
    CHECK_EQ(weft_close(late[i]), 0);
  }
  for (int i = 0; i < NCONN; i++)
    CHECK_EQ(weft_close(clients[i]), 0);
  return NULL;
}

static void test_accept(void) {
  int fds = check_fd_count(); /* after the loop: weft_accept's spare fd */
  run_on_uring(accept_main, NULL);
  CHECK_EQ(check_fd_count(), fds);
  printf("  multishot accept, %d connections, then closed with some "
         "queued: ok\n", NCONN);
}

/* ---- multishot recv into provided buffers --------------------------------- */

/* Bytes in the kernel's receive buffer of fd. */
static int kernel_queued(int fd) {
  int n = -1;
  CHECK_EQ(ioctl(fd, FIONREAD, &n), 0);
  return n;
}

/* Lets the loop reap what the kernel brought (a turn that polls). */
static void settle(void) { CHECK_EQ(weft_sleep(WEFT_MS(2)), 0); }

/* A socketpair whose first end weft has read once: with multishot recv
 * on, its request is armed from then on. */
static void armed_pair(int sv[2]) {
  char c;
  pair(sv);
  CHECK_EQ(send(sv[1], "x", 1, 0), 1);
  CHECK_EQ(weft_recv(sv[0], &c, 1, 0), 1);
}

static void *rx_main(void *arg) {
  (void)arg;
  int sv[2];
  char buf[256];
  /* The first call arms the request; it stays armed between calls. */
  armed_pair(sv);
  CHECK_EQ(send(sv[1], "hello ", 6, 0), 6);
  CHECK_EQ(send(sv[1], "world", 5, 0), 5);
  settle();
  CHECK_EQ(kernel_queued(sv[0]), 0); /* in weft's queue now */
  CHECK_EQ(weft_wait_fd(sv[0], WEFT_READ), WEFT_READ);
  CHECK_EQ(weft_recv(sv[0], buf, 4, MSG_PEEK), 4);
  CHECK(memcmp(buf, "hell", 4) == 0);
  CHECK_EQ(weft_recv(sv[0], buf, 3, 0), 3); /* part of a chunk */
  CHECK(memcmp(buf, "hel", 3) == 0);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_PEEK), 8); /* two chunks */
  CHECK(memcmp(buf, "lo world", 8) == 0);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 8);
  CHECK(memcmp(buf, "lo world", 8) == 0);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), -EAGAIN);
  /* Sent, not yet reaped by any turn: MSG_DONTWAIT still sees it. */
  CHECK_EQ(send(sv[1], "now", 3, 0), 3);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), 3);
  /* MSG_WAITALL gathers arrivals until it has them all. */
  CHECK_EQ(send(sv[1], "12", 2, 0), 2);
  settle();
  CHECK_EQ(send(sv[1], "345", 3, 0), 3);
  CHECK_EQ(weft_recv(sv[0], buf, 5, MSG_WAITALL), 5);
  CHECK(memcmp(buf, "12345", 5) == 0);
  /* A read is served the same way. */
  CHECK_EQ(send(sv[1], "rd", 2, 0), 2);
  CHECK_EQ(weft_read(sv[0], buf, sizeof buf), 2);
  /* A flag that changes nothing for a recv takes from the queue too (it
   * once made a request of its own, which waited while the queue held
   * data, and overtook it); one that would need the queued bytes another
   * way is refused while the request holds the stream. */
  CHECK_EQ(send(sv[1], "BC", 2, 0), 2);
  settle();
  CHECK_EQ(kernel_queued(sv[0]), 0);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_TRUNC | MSG_PEEK), -ENOTSUP);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_NOSIGNAL), 2);
  CHECK(memcmp(buf, "BC", 2) == 0);
  /* The end of stream, after the data, and again. */
  CHECK_EQ(send(sv[1], "last", 4, 0), 4);
  CHECK_EQ(weft_close(sv[1]), 0);
  settle();
  CHECK_EQ(weft_wait_fd(sv[0], WEFT_READ), WEFT_READ);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 4);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 0);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 0);
  CHECK_EQ(weft_close(sv[0]), 0);
  return NULL;
}

/* A peer that sends while nobody reads: at most a few chunks wait in
 * weft's queue, the rest in the kernel; all of it comes out in order. */
#define FLOOD 200 /* sends of 100 bytes, one loop turn apart */

static void *bounded_main(void *arg) {
  (void)arg;
  int sv[2];
  unsigned char buf[1000];
  armed_pair(sv);
  for (int i = 0; i < FLOOD; i++) {
    memset(buf, (unsigned char)i, 100);
    CHECK_EQ(send(sv[1], buf, 100, 0), 100);
    CHECK_EQ(weft_sleep(1000), 0); /* a turn: each send its own chunk */
  }
  settle();
  /* Queued in weft: at most 8 chunks, and those the request brought
   * before its cancellation landed. */
  CHECK_GE(kernel_queued(sv[0]), (FLOOD - 16) * 100);
  size_t at = 0;
  while (at < FLOOD * 100) {
    ssize_t n = weft_recv(sv[0], buf, sizeof buf, 0);
    CHECK_GT(n, 0);
    for (ssize_t i = 0; i < n; i++, at++)
      CHECK_EQ(buf[i], (unsigned char)(at / 100));
  }
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), -EAGAIN);
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* More sockets with data queued than the ring has buffers (40 x 8 > 256):
 * the request of some ends with ENOBUFS, and their calls read the plain
 * way until buffers are back. Nothing is lost or reordered. */
#define NSOCK 40
#define PIECES 12

static void *nobufs_main(void *arg) {
  (void)arg;
  int sv[NSOCK][2];
  unsigned char buf[2048];
  for (int i = 0; i < NSOCK; i++) {
    armed_pair(sv[i]);
  }
  for (int p = 0; p < PIECES; p++) {
    for (int i = 0; i < NSOCK; i++) {
      memset(buf, (unsigned char)(i * PIECES + p), 64);
      CHECK_EQ(send(sv[i][1], buf, 64, 0), 64);
    }
    CHECK_EQ(weft_sleep(1000), 0);
  }
  settle();
  for (int i = 0; i < NSOCK; i++) {
    size_t at = 0;
    while (at < PIECES * 64) {
      ssize_t n = weft_recv(sv[i][0], buf, sizeof buf, 0);
      CHECK_GT(n, 0);
      for (ssize_t k = 0; k < n; k++, at++)
        CHECK_EQ(buf[k], (unsigned char)(i * PIECES + at / 64));
    }
    CHECK_EQ(at, (size_t)PIECES * 64);
    CHECK_EQ(weft_close(sv[i][0]), 0);
    CHECK_EQ(weft_close(sv[i][1]), 0);
  }
  return NULL;
}

/* Closed with data queued, 500 times over: the buffers go back to the
 * ring, so the next socket's data still goes through it. */
static void *recycle_main(void *arg) {
  (void)arg;
  unsigned char buf[64] = {0};
  for (int i = 0; i < 500; i++) {
    int sv[2];
    armed_pair(sv);
    for (int p = 0; p < 4; p++) {
      CHECK_EQ(send(sv[1], buf, 32, 0), 32);
      CHECK_EQ(weft_yield(), 0);
      settle();
    }
    CHECK_EQ(weft_close(sv[0]), 0);
    CHECK_EQ(weft_close(sv[1]), 0);
  }
  int sv[2];
  armed_pair(sv);
  CHECK_EQ(send(sv[1], "more", 4, 0), 4);
  settle();
  CHECK_EQ(kernel_queued(sv[0]), 0); /* taken into a ring buffer */
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 4);
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* Multishot recv off: each call is a request of its own, and data waits
 * in the kernel until a call asks. */
static void *plain_main(void *arg) {
  (void)arg;
  int sv[2];
  char buf[16];
  armed_pair(sv);
  CHECK_EQ(send(sv[1], "kept", 4, 0), 4);
  settle();
  CHECK_EQ(kernel_queued(sv[0]), 4);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 4);
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* A kernel without buffer rings (before 5.19): registering one fails with
 * EINVAL, here by a seccomp filter in a child, and recvs are plain. */
static void no_pbuf_child(void *arg) {
  (void)arg;
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_register, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
               offsetof(struct seccomp_data, args[1])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 22 /* IORING_REGISTER_PBUF_RING */,
               0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EINVAL),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  install_filter(f, sizeof f / sizeof f[0]);
  for (int k = 0; k < 2; k++) /* the notice comes once */
    run_on_uring(plain_main, NULL);
}

/* A value other than 1 (or 0, or empty) is a mistake worth a line. */
static void pbuf_yes_child(void *arg) {
  (void)arg;
  CHECK_EQ(setenv("WEFT_URING_PBUF", "yes", 1), 0);
  for (int k = 0; k < 2; k++)
    run_on_uring(plain_main, NULL);
  CHECK_EQ(setenv("WEFT_URING_PBUF", "0", 1), 0);
  run_on_uring(plain_main, NULL);
}

/* MSG_WAITALL with part of its bytes when the ring runs out of buffers
 * (ENOBUFS): the rest comes by a request of its own, the call is not cut
 * short. 32 sockets hold every buffer of the ring (256: 8 chunks each). */
#define WN 33
static int wp[WN][2];
static ssize_t wres;
static char wbuf[32];

static void *waitall_reader(void *arg) {
  (void)arg;
  wres = weft_recv(wp[0][0], wbuf, 20, MSG_WAITALL);
  return NULL;
}

static void *waitall_nobufs_main(void *arg) {
  (void)arg;
  char c, junk[100];
  memset(junk, 'j', sizeof junk);
  for (int i = 0; i < WN; i++) {
    CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, wp[i]), 0);
    CHECK_EQ(send(wp[i][1], "a", 1, 0), 1);
    CHECK_EQ(weft_recv(wp[i][0], &c, 1, 0), 1); /* its multishot recv */
  }
  CHECK_EQ(send(wp[0][1], "0123456789", 10, 0), 10);
  CHECK_EQ(weft_sleep(WEFT_MS(3)), 0);
  for (int round = 0; round < 8; round++) {
    for (int i = 1; i < WN; i++)
      if (!(i == WN - 1 && round == 7))
        CHECK_EQ(send(wp[i][1], junk, sizeof junk, 0), (ssize_t)sizeof junk);
    CHECK_EQ(weft_sleep(WEFT_MS(3)), 0);
  }
  wres = -999;
  weft_task *t = weft_spawn(waitall_reader, NULL);
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(3)), 0); /* 10 bytes taken, a buffer back */
  CHECK_EQ(send(wp[WN - 1][1], junk, 5, 0), 5); /* which another takes */
  CHECK_EQ(weft_sleep(WEFT_MS(3)), 0);
  CHECK_EQ(send(wp[0][1], "ABCDEFGHIJ", 10, 0), 10); /* no buffer left */
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_SEC(5));
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(weft_scope_exit(&s), 0);
  CHECK_EQ(wres, 20);
  CHECK(memcmp(wbuf, "0123456789ABCDEFGHIJ", 20) == 0);
  for (int i = 0; i < WN; i++) {
    CHECK_EQ(weft_close(wp[i][0]), 0);
    CHECK_EQ(weft_close(wp[i][1]), 0);
  }
  return NULL;
}

/* A reader whose peer floods it gives way to the other tasks. A recv
 * served from the queue does not park, and the kernel fills the queue with
 * all the socket holds (~100 buffers from a fast peer) before the
 * request's cancellation at RX_QUEUE_MAX (8) lands: the reader took them
 * all without the loop turning (test_badpeer's good client waited 80-200
 * ms behind it on a loaded machine). It goes to the back of the ready
 * queue after RX_QUEUE_MAX chunks. */
static int flood_port, flood_done;
static unsigned long flood_ticks;

static void *flooder(void *arg) {
  (void)arg;
  int fd = weft_tcp_connect("127.0.0.1", flood_port);
  CHECK_GE(fd, 0);
  size_t big = 4u << 20;
  char *p = malloc(big);
  CHECK(p);
  memset(p, 'x', big);
  CHECK_EQ(weft_write_all(fd, p, big), (ssize_t)big);
  free(p);
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

static void *ticker(void *arg) {
  (void)arg;
  while (!flood_done) {
    flood_ticks++;
    CHECK_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *turns_main(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 0);
  CHECK_GE(lfd, 0);
  flood_port = weft_sock_port(lfd);
  flood_done = 0;
  weft_task *f = weft_spawn(flooder, NULL);
  int fd = weft_accept(lfd, NULL, NULL);
  CHECK_GE(fd, 0);
  weft_task *t = weft_spawn(ticker, NULL);
  char buf[4096];
  size_t total = 0;
  unsigned run = 0, worst = 0;
  unsigned long seen = flood_ticks;
  for (;;) {
    ssize_t n = weft_read(fd, buf, sizeof buf);
    CHECK_GE(n, 0);
    if (n == 0)
      break;
    total += (size_t)n;
    run = flood_ticks == seen ? run + 1 : 1; /* the ticker has not run */
    seen = flood_ticks;
    if (run > worst)
      worst = run;
  }
  flood_done = 1;
  CHECK_EQ(total, (size_t)(4u << 20));
  CHECK_LE(worst, 16u); /* RX_QUEUE_MAX (8) chunks, each a read or two */
  CHECK_EQ(weft_join(f, NULL), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(weft_close(fd), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

static void test_multishot_recv(void) {
  int fds = check_fd_count();
  CHECK_EQ(setenv("WEFT_URING_PBUF", "1", 1), 0);
  run_on_uring(rx_main, NULL);
  run_on_uring(bounded_main, NULL);
  run_on_uring(nobufs_main, NULL);
  run_on_uring(recycle_main, NULL);
  run_on_uring(waitall_nobufs_main, NULL);
  run_on_uring(turns_main, NULL);
  CHECK_EQ(unsetenv("WEFT_URING_PBUF"), 0); /* the default: off */
  run_on_uring(plain_main, NULL);
  /* Read by weft_loop_new, as weft.h says: set after it, it changes
   * nothing (it was read at the first read of a socket). */
  weft_loop *loop = uring_loop();
  CHECK_EQ(setenv("WEFT_URING_PBUF", "1", 1), 0);
  CHECK(weft_spawn(plain_main, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  static check_child res;
  check_child_run(no_pbuf_child, NULL, &res, 30);
  CHECK_EXITED(res, 0);
  CHECK_STR_EQ(res.err, "weft: WEFT_URING_PBUF=1: the kernel has no buffer "
                        "rings; a recv request per call\n");
  check_child_run(pbuf_yes_child, NULL, &res, 30);
  CHECK_EXITED(res, 0);
  CHECK_STR_EQ(res.err, "weft: WEFT_URING_PBUF=yes: only 1 turns it on; a "
                        "recv request per call\n");
  CHECK_EQ(unsetenv("WEFT_URING_PBUF"), 0);
  CHECK_EQ(check_fd_count(), fds);
  printf("  multishot recv: queue, peek, waitall, dontwait, end, bound, "
         "%d sockets past the ring, 500 closed with data queued, a flood's "
         "reader gives way, off, no buffer rings in the kernel: ok\n",
         NSOCK);
}

int main(void) {
  weft_loop *probe = weft_loop_new(&uring);
  CHECK(probe);
  int have = strcmp(weft_loop_backend(probe), "io_uring") == 0;
  weft_loop_free(probe);
  if (!have)
    SKIP("no io_uring in this build or kernel");
  test_fallback();
  test_race();
  test_close();
  test_free_in_flight();
  test_file();
  test_file_fifo();
  test_file_shared();
  test_accept();
  test_huge();
  test_multishot_recv();
  printf("test_uring: ok\n");
  return 0;
}
