/*
 * Regression: a thread that used weft (a generator, a loop) and exits must
 * give back what weft mapped for it: its stack pool and the alternate
 * signal stack of the overflow handler. Fifty threads in a row leave the
 * process with the mappings one thread left.
 */
#include "check.h"
#include "weft.h"

#include <pthread.h>

static void *gen_body(weft_gen *g, void *arg) {
  weft_gen_yield(g, arg, NULL);
  return NULL;
}

static int task_main(void *arg) { return 0; }

static void *thread_body(void *arg) {
  weft_gen *g = weft_gen_new(gen_body, NULL, 0);
  CHECK(g);
  CHECK_EQ(weft_gen_send(g, NULL, NULL), 1);
  CHECK_EQ(weft_gen_free(g), 0);
  CHECK_EQ(weft_main(task_main, NULL), 0);
  return NULL;
}

static int map_lines(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  CHECK(f);
  int n = 0, c;
  while ((c = fgetc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

int main(void) {
  int after_one = 0;
  for (int i = 0; i < 50; i++) {
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, thread_body, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    if (i == 0)
      after_one = map_lines();
  }
  CHECK_EQ(map_lines(), after_one);
  printf("ok: 50 threads, %d mappings throughout\n", after_one);
  return 0;
}
