/*
 * Generators (weft_gen_*), with Python's semantics, and no loop needed:
 *
 *  - the first send starts the generator and its value is ignored; yield
 *    hands a value out and receives the next send; the return value comes
 *    out of the last send (result 0);
 *  - throw makes the pending yield return -err: the generator may catch it
 *    and yield again, or return; on an unstarted generator it finishes it
 *    without running;
 *  - close makes the pending yield return -ECANCELED and the cleanup code
 *    runs; a generator that yields after close gives -EPROTO and is still
 *    finished and freed;
 *  - misuse changes nothing: resuming a finished generator, send/throw/
 *    close/free from inside it, yield on the wrong generator or outside,
 *    throw with err <= 0, NULL arguments;
 *  - weft_gen_free on a suspended generator closes it (cleanup runs);
 *  - `yield from`: an outer generator drives an inner readline generator
 *    and passes on what is sent to it; the inner one's return value becomes
 *    the outer one's;
 *  - 10,000 generators alive at once;
 *  - generators inside tasks: a task switches out while inside a
 *    generator and resumes correctly, with other tasks using generators in
 *    between; a running generator is refused to other tasks; errno stays
 *    the task's;
 *  - a task dropped by weft_loop_free inside nested generators finishes
 *    them (they can be freed); a loop run inside a generator runs its
 *    callbacks in none.
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define P(x)  ((void *)(intptr_t)(x))
#define I(p)  ((intptr_t)(p))
#define UNSET P(0x5e5e)

/* ---- send, yield, return --------------------------------------------- */
/* Yields arg, arg+1, ... as long as it is sent non-negative numbers, and
 * records what it received; returns the sum of what it received. */
typedef struct echo_state {
  intptr_t got[16];
  int ngot;
  int started;
  int finished;
} echo_state;

static void *echo(weft_gen *g, void *arg) {
  echo_state *st = arg;
  st->started++;
  intptr_t sum = 0;
  for (intptr_t i = 0;; i++) {
    void *in = UNSET;
    int rc = weft_gen_yield(g, P(100 + i), &in);
    CHECK_EQ(rc, 0);
    CHECK_LT(st->ngot, 16);
    st->got[st->ngot++] = I(in);
    if (I(in) < 0)
      break;
    sum += I(in);
  }
  st->finished++;
  return P(sum);
}

static void test_send(void) {
  echo_state st = {0};
  weft_gen *g = weft_gen_new(echo, &st, 0);
  CHECK(g != NULL);
  CHECK(!weft_gen_done(g));
  CHECK_EQ(st.started, 0); /* nothing runs before the first send */
  void *out = UNSET;
  /* The first send's value is ignored (Python's send(None)). */
  CHECK_EQ(weft_gen_send(g, P(999), &out), 1);
  CHECK_EQ(st.started, 1);
  CHECK_EQ(I(out), 100);
  CHECK_EQ(st.ngot, 0);
  CHECK_EQ(weft_gen_send(g, P(5), &out), 1);
  CHECK_EQ(I(out), 101);
  CHECK_EQ(weft_gen_send(g, P(7), NULL), 1); /* out may be NULL */
  CHECK_EQ(weft_gen_send(g, P(11), &out), 1);
  CHECK_EQ(I(out), 103);
  CHECK(!weft_gen_done(g));
  CHECK_EQ(weft_gen_send(g, P(-1), &out), 0); /* it returned */
  CHECK_EQ(I(out), 5 + 7 + 11);
  CHECK(weft_gen_done(g));
  CHECK_EQ(st.ngot, 4);
  CHECK_EQ(st.got[0], 5); /* not 999 */
  CHECK_EQ(st.got[1], 7);
  CHECK_EQ(st.got[2], 11);
  CHECK_EQ(st.got[3], -1);
  CHECK_EQ(st.finished, 1);

  /* Resuming a finished generator: -EINVAL, and nothing changes. */
  out = UNSET;
  CHECK_EQ(weft_gen_send(g, P(1), &out), -EINVAL);
  CHECK_PTR_EQ(out, UNSET);
  CHECK_EQ(weft_gen_throw(g, EIO, &out), -EINVAL);
  CHECK_PTR_EQ(out, UNSET);
  CHECK_EQ(weft_gen_close(g), 0); /* closing a finished one is fine */
  CHECK(weft_gen_done(g));
  CHECK_EQ(st.ngot, 4);
  CHECK_EQ(st.finished, 1);
  CHECK_EQ(weft_gen_free(g), 0);
}

/* A generator that returns without ever yielding. */
static void *returns_at_once(weft_gen *g, void *arg) {
  (void)g;
  return arg;
}

static void test_immediate_return(void) {
  weft_gen *g = weft_gen_new(returns_at_once, P(77), 0);
  CHECK(g != NULL);
  void *out = UNSET;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 0);
  CHECK_EQ(I(out), 77);
  CHECK(weft_gen_done(g));
  CHECK_EQ(weft_gen_send(g, NULL, &out), -EINVAL);
  CHECK_EQ(weft_gen_free(g), 0);
}

/* ---- throw ------------------------------------------------------------ */
/* Records every error its yields return; after an EAGAIN it yields on, an
 * EIO makes it yield -err once more, anything else makes it return. */
typedef struct catcher_state {
  int errs[8];
  int nerrs;
  int cleanup;
} catcher_state;

static void *catcher(weft_gen *g, void *arg) {
  catcher_state *st = arg;
  intptr_t n = 0;
  for (;;) {
    void *in = UNSET;
    int rc = weft_gen_yield(g, P(n++), &in);
    if (rc == 0) {
      CHECK_PTR_NE(in, UNSET);
      continue;
    }
    CHECK_PTR_EQ(in, UNSET); /* an error leaves *received alone */
    CHECK_LT(st->nerrs, 8);
    st->errs[st->nerrs++] = rc;
    if (rc == -EAGAIN)
      continue;
    if (rc == -EIO) {
      rc = weft_gen_yield(g, P(-EIO), NULL);
      CHECK_LT(st->nerrs, 8);
      st->errs[st->nerrs++] = rc;
      if (rc == 0)
        continue;
    }
    break;
  }
  st->cleanup++;
  return P(1000 + st->nerrs);
}

static void test_throw(void) {
  catcher_state st = {0};
  weft_gen *g = weft_gen_new(catcher, &st, 0);
  CHECK(g != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_EQ(I(out), 0);
  /* Caught, and it yields again: throw returns 1 and the next value. */
  CHECK_EQ(weft_gen_throw(g, EAGAIN, &out), 1);
  CHECK_EQ(I(out), 1);
  CHECK_EQ(st.nerrs, 1);
  CHECK_EQ(st.errs[0], -EAGAIN);
  /* A normal send after the throw: the yield returns 0 again. */
  CHECK_EQ(weft_gen_send(g, P(3), &out), 1);
  CHECK_EQ(I(out), 2);
  CHECK_EQ(st.nerrs, 1);
  /* err must be positive: -EINVAL, and nothing happened. */
  out = UNSET;
  CHECK_EQ(weft_gen_throw(g, 0, &out), -EINVAL);
  CHECK_EQ(weft_gen_throw(g, -EIO, &out), -EINVAL);
  CHECK_PTR_EQ(out, UNSET);
  CHECK_EQ(st.nerrs, 1);
  CHECK(!weft_gen_done(g));
  /* EIO: it yields -EIO, then a send lets it continue. */
  CHECK_EQ(weft_gen_throw(g, EIO, &out), 1);
  CHECK_EQ(I(out), -EIO);
  CHECK_EQ(weft_gen_send(g, P(4), &out), 1);
  CHECK_EQ(I(out), 3);
  CHECK_EQ(st.nerrs, 3);
  CHECK_EQ(st.errs[1], -EIO);
  CHECK_EQ(st.errs[2], 0);
  /* Anything else: it returns, and throw says so with 0 and the value. */
  CHECK_EQ(weft_gen_throw(g, ETIMEDOUT, &out), 0);
  CHECK_EQ(I(out), 1004);
  CHECK_EQ(st.errs[3], -ETIMEDOUT);
  CHECK_EQ(st.cleanup, 1);
  CHECK(weft_gen_done(g));
  CHECK_EQ(weft_gen_throw(g, EIO, &out), -EINVAL);
  CHECK_EQ(weft_gen_free(g), 0);

  /* Thrown into a generator that does not catch (it just returns what
   * its yield gave it). A large errno value is passed through as is. */
  st = (catcher_state){0};
  g = weft_gen_new(catcher, &st, 0);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(weft_gen_throw(g, 4000, &out), 0);
  CHECK_EQ(st.errs[0], -4000);
  CHECK_EQ(I(out), 1001);
  CHECK_EQ(weft_gen_free(g), 0);
}

static void test_throw_unstarted(void) {
  catcher_state st = {0};
  weft_gen *g = weft_gen_new(catcher, &st, 0);
  CHECK(g != NULL);
  void *out = UNSET;
  /* Nothing ran, so nothing can catch it: finished, out = NULL. */
  CHECK_EQ(weft_gen_throw(g, EIO, &out), 0);
  CHECK(out == NULL);
  CHECK(weft_gen_done(g));
  CHECK_EQ(st.nerrs, 0);
  CHECK_EQ(st.cleanup, 0); /* the body never ran */
  CHECK_EQ(weft_gen_send(g, NULL, &out), -EINVAL);
  CHECK_EQ(weft_gen_free(g), 0);

  /* err <= 0 on an unstarted generator: -EINVAL, and it can still start. */
  st = (catcher_state){0};
  g = weft_gen_new(catcher, &st, 0);
  CHECK_EQ(weft_gen_throw(g, 0, &out), -EINVAL);
  CHECK(!weft_gen_done(g));
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_EQ(I(out), 0);
  CHECK_EQ(weft_gen_free(g), 0);
  CHECK_EQ(st.cleanup, 1); /* free closed it: -ECANCELED, so it returned */
  CHECK_EQ(st.errs[0], -ECANCELED);
}

/* ---- close ------------------------------------------------------------ */
typedef struct closer_state {
  int yields_seen;
  int close_seen;
  int cleanup;
  int after_second_yield; /* must stay 0 */
  int second_rc;
} closer_state;

/* Cleans up on close, as a `finally:` would. */
static void *well_behaved(weft_gen *g, void *arg) {
  closer_state *st = arg;
  for (;;) {
    int rc = weft_gen_yield(g, P(st->yields_seen), NULL);
    if (rc == -ECANCELED) {
      st->close_seen++;
      break;
    }
    CHECK_EQ(rc, 0);
    st->yields_seen++;
  }
  st->cleanup++;
  return P(55);
}

/* Ignores close: yields again ("generator ignored GeneratorExit"). */
static void *stubborn(weft_gen *g, void *arg) {
  closer_state *st = arg;
  int rc = weft_gen_yield(g, P(1), NULL);
  if (rc == -ECANCELED)
    st->close_seen++;
  st->second_rc = weft_gen_yield(g, P(2), NULL);
  st->after_second_yield++;
  return NULL;
}

static void test_close(void) {
  closer_state st = {0};
  weft_gen *g = weft_gen_new(well_behaved, &st, 0);
  CHECK(g != NULL);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(st.yields_seen, 1);
  CHECK_EQ(weft_gen_close(g), 0);
  CHECK_EQ(st.close_seen, 1);
  CHECK_EQ(st.cleanup, 1);
  CHECK(weft_gen_done(g));
  CHECK_EQ(weft_gen_close(g), 0); /* again: already finished */
  CHECK_EQ(weft_gen_send(g, NULL, NULL), -EINVAL);
  CHECK_EQ(st.cleanup, 1);
  CHECK_EQ(weft_gen_free(g), 0);

  /* Close before it started: finished without running. */
  st = (closer_state){0};
  g = weft_gen_new(well_behaved, &st, 0);
  CHECK_EQ(weft_gen_close(g), 0);
  CHECK(weft_gen_done(g));
  CHECK_EQ(st.cleanup, 0);
  CHECK_EQ(st.close_seen, 0);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), -EINVAL);
  CHECK_EQ(weft_gen_free(g), 0);

  /* Yields after close: -EPROTO; finished anyway, never resumed again,
   * and freed without a leak. */
  for (int round = 0; round < 3; round++) {
    st = (closer_state){0};
    g = weft_gen_new(stubborn, &st, 0);
    CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
    CHECK_EQ(weft_gen_close(g), -EPROTO);
    CHECK_EQ(st.close_seen, 1);
    CHECK_EQ(st.after_second_yield, 0);
    CHECK(weft_gen_done(g));
    CHECK_EQ(weft_gen_send(g, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_gen_throw(g, EIO, NULL), -EINVAL);
    CHECK_EQ(weft_gen_close(g), 0);
    CHECK_EQ(st.after_second_yield, 0);
    CHECK_EQ(weft_gen_free(g), 0);
  }

  /* weft_gen_free on a suspended generator closes it: cleanup runs. */
  st = (closer_state){0};
  g = weft_gen_new(well_behaved, &st, 0);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(weft_gen_free(g), 0);
  CHECK_EQ(st.close_seen, 1);
  CHECK_EQ(st.cleanup, 1);

  /* ... and a stubborn one is freed all the same. */
  st = (closer_state){0};
  g = weft_gen_new(stubborn, &st, 0);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(weft_gen_free(g), 0);
  CHECK_EQ(st.close_seen, 1);
  CHECK_EQ(st.after_second_yield, 0);

  /* Freeing an unstarted generator runs nothing. */
  st = (closer_state){0};
  g = weft_gen_new(well_behaved, &st, 0);
  CHECK_EQ(weft_gen_free(g), 0);
  CHECK_EQ(st.cleanup, 0);
}

/* ---- misuse from inside ---------------------------------------------- */
typedef struct self_state {
  weft_gen *other; /* a suspended generator, not the one running */
  int checked;
} self_state;

static void *self_abuser(weft_gen *g, void *arg) {
  self_state *st = arg;
  void *out = UNSET;
  /* The running generator cannot be resumed, thrown into, closed or
   * freed from inside. */
  CHECK_EQ(weft_gen_send(g, NULL, &out), -EINVAL);
  CHECK_EQ(weft_gen_throw(g, EIO, &out), -EINVAL);
  CHECK_EQ(weft_gen_close(g), -EINVAL);
  CHECK_EQ(weft_gen_free(g), -EINVAL);
  CHECK_PTR_EQ(out, UNSET);
  CHECK(!weft_gen_done(g));
  /* Yield on a generator that is not the running one. */
  CHECK_EQ(weft_gen_yield(st->other, P(1), NULL), -EINVAL);
  CHECK_EQ(weft_gen_yield(NULL, P(1), NULL), -EINVAL);
  st->checked++;
  /* It still works normally afterwards. */
  void *in = UNSET;
  CHECK_EQ(weft_gen_yield(g, P(8), &in), 0);
  CHECK_EQ(I(in), 9);
  return P(10);
}

static void test_misuse(void) {
  echo_state est = {0};
  weft_gen *other = weft_gen_new(echo, &est, 0);
  CHECK(other != NULL);
  CHECK_EQ(weft_gen_send(other, NULL, NULL), 1); /* suspended */
  self_state st = {other, 0};
  weft_gen *g = weft_gen_new(self_abuser, &st, 0);
  CHECK(g != NULL);
  /* Outside any generator, yield is refused too. */
  CHECK_EQ(weft_gen_yield(g, P(1), NULL), -EINVAL);     /* not started */
  CHECK_EQ(weft_gen_yield(other, P(1), NULL), -EINVAL); /* suspended */
  void *out;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_EQ(st.checked, 1);
  CHECK_EQ(I(out), 8);
  CHECK_EQ(weft_gen_send(g, P(9), &out), 0);
  CHECK_EQ(I(out), 10);
  CHECK_EQ(weft_gen_yield(g, P(1), NULL), -EINVAL); /* finished */
  CHECK_EQ(weft_gen_free(g), 0);
  /* The other one was untouched by all this. */
  CHECK_EQ(est.ngot, 0);
  CHECK_EQ(weft_gen_send(other, P(-1), &out), 0);
  CHECK_EQ(est.ngot, 1);
  CHECK_EQ(est.got[0], -1);
  CHECK_EQ(weft_gen_free(other), 0);
}

static void test_null(void) {
  void *out = UNSET;
  CHECK_EQ(weft_gen_send(NULL, NULL, &out), -EINVAL);
  CHECK_EQ(weft_gen_throw(NULL, EIO, &out), -EINVAL);
  CHECK_PTR_EQ(out, UNSET);
  CHECK_EQ(weft_gen_close(NULL), -EINVAL);
  CHECK_EQ(weft_gen_yield(NULL, NULL, NULL), -EINVAL);
  CHECK_EQ(weft_gen_free(NULL), 0); /* ignored */
  CHECK(weft_gen_done(NULL));       /* nothing left to run */
  errno = 0;
  CHECK(weft_gen_new(NULL, NULL, 0) == NULL);
  CHECK_EQ(errno, EINVAL);
}

/* ---- yield from ------------------------------------------------------ */
/* readline: sent one character at a time, yields NULL while the line is
 * incomplete and returns the line (a malloc'd string) at '\n'. */
static void *readline(weft_gen *g, void *arg) {
  (void)arg;
  char buf[128];
  size_t n = 0;
  for (;;) {
    void *in;
    int rc = weft_gen_yield(g, NULL, &in);
    if (rc < 0)
      return NULL; /* closed or thrown into: no line */
    char c = (char)I(in);
    if (c == '\n')
      break;
    CHECK_LT(n, sizeof buf - 1);
    buf[n++] = c;
  }
  buf[n] = '\0';
  return strdup(buf);
}

/* The outer generator: for each line, `line = yield from readline()`, then
 * yields "GOT:" + line out. What is sent to it is passed on to the inner
 * generator, as `yield from` does. Returns the number of lines. */
static void *lines(weft_gen *g, void *arg) {
  (void)arg;
  intptr_t count = 0;
  void *in = NULL;
  for (;;) {
    weft_gen *inner = weft_gen_new(readline, NULL, 16384);
    CHECK(inner != NULL);
    void *out;
    int rc = weft_gen_send(inner, NULL, &out); /* prime it */
    CHECK_EQ(rc, 1);
    while (rc == 1) {
      /* Hand the inner yield out; pass the next send in. */
      int yrc = weft_gen_yield(g, out, &in);
      if (yrc < 0) { /* closed: close the inner one too, and stop */
        CHECK_EQ(weft_gen_close(inner), 0);
        CHECK_EQ(weft_gen_free(inner), 0);
        return P(count);
      }
      rc = weft_gen_send(inner, in, &out);
    }
    CHECK_EQ(rc, 0);
    CHECK(weft_gen_done(inner));
    CHECK_EQ(weft_gen_free(inner), 0);
    char *line = out, reply[160];
    snprintf(reply, sizeof reply, "GOT:%s", line);
    free(line);
    count++;
    if (weft_gen_yield(g, reply, &in) < 0)
      return P(count);
    if (I(in) == -1)
      return P(count);
  }
}

static void test_yield_from(void) {
  weft_gen *g = weft_gen_new(lines, NULL, 0);
  CHECK(g != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK(out == NULL); /* the inner generator's first yield */
  const char *input = "hello\nweft world\n";
  char replies[256] = "";
  for (const char *p = input; *p; p++) {
    CHECK_EQ(weft_gen_send(g, P(*p), &out), 1);
    if (out) {
      strcat(replies, out);
      strcat(replies, "|");
      /* after a reply, the outer yield wants a go-on */
      CHECK_EQ(weft_gen_send(g, P(0), &out), 1);
      CHECK(out == NULL); /* the next inner generator's first yield */
    }
  }
  CHECK_STR_EQ(replies, "GOT:hello|GOT:weft world|");
  /* Half a line, then close: the inner generator is closed first. */
  CHECK_EQ(weft_gen_send(g, P('x'), &out), 1);
  CHECK_EQ(weft_gen_close(g), 0);
  CHECK(weft_gen_done(g));
  CHECK_EQ(weft_gen_free(g), 0);

  /* The outer generator's return value, with -1 after a reply. */
  g = weft_gen_new(lines, NULL, 0);
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  for (const char *p = "a\n"; *p; p++)
    CHECK_EQ(weft_gen_send(g, P(*p), &out), 1);
  CHECK_STR_EQ(out, "GOT:a");
  CHECK_EQ(weft_gen_send(g, P(-1), &out), 0);
  CHECK_EQ(I(out), 1);
  CHECK_EQ(weft_gen_free(g), 0);
}

/* ---- nesting misuse: an inner generator cannot touch the outer one --- */
static weft_gen *outer_g;

static void *inner_abuser(weft_gen *g, void *arg) {
  (void)arg;
  CHECK_EQ(weft_gen_yield(outer_g, P(1), NULL), -EINVAL); /* not innermost */
  CHECK_EQ(weft_gen_send(outer_g, NULL, NULL), -EINVAL);  /* running */
  CHECK_EQ(weft_gen_close(outer_g), -EINVAL);
  CHECK_EQ(weft_gen_free(outer_g), -EINVAL);
  CHECK_EQ(weft_gen_yield(g, P(2), NULL), 0);
  return P(3);
}

static void *outer_body(weft_gen *g, void *arg) {
  (void)arg;
  weft_gen *inner = weft_gen_new(inner_abuser, NULL, 0);
  CHECK(inner != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(inner, NULL, &out), 1);
  CHECK_EQ(I(out), 2);
  /* After the inner one yielded, the outer one runs again: its own yield
   * works. */
  CHECK_EQ(weft_gen_yield(g, P(20), NULL), 0);
  CHECK_EQ(weft_gen_send(inner, NULL, &out), 0);
  CHECK_EQ(I(out), 3);
  CHECK_EQ(weft_gen_free(inner), 0);
  return P(30);
}

static void test_nesting(void) {
  outer_g = weft_gen_new(outer_body, NULL, 0);
  CHECK(outer_g != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(outer_g, NULL, &out), 1);
  CHECK_EQ(I(out), 20);
  CHECK_EQ(weft_gen_send(outer_g, NULL, &out), 0);
  CHECK_EQ(I(out), 30);
  CHECK_EQ(weft_gen_free(outer_g), 0);
}

/* ---- ten thousand at once -------------------------------------------- */
#define MANY 10000

static void *counter(weft_gen *g, void *arg) {
  intptr_t id = I(arg);
  void *in;
  CHECK_EQ(weft_gen_yield(g, P(id), &in), 0);
  CHECK_EQ(I(in), id * 3);
  CHECK_EQ(weft_gen_yield(g, P(id + 1), &in), 0);
  return P(id * 2 + I(in));
}

static void test_many(void) {
  static weft_gen *gs[MANY];
  for (intptr_t i = 0; i < MANY; i++) {
    gs[i] = weft_gen_new(counter, P(i), 0);
    CHECK(gs[i] != NULL);
    void *out;
    CHECK_EQ(weft_gen_send(gs[i], NULL, &out), 1);
    CHECK_EQ(I(out), i);
  }
  /* All alive and suspended; resume them in reverse order. */
  for (intptr_t i = MANY - 1; i >= 0; i--) {
    void *out;
    CHECK_EQ(weft_gen_send(gs[i], P(i * 3), &out), 1);
    CHECK_EQ(I(out), i + 1);
  }
  for (intptr_t i = 0; i < MANY; i++) {
    void *out;
    CHECK_EQ(weft_gen_send(gs[i], P(7), &out), 0);
    CHECK_EQ(I(out), i * 2 + 7);
    CHECK(weft_gen_done(gs[i]));
    CHECK_EQ(weft_gen_free(gs[i]), 0);
  }
}

/* ---- generators inside tasks ----------------------------------------- */
static char trace[256];
static size_t ntrace;

static void note(const char *s) {
  size_t n = strlen(s);
  CHECK_LT(ntrace + n, sizeof trace);
  memcpy(trace + ntrace, s, n);
  ntrace += n;
  trace[ntrace] = '\0';
}

static weft_gen *shared_gen; /* run by task A, while B looks at it */

/* A generator that switches tasks (weft_yield) in the middle. */
static void *switching_gen(weft_gen *g, void *arg) {
  const char *tag = arg;
  char buf[16];
  for (int i = 0; i < 3; i++) {
    snprintf(buf, sizeof buf, "%s%d", tag, i);
    note(buf);
    errno = 100 + i; /* the task's errno, set inside the generator */
    CHECK_EQ(weft_yield(), 0);
    CHECK_EQ(errno, 100 + i);
    CHECK_EQ(weft_gen_yield(g, P(i), NULL), 0);
  }
  return P(42);
}

static void *task_a(void *arg) {
  (void)arg;
  shared_gen = weft_gen_new(switching_gen, "a", 0);
  CHECK(shared_gen != NULL);
  void *out;
  for (int i = 0; i < 3; i++) {
    CHECK_EQ(weft_gen_send(shared_gen, NULL, &out), 1);
    CHECK_EQ(I(out), i);
    note(".");
  }
  CHECK_EQ(weft_gen_send(shared_gen, NULL, &out), 0);
  CHECK_EQ(I(out), 42);
  CHECK_EQ(weft_gen_free(shared_gen), 0);
  shared_gen = NULL;
  return P(1);
}

/* Another task uses generators of its own while A's is mid-way, and finds
 * A's generator running (A switched out inside it): it may not touch it. */
static void *task_b(void *arg) {
  (void)arg;
  for (int i = 0; i < 3; i++) {
    CHECK(shared_gen != NULL);
    CHECK_EQ(weft_gen_send(shared_gen, NULL, NULL), -EINVAL);
    CHECK_EQ(weft_gen_close(shared_gen), -EINVAL);
    CHECK_EQ(weft_gen_yield(shared_gen, NULL, NULL), -EINVAL);
    echo_state st = {0};
    weft_gen *g = weft_gen_new(echo, &st, 0);
    CHECK(g != NULL);
    void *out;
    CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
    CHECK_EQ(weft_gen_send(g, P(i), &out), 1);
    note("b");
    errno = 7;
    CHECK_EQ(weft_yield(), 0); /* switch out with g suspended */
    CHECK_EQ(errno, 7);
    CHECK_EQ(weft_gen_send(g, P(-1), &out), 0);
    CHECK_EQ(I(out), i);
    CHECK_EQ(weft_gen_free(g), 0);
  }
  return P(2);
}

/* A task that runs its own switching generator, interleaved with A's. */
static void *task_c(void *arg) {
  (void)arg;
  weft_gen *g = weft_gen_new(switching_gen, "c", 0);
  CHECK(g != NULL);
  void *out;
  while (weft_gen_send(g, NULL, &out) == 1)
    note(",");
  CHECK_EQ(I(out), 42);
  CHECK_EQ(weft_gen_free(g), 0);
  return P(3);
}

/* Nested generators inside a task, with a task switch in the innermost:
 * after it, each generator's yield still goes to the right place. */
static void *inner_switcher(weft_gen *g, void *arg) {
  (void)arg;
  note("i");
  CHECK_EQ(weft_yield(), 0);
  note("I");
  CHECK_EQ(weft_gen_yield(g, P(1), NULL), 0);
  CHECK_EQ(weft_yield(), 0);
  return P(2);
}

static void *outer_switcher(weft_gen *g, void *arg) {
  (void)arg;
  weft_gen *inner = weft_gen_new(inner_switcher, NULL, 0);
  CHECK(inner != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(inner, NULL, &out), 1);
  CHECK_EQ(I(out), 1);
  CHECK_EQ(weft_gen_yield(g, P(10), NULL), 0); /* the outer's own yield */
  CHECK_EQ(weft_yield(), 0);
  CHECK_EQ(weft_gen_send(inner, NULL, &out), 0);
  CHECK_EQ(I(out), 2);
  CHECK_EQ(weft_gen_free(inner), 0);
  return P(20);
}

static void *nested_task(void *arg) {
  (void)arg;
  weft_gen *g = weft_gen_new(outer_switcher, NULL, 0);
  CHECK(g != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_EQ(I(out), 10);
  note("n");
  CHECK_EQ(weft_gen_send(g, NULL, &out), 0);
  CHECK_EQ(I(out), 20);
  CHECK_EQ(weft_gen_free(g), 0);
  return NULL;
}

/* Uses generators of its own while the other task is switched out inside
 * its nested pair. */
static void *gen_user(void *arg) {
  (void)arg;
  for (int i = 0; i < 4; i++) {
    echo_state st = {0};
    weft_gen *g = weft_gen_new(echo, &st, 0);
    CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
    CHECK_EQ(weft_gen_send(g, P(i), NULL), 1);
    void *out;
    CHECK_EQ(weft_gen_send(g, P(-1), &out), 0);
    CHECK_EQ(I(out), i);
    CHECK_EQ(weft_gen_free(g), 0);
    note("u");
    CHECK_EQ(weft_yield(), 0);
  }
  return NULL;
}

/* A generator started by one task and resumed by another: each resume
 * returns to whoever sent. */
static weft_gen *passed_gen;

static void *starter(void *arg) {
  (void)arg;
  echo_state *st = calloc(1, sizeof *st);
  passed_gen = weft_gen_new(echo, st, 0);
  CHECK(passed_gen != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(passed_gen, NULL, &out), 1);
  CHECK_EQ(I(out), 100);
  return st;
}

static void *finisher(void *arg) {
  (void)arg;
  void *out;
  CHECK_EQ(weft_gen_send(passed_gen, P(4), &out), 1);
  CHECK_EQ(I(out), 101);
  CHECK_EQ(weft_gen_send(passed_gen, P(-1), &out), 0);
  CHECK_EQ(I(out), 4);
  CHECK_EQ(weft_gen_free(passed_gen), 0);
  return NULL;
}

static int nested_main(void *arg) {
  (void)arg;
  weft_task *a = weft_spawn(nested_task, NULL);
  weft_task *b = weft_spawn(gen_user, NULL);
  CHECK(a && b);
  CHECK_EQ(weft_join(a, NULL), 0);
  CHECK_EQ(weft_join(b, NULL), 0);
  weft_task *s = weft_spawn(starter, NULL);
  void *st;
  CHECK_EQ(weft_join(s, &st), 0);
  weft_task *f = weft_spawn(finisher, NULL);
  CHECK_EQ(weft_join(f, NULL), 0);
  CHECK_EQ(((echo_state *)st)->finished, 1);
  free(st);
  return 0;
}

static void test_nested_in_tasks(void) {
  ntrace = 0;
  trace[0] = '\0';
  CHECK_EQ(weft_main(nested_main, NULL), 0);
  if (!check_seeded()) /* two tasks interleaved in FIFO order */
    CHECK_STR_EQ(trace, "iuInuuu");
}

static int tasks_main(void *arg) {
  (void)arg;
  /* Outside any generator, inside a task: yield on a generator refused. */
  weft_task *a = weft_spawn(task_a, NULL);
  weft_task *b = weft_spawn(task_b, NULL);
  weft_task *c = weft_spawn(task_c, NULL);
  CHECK(a && b && c);
  void *r;
  CHECK_EQ(weft_join(a, &r), 0);
  CHECK_EQ(I(r), 1);
  CHECK_EQ(weft_join(b, &r), 0);
  CHECK_EQ(I(r), 2);
  CHECK_EQ(weft_join(c, &r), 0);
  CHECK_EQ(I(r), 3);
  return 9;
}

static void test_in_tasks(void) {
  ntrace = 0;
  trace[0] = '\0';
  CHECK_EQ(weft_main(tasks_main, NULL), 9);
  /* A, B, C take turns in FIFO order; each weft_yield inside a generator
   * lets the other two run once. */
  if (!check_seeded())
    CHECK_STR_EQ(trace, "a0bc0.a1b,c1.a2b,c2.,");
}

/* A task dropped by weft_loop_free while inside two nested generators:
 * they are finished with it (their stacks back in the pool), so the
 * program can close and free them (they once stayed "running" for ever:
 * -EINVAL). And a loop run from inside a generator: the loop's callbacks
 * run in no generator (a yield there once suspended the loop half-run). */
static weft_gen *outer_g, *inner_g;
static void *drop_inner_body(weft_gen *g, void *arg) {
  (void)g;
  (void)arg;
  weft_loop_stop(weft_loop_current());
  weft_sleep(WEFT_SEC(100)); /* the task is dropped here */
  CHECK(0);
  return NULL;
}
static void *drop_outer_body(weft_gen *g, void *arg) {
  (void)g;
  (void)arg;
  weft_gen_send(inner_g, NULL, NULL);
  CHECK(0);
  return NULL;
}
static void *enters_gens(void *arg) {
  (void)arg;
  weft_gen_send(outer_g, NULL, NULL);
  CHECK(0);
  return NULL;
}

static int cb_yield_rc = 1;
static weft_gen *loop_g;
static void yields_loop_gen(void *arg) {
  (void)arg;
  cb_yield_rc = weft_gen_yield(loop_g, NULL, NULL);
}
static void *runs_loop(weft_gen *g, void *arg) {
  (void)g;
  (void)arg;
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK_EQ(weft_call_soon(yields_loop_gen, NULL), 0);
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
  return P(5);
}

/* A generator is its thread's: another thread's send, throw, close and
 * free are -EINVAL and change nothing. */
static void *other_thread(void *g) {
  void *out;
  intptr_t bad = weft_gen_send(g, NULL, &out) == -EINVAL &&
                 weft_gen_throw(g, EIO, &out) == -EINVAL &&
                 weft_gen_close(g) == -EINVAL && weft_gen_free(g) == -EINVAL;
  return (void *)bad;
}
static void *counts(weft_gen *g, void *arg) {
  (void)arg;
  for (intptr_t i = 0;; i++)
    if (weft_gen_yield(g, P(i), NULL) < 0)
      return NULL;
}

static void test_other_thread(void) {
  weft_gen *g = weft_gen_new(counts, NULL, 0);
  CHECK(g);
  void *out = NULL;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_PTR_EQ(out, P(0));
  pthread_t th;
  void *all_refused = NULL;
  CHECK_EQ(pthread_create(&th, NULL, other_thread, g), 0);
  CHECK_EQ(pthread_join(th, &all_refused), 0);
  CHECK_PTR_EQ(all_refused, P(1));
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1); /* as it was */
  CHECK_PTR_EQ(out, P(1));
  CHECK_EQ(weft_gen_free(g), 0);
}

/* The same once the owner has exited: a thread made after it gets the
 * owner's thread-local block, at the same address, and once passed for the
 * owner (send ran the generator on it, free freed it). The generators are
 * left suspended, nobody may free them now: in a child, kept reachable. */
#define ORPHANS 3
static weft_gen *orphans[ORPHANS];
static void *makes_orphan(void *slot) {
  weft_gen **g = slot;
  *g = weft_gen_new(counts, NULL, 0);
  void *out = NULL;
  intptr_t ok = *g && weft_gen_send(*g, NULL, &out) == 1;
  return (void *)ok;
}

static void orphan_rounds(void *unused) {
  (void)unused;
  for (int i = 0; i < ORPHANS; i++) {
    pthread_t th;
    void *ok = NULL, *all_refused = NULL;
    CHECK_EQ(pthread_create(&th, NULL, makes_orphan, &orphans[i]), 0);
    CHECK_EQ(pthread_join(th, &ok), 0);
    CHECK_PTR_EQ(ok, P(1));
    CHECK_EQ(pthread_create(&th, NULL, other_thread, orphans[i]), 0);
    CHECK_EQ(pthread_join(th, &all_refused), 0);
    CHECK_PTR_EQ(all_refused, P(1));
    CHECK(!weft_gen_done(orphans[i]));
  }
}

static void test_owner_exited(void) {
  static check_child res;
  check_child_run(orphan_rounds, NULL, &res, 60);
  CHECK_EXITED(res, 0);
}

static void test_dropped(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  outer_g = weft_gen_new(drop_outer_body, NULL, 0);
  inner_g = weft_gen_new(drop_inner_body, NULL, 0);
  CHECK(outer_g && inner_g);
  CHECK(weft_spawn(enters_gens, NULL));
  CHECK_EQ(weft_loop_run(loop), 1);
  weft_loop_free(loop);
  CHECK(weft_gen_done(inner_g));
  CHECK(weft_gen_done(outer_g));
  CHECK_EQ(weft_gen_close(inner_g), 0);
  CHECK_EQ(weft_gen_free(inner_g), 0);
  CHECK_EQ(weft_gen_free(outer_g), 0);

  loop_g = weft_gen_new(runs_loop, NULL, 0);
  CHECK(loop_g);
  void *out = NULL;
  CHECK_EQ(weft_gen_send(loop_g, NULL, &out), 0); /* returned: not suspended */
  CHECK_EQ(cb_yield_rc, -EINVAL);
  CHECK_PTR_EQ(out, P(5));
  CHECK_EQ(weft_gen_free(loop_g), 0);
}

int main(void) {
  test_send();
  test_immediate_return();
  test_throw();
  test_throw_unstarted();
  test_close();
  test_misuse();
  test_null();
  test_yield_from();
  test_nesting();
  test_many();
  test_in_tasks();
  test_nested_in_tasks();
  test_dropped();
  test_other_thread();
  test_owner_exited();
  printf("ok\n");
  return 0;
}
