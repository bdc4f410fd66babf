/*
 * Out-of-memory injection through weft_replace_allocator (SQLite's way):
 * an allocator that fails its n-th call, for n = 1, 2, 3, ... until the
 * operation succeeds. At every n the failure must be clean (NULL with
 * errno ENOMEM, or -ENOMEM; a task or generator that failed to start never
 * runs) and leak nothing: the allocator counts what is outstanding, and
 * once everything is freed (and the thread's stack pool trimmed, which
 * weft_loop_free does and weft__stack_trim does for generators) the count
 * is back to 0.
 *
 * Covered: weft_loop_new, weft_spawn_opts with a name (first spawn on a
 * loop, and one that finds the record slab and stack pool in place),
 * weft_gen_new, weft_main, a weft_main whose body spawns enough named
 * tasks and generators to grow the record slabs and stack chunks, and one
 * that arms timers and callbacks and talks through two streams.
 */
#include "backend.h" /* OP_FILE_READ */
#include "fault.h"
#include "stack.h"
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- the counting, failing allocator --------------------------------- */
static long calls;       /* calls to malloc or realloc since arm() */
static long fail_at;     /* the call that fails; 0: none */
static long outstanding; /* blocks handed out and not freed */
static long failures;    /* how many calls were failed */

/* Atomic: the layer-5 sweep makes calls from other threads too. */
static int fail_now(void) {
  long at = __atomic_load_n(&fail_at, __ATOMIC_RELAXED);
  if (at && __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED) == at) {
    __atomic_add_fetch(&failures, 1, __ATOMIC_RELAXED);
    return 1;
  }
  return 0;
}

static void *t_malloc(size_t n) {
  if (fail_now())
    return NULL;
  void *p = malloc(n);
  if (p)
    __atomic_add_fetch(&outstanding, 1, __ATOMIC_RELAXED);
  return p;
}

static void *t_realloc(void *p, size_t n) {
  if (fail_now())
    return NULL;
  void *q = realloc(p, n);
  if (q && !p)
    __atomic_add_fetch(&outstanding, 1, __ATOMIC_RELAXED);
  return q;
}

static void t_free(void *p) {
  if (p)
    __atomic_sub_fetch(&outstanding, 1, __ATOMIC_RELAXED);
  free(p);
}

static void arm(long n) {
  __atomic_store_n(&calls, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&failures, 0, __ATOMIC_RELAXED);
  __atomic_store_n(&fail_at, n, __ATOMIC_RELAXED);
}

/* Returns whether the armed failure happened. */
static int disarm(void) {
  __atomic_store_n(&fail_at, 0, __ATOMIC_RELAXED);
  return __atomic_load_n(&failures, __ATOMIC_RELAXED) > 0;
}

static void check_no_leak(const char *what, long n) {
  weft__stack_trim();
  long left = __atomic_load_n(&outstanding, __ATOMIC_RELAXED);
  if (left != 0)
    fprintf(stderr, "%s, failing call %ld: %ld block(s) leaked\n", what, n,
            left);
  CHECK_EQ(left, 0);
}

#define MAX_POINTS 10000

/* ---- weft_loop_new ---------------------------------------------------- */
static long cover_loop_new(void) {
  for (long n = 1; n < MAX_POINTS; n++) {
    arm(n);
    errno = 0;
    weft_loop *loop = weft_loop_new(NULL);
    int failed = disarm();
    if (!loop) {
      CHECK(failed);
      CHECK_EQ(errno, ENOMEM);
      CHECK(weft_loop_current() == NULL);
      check_no_leak("weft_loop_new", n);
      continue;
    }
    CHECK(!failed); /* it succeeded: no call was failed */
    CHECK_PTR_EQ(weft_loop_current(), loop);
    weft_loop_free(loop);
    check_no_leak("weft_loop_new", n);
    return n - 1;
  }
  CHECK(!"weft_loop_new never succeeded");
  return 0;
}

/* ---- weft_spawn_opts ------------------------------------------------- */
static int ran;

static void *body(void *arg) {
  ran++;
  return arg;
}

/* `warm`: spawn one task first (unarmed), so the slab and the stack pool
 * exist and only the name's copy can fail. */
static long cover_spawn(int warm) {
  const char *what = warm ? "weft_spawn_opts (warm)" : "weft_spawn_opts";
  for (long n = 1; n < MAX_POINTS; n++) {
    weft_loop *loop = weft_loop_new(NULL);
    CHECK(loop != NULL);
    if (warm) {
      weft_task *w = weft_spawn(body, NULL);
      CHECK(w != NULL);
      CHECK_EQ(weft_loop_run(loop), 0);
      CHECK_EQ(weft_join(w, NULL), 0);
    }
    ran = 0;
    weft_task_opts o = {.name = "named task"};
    arm(n);
    errno = 0;
    weft_task *t = weft_spawn_opts(body, (void *)(intptr_t)n, &o);
    int failed = disarm();
    if (!t) {
      CHECK(failed);
      CHECK_EQ(errno, ENOMEM);
      CHECK_EQ(weft_loop_run(loop), 0); /* nothing to run */
      CHECK_EQ(ran, 0);                 /* the task never ran */
      weft_loop_free(loop);
      check_no_leak(what, n);
      continue;
    }
    CHECK(!failed);
    CHECK_STR_EQ(weft_task_name(t), "named task");
    CHECK_EQ(weft_loop_run(loop), 0);
    void *r;
    CHECK_EQ(weft_join(t, &r), 0);
    CHECK_EQ((intptr_t)r, n);
    CHECK_EQ(ran, 1);
    weft_loop_free(loop);
    check_no_leak(what, n);
    return n - 1;
  }
  CHECK(!"weft_spawn_opts never succeeded");
  return 0;
}

/* ---- weft_gen_new ---------------------------------------------------- */
static void *gen_body(weft_gen *g, void *arg) {
  ran++;
  CHECK_EQ(weft_gen_yield(g, arg, NULL), 0);
  return NULL;
}

static long cover_gen_new(void) {
  for (long n = 1; n < MAX_POINTS; n++) {
    ran = 0;
    arm(n);
    errno = 0;
    weft_gen *g = weft_gen_new(gen_body, (void *)(intptr_t)n, 0);
    int failed = disarm();
    if (!g) {
      CHECK(failed);
      CHECK_EQ(errno, ENOMEM);
      CHECK_EQ(ran, 0);
      check_no_leak("weft_gen_new", n);
      continue;
    }
    CHECK(!failed);
    void *out;
    CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
    CHECK_EQ((intptr_t)out, n);
    CHECK_EQ(weft_gen_send(g, NULL, &out), 0);
    CHECK_EQ(ran, 1);
    CHECK_EQ(weft_gen_free(g), 0);
    check_no_leak("weft_gen_new", n);
    return n - 1;
  }
  CHECK(!"weft_gen_new never succeeded");
  return 0;
}

/* ---- weft_main ------------------------------------------------------- */
static int main_body(void *arg) {
  ran++;
  return (int)(intptr_t)arg;
}

static long cover_main(void) {
  for (long n = 1; n < MAX_POINTS; n++) {
    ran = 0;
    arm(n);
    int rc = weft_main(main_body, (void *)7);
    int failed = disarm();
    if (rc != 7) {
      CHECK(failed);
      CHECK_EQ(rc, -ENOMEM);
      CHECK_EQ(ran, 0); /* fn never ran */
      CHECK(weft_loop_current() == NULL);
      check_no_leak("weft_main", n);
      continue;
    }
    CHECK(!failed);
    CHECK_EQ(ran, 1);
    check_no_leak("weft_main", n);
    return n - 1;
  }
  CHECK(!"weft_main never succeeded");
  return 0;
}

/* ---- a busier program ------------------------------------------------
 * The body spawns 100 named tasks (two record slabs, several stack
 * chunks), each of which runs a generator of its own; at the first
 * failure it stops spawning, joins what it has and reports -ENOMEM. */
#define BUSY_TASKS 100

static void *busy_gen(weft_gen *g, void *arg) {
  for (intptr_t i = 0; i < 3; i++)
    if (weft_gen_yield(g, (void *)i, NULL) < 0)
      break;
  return arg;
}

static void *busy_task(void *arg) {
  weft_gen *g = weft_gen_new(busy_gen, arg, 32768);
  if (!g) {
    CHECK_EQ(errno, ENOMEM);
    return (void *)(intptr_t)-ENOMEM;
  }
  void *out;
  int n = 0;
  while (weft_gen_send(g, NULL, &out) == 1) {
    n++;
    CHECK_EQ(weft_yield(), 0);
  }
  CHECK_EQ(n, 3);
  CHECK_PTR_EQ(out, arg);
  CHECK_EQ(weft_gen_free(g), 0);
  return arg;
}

static int busy_main(void *arg) {
  (void)arg;
  weft_task *t[BUSY_TASKS];
  int spawned = 0, rc = 0;
  for (; spawned < BUSY_TASKS; spawned++) {
    char name[32];
    snprintf(name, sizeof name, "busy-%d", spawned);
    weft_task_opts o = {.name = name, .stack_size = 65536};
    errno = 0;
    t[spawned] =
        weft_spawn_opts(busy_task, (void *)(intptr_t)(spawned + 1), &o);
    if (!t[spawned]) {
      CHECK_EQ(errno, ENOMEM);
      rc = -ENOMEM;
      break;
    }
  }
  for (int i = 0; i < spawned; i++) {
    void *r;
    CHECK_EQ(weft_join(t[i], &r), 0);
    if ((intptr_t)r == -ENOMEM)
      rc = -ENOMEM;
    else
      CHECK_EQ((intptr_t)r, i + 1);
  }
  return rc;
}

/* Under TSan every 8th point: each run creates 200 fibers and their
 * stacks, and the whole sweep took 85 s there (0.2 s natively); ASan and
 * valgrind take every point. */
static long cover_busy(void) {
  for (long n = 1; n < MAX_POINTS; n += CHECK_TSAN ? 8 : 1) {
    arm(n);
    int rc = weft_main(busy_main, NULL);
    int failed = disarm();
    if (rc != 0) {
      CHECK(failed);
      CHECK_EQ(rc, -ENOMEM);
      check_no_leak("busy weft_main", n);
      continue;
    }
    CHECK(!failed);
    check_no_leak("busy weft_main", n);
    return n - 1;
  }
  CHECK(!"the busy program never succeeded");
  return 0;
}

/* ---- the loop's own allocations ----------------------------------------
 * Timers (enough to grow the record chunks and the heap), callbacks
 * (enough to grow the ring), an fd table, a stream each way over a
 * socketpair with a writer task: at the first failure the body stops,
 * cancels what it armed and reports -ENOMEM. Nothing may leak, fds
 * included. */
#include <sys/socket.h>
#define IO_TIMERS    1500
#define IO_CALLBACKS 300

static int fired;
static void count_cb(void *arg) {
  (void)arg;
  fired++;
}

static void *io_writer(void *arg) {
  weft_stream *w = arg;
  for (int i = 0; i < 3; i++)
    if (weft_stream_write(w, "line\n", 5) != 5)
      break;
  weft_stream_close(w);
  return NULL;
}

static int io_main(void *arg) {
  (void)arg;
  static weft_timer *t[IO_TIMERS];
  int armed = 0, rc = 0;
  for (; armed < IO_TIMERS; armed++)
    if (!(t[armed] = weft_call_later(WEFT_MS(1 + armed % 7), count_cb, NULL))) {
      CHECK_EQ(errno, ENOMEM);
      rc = -ENOMEM;
      break;
    }
  for (int i = 0; rc == 0 && i < IO_CALLBACKS; i++)
    if ((rc = weft_call_soon(count_cb, NULL)) < 0)
      CHECK_EQ(rc, -ENOMEM);
  if (rc < 0) {
    for (int i = 0; i < armed; i++)
      CHECK_EQ(weft_timer_cancel(t[i]), 0);
    return rc;
  }
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  weft_stream *r = weft_stream_new(sv[0], 256);
  weft_stream *w = weft_stream_new(sv[1], 256);
  weft_task *wt = r && w ? weft_spawn(io_writer, w) : NULL;
  if (!wt) {
    CHECK_EQ(errno, ENOMEM);
    if (r)
      weft_stream_close(r);
    else
      weft_close(sv[0]);
    if (w)
      weft_stream_close(w);
    else
      weft_close(sv[1]);
    return -ENOMEM;
  }
  char line[16];
  int lines = 0;
  ssize_t n;
  while ((n = weft_stream_readline(r, line, sizeof line)) > 0)
    lines++;
  CHECK_EQ(weft_join(wt, NULL), 0);
  weft_stream_close(r);
  if (n == -ENOMEM)
    return -ENOMEM; /* the fd table could not grow */
  CHECK_EQ(n, 0);
  CHECK_EQ(lines, 3);
  CHECK_EQ(weft_sleep(WEFT_MS(10)), 0);
  CHECK_EQ(fired, IO_TIMERS + IO_CALLBACKS);
  return 0;
}

static long cover_io(void) {
  int fds = check_fd_count();
  for (long n = 1; n < MAX_POINTS; n++) {
    fired = 0;
    arm(n);
    int rc = weft_main(io_main, NULL);
    int failed = disarm();
    CHECK_EQ(check_fd_count(), fds);
    if (rc != 0) {
      CHECK(failed);
      CHECK_EQ(rc, -ENOMEM);
      check_no_leak("timers, callbacks, streams", n);
      continue;
    }
    CHECK(!failed);
    check_no_leak("timers, callbacks, streams", n);
    return n - 1;
  }
  CHECK(!"the I/O program never succeeded");
  return 0;
}

/* ---- what is built on the loop -------------------------------------------
 * Futures with callbacks, a group, a buffered channel and a select, an
 * actor, the pool (run_in_thread, submit), a numeric getaddrinfo, a file
 * written and read back, a call from another thread: at the first -ENOMEM
 * (or NULL with ENOMEM) the body undoes what it made and returns -ENOMEM.
 * Nothing may leak. */
#include <fcntl.h>
#include <netdb.h>
#include <pthread.h>
#include <unistd.h>

static void *double_it(void *arg) { return (void *)((intptr_t)arg * 2); }
static void on_done(weft_future *f, void *arg) {
  (void)f;
  (*(int *)arg)++;
}
static void *child(void *arg) { return arg; }
static void *echo_actor(void *arg) {
  (void)arg;
  void *m;
  while (weft_actor_recv(&m) == 0 && m != NULL)
    ;
  return NULL;
}
static void ts_cb(void *arg) { (*(int *)arg)++; }
static int ts_failed; /* atomic: the thread's call failed */
static void *ts_thread(void *arg) {
  weft_loop *loop = arg;
  if (weft_call_soon_threadsafe(loop, ts_cb, &fired) < 0)
    __atomic_store_n(&ts_failed, 1, __ATOMIC_RELEASE);
  weft_loop_unref(loop);
  return NULL;
}

static char l5_path[64];

#define FAIL_IF(cond)                                                          \
  do {                                                                         \
    if (cond) {                                                                \
      rc = -ENOMEM;                                                            \
      goto out;                                                                \
    }                                                                          \
  } while (0)

static int l5_cbs; /* the done-callback runs from the loop, maybe after
                      l5_main has returned: not on its stack */

static int l5_main(void *unused) {
  (void)unused;
  int rc = 0, fd = -1;
  weft_future *f = NULL, *g = NULL;
  weft_group *grp = NULL;
  weft_chan *c = NULL, *c2 = NULL;
  weft_actor *a = NULL;
  void *v;
  /* futures */
  f = weft_future_new();
  FAIL_IF(!f);
  FAIL_IF(weft_future_add_done_callback(f, on_done, &l5_cbs) < 0);
  CHECK_EQ(weft_future_set_result(f, (void *)1), 0);
  CHECK_EQ(weft_await(f, &v), 0);
  /* a group of two children */
  grp = weft_group_new();
  FAIL_IF(!grp);
  for (int i = 0; i < 2; i++)
    FAIL_IF(!weft_group_spawn(grp, child, NULL));
  int grc = weft_group_wait(grp);
  FAIL_IF(grc == -ENOMEM);
  CHECK_EQ(grc, 0);
  /* channels and select */
  c = weft_chan_new(sizeof(int), 4);
  c2 = weft_chan_new(sizeof(int), 0);
  FAIL_IF(!c || !c2);
  int x = 7, y = 0;
  CHECK_EQ(weft_chan_send(c, &x), 0);
  weft_select_case cases[12];
  for (int i = 0; i < 12; i++)
    cases[i] = (weft_select_case){i == 11 ? c : c2, WEFT_RECV, &y, 0};
  int k = weft_select(cases, 12, 0); /* over 8 cases: allocates */
  FAIL_IF(k == -ENOMEM);
  CHECK_EQ(k, 11);
  CHECK_EQ(y, 7);
  /* an actor */
  a = weft_actor_spawn("l5", echo_actor, NULL);
  FAIL_IF(!a);
  int src = weft_actor_send("l5", (void *)1);
  FAIL_IF(src == -ENOMEM);
  CHECK_EQ(src, 0);
  src = weft_actor_send_to(a, NULL); /* stop */
  FAIL_IF(src == -ENOMEM);
  a = NULL;
  /* the pool */
  int prc = weft_run_in_thread(double_it, (void *)21, &v);
  FAIL_IF(prc == -ENOMEM);
  CHECK_EQ(prc, 0);
  CHECK_EQ((intptr_t)v, 42);
  g = weft_submit(double_it, (void *)2);
  FAIL_IF(!g);
  CHECK_EQ(weft_await(g, &v), 0);
  CHECK_EQ((intptr_t)v, 4);
  /* a numeric lookup */
  struct addrinfo *res;
  struct addrinfo hints = {.ai_flags = AI_NUMERICHOST,
                           .ai_socktype = SOCK_STREAM};
  int arc = weft_getaddrinfo("127.0.0.1", "80", &hints, &res);
  FAIL_IF(arc == -ENOMEM);
  CHECK_EQ(arc, 0);
  freeaddrinfo(res);
  /* a file */
  fd = weft_file_open(l5_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
  FAIL_IF(fd == -ENOMEM);
  CHECK_GE(fd, 0);
  ssize_t n = weft_file_write(fd, "abc", 3, 0);
  FAIL_IF(n == -ENOMEM);
  CHECK_EQ(n, 3);
  char buf[4] = {0};
  n = weft_file_read(fd, buf, 3, 0);
  FAIL_IF(n == -ENOMEM);
  CHECK_EQ(n, 3);
  /* a call from another thread */
  weft_loop *loop = weft_loop_current();
  fired = 0;
  ts_failed = 0;
  weft_loop_ref(loop);
  pthread_t th;
  CHECK_EQ(pthread_create(&th, NULL, ts_thread, loop), 0);
  int src2 = 0;
  while (fired == 0 && !__atomic_load_n(&ts_failed, __ATOMIC_ACQUIRE) &&
         (src2 = weft_sleep(WEFT_MS(1))) == 0)
    ;
  CHECK_EQ(pthread_join(th, NULL), 0);
  FAIL_IF(src2 == -ENOMEM || ts_failed);
  CHECK_EQ(src2, 0);
out:
  if (fd >= 0) {
    int crc = weft_file_close(fd);
    if (crc == -ENOMEM) {
      close(fd); /* the close could not be queued: do it here */
      rc = -ENOMEM;
    }
  }
  if (a)
    weft_actor_send_to(a, NULL); /* an unbounded send: never waits */
  weft_chan_free(c);
  weft_chan_free(c2);
  if (grp)
    weft_group_free(grp);
  weft_future_release(f);
  weft_future_release(g);
  return rc;
}

static long cover_layer5(void) {
  snprintf(l5_path, sizeof l5_path, "/tmp/weft-test-alloc-%d", (int)getpid());
  int fds = check_fd_count();
  for (long n = 1; n < MAX_POINTS; n++) {
    arm(n);
    int rc = weft_main(l5_main, NULL);
    int failed = disarm();
    CHECK_EQ(check_fd_count(), fds);
    if (rc != 0) {
      CHECK(failed);
      CHECK_EQ(rc, -ENOMEM);
      check_no_leak("futures, groups, channels, actors, pool, files", n);
      continue;
    }
    CHECK(!failed);
    check_no_leak("futures, groups, channels, actors, pool, files", n);
    unlink(l5_path);
    return n - 1;
  }
  CHECK(!"the layer-5 program never succeeded");
  return 0;
}

/* A job on the pool inside a scope with a deadline, the loop's first timer:
 * the deadline's timer (and the heap it goes in) is allocated too, and
 * failing it must leave no job queued. (It once failed in the park, after
 * the job was queued: the file call freed its record and the job then read
 * into it, and freed it again.) */
static int dl_fd = -1;

/* The file's pages are cached, and epoll and poll would read them on the
 * loop's thread (file.c): the hook says they are not, so the reads are
 * jobs. */
static int not_cached(int kind, int fd, size_t len, void *arg) {
  (void)fd, (void)len, (void)arg;
  return kind == OP_FILE_READ ? EAGAIN : 0;
}

static int dl_main(void *arg) {
  (void)arg;
  char buf[4] = {0};
  ssize_t n = weft_file_read(dl_fd, buf, 3, 0); /* the pool, the job cache */
  if (n == -ENOMEM)
    return -ENOMEM;
  CHECK_EQ(n, 3);
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_SEC(60));
  n = weft_file_read(dl_fd, buf, 3, 0);
  CHECK_EQ(weft_scope_exit(&s), 0);
  if (n == -ENOMEM)
    return -ENOMEM;
  CHECK_EQ(n, 3);
  CHECK_EQ(memcmp(buf, "abc", 3), 0);
  return 0;
}

static long cover_deadline_job(void) {
  char p[64];
  snprintf(p, sizeof p, "/tmp/weft-test-alloc-dl-%d", (int)getpid());
  dl_fd = open(p, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  CHECK_GE(dl_fd, 0);
  CHECK_EQ(write(dl_fd, "abc", 3), 3);
  CHECK_EQ(unlink(p), 0);
  weft__fault_hook = not_cached;
  for (long n = 1; n < MAX_POINTS; n++) {
    arm(n);
    int rc = weft_main(dl_main, NULL);
    int failed = disarm();
    check_no_leak("a file read inside a deadline", n);
    if (rc != 0) {
      CHECK(failed);
      CHECK_EQ(rc, -ENOMEM);
      continue;
    }
    CHECK(!failed);
    CHECK_EQ(close(dl_fd), 0);
    weft__fault_hook = NULL;
    return n - 1;
  }
  CHECK(!"the deadline program never succeeded");
  return 0;
}

/* ---- replacing the allocator with no weft object alive ---------------
 * weft.h allows it, but the thread's stack pool outlives every object (it
 * stays until a loop is freed or the thread exits): its records were once
 * freed with the new allocator's free, which then saw blocks it never made
 * (a crash with any allocator that is not malloc underneath). */
#define B_TAG 0xB10CB10CB10CB10Cull
static long b_foreign; /* frees of blocks allocator B did not make */

static void *b_malloc(size_t n) {
  uint64_t *p = malloc(n + 16);
  if (!p)
    return NULL;
  p[0] = B_TAG;
  return p + 2;
}

static void b_free(void *q) {
  if (!q)
    return;
  uint64_t *p = (uint64_t *)q - 2;
  if (p[0] != B_TAG) {
    b_foreign++;
    return; /* not ours: leave it be rather than corrupt the heap */
  }
  p[0] = 0;
  free(p);
}

static void *b_realloc(void *q, size_t n) {
  if (!q)
    return b_malloc(n);
  uint64_t *p = (uint64_t *)q - 2;
  if (p[0] != B_TAG) {
    b_foreign++;
    return NULL;
  }
  p = realloc(p, n + 16);
  return p ? p + 2 : NULL;
}

static void *idle_gen(weft_gen *g, void *arg) {
  (void)g;
  return arg;
}

static void test_replace_when_idle(void) {
  weft_gen *g = weft_gen_new(idle_gen, NULL, 0); /* maps the pool */
  CHECK(g != NULL);
  void *v;
  CHECK_EQ(weft_gen_send(g, NULL, &v), 0);
  CHECK_EQ(weft_gen_free(g), 0);
  long before = outstanding; /* the pool's records, from t_malloc */
  CHECK_GE(before, 1);
  CHECK_EQ(weft_replace_allocator(b_malloc, b_realloc, b_free), 0);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop != NULL);
  weft_loop_free(loop); /* trims the pool: its records go to t_free */
  CHECK_EQ(b_foreign, 0);
  CHECK_EQ(outstanding, 0);
}

int main(void) {
  /* io_uring's provided buffers, when asked for, fall back to a recv per
   * call if their memory cannot be had: a failed allocation with no error,
   * by design, which the sweeps below would take for a lost one. */
  unsetenv("WEFT_URING_PBUF");
  /* Before anything else of weft, as weft.h asks. */
  CHECK_EQ(weft_replace_allocator(NULL, t_realloc, t_free), -EINVAL);
  CHECK_EQ(weft_replace_allocator(t_malloc, NULL, t_free), -EINVAL);
  CHECK_EQ(weft_replace_allocator(t_malloc, t_realloc, NULL), -EINVAL);
  CHECK_EQ(weft_replace_allocator(t_malloc, t_realloc, t_free), 0);

  long total = 0, n;
  n = cover_loop_new();
  printf("weft_loop_new: %ld failure point(s)\n", n);
  CHECK_GE(n, 1);
  total += n;
  n = cover_spawn(0);
  printf("weft_spawn_opts (first on its loop, named): %ld failure point(s)\n",
         n);
  CHECK_GE(n, 2); /* at least the record slab and the name */
  total += n;
  n = cover_spawn(1);
  printf("weft_spawn_opts (warm, named): %ld failure point(s)\n", n);
  CHECK_GE(n, 1); /* the name */
  total += n;
  n = cover_gen_new();
  printf("weft_gen_new: %ld failure point(s)\n", n);
  CHECK_GE(n, 1);
  total += n;
  n = cover_main();
  printf("weft_main: %ld failure point(s)\n", n);
  CHECK_GE(n, 3); /* the loop, the record slab, the name "main" */
  total += n;
  n = cover_io();
  printf("timers, callbacks, streams: %ld failure point(s)\n", n);
  CHECK_GE(n, 4); /* timer chunks, heap, ring, fd table, streams */
  total += n;
  n = cover_busy();
  printf("weft_main spawning %d named tasks with generators: %ld failure "
         "point(s)\n",
         BUSY_TASKS, n);
  CHECK_GE(n, 4);
  total += n;
  n = cover_layer5();
  printf("futures, a group, channels and select, an actor, the pool, a "
         "lookup, a file, a thread's call: %ld failure point(s)\n",
         n);
  CHECK_GE(n, 8);
  total += n;
  n = cover_deadline_job();
  printf("a file read inside a deadline (the loop's first timer): %ld "
         "failure point(s)\n",
         n);
  CHECK_GE(n, 3); /* the job's record, the pool, the deadline's timer */
  total += n;
  printf("%ld failure points covered, no leak at any\n", total);
  test_replace_when_idle();
  printf("ok\n");
  return 0;
}
