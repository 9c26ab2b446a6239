"""A client end point in its own process, for test_rpc_processes.py: remote calls and a large stream.

Prints one JSON object a line (``{"event": ...}``) so the test can follow it. Modes:

``rpc``
    Exposes :class:`BackImpl` as object 10, then calls the server's object 1: a call with attrs arguments, a
    remote exception, a call that times out, a call during which the server calls back; then (``--hang``) one
    more call the server never answers, and waits to be killed.
``stream``
    Receives one stream from the server, hashing it as it arrives, and reports its length, SHA-256 and time.

Every wait is bounded (``--deadline``).
"""

# Protocol classes are what proxy() is for, though its ``type[T]`` parameter makes mypy ask for concrete ones.

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

import attrs

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

from endpoint import Client, ClientConfiguration, Connection
from endpoint.errors import RemoteError, RpcTimeoutError
from endpoint.rpc.calls import current_connection
from endpoint.streaming import IncomingStream
from support.endpoints import make_serialization

SERVICE = 1
BACK = 10


@attrs.define
class Item:
    name: str
    count: int = 1


EXTRA = (Item,)


class Calc(Protocol):
    """What the server (the test) serves as object 1."""

    async def add(self, item: Item, count: int) -> Item: ...
    async def fail(self, kind: str) -> None: ...
    async def stall(self) -> None: ...
    async def ask_back(self, x: int) -> int: ...


class Back(Protocol):
    """What this peer serves as object 10."""

    async def double(self, x: int) -> int: ...
    async def hang(self) -> None: ...


class BackImpl:
    async def double(self, x: int) -> int:
        await asyncio.sleep(0)
        current_connection()  # raises outside a remote call
        return 2 * x

    async def hang(self) -> None:
        say("serving hang")
        await asyncio.sleep(3600)


def deterministic_pieces(total: int, piece: int = 1 << 20, seed: int = 2024) -> Iterator[memoryview]:
    """``total`` bytes in ``piece``-sized views of one random block at shifting offsets: no copies, never repeating
    in step with the chunks, and the same on every run (a piece may be short at the end)."""
    block = random.Random(seed).randbytes(2 * piece)
    view = memoryview(block)
    sent = 0
    index = 0
    while sent < total:
        size = min(piece, total - sent)
        offset = (index * 104_729) % piece
        yield view[offset : offset + size]
        sent += size
        index += 1


def say(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def configuration(args: argparse.Namespace) -> ClientConfiguration:
    settings: dict[str, Any] = {
        "aeron_dir": args.aeron_dir,
        "prefer_ipc": not args.udp,
        "serialization": make_serialization(EXTRA),
        "ping_interval": 0.2,
        "peer_timeout": args.peer_timeout,
        "connect_timeout": 20.0,
        "close_timeout": 0.5,
    }
    if args.attach:
        settings["launch_driver"] = False
    if args.mtu:
        settings["mtu"] = args.mtu
    if args.rcvbuf:
        settings["socket_rcvbuf"] = args.rcvbuf
    return ClientConfiguration(**settings)


async def run_rpc(conn: Connection, args: argparse.Namespace) -> None:
    calc = conn.rpc.proxy(Calc, SERVICE, timeout=20.0)
    added = await calc.add(Item("sword", 2), 3)
    say("add", name=added.name, count=added.count)
    try:
        await calc.fail("key")
    except KeyError as exc:  # a remote KeyError is also a KeyError
        remote = exc if isinstance(exc, RemoteError) else None
        say(
            "remote error",
            type=type(exc).__name__,
            remote_type=remote.remote_type if remote else None,
            traceback=remote.remote_traceback if remote else None,
        )
    try:
        await conn.rpc.proxy(Calc, SERVICE, timeout=0.3).stall()
    except RpcTimeoutError as exc:
        say("timeout", type=type(exc).__name__, pending=conn.rpc.pending)
    say("callback", value=await calc.ask_back(20))
    if args.hang:
        say("hanging")
        await calc.stall()  # the server never answers this one: the test kills us meanwhile
    else:
        await conn.close("done")
        say("closed")


class StreamHasher:
    """The on_stream listener of ``stream`` mode: hashes what arrives; ``result`` once the stream is whole."""

    def __init__(self, report_every: int) -> None:
        self.report_every = report_every
        self.result: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()

    async def __call__(self, connection: Connection, stream: IncomingStream) -> None:
        digest = hashlib.sha256()
        length = 0
        started = time.monotonic()
        report_at = self.report_every
        async for chunk in stream:
            digest.update(chunk)
            length += len(chunk)
            if report_at and length >= report_at:
                say("progress", length=length, seconds=round(time.monotonic() - started, 2))
                report_at += self.report_every
        if not self.result.done():
            self.result.set_result(
                {
                    "name": stream.name,
                    "size": stream.size,
                    "length": length,
                    "sha256": digest.hexdigest(),
                    "seconds": round(time.monotonic() - started, 2),
                }
            )


async def main(args: argparse.Namespace) -> None:
    client = Client(configuration(args))
    client.rpc.expose(BackImpl(), BACK)
    client.on_error(lambda conn, error: say("error", type=type(error).__name__, text=str(error)))
    client.on_disconnect(lambda conn: say("disconnected", reason=conn.close_reason, lost=conn.lost))
    hasher = StreamHasher(args.report_every)
    client.on_stream(hasher)  # before connecting: the server may start a stream at once
    async with asyncio.timeout(args.deadline), client:
        conn = await client.connect("127.0.0.1", args.port)
        say("connected", id=conn.id, transport="ipc" if conn.is_ipc else "udp")
        if args.mode == "rpc":
            await run_rpc(conn, args)
        else:
            say("stream", **await hasher.result)
            await conn.close("done")
            say("closed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--udp", action="store_true")
    parser.add_argument("--attach", action="store_true", help="use the live driver in --aeron-dir, launch none")
    parser.add_argument("--mode", choices=["rpc", "stream"], default="rpc")
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--mtu", type=int, default=0)
    parser.add_argument("--rcvbuf", type=int, default=0)
    parser.add_argument("--peer-timeout", type=float, default=2.0)
    parser.add_argument("--deadline", type=float, default=60.0)
    parser.add_argument("--report-every", type=int, default=0, help="bytes between progress lines of a stream")
    # Run as ``rpc_peer``, not ``__main__``: the registration hash names Item by its module, as the test does.
    import rpc_peer

    asyncio.run(rpc_peer.main(parser.parse_args()))
