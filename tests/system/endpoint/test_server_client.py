"""Server and Client in one process, on real drivers: connecting, ordered delivery, ping, close, limits, scale.

``ipc``: the client shares the server's Aeron directory (and driver); ``udp``: the client has a driver of its own
and talks to the server over UDP on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import functools
import operator
import time
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from endpoint import (
    Client,
    ClientError,
    ClientRejectedError,
    Connection,
    ConnectionClosedError,
    MessageTooLargeError,
    RejectReason,
    Server,
)
from support.endpoints import (
    TRANSPORTS,
    Ack,
    Blob,
    Chat,
    Events,
    Move,
    Num,
    client_config,
    connected_client,
    running_server,
    server_config,
    server_end,
    wait_until,
)

COUNT = 10_000


def record(endpoint: Server | Client, events: Events, *, use_async: bool) -> None:
    """Log connect, Num messages and disconnect of ``endpoint`` into ``events`` (sync or async listeners)."""

    def on_connect(conn: Connection) -> None:
        events.connections.append(conn)
        events.log.append(("connect", conn.id))

    def on_disconnect(conn: Connection) -> None:
        events.log.append(("disconnect", conn.id))

    def on_num(conn: Connection, msg: Num) -> None:
        events.log.append(("msg", msg.i))

    async def on_num_async(conn: Connection, msg: Num) -> None:
        events.log.append(("msg", msg.i))
        if msg.i % 7 == 0:
            await asyncio.sleep(0)

    async def on_connect_async(conn: Connection) -> None:
        await asyncio.sleep(0)
        on_connect(conn)

    endpoint.on_connect(on_connect_async if use_async else on_connect)
    endpoint.on_disconnect(on_disconnect)
    endpoint.on_message(Num, on_num_async if use_async else on_num)


def assert_ordered(events: Events, connection_id: int, count: int) -> None:
    """connect first, then exactly 0..count-1 in order, then disconnect last."""
    log = events.log
    assert log[0] == ("connect", connection_id)
    assert log[-1] == ("disconnect", connection_id)
    assert [value for _, value in log[1:-1]] == list(range(count))
    assert all(kind == "msg" for kind, _ in log[1:-1])


# ------------------------------------------------------------------------------------------------ connecting


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_connect_and_send_both_ways(transport: str, aeron_dir: Path, client_dir: Path, port: int) -> None:
    at_server: list[tuple[Connection, object]] = []
    at_client: list[object] = []
    async with running_server(server_config(aeron_dir, port)) as server:

        @server.on_message(Move)
        async def echo(conn: Connection, msg: Move) -> None:
            at_server.append((conn, msg))
            await conn.send(Ack(msg.x + msg.y))

        config = client_config(transport, aeron_dir, client_dir)
        async with connected_client(config, port) as (client, conn):
            client.on_message(Ack, lambda c, m: at_client.append(m))
            assert client.connection is conn
            assert conn.is_ipc is (transport == "ipc")
            await conn.send(Move(2, 3))
            await wait_until(lambda: at_client, 5, what="the echo")
            assert at_client == [Ack(5)]

            server_conn = await server_end(server, conn)
            assert at_server == [(server_conn, Move(2, 3))]
            assert server_conn.id == conn.id
            assert server_conn.is_ipc is conn.is_ipc
            if transport == "ipc":
                assert conn.remote_address == server_conn.remote_address == "ipc"
            else:
                assert conn.remote_address == f"127.0.0.1:{port}"
                host, _, client_port = server_conn.remote_address.rpartition(":")
                assert host == "127.0.0.1"
                assert int(client_port) not in (0, port)
            assert not conn.is_closed
            assert not server_conn.is_closed
            assert conn.max_message_length == server_conn.max_message_length > 0

            # The server side can start a conversation too.
            await server_conn.send(Ack(99))
            await wait_until(lambda: len(at_client) == 2, 5, what="the server's own message")
            assert at_client[1] == Ack(99)


@pytest.mark.parametrize("use_async", [False, True], ids=["sync_listeners", "async_listeners"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ten_thousand_messages_in_order_between_connect_and_disconnect(
    transport: str, use_async: bool, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    server_events, client_events = Events(), Events()
    async with running_server(server_config(aeron_dir, port)) as server:
        record(server, server_events, use_async=use_async)
        client = Client(client_config(transport, aeron_dir, client_dir))
        record(client, client_events, use_async=use_async)
        try:
            async with asyncio.timeout(60):
                conn = await client.connect("127.0.0.1", port)
                # The server greets from the moment the connection exists (its on_connect may not have run yet).
                server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
                for i in range(COUNT):
                    await server_conn.send(Num(i))
                await wait_until(lambda: len(client_events.log) == COUNT + 1, 30, what="client got everything")

                # Then the client sends as fast as it can and closes at once: nothing may be lost or overtake.
                for i in range(COUNT):
                    await conn.send(Num(i))
                await conn.close("done")
                await wait_until(lambda: server_events.kinds("disconnect"), 30, what="server on_disconnect")
                await wait_until(lambda: client_events.kinds("disconnect"), 5, what="client on_disconnect")
        finally:
            await client.close()

    assert_ordered(server_events, conn.id, COUNT)
    assert_ordered(client_events, conn.id, COUNT)
    assert server_events.connections == [server_conn]
    assert client_events.connections == [conn]
    assert server_conn.close_reason == "done"
    assert server_conn.closed_by_peer
    assert not server_conn.lost


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_on_connect_runs_before_a_message_sent_from_the_peers_on_connect(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    server_events, client_events = Events(), Events()
    async with running_server(server_config(aeron_dir, port)) as server:

        @server.on_connect
        async def greet(conn: Connection) -> None:
            server_events.log.append(("connect", conn.id))
            await conn.send(Chat("welcome"))

        server.on_message(Chat, lambda c, m: server_events.log.append(("msg", m.text)))
        client = Client(client_config(transport, aeron_dir, client_dir))

        @client.on_connect
        def hello(conn: Connection) -> None:
            client_events.log.append(("connect", conn.id))
            conn.send_nowait(Chat("hello"))

        client.on_message(Chat, lambda c, m: client_events.log.append(("msg", m.text)))
        try:
            async with asyncio.timeout(15):
                conn = await client.connect("127.0.0.1", port)
                await wait_until(lambda: len(server_events.log) == 2 and len(client_events.log) == 2, 5)
        finally:
            await client.close()
    assert server_events.log == [("connect", conn.id), ("msg", "hello")]
    assert client_events.log == [("connect", conn.id), ("msg", "welcome")]


# ------------------------------------------------------------------------------------------------ ping and close


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_ping_measures_a_positive_round_trip(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config(transport, aeron_dir, client_dir), port) as (_, conn),
    ):
        async with asyncio.timeout(10):
            rtt = await conn.ping()
            assert rtt > 0
            assert conn.rtt == rtt
            server_conn = await server_end(server, conn)
            server_rtt = await server_conn.ping()
            assert server_rtt > 0
            assert server_conn.rtt == server_rtt


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_streaming_one_way_under_back_pressure_outlives_the_peer_timeout(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Back pressure can keep a sender's keepalive pings from going out; the peer consuming still proves it alive."""
    timing = {"ping_interval": 0.2, "peer_timeout": 1.0}
    received: list[int] = []

    async def slow(conn: Connection, num: Num) -> None:
        received.append(num.i)
        if num.i % 50 == 0:
            await asyncio.sleep(0.005)  # a consumer slower than the sender: the window stays full

    async with (
        running_server(server_config(aeron_dir, port, **timing)) as server,
        connected_client(client_config(transport, aeron_dir, client_dir, **timing), port) as (_, conn),
    ):
        server.on_message(Num, slow)
        sent = 0
        deadline = time.monotonic() + 3.0  # three peer timeouts
        async with asyncio.timeout(30):
            while time.monotonic() < deadline:
                await conn.send(Num(sent), timeout=5)
                sent += 1
            await wait_until(lambda: len(received) == sent, 20)
        assert not conn.is_closed
        assert received == list(range(sent))
        assert len(server.connections) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_pings_across_many_term_rotations_are_all_answered(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """A 64 KiB term holds about a thousand pongs: an offer at the rotation (ADMIN_ACTION) must be retried."""
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config(transport, aeron_dir, client_dir), port) as (_, conn),
    ):
        async with asyncio.timeout(60):
            for _ in range(2500):
                assert await conn.ping(timeout=5) > 0
            server_conn = await server_end(server, conn)
            for _ in range(1100):
                assert await server_conn.ping(timeout=5) > 0


@pytest.mark.parametrize("closer", ["client", "server"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_graceful_close_carries_the_reason_to_the_peer(
    transport: str, closer: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    server_gone: list[Connection] = []
    client_gone: list[Connection] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_disconnect(server_gone.append)
        client = Client(client_config(transport, aeron_dir, client_dir))
        client.on_disconnect(client_gone.append)
        try:
            async with asyncio.timeout(15):
                conn = await client.connect("127.0.0.1", port)
                server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
                closing, other = (conn, server_conn) if closer == "client" else (server_conn, conn)
                await closing.close("maintenance window")
                assert closing.is_closed
                await wait_until(lambda: server_gone and client_gone, 5, what="both on_disconnect")
                await wait_until(lambda: other.is_closed, 5)
                assert server.connections == []
        finally:
            await client.close()
    assert server_gone == [server_conn]
    assert client_gone == [conn]
    for c in (closing, other):
        assert c.close_reason == "maintenance window"
        assert not c.lost
    assert not closing.closed_by_peer
    assert other.closed_by_peer


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_closing_the_server_disconnects_its_clients_and_ends_serve_forever(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    gone: list[Connection] = []
    server = Server(server_config(aeron_dir, port))
    clients = [Client(client_config(transport, aeron_dir, client_dir)) for _ in range(2)]
    try:
        async with asyncio.timeout(30):
            serving = asyncio.create_task(server.serve_forever())
            await wait_until(lambda: server._bound, 10, what="the server bound")
            for client in clients:
                client.on_disconnect(gone.append)
                await client.connect("127.0.0.1", port)
            await server.close()
            await serving
            await wait_until(lambda: len(gone) == 2, 5, what="both clients' on_disconnect")
    finally:
        await server.close()
        await asyncio.gather(*(c.close() for c in clients))
    assert {c.id for c in gone} == {c.connection.id for c in clients if c.connection}
    for conn in gone:
        assert conn.closed_by_peer
        assert not conn.lost
        assert conn.close_reason == "end point closed"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_sending_on_a_closed_connection_raises(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config(transport, aeron_dir, client_dir), port) as (_, conn),
    ):
        server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
        await asyncio.wait_for(conn.close("bye"), 10)
        with pytest.raises(ConnectionClosedError) as closed:
            await conn.send(Move(1, 1))
        assert closed.value.reason == "bye"
        with pytest.raises(ConnectionClosedError):
            conn.send_nowait(Move(1, 1))
        with pytest.raises(ConnectionClosedError):
            await asyncio.wait_for(conn.ping(), 5)
        # The side that was closed by its peer refuses too, naming the peer's reason.
        await wait_until(lambda: server_conn.is_closed, 5)
        with pytest.raises(ConnectionClosedError) as remote:
            await server_conn.send(Ack(1))
        assert remote.value.reason == "bye"
        # Closing again is harmless.
        await asyncio.wait_for(conn.close("again"), 5)
        assert conn.close_reason == "bye"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_send_nowait_needs_a_connection(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    moves: list[Move] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_message(Move, lambda conn, msg: moves.append(msg))
        client = Client(client_config(transport, aeron_dir, client_dir))
        try:
            with pytest.raises(ClientError, match="not connected"):
                client.send_nowait(Move(1, 1))
            await client.connect("127.0.0.1", port)
            assert client.send_nowait(Move(2, 3)) is True
            await wait_until(lambda: moves == [Move(2, 3)], 5, what="the move")
        finally:
            await asyncio.wait_for(client.close(), 10)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_message_over_the_max_length_is_streamed_whole_and_one_over_max_message_size_refused(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    at_server: list[object] = []
    at_client: list[object] = []
    limit = 1 << 17
    async with running_server(server_config(aeron_dir, port, max_message_size=limit)) as server:
        server.on_message(Blob, lambda c, m: at_server.append(m))
        client_cfg = client_config(transport, aeron_dir, client_dir, max_message_size=limit)
        async with connected_client(client_cfg, port) as (client, conn):
            client.on_message(Blob, lambda c, m: at_client.append(m))
            server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
            over_one_offer = Blob(bytes(range(256)) * (conn.max_message_length // 256 * 3))
            # Only the awaited send can stream: the non-blocking ones refuse what one offer cannot carry.
            with pytest.raises(MessageTooLargeError):
                conn.send_nowait(over_one_offer)
            with pytest.raises(MessageTooLargeError):
                server.broadcast(over_one_offer)
            over_limit = Blob(b"x" * limit)
            with pytest.raises(MessageTooLargeError, match="max_message_size"):
                await conn.send(over_limit)
            with pytest.raises(MessageTooLargeError, match="max_message_size"):
                await server_conn.send(over_limit)

            await asyncio.wait_for(conn.send(over_one_offer), 10)
            await asyncio.wait_for(server_conn.send(over_one_offer), 10)
            await asyncio.wait_for(conn.send(Blob(b"after")), 5)
            await wait_until(lambda: len(at_server) == 2 and at_client, 10)
            assert at_server == [over_one_offer, Blob(b"after")]  # in order: the large one first
            assert at_client == [over_one_offer]
            assert not conn.is_closed
            assert not server_conn.is_closed


# ------------------------------------------------------------------------------------------------ broadcast


async def test_broadcast_reaches_every_connection(aeron_dir: Path, client_dir: Path, port: int) -> None:
    received: dict[int, list[object]] = {}
    async with running_server(server_config(aeron_dir, port)) as server:
        clients = [
            Client(client_config(transport, aeron_dir, client_dir)) for transport in ("ipc", "ipc", "udp", "udp")
        ]
        try:
            async with asyncio.timeout(30):
                for index, client in enumerate(clients):
                    received[index] = []
                    client.on_message(Chat, lambda c, m, box=received[index]: box.append(m))
                    await client.connect("127.0.0.1", port)
                await wait_until(lambda: len(server.connections) == len(clients), 5)
                assert server.broadcast(Chat("to all")) == len(clients)
                await wait_until(lambda: all(received.values()), 5, what="every client got the broadcast")
        finally:
            await asyncio.gather(*(c.close() for c in clients))
    assert all(box == [Chat("to all")] for box in received.values())
    assert [c.connection.is_ipc for c in clients if c.connection] == [True, True, False, False]


# ------------------------------------------------------------------------------------------------ scale and ids


async def test_two_hundred_ipc_clients_connect_at_once_and_leave(aeron_dir: Path, port: int) -> None:
    count = 200
    connects: list[Connection] = []
    disconnects: list[Connection] = []
    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_connect(connects.append)
        server.on_disconnect(disconnects.append)
        clients = [Client(client_config("ipc", aeron_dir, aeron_dir)) for _ in range(count)]
        try:
            async with asyncio.timeout(60):
                conns = await asyncio.gather(*(c.connect("127.0.0.1", port) for c in clients))
                assert all(c.is_ipc for c in conns)
                assert len({c.id for c in conns}) == count
                await wait_until(lambda: len(connects) == count, 10, what="200 on_connect")
                assert len(server.connections) == count
                assert {c.id for c in server.connections} == {c.id for c in conns}
                assert server._session_ids.live_count == 2 * count
                assert server._stream_ids.live_count == 2 * count

                await asyncio.gather(*(c.close() for c in clients))
                await wait_until(lambda: len(disconnects) == count, 20, what="200 on_disconnect")
                assert server.connections == []
                await wait_until(
                    lambda: server._session_ids.live_count == 0 and server._stream_ids.live_count == 0,
                    10,
                    what="every id released",
                )
        finally:
            await asyncio.gather(*(c.close() for c in clients), return_exceptions=True)
    assert {c.id for c in disconnects} == {c.id for c in conns}
    assert all(c.closed_by_peer and not c.lost for c in disconnects)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_released_stream_ids_cool_down_before_reuse_and_exhaustion_is_a_rejection(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    config = server_config(aeron_dir, port, stream_id_range=(0x1000, 0x1009))  # 10 ids, 2 per connection
    async with running_server(config) as server:
        streams = server._stream_ids
        assert streams.capacity == 10
        # One client reconnecting keeps one client driver (see test_sequential_udp_clients_with_fresh_drivers...).
        client = Client(client_config(transport, aeron_dir, client_dir))
        try:
            granted: list[tuple[int, int, int, int]] = []
            for _ in range(5):
                conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
                await wait_until(functools.partial(operator.contains, server._ids_of, conn.id), 5)
                granted.append(server._ids_of[conn.id])
                assert streams.live_count == 2
                await asyncio.wait_for(conn.close("next"), 10)
                await wait_until(lambda: streams.live_count == 0, 5, what="ids released after close")
            stream_ids = [ids[i] for ids in granted for i in (2, 3)]
            assert len(set(stream_ids)) == 10, f"a stream id came back before its linger: {stream_ids}"
            assert all(0x1000 <= s <= 0x1009 for s in stream_ids)
            assert streams.cooling_count() == 10

            with pytest.raises(ClientRejectedError) as rejected:
                await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            assert rejected.value.reason is RejectReason.IDS_EXHAUSTED
            assert server._session_ids.live_count == 0
            assert server._pending == {}
            assert server.connections == []

            # Once the linger has passed (the allocator is told a later time), the ids come back.
            streams._thaw(time.monotonic_ns() + streams.reuse_delay_ns + 1)
            assert streams.cooling_count() == 0
            conn = await asyncio.wait_for(client.connect("127.0.0.1", port), 15)
            await wait_until(lambda: conn.id in server._ids_of, 5)
            assert set(server._ids_of[conn.id][2:4]) <= set(stream_ids)
        finally:
            await client.close()


async def test_sequential_udp_clients_with_fresh_drivers_all_connect(
    aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Each client below starts (and stops) its own driver in the same directory, like separate client processes.

    Every fresh driver must give the client's handshake publication a fresh session id; two publishers with one
    session id on one stream look like one stream to the server's driver, and the second never connects.
    """
    async with running_server(server_config(aeron_dir, port)) as server:
        assert server._udp_handshake is not None
        for attempt in range(8):
            client = Client(client_config("udp", aeron_dir, client_dir, connect_timeout=4.0))
            try:
                conn = await client.connect("127.0.0.1", port)
            except Exception as exc:
                images = [(im.session_id, im.source_identity) for im in server._udp_handshake.images]
                raise AssertionError(
                    f"client {attempt} could not connect ({exc!r}); the server's handshake images "
                    f"(session id, source) are {images}"
                ) from exc
            finally:
                await client.close()
            assert conn.is_closed


# ------------------------------------------------------------------------------------------------ event loops


async def _round_trip(transport: str, aeron_dir: Path, client_dir: Path, port: int) -> list[object]:
    got: list[object] = []
    async with running_server(server_config(aeron_dir, port)) as server:

        @server.on_message(Move)
        async def echo(conn: Connection, msg: Move) -> None:
            await conn.send(Ack(msg.x))

        async with connected_client(client_config(transport, aeron_dir, client_dir), port) as (client, conn):
            client.on_message(Ack, lambda c, m: got.append(m))
            for i in range(100):
                await conn.send(Move(i, 0))
            await wait_until(lambda: len(got) == 100, 10)
            assert await conn.ping() > 0
    return got


@pytest.mark.parametrize(
    "loop_factory",
    [pytest.param(asyncio.new_event_loop, id="asyncio"), pytest.param(uvloop.new_event_loop, id="uvloop")],
)
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_round_trip_on_each_event_loop(
    transport: str,
    loop_factory: Callable[[], asyncio.AbstractEventLoop],
    aeron_dir: Path,
    client_dir: Path,
    port: int,
) -> None:
    async def bounded() -> list[object]:
        async with asyncio.timeout(60):
            return await _round_trip(transport, aeron_dir, client_dir, port)

    main: Callable[[], Coroutine[Any, Any, list[object]]] = bounded
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        got = runner.run(main())
        if loop_factory is uvloop.new_event_loop:
            assert isinstance(runner.get_loop(), uvloop.Loop)
    assert got == [Ack(i) for i in range(100)]


async def test_the_poller_survives_a_failing_round_and_reports_it(
    aeron_dir: Path, client_dir: Path, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A bug in one poller round (here: a poll set that fails to build) is reported, and polling goes on."""
    from endpoint.poller import LoopPoller

    errors: list[BaseException] = []
    received: list[object] = []
    collect = LoopPoller._collect
    failures = [RuntimeError("a poll set that cannot be built")]

    def failing_once(self: LoopPoller) -> None:
        if failures:
            raise failures.pop()
        collect(self)

    async with running_server(server_config(aeron_dir, port)) as server:
        server.on_error(lambda conn, exc: errors.append(exc))
        server.on_message(Move, lambda conn, msg: received.append(msg))
        async with connected_client(client_config("ipc", aeron_dir, client_dir), port) as (_, conn):
            monkeypatch.setattr(LoopPoller, "_collect", failing_once)
            LoopPoller.for_running_loop().changed = True
            await wait_until(lambda: errors, 5, what="the failed round reported")
            assert isinstance(errors[0], RuntimeError)
            await conn.send(Move(1, 2))
            await wait_until(lambda: received, 5, what="a message after the failed round")
            assert received == [Move(1, 2)]
