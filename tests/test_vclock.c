/*
 * The virtual clock (weft_config.virtual_clock): time stands still while
 * tasks run and jumps to the next deadline when nothing else can happen,
 * so that an hour of sleeps, or a deadline around a recv that never gets
 * data, takes no real time. Checked: the virtual time reached, the real
 * time spent, the order timers fire in, that I/O still comes first, and
 * that a timer moved while another loop is current keeps its loop's time.
 */
#include "weft.h"

#include "check.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int64_t real_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Real time a virtual run may take: generous (valgrind, a loaded CI). */
#define REAL_MAX WEFT_SEC(10)

static weft_loop *vloop(void) {
  weft_config cfg = {.virtual_clock = true};
  weft_loop *loop = weft_loop_new(&cfg);
  CHECK(loop);
  return loop;
}

/* ---- sleeps -------------------------------------------------------------- */
static char order[16];
static int norder;

static void *sleeper(void *arg) {
  int64_t d = (int64_t)(intptr_t)arg;
  int64_t t0 = weft_now();
  CHECK_EQ(weft_sleep(WEFT_SEC(d)), 0);
  CHECK_EQ(weft_now() - t0, WEFT_SEC(d)); /* exactly: nothing else moves it */
  order[norder++] = (char)('0' + d);
  return NULL;
}

static void *hour_of_sleeps(void *arg) {
  (void)arg;
  int64_t t0 = weft_now();
  for (int i = 0; i < 3600; i++)
    CHECK_EQ(weft_sleep(WEFT_SEC(1)), 0);
  CHECK_EQ(weft_now() - t0, WEFT_SEC(3600));
  return NULL;
}

static void test_sleeps(void) {
  weft_loop *loop = vloop();
  int64_t v0 = weft_now(), r0 = real_now();
  CHECK(weft_spawn(hour_of_sleeps, NULL));
  for (int d = 5; d >= 1; d--)
    CHECK(weft_spawn(sleeper, (void *)(intptr_t)d));
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_EQ(weft_now() - v0, WEFT_SEC(3600));
  CHECK_LT(real_now() - r0, REAL_MAX);
  order[norder] = '\0';
  CHECK_STR_EQ(order, "12345");
  weft_loop_free(loop);
  printf("  an hour of sleeps: ok (%.1f ms real)\n",
         (double)(real_now() - r0) / 1e6);
}

/* ---- a deadline around I/O that never completes ---------------------------- */
static int sv[2];

static void *timed_recv(void *arg) {
  (void)arg;
  char buf[8];
  weft_scope s;
  int64_t t0 = weft_now();
  weft_scope_enter(&s, t0 + WEFT_SEC(30));
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), -ETIMEDOUT);
  CHECK_EQ(weft_scope_exit(&s), -ETIMEDOUT);
  CHECK_EQ(weft_now() - t0, WEFT_SEC(30));
  return NULL;
}

/* Data that is there wins over the jump: the poll is looked at first. */
static void *ready_recv(void *arg) {
  (void)arg;
  char buf[8];
  CHECK_EQ(write(sv[1], "x", 1), 1);
  weft_scope s;
  weft_scope_enter(&s, weft_now() + WEFT_SEC(30));
  CHECK_EQ(weft_recv(sv[0], buf, sizeof buf, 0), 1);
  CHECK_EQ(weft_scope_exit(&s), 0);
  return NULL;
}

static void test_io_deadline(void) {
  CHECK_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  weft_loop *loop = vloop();
  int64_t r0 = real_now();
  CHECK(weft_spawn(timed_recv, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK(weft_spawn(ready_recv, NULL));
  CHECK_EQ(weft_loop_run(loop), 0);
  CHECK_LT(real_now() - r0, REAL_MAX);
  weft_loop_free(loop);
  close(sv[0]);
  close(sv[1]);
  printf("  30 s deadline on a silent socket: ok\n");
}

/* ---- the real clock is untouched without the option --------------------------- */
static void test_real(void) {
  weft_loop *loop = weft_loop_new(NULL);
  CHECK(loop);
  int64_t a = weft_now(), r = real_now(), b = weft_now();
  CHECK(a <= r && r <= b);
  weft_loop_free(loop);
  loop = vloop();
  int64_t v = weft_now();
  struct timespec ts = {0, 20 * 1000 * 1000};
  nanosleep(&ts, NULL);
  CHECK_EQ(weft_now(), v); /* stands still */
  weft_loop_free(loop);
  printf("  real and virtual clocks: ok\n");
}

/* ---- a timer moved while another loop is current --------------------------
 * weft_timer_rearm measures the delay on its own loop's clock: the
 * virtual one, an hour ahead here, even while a loop on the real clock is
 * the thread's current one (it used to take the current loop's time, an
 * hour in the virtual loop's past, and the timer fired at once). */
static int64_t fired_at;

static void note_time(void *unused) {
  (void)unused;
  fired_at = weft_now();
}

static void test_rearm_other_loop(void) {
  weft_loop *v = vloop();
  CHECK(weft_call_later(WEFT_SEC(3600), note_time, NULL));
  weft_timer *t = weft_call_later(WEFT_SEC(7200), note_time, NULL);
  CHECK(t);
  CHECK_EQ(weft_loop_run(v), 0); /* both fired: the clock is 2 h on */
  int64_t later = fired_at;
  t = weft_call_later(WEFT_SEC(1), note_time, NULL);
  CHECK(t);
  weft_loop *r = weft_loop_new(NULL); /* the current loop now */
  CHECK(r);
  int64_t a = weft_now(), now = real_now(); /* outside a run: r's clock */
  CHECK(a <= now && later - a > WEFT_SEC(7000));
  CHECK_EQ(weft_timer_rearm(t, WEFT_SEC(10)), 0);
  weft_loop_free(r); /* v is current again */
  CHECK_EQ(weft_now(), later);
  CHECK_EQ(weft_loop_run(v), 0);
  CHECK_EQ(fired_at, later + WEFT_SEC(10));
  weft_loop_free(v);
  printf("  a timer moved while another loop is current: ok\n");
}

int main(void) {
  test_sleeps();
  test_rearm_other_loop();
  test_io_deadline();
  test_real();
  printf("test_vclock: ok\n");
  return 0;
}
