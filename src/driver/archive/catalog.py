"""The catalog: one 1 KiB entry per recording in a memory-mapped file, in Aeron 1.15.1's ``archive.catalog`` layout.

Theory of operation
-------------------
The file is Aeron Archive's (schema 101, version 0), so Aeron's ``CatalogTool``
and archive read what we write and we read theirs. Entry 0 of the file is the
``CatalogHeader`` (no SBE message header)::

    0  int32 version (0)      4  int32 entry length (1024)

and the recording with id ``n`` is the entry at ``(n + 1) * entry length``: a
``RecordingDescriptorHeader`` then a ``RecordingDescriptor`` (little-endian)::

    0  int32 length of the descriptor (0: no entry here, nor after it)
    4  int8  valid (1) or not (0: purged, or found faulty by a verify)
    5  ...   reserved to 31                   -- see "recorded position" below
    32 RecordingDescriptor, 80-byte block: control session id, correlation id, recording id,
       start timestamp, stop timestamp, start position, stop position (int64 each), initial term id,
       segment file length, term buffer length, mtu length, session id, stream id (int32 each);
       then stripped channel, original channel and source identity, each uint32 length + ASCII.

Ids are dense and never reused; the next id is the first entry whose length is
0. The file is sparse and starts with room for 8192 entries (Aeron's default);
ours grows by doubling when full, which Aeron accepts (it maps what is there).

Recorded position. 1.15.1 writes a live recording's stop position only when it
stops (-1 until then) and publishes how far it has got only in its ``rec-pos``
counter in the driver's ``cnc.dat``. Readers of ours in other processes (Spark,
the tools) should not need a driver to follow a recording, so our archive also
keeps the position in the descriptor header's reserved bytes: an int64 at
offset 16, stored with release ordering after the segment write, marked valid
by the int32 ``EPRP`` at offset 24. Aeron neither reads nor writes those bytes.
A reader takes a recording's end as: the stop position once it is set (a
volatile read); else the recorded position where the mark says it is kept;
else -- a live recording of Aeron's archive -- the ``rec-pos`` counter found
through the driver directory that the mark file names; else the start position.

The archive process is the only writer. A new entry becomes visible when its
length is stored, last, with release ordering. The entries are written and read
with the SBE codecs of Aeron's schema (:mod:`driver.archive.codecs`); the
fields other processes poll (stop and recorded positions, length, valid) are
also reached directly at the offsets the schema gives, for their ordering.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Iterator
from pathlib import Path

import attrs

from driver.archive.codecs import LEGACY
from driver.archive.errors import CatalogError, CatalogLayoutError, RecordingNotFoundError
from driver.archive.positions import RecordingPositions
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.sbe import MessageCodec, SbeDecodeError, SbeEncodeError

__all__ = [
    "CATALOG_FILE",
    "CATALOG_VERSION",
    "DEFAULT_MAX_ENTRIES",
    "NULL_POSITION",
    "NULL_TIMESTAMP",
    "RECORD_LENGTH",
    "Catalog",
    "CatalogEntry",
    "RecordingDescriptor",
]

_CATALOG_HEADER = LEGACY["CatalogHeader"]
_DESCRIPTOR_HEADER = LEGACY["RecordingDescriptorHeader"]
_DESCRIPTOR = LEGACY["RecordingDescriptor"]


def _offsets(codec: MessageCodec) -> dict[str, int]:
    return {f.name: f.offset for f in codec.message.fields}


CATALOG_FILE = "archive.catalog"
CATALOG_VERSION = LEGACY.version
"""The archive schema's version in 1.15.1 (0): Aeron's catalog stores it in its header and refuses any other."""
RECORD_LENGTH = 1024
DEFAULT_MAX_ENTRIES = 8 * 1024
DESCRIPTOR_HEADER_LENGTH = _DESCRIPTOR_HEADER.block_length
DESCRIPTOR_BLOCK_LENGTH = _DESCRIPTOR.block_length
MAX_STRINGS_LENGTH = RECORD_LENGTH - (DESCRIPTOR_HEADER_LENGTH + DESCRIPTOR_BLOCK_LENGTH + 12)
"""What the three strings may take together in a 1 KiB entry (Aeron's limit: 900 bytes)."""
VALID = 1
INVALID = 0
NULL_POSITION = -1
NULL_TIMESTAMP = -1
OLD_LAYOUT_MAGIC = 0x43415045
"""``EPAC``: the first word of our catalogs before they took Aeron's layout."""

# CatalogHeader, at the file's start
_VERSION = _offsets(_CATALOG_HEADER)["version"]
_ENTRY_LENGTH = _offsets(_CATALOG_HEADER)["entryLength"]
# RecordingDescriptorHeader, at the entry's start; ours use reserved bytes between its valid and reserved fields
_LENGTH = _offsets(_DESCRIPTOR_HEADER)["length"]
_VALID = _offsets(_DESCRIPTOR_HEADER)["valid"]
_RESERVED = _offsets(_DESCRIPTOR_HEADER)["reserved"]
_RECORDED = 16
_RECORDED_MARK = 24
RECORDED_POSITION_MARK = 0x50525045  # "EPRP"
# RecordingDescriptor fields polled or changed in place, from the entry's start
_D = DESCRIPTOR_HEADER_LENGTH
_CONTROL_SESSION_ID = _D + _offsets(_DESCRIPTOR)["controlSessionId"]
_CORRELATION_ID = _D + _offsets(_DESCRIPTOR)["correlationId"]
_START_POS = _D + _offsets(_DESCRIPTOR)["startPosition"]
_STOP_TS = _D + _offsets(_DESCRIPTOR)["stopTimestamp"]
_STOP_POS = _D + _offsets(_DESCRIPTOR)["stopPosition"]
if not _VALID < _RECORDED < _RECORDED_MARK + 4 <= _RESERVED:
    raise ImportError("the descriptor header's reserved bytes are not where this catalog keeps its recorded position")


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
    control_session_id: int = 0
    correlation_id: int = 0

    @property
    def is_active(self) -> bool:
        return self.stop_position == NULL_POSITION

    @property
    def end_position(self) -> int:
        """Where the recorded bytes end now (the stop position once stopped)."""
        return self.recorded_position if self.stop_position == NULL_POSITION else self.stop_position

    def to_dict(self) -> dict[str, object]:
        return attrs.asdict(self)


@attrs.frozen
class CatalogEntry:
    """One entry as it is in the file, valid or not (what the tools show)."""

    length: int
    valid: bool
    descriptor: RecordingDescriptor
    keeps_recorded_position: bool
    """Written by our archive, which keeps the recorded position in the header (Aeron's does not)."""
    reserved: int = 0
    """The header's last byte (the schema's ``reserved`` field)."""


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", "replace")


class Catalog:
    """Map ``archive.catalog`` in ``archive_dir`` (created when ``writable`` and absent).

    A reader (``writable=False``) with ``follow_counters`` follows Aeron's
    live recordings through their ``rec-pos`` counters; without, such a
    recording ends at its start position until its archive stops it.
    """

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        *,
        writable: bool = True,
        sync: bool = False,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        follow_counters: bool = True,
    ) -> None:
        self.path = Path(archive_dir) / CATALOG_FILE
        self._writable = writable
        self._sync = sync
        self._live_position = RecordingPositions(archive_dir) if follow_counters and not writable else None
        self._map: mmap.mmap | None = None
        self._buffer: AtomicBuffer | None = None
        self._fd = -1
        self._entry_length = RECORD_LENGTH
        self._next_id = 0
        self._decoder = _DESCRIPTOR.decoder()
        self._encoder = _DESCRIPTOR.encoder()
        if max_entries < 1:
            raise CatalogError(f"max entries {max_entries}: must be at least 1")
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
            wanted = (max_entries + 1) * RECORD_LENGTH
            if size == 0 and writable:
                os.ftruncate(self._fd, wanted)
                self._remap()
                self._buf.put_int(_ENTRY_LENGTH, RECORD_LENGTH)
                self._buf.put_int_ordered(_VERSION, CATALOG_VERSION)
                self._flush()
            else:
                if size < 8:
                    raise CatalogError(f"{self.path} is {size} bytes: too short for a catalog")
                self._remap()
                self._check_header()
                if writable and size < wanted:
                    os.ftruncate(self._fd, wanted)  # as Aeron does: at least the configured entries
                    self._remap()
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
            self._buffer = None
        if self._map is not None:
            self._map.close()
            self._map = None
        size = os.fstat(self._fd).st_size
        # A reader maps copy-on-write and never writes, so on Linux its pages keep showing the file.
        access = mmap.ACCESS_WRITE if self._writable else mmap.ACCESS_COPY
        self._map = mmap.mmap(self._fd, size, access=access)
        self._buffer = AtomicBuffer(self._map)

    def _check_header(self) -> None:
        buffer = self._buf
        version = buffer.get_int_volatile(_VERSION)
        if version == OLD_LAYOUT_MAGIC:
            raise CatalogLayoutError(
                f"{self.path} is in the archive's old layout (before it took Aeron's); "
                "convert it once with `python -m driver.archive migrate <archive dir>`"
            )
        if version != CATALOG_VERSION:
            raise CatalogError(
                f"{self.path}: catalog version {version}; this archive reads Aeron 1.15.1's version {CATALOG_VERSION}"
            )
        entry_length = buffer.get_int(_ENTRY_LENGTH)
        if entry_length < DESCRIPTOR_HEADER_LENGTH + DESCRIPTOR_BLOCK_LENGTH + 12 or entry_length % 8:
            raise CatalogError(f"{self.path}: entry length {entry_length} cannot hold a recording descriptor")
        if buffer.capacity < 2 * entry_length:
            raise CatalogError(f"{self.path} is {buffer.capacity} bytes: too short for entries of {entry_length}")
        self._entry_length = entry_length

    def _offset(self, recording_id: int) -> int:
        """Where the entry of ``recording_id`` starts, remapping if the writer grew the file; -1 beyond it."""
        offset = (recording_id + 1) * self._entry_length
        if offset + self._entry_length > self._buf.capacity:
            if os.fstat(self._fd).st_size >= offset + self._entry_length:
                self._remap()
            else:
                return -1
        return offset

    def _entry(self, recording_id: int) -> int:
        """Offset of a valid recording's entry; :class:`RecordingNotFoundError` for any other id."""
        if recording_id < 0:
            raise RecordingNotFoundError(f"recording id {recording_id} is negative")
        offset = self._offset(recording_id)
        b = self._buf
        if offset < 0 or b.get_int_volatile(offset + _LENGTH) <= 0 or b.get_byte(offset + _VALID) != VALID:
            raise RecordingNotFoundError(f"no recording {recording_id}")
        return offset

    def close(self) -> None:
        if self._live_position is not None:
            self._live_position.close()
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
    def entry_length(self) -> int:
        return self._entry_length

    @property
    def max_entries(self) -> int:
        """How many entries the file holds now (Aeron's ``maxEntries``: the file's length in entries, less one)."""
        return os.fstat(self._fd).st_size // self._entry_length - 1

    @property
    def next_recording_id(self) -> int:
        """The first id without an entry (entries are dense: the first empty one ends them)."""
        while True:
            offset = self._offset(self._next_id)  # may remap: the buffer is taken after it
            if offset < 0 or self._buf.get_int_volatile(offset + _LENGTH) <= 0:
                return self._next_id
            self._next_id += 1

    def descriptor(self, recording_id: int) -> RecordingDescriptor:
        """The recording's descriptor; :class:`RecordingNotFoundError` unless it exists and is valid."""
        return self._read(self._entry(recording_id))

    def entry(self, recording_id: int) -> CatalogEntry:
        """The entry as it is, valid or not; :class:`RecordingNotFoundError` where there is none."""
        offset = self._offset(recording_id) if recording_id >= 0 else -1
        b = self._buf
        if offset < 0 or (length := b.get_int_volatile(offset + _LENGTH)) <= 0:
            raise RecordingNotFoundError(f"no catalog entry {recording_id}")
        return CatalogEntry(
            length,
            b.get_byte(offset + _VALID) == VALID,
            self._read(offset),
            b.get_int(offset + _RECORDED_MARK) == RECORDED_POSITION_MARK,
            b.get_byte(offset + _RESERVED),
        )

    def entries(self) -> Iterator[CatalogEntry]:
        """Every entry in id order, valid or not."""
        for recording_id in range(self.next_recording_id):
            yield self.entry(recording_id)

    def _read(self, offset: int) -> RecordingDescriptor:
        b = self._buf
        stop = b.get_long_volatile(offset + _STOP_POS)  # first: the fields read after it are at least as new
        view = b.view(offset, self._entry_length)
        try:
            dec = self._decoder.wrap(view, DESCRIPTOR_HEADER_LENGTH, DESCRIPTOR_BLOCK_LENGTH, CATALOG_VERSION)
            (
                control_session_id,
                correlation_id,
                recording_id,
                start_timestamp,
                stop_timestamp,
                start,
                _,
                initial_term_id,
                segment_file_length,
                term_buffer_length,
                mtu_length,
                session_id,
                stream_id,
            ) = dec.read_fields()
            stripped = _decode(dec.stripped_channel_bytes())
            original = _decode(dec.original_channel_bytes())
            source = _decode(dec.source_identity_bytes())
        except SbeDecodeError:
            raise CatalogError(
                f"{self.path}: the entry at {offset} has a torn descriptor (a string overruns it)"
            ) from None
        finally:
            view.release()
        return RecordingDescriptor(
            recording_id=recording_id,
            start_timestamp=start_timestamp,
            stop_timestamp=stop_timestamp,
            start_position=start,
            stop_position=stop,
            recorded_position=stop if stop != NULL_POSITION else self._recorded(offset, recording_id, start),
            initial_term_id=initial_term_id,
            segment_file_length=segment_file_length,
            term_buffer_length=term_buffer_length,
            mtu_length=mtu_length,
            session_id=session_id,
            stream_id=stream_id,
            stripped_channel=stripped,
            original_channel=original,
            source_identity=source,
            control_session_id=control_session_id,
            correlation_id=correlation_id,
        )

    def _recorded(self, offset: int, recording_id: int, start: int) -> int:
        """A live recording's end: ours from the header, Aeron's from its counter, else its start."""
        b = self._buf
        if b.get_int(offset + _RECORDED_MARK) == RECORDED_POSITION_MARK:
            return b.get_long_volatile(offset + _RECORDED)
        if self._live_position is not None:
            live = self._live_position(recording_id)
            if live is not None and live >= start:
                return live
        return start

    def __iter__(self) -> Iterator[RecordingDescriptor]:
        return iter(self.descriptors())

    def descriptors(self, from_id: int = 0, count: int | None = None) -> list[RecordingDescriptor]:
        """Valid recordings with ids from ``from_id``, at most ``count`` of them."""
        found: list[RecordingDescriptor] = []
        for recording_id in range(max(from_id, 0), self.next_recording_id):
            if count is not None and len(found) >= count:
                break
            offset = self._offset(recording_id)
            if offset >= 0 and self._buf.get_byte(offset + _VALID) == VALID:
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
        offset = self._entry(recording_id)
        stop = self._buf.get_long_volatile(offset + _STOP_POS)
        if stop != NULL_POSITION:
            return stop
        return self._recorded(offset, recording_id, self._buf.get_long(offset + _START_POS))

    # -- writing (the archive only) ------------------------------------------------------------------

    def _writable_entry(self, recording_id: int) -> int:
        if not self._writable:
            raise CatalogError(f"{self.path} is open read-only")
        return self._entry(recording_id)

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
        control_session_id: int = 0,
        correlation_id: int = 0,
    ) -> int:
        """Add an active recording; returns its id."""
        if not self._writable:
            raise CatalogError(f"{self.path} is open read-only")
        encoded = [s.encode() for s in (stripped_channel, original_channel, source_identity)]
        limit = self._entry_length - (DESCRIPTOR_HEADER_LENGTH + DESCRIPTOR_BLOCK_LENGTH + 12)
        if sum(len(e) for e in encoded) > limit:
            raise CatalogError(
                f"channel, original channel and source identity take {sum(len(e) for e in encoded)} bytes; "
                f"a descriptor holds at most {limit}"
            )
        recording_id = self.next_recording_id
        offset = self._offset(recording_id)
        if offset < 0:
            size = os.fstat(self._fd).st_size
            os.ftruncate(self._fd, self._entry_length + 2 * (size - self._entry_length))
            self._remap()
            offset = self._offset(recording_id)
        b = self._buf
        b.set_memory(offset, self._entry_length, 0)
        view = b.view(offset, self._entry_length)
        try:
            enc = self._encoder.wrap(view, DESCRIPTOR_HEADER_LENGTH)
            enc.write_fields(
                control_session_id,
                correlation_id,
                recording_id,
                start_timestamp,
                NULL_TIMESTAMP,
                start_position,
                NULL_POSITION,
                initial_term_id,
                segment_file_length,
                term_buffer_length,
                mtu_length,
                session_id,
                stream_id,
            )
            enc.put_stripped_channel(encoded[0])
            enc.put_original_channel(encoded[1])
            enc.put_source_identity(encoded[2])
            length = enc.encoded_length
        except SbeEncodeError as exc:
            raise CatalogError(f"{self.path}: cannot encode recording {recording_id}: {exc}") from None
        finally:
            view.release()
        b.put_long(offset + _RECORDED, start_position)
        b.put_int(offset + _RECORDED_MARK, RECORDED_POSITION_MARK)
        b.put_byte(offset + _VALID, VALID)
        b.put_int_ordered(offset + _LENGTH, length)
        self._next_id = recording_id + 1
        self._flush()
        return recording_id

    def set_recorded_position(self, recording_id: int, position: int) -> None:
        """Hot path: the recorder stores how far the segment files hold whole frames."""
        self._buf.put_long_ordered((recording_id + 1) * self._entry_length + _RECORDED, position)

    def stop(self, recording_id: int, position: int, timestamp: int) -> None:
        offset = self._writable_entry(recording_id)
        b = self._buf
        b.put_long_ordered(offset + _RECORDED, position)
        b.put_long(offset + _STOP_TS, timestamp)
        b.put_long_volatile(offset + _STOP_POS, position)
        self._flush()

    def extend(self, recording_id: int, *, control_session_id: int = 0, correlation_id: int = 0) -> None:
        """Make a stopped recording active again (its stop position becomes the extension's join)."""
        offset = self._writable_entry(recording_id)
        b = self._buf
        b.put_long_ordered(offset + _RECORDED, b.get_long(offset + _STOP_POS))
        b.put_int_ordered(offset + _RECORDED_MARK, RECORDED_POSITION_MARK)
        b.put_long(offset + _CONTROL_SESSION_ID, control_session_id)
        b.put_long(offset + _CORRELATION_ID, correlation_id)
        b.put_long(offset + _STOP_TS, NULL_TIMESTAMP)
        b.put_long_volatile(offset + _STOP_POS, NULL_POSITION)
        self._flush()

    def truncate(self, recording_id: int, position: int) -> None:
        offset = self._writable_entry(recording_id)
        b = self._buf
        b.put_long_volatile(offset + _STOP_POS, position)
        b.put_long_ordered(offset + _RECORDED, position)
        self._flush()

    def delete(self, recording_id: int) -> None:
        """Mark the recording not valid (Aeron's "unusable"); its id stays taken."""
        offset = self._writable_entry(recording_id)
        self._buf.put_byte(offset + _VALID, INVALID)
        self._flush()

    def set_valid(self, recording_id: int, valid: bool) -> None:
        """A verify's verdict on an entry, whatever it was before."""
        offset = self._any_writable_entry(recording_id)
        self._buf.put_byte(offset + _VALID, VALID if valid else INVALID)
        self._flush()

    def set_stop(self, recording_id: int, position: int, timestamp: int) -> None:
        """A verify's recovered stop position for an entry, valid or not."""
        offset = self._any_writable_entry(recording_id)
        b = self._buf
        b.put_long_ordered(offset + _RECORDED, position)
        b.put_long(offset + _STOP_TS, timestamp)
        b.put_long_volatile(offset + _STOP_POS, position)
        self._flush()

    def _any_writable_entry(self, recording_id: int) -> int:
        if not self._writable:
            raise CatalogError(f"{self.path} is open read-only")
        offset = self._offset(recording_id) if recording_id >= 0 else -1
        if offset < 0 or self._buf.get_int_volatile(offset + _LENGTH) <= 0:
            raise RecordingNotFoundError(f"no catalog entry {recording_id}")
        return offset

    def _flush(self) -> None:
        if self._sync and self._map is not None:
            self._map.flush()
