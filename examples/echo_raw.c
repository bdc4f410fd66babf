/*
 * Seed 003's tcp_server: an accepting task, and for each client a task
 * that answers every chunk it receives (up to 10,000 bytes) with "Got:" +
 * the chunk, straight on the socket, with no buffering.
 *
 *   echo_raw [--host H] [--port N] [--clients N]
 *
 * It listens on H:N (default: every IPv4 address, port 30000), and, with
 * --clients N, stops once N clients have come and gone. Its output is the
 * seed's:
 *
 *   Connection from ('127.0.0.1', 51234)
 *   Connection closed
 *
 * (and on standard error, where it listens).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <weft.h>

#include "args.h"

static const char *host = "";
static int port = 30000, clients = 0, closed = 0, listener = -1;

static void *echo_handler(void *arg) {
  int sock = (int)(intptr_t)arg;
  char data[4 + 10000];
  memcpy(data, "Got:", 4);
  for (;;) {
    ssize_t n = weft_recv(sock, data + 4, 10000, 0);
    if (n <= 0)
      break;
    if (weft_write_all(sock, data, 4 + (size_t)n) != 4 + n)
      break;
  }
  printf("Connection closed\n");
  weft_close(sock);
  if (clients && ++closed == clients)
    weft_close(listener);
  return NULL;
}

static int tcp_server(void *unused) {
  (void)unused;
  listener = weft_tcp_listen(host, port, 0);
  if (listener < 0) {
    fprintf(stderr, "echo_raw: cannot listen on %s:%d: %s\n",
            *host ? host : "*", port, weft_strerror(listener));
    return 1;
  }
  fprintf(stderr, "echo_raw: listening on %s:%d\n", *host ? host : "*",
          weft_sock_port(listener));
  for (;;) {
    struct sockaddr_storage addr;
    socklen_t len = sizeof addr;
    int client = weft_accept(listener, (struct sockaddr *)&addr, &len);
    if (client < 0)
      return client == -EBADF && clients ? 0 : 1;
    char name[128];
    printf("Connection from %s\n",
           weft_addr_str((struct sockaddr *)&addr, name, sizeof name));
    if (weft_go(echo_handler, (void *)(intptr_t)client) < 0)
      weft_close(client);
  }
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (strcmp(argv[i], "--host") == 0 && i + 1 < argc)
      host = argv[++i];
    else if (strcmp(argv[i], "--port") == 0 && i + 1 < argc)
      port = (int)arg_long("echo_raw", "--port", argv[++i], 0, 65535);
    else if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
      clients = (int)arg_long("echo_raw", "--clients", argv[++i], 0, 1000000);
    else {
      fprintf(stderr, "usage: %s [--host H] [--port N] [--clients N]\n",
              argv[0]);
      return 2;
    }
  }
  setvbuf(stdout, NULL, _IOLBF, 0);
  return exit_status("echo_raw", weft_main(tcp_server, NULL));
}
