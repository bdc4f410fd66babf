/*
 * Seed 000's EchoServer: one task accepts, and each client gets a task of
 * its own that reads lines and answers each with "GOT:" + the line. In the
 * seed, readline is a sub-generator reading one byte per recv; here it is
 * the stream's readline, which reads as much as has arrived, and the
 * answer goes out in one write.
 *
 *   echo_server [--host H] [--port N] [--clients N]
 *
 * It listens on H:N (default: every IPv4 address, port 16000) and serves
 * until killed, or, with --clients N, until N clients have come and gone.
 * Its output is the seed's:
 *
 *   Got connection from ('127.0.0.1', 51234)
 *   Client closed
 *
 * (on standard error, one line says where it listens, which tells the
 * port when --port 0 lets the system choose). A line longer than 64 KiB is
 * skipped: readline reports it (-EMSGSIZE) and the stream goes on.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <weft.h>

#define LINE_MAX_LEN 65536

static const char *host = "";
static int port = 16000, clients = 0, closed = 0, listener = -1;

static void *client_handler(void *arg) {
  weft_stream *s = arg;
  char line[LINE_MAX_LEN + 1]; /* on the task's stack: only what a line
                                  touches costs memory */
  for (;;) {
    ssize_t n = weft_stream_readline(s, line, sizeof line);
    if (n == -EMSGSIZE)
      continue;
    if (n <= 0) /* end of file, or the client is gone (-ECONNRESET...) */
      break;
    if (weft_stream_write(s, "GOT:", 4) < 0 ||
        weft_stream_write(s, line, (size_t)n) < 0 || weft_stream_flush(s) < 0)
      break;
  }
  weft_stream_close(s);
  printf("Client closed\n");
  if (clients && ++closed == clients)
    weft_close(listener); /* wakes the accepting task: it returns */
  return NULL;
}

static int server_loop(void *unused) {
  (void)unused;
  listener = weft_tcp_listen(host, port, 5);
  if (listener < 0) {
    fprintf(stderr, "echo_server: cannot listen on %s:%d: %s\n",
            *host ? host : "*", port, weft_strerror(listener));
    return 1;
  }
  fprintf(stderr, "echo_server: listening on %s:%d\n", *host ? host : "*",
          weft_sock_port(listener));
  for (;;) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    int c = weft_accept(listener, (struct sockaddr *)&addr, &len);
    if (c < 0)
      return c == -EBADF && clients ? 0 : 1;
    char name[128];
    printf("Got connection from %s\n",
           weft_addr_str((struct sockaddr *)&addr, name, sizeof name));
    weft_stream *s = weft_stream_new(c, 0);
    if (!s || weft_go(client_handler, s) < 0) {
      fprintf(stderr, "echo_server: out of memory for a client\n");
      if (s)
        weft_stream_close(s);
      else
        weft_close(c);
    }
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--host") == 0 && i + 1 < argc)
      host = argv[++i];
    else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
      port = atoi(argv[++i]);
    else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
      clients = atoi(argv[++i]);
    else {
      fprintf(stderr, "usage: %s [--host H] [--port N] [--clients N]\n",
              argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return weft_main(server_loop, NULL);
}
