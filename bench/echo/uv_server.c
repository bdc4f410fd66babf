/*
 * The echo benchmark's libuv peer.
 *
 *   echo_server_uv PORT     listens on 127.0.0.1:PORT until killed
 *
 * Each connection owns one 64 KiB buffer, which libuv reads into. What
 * arrives is written back with uv_try_write, straight from the read
 * callback, which is what a careful libuv server does on the fast path; if
 * the socket takes only part of it, the rest goes through uv_write and
 * reading stops until that write completes (the buffer is busy until then).
 * Accepted sockets get TCP_NODELAY, as in every server of bench/echo.
 */
#include <stdio.h>
#include <stdlib.h>
#include <uv.h>

#define BUFSIZE 65536

typedef struct conn {
  uv_tcp_t tcp;     /* first: the handle's address is the conn's */
  uv_write_t write; /* the one write in flight after a short try_write */
  char buf[BUFSIZE];
} conn;

static uv_loop_t *loop;

static void on_close(uv_handle_t *h) { free(h); }

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf) {
  conn *c = (conn *)h;
  *buf = uv_buf_init(c->buf, BUFSIZE);
  (void)suggested;
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);

static void on_written(uv_write_t *req, int status) {
  conn *c = req->data;
  if (uv_is_closing((uv_handle_t *)&c->tcp))
    return;
  if (status < 0 || uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read))
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

static void on_read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf) {
  conn *c = (conn *)s;
  if (n < 0) { /* UV_EOF or an error */
    uv_close((uv_handle_t *)s, on_close);
    return;
  }
  if (n == 0) /* nothing this time (EAGAIN) */
    return;
  uv_buf_t out = uv_buf_init(buf->base, (unsigned)n);
  int sent = uv_try_write(s, &out, 1);
  if (sent == UV_EAGAIN)
    sent = 0;
  if (sent < 0) {
    uv_close((uv_handle_t *)s, on_close);
    return;
  }
  if (sent == n)
    return;
  out = uv_buf_init(buf->base + sent, (unsigned)(n - sent));
  uv_read_stop(s);
  c->write.data = c;
  if (uv_write(&c->write, s, &out, 1, on_written) < 0)
    uv_close((uv_handle_t *)s, on_close);
}

static void on_connection(uv_stream_t *server, int status) {
  if (status < 0)
    return;
  conn *c = malloc(sizeof *c);
  if (!c)
    return;
  uv_tcp_init(loop, &c->tcp);
  if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
    uv_close((uv_handle_t *)&c->tcp, on_close);
    return;
  }
  uv_tcp_nodelay(&c->tcp, 1);
  if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) < 0)
    uv_close((uv_handle_t *)&c->tcp, on_close);
}

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: echo_server_uv PORT\n");
    return 2;
  }
  loop = uv_default_loop();
  uv_tcp_t server;
  struct sockaddr_in addr;
  uv_tcp_init(loop, &server);
  uv_ip4_addr("127.0.0.1", atoi(argv[1]), &addr);
  int rc = uv_tcp_bind(&server, (const struct sockaddr *)&addr, 0);
  if (rc == 0)
    rc = uv_listen((uv_stream_t *)&server, SOMAXCONN, on_connection);
  if (rc < 0) {
    fprintf(stderr, "echo_server_uv: listen: %s\n", uv_strerror(rc));
    return 1;
  }
  return uv_run(loop, UV_RUN_DEFAULT);
}
