"""A server end point in its own process, for the process, restart and stall tests: answers every Num with an Ack.

Prints one line per event (``serving <port> <pid>``, ``connected <id>``, ``disconnected <id> <lost|closed>``,
``stopped``). By default it runs under :func:`endpoint.run` (SIGTERM and SIGINT stop it gracefully);
``--plain`` runs it under :func:`asyncio.run` with no signal handler, as a program that never thought about
signals does (SIGTERM then kills it on the spot). It launches an embedded driver on ``--aeron-dir``, or with
``--attach`` uses the driver already running there. ``--linger`` bounds its life (a graceful stop, as
on SIGTERM), so a test that dies without stopping it leaves nothing running for long.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

import endpoint
from endpoint import Connection, Server, ServerConfiguration
from support.endpoints import Ack, Num, make_serialization


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def serve(args: argparse.Namespace) -> int:
    server = Server(
        ServerConfiguration(
            port=args.port,
            listen_address="127.0.0.1",
            aeron_dir=args.aeron_dir,
            key_path=args.key_path,
            serialization=make_serialization(),
            ping_interval=args.ping_interval,
            peer_timeout=args.peer_timeout,
            driver_timeout=args.driver_timeout,
            launch_driver=not args.attach,
            close_timeout=0.5,
        )
    )

    async def echo(conn: Connection, num: Num) -> None:
        await conn.send(Ack(num.i))

    server.on_message(Num, echo)
    server.on_connect(lambda conn: say("connected", conn.id))
    server.on_disconnect(lambda conn: say("disconnected", conn.id, "lost" if conn.lost else "closed"))
    server.on_error(lambda conn, exc: say("error", type(exc).__name__, str(exc).replace("\n", " ")))
    try:
        async with server:
            await server.bind()
            say("serving", args.port, os.getpid())
            with contextlib.suppress(TimeoutError):  # --linger: its time is up, a graceful stop
                async with asyncio.timeout(args.linger):
                    await server.serve_forever()
    finally:
        say("stopped")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--key-path", default=None)
    parser.add_argument("--ping-interval", type=float, default=1.0)
    parser.add_argument("--peer-timeout", type=float, default=5.0)
    parser.add_argument("--driver-timeout", type=float, default=10.0)
    parser.add_argument("--attach", action="store_true", help="attach to a running driver, start none")
    parser.add_argument("--linger", type=float, default=None, help="seconds to serve at most (default: no bound)")
    parser.add_argument("--plain", action="store_true", help="no signal handling: SIGTERM kills on the spot")
    arguments = parser.parse_args()
    if arguments.plain:
        sys.exit(asyncio.run(serve(arguments)))
    sys.exit(endpoint.run(lambda: serve(arguments)))
