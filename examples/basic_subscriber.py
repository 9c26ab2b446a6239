"""Print the messages of a stream from a standalone driver: the subscribing half of a two-terminal example.

Terminal 1: ``python -m driver``; terminal 2: ``python examples/basic_subscriber.py``;
terminal 3: ``python examples/basic_publisher.py``. Runs until Ctrl-C (SIGINT),
SIGTERM, or ``--count`` messages. Messages larger than the MTU are reassembled by
a FragmentAssembler; images (publisher sessions) are reported as they come and go.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence

from driver.client import Aeron, FragmentAssembler, Header, Image
from driver.config import default_aeron_dir
from driver.errors import DriverError
from driver.idle import BackoffIdleStrategy

__all__ = ["main", "parse_args"]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Print the messages of a stream.")
    p.add_argument(
        "--dir",
        default=os.environ.get("AERON_DIR") or str(default_aeron_dir()),
        help="the driver's directory (default: $AERON_DIR or %(default)s)",
    )
    p.add_argument("--channel", default="aeron:ipc", help="channel URI (default: %(default)s)")
    p.add_argument("--stream", type=int, default=1001, help="stream id (default: %(default)s)")
    p.add_argument("--count", type=int, default=0, help="exit after this many messages (default: run until Ctrl-C)")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: stop.set())
    received = 0

    def on_message(payload: memoryview, header: Header) -> None:
        nonlocal received
        received += 1
        text = bytes(payload).decode("utf-8", errors="replace")
        shown = text if len(text) <= 60 else f"{text[:40]}... ({len(payload)} bytes)"
        print(
            f"subscriber: {shown!r} session={header.session_id} stream={header.stream_id} position={header.position}",
            flush=True,
        )

    def on_image(image: Image) -> None:  # called on the client conductor's thread
        print(f"subscriber: image available: session={image.session_id} from {image.source_identity!r}", flush=True)

    def on_image_gone(image: Image) -> None:
        print(f"subscriber: image unavailable: session={image.session_id} at position={image.position}", flush=True)

    try:
        aeron = Aeron.connect(aeron_dir=args.dir)
    except DriverError as exc:
        print(f"subscriber: no driver in {args.dir}: {exc} (start one with `python -m driver`)", file=sys.stderr)
        return 1
    with aeron, aeron.add_subscription(args.channel, args.stream, on_image, on_image_gone) as subscription:
        print(f"subscriber: {args.channel} stream={args.stream} in {args.dir}; Ctrl-C stops", flush=True)
        assembler = FragmentAssembler(on_message)
        idle = BackoffIdleStrategy()
        while not stop.is_set() and (args.count <= 0 or received < args.count):
            idle.idle(subscription.poll(assembler, 10))
    print(f"subscriber: done, {received} messages", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
