/*
 * Failure injection on the I/O paths, for the tests (tests/test_fault.c).
 *
 * io.c asks the hook before each system call that carries out an I/O
 * operation: the read, write, recv, send, recvfrom, sendto, accept4 of
 * weft__io_readiness (every attempt, the retries after EINTR and EAGAIN
 * included), the connect() of weft_connect, and file.c's preadv2 of the
 * page cache (OP_FILE_READ: a failure sends the read to the pool, as
 * EAGAIN does; a short count reads the rest from the cache or the pool)
 * on the epoll and poll backends. The hook decides whether the
 * call runs, fails, or moves fewer bytes, so a test can make the kernel
 * misbehave in every way the man pages allow (EINTR, a spurious EAGAIN, a
 * short transfer, ECONNRESET, EPIPE, EMFILE...) on a socket that is in fact
 * healthy, and check that weft gives the documented result.
 *
 * Not exported (weft.map exports weft_[!_]* only): the tests link the
 * static library and include this header. The hook and its argument belong
 * to the thread that sets them: they apply to the I/O of the loops running
 * on that thread. (Thread-local, too, because the hot path reads the hook
 * on every call: the thread's own block, which the C library's system-call
 * wrappers touch anyway, instead of a page of globals; see WEFT__HOT.)
 */
#ifndef WEFT_FAULT_H
#define WEFT_FAULT_H

#include "ctx.h" /* WEFT__TLS */

#include <stddef.h>

/* Called before each system call of an I/O operation with its OP_* kind
 * (backend.h), its fd and the length asked (0 for accept and connect).
 * Returns 0 to let the call run; a positive errno to fail it with that
 * errno without making it; or -n (n > 0) to make it with at most n bytes
 * (a short transfer; ignored by accept and connect).
 *
 * A shortened call that moves all its n bytes is not taken for a drained
 * buffer (io.c's "short read" hint), since the kernel did give everything
 * it was asked for: the next call is tried at once, as after a full one.
 *
 * NULL (the default): no injection, at the cost of one load and a branch
 * per system call. */
typedef int (*weft__fault_fn)(int kind, int fd, size_t len, void *arg);

extern WEFT__TLS weft__fault_fn weft__fault_hook;
extern WEFT__TLS void *weft__fault_arg; /* passed to the hook as `arg` */

#endif
