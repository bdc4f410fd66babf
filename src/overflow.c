/*
 * Layer 1: naming the task that overflowed its stack.
 *
 * An overflow runs into the guard page below the stack and faults. The
 * handler runs on an alternate signal stack (the faulting one has no room
 * left), checks whether the fault address lies in the guard of the stack
 * now running on this thread, and if so says which task it was and aborts.
 * Any other SIGSEGV goes to whatever handled it before weft, untouched.
 * Everything here is async-signal-safe: a TLS read and write(2).
 */
#include "stack.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define ALTSTACK_SIZE (64 * 1024)

static struct sigaction previous_segv;
static pthread_once_t handler_once = PTHREAD_ONCE_INIT;
static WEFT__TLS int have_altstack;
static WEFT__TLS void *own_altstack; /* the one weft mapped, if any */

static char *put_str(char *p, const char *s) {
  while (*s)
    *p++ = *s++;
  return p;
}

static char *put_u64(char *p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do
    tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n)
    *p++ = tmp[--n];
  return p;
}

static void report(const weft__region *r) {
  char msg[512], *p = msg;
  p = put_str(p, r->is_gen ? "weft: generator " : "weft: task ");
  p = put_u64(p, r->owner_id);
  p = put_str(p, " \"");
  const char *name = r->owner_name ? r->owner_name : "";
  size_t n = strlen(name);
  if (n > 200)
    n = 200;
  memcpy(p, name, n);
  p += n;
  p = put_str(p, "\" overflowed its ");
  p = put_u64(p, r->nominal / 1024);
  p = put_str(p, " KiB stack\n");
  ssize_t unused = write(STDERR_FILENO, msg, (size_t)(p - msg));
  (void)unused;
}

/* Calls the handler that was there before weft's as the kernel would have:
 * with its sa_mask (and SIGSEGV itself unless SA_NODEFER) blocked, and put
 * back to SIG_DFL first if it asked for SA_RESETHAND. */
static void chain(int sig, siginfo_t *si, void *uc) {
  const struct sigaction *p = &previous_segv;
  if (p->sa_flags & SA_RESETHAND)
    signal(SIGSEGV, SIG_DFL);
  sigset_t old, during;
  pthread_sigmask(SIG_SETMASK, NULL, &old);
  during = old; /* SIGSEGV is in it: weft's handler runs with it blocked */
  for (int s = 1; s < NSIG; s++)
    if (sigismember(&p->sa_mask, s) == 1)
      sigaddset(&during, s);
  if (p->sa_flags & SA_NODEFER)
    sigdelset(&during, SIGSEGV);
  pthread_sigmask(SIG_SETMASK, &during, NULL);
  if (p->sa_flags & SA_SIGINFO)
    p->sa_sigaction(sig, si, uc);
  else
    p->sa_handler(sig);
  pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void on_segv(int sig, siginfo_t *si, void *uc) {
  const weft__region *r = weft__ctx_running();
  uintptr_t a = (uintptr_t)si->si_addr, lo = (uintptr_t)r->lo;
  /* A signal sent (kill, raise, sigqueue) has si_code <= 0: not a fault. */
  int sent = si->si_code <= 0;
  if (!sent && r->guard && a < lo && a >= lo - r->guard) {
    report(r);
    signal(SIGABRT, SIG_DFL);
    abort();
  }
  /* Not ours: hand it on as if weft had never been there. */
  if (previous_segv.sa_handler != SIG_DFL &&
      previous_segv.sa_handler != SIG_IGN) {
    chain(sig, si, uc);
  } else if (previous_segv.sa_handler == SIG_DFL) {
    /* Returning re-runs a faulting instruction, which now kills the
     * process the default way (with a core dump if enabled); a sent signal
     * has nothing to re-run, so it is raised again (blocked in here, it
     * lands as the handler returns). */
    signal(SIGSEGV, SIG_DFL);
    if (sent)
      raise(SIGSEGV);
  } else if (previous_segv.sa_handler == SIG_IGN) {
    /* An ignored fault kills all the same (the kernel does so to a process
     * that ignores a fault it cannot step over, and returning with SIG_IGN
     * would loop); an ignored sent signal is ignored, weft's handler
     * staying in place. */
    if (!sent)
      signal(SIGSEGV, SIG_DFL);
  }
}

static void install_handler(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
}

void weft__overflow_init(void) {
  pthread_once(&handler_once, install_handler);
  if (have_altstack)
    return;
  have_altstack = 1;
  stack_t old;
  if (sigaltstack(NULL, &old) == 0 && !(old.ss_flags & SS_DISABLE))
    return; /* the thread has one already (ASan installs its own) */
  void *mem = mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mem == MAP_FAILED)
    return; /* no message on overflow then; the fault still stops it */
  stack_t ss = {.ss_sp = mem, .ss_size = ALTSTACK_SIZE, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0)
    munmap(mem, ALTSTACK_SIZE);
  else
    own_altstack = mem;
  weft__stack_thread_init(); /* so that thread exit takes it down */
}

void weft__overflow_thread_exit(void) {
  if (!own_altstack)
    return;
  stack_t off = {.ss_flags = SS_DISABLE};
  if (sigaltstack(&off, NULL) == 0)
    munmap(own_altstack, ALTSTACK_SIZE);
  own_altstack = NULL;
  have_altstack = 0;
}
