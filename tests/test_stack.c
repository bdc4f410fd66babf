/*
 * Layer 1: stacks (src/stack.h).
 *
 *  - sizes: the default is 256 KiB, requests round up to whole pages, with
 *    a floor of four pages, and past 64 TiB fail with ENOMEM; the region and
 * descriptor sit where stack.h's diagram says;
 *  - the pool: a released stack is the next one acquired (LIFO), per size;
 *    a reacquired stack forgets its last owner;
 *  - the guard page below every stack faults (in a child process), for a
 *    stack fresh from its chunk, one reused from the pool, and one whose
 *    chunk gave its pages back and was handed out again;
 *  - stacks are committed lazily: a thousand of them cost little resident
 *    memory; released, they stay warm while their burst is recent (one
 *    that recurs within a window finds every page still there), and once
 *    two windows pass without one, all but the warm limit give their pages
 *    back to the kernel, in whatever order they were released, and also
 *    where a stack still out keeps its chunk from giving back at once:
 *    there runs of adjacent free slots go, each in one call, descriptor
 *    pages and all, and come back as fresh slots;
 *  - weft__stack_trim unmaps everything, only when no stack is out;
 *  - with address space short (RLIMIT_AS), a stack that fits is had even
 *    where a whole chunk of them would not;
 *  - a million guarded stacks fit in a few mappings when guards are
 *    MADV_GUARD_INSTALL markers; with mprotect guards acquiring fails
 *    cleanly (NULL, ENOMEM) once vm.max_map_count is reached; and slots
 *    whose guards are in place are handed out before any that would need a
 *    new one, so a burst given back fits again under that cap.
 */
#include "stack.h"

#include "check.h"

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

static size_t pagesz;

static void test_round(void) {
  CHECK_EQ(weft__stack_round(0), 262144);
  CHECK_EQ(WEFT__STACK_DEFAULT, 262144);
  CHECK_EQ(weft__stack_round(1), 4 * pagesz);
  CHECK_EQ(weft__stack_round(pagesz), 4 * pagesz);
  CHECK_EQ(weft__stack_round(4 * pagesz + 1), 5 * pagesz);
  CHECK_EQ(weft__stack_round(100000), (100000 + pagesz - 1) / pagesz * pagesz);
  CHECK_EQ(weft__stack_round(65536), 65536);
  CHECK_EQ(weft__stack_round(262144), 262144);
  CHECK_EQ(weft__stack_round(262145), 262144 + pagesz);
  CHECK_EQ(weft__stack_round(1 << 20), 1 << 20);
  /* Past 64 TiB no stack could be mapped, and rounding (or the chunk's
   * size) would wrap: 0, and acquire is NULL with ENOMEM (it once wrote
   * the header into the guard page, or past a tiny mapping). */
  CHECK_EQ(weft__stack_round(WEFT__STACK_MAX), WEFT__STACK_MAX);
  CHECK_EQ(weft__stack_round(WEFT__STACK_MAX + 1), 0);
  CHECK_EQ(weft__stack_round(SIZE_MAX), 0);
  size_t huge[] = {SIZE_MAX, SIZE_MAX - pagesz + 2, (size_t)1 << 63,
                   (size_t)1 << 60};
  for (size_t i = 0; i < sizeof huge / sizeof *huge; i++) {
    errno = 0;
    CHECK(weft__stack_acquire(huge[i]) == NULL);
    CHECK_EQ(errno, ENOMEM);
  }
}

/* The layout of stack.h's diagram. */
static void check_layout(const weft__stack *s, size_t nominal) {
  const weft__region *r = &s->region;
  CHECK_EQ(r->nominal, nominal);
  CHECK_EQ(r->guard, pagesz);
  CHECK_EQ(r->size, nominal - WEFT__STACK_HEADER);
  CHECK_EQ((uintptr_t)r->lo % pagesz, 0);
  CHECK_PTR_EQ((const char *)s, (const char *)r->lo + r->size);
  CHECK_EQ(r->owner_id, 0);
  CHECK(r->owner_name == NULL);
  CHECK_EQ(r->is_gen, 0);
}

static void test_layout(void) {
  weft__stack *s = weft__stack_acquire(0);
  CHECK(s != NULL);
  check_layout(s, 262144);
  CHECK(weft__stack_guard_mode() == 0 || weft__stack_guard_mode() == 1);
  /* All of it is usable: the lowest and highest bytes, and a page in the
   * middle. */
  volatile char *lo = (volatile char *)s->region.lo;
  lo[0] = 1;
  lo[s->region.size - 1] = 2;
  lo[s->region.size / 2] = 3;
  CHECK_EQ(lo[0] + lo[s->region.size - 1] + lo[s->region.size / 2], 6);
  weft__stack_release(s);

  static const size_t asks[] = {1, 65536, 100000, 1 << 20};
  for (size_t i = 0; i < sizeof asks / sizeof *asks; i++) {
    weft__stack *t = weft__stack_acquire(asks[i]);
    CHECK(t != NULL);
    check_layout(t, weft__stack_round(asks[i]));
    weft__stack_release(t);
  }
}

static void test_lifo(void) {
  weft__stack *a = weft__stack_acquire(0);
  CHECK(a != NULL);
  weft__stack_release(a);
  weft__stack *b = weft__stack_acquire(0);
  CHECK_PTR_EQ(b, a);

  weft__stack *c = weft__stack_acquire(0), *d = weft__stack_acquire(0);
  CHECK(c && d);
  CHECK_PTR_NE(c, b);
  CHECK_PTR_NE(d, c);
  weft__stack_release(b);
  weft__stack_release(c);
  weft__stack_release(d);
  CHECK_PTR_EQ(weft__stack_acquire(0), d);
  CHECK_PTR_EQ(weft__stack_acquire(0), c);
  CHECK_PTR_EQ(weft__stack_acquire(0), b);

  /* A pool per size: a 64 KiB stack released is not handed out as 256. */
  weft__stack *small = weft__stack_acquire(65536);
  CHECK(small != NULL);
  weft__stack_release(small);
  weft__stack *big = weft__stack_acquire(0);
  CHECK_PTR_NE(big, small);
  CHECK_EQ(big->region.nominal, 262144);
  CHECK_PTR_EQ(weft__stack_acquire(65536), small);

  /* A reacquired stack forgets its last owner. */
  b->region.owner_id = 5;
  b->region.owner_name = "old";
  b->region.is_gen = 1;
  weft__stack_release(b);
  weft__stack *again = weft__stack_acquire(0);
  CHECK_PTR_EQ(again, b);
  CHECK_EQ(again->region.owner_id, 0);
  CHECK(again->region.owner_name == NULL);
  CHECK_EQ(again->region.is_gen, 0);

  weft__stack_release(again);
  weft__stack_release(c);
  weft__stack_release(d);
  weft__stack_release(small);
  weft__stack_release(big);
  CHECK_EQ(weft__stack_trim(), 1);
}

/* ---- the guard page -------------------------------------------------- */
static void poke(void *p) {
  /* Make sure no handler but the default one sees the fault. */
  signal(SIGSEGV, SIG_DFL);
  *(volatile char *)p = 1;
  fprintf(stderr, "wrote to %p: no fault\n", p);
  _exit(3);
}

static void check_guard(const weft__stack *s, const char *what) {
  char *lo = (char *)s->region.lo;
  /* Both ends of the guard page. */
  char *targets[2] = {lo - 1, lo - pagesz};
  for (int i = 0; i < 2; i++) {
    static check_child res;
    check_child_run(poke, targets[i], &res, 30);
    if (!(WIFSIGNALED(res.status) &&
          (WTERMSIG(res.status) == SIGSEGV || WTERMSIG(res.status) == SIGBUS)))
      fprintf(stderr, "guard of a %s stack, byte %d below lo:\n", what,
              i ? (int)pagesz : 1);
    CHECK_KILLED_BY(res, SIGSEGV);
  }
  /* And the lowest usable byte is not guarded. */
  volatile char *v = (volatile char *)lo;
  *v = 5;
  CHECK_EQ(*v, 5);
}

static void test_guard(void) {
  weft__stack *s = weft__stack_acquire(0);
  CHECK(s != NULL);
  check_guard(s, "fresh");
  weft__stack_release(s);
  weft__stack *t = weft__stack_acquire(0);
  CHECK_PTR_EQ(t, s);
  check_guard(t, "reused");
  weft__stack_release(t);
  CHECK_EQ(weft__stack_trim(), 1);
}

/* ---- lazy commit, pages given back ----------------------------------- */
#define N_LAZY 1000

/* weft__stack_tidy's clock, as the loop would pass it: the test's own. */
static int64_t test_clock = 1;

/* Windows pass with no burst, tidied as the loop tidies: by the second
 * the pool is down to what it keeps at least. Returns how often a tidy
 * had more runs to give back than it may at once (it asks again at 0). */
static int windows_pass(void) {
  CHECK_EQ(weft__stack_tidy_wanted, 1);
  int64_t again;
  int n = 0, more = 0;
  while ((again = weft__stack_tidy(test_clock)) >= 0) {
    CHECK_GE(again, 0); /* 0: more runs to give back, at once */
    CHECK_LE(again, WEFT__STACK_WINDOW);
    more += again == 0;
    test_clock += again;
    CHECK_LT(++n, 3 + N_LAZY / WEFT__STACK_RUNS_MAX);
  }
  CHECK_EQ(weft__stack_tidy_wanted, 0);
  return more;
}

/* Pages of the probes (one per stack) that are resident. */
static int resident(const void *p) {
  unsigned char v = 0;
  void *pg = (void *)((uintptr_t)p & ~(uintptr_t)(pagesz - 1));
  CHECK_EQ(mincore(pg, pagesz, &v), 0);
  return v & 1;
}

static int count_resident(char *const *probe, int n) {
  int warm = 0;
  for (int i = 0; i < n; i++)
    warm += resident(probe[i]);
  return warm;
}

static void test_lazy(void) {
  static weft__stack *v[N_LAZY];
  size_t rss0 = check_rss();
  for (int i = 0; i < N_LAZY; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
  }
  size_t rss1 = check_rss();
  size_t grew = rss1 > rss0 ? rss1 - rss0 : 0;
  printf("1000 stacks: resident memory grew by %zu KiB (256000 KiB if "
         "committed)\n",
         grew / 1024);
  /* A descriptor page each, about 4 MB; committed they would be 256 MB.
   * Valgrind's shadow memory for those pages counts here too. */
  CHECK_LT(grew, (RUNNING_ON_VALGRIND ? 64 : 16) * 1024 * 1024);

  /* Use 32 KiB of each, then release them all. The pool keeps them warm
   * while the burst is recent; then, past the warm limit, the pages of a
   * chunk whose every stack is free go back to the kernel. */
  const size_t used = 32 * 1024;
  for (int i = 0; i < N_LAZY; i++) {
    char *top = (char *)v[i]->region.lo + v[i]->region.size;
    for (size_t off = pagesz; off <= used; off += pagesz)
      top[-(ptrdiff_t)off] = (char)i;
  }
  size_t rss2 = check_rss();
  CHECK_GT(rss2, rss1 + N_LAZY * (used - pagesz) / 2);
  CHECK_EQ(weft__stack_trim(), 0); /* stacks are out: nothing happens */
  for (int i = 0; i < N_LAZY; i++)
    weft__stack_release(v[i]);
  CHECK_GT(check_rss(), rss1 + N_LAZY * (used - pagesz) / 2); /* kept */
  windows_pass();
  size_t rss3 = check_rss();
  size_t back = rss2 > rss3 ? rss2 - rss3 : 0;
  printf("released: %zu KiB given back, %d warm stacks kept at most\n",
         back / 1024, WEFT__STACK_WARM_MAX);
  /* At most WEFT__STACK_WARM_MAX stay warm: with 1000 stacks in chunks of
   * 16, 32, ... 512 slots, 240 of the 256-slot chunk's and the last chunk's
   * 504 are given back (test_warm_limit counts them). */
  CHECK_GT(back, 400 * used);

  /* Reacquire all: the emptied slots come back as fresh stacks, zeroed,
   * with their guards. */
  int zeroed = 0;
  for (int i = 0; i < N_LAZY; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
    check_layout(v[i], 262144);
    char *top = (char *)v[i]->region.lo + v[i]->region.size;
    if (top[-(ptrdiff_t)pagesz * 2] == 0)
      zeroed++;
  }
  CHECK_GT(zeroed, 400);
  check_guard(v[N_LAZY - 1], "given-back-and-reopened");
  for (int i = 0; i < N_LAZY; i++)
    weft__stack_release(v[i]);
  CHECK_EQ(weft__stack_trim(), 1);
}

/* ---- the warm limit, whatever order the stacks come back in ----------
 * Once a burst is no longer recent the pool keeps at most
 * WEFT__STACK_WARM_MAX stacks with their pages. A chunk once was given
 * back only when more than that many warm stacks were left in *other*
 * chunks, so the chunk that emptied last kept every page its stacks had
 * touched: released newest first (or in a random order), 1000 stacks kept
 * 504 warm, and a burst of 20,000 tasks using 64 KiB each left 270 MB
 * resident, about one 1 GiB chunk's worth. */
/* Stacks in a burst: under valgrind fewer (still over the warm limit, in
 * five chunks), since its shadow memory makes each MADV_DONTNEED of a
 * chunk's hundreds of MB slow: at 1,000 test_stack took 117 s there. */
static int burst_size(void) { return RUNNING_ON_VALGRIND ? 300 : N_LAZY; }

static void warm_after(int order) {
  const int n = burst_size();
  static weft__stack *v[N_LAZY];
  static int perm[N_LAZY];
  static char *probe[N_LAZY]; /* a descriptor given back reads as zeros */
  for (int i = 0; i < n; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
    char *top = (char *)v[i]->region.lo + v[i]->region.size;
    probe[i] = top - 2 * pagesz; /* a page below the descriptor's */
    *probe[i] = 1;
    perm[i] = order == 1 ? n - 1 - i : i;
  }
  if (order == 2) {
    unsigned x = 12345;
    for (int i = n - 1; i > 0; i--) {
      x = x * 1103515245u + 12345u;
      int j = (int)((x >> 8) % (unsigned)(i + 1)), t = perm[i];
      perm[i] = perm[j];
      perm[j] = t;
    }
  }
  for (int i = 0; i < n; i++)
    weft__stack_release(v[perm[i]]);
  CHECK_EQ(count_resident(probe, n), n); /* the burst is recent */
  windows_pass();
  int warm = count_resident(probe, n);
  printf("released in %s order: %d stacks still warm\n",
         order == 0   ? "FIFO"
         : order == 1 ? "LIFO"
                      : "random",
         warm);
  CHECK_LE(warm, WEFT__STACK_WARM_MAX);
  CHECK_GT(warm, 0); /* some are kept, for the next burst */
  /* Reopened slots keep their guards. */
  for (int i = 0; i < n; i++)
    v[i] = weft__stack_acquire(0);
  check_guard(v[n / 2], "partly-given-back");
  for (int i = 0; i < n; i++)
    weft__stack_release(v[i]);
  CHECK_EQ(weft__stack_trim(), 1);
}

static void test_warm_limit(void) {
  for (int order = 0; order < 3; order++)
    warm_after(order);
}

/* ---- a burst's stacks, in a chunk still in use -----------------------
 * The stack acquired after a burst is the last one freed, in the newest,
 * largest chunk; while it is out, that chunk cannot give its pages back at
 * once, and kept the burst's pages there for as long (2,000 tasks of 32
 * KiB: 37 MB resident instead of 10). Its free stacks give theirs back,
 * and are handed out again as fresh ones.
 *
 * They once went one by one ("chill"), each in a MADV_DONTNEED of its own
 * (20-200 µs here, a TLB flush each) that kept the descriptor's page, 32
 * per tidy: the 247 past the warm limit in the straggler's chunk took 8
 * tidies, and kept 504 descriptor pages resident. Now a run of adjacent
 * free slots goes in one call, descriptor pages and all: the chunk's slots
 * below the one out are a single run. */
static void test_chunk_in_use(void) {
  const int n = burst_size();
  static weft__stack *v[N_LAZY];
  static char *probe[N_LAZY], *top_page[N_LAZY];
  for (int i = 0; i < n; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
    probe[i] = (char *)v[i]->region.lo + v[i]->region.size - 2 * pagesz;
    *probe[i] = 1;
    top_page[i] = (char *)v[i]; /* the descriptor's */
  }
  for (int i = 0; i < n; i++)
    weft__stack_release(v[i]);
  weft__stack *straggler = weft__stack_acquire(0);
  CHECK_PTR_EQ(straggler, v[n - 1]); /* LIFO: in the newest chunk */
  CHECK_EQ(windows_pass(), 0);       /* all in one tidy: a run per chunk */
  int warm = count_resident(probe, n), tops = count_resident(top_page, n);
  printf("one stack out after a burst of %d: %d still warm, %d descriptor "
         "pages resident\n",
         n, warm, tops);
  CHECK_LE(warm, WEFT__STACK_WARM_MAX + 1);
  CHECK_GT(warm, 0);
  CHECK_LE(tops, WEFT__STACK_WARM_MAX + 1);
  /* The given-back ones are handed out again, after the warm ones, as
   * fresh slots: zeroed, with their layout and their guards. */
  int zeroed = 0;
  for (int i = 0; i < n - 1; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
    check_layout(v[i], 262144);
    zeroed += *((char *)v[i]->region.lo + v[i]->region.size - 2 * pagesz) == 0;
    *((char *)v[i]->region.lo + 100) = 1; /* the bottom of one */
  }
  CHECK_GE(zeroed, n - 1 - WEFT__STACK_WARM_MAX);
  check_guard(v[n - 2], "given-back-below-one-out");
  for (int i = 0; i < n - 1; i++)
    weft__stack_release(v[i]);
  weft__stack_release(straggler);
  CHECK_EQ(weft__stack_trim(), 1);

  /* A stack of every chunk stays out (every 16th; the chunks hold 16, 32,
   * 64 ... slots), so no chunk ever empties: the rest still go. */
  for (int i = 0; i < n; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
    probe[i] = (char *)v[i]->region.lo + v[i]->region.size - 2 * pagesz;
    *probe[i] = 1;
    top_page[i] = (char *)v[i]; /* new chunks: the trim unmapped the old */
  }
  int kept = 0;
  for (int i = 0; i < n; i++)
    if (i % 16)
      weft__stack_release(v[i]);
    else
      kept++;
  /* A run between each two stacks out: more than a tidy gives back. */
  int more = windows_pass();
  warm = count_resident(probe, n);
  tops = count_resident(top_page, n);
  printf("one stack of every 16 out after a burst of %d: %d still warm, %d "
         "descriptor pages resident, %d tidies asked for more\n",
         n, warm, tops, more);
  CHECK_LE(warm, WEFT__STACK_WARM_MAX + kept);
  CHECK_LE(tops, WEFT__STACK_WARM_MAX + kept);
  CHECK_LE(more, (kept + 1) / WEFT__STACK_RUNS_MAX);
  /* Reacquired, they come back whole (the first fresh one handed out is
   * a slot between two out), and the stacks out kept their pages. */
  weft__stack *between = NULL;
  for (int i = 0; i < n; i++)
    if (i % 16) {
      v[i] = weft__stack_acquire(0);
      CHECK(v[i] != NULL);
      check_layout(v[i], 262144);
      char *p = (char *)v[i]->region.lo + v[i]->region.size - 2 * pagesz;
      if (!between && *p == 0)
        between = v[i];
      *((char *)v[i]->region.lo + 100) = 1;
    }
  CHECK(between != NULL);
  check_guard(between, "given-back-between-two-out");
  for (int i = 0; i < n; i += 16)
    CHECK_EQ(*probe[i], 1);
  for (int i = 0; i < n; i++)
    weft__stack_release(v[i]);
  CHECK_EQ(weft__stack_trim(), 1);
}

/* ---- given-back slots before new guards (mprotect) -------------------
 * With mprotect guards every guard is a mapping of its own, and at
 * vm.max_map_count no new one can be made. After a burst was given back,
 * the pool handed out the never-opened slots of its newest chunk, each
 * needing a new guard, before the opened slots of older chunks, whose
 * guards were still in place: under the cap, a loop that had run 32,749
 * tasks at once could then spawn 702 (found by a probe that ran such a
 * burst under a seccomp filter refusing MADV_GUARD_INSTALL). Here, in a
 * child, the filter makes weft use mprotect, and a second one then
 * refuses every new PROT_NONE guard, as the cap would: the burst's stacks
 * must all come back. */
/* Exit status of a child that could not install a filter: qemu-user (the
 * cross build) refuses PR_SET_SECCOMP with EINVAL, and so does a kernel
 * without CONFIG_SECCOMP_FILTER. */
#define NO_SECCOMP 77

/* Installs a filter under which system call `nr` with `arg2` as its third
 * argument fails with `err` (madvise's advice, mprotect's protection). */
static void refuse_call(int nr, unsigned arg2, int err) {
  struct sock_filter f[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (unsigned)nr, 0, 3),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS,
               offsetof(struct seccomp_data, args[2])),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, arg2, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (unsigned)err),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog prog = {.len = sizeof f / sizeof f[0], .filter = f};
  CHECK_EQ(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
  if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
    CHECK_EQ(errno, EINVAL);
    _exit(NO_SECCOMP);
  }
}

static void reopen_under_cap(void *unused) {
  (void)unused;
  const int n = burst_size();
  static weft__stack *v[N_LAZY];
  refuse_call(__NR_madvise, MADV_GUARD_INSTALL, EINVAL);
  for (int i = 0; i < n; i++) {
    v[i] = weft__stack_acquire(0);
    CHECK(v[i] != NULL);
  }
  CHECK_EQ(weft__stack_guard_mode(), 0);
  for (int i = 0; i < n; i++)
    weft__stack_release(v[i]);
  windows_pass();
  refuse_call(__NR_mprotect, PROT_NONE, ENOMEM);
  for (int i = 0; i < n; i++) {
    v[i] = weft__stack_acquire(0);
    if (!v[i]) {
      fprintf(stderr, "stack %d of %d: %s\n", i, n, strerror(errno));
      _exit(1);
    }
  }
  check_guard(v[n - 1], "reopened-under-the-cap");
}

static void test_reopen_under_cap(void) {
  check_child res;
  check_child_run(reopen_under_cap, NULL, &res, 60);
  if (res.err[0])
    printf("%s", res.err);
  if (WIFEXITED(res.status) && WEXITSTATUS(res.status) == NO_SECCOMP) {
    printf("reopen under the map cap: skipped (no seccomp filter here)\n");
    return;
  }
  CHECK_EXITED(res, 0);
}

/* ---- a burst that recurs finds its stacks warm -----------------------
 * Giving a burst's pages back as it ends made the next burst fault every
 * stack in again: 1000 tasks at a time cost 20 µs each instead of 60 ns. */
static void test_burst_recurs(void) {
  const int n = burst_size();
  static weft__stack *v[N_LAZY];
  static char *probe[N_LAZY];
  for (int round = 0; round < 4; round++) {
    for (int i = 0; i < n; i++) {
      v[i] = weft__stack_acquire(0);
      CHECK(v[i] != NULL);
      probe[i] = (char *)v[i]->region.lo + v[i]->region.size - 2 * pagesz;
    }
    if (round > 0) /* every stack of the burst kept its pages */
      CHECK_EQ(count_resident(probe, n), n);
    for (int i = 0; i < n; i++)
      *probe[i] = 1;
    for (int i = round & 1 ? n - 1 : 0; i >= 0 && i < n;
         i += round & 1 ? -1 : 1)
      weft__stack_release(v[i]);
    CHECK_EQ(weft__stack_tidy_wanted, 1);
    int64_t again = weft__stack_tidy(test_clock);
    CHECK_GT(again, 0);
    test_clock += WEFT__STACK_WINDOW / 2; /* the next burst comes sooner */
  }
  windows_pass();
  CHECK_LE(count_resident(probe, n), WEFT__STACK_WARM_MAX);
  CHECK_EQ(weft__stack_trim(), 1);
}

/* ---- trim ------------------------------------------------------------- */
static void test_trim(void) {
  size_t maps0 = check_map_count();
  weft__stack *s = weft__stack_acquire(0);
  weft__stack *t = weft__stack_acquire(65536);
  CHECK(s && t);
  CHECK_GT(check_map_count(), maps0); /* the chunks are mapped */
  CHECK_EQ(weft__stack_trim(), 0);
  weft__stack_release(s);
  CHECK_EQ(weft__stack_trim(), 0); /* t is still out */
  weft__stack_release(t);
  const void *slo = s->region.lo, *tlo = t->region.lo;
  CHECK_EQ(check_is_mapped(slo), 1);
  CHECK_EQ(weft__stack_trim(), 1);
  CHECK_EQ(check_is_mapped(slo), 0);
  CHECK_EQ(check_is_mapped(tlo), 0);
  if (!CHECK_ASAN)
    CHECK_EQ(check_map_count(), maps0);
  CHECK_EQ(weft__stack_trim(), 1); /* nothing left: still fine */
}

/* ---- a million ------------------------------------------------------- */
static size_t mem_available(void) {
  FILE *f = fopen("/proc/meminfo", "r");
  char line[256];
  size_t kb = 0;
  if (!f)
    return 0;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "MemAvailable: %zu kB", &kb) == 1)
      break;
  fclose(f);
  return kb * 1024;
}

static void test_million(void) {
  /* Scaled down where each fault costs far more: ASan's shadow, and
   * qemu-user (the cross build), where a million take over 10 minutes. */
#ifdef WEFT_TEST_EMULATED
  size_t want = 20000;
#else
  size_t want = CHECK_ASAN ? 20000 : 1000000;
#endif
  /* Each stack costs its descriptor's page plus page tables: ~4.5 KiB. */
  size_t need = want * 5 * 1024;
  if (mem_available() < need + need / 2) {
    printf("million stacks: only %zu MiB available, scaled down\n",
           mem_available() >> 20);
    want = mem_available() / (8 * 1024);
  }
  weft__stack **v = malloc(want * sizeof *v);
  CHECK(v != NULL);
  size_t maps0 = check_map_count();
  size_t n = 0;
  int mode = -1;
  for (; n < want; n++) {
    v[n] = weft__stack_acquire(0);
    if (!v[n])
      break;
    if (n == 0)
      mode = weft__stack_guard_mode();
  }
  int err = errno;
  size_t maps1 = check_map_count();
  printf("guard mode %d: %zu stacks acquired, mappings %zu -> %zu\n", mode, n,
         maps0, maps1);
  if (mode == 1) {
    CHECK_EQ(n, want); /* all of them */
    CHECK_LT(maps1, 1000);
  } else {
    CHECK_EQ(mode, 0);
    /* mprotect guards split the mapping: vm.max_map_count stops it, with
     * a clean ENOMEM instead of a crash. */
    if (n < want) {
      CHECK_EQ(err, ENOMEM);
      CHECK_GT(n, 10000);
    }
  }
  /* The last one is a real stack. */
  volatile char *lo = (volatile char *)v[n - 1]->region.lo;
  lo[0] = 1;
  const void *first = v[0]->region.lo, *last = v[n - 1]->region.lo;
  CHECK_EQ(weft__stack_trim(), 0);
  for (size_t i = 0; i < n; i++)
    weft__stack_release(v[i]);
  CHECK_EQ(weft__stack_trim(), 1);
  /* Everything unmapped (the count itself also moves with ASan's own
   * mappings, so look at the stacks' addresses). */
  CHECK_EQ(check_is_mapped(first), 0);
  CHECK_EQ(check_is_mapped(last), 0);
  if (!CHECK_ASAN)
    CHECK_EQ(check_map_count(), maps0);
  free(v);
}

/* ---- address space short ---------------------------------------------
 * In a child: the process may map 600 MiB more than it has. A 100 MiB
 * stack's chunk would be 1 GiB (ten slots); the pool must settle for
 * fewer, and hand out five such stacks, each usable to its lowest byte. */
#define BIG_STACK ((size_t)100 << 20)

static void big_stacks(void *unused) {
  (void)unused;
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0;
  CHECK(f != NULL && fscanf(f, "%lu", &pages) == 1);
  fclose(f);
  struct rlimit rl = {pages * pagesz + ((size_t)600 << 20), RLIM_INFINITY};
  CHECK_EQ(setrlimit(RLIMIT_AS, &rl), 0);
  for (int i = 0; i < 5; i++) {
    weft__stack *s = weft__stack_acquire(BIG_STACK);
    if (!s) {
      fprintf(stderr, "stack %d of 100 MiB: %s\n", i, strerror(errno));
      _exit(1);
    }
    volatile char *lo = (volatile char *)s->region.lo;
    lo[0] = 1;
  }
}

static void test_address_space(void) {
  check_child res;
  check_child_run(big_stacks, NULL, &res, 30);
  CHECK_EXITED(res, 0);
}

/* `test_stack million` runs only the million-stack case (a ctest entry of
 * its own, with a longer timeout); without arguments, everything else. */
int main(int argc, char **argv) {
  pagesz = (size_t)sysconf(_SC_PAGESIZE);
  if (argc > 1 && strcmp(argv[1], "million") == 0) {
    if (RUNNING_ON_VALGRIND)
      SKIP("a million stacks: too slow under valgrind");
    struct timespec a, b;
    clock_gettime(CLOCK_MONOTONIC, &a);
    test_million();
    clock_gettime(CLOCK_MONOTONIC, &b);
    printf("%.1f s\n",
           (double)(b.tv_sec - a.tv_sec) + (b.tv_nsec - a.tv_nsec) / 1e9);
    printf("ok\n");
    return 0;
  }
  test_round();
  test_layout();
  test_lifo();
  test_guard();
  CHECK_EQ(weft__stack_trim(), 1);
  test_lazy();
  test_warm_limit();
  test_burst_recurs();
  test_chunk_in_use();
  if (!RUNNING_ON_VALGRIND) /* its own mprotect calls would be refused */
    test_reopen_under_cap();
  test_trim();
  /* ASan reserves terabytes of shadow memory: no RLIMIT_AS for it. */
  if (!CHECK_ASAN && !RUNNING_ON_VALGRIND)
    test_address_space();
  printf("ok\n");
  return 0;
}
