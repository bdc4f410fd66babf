/* The README's example: two tasks taking turns, then joined. */
#include <stdio.h>
#include <weft.h>

static void *worker(void *arg) {
  for (int i = 0; i < 3; i++) {
    printf("%s: step %d\n", (char *)arg, i);
    weft_yield(); /* let the other task run */
  }
  return arg;
}

static int run(void *unused) {
  (void)unused;
  weft_task *a = weft_spawn(worker, "a"), *b = weft_spawn(worker, "b");
  void *ra, *rb;
  if (weft_join(a, &ra) < 0 || weft_join(b, &rb) < 0)
    return 1;
  printf("%s and %s are done\n", (char *)ra, (char *)rb);
  return 0;
}

int main(void) {
  int rc = weft_main(run, NULL); /* fn's value, or the loop's error */
  if (rc < 0)
    fprintf(stderr, "hello: %s\n", weft_strerror(rc));
  return rc != 0;
}
