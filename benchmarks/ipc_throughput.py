"""IPC throughput of 32-byte messages between two processes: endpoint vs pyzmq, in one run.

    python benchmarks/ipc_throughput.py [--messages 3000000] [--batch 64]

Rows: our client over the standalone driver (``python -m driver``, a third process),
our client with the driver embedded in the publisher's process, and pyzmq PUSH/PULL
over ``ipc://``. Each publisher sends as fast as it can; the subscriber counts
what arrives and times first-to-last message. The ratio column is against pyzmq.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import MESSAGE_LENGTH, fresh_aeron_dir, print_table, run_zmq_push_pull, standalone_driver

STREAM_ID = 1001
CHANNEL = "aeron:ipc?term-length=64m"


def _noop(payload: memoryview, header: object) -> None:
    pass


def endpoint_subscriber(aeron_dir: str, messages: int, ready: mp.synchronize.Event, out: mp.Queue) -> None:
    from driver.client import Aeron

    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        sub = aeron.add_subscription(CHANNEL, STREAM_ID)
        ready.set()
        poll = sub.poll
        received = 0
        deadline = time.monotonic() + 120
        while received == 0:
            received = poll(_noop, 4096)
            if time.monotonic() > deadline:
                out.put((0, 0.0))
                return
        start = time.perf_counter()
        while received < messages and time.perf_counter() - start < 120:
            received += poll(_noop, 4096)
        out.put((received, time.perf_counter() - start))


def endpoint_publisher(
    aeron_dir: str | None,
    messages: int,
    batch_size: int,
    ready: mp.synchronize.Event,
    driver_ready: mp.synchronize.Event | None,
    dir_out: mp.Queue | None,
) -> None:
    from driver.client import Aeron
    from driver.core.media_driver import MediaDriver

    driver = None
    if aeron_dir is None:
        driver = MediaDriver.launch_embedded()
        aeron_dir = str(driver.aeron_dir)
        assert dir_out is not None
        assert driver_ready is not None
        dir_out.put(aeron_dir)
        driver_ready.set()
    try:
        with Aeron.connect(aeron_dir=aeron_dir) as aeron:
            pub = aeron.add_exclusive_publication(CHANNEL, STREAM_ID)
            ready.wait(30)
            deadline = time.monotonic() + 30
            while not pub.is_connected and time.monotonic() < deadline:
                time.sleep(0.001)
            batch = [b"x" * MESSAGE_LENGTH] * batch_size
            offer_batch = pub.offer_batch
            sent = 0
            deadline = time.monotonic() + 120
            while sent < messages and time.monotonic() < deadline:
                if offer_batch(batch) > 0:
                    sent += batch_size
    finally:
        if driver is not None:
            time.sleep(0.5)
            driver.close()


def run_endpoint(embedded: bool, messages: int, batch_size: int) -> tuple[float, float]:
    ctx = mp.get_context("spawn")
    ready, out = ctx.Event(), ctx.Queue()
    if embedded:
        driver_ready, dir_out = ctx.Event(), ctx.Queue()
        pub = ctx.Process(target=endpoint_publisher, args=(None, messages, batch_size, ready, driver_ready, dir_out))
        pub.start()
        aeron_dir = dir_out.get(timeout=60)
        sub = ctx.Process(target=endpoint_subscriber, args=(aeron_dir, messages, ready, out))
        sub.start()
        received, elapsed = out.get(timeout=300)
        pub.join(60)
        sub.join(60)
        return received, elapsed
    aeron_dir = fresh_aeron_dir("tp")
    with standalone_driver(aeron_dir):
        sub = ctx.Process(target=endpoint_subscriber, args=(str(aeron_dir), messages, ready, out))
        sub.start()
        pub = ctx.Process(target=endpoint_publisher, args=(str(aeron_dir), messages, batch_size, ready, None, None))
        pub.start()
        received, elapsed = out.get(timeout=300)
        pub.join(60)
        sub.join(60)
    return received, elapsed


def run_zmq(messages: int) -> tuple[int, float]:
    return run_zmq_push_pull(f"ipc:///tmp/endpoint-bench-zmq-{os.getpid()}", messages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=3_000_000)
    parser.add_argument("--batch", type=int, default=64, help="messages per offer_batch call")
    args = parser.parse_args()
    results = {
        "pyzmq PUSH/PULL ipc://": run_zmq(args.messages),
        "endpoint, standalone driver": run_endpoint(False, args.messages, args.batch),
        "endpoint, embedded driver": run_endpoint(True, args.messages, args.batch),
    }
    zmq_rate = results["pyzmq PUSH/PULL ipc://"][0] / results["pyzmq PUSH/PULL ipc://"][1]
    rows = []
    for name, (received, elapsed) in results.items():
        rate = received / elapsed if elapsed else 0.0
        rows.append((name, received, rate, rate * MESSAGE_LENGTH / 1e6, rate / zmq_rate))
    print_table(
        f"IPC throughput, {MESSAGE_LENGTH}-byte messages, publisher and subscriber in separate processes "
        f"(batch {args.batch})",
        ["", "messages", "msgs/s", "MB/s", "x pyzmq"],
        rows,
    )


if __name__ == "__main__":
    main()
