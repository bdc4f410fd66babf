/*
 * The tests' assertions: each prints both values and file:line, and a
 * failed one ends the test with exit status 1. Exit 77 means "skipped here".
 *
 * Also: what the tests need to know about the build they run in (ASan,
 * Valgrind), the process's resident memory, and a way to run a piece of a
 * test in a child process and look at how it died and what it printed.
 */
#ifndef WEFT_CHECK_H
#define WEFT_CHECK_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#define CHECK_HAVE_VALGRIND_H 1
#endif
#endif
#ifndef CHECK_HAVE_VALGRIND_H
#define RUNNING_ON_VALGRIND 0
#endif

#if defined(__SANITIZE_ADDRESS__)
#define CHECK_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CHECK_ASAN 1
#endif
#endif
#ifndef CHECK_ASAN
#define CHECK_ASAN 0
#endif

#if defined(__SANITIZE_THREAD__)
#define CHECK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CHECK_TSAN 1
#endif
#endif
#ifndef CHECK_TSAN
#define CHECK_TSAN 0
#endif

#define CHECK(cond)                                                            \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* Integer comparisons: CHECK_EQ(a, b), CHECK_NE, CHECK_LT, CHECK_LE,
 * CHECK_GT, CHECK_GE. Both sides are converted to long long. */
#define CHECK_CMP_(a, op, b)                                                   \
  do {                                                                         \
    long long va_ = (long long)(a), vb_ = (long long)(b);                      \
    if (!(va_ op vb_)) {                                                       \
      fprintf(stderr, "%s:%d: %s %s %s failed: %lld vs %lld\n", __FILE__,      \
              __LINE__, #a, #op, #b, va_, vb_);                                \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)
#define CHECK_EQ(a, b) CHECK_CMP_(a, ==, b)
#define CHECK_NE(a, b) CHECK_CMP_(a, !=, b)
#define CHECK_LT(a, b) CHECK_CMP_(a, <, b)
#define CHECK_LE(a, b) CHECK_CMP_(a, <=, b)
#define CHECK_GT(a, b) CHECK_CMP_(a, >, b)
#define CHECK_GE(a, b) CHECK_CMP_(a, >=, b)

#define CHECK_PTR_EQ(a, b)                                                     \
  do {                                                                         \
    const void *va_ = (const void *)(a), *vb_ = (const void *)(b);             \
    if (va_ != vb_) {                                                          \
      fprintf(stderr, "%s:%d: %s == %s failed: %p != %p\n", __FILE__,          \
              __LINE__, #a, #b, va_, vb_);                                     \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_PTR_NE(a, b)                                                     \
  do {                                                                         \
    const void *va_ = (const void *)(a), *vb_ = (const void *)(b);             \
    if (va_ == vb_) {                                                          \
      fprintf(stderr, "%s:%d: %s != %s failed: both %p\n", __FILE__, __LINE__, \
              #a, #b, va_);                                                    \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define CHECK_STR_EQ(a, b)                                                     \
  do {                                                                         \
    const char *va_ = (a), *vb_ = (b);                                         \
    if (!va_ || !vb_ || strcmp(va_, vb_) != 0) {                               \
      fprintf(stderr, "%s:%d: %s == %s failed:\n  \"%s\"\n  \"%s\"\n",         \
              __FILE__, __LINE__, #a, #b, va_ ? va_ : "(null)",                \
              vb_ ? vb_ : "(null)");                                           \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* `hay` contains `needle` (CHECK_CONTAINS) or does not (CHECK_NOT_CONTAINS). */
#define CHECK_CONTAINS(hay, needle)                                            \
  do {                                                                         \
    const char *vh_ = (hay), *vn_ = (needle);                                  \
    if (!vh_ || !vn_ || !strstr(vh_, vn_)) {                                   \
      fprintf(stderr, "%s:%d: %s contains %s failed:\n  \"%s\"\n  \"%s\"\n",   \
              __FILE__, __LINE__, #hay, #needle, vh_ ? vh_ : "(null)",         \
              vn_ ? vn_ : "(null)");                                           \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)
#define CHECK_NOT_CONTAINS(hay, needle)                                        \
  do {                                                                         \
    const char *vh_ = (hay), *vn_ = (needle);                                  \
    if (!vh_ || !vn_ || strstr(vh_, vn_)) {                                    \
      fprintf(stderr, "%s:%d: %s lacks %s failed:\n  \"%s\"\n  \"%s\"\n",      \
              __FILE__, __LINE__, #hay, #needle, vh_ ? vh_ : "(null)",         \
              vn_ ? vn_ : "(null)");                                           \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

#define SKIP(why)                                                              \
  do {                                                                         \
    printf("skipped: %s\n", why);                                              \
    exit(77);                                                                  \
  } while (0)

/* Open file descriptors of this process (entries of /proc/self/fd, not
 * counting the one that reads it). A test takes it at the start and checks
 * it again at the end: every fd it made must be closed. */
#include <dirent.h>
/* The case under way: if it hangs, the alarm check_case armed names it
 * ("test_x: timed out in case: name") and the program exits 1. */
__attribute__((unused)) static const char *check_case_name = "";

__attribute__((unused)) static void check_on_alarm_(int sig) {
  (void)sig;
  static const char msg[] = ": timed out in case: ";
  extern char *program_invocation_short_name;
  const char *prog = program_invocation_short_name;
  ssize_t n = write(2, prog, strlen(prog));
  n = write(2, msg, sizeof msg - 1);
  n = write(2, check_case_name, strlen(check_case_name));
  n = write(2, "\n", 1);
  (void)n;
  _exit(1);
}

static inline void check_case(const char *name, unsigned seconds) {
  check_case_name = name;
  signal(SIGALRM, check_on_alarm_);
  alarm(seconds);
}

/* WEFT_SEED is set: tasks ready at the same moment run in a shuffled
 * order, so a check of the FIFO order itself does not apply. */
static inline int check_seeded(void) {
  const char *s = getenv("WEFT_SEED");
  return s && *s;
}

static inline int check_fd_count(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)))
    if (e->d_name[0] != '.')
      n++;
  closedir(d);
  return n - 1;
}

/* Lists the open fds and what each is, on stderr: for a test whose fd
 * count came out wrong, before it fails. */
static inline void check_fd_list(void) {
  DIR *d = opendir("/proc/self/fd");
  if (!d)
    return;
  struct dirent *e;
  while ((e = readdir(d))) {
    char path[300], target[256];
    if (e->d_name[0] == '.')
      continue;
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    ssize_t n = readlink(path, target, sizeof target - 1);
    target[n > 0 ? n : 0] = '\0';
    fprintf(stderr, "  fd %s -> %s\n", e->d_name, target);
  }
  closedir(d);
}

/* Process CPU time (user + system) in ns. */
#include <time.h>
static inline int64_t check_cpu_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Resident memory of this process, in bytes (from /proc/self/statm). */
static inline size_t check_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long size = 0, res = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &size, &res) != 2)
      res = 0;
    fclose(f);
  }
  return (size_t)res * (size_t)sysconf(_SC_PAGESIZE);
}

/* Lines in /proc/self/maps: one per mapping. */
static inline size_t check_map_count(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  size_t n = 0;
  int c;
  if (!f)
    return 0;
  while ((c = getc(f)) != EOF)
    n += c == '\n';
  fclose(f);
  return n;
}

/* Whether `addr` lies in any mapping of this process (/proc/self/maps). */
static inline int check_is_mapped(const void *addr) {
  FILE *f = fopen("/proc/self/maps", "r");
  char line[512];
  int found = 0;
  if (!f)
    return -1;
  while (!found && fgets(line, sizeof line, f)) {
    unsigned long lo, hi;
    if (sscanf(line, "%lx-%lx", &lo, &hi) == 2 && (uintptr_t)addr >= lo &&
        (uintptr_t)addr < hi)
      found = 1;
  }
  fclose(f);
  return found;
}

/* ---- running part of a test in a child process ------------------------
 * check_child_run(fn, arg, &res, timeout) forks; the child runs fn(arg)
 * with its stderr going into a pipe, and _exit(0)s if fn returns. The
 * parent collects the child's stderr (res.err, NUL-terminated, truncated
 * to its size), anything the child wrote to check_child_fd (res.data) and
 * how it ended (res.status, as waitpid gives it). An alarm of `timeout`
 * seconds bounds the child: a hang shows as SIGALRM. */
typedef struct check_child {
  int status;      /* from waitpid */
  char err[65536]; /* the child's stderr */
  char data[4096]; /* what it wrote to check_child_fd */
} check_child;

/* In the child: where to write data for the parent (res.data). */
static int check_child_fd = -1;

static inline size_t check_drain_(int fd, char *buf, size_t cap) {
  size_t len = 0;
  for (;;) {
    char tmp[4096];
    ssize_t n = read(fd, tmp, sizeof tmp);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      break;
    size_t room = cap - 1 - len, take = (size_t)n < room ? (size_t)n : room;
    memcpy(buf + len, tmp, take);
    len += take;
  }
  buf[len] = '\0';
  return len;
}

static inline void check_child_run(void (*fn)(void *), void *arg,
                                   check_child *res, unsigned timeout) {
  int errp[2], datap[2];
  CHECK(pipe(errp) == 0);
  CHECK(pipe(datap) == 0);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    close(errp[0]);
    close(datap[0]);
    dup2(errp[1], STDERR_FILENO);
    close(errp[1]);
    check_child_fd = datap[1];
    alarm(timeout);
    fn(arg);
    _exit(0);
  }
  close(errp[1]);
  close(datap[1]);
  check_drain_(errp[0], res->err, sizeof res->err);
  close(errp[0]);
  check_drain_(datap[0], res->data, sizeof res->data);
  close(datap[0]);
  CHECK(waitpid(pid, &res->status, 0) == pid);
}

/* How the child ended, for messages: "exit 0", "signal 11". */
static inline const char *check_status_str(int status) {
  static char buf[64];
  if (WIFEXITED(status))
    snprintf(buf, sizeof buf, "exit %d", WEXITSTATUS(status));
  else if (WIFSIGNALED(status))
    snprintf(buf, sizeof buf, "signal %d (%s)", WTERMSIG(status),
             strsignal(WTERMSIG(status)));
  else
    snprintf(buf, sizeof buf, "status 0x%x", status);
  return buf;
}

/* The child was killed by signal `sig`. */
#define CHECK_KILLED_BY(res, sig)                                              \
  do {                                                                         \
    int st_ = (res).status;                                                    \
    if (!WIFSIGNALED(st_) || WTERMSIG(st_) != (sig)) {                         \
      fprintf(stderr,                                                          \
              "%s:%d: child should die of signal %d (%s), but: %s\n"           \
              "child's stderr:\n%s\n",                                         \
              __FILE__, __LINE__, (sig), strsignal(sig),                       \
              check_status_str(st_), (res).err);                               \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* The child exited with status `code`. */
#define CHECK_EXITED(res, code)                                                \
  do {                                                                         \
    int st_ = (res).status;                                                    \
    if (!WIFEXITED(st_) || WEXITSTATUS(st_) != (code)) {                       \
      fprintf(stderr,                                                          \
              "%s:%d: child should exit %d, but: %s\nchild's stderr:\n%s\n",   \
              __FILE__, __LINE__, (code), check_status_str(st_), (res).err);   \
      exit(1);                                                                 \
    }                                                                          \
  } while (0)

/* ---- subtests that must not stop the others --------------------------
 * CHECK_SUBTEST(fn) runs fn() in a child process, so that a failing check
 * (typically a regression test for a known bug) is reported and counted
 * while the rest of the program goes on; check_subtest_failures says how
 * many failed. The child's output goes where the parent's does. */
static int check_subtest_failures;

static inline void check_subtest_(void (*fn)(void), const char *name) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  CHECK(pid >= 0);
  if (pid == 0) {
    alarm(120);
    fn();
    fflush(stdout);
    _exit(0);
  }
  int status;
  CHECK(waitpid(pid, &status, 0) == pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "FAILED: %s (%s)\n", name, check_status_str(status));
    check_subtest_failures++;
  }
}
#define CHECK_SUBTEST(fn) check_subtest_(fn, #fn)

/* What weft_dump prints now, in a string the caller frees (for the tests
 * that include weft.h before this file). Not inlined: GCC 12 then takes
 * the string for a pointer into this frame (-Wdangling-pointer, a false
 * positive of the TSan build's optimisation). */
#ifdef WEFT_H
static __attribute__((noinline, unused)) char *check_dump(void) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  CHECK(f != NULL);
  weft_dump(f);
  fclose(f);
  return buf;
}
#endif

#endif
