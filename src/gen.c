/*
 * Layer 2: generators. Asymmetric coroutines that need no loop, with
 * Python's generator semantics: send starts or resumes, yield hands a value
 * out and receives the next send, throw and close deliver an error at the
 * pending yield. Misuse (resuming a finished or running generator) is an
 * error that changes nothing, as in Lua's coroutine.resume.
 *
 * Speed: each side settles everything the other side needs *before* it
 * switches (the sender writes what the pending yield receives, the yielder
 * writes what send hands out), and the value each call returns travels as
 * the switch's own value. Nothing is left to do after a switch, so send and
 * yield end in a tail call to the switch, which then returns straight into
 * the user's code. No return on either side mispredicts; that is what
 * makes a send/yield cost what a bare fcontext jump costs.
 */
#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

/* ---- ids --------------------------------------------------------------
 * Process-unique, for generators and tasks (task.c) alike, taken from a
 * shared counter a block at a time so that a spawn does not pay for an
 * atomic operation. */
#define ID_BLOCK 1024
static uint64_t id_counter = 1;
static WEFT__TLS uint64_t id_next, id_end;

uint64_t weft__next_id(void) {
  if (id_next == id_end) {
    id_next = __atomic_fetch_add(&id_counter, ID_BLOCK, __ATOMIC_RELAXED);
    id_end = id_next + ID_BLOCK;
  }
  return id_next++;
}

/* ---- thread tokens ----------------------------------------------------
 * A number for each thread that owns something of weft's (a loop, a
 * generator), never reused (0: the thread has taken none). Not a
 * weft__next_id(): those are the ids that messages and weft_dump show,
 * and a thread's token would skip one. */
static uint64_t token_counter;
WEFT__TLS uint64_t weft__thread_token_now;

uint64_t weft__thread_token(void) {
  if (!weft__thread_token_now)
    weft__thread_token_now =
        __atomic_add_fetch(&token_counter, 1, __ATOMIC_RELAXED);
  return weft__thread_token_now;
}

enum { GEN_CREATED, GEN_SUSPENDED, GEN_RUNNING, GEN_DONE };

struct weft_gen {
  weft__ctx ctx;                   /* the generator's own flow */
  weft__ctx caller;                /* whoever resumed it last */
  weft__stack *stack;              /* NULL once it finished */
  void *(*fn)(weft_gen *, void *); /* its body ... */
  void *arg;                       /* ... and argument */
  void **out;                      /* where the sender wants the value */
  void **received;                 /* where the pending yield wants it */
  weft_gen *parent;                /* the generator running before it */
  uint64_t id;                     /* for the overflow message */
  /* The thread it belongs to, as that thread's token (weft__thread_token):
   * any other thread is refused. Not the address of a thread-local: a
   * thread created after the owner exited gets the same thread-local
   * block, and passed for the owner. */
  uint64_t home;
  uint32_t scopes; /* entered by its body and not left (scope.c) */
  uint8_t state;   /* GEN_* */
};

uint32_t *weft__gen_scopes(weft_gen *g) { return &g->scopes; }

/* The thread's token for its generators: its first weft__thread_token,
 * kept in a child of fork(2), where loop.c's fork handler gives the thread
 * a new one so that the parent's loops are not the child's. A generator is
 * no loop's, and its stack is the child's memory: the child's thread, a
 * copy of the forking one, resumes the generators that one made (a child
 * forked inside a generator goes on running it). */
static WEFT__TLS uint64_t gen_home;

/* Not g's thread: refused, as misuse is (weft.h), changing nothing. */
static inline int foreign(const weft_gen *g) { return g->home != gen_home; }

WEFT__TLS weft_gen *weft__gen_running;

/* A finished generator cannot release the stack it ends on; the next one
 * to finish on this thread, or the next weft_gen_new / weft_gen_free,
 * releases it. */
static WEFT__TLS weft__stack *dead_stack;

static void release_dead(void) {
  if (dead_stack) {
    weft__stack_release(dead_stack);
    dead_stack = NULL;
  }
}

void weft__left_in_scope(const char *what, uint64_t id) {
  fprintf(stderr,
          "weft: %s %llu returned inside a scope (weft_scope_exit missing)\n",
          what, (unsigned long long)id);
  abort();
}

static void gen_entry(void *unused) {
  weft_gen *g = weft__gen_running;
  weft__ctx_started(&g->ctx);
  release_dead();
  void *r = g->fn(g, g->arg);
  /* A scope still entered lives in a frame that is gone, and the task
   * would go on inside it: a bug in the program, caught here. */
  if (g->scopes)
    weft__left_in_scope("generator", g->id);
  if (g->out)
    *g->out = r;
  g->state = GEN_DONE;
  weft__gen_running = g->parent;
  release_dead(); /* one a nested generator left: not the stack we are on */
  dead_stack = g->stack;
  g->stack = NULL;
  weft__ctx_exit(&g->ctx, &g->caller, (void *)0); /* send returns 0 */
}

weft_gen *weft_gen_new(void *(*fn)(weft_gen *, void *), void *arg,
                       size_t stack_size) {
  if (!fn) {
    errno = EINVAL;
    return NULL;
  }
  release_dead();
  weft_gen *g = weft__calloc(1, sizeof *g);
  if (!g)
    return NULL;
  weft__overflow_init();
  g->stack = weft__stack_acquire(stack_size);
  if (!g->stack) {
    weft__free(g);
    errno = ENOMEM;
    return NULL;
  }
  g->fn = fn;
  g->arg = arg;
  if (!gen_home)
    gen_home = weft__thread_token();
  g->home = gen_home;
  g->id = weft__next_id();
  g->stack->region.owner_id = g->id;
  g->stack->region.is_gen = 1;
  weft__ctx_make(&g->ctx, &g->stack->region, gen_entry);
  return g;
}

/* Finishes a generator that is not running, without running it. */
static void finish(weft_gen *g) {
  g->state = GEN_DONE;
  if (g->stack) {
    weft__stack_release(g->stack);
    g->stack = NULL;
  }
}

/* Resumes g; `rc` is what its pending yield returns. Returns what the
 * generator hands back: 1 if it yielded, 0 if it returned. */
static inline int resume(weft_gen *g, void *in, int rc, void **out) {
  if (g->state == GEN_SUSPENDED && g->received && rc == 0)
    *g->received = in;
  g->out = out;
  g->parent = weft__gen_running;
  g->state = GEN_RUNNING;
  weft__gen_running = g;
  return weft__ctx_switch_int(&g->caller, &g->ctx, rc);
}

int weft_gen_send(weft_gen *g, void *in, void **out) {
  if (!g || g->state == GEN_DONE || g->state == GEN_RUNNING || foreign(g))
    return -EINVAL;
  return resume(g, in, 0, out);
}

int weft_gen_yield(weft_gen *g, void *value, void **received) {
  if (!g || g != weft__gen_running || g->state != GEN_RUNNING || g->scopes)
    return -EINVAL;
  if (g->out)
    *g->out = value;
  g->received = received;
  g->state = GEN_SUSPENDED;
  weft__gen_running = g->parent;
  return weft__ctx_switch_int(&g->ctx, &g->caller, 1); /* send returns 1 */
}

int weft_gen_throw(weft_gen *g, int err, void **out) {
  if (!g || err <= 0 || g->state == GEN_DONE || g->state == GEN_RUNNING ||
      foreign(g))
    return -EINVAL;
  if (g->state == GEN_CREATED) {
    finish(g); /* nothing ran, so nothing can catch it */
    if (out)
      *out = NULL;
    return 0;
  }
  return resume(g, NULL, -err, out);
}

int weft_gen_close(weft_gen *g) {
  if (!g || g->state == GEN_RUNNING || foreign(g))
    return -EINVAL;
  if (g->state != GEN_SUSPENDED) {
    finish(g);
    return 0;
  }
  if (resume(g, NULL, -ECANCELED, NULL) == 1) {
    /* It yielded after being told to stop. It is never resumed again: its
     * stack goes back to the pool with the abandoned frames on it. */
    g->state = GEN_DONE;
    weft__stack_release_abandoned(g->stack);
    g->stack = NULL;
    return -EPROTO;
  }
  release_dead();
  return 0;
}

int weft_gen_free(weft_gen *g) {
  if (!g)
    return 0;
  if (g->state == GEN_RUNNING || foreign(g))
    return -EINVAL;
  weft_gen_close(g);
  release_dead();
  weft__free(g);
  return 0;
}

void weft__gen_abandon(weft_gen *g) {
  for (; g; g = g->parent) {
    g->state = GEN_DONE;
    if (g->stack) {
      weft__stack_release_abandoned(g->stack);
      g->stack = NULL;
    }
  }
}

void *weft__gen_outer_sp(const weft_gen *g) {
  while (g->parent)
    g = g->parent;
#ifdef WEFT_CTX_UCONTEXT
  return NULL;
#else
  return g->caller.sp;
#endif
}

bool weft_gen_done(const weft_gen *g) { return !g || g->state == GEN_DONE; }
