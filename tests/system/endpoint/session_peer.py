"""One end of a buffered session in its own process, for test_session_processes.py.

``--role server`` binds (``buffered_sessions``); ``--role client`` connects with its session key file. Either
prints one line per event, flushed: ``connect <session id> <resumed>``, ``lost <reason>`` or ``closed <reason>``
when a connection ends, ``error <type> <text>`` for what reaches ``on_error``, ``got <n>`` for each Num its
listeners get, ``sent <n>``, ``done sending``. With ``--send N`` it sends Num(0) .. Num(N-1) through its
session, one every ``--interval`` seconds, whether or not a connection carries the session at that moment (the
session keeps them); a server sends to the first session that connects. Runs until ``--duration`` is up or it
is killed.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

from endpoint import Client, ClientConfiguration, Connection, Server, ServerConfiguration, Session
from support.endpoints import Num, make_serialization


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def main(args: argparse.Namespace) -> None:
    common: dict[str, Any] = {
        "aeron_dir": args.aeron_dir,
        "serialization": make_serialization(),
        "buffered_sessions": True,
        "enable_ipc": False,
        "ping_interval": 0.2,
        "peer_timeout": args.peer_timeout,
        "handshake_timeout": 0.5,
        "close_timeout": 0.25,
    }
    endpoint: Server | Client
    if args.role == "server":
        endpoint = Server(
            ServerConfiguration(
                port=args.port, listen_address=args.address, ephemeral_key=True, session_timeout=60.0, **common
            )
        )
    else:
        endpoint = Client(
            ClientConfiguration(
                prefer_ipc=False,
                auto_reconnect=True,
                reconnect_initial_delay=0.05,
                reconnect_max_delay=0.3,
                reconnect_timeout=60.0,
                remember_servers=False,
                session_key_path=args.key_path,
                **common,
            )
        )
    sessions: list[Session] = []

    def on_connect(conn: Connection) -> None:
        assert conn.session is not None
        say("connect", conn.session.id, conn.resumed)
        if not sessions:
            sessions.append(conn.session)

    endpoint.on_connect(on_connect)
    endpoint.on_disconnect(lambda conn: say("lost" if conn.lost else "closed", conn.close_reason or "-"))
    endpoint.on_message(Num, lambda conn, num: say("got", num.i))
    endpoint.on_error(lambda conn, exc: say("error", type(exc).__name__, exc))
    deadline = time.monotonic() + args.duration
    async with endpoint:
        if isinstance(endpoint, Server):
            await endpoint.bind()
            say("serving", endpoint.port)
        else:
            await endpoint.connect(args.address, args.port)
        while not sessions and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for i in range(args.send):
            await sessions[0].send(Num(i))
            say("sent", i)
            await asyncio.sleep(args.interval)
        if args.send:
            say("done sending")
        while time.monotonic() < deadline:
            await asyncio.sleep(0.1)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--role", choices=("server", "client"), required=True)
    parser.add_argument("--address", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--key-path")
    parser.add_argument("--send", type=int, default=0)
    parser.add_argument("--interval", type=float, default=0.01)
    parser.add_argument("--peer-timeout", type=float, default=1.5)
    parser.add_argument("--duration", type=float, default=60.0)
    asyncio.run(main(parser.parse_args()))
