/*
 * Seed 002's routine_main: tornado's coroutines, in weft. Each tornado
 * `@coroutine` is a function run by weft_async, which hands back a future
 * of its return value; `ret = yield routine()` is
 * yield_future(weft_async(routine, arg), &ret): await it, release it.
 * tornado's `sleep` is built
 * the seed's way, as a future that a timer completes (call_later +
 * set_result), and `raise Return(x)` is a plain `return x`.
 *
 *   tornado_style [--scale F]   F multiplies every sleep (default 1: the
 *                               seed's 1 s, 1 s, 2 s; the demo uses 0.1)
 *
 * The output is the seed's, line for line (examples/expected/), as the
 * seed states it: ("url1", 1). The seed's own code, print(ret) of a tuple,
 * would print ('url1', 1) under Python; we keep the stated output.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <weft.h>

#include "args.h"

static double scale = 1.0;

/* The seed's sleep(): a future, and a timer that completes it. */
static void finish(void *f) { weft_future_set_result(f, NULL); }

static weft_future *sleep_future(double seconds) {
  weft_future *f = weft_future_new();
  if (f && !weft_call_later((int64_t)(seconds * scale * 1e9), finish, f)) {
    weft_future_release(f);
    return NULL;
  }
  return f;
}

/* `yield future`: waits, then drops the reference the caller was given. */
static int yield_future(weft_future *f, void **ret) {
  if (!f)
    return -ENOMEM;
  int rc = weft_await(f, ret);
  weft_future_release(f);
  return rc;
}

typedef struct fetch {
  const char *url;
  int wait;
} fetch;

static void *routine_ur(void *arg) {
  fetch *u = arg;
  yield_future(sleep_future(u->wait), NULL);
  printf("routine_ur %s took %ds to get!\n", u->url, u->wait);
  return NULL;
}

static void *routine_url_with_return(void *arg) {
  fetch *u = arg;
  yield_future(sleep_future(u->wait), NULL);
  printf("routine_url_with_return %s took %ds to get!\n", u->url, u->wait);
  return u; /* raise Return((url, wait)) */
}

static void *routine_simple(void *arg) {
  (void)arg;
  printf("it is simple routine\n");
  return NULL;
}

static void *routine_simple_return(void *arg) {
  (void)arg;
  printf("it is simple routine with return\n");
  return "value from routine_simple_return";
}

static void print_pair(const fetch *u) { printf("(\"%s\", %d)\n", u->url, u->wait); }

static int routine_main(void *unused) {
  (void)unused;
  void *ret;
  fetch url0 = {"url0", 1}, url1 = {"url1", 1}, url2 = {"url2", 2};
  int rc = 0;

  rc |= yield_future(weft_async(routine_simple, NULL), NULL);
  rc |= yield_future(weft_async(routine_ur, &url0), NULL);

  rc |= yield_future(weft_async(routine_simple_return, NULL), &ret);
  printf("%s\n", (const char *)ret);

  rc |= yield_future(weft_async(routine_url_with_return, &url1), &ret);
  print_pair(ret);

  rc |= yield_future(weft_async(routine_url_with_return, &url2), &ret);
  print_pair(ret);
  return rc ? 1 : 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--scale") == 0 && i + 1 < argc) {
      scale = arg_scale("tornado_style", argv[++i]);
    } else {
      fprintf(stderr, "usage: %s [--scale F]\n", argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  /* IOLoop.instance().run_sync */
  return exit_status("tornado_style", weft_main(routine_main, NULL));
}
