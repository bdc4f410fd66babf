/*
 * A million live tasks: what each costs to create and to keep.
 *
 *   usage: bench_tasks [N]        (N defaults to 1,000,000)
 *
 * Inside weft_main the main task spawns N tasks without yielding, then
 * yields once: every task then runs to its one weft_yield and is suspended
 * there, with real frames on its stack, and the main task (at the back of
 * the ready queue) measures while all N are alive. It then joins them all.
 *
 *   tasks_count           N
 *   tasks_spawn           ns (CPU time, as everywhere: see bench.h) per
 *                         weft_spawn while creating the N tasks
 *   tasks_spawn_faults    page faults per task while spawning them: the
 *                         first touch of each fresh stack is one, and on a
 *                         VM it is most of tasks_spawn
 *   tasks_first_run       ns per task for the pass that runs each task up to
 *                         its weft_yield (cold caches: N stacks, N records)
 *   tasks_first_run_faults  page faults per task in that pass (0: the frames
 *                         fit in the page that spawn touched)
 *   tasks_rss_per_task    (RSS with all N alive - RSS before) / N, bytes
 *   tasks_pte_per_task    the same for the page tables (VmPTE), bytes: the
 *                         kernel's memory for mapping the tasks' pages,
 *                         which RSS does not count
 *   tasks_maps_lines      lines of /proc/self/maps while all N are alive
 *
 * Fresh stacks cost a page fault each; on a VM whose first touch of a page
 * costs 15-30 us, spawning a million tasks takes 20 s or more, and
 * tasks_spawn says so (tasks_spawn_faults shows where it goes). This is one round, not a median: it is not a
 * micro-benchmark, and its memory figures do not vary.
 */
#include "weft.h"

#include "bench.h"

#include <errno.h>
#include <sys/resource.h>

/* Page faults (minor: no I/O) this process has taken so far. */
static long minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* Resident bytes of this process (the second field of /proc/self/statm). */
static long rss_bytes(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  long size = 0, resident = -1;
  if (f) {
    if (fscanf(f, "%ld %ld", &size, &resident) != 2)
      resident = -1;
    fclose(f);
  }
  return resident < 0 ? -1 : resident * sysconf(_SC_PAGESIZE);
}

/* A "Key:   123 kB" field of /proc/self/status, in bytes; -1 if absent. */
static long status_bytes(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t klen = strlen(key);
  long kb = -1;
  if (!f)
    return -1;
  while (fgets(line, sizeof line, f))
    if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
      kb = atol(line + klen + 1);
      break;
    }
  fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

static long maps_lines(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  long n = 0;
  int c;
  if (!f)
    return -1;
  while ((c = getc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

static void *yield_once(void *arg) {
  weft_yield();
  return arg;
}

struct run {
  long n;
  weft_task **tasks;
};

static int tasks_main(void *p) {
  struct run *r = p;
  long n = r->n;
  /* The handle array is ours, not the tasks': touched before the baseline
   * so that its pages are not counted against them. */
  memset(r->tasks, 0, (size_t)n * sizeof *r->tasks);
  long rss0 = rss_bytes(), pte0 = status_bytes("VmPTE");

  fprintf(stderr, "tasks: spawning %ld tasks\n", n);
  long f0 = minor_faults();
  int64_t t0 = bench_now();
  for (long i = 0; i < n; i++) {
    r->tasks[i] = weft_spawn(yield_once, (void *)(intptr_t)i);
    if (!r->tasks[i]) {
      int err = errno;
      fprintf(stderr, "tasks: weft_spawn failed after %ld tasks: %s\n", i,
              strerror(err));
      return 1;
    }
  }
  int64_t t1 = bench_now();
  long f1 = minor_faults();
  weft_yield(); /* every task runs to its weft_yield */
  int64_t t2 = bench_now();
  long f2 = minor_faults();

  long rss1 = rss_bytes(), pte1 = status_bytes("VmPTE");
  long maps = maps_lines();

  fprintf(stderr, "tasks: joining\n");
  for (long i = 0; i < n; i++) {
    void *res = NULL;
    if (weft_join(r->tasks[i], &res) != 0 || res != (void *)(intptr_t)i) {
      fprintf(stderr, "tasks: task %ld did not end well\n", i);
      return 1;
    }
  }

  bench_print("tasks_count", (double)n, "tasks");
  bench_print("tasks_spawn", (double)(t1 - t0) / (double)n, "ns");
  bench_print("tasks_spawn_faults", (double)(f1 - f0) / (double)n, "faults");
  bench_print("tasks_first_run", (double)(t2 - t1) / (double)n, "ns");
  bench_print("tasks_first_run_faults", (double)(f2 - f1) / (double)n,
              "faults");
  bench_print("tasks_rss_per_task", (double)(rss1 - rss0) / (double)n,
              "bytes");
  if (pte0 >= 0 && pte1 >= 0)
    bench_print("tasks_pte_per_task", (double)(pte1 - pte0) / (double)n,
                "bytes");
  bench_print("tasks_maps_lines", (double)maps, "lines");
  return 0;
}

int main(int argc, char **argv) {
  long n = 1000000;
  if (argc > 2 || (argc == 2 && (n = atol(argv[1])) < 1)) {
    fprintf(stderr, "usage: %s [number of tasks]\n", argv[0]);
    return 2;
  }
  struct run r = {n, malloc((size_t)n * sizeof(weft_task *))};
  if (!r.tasks) {
    perror("tasks: malloc");
    return 1;
  }
  int rc = weft_main(tasks_main, &r);
  free(r.tasks);
  if (rc != 0) {
    fprintf(stderr, "tasks: weft_main: %s\n",
            rc < 0 ? weft_strerror(rc) : "failed");
    return 1;
  }
  return 0;
}
