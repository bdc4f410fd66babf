#!/usr/bin/env python3
"""The echo benchmark's asyncio peer: asyncio streams on the default loop.

    asyncio_server.py PORT    listens on 127.0.0.1:PORT until killed

One coroutine per connection reads up to 64 KiB with reader.read and writes
it back with writer.write and writer.drain. asyncio sets TCP_NODELAY on its
TCP transports itself, as the other servers of bench/echo do by hand.
"""
import asyncio
import sys


async def echo(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.close()


async def main(port):
    server = await asyncio.start_server(echo, "127.0.0.1", port)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: asyncio_server.py PORT")
    asyncio.run(main(int(sys.argv[1])))
