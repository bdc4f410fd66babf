#!/usr/bin/env python3
"""Peer of bench/executor.c: loop.run_in_executor with a ThreadPoolExecutor,
on asyncio's own event loop or on uvloop's.

    python3 bench/peer_executor.py asyncio|uvloop [-r rounds] [-n N]
                                   [-t threads] [-v]

Prints "name value unit" lines, as bench.h does, each the median of the
timed rounds (default 7) after one warm-up round that is thrown away (it
also starts the pool's threads). Two clocks, as executor.c's: the wall
clock (time.perf_counter_ns) for latency and rate, and the CPU time of the
whole process (time.process_time_ns: every thread's, the workers'
included) for the cost. NAME below is prefixed with "asyncio_" or
"uvloop_":

  NAME_run_in_executor_rtt      ns (wall) per `await loop.run_in_executor(
                                pool, trivial, i)` made by one coroutine,
                                one after the other (executor.c's
                                run_in_thread_rtt)
  NAME_run_in_executor_rtt_cpu  the same, process CPU ns per call
  NAME_run_in_executor_64       jobs per second with 64 in flight: 64 tasks
                                (asyncio.gather), each awaiting
                                run_in_executor N / 64 times
                                (run_in_thread_64)
  NAME_run_in_executor_64_cpu   the same, process CPU ns per job
  NAME_executor_threads         the pool's max_workers

trivial(x) returns x; the result is checked. The pool is a
concurrent.futures.ThreadPoolExecutor of -t threads (default: the online
CPUs, at least 2, as weft's default pool; run.sh passes weft's own figure).
Both loops complete the asyncio future from the worker thread with
call_soon_threadsafe (uvloop's wakes its libuv loop with uv_async_send).

-n N (default 6,400; executor.c's is 100,000, Python's jobs being some
twenty times dearer) is the jobs per round of the 64-in-flight figure; the
round trips are N / 4 per round. A round takes some 50-100 ms here.
"""

import argparse
import asyncio
import concurrent.futures
import os
import sys
import time

INFLIGHT = 64

wall = time.perf_counter_ns
cpu = time.process_time_ns


def median(v):
    v = sorted(v)
    n = len(v)
    return v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2


def trivial(x):
    return x


async def rtt(pool, n):
    loop = asyncio.get_running_loop()
    w0, c0 = wall(), cpu()
    for i in range(n):
        if await loop.run_in_executor(pool, trivial, i) != i:
            raise SystemExit("peer_executor: wrong result")
    w1, c1 = wall(), cpu()
    return (w1 - w0) / n, (c1 - c0) / n


async def inflight64(pool, n):
    loop = asyncio.get_running_loop()
    each = max(1, n // INFLIGHT)

    async def looper():
        for i in range(each):
            if await loop.run_in_executor(pool, trivial, i) != i:
                raise SystemExit("peer_executor: wrong result")

    w0, c0 = wall(), cpu()
    await asyncio.gather(*(looper() for _ in range(INFLIGHT)))
    w1, c1 = wall(), cpu()
    jobs = each * INFLIGHT
    return jobs * 1e9 / (w1 - w0), (c1 - c0) / jobs


FIGURES = [
    ("run_in_executor_rtt", rtt, 4, "ns"),
    ("run_in_executor_64", inflight64, 1, "jobs/s"),
]


def fmt(name, value, unit):
    if unit == "ns":
        return f"{name} {value:.1f} {unit}"
    return f"{name} {value:.0f} {unit}"


async def run_all(impl, rounds, iters, threads, verbose):
    with concurrent.futures.ThreadPoolExecutor(max_workers=threads) as pool:
        for name, fn, div, unit in FIGURES:
            n = max(1, iters // div)
            await fn(pool, n)  # warm-up
            w, c = [], []
            for r in range(rounds):
                x, y = await fn(pool, n)
                if verbose:
                    print(f"{impl}_{name} round {r + 1}: {x:.2f} {unit}, "
                          f"{y:.2f} ns cpu", file=sys.stderr)
                w.append(x)
                c.append(y)
            print(fmt(f"{impl}_{name}", median(w), unit), flush=True)
            print(fmt(f"{impl}_{name}_cpu", median(c), "ns"), flush=True)
    print(f"{impl}_executor_threads {threads} threads", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("impl", choices=["asyncio", "uvloop"])
    p.add_argument("-r", "--rounds", type=int, default=7)
    p.add_argument("-n", "--iters", type=int, default=6400)
    p.add_argument("-t", "--threads", type=int,
                   default=max(2, os.cpu_count() or 1))
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args()
    if a.rounds < 1 or a.iters < 1 or a.threads < 1:
        p.error("rounds, iterations and threads must be >= 1")
    if a.impl == "uvloop":
        try:
            import uvloop
        except ImportError:
            print(f"peer_executor: {sys.executable} cannot import uvloop "
                  "(Debian: apt-get install python3-uvloop)", file=sys.stderr)
            return 3
        loop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(
            run_all(a.impl, a.rounds, a.iters, a.threads, a.verbose))
    finally:
        loop.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
