/*
 * Layer 5: signals as an ordinary blocking call. weft_signal_wait blocks
 * the signals of its set in the loop's thread (they then stay pending
 * instead of running a handler or their default action) and reads them
 * from a signalfd, which the loop waits on like any fd.
 */
#include "internal.h"

#include "backend.h"

#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/signalfd.h>
#endif

/* Does set hold a signal a signalfd can report (not SIGKILL or SIGSTOP)? */
static int catchable(const sigset_t *set) {
  for (int s = 1; s < NSIG; s++)
    if (s != SIGKILL && s != SIGSTOP && sigismember(set, s) == 1)
      return 1;
  return 0;
}

int weft_signal_wait(const sigset_t *set, int *signo) {
  if (!set || !weft__running_task() || !catchable(set))
    return -EINVAL;
  int rc = weft__checkpoint();
  if (rc < 0)
    return rc;
#ifdef __linux__
  /* Blocked first: a signal that comes before the signalfd exists stays
   * pending, and the signalfd reports it. */
  pthread_sigmask(SIG_BLOCK, set, NULL);
  /* ... and they stay blocked: the loop's exit, which unblocks the SIGPIPE
   * (and WEFT_DEBUG's SIGQUIT) it blocked itself, leaves these be. */
  weft_loop *loop = weft__running_task()->loop;
  for (int s = 1; s < NSIG; s++)
    if (sigismember(set, s) == 1)
      sigaddset(&loop->sig_kept, s);
  /* A SIGQUIT the program waits for is its own: WEFT_DEBUG's dump, whose
   * signalfd would take it first, stops listening for the rest of the
   * run. */
  int quit = sigismember(set, SIGQUIT) == 1;
  if (quit)
    weft__quit_close(loop);
  int fd = signalfd(-1, set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (fd < 0)
    return -errno;
  if (!weft__fd_fresh(loop, fd)) { /* a stale entry must not describe it */
    close(fd);
    return -ENOMEM;
  }
  struct signalfd_siginfo si;
  weft__held_fd h; /* closed by the loop if this task is dropped */
  weft__hold_fd(&h, fd);
  loop->quit_waits += quit; /* a later run's dump must not take it either */
  ssize_t n = weft_read(fd, &si, sizeof si);
  loop->quit_waits -= quit;
  weft__unhold(&h.h);
  weft_close(fd);
  if (n < 0)
    return (int)n;
  if (n != (ssize_t)sizeof si)
    return -EIO;
  if (signo)
    *signo = (int)si.ssi_signo;
  return 0;
#else
  return -ENOSYS;
#endif
}
