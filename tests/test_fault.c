/*
 * Syscall failures on the I/O paths, injected through weft__fault_hook
 * (src/fault.h) on healthy sockets and pipes (run once per backend).
 *
 * A small script steers the hook: rules "for the next k calls (or every
 * call) of kind K on fd F: fail with errno E / move at most n bytes".
 * Each case runs alone in a fresh loop in a child process (case_check.h),
 * which must end with no fd waiter, timer, callback, task or fd left.
 *
 *  - EINTR, several in a row, on read, write, recv, send, recvfrom,
 *    sendto, accept and connect: retried inside, the normal result;
 *  - short reads (1 byte, or 1..n bytes, per call) under
 *    weft_stream_readline (a too-long line included), read_exact and a
 *    protocol that mixes them with weft_stream_read: every byte intact,
 *    in order; short writes under weft_write_all, weft_stream_write and
 *    flush: the peer gets every byte exactly once;
 *  - a spurious EAGAIN while data is there: poll (level-triggered) goes on
 *    at once; epoll (edge-triggered) waits for the next event on the fd,
 *    and then nothing is lost or duplicated (recv, send, accept);
 *  - ECONNRESET on recv and under readline / read_exact (the buffered
 *    bytes stay); EPIPE on send, write_all (the bytes sent before it) and
 *    flush (what did not go out stays queued);
 *  - EMFILE and ENFILE at accept: the head of the queue is dropped through
 *    the spare fd (its client sees the end), accept returns the next one,
 *    no fd leaks; ENOBUFS and ENOMEM: back off, nothing dropped;
 *  - an errno that is not retried (EIO, ENOBUFS on send...): returned at
 *    once, after one call, and the fd works afterwards;
 *  - cancellation while a spurious EAGAIN (or an accept backoff) holds the
 *    task: -ECANCELED, nothing consumed, nothing registered;
 *  - regressions: connect after EINTR waited for a connection never made
 *    (epoll: for ever; poll: spinning), and MSG_DONTWAIT parked once a
 *    short read had cleared the fd's hint.
 */
#include "weft.h"

#include "backend.h"
#include "fault.h"
#include "internal.h"

#include "check.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

/* ---- the script --------------------------------------------------------- */
#define ANY    (-1) /* a rule's kind or fd that matches all */
#define EVER   (-1) /* a rule's count: every call, for as long as it is set */
#define NKINDS (OP_FILE_READ + 1)

typedef struct rule {
  int kind;   /* OP_* or ANY */
  int fd;     /* or ANY */
  int count;  /* matching calls it still hits; EVER: all of them */
  int action; /* what the hook returns: errno > 0, or -n (at most n bytes) */
  int vary;   /* > 0: instead of action, at most 1 + (hits % vary) bytes */
} rule;

static rule rules[8];
static int nrules;
/* Calls per kind on the fds the rules name (whether a rule still answers
 * or not): the system calls the steered operation made. */
static int calls[NKINDS];
static int hits; /* calls a rule answered */

static int matches(const rule *r, int kind, int fd) {
  return (r->kind == ANY || r->kind == kind) && (r->fd == ANY || r->fd == fd);
}

static int hook(int kind, int fd, size_t len, void *arg) {
  (void)len;
  (void)arg;
  CHECK(kind >= 0 && kind < NKINDS);
  int named = 0;
  for (int i = 0; i < nrules; i++)
    named |= matches(&rules[i], kind, fd);
  calls[kind] += named;
  for (int i = 0; i < nrules; i++) {
    rule *r = &rules[i];
    if (r->count == 0 || !matches(r, kind, fd))
      continue;
    if (r->count > 0)
      r->count--;
    hits++;
    return r->vary ? -(1 + hits % r->vary) : r->action;
  }
  return 0;
}

/* Rules apply in the order they were added: the first one that matches
 * and has calls left answers. */
static void inject(int kind, int fd, int count, int action) {
  CHECK_LT(nrules, (int)(sizeof rules / sizeof rules[0]));
  rules[nrules++] = (rule){kind, fd, count, action, 0};
  weft__fault_hook = hook;
}

static void inject_short(int kind, int fd, int most) {
  inject(kind, fd, EVER, -most);
}

static void inject_vary(int kind, int fd, int most) {
  inject(kind, fd, EVER, 0);
  rules[nrules - 1].vary = most;
}

/* No rule, hook off, counts from 0. */
static void fault_reset(void) {
  weft__fault_hook = NULL;
  nrules = 0;
  hits = 0;
  memset(calls, 0, sizeof calls);
}

static size_t loop_nwaiters(void) { return weft_loop_current()->nwaiters; }

static int on_epoll(void) {
  return strcmp(weft_loop_backend(weft_loop_current()), "epoll") == 0;
}

static int on_uring(void) {
  return strcmp(weft_loop_backend(weft_loop_current()), "io_uring") == 0;
}

static unsigned char pat(size_t i) { return (unsigned char)(i * 31 + i / 7); }

static void pair(int sv[2]) {
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
}

static void close_pair(int sv[2]) {
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
}

/* Lets the loop poll once, so that the events pending on the fds (the
 * first one epoll reports when a fd is registered, an edge for data sent
 * meanwhile) are taken now, as hints, and not later by a waiter. */
static void drain_events(void) { CHECK_EQ(weft_sleep(WEFT_MS(1)), 0); }

/* A connection to `port` on 127.0.0.1 that has sent its byte `tag`. */
static int client(int port, char tag) {
  int fd = weft_tcp_connect("127.0.0.1", port);
  CHECK_GE(fd, 0);
  CHECK_EQ(weft_send(fd, &tag, 1, 0), 1);
  return fd;
}

/* The tag the client behind accepted fd `c` sent. */
static char tag_of(int c) {
  char t = 0;
  CHECK_EQ(weft_recv(c, &t, 1, 0), 1);
  return t;
}

/* A reader that takes everything from fd until end of file. */
typedef struct sink {
  int fd;
  size_t len;
  unsigned char buf[1 << 16];
} sink;

static void *sink_task(void *arg) {
  sink *s = arg;
  for (;;) {
    CHECK_LT(s->len, sizeof s->buf);
    ssize_t n = weft_read(s->fd, s->buf + s->len, sizeof s->buf - s->len);
    CHECK_GE(n, 0);
    if (n == 0)
      return NULL;
    s->len += (size_t)n;
  }
}

/* ---- EINTR: retried inside ---------------------------------------------- */
#define EINTRS 3

static void *eintr_pipe(void *arg) {
  (void)arg;
  int p[2];
  CHECK_EQ(pipe(p), 0);
  inject(OP_WRITE, p[1], EINTRS, EINTR);
  CHECK_EQ(weft_write(p[1], "abc", 3), 3);
  CHECK_EQ(calls[OP_WRITE], EINTRS + 1);
  inject(OP_READ, p[0], EINTRS, EINTR);
  char buf[8];
  CHECK_EQ(weft_read(p[0], buf, sizeof buf), 3);
  CHECK(memcmp(buf, "abc", 3) == 0);
  CHECK_EQ(calls[OP_READ], EINTRS + 1);
  /* write_all too: the bytes go out once. */
  inject(OP_WRITE, p[1], EINTRS, EINTR);
  CHECK_EQ(weft_write_all(p[1], "defg", 4), 4);
  CHECK_EQ(weft_read(p[0], buf, sizeof buf), 4);
  CHECK(memcmp(buf, "defg", 4) == 0);
  CHECK_EQ(hits, 3 * EINTRS);
  fault_reset();
  CHECK_EQ(weft_close(p[0]), 0);
  CHECK_EQ(weft_close(p[1]), 0);
  return NULL;
}

static void *eintr_socket(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  inject(OP_SEND, sv[0], EINTRS, EINTR);
  CHECK_EQ(weft_send(sv[0], "hello", 5, 0), 5);
  CHECK_EQ(calls[OP_SEND], EINTRS + 1);
  inject(OP_RECV, sv[1], EINTRS, EINTR);
  char buf[16];
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, 0), 5);
  CHECK(memcmp(buf, "hello", 5) == 0);
  CHECK_EQ(calls[OP_RECV], EINTRS + 1);
  fault_reset();
  close_pair(sv);

  /* recvfrom / sendto, on datagrams. */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
  inject(OP_SENDTO, sv[0], EINTRS, EINTR);
  CHECK_EQ(weft_sendto(sv[0], "dgram", 5, 0, NULL, 0), 5);
  CHECK_EQ(calls[OP_SENDTO], EINTRS + 1);
  inject(OP_RECVFROM, sv[1], EINTRS, EINTR);
  struct sockaddr_storage from;
  socklen_t fromlen = sizeof from;
  CHECK_EQ(weft_recvfrom(sv[1], buf, sizeof buf, 0, (struct sockaddr *)&from,
                         &fromlen),
           5);
  CHECK(memcmp(buf, "dgram", 5) == 0);
  CHECK_EQ(calls[OP_RECVFROM], EINTRS + 1);
  fault_reset();
  close_pair(sv);
  return NULL;
}

static void *eintr_accept(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  int c1 = client(weft_sock_port(lfd), '1');
  inject(OP_ACCEPT, lfd, EINTRS, EINTR);
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(calls[OP_ACCEPT], EINTRS + 1);
  CHECK_EQ(tag_of(a), '1');
  fault_reset();
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(c1), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

/* A connection reset while it waited in the queue (ECONNABORTED, EPROTO)
 * is passed over: accept goes on to the next, the listener unharmed. */
static void *aborted_accept(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  int c1 = client(weft_sock_port(lfd), '1');
  inject(OP_ACCEPT, lfd, 1, ECONNABORTED);
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(calls[OP_ACCEPT], 2);
  CHECK_EQ(tag_of(a), '1');
  CHECK_EQ(weft_close(a), 0);
  inject(OP_ACCEPT, lfd, 1, EPROTO);
  int c2 = client(weft_sock_port(lfd), '2');
  a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(tag_of(a), '2');
  fault_reset();
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(c1), 0);
  CHECK_EQ(weft_close(c2), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

/* Regression: an EINTR'd connect was taken for one going on in the
 * background, and waited for: on an unconnected socket that never comes
 * (epoll: no event after the first, so for ever; poll: the socket polls
 * writable, so a busy loop at 100% CPU). connect is now called again. */
static void *eintr_connect(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)weft_sock_port(lfd)),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  inject(OP_CONNECT, fd, EINTRS, EINTR);
  CHECK_EQ(weft_connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  CHECK_EQ(calls[OP_CONNECT], EINTRS + 1);
  fault_reset();
  /* Really connected: the byte reaches the listener's side. */
  CHECK_EQ(weft_send(fd, "c", 1, 0), 1);
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(tag_of(a), 'c');
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(fd), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

/* ---- short reads ------------------------------------------------------- */
#define NLINES  60
#define LONG_AT 20 /* this line is too long for readline's buffer */

static void line_text(int i, char *buf, size_t cap) {
  if (i == LONG_AT) {
    memset(buf, 'L', 100);
    strcpy(buf + 100, "\n");
    return;
  }
  snprintf(buf, cap, "line %d %.*s\n", i, i % 31,
           "abcdefghijklmnopqrstuvwxyz0123456789");
}

static void *line_feeder(void *arg) {
  int fd = (int)I(arg);
  char line[128];
  for (int i = 0; i < NLINES; i++) {
    line_text(i, line, sizeof line);
    CHECK_EQ(weft_write_all(fd, line, strlen(line)), (ssize_t)strlen(line));
  }
  CHECK_EQ(weft_write_all(fd, "tail", 4), 4); /* no '\n' before the end */
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

static void *short_readline(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  inject_short(OP_READ, sv[0], 1);
  weft_task *f = weft_spawn(line_feeder, P(sv[1]));
  CHECK(f);
  /* A 64-byte buffer, lines up to 47 bytes: line LONG_AT does not fit. */
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK(s);
  char got[48], want[128];
  size_t bytes = 0;
  for (int i = 0; i < NLINES; i++) {
    line_text(i, want, sizeof want);
    bytes += strlen(want);
    ssize_t n = weft_stream_readline(s, got, sizeof got);
    if (i == LONG_AT) {
      CHECK_EQ(n, -EMSGSIZE);
      continue;
    }
    CHECK_EQ(n, (ssize_t)strlen(want));
    CHECK_STR_EQ(got, want);
  }
  CHECK_EQ(weft_stream_readline(s, got, sizeof got), 4);
  CHECK_STR_EQ(got, "tail");
  CHECK_EQ(weft_stream_readline(s, got, sizeof got), 0);
  /* One byte per read: a read per byte, one for the end of file, and
   * those that found nothing yet (the reader is faster than the feeder). */
  CHECK_GE(calls[OP_READ], (int)bytes + 4 + 1);
  CHECK_EQ(hits, calls[OP_READ]);
  CHECK_EQ(weft_join(f, NULL), 0);
  fault_reset();
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

/* Records: a 2-byte length (big-endian), then that many bytes of pat(). */
static const size_t rec_len[] = {0, 1, 2, 5, 63, 64, 65, 100, 200, 3, 1000};
#define NRECS (sizeof rec_len / sizeof rec_len[0])

static void *rec_feeder(void *arg) {
  int fd = (int)I(arg);
  size_t off = 0;
  for (size_t r = 0; r < NRECS; r++) {
    unsigned char rec[2 + 1000];
    rec[0] = (unsigned char)(rec_len[r] >> 8);
    rec[1] = (unsigned char)rec_len[r];
    for (size_t i = 0; i < rec_len[r]; i++)
      rec[2 + i] = pat(off++);
    CHECK_EQ(weft_write_all(fd, rec, 2 + rec_len[r]),
             (ssize_t)(2 + rec_len[r]));
  }
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

static void *short_read_exact(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  inject_vary(OP_READ, sv[0], 5); /* 1 to 5 bytes a read */
  weft_task *f = weft_spawn(rec_feeder, P(sv[1]));
  CHECK(f);
  /* 64 bytes: records up to 64 are gathered in the buffer, longer ones
   * go straight into the caller's memory. */
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK(s);
  size_t off = 0;
  for (size_t r = 0; r < NRECS; r++) {
    unsigned char hdr[2], body[1000];
    CHECK_EQ(weft_stream_read_exact(s, hdr, 2), 2);
    size_t len = (size_t)hdr[0] << 8 | hdr[1];
    CHECK_EQ(len, rec_len[r]);
    CHECK_EQ(weft_stream_read_exact(s, body, len), (ssize_t)len);
    for (size_t i = 0; i < len; i++)
      CHECK_EQ(body[i], pat(off++));
  }
  unsigned char hdr[2];
  CHECK_EQ(weft_stream_read_exact(s, hdr, 2), 0); /* end of file */
  CHECK_GT(calls[OP_READ], (int)(off / 5));
  CHECK_EQ(weft_join(f, NULL), 0);
  fault_reset();
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

/* "LEN n\n", n bytes, again; then a tail read with weft_stream_read. */
#define MIXED_TAIL 3000

static void *mixed_feeder(void *arg) {
  int fd = (int)I(arg);
  size_t off = 0;
  for (size_t r = 0; r < NRECS; r++) {
    char hdr[32];
    int h = snprintf(hdr, sizeof hdr, "LEN %zu\n", rec_len[r]);
    CHECK_EQ(weft_write_all(fd, hdr, (size_t)h), h);
    unsigned char body[1000];
    for (size_t i = 0; i < rec_len[r]; i++)
      body[i] = pat(off++);
    CHECK_EQ(weft_write_all(fd, body, rec_len[r]), (ssize_t)rec_len[r]);
  }
  unsigned char tail[MIXED_TAIL];
  for (size_t i = 0; i < MIXED_TAIL; i++)
    tail[i] = pat(off++);
  CHECK_EQ(weft_write_all(fd, tail, MIXED_TAIL), MIXED_TAIL);
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

static void *short_mixed(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  inject_vary(OP_READ, sv[0], 7);
  weft_task *f = weft_spawn(mixed_feeder, P(sv[1]));
  CHECK(f);
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK(s);
  size_t off = 0;
  for (size_t r = 0; r < NRECS; r++) {
    char line[32], want[32];
    snprintf(want, sizeof want, "LEN %zu\n", rec_len[r]);
    CHECK_EQ(weft_stream_readline(s, line, sizeof line), (ssize_t)strlen(want));
    CHECK_STR_EQ(line, want);
    /* The first half exactly, the rest in whatever pieces come. */
    size_t len = rec_len[r], half = len / 2, have;
    unsigned char body[1000];
    CHECK_EQ(weft_stream_read_exact(s, body, half), (ssize_t)half);
    for (have = half; have < len;) {
      ssize_t n = weft_stream_read(s, body + have, len - have);
      CHECK_GT(n, 0);
      have += (size_t)n;
    }
    for (size_t i = 0; i < len; i++)
      CHECK_EQ(body[i], pat(off++));
  }
  size_t tail = 0;
  for (;;) {
    unsigned char buf[100];
    ssize_t n = weft_stream_read(s, buf, sizeof buf);
    CHECK_GE(n, 0);
    if (n == 0)
      break;
    for (ssize_t i = 0; i < n; i++)
      CHECK_EQ(buf[i], pat(off++));
    tail += (size_t)n;
  }
  CHECK_EQ(tail, MIXED_TAIL);
  CHECK_EQ(weft_join(f, NULL), 0);
  fault_reset();
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

/* ---- short writes ------------------------------------------------------ */
#define WRITE_LEN 5000

static void *short_write_all(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  static sink k;
  k.fd = sv[0];
  weft_task *t = weft_spawn(sink_task, &k);
  CHECK(t);
  static unsigned char buf[WRITE_LEN];
  for (size_t i = 0; i < WRITE_LEN; i++)
    buf[i] = pat(i);
  inject_short(OP_WRITE, sv[1], 7);
  CHECK_EQ(weft_write_all(sv[1], buf, WRITE_LEN), WRITE_LEN);
  /* 7 bytes a write (some more calls found the socket full: each 7-byte
   * write takes a whole buffer in the kernel). */
  CHECK_GE(calls[OP_WRITE], (WRITE_LEN + 6) / 7);
  /* A single send returns what the kernel took. */
  fault_reset();
  inject_short(OP_SEND, sv[1], 7);
  CHECK_EQ(weft_send(sv[1], buf, 100, 0), 7);
  fault_reset();
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(k.len, WRITE_LEN + 7);
  CHECK(memcmp(k.buf, buf, WRITE_LEN) == 0);
  CHECK(memcmp(k.buf + WRITE_LEN, buf, 7) == 0);
  CHECK_EQ(weft_close(sv[0]), 0);
  return NULL;
}

static void *short_stream_write(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  static sink k;
  k.fd = sv[0];
  weft_task *t = weft_spawn(sink_task, &k);
  CHECK(t);
  inject_vary(OP_WRITE, sv[1], 5);
  weft_stream *s = weft_stream_new(sv[1], 64);
  CHECK(s);
  /* Sizes below, at and above the buffer's: queued, flushed, straight. */
  static const size_t sizes[] = {1, 10, 63, 64, 65, 130, 3, 0, 200, 2};
  static unsigned char want[8192];
  size_t off = 0;
  for (int round = 0; round < 4; round++)
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
      unsigned char chunk[200];
      for (size_t j = 0; j < sizes[i]; j++)
        want[off + j] = chunk[j] = pat(off + j);
      CHECK_EQ(weft_stream_write(s, chunk, sizes[i]), (ssize_t)sizes[i]);
      off += sizes[i];
    }
  CHECK_EQ(weft_stream_flush(s), 0);
  CHECK_EQ(weft_stream_flush(s), 0); /* nothing left: no write */
  int writes = calls[OP_WRITE];
  CHECK_GE(writes, (int)(off / 5));
  CHECK_EQ(weft_stream_close(s), 0);
  CHECK_EQ(calls[OP_WRITE], writes);
  fault_reset();
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(k.len, off);
  CHECK(memcmp(k.buf, want, off) == 0);
  CHECK_EQ(weft_close(sv[0]), 0);
  return NULL;
}

/* ---- a spurious EAGAIN -------------------------------------------------
 * A real socket never says EAGAIN with data queued (or room to write), so
 * weft takes an EAGAIN at its word: it clears the fd's ready hint and
 * waits for the backend. poll is level-triggered and reports the fd ready
 * at once: the call completes right after. epoll is edge-triggered: once
 * the edge for the data has been taken (here: drain_events), it reports
 * nothing more until something new happens on the socket, so the call
 * waits for the peer's next write (or read). That is legitimate (the
 * kernel broke its word, and the task neither spins nor loses data; a
 * cancellation or a deadline still ends the wait), and the checks below
 * pin it down: after the next event the call returns the old bytes and the
 * new ones, each once. */
static char rbuf[64];
static size_t rlen;

static void *spurious_reader(void *arg) {
  int fd = (int)I(arg);
  while (rlen < 6) {
    ssize_t n = weft_recv(fd, rbuf + rlen, sizeof rbuf - rlen, 0);
    CHECK_GT(n, 0);
    rlen += (size_t)n;
  }
  return NULL;
}

static void *eagain_recv(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  CHECK_EQ(weft_send(sv[1], "w", 1, 0), 1);
  CHECK_EQ(weft_recv(sv[0], rbuf, 1, 0), 1); /* sv[0] is known, watched */
  CHECK_EQ(weft_send(sv[1], "old", 3, 0), 3);
  drain_events();
  inject(OP_RECV, sv[0], 1, EAGAIN);
  weft_task *t = weft_spawn(spurious_reader, P(sv[0]));
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  if (on_epoll()) {
    CHECK_EQ(rlen, 0); /* waits for the next edge, without spinning */
    CHECK_EQ(calls[OP_RECV], 1);
    CHECK_EQ(loop_nwaiters(), 1);
  } else if (on_uring()) {
    CHECK_EQ(rlen, 3); /* a poll request said readable: "old" at once */
    CHECK_EQ(calls[OP_RECV], 3); /* and the next recv waits in the kernel */
  } else {
    CHECK_EQ(rlen, 3); /* level-triggered: "old" at once */
    CHECK_EQ(calls[OP_RECV], 2);
  }
  CHECK_EQ(weft_send(sv[1], "new", 3, 0), 3);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(rlen, 6);
  CHECK(memcmp(rbuf, "oldnew", 6) == 0);
  /* Nothing more is there: a recv with MSG_DONTWAIT finds nothing. */
  CHECK_EQ(weft_recv(sv[0], rbuf, sizeof rbuf, MSG_DONTWAIT), -EAGAIN);
  fault_reset();
  close_pair(sv);
  return NULL;
}

static ssize_t sent;

static void *spurious_sender(void *arg) {
  sent = weft_send((int)I(arg), "x", 1, 0);
  return NULL;
}

static void *eagain_send(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  CHECK_EQ(weft_send(sv[0], "w", 1, 0), 1); /* sv[0] is known, watched */
  drain_events();
  inject(OP_SEND, sv[0], 1, EAGAIN);
  weft_task *t = weft_spawn(spurious_sender, P(sv[0]));
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  if (on_epoll()) {
    CHECK_EQ(sent, 0); /* waits for the next event on sv[0] */
    CHECK_EQ(calls[OP_SEND], 1);
    /* Any event will do: the registration covers both directions, and
     * epoll then reports the fd writable as well. */
    CHECK_EQ(weft_send(sv[1], "y", 1, 0), 1);
  }
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(sent, 1);
  CHECK_EQ(calls[OP_SEND], 2);
  fault_reset();
  char buf[8];
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, 0), 2);
  CHECK(memcmp(buf, "wx", 2) == 0);
  close_pair(sv);
  return NULL;
}

static int accepted[2];
static int naccepted;

static void *spurious_acceptor(void *arg) {
  int lfd = (int)I(arg);
  while (naccepted < 2) {
    int a = weft_accept(lfd, NULL, NULL);
    CHECK_GE(a, 0);
    accepted[naccepted++] = a;
  }
  return NULL;
}

static void *eagain_accept(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  int port = weft_sock_port(lfd);
  int c1 = client(port, '1');
  drain_events();
  inject(OP_ACCEPT, lfd, 1, EAGAIN);
  weft_task *t = weft_spawn(spurious_acceptor, P(lfd));
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  CHECK_EQ(naccepted, on_epoll() ? 0 : 1);
  int c2 = client(port, '2');
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(naccepted, 2);
  /* Both, in the order they came, none twice or lost. */
  CHECK_EQ(tag_of(accepted[0]), '1');
  CHECK_EQ(tag_of(accepted[1]), '2');
  fault_reset();
  for (int i = 0; i < 2; i++)
    CHECK_EQ(weft_close(accepted[i]), 0);
  CHECK_EQ(weft_close(c1), 0);
  CHECK_EQ(weft_close(c2), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

/* ---- ECONNRESET, EPIPE -------------------------------------------------- */
static void *econnreset_recv(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  CHECK_EQ(weft_send(sv[1], "data", 4, 0), 4);
  inject(OP_RECV, sv[0], 1, ECONNRESET);
  char buf[8];
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), -ECONNRESET);
  CHECK_EQ(calls[OP_RECV], 1);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 4); /* nothing consumed */
  CHECK(memcmp(buf, "data", 4) == 0);
  fault_reset();
  close_pair(sv);
  return NULL;
}

static void *econnreset_stream(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK(s);
  char line[32];
  CHECK_EQ(weft_send(sv[1], "hello\nwor", 9, 0), 9);
  CHECK_EQ(weft_stream_readline(s, line, sizeof line), 6);
  CHECK_STR_EQ(line, "hello\n");
  /* "wor" is buffered; the read for the rest of the line, which is there
   * (as a real reset makes the fd readable), fails. */
  CHECK_EQ(weft_send(sv[1], "ld\n", 3, 0), 3);
  inject(OP_READ, sv[0], 1, ECONNRESET);
  CHECK_EQ(weft_stream_readline(s, line, sizeof line), -ECONNRESET);
  CHECK_EQ(calls[OP_READ], 1);
  CHECK_EQ(weft_stream_readline(s, line, sizeof line), 6);
  CHECK_STR_EQ(line, "world\n");
  /* read_exact: an error consumes nothing. */
  CHECK_EQ(weft_send(sv[1], "abc", 3, 0), 3);
  inject(OP_READ, sv[0], 1, -2); /* "ab" first, then a reset */
  inject(OP_READ, sv[0], 1, ECONNRESET);
  char buf[8];
  CHECK_EQ(weft_stream_read_exact(s, buf, 5), -ECONNRESET);
  CHECK_EQ(weft_send(sv[1], "de", 2, 0), 2);
  CHECK_EQ(weft_stream_read_exact(s, buf, 5), 5);
  CHECK(memcmp(buf, "abcde", 5) == 0);
  fault_reset();
  CHECK_EQ(weft_stream_close(s), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

static void *epipe_send(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  inject(OP_SEND, sv[0], 1, EPIPE);
  CHECK_EQ(weft_send(sv[0], "x", 1, 0), -EPIPE);
  CHECK_EQ(calls[OP_SEND], 1);
  /* write_all: 3 bytes went out before the pipe broke: 3; the next call
   * reports the error. */
  inject(OP_WRITE, sv[0], 1, -3);
  inject(OP_WRITE, sv[0], EVER, EPIPE);
  CHECK_EQ(weft_write_all(sv[0], "0123456789", 10), 3);
  CHECK_EQ(weft_write_all(sv[0], "3456789", 7), -EPIPE);
  CHECK_EQ(calls[OP_WRITE], 3);
  fault_reset();
  char buf[16];
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), 3);
  CHECK(memcmp(buf, "012", 3) == 0);
  /* flush: what did not go out stays queued, and goes out later, once. */
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK(s);
  CHECK_EQ(weft_stream_write(s, "abcdefghij", 10), 10);
  inject(OP_WRITE, sv[0], 1, -4);
  inject(OP_WRITE, sv[0], EVER, EPIPE);
  CHECK_EQ(weft_stream_flush(s), -EPIPE);
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), 4);
  CHECK(memcmp(buf, "abcd", 4) == 0);
  fault_reset();
  CHECK_EQ(weft_stream_flush(s), 0);
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), 6);
  CHECK(memcmp(buf, "efghij", 6) == 0);
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), -EAGAIN);
  /* A write larger than the buffer goes straight out, like write_all:
   * the count that went before the pipe broke. */
  static char big[200];
  memset(big, 'B', sizeof big);
  inject(OP_WRITE, sv[0], 1, -50);
  inject(OP_WRITE, sv[0], EVER, EPIPE);
  CHECK_EQ(weft_stream_write(s, big, sizeof big), 50);
  fault_reset();
  char got[64];
  CHECK_EQ(weft_recv(sv[1], got, sizeof got, 0), 50);
  CHECK(memcmp(got, big, 50) == 0);
  /* A close whose flush fails still closes (and frees): the error. */
  CHECK_EQ(weft_stream_write(s, "zz", 2), 2);
  inject(OP_WRITE, sv[0], EVER, EPIPE);
  CHECK_EQ(weft_stream_close(s), -EPIPE);
  fault_reset();
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, 0), 0); /* closed */
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* ---- out of fds, out of buffers at accept ------------------------------- */
static void accept_dropping(int err) {
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  int port = weft_sock_port(lfd);
  int c1 = client(port, '1'), c2 = client(port, '2');
  int fds = check_fd_count();
  inject(OP_ACCEPT, lfd, 1, err);
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(calls[OP_ACCEPT], 2);
  CHECK_EQ(tag_of(a), '2'); /* c1's connection, first in line, was dropped */
  char c;
  ssize_t n = weft_recv(c1, &c, 1, 0);
  if (n != 0 && n != -ECONNRESET) {
    fprintf(stderr, "dropped client: recv gave %zd\n", n);
    CHECK(0);
  }
  /* The new fd, and the spare weft_accept opened; the dropped one is
   * closed. */
  CHECK_EQ(check_fd_count(), fds + 2);
  /* The listener lives on. */
  int c3 = client(port, '3');
  int b = weft_accept(lfd, NULL, NULL);
  CHECK_GE(b, 0);
  CHECK_EQ(tag_of(b), '3');
  fault_reset();
  int all[] = {a, b, c1, c2, c3, lfd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    CHECK_EQ(weft_close(all[i]), 0);
}

static void *emfile_accept(void *arg) {
  (void)arg;
  accept_dropping(EMFILE);
  return NULL;
}

static void *enfile_accept(void *arg) {
  (void)arg;
  accept_dropping(ENFILE);
  return NULL;
}

static void accept_backing_off(int err) {
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  int port = weft_sock_port(lfd);
  int c1 = client(port, '1'), c2 = client(port, '2');
  inject(OP_ACCEPT, lfd, 3, err);
  int64_t t0 = weft_loop_now(); /* what the first sleep counts from */
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_GE(weft_now() - t0, WEFT_MS(1 + 2 + 4)); /* it backed off */
  CHECK_EQ(calls[OP_ACCEPT], 4);
  int b = weft_accept(lfd, NULL, NULL);
  CHECK_GE(b, 0);
  CHECK_EQ(tag_of(a), '1'); /* nothing dropped */
  CHECK_EQ(tag_of(b), '2');
  fault_reset();
  int all[] = {a, b, c1, c2, lfd};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    CHECK_EQ(weft_close(all[i]), 0);
}

static void *enobufs_accept(void *arg) {
  (void)arg;
  accept_backing_off(ENOBUFS);
  return NULL;
}

static void *enomem_accept(void *arg) {
  (void)arg;
  accept_backing_off(ENOMEM);
  return NULL;
}

/* ---- errors that are not retried ---------------------------------------- */
static void *not_retried(void *arg) {
  (void)arg;
  int p[2];
  CHECK_EQ(pipe(p), 0);
  CHECK_EQ(weft_write(p[1], "abc", 3), 3);
  inject(OP_READ, p[0], 1, EIO);
  char buf[8];
  CHECK_EQ(weft_read(p[0], buf, sizeof buf), -EIO);
  CHECK_EQ(calls[OP_READ], 1);
  CHECK_EQ(weft_read(p[0], buf, sizeof buf), 3);
  CHECK(memcmp(buf, "abc", 3) == 0);
  inject(OP_WRITE, p[1], 1, ENOSPC);
  CHECK_EQ(weft_write_all(p[1], "def", 3), -ENOSPC);
  CHECK_EQ(weft_write(p[1], "def", 3), 3);
  CHECK_EQ(weft_read(p[0], buf, sizeof buf), 3);
  CHECK(memcmp(buf, "def", 3) == 0);
  fault_reset();
  CHECK_EQ(weft_close(p[0]), 0);
  CHECK_EQ(weft_close(p[1]), 0);

  int sv[2];
  pair(sv);
  inject(OP_SEND, sv[0], 1, ENOBUFS);
  CHECK_EQ(weft_send(sv[0], "x", 1, 0), -ENOBUFS);
  inject(OP_RECV, sv[1], 1, ENOMEM);
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, MSG_DONTWAIT), -ENOMEM);
  CHECK_EQ(calls[OP_SEND] + calls[OP_RECV], 2);
  CHECK_EQ(weft_send(sv[0], "y", 1, 0), 1);
  CHECK_EQ(weft_recv(sv[1], buf, sizeof buf, 0), 1);
  CHECK_EQ(buf[0], 'y');
  fault_reset();
  close_pair(sv);

  /* connect: the error, and the socket can be closed cleanly. */
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET,
                           .sin_port = htons((uint16_t)weft_sock_port(lfd)),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  CHECK_GE(fd, 0);
  inject(OP_CONNECT, fd, 1, ENETUNREACH);
  CHECK_EQ(weft_connect(fd, (struct sockaddr *)&sa, sizeof sa), -ENETUNREACH);
  CHECK_EQ(calls[OP_CONNECT], 1);
  CHECK_EQ(weft_connect(fd, (struct sockaddr *)&sa, sizeof sa), 0);
  fault_reset();
  CHECK_EQ(weft_close(fd), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

/* ---- regression: MSG_DONTWAIT parked once the hint was cleared -----------
 * A short read (or an EAGAIN) clears the fd's ready hint, and the next call
 * used to wait for the backend before trying, even with MSG_DONTWAIT: it
 * parked (for ever, with nothing more to come) instead of returning
 * -EAGAIN. (test_badpeer's deaf peer counts on -EAGAIN from such sends.) */
static void *dontwait_parked_after_short_read(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  char buf[16];
  CHECK_EQ(weft_send(sv[1], "abc", 3, 0), 3);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 3); /* short: hint off */
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), -EAGAIN);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), -EAGAIN);
  /* Data that came meanwhile is taken, hint or not. */
  CHECK_EQ(send(sv[1], "de", 2, 0), 2);
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, MSG_DONTWAIT), 2);
  /* The send side: fill the socket, then ask again. */
  static char chunk[4096];
  ssize_t n;
  while ((n = weft_send(sv[0], chunk, sizeof chunk, MSG_DONTWAIT)) > 0)
    ;
  CHECK_EQ(n, -EAGAIN);
  CHECK_EQ(weft_send(sv[0], chunk, sizeof chunk, MSG_DONTWAIT), -EAGAIN);
  close_pair(sv);
  return NULL;
}

/* ---- cancellation while an injected failure holds the task -------------- */
static ssize_t cancelled_rc;

static void *stuck_reader(void *arg) {
  char buf[8];
  cancelled_rc = weft_recv((int)I(arg), buf, sizeof buf, 0);
  return NULL;
}

static void *cancel_eagain(void *arg) {
  (void)arg;
  int sv[2];
  pair(sv);
  CHECK_EQ(weft_send(sv[1], "w", 1, 0), 1);
  char buf[8];
  CHECK_EQ(weft_recv(sv[0], buf, 1, 0), 1);
  CHECK_EQ(weft_send(sv[1], "data", 4, 0), 4);
  drain_events();
  /* Every recv says EAGAIN: on epoll the task parks once; on poll, which
   * keeps reporting the fd readable, it wakes, tries and parks again, each
   * time through the loop (other tasks and timers run). */
  inject(OP_RECV, sv[0], EVER, EAGAIN);
  weft_task *t = weft_spawn(stuck_reader, P(sv[0]));
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(20)), 0);
  int tries = calls[OP_RECV];
  if (on_epoll())
    CHECK_EQ(tries, 1);
  else
    CHECK_GT(tries, 1);
  CHECK_EQ(weft_cancel(t), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(cancelled_rc, -ECANCELED);
  CHECK_EQ(loop_nwaiters(), 0);
  fault_reset();
  /* Nothing consumed. (On epoll the fd stays quiet until something new
   * comes, as in eagain_recv: the peer writes more.) */
  CHECK_EQ(weft_send(sv[1], "more", 4, 0), 4);
  size_t have = 0;
  while (have < 8) {
    ssize_t n = weft_recv(sv[0], buf + have, sizeof buf - have, 0);
    CHECK_GT(n, 0);
    have += (size_t)n;
  }
  CHECK_EQ(have, 8);
  CHECK(memcmp(buf, "datamore", 8) == 0);
  close_pair(sv);
  printf("    (%s: %d recv calls in 20 ms of spurious EAGAIN)\n",
         weft_loop_backend(weft_loop_current()), tries);
  return NULL;
}

static int stuck_accept_rc;

static void *stuck_acceptor(void *arg) {
  stuck_accept_rc = weft_accept((int)I(arg), NULL, NULL);
  return NULL;
}

static void *cancel_accept_backoff(void *arg) {
  (void)arg;
  int lfd = weft_tcp_listen("127.0.0.1", 0, 8);
  CHECK_GE(lfd, 0);
  int c1 = client(weft_sock_port(lfd), '1');
  inject(OP_ACCEPT, lfd, EVER, ENOBUFS);
  weft_task *t = weft_spawn(stuck_acceptor, P(lfd));
  CHECK(t);
  CHECK_EQ(weft_sleep(WEFT_MS(20)), 0);
  CHECK_EQ(weft_cancel(t), 0);
  CHECK_EQ(weft_join(t, NULL), 0);
  CHECK_EQ(stuck_accept_rc, -ECANCELED);
  fault_reset();
  /* The connection stayed queued. */
  int a = weft_accept(lfd, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(tag_of(a), '1');
  CHECK_EQ(weft_close(a), 0);
  CHECK_EQ(weft_close(c1), 0);
  CHECK_EQ(weft_close(lfd), 0);
  return NULL;
}

#include "case_check.h"

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  /* The failures are injected into the system call each operation makes.
   * io_uring's multishot recv makes none per call (test_uring tests its
   * failures): here each recv is a request of its own. */
  setenv("WEFT_URING_PBUF", "0", 1);
  int fds = check_fd_count();
  RUN(eintr_pipe);
  RUN(eintr_socket);
  RUN(eintr_accept);
  RUN(aborted_accept);
  RUN(eintr_connect);
  RUN(short_readline);
  RUN(short_read_exact);
  RUN(short_mixed);
  RUN(short_write_all);
  RUN(short_stream_write);
  RUN(eagain_recv);
  RUN(eagain_send);
  RUN(eagain_accept);
  RUN(econnreset_recv);
  RUN(econnreset_stream);
  RUN(epipe_send);
  RUN(emfile_accept);
  RUN(enfile_accept);
  RUN(enobufs_accept);
  RUN(enomem_accept);
  RUN(not_retried);
  RUN(dontwait_parked_after_short_read);
  RUN(cancel_eagain);
  RUN(cancel_accept_backoff);
  CHECK_EQ(check_fd_count(), fds);
  if (check_subtest_failures) {
    fprintf(stderr, "test_fault: %d case(s) failed\n", check_subtest_failures);
    return 1;
  }
  printf("test_fault: ok\n");
  return 0;
}
