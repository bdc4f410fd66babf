/*
 * Which dynamic-analysis tools this build must cooperate with. Each one
 * needs to be told when weft moves the stack pointer to another stack.
 */
#ifndef WEFT_TOOLS_H
#define WEFT_TOOLS_H

#if defined(__SANITIZE_ADDRESS__)
#define WEFT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define WEFT_ASAN 1
#endif
#endif

#if defined(__SANITIZE_THREAD__)
#define WEFT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define WEFT_TSAN 1
#endif
#endif

#ifdef WEFT_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#ifdef WEFT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

/* Valgrind's client requests cost a few instructions when not running under
 * Valgrind, so they are compiled in whenever the header is present. */
#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define WEFT_VALGRIND 1
#endif
#endif

#ifndef WEFT_VALGRIND
#define RUNNING_ON_VALGRIND 0
#endif

#endif
