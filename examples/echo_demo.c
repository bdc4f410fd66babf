/*
 * The demo's echo exchange: seed 000's echo server and a client, as two
 * tasks of one program. The server listens on a port the system picks on
 * 127.0.0.1 and answers each line with "GOT:" + the line; the client
 * connects, sends three lines, prints what comes back, and hangs up; the
 * server notices and the program ends (the loop has nothing left to do).
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <weft.h>

static void *client_handler(void *arg) {
  weft_stream *s = arg;
  char line[1024];
  ssize_t n;
  while ((n = weft_stream_readline(s, line, sizeof line)) > 0 ||
         n == -EMSGSIZE) {
    if (n > 0 &&
        (weft_stream_write(s, "GOT:", 4) < 0 ||
         weft_stream_write(s, line, (size_t)n) < 0 || weft_stream_flush(s) < 0))
      break;
  }
  weft_stream_close(s);
  printf("server: Client closed\n");
  return NULL;
}

/* Accepts one client (enough for the demo) and hands it to a task. */
static void *server_loop(void *arg) {
  int listener = (int)(intptr_t)arg;
  struct sockaddr_storage addr;
  socklen_t len = sizeof addr;
  int c = weft_accept(listener, (struct sockaddr *)&addr, &len);
  weft_close(listener);
  if (c < 0)
    return NULL;
  char name[128];
  printf("server: Got connection from %s\n",
         weft_addr_str((struct sockaddr *)&addr, name, sizeof name));
  weft_stream *s = weft_stream_new(c, 0);
  if (s)
    weft_go(client_handler, s);
  else
    weft_close(c);
  return NULL;
}

static int demo(void *unused) {
  (void)unused;
  int listener = weft_tcp_listen("127.0.0.1", 0, 5);
  if (listener < 0) {
    fprintf(stderr, "echo_demo: listen: %s\n", weft_strerror(listener));
    return 1;
  }
  int port = weft_sock_port(listener);
  if (weft_go(server_loop, (void *)(intptr_t)listener) < 0)
    return 1;

  int fd = weft_tcp_connect("127.0.0.1", port);
  if (fd < 0) {
    fprintf(stderr, "echo_demo: connect: %s\n", weft_strerror(fd));
    return 1;
  }
  weft_stream *s = weft_stream_new(fd, 0);
  if (!s)
    return 1;
  static const char *lines[] = {"hello\n", "weft is a loop\n", "bye\n"};
  int rc = 0;
  for (int i = 0; i < 3 && rc == 0; i++) {
    char reply[1024];
    printf("client: sends %s", lines[i]);
    if (weft_stream_write(s, lines[i], strlen(lines[i])) < 0 ||
        weft_stream_flush(s) < 0 ||
        weft_stream_readline(s, reply, sizeof reply) <= 0) {
      rc = 1;
      break;
    }
    printf("client: got   %s", reply);
    if (strncmp(reply, "GOT:", 4) != 0 || strcmp(reply + 4, lines[i]) != 0)
      rc = 1;
  }
  weft_stream_close(s);
  printf("client: closed\n");
  return rc;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int rc = weft_main(demo, NULL);
  if (rc != 0)
    fprintf(stderr, "echo_demo: the exchange failed\n");
  return rc != 0;
}
