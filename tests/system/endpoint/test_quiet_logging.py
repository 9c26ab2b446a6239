"""Quiet, conventional logging: NullHandlers on the library's loggers, a policy for messages nobody listens to, and
driver errors that become typed errors not also logged as tracebacks. Real servers, clients and drivers."""

from __future__ import annotations

import asyncio
import logging
import socket
from pathlib import Path

import pytest

import driver
import endpoint
from endpoint import Connection, ServerError, UnhandledMessageError
from support.endpoints import (
    Ack,
    Chat,
    Unlisted,
    client_config,
    connected_client,
    running_server,
    server_config,
    server_end,
    wait_until,
)

BROADCASTS = 40


def records_with_tracebacks(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info is not None or r.exc_text]


def test_the_library_loggers_carry_a_null_handler_once() -> None:
    import importlib

    for name in ("endpoint", "driver"):
        handlers = [h for h in logging.getLogger(name).handlers if isinstance(h, logging.NullHandler)]
        assert len(handlers) == 1, name
    importlib.reload(endpoint)
    importlib.reload(driver)
    for name in ("endpoint", "driver"):
        handlers = [h for h in logging.getLogger(name).handlers if isinstance(h, logging.NullHandler)]
        assert len(handlers) == 1, f"{name}: a reload added another NullHandler"


async def test_a_broadcast_nobody_listens_for_is_logged_once_per_type_without_a_traceback(
    aeron_dir: Path, client_dir: Path, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    """The default ``log_once``: 40 broadcasts of a type with no listener give one warning, no traceback."""
    caplog.set_level(logging.DEBUG, logger="endpoint")
    acks: list[object] = []
    async with (
        running_server(server_config(aeron_dir, port)) as server,
        connected_client(client_config("udp", aeron_dir, client_dir), port) as (client, conn),
    ):
        assert client.config.on_unhandled == "log_once"
        client.on_message(Ack, lambda c, m: acks.append(m))
        await wait_until(lambda: server.connections, 5)
        for i in range(BROADCASTS):
            await server.connections[0].send(Unlisted(f"n{i}"))
        await server.connections[0].send(Chat("also unlisted"))
        await server.connections[0].send(Ack(1))
        await wait_until(lambda: acks, 10, what="the ack after the unhandled messages")
        assert acks == [Ack(1)]  # dropped messages hold nothing back
        assert conn.unhandled_messages == client.unhandled_messages == BROADCASTS + 1

    ours = [r for r in caplog.records if r.name.startswith("endpoint") and r.levelno >= logging.WARNING]
    assert [r.levelno for r in ours] == [logging.WARNING, logging.WARNING], [r.getMessage() for r in ours]
    assert "Unlisted" in ours[0].getMessage()
    assert "Chat" in ours[1].getMessage()
    assert not records_with_tracebacks(caplog)


async def test_the_ignore_policy_only_counts(
    aeron_dir: Path, client_dir: Path, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="endpoint")
    errors: list[BaseException] = []
    async with (
        running_server(server_config(aeron_dir, port, on_unhandled="ignore")) as server,
        connected_client(client_config("ipc", aeron_dir, client_dir), port) as (_, conn),
    ):
        server.on_error(lambda c, e: errors.append(e))
        for i in range(5):
            await asyncio.wait_for(conn.send(Unlisted(f"n{i}")), 5)
        await wait_until(lambda: server.unhandled_messages == 5, 10, what="five unhandled messages counted")
        assert server.connections[0].unhandled_messages == 5
    assert errors == []
    assert not [r for r in caplog.records if "no listener" in r.getMessage()]


async def test_the_error_policy_reaches_on_error_with_the_connection_and_logs_no_traceback_per_message(
    aeron_dir: Path, client_dir: Path, port: int, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="endpoint")
    seen: list[tuple[Connection | None, BaseException]] = []
    async with (
        running_server(server_config(aeron_dir, port, on_unhandled="error")) as server,
        connected_client(client_config("udp", aeron_dir, client_dir), port) as (_, conn),
    ):
        server.on_error(lambda c, e: seen.append((c, e)))
        for i in range(3):
            await asyncio.wait_for(conn.send(Unlisted(f"n{i}")), 5)
        await wait_until(lambda: len(seen) == 3, 10, what="three unhandled message errors")
        server_conn = await server_end(server, conn)
        assert all(c is server_conn for c, _ in seen)
        assert all(isinstance(e, UnhandledMessageError) and e.message_type is Unlisted for _, e in seen)
        assert server_conn.unhandled_messages == 3
    assert not records_with_tracebacks(caplog)


async def test_a_driver_error_the_end_point_raises_as_a_typed_error_is_not_also_logged_as_a_traceback(
    aeron_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A port in use: the driver fails to open the socket and tells the client; the server raises ServerError."""
    caplog.set_level(logging.DEBUG)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as taken:
        taken.bind(("127.0.0.1", 0))
        port = int(taken.getsockname()[1])
        server = endpoint.Server(server_config(aeron_dir, port))
        try:
            with pytest.raises(ServerError, match="in use"):
                await asyncio.wait_for(server.bind(), 30)
        finally:
            await asyncio.wait_for(server.close(), 30)
    assert not records_with_tracebacks(caplog), [r.getMessage() for r in records_with_tracebacks(caplog)]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name.startswith("driver")]
    told = [r for r in caplog.records if r.name == "driver" and "told to the client" in r.getMessage()]
    assert told, "the driver keeps a DEBUG line of the error"
    assert told[0].levelno == logging.DEBUG


def test_on_unhandled_takes_one_of_three_policies() -> None:
    for policy in ("ignore", "log_once", "error"):
        assert endpoint.ClientConfiguration(on_unhandled=policy).on_unhandled == policy  # type: ignore[arg-type]
    with pytest.raises(endpoint.ConfigurationError, match="on_unhandled='loud'"):
        endpoint.ServerConfiguration(on_unhandled="loud")  # type: ignore[arg-type]
