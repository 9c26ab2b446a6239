"""The handshake under an attacker on the path and under a flood from several sources.

The on-path attacker is a UDP relay the test runs between client and server (the client connects to the relay's
port): it reads and rewrites the Aeron DATA frames of the handshake stream as they pass (flips the registration
hash, rewrites the reply port, holds messages back so others overtake them) and, with a driver of its own,
re-sends what it saw and forges answers to the client's reply port (plain REJECTs, answers sealed under other
keys). Every attack must fail, or end in a typed refusal with the drops counted; the same client then connects
once the relay behaves. The flood comes from loopback aliases 127.0.0.2..9: clients that answer the cookie and
then never finish.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import msgpack  # type: ignore[import-untyped]
import pytest
from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

from endpoint import Client, ClientRejectedError, ClientTimeoutError, RejectReason
from endpoint.config import HANDSHAKE_STREAM_ID, REPLY_STREAM_ID
from endpoint.handshake.protocol import MAGIC, Kind, ServerHandshake, unsealed_reject
from support.endpoints import (
    Ack,
    Move,
    RawHandshakePeer,
    client_config,
    raw_driver,
    running_server,
    server_config,
    wait_until,
)

pytestmark = pytest.mark.timeout(120)

_DATA_HEADER = struct.Struct("<iBBHiiiiq")
_DATA = 0x01
_ALIGN = 32


def _frames(datagram: bytes) -> list[tuple[int, int, int]]:
    """(offset, length, stream id) of each DATA frame with a payload in a datagram."""
    frames = []
    offset = 0
    while offset + _DATA_HEADER.size <= len(datagram):
        length, _version, _flags, kind, _term_offset, _session, stream, _term_id, _reserved = _DATA_HEADER.unpack_from(
            datagram, offset
        )
        if length <= 0:
            break
        if kind == _DATA and length > _DATA_HEADER.size:
            frames.append((offset, length, stream))
        offset += (length + _ALIGN - 1) // _ALIGN * _ALIGN
    return frames


def _hello(payload: bytes) -> list[Any] | None:
    try:
        fields = msgpack.unpackb(payload)
    except Exception:
        return None
    if type(fields) is list and len(fields) == 16 and fields[0] == MAGIC and fields[1] == Kind.HELLO:
        return fields
    return None


Mutation = Callable[[list[Any]], list[Any] | None]
"""Rewrites a HELLO's fields (same encoded length) or returns None to leave it."""


class Relay:
    """A UDP relay 127.0.0.1:port -> the server, one upstream socket per client source (so answers find their way
    back), seeing and rewriting the handshake stream's DATA frames."""

    def __init__(self, server_port: int) -> None:
        self.server = ("127.0.0.1", server_port)
        self.front = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.front.bind(("127.0.0.1", 0))
        self.front.setblocking(False)
        self.port = int(self.front.getsockname()[1])
        self.upstream: dict[tuple[str, int], socket.socket] = {}
        self.mutate: Mutation | None = None
        self.hold_cookie_hellos = 0.0
        self.seen: list[bytes] = []  # handshake payloads from clients, as sent
        self.sessions: list[int] = []  # the sessions of the handshake frames, as seen
        self.rewritten = 0
        self._tasks: list[asyncio.Task[None]] = []

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        loop.add_reader(self.front.fileno(), self._from_client)

    def _from_client(self) -> None:
        for _ in range(64):
            try:
                data, source = self.front.recvfrom(65536)
            except BlockingIOError:
                return
            up = self.upstream.get(source)
            if up is None:
                up = self.upstream[source] = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                up.bind(("127.0.0.1", 0))
                up.setblocking(False)
                asyncio.get_running_loop().add_reader(up.fileno(), self._from_server, up, source)
            delay = 0.0
            data = bytearray(data)
            for offset, length, stream in _frames(bytes(data)):
                if stream != HANDSHAKE_STREAM_ID:
                    continue
                start = offset + _DATA_HEADER.size
                payload = bytes(data[start : offset + length])
                self.seen.append(payload)
                self.sessions.append(int.from_bytes(data[offset + 12 : offset + 16], "little", signed=True))
                fields = _hello(payload)
                if fields is None:
                    continue
                if fields[11] is not None:
                    delay = self.hold_cookie_hellos
                if self.mutate is not None:
                    changed = self.mutate(list(fields))
                    if changed is not None:
                        encoded = msgpack.packb(changed)
                        assert len(encoded) == len(payload), "a rewrite must keep the frame's length"
                        data[start : offset + length] = encoded
                        self.rewritten += 1
            if delay:
                asyncio.get_running_loop().call_later(delay, self._send, up, bytes(data), self.server)
            else:
                self._send(up, bytes(data), self.server)

    def _from_server(self, up: socket.socket, client: tuple[str, int]) -> None:
        for _ in range(64):
            try:
                data = up.recv(65536)
            except BlockingIOError:
                return
            self._send(self.front, data, client)

    @staticmethod
    def _send(sock: socket.socket, data: bytes, to: tuple[str, int]) -> None:
        with contextlib.suppress(OSError):
            sock.sendto(data, to)

    def hellos(self) -> list[list[Any]]:
        return [fields for payload in self.seen if (fields := _hello(payload)) is not None]

    def close(self) -> None:
        loop = asyncio.get_running_loop()
        for sock in (self.front, *self.upstream.values()):
            with contextlib.suppress(Exception):
                loop.remove_reader(sock.fileno())
            sock.close()


@contextlib.asynccontextmanager
async def relay_to(server_port: int) -> AsyncIterator[Relay]:
    relay = Relay(server_port)
    await relay.start()
    try:
        yield relay
    finally:
        relay.close()


def quick_client(aeron_dir: Path, client_dir: Path, **overrides: Any) -> Client:
    settings: dict[str, Any] = {"handshake_timeout": 0.3, "connect_timeout": 3.0}
    settings.update(overrides)
    return Client(client_config("udp", aeron_dir, client_dir, **settings))


async def echo_once(server: Any, client: Client, relay_port: int, connect_within: float = 15.0) -> None:
    got: list[Ack] = []
    client.on_message(Ack, lambda c, m: got.append(m))

    if not getattr(server, "_test_echoes", False):
        server._test_echoes = True

        @server.on_message(Move)
        async def echo(conn: Any, msg: Move) -> None:
            await conn.send(Ack(msg.x))

    # The relay carries the handshake stream; our status messages go to the server's control port directly.
    connection = await asyncio.wait_for(
        client.connect("127.0.0.1", relay_port, control_port=server.control_port), connect_within
    )
    await connection.send(Move(3, 0))
    await wait_until(lambda: got, 5, what="the echo through the relay")
    assert got == [Ack(3)]


# ------------------------------------------------------------------------------------------------ on-path relay


async def test_a_flipped_registration_hash_ends_in_a_timeout_never_a_believed_rejection(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with running_server(server_config(aeron_dir, port)) as server, relay_to(port) as relay:

        def flip(fields: list[Any]) -> list[Any]:
            fields[5] = bytes(b ^ 0xFF for b in fields[5])
            return fields

        relay.mutate = flip
        client = quick_client(aeron_dir, client_dir)
        try:
            with pytest.raises(ClientTimeoutError):
                await client.connect("127.0.0.1", relay.port, control_port=server.control_port)
            assert relay.rewritten >= 2
            # The server answered the hash it saw (sealed), under a transcript the client does not share.
            assert client.handshake_stats.spoofed >= 1
            assert server.connections == []
            # An answered handshake waits for its DONE three handshake timeouts (the server's side of a client's
            # retries) after the last attempt's last packet; then it is gone.
            await wait_until(lambda: server._pending == {}, 3 * server.config.handshake_timeout + 10)
            relay.mutate = None
            await echo_once(server, client, relay.port)
        finally:
            await client.close()


async def test_a_rewritten_reply_port_gets_the_attacker_nothing(aeron_dir: Path, client_dir: Path, port: int) -> None:
    async with (
        running_server(server_config(aeron_dir, port, handshake_timeout=0.3)) as server,
        relay_to(port) as relay,
        raw_driver(None) as attacker_aeron,
    ):
        attacker = await RawHandshakePeer.open(attacker_aeron, "udp", port)
        try:

            def steal(fields: list[Any]) -> list[Any]:
                fields[6] = {"port": attacker.reply_port}
                return fields

            relay.mutate = steal
            client = quick_client(aeron_dir, client_dir)
            try:
                with pytest.raises(ClientTimeoutError):
                    await client.connect("127.0.0.1", relay.port, control_port=server.control_port)
                assert relay.rewritten >= 1
                # Answers go wherever the client route's own status messages come from (they name its session),
                # whatever port the HELLO names: the attacker's socket hears nothing, and the client cannot open
                # what it hears (the rewritten port is in the transcript).
                answers: list[list[Any]] = []
                attacker.reply.poll(lambda payload, header: answers.append(msgpack.unpackb(bytes(payload))), 64)
                assert answers == []
                assert client.handshake_stats.spoofed >= 1
                await wait_until(lambda: server._pending == {} and server._session_ids.live_count == 0, 10)
                assert server.connections == []
                relay.mutate = None
                await echo_once(server, client, relay.port)
            finally:
                await client.close()
        finally:
            await attacker.close()


async def test_forged_rejections_foreign_answers_replays_and_reordering_do_not_stop_a_client(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Once the client has pinned the server (a first clean connect), nothing forged is believed.

    (On the very first contact the client trusts whichever key answers first: see docs/security.md.)
    """
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        relay_to(port) as relay,
        raw_driver(None) as attacker_aeron,
    ):
        first = quick_client(aeron_dir, client_dir)
        try:
            await echo_once(server, first, relay.port)
        finally:
            await first.close()
        await wait_until(lambda: server.connections == [], 10)
        relay.seen.clear()
        attacker = await RawHandshakePeer.open(attacker_aeron, "udp", port)
        forger: Any = None
        rogue = ServerHandshake(
            X25519PrivateKey.generate(), handshake_timeout_ns=10**10, max_pending=8, max_pending_per_source=8
        )
        forged = 0
        client = quick_client(aeron_dir, client_dir, connect_timeout=8.0)
        try:
            # The HELLO carrying the cookie is held back: the forgeries overtake it.
            relay.hold_cookie_hellos = 0.4
            connecting = asyncio.create_task(echo_once(server, client, relay.port))
            try:
                await wait_until(lambda: any(f[11] is not None for f in relay.hellos()), 5, what="a cookie HELLO")
                hello = next(f for f in relay.hellos() if f[11] is not None)
                assert hello[9] == 1, "the pinned client speaks NK"
                key, reply_port = hello[3], hello[6]["port"]
                # On the path, the attacker sees the route's session (the handshake stream's frames carry it) and
                # publishes its forgeries to the client's reply port under it. The client's answer subscription
                # takes only that session, whose image is the server's answer route: the forger's SETUP is
                # ignored and nothing it offers gets through. (How the client treats forged answers that do
                # arrive: tests/unit/endpoint/test_handshake.py.)
                session = relay.sessions[-1]
                forger = await attacker_aeron.add_exclusive_publication_async(
                    f"aeron:udp?endpoint=127.0.0.1:{reply_port}|term-length=65536|session-id={session}",
                    REPLY_STREAM_ID,
                )
                # The rogue cannot read an NK HELLO; it answers one of its own making, relabelled.
                decoy = attacker.handshake(connect_key=key)
                assert rogue.receive(decoy.hello(time.time_ns()), "127.0.0.1", time.time_ns(), routable=True)
                lies = [
                    unsealed_reject(key, RejectReason.SERIALIZATION_MISMATCH, "forged"),
                    rogue.accept(key, {"connection_id": 1, "session_in": 1}, time.time_ns()),
                    msgpack.packb([MAGIC, Kind.SEALED_REJECT, key, b"\x00" * 40]),
                    msgpack.packb([MAGIC, Kind.DONE_ACK, key, b"\x00" * 30]),
                    msgpack.packb([MAGIC, Kind.COOKIE, key, b"\x01" * 24]),
                ]
                deadline = time.monotonic() + 1.0
                while time.monotonic() < deadline:
                    assert not forger.is_connected
                    await asyncio.sleep(0.01)
                for lie in lies:
                    assert forger.offer(lie) < 0
                    forged += 1
                await connecting
            finally:
                if not connecting.done():
                    connecting.cancel()
            assert len(server.connections) == 1
            connection_id = server.connections[0].id

            # Replays of everything the client sent, in reverse order, from the attacker's own stream.
            before = server.handshake_stats.received
            for payload in reversed(relay.seen):
                await attacker.send(payload)
            await wait_until(lambda: server.handshake_stats.received >= before + len(relay.seen), 5)
            assert [c.id for c in server.connections] == [connection_id]
            await wait_until(lambda: server._pending == {}, 10)
            assert server._session_ids.live_count == 4  # the connection's two, and its unreliable pair's
        finally:
            await client.close()
            if forger is not None:
                await forger.close_async()
            await attacker.close()
    assert forged == 5


# ------------------------------------------------------------------------------------------------ flood


async def test_a_legitimate_client_connects_while_several_sources_hold_half_open_handshakes(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Eight loopback aliases answer the cookie and never send DONE, as fast as they can; the caps are small.
    The lone client still connects; the half-open handshakes and answer routes stay within their caps."""
    config = server_config(aeron_dir, port, max_pending_handshakes=16, max_pending_per_source=4, max_answer_routes=32)
    sources = [f"127.0.0.{n}" for n in range(2, 10)]
    async with running_server(config) as server, raw_driver(None) as flood_aeron:
        peers = [await RawHandshakePeer.open(flood_aeron, "udp", port, local_ip=ip) for ip in sources]
        stop = asyncio.Event()
        highest = {"pending": 0, "routes": 0, "sources": 0}

        async def flood(peer: RawHandshakePeer) -> None:
            waiting: dict[int, Any] = {}

            def on_answer(payload: memoryview, header: Any) -> None:
                fields = msgpack.unpackb(bytes(payload))
                handshake = waiting.get(fields[2])
                if handshake is not None and fields[1] == Kind.COOKIE:
                    handshake.receive(bytes(payload))
                    peer.publication.offer(handshake.hello(time.time_ns()))

            while not stop.is_set():
                handshake = peer.handshake()
                waiting[handshake.connect_key] = handshake
                if len(waiting) > 64:
                    waiting.pop(next(iter(waiting)))
                peer.publication.offer(handshake.hello(time.time_ns()))
                peer.reply.poll(on_answer, 64)
                highest["pending"] = max(highest["pending"], len(server._pending), server._handshake.pending_count())
                highest["routes"] = max(highest["routes"], len(server._answer_routes))
                highest["sources"] = max(highest["sources"], len(server._handshake._per_source))
                await asyncio.sleep(0.002)

        flooding = [asyncio.create_task(flood(peer)) for peer in peers]
        try:
            # Generous bounds for a loaded machine: what is asserted is that the caps fill and the client gets in.
            await wait_until(lambda: server.handshake_stats.evicted > 0, 60, what="the flood filling the caps")
            client = quick_client(aeron_dir, client_dir, handshake_timeout=0.5, connect_timeout=45.0)
            try:
                await echo_once(server, client, port, connect_within=client.config.connect_timeout + 5)
            except ClientRejectedError as exc:  # pragma: no cover - what must not happen, said plainly
                pytest.fail(f"the legitimate client was turned away: {exc}")
            finally:
                await client.close()
            assert not any(task.done() for task in flooding), "the flood stopped before the client was in"
        finally:
            stop.set()
            await asyncio.gather(*flooding, return_exceptions=True)
            for peer in peers:
                await peer.close()
        # Everything the flood made the server hold is given back once its handshakes expire.
        await wait_until(lambda: server._pending == {} and server._handshake.pending_count() == 0, 30)
        await wait_until(lambda: server._session_ids.live_count == 0 and server._stream_ids.live_count == 0, 10)
        await wait_until(lambda: server._finished_reply == {} and server._answer_routes == {}, 30)
        stats = server.handshake_stats
        assert stats.evicted > 0
        assert highest["pending"] <= 16
        assert highest["routes"] <= 32
        assert highest["sources"] >= 4, "the flood came from several addresses"
        assert stats.challenged > 0


async def test_cookies_keep_coming_however_many_hellos_a_route_sent(aeron_dir: Path, port: int) -> None:
    """A cookie is stateless: once a client route's answer route reached it, every HELLO there gets its cookie.
    (Each cookie used to hold a kept answer for two handshake timeouts, so a flood filled the kept answers,
    4 x (pending + answer routes) of them, and then nobody got a cookie, a legitimate client included.)"""
    config = server_config(aeron_dir, port, max_pending_handshakes=1, max_answer_routes=1)
    limit = 4 * (1 + 1)
    async with running_server(config) as server, raw_driver(None) as aeron:
        peer = await RawHandshakePeer.open(aeron, "udp", port)
        cookies: set[int] = set()
        try:

            def on_answer(payload: memoryview, header: Any) -> None:
                fields = msgpack.unpackb(bytes(payload))
                if fields[1] == Kind.COOKIE:
                    cookies.add(fields[2])

            asked = [peer.handshake() for _ in range(3 * limit)]
            for handshake in asked:
                await peer.send(handshake.hello(time.time_ns()))
                # One at a time, each answered before the next goes: nothing here is a burst the caps may drop.
                await wait_until(
                    lambda: peer.reply.poll(on_answer, 16) >= 0 and handshake.connect_key in cookies,  # noqa: B023
                    10,
                    interval=0.001,
                    what=f"the cookie for HELLO {len(cookies) + 1}",
                )
            assert cookies == {h.connect_key for h in asked}
            assert server.handshake_stats.unanswered == 0
            assert len(server._finished_reply) <= limit
        finally:
            await peer.close()


async def test_a_client_evicted_for_load_is_told_server_busy_at_once(aeron_dir: Path, port: int) -> None:
    config = server_config(aeron_dir, port, max_pending_handshakes=1, max_pending_per_source=1)
    async with running_server(config) as server, raw_driver(None) as aeron:
        first = await RawHandshakePeer.open(aeron, "udp", port, local_ip="127.0.0.2")
        second = await RawHandshakePeer.open(aeron, "udp", port, local_ip="127.0.0.3")
        try:
            one = first.handshake()
            await first.send(one.hello(time.time_ns()))
            assert (await first.receive(one)).__class__.__name__ == "Accepted"
            two = second.handshake()
            await second.send(two.hello(time.time_ns()))
            assert (await second.receive(two)).__class__.__name__ == "Accepted"
            told = await first.receive(one)
            assert told.reason is RejectReason.SERVER_BUSY  # type: ignore[attr-defined]
            assert told.authenticated  # type: ignore[attr-defined]
            assert server.handshake_stats.evicted == 1
            assert list(server._pending) == [two.connect_key]
        finally:
            await first.close()
            await second.close()
