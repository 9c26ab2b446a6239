"""The catalog: one fixed-size descriptor per recording in a memory-mapped file.

Theory of operation
-------------------
``archive.catalog`` is a 1 KiB header followed by 1 KiB descriptor slots; the
recording id *is* the slot index, so a lookup is one multiplication and ids are
never reused (a purged recording keeps its slot, marked deleted). The archive
process is the only writer; any other process (a Spark job, a tool) may map the
file read-only and follow active recordings through ``recorded_position``,
which the recorder stores with release ordering after the bytes reached the
segment file. A slot becomes visible when its state word is stored, last.

Header (little-endian)::

    0  int32 magic "EPAC"    4 int32 version    8 int32 slot length    16 int64 next recording id

Descriptor slot::

    0  int32 state (0 empty, 1 valid, 2 deleted)   8  int64 recording id
    16 int64 start timestamp (ms)                   24 int64 stop timestamp (-1 while recording)
    32 int64 start position                         40 int64 stop position (-1 while recording)
    48 int64 recorded position                      56 int32 initial term id
    60 int32 segment file length                    64 int32 term buffer length
    68 int32 mtu length                             72 int32 session id
    76 int32 stream id                              96 ... three strings, each uint16 length + UTF-8:
                                                        stripped channel, original channel, source identity
"""

from __future__ import annotations

import enum
import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import attrs

from driver.archive.errors import CatalogError, RecordingNotFoundError
from driver.concurrent.atomic_buffer import AtomicBuffer

__all__ = ["CATALOG_FILE", "Catalog", "RecordingDescriptor", "RecordingState"]

CATALOG_FILE = "archive.catalog"
MAGIC = 0x43415045  # "EPAC"
VERSION = 1
SLOT_LENGTH = 1024
HEADER_LENGTH = 1024
INITIAL_SLOTS = 1024

_NEXT_ID = 16
_STATE = 0
_ID = 8
_START_TS = 16
_STOP_TS = 24
_START_POS = 32
_STOP_POS = 40
_RECORDED_POS = 48
_INITIAL_TERM_ID = 56
_SEGMENT_LENGTH = 60
_TERM_LENGTH = 64
_MTU = 68
_SESSION_ID = 72
_STREAM_ID = 76
_STRINGS = 96
_MAX_STRINGS = SLOT_LENGTH - _STRINGS - 6

NULL_POSITION = -1


class RecordingState(enum.IntEnum):
    EMPTY = 0
    VALID = 1
    DELETED = 2


@attrs.frozen
class RecordingDescriptor:
    """A recording as the catalog knows it; ``stop_position`` is -1 while it is being recorded."""

    recording_id: int
    start_timestamp: int
    stop_timestamp: int
    start_position: int
    stop_position: int
    recorded_position: int
    initial_term_id: int
    segment_file_length: int
    term_buffer_length: int
    mtu_length: int
    session_id: int
    stream_id: int
    stripped_channel: str
    original_channel: str
    source_identity: str

    @property
    def is_active(self) -> bool:
        return self.stop_position == NULL_POSITION

    @property
    def end_position(self) -> int:
        """Where the recorded bytes end now (the stop position once stopped)."""
        return self.recorded_position if self.stop_position == NULL_POSITION else self.stop_position

    def to_dict(self) -> dict[str, object]:
        return attrs.asdict(self)


class Catalog:
    """Map ``archive.catalog`` in ``archive_dir`` (created when ``writable`` and absent)."""

    def __init__(self, archive_dir: str | os.PathLike[str], *, writable: bool = True, sync: bool = False) -> None:
        self.path = Path(archive_dir) / CATALOG_FILE
        self._writable = writable
        self._sync = sync
        self._map: mmap.mmap | None = None
        self._buffer: AtomicBuffer | None = None
        if writable:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_RDWR | os.O_CREAT
        else:
            flags = os.O_RDONLY
        try:
            self._fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            raise CatalogError(f"no catalog at {self.path}") from None
        try:
            size = os.fstat(self._fd).st_size
            if size == 0 and writable:
                os.ftruncate(self._fd, HEADER_LENGTH + INITIAL_SLOTS * SLOT_LENGTH)
                self._remap()
                buffer = self._buf
                buffer.put_int(4, VERSION)
                buffer.put_int(8, SLOT_LENGTH)
                buffer.put_long(_NEXT_ID, 0)
                buffer.put_int_ordered(0, MAGIC)
            else:
                if size < HEADER_LENGTH:
                    raise CatalogError(f"{self.path} is {size} bytes: too short for a catalog")
                self._remap()
            self._check_header()
        except BaseException:
            self.close()
            raise

    # -- mapping -------------------------------------------------------------------------------------

    @property
    def _buf(self) -> AtomicBuffer:
        if self._buffer is None:
            raise CatalogError(f"{self.path} is closed")
        return self._buffer

    def _remap(self) -> None:
        if self._buffer is not None:
            self._buffer.release()
        if self._map is not None:
            self._map.close()
        size = os.fstat(self._fd).st_size
        # A reader maps copy-on-write and never writes, so on Linux its pages keep showing the file.
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_COPY
        self._map = mmap.mmap(self._fd, size, access=access)
        self._buffer = AtomicBuffer(self._map)

    def _check_header(self) -> None:
        buffer = self._buf
        if buffer.get_int_volatile(0) != MAGIC:
            raise CatalogError(f"{self.path} is not a catalog (bad magic)")
        if buffer.get_int(4) != VERSION or buffer.get_int(8) != SLOT_LENGTH:
            raise CatalogError(
                f"{self.path}: catalog version {buffer.get_int(4)} slot {buffer.get_int(8)}, "
                f"this archive reads version {VERSION} slot {SLOT_LENGTH}"
            )

    def _slot(self, recording_id: int) -> int:
        offset = HEADER_LENGTH + recording_id * SLOT_LENGTH
        if recording_id < 0:
            raise RecordingNotFoundError(f"recording id {recording_id} is negative")
        if offset + SLOT_LENGTH > self._buf.capacity:
            if os.fstat(self._fd).st_size >= offset + SLOT_LENGTH:
                self._remap()
            else:
                raise RecordingNotFoundError(f"no recording {recording_id}")
        return offset

    def close(self) -> None:
        if self._buffer is not None:
            self._buffer.release()
            self._buffer = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> Catalog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- reading -------------------------------------------------------------------------------------

    @property
    def next_recording_id(self) -> int:
        return self._buf.get_long_volatile(_NEXT_ID)

    def _state(self, offset: int) -> int:
        return self._buf.get_int_volatile(offset + _STATE)

    def descriptor(self, recording_id: int) -> RecordingDescriptor:
        """The recording's descriptor; :class:`RecordingNotFoundError` unless it exists and was not purged."""
        offset = self._slot(recording_id)
        if self._state(offset) != RecordingState.VALID:
            raise RecordingNotFoundError(f"no recording {recording_id}")
        return self._read(offset)

    def _read(self, offset: int) -> RecordingDescriptor:
        b = self._buf
        strings: list[str] = []
        at = offset + _STRINGS
        for _ in range(3):
            length = b.get_ushort(at)
            strings.append(b.get_bytes(at + 2, length).decode())
            at += 2 + length
        stop = b.get_long_volatile(offset + _STOP_POS)
        return RecordingDescriptor(
            recording_id=b.get_long(offset + _ID),
            start_timestamp=b.get_long(offset + _START_TS),
            stop_timestamp=b.get_long(offset + _STOP_TS),
            start_position=b.get_long(offset + _START_POS),
            stop_position=stop,
            recorded_position=b.get_long_volatile(offset + _RECORDED_POS),
            initial_term_id=b.get_int(offset + _INITIAL_TERM_ID),
            segment_file_length=b.get_int(offset + _SEGMENT_LENGTH),
            term_buffer_length=b.get_int(offset + _TERM_LENGTH),
            mtu_length=b.get_int(offset + _MTU),
            session_id=b.get_int(offset + _SESSION_ID),
            stream_id=b.get_int(offset + _STREAM_ID),
            stripped_channel=strings[0],
            original_channel=strings[1],
            source_identity=strings[2],
        )

    def __iter__(self) -> Iterator[RecordingDescriptor]:
        return iter(self.descriptors())

    def descriptors(self, from_id: int = 0, count: int | None = None) -> list[RecordingDescriptor]:
        """Valid recordings with ids from ``from_id``, at most ``count`` of them."""
        found: list[RecordingDescriptor] = []
        end = self.next_recording_id
        for recording_id in range(max(from_id, 0), end):
            if count is not None and len(found) >= count:
                break
            offset = self._slot(recording_id)
            if self._state(offset) == RecordingState.VALID:
                found.append(self._read(offset))
        return found

    def find(
        self, channel_fragment: str = "", stream_id: int | None = None, from_id: int = 0, count: int | None = None
    ) -> list[RecordingDescriptor]:
        """Recordings whose original channel contains ``channel_fragment`` (and on ``stream_id``, if given)."""
        found: list[RecordingDescriptor] = []
        for descriptor in self.descriptors(from_id):
            if count is not None and len(found) >= count:
                break
            if (stream_id is None or descriptor.stream_id == stream_id) and channel_fragment in (
                descriptor.original_channel
            ):
                found.append(descriptor)
        return found

    def recorded_position(self, recording_id: int) -> int:
        offset = self._slot(recording_id)
        if self._state(offset) != RecordingState.VALID:
            raise RecordingNotFoundError(f"no recording {recording_id}")
        return self._buf.get_long_volatile(offset + _RECORDED_POS)

    # -- writing (the archive only) ------------------------------------------------------------------

    def _writable_slot(self, recording_id: int) -> int:
        if not self._writable:
            raise CatalogError(f"{self.path} is open read-only")
        offset = self._slot(recording_id)
        if self._state(offset) != RecordingState.VALID:
            raise RecordingNotFoundError(f"no recording {recording_id}")
        return offset

    def add(
        self,
        *,
        start_position: int,
        start_timestamp: int,
        initial_term_id: int,
        segment_file_length: int,
        term_buffer_length: int,
        mtu_length: int,
        session_id: int,
        stream_id: int,
        stripped_channel: str,
        original_channel: str,
        source_identity: str,
    ) -> int:
        """Add an active recording; returns its id."""
        if not self._writable:
            raise CatalogError(f"{self.path} is open read-only")
        encoded = [s.encode() for s in (stripped_channel, original_channel, source_identity)]
        if sum(len(e) for e in encoded) > _MAX_STRINGS:
            raise CatalogError(
                f"channel, original channel and source identity take {sum(len(e) for e in encoded)} bytes; "
                f"a descriptor holds at most {_MAX_STRINGS}"
            )
        recording_id = self.next_recording_id
        offset = HEADER_LENGTH + recording_id * SLOT_LENGTH
        if offset + SLOT_LENGTH > os.fstat(self._fd).st_size:
            os.ftruncate(self._fd, HEADER_LENGTH + 2 * (offset + SLOT_LENGTH - HEADER_LENGTH))
        if offset + SLOT_LENGTH > self._buf.capacity:
            self._remap()
        b = self._buf
        b.set_memory(offset, SLOT_LENGTH, 0)
        b.put_long(offset + _ID, recording_id)
        b.put_long(offset + _START_TS, start_timestamp)
        b.put_long(offset + _STOP_TS, NULL_POSITION)
        b.put_long(offset + _START_POS, start_position)
        b.put_long(offset + _STOP_POS, NULL_POSITION)
        b.put_long(offset + _RECORDED_POS, start_position)
        b.put_int(offset + _INITIAL_TERM_ID, initial_term_id)
        b.put_int(offset + _SEGMENT_LENGTH, segment_file_length)
        b.put_int(offset + _TERM_LENGTH, term_buffer_length)
        b.put_int(offset + _MTU, mtu_length)
        b.put_int(offset + _SESSION_ID, session_id)
        b.put_int(offset + _STREAM_ID, stream_id)
        at = offset + _STRINGS
        for e in encoded:
            b.put_short(at, len(e))
            b.put_bytes(at + 2, e)
            at += 2 + len(e)
        b.put_int_ordered(offset + _STATE, RecordingState.VALID)
        b.put_long_ordered(_NEXT_ID, recording_id + 1)
        self._flush()
        return recording_id

    def set_recorded_position(self, recording_id: int, position: int) -> None:
        """Hot path: the recorder stores how far the segment files hold whole frames."""
        self._buf.put_long_ordered(HEADER_LENGTH + recording_id * SLOT_LENGTH + _RECORDED_POS, position)

    def stop(self, recording_id: int, position: int, timestamp: int) -> None:
        offset = self._writable_slot(recording_id)
        b = self._buf
        b.put_long_ordered(offset + _RECORDED_POS, position)
        b.put_long(offset + _STOP_TS, timestamp)
        b.put_long_ordered(offset + _STOP_POS, position)
        self._flush()

    def extend(self, recording_id: int) -> None:
        """Make a stopped recording active again (its stop position becomes the extension's join)."""
        offset = self._writable_slot(recording_id)
        b = self._buf
        b.put_long_ordered(offset + _RECORDED_POS, b.get_long(offset + _STOP_POS))
        b.put_long(offset + _STOP_TS, NULL_POSITION)
        b.put_long_ordered(offset + _STOP_POS, NULL_POSITION)
        self._flush()

    def truncate(self, recording_id: int, position: int) -> None:
        offset = self._writable_slot(recording_id)
        b = self._buf
        b.put_long_ordered(offset + _STOP_POS, position)
        b.put_long_ordered(offset + _RECORDED_POS, position)
        self._flush()

    def delete(self, recording_id: int) -> None:
        offset = self._writable_slot(recording_id)
        self._buf.put_int_ordered(offset + _STATE, RecordingState.DELETED)
        self._flush()

    def _flush(self) -> None:
        if self._sync and self._map is not None:
            self._map.flush()
