/*
 * fork(2) and loops (docs/loop.md, "fork"): a child's copies of its
 * parent's loops are not the child's. Freeing one there frees nothing and
 * returns (it used to wait for ever to join the pool's threads, which the
 * child does not have); running one is -EINVAL; a loop that was running
 * in the task that forked stops when that task is done, so the parent's
 * other tasks do not run on in the child; and the child may make loops of
 * its own, pool and all.
 */
#include "weft.h"

#include "check.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>

static void *add_one(void *arg) { return (void *)((intptr_t)arg + 1); }

/* A pool job and a sleep on the calling thread's own new loop. */
static int own_loop(void *arg) {
  (void)arg;
  void *r = NULL;
  if (weft_run_in_thread(add_one, (void *)41, &r) != 0 || (intptr_t)r != 42)
    return 1;
  return weft_sleep(WEFT_MS(1)) == 0 ? 7 : 2;
}

static void *start_pool(void *arg) {
  (void)arg;
  void *r = NULL;
  CHECK_EQ(weft_run_in_thread(add_one, (void *)1, &r), 0);
  CHECK_EQ((intptr_t)r, 2);
  return NULL;
}

static void child_of_idle_loop(void *arg) {
  weft_loop *parents = arg;
  char out[128];
  CHECK_PTR_EQ(weft_loop_current(), NULL); /* the parent's are not its own */
  weft_loop_free(parents);                 /* returns, and frees nothing */
  int run = weft_loop_run(parents);
  weft_task *t =
      weft_spawn_opts(start_pool, NULL, &(weft_task_opts){.loop = parents});
  int spawn_errno = errno;
  int main_rc = weft_main(own_loop, NULL);
  int n = snprintf(out, sizeof out, "run %d spawn %s %d main %d", run,
                   t ? "task" : "NULL", spawn_errno, main_rc);
  CHECK_EQ(write(check_child_fd, out, (size_t)n), n);
}

/* The parent's loop has run a pool job, so its pool has a thread. */
static void test_idle_loop_in_child(void) {
#ifdef WEFT_TEST_EMULATED
  /* qemu-user aborts in a child forked after threads were started (its
   * own assertion, in qemu_plugin_vcpu_init_hook): exit 127. */
  printf("  idle_loop_in_child: not under emulation\n");
  return;
#endif
  check_case("idle_loop_in_child", 30);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_task *t =
      weft_spawn_opts(start_pool, NULL, &(weft_task_opts){.loop = loop});
  CHECK(t);
  weft_detach(t);
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_GE(weft_executor_threads(loop), 1);
  check_child res;
  check_child_run(child_of_idle_loop, loop, &res, 10);
  CHECK_STR_EQ(check_status_str(res.status), "exit 0");
  CHECK_STR_EQ(res.data, "run -22 spawn NULL 22 main 7");
  CHECK_STR_EQ(res.err, "weft: weft_loop_free called off the loop's thread "
                        "(or in a child of fork(2)): the loop is not freed\n");
  /* The parent's loop is still whole: it runs and frees as before. */
  t = weft_spawn_opts(start_pool, NULL, &(weft_task_opts){.loop = loop});
  CHECK(t);
  weft_detach(t);
  CHECK_EQ(weft_loop_run(loop), 0);
  weft_loop_free(loop);
}

/* A task forks while another is ready; each task writes its pid to
 * `seen` when it runs after the fork. */
static int seen[2], child_err[2];
static pid_t child;
static int in_child;

static void *forker(void *arg) {
  (void)arg;
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    in_child = 1;
    dup2(child_err[1], STDERR_FILENO);
    alarm(10);
  } else {
    child = pid;
  }
  pid_t me = getpid();
  CHECK_EQ(write(seen[1], &me, sizeof me), (ssize_t)sizeof me);
  return NULL; /* in the child: back to the parent's scheduler */
}

static void *bystander(void *arg) {
  (void)arg;
  for (int i = 0; i < 3; i++)
    CHECK_EQ(weft_yield(), 0);
  pid_t me = getpid();
  CHECK_EQ(write(seen[1], &me, sizeof me), (ssize_t)sizeof me);
  return NULL;
}

static void test_fork_in_task(void) {
  check_case("fork_in_task", 30);
  CHECK_EQ(pipe(seen), 0);
  CHECK_EQ(pipe(child_err), 0);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_task_opts o = {.loop = loop};
  weft_task *a = weft_spawn_opts(forker, NULL, &o);
  weft_task *b = weft_spawn_opts(bystander, NULL, &o);
  CHECK(a && b);
  weft_detach(a);
  weft_detach(b);
  int rc = weft_loop_run(loop);
  if (in_child) {
    /* The run stopped when the forker ended, and the bystander, still
     * yielding, is left as it was; the loop is the parent's to free. */
    weft_loop_free(loop);
    _exit(rc == -EINVAL ? 0 : 100 - rc);
  }
  CHECK_EQ(rc, 0);
  weft_loop_free(loop);
  close(seen[1]);
  close(child_err[1]);
  int status;
  CHECK_EQ(waitpid(child, &status, 0), child);
  CHECK_STR_EQ(check_status_str(status), "exit 0");
  pid_t pids[8];
  ssize_t n = read(seen[0], pids, sizeof pids);
  CHECK_EQ(n, 3 * (ssize_t)sizeof(pid_t)); /* forker twice, bystander once */
  int parent_seen = 0, child_seen = 0;
  for (int i = 0; i < 3; i++) {
    parent_seen += pids[i] == getpid();
    child_seen += pids[i] == child;
  }
  CHECK_EQ(parent_seen, 2);
  CHECK_EQ(child_seen, 1);
  char err[1024];
  err[check_drain_(child_err[0], err, sizeof err)] = '\0';
  CHECK_STR_EQ(err, "weft: a child of fork(2) does not run its parent's loop: "
                    "weft_loop_run returns -EINVAL\n"
                    "weft: weft_loop_free called off the loop's thread "
                    "(or in a child of fork(2)): the loop is not freed\n");
  close(seen[0]);
  close(child_err[0]);
}

/* A generator is no loop's: the child, its thread taken for a new one as
 * far as loops go, still resumes the generators the forking thread made,
 * on stacks that are the child's memory. */
static void *count_up(weft_gen *g, void *arg) {
  (void)arg;
  for (intptr_t i = 1; i <= 3; i++)
    weft_gen_yield(g, (void *)i, NULL);
  return (void *)99;
}

static void child_resumes(void *arg) {
  weft_gen *g = arg;
  char out[64];
  void *v = NULL;
  int rc = weft_gen_send(g, NULL, &v);
  int n = snprintf(out, sizeof out, "send %d value %d", rc, (int)(intptr_t)v);
  weft_gen_free(g);
  CHECK_EQ(write(check_child_fd, out, (size_t)n), n);
}

static void test_generator_in_child(void) {
  check_case("generator_in_child", 30);
  weft_loop_free(weft_loop_new(NULL)); /* the fork handler is in place */
  weft_gen *g = weft_gen_new(count_up, NULL, 0);
  CHECK(g);
  void *v = NULL;
  CHECK_EQ(weft_gen_send(g, NULL, &v), 1);
  CHECK_EQ((intptr_t)v, 1);
  check_child res;
  check_child_run(child_resumes, g, &res, 10);
  CHECK_STR_EQ(check_status_str(res.status), "exit 0");
  CHECK_STR_EQ(res.data, "send 1 value 2");
  CHECK_STR_EQ(res.err, "");
  CHECK_EQ(weft_gen_send(g, NULL, &v), 1); /* the parent's goes on too */
  CHECK_EQ((intptr_t)v, 2);
  weft_gen_free(g);
}

/* The child of a task closes an inherited socket with weft_close, then
 * blocks in a read. Neither may touch the parent's epoll set or ring,
 * which the child shares: the close removed the parent's registration of
 * the socket on epoll (its reader never woke), and on io_uring the close's
 * and the read's requests, written into the shared ring, wedged the
 * parent's every later request. */
static int shared[2], empty[2];
static int leaves_in_child;

static void *shared_reader(void *arg) {
  (void)arg;
  char c = 0;
  CHECK_EQ(weft_read(shared[0], &c, 1), 1);
  CHECK_EQ(c, 'x');
  return NULL;
}

static int child_gone;

/* Round trips on a socket pair of its own until the child is gone, and
 * 100 more. */
static void *pinger(void *arg) {
  (void)arg;
  int sv[2];
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
  for (int i = 0, after = 0; after < 100; i++) {
    char c = (char)i, d = 0;
    CHECK_EQ(weft_write(sv[0], &c, 1), 1);
    CHECK_EQ(weft_read(sv[1], &d, 1), 1);
    CHECK_EQ(d, c);
    after += child_gone;
  }
  CHECK_EQ(weft_close(sv[0]), 0);
  CHECK_EQ(weft_close(sv[1]), 0);
  CHECK_EQ(weft_write(shared[1], "x", 1), 1);
  return NULL;
}

static void *closing_forker(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(5)), 0); /* the reader is parked */
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK_GE(pid, 0);
  if (pid == 0) {
    leaves_in_child = 1;
    alarm(10);
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, STDERR_FILENO);
    close(fd);
    if (weft_close(shared[0]) != 0)
      _exit(3);
    char c;
    weft_read(empty[0], &c, 1); /* parks for ever: the run ends */
    _exit(4);
  }
  /* The parent's I/O goes on while the child runs (the pinger), and
   * after. */
  int status;
  pid_t got;
  while ((got = waitpid(pid, &status, WNOHANG)) == 0)
    CHECK_EQ(weft_sleep(WEFT_MS(1)), 0);
  CHECK_EQ(got, pid);
  CHECK_STR_EQ(check_status_str(status), "exit 0");
  child_gone = 1;
  return NULL;
}

static void test_child_leaves_parents_fds(void) {
  check_case("child_leaves_parents_fds", 30);
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, shared), 0);
  CHECK_EQ(pipe(empty), 0);
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  weft_task_opts o = {.loop = loop};
  weft_task *r = weft_spawn_opts(shared_reader, NULL, &o);
  weft_task *f = weft_spawn_opts(closing_forker, NULL, &o);
  weft_task *p = weft_spawn_opts(pinger, NULL, &o);
  CHECK(r && f && p);
  weft_detach(r);
  weft_detach(p);
  weft_detach(f);
  int rc = weft_loop_run(loop);
  if (leaves_in_child)
    _exit(rc == -EINVAL ? 0 : 5);
  CHECK_EQ(rc, 0);
  weft_loop_free(loop);
  for (int i = 0; i < 2; i++) {
    close(shared[i]);
    close(empty[i]);
  }
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  int fds = check_fd_count();
  test_idle_loop_in_child();
  test_fork_in_task();
  test_child_leaves_parents_fds();
  test_generator_in_child();
  CHECK_EQ(check_fd_count(), fds);
  printf("test_fork: ok\n");
  return 0;
}
