"""IPC throughput: a publisher and a subscriber in separate processes, 32-byte messages in batches.

``python examples/ipc_throughput.py`` launches an embedded driver in this (parent)
process; ``--dir`` uses a standalone one instead (``python -m driver``), which
keeps the driver's work out of the parent's interpreter. The publisher offers
``--batch`` messages at a time with ``offer_batch`` (one claim, one frame per
message) and the subscriber counts them with ``poll``; every second the parent
prints what the subscriber received.
"""

from __future__ import annotations

import argparse
import ctypes
import multiprocessing
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from driver.client import ADMIN_ACTION, BACK_PRESSURED, NOT_CONNECTED, Aeron, Header
from driver.core.media_driver import MediaDriver
from driver.idle import BackoffIdleStrategy

if TYPE_CHECKING:
    import multiprocessing.synchronize

__all__ = ["main", "parse_args"]

CHANNEL = "aeron:ipc"
STREAM_ID = 1001


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Measure IPC throughput between two processes.")
    p.add_argument("--dir", help="use the standalone driver of this directory (default: an embedded driver)")
    p.add_argument("--channel", default=CHANNEL, help="channel URI (default: %(default)s)")
    p.add_argument("--stream", type=int, default=STREAM_ID, help="stream id (default: %(default)s)")
    p.add_argument("--duration", type=float, default=5.0, help="seconds to run (default: %(default)s)")
    p.add_argument("--size", type=int, default=32, help="message size in bytes (default: %(default)s)")
    p.add_argument("--batch", type=int, default=64, help="messages per offer_batch (default: %(default)s)")
    return p.parse_args(argv)


def publisher(
    aeron_dir: str,
    channel: str,
    stream_id: int,
    size: int,
    batch_size: int,
    stop: multiprocessing.synchronize.Event,
    ready: multiprocessing.synchronize.Event,
) -> None:
    """Child process: offer batches as fast as flow control allows until ``stop`` is set."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent decides when to stop
    with Aeron.connect(aeron_dir=aeron_dir) as aeron, aeron.add_exclusive_publication(channel, stream_id) as pub:
        ready.set()
        batch = [bytes(size)] * batch_size
        offer_batch = pub.offer_batch
        idle = BackoffIdleStrategy()
        loops = 0
        while True:
            loops += 1
            if loops & 0x3F == 0 and stop.is_set():
                break
            result = offer_batch(batch)
            if result >= 0:
                idle.reset()
            elif result in (BACK_PRESSURED, NOT_CONNECTED):
                idle.idle(0)
                if stop.is_set():
                    break
            elif result != ADMIN_ACTION:
                break  # CLOSED / MAX_POSITION_EXCEEDED


def subscriber(
    aeron_dir: str,
    channel: str,
    stream_id: int,
    counts: ctypes.Array[Any],
    stop: multiprocessing.synchronize.Event,
    ready: multiprocessing.synchronize.Event,
) -> None:
    """Child process: poll and count; ``counts[0]`` messages and ``counts[1]`` bytes, read by the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    totals = [0]

    def on_fragment(payload: memoryview, header: Header) -> None:
        totals[0] += len(payload)

    with Aeron.connect(aeron_dir=aeron_dir) as aeron, aeron.add_subscription(channel, stream_id) as sub:
        ready.set()
        poll = sub.poll
        idle = BackoffIdleStrategy()
        messages = 0
        loops = 0
        while True:
            fragments = poll(on_fragment, 1024)
            if fragments:
                messages += fragments
                counts[0] = messages
                counts[1] = totals[0]
            idle.idle(fragments)
            loops += 1
            if loops & 0xFF == 0 and stop.is_set():
                break


def run(aeron_dir: str, args: argparse.Namespace) -> int:
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    pub_ready = ctx.Event()
    sub_ready = ctx.Event()
    counts = ctx.RawArray("q", 2)
    sub = ctx.Process(
        target=subscriber, args=(aeron_dir, args.channel, args.stream, counts, stop, sub_ready), name="subscriber"
    )
    pub = ctx.Process(
        target=publisher,
        args=(aeron_dir, args.channel, args.stream, args.size, args.batch, stop, pub_ready),
        name="publisher",
    )
    sub.start()
    pub.start()
    try:
        if not (sub_ready.wait(30) and pub_ready.wait(30)):
            print("throughput: the child processes did not start", file=sys.stderr)
            return 1
        print(
            f"throughput: {args.size}-byte messages in batches of {args.batch} on {args.channel} "
            f"stream={args.stream} for {args.duration:g} s",
            flush=True,
        )
        started = last_time = time.monotonic()
        last_messages = last_bytes = 0
        second = 0
        while (now := time.monotonic()) - started < args.duration:
            time.sleep(min(1.0, args.duration - (now - started)))
            now = time.monotonic()
            messages, total_bytes = counts[0], counts[1]
            elapsed = now - last_time
            second += 1
            rate = (messages - last_messages) / elapsed
            print(
                f"{second:3d}: {rate:12,.0f} msgs/s {(total_bytes - last_bytes) / elapsed / 1e6:8.2f} MB/s "
                f"(total {messages:,} messages)",
                flush=True,
            )
            last_time, last_messages, last_bytes = now, messages, total_bytes
        total = counts[0]
        elapsed = time.monotonic() - started
        print(f"throughput: average {total / elapsed:,.0f} msgs/s, {counts[1] / elapsed / 1e6:.2f} MB/s", flush=True)
    except KeyboardInterrupt:
        print("throughput: interrupted", flush=True)
    finally:
        stop.set()
        for process in (pub, sub):
            process.join(10)
            if process.is_alive():
                process.terminate()
                process.join(5)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.dir:
        return run(args.dir, args)
    with MediaDriver.launch_embedded() as driver:
        print(f"throughput: embedded driver in {driver.aeron_dir}", flush=True)
        return run(str(driver.aeron_dir), args)


if __name__ == "__main__":
    sys.exit(main())
