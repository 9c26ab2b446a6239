"""One end of a connection through the NAT lab, in its own process (run inside a network namespace with
``ip netns exec``), with an embedded driver on its own directory.

``server``: echoes every Num with an Ack; prints ``serving <port> <control port>``, ``connected <id> <remote>``,
``disconnected <id>``. ``client``: connects with auto reconnect and sends a Num every 50 ms; prints
``connected <id>``, ``ack <seq>`` for every Ack, ``lost <reason>``, ``reconnecting <attempt>``,
``reconnected <id>``. Both exit after ``--duration`` seconds; every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # tests/, for support.endpoints

from endpoint import Client, ClientConfiguration, Connection, ConnectionClosedError, Server, ServerConfiguration
from support.endpoints import Ack, Num, make_serialization


def say(*parts: object) -> None:
    print(*parts, flush=True)


async def serve(args: argparse.Namespace) -> None:
    server = Server(
        ServerConfiguration(
            port=args.port,
            listen_address=args.address,
            aeron_dir=args.aeron_dir,
            serialization=make_serialization(),
            enable_ipc=False,
            ephemeral_key=True,
            ping_interval=args.ping_interval,
            peer_timeout=args.peer_timeout,
            close_timeout=0.5,
        )
    )

    async def echo(conn: Connection, num: Num) -> None:
        with contextlib.suppress(ConnectionClosedError):
            await conn.send(Ack(num.i))

    server.on_message(Num, echo)
    server.on_connect(lambda conn: say("connected", conn.id, conn.remote_address))
    server.on_disconnect(lambda conn: say("disconnected", conn.id))
    async with server:
        say("serving", server.port, server.control_port)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(args.duration):
                await server.serve_forever()


async def play(args: argparse.Namespace) -> None:
    client = Client(
        ClientConfiguration(
            aeron_dir=args.aeron_dir,
            serialization=make_serialization(),
            prefer_ipc=False,
            auto_reconnect=True,
            remember_servers=False,
            ping_interval=args.ping_interval,
            peer_timeout=args.peer_timeout,
            handshake_timeout=0.5,
            connect_timeout=args.duration,
            reconnect_max_delay=0.5,
            reconnect_timeout=args.duration,
            close_timeout=0.5,
        )
    )
    client.on_message(Ack, lambda conn, ack: say("ack", ack.seq))
    client.on_connect(lambda conn: say("connected", conn.id))
    client.on_reconnecting(lambda event: say("reconnecting", event.attempt))
    client.on_reconnected(lambda conn: say("reconnected", conn.id))
    client.on_disconnect(lambda conn: say("lost" if conn.lost else "closed", str(conn.close_reason).replace(" ", "_")))
    deadline = time.monotonic() + args.duration
    async with client:
        await client.connect(args.address, args.port)
        seq = 0
        while time.monotonic() < deadline:
            connection = client.connection
            if connection is not None and not connection.is_closed:
                seq += 1
                with contextlib.suppress(ConnectionClosedError):
                    connection.send_nowait(Num(seq))
            await asyncio.sleep(0.05)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["server", "client"])
    parser.add_argument("--address", required=True, help="server: to listen on; client: the server's")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--aeron-dir", required=True)
    parser.add_argument("--ping-interval", type=float, default=0.5)
    parser.add_argument("--peer-timeout", type=float, default=3.0)
    parser.add_argument("--duration", type=float, default=60.0)
    arguments = parser.parse_args()
    asyncio.run(serve(arguments) if arguments.role == "server" else play(arguments))
    say("exit")
