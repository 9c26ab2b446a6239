"""Ping: measure round-trip latency through ``examples/pong.py`` (stream 1002 out, 1003 back).

Start a standalone driver (``python -m driver``), then ``python examples/pong.py``,
then ``python examples/ping.py``. Each ping carries its send time
(``time.perf_counter_ns``); ping sends the next one only once the previous came
back, so every sample is one full round trip. A warm-up run comes first and is
not counted; then the percentiles are printed in microseconds.
"""

from __future__ import annotations

import argparse
import os
import signal
import struct
import sys
import threading
import time
from collections.abc import Sequence

from driver.client import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED, Aeron, Header, Publication, Subscription
from driver.config import default_aeron_dir
from driver.errors import DriverError
from driver.idle import IdleStrategy, idle_strategy_from_name

__all__ = ["main", "parse_args", "percentile"]

_STAMP = struct.Struct("<q")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Measure round-trip latency through pong.")
    p.add_argument(
        "--dir",
        default=os.environ.get("AERON_DIR") or str(default_aeron_dir()),
        help="the driver's directory (default: $AERON_DIR or %(default)s)",
    )
    p.add_argument("--channel", default="aeron:ipc", help="channel URI (default: %(default)s)")
    p.add_argument("--ping-stream", type=int, default=1002, help="stream to send pings on (default: %(default)s)")
    p.add_argument("--pong-stream", type=int, default=1003, help="stream pongs come back on (default: %(default)s)")
    p.add_argument("--messages", type=int, default=10_000, help="measured round trips (default: %(default)s)")
    p.add_argument("--warmup", type=int, default=1_000, help="round trips before measuring (default: %(default)s)")
    p.add_argument("--size", type=int, default=32, help="message size in bytes, at least 8 (default: %(default)s)")
    p.add_argument("--idle", choices=["busy_spin", "backoff"], default="backoff", help="poll loop idle strategy")
    p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for pong (default: %(default)s)")
    args = p.parse_args(argv)
    if args.size < _STAMP.size:
        p.error(f"--size must be at least {_STAMP.size}")
    return args


def percentile(sorted_samples: Sequence[int], fraction: float) -> int:
    """Nearest-rank percentile of ascending samples."""
    if not sorted_samples:
        return 0
    rank = max(1, min(len(sorted_samples), int(-(-fraction * len(sorted_samples) // 1))))
    return sorted_samples[rank - 1]


class Pinger:
    def __init__(self, publication: Publication, subscription: Subscription, size: int, idle: IdleStrategy) -> None:
        self.publication = publication
        self.subscription = subscription
        self.message = bytearray(size)
        self.idle = idle
        self.rtt_ns: list[int] = []
        self.received = 0

    def on_pong(self, payload: memoryview, header: Header) -> None:
        self.rtt_ns.append(time.perf_counter_ns() - _STAMP.unpack_from(payload)[0])
        self.received += 1

    def round_trips(self, count: int, stop: threading.Event, timeout_s: float = 5.0) -> int:
        """Send ``count`` pings one at a time; returns how many came back (fewer if stopped or timed out)."""
        offer = self.publication.offer
        poll = self.subscription.poll
        on_pong = self.on_pong
        idle = self.idle
        message = self.message
        pack_into = _STAMP.pack_into
        clock = time.perf_counter_ns
        timeout_ns = int(timeout_s * 1e9)
        done = 0
        for _ in range(count):
            if stop.is_set():
                break
            pack_into(message, 0, clock())
            while (result := offer(message)) < 0:
                if result not in (BACK_PRESSURED, ADMIN_ACTION, NOT_CONNECTED) or stop.is_set():
                    return done
            expected = self.received + 1
            sent_at = clock()
            while self.received < expected:
                idle.idle(poll(on_pong, 1))
                if clock() - sent_at > timeout_ns or stop.is_set():
                    return done
            idle.reset()
            done += 1
        return done


def wait_connected(publication: Publication, subscription: Subscription, wait_s: float, stop: threading.Event) -> bool:
    deadline = time.monotonic() + wait_s
    while not (publication.is_connected and subscription.is_connected):
        if stop.wait(0.01) or time.monotonic() > deadline:
            return False
    return True


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        aeron = Aeron.connect(aeron_dir=args.dir)
    except DriverError as exc:
        print(f"ping: no driver in {args.dir}: {exc} (start one with `python -m driver`)", file=sys.stderr)
        return 1
    with (
        aeron,
        aeron.add_exclusive_publication(args.channel, args.ping_stream) as publication,
        aeron.add_subscription(args.channel, args.pong_stream) as subscription,
    ):
        print(f"ping: {args.channel} stream {args.ping_stream} -> {args.pong_stream}, waiting for pong...", flush=True)
        if not wait_connected(publication, subscription, args.wait, stop):
            print(f"ping: pong did not show up within {args.wait:g} s (is examples/pong.py running?)", flush=True)
            return 1
        pinger = Pinger(publication, subscription, args.size, idle_strategy_from_name(args.idle))
        warmed = pinger.round_trips(args.warmup, stop)
        print(f"ping: warm-up: {warmed} round trips", flush=True)
        pinger.rtt_ns.clear()
        started = time.perf_counter()
        done = pinger.round_trips(args.messages, stop)
        elapsed = time.perf_counter() - started
    samples = sorted(pinger.rtt_ns)
    if done < args.messages:
        print(f"ping: only {done} of {args.messages} round trips completed", flush=True)
    if not samples:
        return 1
    us = [percentile(samples, f) / 1000 for f in (0.5, 0.9, 0.99, 0.999)]
    print(
        f"ping: {len(samples)} round trips of {args.size} bytes, idle={args.idle}, {len(samples) / elapsed:,.0f} RTT/s",
        flush=True,
    )
    print(
        f"ping: rtt us  p50={us[0]:.1f}  p90={us[1]:.1f}  p99={us[2]:.1f}  p99.9={us[3]:.1f}  "
        f"max={samples[-1] / 1000:.1f}",
        flush=True,
    )
    return 0 if done == args.messages else 1


if __name__ == "__main__":
    sys.exit(main())
