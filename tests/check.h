/*
 * The tests' assertions: each prints both values and file:line, and a
 * failed one ends the test with exit status 1. Exit 77 means "skipped here".
 */
#ifndef WEFT_CHECK_H
#define WEFT_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(cond)                                                           \
  do {                                                                        \
    if (!(cond)) {                                                            \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__,        \
              #cond);                                                         \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#define CHECK_EQ(a, b)                                                        \
  do {                                                                        \
    long long va_ = (long long)(a), vb_ = (long long)(b);                     \
    if (va_ != vb_) {                                                         \
      fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__,     \
              __LINE__, #a, #b, va_, vb_);                                    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#define CHECK_PTR_EQ(a, b)                                                    \
  do {                                                                        \
    const void *va_ = (const void *)(a), *vb_ = (const void *)(b);            \
    if (va_ != vb_) {                                                         \
      fprintf(stderr, "%s:%d: %s == %s failed: %p != %p\n", __FILE__,         \
              __LINE__, #a, #b, va_, vb_);                                    \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#define CHECK_STR_EQ(a, b)                                                    \
  do {                                                                        \
    const char *va_ = (a), *vb_ = (b);                                        \
    if (!va_ || !vb_ || strcmp(va_, vb_) != 0) {                              \
      fprintf(stderr, "%s:%d: %s == %s failed:\n  \"%s\"\n  \"%s\"\n",        \
              __FILE__, __LINE__, #a, #b, va_ ? va_ : "(null)",               \
              vb_ ? vb_ : "(null)");                                          \
      exit(1);                                                                \
    }                                                                         \
  } while (0)

#define SKIP(why)                                                             \
  do {                                                                        \
    printf("skipped: %s\n", why);                                             \
    exit(77);                                                                 \
  } while (0)

#endif
