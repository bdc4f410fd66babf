/*
 * ASan follows weft's stack switches (the fiber annotations in src/ctx.c):
 *
 *  - an out-of-bounds write to a heap buffer inside a task is reported as
 *    a heap-buffer-overflow; one to an array on a task's stack, or on a
 *    generator's, as a stack-buffer-overflow (each in a child process);
 *  - a write into the frame of a task that has ended, as a
 *    use-after-poison (the top of a stack in the pool is poisoned);
 *  - a clean program that switches a lot (many tasks, generators inside
 *    tasks, deep frames, stacks reused from the pool, a generator that
 *    ignored close, tasks dropped unfinished by weft_loop_free) gets no
 *    report at all.
 *
 * Only meaningful in the ASan build: skipped elsewhere.
 */
#include "weft.h"

#include "check.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if CHECK_ASAN
#include <sanitizer/asan_interface.h>
#endif

static volatile int oob_index = 16; /* one past a 16-byte buffer */

/* UBSan (in the same build) would catch these writes first, as "store with
 * insufficient space": keep it out of the two functions that err on
 * purpose, so that ASan's report is the one we see. */
#define NO_UBSAN __attribute__((no_sanitize("undefined")))

/* ---- real errors are reported ---------------------------------------- */
NO_UBSAN static void *heap_oob(void *arg) {
  (void)arg;
  char *p = malloc(16);
  CHECK(p != NULL);
  ((volatile char *)p)[oob_index] = 1; /* volatile: not a dead store */
  free(p);
  return NULL;
}

NO_UBSAN __attribute__((noinline)) static int stack_oob_frame(void) {
  volatile char a[16];
  for (int i = 0; i < 16; i++)
    a[i] = (char)i;
  a[oob_index] = 1;
  return a[3];
}

static void *stack_oob(void *arg) {
  (void)arg;
  weft_yield(); /* after a switch back onto this stack, too */
  stack_oob_frame();
  return NULL;
}

static void *gen_stack_oob(weft_gen *g, void *arg) {
  (void)arg;
  weft_gen_yield(g, NULL, NULL);
  stack_oob_frame();
  return NULL;
}

static int run_task(void *fn) {
  weft_task_opts o = {.name = "bad"};
  weft_task *t = weft_spawn_opts((void *(*)(void *))fn, NULL, &o);
  CHECK(t != NULL);
  CHECK_EQ(weft_join(t, NULL), 0);
  return 0;
}

static void child_task(void *fn) {
  weft_main(run_task, fn);
  fprintf(stderr, "no report\n");
}

static void child_gen(void *arg) {
  (void)arg;
  weft_gen *g = weft_gen_new(gen_stack_oob, NULL, 0);
  CHECK(g != NULL);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  weft_gen_send(g, NULL, NULL);
  fprintf(stderr, "no report\n");
}

/* A pointer into the frame of a task that has ended: its stack is back in
 * the pool, whose top is poisoned, so the write is reported (before a new
 * task takes the stack and hides it). A cancelled parent's join returns at
 * once, and a child holding its locals writes into them so: a newcomer's
 * proxy did, and only valgrind saw it. */
static int *volatile dead_local;

__attribute__((noinline)) static void *leaks_local(void *arg) {
  (void)arg;
  int local = 1;
  dead_local = &local;
  __asm__ volatile("" : : "r"(&local) : "memory");
  return NULL;
}

static int run_dead_frame(void *arg) {
  (void)arg;
  weft_task *t = weft_spawn(leaks_local, NULL);
  CHECK(t != NULL);
  CHECK_EQ(weft_join(t, NULL), 0);
  *dead_local = 2; /* the frame is gone */
  return 0;
}

static void child_dead_frame(void *arg) {
  (void)arg;
  weft_main(run_dead_frame, NULL);
  fprintf(stderr, "no report\n");
}

static void expect_report(const check_child *res, const char *kind) {
  CHECK_CONTAINS(res->err, "AddressSanitizer");
  CHECK_CONTAINS(res->err, kind);
  CHECK_NOT_CONTAINS(res->err, "no report");
  CHECK(!(WIFEXITED(res->status) && WEXITSTATUS(res->status) == 0));
}

static void test_reports(void) {
  static check_child res;
  check_child_run(child_task, (void *)heap_oob, &res, 60);
  expect_report(&res, "heap-buffer-overflow");
  check_child_run(child_task, (void *)stack_oob, &res, 60);
  expect_report(&res, "stack-buffer-overflow");
  check_child_run(child_gen, NULL, &res, 60);
  expect_report(&res, "stack-buffer-overflow");
  check_child_run(child_dead_frame, NULL, &res, 60);
  expect_report(&res, "use-after-"); /* -poison, or -return (fake stacks) */
}

/* ---- a clean program gets no report ---------------------------------- */
__attribute__((noinline)) static unsigned deep(unsigned n) {
  char buf[512];
  memset(buf, (int)n, sizeof buf);
  __asm__ volatile("" : : "r"(buf) : "memory"); /* kept on the stack */
  if (n == 0)
    return buf[7];
  weft_yield(); /* switch out with many instrumented frames live */
  return deep(n - 1) + buf[100];
}

static void *counter_gen(weft_gen *g, void *arg) {
  intptr_t n = (intptr_t)arg;
  char local[64];
  for (intptr_t i = 0; i < n; i++) {
    snprintf(local, sizeof local, "%ld", (long)i);
    CHECK_EQ(weft_gen_yield(g, (void *)(intptr_t)strlen(local), NULL), 0);
    weft_yield(); /* a task switch while inside the generator */
  }
  return (void *)n;
}

static void *worker(void *arg) {
  intptr_t id = (intptr_t)arg;
  deep((unsigned)(id % 20));
  weft_gen *g = weft_gen_new(counter_gen, (void *)(intptr_t)5, 0);
  CHECK(g != NULL);
  void *out;
  intptr_t total = 0;
  int rc;
  while ((rc = weft_gen_send(g, NULL, &out)) == 1)
    total += (intptr_t)out;
  CHECK_EQ(rc, 0);
  CHECK_EQ((intptr_t)out, 5);
  CHECK_EQ(total, 5);
  CHECK_EQ(weft_gen_free(g), 0);
  return (void *)(id * 2);
}

/* A generator that ignores close: its stack goes back to the pool with its
 * frames still on it, and the next user of that stack must not trip over
 * what ASan remembered of them. */
__attribute__((noinline)) static void stubborn_frame(weft_gen *g) {
  char big[2048];
  memset(big, 1, sizeof big);
  weft_gen_yield(g, big, NULL);
  weft_gen_yield(g, big, NULL); /* after close: never returns */
}

static void *stubborn(weft_gen *g, void *arg) {
  (void)arg;
  stubborn_frame(g);
  return NULL;
}

/* Something on the stack that is not instrumented, as a library built
 * without ASan would have: its buffer is checked by ASan's interceptors
 * against whatever ASan thinks of that stack memory. */
__attribute__((no_sanitize_address, noinline)) static size_t
uninstrumented_frame(void) {
  char buf[4096];
  memset(buf, 0, sizeof buf);
  snprintf(buf, sizeof buf, "%s", "interceptor checks this buffer");
  return strlen(buf);
}

static void *reuser(weft_gen *g, void *arg) {
  (void)g;
  (void)arg;
  return (void *)uninstrumented_frame();
}

static int clean_main(void *arg) {
  (void)arg;
  enum { N = 200 };
  weft_task *t[N];
  for (intptr_t round = 0; round < 3; round++) {
    for (intptr_t i = 0; i < N; i++) {
      t[i] = weft_spawn(worker, (void *)i);
      CHECK(t[i] != NULL);
    }
    for (intptr_t i = 0; i < N; i++) {
      void *r;
      CHECK_EQ(weft_join(t[i], &r), 0);
      CHECK_EQ((intptr_t)r, i * 2);
    }
  }
  return 17;
}

static void *parked_forever(void *arg) {
  (void)arg;
  deep(10);
  for (;;)
    weft_yield();
  return NULL;
}

static void *stopper(void *loop) {
  for (int i = 0; i < 30; i++)
    weft_yield();
  weft_loop_stop(loop);
  return NULL;
}

static void *reuser_task(void *arg) {
  (void)arg;
  return (void *)uninstrumented_frame();
}

static int reuse_main(void *arg) {
  (void)arg;
  enum { N = 11 };
  weft_task *t[N];
  for (int i = 0; i < N; i++)
    CHECK((t[i] = weft_spawn(reuser_task, NULL)) != NULL);
  for (int i = 0; i < N; i++) {
    void *r;
    CHECK_EQ(weft_join(t[i], &r), 0);
    CHECK_EQ((size_t)r, strlen("interceptor checks this buffer"));
  }
  return 0;
}

static void test_clean(void) { CHECK_EQ(weft_main(clean_main, NULL), 17); }

/* A stack given back with frames still on it must not keep ASan's poison
 * of those frames for its next user.
 *
 * BUG (src/stack.c + src/gen.c, src/task.c): a generator that yielded
 * after close (weft_gen_close -> -EPROTO), and tasks that weft_loop_free
 * drops unfinished, give their stacks back to the pool as they are. ASan's
 * shadow still marks the redzones of the frames that were live on them
 * (here: weft__ctx_switch's locals `lo`/`size` from arrived()). The next
 * generator or task on that stack that touches the memory other than
 * through an instrumented frame of its own (an uninstrumented library's
 * buffer checked by an interceptor: memset, snprintf, read ...) gets a
 * false "stack-buffer-underflow". Fix: under WEFT_ASAN unpoison the usable
 * region when a stack is released (ASAN_UNPOISON_MEMORY_REGION(region.lo,
 * region.size)), or when it is reacquired. */
static void child_gen_reuse(void *arg) {
  (void)arg;
  weft_gen *g = weft_gen_new(stubborn, NULL, 0);
  CHECK(g != NULL);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(weft_gen_close(g), -EPROTO);
  CHECK_EQ(weft_gen_free(g), 0);
  /* Same size, LIFO pool: this generator gets the abandoned stack. */
  weft_gen *h = weft_gen_new(reuser, NULL, 0);
  CHECK(h != NULL);
  void *out;
  CHECK_EQ(weft_gen_send(h, NULL, &out), 0);
  CHECK_EQ((size_t)out, strlen("interceptor checks this buffer"));
  CHECK_EQ(weft_gen_free(h), 0);
}

static void child_loop_free_reuse(void *arg) {
  (void)arg;
  /* A stack held elsewhere keeps weft_loop_free's trim from unmapping the
   * pool: the dropped tasks' stacks stay in it, and the next loop's tasks
   * get them back. */
  weft_gen *hold = weft_gen_new(reuser, NULL, 0);
  CHECK(hold != NULL);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop != NULL);
  for (int i = 0; i < 10; i++)
    CHECK_EQ(weft_go(parked_forever, NULL), 0);
  CHECK_EQ(weft_go(stopper, loop), 0);
  CHECK_EQ(weft_loop_run(loop), 1);
  weft_loop_free(loop);
  CHECK_EQ(weft_main(reuse_main, NULL), 0);
  CHECK_EQ(weft_gen_free(hold), 0);
}

static void test_reuse(void) {
  static check_child res;
  int failed = 0;
  check_child_run(child_loop_free_reuse, NULL, &res, 60);
  if (strstr(res.err, "AddressSanitizer") || !WIFEXITED(res.status) ||
      WEXITSTATUS(res.status) != 0) {
    fprintf(stderr,
            "tasks dropped by weft_loop_free, stacks reused: "
            "false report (%s):\n%.3000s\n",
            check_status_str(res.status), res.err);
    failed = 1;
  }
  check_child_run(child_gen_reuse, NULL, &res, 60);
  if (strstr(res.err, "AddressSanitizer") || !WIFEXITED(res.status) ||
      WEXITSTATUS(res.status) != 0) {
    fprintf(stderr,
            "generator that ignored close, stack reused: "
            "false report (%s):\n%.3000s\n",
            check_status_str(res.status), res.err);
    failed = 1;
  }
  CHECK_EQ(failed, 0);
}

int main(void) {
  if (!CHECK_ASAN)
    SKIP("not an ASan build");
  test_reports();
  test_clean();
  test_reuse();
  printf("ok\n");
  return 0;
}
