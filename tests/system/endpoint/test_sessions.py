"""Buffered sessions on real end points: a session is the client's key, kept across lost connections.

In one process (real drivers, real UDP on 127.0.0.1): both ends see the same session on every connection; a
connection lost (the client drops it without a goodbye, as a dead network would) keeps what either side sends
meanwhile and the reconnect delivers it once and in order; a peer that does not opt in gets a plain connection;
past a bound a send raises SessionBufferFullError; past the timeout the server drops the session and says so.
Separate processes and a network taken away are in test_session_processes.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from endpoint import (
    Client,
    Connection,
    Server,
    Session,
    SessionBufferFullError,
    SessionExpiredError,
)
from endpoint.connection.counters import endpoint_stats
from support.endpoints import Num, client_config, server_config, wait_until

pytestmark = [pytest.mark.slow]

FAST = {"ping_interval": 0.2, "peer_timeout": 1.5, "handshake_timeout": 0.5}


def session_server(aeron_dir: Path, port: int, **overrides: Any) -> Server:
    settings: dict[str, Any] = {"buffered_sessions": True, "ephemeral_key": True, **FAST}
    settings.update(overrides)
    return Server(server_config(aeron_dir, port, **settings))


def session_client(aeron_dir: Path, client_dir: Path, tmp_path: Path, **overrides: Any) -> Client:
    settings: dict[str, Any] = {
        "buffered_sessions": True,
        "auto_reconnect": True,
        "reconnect_initial_delay": 0.05,
        "reconnect_max_delay": 0.3,
        "remember_servers": False,
        **FAST,
    }
    settings.update(overrides)
    transport = settings.pop("transport", "udp")
    return Client(client_config(transport, aeron_dir, client_dir, **settings))


class Seen:
    def __init__(self, endpoint: Server | Client) -> None:
        self.nums: list[int] = []
        self.connects: list[Connection] = []
        self.expired: list[Session] = []
        endpoint.on_message(Num, lambda conn, num: self.nums.append(num.i))
        endpoint.on_connect(lambda conn: self.connects.append(conn))


async def _lose(client: Client) -> Connection:
    """Drop the client's connection without a goodbye (what a dead network ends in), and wait for the server to
    notice nothing comes any more."""
    connection = client.connection
    assert connection is not None
    connection._lose("test: the network went away")
    return connection


@pytest.mark.parametrize(("transport", "sealed"), [("udp", False), ("udp", True), ("ipc", False)])
async def test_a_lost_connection_resumes_the_session_with_nothing_lost_or_doubled(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path, transport: str, sealed: bool
) -> None:
    server = session_server(aeron_dir, port, sealed=sealed)
    at_server = Seen(server)
    async with asyncio.timeout(60), running_server_of(server):
        client = session_client(aeron_dir, client_dir, tmp_path, transport=transport)
        at_client = Seen(client)
        async with client:
            first = await client.connect("127.0.0.1", port)
            await wait_until(lambda: at_server.connects, 10, what="the server's on_connect")
            server_side = at_server.connects[0]
            assert first.session is not None
            assert server_side.session is not None
            assert first.session.id == server_side.session.id
            assert not first.resumed
            assert not server_side.resumed
            for i in range(50):
                await client.send(Num(i))
                await server_side.send(Num(1000 + i))
            await wait_until(lambda: len(at_server.nums) == 50 and len(at_client.nums) == 50, 10, what="first 50")
            server_session = server_side.session
            await _lose(client)
            # Both ends keep sending while the session has no connection (the server's old connection may still
            # look alive: what it offers there is never acknowledged, so it is offered again after the resume).
            for i in range(50, 120):
                await client.send(Num(i))
                await server_side.send(Num(1000 + i))
            await wait_until(lambda: len(at_server.connects) == 2, 20, what="the client to come back")
            again = at_server.connects[1]
            assert again.session is server_session
            assert again.resumed
            assert again is not server_side
            await wait_until(lambda: server_side.is_closed, 10, what="the old connection to go")
            for i in range(120, 150):
                await client.send(Num(i))
                await again.send(Num(1000 + i))
            await wait_until(lambda: len(at_server.nums) >= 150 and len(at_client.nums) >= 150, 20, what="all")
            await asyncio.sleep(0.3)  # anything doubled would have come by now
            assert at_server.nums == list(range(150))
            assert at_client.nums == [1000 + i for i in range(150)]
            assert client.session is first.session
            assert client.connection is not None
            assert client.connection.sealed is sealed
            assert client.connection.resumed
            assert server_side.lost  # the old connection went without a goodbye (timed out, or taken over)
            # What the client kept while detached went out on the new connection (the lost one offered nothing
            # more), and nothing arrived twice or out of turn. (The server's old connection may have delivered
            # some of its sends before the client's side closed: the client's DONE said so, and they did not come
            # again.)
            assert first.session.log.resent >= 70
            for log in (server_session.log, first.session.log):
                assert log.duplicates == 0
                assert log.gaps == 0
            figures = endpoint_stats(server)  # what the driver's counters file carries for operators
            assert figures["sessions"] == 1
            assert figures["session_events:resumed"] == 1
            assert figures["session_events:opened"] == 1
            assert server.broadcast(Num(2000)) == 1  # a broadcast goes through the session too
            await wait_until(lambda: at_client.nums[-1:] == [2000], 10, what="the broadcast")
            assert server_session.log.last_seq == 151


async def test_peers_that_do_not_opt_in_get_plain_connections(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    for server_opts, client_opts in (({"buffered_sessions": False}, {}), ({}, {"buffered_sessions": False})):
        server = session_server(aeron_dir, port, **server_opts)
        at_server = Seen(server)
        async with asyncio.timeout(60), running_server_of(server):
            client = session_client(aeron_dir, client_dir, tmp_path, **client_opts)
            async with client:
                connection = await client.connect("127.0.0.1", port)
                assert connection.session is None
                assert client.session is None
                await connection.send(Num(7))
                await wait_until(lambda seen=at_server: seen.nums == [7], 10, what="the message")
                assert at_server.connects[0].session is None
                assert len(server.sessions) == 0


async def test_past_a_bound_a_send_raises_the_typed_error(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    server = session_server(aeron_dir, port, max_buffered_messages=5)
    at_server = Seen(server)
    async with asyncio.timeout(60), running_server_of(server):
        client = session_client(aeron_dir, client_dir, tmp_path, auto_reconnect=False, max_buffered_messages=3)
        async with client:
            await client.connect("127.0.0.1", port)
            await wait_until(lambda: at_server.connects, 10, what="on_connect")
            server_side = at_server.connects[0]
            await _lose(client)
            for i in range(3):
                await client.send(Num(i))
            with pytest.raises(SessionBufferFullError) as caught:
                await client.send(Num(3))
            assert caught.value.budget == "max_buffered_messages"
            await wait_until(lambda: server_side.is_closed, 10, what="the server to lose the connection")
            for i in range(5):
                server_side.send_nowait(Num(i))
            with pytest.raises(SessionBufferFullError):
                await server_side.send(Num(5))
            assert server_side.session is not None
            assert server_side.session.log.refused == 1


async def test_past_the_timeout_the_server_drops_the_session_and_tells_its_listeners(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    server = session_server(aeron_dir, port, session_timeout=1.0)
    expired: list[Session] = []
    server.on_session_expired(expired.append)
    at_server = Seen(server)
    async with asyncio.timeout(60), running_server_of(server):
        client = session_client(aeron_dir, client_dir, tmp_path, auto_reconnect=False)
        async with client:
            await client.connect("127.0.0.1", port)
            await wait_until(lambda: at_server.connects, 10, what="on_connect")
            server_side = at_server.connects[0]
            session = server_side.session
            assert session is not None
            await _lose(client)
            # The client's side first: its session's timeout (1 s) runs from the loss, which is now, while the
            # server's runs from when the server notices it; a loaded machine took over a second for the server's
            # send, and the client's session had expired before its own send.
            client_session = client.session
            assert client_session is not None
            await client.send(Num(3))  # kept by the client's side, for a connection that never comes
            await server_side.send(Num(1))  # kept for a client that never comes back
            await wait_until(lambda: expired, 15, what="the session to expire")
            assert expired == [session]
            assert session.ended
            assert session.end_reason == "expired"
            assert session.dropped == 1
            assert server.sessions == []
            assert server.session_stats.expired == 1
            with pytest.raises(SessionExpiredError):
                await server_side.send(Num(2))
            # The client's side ends too (the server's timeout came with the grant); its kept sends are dropped.
            await wait_until(lambda: client_session.ended, 10, what="the client's session to expire")
            assert client_session.dropped == 1
            assert client.buffered_dropped == 1
            with pytest.raises(SessionExpiredError):
                await client_session.send(Num(4))
            # The client, back later, gets a new session (the old one is gone with what it kept).
            await client.connect("127.0.0.1", port)
            await wait_until(lambda: len(at_server.connects) == 2, 10, what="the second connect")
            assert at_server.connects[1].session is not session
            assert client.session is not client_session
            assert not at_server.connects[1].resumed


async def test_a_full_table_evicts_the_longest_detached_session_or_connects_without_one(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    server = session_server(aeron_dir, port, max_sessions=1)
    gone: list[Session] = []
    server.on_session_expired(gone.append)
    at_server = Seen(server)
    async with asyncio.timeout(60), running_server_of(server):
        first, second, third = (session_client(aeron_dir, client_dir, tmp_path, auto_reconnect=False) for _ in "abc")
        async with first, second, third:
            await first.connect("127.0.0.1", port)
            await wait_until(lambda: len(at_server.connects) == 1, 10, what="the first on_connect")
            held = at_server.connects[0].session
            assert held is not None
            # The one session held is connected: the second client connects without one, and sends plainly.
            plain = await second.connect("127.0.0.1", port)
            assert plain.session is None
            assert second.session is not None
            assert second.session.ended
            await second.send(Num(5))
            await wait_until(lambda: at_server.nums == [5], 10, what="the plain message")
            assert at_server.connects[1].session is None
            assert server.session_stats.refused == 1
            # Once the first client's connection is lost, its (detached) session gives way to a new client's.
            await _lose(first)
            await wait_until(lambda: held.connection is None, 10, what="the server to notice the loss")
            await held.send(Num(6))  # kept, then dropped with the session
            connection = await third.connect("127.0.0.1", port)
            assert connection.session is not None
            assert gone == [held]
            assert held.end_reason == "evicted"
            assert held.dropped == 1
            assert server.session_stats.evicted == 1
            assert [s.public_key for s in server.sessions] == [connection.session.public_key]


async def test_a_graceful_close_ends_the_session_on_both_ends(
    aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    server = session_server(aeron_dir, port)
    at_server = Seen(server)
    async with asyncio.timeout(60), running_server_of(server):
        client = session_client(aeron_dir, client_dir, tmp_path)
        async with client:
            connection = await client.connect("127.0.0.1", port)
            await wait_until(lambda: at_server.connects, 10, what="on_connect")
            session = at_server.connects[0].session
            assert session is not None
            assert connection.session is not None
            await connection.close("bye")
            await wait_until(lambda: session.ended, 10, what="the server's session to end")
            assert server.sessions == []
            assert server.session_stats.closed == 1
            assert connection.session.ended


def running_server_of(server: Server) -> Any:
    """Bind ``server`` (made by the test, listeners on it) and close it on the way out, bounded."""
    from contextlib import asynccontextmanager

    @asynccontextmanager
    async def run() -> Any:
        try:
            async with asyncio.timeout(30):
                await server.bind()
            yield server
        finally:
            async with asyncio.timeout(30):
                await server.close()

    return run()
