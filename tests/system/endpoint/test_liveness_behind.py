"""A server that falls behind reading a live peer keeps it: liveness is judged by what the peer sent.

Over UDP the peer's messages reach the server's driver (its receiver high-water mark moves) whether or not the
server gets round to reading them. Here the server's end point stops reading one connection, as an overloaded
loop or a gap waiting for a retransmit would, for three peer timeouts: the connection must survive, and every
message sent meanwhile is read, in order, once reading resumes. IPC has no such mark, and nothing changes there.
"""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path
from typing import Any

import pytest

import endpoint.client
from endpoint import Connection
from support.endpoints import (
    Num,
    client_config,
    connected_client,
    running_server,
    server_config,
    server_end,
    wait_until,
)

PING = 0.2
TIMEOUT = 1.0


async def test_a_peer_whose_messages_keep_arriving_outlives_a_reader_three_timeouts_late(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    received: list[int] = []
    timing = {"ping_interval": PING, "peer_timeout": TIMEOUT}
    async with running_server(server_config(aeron_dir, port, **timing)) as server:
        server.on_message(Num, lambda conn, msg: received.append(msg.i))
        async with connected_client(client_config("udp", aeron_dir, client_dir, **timing), port) as (_, conn):
            server_conn = await server_end(server, conn)
            await conn.send(Num(0))
            await wait_until(lambda: received == [0], 5, what="the first message")
            behind = server_conn._poll
            server_conn._poll = lambda: 0  # type: ignore[method-assign]  # the server reads nothing
            try:
                for i in range(1, 31):  # three timeouts of a live peer talking
                    await conn.send(Num(i))
                    await asyncio.sleep(TIMEOUT / 10)
                assert received == [0]
                assert not server_conn.is_closed, server_conn.close_reason
                assert server_conn._peer_hwm() is not None
            finally:
                server_conn._poll = behind  # type: ignore[method-assign]
            await wait_until(lambda: len(received) == 31, 5, what="the messages sent while the server was behind")
            assert received == list(range(31))
            assert not server_conn.is_closed
            assert not conn.is_closed


async def test_a_peer_that_stops_is_still_found_dead_while_the_server_is_behind(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """The mark only keeps a peer that is sending: one that falls silent times out as before."""
    lost: list[Connection] = []
    timing = {"ping_interval": PING, "peer_timeout": TIMEOUT}
    async with running_server(server_config(aeron_dir, port, **timing)) as server:
        server.on_disconnect(lost.append)
        async with connected_client(client_config("udp", aeron_dir, client_dir, **timing), port) as (client, conn):
            server_conn = await server_end(server, conn)
            server_conn._poll = lambda: 0  # type: ignore[method-assign]
            client._tick = lambda now_ns: None  # type: ignore[method-assign]  # the client sends no keepalives
            conn._poll = lambda: 0  # type: ignore[method-assign]  # nor answers the server's probes: silent
            await wait_until(lambda: lost, 10 * TIMEOUT, what="the silent peer found dead")
            assert server_conn.lost
            assert "peer timed out" in server_conn.close_reason


async def test_a_handshake_that_outlasts_the_peer_timeout_does_not_leave_the_connection_dead(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The client opens its streams before the handshake's last steps; on an overloaded server those can take longer
    than the peer timeout. The handshake proved the server alive: the client counts its silence from when the
    connection went into service, not from when its streams were opened."""
    slow = 1.5 * TIMEOUT
    real_wait_image = endpoint.client.wait_image

    async def wait_image_late(*args: Any, **kwargs: Any) -> None:
        await asyncio.sleep(slow)  # the handshake's last step, late
        await real_wait_image(*args, **kwargs)

    monkeypatch.setattr(endpoint.client, "wait_image", wait_image_late)
    received: list[int] = []
    # The server keeps quiet for longer than the delay (its first keepalive comes after its ping interval).
    async with running_server(server_config(aeron_dir, port, ping_interval=4.0, peer_timeout=10.0)) as server:
        server.on_message(Num, lambda conn, msg: received.append(msg.i))
        timing = {"ping_interval": PING, "peer_timeout": TIMEOUT}
        async with connected_client(client_config("udp", aeron_dir, client_dir, **timing), port) as (_, conn):
            await asyncio.sleep(TIMEOUT / 2)  # past the first ticks
            assert not conn.is_closed, conn.close_reason
            await conn.send(Num(1))
            await wait_until(lambda: received == [1], 5, what="a message on the connection")
            assert not conn.is_closed


async def test_what_the_drivers_kernel_dropped_is_counted_and_seen_by_the_end_point(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """A server too busy to read its socket in time loses what arrives meanwhile in the kernel: its driver counts
    those drops (a system counter of ours), and the end point sees when they happened, so that a peer's silence
    that saw drops is not taken for a dead peer at once (see ``Liveness.datagrams_dropped``)."""
    async with (
        running_server(server_config(aeron_dir, port, socket_rcvbuf=65536)) as server,
        connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, conn),
    ):
        await server_end(server, conn)  # an image on the server's port: its socket's drops are looked at
        shared = server._shared
        assert shared is not None
        assert shared.socket_drops() == 0
        assert server._dropped_ns(time.monotonic_ns()) is None
        # The server's driver runs on this loop: while we send from it, nothing reads the port.
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as flood:
            for _ in range(5000):
                flood.sendto(bytes(64), ("127.0.0.1", port))
        await wait_until(lambda: (shared.socket_drops() or 0) > 0, 5, what="the kernel's drops counted")
        seen = server._dropped_ns(time.monotonic_ns())
        assert seen is not None
        assert not conn.is_closed
