"""A client end point whose message classes are another version of the test's, in its own process.

``--version 2``: ``Move`` lost its ``note`` (which had a default) and gained ``speed`` (with one); ``Chat`` as
before. ``--version bad-type``: ``Move.x`` is a str; ``--version bad-field``: ``Move`` gained ``hp`` without a
default. The client connects over UDP with a driver of its own, sends ``Move(7, 1.5, ...)`` and ``Chat("hello")``,
and prints every message it gets back (``got <repr>``) until it has two, then ``done``; a rejection prints
``rejected <class> <type_id> <class_name> <field> <text>``.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

import attrs

from endpoint import Client, ClientConfiguration, SchemaMismatchError, Serialization


@attrs.define
class MoveV2:
    seq: int
    x: float
    speed: float = 1.0


@attrs.define
class MoveBadType:
    seq: int
    x: str
    note: str = ""


@attrs.define
class MoveBadField:
    seq: int
    x: float
    hp: int
    note: str = ""


@attrs.define
class Chat:
    text: str


MOVES: dict[str, type] = {"2": MoveV2, "bad-type": MoveBadType, "bad-field": MoveBadField}


async def main(args: argparse.Namespace) -> None:
    move_class = MOVES[args.version]
    ser = Serialization()
    ser.register(move_class, type_id=1)
    ser.register(Chat, type_id=2)
    client = Client(
        ClientConfiguration(
            aeron_dir=args.aeron_dir, prefer_ipc=False, serialization=ser, connect_timeout=10.0, close_timeout=0.25
        )
    )
    got: list[Any] = []
    arrived = asyncio.Event()

    def on_any(conn: object, message: Any) -> None:
        got.append(message)
        print("got", repr(message), flush=True)
        if len(got) >= 2:
            arrived.set()

    client.on_message(move_class, on_any)
    client.on_message(Chat, on_any)
    async with client:
        try:
            conn = await client.connect("127.0.0.1", args.port)
        except SchemaMismatchError as exc:
            print("rejected", type(exc).__name__, exc.type_id, exc.class_name, exc.field, exc.detail, flush=True)
            return
        move = MoveV2(7, 1.5, speed=3.0) if move_class is MoveV2 else move_class(7, 1.5)
        await conn.send(move)
        await conn.send(Chat("hello"))
        await asyncio.wait_for(arrived.wait(), args.linger)
        print("done", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--version", choices=sorted(MOVES), required=True)
    parser.add_argument("--linger", type=float, default=30.0)
    asyncio.run(main(parser.parse_args()))
