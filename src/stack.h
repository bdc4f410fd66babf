/*
 * Layer 1: stacks.
 *
 * Each stack is a slot in a large anonymous mapping (a chunk), committed
 * lazily by the kernel as it is touched. A slot, low addresses first:
 *
 *   +------------+--------------------------------+-------------+
 *   | guard page | usable stack (grows downwards) | weft__stack |
 *   | PROT_NONE  |  <- sp starts at the top       | descriptor  |
 *   +------------+--------------------------------+-------------+
 *   ^ slot base  ^ region.lo                      ^ top - WEFT__STACK_HEADER
 *
 * The descriptor sits in the page the first frames touch anyway, so a fresh
 * stack costs one page of memory until it grows.
 *
 * Guards: on Linux 6.13+ MADV_GUARD_INSTALL puts the guard inside the one
 * mapping without splitting it, so a million stacks fit in a few mappings.
 * Elsewhere mprotect makes each guard its own mapping; vm.max_map_count
 * (65530 by default) then caps the stacks near 32,000, and a spawn past that
 * fails with ENOMEM. docs/stacks.md says more.
 *
 * Freed stacks go to a per-thread, per-size pool: the last freed is the
 * first reused (its pages are warm). The pool keeps as many warm stacks as
 * it takes to go back to the most that were out at once in the last one or
 * two windows of WEFT__STACK_WINDOW, and at least WEFT__STACK_WARM_MAX: a
 * burst that recurs finds its stacks warm (a fresh one costs a page fault,
 * ~11-19 µs here, against ~60 ns for a task on a warm one). The rest give
 * their pages back to the kernel, the descriptor's too, a run of adjacent
 * free slots in one MADV_DONTNEED (their guards survive it): one call per
 * run, not per stack, since each call costs a TLB flush (20-200 µs here
 * for one stack, 4-9 ms for a thousand; one by one, 110-130 ms). A chunk with
 * every slot free is one run; in one with stacks out, those split the runs. A
 * given-back slot has no descriptor left: its chunk marks it in a bitmap
 * (`fresh`), and it is handed out later like a slot never opened, after the
 * warm stacks. That happens when a chunk empties (for the chunks with no stack
 * out), and when the loop calls weft__stack_tidy once a window has passed (all
 * chunks, at most WEFT__STACK_RUNS_MAX runs a call). Stacks are acquired and
 * released on one thread.
 */
#ifndef WEFT_STACK_H
#define WEFT_STACK_H

#include "ctx.h"

#include <stddef.h>

/* Bytes at the top of each slot for the descriptor. */
#define WEFT__STACK_HEADER 128
/* Warm stacks kept per size at least; more while a burst that needed more
 * is recent. */
#define WEFT__STACK_WARM_MAX 256
/* How long a burst's peak holds its stacks warm: one to two of these. */
#define WEFT__STACK_WINDOW ((int64_t)1000000000)
/* MADV_DONTNEED calls per weft__stack_tidy and size, at most. Each gives
 * back a run of adjacent free slots, however long: a call costs 20-200 µs
 * here for one stack with 2-9 pages resident (mostly a TLB flush), 4-9 ms
 * for a thousand (mostly freeing their pages, which must happen anyway; a
 * chunk with no stack out was always one call). Runs are many only where
 * stacks still out split them; past this many, the next poll goes on. */
#define WEFT__STACK_RUNS_MAX 32
/* Stack size when none is given. */
#define WEFT__STACK_DEFAULT (256 * 1024)

typedef struct weft__stack weft__stack;
typedef struct weft__stack_class weft__stack_class;

/* The descriptor, at the very top of its slot. */
struct weft__stack {
  weft__region region; /* what the switch and the tools see */
  weft__stack *next;   /* warm list links (while in the pool) */
  weft__stack *prev;
  weft__stack_class *cls;    /* the pool of this size */
  struct weft__chunk *chunk; /* the mapping it is a slot of */
  unsigned vg_id;            /* Valgrind's stack id */
  unsigned warm;             /* on the warm list (not out) */
};

/* A stack of at least `size` bytes (0: the default), rounded up to pages.
 * Returns NULL with errno ENOMEM when no memory or mapping can be had. */
weft__stack *weft__stack_acquire(size_t size);

/* Gives a stack back to this thread's pool. */
void weft__stack_release(weft__stack *s);

/* The same for a stack whose frames were abandoned, not unwound: a task
 * dropped by weft_loop_free, a generator that ignored close. */
void weft__stack_release_abandoned(weft__stack *s);

/* Set when this thread's pool keeps warm stacks beyond WEFT__STACK_WARM_MAX
 * for a recent burst: the loop is to call weft__stack_tidy. */
extern WEFT__TLS int weft__stack_tidy_wanted;

/* Lets a window pass at `now` (CLOCK_MONOTONIC ns) and gives back the pages
 * of the warm stacks beyond what the pool now keeps. Returns in how many ns
 * to call it again, or -1 when nothing is held for a burst any more (and
 * clears weft__stack_tidy_wanted). */
int64_t weft__stack_tidy(int64_t now);

/* Unmaps this thread's pool if no stack of it is in use; returns 1 if it did,
 * 0 if stacks are still out. */
int weft__stack_trim(void);

/* Arranges for this thread's pool to be trimmed when the thread exits. */
void weft__stack_thread_init(void);

/* Rounds a requested stack size to what acquire gives (for messages); 0
 * for a size past WEFT__STACK_MAX, which no mapping could hold. */
size_t weft__stack_round(size_t size);
#define WEFT__STACK_MAX ((size_t)1 << 46) /* 64 TiB: more than mmap gives */

/* 1 if guards are installed with MADV_GUARD_INSTALL, 0 with mprotect, -1 not
 * known yet (no stack mapped). For tests and docs. */
int weft__stack_guard_mode(void);

/* Installs the SIGSEGV handler that names a task overflowing its guard page,
 * and an alternate signal stack on this thread. Idempotent. (overflow.c) */
void weft__overflow_init(void);

/* Takes down the alternate signal stack weft gave this thread (thread exit). */
void weft__overflow_thread_exit(void);

#endif
