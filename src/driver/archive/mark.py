"""The mark file: one live archive per directory, and who it is, in Aeron 1.15.1's ``archive-mark.dat`` layout.

Theory of operation
-------------------
The file is the ``MarkFileHeader`` message of Aeron's archive mark schema (id
100, version 0), written at offset 0 without a message header, padded to a
multiple of 1 KiB::

    0  int32 version (0)        8  int64 activity timestamp (ms)   16 int64 start timestamp (ms)
    24 int64 pid                32 int32 control stream id          36 int32 local control stream id
    40 int32 events stream id   128 four strings, each uint32 length + ASCII:
                                    control channel, local control channel, events channel, aeron directory

so Aeron's tools read ours and we read theirs. The archive refreshes the
activity timestamp from its duty cycle (as 1.15.1 does, once per millisecond
that passes); a reader takes a timestamp older than a few seconds as an archive
that is gone.

The guard is not the file's contents but an exclusive ``flock`` on it (the
kernel drops it when the holder dies, however it dies); 1.15.1 takes no lock, so
it and we only keep each other out through its own start-up checks. The file
stays behind when the archive closes, as Aeron's does, so the tools can say when
the archive was last active. 1.15.1 keeps the archive's errors in the driver's
error log (``cnc.dat`` of the directory the mark file names), not here.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import secrets
import time
from pathlib import Path

import attrs

from driver.archive.codecs import LEGACY_MARK
from driver.archive.errors import ArchiveError, ArchiveInUseError, MarkFileError
from driver.concurrent.atomic_buffer import AtomicBuffer, align
from driver.sbe import SbeDecodeError

__all__ = [
    "ARCHIVE_ID_FILE",
    "MARK_FILE",
    "MARK_FILE_VERSION",
    "MarkFile",
    "MarkFileHeader",
    "archive_id_of",
    "read_mark_file",
]

_HEADER = LEGACY_MARK["MarkFileHeader"]

MARK_FILE = "archive-mark.dat"
ARCHIVE_ID_FILE = "archive-id"
"""The directory's archive id, in decimal. Today's Aeron keeps the id in its mark file; the 1.15.1 mark file has
no such field, so it lives beside it (Aeron's tools ignore other files in the directory)."""
MARK_FILE_VERSION = LEGACY_MARK.version
"""Schema 100's version in 1.15.1 (0); its own tools refuse any other."""
ALIGNMENT = 1024
BLOCK_LENGTH = _HEADER.block_length
_MAX_READ = 64 * 1024
_ACTIVITY = next(f.offset for f in _HEADER.message.fields if f.name == "activityTimestamp")


@attrs.frozen
class MarkFileHeader:
    """What an archive's mark file says about it."""

    version: int
    activity_timestamp: int
    start_timestamp: int
    pid: int
    control_stream_id: int
    local_control_stream_id: int
    events_stream_id: int
    control_channel: str
    local_control_channel: str
    events_channel: str
    aeron_directory: str

    def to_dict(self) -> dict[str, object]:
        return attrs.asdict(self)


def decode_mark_file_header(data: bytes | bytearray | memoryview, where: str = "mark file") -> MarkFileHeader:
    """Decode the header from the file's bytes; :class:`MarkFileError` if they cannot hold one."""
    if len(data) < BLOCK_LENGTH:
        raise MarkFileError(f"{where}: {len(data)} bytes, too short for a mark file ({BLOCK_LENGTH} at least)")
    try:
        dec = _HEADER.decoder().wrap(data, 0, BLOCK_LENGTH, MARK_FILE_VERSION)
        version, activity, start, pid, control, local, events = dec.read_fields()
        return MarkFileHeader(
            version,
            activity,
            start,
            pid,
            control,
            local,
            events,
            dec.control_channel(),
            dec.local_control_channel(),
            dec.events_channel(),
            dec.aeron_directory(),
        )
    except SbeDecodeError as exc:
        raise MarkFileError(f"{where}: not a whole mark file header ({exc})") from None


def read_mark_file(archive_dir: str | os.PathLike[str]) -> MarkFileHeader:
    """The mark file of ``archive_dir`` (ours or Aeron's); :class:`MarkFileError` when absent or unreadable."""
    path = Path(archive_dir) / MARK_FILE
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_READ)  # a mark file is about 1 KiB: a huge one is read no further
    except FileNotFoundError:
        raise MarkFileError(f"no mark file at {path}") from None
    except OSError as exc:
        raise MarkFileError(f"{path}: {exc.strerror or exc}") from None
    return decode_mark_file_header(data, str(path))


def _holder(path: Path) -> str:
    try:
        header = read_mark_file(path.parent)
    except MarkFileError:
        return "unknown"
    started = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(header.start_timestamp / 1000))
    return f"pid {header.pid}, started {started}"


class MarkFile:
    """Hold ``archive_dir`` for this process until :meth:`close`, saying so in Aeron's mark file layout."""

    def __init__(
        self,
        archive_dir: str | os.PathLike[str],
        control_channel: str = "",
        *,
        control_stream_id: int = 10,
        local_control_channel: str = "aeron:ipc",
        local_control_stream_id: int = 11,
        events_channel: str = "",
        events_stream_id: int = 30,
        aeron_directory: str = "",
    ) -> None:
        self.path = Path(archive_dir) / MARK_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._map: mmap.mmap | None = None
        self._buffer: AtomicBuffer | None = None
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._fd)
            self._fd = -1
            raise ArchiveInUseError(f"{self.path.parent} is in use by another archive ({_holder(self.path)})") from None
        try:
            strings = [
                s.encode("ascii", "replace")
                for s in (control_channel, local_control_channel, events_channel, aeron_directory)
            ]
            length = align(BLOCK_LENGTH + sum(4 + len(s) for s in strings), ALIGNMENT)
            image = bytearray(length)
            now_ms = int(time.time() * 1000)
            enc = _HEADER.encoder().wrap(image, 0)
            enc.write_fields(
                MARK_FILE_VERSION,
                now_ms,
                now_ms,
                os.getpid(),
                control_stream_id,
                local_control_stream_id,
                events_stream_id,
            )
            enc.put_control_channel(strings[0])
            enc.put_local_control_channel(strings[1])
            enc.put_events_channel(strings[2])
            enc.put_aeron_directory(strings[3])
            os.ftruncate(self._fd, 0)  # a longer file from an earlier archive keeps no stale tail
            os.pwrite(self._fd, bytes(image), 0)
            self._map = mmap.mmap(self._fd, length)
            self._buffer = AtomicBuffer(self._map)
        except BaseException:
            self.close()
            raise

    def update_activity_timestamp(self, now_ms: int) -> None:
        """Say the archive is alive (release-ordered, as readers in other processes poll it)."""
        if self._buffer is not None:
            self._buffer.put_long_ordered(_ACTIVITY, now_ms)

    def header(self) -> MarkFileHeader:
        return read_mark_file(self.path.parent)

    def close(self) -> None:
        """Release the directory; the file stays, saying when the archive was last active."""
        if self._buffer is not None:
            self._buffer.release()
            self._buffer = None
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd >= 0:
            os.close(self._fd)  # closing the descriptor releases the lock
            self._fd = -1


def archive_id_of(archive_dir: str | os.PathLike[str], configured: int = -1) -> int:
    """The archive's id: ``configured`` when set (not -1), else the one the directory keeps, made once (a random
    positive 63-bit number, written whole by rename) so it stays the same across restarts."""
    if configured != -1:
        return configured
    path = Path(archive_dir) / ARCHIVE_ID_FILE
    try:
        text = path.read_text(encoding="ascii").strip()
    except FileNotFoundError:
        archive_id = secrets.randbits(63)
        temporary = path.with_name(f"{ARCHIVE_ID_FILE}.{os.getpid()}.tmp")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, f"{archive_id}\n".encode("ascii"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
        return archive_id
    except (OSError, UnicodeDecodeError) as exc:
        raise ArchiveError(f"{path}: unreadable archive id ({exc})") from None
    if not text.isdigit() or int(text) >= 1 << 63:
        raise ArchiveError(f"{path}: {text[:40]!r} is not an archive id")
    return int(text)
