"""Which listener gets a message, and what happens when listeners fail or are missing, on live connections."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sized
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from endpoint import (
    Connection,
    Server,
    UnhandledMessageError,
    add_global_error_listener,
    remove_global_error_listener,
)
from support.endpoints import (
    TRANSPORTS,
    Ack,
    Chat,
    FastMove,
    Move,
    Num,
    Unlisted,
    client_config,
    connected_client,
    running_server,
    server_config,
    server_end,
    wait_until,
)


@asynccontextmanager
async def pair(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> AsyncIterator[tuple[Server, Connection]]:
    """A server and a client connected to it; yields the server and the client's connection."""
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config(transport, aeron_dir, client_dir), port) as (_, conn),
    ):
        await wait_until(lambda: server.connections, 5)
        yield server, conn


async def deliver(conn: Connection, message: object, arrived: Sized, count: int) -> None:
    """Send ``message`` and wait until ``arrived`` holds ``count`` entries."""
    await asyncio.wait_for(conn.send(message), 5)
    await wait_until(lambda: len(arrived) >= count, 5, what=f"{message!r} to arrive")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_the_most_specific_registered_class_wins(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    seen: list[tuple[str, object]] = []
    async with pair(transport, aeron_dir, client_dir, port) as (server, conn):
        on_move = server.on_message(Move, lambda c, m: seen.append(("move", m)))
        on_fast = server.on_message(FastMove, lambda c, m: seen.append(("fast", m)))
        server.on_message()(lambda c, m: seen.append(("any", m)))

        await deliver(conn, Move(1, 2), seen, 1)
        await deliver(conn, FastMove(3, 4, speed=9), seen, 2)
        await deliver(conn, Chat("hi"), seen, 3)
        assert seen == [("move", Move(1, 2)), ("fast", FastMove(3, 4, 9)), ("any", Chat("hi"))]

        # Only the base class registered: the subclass goes to the base listener.
        assert server.remove_listener(on_fast)
        await deliver(conn, FastMove(5, 6, speed=1), seen, 4)
        assert seen[3] == ("move", FastMove(5, 6, 1))

        # No Move listener left at all: the catch-all takes both.
        assert server.remove_listener(on_move)
        assert not server.remove_listener(on_move)
        await deliver(conn, Move(7, 8), seen, 5)
        await deliver(conn, FastMove(9, 9, speed=2), seen, 6)
        assert seen[4:] == [("any", Move(7, 8)), ("any", FastMove(9, 9, 2))]


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_sync_and_async_listeners_of_one_type_both_get_every_message_in_order(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    by_sync: list[int] = []
    by_async: list[int] = []
    interleaving: list[str] = []
    async with pair(transport, aeron_dir, client_dir, port) as (server, conn):

        def sync_listener(c: Connection, m: Num) -> None:
            by_sync.append(m.i)
            interleaving.append("sync")

        async def async_listener(c: Connection, m: Num) -> None:
            if m.i % 3 == 0:
                await asyncio.sleep(0)
            by_async.append(m.i)
            interleaving.append("async")

        server.on_message(Num, sync_listener)
        server.on_message(Num, async_listener)
        for i in range(500):
            await asyncio.wait_for(conn.send(Num(i)), 5)
        await wait_until(lambda: len(by_sync) == len(by_async) == 500, 10)
    assert by_sync == by_async == list(range(500))
    # Listeners run in registration order, one message at a time.
    assert interleaving == ["sync", "async"] * 500


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_failing_listener_reaches_local_and_global_error_listeners_and_the_connection_lives_on(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    local: list[tuple[Connection | None, BaseException]] = []
    global_: list[tuple[object, BaseException]] = []
    handled: list[object] = []

    def remember(connection: object, error: BaseException) -> None:
        global_.append((connection, error))

    add_global_error_listener(remember)
    try:
        async with pair(transport, aeron_dir, client_dir, port) as (server, conn):
            server.on_error(lambda c, e: local.append((c, e)))

            @server.on_message(Move)
            def explode(c: Connection, m: Move) -> None:
                if m.x < 0:
                    raise ValueError(f"bad move {m.x}")
                handled.append(m)

            @server.on_message(Chat)
            async def explode_later(c: Connection, m: Chat) -> None:
                await asyncio.sleep(0)
                if m.text == "boom":
                    raise RuntimeError("async boom")
                handled.append(m)

            await deliver(conn, Move(-1, 0), local, 1)
            await deliver(conn, Chat("boom"), local, 2)
            await deliver(conn, Move(1, 0), handled, 1)
            await deliver(conn, Chat("fine"), handled, 2)
            server_conn = await server_end(server, conn)
            assert handled == [Move(1, 0), Chat("fine")]
            assert [(c, type(e), str(e)) for c, e in local] == [
                (server_conn, ValueError, "bad move -1"),
                (server_conn, RuntimeError, "async boom"),
            ]
            # The global listener heard the same two errors (the very same objects).
            ours = [(c, e) for c, e in global_ if c is server_conn]
            assert [e for _, e in ours] == [e for _, e in local]
            assert not conn.is_closed
            assert not server_conn.is_closed
    finally:
        assert remove_global_error_listener(remember)
    assert not remove_global_error_listener(remember)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_under_the_error_policy_a_message_nobody_listens_for_is_an_unhandled_message_error(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    errors: list[tuple[Connection | None, BaseException]] = []
    got: list[object] = []
    async with (
        running_server(server_config(aeron_dir, port, on_unhandled="error")) as server,
        connected_client(client_config(transport, aeron_dir, client_dir), port) as (_, conn),
    ):
        await wait_until(lambda: server.connections, 5)
        server.on_error(lambda c, e: errors.append((c, e)))
        server.on_message(Ack, lambda c, m: got.append(m))
        await deliver(conn, Unlisted("nobody"), errors, 1)
        server_conn = await server_end(server, conn)
        ((where, error),) = errors
        assert where is server_conn
        assert isinstance(error, UnhandledMessageError)
        assert "Unlisted" in str(error)
        assert error.message_type is Unlisted
        assert server_conn.unhandled_messages == server.unhandled_messages == 1
        # It is dropped, and later messages still arrive.
        await deliver(conn, Ack(1), got, 1)
        assert got == [Ack(1)]
        assert len(errors) == 1


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_client_side_dispatch_and_errors(transport: str, aeron_dir: Path, client_dir: Path, port: int) -> None:
    """The client end point dispatches and reports the same way as the server."""
    seen: list[object] = []
    errors: list[BaseException] = []
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config(transport, aeron_dir, client_dir, on_unhandled="error"), port) as (
            client,
            _conn,
        ),
    ):
        client.on_error(lambda c, e: errors.append(e))

        @client.on_message(Move)
        async def on_move(c: Connection, m: Move) -> None:
            seen.append(m)

        def fast_fails(c: Connection, m: FastMove) -> None:
            raise KeyError("fast")

        client.on_message(FastMove, fast_fails)
        server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
        await server_conn.send(FastMove(1, 1, speed=1))
        await server_conn.send(Unlisted("x"))
        await server_conn.send(Move(2, 2))
        await wait_until(lambda: seen and len(errors) == 2, 5)
        assert seen == [Move(2, 2)]
        assert isinstance(errors[0], KeyError)
        assert isinstance(errors[1], UnhandledMessageError)


@pytest.mark.parametrize("native", [True, False], ids=["native", "python"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_either_dispatch_path_keeps_order_across_sync_and_async_listeners_of_different_types(
    transport: str, native: bool, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """A message for a sync listener that arrives behind one still held by an async listener waits its turn, whether
    the connection reads natively (``native_dispatch``) or through Python; keepalives and pings ride along."""
    seen: list[tuple[str, int]] = []
    async with (
        running_server(server_config(aeron_dir, port, native_dispatch=native, ping_interval=0.05)) as server,
        connected_client(
            client_config(transport, aeron_dir, client_dir, native_dispatch=native, ping_interval=0.05), port
        ) as (_, conn),
    ):
        await wait_until(lambda: server.connections, 5)

        async def slow(c: Connection, m: Num) -> None:
            await asyncio.sleep(0.001)
            seen.append(("num", m.i))

        server.on_message(Num, slow)
        server.on_message(Move, lambda c, m: seen.append(("move", m.x)))
        expected: list[tuple[str, int]] = []
        for i in range(300):
            message: Num | Move = Num(i) if i % 7 == 0 else Move(i, 0)
            if not conn.send_nowait(message):  # the native offer, or back pressure: then the waiting send
                await asyncio.wait_for(conn.send(message), 5)
            expected.append(("num" if i % 7 == 0 else "move", i))
            if i % 50 == 0:
                await asyncio.sleep(0.01)  # let pings and keepalives interleave
        await wait_until(lambda: len(seen) == len(expected), 20)
        rtt = await conn.ping(5)
    assert seen == expected
    assert rtt > 0
