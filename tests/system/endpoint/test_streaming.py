"""Streams over a Server/Client connection in one process, on real drivers, over IPC and UDP.

Byte sources (bytes, a file, an async iterator) go to an ``on_stream`` listener that consumes them by iterating,
``read()`` or ``save()``; what arrives is compared by SHA-256. Also: progress on both sides, metadata, messages
over the connection's max message length, cancelling from either end, a slow consumer behind a small window,
and the connection closing mid-stream. Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import hashlib
import random
import zlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest

from endpoint import Client, Connection, Server
from endpoint.errors import (
    ConnectionClosedError,
    MessageTooLargeError,
    StreamAbortedError,
    StreamCancelledError,
    StreamChecksumError,
    StreamError,
)
from endpoint.messages import StreamEnd, StreamOpen
from endpoint.streaming import BYTES, CHUNK_HEADER_LENGTH, IncomingStream, _write_header
from support.endpoints import (
    TRANSPORTS,
    Blob,
    Num,
    client_config,
    connected_client,
    running_server,
    server_config,
    wait_until,
)

BOUND = 30.0
"""Bound on any single wait in these tests (far above what any of them needs)."""
BLOCK = random.Random(99).randbytes(1 << 16)


def data_of(size: int, seed: int = 0) -> bytes:
    return random.Random(seed * 7_919 + size).randbytes(size)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def pieces_of(data: bytes, seed: int = 1) -> AsyncIterator[bytes]:
    """``data`` in pieces of odd sizes, from an async generator that now and then lets the loop run."""
    rng = random.Random(seed)
    at = 0
    while at < len(data):
        size = rng.choice([1, 17, 1000, 4099, 65_537, 200_003])
        yield data[at : at + size]
        at += size
        if rng.random() < 0.1:
            await asyncio.sleep(0)


async def endless(limit: int = 1 << 30) -> AsyncIterator[bytes]:
    """More bytes than any test lets through: a stream that only ends by being stopped."""
    for _ in range(limit // len(BLOCK)):
        yield BLOCK


# ------------------------------------------------------------------------------------------------ the pair


@attrs.define
class Received:
    """What a listener saw of one stream."""

    name: str
    size: int
    metadata: Any
    data: bytes = b""
    error: BaseException | None = None
    progress: list[tuple[int, int]] = attrs.field(factory=list)


@attrs.define
class Pair:
    server: Server
    client: Client
    conn: Connection
    server_conn: Connection
    errors: list[BaseException]
    received: dict[str, Received] = attrs.field(factory=dict)

    async def wait_received(self, name: str) -> Received:
        entry: Received = await wait_until(lambda: self.received.get(name), BOUND, what=f"stream {name!r} received")
        return entry

    def record(self, stream: IncomingStream) -> Received:
        entry = self.received[stream.name] = Received(stream.name, stream.size, stream.metadata)
        return entry


@asynccontextmanager
async def open_pair(
    transport: str,
    aeron_dir: Path,
    client_dir: Path,
    port: int,
    *,
    server: dict[str, Any] | None = None,
    client: dict[str, Any] | None = None,
) -> AsyncIterator[Pair]:
    errors: list[BaseException] = []
    async with running_server(server_config(aeron_dir, port, **(server or {}))) as srv:
        srv.on_error(lambda c, e: errors.append(e))
        async with connected_client(client_config(transport, aeron_dir, client_dir, **(client or {})), port) as (
            cli,
            conn,
        ):
            server_conn = await wait_until(
                lambda: next((c for c in srv.connections if c.id == conn.id), None), BOUND, what="server connection"
            )
            yield Pair(srv, cli, conn, server_conn, errors)


@pytest.fixture(params=TRANSPORTS)
async def pair(request: pytest.FixtureRequest, aeron_dir: Path, client_dir: Path, port: int) -> AsyncIterator[Pair]:
    async with open_pair(request.param, aeron_dir, client_dir, port) as opened:
        yield opened


Consume = Callable[[IncomingStream, Received, Path], Any]


async def by_iterating(stream: IncomingStream, entry: Received, directory: Path) -> None:
    parts: list[bytes] = []
    async for chunk in stream:
        parts.append(chunk)
        entry.progress.append((stream.received, stream.size))
    entry.data = b"".join(parts)


async def by_read(stream: IncomingStream, entry: Received, directory: Path) -> None:
    entry.data = await stream.read()


async def by_save(stream: IncomingStream, entry: Received, directory: Path) -> None:
    path = directory / f"saved-{stream.name}"
    written = await stream.save(path, progress=lambda done, total: entry.progress.append((done, total)))
    entry.data = path.read_bytes()
    assert written == len(entry.data)


CONSUMERS: dict[str, Consume] = {"iterate": by_iterating, "read": by_read, "save": by_save}


def listen(pair: Pair, endpoint: Server | Client, consume: Consume, directory: Path) -> None:
    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        entry = Received(stream.name, stream.size, stream.metadata)
        try:
            await consume(stream, entry, directory)
        except BaseException as exc:
            entry.error = exc
            raise
        finally:
            pair.received[stream.name] = entry

    endpoint.on_stream(on_stream)


def assert_progress(progress: list[tuple[int, int]], size: int, total: int) -> None:
    """Strictly growing counts ending at ``size``, every one against the same ``total``."""
    counts = [done for done, _ in progress]
    assert counts, "no progress reported"
    assert counts == sorted(set(counts))
    assert counts[0] > 0
    assert counts[-1] == size
    assert {t for _, t in progress} == {total}


# ------------------------------------------------------------------------------------------------ arriving intact


@pytest.mark.parametrize("mode", list(CONSUMERS))
async def test_bytes_file_and_async_iterator_arrive_intact(pair: Pair, mode: str, tmp_path: Path) -> None:
    listen(pair, pair.server, CONSUMERS[mode], tmp_path)
    as_bytes = data_of(300_001, seed=1)
    as_file = data_of(1_000_003, seed=2)
    as_pieces = data_of(777_777, seed=3)
    source_file = tmp_path / "source.bin"
    source_file.write_bytes(as_file)
    async with asyncio.timeout(BOUND):
        assert await pair.conn.send_stream(as_bytes, name="bytes") == len(as_bytes)
        assert await pair.conn.send_stream(memoryview(as_bytes)[1:], name="view") == len(as_bytes) - 1
        assert await pair.conn.send_file(source_file) == len(as_file)
        with source_file.open("rb") as file:
            assert await pair.conn.send_stream(file, name="open file") == len(as_file)
        assert await pair.conn.send_stream(pieces_of(as_pieces), name="pieces") == len(as_pieces)
        assert await pair.conn.send_stream(b"", name="empty") == 0
    expected = {
        "bytes": as_bytes,
        "view": as_bytes[1:],
        "source.bin": as_file,
        "open file": as_file,
        "pieces": as_pieces,
        "empty": b"",
    }
    for name, data in expected.items():
        entry = await pair.wait_received(name)
        assert entry.error is None, f"{name}: {entry.error!r}"
        assert len(entry.data) == len(data), name
        assert sha(entry.data) == sha(data), name
    assert pair.received["pieces"].size == -1  # an async iterator's size is not known up front
    assert pair.received["bytes"].size == len(as_bytes)
    assert pair.received["source.bin"].size == len(as_file)
    assert pair.errors == []
    assert list(tmp_path.glob("*.part")) == list(tmp_path.glob(".*.part")) == []  # save() leaves no partial files


async def test_a_stream_from_the_server_to_the_client(pair: Pair, tmp_path: Path) -> None:
    listen(pair, pair.client, by_save, tmp_path)
    data = data_of(2_000_000, seed=4)
    async with asyncio.timeout(BOUND):
        assert await pair.server_conn.send_stream(data, name="down", metadata={"from": "server"}) == len(data)
    entry = await pair.wait_received("down")
    assert entry.error is None
    assert sha(entry.data) == sha(data)
    assert entry.metadata == {"from": "server"}


async def test_progress_on_both_sides_grows_to_the_size(pair: Pair, tmp_path: Path) -> None:
    listen(pair, pair.server, by_save, tmp_path)
    data = data_of(654_321, seed=5)
    known: list[tuple[int, int]] = []
    unknown: list[tuple[int, int]] = []
    announced: list[tuple[int, int]] = []
    async with asyncio.timeout(BOUND):
        await pair.conn.send_stream(data, name="known", progress=lambda d, t: known.append((d, t)))
        await pair.conn.send_stream(pieces_of(data), name="unknown", progress=lambda d, t: unknown.append((d, t)))
        await pair.conn.send_stream(
            pieces_of(data), name="announced", size=len(data), progress=lambda d, t: announced.append((d, t))
        )
    assert_progress(known, len(data), len(data))
    assert_progress(unknown, len(data), -1)
    assert_progress(announced, len(data), len(data))
    chunk = pair.conn.streams.chunk_size
    assert len(known) == -(-len(data) // chunk)  # one call per chunk
    for name, total in (("known", len(data)), ("unknown", -1), ("announced", len(data))):
        entry = await pair.wait_received(name)
        assert entry.error is None
        assert sha(entry.data) == sha(data)
        assert entry.size == total
        assert_progress(entry.progress, len(data), total)


async def test_iterating_sees_received_grow_to_the_size(pair: Pair, tmp_path: Path) -> None:
    listen(pair, pair.server, by_iterating, tmp_path)
    data = data_of(500_000, seed=6)
    async with asyncio.timeout(BOUND):
        await pair.conn.send_stream(data, name="counted")
    entry = await pair.wait_received("counted")
    assert sha(entry.data) == sha(data)
    assert entry.progress[-1] == (len(data), len(data))
    assert [done for done, _ in entry.progress] == sorted(done for done, _ in entry.progress)


async def test_name_and_metadata_arrive(pair: Pair, tmp_path: Path) -> None:
    seen: list[tuple[str, int, Any, int, bool]] = []

    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        data = await stream.read()
        seen.append((stream.name, stream.size, stream.metadata, len(data), stream.done))
        assert stream.received == len(data)
        assert conn is pair.server_conn
        assert stream.connection is pair.server_conn

    pair.server.on_stream(on_stream)
    metadata = {"kind": "report", "parts": [1, 2, 3], "nested": {"ok": True, "none": None}, "raw": b"\x00\x01"}
    path = tmp_path / "quarterly report.csv"
    path.write_bytes(b"a,b\n1,2\n")
    async with asyncio.timeout(BOUND):
        await pair.conn.send_stream(b"abc", name="with metadata", metadata=metadata)
        await pair.conn.send_file(path, metadata=["file", 1])
        await pair.conn.send_stream(b"", name="")
    await wait_until(lambda: len(seen) == 3, BOUND, what="three streams")
    assert seen == [
        ("with metadata", 3, metadata, 3, True),
        ("quarterly report.csv", 8, ["file", 1], 8, True),
        ("", 0, None, 0, True),
    ]


# ------------------------------------------------------------------------------------------------ large messages


async def test_a_message_over_the_max_length_arrives_whole_and_in_order(pair: Pair) -> None:
    log: list[object] = []
    pair.server.on_message(Num, lambda c, m: log.append(m))
    pair.server.on_message(Blob, lambda c, m: log.append(m))
    big = [Blob(data_of(n, seed=n)) for n in (300_000, 1_000_000)]
    assert len(pair.conn.endpoint.config.serialization.encode(big[0])) > pair.conn.max_message_length
    async with asyncio.timeout(BOUND):
        await pair.conn.send(Num(0))
        await pair.conn.send(big[0])
        await pair.conn.send(Num(1))
        await pair.conn.send(big[1])
        for i in range(2, 20):
            await pair.conn.send(Num(i))
    await wait_until(lambda: len(log) == 22, BOUND, what="every message")
    assert log == [Num(0), big[0], Num(1), big[1], *(Num(i) for i in range(2, 20))]
    assert pair.errors == []


async def test_a_message_over_max_message_size_is_refused_locally(pair: Pair) -> None:
    limit = pair.conn.endpoint.config.max_message_size
    with pytest.raises(MessageTooLargeError, match="max_message_size"):
        await pair.conn.send(Blob(bytes(limit + 1)))


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_message_over_the_receivers_max_message_size_is_declined(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={"max_message_size": 1 << 20}) as p:
        log: list[object] = []
        p.server.on_message(Num, lambda c, m: log.append(m))
        p.server.on_message(Blob, lambda c, m: log.append(m))
        async with asyncio.timeout(BOUND):
            with pytest.raises(StreamCancelledError, match="max_message_size"):
                await p.conn.send(Blob(bytes(8 << 20)))
            await p.conn.send(Num(1))
        await wait_until(lambda: log, BOUND, what="the message after the declined one")
        assert log == [Num(1)]
        assert any(isinstance(e, StreamError) and "max_message_size" in str(e) for e in p.errors), p.errors


# ------------------------------------------------------------------------------------------------ stopping a stream


async def test_the_receiver_cancelling_stops_the_sender(pair: Pair) -> None:
    seen = 0

    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        nonlocal seen
        async for chunk in stream:
            seen += len(chunk)
            if seen > 200_000:
                stream.cancel("seen enough")
                assert stream.done

    pair.server.on_stream(on_stream)
    async with asyncio.timeout(BOUND):
        with pytest.raises(StreamCancelledError) as caught:
            await pair.conn.send_stream(endless(), name="endless")
    assert caught.value.reason == "seen enough"
    assert "seen enough" in str(caught.value)
    # The connection goes on: another stream and a message get through.
    pair.server.remove_listener(on_stream)
    got: list[bytes] = []

    async def second(conn: Connection, stream: IncomingStream) -> None:
        got.append(await stream.read())

    pair.server.on_stream(second)
    async with asyncio.timeout(BOUND):
        await pair.conn.send_stream(b"after", name="after")
    await wait_until(lambda: got, BOUND, what="the second stream")
    assert got == [b"after"]
    assert not pair.conn.is_closed


async def test_a_listener_returning_early_cancels_the_rest(pair: Pair) -> None:
    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        async for _ in stream:
            break  # leaves the stream unconsumed

    pair.server.on_stream(on_stream)
    async with asyncio.timeout(BOUND):
        with pytest.raises(StreamCancelledError, match="without consuming"):
            await pair.conn.send_stream(endless(), name="abandoned")


async def test_the_sender_cancelled_aborts_the_receiver_and_save_leaves_no_file(pair: Pair, tmp_path: Path) -> None:
    directory = tmp_path / "incoming"
    directory.mkdir()
    listen(pair, pair.server, by_save, directory)
    sending = asyncio.get_running_loop().create_task(pair.conn.send_stream(endless(), name="doomed"))
    await wait_until(
        lambda: any(s.received > 100_000 for s in pair.server_conn.streams._incoming.values()),
        BOUND,
        what="the stream under way",
    )
    assert list(directory.iterdir())  # the partial file exists while saving ...
    sending.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(sending, BOUND)
    entry = await pair.wait_received("doomed")
    assert isinstance(entry.error, StreamAbortedError), repr(entry.error)
    assert entry.error.reason == "the sender stopped"
    assert list(directory.iterdir()) == []  # ... and is gone after the abort
    assert not pair.conn.is_closed


async def test_the_sender_failing_mid_stream_aborts_the_receiver(pair: Pair, tmp_path: Path) -> None:
    listen(pair, pair.server, by_iterating, tmp_path)

    async def failing() -> AsyncIterator[bytes]:
        yield data_of(100_000)
        await asyncio.sleep(0.05)
        raise OSError("source broke")

    async with asyncio.timeout(BOUND):
        with pytest.raises(OSError, match="source broke"):
            await pair.conn.send_stream(failing(), name="broken")
    entry = await pair.wait_received("broken")
    assert isinstance(entry.error, StreamAbortedError), repr(entry.error)


async def test_no_stream_listener_declines_the_stream(pair: Pair) -> None:
    async with asyncio.timeout(BOUND):
        with pytest.raises(StreamCancelledError, match="no on_stream listener") as caught:
            await pair.conn.send_stream(endless(), name="unwanted")
    assert caught.value.reason == "no on_stream listener"
    await wait_until(lambda: pair.errors, BOUND, what="the server's on_error")
    (error,) = pair.errors
    assert isinstance(error, StreamError)
    assert "unwanted" in str(error)
    assert "no on_stream listener" in str(error)
    assert not pair.conn.is_closed


# ------------------------------------------------------------------------------------------------ flow


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_slow_consumer_behind_a_small_window_gets_everything_and_the_connection_lives(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    liveness = {"ping_interval": 0.2, "peer_timeout": 1.5}
    window = 64 * 1024
    async with open_pair(
        transport, aeron_dir, client_dir, port, server={**liveness, "stream_window": window}, client=liveness
    ) as p:
        data = data_of(2 << 20, seed=8)
        got: list[bytes] = []
        most_buffered = 0

        async def on_stream(conn: Connection, stream: IncomingStream) -> None:
            nonlocal most_buffered
            async for chunk in stream:
                got.append(chunk)
                most_buffered = max(most_buffered, stream._buffered)
                await asyncio.sleep(0.007)  # ~256 chunks: longer in all than the peer timeout

        p.server.on_stream(on_stream)
        async with asyncio.timeout(BOUND):
            await p.conn.send_stream(data, name="slow")
        await wait_until(lambda: sum(map(len, got)) == len(data), BOUND, what="everything consumed")
        assert sha(b"".join(got)) == sha(data)
        assert not p.conn.is_closed
        assert not p.server_conn.is_closed
        async with asyncio.timeout(BOUND):
            await p.conn.ping()
            await p.server_conn.ping()
        # The window bounds what waits for the consumer, give or take what one poll of the log had read.
        chunk = p.conn.streams.chunk_size
        print(f"{transport}: most buffered {most_buffered} bytes, window {window}, chunk {chunk}")
        assert most_buffered <= window + 64 * chunk


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_cancelling_while_the_window_is_full_resumes_reading_the_connection(
    transport: str, aeron_dir: Path, client_dir: Path, port: int
) -> None:
    async with open_pair(transport, aeron_dir, client_dir, port, server={"stream_window": 64 * 1024}) as p:
        log: list[int] = []
        p.server.on_message(Num, lambda c, m: log.append(m.i))

        async def on_stream(conn: Connection, stream: IncomingStream) -> None:
            async for _ in stream:
                # Stop consuming until the window is full and the connection is no longer read, then give up.
                await wait_until(lambda: conn._paused, BOUND, what="reading paused")
                stream.cancel("too slow anyway")
                return

        p.server.on_stream(on_stream)
        async with asyncio.timeout(BOUND):
            with pytest.raises(StreamCancelledError, match="too slow anyway"):
                await p.conn.send_stream(endless(), name="paused")
            await p.conn.send(Num(1))
        await wait_until(lambda: log, BOUND, what="a message after the cancelled stream")
        assert log == [1]
        assert p.server_conn._paused == 0


async def test_save_into_a_missing_directory_cancels_the_sender(pair: Pair, tmp_path: Path) -> None:
    failures: list[BaseException] = []

    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        try:
            await stream.save(tmp_path / "no such directory" / "file.bin")
        except OSError as exc:
            failures.append(exc)

    pair.server.on_stream(on_stream)
    async with asyncio.timeout(BOUND):
        with pytest.raises(StreamCancelledError, match="failed while saving"):
            await pair.conn.send_stream(endless(), name="nowhere")
    assert len(failures) == 1
    assert isinstance(failures[0], FileNotFoundError)
    assert not (tmp_path / "no such directory").exists()


async def test_a_stream_is_consumed_once(pair: Pair, tmp_path: Path) -> None:
    outcome: list[object] = []

    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        outcome.append(await stream.read())
        try:
            await stream.read()
        except StreamError as exc:
            outcome.append(exc)

    pair.server.on_stream(on_stream)
    async with asyncio.timeout(BOUND):
        await pair.conn.send_stream(b"once", name="once")
    await wait_until(lambda: len(outcome) == 2, BOUND, what="both reads")
    assert outcome[0] == b"once"
    assert isinstance(outcome[1], StreamError)
    assert "already being consumed" in str(outcome[1])


# ------------------------------------------------------------------------------------------------ closing


@pytest.mark.parametrize("closer", ["sender", "receiver"])
async def test_the_connection_closing_mid_stream_fails_both_sides(pair: Pair, closer: str) -> None:
    failures: list[BaseException] = []

    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        try:
            async for _ in stream:
                await asyncio.sleep(0.001)
        except BaseException as exc:
            failures.append(exc)
            raise

    pair.server.on_stream(on_stream)
    sending = asyncio.get_running_loop().create_task(pair.conn.send_stream(endless(), name="interrupted"))
    await wait_until(
        lambda: any(s.received > 100_000 for s in pair.server_conn.streams._incoming.values()),
        BOUND,
        what="the stream under way",
    )
    closing = pair.conn if closer == "sender" else pair.server_conn
    await asyncio.wait_for(closing.close("stop"), BOUND)
    done, _ = await asyncio.wait([sending], timeout=BOUND)
    assert done, "send_stream still running after the connection closed"
    assert isinstance(sending.exception(), ConnectionClosedError), repr(sending.exception())
    await wait_until(lambda: failures, BOUND, what="the receiver's failure")
    assert isinstance(failures[0], ConnectionClosedError), repr(failures[0])
    assert pair.server_conn.streams._incoming == {}
    assert pair.conn.streams._outgoing == {}


async def test_a_sender_waiting_on_its_source_when_the_connection_closes_gets_connection_closed_error(
    pair: Pair, tmp_path: Path
) -> None:
    listen(pair, pair.server, by_iterating, tmp_path)
    first_out = asyncio.Event()
    resume = asyncio.Event()

    async def source() -> AsyncIterator[bytes]:
        yield data_of(3 * pair.conn.streams.chunk_size)
        first_out.set()
        await resume.wait()  # e.g. a socket or a disk the data comes from
        yield data_of(1000)

    sending = asyncio.get_running_loop().create_task(pair.conn.send_stream(source(), name="waiting"))
    await asyncio.wait_for(first_out.wait(), BOUND)
    await asyncio.wait_for(pair.conn.close("stop"), BOUND)
    resume.set()
    done, _ = await asyncio.wait([sending], timeout=BOUND)
    assert done, "send_stream still running after the connection closed"
    with pytest.raises(ConnectionClosedError):
        sending.result()


# ------------------------------------------------------------------------------------------------ sharing


async def test_concurrent_streams_messages_and_calls_share_the_connection(pair: Pair, tmp_path: Path) -> None:
    listen(pair, pair.server, by_read, tmp_path)
    log: list[int] = []
    pair.server.on_message(Num, lambda c, m: log.append(m.i))
    first, second = data_of(3_000_000, seed=11), data_of(2_000_001, seed=12)

    async def messages() -> None:
        for i in range(200):
            await pair.conn.send(Num(i))
            if i % 20 == 0:
                await pair.conn.ping()

    async with asyncio.timeout(BOUND):
        sent = await asyncio.gather(
            pair.conn.send_stream(first, name="first"),
            pair.conn.send_stream(pieces_of(second), name="second"),
            messages(),
        )
    assert list(sent[:2]) == [len(first), len(second)]
    for name, data in (("first", first), ("second", second)):
        entry = await pair.wait_received(name)
        assert entry.error is None
        assert sha(entry.data) == sha(data)
    await wait_until(lambda: len(log) == 200, BOUND, what="the messages")
    assert log == list(range(200))


# ------------------------------------------------------------------------------------------------ checksums


async def send_raw_stream(conn: Connection, stream_id: int, data: bytes, *, length: int, crc: int, kind: int) -> None:
    """A stream written by hand (as StreamManager.send would) with the end message's length and CRC given."""
    chunk = conn.streams.chunk_size
    await conn.outbox.send_message(StreamOpen(stream_id, kind, "raw", len(data), None), None)
    for start in range(0, len(data), chunk):
        piece = data[start : start + chunk]
        frame = bytearray(CHUNK_HEADER_LENGTH + len(piece))
        frame[CHUNK_HEADER_LENGTH:] = piece
        _write_header(frame, stream_id, len(piece))
        await conn.outbox.send_bytes(bytes(frame), None)
    await conn.outbox.send_message(StreamEnd(stream_id, length, crc), None)


@pytest.mark.parametrize("wrong", ["crc", "length"])
async def test_a_stream_whose_end_does_not_match_fails_with_a_checksum_error(pair: Pair, wrong: str) -> None:
    failures: list[BaseException] = []

    async def on_stream(conn: Connection, stream: IncomingStream) -> None:
        try:
            await stream.read()
        except StreamError as exc:
            failures.append(exc)

    pair.server.on_stream(on_stream)
    data = data_of(100_000, seed=13)
    crc = zlib.crc32(data)
    length = len(data)
    if wrong == "crc":
        crc ^= 1
    else:
        length += 1
    async with asyncio.timeout(BOUND):
        await send_raw_stream(pair.conn, 0xFFFF_0001, data, length=length, crc=crc, kind=BYTES)
    await wait_until(lambda: failures, BOUND, what="the receiver's failure")
    assert isinstance(failures[0], StreamChecksumError), repr(failures[0])


async def test_a_large_message_whose_end_does_not_match_is_reported_not_dispatched(pair: Pair) -> None:
    log: list[object] = []
    pair.server.on_message(Blob, lambda c, m: log.append(m))
    pair.server.on_message(Num, lambda c, m: log.append(m))
    encoded = pair.conn.endpoint.config.serialization.encode(Blob(data_of(50_000, seed=14)))
    async with asyncio.timeout(BOUND):
        await send_raw_stream(pair.conn, 0xFFFF_0002, encoded, length=len(encoded), crc=zlib.crc32(encoded) ^ 1, kind=1)
        await pair.conn.send(Num(5))
    await wait_until(lambda: log, BOUND, what="the message after the bad one")
    assert log == [Num(5)]
    await wait_until(lambda: pair.errors, BOUND, what="the server's on_error")
    assert isinstance(pair.errors[0], StreamChecksumError), pair.errors


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_stream_whose_first_chunk_comes_after_a_few_ticks_is_not_taken_for_stalled(
    transport: str, aeron_dir: Path, client_dir: Path, port: int, tmp_path: Path
) -> None:
    """The stall timer starts at the first check after the stream opened (it once started at time zero, so a stream
    whose first chunk had not arrived by the next tick was dropped as stalled at once, whatever the timeout)."""
    async with open_pair(transport, aeron_dir, client_dir, port, server={"ping_interval": 0.05}) as pair:
        listen(pair, pair.server, by_iterating, tmp_path)
        data = data_of(300_000, seed=9)

        async def late_pieces() -> AsyncIterator[bytes]:
            await asyncio.sleep(0.5)  # ten ticks of the server's poller (every half ping interval) before any chunk
            yield data

        async with asyncio.timeout(BOUND):
            assert await pair.conn.send_stream(late_pieces(), name="late", size=len(data)) == len(data)
        entry = await pair.wait_received("late")
        assert entry.error is None
        assert sha(entry.data) == sha(data)
        assert pair.server_conn.streams.stalled == 0
