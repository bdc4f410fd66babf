/*
 * Layer 1: the context switch.
 *
 * A context is a suspended flow of control: a stack pointer into a stack on
 * which the callee-saved registers were pushed. Switching saves the running
 * flow into one context and resumes another, passing one pointer across.
 *
 * Three implementations share this interface:
 *   ctx_x86_64.S   System V x86-64, hand-written
 *   ctx_aarch64.S  AAPCS64, hand-written
 *   ctx.c          getcontext/makecontext/swapcontext, for any POSIX target
 *                  (its ucontext part; selectable with -DWEFT_CTX=ucontext)
 *
 * ctx.c wraps the raw switch with what the tools need to follow a switch:
 * ASan's fiber annotations, TSan's fibers, and the thread's "running region"
 * that the stack-overflow handler and errno bookkeeping read.
 */
#ifndef WEFT_CTX_H
#define WEFT_CTX_H

#include "tools.h"

#include <stddef.h>
#include <stdint.h>

#ifdef WEFT_CTX_UCONTEXT
#include <ucontext.h>
#endif

/* Thread-local state of weft. initial-exec makes each access one load off
 * the thread pointer, where the default model for position-independent code
 * calls __tls_get_addr on every access: that call would cost more than the
 * context switch it serves. */
#define WEFT__TLS __thread __attribute__((tls_model("initial-exec")))

/* A stack region, as the tools see it. Every task, every generator and each
 * thread's original stack has one. */
typedef struct weft__region {
  const void *lo;    /* lowest usable address (above the guard page) */
  size_t size;       /* usable bytes from lo upwards; 0 if not known yet */
  size_t guard;      /* bytes of guard just below lo (0: none we know of) */
  size_t nominal;    /* the stack size asked for, for the overflow message */
  void *tsan_fiber;  /* TSan's fiber for this stack (NULL without TSan) */
  uint64_t owner_id; /* task id (generators: their own id) for messages */
  const char *owner_name; /* task name or NULL, for the overflow message */
  int is_gen;             /* 1 for a generator's stack, for the message */
} weft__region;

/* A suspended flow of control. */
typedef struct weft__ctx {
#ifdef WEFT_CTX_UCONTEXT
  ucontext_t uc;         /* the whole register file, as libc saves it */
  void (*entry)(void *); /* run by the first switch to a fresh context */
#else
  void *sp; /* stack pointer with the callee-saved registers */
#endif
  weft__region *region; /* the stack this context was suspended on */
  void *asan_fake;      /* ASan's fake-stack handle while suspended */
} weft__ctx;

/* Prepares `c` to run entry(arg) on the stack [lo, lo + size) when it is
 * first switched to; `arg` is the value passed by that first switch. entry
 * must never return: it ends by switching away with weft__ctx_exit. */
void weft__ctx_make(weft__ctx *c, weft__region *r, void (*entry)(void *));

/* As weft__ctx_switch, for a flow that will never be resumed: the tools are
 * told its stack is gone. */
void weft__ctx_exit(weft__ctx *from, weft__ctx *to, void *arg)
    __attribute__((noreturn));

/* Must be the first call in every entry function: finishes the switch that
 * started this context, for the tools. */
void weft__ctx_started(weft__ctx *self);

/* The region of the stack now running on this thread (the thread's own stack
 * region when no task or generator runs). */
weft__region *weft__ctx_running(void);

/* The raw switch of the assembly implementations: pushes the callee-saved
 * registers and the floating-point control state, stores the stack pointer
 * in *save_sp, loads new_sp, pops and returns `arg` on the other side. A
 * fresh context (weft__ctx_make) receives `arg` as entry's argument. */
void *weft__ctx_jump(void **save_sp, void *new_sp, void *arg);

/* The same code under a second name, returning the value as an int, so that
 * an int-returning caller can end in a tail call to it. */
int weft__ctx_jump_int(void **save_sp, void *new_sp, intptr_t value);

/* The running region, and the one that ran before the last switch. Read
 * through weft__ctx_running(), which fills in the thread's own region. */
extern WEFT__TLS weft__region *weft__ctx_cur;
extern WEFT__TLS weft__region *weft__ctx_prev;

/* Suspends the running flow into `from` and resumes `to`, handing it `arg`.
 * Returns the value handed back by whoever resumes `from` later.
 *
 * Builds that must tell a sanitizer about each switch, and the ucontext
 * build, call the out-of-line version in ctx.c. The plain assembly build
 * inlines this, so that a switch costs the bookkeeping of three stores and
 * the jump itself. */
#if defined(WEFT_CTX_UCONTEXT) || defined(WEFT_ASAN) || defined(WEFT_TSAN)
void *weft__ctx_switch(weft__ctx *from, weft__ctx *to, void *arg);

static inline int weft__ctx_switch_int(weft__ctx *from, weft__ctx *to,
                                       int value) {
  return (int)(intptr_t)weft__ctx_switch(from, to, (void *)(intptr_t)value);
}

static inline void weft__ctx_leave(weft__ctx *from, weft__ctx *to, void *arg) {
  weft__ctx_exit(from, to, arg);
}
#else
/* The bookkeeping of every switch: `from` is suspended on the running
 * region, and `to`'s region runs next. */
static inline void weft__ctx_moving(weft__ctx *from, weft__ctx *to) {
  weft__region *self = weft__ctx_cur;
  if (__builtin_expect(!self, 0))
    self = weft__ctx_running();
  from->region = self;
  weft__ctx_prev = self;
  weft__ctx_cur = to->region;
}

static inline void *weft__ctx_switch(weft__ctx *from, weft__ctx *to,
                                     void *arg) {
  weft__ctx_moving(from, to);
  return weft__ctx_jump(&from->sp, to->sp, arg);
}

/* As weft__ctx_switch, passing an int. A caller that has nothing left to do
 * after the switch can `return` this, and the compiler makes it a tail
 * call: the switch then returns straight to that caller's caller. */
static inline int weft__ctx_switch_int(weft__ctx *from, weft__ctx *to,
                                       int value) {
  weft__ctx_moving(from, to);
  return weft__ctx_jump_int(&from->sp, to->sp, value);
}

/* weft__ctx_exit, inlined: for the last statement of an entry function,
 * where the compiler makes it a tail jump, so the switch leaves no entry on
 * the return-address predictor behind it. */
static inline void weft__ctx_leave(weft__ctx *from, weft__ctx *to, void *arg) {
  weft__ctx_moving(from, to);
  weft__ctx_jump(&from->sp, to->sp, arg);
}
#endif

#endif
