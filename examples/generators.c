/*
 * Seed 000's discussion of generators, in C: generators as tasks under a
 * round-robin scheduler with no loop at all; send() and the value a yield
 * returns; throw() delivering an error at the pending yield; close() with
 * cleanup; and `yield from` — a readline sub-generator whose return value
 * becomes the caller's, and which a close of the caller half-way through a
 * line closes too. The output is the same as the equivalent Python
 * program's (examples/expected/generators.txt).
 *
 * A weft generator is stackful: any function it calls may yield on its
 * behalf, so `yield from` is not needed to split a generator into
 * functions. It is shown here anyway, because driving one generator from
 * another is how a protocol layer wraps a lower one.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <weft.h>

/* ---- generators as tasks ---- */
static void *countdown(weft_gen *g, void *arg) {
  for (intptr_t n = (intptr_t)arg; n > 0; n--) {
    printf("T-minus %ld\n", (long)n);
    weft_gen_yield(g, NULL, NULL);
  }
  printf("Blastoff!\n");
  return NULL;
}

static void *countup(weft_gen *g, void *arg) {
  for (intptr_t x = 0; x < (intptr_t)arg; x++) {
    printf("Counting up %ld\n", (long)x);
    weft_gen_yield(g, NULL, NULL);
  }
  return NULL;
}

/* The seed's TaskScheduler: a FIFO of generators, each run to its next
 * yield and put back, until all have returned. */
static void round_robin(void) {
  weft_gen *ring[3] = {weft_gen_new(countdown, (void *)3, 0),
                       weft_gen_new(countdown, (void *)2, 0),
                       weft_gen_new(countup, (void *)3, 0)};
  size_t head = 0, n = 3;
  while (n) {
    weft_gen *t = ring[head];
    head = (head + 1) % 3;
    n--;
    if (weft_gen_send(t, NULL, NULL) == 1) { /* yielded: back in line */
      ring[(head + n) % 3] = t;
      n++;
    } else {
      weft_gen_free(t);
    }
  }
}

/* ---- send ---- */
static void *running_total(weft_gen *g, void *unused) {
  intptr_t total = 0;
  void *value;
  while (weft_gen_yield(g, (void *)total, &value) == 0)
    total += (intptr_t)value;
  return NULL; /* closed */
}

static void send_demo(void) {
  weft_gen *g = weft_gen_new(running_total, NULL, 0);
  void *out;
  weft_gen_send(g, NULL, &out);
  printf("started, first yield gave %ld\n", (long)(intptr_t)out);
  for (intptr_t v = 10; v <= 30; v += 10) {
    weft_gen_send(g, (void *)v, &out);
    printf("sent %ld got %ld\n", (long)v, (long)(intptr_t)out);
  }
  weft_gen_free(g);
}

/* ---- throw ---- */
static void *worker(weft_gen *g, void *unused) {
  for (;;) {
    void *job;
    int rc = weft_gen_yield(g, NULL, &job);
    if (rc == -ETIMEDOUT)
      printf("worker: told it timed out; carrying on\n");
    else if (rc < 0)
      return NULL; /* closed */
    else
      printf("worker: job %ld\n", (long)(intptr_t)job);
  }
}

static void throw_demo(void) {
  weft_gen *w = weft_gen_new(worker, NULL, 0);
  weft_gen_send(w, NULL, NULL);
  weft_gen_send(w, (void *)1, NULL);
  weft_gen_throw(w, ETIMEDOUT, NULL);
  weft_gen_send(w, (void *)2, NULL);
  weft_gen_free(w);
}

/* ---- close ---- */
static void *reader(weft_gen *g, void *unused) {
  printf("reader: open\n");
  void *line;
  while (weft_gen_yield(g, NULL, &line) == 0)
    printf("reader: got %s\n", (const char *)line);
  /* -ECANCELED: weft_gen_close. Clean up and return; yielding again would
   * make close fail with -EPROTO. */
  printf("reader: closed, cleaning up\n");
  return NULL;
}

static void close_demo(void) {
  weft_gen *r = weft_gen_new(reader, NULL, 0);
  weft_gen_send(r, NULL, NULL);
  weft_gen_send(r, "alpha", NULL);
  weft_gen_send(r, "beta", NULL);
  weft_gen_close(r);
  printf("closed: %s\n", weft_gen_done(r) ? "True" : "False");
  weft_gen_free(r);
}

/* ---- yield from ---- */
/* Yields the request "recv(1)" and receives one character (0 at the end)
 * per send, until a newline; returns the line, as the seed's readline. */
static void *readline(weft_gen *g, void *buf) {
  char *line = buf;
  size_t n = 0;
  for (;;) {
    void *c;
    if (weft_gen_yield(g, "recv(1)", &c) < 0 || !(intptr_t)c)
      break;
    line[n++] = (char)(intptr_t)c;
    if ((intptr_t)c == '\n')
      break;
  }
  line[n] = '\0';
  return line;
}

/* `line = yield from readline()`: run the sub-generator, passing its
 * requests out and the answers in, until it returns its value. As in
 * Python, an error thrown into the caller is thrown into the
 * sub-generator, and a close closes the sub-generator and then the caller:
 * NULL, and the caller must return without yielding again. */
static const char *yield_from_readline(weft_gen *self, char *buf) {
  weft_gen *sub = weft_gen_new(readline, buf, 0);
  void *request = NULL; /* stays NULL if sub could not be made */
  int rc = weft_gen_send(sub, NULL, &request);
  while (rc == 1) {
    void *answer;
    int err = weft_gen_yield(self, request, &answer);
    if (err == -ECANCELED) {
      weft_gen_free(sub); /* closes it */
      return NULL;
    }
    rc = err < 0 ? weft_gen_throw(sub, -err, &request)
                 : weft_gen_send(sub, answer, &request);
  }
  weft_gen_free(sub);
  return request; /* what readline returned */
}

static void *lines(weft_gen *g, void *unused) {
  char buf[256];
  for (;;) {
    const char *line = yield_from_readline(g, buf);
    if (!line || !*line)
      return NULL; /* closed, or the end of the data */
    printf("line: '");
    for (const char *p = line; *p; p++)
      fputs(*p == '\n' ? "\\n" : (char[]){*p, 0}, stdout);
    printf("'\n");
  }
}

static void yield_from_demo(void) {
  const char *data = "hello\nworld\n";
  weft_gen *l = weft_gen_new(lines, NULL, 0);
  void *request;
  int rc = weft_gen_send(l, NULL, &request);
  while (rc == 1) {
    rc = weft_gen_send(l, (void *)(intptr_t)*data, &request);
    if (*data)
      data++; /* past the end, keep sending 0: "connection closed" */
  }
  weft_gen_free(l);
  printf("done\n");
  /* Closed half-way through a line: the close goes through `yield from`
   * to readline, and no partial line comes out. */
  l = weft_gen_new(lines, NULL, 0);
  weft_gen_send(l, NULL, &request);
  for (data = "par"; *data; data++)
    weft_gen_send(l, (void *)(intptr_t)*data, &request);
  rc = weft_gen_close(l);
  printf("closed mid-line: %s\n",
         rc == 0 && weft_gen_done(l) ? "True" : "False");
  weft_gen_free(l);
}

int main(void) {
  printf("-- generators as tasks: a round-robin scheduler, no loop\n");
  round_robin();
  printf("-- send: the value sent is what the pending yield returns\n");
  send_demo();
  printf("-- throw: an error raised at the pending yield\n");
  throw_demo();
  printf("-- close: GeneratorExit at the pending yield, cleanup runs\n");
  close_demo();
  printf("-- yield from: readline as a sub-generator that returns the line\n");
  yield_from_demo();
  return 0;
}
