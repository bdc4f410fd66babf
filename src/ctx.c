/*
 * Layer 1: the context switch, as the rest of weft sees it: the raw switch
 * (assembly or ucontext) wrapped with the notes that ASan and TSan need to
 * follow a flow of control from one stack to another.
 *
 * ASan's protocol: before leaving a stack, __sanitizer_start_switch_fiber
 * with the destination's bounds (and a place to park this stack's fake
 * frames, or NULL if this stack is dying); right after arriving,
 * __sanitizer_finish_switch_fiber, which also tells us the bounds of the
 * stack we came from. That is how the thread's own stack gets its bounds:
 * weft cannot know them before the first switch away from it.
 */
#include "ctx.h"

#include <stdlib.h>
#ifdef WEFT_CTX_UCONTEXT
#include <pthread.h>
#include <signal.h>
#endif

/* The stack now running on this thread, and the one that ran before the
 * last switch (ASan reports the latter's bounds on arrival). */
WEFT__TLS weft__region *weft__ctx_cur;
WEFT__TLS weft__region *weft__ctx_prev;
static WEFT__TLS weft__region thread_region;

#define running  weft__ctx_cur
#define previous weft__ctx_prev

weft__region *weft__ctx_running(void) {
  if (!running) {
    running = &thread_region;
#ifdef WEFT_TSAN
    thread_region.tsan_fiber = __tsan_get_current_fiber();
#endif
  }
  return running;
}

static inline void arrived(weft__ctx *self) {
#ifdef WEFT_ASAN
  const void *lo;
  size_t size;
  __sanitizer_finish_switch_fiber(self->asan_fake, &lo, &size);
  if (previous && previous->size == 0) {
    previous->lo = lo;
    previous->size = size;
  }
#endif
  (void)self;
}

static inline void leaving(weft__ctx *from, weft__ctx *to, int dying) {
  weft__region *self = weft__ctx_running();
  from->region = self;
  previous = self;
  running = to->region;
#ifdef WEFT_ASAN
  __sanitizer_start_switch_fiber(dying ? NULL : &from->asan_fake,
                                 to->region->lo, to->region->size);
#endif
#ifdef WEFT_TSAN
  __tsan_switch_to_fiber(to->region->tsan_fiber, 0);
#endif
  (void)dying;
}

void weft__ctx_started(weft__ctx *self) {
  self->asan_fake = NULL;
  arrived(self);
}

#ifdef WEFT_CTX_UCONTEXT
/* ucontext passes only ints to the entry function, so the entry and its
 * argument travel through these, set by the switch that starts a context. */
static WEFT__TLS weft__ctx *uc_target;
static WEFT__TLS void *uc_arg;

static void uc_trampoline(void) {
  weft__ctx *self = uc_target;
  self->entry(uc_arg);
  abort(); /* entry never returns */
}

void weft__ctx_make(weft__ctx *c, weft__region *r, void (*entry)(void *)) {
  getcontext(&c->uc);
  c->uc.uc_stack.ss_sp = (void *)r->lo;
  c->uc.uc_stack.ss_size = r->size;
  c->uc.uc_link = NULL;
  makecontext(&c->uc, uc_trampoline, 0);
  c->entry = entry;
  c->region = r;
  c->asan_fake = NULL;
}

static inline void *raw_switch(weft__ctx *from, weft__ctx *to, void *arg) {
  uc_target = to;
  uc_arg = arg;
  /* swapcontext also switches the signal mask to the one `to` had when it
   * was saved (or made). The mask belongs to the thread, as with the
   * hand-written switches: weft_loop_run blocks SIGPIPE after tasks were
   * made, and a task must not unblock it. So `to` takes the current mask
   * (one more system call; this switch makes one anyway). */
  pthread_sigmask(SIG_SETMASK, NULL, &to->uc.uc_sigmask);
  swapcontext(&from->uc, &to->uc);
  return uc_arg;
}
#else
extern void weft__ctx_trampoline(void);

void weft__ctx_make(weft__ctx *c, weft__region *r, void (*entry)(void *)) {
  uintptr_t top = ((uintptr_t)r->lo + r->size) & ~(uintptr_t)15;
#if defined(__x86_64__)
  /* The frame ctx_x86_64.S pops; see the diagram there. The new context
   * inherits the creator's floating-point control state, as a thread does. */
  uint64_t *sp = (uint64_t *)(top - 64);
  uint32_t mxcsr;
  uint16_t fcw;
  __asm__ volatile("stmxcsr %0" : "=m"(mxcsr));
  __asm__ volatile("fnstcw %0" : "=m"(fcw));
  sp[0] = mxcsr | ((uint64_t)fcw << 32);
  sp[1] = (uintptr_t)entry; /* r12 */
  for (int i = 2; i < 7; i++)
    sp[i] = 0; /* r13, r14, r15, rbx, rbp */
  sp[7] = (uintptr_t)weft__ctx_trampoline;
#elif defined(__aarch64__)
  /* The frame ctx_aarch64.S pops; see the diagram there. */
  uint64_t *sp = (uint64_t *)(top - 176);
  uint64_t fpcr;
  __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
  for (int i = 0; i < 22; i++)
    sp[i] = 0;
  sp[8] = (uintptr_t)entry;                 /* x19 */
  sp[19] = (uintptr_t)weft__ctx_trampoline; /* x30 */
  sp[20] = fpcr;
#else
#error "no hand-written context switch for this target: use -DWEFT_CTX=ucontext"
#endif
  c->sp = sp;
  c->region = r;
  c->asan_fake = NULL;
}

static inline void *raw_switch(weft__ctx *from, weft__ctx *to, void *arg) {
  return weft__ctx_jump(&from->sp, to->sp, arg);
}
#endif

#if defined(WEFT_CTX_UCONTEXT) || defined(WEFT_ASAN) || defined(WEFT_TSAN)
void *weft__ctx_switch(weft__ctx *from, weft__ctx *to, void *arg) {
  leaving(from, to, 0);
  arg = raw_switch(from, to, arg);
  arrived(from);
  return arg;
}
#endif

void weft__ctx_exit(weft__ctx *from, weft__ctx *to, void *arg) {
  leaving(from, to, 1);
  raw_switch(from, to, arg);
  abort(); /* nobody resumes a context that exited */
}
