/*
 * Layer 2: generators. Asymmetric coroutines that need no loop, with
 * Python's generator semantics: send starts or resumes, yield hands a value
 * out and receives the next send, throw and close deliver an error at the
 * pending yield. Misuse (resuming a finished or running generator) is an
 * error that changes nothing, as in Lua's coroutine.resume.
 */
#include "internal.h"

#include <errno.h>

enum { GEN_CREATED, GEN_SUSPENDED, GEN_RUNNING, GEN_DONE };

struct weft_gen {
  weft__ctx ctx;                   /* the generator's own flow */
  weft__ctx caller;                /* whoever resumed it last */
  weft__stack *stack;              /* released as soon as it finishes */
  void *(*fn)(weft_gen *, void *); /* its body ... */
  void *arg;                       /* ... and argument */
  void *xfer;                      /* the value crossing a switch */
  weft_gen *parent;                /* the generator running before it */
  uint64_t id;                     /* for the overflow message */
  int thrown;                      /* error for the pending yield, or 0 */
  uint8_t state;                   /* GEN_* */
};

WEFT__TLS weft_gen *weft__gen_running;

static void gen_entry(void *p) {
  weft_gen *g = p;
  weft__ctx_started(&g->ctx);
  g->xfer = g->fn(g, g->arg);
  g->state = GEN_DONE;
  weft__ctx_exit(&g->ctx, &g->caller, NULL);
}

weft_gen *weft_gen_new(void *(*fn)(weft_gen *, void *), void *arg,
                       size_t stack_size) {
  if (!fn) {
    errno = EINVAL;
    return NULL;
  }
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
  g->id = weft__next_id();
  g->stack->region.owner_id = g->id;
  g->stack->region.is_gen = 1;
  weft__ctx_make(&g->ctx, &g->stack->region, gen_entry);
  return g;
}

static void finish(weft_gen *g) {
  g->state = GEN_DONE;
  if (g->stack) {
    weft__stack_release(g->stack);
    g->stack = NULL;
  }
}

/* Runs g until it yields (returns 1) or returns (0); *out gets the value. */
static int resume(weft_gen *g, void *in, int err, void **out) {
  g->xfer = in;
  g->thrown = err;
  g->parent = weft__gen_running;
  g->state = GEN_RUNNING;
  weft__gen_running = g;
  weft__ctx_switch(&g->caller, &g->ctx, g);
  weft__gen_running = g->parent;
  if (out)
    *out = g->xfer;
  if (g->state == GEN_DONE) {
    finish(g);
    return 0;
  }
  g->state = GEN_SUSPENDED;
  return 1;
}

int weft_gen_send(weft_gen *g, void *in, void **out) {
  if (!g || g->state == GEN_DONE || g->state == GEN_RUNNING)
    return -EINVAL;
  return resume(g, g->state == GEN_CREATED ? NULL : in, 0, out);
}

int weft_gen_yield(weft_gen *g, void *value, void **received) {
  if (!g || g != weft__gen_running || g->state != GEN_RUNNING)
    return -EINVAL;
  g->xfer = value;
  weft__ctx_switch(&g->ctx, &g->caller, NULL);
  if (g->thrown) {
    int err = g->thrown;
    g->thrown = 0;
    return -err;
  }
  if (received)
    *received = g->xfer;
  return 0;
}

int weft_gen_throw(weft_gen *g, int err, void **out) {
  if (!g || err <= 0 || g->state == GEN_DONE || g->state == GEN_RUNNING)
    return -EINVAL;
  if (g->state == GEN_CREATED) {
    finish(g); /* nothing ran, so nothing can catch it */
    if (out)
      *out = NULL;
    return 0;
  }
  return resume(g, NULL, err, out);
}

int weft_gen_close(weft_gen *g) {
  if (!g || g->state == GEN_RUNNING)
    return -EINVAL;
  if (g->state != GEN_SUSPENDED) {
    finish(g);
    return 0;
  }
  if (resume(g, NULL, ECANCELED, NULL) == 1) {
    /* It yielded after being told to stop. It is never resumed again: its
     * stack goes back to the pool with the abandoned frames on it. */
    finish(g);
    return -EPROTO;
  }
  return 0;
}

int weft_gen_free(weft_gen *g) {
  if (!g)
    return 0;
  if (g->state == GEN_RUNNING)
    return -EINVAL;
  weft_gen_close(g);
  weft__free(g);
  return 0;
}

bool weft_gen_done(const weft_gen *g) { return !g || g->state == GEN_DONE; }
