/*
 * Layer 5: files. A regular file is always "ready" to epoll and poll, and a
 * read of a cold page blocks the thread in the kernel, so the calls run on
 * the executor's pool; on io_uring, open, read, write, fsync and close
 * are ring requests (loop->backend->open; native(), through
 * loop->backend->file), and the open goes to the pool only where the
 * kernel lacks IORING_OP_OPENAT.
 *
 * Each call is one job whose record carries what the call needs: the path
 * of an open, a buffer for the data of a read or a write. A read lands in
 * that buffer and is copied out when the caller takes the result, so a
 * caller that was cancelled has returned, and its buffer is never written
 * afterwards; a write copies the data in before the job is queued.
 *
 * A cancelled read or write still runs on its worker, on the same fd
 * number. So the loop counts the jobs of each fd (weft__fd.file_jobs), and
 * weft_file_close of an fd that still has some closes it only once the
 * last has ended: the number cannot be reused by a new open meanwhile, and
 * a late write can never land in another file.
 *
 * A read of pages already in the page cache needs no thread: on epoll and
 * poll, weft_file_read first tries preadv2 with RWF_NOWAIT, which copies
 * what is cached and fails with EAGAIN instead of waiting for the disk
 * (read_cached). Only what it could not read goes to the pool. A job's
 * round trip costs more than such a read: 8.9 µs of CPU against 2.4 for a
 * cached 4 KiB block in bench_files (README).
 */
#include "backend.h"
#include "fault.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

enum { F_OPEN, F_READ, F_WRITE, F_FSYNC, F_CLOSE, F_STAT };

/* The most one read or write moves (a longer one is a short count). */
#define FILE_IO_MAX ((size_t)16 << 20)

typedef struct fop {
  weft_loop *loop;
  int op; /* F_* */
  int fd;
  int flags; /* open's */
  mode_t mode;
  size_t len;
  off_t off;
  ssize_t rc; /* the call's result or -errno */
  char *data; /* open: the path; read, write: the bytes; stat: the
               * struct stat, then the path (in raw) */
  char raw[];
} fop;

/* A read or write buffer starts on a 4 KiB boundary, as O_DIRECT needs
 * (the block size of the device, at most the page size); it costs address
 * space, not memory, since the gap is never touched. */
#define DIRECT_ALIGN 4096

static void *run_fop(void *arg) {
  fop *f = arg;
  ssize_t rc;
  switch (f->op) {
  case F_OPEN:
    do
      rc = open(f->data, f->flags, f->mode);
    while (rc < 0 && errno == EINTR);
    break;
  case F_READ:
    do
      rc = pread(f->fd, f->data, f->len, f->off);
    while (rc < 0 && errno == EINTR);
    break;
  case F_WRITE:
    do
      rc = pwrite(f->fd, f->data, f->len, f->off);
    while (rc < 0 && errno == EINTR);
    break;
  case F_FSYNC:
    do
      rc = fsync(f->fd);
    while (rc < 0 && errno == EINTR);
    break;
  case F_STAT: { /* raw may not be aligned for a struct stat */
    struct stat sb;
    rc = fstatat(AT_FDCWD, f->data + sizeof sb, &sb, f->flags);
    if (rc == 0)
      memcpy(f->data, &sb, sizeof sb);
    break;
  }
  default: /* F_CLOSE: Linux frees the fd even on EINTR; never retry */
    rc = close(f->fd);
    if (rc < 0 && errno == EINTR)
      rc = 0;
    break;
  }
  f->rc = rc < 0 ? -errno : rc;
  return f;
}

/* Reads, writes and fsyncs count as the fd's jobs from queueing to end. */
static int counted(const fop *f) { return f->op >= F_READ && f->op <= F_FSYNC; }

/* A counted job has ended (on the loop's thread): the last one of an fd
 * being closed closes it. */
static void fop_ended(fop *f) {
  if (!counted(f))
    return;
  weft__fd *e = &f->loop->fds[f->fd];
  if (--e->file_jobs == 0 && (e->file & FD_FILE_CLOSING)) {
    e->file &= (uint8_t)~FD_FILE_CLOSING;
    close(f->fd); /* a regular file's close does not wait for I/O */
  }
}

/* A job nobody waits for any more: an open's fd is closed. */
static void fop_release(void *result, void *unused) {
  fop *f = result;
  (void)unused;
  if (f->op == F_OPEN && f->rc >= 0)
    close((int)f->rc);
  fop_ended(f);
  weft__free(f);
}

static fop *fop_new(int op, int fd, size_t extra) {
  size_t pad = op == F_READ || op == F_WRITE ? DIRECT_ALIGN - 1 : 0;
  fop *f = weft__malloc(sizeof *f + extra + pad);
  if (f) {
    memset(f, 0, sizeof *f);
    f->rc = -ECANCELED; /* until it runs: a job dropped unrun (executor.c)
                         * has opened nothing for fop_release to close */
    f->data = (char *)(((uintptr_t)f->raw + pad) & ~(uintptr_t)pad);
    f->loop = weft__running_task()->loop;
    f->op = op;
    f->fd = fd;
  }
  return f;
}

/* fd is not open (as far as a call may see): closed with weft_file_close
 * while jobs of it run, or not a file descriptor at all. The fd table only
 * grows to numbers that are open. */
static int fd_gone(weft_loop *loop, int fd) {
  if ((size_t)fd < loop->nfds)
    return (loop->fds[fd].file & FD_FILE_CLOSING) != 0;
  return fcntl(fd, F_GETFD) < 0;
}

/* What an fd opened with these flags says of reads from the page cache
 * (read_cached): O_DIRECT reads are not tried there, since one that never
 * waits for a lock still waits for the device, and the loop with it
 * (64 µs a 4 KiB read here). */
static uint8_t cache_bits(int open_flags) {
  return FD_FILE_PROBED | (open_flags & O_DIRECT ? FD_FILE_NO_NOWAIT : 0);
}

/* An open's result r (an fd or -errno), opened with these flags: a new
 * fd's entry starts afresh. What the table said of its number was about
 * one closed behind weft's back (a pipe's flags would send the file's
 * calls the pipe's way). */
static int opened(weft_loop *loop, int r, int flags) {
  if (r >= 0) {
    weft__fd *e = weft__fd_fresh(loop, r);
    if (e)
      e->file = cache_bits(flags);
    else {
      close(r);
      r = -ENOMEM;
    }
  }
  return r;
}

/* Runs f on the pool and frees it. Returns the call's result (a read's
 * bytes copied to `out` first), or a negative errno if the caller stopped
 * waiting (-ECANCELED, -ETIMEDOUT: if the job was queued, fop_release
 * frees f when it ends) or the job could not be queued. */
static ssize_t fop_run(fop *f, void *out) {
  weft_submit_opts opts = {.release = fop_release};
  int rc = weft__checkpoint();
  if (rc < 0) {
    weft__free(f);
    return rc;
  }
  if (counted(f)) {
    if (fd_gone(f->loop, f->fd)) {
      weft__free(f);
      return -EBADF;
    }
    weft__fd *e = weft__fd_get(f->loop, f->fd);
    if (!e) {
      weft__free(f);
      return -ENOMEM;
    }
    e->file_jobs++;
  }
  int queued;
  rc = weft__run_in_thread(run_fop, f, NULL, &opts, &queued,
                           WEFT__JOB_CHECK | WEFT__JOB_DROP);
  if (rc < 0) {
    if (!queued) {
      fop_ended(f);
      weft__free(f);
    }
    return rc;
  }
  ssize_t r = f->rc;
  if (f->op == F_READ && r > 0)
    memcpy(out, f->data, (size_t)r);
  if (f->op == F_STAT && r == 0)
    memcpy(out, f->data, sizeof(struct stat));
  if (f->op == F_OPEN)
    r = opened(f->loop, (int)r, f->flags);
  fop_ended(f);
  weft__free(f);
  return r;
}

/* Every call needs a task; -EINVAL outside one. */
static int in_task(void) { return weft__running_task() != NULL; }

int weft_file_open(const char *path, int flags, mode_t mode) {
  if (!path || !in_task())
    return -EINVAL;
  weft_loop *loop = weft__running_task()->loop;
  if (loop->backend->open) { /* io_uring: a request on the ring */
    int r = loop->backend->open(loop, path, flags | O_CLOEXEC, mode);
    if (r != -ENOSYS)
      return opened(loop, r, flags);
  }
  size_t n = strlen(path) + 1;
  fop *f = fop_new(F_OPEN, -1, n);
  if (!f)
    return -ENOMEM;
  memcpy(f->data, path, n);
  f->flags = flags | O_CLOEXEC;
  f->mode = mode;
  return (int)fop_run(f, NULL);
}

/* On the pool on every backend: a lookup may read directories from the
 * disk, which no backend can wait for (the ring's statx is always handed
 * to a kernel worker, a thread as the pool's is). */
int weft_file_stat(const char *path, struct stat *st, int flags) {
  if (!path || !st || !in_task() ||
      (flags & ~(AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT)))
    return -EINVAL;
  size_t n = strlen(path) + 1;
  fop *f = fop_new(F_STAT, -1, sizeof(struct stat) + n);
  if (!f)
    return -ENOMEM;
  memcpy(f->data + sizeof(struct stat), path, n);
  f->flags = flags;
  return (int)fop_run(f, st);
}

/* The call done by the loop's backend itself (io_uring: a request on the
 * ring, with the caller's buffer, since the backend does not return before
 * the kernel is done with it), or -ENOSYS: the pool's job. */
static ssize_t native(int op, int fd, void *buf, size_t len, off_t offset) {
  weft_loop *loop = weft__running_task()->loop;
  if (!loop->backend->file)
    return -ENOSYS;
  if (fd_gone(loop, fd))
    return -EBADF;
  return loop->backend->file(loop,
                             op == F_READ    ? FILE_READ
                             : op == F_WRITE ? FILE_WRITE
                                             : FILE_FSYNC,
                             fd, buf, len, offset);
}

/* The most a read tries from the page cache on the loop's thread (a
 * longer one goes to the pool at once): its copy holds up the loop's other
 * tasks, about 6 µs for 128 KiB here, and longer reads gain little, the
 * job's round trip being small beside their copy. */
#define CACHED_MAX ((size_t)128 << 10)

/* A read of what the page cache holds, on the loop's thread: the bytes
 * read (all of len, or fewer, the rest not cached or past the end: 0 is
 * the end), -EAGAIN when nothing could be read without waiting (or the
 * file system cannot say: it is remembered), or the call's error
 * (-ECANCELED, -ETIMEDOUT, -EBADF). Any other failure is -EAGAIN too: the
 * pool's pread gives the error. A run of reads that never wait yields now
 * and then, as the socket calls do (io.c's budget). */
static ssize_t read_cached(weft_loop *loop, int fd, void *out, size_t len,
                           off_t offset) {
  if (len > CACHED_MAX)
    return -EAGAIN;
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
  if (fd_gone(loop, fd))
    return -EBADF;
  /* (The number is open, so the table grows only as far as open fds go.) */
  weft__fd *e = weft__fd_get(loop, fd);
  if (!e)
    return -EAGAIN;
  if (weft__io_budget_spent(loop)) {
    /* The call has begun: a weft_file_close during the yield (its entry's
     * generation moves on) makes it -EBADF, never a read of whatever file
     * took the number meanwhile. */
    uint32_t gen = e->gen;
    (void)weft_yield(); /* a cancellation is seen by the checkpoint next */
    if ((rc = weft__checkpoint()) < 0)
      return rc;
    if (loop->fds[fd].gen != gen || fd_gone(loop, fd))
      return -EBADF;
    e = &loop->fds[fd]; /* the table may have moved */
  }
  /* An fd weft_file_open did not open: its flags, the first time. */
  if (!(e->file & FD_FILE_PROBED)) {
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0) /* not open: nothing to remember for the number's next fd */
      return -EAGAIN;
    e->file |= cache_bits(fl);
  }
  if (e->file & FD_FILE_NO_NOWAIT)
    return -EAGAIN;
  struct iovec iov = {out, len};
  ssize_t n;
  int f = weft__fault_hook
              ? weft__fault_hook(OP_FILE_READ, fd, len, weft__fault_arg)
              : 0;
  if (f > 0) {
    errno = f;
    n = -1;
  } else {
    if (f < 0 && (size_t)(-(long)f) < len)
      iov.iov_len = (size_t)(-(long)f);
    do
      n = preadv2(fd, &iov, 1, offset, RWF_NOWAIT);
    while (n < 0 && errno == EINTR);
  }
  if (n >= 0)
    return n;
  /* Not for this file system (or kernel): its reads go to the pool. */
  if (errno == EOPNOTSUPP || errno == ENOSYS)
    e->file |= FD_FILE_NO_NOWAIT;
  return -EAGAIN;
}

/* The job of a read or a write, its buffer filled with the data of a
 * write. */
static ssize_t pool_transfer(int op, int fd, void *out, const void *in,
                             size_t len, off_t offset) {
  fop *f = fop_new(op, fd, len);
  if (!f)
    return -ENOMEM;
  if (in && len)
    memcpy(f->data, in, len);
  f->len = len;
  f->off = offset;
  return fop_run(f, out);
}

/* A read or a write of len bytes at offset: the backend's own call, or a
 * read from the page cache, or the pool's job. */
static ssize_t transfer(int op, int fd, void *out, const void *in, size_t len,
                        off_t offset) {
  if (!in_task())
    return -EINVAL;
  if (fd < 0)
    return -EBADF;
  if (offset < 0) /* as pread and pwrite: no "current position" here */
    return -EINVAL;
  if (len > FILE_IO_MAX)
    len = FILE_IO_MAX;
  ssize_t r = native(op, fd, op == F_READ ? out : (void *)in, len, offset);
  if (r != -ENOSYS)
    return r;
  if (op == F_READ) {
    weft_loop *loop = weft__running_task()->loop;
    char *at = out;
    size_t done = 0; /* read from the page cache */
    while ((r = read_cached(loop, fd, at, len - done, offset)) != -EAGAIN) {
      if (r < 0)
        return done ? (ssize_t)done : r;
      done += (size_t)r;
      if (r == 0 || done == len) /* all of it, or the end of the file */
        return (ssize_t)done;
      at += r;
      offset += r;
    }
    if (done) {
      /* Part of it was cached: the rest comes from the pool, so that a
       * short count still means the end of the file. If that fails (or
       * is cancelled), the part read is the answer; the next call gets
       * the error. */
      r = pool_transfer(F_READ, fd, at, NULL, len - done, offset);
      return r > 0 ? (ssize_t)done + r : (ssize_t)done;
    }
  }
  return pool_transfer(op, fd, out, in, len, offset);
}

ssize_t weft_file_read(int fd, void *buf, size_t len, off_t offset) {
  if (!buf && len)
    return -EINVAL;
  return transfer(F_READ, fd, buf, NULL, len, offset);
}

ssize_t weft_file_write(int fd, const void *buf, size_t len, off_t offset) {
  if (!buf && len)
    return -EINVAL;
  return transfer(F_WRITE, fd, NULL, buf, len, offset);
}

int weft_file_fsync(int fd) {
  if (!in_task())
    return -EINVAL;
  if (fd < 0)
    return -EBADF;
  ssize_t r = native(F_FSYNC, fd, NULL, 0, 0);
  if (r != -ENOSYS)
    return (int)r;
  fop *f = fop_new(F_FSYNC, fd, 0);
  return f ? (int)fop_run(f, NULL) : -ENOMEM;
}

/* A close happens even for a task already cancelled: "a cancelled close
 * still closes", so the fd is never left open by a cancellation. */
int weft_file_close(int fd) {
  weft_task *t = weft__running_task();
  if (!t)
    return -EINVAL;
  if (fd < 0)
    return -EBADF;
  weft_loop *loop = t->loop;
  if (fd_gone(loop, fd))
    return -EBADF; /* closed already, its close only deferred */
  weft__fd_forget(loop, fd);
  if ((size_t)fd < loop->nfds && loop->fds[fd].file_jobs) {
    loop->fds[fd].file |= FD_FILE_CLOSING; /* the last job's end closes it */
    return weft__checkpoint();
  }
  if (loop->backend->close) { /* through the ring, after what is queued */
    int rc = loop->backend->close(loop, fd);
    int crc = weft__checkpoint();
    return rc < 0 ? rc : crc;
  }
  fop *f = fop_new(F_CLOSE, fd, 0);
  if (!f) /* the fd stays open: the caller may close it (weft.h) */
    return -ENOMEM;
  weft_submit_opts opts = {.release = fop_release};
  int queued;
  int rc =
      weft__run_in_thread(run_fop, f, NULL, &opts, &queued, WEFT__JOB_CHECK);
  if (rc < 0) {
    if (queued)
      return rc; /* the close happens on the pool */
    /* Not queued (cancelled already, or no job or thread could be had):
     * close here (a close of a regular file does not wait for I/O on
     * Linux, except on network file systems), and say why the call
     * stopped if it was cancelled, else nothing (the close is done). */
    weft__free(f);
    if (close(fd) < 0 && errno != EINTR)
      return -errno;
    return rc == -ECANCELED || rc == -ETIMEDOUT ? rc : 0;
  }
  rc = (int)f->rc;
  weft__free(f);
  return rc;
}
