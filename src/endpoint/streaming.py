"""Streams of chunks over a connection: files, async byte iterators, and messages too large for one offer.

Theory of operation. A stream is ``StreamOpen``, chunks, then ``StreamEnd`` (length and CRC-32) or
``StreamAbort``, all on the connection's one publication, so Aeron keeps them reliable and ordered and its
flow control (the sender's publication limit) paces the sender to what the receiver reads. A chunk is not
msgpack-encoded: it is a hand-built msgpack ext value (code :data:`CHUNK_EXT`) whose data is the stream id
and the raw bytes, so the receiving poller recognises it from its first six bytes and no byte of payload
passes through the codec. Files are read straight into the frame buffer that is offered.

The receiver buffers at most ``stream_window`` bytes for a slow consumer; past that the connection stops
being read (pushing back on the sender through the log) until the consumer catches up. A message whose
encoding exceeds the connection's max message length is sent as a stream of kind ``MESSAGE`` and, once
whole and verified, dispatched like any other message.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import zlib
from collections.abc import AsyncIterable, AsyncIterator, Callable, Coroutine, Iterable
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final, Union

from endpoint.config import Configuration
from endpoint.connection.peer import Peer
from endpoint.errors import (
    BudgetExceededError,
    ConnectionClosedError,
    StreamAbortedError,
    StreamCancelledError,
    StreamChecksumError,
    StreamError,
)
from endpoint.messages import (
    CHUNK_EXT,
    CHUNK_HEADER_LENGTH,
    StreamAbort,
    StreamCancel,
    StreamEnd,
    StreamOpen,
    is_chunk,
)

if TYPE_CHECKING:
    from typing_extensions import Buffer


__all__ = [
    "CHUNK_EXT",
    "CHUNK_HEADER_LENGTH",
    "IncomingStream",
    "Progress",
    "StreamManager",
    "StreamSource",
    "is_chunk",
]

BYTES: Final = 0
MESSAGE: Final = 1

Progress = Callable[[int, int], Any]
"""``progress(bytes_so_far, total_or_-1)``."""
StreamSource = Union["Buffer", str, os.PathLike[str], IO[bytes], Iterable[bytes], AsyncIterable[bytes]]


def _write_header(frame: bytearray, stream_id: int, length: int) -> None:
    frame[0] = 0xC9
    frame[1:5] = (4 + length).to_bytes(4, "big")
    frame[5] = CHUNK_EXT
    frame[6:10] = stream_id.to_bytes(4, "little")


class _Outgoing:
    __slots__ = ("cancel_reason",)

    def __init__(self) -> None:
        self.cancel_reason: str | None = None


class IncomingStream:
    """A stream arriving on a connection; consume it once: iterate, :meth:`read` or :meth:`save`."""

    def __init__(self, manager: StreamManager, open_: StreamOpen, window: int) -> None:
        self._manager = manager
        self.connection = manager.connection
        self.stream_id = open_.stream_id
        self.name: str = open_.name
        self.size: int = open_.size
        """Bytes announced by the sender, -1 when it did not know."""
        self.metadata: Any = open_.metadata
        self.received = 0
        """Bytes arrived so far (buffered or consumed)."""
        self._window = window
        self._chunks: collections.deque[bytes] = collections.deque()
        self._buffered = 0
        self._pausing = False
        self._crc = 0
        self._error: BaseException | None = None
        self._ended = False
        self._waiter: asyncio.Future[None] | None = None
        self._consumed = False
        self._seen = -1
        self._since_ns = 0
        """Bytes received at the last check, and since when (the stall timer); -1: not checked yet, so the first
        check starts the timer (a stream whose first chunk had not come by then was dropped as stalled at once)."""

    def __repr__(self) -> str:
        return f"<IncomingStream {self.stream_id} {self.name!r} {self.received}/{self.size} on {self.connection!r}>"

    @property
    def done(self) -> bool:
        """Every byte arrived and checked, or the stream failed."""
        return self._ended or self._error is not None

    # ------------------------------------------------------------------ consuming

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._consumed:
            raise StreamError(f"{self!r} is already being consumed")
        self._consumed = True
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[bytes]:
        chunks = self._chunks
        while True:
            if chunks:
                chunk = chunks.popleft()
                self._buffered -= len(chunk)
                self._manager._stream_bytes -= len(chunk)
                if self._pausing and self._buffered <= self._window // 2:
                    self._pausing = False
                    self._manager.resume_reading()
                yield chunk
            elif self._error is not None:
                raise self._error
            elif self._ended:
                return
            else:
                if self._pausing:  # paused for the connection's budget, not our own window: we hold nothing now
                    self._pausing = False
                    self._manager.resume_reading()
                self._waiter = asyncio.get_running_loop().create_future()
                try:
                    await self._waiter
                finally:
                    self._waiter = None

    async def read(self) -> bytes:
        """Every byte of the stream (mind its size)."""
        return b"".join([chunk async for chunk in self])

    async def save(self, path: str | os.PathLike[str], *, progress: Progress | None = None) -> int:
        """Write the stream to ``path`` (through a temporary file renamed when whole); returns its length.

        On any failure the partial file is removed.
        """
        target = Path(path)
        partial = target.with_name(f".{target.name}.{self.connection.id}-{self.stream_id}.part")
        written = 0
        try:
            with open(partial, "wb") as out:
                async for chunk in self:
                    out.write(chunk)
                    written += len(chunk)
                    if progress is not None:
                        progress(written, self.size)
            os.replace(partial, target)
        except BaseException:
            partial.unlink(missing_ok=True)
            if not self.done:
                self.cancel("the receiver failed while saving")
            raise
        return written

    def cancel(self, reason: str = "") -> None:
        """Stop the stream: the sender's ``send_stream`` raises StreamCancelledError; buffered bytes are dropped."""
        if self.done:
            return
        self._fail(StreamCancelledError(f"{self!r} cancelled by the receiver", reason))
        self._manager._forget_incoming(self.stream_id)
        self.connection.outbox.send_control(StreamCancel(self.stream_id, reason), must_arrive=True)

    # ------------------------------------------------------------------ feeding (poller)

    def _feed(self, data: memoryview) -> None:
        chunk = bytes(data)
        self.received += len(chunk)
        self._crc = zlib.crc32(chunk, self._crc)
        self._chunks.append(chunk)
        self._buffered += len(chunk)
        manager = self._manager
        manager._stream_bytes += len(chunk)
        if not self._pausing and (self._buffered > self._window or manager.held_bytes > manager.max_bytes):
            # Past our window, or the connection's bytes budget: stop reading until the consumer catches up.
            self._pausing = True
            self._manager.pause_reading()
        self._wake()

    def _end(self, end: StreamEnd) -> None:
        if end.length != self.received or end.crc32 != self._crc:
            self._fail(
                StreamChecksumError(
                    f"{self!r}: the sender sent {end.length} bytes with CRC-32 {end.crc32:#010x}, "
                    f"{self.received} arrived with CRC-32 {self._crc:#010x}"
                )
            )
            return
        self._ended = True
        self._wake()

    def _fail(self, error: BaseException) -> None:
        if self.done:
            return
        self._error = error
        self._chunks.clear()
        self._manager._stream_bytes -= self._buffered
        self._buffered = 0
        if self._pausing:
            self._pausing = False
            self._manager.resume_reading()
        self._wake()

    def _release(self) -> None:
        """The consumer is done with us: what it left unread no longer counts, nor holds the connection paused."""
        self._manager._stream_bytes -= self._buffered
        self._buffered = 0
        self._chunks.clear()
        if self._pausing:
            self._pausing = False
            self._manager.resume_reading()

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class _Assembly:
    """A large message arriving in chunks."""

    __slots__ = ("buffer", "crc", "seen", "since_ns")

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.crc = 0
        self.seen = -1
        self.since_ns = 0


class StreamManager:
    """A connection's streams in both directions."""

    def __init__(
        self,
        connection: Peer,
        *,
        config: Configuration,
        stream_listeners: Callable[[], tuple[Callable[..., Any], ...]],
        pause_reading: Callable[[], None],
        resume_reading: Callable[[], None],
        listener_bytes: Callable[[], int],
        report: Callable[[BaseException], None],
        spawn: Callable[[Coroutine[Any, Any, None]], object],
    ) -> None:
        """``pause_reading``/``resume_reading`` hold the connection's reading off and on (counted: every pause is
        resumed once); ``listener_bytes`` is what its queued messages hold; ``report`` takes errors for the
        connection's ``on_error``; ``spawn`` runs a stream's listener as a task of the end point's."""
        self.connection = connection
        self.pause_reading = pause_reading
        self.resume_reading = resume_reading
        self._listener_bytes = listener_bytes
        self._report = report
        self._spawn = spawn
        self._stream_listeners = stream_listeners
        self._chunk_limit: int = config.stream_chunk_size
        self._window: int = config.stream_window
        self._max_message_size: int = config.max_message_size
        self._max_incoming: int = config.max_incoming_streams
        self.max_bytes: int = config.max_incoming_bytes
        """The connection's bytes budget (``max_incoming_bytes``)."""
        self._stall_ns = int(config.stream_stall_timeout * 1e9)
        self._ids = itertools.count(1)
        self._outgoing: dict[int, _Outgoing] = {}
        self._incoming: dict[int, IncomingStream] = {}
        self._assemblies: dict[int, _Assembly] = {}
        self._assembly_bytes = 0
        self._stream_bytes = 0
        self.dropped_chunks = 0
        """Chunks of streams this side had already cancelled or never knew: dropped."""
        self.over_budget = 0
        """Streams and large messages declined or dropped for ``max_incoming_streams`` or ``max_incoming_bytes``."""
        self.stalled = 0
        """Streams and large messages dropped after ``stream_stall_timeout`` without a chunk."""
        self.deliver_whole: Callable[[memoryview], None] = lambda message: None
        """Where a large message goes once whole and checked (the connection's reader, as if it came in one)."""
        self.attend: Callable[[], None] = lambda: None
        """Called when something starts arriving: from now on :meth:`tick` must run every step (the connection's
        timers are on the end point's agenda, which otherwise looks at an idle connection rarely)."""

    @property
    def held_bytes(self) -> int:
        """Bytes this connection's incoming large messages and streams hold here now."""
        return self._assembly_bytes + self._stream_bytes + self._listener_bytes()

    @property
    def incoming(self) -> int:
        """Streams and large messages arriving (or arrived and not yet consumed) now."""
        return len(self._incoming) + len(self._assemblies)

    @property
    def chunk_size(self) -> int:
        return max(1, min(self._chunk_limit, self.connection.max_message_length - CHUNK_HEADER_LENGTH))

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        source: StreamSource,
        *,
        name: str = "",
        size: int | None = None,
        metadata: Any = None,
        progress: Progress | None = None,
        timeout: float | None = None,
        kind: int = BYTES,
    ) -> int:
        outbox = self.connection.outbox
        outbox.ensure_open()
        stream_id = next(self._ids) & 0xFFFF_FFFF
        if size is None:
            size = _known_size(source)
        state = self._outgoing[stream_id] = _Outgoing()
        chunk_size = self.chunk_size
        frame = bytearray(CHUNK_HEADER_LENGTH + chunk_size)
        payload = memoryview(frame)[CHUNK_HEADER_LENGTH:]
        sent = 0
        crc = 0
        finished = False
        try:
            await outbox.send_message(StreamOpen(stream_id, kind, name, size, metadata), timeout)
            async for length in _fill(source, payload):
                outbox.ensure_open()
                if state.cancel_reason is not None:
                    raise StreamCancelledError(
                        f"stream {stream_id} ({name!r}) cancelled by the receiver: {state.cancel_reason}",
                        state.cancel_reason,
                    )
                _write_header(frame, stream_id, length)
                data = memoryview(frame)[: CHUNK_HEADER_LENGTH + length]
                if not outbox.offer_now(data, poke=False):
                    await outbox.send_bytes(data, timeout)
                crc = zlib.crc32(payload[:length], crc)
                sent += length
                if progress is not None:
                    progress(sent, size)
            if state.cancel_reason is not None:
                raise StreamCancelledError(
                    f"stream {stream_id} ({name!r}) cancelled by the receiver: {state.cancel_reason}",
                    state.cancel_reason,
                )
            await outbox.send_message(StreamEnd(stream_id, sent, crc), timeout)
            finished = True
            return sent
        finally:
            del self._outgoing[stream_id]
            if not finished and state.cancel_reason is None and not outbox.closing:
                outbox.send_control(StreamAbort(stream_id, "the sender stopped"), must_arrive=True)

    # ------------------------------------------------------------------ receiving (poller)

    def on_open(self, open_: StreamOpen) -> None:
        if open_.stream_id in self._incoming or open_.stream_id in self._assemblies:
            self._decline(open_, "a stream of that id is already arriving")
            return
        if self.incoming >= self._max_incoming:
            self._over_budget(open_.stream_id, f"{self.incoming} already arriving", "max_incoming_streams")
            return
        if open_.kind == MESSAGE:
            if open_.size > self._max_message_size:
                self._decline(open_, f"{open_.size} bytes is over max_message_size={self._max_message_size}")
                return
            if open_.size > self.max_bytes:
                self._over_budget(open_.stream_id, f"{open_.size} bytes announced", "max_incoming_bytes")
                return
            self._assemblies[open_.stream_id] = _Assembly()
            self.attend()
            return
        listeners = self._stream_listeners()
        if not listeners:
            self._decline(open_, "no on_stream listener")
            return
        stream = IncomingStream(self, open_, self._window)
        self._incoming[open_.stream_id] = stream
        self.attend()
        self._spawn(self._consume(stream, listeners))

    def _over_budget(self, stream_id: int, detail: str, budget: str) -> None:
        """Decline (or drop part way) one incoming stream or large message for the connection's budget."""
        self.over_budget += 1
        reason = f"over {budget} ({detail})"
        self.connection.outbox.send_control(StreamCancel(stream_id, reason), must_arrive=True)
        self._report(BudgetExceededError(f"{self.connection!r}: dropped stream {stream_id}: {reason}", budget))

    def _decline(self, open_: StreamOpen, reason: str) -> None:
        self.connection.outbox.send_control(StreamCancel(open_.stream_id, reason), must_arrive=True)
        self._report(StreamError(f"declined stream {open_.stream_id} ({open_.name!r}): {reason}"))

    async def _consume(self, stream: IncomingStream, listeners: tuple[Callable[..., Any], ...]) -> None:
        connection = self.connection
        try:
            for listener in listeners:
                try:
                    result = listener(connection, stream)
                    if asyncio.iscoroutine(result) or isinstance(result, asyncio.Future):
                        await result
                except StreamError as exc:
                    if not isinstance(exc, StreamCancelledError):
                        self._report(exc)
                except ConnectionClosedError:
                    pass
                except Exception as exc:
                    self._report(exc)
        finally:
            if not stream.done:
                stream.cancel("the stream listener returned without consuming it")
            stream._release()
            self._incoming.pop(stream.stream_id, None)

    def on_chunk(self, data: memoryview) -> None:
        stream_id = int.from_bytes(data[6:10], "little")
        payload = data[CHUNK_HEADER_LENGTH:]
        stream = self._incoming.get(stream_id)
        if stream is not None:
            stream._feed(payload)
            return
        assembly = self._assemblies.get(stream_id)
        if assembly is None:
            self.dropped_chunks += 1
            return
        if self.held_bytes + len(payload) > self.max_bytes:
            self._drop_assembly(stream_id)
            self._over_budget(stream_id, f"{self.held_bytes} bytes held", "max_incoming_bytes")
            return
        assembly.buffer += payload
        self._assembly_bytes += len(payload)
        assembly.crc = zlib.crc32(payload, assembly.crc)
        if len(assembly.buffer) > self._max_message_size:
            self._drop_assembly(stream_id)
            self._decline(StreamOpen(stream_id, MESSAGE, "", -1, None), "grew over max_message_size")

    def _drop_assembly(self, stream_id: int) -> _Assembly | None:
        assembly = self._assemblies.pop(stream_id, None)
        if assembly is not None:
            self._assembly_bytes -= len(assembly.buffer)
        return assembly

    def tick(self, now_ns: int, reading: bool) -> None:
        """Drop what stopped arriving: no chunk for ``stream_stall_timeout`` while we read the connection."""
        stall_ns = self._stall_ns
        for stream_id, assembly in list(self._assemblies.items()):
            if not reading or len(assembly.buffer) != assembly.seen:
                assembly.seen = len(assembly.buffer)
                assembly.since_ns = now_ns
            elif now_ns - assembly.since_ns > stall_ns:
                self._drop_assembly(stream_id)
                self._stalled(stream_id, f"large message {stream_id}", assembly.seen)
        for stream_id, stream in list(self._incoming.items()):
            if stream.done:
                continue  # the sender finished; what is left waits for our consumer
            if not reading or stream.received != stream._seen or stream._pausing:
                stream._seen = stream.received
                stream._since_ns = now_ns
            elif now_ns - stream._since_ns > stall_ns:
                self._incoming.pop(stream_id, None)
                self._stalled(stream_id, repr(stream), stream.received, stream)

    def _stalled(self, stream_id: int, what: str, received: int, stream: IncomingStream | None = None) -> None:
        self.stalled += 1
        reason = f"stalled: no chunk for {self._stall_ns / 1e9:g} s (stream_stall_timeout) after {received} bytes"
        self.connection.outbox.send_control(StreamCancel(stream_id, reason), must_arrive=True)
        error = BudgetExceededError(f"{self.connection!r}: dropped {what}: {reason}", "stream_stall_timeout")
        if stream is not None:
            stream._fail(error)  # its consumer raises it (and on_error hears of it if the consumer lets it out)
        else:
            self._report(error)

    def on_end(self, end: StreamEnd) -> None:
        stream = self._incoming.get(end.stream_id)
        if stream is not None:
            stream._end(end)
            return
        assembly = self._drop_assembly(end.stream_id)
        if assembly is None:
            return
        if end.length != len(assembly.buffer) or end.crc32 != assembly.crc:
            self._report(
                StreamChecksumError(f"large message {end.stream_id}: length or CRC-32 differs from the sender's")
            )
            return
        self.deliver_whole(memoryview(assembly.buffer))

    def on_abort(self, abort: StreamAbort) -> None:
        self._drop_assembly(abort.stream_id)
        stream = self._incoming.pop(abort.stream_id, None)
        if stream is not None:
            stream._fail(StreamAbortedError(f"{stream!r} aborted by the sender: {abort.reason}", abort.reason))

    def on_cancel(self, cancel: StreamCancel) -> None:
        state = self._outgoing.get(cancel.stream_id)
        if state is not None:
            state.cancel_reason = cancel.reason or "no reason given"

    def _forget_incoming(self, stream_id: int) -> None:
        self._incoming.pop(stream_id, None)

    def close(self) -> None:
        """The connection closed: streams in flight fail on both sides."""
        error = self.connection.outbox.closed_error()
        for stream in self._incoming.values():
            stream._fail(error)
        self._incoming.clear()
        self._assemblies.clear()
        self._assembly_bytes = 0
        self._stream_bytes = 0


# ---------------------------------------------------------------------------------------------- sources


def _known_size(source: object) -> int:
    if isinstance(source, (bytes, bytearray, memoryview)):
        return memoryview(source).nbytes
    if isinstance(source, (str, os.PathLike)):
        return os.stat(source).st_size
    fileno = getattr(source, "fileno", None)
    if fileno is not None:
        try:
            return int(os.fstat(fileno()).st_size - source.tell())  # type: ignore[attr-defined]
        except (OSError, ValueError, AttributeError):
            return -1
    return -1


async def _fill(source: StreamSource, payload: memoryview) -> AsyncIterator[int]:
    """Fill ``payload`` from ``source`` again and again; yields how many bytes each time (never 0)."""
    room = len(payload)
    if isinstance(source, (bytes, bytearray, memoryview)):
        view = memoryview(source).cast("B")
        for start in range(0, len(view), room):
            piece = view[start : start + room]
            payload[: len(piece)] = piece
            yield len(piece)
    elif isinstance(source, (str, os.PathLike)):
        with open(source, "rb") as file:
            async for n in _fill_from_file(file, payload):
                yield n
    elif hasattr(source, "readinto"):
        async for n in _fill_from_file(source, payload):
            yield n
    elif isinstance(source, AsyncIterable):
        async for n in _fill_from_pieces(source, payload):
            yield n
    elif isinstance(source, Iterable):
        async for n in _fill_from_pieces(_aiter_of(source), payload):
            yield n
    else:
        raise TypeError(f"cannot stream {type(source).__name__}: give bytes, a path, a binary file or (async) bytes")


async def _fill_from_file(file: Any, payload: memoryview) -> AsyncIterator[int]:
    """Read straight into the frame; a read of a file big enough to matter runs off the loop's thread."""
    readinto = file.readinto
    loop = asyncio.get_running_loop()
    while True:
        n = await loop.run_in_executor(None, readinto, payload) if len(payload) >= 1 << 16 else readinto(payload)
        if not n:
            return
        yield n


async def _aiter_of(items: Iterable[bytes]) -> AsyncIterator[bytes]:
    for item in items:
        yield item


async def _fill_from_pieces(pieces: AsyncIterable[Buffer], payload: memoryview) -> AsyncIterator[int]:
    """Pack the pieces, whatever their sizes, into full chunks."""
    room = len(payload)
    used = 0
    async for piece in pieces:
        view = memoryview(piece).cast("B")
        while view:
            take = min(room - used, len(view))
            payload[used : used + take] = view[:take]
            used += take
            view = view[take:]
            if used == room:
                yield used
                used = 0
    if used:
        yield used
