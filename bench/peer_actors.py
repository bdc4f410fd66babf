#!/usr/bin/env python3
"""Peer of bench/chan.c's actor_msgs_per_s: seed 000's ActorScheduler
(Python Cookbook recipe 12.12: actors as generators, one deque of pending
(actor, message) pairs) running its own example, the counter/printer pair,
with the printer counting its messages instead of printing them.

    python3 bench/peer_actors.py [-r rounds] [-n N] [-v]

The counter receives n; at 0 it stops; otherwise it sends n to 'printer'
and n-1 to itself. It is started with N (default 200,000, the count
chan.c's default uses for its own actor figure), so the scheduler delivers
2N messages that matter (N to the printer, N+1 to the counter, the last one
the 0 that stops it, besides the two priming Nones): the figure is 2N /
time, as in chan.c and the Go peer.

Prints "python_actor_msgs_per_s VALUE msgs/s", the median of the timed
rounds (default 7) after one warm-up round that is thrown away. The clock
is time.process_time_ns: CPU time of the process, as bench.h's programs
use CPU time and not wall time. Each round builds a fresh scheduler and
fresh actors; building them is outside the clock, the run() is inside.
"""

import argparse
import sys
import time
from collections import deque

now = time.process_time_ns


# ---- seed 000, as written there (the printing replaced by counting) -------


class ActorScheduler:
    def __init__(self):
        self._actors = {}  # Mapping of names to actors
        self._msg_queue = deque()  # Message queue

    def new_actor(self, name, actor):
        """Admit a newly started actor to the scheduler and give it a name"""
        self._msg_queue.append((actor, None))
        self._actors[name] = actor

    def send(self, name, msg):
        """Send a message to a named actor"""
        actor = self._actors.get(name)
        if actor:
            self._msg_queue.append((actor, msg))

    def run(self):
        """Run as long as there are pending messages."""
        while self._msg_queue:
            actor, msg = self._msg_queue.popleft()
            try:
                actor.send(msg)
            except StopIteration:
                pass


class Count:
    got = 0


def printer(count):
    while True:
        msg = yield
        count.got += 1  # the seed prints: print('Got:', msg)


def counter(sched):
    while True:
        # Receive the current count
        n = yield
        if n == 0:
            break
        # Send to the printer task
        sched.send("printer", n)
        # Send the next count to the counter task (recursive)
        sched.send("counter", n - 1)


# ---- the benchmark ---------------------------------------------------------


def one_round(n):
    count = Count()
    sched = ActorScheduler()
    sched.new_actor("printer", printer(count))
    sched.new_actor("counter", counter(sched))
    sched.send("counter", n)
    t0 = now()
    sched.run()
    t1 = now()
    if count.got != n:
        sys.exit(f"peer_actors: the printer got {count.got} messages, not {n}")
    return 2 * n / ((t1 - t0) / 1e9)


def median(v):
    v = sorted(v)
    k = len(v)
    return v[k // 2] if k % 2 else (v[k // 2 - 1] + v[k // 2]) / 2


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("-r", type=int, default=7, help="timed rounds")
    ap.add_argument("-n", type=int, default=200_000, help="counter's start")
    ap.add_argument("-v", action="store_true", help="every round to stderr")
    a = ap.parse_args()
    if a.r < 1 or a.n < 1:
        ap.error("-r and -n must be at least 1")
    one_round(a.n)  # warm-up
    v = []
    for i in range(a.r):
        x = one_round(a.n)
        if a.v:
            print(f"python_actor_msgs_per_s round {i + 1}: {x:.0f}",
                  file=sys.stderr)
        v.append(x)
    print(f"python_actor_msgs_per_s {median(v):.0f} msgs/s", flush=True)


if __name__ == "__main__":
    main()
