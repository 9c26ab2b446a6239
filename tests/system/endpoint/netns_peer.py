"""A server and a client in one process, run inside a network namespace by test_restart.py.

Prints one line per event (flushed) so the test can follow: ``connected``,
``received <n>``, ``critical <side>``, ``lost``, ``rebound``, ``reconnecting <attempt>``, ``reconnected``. Exits after
``--duration`` seconds; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

import attrs

from endpoint import (
    Client,
    ClientConfiguration,
    ConnectionClosedError,
    CriticalDriverError,
    Serialization,
    Server,
    ServerConfiguration,
)


@attrs.define
class Note:
    seq: int


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def main(args: argparse.Namespace) -> None:
    def serialization() -> Serialization:
        s = Serialization()
        s.register(Note)
        return s

    common = {"driver_timeout": 5.0, "handshake_timeout": 0.5, "connect_timeout": 2.0}
    server = Server(
        ServerConfiguration(
            port=args.port,
            listen_address=args.address,
            aeron_dir=args.aeron_dir + "-server",
            serialization=serialization(),
            enable_ipc=False,
            **common,  # type: ignore[arg-type]
        )
    )
    client = Client(
        ClientConfiguration(
            aeron_dir=args.aeron_dir + "-client",
            serialization=serialization(),
            prefer_ipc=False,
            auto_reconnect=True,
            **common,  # type: ignore[arg-type]
        )
    )
    received = 0

    def on_note(conn: object, note: Note) -> None:
        nonlocal received
        received += 1
        if received % 10 == 0:
            say("received", received)

    server.on_message(Note, on_note)
    server.on_error(lambda conn, err: isinstance(err, CriticalDriverError) and say("critical server", err))
    client.on_error(lambda conn, err: isinstance(err, CriticalDriverError) and say("critical client", err))
    client.on_connect(lambda conn: say("connected", conn.id))
    client.on_reconnecting(lambda event: say("reconnecting", event.attempt))
    client.on_reconnected(lambda conn: say("reconnected", conn.id))
    client.on_disconnect(lambda conn: say("lost" if conn.lost else "closed", conn.close_reason))
    deadline = time.monotonic() + args.duration
    async with server, client:
        await client.connect(args.address, args.port)
        seq = 0
        restarts = 0
        while time.monotonic() < deadline:
            connection = client.connection
            if connection is not None and not connection.is_closed:
                seq += 1
                try:
                    connection.send_nowait(Note(seq))
                except ConnectionClosedError:
                    pass  # lost between the check and the send (the driver just failed): the next one reconnects
            if server.restarts != restarts and server._bound:
                restarts = server.restarts
                say("rebound", restarts)
            await asyncio.sleep(0.05)
    say("exit")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--duration", type=float, default=60.0)
    asyncio.run(main(parser.parse_args()))
    sys.exit(0)
