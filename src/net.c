/*
 * Layer 5: sockets made ready to use: TCP listeners and connections by
 * numeric address or host name (resolved with weft_getaddrinfo, on the
 * executor's pool), UDP, Unix stream sockets, and the printing of an
 * address as the seeds print it. Built only on the I/O calls (io.c), the
 * resolver (dns.c) and the socket calls of libc.
 */
#include "backend.h"

#include <arpa/inet.h>
#include <errno.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/un.h>
#include <unistd.h>

/* "[::1]", as URLs write an IPv6 address, is "::1"; copied to buf, of
 * room for an address and a zone ("fe80::1%eth0"). Returns NULL if host is
 * not bracketed, or does not fit. */
#define BRACKETED_MAX (INET6_ADDRSTRLEN + IF_NAMESIZE)

static const char *unbracket(const char *host, char *buf) {
  size_t n = host ? strlen(host) : 0;
  if (n < 2 || host[0] != '[' || host[n - 1] != ']' || n - 2 >= BRACKETED_MAX)
    return NULL;
  memcpy(buf, host + 1, n - 2);
  buf[n - 2] = '\0';
  return buf;
}

/* A numeric host and a port as a socket address. NULL or "" is every IPv4
 * address; an IPv6 address may be bracketed ("[::1]"). Returns 0, or
 * -EINVAL if host is not numeric. */
static int parse_addr(const char *host, int port, struct sockaddr_storage *ss,
                      socklen_t *len) {
  if (port < 0 || port > 65535)
    return -EINVAL;
  memset(ss, 0, sizeof *ss);
  struct sockaddr_in *in4 = (struct sockaddr_in *)ss;
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)ss;
  char v6[BRACKETED_MAX];
  const char *inner = unbracket(host, v6);
  if (inner) {
    if (inet_pton(AF_INET6, inner, &in6->sin6_addr) != 1)
      return -EINVAL;
    in6->sin6_family = AF_INET6;
  } else if (!host || !*host) {
    in4->sin_family = AF_INET;
    in4->sin_addr.s_addr = htonl(INADDR_ANY);
  } else if (inet_pton(AF_INET, host, &in4->sin_addr) == 1) {
    in4->sin_family = AF_INET;
  } else if (inet_pton(AF_INET6, host, &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
  } else {
    return -EINVAL;
  }
  if (ss->ss_family == AF_INET) {
    in4->sin_port = htons((uint16_t)port);
    *len = sizeof *in4;
  } else {
    in6->sin6_port = htons((uint16_t)port);
    *len = sizeof *in6;
  }
  return 0;
}

/* A non-blocking, close-on-exec socket the loop (if any) knows about. */
static int new_socket(int family, int type) {
  int fd = socket(family, type | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0)
    return -errno;
  int rc = weft__fd_adopt(fd, weft__sock_kind(family, type));
  if (rc < 0) {
    close(fd);
    return rc;
  }
  return fd;
}

/* bind (and listen, if backlog is not -1) or fail with fd closed. */
static int bind_listen(int fd, const struct sockaddr *addr, socklen_t len,
                       int backlog) {
  int rc = 0;
  if (bind(fd, addr, len) < 0 ||
      (backlog != -1 && listen(fd, backlog > 0 ? backlog : SOMAXCONN) < 0))
    rc = -errno;
  if (rc < 0) {
    weft_close(fd);
    return rc;
  }
  return fd;
}

/* A socket of `type` on host:port, set up by `ready` (bind, listen,
 * connect...; it closes the fd when it fails and returns the error). A
 * numeric host is used as it is; a name is resolved and each of its
 * addresses tried in turn until one is ready. Returns the fd or the last
 * address's error. */
typedef int (*ready_fn)(int fd, const struct sockaddr *addr, socklen_t len,
                        int arg);

/* The addresses of a name, held while `ready` may wait (a connect): a
 * loop freed meanwhile frees them. */
typedef struct {
  weft__held h;
  struct addrinfo *res;
} held_addrs;

static void drop_addrs(weft_loop *loop, weft__held *h) {
  (void)loop;
  freeaddrinfo(((held_addrs *)h)->res);
}

static int socket_on(const char *host, int port, int type, int passive,
                     ready_fn ready, int arg) {
  struct sockaddr_storage ss;
  socklen_t len;
  int hints_numeric = 0;
  int rc = parse_addr(host, port, &ss, &len);
  if (rc == 0) {
    int fd = new_socket(ss.ss_family, type);
    return fd < 0 ? fd : ready(fd, (struct sockaddr *)&ss, len, arg);
  }
  /* Brackets hold an IPv6 address, never a name to look up; one with a
   * zone ("[fe80::1%eth0]") goes to the resolver, which reads the zone. */
  char v6[BRACKETED_MAX];
  if (port < 0 || port > 65535)
    return -EINVAL;
  if (host[0] == '[') {
    host = unbracket(host, v6);
    if (!host || !strchr(host, '%'))
      return -EINVAL;
    hints_numeric = AI_NUMERICHOST;
  }
  char service[8];
  snprintf(service, sizeof service, "%d", port);
  struct addrinfo hints, *res;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = type;
  hints.ai_flags = AI_NUMERICSERV | hints_numeric | (passive ? AI_PASSIVE : 0);
  if ((rc = weft_getaddrinfo(host, service, &hints, &res)) < 0)
    return rc == -ENOENT && hints_numeric ? -EINVAL : rc;
  held_addrs held = {.res = res};
  weft__hold(&held.h, drop_addrs);
  rc = -ENOENT;
  for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
    int fd = new_socket(ai->ai_family, type);
    if (fd < 0) {
      rc = fd;
      continue; /* e.g. no IPv6 here: -EAFNOSUPPORT */
    }
    rc = ready(fd, ai->ai_addr, ai->ai_addrlen, arg);
    if (rc >= 0 || rc == -ECANCELED)
      break;
    /* -ETIMEDOUT is the caller's deadline, which ends the walk, or the
     * kernel's giving up on this address (its SYNs unanswered): then the
     * next address is tried, as after a refusal. A cancellation that came
     * meanwhile ends it too, and is what the call returns. (Only a
     * connect, which runs in a task, gives -ETIMEDOUT.) */
    int stop;
    if (rc == -ETIMEDOUT && (stop = weft__checkpoint()) < 0) {
      rc = stop;
      break;
    }
  }
  weft__unhold(&held.h);
  freeaddrinfo(res);
  return rc;
}

static int listen_ready(int fd, const struct sockaddr *addr, socklen_t len,
                        int backlog) {
  int one = 1;
  if (backlog != -1)
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  return bind_listen(fd, addr, len, backlog);
}

int weft_tcp_listen(const char *host, int port, int backlog) {
  return socket_on(host, port, SOCK_STREAM, 1, listen_ready,
                   backlog < 0 ? 0 : backlog);
}

/* Connects fd, a socket of ours: fd, or a negative errno (fd closed). A
 * loop freed while the connect waits closes fd. */
static int connect_own(int fd, const struct sockaddr *addr, socklen_t len) {
  weft__held_fd h;
  weft__hold_fd(&h, fd);
  int rc = weft_connect(fd, addr, len);
  weft__unhold(&h.h);
  if (rc < 0) {
    weft_close(fd);
    return rc;
  }
  return fd;
}

static int connect_ready(int fd, const struct sockaddr *addr, socklen_t len,
                         int unused) {
  (void)unused;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return connect_own(fd, addr, len);
}

int weft_tcp_connect(const char *host, int port) {
  /* Outside a task the connect could only fail: not after a lookup that
   * blocks the thread. */
  if (!host || !*host || !weft__running_task())
    return -EINVAL;
  return socket_on(host, port, SOCK_STREAM, 0, connect_ready, 0);
}

int weft_udp_bind(const char *host, int port) {
  return socket_on(host, port, SOCK_DGRAM, 1, listen_ready, -1);
}

/* path as a Unix socket address; -ENAMETOOLONG if it does not fit. */
static int unix_addr(const char *path, struct sockaddr_un *un, socklen_t *len) {
  if (!path || !*path)
    return -EINVAL;
  size_t n = strlen(path);
  if (n >= sizeof un->sun_path)
    return -ENAMETOOLONG;
  memset(un, 0, sizeof *un);
  un->sun_family = AF_UNIX;
  memcpy(un->sun_path, path, n + 1);
  *len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
  return 0;
}

/* A Unix stream socket and path's address, for listen and connect: the
 * socket, or a negative errno. */
static int unix_socket(const char *path, struct sockaddr_un *un,
                       socklen_t *len) {
  int rc = unix_addr(path, un, len);
  return rc < 0 ? rc : new_socket(AF_UNIX, SOCK_STREAM);
}

int weft_unix_listen(const char *path, int backlog) {
  struct sockaddr_un un;
  socklen_t len;
  int fd = unix_socket(path, &un, &len);
  if (fd < 0)
    return fd;
  return bind_listen(fd, (struct sockaddr *)&un, len,
                     backlog < 0 ? 0 : backlog);
}

int weft_unix_connect(const char *path) {
  struct sockaddr_un un;
  socklen_t len;
  int fd = unix_socket(path, &un, &len);
  return fd < 0 ? fd : connect_own(fd, (struct sockaddr *)&un, len);
}

int weft_sock_port(int fd) {
  struct sockaddr_storage ss;
  socklen_t len = sizeof ss;
  if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0)
    return -errno;
  if (ss.ss_family == AF_INET)
    return ntohs(((struct sockaddr_in *)&ss)->sin_port);
  if (ss.ss_family == AF_INET6)
    return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
  return -EAFNOSUPPORT;
}

char *weft_addr_str(const struct sockaddr *addr, char *buf, size_t len) {
  if (!buf || len == 0)
    return buf;
  char host[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (!addr) {
    snprintf(buf, len, "None");
  } else if (addr->sa_family == AF_INET) {
    const struct sockaddr_in *in4 = (const struct sockaddr_in *)addr;
    inet_ntop(AF_INET, &in4->sin_addr, host, sizeof host);
    port = ntohs(in4->sin_port);
    snprintf(buf, len, "('%s', %d)", host, port);
  } else if (addr->sa_family == AF_INET6) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)addr;
    inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof host);
    port = ntohs(in6->sin6_port);
    snprintf(buf, len, "('%s', %d, %u, %u)", host, port,
             (unsigned)ntohl(in6->sin6_flowinfo), (unsigned)in6->sin6_scope_id);
  } else if (addr->sa_family == AF_UNIX) {
    const struct sockaddr_un *un = (const struct sockaddr_un *)addr;
    snprintf(buf, len, "%.*s", (int)sizeof un->sun_path, un->sun_path);
  } else {
    snprintf(buf, len, "<family %d>", addr->sa_family);
  }
  return buf;
}
