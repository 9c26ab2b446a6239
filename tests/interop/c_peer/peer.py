"""A peer script for today's Aeron (pyaeron: the C client and C media driver 1.53).

Runs under the pyaeron venv's CPython >= 3.12 (see tests/support/aeron_c.py), not
under pytest. Every loop is bounded by a deadline; results go to stdout as one JSON
line per event so the test can read them.

    peer.py driver DIR                 run the C media driver on DIR until killed
    peer.py publish DIR CHANNEL STREAM COUNT SIZE [--exclusive] [--until-file PATH]
    peer.py subscribe DIR CHANNEL STREAM COUNT [--subscribers K]
    peer.py pubsub DIR CHANNEL STREAM COUNT SIZE [--exclusive] [--subscribers K]
    peer.py connect DIR                connect only; report the error if refused

Messages: int64 sequence number (little-endian) then bytes (seq + i) & 0xFF up to SIZE.
"""

from __future__ import annotations

import argparse
import json
import struct
import sys
import time

import pyaeron

SEQ = struct.Struct("<q")
TIMEOUT_S = 90.0


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def message(seq: int, size: int) -> bytes:
    body = bytes((seq + i) & 0xFF for i in range(max(0, size - SEQ.size)))
    return (SEQ.pack(seq) + body)[: max(size, SEQ.size)]


def run_driver(args: argparse.Namespace) -> int:
    driver = pyaeron.MediaDriver(dir=args.dir, threading="shared")
    emit(event="driver-ready", dir=str(driver.dir))
    try:
        while True:
            time.sleep(1)
    finally:
        driver.close()


def offered(result: object) -> bool:
    return result is True or (isinstance(result, int) and not isinstance(result, bool) and result > 0)


def add_publication(aeron: pyaeron.Aeron, args: argparse.Namespace) -> object:
    add = aeron.add_exclusive_publication if args.exclusive else aeron.add_publication
    pub = add(args.channel, args.stream)
    emit(event="publication", session_id=pub.session_id)
    return pub


def publish(pub: object, args: argparse.Namespace, deadline: float) -> None:
    while not pub.is_connected:
        if time.monotonic() > deadline:
            raise TimeoutError("publication never connected")
        time.sleep(0.001)
    emit(event="connected")
    seq = 0
    while seq < args.count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"published only {seq} of {args.count}")
        if offered(pub.offer(message(seq, args.size))):
            seq += 1
    emit(event="published", count=seq, position=pub.position)
    return


def make_subscriptions(aeron: pyaeron.Aeron, args: argparse.Namespace) -> list[object]:
    return [aeron.add_subscription(args.channel, args.stream) for _ in range(args.subscribers)]


def consume(subs: list[object], args: argparse.Namespace, deadline: float) -> None:
    expected = [0] * len(subs)
    errors: list[str] = []

    def handler_for(index: int):
        def on_fragment(buffer: object, header: object) -> None:
            data = bytes(buffer)
            (seq,) = SEQ.unpack_from(data, 0)
            if seq != expected[index]:
                errors.append(f"subscriber {index}: got {seq}, expected {expected[index]}")
            elif data != message(seq, args.size if args.size else len(data)):
                errors.append(f"subscriber {index}: message {seq} content differs")
            expected[index] = seq + 1

        return on_fragment

    handlers = [handler_for(i) for i in range(len(subs))]
    while min(expected) < args.count and not errors:
        if time.monotonic() > deadline:
            break
        work = 0
        for sub, handler in zip(subs, handlers, strict=True):
            work += sub.poll(handler, 64)
        if not work:
            time.sleep(0.0002)
    emit(event="received", counts=expected, errors=errors[:5])


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["driver", "publish", "subscribe", "pubsub", "connect"])
    parser.add_argument("dir")
    parser.add_argument("channel", nargs="?", default="aeron:ipc")
    parser.add_argument("stream", nargs="?", type=int, default=10)
    parser.add_argument("count", nargs="?", type=int, default=0)
    parser.add_argument("size", nargs="?", type=int, default=0)
    parser.add_argument("--exclusive", action="store_true")
    parser.add_argument("--subscribers", type=int, default=1)
    parser.add_argument("--until-file", help="publish: stay connected until this file exists")
    args = parser.parse_args(argv)
    if args.role == "driver":
        return run_driver(args)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        aeron = pyaeron.Aeron(dir=args.dir)
    except Exception as exc:
        emit(event="refused", error=f"{type(exc).__name__}: {exc}")
        return 3
    emit(event="client", client_id=aeron.client_id)
    try:
        if args.role == "connect":
            return 0
        subs = make_subscriptions(aeron, args) if args.role in ("subscribe", "pubsub") else []
        if subs:
            emit(event="subscribed", count=len(subs))
        if args.role in ("publish", "pubsub"):
            pub = add_publication(aeron, args)
            if args.role == "pubsub":
                while not all(s.is_connected for s in subs):
                    if time.monotonic() > deadline:
                        raise TimeoutError("subscriptions never saw an image")
                    time.sleep(0.001)
                import threading

                thread = threading.Thread(target=consume, args=(subs, args, deadline))
                thread.start()
                publish(pub, args, deadline)
                thread.join()
            else:
                publish(pub, args, deadline)
                # Stay until the test says every byte was consumed: the log lives while we do.
                if args.until_file:
                    from pathlib import Path

                    while not Path(args.until_file).exists() and time.monotonic() < deadline:
                        time.sleep(0.01)
        else:
            consume(subs, args, deadline)
    except Exception as exc:
        emit(event="error", error=f"{type(exc).__name__}: {exc}")
        return 2
    finally:
        aeron.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
