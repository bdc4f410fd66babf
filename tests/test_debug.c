/*
 * WEFT_DEBUG=1: a task that holds the CPU over 100 ms without yielding is
 * reported by name and duration, and SIGQUIT prints the task dump. Each
 * case runs in a child whose stderr goes to a pipe the parent reads.
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static void busy_ms(int ms) { /* the CPU held, no weft call */
  struct timespec t = {0, ms * 1000000L};
  nanosleep(&t, NULL);
}

static void *hog(void *arg) {
  (void)arg;
  busy_ms(150);
  CHECK_EQ(weft_yield(), 0);
  return NULL;
}

/* 300 ms in all, but it yields every 2 ms: never reported (a slice 50
 * times shorter than the threshold, so that a loaded machine stretching
 * one does not make it look slow). */
static void *polite(void *arg) {
  (void)arg;
  for (int i = 0; i < 150; i++) {
    busy_ms(2);
    CHECK_EQ(weft_yield(), 0);
  }
  return NULL;
}

static void *napper(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(400)), 0);
  return NULL;
}

static void *quitter(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  CHECK_EQ(kill(getpid(), SIGQUIT), 0);
  CHECK_EQ(weft_sleep(WEFT_MS(100)), 0); /* the dump comes meanwhile */
  return NULL;
}

/* Tasks that only yield to one another for 300 ms (no fd, no timer): the
 * SIGQUIT one of them raises is dumped all the same (it once waited for a
 * look at I/O that a loop with no fd waiter never took). */
static void *spinner(void *arg) {
  int64_t t0 = weft_now();
  int raised = 0;
  while (weft_now() - t0 < WEFT_MS(300)) {
    if (arg && !raised && weft_now() - t0 > WEFT_MS(50)) {
      CHECK_EQ(kill(getpid(), SIGQUIT), 0);
      raised = 1;
    }
    CHECK_EQ(weft_yield(), 0);
  }
  return NULL;
}

/* A task of the program's own that waits for SIGQUIT gets it: the loop's
 * dump stands aside (on epoll and poll the dump used to take it, and the
 * wait went on; io_uring's wait got it). */
static void *quit_sender(void *arg) {
  (void)arg;
  CHECK_EQ(weft_sleep(WEFT_MS(20)), 0); /* the wait has begun */
  CHECK_EQ(kill(getpid(), SIGQUIT), 0);
  return NULL;
}

/* Waits at most 2 s for SIGQUIT: 0 (*signo set) or the wait's error. */
static int wait_quit(int *signo) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGQUIT);
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_MS(2000));
  int rc = weft_signal_wait(&set, signo);
  int expired = weft_scope_exit(&s);
  return rc < 0 ? rc : expired;
}

static int quit_waited(void) {
  CHECK_EQ(weft_go(quit_sender, NULL), 0);
  int signo = 0;
  CHECK_EQ(wait_quit(&signo), 0);
  CHECK_EQ(signo, SIGQUIT);
  return 0;
}

/* A child forked by a task, back in the loop, ends its copy of the run:
 * the parent's dump still answers SIGQUIT after (on epoll the child's
 * run, closing the dump's signalfd, took it out of the epoll set it shares
 * with the parent, and the parent's SIGQUIT was never read). */
static int forked_then_quit(void) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0)
    return 0; /* weft_main returns -EINVAL in the child */
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  CHECK_EQ(weft_sleep(WEFT_MS(10)), 0);
  CHECK_EQ(kill(getpid(), SIGQUIT), 0);
  CHECK_EQ(weft_sleep(WEFT_MS(50)), 0);
  return 0;
}

/* Handles never joined: three tasks end, one is joined, one detached after
 * its end, one left; then a parent cancelled in its join (which returns
 * at once) leaves its child's handle too. The dump counts them, and the
 * loop's free says so with WEFT_DEBUG. */
static void *quick(void *arg) { return arg; }

static int unjoined(void) {
  weft_task *t[3];
  for (int i = 0; i < 3; i++)
    CHECK((t[i] = weft_spawn(quick, NULL)) != NULL);
  CHECK_EQ(weft_yield(), 0); /* all three end */
  CHECK_EQ(weft_join(t[0], NULL), 0);
  CHECK_EQ(weft_detach(t[1]), 0);
  weft_task *c = weft_spawn(quick, NULL);
  CHECK(c);
  CHECK_EQ(weft_cancel(weft_self()), 0);
  CHECK_EQ(weft_join(c, NULL), -ECANCELED); /* c is left behind */
  CHECK_EQ(weft_yield(), -ECANCELED);       /* c ends meanwhile */
  weft_dump(stderr);
  return 0;
}

static int scenario(void *arg) {
  int which = (int)(intptr_t)arg;
  if (which == 5)
    return unjoined();
  if (which == 4)
    return forked_then_quit();
  if (which == 3)
    return quit_waited();
  if (which == 2) {
    weft_task_opts o = {.name = "spinner"};
    weft_task *a = weft_spawn_opts(spinner, NULL, &o);
    weft_task *b = weft_spawn_opts(spinner, &o, &o);
    CHECK(a && b);
    CHECK_EQ(weft_join(a, NULL), 0);
    CHECK_EQ(weft_join(b, NULL), 0);
    return 0;
  }
  weft_task_opts o = {.name = which == 0 ? "hog" : "polite"};
  weft_task *t = weft_spawn_opts(which == 0 ? hog : polite, NULL, &o);
  CHECK(t);
  if (which == 0) {
    weft_task_opts n = {.name = "napper"};
    CHECK(weft_spawn_opts(napper, NULL, &n));
    CHECK_EQ(weft_go(quitter, NULL), 0);
  }
  CHECK_EQ(weft_join(t, NULL), 0);
  return 0;
}

/* Runs scenario `which` in a child with WEFT_DEBUG=debug; returns its
 * stderr (malloc'd) and checks it exited 0. */
static char *run_child(int which, const char *debug) {
  int p[2];
  CHECK_EQ(pipe(p), 0);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    dup2(p[1], 2);
    close(p[0]);
    close(p[1]);
    setenv("WEFT_DEBUG", debug, 1);
    int rc = weft_main(scenario, (void *)(intptr_t)which);
    /* The run left the thread's mask as it found it (but for the SIGQUIT
     * that scenario 3's weft_signal_wait keeps blocked). */
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    if ((which != 3 && sigismember(&cur, SIGQUIT)) ||
        sigismember(&cur, SIGPIPE))
      rc = 3;
    _exit(rc == 0 ? 0 : 1);
  }
  close(p[1]);
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  CHECK(buf);
  ssize_t n;
  while ((n = read(p[0], buf + len, cap - 1 - len)) > 0)
    len += (size_t)n;
  buf[len] = '\0';
  close(p[0]);
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "child failed (status %#x); its stderr:\n%s\n", status, buf);
    CHECK(0);
  }
  return buf;
}

/* The same across a stop: a wait for SIGQUIT made in one run and still
 * going in the next gets it (the next run's dump used to listen again, and
 * take it, on epoll and poll). */
static void *quit_waiter(void *arg) {
  int *got = arg;
  int signo = 0;
  if (wait_quit(&signo) == 0)
    *got = signo;
  return NULL;
}

static void stop_loop(void *loop) { weft_loop_stop(loop); }

static void send_quit(void *arg) {
  (void)arg;
  CHECK_EQ(kill(getpid(), SIGQUIT), 0);
}

/* Runs the case in a child, and returns the child's status. */
static int quit_waited_across_runs(void) {
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    int fd = open("/dev/null", O_WRONLY);
    dup2(fd, 2);
    close(fd);
    setenv("WEFT_DEBUG", "1", 1);
    weft_loop *loop = weft_loop_new(NULL);
    int got = 0;
    weft_task *t =
        weft_spawn_opts(quit_waiter, &got, &(weft_task_opts){.loop = loop});
    weft_detach(t);
    weft_call_later(WEFT_MS(20), stop_loop, loop);
    if (weft_loop_run(loop) != 1)
      _exit(2);
    weft_call_later(WEFT_MS(20), send_quit, NULL);
    if (weft_loop_run(loop) != 0)
      _exit(3);
    weft_loop_free(loop);
    _exit(got == SIGQUIT ? 0 : 4);
  }
  int status;
  CHECK_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0); /* nothing buffered across fork */
  /* A slice is measured on the wall clock, as it must be to catch a task
   * that blocks the thread, so a child the machine's other work keeps off
   * the CPU for 100 ms has a polite task reported too (seen with three
   * copies of this test and a build on the 2 cores). A case that finds a
   * report it should not runs again, up to 3 times in all: a real false
   * report comes every time. */
  char *out;
  for (int tries = 1;; tries++) {
    out = run_child(0, "1");
    CHECK(strstr(out, "(hog) ran "));
    CHECK(strstr(out, " ms without yielding"));
    CHECK(strstr(out, "weft: SIGQUIT: the tasks of loop"));
    CHECK(strstr(out, "napper")); /* the dump lists it, asleep */
    CHECK(strstr(out, "timer in"));
    if (!strstr(out, "(napper) ran") || tries == 3)
      break;
    free(out);
  }
  CHECK(!strstr(out, "(napper) ran"));
  free(out);
  printf("  slow task reported, SIGQUIT dump: ok\n");

  for (int tries = 1;; tries++) {
    out = run_child(1, "1");
    if (!strstr(out, "without yielding") || tries == 3)
      break;
    free(out);
  }
  CHECK(!strstr(out, "without yielding"));
  free(out);
  printf("  a task that yields often: not reported: ok\n");

  out = run_child(2, "1");
  CHECK(strstr(out, "weft: SIGQUIT: the tasks of loop"));
  CHECK(strstr(out, "spinner"));
  free(out);
  printf("  SIGQUIT dump of a loop whose tasks only yield: ok\n");

  out = run_child(3, "1");
  CHECK(!strstr(out, "weft: SIGQUIT"));
  free(out);
  printf("  SIGQUIT waited for by a task: the task's, no dump: ok\n");

  out = run_child(4, "1");
  CHECK(strstr(out, "weft: SIGQUIT: the tasks of loop"));
  free(out);
  printf("  SIGQUIT dump after a task forked: ok\n");

  out = run_child(5, "1");
  CHECK(strstr(out, "weft: 1 task (and 2 ended, never joined or detached)\n"));
  CHECK(strstr(out, "weft: 2 tasks ended but never joined or detached"));
  free(out);
  out = run_child(5, "0");
  CHECK(strstr(out, "(and 2 ended, never joined or detached)"));
  CHECK(!strstr(out, "never joined or detached (their"));
  free(out);
  printf("  handles never joined: counted by the dump, told at free: ok\n");

  CHECK_EQ(quit_waited_across_runs(), 0);
  printf("  SIGQUIT waited for across a stop: the task's: ok\n");

  /* Without WEFT_DEBUG: no report (and SIGQUIT would keep its default
   * action, so it is not sent). */
  out = run_child(1, "0");
  CHECK(!strstr(out, "weft:")); /* (a tool may write its own lines) */
  free(out);
  printf("  without WEFT_DEBUG: silent: ok\n");
  printf("test_debug: ok\n");
  return 0;
}
