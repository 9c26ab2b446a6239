"""IPC round-trip latency between two processes: endpoint vs pyzmq, in one run.

    python benchmarks/ipc_latency.py [--messages 20000] [--idle busy_spin|backoff]

Ping sends a 32-byte message carrying a timestamp, pong echoes it, ping records
the round trip. Our rows run over the standalone driver (a third process); both
our ping and pong poll with the chosen idle strategy (busy spin by default, as
latency tuning calls for). pyzmq runs PAIR sockets over ``ipc://`` with blocking
receives, the way it is normally used, and also busy-polling with NOBLOCK.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import struct
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MESSAGE_LENGTH, fresh_aeron_dir, percentile, print_table, run_zmq_round_trip, standalone_driver

PING_STREAM, PONG_STREAM = 1002, 1003
CHANNEL = "aeron:ipc"
_STAMP = struct.Struct("<q")
WARMUP = 2_000


def _idle(name: str) -> object:
    from driver.idle import idle_strategy_from_name

    return idle_strategy_from_name(name)


def endpoint_pong(aeron_dir: str, idle_name: str, ready: mp.synchronize.Event, stop: mp.synchronize.Event) -> None:
    from driver.client import Aeron

    idle = _idle(idle_name)
    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        sub = aeron.add_subscription(CHANNEL, PING_STREAM)
        pub = aeron.add_exclusive_publication(CHANNEL, PONG_STREAM)
        ready.set()
        offer = pub.offer

        def echo(payload: memoryview, header: object) -> None:
            while offer(payload) < 0:
                pass

        poll = sub.poll
        while not stop.is_set():
            for _ in range(10_000):
                idle.idle(poll(echo, 10))  # type: ignore[attr-defined]


def endpoint_ping(aeron_dir: str, messages: int, idle_name: str, out: mp.Queue) -> None:
    from driver.client import Aeron

    idle = _idle(idle_name)
    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        pub = aeron.add_exclusive_publication(CHANNEL, PING_STREAM)
        sub = aeron.add_subscription(CHANNEL, PONG_STREAM)
        deadline = time.monotonic() + 30
        while not (pub.is_connected and sub.images) and time.monotonic() < deadline:
            time.sleep(0.001)
        rtts: list[int] = []
        now = time.perf_counter_ns
        buffer = bytearray(MESSAGE_LENGTH)
        got: list[int] = []

        def on_pong(payload: memoryview, header: object) -> None:
            got.append(now() - _STAMP.unpack_from(payload)[0])

        poll = sub.poll
        for i in range(messages + WARMUP):
            _STAMP.pack_into(buffer, 0, now())
            while pub.offer(buffer) < 0:
                pass
            while not got:
                idle.idle(poll(on_pong, 1))  # type: ignore[attr-defined]
            if i >= WARMUP:
                rtts.append(got[0])
            got.clear()
        out.put(rtts)


def run_endpoint(messages: int, idle_name: str) -> list[int]:
    ctx = mp.get_context("spawn")
    ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
    aeron_dir = fresh_aeron_dir("lat")
    with standalone_driver(aeron_dir):
        pong = ctx.Process(target=endpoint_pong, args=(str(aeron_dir), idle_name, ready, stop))
        pong.start()
        ready.wait(60)
        ping = ctx.Process(target=endpoint_ping, args=(str(aeron_dir), messages, idle_name, out))
        ping.start()
        rtts: list[int] = out.get(timeout=600)
        stop.set()
        ping.join(30)
        pong.join(30)
    return rtts


def run_zmq(messages: int, busy: bool) -> list[int]:
    return run_zmq_round_trip(f"ipc:///tmp/endpoint-bench-zmq-lat-{os.getpid()}", messages, busy, request_reply=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--idle", default="busy_spin", help="our ping/pong idle strategy: busy_spin or backoff")
    args = parser.parse_args()
    results = {
        "pyzmq PAIR ipc://, blocking recv": run_zmq(args.messages, busy=False),
        "pyzmq PAIR ipc://, busy NOBLOCK recv": run_zmq(args.messages, busy=True),
        f"endpoint aeron:ipc, {args.idle}": run_endpoint(args.messages, args.idle),
    }
    base = sorted(results["pyzmq PAIR ipc://, blocking recv"])
    base_p50 = percentile(base, 50) / 1000
    rows = []
    for name, rtts in results.items():
        values = sorted(rtts)
        p50, p99, p999 = (percentile(values, p) / 1000 for p in (50, 99, 99.9))
        rows.append((name, len(values), p50, p99, p999, values[-1] / 1000, base_p50 / p50))
    print_table(
        f"IPC round trip (µs), {MESSAGE_LENGTH}-byte messages, ping and pong in separate processes",
        ["", "samples", "p50", "p99", "p99.9", "max", "p50 speed-up vs pyzmq"],
        rows,
    )


if __name__ == "__main__":
    main()
