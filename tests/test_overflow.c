/*
 * A stack overflow hits the guard page, and weft says which task (or
 * generator) overflowed and how big its stack was, then aborts:
 *
 *   weft: task 7 "deep" overflowed its 64 KiB stack
 *   weft: generator 9 "" overflowed its 32 KiB stack
 *
 * Every case runs in a child process; the parent checks how it died and
 * what it wrote to stderr. Faults that are not a guard hit of the running
 * stack are none of weft's business: no message, and they end the process
 * as they would without weft (default SIGSEGV, or the handler the program
 * installed before weft, or SIG_IGN's "die anyway").
 *
 * Skipped under Valgrind, which runs its own signal machinery and stack
 * checks. Under ASan the overflow message and SIGABRT are the same (weft's
 * handler is installed after ASan's and sees the fault first); faults that
 * are not ours reach ASan's handler, which reports "SEGV" and exits 1
 * instead of dying of the signal: the checks below allow for that.
 */
#include "internal.h"
#include "weft.h"

#include "check.h"

#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>

static volatile int keep_going = 1;

/* Recursion the compiler can neither unroll nor turn into a loop. */
__attribute__((noinline)) static int recurse(int n) {
  volatile char buf[200];
  buf[0] = (char)n;
  buf[199] = (char)(n >> 8);
  if (keep_going)
    return recurse(n + 1) + buf[0] + buf[199];
  return buf[0];
}

/* ---- a task overflows ------------------------------------------------ */
typedef struct task_case {
  const char *name;  /* task name, NULL for none */
  size_t stack_size; /* asked for */
  unsigned kib;      /* what the message says */
} task_case;

static void *deep_task(void *arg) {
  (void)arg;
  recurse(0);
  return NULL;
}

static int spawn_deep(void *arg) {
  const task_case *c = arg;
  weft_task_opts o = {.name = c->name, .stack_size = c->stack_size};
  weft_task *t = weft_spawn_opts(deep_task, NULL, &o);
  CHECK(t != NULL);
  dprintf(check_child_fd, "%llu", (unsigned long long)weft_task_id(t));
  close(check_child_fd);
  weft_join(t, NULL);
  return 0;
}

static void child_task_overflow(void *arg) {
  weft_main(spawn_deep, arg);
  fprintf(stderr, "weft_main returned after an overflow\n");
}

/* stderr has the message as its first line, and weft says nothing else.
 * (After it, an emulator may add a note of its own: qemu-user prints
 * "qemu: uncaught target signal 6 (Aborted)".) */
static void check_message(const check_child *res, const char *want) {
  CHECK_KILLED_BY(*res, SIGABRT);
  if (CHECK_ASAN) {
    CHECK_CONTAINS(res->err, want);
    return;
  }
  size_t n = strlen(want);
  if (strncmp(res->err, want, n) != 0)
    CHECK_STR_EQ(res->err, want);
  CHECK_NOT_CONTAINS(res->err + n, "weft");
}

/* Nothing on stderr but, perhaps, an emulator's note. */
static void check_quiet(const char *err) {
  if (strncmp(err, "qemu: ", 6) != 0)
    CHECK_STR_EQ(err, "");
}

static void test_task_overflow(void) {
  static const task_case cases[] = {
      {"deep", 65536, 64},
      {NULL, 0, 256},            /* no name, the default stack */
      {"odd size", 100000, 100}, /* rounded up to 102400 bytes */
  };
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    static check_child res;
    check_child_run(child_task_overflow, (void *)&cases[i], &res, 60);
    CHECK(res.data[0] != '\0'); /* the task's id */
    char want[4352];
    snprintf(want, sizeof want,
             "weft: task %s \"%s\" overflowed its %u KiB stack\n", res.data,
             cases[i].name ? cases[i].name : "", cases[i].kib);
    check_message(&res, want);
  }
}

/* ---- a generator overflows ------------------------------------------- */
static void *deep_gen(weft_gen *g, void *arg) {
  (void)g;
  (void)arg;
  recurse(0);
  return NULL;
}

static void child_gen_overflow(void *arg) {
  size_t size = (size_t)(uintptr_t)arg;
  /* Ids count up per thread: the generator gets the one after this. */
  uint64_t id = weft__next_id() + 1;
  weft_gen *g = weft_gen_new(deep_gen, NULL, size);
  CHECK(g != NULL);
  dprintf(check_child_fd, "%llu", (unsigned long long)id);
  close(check_child_fd);
  weft_gen_send(g, NULL, NULL);
  fprintf(stderr, "weft_gen_send returned after an overflow\n");
}

static void test_gen_overflow(void) {
  static const struct {
    size_t size;
    unsigned kib;
  } cases[] = {{32768, 32}, {0, 256}};
  for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
    static check_child res;
    check_child_run(child_gen_overflow, (void *)(uintptr_t)cases[i].size, &res,
                    60);
    char want[4352];
    snprintf(want, sizeof want,
             "weft: generator %s \"\" overflowed its %u KiB stack\n", res.data,
             cases[i].kib);
    check_message(&res, want);
  }
}

/* A generator run by a task overflows: the generator is named, not the
 * task (it is the generator's stack that ran out). */
static void *task_running_gen(void *arg) {
  (void)arg;
  uint64_t id = weft__next_id() + 1;
  weft_gen *g = weft_gen_new(deep_gen, NULL, 16384);
  CHECK(g != NULL);
  dprintf(check_child_fd, "%llu", (unsigned long long)id);
  close(check_child_fd);
  weft_gen_send(g, NULL, NULL);
  return NULL;
}

static int spawn_gen_runner(void *arg) {
  (void)arg;
  weft_task_opts o = {.name = "runner"};
  weft_task *t = weft_spawn_opts(task_running_gen, NULL, &o);
  CHECK(t != NULL);
  weft_join(t, NULL);
  return 0;
}

static void child_gen_in_task(void *arg) {
  (void)arg;
  weft_main(spawn_gen_runner, NULL);
}

static void test_gen_in_task_overflow(void) {
  static check_child res;
  check_child_run(child_gen_in_task, NULL, &res, 60);
  char want[4352];
  snprintf(want, sizeof want,
           "weft: generator %s \"\" overflowed its 16 KiB stack\n", res.data);
  check_message(&res, want);
}

/* ---- faults that are not an overflow --------------------------------- */
/* Address 8, as a NULL struct pointer's member would be: UBSan does not
 * stop a non-NULL store first, and the compiler cannot see the value. */
static char *volatile bad_ptr = (char *)8;

static void *null_write_task(void *arg) {
  char *p = arg ? (char *)arg : bad_ptr;
  *(volatile char *)p = 1;
  fprintf(stderr, "survived a write to %p\n", (void *)p);
  return NULL;
}

static int spawn_null_writer(void *arg) {
  weft_task_opts o = {.name = "nullwriter"};
  weft_task *t = weft_spawn_opts(null_write_task, arg, &o);
  CHECK(t != NULL);
  weft_join(t, NULL);
  return 0;
}

static void child_null_write(void *arg) { weft_main(spawn_null_writer, arg); }

/* A fault that is not weft's, with the default disposition: the child dies
 * of SIGSEGV (under ASan: ASan's report, exit 1), and weft says nothing. */
static void check_plain_segv(const check_child *res) {
  CHECK_NOT_CONTAINS(res->err, "weft:");
  CHECK_NOT_CONTAINS(res->err, "overflowed");
  if (CHECK_ASAN) {
    CHECK_CONTAINS(res->err, "AddressSanitizer: SEGV");
    CHECK(!WIFEXITED(res->status) || WEXITSTATUS(res->status) != 0);
  } else {
    CHECK_KILLED_BY(*res, SIGSEGV);
    check_quiet(res->err);
  }
}

static void test_null_write(void) {
  static check_child res;
  check_child_run(child_null_write, NULL, &res, 60);
  check_plain_segv(&res);
}

/* A task writes into the guard page of another task's stack: a guard hit,
 * but not of the stack that runs, so not an overflow. */
static weft__stack *other_stack;

static void *guard_writer(void *arg) {
  (void)arg;
  char *guard = (char *)other_stack->region.lo - 1;
  *(volatile char *)guard = 1;
  return NULL;
}

static int spawn_guard_writer(void *arg) {
  (void)arg;
  other_stack = weft__stack_acquire(0);
  CHECK(other_stack != NULL);
  weft_task *t = weft_spawn(guard_writer, NULL);
  CHECK(t != NULL);
  weft_join(t, NULL);
  return 0;
}

static void child_other_guard(void *arg) {
  (void)arg;
  weft_main(spawn_guard_writer, NULL);
}

static void test_other_guard(void) {
  static check_child res;
  check_child_run(child_other_guard, NULL, &res, 60);
  check_plain_segv(&res);
}

/* The thread's own stack overflows (no task): not weft's either. */
static void child_main_overflow(void *arg) {
  (void)arg;
  weft_loop *loop = weft_loop_new(NULL); /* installs weft's handler */
  CHECK(loop != NULL);
  recurse(0);
}

static void test_main_stack_overflow(void) {
  static check_child res;
  check_child_run(child_main_overflow, NULL, &res, 60);
  CHECK_NOT_CONTAINS(res.err, "weft:");
  if (CHECK_ASAN) {
    CHECK_CONTAINS(res.err, "AddressSanitizer");
  } else {
    CHECK_KILLED_BY(res, SIGSEGV);
    check_quiet(res.err);
  }
}

/* The program's own SIGSEGV handler, installed before weft, still gets the
 * faults that are not overflows, and overflows are still named. */
static void user_action(int sig, siginfo_t *si, void *uc) {
  (void)uc;
  char msg[64];
  int n = snprintf(msg, sizeof msg, "user handler: sig %d addr %p\n", sig,
                   si->si_addr);
  ssize_t unused = write(STDERR_FILENO, msg, (size_t)n);
  (void)unused;
  _exit(42);
}

static void user_plain(int sig) {
  (void)sig;
  static const char msg[] = "plain user handler\n";
  ssize_t unused = write(STDERR_FILENO, msg, sizeof msg - 1);
  (void)unused;
  _exit(43);
}

static void child_user_handler(void *arg) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  if (arg) {
    sa.sa_handler = user_plain;
  } else {
    sa.sa_sigaction = user_action;
    sa.sa_flags = SA_SIGINFO;
  }
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
  weft_main(spawn_null_writer, (void *)16); /* writes to address 16 */
}

static void child_user_handler_overflow(void *arg) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sa.sa_sigaction = user_action;
  sa.sa_flags = SA_SIGINFO;
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
  child_task_overflow(arg);
}

static void test_user_handler(void) {
  static check_child res;
  check_child_run(child_user_handler, NULL, &res, 60);
  CHECK_EXITED(res, 42);
  CHECK_STR_EQ(res.err, "user handler: sig 11 addr 0x10\n");

  check_child_run(child_user_handler, (void *)1, &res, 60);
  CHECK_EXITED(res, 43);
  CHECK_STR_EQ(res.err, "plain user handler\n");

  static const task_case deep = {"deep", 65536, 64};
  check_child_run(child_user_handler_overflow, (void *)&deep, &res, 60);
  char want[4352];
  snprintf(want, sizeof want,
           "weft: task %s \"deep\" overflowed its 64 KiB stack\n", res.data);
  check_message(&res, want);
}

/* The program's handler is called as the kernel would have called it:
 * with its sa_mask blocked, and reset first under SA_RESETHAND (weft's
 * handler used to call it with weft's own empty mask, and stayed). */
static void user_masked(int sig, siginfo_t *si, void *uc) {
  (void)sig;
  (void)si;
  (void)uc;
  sigset_t cur;
  pthread_sigmask(SIG_BLOCK, NULL, &cur);
  struct sigaction now;
  sigaction(SIGSEGV, NULL, &now);
  char msg[64];
  int n = snprintf(msg, sizeof msg, "usr1 %s, segv %s\n",
                   sigismember(&cur, SIGUSR1) ? "blocked" : "open",
                   now.sa_handler == SIG_DFL ? "reset" : "kept");
  ssize_t unused = write(STDERR_FILENO, msg, (size_t)n);
  (void)unused;
  _exit(44);
}

static void child_user_masked(void *arg) {
  (void)arg;
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sigemptyset(&sa.sa_mask);
  sigaddset(&sa.sa_mask, SIGUSR1);
  sa.sa_sigaction = user_masked;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  CHECK(sigaction(SIGSEGV, &sa, NULL) == 0);
  weft_main(spawn_null_writer, (void *)16);
}

static void test_user_mask(void) {
  if (CHECK_ASAN)
    return; /* ASan's handler comes first */
  static check_child res;
  check_child_run(child_user_masked, NULL, &res, 60);
  CHECK_EXITED(res, 44);
  CHECK_STR_EQ(res.err, "usr1 blocked, segv reset\n");
}

/* SIGSEGV ignored before weft: a fault still kills the process (the
 * kernel does not let a program ignore a fault it cannot step over). With
 * weft's handler in between, the child must die the same way, not spin
 * (it once did: the handler returned with SIG_IGN still in place, and the
 * faulting instruction ran again and again; it now restores SIG_DFL and
 * returns, so the fault kills the process as it would without weft). */
static void child_ignored(void *arg) {
  (void)arg;
  signal(SIGSEGV, SIG_IGN);
  weft_main(spawn_null_writer, NULL);
}

static void child_ignored_no_weft(void *arg) {
  (void)arg;
  signal(SIGSEGV, SIG_IGN);
  *(volatile char *)bad_ptr = 1;
}

static void test_ignored(void) {
  if (CHECK_ASAN)
    return; /* ASan keeps its own SIGSEGV handler whatever we ask */
  static check_child res;
  check_child_run(child_ignored_no_weft, NULL, &res, 10);
  CHECK_KILLED_BY(res, SIGSEGV); /* the baseline, without weft */
  check_child_run(child_ignored, NULL, &res, 10);
  CHECK_NOT_CONTAINS(res.err, "weft:");
  CHECK_KILLED_BY(res, SIGSEGV);
}

/* A SIGSEGV sent with kill(), not a fault: with no handler before weft it
 * kills the process as it would without weft (it was once swallowed, and
 * weft's handler was gone after it); ignored before weft, it is ignored,
 * and a later overflow is still reported. */
static void child_sent(void *arg) {
  (void)arg;
  weft_loop *loop = weft_loop_new(NULL); /* installs weft's handler */
  CHECK(loop != NULL);
  kill(getpid(), SIGSEGV);
  fprintf(stderr, "still alive after kill(SIGSEGV)\n");
  _exit(0);
}

static void child_sent_ignored(void *arg) {
  signal(SIGSEGV, SIG_IGN);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop != NULL);
  kill(getpid(), SIGSEGV);
  weft_loop_free(loop);
  child_task_overflow(arg);
}

static void test_sent(void) {
  if (CHECK_ASAN)
    return; /* ASan's handler comes before weft's and reports any SEGV */
  static check_child res;
  check_child_run(child_sent, NULL, &res, 10);
  CHECK_KILLED_BY(res, SIGSEGV);
  check_quiet(res.err);
  static const task_case deep = {"deep", 65536, 64};
  check_child_run(child_sent_ignored, (void *)&deep, &res, 60);
  char want[4352];
  snprintf(want, sizeof want,
           "weft: task %s \"deep\" overflowed its 64 KiB stack\n", res.data);
  check_message(&res, want);
}

int main(int argc, char **argv) {
  if (RUNNING_ON_VALGRIND)
    SKIP("valgrind handles SIGSEGV and stack switches its own way");
  /* A core dump per child would be slow and litter the build tree. */
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  (void)argc;
  (void)argv;
  test_task_overflow();
  test_gen_overflow();
  test_gen_in_task_overflow();
  test_null_write();
  test_other_guard();
  test_main_stack_overflow();
  test_user_handler();
  test_user_mask();
  test_ignored();
  test_sent();
  printf("ok\n");
  return 0;
}
