/*
 * For the tests of the loop and what is built on it: run one task on a
 * fresh loop until the loop has nothing left, and check that it ran out of
 * work (0), rather than stopping or failing.
 */
#ifndef WEFT_LOOP_CHECK_H
#define WEFT_LOOP_CHECK_H

#include "weft.h"

#include "check.h"

static inline void check_run(void *(*fn)(void *), void *arg) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(fn, arg));
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

#endif
