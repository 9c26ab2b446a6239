"""The message codec alone, in one process: a registered ``Move(seq, x, y)`` encoded and decoded by the end
points' ``Serialization``, beside msgpack-python packing and unpacking the tuple ``(seq, x, y)``.

    python benchmarks/codec.py [--rounds 300000] [--repeat 7] [--quick]

Rows: encode (message to bytes), decode (bytes, as a memoryview into a larger buffer as the connection hands
it, to the message), and, for the end point's own messages, a keepalive ``Ping`` (typed) and a remote call
``RpcCall`` with a registered argument (dynamic: its ``args`` are ``list[Any]``). Each figure is the best of
``--repeat`` timings of ``--rounds`` calls, in ns per call; the machine's noise moves them, the ratio less.
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import print_table
from _endpoint_common import Move, Order, serialization

from endpoint.messages import Ping, RpcCall, register_internal_messages


def best_ns(fn: Callable[[Any], object], arg: Any, rounds: int, repeat: int) -> float:
    timer = timeit.Timer("fn(arg)", globals={"fn": fn, "arg": arg})
    return min(timer.repeat(repeat, rounds)) / rounds * 1e9


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="smoke run: 20,000 calls, best of 3")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.repeat = 20_000, 3
    ser = serialization()
    ser.register(Order)
    register_internal_messages(ser)
    ser.freeze()

    def framed(data: bytes) -> memoryview:
        return memoryview(bytes(32) + data)[32:]

    rows = []
    for name, message in (
        ("Move(seq, x, y)", Move(1, 1.0, 2.0)),
        ("Ping (keepalive)", Ping(0, 123_456_789)),
        ("RpcCall(Order)", RpcCall(7, 1, "price", [Order(3, "sku-0123456789abcdef")], None)),
    ):
        data = ser.encode(message)
        assert ser.decode(framed(data)) == message
        encode = best_ns(ser.encode, message, args.rounds, args.repeat)
        decode = best_ns(ser.decode, framed(data), args.rounds, args.repeat)
        rows.append((f"endpoint {name}", len(data), encode, decode))
    packed = msgpack.packb((1, 1.0, 2.0))
    rows.append(
        (
            "msgpack-python (seq, x, y)",
            len(packed),
            best_ns(msgpack.packb, (1, 1.0, 2.0), args.rounds, args.repeat),
            best_ns(msgpack.unpackb, framed(packed), args.rounds, args.repeat),
        )
    )
    print_table(
        f"Message codec, one process, best of {args.repeat} x {args.rounds:,} calls",
        ["", "bytes", "encode ns", "decode ns"],
        rows,
    )


if __name__ == "__main__":
    main()
