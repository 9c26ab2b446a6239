"""``auto_reconnect`` as people rely on it: backoff, listeners told, a typed error when it gives up.

A server in its own process is killed (SIGKILL) and started again on the same port: the client's
``on_reconnecting`` listeners see numbered attempts (the first caused by the lost connection), then
``on_reconnected`` the new connection, which carries messages. A server that never comes back: after
``reconnect_timeout`` the client's ``on_error`` gets ReconnectFailedError with the last attempt's cause, logged
once at WARNING (and only there when no one listens). A server that comes back unable to take the client (its
serialization differs, or its key is not the one the client pinned) ends the retrying at once with a permanent
ReconnectFailedError. Messages sent while reconnecting (opt-in) are kept within bounds and delivered once, in
order. Over UDP (the client has a driver of its own) and IPC (the client
uses the server's driver, which the kill takes away too).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import attrs
import pytest

from endpoint import (
    BudgetExceededError,
    Client,
    ClientRejectedError,
    Connection,
    ConnectionClosedError,
    ReconnectFailedError,
    Reconnecting,
    RejectReason,
    Serialization,
)
from support.endpoints import (
    MESSAGE_CLASSES,
    TRANSPORTS,
    Ack,
    Blob,
    Num,
    client_config,
    running_server,
    server_config,
    wait_until,
)
from support.logged_process import LoggedProcess

pytestmark = [pytest.mark.process, pytest.mark.slow]


@attrs.define
class Extra:
    """Registered by one server only, under the type id of the client's Move: their classes cannot talk."""

    n: int


def incompatible_serialization() -> Serialization:
    ser = Serialization()
    ser.register(Extra, type_id=1)
    for type_id, cls in enumerate(MESSAGE_CLASSES[1:], start=2):
        ser.register(cls, type_id=type_id)
    return ser


@attrs.define
class Seen:
    """What the client's listeners saw, in order."""

    log: list[tuple[str, Any]] = attrs.field(factory=list)
    acks: list[int] = attrs.field(factory=list)
    errors: list[BaseException] = attrs.field(factory=list)

    def kinds(self, kind: str) -> list[Any]:
        return [value for k, value in self.log if k == kind]

    def failures(self) -> list[ReconnectFailedError]:
        return [e for e in self.errors if isinstance(e, ReconnectFailedError)]


def watched_client(transport: str, aeron_dir: Path, client_dir: Path, **overrides: Any) -> tuple[Client, Seen]:
    settings: dict[str, Any] = {
        "launch_driver": transport != "ipc",
        "auto_reconnect": True,
        "ping_interval": 0.2,
        "peer_timeout": 2.0,
        "handshake_timeout": 0.5,
        "reconnect_initial_delay": 0.05,
        "reconnect_max_delay": 0.5,
    }
    settings.update(overrides)
    client = Client(client_config(transport, aeron_dir, client_dir, **settings))
    seen = Seen()
    client.on_connect(lambda conn: seen.log.append(("connect", conn)))
    client.on_reconnecting(lambda event: seen.log.append(("reconnecting", event)))

    async def reconnected(conn: Connection) -> None:  # an async listener, run as a task of the client's
        seen.log.append(("reconnected", conn))

    client.on_reconnected(reconnected)
    client.on_message(Ack, lambda conn, ack: seen.acks.append(ack.seq))
    client.on_error(lambda conn, exc: seen.errors.append(exc))
    return client, seen


async def echo(conn: Connection, seen: Seen, seq: int) -> None:
    await conn.send(Num(seq))
    await wait_until(lambda: seq in seen.acks, 10, what=f"the echo of {seq}")


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_killed_server_restarted_on_its_port_gets_its_client_back(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    tmp_path: Path,
    start_server: Callable[..., LoggedProcess],
) -> None:
    key_path = str(tmp_path / "server.key")
    client, seen = watched_client(transport, aeron_dir, client_dir)
    async with asyncio.timeout(120), client:
        server = start_server(port, aeron_dir, "--key-path", key_path)
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the server to serve")
        first = await client.connect("127.0.0.1", port)
        await echo(first, seen, 1)
        server.kill()
        await wait_until(lambda: seen.kinds("reconnecting"), 30, 0.02, "the client to start reconnecting")
        server = start_server(port, aeron_dir, "--key-path", key_path)
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the restarted server to serve")
        await wait_until(lambda: seen.kinds("reconnected"), 60, 0.02, "the client to reconnect")

        attempts: list[Reconnecting] = seen.kinds("reconnecting")
        assert [a.attempt for a in attempts] == list(range(1, len(attempts) + 1))
        assert all(0 <= a.delay <= 0.5 for a in attempts)
        assert isinstance(attempts[0].cause, ConnectionClosedError)  # why the connection went away
        assert first.is_closed
        kinds = [k for k, _ in seen.log]
        # connect (first), the attempts, then the new connection's on_connect and on_reconnected.
        assert kinds == ["connect"] + ["reconnecting"] * len(attempts) + ["connect", "reconnected"]
        conn = seen.kinds("reconnected")[0]
        assert conn is client.connection
        assert conn is seen.kinds("connect")[-1]
        assert conn.is_ipc == (transport == "ipc")
        await echo(conn, seen, 2)
        assert not seen.failures()


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_server_that_never_comes_back_ends_in_a_typed_error(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    tmp_path: Path,
    start_server: Callable[..., LoggedProcess],
    caplog: pytest.LogCaptureFixture,
) -> None:
    client, seen = watched_client(
        transport,
        aeron_dir,
        client_dir,
        reconnect_timeout=3.0,
        connect_timeout=1.0,
        driver_timeout=2.0,
        buffer_while_reconnecting=True,
    )
    caplog.set_level(logging.DEBUG, logger="endpoint")
    async with asyncio.timeout(120), client:
        server = start_server(port, aeron_dir, "--key-path", str(tmp_path / "server.key"))
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the server to serve")
        conn = await client.connect("127.0.0.1", port)
        await echo(conn, seen, 1)
        server.kill()
        await wait_until(lambda: seen.kinds("reconnecting"), 30, 0.02, "the client to start reconnecting")
        await client.send(Num(2))  # kept for a reconnect that will not happen
        await client.send(Num(3))
        await wait_until(seen.failures, 60, 0.02, "the client to give up reconnecting")
        [failure] = seen.failures()
        assert failure.undelivered == 2
        assert client.buffered_dropped == 2
        assert not failure.permanent
        assert failure.attempts >= 1
        assert failure.attempts == len(seen.kinds("reconnecting"))
        assert failure.cause is not None
        assert failure.__cause__ is failure.cause
        assert not seen.kinds("reconnected")
        assert client.connection is None or client.connection.is_closed
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING and "gave up reconnecting" in r.message]
        assert len(warnings) == 1, caplog.text
        assert warnings[0].levelno == logging.WARNING
        with pytest.raises(ConnectionClosedError):  # given up: nothing is kept any more
            await client.send(Num(4))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_messages_sent_while_reconnecting_are_delivered_once_in_order_after_it(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    tmp_path: Path,
    start_server: Callable[..., LoggedProcess],
) -> None:
    """Kept within both bounds (a send past either is refused with BudgetExceededError naming it), then delivered
    on the new connection before anything sent later, each once: the server echoes each Num it gets."""
    key_path = str(tmp_path / "server.key")
    client, seen = watched_client(
        transport,
        aeron_dir,
        client_dir,
        buffer_while_reconnecting=True,
        max_buffered_messages=4,
        max_buffered_bytes=1024,
    )
    async with asyncio.timeout(120), client:
        server = start_server(port, aeron_dir, "--key-path", key_path)
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the server to serve")
        await echo(await client.connect("127.0.0.1", port), seen, 0)
        server.kill()
        await wait_until(lambda: seen.kinds("reconnecting"), 30, 0.02, "the client to start reconnecting")
        for seq in (1, 2, 3):
            await client.send(Num(seq))
        with pytest.raises(BudgetExceededError) as too_big:
            await client.send(Blob(b"x" * 1100))
        assert too_big.value.budget == "max_buffered_bytes"
        await client.send(Num(4))
        with pytest.raises(BudgetExceededError) as too_many:
            await client.send(Num(5))
        assert too_many.value.budget == "max_buffered_messages"
        assert client.buffered_refused == 2
        assert seen.acks == [0]

        server = start_server(port, aeron_dir, "--key-path", key_path)
        await wait_until(partial(server.has, "serving "), 30, 0.02, "the restarted server to serve")
        await wait_until(lambda: seen.kinds("reconnected"), 60, 0.02, "the client to reconnect")
        await client.send(Num(6))  # after the kept ones, whatever is left of them to send
        await wait_until(lambda: 6 in seen.acks, 15, what="the echo of the message sent after the reconnect")
        assert seen.acks == [0, 1, 2, 3, 4, 6]  # each kept one once, in order, before the later one
        assert client.buffered_dropped == 0
        assert not seen.failures()


@pytest.mark.parametrize("change", ["serialization", "key"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_server_that_cannot_take_the_client_ends_the_retrying_at_once(
    transport: str, change: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    """The first server shuts down (its clients reconnect: a supervisor may restart it); the one that comes up
    on its port has another serialization, or another key than the one the client pinned, so no number of
    attempts can succeed: the first (authenticated) rejection ends it."""
    client, seen = watched_client(transport, aeron_dir, client_dir, launch_driver=True, reconnect_timeout=600.0)
    async with asyncio.timeout(120), client:
        async with running_server(server_config(aeron_dir, port, key_path=tmp_path / "first.key")):
            await client.connect("127.0.0.1", port)
        await wait_until(lambda: seen.kinds("reconnecting"), 30, 0.02, "the client to start reconnecting")
        if change == "serialization":
            changed = server_config(
                aeron_dir, port, key_path=tmp_path / "first.key", serialization=incompatible_serialization()
            )
            expected = RejectReason.SERIALIZATION_MISMATCH
        else:
            changed = server_config(aeron_dir, port, key_path=tmp_path / "other.key")
            expected = RejectReason.SERVER_KEY_CHANGED
        async with running_server(changed):
            await wait_until(seen.failures, 60, 0.02, "the client to give up at the rejection")
            [failure] = seen.failures()
            assert failure.permanent
            assert isinstance(failure.cause, ClientRejectedError)
            assert failure.cause.reason is expected
            assert failure.cause.authenticated
            assert failure.attempts == len(seen.kinds("reconnecting"))
            reconnect = client._reconnect_task
            assert reconnect is not None
            await wait_until(reconnect.done, 10, what="the reconnect task to end")
            assert not seen.kinds("reconnected")
            assert len(seen.kinds("connect")) == 1  # the closing first server handed out no new connection


async def test_giving_up_with_no_error_listener_is_logged_once_at_warning(
    aeron_dir: Path, client_dir: Path, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="endpoint")
    client = Client(
        client_config(
            "udp", aeron_dir, client_dir, auto_reconnect=True, reconnect_initial_delay=0.05, reconnect_timeout=600.0
        )
    )
    async with asyncio.timeout(120), client:
        async with running_server(server_config(aeron_dir, port)):
            await client.connect("127.0.0.1", port)
        await wait_until(lambda: client._reconnect_task is not None, 30, 0.02, "the client to start reconnecting")
        async with running_server(server_config(aeron_dir, port, serialization=incompatible_serialization())):
            reconnect = client._reconnect_task
            assert reconnect is not None
            await wait_until(reconnect.done, 60, 0.02, "the client to give up at the rejection")
    told = [r for r in caplog.records if "gave up reconnecting" in r.getMessage()]
    assert [r.levelno for r in told] == [logging.WARNING], caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR and r.name == "endpoint"], caplog.text
