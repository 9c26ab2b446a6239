"""Sealed connections on real drivers, over IPC and UDP: what they carry, what the logs hold, and what an attacker
who writes into the log (IPC) or flips a byte on the wire (UDP, through a relay the test runs) gets: a closed
connection with a typed reason, counted, never a forged message delivered.

The plaintext checks read every byte each end receives through a subscription of the test's own on the same
channel (what the driver's shared memory carries, or the wire); an unsealed connection sending the same is the
control that shows the check can fail.
"""

from __future__ import annotations

import asyncio
import contextlib
import selectors
import socket
import struct
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from driver.logbuffer.frame import HEADER_LENGTH
from endpoint import Client, Connection, SealError, Server
from endpoint.config import HANDSHAKE_STREAM_ID, REPLY_STREAM_ID
from endpoint.connection.sealing import OVERHEAD
from endpoint.errors import SEAL_FAILED
from endpoint.streaming import IncomingStream
from support.endpoints import (
    TRANSPORTS,
    Blob,
    Chat,
    client_config,
    connected_client,
    raw_driver,
    running_server,
    server_config,
    wait_until,
)

BOUND = 15.0
MARKER = "plaintext-marker-7f3a9c"
MARKER_BYTES = MARKER.encode()
ECHO = 3


class Echo:
    """Exposed by both ends: answers with what it is given, marked with who answered."""

    def __init__(self, side: str) -> None:
        self.side = side

    async def echo(self, text: str) -> str:
        await asyncio.sleep(0)
        return f"{self.side}:{text}"


@attrs.define
class Side:
    """What one end's listeners saw."""

    chats: list[str] = attrs.field(factory=list)
    streams: list[bytes] = attrs.field(factory=list)
    errors: list[tuple[Connection | None, BaseException]] = attrs.field(factory=list)
    disconnected: list[Connection] = attrs.field(factory=list)

    def listen(self, endpoint: Server | Client, side: str) -> None:
        endpoint.on_message(Chat, lambda c, m: self.chats.append(m.text))
        endpoint.on_error(lambda c, e: self.errors.append((c, e)))
        endpoint.on_disconnect(self.disconnected.append)
        endpoint.rpc.expose(Echo(side), ECHO)

        async def on_stream(conn: Connection, stream: IncomingStream) -> None:
            self.streams.append(await stream.read())

        endpoint.on_stream(on_stream)


@attrs.define
class Pair:
    server: Server
    client: Client
    conn: Connection
    server_conn: Connection
    at_server: Side
    at_client: Side


@asynccontextmanager
async def open_pair(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    *,
    server: dict[str, Any] | None = None,
    client: dict[str, Any] | None = None,
    connect_port: int | None = None,
) -> AsyncIterator[Pair]:
    """``connect_port``: where the client dials (a relay in front of the server's ``port``)."""
    at_server, at_client = Side(), Side()
    async with running_server(server_config(aeron_dir, port, **(server or {}))) as srv:
        at_server.listen(srv, "server")
        config = client_config(transport, aeron_dir, client_dir, **(client or {}))
        # Through a relay (which carries what the client sends), the client's status messages still go to the
        # server's control port.
        async with connected_client(config, connect_port or port, control_port=port + 1) as (cli, conn):
            at_client.listen(cli, "client")
            server_conn = await wait_until(
                lambda: next((c for c in srv.connections if c.id == conn.id), None), BOUND, what="server connection"
            )
            yield Pair(srv, cli, conn, server_conn, at_server, at_client)


async def exchange_everything(pair: Pair, payload: bytes) -> None:
    """A message, a remote call and a stream each way, each carrying the marker; all must arrive intact."""
    async with asyncio.timeout(BOUND):
        await pair.conn.send(Chat(f"up {MARKER}"))
        await pair.server_conn.send(Chat(f"down {MARKER}"))
        assert await pair.conn.rpc.proxy(Echo, ECHO).echo(f"call {MARKER}") == f"server:call {MARKER}"
        assert await pair.server_conn.rpc.proxy(Echo, ECHO).echo(f"back {MARKER}") == f"client:back {MARKER}"
        assert await pair.conn.send_stream(payload, name="up") == len(payload)
        assert await pair.server_conn.send_stream(payload, name="down") == len(payload)
    await wait_until(lambda: pair.at_server.chats and pair.at_client.chats, BOUND, what="both chats")
    await wait_until(lambda: pair.at_server.streams and pair.at_client.streams, BOUND, what="both streams")
    assert pair.at_server.chats == [f"up {MARKER}"]
    assert pair.at_client.chats == [f"down {MARKER}"]
    assert pair.at_server.streams == [payload]
    assert pair.at_client.streams == [payload]


def log_bytes(connection: Connection) -> bytes:
    """The whole log file this end's publication writes (terms and metadata)."""
    return Path(connection._pub.log_buffers.path).read_bytes()


@asynccontextmanager
async def tapped(aeron_dir: Path, connection: Connection) -> AsyncIterator[bytearray]:
    """Every payload byte of what the peer sends ``connection``, read by a subscription of its own on the same
    channel and stream of the same driver (what anyone who can map the driver's files sees)."""
    seen = bytearray()
    channel, stream_id = connection.inbound
    async with raw_driver(aeron_dir) as aeron:
        tap = await aeron.add_subscription_async(channel, stream_id)

        def on_fragment(payload: memoryview, header: object) -> None:
            seen.extend(payload)

        async def poll() -> None:
            while True:
                if not tap.poll(on_fragment, 64):
                    await asyncio.sleep(0.001)

        await wait_until(lambda: tap.images, BOUND, what="the tap's image")
        task = asyncio.get_running_loop().create_task(poll())
        try:
            yield seen
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await tap.close_async()


def stream_payload() -> bytes:
    # Within one term each way (64 KiB logs), so the log files still hold every frame when they are read.
    return (MARKER_BYTES + b"-" + bytes(range(256))) * 40


# ------------------------------------------------------------------------------------------------ carrying


@pytest.mark.parametrize("sealed", [False, True], ids=["plain", "sealed"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_sealed_connection_carries_everything_and_no_plaintext(
    transport: str, sealed: bool, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, client={"sealed": sealed}) as pair:
        assert pair.conn.sealed is sealed
        assert pair.server_conn.sealed is sealed
        client_driver = aeron_dir if transport == "ipc" else client_dir
        async with tapped(aeron_dir, pair.server_conn) as up, tapped(client_driver, pair.conn) as down:
            await exchange_everything(pair, stream_payload())
            await wait_until(lambda: MARKER_BYTES in up and MARKER_BYTES in down if not sealed else True, BOUND)
            await wait_until(lambda: len(up) > len(stream_payload()) and len(down) > len(stream_payload()), BOUND)
        if sealed:
            assert MARKER_BYTES not in up, "client->server log holds plaintext"
            assert MARKER_BYTES not in down, "server->client log holds plaintext"
        else:  # the control: the same traffic unsealed shows the marker, so the check above can fail
            assert MARKER_BYTES in up
            assert MARKER_BYTES in down
        assert pair.at_server.errors == []
        assert pair.at_client.errors == []
        assert pair.server.seal_failures == pair.client.seal_failures == 0


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_sealed_server_seals_clients_that_did_not_ask(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={"sealed": True}) as pair:
        assert pair.client.config.sealed is False
        assert pair.conn.sealed
        assert pair.server_conn.sealed
        client_driver = aeron_dir if transport == "ipc" else client_dir
        async with tapped(aeron_dir, pair.server_conn) as up, tapped(client_driver, pair.conn) as down:
            await exchange_everything(pair, stream_payload())
            await wait_until(lambda: len(up) > len(stream_payload()) and len(down) > len(stream_payload()), BOUND)
        assert MARKER_BYTES not in up
        assert MARKER_BYTES not in down


# ------------------------------------------------------------------------------------------------ attacks


async def assert_closed_for_seal_failure(pair: Pair) -> None:
    """The server closed the connection for a message that did not open, counted it, told on_error (with the
    connection) and on_disconnect; the client heard why."""
    await wait_until(lambda: pair.server_conn.is_closed, BOUND, what="server closed the connection")
    assert pair.server_conn.close_reason.startswith(SEAL_FAILED), pair.server_conn.close_reason
    assert pair.server_conn.seal_failures == 1
    assert pair.server.seal_failures == 1
    errors = [(c, e) for c, e in pair.at_server.errors if isinstance(e, SealError)]
    assert len(errors) == 1, pair.at_server.errors
    assert errors[0][0] is pair.server_conn
    await wait_until(lambda: pair.server_conn in pair.at_server.disconnected, BOUND, what="server on_disconnect")
    await wait_until(lambda: pair.conn.is_closed, BOUND, what="client closed")
    assert pair.conn.close_reason.startswith(SEAL_FAILED), pair.conn.close_reason
    assert pair.at_server.chats == [f"up {MARKER}"], "nothing forged or replayed was delivered"


async def test_a_forged_frame_in_the_log_closes_the_connection(aeron_dir: Path, client_dir: Path, port: int) -> None:
    """IPC: anyone who can write the driver's shared memory can append a frame to the log the server reads (here
    through the client's own log writer, past the seal): it does not open, and the connection closes."""
    async with open_pair("ipc", aeron_dir, client_dir, port, client={"sealed": True}) as pair:
        async with asyncio.timeout(BOUND):
            await pair.conn.send(Chat(f"up {MARKER}"))
        await wait_until(lambda: pair.at_server.chats, BOUND, what="the genuine message")
        forged = bytes(8) + pair.server.config.serialization.encode(Chat("forged")) + bytes(16)
        assert pair.conn._pub.offer(forged) > 0
        await assert_closed_for_seal_failure(pair)


async def test_a_replayed_message_is_refused(aeron_dir: Path, client_dir: Path, port: int) -> None:
    """IPC: a copy of a genuine sealed message, read from the log and appended again, opens no more than once."""
    async with open_pair("ipc", aeron_dir, client_dir, port, client={"sealed": True}) as pair:
        publication = pair.conn._pub
        async with asyncio.timeout(BOUND):
            start = publication.position
            await pair.conn.send(Chat(f"up {MARKER}"))
            end = publication.position
        await wait_until(lambda: pair.at_server.chats, BOUND, what="the genuine message")
        term_length = publication.term_buffer_length
        log = log_bytes(pair.conn)
        partition = (start // term_length) % 3  # terms come first in the file; fine while in the first ones
        offset = partition * term_length + start % term_length
        (frame_length,) = struct.unpack_from("<i", log, offset)
        assert offset + frame_length <= len(log)
        assert frame_length <= end - start
        copy = log[offset + HEADER_LENGTH : offset + frame_length]
        assert publication.offer(copy) > 0
        await assert_closed_for_seal_failure(pair)
        assert "already received" in pair.server_conn.close_reason


class Relay:
    """A UDP relay between the client and the server's port (client -> relay -> server, and the server's status
    messages back): records what passes and, when armed, flips one byte of the next data frame's payload."""

    def __init__(self, server_port: int) -> None:
        self.server = ("127.0.0.1", server_port)
        self.listen = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.listen.bind(("127.0.0.1", 0))
        self.port: int = self.listen.getsockname()[1]
        self.upstream: dict[tuple[str, int], socket.socket] = {}
        self.client_of: dict[socket.socket, tuple[str, int]] = {}
        self.seen = bytearray()
        self.flip_next = threading.Event()
        self.flipped = 0
        self._stop = threading.Event()
        self._selector = selectors.DefaultSelector()
        self._selector.register(self.listen, selectors.EVENT_READ)
        self._thread = threading.Thread(target=self._run, name="udp relay", daemon=True)

    def __enter__(self) -> Relay:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)
        self._selector.close()
        for sock in (self.listen, *self.upstream.values()):
            sock.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            for key, _ in self._selector.select(0.05):
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data, source = sock.recvfrom(65536)
                except OSError:
                    continue
                if sock is self.listen:
                    self._to_server(bytearray(data), source)
                else:
                    self.listen.sendto(data, self.client_of[sock])

    def _to_server(self, data: bytearray, source: tuple[str, int]) -> None:
        up = self.upstream.get(source)
        if up is None:
            up = self.upstream[source] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            up.bind(("127.0.0.1", 0))
            self.client_of[up] = source
            self._selector.register(up, selectors.EVENT_READ)
        if len(self.seen) < 1 << 22:
            self.seen += data
        if self.flip_next.is_set() and self._flip(data):
            self.flip_next.clear()
            self.flipped += 1
        up.sendto(data, self.server)

    @staticmethod
    def _flip(data: bytearray) -> bool:
        """Flip the last payload byte of the first data frame of a connection's stream in ``data``."""
        offset = 0
        while offset + HEADER_LENGTH <= len(data):
            frame_length, frame_type, stream_id = (
                struct.unpack_from("<i", data, offset)[0],
                struct.unpack_from("<H", data, offset + 6)[0],
                struct.unpack_from("<i", data, offset + 16)[0],
            )
            if frame_length <= 0:
                return False
            if (
                frame_type == 1
                and frame_length > HEADER_LENGTH
                and stream_id not in (HANDSHAKE_STREAM_ID, REPLY_STREAM_ID)
                and offset + frame_length <= len(data)
            ):
                data[offset + frame_length - 1] ^= 0x01
                return True
            offset += (frame_length + 31) & ~31
        return False


async def test_a_byte_flipped_on_the_wire_closes_the_connection(aeron_dir: Path, client_dir: Path, port: int) -> None:
    """UDP through an on-path relay: the plaintext never crosses it, and a flipped byte in a data frame's payload
    (which Aeron has no checksum against) does not open: the connection closes, counted, with its reason."""
    with Relay(port) as relay:
        async with open_pair(
            "udp", aeron_dir, client_dir, port, client={"sealed": True}, connect_port=relay.port
        ) as pair:
            async with asyncio.timeout(BOUND):
                await pair.conn.send(Chat(f"up {MARKER}"))
            await wait_until(lambda: pair.at_server.chats, BOUND, what="the genuine message")
            assert len(relay.seen) > 0
            assert MARKER_BYTES not in relay.seen
            relay.flip_next.set()
            async with asyncio.timeout(BOUND):
                await pair.conn.send(Chat("tampered on the way"))
            await wait_until(lambda: relay.flipped, BOUND, what="a data frame flipped")
            await assert_closed_for_seal_failure(pair)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_sealed_keepalives_pings_large_messages_and_a_graceful_close(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Liveness runs on sealed keepalives (an idle connection outlives several peer timeouts), a ping is answered,
    a message larger than one offer arrives whole, and the sealed goodbye carries its reason."""
    timing = {"ping_interval": 0.2, "peer_timeout": 1.5}
    blobs: list[bytes] = []
    async with open_pair(
        transport, aeron_dir, client_dir, port, server={"sealed": True, **timing}, client=timing
    ) as pair:
        pair.server.on_message(Blob, lambda c, m: blobs.append(m.data))
        assert pair.conn.max_message_length == pair.conn._pub.max_message_length - OVERHEAD
        await asyncio.sleep(3.5)  # over two peer timeouts of silence but for the keepalives
        assert not pair.conn.is_closed
        assert not pair.server_conn.is_closed
        async with asyncio.timeout(BOUND):
            assert await pair.conn.ping() > 0
            big = bytes(range(256)) * (pair.conn.max_message_length // 64)
            await pair.conn.send(Blob(big))
        await wait_until(lambda: blobs, BOUND, what="the large message")
        assert blobs == [big]
        async with asyncio.timeout(BOUND):
            await pair.conn.close("bye")
        await wait_until(lambda: pair.server_conn in pair.at_server.disconnected, BOUND, what="server on_disconnect")
        assert pair.server_conn.close_reason == "bye"
        assert pair.server_conn.closed_by_peer
        assert pair.server.seal_failures == pair.client.seal_failures == 0
        assert pair.at_server.errors == []
