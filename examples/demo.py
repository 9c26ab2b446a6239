"""The endpoint demo: a server and two clients, one over IPC and one over UDP, on embedded drivers.

Run it with ``.venv/bin/python examples/demo.py``. In a few seconds it shows:

1. a server binding its port (UDP) and its IPC handshake stream on a driver it
   starts inside this process;
2. a client on the same driver directory connecting over IPC, and a client with
   a driver of its own connecting over UDP to 127.0.0.1 — each handshake sealed
   with an X25519 key exchange, the server's key pinned on first use;
3. typed messages (attrs classes registered on both sides) dispatched to the
   most specific listener, replies, a broadcast, and ping round-trip times;
4. a client whose registered classes differ being turned away with a clear reason;
5. graceful closes whose reason the other side sees, and nothing left behind.

The drivers' directories are under /dev/shm (or the temp dir) and removed at the end.
"""

from __future__ import annotations

import asyncio
import os
import socket
import sys
import tempfile
from pathlib import Path

import attrs

from endpoint import (
    Client,
    ClientConfiguration,
    ClientRejectedError,
    Connection,
    Serialization,
    Server,
    ServerConfiguration,
)

__all__ = ["main"]


@attrs.define
class Move:
    player: str
    x: float
    y: float


@attrs.define
class Dash(Move):
    """A subclass: the Dash listener is the most specific, so it gets these, not the Move one."""

    speed: float = 2.0


@attrs.define
class Ack:
    text: str


@attrs.define
class News:
    text: str


def messages(*extra: type) -> Serialization:
    serialization = Serialization()
    for cls in (Move, Dash, Ack, News, *extra):
        serialization.register(cls)
    return serialization


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


async def main() -> int:
    tag = f"{os.getpid()}-{os.urandom(3).hex()}"
    server_dir = base_dir() / f"endpoint-demo-server-{tag}"
    udp_client_dir = base_dir() / f"endpoint-demo-client-{tag}"
    port = free_udp_port()

    server = Server(ServerConfiguration(port=port, aeron_dir=server_dir, serialization=messages()))

    @server.on_connect
    def joined(conn: Connection) -> None:
        print(f"  [server] connection {conn.id} from {conn.remote_address} ({'IPC' if conn.is_ipc else 'UDP'})")

    @server.on_message(Move)
    async def moved(conn: Connection, move: Move) -> None:
        await conn.send(Ack(f"{move.player} moved to ({move.x:g}, {move.y:g})"))

    @server.on_message(Dash)
    async def dashed(conn: Connection, dash: Dash) -> None:
        await conn.send(Ack(f"{dash.player} dashed at speed {dash.speed:g}"))

    @server.on_disconnect
    def left(conn: Connection) -> None:
        print(f"  [server] connection {conn.id} closed: {conn.close_reason!r}")

    @server.on_error
    def failed(conn: Connection | None, error: BaseException) -> None:
        print(f"  [server] error on {conn}: {error!r}")

    print(f"1. server: binding UDP 127.0.0.1:{port} and IPC, embedded driver in {server_dir}")
    async with server:
        acks: list[str] = []
        news: list[str] = []
        got_all = asyncio.Event()

        def client(aeron_dir: Path, prefer_ipc: bool, name: str) -> Client:
            c = Client(ClientConfiguration(aeron_dir=aeron_dir, prefer_ipc=prefer_ipc, serialization=messages()))

            @c.on_message(Ack)
            def acked(conn: Connection, ack: Ack) -> None:
                acks.append(ack.text)
                print(f"  [{name}] ack: {ack.text}")
                if len(acks) == 4:
                    got_all.set()

            @c.on_message(News)
            def heard(conn: Connection, item: News) -> None:
                news.append(item.text)
                print(f"  [{name}] news: {item.text}")

            @c.on_disconnect
            def closed(conn: Connection) -> None:
                print(f"  [{name}] closed: {conn.close_reason!r} (by the server: {conn.closed_by_peer})")

            return c

        ipc_client = client(server_dir, True, "ipc client")
        udp_client = client(udp_client_dir, False, "udp client")
        async with ipc_client, udp_client:
            print("2. clients connecting (handshakes sealed with X25519 + AES-GCM)")
            ipc_conn = await ipc_client.connect("127.0.0.1", port)
            udp_conn = await udp_client.connect("127.0.0.1", port)
            print(f"  ipc client: connection {ipc_conn.id} over {'IPC' if ipc_conn.is_ipc else 'UDP'}")
            print(f"  udp client: connection {udp_conn.id} over {'IPC' if udp_conn.is_ipc else 'UDP'}")

            print("3. messages, a broadcast and pings")
            await ipc_conn.send(Move("ada", 3, 4))
            await ipc_conn.send(Dash("ada", 5, 6, speed=3))
            await udp_conn.send(Move("bob", 1, 2))
            await udp_conn.send(Dash("bob", 7, 8))
            await asyncio.wait_for(got_all.wait(), 10)
            print(f"  server broadcast reached {server.broadcast(News('round two starts'))} connections")
            for conn, name in ((ipc_conn, "ipc"), (udp_conn, "udp")):
                rtts = sorted([await conn.ping() for _ in range(20)])
                print(f"  {name} ping: median {rtts[10] * 1e6:.0f} µs over 20 round trips")
            for _ in range(200):
                if len(news) == 2:
                    break
                await asyncio.sleep(0.01)

            print("4. a client with different message classes is turned away")

            @attrs.define
            class Stranger:
                note: str

            odd = Client(ClientConfiguration(aeron_dir=server_dir, serialization=messages(Stranger)))
            async with odd:
                try:
                    await odd.connect("127.0.0.1", port)
                    print("  ... unexpectedly accepted")
                except ClientRejectedError as exc:
                    print(f"  rejected: {exc.reason.name}")

            print("5. closing")
            await ipc_conn.close("ada logs off")
            server_side = server.connections
            print(f"  server now has {len(server_side)} connection(s)")
    await asyncio.sleep(0)
    leftovers = [d for d in (server_dir, udp_client_dir) if d.exists()]
    print("driver directories removed" if not leftovers else f"left behind: {leftovers}")
    ok = len(acks) == 4 and len(news) == 2 and not leftovers
    print("demo complete: all acks and news delivered" if ok else "demo incomplete")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
