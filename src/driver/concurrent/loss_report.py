"""The driver's loss report (Aeron 1.15.1 ``LossReport`` layout) in ``<aeron.dir>/loss-report.dat``.

Theory of operation
-------------------
A receiver that detects a gap in a stream records it here, once per image: the
first gap creates an entry, later gaps add to it. Entries are appended, never
removed, each starting on a 64-byte boundary:

======  =====  ===============================================================
offset  size   field
======  =====  ===============================================================
0       int64  observation count (release-stored last; 0 = end of report)
8       int64  total bytes lost (atomic add)
16      int64  first observation, ms epoch
24      int64  last observation, ms epoch
32      int32  session id
36      int32  stream id
40      ...    channel: int32 length + ASCII
44+n    ...    source: int32 length + ASCII (right after the channel, unaligned)
======  =====  ===============================================================

One writer (the receiver) appends; any process may read concurrently. An entry
becomes visible when its observation count turns non-zero, so readers never
see a half-written one. When the file is full, new entries are refused
(``create_entry`` returns None) and the caller stops reporting, as Aeron does.
"""

from __future__ import annotations

import errno
import mmap
import os
from pathlib import Path

import attrs

from driver.concurrent.atomic_buffer import AtomicBuffer, align
from driver.errors import DriverConfigurationError, StorageSpaceError

__all__ = [
    "CHANNEL_OFFSET",
    "DEFAULT_LOSS_REPORT_LENGTH",
    "ENTRY_ALIGNMENT",
    "FIRST_OBSERVATION_OFFSET",
    "LAST_OBSERVATION_OFFSET",
    "LOSS_REPORT_FILE",
    "OBSERVATION_COUNT_OFFSET",
    "SESSION_ID_OFFSET",
    "STREAM_ID_OFFSET",
    "TOTAL_BYTES_LOST_OFFSET",
    "LossEntry",
    "LossReport",
    "LossReportFile",
    "ReportEntry",
    "read_loss_report",
]

LOSS_REPORT_FILE = "loss-report.dat"
DEFAULT_LOSS_REPORT_LENGTH = 1024 * 1024

ENTRY_ALIGNMENT = 64
OBSERVATION_COUNT_OFFSET = 0
TOTAL_BYTES_LOST_OFFSET = 8
FIRST_OBSERVATION_OFFSET = 16
LAST_OBSERVATION_OFFSET = 24
SESSION_ID_OFFSET = 32
STREAM_ID_OFFSET = 36
CHANNEL_OFFSET = 40

_INT = 4


def _ascii(text: str) -> bytes:
    """Agrona's ``putStringAscii``: one byte per character, '?' for anything not ASCII."""
    return text.encode("ascii", "replace")


@attrs.frozen
class ReportEntry:
    """Handle of one stream's entry, returned by :meth:`LossReport.create_entry`."""

    offset: int


@attrs.frozen
class LossEntry:
    """One stream's loss as read back from the report."""

    observation_count: int
    total_bytes_lost: int
    first_observation_ms: int
    last_observation_ms: int
    session_id: int
    stream_id: int
    channel: str
    source: str


class LossReport:
    """The writer side; only one thread (the receiver) may use it."""

    __slots__ = ("_buffer", "_next_offset")

    def __init__(self, buffer: AtomicBuffer) -> None:
        self._buffer = buffer
        self._next_offset = 0

    @property
    def buffer(self) -> AtomicBuffer:
        return self._buffer

    def create_entry(
        self, bytes_lost: int, timestamp_ms: int, session_id: int, stream_id: int, channel: str, source: str
    ) -> ReportEntry | None:
        """Append an entry holding the first observation; None when the report has no room left."""
        channel_bytes = _ascii(channel)
        source_bytes = _ascii(source)
        required = CHANNEL_OFFSET + 2 * _INT + len(channel_bytes) + len(source_bytes)
        offset = self._next_offset
        buffer = self._buffer
        if required > buffer.capacity - offset:
            return None
        buffer.put_long(offset + TOTAL_BYTES_LOST_OFFSET, bytes_lost)
        buffer.put_long(offset + FIRST_OBSERVATION_OFFSET, timestamp_ms)
        buffer.put_long(offset + LAST_OBSERVATION_OFFSET, timestamp_ms)
        buffer.put_int(offset + SESSION_ID_OFFSET, session_id)
        buffer.put_int(offset + STREAM_ID_OFFSET, stream_id)
        source_offset = offset + CHANNEL_OFFSET
        buffer.put_int(source_offset, len(channel_bytes))
        if channel_bytes:
            buffer.put_bytes(source_offset + _INT, channel_bytes)
        source_offset += _INT + len(channel_bytes)
        buffer.put_int(source_offset, len(source_bytes))
        if source_bytes:
            buffer.put_bytes(source_offset + _INT, source_bytes)
        buffer.put_long_ordered(offset + OBSERVATION_COUNT_OFFSET, 1)
        self._next_offset = offset + align(required, ENTRY_ALIGNMENT)
        return ReportEntry(offset)

    def record_observation(self, entry: ReportEntry, bytes_lost: int, timestamp_ms: int) -> None:
        """Add a later gap of the same stream."""
        buffer = self._buffer
        offset = entry.offset
        buffer.put_long_ordered(offset + LAST_OBSERVATION_OFFSET, timestamp_ms)
        buffer.get_and_add_long(offset + TOTAL_BYTES_LOST_OFFSET, bytes_lost)
        buffer.get_and_add_long(offset + OBSERVATION_COUNT_OFFSET, 1)


def _read_ascii(buffer: AtomicBuffer, offset: int, limit: int) -> tuple[str, int] | None:
    """(text, offset after it) of an int32-length ASCII string, or None if it does not fit."""
    if offset + _INT > limit:
        return None
    length = buffer.get_int(offset)
    if length < 0 or offset + _INT + length > limit:
        return None
    return buffer.get_bytes(offset + _INT, length).decode("ascii", "replace"), offset + _INT + length


def read_loss_report(buffer: AtomicBuffer) -> list[LossEntry]:
    """Every entry in report order; stops at the end marker or at anything that cannot be an entry."""
    entries: list[LossEntry] = []
    capacity = buffer.capacity
    offset = 0
    while offset + CHANNEL_OFFSET + 2 * _INT <= capacity:
        count = buffer.get_long_volatile(offset + OBSERVATION_COUNT_OFFSET)
        if count <= 0:
            break
        channel = _read_ascii(buffer, offset + CHANNEL_OFFSET, capacity)
        if channel is None:
            break
        source = _read_ascii(buffer, channel[1], capacity)
        if source is None:
            break
        entries.append(
            LossEntry(
                observation_count=count,
                total_bytes_lost=buffer.get_long(offset + TOTAL_BYTES_LOST_OFFSET),
                first_observation_ms=buffer.get_long(offset + FIRST_OBSERVATION_OFFSET),
                last_observation_ms=buffer.get_long(offset + LAST_OBSERVATION_OFFSET),
                session_id=buffer.get_int(offset + SESSION_ID_OFFSET),
                stream_id=buffer.get_int(offset + STREAM_ID_OFFSET),
                channel=channel[0],
                source=source[0],
            )
        )
        offset += align(source[1] - offset, ENTRY_ALIGNMENT)
    return entries


class LossReportFile:
    """``<aeron.dir>/loss-report.dat`` mapped: the driver creates it, tools map it to read."""

    __slots__ = ("_buffer", "_closed", "_mmap", "path")

    def __init__(self, path: Path, mapping: mmap.mmap) -> None:
        self.path = path
        self._mmap = mapping
        self._buffer = AtomicBuffer(mapping)
        self._closed = False

    @classmethod
    def create(cls, directory: str | os.PathLike[str], length: int = DEFAULT_LOSS_REPORT_LENGTH) -> LossReportFile:
        """Create (replacing any old one) a zero-filled report of ``length`` bytes in ``directory``."""
        if length < ENTRY_ALIGNMENT:
            raise DriverConfigurationError(
                "aeron.loss.report.buffer.length", length, f"at least {ENTRY_ALIGNMENT} bytes"
            )
        path = Path(directory) / LOSS_REPORT_FILE
        path.unlink(missing_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            try:
                os.posix_fallocate(fd, 0, length)
            except OSError as exc:
                if exc.errno in (errno.ENOSPC, errno.EDQUOT):
                    path.unlink(missing_ok=True)
                    raise StorageSpaceError(exc.errno, f"cannot allocate {length} bytes for {path}") from exc
                os.ftruncate(fd, length)
            mapping = mmap.mmap(fd, length)
        finally:
            os.close(fd)
        return cls(path, mapping)

    @classmethod
    def map_existing(cls, directory: str | os.PathLike[str]) -> LossReportFile:
        """Map the report a driver created; FileNotFoundError if there is none, ValueError if empty."""
        path = Path(directory) / LOSS_REPORT_FILE
        fd = os.open(path, os.O_RDWR)
        try:
            size = os.fstat(fd).st_size
            if size == 0:
                raise ValueError(f"{path} is empty")
            mapping = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        return cls(path, mapping)

    @property
    def buffer(self) -> AtomicBuffer:
        return self._buffer

    def read(self) -> list[LossEntry]:
        return read_loss_report(self._buffer)

    def close(self) -> None:
        """Release the buffer and unmap; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._buffer.release()
        try:
            self._mmap.close()
        except BufferError:
            pass

    def __enter__(self) -> LossReportFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
