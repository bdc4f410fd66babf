#include "weft.h"
#include "check.h"

static void *child(void *arg) {
  int *n = arg;
  for (int i = 0; i < 3; i++) {
    printf("child %d\n", i);
    (*n)++;
    weft_yield();
  }
  return (void *)42;
}

static int body(void *arg) {
  int n = 0;
  weft_task *t = weft_spawn(child, &n);
  CHECK(t);
  void *r = NULL;
  CHECK_EQ(weft_join(t, &r), 0);
  CHECK_EQ((long)r, 42);
  CHECK_EQ(n, 3);
  return 7;
}

static void *gbody(weft_gen *g, void *arg) {
  void *in;
  for (long i = 0; i < 3; i++) {
    weft_gen_yield(g, (void *)i, &in);
    printf("gen got %ld\n", (long)in);
  }
  return (void *)99;
}

int main(void) {
  CHECK_EQ(weft_main(body, NULL), 7);
  weft_gen *g = weft_gen_new(gbody, NULL, 0);
  void *out;
  CHECK_EQ(weft_gen_send(g, NULL, &out), 1);
  CHECK_EQ((long)out, 0);
  CHECK_EQ(weft_gen_send(g, (void *)10, &out), 1);
  CHECK_EQ(weft_gen_send(g, (void *)11, &out), 1);
  CHECK_EQ(weft_gen_send(g, (void *)12, &out), 0);
  CHECK_EQ((long)out, 99);
  CHECK_EQ(weft_gen_send(g, NULL, &out), -22);
  weft_gen_free(g);
  printf("ok\n");
  return 0;
}
