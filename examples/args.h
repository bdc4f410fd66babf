/* For the examples: numbers from the command line (the whole argument
 * must be a number in range, or the example says so and exits 2), and the
 * exit status from weft_main's answer. */
#ifndef WEFT_EXAMPLES_ARGS_H
#define WEFT_EXAMPLES_ARGS_H

#include "weft.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static inline long arg_long(const char *prog, const char *what, const char *s,
                            long lo, long hi) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi) {
    fprintf(stderr, "%s: %s wants a whole number from %ld to %ld, not '%s'\n",
            prog, what, lo, hi, s);
    exit(2);
  }
  return v;
}

/* A number above 0 (a time scale). */
static inline double arg_scale(const char *prog, const char *s) {
  char *end;
  double v = strtod(s, &end);
  if (end == s || *end || !(v > 0) || v > 1e6) {
    fprintf(stderr, "%s: --scale wants a number above 0, not '%s'\n", prog, s);
    exit(2);
  }
  return v;
}

/* weft_main's answer as main's exit status: fn's value, or, if the loop
 * failed (its negative errno would exit with 234 or so and say nothing),
 * the error on stderr and 1. */
static inline int exit_status(const char *prog, int rc) {
  if (rc >= 0)
    return rc;
  fprintf(stderr, "%s: %s\n", prog, weft_strerror(rc));
  return 1;
}

#endif
