"""Pong: echo every message of stream 1002 back on stream 1003, for ``examples/ping.py``.

Start a standalone driver (``python -m driver``), then ``python examples/pong.py``,
then ``python examples/ping.py``. ``--idle busy_spin`` polls without ever
sleeping (lowest latency, one core); ``--idle backoff`` (the default) spins,
yields, then parks. Stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from driver.client import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED, Aeron, Header
from driver.config import default_aeron_dir
from driver.errors import DriverError
from driver.idle import idle_strategy_from_name

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Echo ping's messages back (round-trip latency).")
    p.add_argument(
        "--dir",
        default=os.environ.get("AERON_DIR") or str(default_aeron_dir()),
        help="the driver's directory (default: $AERON_DIR or %(default)s)",
    )
    p.add_argument("--channel", default="aeron:ipc", help="channel URI (default: %(default)s)")
    p.add_argument("--ping-stream", type=int, default=1002, help="stream to read pings from (default: %(default)s)")
    p.add_argument("--pong-stream", type=int, default=1003, help="stream to echo them on (default: %(default)s)")
    p.add_argument("--idle", choices=["busy_spin", "backoff"], default="backoff", help="poll loop idle strategy")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        aeron = Aeron.connect(aeron_dir=args.dir)
    except DriverError as exc:
        print(f"pong: no driver in {args.dir}: {exc} (start one with `python -m driver`)", file=sys.stderr)
        return 1
    echoed = 0
    with (
        aeron,
        aeron.add_subscription(args.channel, args.ping_stream) as subscription,
        aeron.add_exclusive_publication(args.channel, args.pong_stream) as publication,
    ):
        offer = publication.offer
        is_set = stop.is_set

        def echo(payload: memoryview, header: Header) -> None:
            # The payload is a view into the ping log: offer copies it straight into the pong log.
            nonlocal echoed
            while True:
                result = offer(payload)
                if result >= 0:
                    echoed += 1
                    return
                if result not in (BACK_PRESSURED, ADMIN_ACTION, NOT_CONNECTED) or is_set():
                    return  # CLOSED, MAX_POSITION_EXCEEDED, or stopping: drop it
                if result == NOT_CONNECTED and not publication.is_connected:
                    return  # ping went away

        print(
            f"pong: {args.channel} stream {args.ping_stream} -> {args.pong_stream}, idle={args.idle}, "
            f"in {args.dir}; Ctrl-C stops",
            flush=True,
        )
        poll = subscription.poll
        idle = idle_strategy_from_name(args.idle)
        loops = 0
        while True:
            idle.idle(poll(echo, 10))
            loops += 1
            if loops & 0xFF == 0 and is_set():
                break
    print(f"pong: done, {echoed} messages echoed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
