"""The operator's verbs over an archive directory (ours or Aeron's): describe, dump, verify, errors, and the rest of
Aeron 1.15.1's ``CatalogTool``.

``describe`` and ``verify`` print what ``CatalogTool`` prints, line for line where it works (descriptors as SBE's
``toString``, ``(recordingId=N) OK`` on stdout, ``(recordingId=N) ERR: ...`` on stderr): scripts written for
Aeron's tool read ours. Where 1.15.1's tool is broken we do what it means to do: its ``describe`` of a whole
archive and ``pid`` fail on every 1.15.1 mark file (its schema version is 0, which its mark-file reader takes for
"not ready yet"); ours print the mark file. ``verify`` follows 1.15.1's algorithm -- an active recording gets the
stop position its newest segment shows, the last segment must exist and hold frames of the recording's session and
stream up to exactly the stop position, zeros after -- with the segment arithmetic done from the start position's
term, so recordings starting mid-term get the right verdict; like Aeron's, it writes each verdict into the
catalog (valid or not), unless the archive is running, when it only reports. ``dump`` (from today's
``ArchiveTool``) adds the frames of each recording. ``errors`` prints the archive's error log: 1.15.1 keeps the
archive's errors in the distinct error log of its driver's ``cnc.dat`` (the directory the mark file names), and
so does our archiving driver. ``migrate`` converts an archive directory in our old layout, once.
"""

from __future__ import annotations

import contextlib
import datetime
import fcntl
import os
import struct
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TextIO

from driver.archive.catalog import (
    CATALOG_FILE,
    NULL_POSITION,
    OLD_LAYOUT_MAGIC,
    Catalog,
    CatalogEntry,
    RecordingDescriptor,
)
from driver.archive.codecs import LEGACY, LEGACY_MARK
from driver.archive.errors import (
    ArchiveError,
    ArchiveInUseError,
    ArchiveToolError,
    CatalogError,
    MarkFileError,
    RecordingNotFoundError,
)
from driver.archive.mark import MARK_FILE, MarkFileHeader, read_mark_file
from driver.archive.segments import (
    SEGMENT_SUFFIX,
    ensure_segment,
    segment_file_name,
    segment_files,
    segment_index,
)
from driver.cnc import CncFile
from driver.concurrent.atomic_buffer import align
from driver.concurrent.error_log import read_error_log
from driver.errors import DriverError
from driver.logbuffer.frame import FRAME_ALIGNMENT, HEADER_LENGTH
from driver.sbe import MessageCodec

__all__ = [
    "VERBS",
    "archive_is_running",
    "count_entries",
    "describe",
    "descriptor_text",
    "dump",
    "errors",
    "max_entries",
    "migrate",
    "pid",
    "run",
    "verify",
]

VERBS = ("describe", "dump", "verify", "errors", "pid", "count-entries", "max-entries", "migrate")
ACTIVITY_TIMEOUT_MS = 5000
"""A mark file refreshed within this is a running archive (Aeron's tools wait as long for one)."""

_FRAME = struct.Struct("<iBBHiiii")
_PAD = 0
_DATA = 1
_UNFRAGMENTED = 0xC0


# -- SBE text as Aeron's generated toString writes it -------------------------------------------------------------


def sbe_text(codec: MessageCodec, values: dict[str, object]) -> str:
    """``[Name](sbeTemplateId=..|sbeSchemaId=..|sbeSchemaVersion=..|sbeBlockLength=..):field=value|data='text'``."""
    parts = [
        f"{f.name}={values[f.name]}" for f in codec.message.fields if f.presence != "constant" and f.name in values
    ]
    parts += [f"{d.name}='{values.get(d.name, '')}'" for d in codec.message.data]
    return (
        f"[{codec.name}](sbeTemplateId={codec.template_id}|sbeSchemaId={codec.schema_id}|"
        f"sbeSchemaVersion={codec.schema_version}|sbeBlockLength={codec.block_length}):" + "|".join(parts)
    )


def descriptor_text(d: RecordingDescriptor) -> str:
    """The descriptor as ``CatalogTool describe`` prints it."""
    return sbe_text(
        LEGACY["RecordingDescriptor"],
        {
            "controlSessionId": d.control_session_id,
            "correlationId": d.correlation_id,
            "recordingId": d.recording_id,
            "startTimestamp": d.start_timestamp,
            "stopTimestamp": d.stop_timestamp,
            "startPosition": d.start_position,
            "stopPosition": d.stop_position,
            "initialTermId": d.initial_term_id,
            "segmentFileLength": d.segment_file_length,
            "termBufferLength": d.term_buffer_length,
            "mtuLength": d.mtu_length,
            "sessionId": d.session_id,
            "streamId": d.stream_id,
            "strippedChannel": d.stripped_channel,
            "originalChannel": d.original_channel,
            "sourceIdentity": d.source_identity,
        },
    )


def _header_text(entry: CatalogEntry) -> str:
    return sbe_text(
        LEGACY["RecordingDescriptorHeader"],
        {"length": entry.length, "valid": int(entry.valid), "reserved": entry.reserved},
    )


def _mark_text(mark: MarkFileHeader) -> str:
    return sbe_text(
        LEGACY_MARK["MarkFileHeader"],
        {
            "version": mark.version,
            "activityTimestamp": mark.activity_timestamp,
            "startTimestamp": mark.start_timestamp,
            "pid": mark.pid,
            "controlStreamId": mark.control_stream_id,
            "localControlStreamId": mark.local_control_stream_id,
            "eventsStreamId": mark.events_stream_id,
            "controlChannel": mark.control_channel,
            "localControlChannel": mark.local_control_channel,
            "eventsChannel": mark.events_channel,
            "aeronDirectory": mark.aeron_directory,
        },
    )


def _local(epoch_ms: int, fmt: str) -> str:
    try:
        return datetime.datetime.fromtimestamp(epoch_ms / 1000).astimezone().strftime(fmt)
    except (OverflowError, OSError, ValueError):
        return f"<invalid time {epoch_ms}>"


def _java_time(epoch_ms: int) -> str:
    """Java's ``yyyy-MM-dd HH:mm:ss.SSSZ`` in local time (ErrorStat's)."""
    return _local(epoch_ms, "%Y-%m-%d %H:%M:%S") + f".{epoch_ms % 1000:03d}" + _local(epoch_ms, "%z")


def _mark_lines(archive_dir: Path) -> list[str]:
    """The mark file's information as CatalogTool means to print it, or a line saying why there is none."""
    try:
        mark = read_mark_file(archive_dir)
    except MarkFileError as exc:
        return [f"(no mark file information: {exc})"]
    now = time.strftime("%H:%M:%S")
    start = _local(mark.start_timestamp, "%Y-%m-%d %H:%M:%S")
    activity = _local(mark.activity_timestamp, "%Y-%m-%d %H:%M:%S")
    return [f"{now} (start: {start}, activity: {activity})", _mark_text(mark)]


# -- opening ------------------------------------------------------------------------------------------------------


def _check_dir(archive_dir: Path) -> None:
    if not archive_dir.is_dir():
        raise ArchiveToolError(f"archive directory not found: {archive_dir}")


def _open_catalog(archive_dir: Path, *, writable: bool = False) -> Catalog:
    _check_dir(archive_dir)
    if not (archive_dir / CATALOG_FILE).is_file():
        raise ArchiveToolError(f"{archive_dir}: no {CATALOG_FILE}")
    try:
        # Never a writable open that could grow the file: the tool keeps the catalog's length as it is.
        return Catalog(archive_dir, writable=writable, max_entries=1)
    except CatalogError as exc:
        raise ArchiveToolError(str(exc)) from None


def archive_is_running(archive_dir: Path) -> bool:
    """Our archive holds a lock on its mark file while it runs; Aeron's takes none but refreshes the activity
    timestamp every millisecond, from a process that is still there."""
    path = archive_dir / MARK_FILE
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    try:
        mark = read_mark_file(archive_dir)
    except MarkFileError:
        return False
    if mark.pid == os.getpid() or abs(int(time.time() * 1000) - mark.activity_timestamp) >= ACTIVITY_TIMEOUT_MS:
        return False  # an archive in this process would hold the lock; a stale timestamp is a stopped archive
    try:
        os.kill(mark.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# -- describe, pid, count-entries, max-entries ---------------------------------------------------------------------


def describe(archive_dir: Path, recording_id: int | None = None, out: TextIO = sys.stdout) -> int:
    """All entries after the mark file and the catalog's room (or one entry alone), as CatalogTool prints them."""
    with _open_catalog(archive_dir) as catalog:
        if recording_id is not None:
            # CatalogTool prints nothing (and succeeds) for an id without an entry.
            with contextlib.suppress(RecordingNotFoundError):
                out.write(descriptor_text(catalog.entry(recording_id).descriptor) + "\n")
            return 0
        for line in _mark_lines(archive_dir):
            out.write(line + "\n")
        out.write(f"Catalog Max Entries: {catalog.max_entries}\n")
        for entry in catalog.entries():
            out.write(descriptor_text(entry.descriptor) + "\n")
    return 0


def pid(archive_dir: Path, out: TextIO = sys.stdout) -> int:
    _check_dir(archive_dir)
    try:
        out.write(f"{read_mark_file(archive_dir).pid}\n")
    except MarkFileError as exc:
        raise ArchiveToolError(str(exc)) from None
    return 0


def count_entries(archive_dir: Path, out: TextIO = sys.stdout) -> int:
    with _open_catalog(archive_dir) as catalog:
        out.write(f"{catalog.next_recording_id}\n")
    return 0


def max_entries(archive_dir: Path, out: TextIO = sys.stdout) -> int:
    with _open_catalog(archive_dir) as catalog:
        out.write(f"{catalog.max_entries}\n")
    return 0


# -- dump ---------------------------------------------------------------------------------------------------------


def _hex_dump(data: bytes, out: TextIO) -> None:
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        text = "".join(chr(c) if 32 <= c < 127 else "." for c in row)
        out.write(f"{at:08x}  {row.hex(' '):<47}  |{text}|\n")


def _frames(
    archive_dir: Path, d: RecordingDescriptor, start: int, end: int
) -> Iterator[tuple[int, int, int, int, bytes]]:
    """(position, frame type, flags, payload length, payload) of the frames in ``[start, end)``."""
    position = start
    fd = -1
    index = -1
    try:
        while position < end:
            at = segment_index(d.start_position, position, d.term_buffer_length, d.segment_file_length)
            if at != index:
                if fd >= 0:
                    os.close(fd)
                    fd = -1
                index = at
                fd = os.open(archive_dir / segment_file_name(d.recording_id, index), os.O_RDONLY)
            term_base = d.start_position - d.start_position % d.term_buffer_length
            offset = position - term_base - index * d.segment_file_length
            header = os.pread(fd, HEADER_LENGTH, offset)
            if len(header) < HEADER_LENGTH:
                return
            length, _, flags, frame_type, *_ = _FRAME.unpack_from(header)
            if length < HEADER_LENGTH:
                return
            # A PAD frame's body is never written (Aeron writes its header only): its length is all there is.
            body = b"" if frame_type == _PAD else os.pread(fd, length - HEADER_LENGTH, offset + HEADER_LENGTH)
            yield position, frame_type, flags, length - HEADER_LENGTH, body
            position += align(length, FRAME_ALIGNMENT)
    finally:
        if fd >= 0:
            os.close(fd)


def dump(archive_dir: Path, fragment_limit: int | None = None, out: TextIO = sys.stdout) -> int:
    """Describe, then each recording's frames (at most ``fragment_limit`` per recording), as ArchiveTool dumps."""
    if fragment_limit is not None and fragment_limit <= 0:
        raise ArchiveToolError(f"invalid fragment count limit {fragment_limit}")
    with _open_catalog(archive_dir) as catalog:
        for line in _mark_lines(archive_dir):
            out.write(line + "\n")
        out.write(f"Catalog capacity in bytes: {(catalog.max_entries + 1) * catalog.entry_length}\n\n")
        limit_text = "all" if fragment_limit is None else f"up to {fragment_limit}"
        out.write(f"Dumping {limit_text} fragments per recording\n")
        for entry in catalog.entries():
            d = entry.descriptor
            stream_length = NULL_POSITION if d.is_active else d.stop_position - d.start_position
            out.write(f"\n\nRecording {d.recording_id}\n  channel: {d.stripped_channel}\n  streamId: {d.stream_id}\n")
            out.write(f"  stream length: {stream_length}\n{_header_text(entry)}\n{descriptor_text(d)}\n")
            if d.end_position == d.start_position:
                out.write("Recording is empty\n")
                continue
            count = 0
            try:
                for position, frame_type, flags, length, body in _frames(
                    archive_dir, d, d.start_position, d.end_position
                ):
                    if fragment_limit is not None and count >= fragment_limit:
                        break
                    count += 1
                    out.write(f"\nFrame at position [{position}] data at offset [{HEADER_LENGTH}] ")
                    out.write(f"with length = {length}\n")
                    if frame_type == _PAD:
                        out.write("PADDING FRAME\n")
                    elif frame_type == _DATA:
                        if flags & _UNFRAGMENTED != _UNFRAGMENTED:
                            suffix = ("BEGIN_FRAGMENT" if flags & 0x80 else "") + (
                                "END_FRAGMENT" if flags & 0x40 else ""
                            )
                            out.write(f"Fragmented frame. {suffix}\n")
                        _hex_dump(body, out)
                    else:
                        out.write(f"Unexpected frame type {frame_type}\n")
            except OSError as exc:
                out.write(f"(cannot read recording {d.recording_id}: {exc.strerror or exc})\n")
    return 0


# -- verify -------------------------------------------------------------------------------------------------------


def _max_segment(archive_dir: Path, recording_id: int) -> tuple[int, str | None]:
    """The highest segment index on disk (-1 for none), or the first malformed segment file name."""
    prefix = f"{recording_id}-"
    highest = -1
    with os.scandir(archive_dir) as entries:
        for item in entries:
            name = item.name
            if name.startswith(prefix) and name.endswith(SEGMENT_SUFFIX):
                middle = name[len(prefix) : -len(SEGMENT_SUFFIX)]
                if not middle:
                    continue
                if not middle.isdigit():
                    return highest, name
                highest = max(highest, int(middle))
    return highest, None


def _walk_to_zero(path: Path, start: int, d: RecordingDescriptor) -> tuple[int, str | None]:
    """Walk frame lengths from ``start`` to the first zero one; (where it stopped, an error if one was met)."""
    with path.open("rb") as f:
        position = start
        while True:
            f.seek(position)
            header = f.read(HEADER_LENGTH)
            if len(header) != HEADER_LENGTH:
                return position, "failed to read fragment header."
            length, _, _, _, _, session_id, stream_id, _ = _FRAME.unpack_from(header)
            if length == 0:
                return position, None
            if length < 0:
                return position, f"fragment length={length} at offset {position}"
            if session_id != d.session_id:
                return position, f"fragment sessionId={session_id} (expected={d.session_id})"
            if stream_id != d.stream_id:
                return position, f"fragment streamId={stream_id} (expected={d.stream_id})"
            position += align(length, FRAME_ALIGNMENT)


def _verify_entry(archive_dir: Path, entry: CatalogEntry) -> tuple[str | None, int | None]:
    """(the error, or None when OK; a stop position recovered for an active recording)."""
    d = entry.descriptor
    segment_length = d.segment_file_length
    term_length = d.term_buffer_length
    if (
        segment_length <= 0
        or term_length <= 0
        or segment_length & (segment_length - 1)
        or term_length & (term_length - 1)
    ):
        return f"segment length {segment_length} or term length {term_length} is not a power of two", None
    term_base = d.start_position - (d.start_position & (term_length - 1))
    recovered: int | None = None
    if d.stop_position == NULL_POSITION:
        index, malformed = _max_segment(archive_dir, d.recording_id)
        if malformed is not None:
            return f"malformed recording filename:{malformed}", None
        if index < 0:
            return "no recording segment files", None
        base = term_base + index * segment_length
        start = max(d.start_position - base, 0)
        stop_offset, _ = _walk_to_zero(archive_dir / segment_file_name(d.recording_id, index), start, d)
        recovered = base + stop_offset
        stop = recovered
    else:
        stop = d.stop_position
        index = segment_index(d.start_position, stop, term_length, segment_length)
        stop_offset = stop - term_base - index * segment_length
    last = archive_dir / segment_file_name(d.recording_id, index)
    if not last.exists():
        return f"missing last recording file: {last}", recovered
    start = max(d.start_position - (term_base + index * segment_length), 0)
    try:
        end, error = _walk_to_zero(last, start, d)
    except OSError as exc:
        return f"failed to verify file:{last} ({exc.strerror or exc})", recovered
    if error is not None:
        return error, recovered
    if end != stop_offset:
        return f"end segment offset={end} (expected={stop_offset})", recovered
    return None, recovered


def verify(
    archive_dir: Path,
    recording_id: int | None = None,
    out: TextIO = sys.stdout,
    err: TextIO = sys.stderr,
    *,
    fix: bool = True,
) -> int:
    """CatalogTool's verify: a verdict per entry (OK on ``out``, ERR on ``err``), written into the catalog unless
    ``fix`` is off or the archive is running. Returns 0 when every entry is OK, else 1."""
    running = archive_is_running(archive_dir) if fix else False
    if running:
        err.write(f"{archive_dir}: the archive is running; verdicts only, the catalog is not changed\n")
    writable = fix and not running
    failed = 0
    now_ms = int(time.time() * 1000)
    with _open_catalog(archive_dir, writable=writable) as catalog:
        if recording_id is None:
            entries: Iterable[CatalogEntry] = list(catalog.entries())
        else:
            try:
                entries = [catalog.entry(recording_id)]
            except RecordingNotFoundError:
                entries = []
        for entry in entries:
            rid = entry.descriptor.recording_id
            error, recovered = _verify_entry(archive_dir, entry)
            if writable:
                if recovered is not None and error is None:
                    catalog.set_stop(rid, recovered, now_ms)
                catalog.set_valid(rid, error is None)
            if error is None:
                out.write(f"(recordingId={rid}) OK\n")
            else:
                failed += 1
                err.write(f"(recordingId={rid}) ERR: {error}\n")
    return 1 if failed else 0


# -- errors -------------------------------------------------------------------------------------------------------


def errors(archive_dir: Path, out: TextIO = sys.stdout) -> int:
    """The archive's error log: the distinct error log of the driver its mark file names (ErrorStat's text)."""
    _check_dir(archive_dir)
    try:
        mark = read_mark_file(archive_dir)
    except MarkFileError as exc:
        raise ArchiveToolError(str(exc)) from None
    if not mark.aeron_directory:
        raise ArchiveToolError(f"{archive_dir}: the mark file names no driver directory")
    aeron_dir = Path(mark.aeron_directory)
    try:
        cnc = CncFile.map_existing(aeron_dir, timeout_s=0.0)
    except (DriverError, OSError, ValueError) as exc:
        raise ArchiveToolError(f"{aeron_dir}: cannot read the driver's error log: {exc}") from None
    try:
        observations = read_error_log(cnc.error_log_buffer)
    finally:
        cnc.close()
    out.write(f"Archive error log (driver {aeron_dir}):\n")
    for o in observations:
        out.write(
            f"***\n{o.observation_count} observations from {_java_time(o.first_observation_ms)} "
            f"to {_java_time(o.last_observation_ms)} for:\n {o.text}\n"
        )
    out.write(f"\n{len(observations)} distinct errors observed.\n")
    return 0


# -- migrate ------------------------------------------------------------------------------------------------------

_OLD_SLOT = 1024
_OLD_STATE_VALID = 1
_OLD_STATE_DELETED = 2
_OLD_FIELDS = struct.Struct("<i4xqqqqqqiiiiii")  # state, id, start ts, stop ts, start, stop, recorded, 6 int32
_OLD_STRINGS = 96


def _old_entries(data: bytes) -> Iterator[tuple[int, RecordingDescriptor]]:
    """(state, descriptor) of each slot of an old-layout catalog, up to its next recording id."""
    (next_id,) = struct.unpack_from("<q", data, 16)
    for recording_id in range(next_id):
        offset = _OLD_SLOT + recording_id * _OLD_SLOT
        if offset + _OLD_SLOT > len(data):
            raise ArchiveToolError(f"old catalog ends before recording {recording_id}")
        state, rid, start_ts, stop_ts, start, stop, recorded, itid, seg, term, mtu, session, stream = (
            _OLD_FIELDS.unpack_from(data, offset)
        )
        strings: list[str] = []
        at = offset + _OLD_STRINGS
        for _ in range(3):
            (length,) = struct.unpack_from("<H", data, at)
            strings.append(data[at + 2 : at + 2 + length].decode("utf-8", "replace"))
            at += 2 + length
        stripped, original, source = strings
        descriptor = RecordingDescriptor(
            rid,
            start_ts,
            stop_ts,
            start,
            stop,
            recorded,
            itid,
            seg,
            term,
            mtu,
            session,
            stream,
            stripped,
            original,
            source,
        )
        yield state, descriptor


def migrate(archive_dir: Path, out: TextIO = sys.stdout) -> int:
    """Convert an archive directory in our old layout to Aeron's, once: the catalog (the old one is kept as
    ``archive.catalog.old``) and the segment files (renamed from base positions to indexes, made whole)."""
    _check_dir(archive_dir)
    path = archive_dir / CATALOG_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ArchiveToolError(f"{archive_dir}: no {CATALOG_FILE}") from None
    if len(data) < 8 or struct.unpack_from("<i", data, 0)[0] != OLD_LAYOUT_MAGIC:
        raise ArchiveToolError(f"{path} is not in the old layout: nothing to migrate")
    if archive_is_running(archive_dir):
        raise ArchiveInUseError(f"{archive_dir}: an archive is running on it; stop it first")
    entries = list(_old_entries(data))
    backup = archive_dir / (CATALOG_FILE + ".old")
    os.replace(path, backup)
    with Catalog(archive_dir) as catalog:
        for state, d in entries:
            rid = catalog.add(
                start_position=d.start_position,
                start_timestamp=d.start_timestamp,
                initial_term_id=d.initial_term_id,
                segment_file_length=d.segment_file_length,
                term_buffer_length=d.term_buffer_length,
                mtu_length=d.mtu_length,
                session_id=d.session_id,
                stream_id=d.stream_id,
                stripped_channel=d.stripped_channel,
                original_channel=d.original_channel,
                source_identity=d.source_identity,
            )
            if rid != d.recording_id:
                raise ArchiveToolError(f"recording {d.recording_id} would become {rid}: the old catalog is not dense")
            if d.stop_position != NULL_POSITION:
                catalog.set_stop(rid, d.stop_position, d.stop_timestamp)
            else:
                catalog.set_recorded_position(rid, d.recorded_position)
            if state != _OLD_STATE_VALID:
                catalog.set_valid(rid, False)
            _migrate_segments(archive_dir, d)
    out.write(f"migrated {len(entries)} recordings in {archive_dir}; the old catalog is {backup.name}\n")
    return 0


def _migrate_segments(archive_dir: Path, d: RecordingDescriptor) -> None:
    term_base = d.start_position - d.start_position % d.term_buffer_length
    old = segment_files(archive_dir, d.recording_id)  # names hold base positions here
    staged: list[tuple[Path, Path]] = []
    for base, path in old:
        temporary = path.with_name(path.name + ".migrating")
        os.replace(path, temporary)
        index = (base - term_base) // d.segment_file_length if base >= term_base else 0
        staged.append((temporary, archive_dir / segment_file_name(d.recording_id, index)))
    for temporary, final in staged:
        os.replace(temporary, final)
        ensure_segment(final, d.segment_file_length)
    end = d.stop_position if d.stop_position != NULL_POSITION else d.recorded_position
    if staged and (end - term_base) % d.segment_file_length == 0 and end > d.start_position:
        index = (end - term_base) // d.segment_file_length
        ensure_segment(archive_dir / segment_file_name(d.recording_id, index), d.segment_file_length)


# -- command line -------------------------------------------------------------------------------------------------


def _usage() -> str:
    return (
        "usage: python -m driver.archive <archive dir> <verb> [args]   (or: <verb> <archive dir> [args])\n"
        "  describe [recording id]   the mark file and every descriptor (or one descriptor)\n"
        "  dump [fragments]          describe, then each recording's frames (at most that many per recording)\n"
        "  verify [recording id]     check each recording's segments; mark entries valid or not (OK/ERR)\n"
        "  errors                    the archive's error log (its driver's, as Aeron 1.15.1 keeps it)\n"
        "  pid | count-entries | max-entries\n"
        "  migrate                   convert an archive in this project's old layout to Aeron's\n"
    )


def run(argv: Sequence[str], out: TextIO = sys.stdout, err: TextIO = sys.stderr) -> int:
    """``<verb> <dir> [arg]`` or CatalogTool's ``<dir> <verb> [arg]``; exit status 0 ok, 1 a finding, 2 misuse."""
    args = list(argv)
    if len(args) >= 2 and args[0] not in VERBS and args[1] in VERBS:
        args[0], args[1] = args[1], args[0]
    if not 2 <= len(args) <= 3 or args[0] not in VERBS:
        err.write(_usage())
        return 2
    verb, directory, *rest = args
    archive_dir = Path(directory)
    try:
        number = int(rest[0]) if rest else None
    except ValueError:
        err.write(f"{rest[0]!r} is not a number\n{_usage()}")
        return 2
    if rest and verb not in ("describe", "dump", "verify"):
        err.write(_usage())
        return 2
    try:
        if verb == "describe":
            return describe(archive_dir, number, out)
        if verb == "dump":
            return dump(archive_dir, number, out)
        if verb == "verify":
            return verify(archive_dir, number, out, err)
        if verb == "errors":
            return errors(archive_dir, out)
        if verb == "pid":
            return pid(archive_dir, out)
        if verb == "count-entries":
            return count_entries(archive_dir, out)
        if verb == "max-entries":
            return max_entries(archive_dir, out)
        return migrate(archive_dir, out)
    except (ArchiveError, OSError) as exc:
        err.write(f"{exc}\n")
        return 1
