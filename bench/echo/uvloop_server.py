#!/usr/bin/env python3
"""The echo benchmark's uvloop peer: an asyncio.Protocol on uvloop.

    uvloop_server.py PORT    listens on 127.0.0.1:PORT until killed

data_received writes back what arrived, at once: the fastest way Python's
event-loop API offers. If the transport's buffer fills up (the client reads
slowly), reading pauses until it drains. TCP_NODELAY is set on each
connection, as in every server of bench/echo.
"""
import asyncio
import socket
import sys

import uvloop


class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data):
        self.transport.write(data)

    def pause_writing(self):
        self.transport.pause_reading()

    def resume_writing(self):
        self.transport.resume_reading()


def main(port):
    loop = uvloop.new_event_loop()
    asyncio.set_event_loop(loop)
    server = loop.run_until_complete(
        loop.create_server(Echo, "127.0.0.1", port))
    try:
        loop.run_forever()
    finally:
        server.close()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: uvloop_server.py PORT")
    main(int(sys.argv[1]))
