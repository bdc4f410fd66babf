/*
 * Regression: a thread that used weft (a generator, a loop) and exits must
 * give back what weft mapped for it: its stack pool and the alternate
 * signal stack of the overflow handler. Fifty threads in a row leave the
 * process with the address space one thread left.
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

/* Bytes of address space mapped (VmSize): what leaked mappings add to, even
 * where they merge with their neighbours into one line of /proc/self/maps. */
static long vm_size(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  CHECK(f);
  long pages = 0;
  CHECK_EQ(fscanf(f, "%ld", &pages), 1);
  fclose(f);
  return pages * 4096;
}

int main(void) {
#ifdef WEFT_TEST_EMULATED
  SKIP("under an emulator, statm counts the emulator's memory");
#endif
  long after_one = 0;
  for (int i = 0; i < 50; i++) {
    pthread_t t;
    CHECK_EQ(pthread_create(&t, NULL, thread_body, NULL), 0);
    CHECK_EQ(pthread_join(t, NULL), 0);
    if (i == 0)
      after_one = vm_size();
  }
  long grew = vm_size() - after_one;
  /* 64 KiB of signal stack a thread would be 3 MiB; allow for noise. */
  CHECK(grew < 1024 * 1024);
  printf("ok: 50 threads; address space grew by %ld bytes after the first\n",
         grew);
  return 0;
}
