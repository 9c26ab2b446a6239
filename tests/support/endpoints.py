"""Helpers for system tests of the end point layer: message classes, configurations, bounded waits, raw peers.

Server and client run in the test's own process and event loop, on real drivers (embedded, one per Aeron
directory), real mmap'd logs and real UDP sockets on 127.0.0.1. Every wait here is bounded.
"""

from __future__ import annotations

import asyncio
import secrets
import shutil
import time
from collections.abc import AsyncIterator, Callable, Iterable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs

from driver.client.aeron import Aeron
from driver.client.publication import ExclusivePublication
from driver.client.subscription import Subscription
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from endpoint import (
    Client,
    ClientConfiguration,
    Connection,
    Serialization,
    Server,
    ServerConfiguration,
)
from endpoint.config import (
    HANDSHAKE_STREAM_ID,
    IPC_HANDSHAKE_STREAM_BASE,
    IPC_REPLY_STREAM_BASE,
    REPLY_STREAM_ID,
)
from endpoint.handshake.protocol import ClientHandshake, CookieReceived
from endpoint.handshake.routes import answer_session
from endpoint.messages import register_internal_messages
from support.ports import distinct_free_udp_ports, free_server_port, free_udp_port

__all__ = [
    "TRANSPORTS",
    "Ack",
    "Blob",
    "Chat",
    "Events",
    "FastMove",
    "Move",
    "Num",
    "RawHandshakePeer",
    "Unlisted",
    "client_config",
    "distinct_free_udp_ports",
    "free_server_port",
    "free_udp_port",
    "make_serialization",
    "raw_driver",
    "registration_hash",
    "running_server",
    "server_config",
    "wait_until",
]

TRANSPORTS = ("ipc", "udp")
"""``ipc``: the client shares the server's Aeron directory; ``udp``: it has its own and ``prefer_ipc=False``."""


# ------------------------------------------------------------------------------------------------ messages


@attrs.define
class Move:
    x: int
    y: int


@attrs.define
class FastMove(Move):
    speed: int = 0


@attrs.define
class Ack:
    seq: int


@attrs.define
class Num:
    i: int


@attrs.define
class Chat:
    text: str


@attrs.define
class Blob:
    data: bytes


@attrs.define
class Unlisted:
    """Registered on both sides, but no test registers a listener for it (except a catch-all)."""

    note: str


MESSAGE_CLASSES: tuple[type, ...] = (Move, FastMove, Ack, Num, Chat, Blob, Unlisted)


def make_serialization(extra: Iterable[type] = ()) -> Serialization:
    """A fresh Serialization with the test classes under fixed ids (plus ``extra`` after them).

    Each end point needs its own instance: an end point freezes and extends it (internal messages).
    """
    ser = Serialization()
    for type_id, cls in enumerate((*MESSAGE_CLASSES, *extra), start=1):
        ser.register(cls, type_id=type_id)
    return ser


def registration_hash(extra: Iterable[type] = ()) -> bytes:
    """What an end point built with ``make_serialization(extra)`` announces in its HELLO."""
    ser = make_serialization(extra)
    register_internal_messages(ser)
    return ser.registration_hash


# ------------------------------------------------------------------------------------------------ configurations


def server_config(aeron_dir: Path, port: int, **overrides: Any) -> ServerConfiguration:
    settings: dict[str, Any] = {
        "port": port,
        "listen_address": "127.0.0.1",
        "aeron_dir": aeron_dir,
        "serialization": make_serialization(),
        "close_timeout": 0.25,
        "connect_timeout": 10.0,
    }
    settings.update(overrides)
    return ServerConfiguration(**settings)


def client_config(transport: str, server_dir: Path, client_dir: Path, **overrides: Any) -> ClientConfiguration:
    """IPC: same directory as the server. UDP: ``client_dir`` and ``prefer_ipc=False``."""
    if transport not in TRANSPORTS:
        raise ValueError(f"transport must be one of {TRANSPORTS}, got {transport!r}")
    settings: dict[str, Any] = {
        "aeron_dir": server_dir if transport == "ipc" else client_dir,
        "prefer_ipc": transport == "ipc",
        "serialization": make_serialization(),
        "close_timeout": 0.25,
        "connect_timeout": 10.0,
    }
    settings.update(overrides)
    return ClientConfiguration(**settings)


@asynccontextmanager
async def running_server(config: ServerConfiguration) -> AsyncIterator[Server]:
    """A bound server, closed on the way out whatever happened (bounded by a generous timeout)."""
    server = Server(config)
    try:
        async with asyncio.timeout(30):
            await server.bind()
        yield server
    finally:
        async with asyncio.timeout(30):
            await server.close()


@asynccontextmanager
async def connected_client(
    config: ClientConfiguration,
    port: int,
    host: str = "127.0.0.1",
    timeout: float = 15.0,
    control_port: int | None = None,
) -> AsyncIterator[tuple[Client, Connection]]:
    """A client connected to ``host:port`` (and the server's ``control_port``), closed on the way out."""
    client = Client(config)
    try:
        async with asyncio.timeout(timeout):
            connection = await client.connect(host, port, control_port=control_port)
        yield client, connection
    finally:
        async with asyncio.timeout(30):
            await client.close()


# ------------------------------------------------------------------------------------------------ waiting


async def wait_until(
    condition: Callable[[], object], timeout: float = 10.0, interval: float = 0.005, what: str = ""
) -> Any:
    """Poll ``condition`` until it is truthy (returning its value); AssertionError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or condition!r} (last: {value!r})")
        await asyncio.sleep(interval)


async def server_end(server: Server, conn: Connection, timeout: float = 10.0) -> Connection:
    """The server's end of the client's ``conn`` (the same connection id at both ends).

    Found by id, never as "the server's only connection": a connect that started over under load (its DONE
    answered too late) leaves the server the abandoned attempt's connection until that attempt's streams go.
    """
    return await wait_until(
        lambda: next((c for c in server.connections if c.id == conn.id), None),
        timeout,
        what=f"the server's end of connection {conn.id}",
    )


@attrs.define
class Events:
    """What one side's listeners saw, in order: ``("connect", id)``, ``("msg", message)``, ``("disconnect", id)``."""

    log: list[tuple[str, Any]] = attrs.field(factory=list)
    connections: list[Connection] = attrs.field(factory=list)
    errors: list[tuple[Connection | None, BaseException]] = attrs.field(factory=list)

    def kinds(self, kind: str) -> list[Any]:
        return [value for k, value in self.log if k == kind]

    def messages(self) -> list[Any]:
        return self.kinds("msg")


# ------------------------------------------------------------------------------------------------ raw peers


@asynccontextmanager
async def raw_driver(aeron_dir: Path | None) -> AsyncIterator[Aeron]:
    """A plain driver client: on ``aeron_dir``'s live driver, or (None) on a fresh embedded driver of its own."""
    driver: MediaDriver | None = None
    own_dir: Path | None = None
    if aeron_dir is None:
        own_dir = Path("/dev/shm" if Path("/dev/shm").is_dir() else "/tmp") / f"endpoint-raw-{time.monotonic_ns()}"
        ctx = DriverContext.from_env({}, aeron_dir=own_dir, threading_mode="SHARED", dir_delete_on_shutdown=True)
        driver = await asyncio.to_thread(MediaDriver.launch, ctx)
    try:
        aeron = await Aeron.connect_async(aeron_dir=own_dir or aeron_dir)
        try:
            yield aeron
        finally:
            await asyncio.to_thread(aeron.close)
    finally:
        if driver is not None:
            await asyncio.to_thread(driver.close)
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)


class RawHandshakePeer:
    """The handshake streams of a server, opened by hand: send any bytes, read the server's answers.

    ``ipc``: a publication on the server's IPC handshake stream and a subscription to its IPC reply stream (needs
    a client of the server's own driver). ``udp``: a publication to the server's UDP port and a subscription on
    ``reply_port`` (any driver).
    """

    def __init__(self, is_ipc: bool, publication: ExclusivePublication, reply: Subscription, reply_port: int) -> None:
        self.is_ipc = is_ipc
        self.publication = publication
        self.reply = reply
        self.reply_port = reply_port
        self.local_ip = "127.0.0.1"

    @classmethod
    async def open(
        cls, aeron: Aeron, transport: str, server_port: int, local_ip: str = "127.0.0.1"
    ) -> RawHandshakePeer:
        """``local_ip`` (UDP): the loopback address this peer sends from and hears its answers on."""
        if transport == "ipc":
            reply = await aeron.add_subscription_async("aeron:ipc", IPC_REPLY_STREAM_BASE + server_port)
            publication = await aeron.add_exclusive_publication_async(
                "aeron:ipc?term-length=65536", IPC_HANDSHAKE_STREAM_BASE + server_port
            )
            peer = cls(True, publication, reply, 0)
        else:
            reply_port = free_udp_port(local_ip)
            # As a client does: the route's session names both streams (the answers' is the next one), and the
            # answer subscription's status messages go to the server's control port (port + 1), which then answers
            # this socket.
            session = -2 * (secrets.randbelow(1 << 30) + 1)
            reply = await aeron.add_subscription_async(
                f"aeron:udp?endpoint={local_ip}:{reply_port}|control=127.0.0.1:{server_port + 1}"
                f"|session-id={answer_session(session)}",
                REPLY_STREAM_ID,
            )
            interface = "" if local_ip == "127.0.0.1" else f"|interface={local_ip}"
            publication = await aeron.add_exclusive_publication_async(
                f"aeron:udp?endpoint=127.0.0.1:{server_port}|term-length=65536|session-id={session}{interface}",
                HANDSHAKE_STREAM_ID,
            )
            peer = cls(False, publication, reply, reply_port)
        peer.local_ip = local_ip
        await wait_until(lambda: publication.is_connected, 5.0, what="raw handshake publication connected")
        return peer

    def handshake(self, **kwargs: Any) -> ClientHandshake:
        """A client handshake with this peer's reply route and the test classes' registration hash."""
        kwargs.setdefault("registration_hash", registration_hash())
        kwargs.setdefault("reply", {} if self.is_ipc else {"port": self.reply_port})
        kwargs.setdefault("claimed_address", "" if self.is_ipc else self.local_ip)
        return ClientHandshake(**kwargs)

    async def send(self, packet: bytes, timeout: float = 5.0) -> None:
        """Offer one packet, waiting out back pressure."""
        deadline = time.monotonic() + timeout
        while self.publication.offer(packet) < 0:
            if time.monotonic() > deadline:
                raise AssertionError(f"raw handshake publication refused a packet for {timeout:g} s")
            await asyncio.sleep(0.001)

    async def receive(self, handshake: ClientHandshake, timeout: float = 5.0) -> object:
        """The first answer ``handshake`` makes sense of (Accepted, Rejected, Completed); AssertionError if none.

        A cookie is answered (HELLO again, now carrying it) on the way, as a client does.
        """
        while True:
            answer = await self._receive_one(handshake, timeout)
            if not isinstance(answer, CookieReceived):
                return answer
            await self.send(handshake.hello(time.time_ns()))

    async def _receive_one(self, handshake: ClientHandshake, timeout: float) -> object:
        answers: list[object] = []

        def on_fragment(payload: memoryview, header: Any) -> None:
            answer = handshake.receive(bytes(payload))
            if answer is not None:
                answers.append(answer)

        await wait_until(
            lambda: self.reply.poll(on_fragment, 16) >= 0 and answers, timeout, interval=0.001, what="handshake answer"
        )
        return answers[0]

    async def close(self) -> None:
        for resource in (self.publication, self.reply):
            await resource.close_async()
