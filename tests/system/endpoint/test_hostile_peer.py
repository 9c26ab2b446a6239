"""A peer that breaks the protocol on an established connection: errors stay with their connection.

The hostile client writes straight to its connection's publication (what a modified peer could send): empty
messages, internal messages with fields of the wrong type, bytes that do not decode. Each is dropped, counted
and reported to the server's ``on_error`` with that connection, and to no other end point on the same driver;
the connection keeps working.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest

from endpoint import BudgetExceededError, Client, Connection, MalformedMessageError, SerializationError, Server
from endpoint.messages import Disconnect, Ping, Pong, RpcCall, RpcCancel, StreamEnd, StreamOpen
from endpoint.streaming import BYTES, CHUNK_HEADER_LENGTH, MESSAGE, IncomingStream, _write_header
from support.endpoints import (
    TRANSPORTS,
    Chat,
    Num,
    client_config,
    connected_client,
    free_server_port,
    running_server,
    server_config,
    wait_until,
)

Errors = list[tuple[Connection | None, BaseException]]


async def offer_raw(conn: Connection, data: bytes | bytearray) -> None:
    """Put ``data`` on the connection's log as one message, bypassing every check of ``send``."""
    deadline = time.monotonic() + 10
    while conn._pub.offer(data) < 0:
        assert time.monotonic() < deadline, "the raw offer was refused for 10 s"
        await asyncio.sleep(0.001)


def chunk(stream_id: int, payload: bytes) -> bytearray:
    """A stream chunk frame as the sender builds it."""
    frame = bytearray(CHUNK_HEADER_LENGTH + len(payload))
    _write_header(frame, stream_id, len(payload))
    frame[CHUNK_HEADER_LENGTH:] = payload
    return frame


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@asynccontextmanager
async def hostile_pair(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, client: dict[str, Any] | None = None, **overrides: Any
) -> AsyncIterator[tuple[Server, Client, Connection, Connection, dict[str, Errors]]]:
    """Server, a bystander server on the same driver, and a client; yields both ends and every on_error's log."""
    errors: dict[str, Errors] = {"server": [], "bystander": [], "client": []}
    async with (
        running_server(server_config(aeron_dir, port, **overrides)) as server,
        running_server(server_config(aeron_dir, free_server_port(), **overrides)) as bystander,
        connected_client(client_config(transport, aeron_dir, client_dir, **{**overrides, **(client or {})}), port) as (
            the_client,
            conn,
        ),
    ):
        server.on_error(lambda c, e: errors["server"].append((c, e)))
        bystander.on_error(lambda c, e: errors["bystander"].append((c, e)))
        the_client.on_error(lambda c, e: errors["client"].append((c, e)))
        server_conn = await wait_until(lambda: server.connections and server.connections[0], 5)
        yield server, the_client, conn, server_conn, errors


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
                await offer_raw(conn, data)
            await conn.send(Chat("still here"))
            await wait_until(lambda: chats == ["still here"], 10)
            await wait_until(lambda: len(errors["server"]) == len(hostile), 5, what="every drop reported")
            await asyncio.sleep(0.2)  # a late echo would show up on the wrong end point by now
        assert server_conn.malformed_messages == len(hostile)
        assert server.malformed_messages == len(hostile)
        for where, error in errors["server"]:
            assert where is server_conn
            assert isinstance(error, SerializationError)
        # The codec itself refuses a field of the wrong type (Ping, Pong, both RpcCalls, Disconnect), as it does
        # bytes that are no msgpack: those are undecodable; the rest (values out of range, and the empty message)
        # fail the internal messages' own checks.
        assert sum(isinstance(e, MalformedMessageError) for _, e in errors["server"]) == 4
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


# ------------------------------------------------------------------------------------------------ budgets

MIB = 1 << 20
BUDGET = {
    "term_length": MIB,
    "ipc_term_length": MIB,
    "max_message_size": MIB,
    "max_incoming_bytes": 2 * MIB,
    "max_incoming_streams": 8,
    "stream_stall_timeout": 3.0,
}
"""Small budgets, so a few dozen MiB of hostile traffic is many times over them. The stall timeout is not small:
a loaded machine must not let a stream stall while the test is still feeding it (that would free its slot and
bytes, and the budgets would be tested less than the assertions say)."""


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_large_messages_never_finished_hold_at_most_the_budget_and_time_out(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """Issue 17: one connection opening many large messages and never finishing them made a server hold 86 MiB."""
    opened, piece = 64, os.urandom(60 * 1024)
    pieces_each = 15  # 900 KiB of each announced 1 MiB message: 56 MiB offered in all
    async with hostile_pair(transport, aeron_dir, client_dir, port, **BUDGET) as (server, client, conn, s_conn, errors):
        chats: list[str] = []
        server.on_message(Chat, lambda c, m: chats.append(m.text))
        encode = client.config.serialization.encode
        rss_before = rss_bytes()
        held_high = total_high = rss_high = 0
        async with asyncio.timeout(60):
            for stream_id in range(1, opened + 1):
                await offer_raw(conn, encode(StreamOpen(stream_id, MESSAGE, "", MIB - 1, None)))
                for _ in range(pieces_each):
                    await offer_raw(conn, chunk(stream_id, piece))
                    held_high = max(held_high, s_conn.streams.held_bytes)
                    total_high = max(total_high, s_conn.held_bytes)
                rss_high = max(rss_high, rss_bytes())
            await conn.send(Chat("still here"))  # the connection works throughout
            await wait_until(lambda: chats == ["still here"], 10)
            held_high = max(held_high, s_conn.streams.held_bytes)
            # Whatever was still assembling gets no more chunks: dropped once stream_stall_timeout passes.
            await wait_until(lambda: s_conn.streams.incoming == 0, 10, what="stalled messages dropped")
            # The server cancels each dropped stream; a message it sends after them arrives after them, so the
            # client's own stream below (its ids start at 1 too) cannot be hit by a cancel still in flight.
            back: list[str] = []
            client.on_message(Chat, lambda c, m: back.append(m.text))
            await s_conn.send(Chat("cancels sent"))
            await wait_until(lambda: back == ["cancels sent"], 10, what="the server's cancels read")
        streams = s_conn.streams
        print(
            f"{transport}: held at most {held_high} bytes of a {BUDGET['max_incoming_bytes']} budget; "
            f"RSS grew {(rss_high - rss_before) / MIB:.1f} MiB for {opened * pieces_each * len(piece) / MIB:.0f} MiB "
            f"offered; {streams.over_budget} over budget, {streams.stalled} stalled"
        )
        assert held_high <= BUDGET["max_incoming_bytes"]
        # Beyond it, only the one message being reassembled from its fragments (at most an eighth of a term).
        assert total_high <= BUDGET["max_incoming_bytes"] + BUDGET["term_length"] // 8
        assert s_conn.held_bytes == 0
        assert streams.over_budget + streams.stalled == opened  # every one of them, one way or the other
        assert streams.over_budget >= opened - 8
        assert streams.stalled >= 1
        assert rss_high - rss_before < 32 * MIB  # not the 56 MiB sent
        budgets = [e.budget for c, e in errors["server"] if isinstance(e, BudgetExceededError) and c is s_conn]
        assert len(budgets) == len(errors["server"]) == opened
        assert set(budgets) <= {"max_incoming_streams", "max_incoming_bytes", "stream_stall_timeout"}
        assert errors["bystander"] == []
        assert not s_conn.is_closed
        assert s_conn.malformed_messages == 0
        # And a large message sent properly still arrives whole.
        await asyncio.wait_for(conn.send(Chat("x" * (MIB // 2))), 10)
        await wait_until(lambda: len(chats) == 2, 10)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_streams_in_flight_are_bounded_in_count_and_stalled_ones_time_out(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with hostile_pair(transport, aeron_dir, client_dir, port, **BUDGET) as (server, client, conn, s_conn, errors):
        failures: list[BaseException] = []

        async def consume(c: Connection, stream: IncomingStream) -> None:
            try:
                await stream.read()
            except BudgetExceededError as exc:
                failures.append(exc)

        server.on_stream(consume)
        encode = client.config.serialization.encode
        async with asyncio.timeout(30):
            for stream_id in range(1, 21):
                await offer_raw(conn, encode(StreamOpen(stream_id, BYTES, f"s{stream_id}", 1000, None)))
                await offer_raw(conn, chunk(stream_id, b"x" * 100))
            await wait_until(lambda: s_conn.streams.over_budget == 12, 10)
            await wait_until(lambda: len(failures) == 8, 10, what="the 8 admitted streams to stall")
            chats: list[str] = []
            server.on_message(Chat, lambda c, m: chats.append(m.text))
            await conn.send(Chat("still here"))
            await wait_until(lambda: chats == ["still here"], 10)
        assert s_conn.streams.stalled == 8
        assert s_conn.streams.incoming == 0
        assert s_conn.held_bytes == 0
        assert {e.budget for e in failures} == {"stream_stall_timeout"}  # type: ignore[attr-defined]
        refused = [e for c, e in errors["server"] if c is s_conn and isinstance(e, BudgetExceededError)]
        assert [e.budget for e in refused] == ["max_incoming_streams"] * 12
        assert errors["bystander"] == []
        assert not s_conn.is_closed


class Slow(Protocol):
    async def wait(self, i: int) -> int: ...


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_calls_running_per_connection_are_bounded(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """A peer whose own pool allows more calls in flight than this server runs per connection."""
    async with hostile_pair(transport, aeron_dir, client_dir, port, {"max_pending_calls": 64}, max_pending_calls=4) as (
        server,
        _,
        conn,
        s_conn,
        errors,
    ):
        release = asyncio.Event()

        class Impl:
            async def wait(self, i: int) -> int:
                await release.wait()
                return i

        server.rpc.expose(Impl(), 1)
        proxy = conn.rpc.proxy(Slow, 1, timeout=20)
        async with asyncio.timeout(30):
            first = [asyncio.ensure_future(proxy.wait(i)) for i in range(4)]
            await wait_until(lambda: s_conn.rpc.running == 4, 10)
            extra = [asyncio.ensure_future(proxy.wait(i)) for i in range(4, 10)]
            refused = await asyncio.gather(*extra, return_exceptions=True)
            assert all(isinstance(r, BudgetExceededError) for r in refused), refused
            release.set()
            # The running ones were never touched.
            assert sorted(await asyncio.gather(*first)) == [0, 1, 2, 3]
            assert await proxy.wait(99) == 99
        assert s_conn.rpc.calls_refused == 6
        assert [(c, e.budget) for c, e in errors["server"]] == [(s_conn, "max_pending_calls")] * 6  # type: ignore[attr-defined]
        assert errors["bystander"] == []
        assert not s_conn.is_closed


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_answers_to_a_peer_that_never_reads_them_are_bounded(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    """A peer floods calls (each answered) and reads nothing back: the answers back pressure refuses wait up to a
    bound, beyond it they are dropped and counted; once the peer reads again the connection carries on."""
    async with hostile_pair(transport, aeron_dir, client_dir, port, send_timeout=2.0, max_pending_calls=512) as (
        server,
        client,
        conn,
        s_conn,
        errors,
    ):
        encode = client.config.serialization.encode
        chats: list[str] = []
        server.on_message(Chat, lambda c, m: chats.append(m.text))
        conn._pause_reading()  # as a peer that never reads would
        queued_high = 0
        async with asyncio.timeout(60):
            for call_id in range(1, 4001):
                await offer_raw(conn, encode(RpcCall(call_id, 999, "nothing", [], None)))  # no such object
                queued_high = max(queued_high, s_conn.outbox.queued_later)
            await wait_until(lambda: s_conn.dropped_answers > 0, 10)
            conn._resume_reading()
            await conn.send(Chat("still here"))
            await wait_until(lambda: chats == ["still here"], 10)
            await wait_until(lambda: s_conn.outbox.queued_later == 0, 10, what="the queued answers sent or timed out")
        print(f"{transport}: at most {queued_high} answers queued, {s_conn.dropped_answers} dropped")
        assert queued_high <= 512 + 1024  # max_pending_calls, and room for as many control messages
        assert s_conn.dropped_answers > 0
        assert not s_conn.is_closed
        assert errors["bystander"] == []
