"""A peer that breaks the protocol on an established connection: errors stay with their connection.

The hostile client writes straight to its connection's publication (what a modified peer could send): empty
messages, internal messages with fields of the wrong type, bytes that do not decode. Each is dropped, counted
and reported to the server's ``on_error`` with that connection, and to no other end point on the same driver;
the connection keeps working.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from endpoint import Client, Connection, MalformedMessageError, SerializationError, Server
from endpoint.messages import Disconnect, Ping, Pong, RpcCall, RpcCancel, StreamEnd, StreamOpen
from support.endpoints import (
    TRANSPORTS,
    Chat,
    Num,
    client_config,
    connected_client,
    free_udp_port,
    running_server,
    server_config,
    wait_until,
)

Errors = list[tuple[Connection | None, BaseException]]


def offer_raw(conn: Connection, data: bytes) -> None:
    """Put ``data`` on the connection's log as one message, bypassing every check of ``send``."""
    deadline = time.monotonic() + 5
    while conn._pub.offer(data) < 0:
        assert time.monotonic() < deadline, "the raw offer was refused for 5 s"
        time.sleep(0.001)


@asynccontextmanager
async def hostile_pair(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, **overrides: Any
) -> AsyncIterator[tuple[Server, Client, Connection, Connection, dict[str, Errors]]]:
    """Server, a bystander server on the same driver, and a client; yields both ends and every on_error's log."""
    errors: dict[str, Errors] = {"server": [], "bystander": [], "client": []}
    async with (
        running_server(server_config(aeron_dir, port, **overrides)) as server,
        running_server(server_config(aeron_dir, free_udp_port(), **overrides)) as bystander,
        connected_client(client_config(transport, aeron_dir, client_dir, **overrides), port) as (client, conn),
    ):
        server.on_error(lambda c, e: errors["server"].append((c, e)))
        bystander.on_error(lambda c, e: errors["bystander"].append((c, e)))
        client.on_error(lambda c, e: errors["client"].append((c, e)))
        server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
        yield server, client, conn, server_conn, errors


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_malformed_messages_are_dropped_counted_and_reported_with_their_connection(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with hostile_pair(transport, aeron_dir, client_dir, port) as (server, client, conn, server_conn, errors):
        chats: list[str] = []
        server.on_message(Chat, lambda c, m: chats.append(m.text))
        encode = client.config.serialization.encode
        hostile = [
            b"",
            encode(Ping("not a number", None)),
            encode(Pong(0, "late")),
            encode(RpcCall("id", 1, "method", [], None)),
            encode(RpcCall(77, 1, "method", "not a list", None)),
            encode(RpcCancel(-1)),
            encode(StreamOpen(1, 9, "kind nine", -1, None)),
            encode(StreamEnd(1, -5, 0)),
            encode(Disconnect(7)),
            b"\xc1",  # never valid msgpack
        ]
        async with asyncio.timeout(20):
            for data in hostile:
                offer_raw(conn, data)
            await conn.send(Chat("still here"))
            await wait_until(lambda: chats == ["still here"], 10)
            await wait_until(lambda: len(errors["server"]) == len(hostile), 5, what="every drop reported")
            await asyncio.sleep(0.2)  # a late echo would show up on the wrong end point by now
        assert server_conn.malformed_messages == len(hostile)
        assert server.malformed_messages == len(hostile)
        for where, error in errors["server"]:
            assert where is server_conn
            assert isinstance(error, SerializationError)
        assert sum(isinstance(e, MalformedMessageError) for _, e in errors["server"]) == len(hostile) - 1
        assert errors["bystander"] == []
        assert not server_conn.is_closed
        assert not conn.is_closed
        # The malformed call with a usable id was answered at once (the caller's pool no longer knows it).
        await wait_until(lambda: conn.rpc.late_answers == 1, 5)
        assert errors["client"] == []


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_listener_that_raises_is_reported_with_its_connection_on_its_end_point_only(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with hostile_pair(transport, aeron_dir, client_dir, port) as (server, _, conn, server_conn, errors):
        seen: list[int] = []

        def on_num(c: Connection, num: Num) -> None:
            seen.append(num.i)
            if num.i % 2:
                raise ValueError(f"odd {num.i}")

        server.on_message(Num, on_num)
        async with asyncio.timeout(20):
            for i in range(6):
                await conn.send(Num(i))
            await wait_until(lambda: seen == list(range(6)), 10)
            await wait_until(lambda: len(errors["server"]) == 3, 5)
            await asyncio.sleep(0.2)
        assert [(c, str(e)) for c, e in errors["server"]] == [(server_conn, f"odd {i}") for i in (1, 3, 5)]
        assert errors["bystander"] == []
        assert errors["client"] == []
        assert server_conn.malformed_messages == 0
        assert not server_conn.is_closed
