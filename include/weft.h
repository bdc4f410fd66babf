/*
 * weft — stackful coroutines on an event loop, for C.
 *
 * Conventions that hold for every function below:
 *  - A call that can fail returns a non-negative value on success and a
 *    negative errno value on failure (-EINVAL, -ENOMEM, -ECANCELED, ...).
 *    errno is never the channel: weft never reads errno after a switch.
 *  - A constructor that returns a pointer returns NULL on failure and sets
 *    errno.
 *  - Misuse (joining a task twice, resuming a finished generator) returns an
 *    error and changes nothing.
 *  - If a call that starts a task or takes a callback fails, the task or the
 *    callback never runs.
 *  - Times are int64_t nanoseconds on the monotonic clock.
 *  - errno belongs to the task: weft saves it when a task switches out and
 *    restores it when the task resumes.
 *
 * Names: public weft_* / WEFT_*; internal weft__* (not exported).
 */
#ifndef WEFT_H
#define WEFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* weft builds with hidden visibility; what this header declares is the
 * library's exported interface. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

/* ------------------------------------------------------------------------ */
/* Version                                                                   */

#define WEFT_VERSION_MAJOR 0
#define WEFT_VERSION_MINOR 1
#define WEFT_VERSION_PATCH 0
#define WEFT_VERSION_HEX                                                       \
  ((WEFT_VERSION_MAJOR << 16) | (WEFT_VERSION_MINOR << 8) | WEFT_VERSION_PATCH)

/* The version of the library actually linked, as (major << 16) | (minor << 8)
 * | patch. Compare with WEFT_VERSION_HEX to detect a header/library mismatch.
 */
unsigned weft_version(void);

/* The same as a string, "0.1.0". Never NULL; static storage. */
const char *weft_version_string(void);

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */

/* A human-readable message for an error this library returns: `err` may be
 * negative (as returned) or positive. Never NULL; static storage. Unknown
 * values give "unknown error". */
const char *weft_strerror(int err);

/* The symbolic name of an error, "ECANCELED" for -ECANCELED or ECANCELED.
 * Never NULL; unknown values give "UNKNOWN". */
const char *weft_err_name(int err);

/* ------------------------------------------------------------------------ */
/* Time                                                                      */

#define WEFT_NEVER  INT64_MAX
#define WEFT_MS(x)  ((int64_t)(x)*1000000LL)
#define WEFT_SEC(x) ((int64_t)(x)*1000000000LL)

/* Nanoseconds on the monotonic clock (CLOCK_MONOTONIC). */
int64_t weft_now(void);

/* ------------------------------------------------------------------------ */
/* Memory                                                                    */

/* Replaces the allocator every internal allocation of weft goes through.
 * Call it before any other weft function, or with no weft object alive.
 * `malloc_fn`, `realloc_fn` and `free_fn` must all be given (non-NULL) and
 * behave as the C library's do. Returns 0, or -EINVAL if one is NULL. */
int weft_replace_allocator(void *(*malloc_fn)(size_t),
                           void *(*realloc_fn)(void *, size_t),
                           void (*free_fn)(void *));

/* ------------------------------------------------------------------------ */
/* Loops                                                                     */

typedef struct weft_loop weft_loop;
typedef struct weft_task weft_task;

/* Configuration for weft_loop_new. A zero-filled struct means the defaults,
 * and so does a zero (or NULL) in any field. */
typedef struct weft_config {
  /* The backend that waits for events: "epoll", "poll", "io_uring". NULL:
   * the environment variable WEFT_BACKEND, else the platform default. */
  const char *backend;
  /* Default stack size of the loop's tasks, in bytes; rounded up to whole
   * pages. 0: 256 KiB. Only the pages a task touches cost memory. */
  size_t stack_size;
  /* Worker threads of the executor. 0: online CPUs, at least 2. */
  unsigned executor_threads;
} weft_config;

/* Creates a loop on this thread. `cfg` may be NULL (all defaults). The new
 * loop becomes this thread's current loop (weft_loop_current) until it is
 * freed or another loop is created. Returns NULL and sets errno (ENOMEM,
 * EINVAL for an unknown backend) on failure. */
weft_loop *weft_loop_new(const weft_config *cfg);

/* Runs the loop until no task, callback, timer or wait is left, or until
 * weft_loop_stop. Must be called on the thread that created the loop, and
 * not from inside a task. Returns 0 when the loop ran out of work, 1 when it
 * was stopped, -EINVAL on misuse (nested run, wrong thread). */
int weft_loop_run(weft_loop *loop);

/* Makes weft_loop_run return after the current iteration. Tasks that are not
 * finished stay where they are; a later weft_loop_run resumes them. */
void weft_loop_stop(weft_loop *loop);

/* Frees a loop that is not running. Tasks that never finished are freed
 * without being resumed (their stacks are dropped: no code of theirs runs).
 * NULL is ignored. */
void weft_loop_free(weft_loop *loop);

/* The loop running on this thread; outside weft_loop_run, the last loop
 * created on this thread and not yet freed. NULL if there is none. */
weft_loop *weft_loop_current(void);

/* Makes a loop on this thread, runs fn(arg) as its first task, runs until
 * every task has finished and returns fn's value. A loop whose remaining
 * tasks can never wake is deadlocked: they are cancelled (their blocking
 * calls return -ECANCELED) and the loop runs on until they finish. With the
 * environment variable WEFT_DEBUG=1 the task dump is printed first.
 * Returns fn's value, or a negative errno if the loop could not be made
 * (fn then never runs). */
int weft_main(int (*fn)(void *), void *arg);

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */

/* Options for weft_spawn_opts. A zero-filled struct means the defaults. */
typedef struct weft_task_opts {
  /* A name for weft_dump and error messages; copied. NULL: none. */
  const char *name;
  /* Stack size in bytes, rounded up to whole pages. 0: the loop's default. */
  size_t stack_size;
  /* The loop to spawn into. NULL: weft_loop_current(). */
  weft_loop *loop;
} weft_task_opts;

/* Creates a task that runs fn(arg) on its own stack, on the current loop,
 * after the tasks already ready (FIFO). The caller holds the handle and must
 * weft_join or weft_detach it. Returns NULL and sets errno: ENOMEM (no memory
 * or no stack could be mapped: see docs/stacks.md), EINVAL (fn is NULL or
 * there is no loop). */
weft_task *weft_spawn(void *(*fn)(void *), void *arg);

/* weft_spawn with options; `opts` may be NULL. */
weft_task *weft_spawn_opts(void *(*fn)(void *), void *arg,
                           const weft_task_opts *opts);

/* Spawns a detached task (fire and forget). Returns 0, -ENOMEM, -EINVAL. */
int weft_go(void *(*fn)(void *), void *arg);

/* Waits until `t` finishes and stores its return value in *result (if
 * non-NULL). Consumes the handle. Returns 0; -EINVAL if t is NULL, the
 * caller itself, already joined or detached, or if the caller is not a task
 * of t's loop; -ECANCELED if the caller was cancelled while waiting (t keeps
 * running and the handle stays valid). */
int weft_join(weft_task *t, void **result);

/* Gives up the handle: the task's record is recycled when it finishes.
 * Returns 0, or -EINVAL if t is NULL, already joined or detached. */
int weft_detach(weft_task *t);

/* The running task, or NULL outside any task. */
weft_task *weft_self(void);

/* Lets every task that is ready run before the caller continues (it goes to
 * the back of the ready queue). Returns 0; -ECANCELED if the caller has been
 * cancelled (it still yields first); -EINVAL outside a task. */
int weft_yield(void);

/* Cancels `t`: its current blocking call returns -ECANCELED at once, and so
 * does every later one until t finishes (level-triggered). A task cancelled
 * before it first ran sees -ECANCELED at its first blocking call. Returns 0,
 * -ESRCH if t has already finished, -EINVAL if t is NULL. */
int weft_cancel(weft_task *t);

/* The task's id (unique in the process, counting from 1) and name (NULL if
 * none). */
uint64_t weft_task_id(const weft_task *t);
const char *weft_task_name(const weft_task *t);

/* Writes every task of the current loop to `out`, one line each: id, name,
 * state, what it waits on, stack used / stack size. */
void weft_dump(FILE *out);

/* ------------------------------------------------------------------------ */
/* Generators (no loop needed)                                               */

typedef struct weft_gen weft_gen;

/* Creates a generator that will run fn(g, arg) on its own stack when first
 * sent to. stack_size 0 means 256 KiB. Returns NULL and sets errno (ENOMEM,
 * EINVAL if fn is NULL). A generator belongs to the thread that creates it. */
weft_gen *weft_gen_new(void *(*fn)(weft_gen *g, void *arg), void *arg,
                       size_t stack_size);

/* Resumes g. The first send starts it, and `in` is ignored (Python's
 * send(None)); later sends make the pending weft_gen_yield receive `in`.
 * Returns 1 if g yielded (*out = the yielded value), 0 if it returned (*out
 * = its return value); -EINVAL if g is NULL, finished or running. `out` may
 * be NULL. */
int weft_gen_send(weft_gen *g, void *in, void **out);

/* Inside g: hands `value` to the caller of send and suspends. Returns 0 and
 * stores in *received (if non-NULL) what the next send passes in; or -err
 * when the caller throws err in; or -ECANCELED when the caller closes g, in
 * which case g must return without yielding again. -EINVAL if the caller is
 * not running inside g. */
int weft_gen_yield(weft_gen *g, void *value, void **received);

/* Makes g's pending yield return -err (`err` is a positive errno value), then
 * runs g until it yields or returns; results as weft_gen_send. A generator
 * that has not started is finished without running: returns 0, *out = NULL.
 * -EINVAL if g is NULL, finished or running, or err is not positive. */
int weft_gen_throw(weft_gen *g, int err, void **out);

/* Closes g: its pending yield returns -ECANCELED and g must return. Returns 0
 * once g has returned (or if it had not started or had finished already);
 * -EPROTO if g yielded again (like Python's "generator ignored
 * GeneratorExit": g is then finished and its stack dropped); -EINVAL if g is
 * NULL or running. */
int weft_gen_close(weft_gen *g);

/* Frees g, closing it first if it is suspended (its cleanup runs). Returns
 * 0, or -EINVAL if g is running (nothing is freed). NULL is ignored. */
int weft_gen_free(weft_gen *g);

/* True once g has returned, was closed, or was finished by a throw. */
bool weft_gen_done(const weft_gen *g);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
