/*
 * Files: 4 KiB random reads at queue depth 32 on a 256 MiB file, through
 * weft's public weft_file_read. QD tasks each loop weft_file_read(fd, buf,
 * 4096, a random 4 KiB-aligned offset), READS reads in all, from the
 * first spawn to the last join. On the epoll and poll backends each read
 * is a job on the executor's pool; on io_uring, a request on the ring. The
 * backend is the one weft_loop_backend(weft_loop_current()) reports
 * (WEFT_BACKEND chooses it) and is part of every figure's name:
 *
 *   files_<backend>[_uncached]_reads_per_s      reads per second (wall)
 *   files_<backend>[_uncached]_us_per_read      wall µs per read (the
 *                                               inverse: QD in flight)
 *   files_<backend>[_uncached]_cpu_us_per_read  process CPU µs per read
 *                                               (every thread: the pool's
 *                                               workers, io_uring's io-wq
 *                                               workers included)
 *
 *   bench_files [-u] [-n reads] [-q depth] [-f path]
 *     -u        uncached: the file is opened with O_DIRECT, so every read
 *               goes to the storage, not the page cache. Where the
 *               filesystem refuses O_DIRECT (tmpfs) it says so on stderr
 *               and prints nothing: there is no uncached figure to give.
 *               If weft_file_read itself fails with O_DIRECT (an unaligned
 *               buffer of its own), the same.
 *     -n READS  reads in all (default 200000; a multiple of the depth)
 *     -q DEPTH  tasks, each with one read in flight (default 32)
 *     -f PATH   the file (default: $TMPDIR, else /var/tmp,
 *               /weft-bench-files-256M.dat)
 *
 * The file is written once (a pattern, then fsync) and reused by later
 * runs as long as it has the right size; delete it to have it written
 * again. Cached (the default) means the page cache: the whole file is read
 * once, plainly, before the timed reads, so that all of them hit it. Every
 * read is checked (one compare: the first word of each block is its
 * number). One untimed read comes first, so that a combination that
 * cannot work (O_DIRECT through a buffer weft did not align) says so
 * instead of timing failures.
 *
 * Nothing but the figures goes to stdout; notes go to stderr.
 */
#include "weft.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLOCK 4096
#define FILE_SIZE (256LL << 20)
#define NBLOCKS (FILE_SIZE / BLOCK)
#define MAX_DEPTH 1024

typedef struct opts {
  int uncached;
  long reads;
  int depth;
  const char *path;
} opts;

static opts o = {0, 200000, 32, NULL};

static int64_t wall_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static int64_t cpu_ns(void) { /* the whole process: every thread */
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Block b of the file: its first 8 bytes are b, the rest a byte pattern. */
static void fill_block(unsigned char *p, uint64_t b) {
  memcpy(p, &b, sizeof b);
  for (int i = (int)sizeof b; i < BLOCK; i++)
    p[i] = (unsigned char)(b * 31 + (uint64_t)i);
}

/* Makes sure `path` is the 256 MiB file of blocks: reused if it exists
 * with that size, else written (under another name, fsynced, renamed).
 * Returns 0, or -1 after saying why. */
static int ensure_file(const char *path) {
  struct stat st;
  if (stat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == FILE_SIZE)
    return 0;
  char tmp[4096];
  snprintf(tmp, sizeof tmp, "%s.%ld.tmp", path, (long)getpid());
  fprintf(stderr, "files: writing %s (256 MiB, once)\n", path);
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    fprintf(stderr, "files: cannot create %s: %s\n", tmp, strerror(errno));
    return -1;
  }
  enum { CHUNK = 256 }; /* blocks per write: 1 MiB */
  unsigned char *buf = malloc((size_t)CHUNK * BLOCK);
  if (!buf) {
    close(fd);
    unlink(tmp);
    return -1;
  }
  for (int64_t b = 0; b < NBLOCKS; b += CHUNK) {
    for (int k = 0; k < CHUNK; k++)
      fill_block(buf + (size_t)k * BLOCK, (uint64_t)(b + k));
    size_t left = (size_t)CHUNK * BLOCK, done = 0;
    while (left > 0) {
      ssize_t n = write(fd, buf + done, left);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0) {
        fprintf(stderr, "files: writing %s: %s\n", tmp,
                n < 0 ? strerror(errno) : "short write");
        free(buf);
        close(fd);
        unlink(tmp);
        return -1;
      }
      done += (size_t)n;
      left -= (size_t)n;
    }
  }
  free(buf);
  if (fsync(fd) < 0 || close(fd) < 0 || rename(tmp, path) < 0) {
    fprintf(stderr, "files: finishing %s: %s\n", path, strerror(errno));
    unlink(tmp);
    return -1;
  }
  return 0;
}

/* Reads the whole file once with plain reads: afterwards it is in the
 * page cache (there is memory enough for 256 MiB on the machines this
 * runs on; if not, the cached figures include misses). */
static void warm_cache(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return;
  static char buf[1 << 20];
  while (read(fd, buf, sizeof buf) > 0) {
  }
  close(fd);
}

/* Whether the filesystem takes O_DIRECT for `path`: a plain aligned read
 * of its first block, outside weft. */
static int direct_ok(const char *path) {
  int fd = open(path, O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0)
    return 0;
  void *p;
  int ok = 0;
  if (posix_memalign(&p, BLOCK, BLOCK) == 0) {
    ok = pread(fd, p, BLOCK, 0) == BLOCK;
    free(p);
  }
  close(fd);
  return ok;
}

/* ---- the reads ----------------------------------------------------------- */

typedef struct reader {
  int fd;
  long reads;
  uint64_t rng;
  ssize_t err; /* the first failure, or 0 */
  long bad;    /* blocks whose data was not what was written */
} reader;

static uint64_t next_rand(uint64_t *s) { /* xorshift64* */
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1DULL;
}

static void *read_loop(void *arg) {
  reader *r = arg;
  /* Aligned for O_DIRECT, where the backend reads into it directly. */
  unsigned char *buf;
  if (posix_memalign((void **)&buf, BLOCK, BLOCK) != 0) {
    r->err = -ENOMEM;
    return NULL;
  }
  for (long i = 0; i < r->reads; i++) {
    uint64_t b = next_rand(&r->rng) % (uint64_t)NBLOCKS;
    ssize_t n = weft_file_read(r->fd, buf, BLOCK, (off_t)(b * BLOCK));
    if (n != BLOCK) {
      r->err = n < 0 ? n : -EIO;
      break;
    }
    uint64_t got;
    memcpy(&got, buf, sizeof got);
    if (got != b)
      r->bad++;
  }
  free(buf);
  return NULL;
}

static int bench_main(void *unused) {
  (void)unused;
  const char *backend = weft_loop_backend(weft_loop_current());
  char prefix[128];
  snprintf(prefix, sizeof prefix, "files_%s%s", backend,
           o.uncached ? "_uncached" : "");

  int flags = O_RDONLY | (o.uncached ? O_DIRECT : 0);
  int fd = weft_file_open(o.path, flags, 0);
  if (fd < 0) {
    fprintf(stderr, "files: weft_file_open %s: %s\n", o.path,
            weft_strerror(fd));
    return 1;
  }
  static reader rs[MAX_DEPTH];
  weft_task *ts[MAX_DEPTH];
  long per = o.reads / o.depth;
  for (int i = 0; i < o.depth; i++)
    rs[i] = (reader){fd, per, 0x9E3779B97F4A7C15ULL * (uint64_t)(i + 1), 0, 0};

  /* One read first, untimed: it says whether this combination works at
   * all (O_DIRECT through a buffer weft did not align gives -EINVAL). */
  reader probe = {fd, 1, 12345, 0, 0};
  read_loop(&probe);
  if (probe.err < 0) {
    fprintf(stderr, "files: %s: weft_file_read%s fails: %s%s\n", prefix,
            o.uncached ? " with O_DIRECT" : "", weft_strerror((int)probe.err),
            o.uncached && probe.err == -EINVAL
                ? " (the buffer the read goes through is not aligned as "
                  "O_DIRECT wants): no uncached figures for this backend"
                : "");
    weft_file_close(fd);
    return o.uncached && probe.err == -EINVAL ? 0 : 1;
  }

  int64_t c0 = cpu_ns(), t0 = wall_ns();
  for (int i = 0; i < o.depth; i++) {
    ts[i] = weft_spawn(read_loop, &rs[i]);
    if (!ts[i]) {
      fprintf(stderr, "files: weft_spawn failed\n");
      return 1;
    }
  }
  for (int i = 0; i < o.depth; i++)
    weft_join(ts[i], NULL);
  int64_t t1 = wall_ns(), c1 = cpu_ns();
  weft_file_close(fd);

  long done = 0, bad = 0;
  for (int i = 0; i < o.depth; i++) {
    if (rs[i].err < 0) {
      fprintf(stderr, "files: %s: a read failed: %s\n", prefix,
              weft_strerror((int)rs[i].err));
      return 1;
    }
    done += rs[i].reads;
    bad += rs[i].bad;
  }
  if (bad) {
    fprintf(stderr, "files: %s: %ld reads brought the wrong data\n", prefix,
            bad);
    return 1;
  }
  double secs = (double)(t1 - t0) / 1e9;
  printf("%s_reads_per_s %.0f reads/s\n", prefix, (double)done / secs);
  printf("%s_us_per_read %.3f us\n", prefix, (double)(t1 - t0) / 1e3 / done);
  printf("%s_cpu_us_per_read %.3f us\n", prefix,
         (double)(c1 - c0) / 1e3 / done);
  fflush(stdout);
  return 0;
}

static void usage(int status) {
  fprintf(status ? stderr : stdout,
          "usage: bench_files [-u] [-n reads] [-q depth] [-f path]\n");
  exit(status);
}

int main(int argc, char **argv) {
  int c;
  char *end;
  if (argc > 1 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
    usage(0);
  opterr = 0; /* one usage line says it all */
  while ((c = getopt(argc, argv, "un:q:f:")) != -1) {
    switch (c) {
    case 'u': o.uncached = 1; break;
    case 'n':
      o.reads = strtol(optarg, &end, 10);
      if (*end || o.reads < 1)
        usage(2);
      break;
    case 'q':
      o.depth = (int)strtol(optarg, &end, 10);
      if (*end || o.depth < 1 || o.depth > MAX_DEPTH)
        usage(2);
      break;
    case 'f': o.path = optarg; break;
    default: usage(2);
    }
  }
  if (optind != argc)
    usage(2);
  if (o.reads < o.depth)
    o.reads = o.depth;
  static char defpath[4096];
  if (!o.path) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir)
      dir = "/var/tmp";
    snprintf(defpath, sizeof defpath, "%s/weft-bench-files-256M.dat", dir);
    o.path = defpath;
  }
  if (ensure_file(o.path) < 0)
    return 1;
  if (o.uncached) {
    if (!direct_ok(o.path)) {
      fprintf(stderr,
              "files: the filesystem of %s does not allow O_DIRECT (tmpfs?): "
              "no uncached figures; set TMPDIR to a directory on a disk\n",
              o.path);
      return 0;
    }
  } else {
    warm_cache(o.path);
  }
  int rc = weft_main(bench_main, NULL);
  if (rc < 0) {
    fprintf(stderr, "files: weft_main: %s\n", weft_strerror(rc));
    return 1;
  }
  return rc;
}
