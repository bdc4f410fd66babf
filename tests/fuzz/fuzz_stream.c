/*
 * libFuzzer target: the stream reader (src/stream.c).
 *
 * Each input is a small program. A writer task sends bytes through a
 * socketpair, split into writes as the program says, with pauses between
 * them; a reader task wraps the other end in a weft_stream and makes the
 * program's calls (readline, read, read_exact, some under a deadline that
 * has already passed), then reads on to end of file. The writer may send
 * through a weft_stream of its own (weft_stream_write, a flush at each
 * pause), which the same checks then cover. Every result is
 * checked against a model of the contract in weft.h, and any difference
 * is an abort() that libFuzzer reports as a crash:
 *
 *  - the bytes the calls return, with the lines skipped by -EMSGSIZE,
 *    are the bytes written, in order, nothing lost or repeated;
 *  - readline returns the whole line with its '\n' (only the last line
 *    before end of file may lack it), NUL-terminated, never more than
 *    max - 1 bytes; -EMSGSIZE exactly when the line does not fit;
 *  - read returns 1..len bytes, read_exact len (fewer only at end of
 *    file), 0 only at end of file;
 *  - a call under a deadline that has passed returns -ETIMEDOUT and
 *    consumes nothing, even one the buffer could serve, or of length 0
 *    (a stream call is a cancellation point first);
 *  - misuse (max 0) is -EINVAL and consumes nothing;
 *  - the loop runs out of work (no hang: a watchdog timer aborts), and
 *    every fd is closed when the input is done. The sanitizers
 *    (-fsanitize=fuzzer,address,undefined) catch leaks and bad accesses:
 *    each call gets a heap buffer of exactly its size.
 *
 * When a line does not fit (the rule the model applies, from weft.h and
 * docs/streams.md): with limit = min(max - 1, buffer size), a line fits
 * when its length with the '\n' is at most limit; the last line, without
 * a '\n', must also be shorter than the buffer (the reader cannot tell it
 * from a longer line until end of file, and the buffer is full before).
 * tests/test_stream.c's model says the same.
 *
 * The input ("cap" is the stream's buffer size):
 *
 *   byte 0      buffer size: caps[b % 16] below (0: the default, 64 KiB)
 *   byte 1      flags: bit 0 the writer half-closes (shutdown SHUT_WR,
 *               then waits for the reader to close) instead of closing;
 *               bit 1 the reader yields before every call;
 *               bit 2 the writer writes through a weft_stream with the
 *               same buffer size, flushing before each pause
 *   byte 2      C, the number of chunk bytes that follow
 *   C bytes     chunk specs, used in turn (cycling) for the writes:
 *               bits 0-4: size - 1, times 16 if bit 7 is set;
 *               bits 5-6: the pause after the write: none, one yield,
 *               until the reader has taken everything, four yields.
 *               C == 0: everything in one write.
 *   byte        K, the number of calls that follow
 *   K x 2 bytes calls: kind, arg. kind bits 0-1: readline, read,
 *               read_exact, readline; bit 2: under a deadline that has
 *               passed; bit 3: yield first; bits 4-5: the size (max or
 *               len) is arg, cap + (int8_t)arg (around the buffer
 *               size), arg * 16, or arg * 256.
 *   the rest    the bytes the writer sends
 *
 * Missing bytes read as 0, so every input is a valid program.
 *
 * It found one bug so far: after a readline that returned -EMSGSIZE
 * before the end of the long line came in, read and read_exact returned
 * the rest of the skipped line, and the next readline dropped the line
 * after it (fixed in stream.c: skip_rest; seed long_line_then_read_exact).
 *
 * The other byte parsers in src/: none worth a target. net.c's
 * parse_addr hands the host to inet_pton and else to getaddrinfo (libc's
 * parsers, the second one a DNS query), the environment variables
 * WEFT_SEED (strtoull) and WEFT_BACKEND (a name compared against a list)
 * are one-word lookups, and weft_addr_str prints rather than parses.
 */
#include "weft.h"

#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#define DEFAULT_CAP  (64 * 1024) /* bufsize 0 means this (src/stream.c) */
#define MAX_SIZE     (1 << 17)   /* no call asks for more than this */
#define DRAIN_YIELDS 1000        /* bound on a wait for the reader */
#define DRAIN_READ   4096        /* reads after the program's calls */

static const size_t caps[16] = {1,  2,  3,  4,  5,   7,   8,    9,
                                16, 17, 31, 64, 100, 256, 1024, 0};

enum { CALL_READLINE, CALL_READ, CALL_READ_EXACT };


/* One input, decoded, and what the tasks share while it runs. */
typedef struct prog {
  size_t cap;            /* the stream's buffer size (never 0 here) */
  size_t bufsize;        /* what weft_stream_new is given (0: default) */
  int half_close;        /* flags bit 0 */
  int reader_yields;     /* flags bit 1 */
  int stream_writer;     /* flags bit 2 */
  const uint8_t *chunks; /* chunk specs */
  size_t nchunks;
  const uint8_t *calls; /* call specs, 2 bytes each */
  size_t ncalls;
  const uint8_t *data; /* what the writer sends */
  size_t n;
  int rfd, wfd;      /* the reader's and the writer's end */
  size_t p;          /* the model: bytes of data consumed so far */
  int skip_pending;  /* a readline said -EMSGSIZE, none has succeeded since */
  size_t ncall;      /* calls made, for the messages */
  int alive;         /* tasks not finished: the last cancels the timer */
  weft_timer *watch; /* aborts the run if it is still going */
} prog;

/* ---- failing ------------------------------------------------------------ */

static void fail(const prog *g, const char *what, long got, long want) {
  fprintf(stderr,
          "fuzz_stream: call %zu: %s: got %ld, want %ld "
          "(cap %zu, consumed %zu of %zu, %zu chunk specs)\n",
          g->ncall, what, got, want, g->cap, g->p, g->n, g->nchunks);
  abort();
}

static void check(const prog *g, int ok, const char *what, long got,
                  long want) {
  if (!ok)
    fail(g, what, got, want);
}

static void watchdog(void *arg) {
  prog *g = arg;
  g->watch = NULL;
  fail(g, "still running after 5 s (a hang)", 0, 0);
}

static void task_done(prog *g) {
  if (--g->alive == 0 && g->watch) {
    weft_timer_cancel(g->watch);
    g->watch = NULL;
  }
}

/* ---- the writer --------------------------------------------------------- */

static size_t chunk_size(uint8_t c) {
  return (size_t)((c & 0x1f) + 1) * (c & 0x80 ? 16 : 1);
}

/* Yields until the reader has taken every byte out of the socket, so that
 * its next read sees the next write alone. */
static void drain(prog *g) {
  for (int i = 0; i < DRAIN_YIELDS; i++) {
    int queued = 0;
    if (ioctl(g->rfd, FIONREAD, &queued) != 0 || queued == 0)
      return;
    weft_yield();
  }
}

static void pause_after(prog *g, uint8_t c) {
  switch ((c >> 5) & 3) {
  case 0: break;
  case 1: weft_yield(); break;
  case 2: drain(g); break;
  case 3:
    for (int i = 0; i < 4; i++)
      weft_yield();
    break;
  }
}

/* Sends len bytes, straight or through ws. */
static void send_bytes(prog *g, weft_stream *ws, const uint8_t *b, size_t len) {
  ssize_t rc =
      ws ? weft_stream_write(ws, b, len) : weft_write_all(g->wfd, b, len);
  check(g, rc == (ssize_t)len, "writer: write", (long)rc, (long)len);
}

static void flush(prog *g, weft_stream *ws) {
  int rc = ws ? weft_stream_flush(ws) : 0;
  check(g, rc == 0, "writer: weft_stream_flush", rc, 0);
}

static void *writer(void *arg) {
  prog *g = arg;
  weft_stream *ws = NULL;
  if (g->stream_writer) {
    ws = weft_stream_new(g->wfd, g->bufsize);
    check(g, ws != NULL, "writer: weft_stream_new", errno, 0);
  }
  size_t at = 0;
  for (size_t i = 0; at < g->n; i++) {
    uint8_t c = g->nchunks ? g->chunks[i % g->nchunks] : 0;
    size_t len = g->nchunks ? chunk_size(c) : g->n;
    if (len > g->n - at)
      len = g->n - at;
    send_bytes(g, ws, g->data + at, len);
    at += len;
    if ((c >> 5) & 3)
      flush(g, ws);
    pause_after(g, c);
  }
  flush(g, ws);
  if (g->half_close) {
    /* End of file for the reader, then wait until it has closed its end
     * (it never writes, so the one thing to read is end of file). */
    check(g, shutdown(g->wfd, SHUT_WR) == 0, "writer: shutdown", errno, 0);
    char b;
    ssize_t rc = weft_read(g->wfd, &b, 1);
    check(g, rc == 0, "writer: read after half-close", (long)rc, 0);
  }
  int rc = ws ? weft_stream_close(ws) : weft_close(g->wfd);
  check(g, rc == 0, "writer: close", rc, 0);
  task_done(g);
  return NULL;
}

/* ---- the model ---------------------------------------------------------- */

/* Checks got[0, len) against the next len bytes written, and consumes
 * them. */
static void expect_bytes(prog *g, const char *what, const char *got,
                         size_t len) {
  check(g, len <= g->n - g->p, what, (long)len, (long)(g->n - g->p));
  for (size_t i = 0; i < len; i++)
    if ((uint8_t)got[i] != g->data[g->p + i])
      fail(g, what, (long)(uint8_t)got[i], (long)g->data[g->p + i]);
  g->p += len;
}

/* The next line: its length with the '\n' (or up to end of file) and
 * whether it has the '\n'. */
static size_t next_line(const prog *g, int *has_nl) {
  const uint8_t *nl = memchr(g->data + g->p, '\n', g->n - g->p);
  *has_nl = nl != NULL;
  return nl ? (size_t)(nl - (g->data + g->p)) + 1 : g->n - g->p;
}

static void model_readline(prog *g, const char *buf, size_t max, ssize_t got,
                           int deadline) {
  if (max == 0) {
    check(g, got == -EINVAL, "readline(max 0)", (long)got, -EINVAL);
    return;
  }
  if (deadline) {
    check(g, got == -ETIMEDOUT, "readline past a deadline", (long)got,
          -ETIMEDOUT);
    return; /* nothing consumed */
  }
  int has_nl;
  size_t len = next_line(g, &has_nl);
  size_t limit = max - 1 < g->cap ? max - 1 : g->cap;
  int fits = len <= limit && (has_nl || len < g->cap);
  if (len == 0) {
    check(g, got == 0, "readline at end of file", (long)got, 0);
    g->skip_pending = 0;
    return;
  }
  if (!fits) {
    check(g, got == -EMSGSIZE, "readline of a line too long", (long)got,
          -EMSGSIZE);
    g->p += len; /* the line is skipped */
    g->skip_pending = 1;
    return;
  }
  check(g, got == (ssize_t)len, "readline length", (long)got, (long)len);
  check(g, buf[len] == '\0', "readline's NUL", (long)buf[len], 0);
  expect_bytes(g, "readline bytes", buf, len);
  g->skip_pending = 0;
}

static void model_read(prog *g, const char *buf, size_t len, ssize_t got,
                       int deadline) {
  size_t left = g->n - g->p;
  if (deadline) {
    check(g, got == -ETIMEDOUT, "read past a deadline", (long)got, -ETIMEDOUT);
    return;
  }
  if (len == 0 || left == 0) {
    check(g, got == 0, "read at end of file or of len 0", (long)got, 0);
    return;
  }
  check(g, got >= 1 && (size_t)got <= len, "read count", (long)got,
        (long)(len < left ? len : left));
  expect_bytes(g, "read bytes", buf, (size_t)got);
}

static void model_read_exact(prog *g, const char *buf, size_t len, ssize_t got,
                             int deadline) {
  size_t left = g->n - g->p;
  size_t want = len < left ? len : left;
  if (deadline) {
    check(g, got == -ETIMEDOUT, "read_exact past a deadline", (long)got,
          -ETIMEDOUT);
    return;
  }
  check(g, got == (ssize_t)want, "read_exact count", (long)got, (long)want);
  expect_bytes(g, "read_exact bytes", buf, want);
}

/* ---- the reader --------------------------------------------------------- */

static size_t call_size(const prog *g, uint8_t kind, uint8_t arg) {
  long v;
  switch ((kind >> 4) & 3) {
  case 0: v = arg; break;
  case 1: v = (long)g->cap + (int8_t)arg; break;
  case 2: v = (long)arg * 16; break;
  default: v = (long)arg * 256; break;
  }
  if (v < 0)
    v = 0;
  return v > MAX_SIZE ? MAX_SIZE : (size_t)v;
}

/* Makes one call on s, with a buffer of exactly `size` bytes, and checks
 * it. */
static void one_call(prog *g, weft_stream *s, int call, size_t size,
                     int deadline) {
  char *buf = malloc(size ? size : 1);
  check(g, buf != NULL, "malloc", 0, 0);
  weft_scope sc;
  if (deadline)
    weft_scope_enter(&sc, weft_now() - 1);
  ssize_t got;
  switch (call) {
  case CALL_READLINE: got = weft_stream_readline(s, buf, size); break;
  case CALL_READ: got = weft_stream_read(s, buf, size); break;
  default: got = weft_stream_read_exact(s, buf, size); break;
  }
  if (deadline) {
    int rc = weft_scope_exit(&sc);
    check(g, rc == 0 || rc == -ETIMEDOUT, "weft_scope_exit", rc, 0);
    if (got == -ETIMEDOUT)
      check(g, rc == -ETIMEDOUT, "scope after -ETIMEDOUT", rc, -ETIMEDOUT);
  }
  switch (call) {
  case CALL_READLINE: model_readline(g, buf, size, got, deadline); break;
  case CALL_READ: model_read(g, buf, size, got, deadline); break;
  default: model_read_exact(g, buf, size, got, deadline); break;
  }
  free(buf);
  g->ncall++;
}

static void *reader(void *arg) {
  prog *g = arg;
  weft_stream *s = weft_stream_new(g->rfd, g->bufsize);
  check(g, s != NULL, "weft_stream_new", errno, 0);
  for (size_t i = 0; i < g->ncalls; i++) {
    uint8_t kind = g->calls[2 * i], a = g->calls[2 * i + 1];
    int call = kind & 3;
    if (call == 3)
      call = CALL_READLINE;
    if (g->reader_yields || (kind & 8))
      weft_yield();
    one_call(g, s, call, call_size(g, kind, a), kind & 4);
  }
  /* The rest, to end of file: everything written must come out. */
  while (g->p < g->n)
    one_call(g, s, CALL_READ, DRAIN_READ, 0);
  /* End of file stays end of file, for every call. */
  one_call(g, s, CALL_READ, DRAIN_READ, 0);
  one_call(g, s, CALL_READLINE, DRAIN_READ, 0);
  one_call(g, s, CALL_READ_EXACT, DRAIN_READ, 0);
  int rc = weft_stream_close(s);
  check(g, rc == 0, "weft_stream_close", rc, 0);
  task_done(g);
  return NULL;
}

/* ---- one input ---------------------------------------------------------- */

/* The process's open fds. */
static int count_fds(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  while (readdir(d))
    n++;
  closedir(d);
  return n;
}

/* Cuts the input into the program's parts; missing bytes read as 0. */
static void decode(prog *g, const uint8_t *in, size_t size) {
  size_t at = 0;
#define NEXT() (at < size ? in[at++] : 0)
  g->bufsize = caps[NEXT() % 16];
  g->cap = g->bufsize ? g->bufsize : DEFAULT_CAP;
  uint8_t flags = NEXT();
  g->half_close = flags & 1;
  g->reader_yields = (flags >> 1) & 1;
  g->stream_writer = (flags >> 2) & 1;
  size_t c = NEXT();
  g->chunks = in + at;
  g->nchunks = c < size - at ? c : size - at;
  at += g->nchunks;
  size_t k = NEXT();
  g->calls = in + at;
  g->ncalls = k < (size - at) / 2 ? k : (size - at) / 2;
  at += 2 * g->ncalls;
  g->data = in + at;
  g->n = size - at;
#undef NEXT
}

int LLVMFuzzerTestOneInput(const uint8_t *in, size_t size) {
  prog g;
  memset(&g, 0, sizeof g);
  decode(&g, in, size);
  int fds_before = count_fds();
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) != 0)
    fail(&g, "socketpair", errno, 0);
  g.rfd = sv[0];
  g.wfd = sv[1];
  weft_loop *loop = weft_loop_new(NULL);
  check(&g, loop != NULL, "weft_loop_new", errno, 0);
  g.alive = 2;
  g.watch = weft_call_later(WEFT_SEC(5), watchdog, &g);
  check(&g, g.watch != NULL, "weft_call_later", errno, 0);
  check(&g, weft_go(writer, &g) == 0, "weft_go(writer)", 0, 0);
  check(&g, weft_go(reader, &g) == 0, "weft_go(reader)", 0, 0);
  int rc = weft_loop_run(loop);
  check(&g, rc == 0, "weft_loop_run", rc, 0);
  check(&g, g.alive == 0, "tasks left", g.alive, 0);
  check(&g, g.p == g.n, "bytes consumed", (long)g.p, (long)g.n);
  weft_loop_free(loop);
  int fds_after = count_fds();
  check(&g, fds_after == fds_before, "open fds", fds_after, fds_before);
  return 0;
}
