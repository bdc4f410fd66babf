/*
 * Layer 5: buffered streams over a socket or a pipe.
 *
 * Each direction has one buffer of the size given at creation, allocated
 * with the stream and never grown, whatever the peer sends:
 *
 *   rbuf  [ consumed | rpos ... unread ... rlen | free ]   cap bytes
 *   wbuf  [ queued ... wlen | free ]                       cap bytes
 *
 * The read side keeps unread bytes in place and moves them to the front
 * only when it must read more with no line in sight, so a buffer holding
 * many short lines costs one read and no copies but the ones to the caller.
 *
 * The reads that wait (readline, read_exact up to cap bytes) take bytes
 * out of rbuf only once they have all they need: an error or a
 * cancellation while waiting consumes nothing.
 *
 * One task reads and one writes at a time: a second one gets -EBUSY
 * instead of sharing a buffer with a call in flight. A close while a call
 * waits closes the fd (the call returns -EBADF) and leaves the freeing to
 * the last call out.
 */
#include "internal.h"

#include <errno.h>
#include <string.h>
#include <unistd.h>

#define STREAM_DEFAULT_BUFSIZE (64 * 1024)

struct weft_stream {
  int fd;         /* owned: weft_stream_close closes it */
  int discarding; /* skipping the rest of a line that was too long */
  int rerr;       /* a read error for the next read call (read_exact_in) */
  uint8_t reading; /* a read call is in progress */
  uint8_t writing; /* a write or flush is in progress */
  uint8_t closing; /* weft_stream_close is in progress */
  uint8_t closed;  /* a close has begun: the last call out frees */
  size_t cap;     /* size of each buffer */
  size_t rpos;    /* first unread byte of rbuf */
  size_t rlen;    /* end of the bytes read into rbuf */
  size_t scanned; /* rbuf[rpos, scanned) holds no '\n' */
  size_t wlen;    /* bytes queued in wbuf */
  char *rbuf;     /* both buffers follow the struct, in one allocation */
  char *wbuf;
};

weft_stream *weft_stream_new(int fd, size_t bufsize) {
  if (fd < 0) {
    errno = EINVAL;
    return NULL;
  }
  if (bufsize == 0)
    bufsize = STREAM_DEFAULT_BUFSIZE;
  if (bufsize > (SIZE_MAX - sizeof(weft_stream)) / 2) {
    errno = ENOMEM;
    return NULL;
  }
  weft_stream *s = weft__malloc(sizeof *s + 2 * bufsize);
  if (!s) {
    errno = ENOMEM;
    return NULL;
  }
  memset(s, 0, sizeof *s);
  s->fd = fd;
  s->cap = bufsize;
  s->rbuf = (char *)(s + 1);
  s->wbuf = s->rbuf + bufsize;
  return s;
}

int weft_stream_fd(const weft_stream *s) { return s ? s->fd : -EINVAL; }

/* (A line being skipped is never in rbuf between calls: readline and
 * skip_rest drop what they have of it before they wait.) */
size_t weft_stream_buffered(const weft_stream *s) {
  return s ? s->rlen - s->rpos : 0;
}

/* ---- waiting ------------------------------------------------------------ */
/* The calls below may wait; a task dropped while it waits (its loop freed
 * under it) never returns to leave() (see the end), so the loop ends its
 * call for it: the stream is not left busy for good, nor a closed one
 * unfreed. Only the calls that wait pay for it, next to a system call. */
typedef struct {
  weft__held h;
  weft_stream *s;
  uint8_t *busy;  /* the flag of the call in progress */
  uint8_t shut;   /* a close's flush: dropped, it closes the fd itself */
} waiting;

static ssize_t leave(weft_stream *s, uint8_t *busy, ssize_t rc);

static void drop_call(weft_loop *loop, weft__held *h) {
  waiting *w = (waiting *)h;
  if (w->shut) { /* a close that never got to the fd */
    weft__fd_forget(loop, w->s->fd);
    close(w->s->fd);
  }
  leave(w->s, w->busy, 0);
}

static ssize_t io_read(weft_stream *s, void *buf, size_t len) {
  waiting w = {.s = s, .busy = &s->reading};
  weft__hold(&w.h, drop_call);
  ssize_t n = weft_read(s->fd, buf, len);
  weft__unhold(&w.h);
  return n;
}

/* A write, or a close's flush (no write in progress then). */
static ssize_t io_write(weft_stream *s, const void *buf, size_t len, int all) {
  waiting w = {.s = s, .busy = s->writing ? &s->writing : &s->closing};
  w.shut = w.busy == &s->closing;
  weft__hold(&w.h, drop_call);
  ssize_t n =
      all ? weft_write_all(s->fd, buf, len) : weft_write(s->fd, buf, len);
  weft__unhold(&w.h);
  return n;
}

/* ---- reading ------------------------------------------------------------ */

/* Moves the unread bytes of rbuf to its front. */
static void compact(weft_stream *s) {
  size_t n = s->rlen - s->rpos;
  memmove(s->rbuf, s->rbuf + s->rpos, n);
  s->scanned -= s->rpos;
  s->rpos = 0;
  s->rlen = n;
}

/* One read into the free end of rbuf. */
static ssize_t read_more(weft_stream *s) {
  ssize_t n = io_read(s, s->rbuf + s->rlen, s->cap - s->rlen);
  if (n > 0)
    s->rlen += (size_t)n;
  return n;
}

/* Reads once more into rbuf, first moving the unread bytes to the front if
 * the free space is gone. Returns the count read, 0 at end of file, or a
 * negative errno (the buffered bytes are untouched). */
static ssize_t fill(weft_stream *s) {
  if (s->rpos == s->rlen)
    s->rpos = s->rlen = s->scanned = 0;
  else if (s->rlen == s->cap && s->rpos > 0)
    compact(s);
  return read_more(s);
}

/* Takes len unread bytes out of rbuf into buf. */
static void take(weft_stream *s, void *buf, size_t len) {
  memcpy(buf, s->rbuf + s->rpos, len);
  s->rpos += len;
  if (s->scanned < s->rpos)
    s->scanned = s->rpos;
  if (s->rpos == s->rlen)
    s->rpos = s->rlen = s->scanned = 0;
}

/* Drops n unread bytes. */
static void drop(weft_stream *s, size_t n) {
  s->rpos += n;
  if (s->scanned < s->rpos)
    s->scanned = s->rpos;
  if (s->rpos == s->rlen)
    s->rpos = s->rlen = s->scanned = 0;
}

static ssize_t readline_in(weft_stream *s, char *buf, size_t max) {
  /* The longest line (with its '\n') that can be returned: it must fit in
   * buf with its NUL, and in rbuf, which never grows. */
  size_t limit = max - 1 < s->cap ? max - 1 : s->cap;
  for (;;) {
    char *nl = memchr(s->rbuf + s->scanned, '\n', s->rlen - s->scanned);
    if (nl) {
      size_t len = (size_t)(nl - (s->rbuf + s->rpos)) + 1;
      if (s->discarding) {
        s->discarding = 0;
        drop(s, len);
        continue;
      }
      if (len > limit) {
        drop(s, len);
        return -EMSGSIZE;
      }
      take(s, buf, len);
      buf[len] = '\0';
      return (ssize_t)len;
    }
    s->scanned = s->rlen;
    size_t avail = s->rlen - s->rpos;
    if (s->discarding) {
      drop(s, avail);
    } else if (avail > limit || avail == s->cap) {
      /* Too long already: say so now, and skip the rest of it later. */
      drop(s, avail);
      s->discarding = 1;
      return -EMSGSIZE;
    }
    ssize_t n = fill(s);
    if (n < 0)
      return n;
    if (n == 0) {
      /* End of file: what is left is the last line, without its '\n'. */
      s->discarding = 0;
      avail = s->rlen - s->rpos;
      take(s, buf, avail);
      buf[avail] = '\0';
      return (ssize_t)avail;
    }
  }
}

/* After an early -EMSGSIZE, drops the rest of the long line, so that the
 * next read starts after it, as readline would. Returns 0 or a negative
 * errno (only bytes of the skipped line are consumed then). */
static ssize_t skip_rest(weft_stream *s) {
  while (s->discarding) {
    char *nl = memchr(s->rbuf + s->rpos, '\n', s->rlen - s->rpos);
    if (nl) {
      drop(s, (size_t)(nl - (s->rbuf + s->rpos)) + 1);
      s->discarding = 0;
      break;
    }
    drop(s, s->rlen - s->rpos);
    ssize_t n = fill(s);
    if (n < 0)
      return n;
    if (n == 0)
      s->discarding = 0;
  }
  return 0;
}

static ssize_t read_in(weft_stream *s, void *buf, size_t len) {
  if (len == 0)
    return 0;
  ssize_t rc = skip_rest(s);
  if (rc < 0)
    return rc;
  size_t avail = s->rlen - s->rpos;
  if (avail == 0) {
    /* A large read goes straight to the caller's memory. */
    if (len >= s->cap)
      return io_read(s, buf, len);
    ssize_t n = fill(s);
    if (n <= 0)
      return n;
    avail = (size_t)n;
  }
  size_t n = avail < len ? avail : len;
  take(s, buf, n);
  return (ssize_t)n;
}

static ssize_t read_exact_in(weft_stream *s, void *buf, size_t len) {
  if (len == 0) /* buf may be NULL then */
    return 0;
  ssize_t rc = skip_rest(s);
  if (rc < 0)
    return rc;
  if (len <= s->cap) {
    /* Gather all of it in rbuf first, so a failure consumes nothing. */
    while (s->rlen - s->rpos < len) {
      if (s->rpos + len > s->cap)
        compact(s);
      ssize_t n = read_more(s);
      if (n < 0)
        return n;
      if (n == 0) {
        size_t have = s->rlen - s->rpos;
        take(s, buf, have);
        return (ssize_t)have;
      }
    }
    take(s, buf, len);
    return (ssize_t)len;
  }
  /* Larger than the buffer: what is buffered, then straight into buf. */
  char *p = buf;
  size_t done = s->rlen - s->rpos;
  take(s, p, done);
  while (done < len) {
    ssize_t n = io_read(s, p + done, len - done);
    if (n < 0 && done) {
      /* The bytes read are the answer, and the error the next read
       * call's: a socket reports a reset only once (the read after it
       * sees end of file), and the short count alone would pass for
       * one. A cancellation is seen again by the next call anyway. */
      if (n != -ECANCELED && n != -ETIMEDOUT)
        s->rerr = (int)n;
      return (ssize_t)done;
    }
    if (n < 0)
      return n;
    if (n == 0)
      break;
    done += (size_t)n;
  }
  return (ssize_t)done;
}

/* ---- writing ------------------------------------------------------------ */

static int flush_in(weft_stream *s) {
  size_t done = 0;
  int rc = 0;
  while (done < s->wlen) {
    ssize_t n = io_write(s, s->wbuf + done, s->wlen - done, 0);
    if (n < 0) {
      rc = (int)n;
      break;
    }
    done += (size_t)n;
  }
  /* What did not go out stays queued, at the front. */
  memmove(s->wbuf, s->wbuf + done, s->wlen - done);
  s->wlen -= done;
  return rc;
}

static ssize_t write_in(weft_stream *s, const void *buf, size_t len) {
  if (len == 0) /* buf may be NULL then */
    return 0;
  if (len <= s->cap - s->wlen) {
    memcpy(s->wbuf + s->wlen, buf, len);
    s->wlen += len;
    return (ssize_t)len;
  }
  int rc = flush_in(s);
  if (rc < 0)
    return rc;
  if (len < s->cap) {
    memcpy(s->wbuf, buf, len);
    s->wlen = len;
    return (ssize_t)len;
  }
  return io_write(s, buf, len, 1);
}

/* ---- one reader and one writer at a time -------------------------------- */

/* A call starts: -EBUSY if another task's call of its kind (*busy) is in
 * flight, -EBADF once a close has begun (a call in flight then gets it
 * from the closed fd). It is a cancellation point even when the buffer
 * could serve it: -ECANCELED, -ETIMEDOUT, nothing consumed or queued. */
static int enter(const weft_stream *s, uint8_t *busy) {
  if (s->closed)
    return -EBADF;
  if (*busy)
    return -EBUSY;
  int rc = weft__running_task() ? weft__checkpoint() : 0;
  if (rc < 0)
    return rc;
  *busy = 1;
  return 0;
}

/* A read call's turn. One the buffer serves makes no I/O call, yet it
 * counts as one towards the loop's fairness budget (WEFT__IO_BUDGET, io.c),
 * so that a task reading a flood of lines a fast peer has sent yields every
 * so many calls, as one reading the socket itself does (without it,
 * 100,000 lines in the socket held every other task off until end of file:
 * only the reads that filled the buffer counted). The yield is the call's,
 * the stream marked busy: a close meanwhile makes the call -EBADF, a
 * cancellation -ECANCELED. */
static __attribute__((noinline)) int take_turn(weft_stream *s) {
  /* Held as a read that waits is: a loop freed with the task in the ready
   * queue ends the call, or the stream stays busy for good (-EBUSY). */
  waiting w = {.s = s, .busy = &s->reading};
  weft__hold(&w.h, drop_call);
  (void)weft_yield(); /* a cancellation is seen by the checkpoint next */
  weft__unhold(&w.h);
  return s->closed ? -EBADF : weft__checkpoint();
}

/* A read call starts: enter, its turn, then the error a read_exact left
 * for it, if any. Returns 0, or the call's result once it is over (it has
 * left: s may be gone). */
static int begin_read(weft_stream *s) {
  int rc = enter(s, &s->reading);
  if (rc < 0)
    return rc;
  weft_task *t = weft__running_task();
  if (t && weft__io_budget_spent(t->loop)) {
    if ((rc = take_turn(s)) < 0)
      return (int)leave(s, &s->reading, rc);
  }
  if (s->rerr) {
    rc = s->rerr;
    s->rerr = 0;
    return (int)leave(s, &s->reading, rc);
  }
  return 0;
}

/* A call ends; the last one out of a closed stream frees it. */
static ssize_t leave(weft_stream *s, uint8_t *busy, ssize_t rc) {
  *busy = 0;
  if (s->closed && !s->reading && !s->writing && !s->closing)
    weft__free(s);
  return rc;
}

ssize_t weft_stream_readline(weft_stream *s, char *buf, size_t max) {
  if (!s || !buf || max == 0)
    return -EINVAL;
  int rc = begin_read(s);
  if (rc < 0)
    return rc;
  return leave(s, &s->reading, readline_in(s, buf, max));
}

ssize_t weft_stream_read(weft_stream *s, void *buf, size_t len) {
  if (!s || (!buf && len))
    return -EINVAL;
  int rc = begin_read(s);
  if (rc < 0)
    return rc;
  return leave(s, &s->reading, read_in(s, buf, len));
}

ssize_t weft_stream_read_exact(weft_stream *s, void *buf, size_t len) {
  if (!s || (!buf && len))
    return -EINVAL;
  int rc = begin_read(s);
  if (rc < 0)
    return rc;
  return leave(s, &s->reading, read_exact_in(s, buf, len));
}

ssize_t weft_stream_write(weft_stream *s, const void *buf, size_t len) {
  if (!s || (!buf && len))
    return -EINVAL;
  int rc = enter(s, &s->writing);
  return rc < 0 ? rc : leave(s, &s->writing, write_in(s, buf, len));
}

int weft_stream_flush(weft_stream *s) {
  if (!s)
    return -EINVAL;
  int rc = enter(s, &s->writing);
  return rc < 0 ? rc : (int)leave(s, &s->writing, flush_in(s));
}

/* Closes s's fd and frees s, after flushing if `flush` (close; abort
 * does not). A close counts as a call of its own until it is done, so that
 * a call that returns meanwhile does not free the stream under it. With
 * another task's write in flight it does not flush (that call returns
 * -EBADF, and what is queued is dropped). */
static int shut(weft_stream *s, int flush) {
  if (!s)
    return 0;
  if (s->closed)
    return -EBADF; /* another task's close is in progress */
  s->closed = s->closing = 1;
  int rc = flush && !s->writing ? flush_in(s) : 0;
  waiting w = {.s = s, .busy = &s->closing}; /* the close may wait too */
  weft__hold(&w.h, drop_call);
  int rc2 = weft_close(s->fd);
  weft__unhold(&w.h);
  leave(s, &s->closing, 0);
  return rc < 0 ? rc : rc2;
}

int weft_stream_close(weft_stream *s) { return shut(s, 1); }

int weft_stream_abort(weft_stream *s) { return shut(s, 0); }
