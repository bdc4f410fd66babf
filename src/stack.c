/* Layer 1: guarded, pooled, lazily committed stacks; see stack.h for the
 * layout. */
#include "stack.h"

#include "alloc.h"
#include "tools.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

/* Slots per chunk: the first chunk of a size is small, so a program with a
 * few tasks maps little; each next one doubles, up to about 1 GiB. */
#define CHUNK_FIRST     16
#define CHUNK_MAX_BYTES ((size_t)1 << 30)

/* A slot below `used` is out, warm (its descriptor on the warm list), or
 * given back: its pages, descriptor and all, went back to the kernel and
 * its bit in `fresh` is set, so it is handed out again like a slot never
 * opened. Slots from `used` on were never opened, or were given back while
 * at the top of those opened. */
typedef struct weft__chunk {
  struct weft__chunk *next; /* the class's chunks, newest first */
  char *base;               /* the mapping */
  size_t slots;             /* slots in it */
  size_t used;              /* the slots below this one were opened */
  size_t guarded;           /* slots whose guard is in place (>= used) */
  size_t out;               /* slots acquired and not released */
  size_t given;             /* slots below `used` given back: bits in fresh */
  weft__free_fn free_fn;    /* frees this record (alloc.h) */
  uint64_t fresh[];         /* bit i: slot i < used was given back */
} chunk;

/* The pool of one stack size on one thread. */
struct weft__stack_class {
  weft__stack_class *next; /* the thread's other sizes */
  size_t size;             /* slot bytes: guard + usable + header */
  size_t nominal;          /* the size asked for, rounded to pages */
  chunk *chunks;           /* every mapping of this size */
  weft__stack *warm;       /* freed stacks with their pages, LIFO */
  size_t nwarm;
  size_t out;            /* stacks of this class in use */
  size_t peak;           /* the most out at once in this window */
  size_t prev_peak;      /* ... and in the window before */
  int64_t window_end;    /* when this window ends (weft__stack_tidy's clock) */
  weft__free_fn free_fn; /* frees this record (alloc.h) */
};

WEFT__TLS int weft__stack_tidy_wanted;

static WEFT__TLS weft__stack_class *classes;
static size_t page_size;
/* 1 MADV_GUARD_INSTALL, 0 mprotect, -1 not probed. Probed on the first
 * slot; a race between threads probing at once is benign (same answer). */
static int guard_mode = -1;

int weft__stack_guard_mode(void) {
  return __atomic_load_n(&guard_mode, __ATOMIC_RELAXED);
}

static size_t page(void) {
  /* Threads may ask first at once: each stores the same value, atomically
   * (a plain store would be a data race, if a harmless one). */
  size_t p = __atomic_load_n(&page_size, __ATOMIC_RELAXED);
  if (!p) {
    p = (size_t)sysconf(_SC_PAGESIZE);
    __atomic_store_n(&page_size, p, __ATOMIC_RELAXED);
  }
  return p;
}

size_t weft__stack_round(size_t size) {
  size_t p = page();
  if (size == 0)
    size = WEFT__STACK_DEFAULT;
  if (size > WEFT__STACK_MAX)
    return 0; /* rounding, and the chunk sizes, would wrap */
  if (size < 4 * p)
    size = 4 * p; /* room for the header and a few frames */
  return (size + p - 1) & ~(p - 1);
}

static weft__stack_class *class_for(size_t nominal) {
  for (weft__stack_class *c = classes; c; c = c->next)
    if (c->nominal == nominal)
      return c;
  weft__stack_class *c = weft__calloc(1, sizeof *c);
  if (!c)
    return NULL;
  c->free_fn = weft__free_fn_now();
  if (!classes)
    weft__stack_thread_init();
  c->nominal = nominal;
  c->size = nominal + page(); /* plus the guard page */
  c->next = classes;
  classes = c;
  return c;
}

/* Whether the page at `addr` really refuses access: the kernel reports
 * EFAULT for a write(2) from it, where a plain read would fault the
 * process. Needed once, because an emulator (qemu-user) can accept advice
 * it does not act on and say it succeeded. */
static int guard_works(const char *addr) {
  int p[2];
  if (pipe(p) != 0)
    return 1; /* cannot tell: trust the kernel's answer */
  ssize_t n = write(p[1], addr, 1);
  int refused = n < 0 && errno == EFAULT;
  close(p[0]);
  close(p[1]);
  return refused;
}

static int install_guard(char *slot) {
  int mode = weft__stack_guard_mode();
  if (mode != 0) {
    if (madvise(slot, page(), MADV_GUARD_INSTALL) == 0 &&
        (mode == 1 || guard_works(slot))) {
      __atomic_store_n(&guard_mode, 1, __ATOMIC_RELAXED);
      return 0;
    }
    if (mode == -1 || errno == EINVAL || errno == ENOSYS) {
      /* Not there (or not real): mprotect from now on. A guard marker
       * that was accepted is harmless under the PROT_NONE that follows. */
      __atomic_store_n(&guard_mode, 0, __ATOMIC_RELAXED);
    } else {
      return -errno;
    }
  }
  /* Each guard now splits the mapping: past vm.max_map_count this fails
   * with ENOMEM, and so does the spawn. */
  return mprotect(slot, page(), PROT_NONE) == 0 ? 0 : -errno;
}

static chunk *map_chunk(weft__stack_class *c) {
  size_t n = c->chunks ? c->chunks->slots * 2 : CHUNK_FIRST;
  if (c->size > CHUNK_MAX_BYTES / n) /* n * c->size, without wrapping */
    n = CHUNK_MAX_BYTES / c->size ? CHUNK_MAX_BYTES / c->size : 1;
  /* A chunk reserves address space only; where that is short (RLIMIT_AS),
   * fewer slots may still fit, down to the one asked for. */
  void *base;
  while ((base = mmap(NULL, n * c->size, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0)) ==
             MAP_FAILED &&
         n > 1)
    n /= 2;
  if (base == MAP_FAILED) {
    errno = ENOMEM;
    return NULL;
  }
  chunk *k = weft__calloc(1, sizeof *k + (n + 63) / 64 * sizeof(uint64_t));
  if (!k) {
    munmap(base, n * c->size);
    return NULL;
  }
  k->free_fn = weft__free_fn_now();
  k->base = base;
  k->slots = n;
  k->next = c->chunks;
  c->chunks = k;
  return k;
}

static int is_given(const chunk *k, size_t i) {
  return (k->fresh[i / 64] >> (i % 64)) & 1;
}

static void set_given(chunk *k, size_t i) {
  k->fresh[i / 64] |= (uint64_t)1 << (i % 64);
  k->given++;
}

static void clear_given(chunk *k, size_t i) {
  k->fresh[i / 64] &= ~((uint64_t)1 << (i % 64));
  k->given--;
}

/* The lowest slot of k given back, taken out of `fresh`; k->given > 0. Its
 * guard is in place: it was opened once. */
static size_t take_given(chunk *k) {
  size_t w = 0;
  while (!k->fresh[w])
    w++;
  size_t i = w * 64 + (size_t)__builtin_ctzll(k->fresh[w]);
  clear_given(k, i);
  return i;
}

/* A slot with no descriptor: from the newest chunk with a slot whose guard
 * is in place (its lowest given back, else its next above `used` below
 * `guarded`), else from the newest chunk with room, its next never opened;
 * or from a new chunk. Guarded slots first: with mprotect a new guard is a
 * new mapping, which vm.max_map_count can refuse while the slots of a
 * burst given back sit free in older chunks. */
static char *fresh_slot(weft__stack_class *c, chunk **kp) {
  chunk *k = c->chunks;
  while (k && !k->given && k->used == k->guarded)
    k = k->next;
  if (!k)
    for (k = c->chunks; k && k->used == k->slots; k = k->next)
      ;
  if (!k && !(k = map_chunk(c)))
    return NULL;
  if (k->given) {
    *kp = k;
    return k->base + take_given(k) * c->size;
  }
  char *slot = k->base + k->used * c->size;
  if (k->used == k->guarded) {
    if (install_guard(slot) < 0) {
      errno = ENOMEM;
      return NULL;
    }
    k->guarded++;
  }
  k->used++;
  *kp = k;
  return slot;
}

_Static_assert(sizeof(weft__stack) <= WEFT__STACK_HEADER, "header too small");

/* Writes the descriptor of `slot` and tells the tools about the stack. */
static weft__stack *open_slot(weft__stack_class *c, chunk *k, char *slot) {
  char *top = slot + c->size;
  weft__stack *s = (weft__stack *)(top - WEFT__STACK_HEADER);
  memset(s, 0, sizeof *s);
  s->cls = c;
  s->chunk = k;
  s->region.guard = page();
  s->region.lo = slot + page();
  s->region.size = (size_t)((char *)s - (slot + page()));
  s->region.nominal = c->nominal;
#ifdef WEFT_VALGRIND
  s->vg_id = VALGRIND_STACK_REGISTER(s->region.lo,
                                     (char *)s->region.lo + s->region.size);
#endif
#ifdef WEFT_TSAN
  s->region.tsan_fiber = __tsan_create_fiber(0);
#endif
  return s;
}

static void close_slot(weft__stack *s) {
#ifdef WEFT_VALGRIND
  VALGRIND_STACK_DEREGISTER(s->vg_id);
#endif
#ifdef WEFT_TSAN
  __tsan_destroy_fiber(s->region.tsan_fiber);
#endif
  (void)s;
}

static void warm_push(weft__stack_class *c, weft__stack *s) {
  s->warm = 1;
  s->prev = NULL;
  s->next = c->warm;
  if (c->warm)
    c->warm->prev = s;
  c->warm = s;
  c->nwarm++;
}

static void warm_unlink(weft__stack_class *c, weft__stack *s) {
  if (s->prev)
    s->prev->next = s->next;
  else
    c->warm = s->next;
  if (s->next)
    s->next->prev = s->prev;
  s->warm = 0;
  c->nwarm--;
}

/* Under ASan the top of a stack in the pool is poisoned: a pointer into a
 * finished task's frames (a local handed to a task that outlives it, a
 * waiter left linked) is reported at its first use, where the stack's
 * next owner would have hidden it (a newcomer's proxy wrote through one
 * after a join cut short by a cancellation; ASan said nothing). Only the
 * top, where a task's own frames are: the whole stack is 32 KiB of shadow
 * to write per release. A slot given back and handed out again as fresh
 * is unpoisoned the same way, at acquire. */
#ifdef WEFT_ASAN
#define POISON_TOP ((size_t)16 * 1024)
static void poison_top(weft__stack *s, int poison) {
  size_t n = s->region.size < POISON_TOP ? s->region.size : POISON_TOP;
  char *lo = (char *)s->region.lo + s->region.size - n;
  if (poison)
    __asan_poison_memory_region(lo, n);
  else
    __asan_unpoison_memory_region(lo, n);
}
#else
static void poison_top(weft__stack *s, int poison) {
  (void)s;
  (void)poison;
}
#endif

weft__stack *weft__stack_acquire(size_t size) {
  size_t nominal = weft__stack_round(size);
  if (!nominal) {
    errno = ENOMEM; /* no such stack could ever be mapped */
    return NULL;
  }
  weft__stack_class *c = class_for(nominal);
  if (!c)
    return NULL;
  weft__stack *s = c->warm;
  if (s) {
    warm_unlink(c, s);
    s->region.owner_id = 0;
    s->region.owner_name = NULL;
    s->region.is_gen = 0;
  } else {
    chunk *k;
    char *slot = fresh_slot(c, &k);
    if (!slot)
      return NULL;
    s = open_slot(c, k, slot);
  }
  poison_top(s, 0);
  s->chunk->out++;
  if (++c->out > c->peak)
    c->peak = c->out;
  return s;
}

void weft__stack_release_abandoned(weft__stack *s) {
#ifdef WEFT_ASAN
  /* ASan still marks the frames that never returned on this stack; the
   * next owner must not inherit them. Only here, not on every release:
   * unpoisoning a whole stack writes (and commits) its shadow. */
  __asan_unpoison_memory_region(s->region.lo, s->region.size);
#endif
  weft__stack_release(s);
}

/* The warm stacks c may keep: enough to go back to the most that were out
 * at once lately (this window and the last), and at least
 * WEFT__STACK_WARM_MAX. */
static size_t warm_allowed(const weft__stack_class *c) {
  size_t peak = c->peak > c->prev_peak ? c->peak : c->prev_peak;
  size_t room = peak - c->out; /* the peaks count c->out: never below it */
  return room > WEFT__STACK_WARM_MAX ? room : WEFT__STACK_WARM_MAX;
}

static weft__stack *descriptor(const weft__stack_class *c, const chunk *k,
                               size_t i) {
  return (weft__stack *)(k->base + (i + 1) * c->size - WEFT__STACK_HEADER);
}

/* Slot i of k (below k->used) is not out: warm, or given back already. */
static int is_free(const weft__stack_class *c, const chunk *k, size_t i) {
  return is_given(k, i) || descriptor(c, k, i)->warm;
}

/* Gives back the pages of the warm slots [lo, hi) of k and of the given-back
 * slots among them, guards included (the guards survive it: markers of
 * MADV_GUARD_INSTALL stay, and mprotect's PROT_NONE is the mapping's, so
 * the call spans each guard's mapping), all in one MADV_DONTNEED. */
static void give_back_run(weft__stack_class *c, chunk *k, size_t lo,
                          size_t hi) {
  int top = hi == k->used; /* from lo on, all fresh: no bits needed */
  for (size_t i = lo; i < hi; i++)
    if (!is_given(k, i)) {
      weft__stack *s = descriptor(c, k, i);
      warm_unlink(c, s);
      close_slot(s);
      if (!top)
        set_given(k, i);
    } else if (top) {
      clear_given(k, i);
    }
  madvise(k->base + lo * c->size, (hi - lo) * c->size, MADV_DONTNEED);
  if (top)
    k->used = lo;
}

/* Gives back the pages of c's warm stacks beyond what it may keep, in runs
 * of adjacent slots that are free (warm, or given back already), one
 * MADV_DONTNEED each (a call costs about the same for one stack or many: a
 * TLB flush), at most `max` calls. The newest (largest) chunk first, and in
 * each the highest slots first, so that a chunk's top run lowers its
 * `used`. With `busy` 0, only in chunks with no stack out, where that is one
 * run. Returns whether some are left to give back. */
static int give_back(weft__stack_class *c, int busy, size_t max) {
  size_t allowed = warm_allowed(c);
  for (chunk *k = c->chunks; k && c->nwarm > allowed; k = k->next) {
    if (k->out && !busy)
      continue;
    size_t i = k->used;
    /* Stop at the chunk's lowest warm slot: below, nothing is to go. */
    while (i > 0 && k->used - k->given - k->out > 0 && c->nwarm > allowed) {
      while (!is_free(c, k, i - 1))
        i--; /* out (a warm slot is left below, so i stays above 0) */
      size_t hi = i, take = c->nwarm - allowed, warm = 0;
      while (i > 0 && (is_given(k, i - 1) ||
                       (warm < take && descriptor(c, k, i - 1)->warm))) {
        i--;
        warm += !is_given(k, i);
      }
      if (!warm)
        continue; /* given-back slots below stacks out */
      if (!max)
        return 1;
      max--;
      give_back_run(c, k, i, hi);
    }
  }
  return c->nwarm > allowed;
}

/* A stack came back with more than WEFT__STACK_WARM_MAX warm: if its
 * chunk emptied, what the windows do not keep goes at once; the rest is
 * for weft__stack_tidy to look at as they pass (even when no chunk
 * empties: a long-lived task in each keeps them all in use). */
static __attribute__((noinline)) void release_excess(weft__stack_class *c,
                                                     const chunk *k) {
  if (k->out == 0)
    give_back(c, 0, SIZE_MAX);
  if (c->nwarm > WEFT__STACK_WARM_MAX)
    weft__stack_tidy_wanted = 1;
}

void weft__stack_release(weft__stack *s) {
  weft__stack_class *c = s->cls;
  chunk *k = s->chunk;
  poison_top(s, 1);
  c->out--;
  k->out--;
  warm_push(c, s);
  if (c->nwarm > WEFT__STACK_WARM_MAX)
    release_excess(c, k);
}

int64_t weft__stack_tidy(int64_t now) {
  int64_t next = -1;
  for (weft__stack_class *c = classes; c; c = c->next) {
    if (c->nwarm <= WEFT__STACK_WARM_MAX)
      continue;
    if (now >= c->window_end) {
      c->prev_peak = c->peak;
      c->peak = c->out;
      c->window_end = now + WEFT__STACK_WINDOW;
    }
    int64_t wait = c->window_end - now;
    if (give_back(c, 1, WEFT__STACK_RUNS_MAX))
      wait = 0; /* more to give back: at the next poll */
    else if (c->nwarm <= WEFT__STACK_WARM_MAX)
      continue;
    if (next < 0 || wait < next)
      next = wait;
  }
  weft__stack_tidy_wanted = next >= 0;
  return next;
}

int weft__stack_trim(void) {
  for (weft__stack_class *c = classes; c; c = c->next)
    if (c->out)
      return 0;
  while (classes) {
    weft__stack_class *c = classes;
    classes = c->next;
    for (weft__stack *s = c->warm; s; s = s->next)
      close_slot(s);
    while (c->chunks) {
      chunk *k = c->chunks;
      c->chunks = k->next;
#ifdef WEFT_ASAN
      /* The frames that never returned (each task's first) stay marked
       * in ASan's shadow, which munmap leaves as it is: the next mapping
       * at these addresses (io_uring's buffer ring) was taken for a
       * stack's redzone, and its first write reported. */
      __asan_unpoison_memory_region(k->base, k->slots * c->size);
#endif
      munmap(k->base, k->slots * c->size);
      k->free_fn(k); /* the allocator may have been replaced since */
    }
    c->free_fn(c);
  }
  weft__stack_tidy_wanted = 0;
  return 1;
}

/* A thread that exits gives its pool back, if nothing of it is in use. */
static pthread_key_t exit_key;
static pthread_once_t exit_once = PTHREAD_ONCE_INIT;

static void on_thread_exit(void *unused) {
  (void)unused;
  weft__stack_trim();
  weft__overflow_thread_exit();
}

static void make_exit_key(void) {
  pthread_key_create(&exit_key, on_thread_exit);
}

void weft__stack_thread_init(void) {
  pthread_once(&exit_once, make_exit_key);
  pthread_setspecific(exit_key, (void *)1);
}
