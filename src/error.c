/*
 * Layer 0: error names and messages, generated from one table (as libuv's
 * UV_ERRNO_MAP), and the library's version.
 */
#include "weft.h"

#include <errno.h>
#include <string.h>

/* glibc 2.32 names and describes every code it knows, thread-safely: the
 * codes weft's table lacks (ones a program's own system calls or a
 * library beside weft returned) get those. */
#if defined(__GLIBC__) &&                                                      \
    (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
#define LIBC_NAME(m) ((m) <= 4096u ? strerrorname_np((int)(m)) : NULL)
#define LIBC_DESC(m) ((m) <= 4096u ? strerrordesc_np((int)(m)) : NULL)
#else
#define LIBC_NAME(m) ((void)(m), (const char *)NULL)
#define LIBC_DESC(m) ((void)(m), (const char *)NULL)
#endif

/* Every error weft returns, with its message, and those that the system
 * calls it wraps pass through (a read of a directory is -EISDIR). Add a row
 * when a new call can return a new code; weft_strerror and weft_err_name
 * follow. */
#define WEFT_ERRNO_MAP(X)                                                      \
  X(EPERM, "operation not permitted")                                          \
  X(ENOENT, "no such file, directory or name")                                 \
  X(ESRCH, "no such task: it has finished")                                    \
  X(EINTR, "interrupted system call")                                          \
  X(EIO, "input/output error")                                                 \
  X(ENXIO, "no such device or address")                                        \
  X(EBADF, "bad file descriptor (closed?)")                                    \
  X(EAGAIN, "resource temporarily unavailable: would block")                   \
  X(ENOMEM, "out of memory, or no stack could be mapped")                      \
  X(EACCES, "permission denied")                                               \
  X(EFAULT, "bad address")                                                     \
  X(EBUSY, "resource busy")                                                    \
  X(EEXIST, "already exists")                                                  \
  X(EXDEV, "cross-device link")                                                \
  X(ENODEV, "no such device")                                                  \
  X(ENOTDIR, "not a directory")                                                \
  X(EISDIR, "is a directory")                                                  \
  X(EINVAL, "invalid argument or misuse")                                      \
  X(ENFILE, "too many open files in the system")                               \
  X(EMFILE, "too many open files")                                             \
  X(ETXTBSY, "text file busy")                                                 \
  X(EFBIG, "file too large")                                                   \
  X(ENOSPC, "no space left on device")                                         \
  X(ESPIPE, "illegal seek: not a seekable file")                               \
  X(EROFS, "read-only file system")                                            \
  X(EMLINK, "too many links")                                                  \
  X(EPIPE, "broken pipe or closed channel")                                    \
  X(ERANGE, "result out of range")                                             \
  X(EOVERFLOW, "value too large: a counter would overflow")                    \
  X(EDEADLK, "deadlock: nothing could ever wake this task")                    \
  X(ENOSYS, "function not implemented")                                        \
  X(EPROTO, "protocol error: generator ignored close")                         \
  X(EMSGSIZE, "message or line too long for the buffer")                       \
  X(ENAMETOOLONG, "name too long (a Unix socket path)")                        \
  X(ENOTEMPTY, "directory not empty")                                          \
  X(ELOOP, "too many levels of symbolic links")                                \
  X(ENOTSOCK, "not a socket")                                                  \
  X(EDESTADDRREQ, "destination address required")                              \
  X(EPROTOTYPE, "wrong protocol type for socket")                              \
  X(ENOPROTOOPT, "protocol not available")                                     \
  X(EPROTONOSUPPORT, "protocol not supported")                                 \
  X(ENOTSUP, "operation not supported")                                        \
  X(ESOCKTNOSUPPORT, "socket type not supported")                              \
  X(EAFNOSUPPORT, "address family not supported")                              \
  X(EADDRINUSE, "address already in use")                                      \
  X(EADDRNOTAVAIL, "address not available")                                    \
  X(ENETDOWN, "network is down")                                               \
  X(ENETUNREACH, "network unreachable")                                        \
  X(ENETRESET, "network dropped connection on reset")                          \
  X(ECONNABORTED, "connection aborted")                                        \
  X(ECONNRESET, "connection reset by peer")                                    \
  X(ENOBUFS, "no buffer space available")                                      \
  X(EISCONN, "socket is already connected")                                    \
  X(ENOTCONN, "socket is not connected")                                       \
  X(ESHUTDOWN, "cannot send after the socket was shut down")                   \
  X(ETIMEDOUT, "timed out: a deadline passed")                                 \
  X(ECONNREFUSED, "connection refused")                                        \
  X(EHOSTDOWN, "host is down")                                                 \
  X(EHOSTUNREACH, "host unreachable")                                          \
  X(EALREADY, "operation already in progress")                                 \
  X(EINPROGRESS, "operation in progress")                                      \
  X(ESTALE, "stale file handle")                                               \
  X(EDQUOT, "disk quota exceeded")                                             \
  X(ECANCELED, "operation cancelled")

/* |err| without overflow: -INT_MIN does not fit in an int. */
static unsigned magnitude(int err) {
  return err < 0 ? 0u - (unsigned)err : (unsigned)err;
}

const char *weft_strerror(int err) {
  const unsigned m = magnitude(err);
  switch (m) {
#define X(code, msg)                                                           \
  case code: return msg;
    WEFT_ERRNO_MAP(X)
#undef X
  case 0: return "success";
  default: {
    const char *desc = LIBC_DESC(m);
    return desc ? desc : "unknown error";
  }
  }
}

const char *weft_err_name(int err) {
  const unsigned m = magnitude(err);
  switch (m) {
#define X(code, msg)                                                           \
  case code: return #code;
    WEFT_ERRNO_MAP(X)
#undef X
  case 0: return "OK";
  default: {
    const char *name = LIBC_NAME(m);
    return name ? name : "UNKNOWN";
  }
  }
}

unsigned weft_version(void) { return WEFT_VERSION_HEX; }

#define STR2(x) #x
#define STR(x)  STR2(x)
const char *weft_version_string(void) {
  return STR(WEFT_VERSION_MAJOR) "." STR(WEFT_VERSION_MINOR) "." STR(
      WEFT_VERSION_PATCH);
}
