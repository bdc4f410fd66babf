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
 *  - A call that blocks inside a scope with a deadline arms that deadline's
 *    timer when it first blocks, so any blocking call may also return
 *    -ENOMEM, even where its own list of errors does not say so.
 *  - Times are int64_t nanoseconds on the monotonic clock.
 *  - errno belongs to the task: weft saves it when a task switches out and
 *    restores it when the task resumes.
 *
 * Names: public weft_* / WEFT_*; internal weft__* (not exported).
 */
#ifndef WEFT_H
#define WEFT_H

#include <errno.h>  /* the E* codes every call returns, negated */
#include <signal.h> /* sigset_t (POSIX: see weft_signal_wait) */
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h> /* socklen_t, struct sockaddr */
#include <sys/types.h>  /* ssize_t */

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
 * negative (as returned) or positive. Never NULL; static storage. A code
 * weft never returns gets the C library's message where it has one
 * (glibc 2.32 and later: ENOTTY gives "Inappropriate ioctl for device"),
 * and values nobody knows give "unknown error". */
const char *weft_strerror(int err);

/* The symbolic name of an error, "ECANCELED" for -ECANCELED or ECANCELED.
 * Never NULL; 0 gives "OK" (and weft_strerror(0) "success"). A code weft
 * never returns gets the C library's name where it has one (glibc 2.32 and
 * later: "ENOTTY"), and values nobody knows "UNKNOWN". */
const char *weft_err_name(int err);

/* ------------------------------------------------------------------------ */
/* Time                                                                      */

#define WEFT_NEVER  INT64_MAX
#define WEFT_MS(x)  ((int64_t)(x) * (int64_t)1000000)
#define WEFT_SEC(x) ((int64_t)(x) * (int64_t)1000000000)

/* Nanoseconds on the monotonic clock (CLOCK_MONOTONIC), or on the virtual
 * clock of the loop it is asked of, if that loop has one (see
 * weft_config.virtual_clock). That loop is the running one, or outside a
 * run the thread's current loop (weft_loop_current): with two loops on one
 * thread, the one made last and not yet freed. */
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
   * the environment variable WEFT_BACKEND, else the platform default
   * (epoll on Linux). A loop asked for io_uring that cannot have it (no
   * liburing in the build, an old kernel, seccomp, a memlock limit) uses
   * the default and says so once on stderr. Any other name (here or in
   * WEFT_BACKEND) is EINVAL, with a line on stderr that names it. */
  const char *backend;
  /* Default stack size of the loop's tasks, in bytes; rounded up to whole
   * pages. 0: 256 KiB. Only the pages a task touches cost memory. */
  size_t stack_size;
  /* Worker threads of the executor. 0: online CPUs, at least 2. */
  unsigned executor_threads;
  /* A virtual clock, for tests (trio's MockClock with autojump): weft_now()
   * on the loop's thread reads the loop's own time, which stands still
   * while tasks run and, whenever nothing is ready and no I/O event is
   * waiting, jumps to the next timer's deadline at once. Timeouts then
   * take no real time and never race the machine's load. Its time starts
   * at the real clock's reading when the loop is made. The jump waits for
   * nothing outside the loop's own tasks: a blocking call under a deadline
   * whose answer comes from a thread or another process (a job on the
   * pool, a host name in weft_tcp_connect, weft_file_* calls, a peer
   * outside the loop) returns -ETIMEDOUT at once (docs/loop.md). */
  bool virtual_clock;
} weft_config;

/* Creates a loop on this thread. `cfg` may be NULL (all defaults). The new
 * loop becomes this thread's current loop (weft_loop_current) until it is
 * freed or another loop is created. Returns NULL and sets errno (ENOMEM,
 * EINVAL for an unknown backend or a stack_size past 64 TiB) on failure. */
weft_loop *weft_loop_new(const weft_config *cfg);

/* Environment variables read when a loop runs (weft_loop_run):
 *   WEFT_DEBUG=1  a task that holds the CPU over 100 ms without yielding
 *                 or blocking is reported on stderr by id, name and time;
 *                 SIGQUIT prints the task dump (SIGQUIT is blocked in the
 *                 loop's thread while it runs and read from a signalfd; a
 *                 kill of the process reaches a thread that does not block
 *                 it, so the program's other threads must block it too);
 *                 a deadlock prints the dump before cancelling;
 *                 weft_loop_free says how many tasks ended with their
 *                 handles never joined or detached (each held its record
 *                 until then: a join cut short by a cancellation leaves
 *                 one, and a long run that repeats it grows).
 *   WEFT_SEED=n   (read by weft_loop_new) tasks ready at the same moment
 *                 run in an order shuffled by a PRNG seeded with n.
 *   WEFT_BACKEND  (weft_loop_new) the backend, if the config names none.
 *   WEFT_URING_PBUF=1  (weft_loop_new, io_uring) sockets read through
 *                 multishot recv into provided buffers (docs/io.md); a
 *                 kernel without them is said once on stderr. */

/* Runs the loop until no task, callback, timer or wait is left, or until
 * weft_loop_stop. Must be called on the thread that created the loop, and
 * not from inside a task. Returns 0 when the loop ran out of work, 1 when it
 * was stopped, -EINVAL on misuse (nested run, wrong thread, a child of
 * fork(2) running its parent's loop: docs/loop.md, "fork"); -EDEADLK if
 * tasks were deadlocked and cancelling them woke none of them; the
 * backend's negative errno if waiting for events failed. */
int weft_loop_run(weft_loop *loop);

/* Makes weft_loop_run return as soon as the callback or task that called it
 * is done (yields, blocks or ends): what else the turn held (callbacks,
 * those from other threads and a future's done-callbacks among them,
 * timers due, tasks ready) stays queued. Tasks that are not finished stay
 * where they are; a later weft_loop_run resumes them. Called
 * while the loop is not running, it is kept for the next weft_loop_run,
 * which then returns 1 at once, having run nothing (libuv's uv_stop). */
void weft_loop_stop(weft_loop *loop);

/* Frees a loop that is not running (called from inside the loop's own run,
 * it does nothing). Tasks that never finished are freed
 * without being resumed (their stacks are dropped: no code of theirs runs);
 * each leaves whatever queue it waits in (a channel, a semaphore...).
 * One that was woken with something handed to it and had not run yet
 * keeps it, as a task that ended would: a mutex unlocked to it stays
 * locked, a semaphore unit or a channel element given to it is gone.
 * Callbacks still queued (weft_call_soon's, weft_call_soon_threadsafe's,
 * a future's done-callbacks, those a stop left) and timers not yet fired
 * are dropped without running. Call it on the loop's thread: called on another,
 * it frees nothing and says so on stderr (the loop's stacks are its thread's,
 * and an io_uring ring can only be waited on there). NULL is ignored. In a
 * child of fork(2), a loop of the parent is not freed either (the same
 * message): its pool's threads are not there to join (docs/loop.md,
 * "fork"). */
void weft_loop_free(weft_loop *loop);

/* The loop running on this thread; outside weft_loop_run, the last loop
 * created on this thread and not yet freed. NULL if there is none. */
weft_loop *weft_loop_current(void);

/* Makes a loop on this thread, runs fn(arg) as its first task, runs until
 * every task has finished and returns fn's value. It runs the loop as
 * weft_loop_run does: also until no callback, timer (but those at
 * WEFT_NEVER) or job of the pool is left, so a timer fn set and did not
 * cancel (weft_call_later) delays the return until it has fired. A loop whose
 * remaining tasks can never wake is deadlocked: they are cancelled (their
 * blocking calls return -ECANCELED, inside a shielded scope too, since nothing
 * else could wake them) and the loop runs on until they finish. With the
 * environment variable WEFT_DEBUG=1 the task dump is printed first.
 * weft_loop_stop(weft_loop_current()) ends it early: the tasks left are
 * dropped, as weft_loop_free drops them. Returns fn's value, or a negative
 * errno if the loop could not be made (fn then never runs), weft_loop_run
 * failed (-EDEADLK, a backend's error; -EINVAL inside a running loop, fn
 * never run), or the loop was stopped before fn returned (-EINTR). These
 * share the return with fn's own value: a program that must tell a loop's
 * failure from fn's -ETIMEDOUT or -EINTR keeps fn's status in *arg. fn's
 * task belongs to weft_main: weft_join, weft_detach on it (weft_self())
 * are -EINVAL. */
int weft_main(int (*fn)(void *), void *arg);

/* weft_main with a loop made from `cfg` (may be NULL: weft_main itself),
 * for a program that wants, say, another executor size or the virtual
 * clock. A config weft_loop_new refuses is its errno, negated (-EINVAL for
 * an unknown backend), and fn never runs. */
int weft_main_with(const weft_config *cfg, int (*fn)(void *), void *arg);

/* ------------------------------------------------------------------------ */
/* Tasks                                                                     */

/* Options for weft_spawn_opts. A zero-filled struct means the defaults. */
typedef struct weft_task_opts {
  /* A name for weft_dump and error messages; copied. NULL: none. */
  const char *name;
  /* Stack size in bytes, rounded up to whole pages. 0: the loop's default. */
  size_t stack_size;
  /* The loop to spawn into, one of this thread's (another thread's loop is
   * EINVAL: reach it with weft_call_soon_threadsafe). NULL:
   * weft_loop_current(). */
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
 * caller itself, already joined or detached, or if t has not finished and
 * the caller is not a task of t's loop (a finished task can be joined from
 * outside the loop's tasks too, on its thread, not from another thread);
 * -ECANCELED if the caller is cancelled, or
 * -ETIMEDOUT if a scope's deadline has passed, before or while it waits,
 * even when t has finished (t keeps running if it had not, and the handle
 * stays valid: another task may join it). */
int weft_join(weft_task *t, void **result);

/* Handles of a loop's tasks, stale or not, must not be used after
 * weft_loop_free: the records they point at are the loop's memory. */

/* Gives up the handle: the task's record is recycled when it finishes.
 * Returns 0, or -EINVAL if t is NULL, already joined or detached, being
 * joined by another task now, or the caller is on another thread. */
int weft_detach(weft_task *t);

/* The running task, or NULL outside any task. */
weft_task *weft_self(void);

/* Lets every task that is ready run before the caller continues (it goes to
 * the back of the ready queue). Returns 0; -ECANCELED if the caller has been
 * cancelled, -ETIMEDOUT if it is inside a scope past its deadline (it still
 * yields first); -EINVAL outside a task. */
int weft_yield(void);

/* Cancels `t`: its current blocking call returns -ECANCELED at once, and so
 * does every later one until t finishes (level-triggered), except inside a
 * shielded scope (see Cancel scopes). A task cancelled before it first ran
 * sees -ECANCELED at its first blocking call. Returns 0, -ESRCH if t has
 * already finished, -EINVAL if t is NULL or the caller is on another
 * thread (weft_call_soon_threadsafe reaches t's loop). */
int weft_cancel(weft_task *t);

/* The task's id (unique in the process, counting from 1) and name (NULL if
 * none), also once the task has ended and until its handle is consumed;
 * 0 and NULL for a handle consumed (joined, or detached and its task
 * ended), or asked from another thread than its loop's. */
uint64_t weft_task_id(const weft_task *t);
const char *weft_task_name(const weft_task *t);

/* Writes every task of the current loop to `out`, one line each: id,
 * state, what it waits on ("fd 7 read", "timer in 20.0 ms", "future 0x..",
 * "join of task 3", "group 0x..", then the nearest scope deadline, if any),
 * stack used / stack size, name. Its first line counts them, and the tasks
 * that have ended with their handles neither joined nor detached, if any
 * ("weft: 4 tasks (and 2 ended, never joined or detached)"). */
void weft_dump(FILE *out);

/* ------------------------------------------------------------------------ */
/* Generators (no loop needed)                                               */
/*
 * A generator's body runs on its own stack, in its caller's thread. Sent
 * to from a task, the body may make any call the task may, blocking ones
 * too (weft_sleep, channels...): the task waits with the generator inside
 * it (docs/generators.md).
 */

typedef struct weft_gen weft_gen;

/* Creates a generator that will run fn(g, arg) on its own stack when first
 * sent to. stack_size 0 means 256 KiB. Returns NULL and sets errno (ENOMEM,
 * EINVAL if fn is NULL). A generator belongs to the thread that creates
 * it: send, throw, close and free from another thread are -EINVAL. */
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
 * which case g must return without yielding again. Whatever it returns,
 * `value` was handed over when the call suspended: it is the caller's
 * (a body that frees what it yielded, on -ECANCELED, frees it twice). -EINVAL if the caller is
 * not running inside g, or is inside a scope (weft_scope_enter) that g's
 * body entered and has not left: it does not yield then. */
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

/* True once g has returned, was closed, or was finished by a throw; true
 * for NULL (nothing left to run). */
bool weft_gen_done(const weft_gen *g);

/* ------------------------------------------------------------------------ */
/* Callbacks and timers                                                      */

typedef struct weft_timer weft_timer;

/* Runs cb(arg) on the current loop, from the loop itself (not from a task),
 * at the next turn: callbacks run in the order they were queued, and one
 * queued while callbacks run waits for the next turn. Returns 0; -EINVAL if
 * cb is NULL or there is no loop; -ENOMEM. */
int weft_call_soon(void (*cb)(void *), void *arg);

/* Runs cb(arg) from the current loop once `delay` ns have passed (a delay
 * <= 0 means the next turn). Timers with equal deadlines fire in the order
 * they were set. The handle stays valid until the timer fires or is
 * cancelled; using it after that is safe (until the loop is freed: the
 * handle points into the loop's memory) and weft_timer_cancel then
 * returns -ENOENT. A timer whose deadline reaches WEFT_NEVER never fires,
 * and does not keep weft_loop_run from returning (nor the deadlock rule
 * from acting) until it is moved. Returns NULL and sets errno (EINVAL: cb
 * NULL or no loop; ENOMEM). */
weft_timer *weft_call_later(int64_t delay, void (*cb)(void *), void *arg);

/* weft_call_later with an absolute deadline on the weft_now() clock. */
weft_timer *weft_call_at(int64_t deadline, void (*cb)(void *), void *arg);

/* Stops a timer that has not fired: its callback will not run. Returns 0;
 * -ENOENT if it already fired or was cancelled; -EINVAL if t is NULL. */
int weft_timer_cancel(weft_timer *t);

/* Moves a timer that has not fired to `delay` ns after weft_loop_now(),
 * keeping its callback: what cancelling it and setting a new one would do
 * (it then fires after the timers already set for the same deadline), in
 * one step and without a new handle. For deadlines that keep moving, such
 * as an idle timeout pushed back on every message. Returns 0; -ENOENT if it
 * already fired or was cancelled; -EINVAL if t is NULL. */
int weft_timer_rearm(weft_timer *t, int64_t delay);

/* Suspends the calling task for `delay` ns (<= 0: it yields once),
 * measured, like every timer, from weft_loop_now(): the clock as read at
 * the start of this turn of the loop. A delay that reaches WEFT_NEVER
 * sleeps until the task is cancelled, and arms no timer: with nothing else
 * left to wake it, the deadlock rule cancels it. Returns 0; -ECANCELED if
 * the task was cancelled; -ETIMEDOUT if a scope's deadline came first;
 * -ENOMEM if its timer could not be made; -EINVAL outside a task. */
int weft_sleep(int64_t delay);

/* The loop's clock: weft_now() as read at the start of the current turn of
 * the running loop (timers are measured from it), or weft_now() outside a
 * running loop. A turn that starts with no timer armed reads it later, at
 * the turn's first call that needs it (weft_sleep, a timer, this one), so
 * it may come after a weft_now() read earlier in the turn: there
 * weft_scope_enter(&s, weft_now() + d) then weft_sleep(d) gives the sleep
 * the later deadline and -ETIMEDOUT. */
int64_t weft_loop_now(void);

/* The name of the backend the loop uses: "epoll", "poll", "io_uring". */
const char *weft_loop_backend(const weft_loop *loop);

/* A pointer of the program's, kept with the loop (libuv's uv_loop_set_data):
 * the shard, server or thread state that code running on the loop finds
 * with weft_loop_data(weft_loop_current()). weft never reads it, nor frees
 * it. NULL until set; a NULL loop is ignored (weft_loop_data gives
 * NULL). Read and set it on the loop's thread, or synchronise as for any
 * shared pointer. */
void weft_loop_set_data(weft_loop *loop, void *data);
void *weft_loop_data(const weft_loop *loop);

/* Keep-alive references. A loop whose tasks all wait on one another ends
 * (see weft_main); code that expects a wake-up from another thread (a
 * weft_call_soon_threadsafe that will complete a future) takes a reference
 * first, and the loop then waits for it instead. Both may be called from
 * any thread; an unref that drops the last reference wakes the loop.
 * NULL is ignored; so is an unref with no reference held (with a line on
 * stderr). */
void weft_loop_ref(weft_loop *loop);
void weft_loop_unref(weft_loop *loop);

/* Runs cb(arg) on `loop`, from the loop itself, at its next turn: the one
 * weft call that may be made from any thread (another loop's, a worker's,
 * a signal-free plain thread's). Callbacks from one thread run in the order
 * they were queued. A loop waiting in the backend is woken; many calls
 * between two turns cost one wake-up. Returns 0; -EINVAL if loop or cb is
 * NULL; -ENOMEM. weft_loop_free does not wait for other threads: none may
 * call this, or weft_loop_ref/unref, on a loop once it is freed. */
int weft_call_soon_threadsafe(weft_loop *loop, void (*cb)(void *), void *arg);

/* ------------------------------------------------------------------------ */
/* I/O                                                                       */
/*
 * The calls below take the POSIX calls' arguments and suspend the calling
 * task, never the thread, until they can complete. They return what the
 * POSIX call returns, or a negative errno (never -1 and errno): -ECANCELED
 * when the task is cancelled, or -ETIMEDOUT when a scope's deadline
 * passes, in which case the operation did not happen
 * (a recv consumed nothing, a send sent nothing, an accept left the
 * connection queued; on io_uring a request that completed before its
 * cancellation returns its result instead, and the next call sees the
 * cancellation: docs/io.md). EINTR is retried inside. Sends never raise
 * SIGPIPE (MSG_NOSIGNAL): a vanished peer is -EPIPE.
 *
 * A file descriptor given to them is made non-blocking (O_NONBLOCK) on first
 * use; the ones weft creates are non-blocking and close-on-exec from the
 * start. Close with weft_close every fd a weft call has used (the fds of
 * weft_file_open with weft_file_close): it wakes the
 * tasks still waiting on it with -EBADF and forgets the fd; a task already
 * woken for it but not yet resumed gets -EBADF too, whatever file takes
 * the number next. weft keeps what it learnt of an fd (its kind, its
 * registration with epoll) until weft_close: after a plain close(2), a
 * new fd that the program opens at the same number is taken for the old
 * one, and a wait on it may never end, unless weft_fd_forget was called
 * for it. (fds weft creates itself reset the entry.) A number that names no
 * open fd is -EBADF. All of these but weft_close must be called from a task
 * (else -EINVAL); weft_close works anywhere.
 */

#define WEFT_READ  1 /* readable (or end of file, or an error pending) */
#define WEFT_WRITE 2 /* writable */

/* Waits until fd is readable and/or writable, as `events` asks. Returns the
 * events that are ready (a subset of events, never 0), -EBADF if fd is
 * closed with weft_close while waiting, -ECANCELED, -EINVAL. */
int weft_wait_fd(int fd, int events);

ssize_t weft_read(int fd, void *buf, size_t len);
ssize_t weft_write(int fd, const void *buf, size_t len);
/* With MSG_DONTWAIT in flags, recv and send never wait for the fd: -EAGAIN
 * instead (still a cancellation point, and on epoll and poll they may
 * yield to other ready tasks first, as every I/O call does after 128 in a
 * row that did not wait: docs/loop.md, Fairness). */
ssize_t weft_recv(int fd, void *buf, size_t len, int flags);
ssize_t weft_send(int fd, const void *buf, size_t len, int flags);

/* An addr without an addrlen is -EFAULT, and nothing is received. On a
 * datagram socket each call takes one whole datagram, as recvfrom(2) does,
 * on every backend: one longer than len is cut to len and the rest is lost
 * (the call returns len; with MSG_TRUNC in flags, the datagram's full
 * length); a datagram of 0 bytes returns 0, which is not an end of file.
 * *addrlen comes back as the address's real length, even when that is
 * more than was given (the address was cut). */
ssize_t weft_recvfrom(int fd, void *buf, size_t len, int flags,
                      struct sockaddr *addr, socklen_t *addrlen);
ssize_t weft_sendto(int fd, const void *buf, size_t len, int flags,
                    const struct sockaddr *addr, socklen_t addrlen);

/* Writes all len bytes, in as many writes as it takes. Returns len; if an
 * error (or a cancellation) stops it after n > 0 bytes went out, returns n
 * (the next call reports an error: the same, or -EPIPE after a connection
 * reset, which a socket reports only once); if nothing went out, the
 * error. A caller that needs the error itself loops on weft_write; one that
 * wants to know whether a cancellation or a deadline stopped it, without
 * touching the fd again, calls weft_yield (-ECANCELED, -ETIMEDOUT, or 0:
 * the fd's own error). */
ssize_t weft_write_all(int fd, const void *buf, size_t len);

/* accept4 with SOCK_NONBLOCK | SOCK_CLOEXEC. `addr` and `addrlen` may be
 * NULL (`addr` without `addrlen`: -EFAULT, as accept4 says). When the process
 * is out of file descriptors (EMFILE, ENFILE) it keeps the listener alive and
 * the CPU idle: it drops the pending connection (using a spare fd it keeps for
 * this), waits (1 ms, doubling up to 100 ms while it lasts) and tries again; it
 * returns once a connection could be accepted. ENOBUFS and ENOMEM back off the
 * same way, dropping nothing; a connection reset while queued (ECONNABORTED,
 * EPROTO) is passed over. Returns the new fd or a negative errno. On
 * io_uring, connections are accepted ahead of the calls and queued in the
 * process (64, and more in a burst that comes while the loop is busy:
 * docs/io.md, "io_uring"), so a server that stops calling weft_accept to
 * cap its connections still holds those fds. The spare fd (/dev/null,
 * opened at the first call) stays open until weft_loop_free. The new
 * socket has the options accept4 gives it: TCP_NODELAY, which
 * weft_tcp_connect sets on its own sockets, is the caller's to set (a
 * proxy or a server that writes small replies wants it). */
int weft_accept(int fd, struct sockaddr *addr, socklen_t *addrlen);

/* Connects fd (made non-blocking) and waits for the result: 0 or a negative
 * errno (-ECONNREFUSED, -ETIMEDOUT, -EISCONN if connected already, ...).
 * If cancelled, the socket is left in an unspecified state: close it. */
int weft_connect(int fd, const struct sockaddr *addr, socklen_t addrlen);

/* Closes fd, first waking every task waiting on it with -EBADF. Returns 0 or
 * close()'s error (a negative errno). From a task on io_uring the close is
 * a request on the ring that the caller waits for, so other ready tasks
 * may run before it returns (it is no cancellation point: the fd is closed
 * even in a cancelled task); on epoll and poll, and outside a task, it
 * closes at once (on io_uring, the requests for fd in the kernel are
 * cancelled first, there and then: a listener closed so refuses the next
 * connection). weft_stream_close and weft_stream_abort close so too.
 * On a thread where no loop runs (a
 * job of weft_run_in_thread, say) it is a plain close(2), which no loop
 * hears of: close an fd a loop has used on that loop's thread. */
int weft_close(int fd);

/* Makes weft forget fd without closing it: for an fd that other code
 * closes with a plain close(2), such as a client library's socket that
 * the program waits on with weft_wait_fd, or that is handed to another
 * thread's loop (a connection accepted here and served there). Tasks
 * waiting on it wake with -EBADF, as for weft_close, and a new fd at the
 * same number is then learnt afresh. Call it before the close(2), or after
 * it but before the number is used again. On io_uring, what weft took from the
 * kernel ahead of the calls goes with it: the connections a listener's
 * multishot accept took are closed (their peers see the end; a plain accept
 * finds only later ones), and with WEFT_URING_PBUF=1 the bytes a socket's
 * multishot recv took are dropped, and every request for the fd in the
 * kernel has ended when the call returns (none takes what comes next, and
 * none holds the file open). Returns 0 (also for an fd weft never saw),
 * -EBADF for a negative fd, or -EINVAL where this thread has no loop: call
 * it on the thread of the loop that used the fd. */
int weft_fd_forget(int fd);

/* A listening TCP socket on host:port, with SO_REUSEADDR (not SO_REUSEPORT,
 * which must be set before bind: for a listener per thread on one port,
 * make the sockets by hand and pass them to weft_accept, docs/executor.md,
 * "A loop per thread"). host is a
 * numeric address ("127.0.0.1", "::1" or "[::1]", "0.0.0.0", "::"; NULL or
 * "" means every IPv4 address) or a name, resolved with weft_getaddrinfo
 * (on the pool inside a task): the first of its addresses that binds is
 * used. "::" leaves IPV6_V6ONLY as the system has it (Linux: off, so it
 * takes IPv4 connections too, and a listener on "0.0.0.0" at the same port
 * then fails with -EADDRINUSE).
 * port 0 picks a free port (weft_sock_port tells which). backlog <= 0 means
 * SOMAXCONN. Returns the fd or a negative errno (-ENOENT: no such name).
 * With a numeric address it does not block, so it may be called outside a
 * task too. */
int weft_tcp_listen(const char *host, int port, int backlog);

/* Connects to host:port with TCP_NODELAY. host is a numeric address (IPv4
 * or IPv6, bracketed or not, with a zone or not: "fe80::1%eth0") or a name,
 * resolved with weft_getaddrinfo: each address is tried in turn, in the
 * resolver's order (IPv6 and IPv4), until one connects; a refusal or the
 * kernel's timeout (-ETIMEDOUT, SYNs unanswered) moves on to the next, a
 * cancellation or the caller's deadline ends the walk. Returns the connected fd
 * or a negative errno (the last address's error; -ENOENT: no such name; -EINVAL
 * outside a task, at once, and for a host NULL or "", which unlike
 * weft_tcp_listen's names no address, a port outside 0..65535, or brackets
 * around anything but an IPv6 address; -ECONNRESET when the listener
 * closed after the kernel had made the connection, before the call
 * returned). */
int weft_tcp_connect(const char *host, int port);

/* A UDP socket bound to host:port (port 0: any free port; host NULL or "":
 * every IPv4 address; a name as for weft_tcp_listen). Unlike
 * weft_tcp_listen it sets no SO_REUSEADDR: a second bind of the same
 * address and port is -EADDRINUSE ("::" leaves IPV6_V6ONLY as the system
 * has it, so "0.0.0.0" at the same port is -EADDRINUSE too). One socket
 * is one family: for IPv4 and IPv6 loopback, bind "127.0.0.1" and "::1"
 * (weft_sock_port of the first gives the port for the second). Read it
 * with weft_recvfrom, one datagram a call (docs/io.md, "Datagrams").
 * Returns the fd or a negative errno. */
int weft_udp_bind(const char *host, int port);

/* A listening Unix stream socket at `path` (an existing socket file there
 * is not removed: -EADDRINUSE). path is a file's path, of at most 107
 * bytes (-ENAMETOOLONG; NULL or "": -EINVAL), never an abstract name:
 * "@name" is a file named so. backlog <= 0 means SOMAXCONN, as for
 * weft_tcp_listen. Returns the fd or a negative errno. */
int weft_unix_listen(const char *path, int backlog);

/* Connects to the Unix stream socket at `path`. When the listener's
 * backlog is full (Linux then refuses a non-blocking connect with EAGAIN
 * and never says when there is room) it waits and tries again, 1 ms
 * doubling up to 100 ms, as a blocking connect would wait. Returns the fd
 * or a negative errno (-ECANCELED, -ETIMEDOUT while it waits). */
int weft_unix_connect(const char *path);

/* The local port of a bound socket (IPv4 or IPv6), or a negative errno. */
int weft_sock_port(int fd);

/* Writes "('127.0.0.1', 51234)" for an IPv4 address, "('::1', 51234, 0, 0)"
 * for IPv6 (Python's repr of a socket address), or the path of a Unix socket,
 * into buf (NUL-terminated, truncated to len; "None" for a NULL addr).
 * Returns buf. An unnamed Unix socket, and one in the abstract namespace
 * (sun_path[0] == 0: without the address's length, where its name ends is
 * not known), give "". */
char *weft_addr_str(const struct sockaddr *addr, char *buf, size_t len);

/* ------------------------------------------------------------------------ */
/* Streams                                                                   */
/*
 * A stream buffers a socket (or pipe) both ways, with buffers of a fixed
 * size: it never grows them, whatever the peer sends. Its calls are made
 * from a task: outside one, a call that needs the fd returns -EINVAL (a
 * weft_stream_close then still closes the fd and frees the stream, and
 * drops what was queued).
 */

typedef struct weft_stream weft_stream;

/* Wraps fd; the stream owns it from now on (weft_stream_close closes it).
 * bufsize 0 means 64 KiB; each direction has a buffer of that size. Returns
 * NULL and sets errno (ENOMEM; EINVAL if fd < 0); fd then stays open and
 * the caller's, to close with weft_close.
 * One task may read while another writes. A read call (readline, read,
 * read_exact) while another task's is in progress returns -EBUSY, and so
 * does a write or flush while another task's write or flush is. */
weft_stream *weft_stream_new(int fd, size_t bufsize);

/* Reads one line, up to and including its '\n', into buf and NUL-terminates
 * it. Returns its length; the last line before end of file may lack the
 * '\n'; 0 at end of file. A line that does not fit (length + NUL > max),
 * or is longer than the stream's buffer (a last line without '\n' as long
 * as the buffer included), is -EMSGSIZE: the line is skipped (the next
 * call of any kind, read and read_exact too, starts after it) and buf
 * holds nothing useful. Other errors: -ECANCELED and -ETIMEDOUT (nothing
 * consumed: a part of the line already received stays buffered for the
 * next call), -ECONNRESET and the like. A read call served from the
 * buffer makes no system call, but counts as an I/O call towards the
 * loop's fairness budget: every 128 in a row, the caller yields first
 * (docs/loop.md, "Fairness"). */
ssize_t weft_stream_readline(weft_stream *s, char *buf, size_t max);

/* Reads what is buffered, or else waits for one read: up to len bytes.
 * Returns the count, 0 at end of file, or a negative errno. A len of 0
 * reads nothing and returns 0, which is not an end of file (or
 * -ECANCELED, -ETIMEDOUT: every call is a cancellation point); buf may
 * then be NULL, as for read_exact and write. */
ssize_t weft_stream_read(weft_stream *s, void *buf, size_t len);

/* Reads exactly len bytes. Returns len; n < len if end of file came after n
 * bytes (0: before any); a negative errno on error. When len fits in the
 * stream's buffer an error consumes nothing (the bytes stay buffered for a
 * later read); a larger read that fails after n > 0 bytes returns n, and
 * the next read call (of any kind) returns the error (-ECONNRESET...),
 * which the socket itself reports only once; after a cancellation or a
 * deadline there, the next call sees the cancellation or deadline itself, if
 * it still holds. */
ssize_t weft_stream_read_exact(weft_stream *s, void *buf, size_t len);

/* Queues len bytes; they go out when the buffer fills or at
 * weft_stream_flush, so small writes become one syscall. A write larger
 * than the buffer goes straight out (after what is queued). Returns len or,
 * like weft_write_all, a short count or a negative errno. */
ssize_t weft_stream_write(weft_stream *s, const void *buf, size_t len);

/* Writes out everything queued. Returns 0 or a negative errno (-EPIPE,
 * -ECANCELED: what was not written stays queued). */
int weft_stream_flush(weft_stream *s);

/* The stream's fd (still owned by the stream). */
int weft_stream_fd(const weft_stream *s);

/* The bytes read from the fd and not yet taken by a read call (Go's
 * bufio.Reader.Buffered); 0 for NULL. What the kernel still holds is not
 * counted. A server answering pipelined requests flushes when it is 0 (no
 * request waits in the buffer), so a batch of requests gets one write; a
 * client putting a keep-alive connection back in its pool checks it is 0
 * (stray bytes would be taken for the next answer). */
size_t weft_stream_buffered(const weft_stream *s);

/* Flushes, closes the fd and frees the stream (all of them, even if the
 * flush fails). Returns 0 or the first error. NULL is ignored. The flush
 * waits, as a write does, for as long as the peer takes to read, bounded
 * only by the caller's scopes: after a deadline cut a call short, close
 * the stream inside that scope (the flush then fails at once with
 * -ETIMEDOUT and the fd is closed all the same); outside it, a peer that
 * has stopped reading keeps the close waiting for ever. Calls of
 * other tasks waiting on s end with -EBADF (a write in flight: close does
 * not flush, what was queued is dropped, and a write that had sent part
 * of its bytes returns that short count) and s is freed once they have
 * returned; a call made while the close flushes gets -EBADF too. */
int weft_stream_close(weft_stream *s);

/* Closes the fd and frees the stream at once, without flushing: what was
 * queued is dropped (asyncio's Transport.abort). For a peer that has
 * stopped reading, or a connection being dropped, where weft_stream_close
 * would wait for the flush. Returns 0 or weft_close's error; -EBADF if a
 * close is already in progress. Other tasks' calls on s end as with
 * weft_stream_close (-EBADF). NULL is ignored. */
int weft_stream_abort(weft_stream *s);

/* ------------------------------------------------------------------------ */
/* Futures                                                                   */
/*
 * A future is a value that will be set once: a result (a pointer), an
 * error (an errno value), or a cancellation. Tasks wait for it with
 * weft_await; callbacks run once it is done. A future belongs to the loop
 * that made it and is used from that loop's thread only; from another
 * thread, complete it inside a weft_call_soon_threadsafe callback (the
 * calls that complete it, or add a callback, refuse with -EINVAL from
 * another thread or from another loop's code: they would race).
 * Futures are reference counted: whoever holds a pointer holds a reference.
 * A future's record is its loop's memory: release every reference before
 * weft_loop_free (or before weft_main returns), since any call on the
 * future after that, weft_future_release too, touches freed memory.
 */

typedef struct weft_future weft_future;

/* A pending future of the current loop; the caller holds one reference.
 * NULL and errno: ENOMEM, EINVAL (no loop). */
weft_future *weft_future_new(void);

/* Adds a reference and returns f. */
weft_future *weft_future_ref(weft_future *f);

/* Drops a reference; the last one frees f. A pending future freed this way
 * never completes: its callbacks never run. (A task waiting in weft_await
 * holds its own reference, so it is never left waiting on freed memory.)
 * NULL is ignored. */
void weft_future_release(weft_future *f);

/* Completes f with a value, or with an error (`err` a positive errno
 * value). Wakes every task waiting on it, and queues its callbacks (they
 * run from the loop later, never inside this call). Returns 0; -EINVAL if f
 * is NULL or already done (the first outcome stands), err <= 0, or the
 * caller is not on f's loop (see above). */
int weft_future_set_result(weft_future *f, void *value);
int weft_future_set_error(weft_future *f, int err);

/* Completes f as cancelled: its waiters get -ECANCELED. A future made by
 * weft_async also cancels its task. Returns 1 if it cancelled f, 0 if f
 * was already done, -EINVAL if f is NULL or the caller is not on f's
 * loop. */
int weft_future_cancel(weft_future *f);

/* True once f has a result, an error or was cancelled. */
bool weft_future_done(const weft_future *f);

/* The outcome of a done future, without waiting: 0 and *value (if value is
 * non-NULL), the negative error it was set with, -ECANCELED; -EAGAIN if f
 * is still pending; -EINVAL if f is NULL. A value handed out here or by
 * weft_await is taken: a weft_submit future then no longer gives it to its
 * release callback (weft_submit). */
int weft_future_result(const weft_future *f, void **value);

/* Calls cb(f, arg) from the loop once f is done, after the callbacks added
 * before it. If f is already done, cb is queued at once (weft_call_soon),
 * unless a run of f's callbacks is queued already: cb then joins that run,
 * so it goes before what weft_call_soon queued since. It never runs inside
 * this call. Returns 0; -EINVAL (f or cb NULL, or the caller not on f's
 * loop); -ENOMEM. */
int weft_future_add_done_callback(weft_future *f,
                                  void (*cb)(weft_future *f, void *arg),
                                  void *arg);

/* Suspends the calling task until f is done; returns what
 * weft_future_result would then (0 with *value, -err, -ECANCELED). A done
 * future returns at once (it is still a cancellation point). Any number of
 * tasks may wait on one future. If the caller is cancelled, or a scope's
 * deadline passes, it returns -ECANCELED or -ETIMEDOUT and f is left as it
 * was. -EINVAL if f is NULL or the caller is not a task of f's loop. */
int weft_await(weft_future *f, void **value);

/* Runs fn(arg) as a task and returns a future of its return value that the
 * caller holds one reference to (tornado's @coroutine: `ret = yield
 * routine()` is f = weft_async(routine, arg); weft_await(f, &ret);
 * weft_future_release(f)). Cancelling the future cancels the task. NULL
 * and errno: ENOMEM, EINVAL. */
weft_future *weft_async(void *(*fn)(void *), void *arg);

/* ------------------------------------------------------------------------ */
/* Cancel scopes and deadlines                                               */
/*
 * A scope is a region of a task's code with a deadline, or that can be
 * cancelled as a whole (trio's cancel scopes). Inside a scope whose
 * deadline has passed, every blocking call returns -ETIMEDOUT; inside one
 * that was cancelled, -ECANCELED (weft_cancel on the task acts as an
 * outermost scope). When both apply, -ECANCELED wins. Scopes nest: the
 * effective deadline is the earliest one around the call. A shielded scope
 * stops what happens outside it from reaching the calls inside (cleanup
 * code that must run to the end); its own deadline still applies.
 *
 * The struct lives on the caller's stack, between weft_scope_enter and
 * weft_scope_exit, which must pair up in the same task, innermost first,
 * on every path out of the region (an early return on an error too): a
 * task whose function returns inside a scope aborts the program, with a
 * line on stderr naming the task ("returned inside a scope").
 * In a generator's body they pair up in the body, between two yields:
 * weft_gen_yield refuses to yield inside the body's scope, the body cannot
 * leave its caller's scope (-EINVAL), and a body that returns inside its
 * scope aborts the program, as a task does. Its fields are private.
 */
typedef struct weft_scope {
  struct weft_scope *priv_outer;
  weft_task *priv_task;
  void *priv_timer;
  int64_t priv_deadline;
  unsigned priv_flags;
} weft_scope;

/* Enters s in the calling task, with an absolute deadline on the weft_now()
 * clock (WEFT_NEVER: none). Outside a task, s is marked unusable and
 * weft_scope_exit returns -EINVAL. A scope the task has entered already
 * is left as it is (its deadline too): entering it again does nothing.
 * Costs no system call, and no timer until the task first parks inside it
 * (docs/cancellation.md). */
void weft_scope_enter(weft_scope *s, int64_t deadline);

/* Leaves s. Returns -ETIMEDOUT if its deadline was reached by a blocking
 * call inside it (also one that returned -ECANCELED because the task or
 * an outer scope was cancelled as well), -ECANCELED if s was cancelled,
 * else 0. Only s's own
 * expiry or cancellation is reported (and absorbed): an outer scope's, or
 * the task's, stays in force for the code after it. -EINVAL if s is not
 * the calling task's innermost scope (nothing changes then). */
int weft_scope_exit(weft_scope *s);

/* Cancels s (from its task or any other of the loop): the blocking call in
 * progress inside it returns -ECANCELED at once, and so does every later
 * one until s exits. s must be entered. From another thread it does
 * nothing but say so on stderr (weft_call_soon_threadsafe reaches the
 * loop), as weft_cancel refuses. */
void weft_scope_cancel(weft_scope *s);

/* Turns shielding of s on or off; from another thread, does nothing but
 * say so on stderr. */
void weft_scope_shield(weft_scope *s, bool on);

/* Moves s's deadline to `deadline` (absolute, on the weft_now() clock;
 * WEFT_NEVER: none), from its task or any other task or callback of the
 * loop: an idle timeout pushed back on each message, as trio's
 * `scope.deadline = ...`. A call parked inside s now ends at the new
 * deadline: later, or at once if it has passed. A deadline a call has
 * already met stays met: the calls after it inside s still get -ETIMEDOUT,
 * and so does s's exit. Returns 0, or -EINVAL if s is NULL or not entered,
 * or the caller is not on s's loop. If the new deadline's timer cannot be
 * allocated, the call parked inside returns -ENOMEM, as it would had it
 * parked then. */
int weft_scope_set_deadline(weft_scope *s, int64_t deadline);

/* ------------------------------------------------------------------------ */
/* Task groups                                                               */
/*
 * Structured concurrency: a group owns the tasks spawned into it, and
 * weft_group_wait returns only when every one of them has finished.
 */
typedef struct weft_group weft_group;

/* A new, empty group on the current loop. NULL and errno: ENOMEM, EINVAL
 * (no loop). */
weft_group *weft_group_new(void);

/* Spawns fn(arg) into g, as weft_spawn would (the same errors). The group
 * owns the task: do not join or detach it; its return value is dropped
 * (a child reports a failure with weft_group_fail).
 * The handle may be used with weft_cancel, weft_task_id, ... until the task
 * ends. A child spawned into a cancelled group starts cancelled. */
weft_task *weft_group_spawn(weft_group *g, void *(*fn)(void *), void *arg);

/* weft_group_spawn with options (a name for weft_dump, a stack size);
 * `opts` may be NULL. opts->loop must be NULL or g's loop (else EINVAL). */
weft_task *weft_group_spawn_opts(weft_group *g, void *(*fn)(void *), void *arg,
                                 const weft_task_opts *opts);

/* Waits until every child of g has finished, children spawned while it
 * waits included. Returns g's error (weft_group_fail) if it has one, else
 * 0; -ECANCELED or -ETIMEDOUT if the caller was cancelled or a scope's
 * deadline passed, in which case the group is cancelled (as by
 * weft_group_cancel: children spawned later start cancelled) and the
 * children are waited for all the same: no child outlives its group's
 * wait. The caller's own -ECANCELED or -ETIMEDOUT wins over g's error
 * (as weft_await's does over a future's), which weft_group_error still
 * gives. -ENOMEM (a deadline's timer) cancels nothing: the children run
 * on. -EINVAL if g is NULL, the caller is not a task of g's loop, or
 * another task is in weft_group_wait on g; -EDEADLK if the caller is a
 * child of g, or a child of a group whose waiter is a child of g, and so
 * on up (it would wait for itself). */
int weft_group_wait(weft_group *g);

/* Cancels every child of g still running, and those spawned into it
 * later. NULL is ignored, and so is a call from another thread than g's
 * loop's, which says so on stderr (weft_call_soon_threadsafe reaches the
 * loop), as weft_cancel refuses one. */
void weft_group_cancel(weft_group *g);

/* Go's errgroup.WithContext, trio's nursery: the first error cancels the
 * rest. Records `err`, a negative errno value as weft's calls return it
 * (-EIO, or a child's failed call's result passed on as is), as g's error
 * if g has none yet, and cancels g as weft_group_cancel does either way
 * (the caller too, if it is a child: its later blocking calls return
 * -ECANCELED). Later errors are dropped, whatever they are: a child that
 * passes on the -ECANCELED of a group cancelled by weft_group_cancel
 * makes -ECANCELED g's error. Callable from a child, from the task that
 * waits or will wait on g, or from any task or callback of g's loop. The
 * error stays for g's life, as its cancellation does: recorded after a
 * wait returned, or on a group with no child, it is what the next wait
 * returns. Returns 0; -EINVAL if g is NULL, err >= 0, or the caller is
 * not on g's loop (another thread, another loop, or a loop since freed).
 * (weft_future_set_error takes the positive value instead.) */
int weft_group_fail(weft_group *g, int err);

/* g's first error recorded by weft_group_fail, or 0 if none; -EINVAL if g
 * is NULL. Does not wait. */
int weft_group_error(const weft_group *g);

/* Frees g. Children still running are cancelled; the group's memory goes
 * when the last of them ends (and a task in weft_group_wait on g has
 * returned). A group may be freed after its loop: the loop dropped the
 * children, and the group is then only good for weft_group_free (the other
 * calls return -EINVAL, or NULL). NULL is ignored; so is a call from
 * another thread while g's loop lives, which says so on stderr. */
void weft_group_free(weft_group *g);

/* ------------------------------------------------------------------------ */
/* Channels and select                                                       */
/*
 * Go's channels: typed by element size, elements copied in and out (never
 * referenced). Unbuffered (capacity 0) channels are rendezvous: a send
 * completes only when a receiver takes the element. Waiters are served
 * FIFO per channel. A cancelled send or receive (or one stopped by a
 * scope's deadline) leaves the channel exactly as it was: no element lost,
 * none duplicated; one that completed before the cancellation reports its
 * success. A channel belongs to the loop that made it; once that loop is
 * freed, to its thread: any code of the thread may use and free it, but
 * nothing can wait on it (-EINVAL where a call would).
 */
typedef struct weft_chan weft_chan;

/* A channel of `elem_size`-byte elements (elem_size > 0) holding up to
 * `capacity` of them (0: unbuffered). NULL and errno: ENOMEM, EINVAL. */
weft_chan *weft_chan_new(size_t elem_size, size_t capacity);

/* Sends a copy of *elem: waits for room (buffered) or for a receiver
 * (unbuffered). Returns 0; -EPIPE if the channel is closed (before or
 * while waiting: the element was not sent); -ECANCELED, -ETIMEDOUT;
 * -EINVAL (NULL; outside a task when it would have to wait; another
 * loop's task or callback, or another thread, even when it could be done
 * at once). */
int weft_chan_send(weft_chan *c, const void *elem);

/* Receives into *elem: waits for an element. Returns 0; -EPIPE once the
 * channel is closed and drained; -ECANCELED, -ETIMEDOUT; -EINVAL. */
int weft_chan_recv(weft_chan *c, void *elem);

/* The same without waiting: -EAGAIN where they would wait. They may be
 * called outside a task, on the loop's thread (from another loop's task or
 * callback, or from another thread: -EINVAL). */
int weft_chan_try_send(weft_chan *c, const void *elem);
int weft_chan_try_recv(weft_chan *c, void *elem);

/* Closes c: pending and later sends get -EPIPE; receivers get what is
 * buffered, then -EPIPE. Closing twice is harmless. NULL is ignored; so is
 * a call from another thread or another loop's code (with a line on
 * stderr): it would race with c's loop. */
void weft_chan_close(weft_chan *c);

/* Closes c (waking its waiters with -EPIPE) and frees it. It may be called
 * after c's loop was freed. NULL is ignored, and so is a call from another
 * thread or another loop's code (with a line on stderr). Elements still
 * buffered are dropped as bytes: if they own memory (a pointer sent by
 * value), take them out with weft_chan_try_recv first. */
void weft_chan_free(weft_chan *c);

/* Elements buffered now, and the capacity. */
size_t weft_chan_len(const weft_chan *c);
size_t weft_chan_cap(const weft_chan *c);

#define WEFT_SEND 1 /* a select case that sends *elem */
#define WEFT_RECV 2 /* a select case that receives into *elem */

#define WEFT_NOWAIT 1 /* weft_select: Go's `default:` */

typedef struct weft_select_case {
  weft_chan *chan; /* NULL: a case that is never ready */
  int op;          /* WEFT_SEND or WEFT_RECV */
  void *elem;      /* the element to send, or where to receive */
  int result;      /* out: 0, or the operation's error (-EPIPE) */
} weft_select_case;

/* Waits until one of the n cases can proceed, performs it, and returns its
 * index; its `result` is 0, or -EPIPE for a closed channel (a send to one
 * is ready at once and fails; a receive from a drained one too). When
 * several are ready, one is chosen at random, so that none starves. With
 * WEFT_NOWAIT, returns -EAGAIN if none is ready now. Returns -ECANCELED or
 * -ETIMEDOUT (scopes) with no case performed; -ENOMEM if more than 8
 * cases with a channel must wait and their records cannot be allocated
 * (nothing performed; up to 8 need no allocation, NULL ones none); -EINVAL for
 * a bad case (an unknown op, a NULL elem, a channel of another loop) or cases
 * NULL with n > 0, and when it would wait outside a task or on a channel
 * whose loop was freed (what is done at once works there, as the try calls
 * do, even with no loop left on the thread). With no case that can ever be
 * ready (n == 0, or every chan NULL) it waits until cancelled, as Go's empty
 * select does for ever. */
int weft_select(weft_select_case *cases, size_t n, int flags);

/* ------------------------------------------------------------------------ */
/* Task-aware synchronisation                                                */
/*
 * For tasks of one loop (not for threads). Each is a struct the caller
 * owns, set up with its _init (or the static initialiser) and needing no
 * cleanup; its fields are private. Every wait is a cancellation point and
 * honours scope deadlines (-ECANCELED, -ETIMEDOUT), and waiters are served
 * in the order they came. A waiter is served before it runs (the mutex or
 * a unit handed to the first waiter; a signal, or the event set, to each
 * one woken): such a wait returns 0 even if a cancellation or a deadline
 * comes before the task runs (with the mutex held: unlock it), and the
 * cancellation holds for the task's next blocking call. An object with
 * waiters belongs to their loop:
 * a call that would wait behind them or wake one, from another loop's code
 * or another thread, is refused and changes nothing (-EINVAL, or for the
 * calls that return nothing a line on stderr), as a channel's would. One
 * with no waiter records no loop, and is not checked.
 */
typedef struct weft_mutex {
  uint64_t priv_owner; /* the owner's task id; 0: unlocked */
  void *priv_head, *priv_tail;
} weft_mutex;
#define WEFT_MUTEX_INIT {0, NULL, NULL}

void weft_mutex_init(weft_mutex *m);

/* Locks m, waiting while another task holds it. Unlocking hands the mutex
 * to the first waiter (FIFO: a task that arrives later cannot barge in).
 * A task that ends holding m leaves it locked, as a thread would (no later
 * task is taken for its owner). Returns 0; -EDEADLK if the caller holds it
 * already; -ECANCELED, -ETIMEDOUT (not locked then); -EINVAL (NULL,
 * outside a task). */
int weft_mutex_lock(weft_mutex *m);

/* 0, or -EBUSY if held (by anyone, the caller included); -EINVAL. */
int weft_mutex_trylock(weft_mutex *m);

/* 0; -EPERM if the caller does not hold m; -EINVAL. */
int weft_mutex_unlock(weft_mutex *m);

typedef struct weft_cond {
  void *priv_head, *priv_tail;
} weft_cond;
#define WEFT_COND_INIT {NULL, NULL}

void weft_cond_init(weft_cond *c);

/* Unlocks m (which the caller must hold), waits for a signal, locks m
 * again. Returns 0; -ECANCELED or -ETIMEDOUT if the wait was cut short, in
 * which case m is locked again all the same, as pthread_cond_wait does on
 * cancellation; -EDEADLK, the one return without m held, if the loop found
 * its tasks deadlocked while m was being locked again (the task holding m
 * is cancelled at the same time, and may unlock m as it cleans up: to
 * another task, or free, never to the caller, who must not unlock it),
 * or if m, while the caller waited, got waiters of another loop (run on
 * this thread meanwhile), behind which it may not queue; -EPERM if the
 * caller does not hold m; -EINVAL. */
int weft_cond_wait(weft_cond *c, weft_mutex *m);

/* Wakes the first waiter, or every one. NULL is ignored. */
void weft_cond_signal(weft_cond *c);
void weft_cond_broadcast(weft_cond *c);

typedef struct weft_sem {
  size_t priv_count;
  void *priv_head, *priv_tail;
} weft_sem;

/* A semaphore holding n units, for static initialisation. */
#define WEFT_SEM_INIT(n) {(n), NULL, NULL}

void weft_sem_init(weft_sem *s, size_t count);

/* Takes one unit, waiting while there is none. 0, -ECANCELED, -ETIMEDOUT,
 * -EINVAL. */
int weft_sem_wait(weft_sem *s);

/* 0, or -EAGAIN if there is no unit now; -EINVAL. */
int weft_sem_trywait(weft_sem *s);

/* Gives one unit back: to the first waiter if there is one. 0; -EOVERFLOW
 * at SIZE_MAX units; -EINVAL. */
int weft_sem_post(weft_sem *s);

/* The units free now. */
size_t weft_sem_value(const weft_sem *s);

typedef struct weft_event {
  int priv_set;
  void *priv_head, *priv_tail;
} weft_event;
#define WEFT_EVENT_INIT {0, NULL, NULL}

void weft_event_init(weft_event *e);

/* Sets e, waking every waiter; it stays set until cleared. NULL ignored. */
void weft_event_set(weft_event *e);
void weft_event_clear(weft_event *e);
bool weft_event_is_set(const weft_event *e);

/* Returns 0 at once if e is set (still a cancellation point), else waits
 * until it is set. 0, -ECANCELED, -ETIMEDOUT, -EINVAL. */
int weft_event_wait(weft_event *e);

/* ------------------------------------------------------------------------ */
/* Actors                                                                    */
/*
 * Seed 000's ActorScheduler, as a runtime: an actor is a task with a
 * mailbox, found by a name unique in its loop. Its body calls
 * weft_actor_recv for each message.
 *
 * Messages are pointers, queued as they are (never copied or freed).
 *
 * Fairness: weft_actor_recv is a scheduling point. When other tasks are
 * ready it yields first (weft_yield), even with messages waiting, so an
 * actor that keeps sending to itself (seed 000's counter) cannot starve
 * the others, and a pair of actors sending to each other runs in step:
 * each mailbox holds a message or two, however long they run. The one
 * exception keeps the seed's order: it does not yield when the next task
 * to run is an actor whose oldest message was sent after its own (each
 * message is numbered as it is queued, across the loop's actors). A
 * message taken without yielding (that exception, or no other task ready)
 * counts as one of the loop turn's hand-offs: once they are used up, recv
 * yields anyway, so an actor working through a backlog lets the loop run
 * its timers, callbacks and I/O every few dozen messages. Back from a
 * yield, it yields again while the next task is an actor with an older
 * message that is itself in weft_actor_recv (one running its own code,
 * yielding until this one's work is done, is not waited for), so the order
 * survives the turns a backlog is cut into.
 */
typedef struct weft_actor weft_actor;

typedef struct weft_actor_opts {
  /* Messages the mailbox holds before a send waits (0: no bound). Waiting
   * senders are served FIFO. */
  size_t mailbox_bound;
  /* Called as release(msg, release_arg), oldest first, for each message
   * still in the mailbox when the actor ends (in its task, after fn
   * returned; the actor counts as ended already), or from weft_loop_free
   * when the loop is freed with the actor still there, or with the release
   * of its leftovers stopped inside a callback that blocked (the messages
   * not reached yet). From weft_loop_free it may complete and release the
   * loop's futures (a request's reply: its waiters are gone, and its
   * done-callbacks never run) and free memory; nothing else of weft,
   * since the loop is half taken down. Not for sends
   * refused with -ENOENT, whether made after the end or waiting at it:
   * those messages stay the sender's. NULL: left alone. */
  void (*release)(void *msg, void *arg);
  void *release_arg;
  /* The task's stack size (0: the loop's default). */
  size_t stack_size;
  /* Called as reply_release(value, reply_release_arg) for a reply value
   * that its asker never took (weft_await, weft_future_result): the asker
   * stopped waiting (cancelled, a deadline) and released the future, or
   * cancelled it itself. Exactly once, at the future's last release
   * (weft_actor_reply's own, if the asker let go first), or from
   * weft_loop_free if a task the loop dropped still held it (the callback
   * may then free memory, and call nothing of weft). NULL: such values
   * are dropped. */
  void (*reply_release)(void *value, void *arg);
  void *reply_release_arg;
} weft_actor_opts;

/* Spawns fn(arg) as an actor named `name` (copied; NULL: anonymous, found
 * only through the handle) on the current loop; its task is detached (do
 * not join it). When fn returns, the name is unregistered and free again.
 * NULL and errno: EEXIST (the name is taken), ENOMEM, EINVAL (fn NULL, no
 * loop); fn then never runs. The handle stays safe to use after the actor
 * ends (sends then fail with -ENOENT), even once another actor reuses the
 * name, until the loop is freed. */
weft_actor *weft_actor_spawn(const char *name, void *(*fn)(void *), void *arg);
weft_actor *weft_actor_spawn_opts(const char *name, void *(*fn)(void *),
                                  void *arg, const weft_actor_opts *opts);

/* Queues msg for the actor; waits only when its mailbox is bounded and
 * full. Returns 0; -ENOENT (no such actor, or it has ended, also while
 * this send waited: msg was not queued); -ENOMEM; -EINVAL (NULL, no loop,
 * another loop's code or another thread, or it would have to wait outside
 * a task). A
 * send to a bounded mailbox is a cancellation point: -ECANCELED,
 * -ETIMEDOUT (not queued), and -EDEADLK for an actor sending to its own
 * full mailbox. An unbounded send never waits, is not a cancellation
 * point, and may be made outside a task. */
int weft_actor_send(const char *name, void *msg);
int weft_actor_send_to(weft_actor *a, void *msg);

/* The same without waiting: -EAGAIN where a bounded mailbox is full (or
 * senders already wait for room: they come first), msg not queued. Never
 * a cancellation point (a deadline that has passed does not refuse it),
 * and callable outside a task, on the loop's thread. For a queue that
 * drops what does not fit (a slow client's outbound messages). */
int weft_actor_try_send(const char *name, void *msg);
int weft_actor_try_send_to(weft_actor *a, void *msg);

/* Inside an actor: the oldest message, waiting for one (a cancellation
 * point; see Fairness). 0 and *msg; -ECANCELED, -ETIMEDOUT (no message
 * taken); -EINVAL outside an actor or msg NULL. The message received
 * before, if it was asked (weft_actor_ask) and is neither answered nor
 * taken, is cancelled on entry (also when the call then returns
 * -ECANCELED or -ETIMEDOUT). */
int weft_actor_recv(void **msg);

/* Request and reply. Queues msg as weft_actor_send / _send_to would (the
 * same wait for room, order and errors), with a new reply future, and
 * returns the caller's reference to it: wait with weft_await (under a
 * deadline if need be), then weft_future_release. NULL and errno:
 * ENOENT, ENOMEM, EINVAL, and for a bounded mailbox ECANCELED, ETIMEDOUT,
 * EDEADLK; msg was then not queued and is still the caller's. Once
 * queued, msg is the actor's (an asker that may stop waiting must not
 * point it into its own stack). The reply completes with the actor's
 * answer, or -ECANCELED in weft_await if the actor received another
 * message or ended without answering, or ended with msg still queued
 * (msg then goes to the release callback first). */
weft_future *weft_actor_ask(const char *name, void *msg);
weft_future *weft_actor_ask_to(weft_actor *a, void *msg);

/* Inside an actor: answers the message it received last with value.
 * Returns 0; -ENOENT if that message was sent, not asked, was answered or
 * taken already, or weft_actor_recv was called since; -EINVAL outside an
 * actor (in its release callback too). A value whose asker has stopped
 * waiting goes to the reply_release option. */
int weft_actor_reply(void *value);

/* Inside an actor: the reply future of the message it received last,
 * for an error (weft_future_set_error), or an answer given later or by
 * another task. The caller holds a reference: it completes the future
 * (weft_future_set_result, _set_error, _cancel) and releases it; the asker
 * waits until then. NULL and errno: ENOENT (as for weft_actor_reply),
 * EINVAL outside an actor. */
weft_future *weft_actor_take_reply(void);

/* The actor of that name on the current loop, or NULL. */
weft_actor *weft_actor_lookup(const char *name);

/* The running actor, or NULL. */
weft_actor *weft_actor_self(void);

/* The actor's task (for weft_cancel), NULL once it has ended. */
weft_task *weft_actor_task(weft_actor *a);

/* The messages in a's mailbox, not yet received (senders waiting for room
 * are not counted); 0 once it has ended, and for NULL. Read it on the
 * actor's loop. An actor that writes what it receives to a stream flushes
 * when weft_actor_pending(weft_actor_self()) is 0: one write for a batch
 * of messages. */
size_t weft_actor_pending(const weft_actor *a);

/* Waits until the actor has ended (its fn returned and its mailbox was
 * released): 0, at once if it already has (a handle of an ended actor
 * stays valid for this, as for sends); a cancellation point: -ECANCELED,
 * -ETIMEDOUT. -EDEADLK from the actor itself; -EINVAL for NULL, outside a
 * task, or from another loop's task. Any number of tasks may wait. An
 * orderly shutdown: send the actor a message that makes fn return, then
 * wait for it. */
int weft_actor_wait(weft_actor *a);

/* ------------------------------------------------------------------------ */
/* Executor: blocking and CPU-bound work on a worker pool                     */
/*
 * Each loop has a pool of worker threads (weft_config.executor_threads;
 * default: the online CPUs, at least 2). Threads start as jobs need them
 * and are joined by weft_loop_free, which first waits for the jobs still
 * running. Results come back to the loop through its wake-up eventfd: one
 * wake-up per batch of completions. Workers run with every signal blocked.
 *
 * A job always runs to completion once submitted; nothing can stop a
 * thread in the middle of a C function. When nobody takes its result (the
 * caller was cancelled, the future was cancelled or released), the result
 * goes to the release callback of weft_submit_opts, on the loop's thread;
 * with no callback it is dropped. A loop with jobs in flight is not idle:
 * weft_loop_run waits for them (and their release) before it returns.
 */
typedef struct weft_submit_opts {
  /* release(result, release_arg) for a result nobody will take. NULL: the
   * result is dropped. */
  void (*release)(void *result, void *arg);
  void *release_arg;
} weft_submit_opts;

/* Runs fn(arg) on the loop's pool while the caller's task waits and the
 * other tasks keep running (seed 003's run_in_executor). 0 and *result
 * (result may be NULL: then a result delivered is dropped, and
 * opts->release is not called, being for results nobody is there to
 * take); -ECANCELED or -ETIMEDOUT at once when the task is
 * cancelled or its scope expires while it waits (fn still runs to the end;
 * its result goes to opts->release; arg must stay valid until then, so do
 * not point it into the caller's stack if the task may be cancelled; and
 * weft_loop_run does not return before fn has, cancelled or not). A task
 * cancelled (or past its scope's deadline) before the call gets the error
 * at once too, fn queued all the same, as weft_submit queues it: after
 * -ECANCELED or -ETIMEDOUT fn always runs (or ran), and arg is fn's or
 * release's. -EAGAIN if no worker thread could be started; -ENOMEM;
 * -EINVAL outside a task or fn NULL: after these three fn never runs. fn
 * runs on a worker thread, which has no loop: of
 * weft's functions it may call weft_call_soon_threadsafe, weft_loop_ref
 * and weft_loop_unref, and those that need no loop (weft_strerror,
 * weft_now, which reads the monotonic clock there, not a loop's virtual
 * one); no blocking call. */
int weft_run_in_thread(void *(*fn)(void *), void *arg, void **result);
int weft_run_in_thread_with(void *(*fn)(void *), void *arg, void **result,
                            const weft_submit_opts *opts);

/* The same without waiting: a future, which the caller holds one reference
 * to, gets fn's result (weft_await). Cancelling or releasing the future
 * before fn has returned does not stop fn; its result then goes to
 * opts->release. A result the future holds and nobody took (a weft_await
 * or weft_future_result with `value` non-NULL takes it) goes to
 * opts->release when the future's last reference is released: a caller
 * that gives up, after -ECANCELED or -ETIMEDOUT from weft_await, just
 * releases the future, done or not, and the result is released once
 * wherever it is. (A taken result is the taker's.) Like every future, it
 * must not be used after weft_loop_free, which frees it even if held,
 * handing an untaken result to opts->release first. May be called
 * outside a task (the current loop's pool). It is not a cancellation point:
 * a task already cancelled (or past its scope's deadline) still queues fn
 * and gets its future, as weft_spawn still spawns; the weft_await of it is
 * what says -ECANCELED (-ETIMEDOUT past the deadline). NULL and errno:
 * EAGAIN, ENOMEM, EINVAL (fn NULL, no loop). */
weft_future *weft_submit(void *(*fn)(void *), void *arg);
weft_future *weft_submit_with(void *(*fn)(void *), void *arg,
                              const weft_submit_opts *opts);

/* Python's Future.cancel for a job: takes f's job (a weft_submit future)
 * off the pool's queue if no worker has started it. 1: fn will never run,
 * arg is the caller's again, and f is cancelled if it was pending (its
 * weft_await returns -ECANCELED); the caller still releases f. 0: fn has
 * started or returned (it runs to its end; weft_future_cancel and
 * weft_future_release let go of the result, above), and nothing changed;
 * also for a weft_submit_to_loop future, whose call is the other loop's
 * once sent. -EINVAL: f NULL, not a job's future, or the caller not on
 * f's loop's thread. Not a cancellation point; callable outside a task. */
int weft_submit_cancel(weft_future *f);

/* Runs fn(arg) in a new task of `loop`, another thread's loop, while the
 * caller's task waits and the other tasks keep running: the way into a
 * loop that owns something (a shard of data, a socket, a channel), for a
 * program that runs a loop on each of several threads (docs/executor.md, A
 * loop per thread). fn is a task of `loop`, on its thread: it may wait, and
 * use that loop's objects, as any of its tasks does. 0 and *result (result
 * may be NULL, as for weft_run_in_thread).
 *
 * Once the call is made, fn runs, whatever becomes of the caller (unless
 * `loop` is freed first: -ESHUTDOWN, below): a caller cancelled, or whose
 * scope expires, while it waits returns -ECANCELED or -ETIMEDOUT at once,
 * and fn's task is cancelled on its loop (weft_cancel:
 * its blocking calls return -ECANCELED), from its start if it had not
 * started (with no memory for that message, fn runs on uncancelled). What
 * fn returns then goes to opts->release, on the caller's loop. So fn (or
 * release) is where a heap arg is freed, and arg must stay valid until fn
 * has returned: do not point it into the caller's stack if the caller may
 * be cancelled (or make the call in a shielded scope). A task cancelled
 * before the call, or inside a scope whose deadline has passed, still
 * sends it and gets -ECANCELED or -ETIMEDOUT at once (fn's task starts
 * cancelled): these two errors always mean the call was made, so fn (or
 * release) sees arg; the errors before a call is made are -EINVAL,
 * -EDEADLK and -ENOMEM.
 *
 * `loop` must be running, or be run later, and no call may be made to it
 * once its weft_loop_free has begun (it would be lost; as for
 * weft_call_soon_threadsafe: a loop that others call holds a weft_loop_ref of
 * its own). The call keeps it running while it is there (a callback queued,
 * then fn's task); fn's task is one of its tasks, to which its deadlock rule
 * applies. A loop stopped and freed with calls in it sends them all back: those
 * whose fn has returned with fn's result (fn may stop its loop), the others
 * with -ESHUTDOWN and no result (fn never started, or its task was dropped with
 * the loop, as weft_loop_free drops any task: what arg owns is then not freed
 * by fn, and the caller cannot tell which). The caller's loop counts the call
 * as a job (weft_loop_run waits for it, weft_executor_pending counts it), and
 * weft_loop_free cancels the calls it has out and waits for them (two
 * loops freed at once with calls into each other each send the other's
 * back first). `loop` may be the caller's own: a spawn and a join (not
 * counted as a job: the deadlock rule sees the two tasks).
 *
 * Errors after which fn never runs: -EINVAL (loop or fn NULL, outside a
 * task); -EDEADLK (loop is another loop of the caller's thread, which
 * cannot run before the caller's returns); -ENOMEM (here, or no task or
 * stack for fn on `loop`: then a heap arg has no owner but the caller,
 * who is told only if still waiting). It costs a weft_call_soon_threadsafe
 * hop there, a spawn, and a push back onto the caller's loop's list of
 * finished jobs (as a pool's job returns), each hop a wake-up when the
 * loop woken was idle; a cancellation, one more hop. */
int weft_run_in_loop(weft_loop *loop, void *(*fn)(void *), void *arg,
                     void **result);
int weft_run_in_loop_with(weft_loop *loop, void *(*fn)(void *), void *arg,
                          void **result, const weft_submit_opts *opts);

/* The same without waiting: a future of the caller's loop (which the caller
 * holds one reference to) gets fn's result, or the error -ENOMEM if fn's
 * task could not start, or -ESHUTDOWN if `loop` was freed with the call
 * in it, fn not started or not returned (as above). One to each of
 * several loops, then a weft_await of each, gathers from them all.
 * Cancelling or releasing the future does not
 * stop fn (as for weft_submit); its result then goes to opts->release. May
 * be called outside a task (the current loop's); not a cancellation
 * point. NULL and errno: EINVAL, EDEADLK, ENOMEM, as above. */
weft_future *weft_submit_to_loop(weft_loop *loop, void *(*fn)(void *),
                                 void *arg);
weft_future *weft_submit_to_loop_with(weft_loop *loop, void *(*fn)(void *),
                                      void *arg, const weft_submit_opts *opts);

/* Jobs submitted to the loop's pool, and calls into other loops
 * (weft_run_in_loop, weft_submit_to_loop), not yet delivered, and the
 * threads the pool has started: for tests and monitoring. */
size_t weft_executor_pending(const weft_loop *loop);
unsigned weft_executor_threads(const weft_loop *loop);

/* ------------------------------------------------------------------------ */
/* Name resolution, files and signals, built on the pool                     */

struct addrinfo;

/* getaddrinfo(3) run on the pool: the same arguments and the same list in
 * *res (res NULL: -EINVAL), to be freed with freeaddrinfo. The strings and
 * hints are copied, so they need live only for the call. Returns 0 or a
 * negative errno: getaddrinfo's errors are mapped (EAI_NONAME, EAI_NODATA,
 * EAI_SERVICE, EAI_ADDRFAMILY: -ENOENT; EAI_AGAIN: -EAGAIN; EAI_FAIL: -EIO;
 * EAI_MEMORY: -ENOMEM; EAI_FAMILY: -EAFNOSUPPORT; EAI_SOCKTYPE:
 * -ESOCKTNOSUPPORT; EAI_BADFLAGS: -EINVAL; EAI_SYSTEM: the errno); -ENOMEM and
 * -EAGAIN also when the job itself could not be had (no memory, no worker
 * thread). -ECANCELED, -ETIMEDOUT: a lookup no worker had started is not
 * made at all; one under way finishes on the pool and its list is freed.
 * Outside a task it calls getaddrinfo directly (nothing else would
 * run meanwhile anyway). */
int weft_getaddrinfo(const char *node, const char *service,
                     const struct addrinfo *hints, struct addrinfo **res);

/* Files: the calls of the same names run on the pool (a regular file is
 * always "ready", so waiting for readiness would block the loop). Reads
 * and writes go through a buffer of the job's own, so a cancelled call
 * returns at once and never touches `buf` afterwards; a cancelled write may
 * still happen (if a worker had started it: one still queued is dropped,
 * as are a queued open, read, fsync and weft_file_stat; not a close). (On the
 * io_uring backend they are requests on the ring, into and out of `buf` itself:
 * a cancelled call there waits until the kernel is done with `buf`, which for a
 * file is soon, and returns what the request did if it completed; and an
 * O_DIRECT buffer must then be aligned, as for pread: the pool's own buffer
 * is.) open adds O_CLOEXEC. An open that blocks (a FIFO with no writer, a
 * terminal, a device) blocks its worker thread: a cancellation or deadline
 * returns at once, but the job goes on, and weft_loop_run (weft_main) does not
 * return until it has (for a FIFO, until a writer comes). On io_uring (where
 * the kernel has IORING_OP_OPENAT) the open is a request on the ring instead,
 * which blocks as open(2) does, in the kernel: a cancellation or deadline
 * interrupts it there, and nothing is left to wait for; an open that
 * completed although cancelled returns its fd (the next call sees the
 * cancellation), which the caller closes. A walk that may meet such
 * files opens with O_NONBLOCK, which a regular file ignores: a FIFO opened
 * so then reads -ESPIPE.
 * Each returns what the POSIX call returns (an fd, a count, 0) or a
 * negative errno; -ECANCELED, -ETIMEDOUT, -EINVAL outside a task, with
 * an offset < 0 or with buf NULL and len > 0 (where pread would fault),
 * -EBADF for an fd < 0 (whatever the offset), -ESPIPE for a read or write on a
 * pipe or socket (as pread; fsync there gives fsync's own -EINVAL), -ENOMEM,
 * -EAGAIN (no worker thread could be started). A cancelled open closes the fd
 * it got (on the pool; on io_uring an open that completed although
 * cancelled returns it, above). On the pool the caller is not told whether
 * a worker had started the open, nor when it ends: an O_CREAT open cut
 * short may create the file after the call returned, so an unlink made
 * at once can come first and the file stays (make such an open in a
 * shielded scope when the file must not be left behind). A cancelled (or
 * timed-out) close still closes. The calls of a cancelled read or write
 * that a worker had started still run there: weft_file_close of an fd with
 * such calls in flight returns at once (0, or -ECANCELED for a cancelled task)
 * and closes the fd when the last of them has ended, so its number is not
 * reused before (close files with weft_file_close, not weft_close).
 * weft_file_close's -ENOMEM (no job could be had) leaves the fd open, for the
 * caller to close or to try again.
 *
 * On epoll and poll a read of at most 128 KiB first takes what the page
 * cache holds, on the loop's thread (preadv2 with RWF_NOWAIT, which never
 * waits for the disk), and only the rest, if any, is a job: a cached read
 * costs what pread does, not a job's round trip (not for an O_DIRECT fd,
 * whose read would wait for the device on the loop's thread: its flags are
 * read at weft_file_open, or at the first read of an fd opened otherwise,
 * so set O_DIRECT before that; what was read is kept until weft_file_close
 * or weft_close: after a plain close(2), an fd opened otherwise at the same
 * number is taken for the old one, so an O_DIRECT fd there can be read on
 * the loop's thread, and a regular file where a /proc or tmpfs file was
 * never from the cache). Such a read cannot be
 * cancelled part way (it is done before the call returns); when the rest's
 * job is cancelled, the call returns the count of the part already read,
 * and the next call -ECANCELED. Reads that never wait yield now and then
 * (once in 128 calls), as the socket calls do, so the loop's other tasks
 * run. */
int weft_file_open(const char *path, int flags, mode_t mode);
ssize_t weft_file_read(int fd, void *buf, size_t len, off_t offset);
ssize_t weft_file_write(int fd, const void *buf, size_t len, off_t offset);
int weft_file_fsync(int fd);
int weft_file_close(int fd);

/* stat(2) of `path`, or lstat(2) with flags AT_SYMLINK_NOFOLLOW (and
 * AT_NO_AUTOMOUNT, as fstatat takes it), as a job on the pool, on every
 * backend: a lookup that reads directories or inodes from the disk holds a
 * worker, not the loop. *st is written only when the call returns 0, so a
 * cancelled call never writes it afterwards. 0 or a negative errno: stat's
 * own (-ENOENT, -EACCES, -ELOOP, -ENOTDIR...), -ECANCELED, -ETIMEDOUT,
 * -EINVAL outside a task, for path or st NULL or another flag, -ENOMEM,
 * -EAGAIN (no worker thread could be started). An open fd's fstat(2) does
 * not wait for the disk: call it directly. */
struct stat;
int weft_file_stat(const char *path, struct stat *st, int flags);

/* Waits until one of the signals in `set` arrives, and gives its number in
 * *signo (may be NULL). The signals are read from a signalfd, so they are
 * blocked in the calling thread first and stay blocked afterwards (one
 * arriving between two calls waits for the next instead of taking its
 * default action). Block them in every other thread too (pthread_sigmask
 * before creating threads), or the kernel may deliver them there; the
 * pool's workers block every signal. The calling thread blocks them only
 * when the call is made: one that arrives before (say between the spawn
 * of the task that waits and its first run) still takes its default
 * action, so a program that must not die of it blocks them on the loop's
 * thread too, before the loop starts. After the call they stay blocked
 * until unblocked: a second one (a second Ctrl-C during a slow shutdown)
 * waits, doing nothing, for the next weft_signal_wait. With WEFT_DEBUG, a
 * wait for SIGQUIT takes it from the loop's task dump for the rest of the
 * run (and of a later run, stopped and run again, while it waits).
 * One signal ends one wait: two tasks waiting for the same signal
 * need two of it (which of them the first ends is not defined).
 * 0; -ECANCELED, -ETIMEDOUT; -EINVAL
 * (outside a task, set NULL or empty of catchable signals); -ENOSYS
 * without signalfd. */
#if !defined(__STRICT_ANSI__) || defined(_POSIX_C_SOURCE) ||                   \
    defined(_XOPEN_SOURCE) || defined(_GNU_SOURCE) ||                          \
    defined(_DEFAULT_SOURCE) || defined(_BSD_SOURCE)
/* (Declared where <signal.h> has sigset_t: a strict -std=c11 build has it
 * only with _POSIX_C_SOURCE, which the rest of weft.h does not need.) */
int weft_signal_wait(const sigset_t *set, int *signo);
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif /* WEFT_H */
