"""The endpoint demo: a server and two clients, one over IPC and one over UDP, on embedded drivers.

Run it with ``.venv/bin/python examples/demo.py``. In a few seconds it shows:

1. a server binding its port (UDP) and its IPC handshake stream on a driver it
   starts inside this process;
2. a client on the same driver directory connecting over IPC, and a client with
   a driver of its own connecting over UDP to 127.0.0.1 — each handshake sealed
   with an X25519 key exchange, the server's key pinned on first use;
3. typed messages (attrs classes registered on both sides) dispatched to the
   most specific listener, replies, a broadcast, and ping round-trip times;
4. a client whose message classes cannot talk with the server's (its ``Move`` has a
   field the server's lacks, with no default) turned away, naming the class and field;
5. the IPC client's stream recorded by an archive on the server's driver, and the
   recording read back on Apache Spark (an embedded ``local[2]`` session) to count
   positions per player (skipped, saying why, when pyspark or a Java 17+ is missing);
6. graceful closes whose reason the other side sees, and nothing left behind.

The drivers' directories are under /dev/shm (or the temp dir) and removed at the end.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import attrs

import endpoint
from endpoint import (
    Client,
    ClientConfiguration,
    ClientRejectedError,
    Connection,
    SchemaMismatchError,
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


@attrs.define
class Position:
    """A player's position, streamed without an answer (the part step 5 records)."""

    player: str
    x: float
    y: float


def messages(*extra: type) -> Serialization:
    serialization = Serialization()
    for cls in (Move, Dash, Ack, News, Position, *extra):
        serialization.register(cls)
    return serialization


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def base_dir() -> Path:
    shm = Path("/dev/shm")
    return shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(tempfile.gettempdir())


def spark_missing() -> str | None:
    """Why step 5 cannot run here, or None."""
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return "pyspark is not installed (pip install -e '.[spark]')"
    java = shutil.which("java")
    if java is None:
        return "no java on PATH (Spark needs Java 17 or later)"
    try:
        out = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30).stderr
    except (OSError, subprocess.SubprocessError) as exc:
        return f"java -version failed: {exc}"
    found = re.search(r'version "(\d+)', out)
    if found is None or int(found.group(1)) < 17:
        return f"Spark needs Java 17 or later; {java} says {out.splitlines()[0] if out else 'nothing'}"
    return None


def spark_positions_per_player(archive_dir: Path, stream_id: int) -> list[tuple[str, int, float]]:
    """(player, positions, mean x) from the recording, computed by Spark."""
    from pyspark.sql import functions as F

    from endpoint.pipeline import local_session

    spark = local_session("endpoint-demo", "local[2]", python_path=[Path(__file__).resolve().parent])
    try:
        rows = (
            spark.read.format("endpoint-archive")
            .option("stream_id", stream_id)
            .option("serialization", "demo:messages")
            .load(str(archive_dir))
            .where(F.col("message_type") == "Position")
            .select(F.from_json("message", "player string, x double, y double").alias("p"))
            .groupBy("p.player")
            .agg(F.count("*").alias("positions"), F.avg("p.x").alias("mean_x"))
            .orderBy("player")
            .collect()
        )
        return [(r.player, r.positions, r.mean_x) for r in rows]
    finally:
        spark.stop()


async def record_and_aggregate(server_dir: Path, archive_dir: Path, conn: Connection, received: list[Position]) -> bool:
    """Step 5: record ``conn``'s stream to the server, send positions on it, aggregate them on Spark."""
    from driver.archive import Archive

    why_not = spark_missing()
    if why_not is not None:
        print(f"  skipped: {why_not}")
        return True
    channel, stream_id = conn.outbound
    with Archive.launch(aeron_dir=server_dir, archive_dir=archive_dir, segment_file_length="1m") as archive:
        archive.start_recording(channel, stream_id)
        for _ in range(500):
            if archive.recordings():
                break
            await asyncio.sleep(0.01)
        for i in range(300):
            await conn.send(Position(("ada", "bob", "eve")[i % 3], float(i % 10), float(i)))
        for _ in range(1000):
            if len(received) == 300:
                break
            await asyncio.sleep(0.01)
        archive.stop_recording(channel, stream_id)
        recording = archive.recordings()[-1]
        print(
            f"  recorded {channel} stream {stream_id}: recording {recording.recording_id}, "
            f"{recording.stop_position - recording.start_position} bytes"
        )
    rows = await asyncio.to_thread(spark_positions_per_player, archive_dir, stream_id)
    for player, count, mean_x in rows:
        print(f"  [spark] {player}: {count} positions, mean x {mean_x:.2f}")
    return sum(count for _, count, _ in rows) == 300 and len(received) == 300


async def main() -> int:
    tag = f"{os.getpid()}-{os.urandom(3).hex()}"
    server_dir = base_dir() / f"endpoint-demo-server-{tag}"
    udp_client_dir = base_dir() / f"endpoint-demo-client-{tag}"
    archive_dir = base_dir() / f"endpoint-demo-archive-{tag}"
    positions: list[Position] = []
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

    @server.on_message(Position)
    def positioned(conn: Connection, position: Position) -> None:
        positions.append(position)

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

            print("4. a client whose message classes cannot talk with the server's is turned away")

            @attrs.define
            class MoveWithHealth:  # under Move's type id, with a field the server's Move lacks and no default
                player: str
                x: float
                y: float
                health: int

            odd_messages = Serialization()
            odd_messages.register(MoveWithHealth, type_id=1)
            odd = Client(ClientConfiguration(aeron_dir=server_dir, serialization=odd_messages))
            async with odd:
                try:
                    await odd.connect("127.0.0.1", port)
                    print("  ... unexpectedly accepted")
                except SchemaMismatchError as exc:
                    print(f"  rejected: {exc.reason.name} ({exc.class_name}, field {exc.field!r})")
                except ClientRejectedError as exc:
                    print(f"  rejected: {exc.reason.name}")

            print("5. recording the IPC client's stream with an archive, then reading it back on Spark")
            recorded = await record_and_aggregate(server_dir, archive_dir, ipc_conn, positions)
            shutil.rmtree(archive_dir, ignore_errors=True)

            print("6. closing")
            await ipc_conn.close("ada logs off")
            server_side = server.connections
            print(f"  server now has {len(server_side)} connection(s)")
    await asyncio.sleep(0)
    leftovers = [d for d in (server_dir, udp_client_dir) if d.exists()]
    print("driver directories removed" if not leftovers else f"left behind: {leftovers}")
    ok = len(acks) == 4 and len(news) == 2 and recorded and not leftovers
    print("demo complete: all acks and news delivered" if ok else "demo incomplete")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(endpoint.run(main))
