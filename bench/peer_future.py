#!/usr/bin/env python3
"""Peer of bench/future.c: the same operations with Python's asyncio, on
asyncio's own event loop or on uvloop's.

    python3 bench/peer_future.py asyncio|uvloop [-r rounds] [-s scale] [-v]

Prints "name value unit" lines, as bench.h does, each the median of the
timed rounds (default 7) after one warm-up round that is thrown away. The
clock is time.process_time_ns: CPU time of the process (user and system),
as bench.h's programs use CPU time and not wall time. Each figure is ns per
operation; NAME below is prefixed with "asyncio_" or "uvloop_":

  NAME_future_set_await    f = loop.create_future(); f.set_result(x);
                           await f (done: returns without suspending, as
                           weft_await of a done future)
  NAME_future_await_wake   a round trip between two tasks through futures:
                           the client makes a reply future, completes the
                           server's request future with it and awaits the
                           reply; the server wakes, completes the reply and
                           awaits its next request. Per round trip: two
                           futures made, two set_result, two awaits that
                           really suspend, two task wake-ups.
  NAME_cancel_recv         a task is created on loop.sock_recv(a, 1) on a
                           non-blocking socketpair where nothing is ever
                           sent; `await asyncio.sleep(0)` lets it start and
                           block (the reader is registered); then
                           task.cancel() and `await task` (CancelledError
                           caught). Per cancellation, creation included.
  NAME_recv_wake           the same, but the blocked task is woken by one
                           byte sent on the other end (a plain send) and
                           then awaited: the data path, for comparison.
  NAME_cancel_recv_deliver the cancel alone: BATCH (64) tasks, each blocked
                           in sock_recv on a socketpair of its own, are
                           created and started outside the clock; then
                           task.cancel() + `await task` for each, one after
                           the other, is timed.
  NAME_scope_deadline      `async with asyncio.timeout(1): pass` (Python
                           3.11+; skipped, with a note, before). Entering
                           arms a loop timer (call_at), leaving cancels it.
  NAME_scope_deadline_yield the same with one `await asyncio.sleep(0)` inside
  NAME_yield               `await asyncio.sleep(0)` by a task alone on the
                           loop: one turn of the loop (asyncio polls the
                           selector with a zero timeout on each turn).

-s multiplies every operation count (default 1); the counts are set so that
a round takes roughly 50-100 ms on the 2-CPU VM this was written on.
"""

import argparse
import asyncio
import socket
import sys
import time

# Operations per round, per figure (times the -s scale).
COUNTS = {
    "future_set_await": 200_000,
    "future_await_wake": 12_000,
    "cancel_recv": 2_500,
    "recv_wake": 2_500,
    "cancel_recv_deliver": 5_000,
    "scope_deadline": 15_000,
    "scope_deadline_yield": 8_000,
    "yield": 20_000,
}

now = time.process_time_ns


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


# ---- the operations: each coroutine runs n operations, returns ns/op ----


async def future_set_await(n):
    loop = asyncio.get_running_loop()
    t0 = now()
    for i in range(n):
        f = loop.create_future()
        f.set_result(i)
        v = await f
    t1 = now()
    assert v == n - 1
    return (t1 - t0) / n


async def future_await_wake(n):
    loop = asyncio.get_running_loop()
    slot = [None]  # the server's pending request future

    async def server():
        while True:
            req = loop.create_future()
            slot[0] = req
            reply = await req
            if reply is None:
                return
            reply.set_result(1)

    srv = loop.create_task(server())
    await asyncio.sleep(0)  # the server makes its first request future
    t0 = now()
    for _ in range(n):
        reply = loop.create_future()
        slot[0].set_result(reply)
        await reply
    t1 = now()
    slot[0].set_result(None)
    await srv
    return (t1 - t0) / n


def _pair():
    a, b = socket.socketpair()
    a.setblocking(False)
    b.setblocking(False)
    return a, b


async def cancel_recv(n):
    loop = asyncio.get_running_loop()
    a, b = _pair()
    try:
        t0 = now()
        for _ in range(n):
            t = loop.create_task(loop.sock_recv(a, 1))
            await asyncio.sleep(0)  # t runs and blocks in sock_recv
            t.cancel()
            try:
                await t
            except asyncio.CancelledError:
                pass
            else:
                raise SystemExit("peer_future: sock_recv was not cancelled")
        t1 = now()
    finally:
        a.close()
        b.close()
    return (t1 - t0) / n


async def recv_wake(n):
    loop = asyncio.get_running_loop()
    a, b = _pair()
    try:
        t0 = now()
        for _ in range(n):
            t = loop.create_task(loop.sock_recv(a, 1))
            await asyncio.sleep(0)  # t runs and blocks in sock_recv
            b.send(b"x")
            if await t != b"x":
                raise SystemExit("peer_future: sock_recv got the wrong byte")
        t1 = now()
    finally:
        a.close()
        b.close()
    return (t1 - t0) / n


BATCH = 64


async def cancel_recv_deliver(n):
    loop = asyncio.get_running_loop()
    pairs = [_pair() for _ in range(BATCH)]
    spent = 0
    batches = (n + BATCH - 1) // BATCH
    try:
        for _ in range(batches):
            ts = [loop.create_task(loop.sock_recv(a, 1)) for a, _ in pairs]
            await asyncio.sleep(0)  # every task runs and blocks
            t0 = now()
            for t in ts:
                t.cancel()
                try:
                    await t
                except asyncio.CancelledError:
                    pass
                else:
                    raise SystemExit("peer_future: sock_recv was not cancelled")
            spent += now() - t0
    finally:
        for a, b in pairs:
            a.close()
            b.close()
    return spent / (batches * BATCH)


async def scope_deadline(n):
    t0 = now()
    for _ in range(n):
        async with asyncio.timeout(1):
            pass
    t1 = now()
    return (t1 - t0) / n


async def scope_deadline_yield(n):
    t0 = now()
    for _ in range(n):
        async with asyncio.timeout(1):
            await asyncio.sleep(0)
    t1 = now()
    return (t1 - t0) / n


async def yield_(n):
    t0 = now()
    for _ in range(n):
        await asyncio.sleep(0)
    t1 = now()
    return (t1 - t0) / n


FIGURES = [
    ("future_set_await", future_set_await),
    ("future_await_wake", future_await_wake),
    ("cancel_recv", cancel_recv),
    ("recv_wake", recv_wake),
    ("cancel_recv_deliver", cancel_recv_deliver),
    ("scope_deadline", scope_deadline),
    ("scope_deadline_yield", scope_deadline_yield),
    ("yield", yield_),
]


async def run_all(impl, rounds, scale, verbose):
    for name, fn in FIGURES:
        if name.startswith("scope_") and not hasattr(asyncio, "timeout"):
            print(f"peer_future: no asyncio.timeout (Python {sys.version.split()[0]}"
                  f" < 3.11): {impl}_{name} skipped", file=sys.stderr)
            continue
        n = max(1, int(COUNTS[name] * scale))
        await fn(n)  # warm-up
        v = []
        for r in range(rounds):
            x = await fn(n)
            if verbose:
                print(f"{impl}_{name} round {r + 1}: {x:.2f}", file=sys.stderr)
            v.append(x)
        print(f"{impl}_{name} {median(v):.1f} ns", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("impl", choices=["asyncio", "uvloop"])
    p.add_argument("-r", "--rounds", type=int, default=7)
    p.add_argument("-s", "--scale", type=float, default=1.0)
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args()
    if a.rounds < 1 or a.scale <= 0:
        p.error("rounds must be >= 1 and scale > 0")
    if a.impl == "uvloop":
        try:
            import uvloop
        except ImportError:
            print(f"peer_future: {sys.executable} cannot import uvloop "
                  "(Debian: apt-get install python3-uvloop)", file=sys.stderr)
            return 3
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(run_all(a.impl, a.rounds, a.scale, a.verbose))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
