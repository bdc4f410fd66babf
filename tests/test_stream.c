/*
 * Buffered streams (run once per backend).
 *
 *  - readline against a model of what it must return, for every possible
 *    split of a short input (each chunk reaches the reader on its own), for
 *    several buffer sizes and `max`es, then a long random input one byte at
 *    a time and in random chunks: every line, every -EMSGSIZE, and the
 *    stream usable after each;
 *  - read and read_exact (records split at random), read_exact and
 *    readline cancelled midway consume nothing; a reset midway through a
 *    read_exact larger than the buffer is the next read call's error;
 *  - small writes are batched into one write(2) (counted in
 *    /proc/self/io), a large one goes straight out in order, a failed
 *    flush keeps what it could not write, close closes even then;
 *  - end of file inside a line too long ends its skipping: on a file that
 *    grows, the next line is read whole;
 *  - tasks sharing a stream: -EBUSY for a second reader or writer, a close
 *    under waiting calls (-EBADF for them, the stream freed after them);
 *    calls of tasks the loop dropped leave the stream usable (a dropped
 *    close still closes and frees);
 *  - misuse; no fd is left open.
 */
#include "weft.h"

#include "backend.h"
#include "fault.h"

#include "check.h"
#include "loop_check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define P(x) ((void *)(intptr_t)(x))
#define I(p) ((intptr_t)(p))

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint64_t next_rand(void) {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

/* ---- the model -------------------------------------------------------- */
/* What readline must return for `in`, one result per call, into out[] as
 * "line" or "!" (-EMSGSIZE), ending with the 0 at end of file. The rule:
 * a line (with its '\n') is returned when it fits both buf (len + NUL <=
 * max) and the stream's buffer (len <= cap); the last line, unterminated,
 * must also be shorter than the buffer. */
static size_t model(const char *in, size_t n, size_t cap, size_t max,
                    char **out) {
  size_t limit = max - 1 < cap ? max - 1 : cap, k = 0, i = 0;
  while (i < n) {
    const char *nl = memchr(in + i, '\n', n - i);
    size_t len = nl ? (size_t)(nl - (in + i)) + 1 : n - i;
    int fits = len <= limit && (nl || len < cap);
    out[k++] = fits ? strndup(in + i, len) : strdup("!");
    i += len;
  }
  out[k++] = strdup(""); /* end of file */
  return k;
}

/* ---- one run: a writer feeding chunks, a reader calling readline ------- */
typedef struct feed {
  int fd;
  const char *in;
  const size_t *cuts; /* chunk ends, increasing, the last == n */
  size_t ncuts;
} feed;

/* Writes each chunk once the reader has taken everything before it (the
 * pipe is empty), so that each read sees exactly one chunk. */
static void *feeder(void *arg) {
  feed *f = arg;
  size_t at = 0;
  for (size_t i = 0; i < f->ncuts; i++) {
    for (;;) {
      int queued = 0;
      CHECK_EQ(ioctl(f->fd, FIONREAD, &queued), 0);
      if (queued == 0)
        break;
      CHECK_EQ(weft_yield(), 0);
    }
    size_t len = f->cuts[i] - at;
    CHECK_EQ(weft_write_all(f->fd, f->in + at, len), (ssize_t)len);
    at = f->cuts[i];
  }
  CHECK_EQ(weft_close(f->fd), 0);
  return NULL;
}

typedef struct split_run {
  const char *in;
  size_t n;
  const size_t *cuts;
  size_t ncuts;
  size_t cap, max;
} split_run;

static void *reader_main(void *arg) {
  split_run *r = arg;
  int sv[2]; /* a pipe: FIONREAD on its write end tells what is unread */
  CHECK_EQ(pipe(sv), 0);
  feed f = {sv[1], r->in, r->cuts, r->ncuts};
  weft_task *w = weft_spawn(feeder, &f);
  CHECK(w);
  weft_stream *s = weft_stream_new(sv[0], r->cap);
  CHECK(s);
  char **want = malloc((r->n + 2) * sizeof *want);
  size_t nwant = model(r->in, r->n, r->cap, r->max, want);
  char *buf = malloc(r->max);
  for (size_t k = 0; k < nwant; k++) {
    ssize_t got = weft_stream_readline(s, buf, r->max);
    if (strcmp(want[k], "!") == 0) {
      CHECK_EQ(got, -EMSGSIZE);
    } else {
      if (got != (ssize_t)strlen(want[k]) || strcmp(buf, want[k]) != 0) {
        fprintf(stderr,
                "call %zu: got %zd \"%s\", want \"%s\" (cap %zu "
                "max %zu, %zu chunks)\n",
                k, got, got >= 0 ? buf : "", want[k], r->cap, r->max, r->ncuts);
        CHECK(0);
      }
    }
    free(want[k]);
  }
  /* At end of file it stays there. */
  CHECK_EQ(weft_stream_readline(s, buf, r->max), 0);
  free(want);
  free(buf);
  CHECK_EQ(weft_join(w, NULL), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

/* The runs share one loop: a fresh one each time (an io_uring ring set up
 * and torn down 40,000 times) took most of this program's time. */
static weft_loop *split_loop;

static void check_split(const char *in, size_t n, const size_t *cuts,
                        size_t ncuts, size_t cap, size_t max) {
  split_run r = {in, n, cuts, ncuts, cap, max};
  CHECK(weft_spawn(reader_main, &r));
  CHECK_EQ(weft_loop_run(split_loop), 0);
}

/* Every way of cutting a short input into chunks: 2^(n-1) of them. */
static void test_every_split(void) {
  static const char in[] = "ab\ncde\n\nfghij\nk";
  size_t n = sizeof in - 1;
  static const size_t caps[] = {64, 4, 6};
  static const size_t maxes[] = {64, 3, 7};
  size_t cuts[32], runs = 0;
  /* Every split for the first pair of sizes; every few for the others (and
   * every 16th under valgrind, where a run costs 50 times as much, every
   * 8th under TSan: the whole program took over 120 s there on a machine
   * whose system calls cost 2-3 times those of the one it was written on;
   * every 4th under qemu-user, where this loop was 44 s of the program's
   * 50 on a loaded 2-core machine, and the program ran over ctest's 120 s
   * twice). */
#ifdef WEFT_TEST_EMULATED
  uint32_t slow = 4;
#else
  uint32_t slow = RUNNING_ON_VALGRIND ? 16 : CHECK_TSAN ? 8 : 1;
#endif
  for (size_t c = 0; c < 3; c++)
    for (size_t m = 0; m < 3; m++)
      for (uint32_t mask = 0; mask < (1u << (n - 1));
           mask += slow * (1 + 2 * (uint32_t)(m + c))) {
        size_t k = 0;
        for (size_t i = 1; i < n; i++)
          if (mask & (1u << (i - 1)))
            cuts[k++] = i;
        cuts[k++] = n;
        check_split(in, n, cuts, k, caps[c], maxes[m]);
        runs++;
      }
  printf("every split: %zu runs\n", runs);
}

/* A long random input: lines of 0-120 bytes, a few of 300. */
static char *random_input(size_t nlines, size_t *n) {
  char *in = malloc(nlines * 301 + 1);
  size_t at = 0;
  for (size_t i = 0; i < nlines; i++) {
    size_t len = next_rand() % 50 == 0 ? 300 : next_rand() % 121;
    for (size_t j = 0; j < len; j++)
      in[at++] = (char)('a' + next_rand() % 26);
    in[at++] = '\n';
  }
  in[at++] = 'z'; /* and an unterminated last line */
  *n = at;
  return in;
}

static void test_random_splits(void) {
  size_t n;
  /* A write and a wake-up per byte below: a quarter as many under TSan. */
  char *in = random_input(CHECK_TSAN ? 500 : 2000, &n);
  size_t *cuts = malloc((n + 1) * sizeof *cuts);
  /* One byte at a time. */
  for (size_t i = 0; i < n; i++)
    cuts[i] = i + 1;
  check_split(in, n, cuts, n, 128, 256);
  /* Random chunks, up to 1000 bytes. */
  for (int round = 0; round < 20; round++) {
    size_t k = 0, at = 0;
    while (at < n) {
      at += 1 + next_rand() % 1000;
      cuts[k++] = at < n ? at : n;
    }
    check_split(in, n, cuts, k, round % 2 ? 128 : 4096, round % 3 ? 200 : 4096);
  }
  free(cuts);
  free(in);
}

/* ---- read, read_exact ------------------------------------------------- */
static void *records_writer(void *arg) {
  int fd = (int)I(arg);
  /* 500 records: a 2-byte length, then that many bytes of its index. */
  char buf[70000];
  size_t at = 0;
  for (int i = 0; i < 500; i++) {
    size_t len = i == 250 ? 20000 : next_rand() % 300;
    buf[at++] = (char)(len >> 8);
    buf[at++] = (char)len;
    memset(buf + at, 'A' + i % 26, len);
    at += len;
    if (at > sizeof buf - 21000 || i == 499) {
      size_t sent = 0;
      while (sent < at) {
        size_t chunk = 1 + next_rand() % 700;
        if (chunk > at - sent)
          chunk = at - sent;
        CHECK_EQ(weft_write_all(fd, buf + sent, chunk), (ssize_t)chunk);
        sent += chunk;
        if (next_rand() % 4 == 0)
          CHECK_EQ(weft_sleep(0), 0);
      }
      at = 0;
    }
  }
  CHECK_EQ(weft_close(fd), 0);
  return NULL;
}

static void *records_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  CHECK(weft_spawn(records_writer, P(sv[1])));
  weft_stream *s = weft_stream_new(sv[0], 1024);
  CHECK(s);
  static char body[20000];
  for (int i = 0; i < 500; i++) {
    unsigned char hdr[2];
    CHECK_EQ(weft_stream_read_exact(s, hdr, 2), 2);
    size_t len = (size_t)hdr[0] << 8 | hdr[1];
    CHECK_EQ(weft_stream_read_exact(s, body, len), (ssize_t)len);
    for (size_t j = 0; j < len; j++)
      CHECK_EQ(body[j], 'A' + i % 26);
  }
  char c;
  CHECK_EQ(weft_stream_read_exact(s, &c, 1), 0);
  CHECK_EQ(weft_stream_read(s, &c, 1), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

static void test_records(void) { check_run(records_main, NULL); }

static void *short_exact_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], 16);
  CHECK_EQ(weft_write_all(sv[1], "0123456789abcdefghijXYZ", 23), 23);
  CHECK_EQ(weft_close(sv[1]), 0);
  char buf[64];
  CHECK_EQ(weft_stream_read(s, buf, 4), 4); /* buffered: 16 read, 4 taken */
  CHECK(memcmp(buf, "0123", 4) == 0);
  CHECK_EQ(weft_stream_buffered(s), 12);
  /* Larger than the buffer: what is buffered, then straight into buf; end
   * of file after 19. */
  CHECK_EQ(weft_stream_read_exact(s, buf, 40), 19);
  CHECK(memcmp(buf, "456789abcdefghijXYZ", 19) == 0);
  CHECK_EQ(weft_stream_read_exact(s, buf, 4), 0);
  CHECK_EQ(weft_stream_buffered(s), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  /* Within the buffer's size: end of file after 3 of 8, which it returns
   * (nothing kept back for a later call). */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  s = weft_stream_new(sv[0], 16);
  CHECK_EQ(weft_write_all(sv[1], "abc", 3), 3);
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_stream_read_exact(s, buf, 8), 3);
  CHECK(memcmp(buf, "abc", 3) == 0);
  CHECK_EQ(weft_stream_read_exact(s, buf, 4), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

static void test_short_exact(void) { check_run(short_exact_main, NULL); }

/* ---- weft_stream_buffered -------------------------------------------------
 * What a read left in the buffer; not what the kernel holds, nor a line
 * being skipped. */
static void *buffered_main(void *arg) {
  (void)arg;
  int sv[2];
  char buf[16];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], 16);
  CHECK_EQ(weft_stream_buffered(s), 0);
  CHECK_EQ(weft_write_all(sv[1], "a\nbb\nccc", 8), 8);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 2);
  CHECK_EQ(weft_stream_buffered(s), 6); /* "bb\nccc" */
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 3);
  CHECK_EQ(weft_stream_buffered(s), 3);
  CHECK_EQ(weft_stream_read(s, buf, sizeof buf), 3);
  CHECK_EQ(weft_stream_buffered(s), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  /* A line longer than the buffer: its first 4 bytes are dropped at once,
   * and the rest ("ong\n", and the next line) is still the kernel's. */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  s = weft_stream_new(sv[0], 4);
  CHECK_EQ(weft_write_all(sv[1], "toolong\nxy\n", 11), 11);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), -EMSGSIZE);
  CHECK_EQ(weft_stream_buffered(s), 0);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 3);
  CHECK_STR_EQ(buf, "xy\n");
  CHECK_EQ(weft_stream_buffered(s), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_stream_buffered(NULL), 0);
  return NULL;
}

static void test_buffered(void) { check_run(buffered_main, NULL); }

/* ---- a reset in the middle of a large read_exact --------------------------
 * A connection reset after 100 bytes: a read_exact larger than the buffer
 * returns the 100, and the next read call the reset, which the socket
 * reports only once (the read after it sees end of file): the short count
 * alone would pass for a clean end of file. */
static void *reset_exact_main(void *arg) {
  (void)arg;
  int l = weft_tcp_listen("127.0.0.1", 0, 4);
  CHECK_GE(l, 0);
  int c = weft_tcp_connect("127.0.0.1", weft_sock_port(l));
  CHECK_GE(c, 0);
  int a = weft_accept(l, NULL, NULL);
  CHECK_GE(a, 0);
  CHECK_EQ(weft_close(l), 0);
  char buf[256];
  memset(buf, 'r', sizeof buf);
  CHECK_EQ(weft_write_all(a, buf, 100), 100);
  struct linger lg = {1, 0};
  CHECK_EQ(setsockopt(a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
  CHECK_EQ(weft_close(a), 0); /* a reset, after the 100 bytes */
  weft_stream *s = weft_stream_new(c, 64);
  CHECK(s);
  CHECK_EQ(weft_stream_read_exact(s, buf, sizeof buf), 100);
  CHECK_EQ(weft_stream_read_exact(s, buf, sizeof buf), -ECONNRESET);
  CHECK_EQ(weft_stream_read(s, buf, sizeof buf), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

static void test_reset_exact(void) { check_run(reset_exact_main, NULL); }

/* ---- lines from the buffer count towards the fairness budget -----------
 * 10,000 short lines in the socket before the reader starts, all of which
 * its buffer holds: another task, ready from the start, runs while the
 * reader is at the first hundred or so (WEFT__IO_BUDGET calls), not once it
 * reaches end of file, as when only the reads that fill the buffer
 * counted. (On io_uring every read parks, so the other runs at once.) */
#define FLOOD_LINES 10000
static int flood_read;      /* lines the reader has taken */
static int flood_seen = -1; /* flood_read when the other task ran */

static void *flood_reader(void *arg) {
  char line[16];
  while (weft_stream_readline(arg, line, sizeof line) > 0)
    flood_read++;
  return NULL;
}

static void *flood_other(void *arg) {
  (void)arg;
  flood_seen = flood_read;
  return NULL;
}

static void *flood_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  static char lines[2 * FLOOD_LINES];
  for (int i = 0; i < FLOOD_LINES; i++)
    memcpy(lines + 2 * i, "x\n", 2);
  CHECK_EQ(weft_write_all(sv[1], lines, sizeof lines), (ssize_t)sizeof lines);
  CHECK_EQ(weft_close(sv[1]), 0);
  weft_stream *s = weft_stream_new(sv[0], 0); /* 64 KiB: holds them all */
  CHECK(s);
  weft_task *r = weft_spawn(flood_reader, s);
  weft_task *o = weft_spawn(flood_other, NULL);
  CHECK(r && o);
  CHECK_EQ(weft_join(r, NULL), 0);
  CHECK_EQ(weft_join(o, NULL), 0);
  CHECK_EQ(flood_read, FLOOD_LINES);
  CHECK_GE(flood_seen, 0);
  CHECK_LE(flood_seen, WEFT__IO_BUDGET);
  CHECK_EQ(weft_stream_close(s), 0);
  printf("  %d buffered lines: another task ran after %d: ok\n", FLOOD_LINES,
         flood_seen);
  return NULL;
}

static void test_flood(void) { check_run(flood_main, NULL); }

/* ---- abort: no flush, at once -------------------------------------------
 * The peer reads nothing, so the socket is full and the stream has bytes
 * queued: weft_stream_abort returns at once (a close would wait for the
 * flush), a reader parked on the stream gets -EBADF, and the peer reads
 * what the socket held and then end of file, none of what was queued. */
static void *abort_reader(void *arg) {
  char line[64];
  return (void *)(intptr_t)weft_stream_readline(arg, line, sizeof line);
}

static void *abort_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], 4096);
  CHECK(s);
  weft_task *r = weft_spawn(abort_reader, s);
  CHECK(r);
  CHECK_EQ(weft_yield(), 0); /* the reader parks */
  char buf[4096];
  memset(buf, 'a', sizeof buf);
  size_t sent = 0;
  ssize_t n;
  while ((n = send(sv[0], buf, sizeof buf, MSG_DONTWAIT)) > 0)
    sent += (size_t)n; /* until the socket is full */
  CHECK_EQ(errno, EAGAIN);
  CHECK_EQ(weft_stream_write(s, "queued", 6), 6);
  int64_t t0 = weft_now();
  CHECK_EQ(weft_stream_abort(s), 0);
  CHECK_LT(weft_now() - t0, WEFT_MS(100));
  void *res;
  CHECK_EQ(weft_join(r, &res), 0);
  CHECK_EQ((intptr_t)res, -EBADF);
  size_t got = 0;
  while ((n = weft_read(sv[1], buf, sizeof buf)) > 0) {
    CHECK(memchr(buf, 'q', (size_t)n) == NULL);
    got += (size_t)n;
  }
  CHECK_EQ(n, 0);
  CHECK_EQ(got, sent);
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_stream_abort(NULL), 0);
  return NULL;
}

static void test_abort(void) { check_run(abort_main, NULL); }

/* ---- cancelled midway: nothing consumed -------------------------------- */
static weft_stream *cs;

static void *exact10(void *arg) {
  return P(weft_stream_read_exact(cs, arg, 10));
}

static void *line_reader(void *arg) {
  return P(weft_stream_readline(cs, arg, 64));
}

static void *cancel_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cs = weft_stream_new(sv[0], 64);
  char buf[64];
  weft_task *t = weft_spawn(exact10, buf);
  CHECK_EQ(weft_write_all(sv[1], "01234", 5), 5);
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  CHECK_EQ(weft_cancel(t), 0);
  void *r;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  CHECK_EQ(weft_write_all(sv[1], "56789", 5), 5);
  CHECK_EQ(weft_stream_read_exact(cs, buf, 10), 10);
  CHECK(memcmp(buf, "0123456789", 10) == 0);
  /* The same for a line. */
  t = weft_spawn(line_reader, buf);
  CHECK_EQ(weft_write_all(sv[1], "half a ", 7), 7);
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  CHECK_EQ(weft_cancel(t), 0);
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ(I(r), -ECANCELED);
  CHECK_EQ(weft_write_all(sv[1], "line\n", 5), 5);
  CHECK_EQ(weft_stream_readline(cs, buf, sizeof buf), 12);
  CHECK_STR_EQ(buf, "half a line\n");
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_stream_close(cs), 0);
  return NULL;
}

static void test_cancel(void) { check_run(cancel_main, NULL); }

/* ---- writing ---------------------------------------------------------- */
/* Write calls the I/O layer made (each system call on epoll and poll, each
 * request on io_uring), counted through the fault hook (src/fault.h),
 * which lets every call through. */
static long nwrites;

static int count_writes(int kind, int fd, size_t len, void *arg) {
  (void)fd, (void)len, (void)arg;
  if (kind == OP_WRITE)
    nwrites++;
  return 0;
}

static long write_calls(void) { return nwrites; }

static void *drain(void *arg) {
  int fd = (int)I(arg);
  char buf[8192];
  size_t total = 0;
  ssize_t n;
  unsigned char expect = 0;
  while ((n = weft_read(fd, buf, sizeof buf)) > 0) {
    for (ssize_t i = 0; i < n; i++, expect++)
      CHECK_EQ((unsigned char)buf[i], expect);
    total += (size_t)n;
  }
  CHECK_EQ(weft_close(fd), 0);
  return P(total);
}

static void *write_main(void *arg) {
  (void)arg;
  int p[2];
  CHECK_EQ(pipe(p), 0);
  weft_task *d = weft_spawn(drain, P(p[0]));
  weft_stream *s = weft_stream_new(p[1], 4096);
  unsigned char bytes[100000];
  for (size_t i = 0; i < sizeof bytes; i++)
    bytes[i] = (unsigned char)i;
  /* 100 writes of 10 bytes, then a flush: one write(2). */
  weft__fault_hook = count_writes;
  long before = write_calls();
  for (int i = 0; i < 100; i++)
    CHECK_EQ(weft_stream_write(s, bytes + 10 * i, 10), 10);
  CHECK_EQ(weft_stream_flush(s), 0);
  long after = write_calls();
  CHECK_EQ(after - before, 1);
  CHECK_EQ(weft_stream_flush(s), 0); /* nothing queued: no call */
  CHECK_EQ(write_calls(), after);
  weft__fault_hook = NULL;
  /* Filling the buffer sends it; a write larger than the buffer goes out
   * straight after what is queued. The reader checks the order. */
  size_t at = 1000;
  CHECK_EQ(weft_stream_write(s, bytes + at, 3000), 3000); /* queued */
  at += 3000;
  CHECK_EQ(weft_stream_write(s, bytes + at, 2000), 2000); /* flush + queue */
  at += 2000;
  CHECK_EQ(weft_stream_write(s, bytes + at, 50000), 50000); /* direct */
  at += 50000;
  CHECK_EQ(weft_stream_write(s, bytes + at, 0), 0);
  CHECK_EQ(weft_stream_write(s, bytes + at, 44000), 44000);
  CHECK_EQ(weft_stream_close(s), 0);
  void *total;
  CHECK_EQ(weft_join(d, &total), 0);
  CHECK_EQ(I(total), 100000);
  return NULL;
}

static void test_write(void) { check_run(write_main, NULL); }

static void *flush_error_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], 64);
  CHECK_EQ(weft_stream_write(s, "lost", 4), 4);
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_stream_flush(s), -EPIPE);
  CHECK_EQ(weft_stream_flush(s), -EPIPE); /* still queued */
  CHECK_EQ(weft_stream_close(s), -EPIPE); /* and the fd is closed anyway */
  return NULL;
}

static void test_flush_error(void) { check_run(flush_error_main, NULL); }

static void *misuse_main(void *arg) {
  (void)arg;
  errno = 0;
  CHECK(weft_stream_new(-1, 0) == NULL);
  CHECK_EQ(errno, EINVAL);
  char buf[4];
  CHECK_EQ(weft_stream_readline(NULL, buf, 4), -EINVAL);
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], 0);
  CHECK(s);
  CHECK_EQ(weft_stream_fd(s), sv[0]);
  CHECK_EQ(weft_stream_readline(s, buf, 0), -EINVAL);
  CHECK_EQ(weft_stream_readline(s, NULL, 4), -EINVAL);
  CHECK_EQ(weft_stream_read(s, NULL, 4), -EINVAL);
  CHECK_EQ(weft_stream_read(s, buf, 0), 0);
  CHECK_EQ(weft_stream_write(s, NULL, 4), -EINVAL);
  /* No bytes, no buffer: allowed, and nothing is copied (UBSan would see a
   * memcpy from NULL). */
  CHECK_EQ(weft_stream_read(s, NULL, 0), 0);
  CHECK_EQ(weft_stream_read_exact(s, NULL, 0), 0);
  CHECK_EQ(weft_stream_write(s, NULL, 0), 0);
  CHECK_EQ(weft_stream_flush(s), 0);
  CHECK_EQ(weft_stream_close(NULL), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

static void test_misuse(void) { check_run(misuse_main, NULL); }

/* ---- tasks sharing a stream -------------------------------------------
 * One reader and one writer at a time: a second gets -EBUSY instead of
 * sharing a buffer with a call in flight (a second flush used to move the
 * queue under the first one's write). A close while calls wait closes the
 * fd under them (they end with -EBADF, not in freed memory), and a call
 * made while a close flushes gets -EBADF. */
static char big[1 << 20];

static void *big_writer(void *arg) {
  (void)arg;
  return P(weft_stream_write(cs, big, sizeof big));
}

static void *closer(void *arg) { return P(weft_stream_close(arg)); }

/* Reads fd to its end; returns the count. */
static size_t drain_all(int fd) {
  size_t total = 0;
  char buf[65536];
  ssize_t n;
  while ((n = weft_read(fd, buf, sizeof buf)) > 0)
    total += (size_t)n;
  CHECK_EQ(n, 0);
  return total;
}

static void *shared_main(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cs = weft_stream_new(sv[0], 64);
  char line[64], buf[64];
  weft_task *r = weft_spawn(line_reader, line);
  weft_task *w = weft_spawn(big_writer, NULL); /* fills the socket, waits */
  CHECK(r && w);
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0);
  CHECK_EQ(weft_stream_readline(cs, buf, sizeof buf), -EBUSY);
  CHECK_EQ(weft_stream_read(cs, buf, 1), -EBUSY);
  CHECK_EQ(weft_stream_read_exact(cs, buf, 1), -EBUSY);
  CHECK_EQ(weft_stream_write(cs, "x", 1), -EBUSY);
  CHECK_EQ(weft_stream_flush(cs), -EBUSY);
  CHECK_EQ(weft_write_all(sv[1], "hi\n", 3), 3);
  void *res;
  CHECK_EQ(weft_join(r, &res), 0);
  CHECK_EQ(I(res), 3);
  CHECK_STR_EQ(line, "hi\n");
  /* Closed under a waiting reader and a waiting writer: the writer's
   * count is what the peer gets, and the stream is freed once both are
   * out (LeakSanitizer and Valgrind would see it otherwise). */
  r = weft_spawn(line_reader, line);
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  CHECK_EQ(weft_stream_close(cs), 0);
  CHECK_EQ(weft_join(r, &res), 0);
  CHECK_EQ(I(res), -EBADF);
  CHECK_EQ(weft_join(w, &res), 0);
  CHECK(I(res) > 0 && I(res) < (intptr_t)sizeof big);
  CHECK_EQ(drain_all(sv[1]), (size_t)I(res));
  CHECK_EQ(weft_close(sv[1]), 0);

  /* Calls while a close flushes a full queue. */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], sizeof big);
  CHECK_EQ(weft_stream_write(s, big, sizeof big), (ssize_t)sizeof big);
  weft_task *c = weft_spawn(closer, s);
  CHECK_EQ(weft_sleep(WEFT_MS(2)), 0);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), -EBADF);
  CHECK_EQ(weft_stream_write(s, "x", 1), -EBADF);
  CHECK_EQ(weft_stream_flush(s), -EBADF);
  CHECK_EQ(weft_stream_close(s), -EBADF);
  CHECK_EQ(drain_all(sv[1]), sizeof big);
  CHECK_EQ(weft_join(c, &res), 0);
  CHECK_EQ(I(res), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  return NULL;
}

/* Calls whose task the loop dropped (weft_loop_free with them waiting):
 * the stream is not left busy (a later loop's reader gets the line, not
 * -EBUSY), and a close dropped while it flushes still closes the fd and
 * frees the stream (the fd count at the end, LeakSanitizer). */
static void *drop_reader(void *arg) {
  char buf[64];
  (void)arg;
  weft_stream_readline(cs, buf, sizeof buf);
  CHECK(0); /* never resumed */
  return NULL;
}

/* Reads buffered lines until the loop is freed in the yield a read call
 * makes every WEFT__IO_BUDGET calls (the buffer holds more lines). */
static void *drop_yielder(void *arg) {
  char buf[64];
  (void)arg;
  for (int i = 0; i < 2 * WEFT__IO_BUDGET; i++)
    CHECK_EQ(weft_stream_readline(cs, buf, sizeof buf), 6);
  CHECK(0); /* never gets this far */
  return NULL;
}

static void *drop_closer(void *arg) {
  weft_stream_close(arg);
  CHECK(0);
  return NULL;
}

static void *later_reader(void *arg) {
  char buf[64];
  (void)arg;
  CHECK_EQ(weft_stream_readline(cs, buf, sizeof buf), 6);
  CHECK_STR_EQ(buf, "hello\n");
  CHECK_EQ(weft_stream_close(cs), 0);
  return NULL;
}

static void test_dropped(void) {
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cs = weft_stream_new(sv[0], 64);
  check_drop_in(drop_reader, NULL);
  CHECK_EQ(write(sv[1], "hello\n", 6), 6);
  check_run(later_reader, NULL);
  CHECK_EQ(close(sv[1]), 0);

  /* Dropped in the yield of a read call the buffer serves. */
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  cs = weft_stream_new(sv[0], 4096);
  for (int i = 0; i < 2 * WEFT__IO_BUDGET + 1; i++)
    CHECK_EQ(write(sv[1], "hello\n", 6), 6);
  check_drop_in(drop_yielder, NULL);
  check_run(later_reader, NULL);
  CHECK_EQ(close(sv[1]), 0);

  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *s = weft_stream_new(sv[0], sizeof big);
  CHECK_EQ(weft_stream_write(s, big, sizeof big), (ssize_t)sizeof big);
  check_drop_in(drop_closer, s); /* the peer never reads: the flush waits */
  CHECK_EQ(close(sv[1]), 0);
  printf("  calls of dropped tasks: ok\n");
}

static void test_shared(void) {
  check_run(shared_main, NULL);
  printf("  tasks sharing a stream: ok\n");
}

/* ---- a read after an early -EMSGSIZE (found by the fuzzer) ---------------
 * readline reports a line that cannot fit before its end has arrived, and
 * skips the rest of it lazily; read and read_exact must skip it too, and
 * start after it. */
static int skip_sv[2];

static void *skip_reader(void *arg) {
  (void)arg;
  weft_stream *s = weft_stream_new(skip_sv[0], 4);
  CHECK(s);
  char buf[64];
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), -EMSGSIZE);
  CHECK_EQ(weft_stream_read_exact(s, buf, 4), 4);
  CHECK(memcmp(buf, "BB\nC", 4) == 0);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 2);
  CHECK_STR_EQ(buf, "C\n");
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), -EMSGSIZE); /* DDDDDD */
  CHECK_EQ(weft_stream_read_exact(s, buf, 3), 3);
  CHECK(memcmp(buf, "EE\n", 3) == 0);
  CHECK_EQ(weft_stream_read(s, buf, sizeof buf), 0);
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

static void test_skip_then_read(void) {
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, skip_sv), 0);
  static const char in[] = "AAAAAA\nBB\nCC\nDDDDDD\nEE\n";
  CHECK_EQ(write(skip_sv[1], in, sizeof in - 1), (ssize_t)(sizeof in - 1));
  CHECK_EQ(close(skip_sv[1]), 0);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(skip_reader, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  printf("  read and read_exact after an early -EMSGSIZE: ok\n");
}

/* ---- a line after an end of file that ended a long line -----------------
 * A file that grows: end of file in the middle of a line too long for the
 * buffer ends the skipping of it, so the line written after is read whole
 * (as `tail -f` would). */
static int grow_fds[2]; /* the file, for reading and for appending */

static void *grow_reader(void *arg) {
  (void)arg;
  weft_stream *s = weft_stream_new(grow_fds[0], 4);
  CHECK(s);
  char buf[16];
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), -EMSGSIZE);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 0); /* end of file */
  CHECK_STR_EQ(buf, "");
  CHECK_EQ(write(grow_fds[1], "xy\n", 3), 3);
  CHECK_EQ(weft_stream_readline(s, buf, sizeof buf), 3);
  CHECK_STR_EQ(buf, "xy\n");
  CHECK_EQ(weft_stream_close(s), 0);
  return NULL;
}

static void test_line_after_eof(void) {
  char path[] = "/tmp/weft-test-stream-XXXXXX";
  grow_fds[1] = mkstemp(path);
  CHECK_GE(grow_fds[1], 0);
  grow_fds[0] = open(path, O_RDONLY | O_CLOEXEC);
  CHECK_GE(grow_fds[0], 0);
  CHECK_EQ(unlink(path), 0);
  CHECK_EQ(write(grow_fds[1], "AAAAAAAAAA", 10), 10);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(grow_reader, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  CHECK_EQ(close(grow_fds[1]), 0);
  printf("  a line after an end of file inside a long one: ok\n");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int fds = check_fd_count();
  test_misuse();
  split_loop = weft_loop_new(NULL);
  CHECK(split_loop);
  test_every_split();
  test_random_splits();
  weft_loop_free(split_loop);
  test_records();
  test_short_exact();
  test_buffered();
  test_reset_exact();
  test_flood();
  test_abort();
  test_cancel();
  test_write();
  test_flush_error();
  test_skip_then_read();
  test_line_after_eof();
  test_shared();
  test_dropped();
  if (check_fd_count() != fds)
    check_fd_list(); /* (it came out one over, once, under load) */
  CHECK_EQ(check_fd_count(), fds);
  printf("test_stream: ok\n");
  return 0;
}
