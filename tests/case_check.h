/*
 * Running one case of a test of the loop: fn(arg) as the only task of a
 * fresh loop, which must run out of work within CASE_LATE and leave
 * nothing behind (no fd waiter, timer, callback, task or open fd). An
 * alarm (check_case) names the case if it hangs. RUN(fn) runs a case in a child process
 * of its own (CHECK_SUBTEST), so one failure does not hide the others.
 *
 * Include after internal.h and check.h.
 */
#ifndef WEFT_CASE_CHECK_H
#define WEFT_CASE_CHECK_H

#include <signal.h>
#include <string.h>
#include <unistd.h>

#ifndef CASE_LATE
#define CASE_LATE WEFT_SEC(5)
#endif

static void run_case(const char *name, void *(*fn)(void *), void *arg) {
  check_case(name, RUNNING_ON_VALGRIND ? 100 : 30);
  int fds = check_fd_count();
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  CHECK(weft_spawn(fn, arg));
  int64_t t0 = weft_now();
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_LT(weft_now() - t0, CASE_LATE);
  CHECK_EQ(loop->nwaiters, 0);
  CHECK_EQ(loop->heap_len, 0);
  CHECK_EQ(loop->cb_len, 0);
  CHECK_EQ(loop->nlive, 0);
  weft_loop_free(loop);
  CHECK_EQ(check_fd_count(), fds);
  alarm(0);
}

static void *(*case_fn)(void *);
static const char *case_name;
__attribute__((unused)) static void case_trampoline(void) { run_case(case_name, case_fn, NULL); }

#define RUN(fn)                                                                \
  do {                                                                         \
    case_fn = (fn);                                                            \
    case_name = #fn;                                                           \
    int failed_ = check_subtest_failures;                                      \
    check_subtest_(case_trampoline, #fn);                                      \
    if (check_subtest_failures == failed_)                                     \
      printf("  %s: ok\n", #fn);                                               \
  } while (0)

#endif
