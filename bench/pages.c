/*
 * What a page costs right after a system call: the machine's figure behind
 * WEFT__HOT (src/internal.h). No weft in it.
 *
 * On a kernel with page-table isolation and no PCID, returning from every
 * system call empties the TLB, so each distinct page the code touches
 * before the next call costs a page walk. This program makes a cheap
 * system call (getppid), then calls K functions that each sit on a page of
 * their own (or reads K data pages), and times that part alone; with and
 * without the system call before it. The figures are the slope, ns per
 * page, between K = 0 and K = PAGES:
 *
 *   pages_code_after_syscall   a function call into a page not touched
 *                              since the system call
 *   pages_code_warm            the same with no system call before
 *   pages_data_after_syscall   a load from such a page (the loads are
 *                              independent, so their walks overlap)
 *   pages_data_warm            the same with no system call before
 *   pages_pti                  1 if the kernel reports PTI in
 *                              /sys/devices/system/cpu/vulnerabilities/
 *                              meltdown, else 0 (unit "flag"): without it
 *                              the first figures should be close to the
 *                              warm ones
 *
 *   usage: bench_pages [-r rounds] [-n N] [-v]
 *
 * Each figure is the median of 7 rounds (after a warm-up round); a round
 * times N (default 20,000) iterations of each K with
 * CLOCK_MONOTONIC read in the vDSO around the touches; the vDSO's own pages
 * cost the same at every K and drop out of the slope.
 */
#include "bench.h"

#include <sys/mman.h>
#include <sys/syscall.h>

#define PAGES 16

/* PAGES functions, each alone on its page. */
#define F(i)                                                                   \
  static __attribute__((noinline, aligned(4096))) int f##i(int x) {            \
    return x + i;                                                              \
  }
/* Rows of definitions, which clang-format would take for one statement. */
/* clang-format off */
F(0) F(1) F(2) F(3) F(4) F(5) F(6) F(7)
F(8) F(9) F(10) F(11) F(12) F(13) F(14) F(15)
static int (*const fns[PAGES])(int) = {f0, f1, f2,  f3,  f4,  f5,  f6,  f7,
                                       f8, f9, f10, f11, f12, f13, f14, f15};
/* clang-format on */

static volatile char *data; /* PAGES pages, each read once per iteration */

static int64_t mono(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* ns per iteration of touching k pages (code or data), after a system
 * call or not. */
static double touch(int k, int code, int sys, long n) {
  int64_t sum = 0;
  int acc = 0;
  for (long i = 0; i < n; i++) {
    if (sys)
      syscall(SYS_getppid);
    int64_t t0 = mono();
    if (code)
      for (int j = 0; j < k; j++)
        acc = fns[j](acc);
    else
      for (int j = 0; j < k; j++)
        acc += data[(size_t)j * 4096 + (size_t)j * 64];
    sum += mono() - t0;
  }
  if (acc == -1)
    puts(""); /* keeps acc alive */
  return (double)sum / (double)n;
}

static int pti(void) {
  FILE *f = fopen("/sys/devices/system/cpu/vulnerabilities/meltdown", "r");
  char line[128] = "";
  if (!f)
    return 0;
  if (!fgets(line, sizeof line, f))
    line[0] = 0;
  fclose(f);
  return strstr(line, "PTI") != NULL;
}

int main(int argc, char **argv) {
  bench_opts o = bench_parse(argc, argv, 7, 20000);
  data = mmap(NULL, (size_t)PAGES * 4096, PROT_READ | PROT_WRITE,
              MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (data == MAP_FAILED) {
    perror("bench_pages: mmap");
    return 1;
  }
  static const struct {
    const char *name;
    int code, sys;
  } figs[] = {{"pages_code_after_syscall", 1, 1},
              {"pages_code_warm", 1, 0},
              {"pages_data_after_syscall", 0, 1},
              {"pages_data_warm", 0, 0}};
  for (size_t f = 0; f < sizeof figs / sizeof figs[0]; f++) {
    static bench_series s;
    s.name = figs[f].name;
    s.n = 0;
    for (int r = -1; r < o.rounds; r++) { /* round -1: the warm-up */
      double slope = (touch(PAGES, figs[f].code, figs[f].sys, o.iters) -
                      touch(0, figs[f].code, figs[f].sys, o.iters)) /
                     PAGES;
      if (r >= 0)
        bench_add(&s, &o, slope);
    }
    bench_report(&s, "ns");
  }
  bench_print("pages_pti", pti(), "flag");
  return 0;
}
