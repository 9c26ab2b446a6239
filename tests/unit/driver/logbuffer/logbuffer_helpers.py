"""Test helpers for the log buffer tests: an in-memory log, a minimal publication and subscriber.

``MiniPublication`` is the concurrent log appender (``driver.logbuffer.appender.LogAppender``,
1.15.1's ``ConcurrentPublication.offer`` in Python) with no limit, so tests can drive the
appenders across many terms; ``MiniSubscriber`` follows ``Image.poll`` and cleans each
term once it has been read (the driver's job in real life).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Sequence

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import descriptor as d
from driver.logbuffer.appender import FAILED, LogAppender
from driver.logbuffer.header import Header
from driver.logbuffer.reader import read


class MemoryLog:
    """Three terms + metadata in one bytearray, laid out like the file."""

    def __init__(
        self,
        term_length: int = 64 * 1024,
        *,
        initial_term_id: int = 0,
        term_id: int | None = None,
        term_offset: int = 0,
        session_id: int = 7,
        stream_id: int = 1001,
        mtu: int = 1408,
    ) -> None:
        self.term_length = term_length
        self.raw = bytearray(3 * term_length + d.LOG_META_DATA_LENGTH)
        mv = memoryview(self.raw)
        self.terms = [AtomicBuffer(self.raw, i * term_length, term_length) for i in range(3)]
        self.term_views = [mv[i * term_length : (i + 1) * term_length] for i in range(3)]
        self.metadata = AtomicBuffer(self.raw, 3 * term_length, d.LOG_META_DATA_LENGTH)
        d.initialize_publication_metadata(
            self.metadata,
            session_id=session_id,
            stream_id=stream_id,
            initial_term_id=initial_term_id,
            mtu_length=mtu,
            term_length=term_length,
            page_size=4096,
            correlation_id=42,
            term_id=term_id,
            term_offset=term_offset,
        )


class MiniPublication(LogAppender):
    """A concurrent publication's offer over a log without a driver: the log appender, unlimited by default."""

    __slots__ = ()

    def __init__(
        self,
        terms: Sequence[AtomicBuffer],
        term_views: Sequence[memoryview],
        metadata: AtomicBuffer,
        limit: AtomicBuffer | None = None,
    ) -> None:
        if limit is None:
            limit = AtomicBuffer(bytearray(8))
            limit.put_long(0, 1 << 62)
        super().__init__(metadata, terms, term_views, limit)


class MiniSubscriber:
    """Reads from a position, crossing terms, zeroing each term once it is fully consumed."""

    def __init__(
        self,
        terms: Sequence[AtomicBuffer],
        term_views: Sequence[memoryview],
        metadata: AtomicBuffer,
        position: int = 0,
        clean: bool = True,
    ) -> None:
        self.terms = terms
        self.term_views = term_views
        self.term_length = d.term_length(metadata)
        self.bits = d.position_bits_to_shift(self.term_length)
        self.header = Header(d.initial_term_id(metadata), self.bits)
        self.position = position
        self.clean = clean

    def poll(self, handler: Callable[[memoryview, Header], object], limit: int = 1 << 30) -> int:
        position = self.position
        index = (position >> self.bits) % 3
        term_offset = position & (self.term_length - 1)
        fragments, offset = read(
            self.terms[index], term_offset, handler, limit, self.header, None, self.term_views[index]
        )
        new_position = position + (offset - term_offset)
        if self.clean and new_position >> self.bits != position >> self.bits:
            self.terms[index].set_memory(0, self.term_length, 0)
        self.position = new_position
        return fragments


_MSG = struct.Struct("<iiiI")  # writer, sequence, length, crc of the filler


def make_message(writer: int, sequence: int, length: int) -> bytes:
    """A self-checking message: any tear or mix-up fails :func:`check_message`."""
    length = max(length, _MSG.size)
    filler = bytes(((writer * 31 + sequence + i) & 0xFF) for i in range(length - _MSG.size))
    return _MSG.pack(writer, sequence, length, zlib.crc32(filler)) + filler


def check_message(payload: bytes | memoryview) -> tuple[int, int]:
    writer, sequence, length, crc = _MSG.unpack_from(payload, 0)
    if length != len(payload):
        raise AssertionError(f"length {len(payload)} != encoded {length} (writer {writer} seq {sequence})")
    if zlib.crc32(bytes(payload[_MSG.size :])) != crc:
        raise AssertionError(f"torn message writer {writer} seq {sequence}")
    return writer, sequence


def assert_failed(result: int) -> None:
    assert result == FAILED
