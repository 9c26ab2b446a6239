"""Publish a few text messages to a standalone driver: the publishing half of a two-terminal example.

Terminal 1: ``python -m driver``; terminal 2: ``python examples/basic_subscriber.py``;
terminal 3: ``python examples/basic_publisher.py``. Like Aeron's BasicPublisher,
but it waits (bounded by ``--wait``) for a subscriber before each message instead
of dropping it, and stops cleanly on Ctrl-C (SIGINT) or SIGTERM.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from driver.client import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED, Aeron, OfferResult, Publication
from driver.config import default_aeron_dir
from driver.errors import DriverError

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Publish text messages through a media driver.")
    p.add_argument(
        "--dir",
        default=os.environ.get("AERON_DIR") or str(default_aeron_dir()),
        help="the driver's directory (default: $AERON_DIR or %(default)s)",
    )
    p.add_argument("--channel", default="aeron:ipc", help="channel URI (default: %(default)s)")
    p.add_argument("--stream", type=int, default=1001, help="stream id (default: %(default)s)")
    p.add_argument("--messages", type=int, default=10, help="how many messages to send (default: %(default)s)")
    p.add_argument("--interval", type=float, default=1.0, help="seconds between messages (default: %(default)s)")
    p.add_argument(
        "--wait", type=float, default=30.0, help="seconds to wait for a subscriber, per message (default: %(default)s)"
    )
    return p.parse_args(argv)


def offer(publication: Publication, message: bytes, wait_s: float, stop: threading.Event) -> int:
    """Offer until accepted; wait out NOT_CONNECTED (up to ``wait_s``) and back pressure. Returns the last result."""
    waited = 0.0
    said_waiting = False
    while not stop.is_set():
        result = publication.offer(message)
        if result >= 0 or result == ADMIN_ACTION:
            if result >= 0:
                return result
            continue
        if result not in (NOT_CONNECTED, BACK_PRESSURED):
            return result  # CLOSED or MAX_POSITION_EXCEEDED: retrying cannot help
        if result == NOT_CONNECTED:
            if waited >= wait_s:
                return result
            if not said_waiting:
                print("publisher: no subscriber yet, waiting...", flush=True)
                said_waiting = True
        stop.wait(0.01)
        waited += 0.01
    return NOT_CONNECTED


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    try:
        aeron = Aeron.connect(aeron_dir=args.dir)
    except DriverError as exc:
        print(f"publisher: no driver in {args.dir}: {exc} (start one with `python -m driver`)", file=sys.stderr)
        return 1
    sent = 0
    with aeron, aeron.add_publication(args.channel, args.stream) as publication:
        print(
            f"publisher: {args.channel} stream={args.stream} session={publication.session_id} in {args.dir}",
            flush=True,
        )
        for i in range(1, args.messages + 1):
            if stop.is_set():
                break
            text = f"Hello World! {i}"
            result = offer(publication, text.encode(), args.wait, stop)
            if result >= 0:
                sent += 1
                print(f"publisher: sent {text!r} -> position={result}", flush=True)
            elif not stop.is_set():
                print(f"publisher: {text!r} not sent: {OfferResult(result).name}", flush=True)
                if result != NOT_CONNECTED:
                    break
            if i < args.messages:
                stop.wait(args.interval)
    print(f"publisher: done, {sent} of {args.messages} sent", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
