/* Built by install_test.sh against an installed weft, with only the flags
 * pkg-config gives: if it compiles, links and prints what the script
 * expects, the installed header, libraries and weft.pc work together. */
#include <stdio.h>
#include <weft.h>

static void *square(void *arg) {
  long n = (long)arg;
  weft_yield(); /* let the other tasks run in between */
  return (void *)(n * n);
}

static void *square_off_loop(void *arg) {
  long n = (long)arg;
  return (void *)(n * n);
}

static int body(void *arg) {
  weft_task *t[3];
  for (long i = 0; i < 3; i++)
    if (!(t[i] = weft_spawn(square, (void *)(i + 1))))
      return 1;
  long sum = 0;
  for (int i = 0; i < 3; i++) {
    void *r;
    if (weft_join(t[i], &r) != 0)
      return 2;
    printf("task %d: %ld\n", i + 1, (long)r);
    sum += (long)r;
  }
  printf("sum %ld\n", sum);
  void *r; /* the pool: threads, through pkg-config's flags alone */
  if (weft_run_in_thread(square_off_loop, (void *)sum, &r) != 0)
    return 3;
  printf("on the pool: %ld\n", (long)r);
  return 0;
}

int main(void) {
  unsigned v = weft_version();
  printf("weft %u.%u.%u%s\n", v >> 16, (v >> 8) & 0xff, v & 0xff,
         v == WEFT_VERSION_HEX ? "" : " (not the header's version)");
  return weft_main(body, NULL);
}
