"""Recording sessions: an image's frames copied block by block into segment files.

A session owns one image and one open segment file. Each duty cycle takes the
committed frames from the image's position to the end of what is available
(at most one block, never past a term) with :meth:`Image.block_poll` and writes
them at their place in the segment; the image's position -- and so the
publisher's flow control -- only moves once the bytes are written, which is
why a recording keeps up with its stream without losing a frame. The catalog's
recorded position follows each write so readers in other processes can follow.
"""

from __future__ import annotations

import enum
import errno
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from driver.archive.errors import ArchiveStorageError
from driver.archive.segments import segment_base_position, segment_path, zero_tail

if TYPE_CHECKING:
    from driver.archive.catalog import Catalog
    from driver.client.counter import Counter
    from driver.client.subscription import Image

__all__ = ["RecordingSession", "SegmentWriter", "StopReason", "SyncLevel"]

BLOCK_LENGTH = 1024 * 1024
_STORAGE_ERRNOS = frozenset((errno.ENOSPC, errno.EFBIG, errno.EDQUOT))


class SyncLevel(enum.IntEnum):
    """``aeron.archive.file.sync.level``: what is forced to disk after each write."""

    NONE = 0
    DATA = 1
    DATA_AND_METADATA = 2


class StopReason(enum.Enum):
    END_OF_STREAM = "end of stream"
    IMAGE_CLOSED = "image closed"
    STOPPED = "stopped by request"
    STORAGE_ERROR = "storage error"
    ARCHIVE_CLOSED = "archive closed"


class SegmentWriter:
    """Writes blocks at their stream position into the right segment file, opening the next as needed."""

    def __init__(
        self,
        archive_dir: Path,
        recording_id: int,
        start_position: int,
        term_length: int,
        segment_length: int,
        sync_level: SyncLevel = SyncLevel.NONE,
    ) -> None:
        self._dir = archive_dir
        self._recording_id = recording_id
        self._start = start_position
        self._term_length = term_length
        self._segment_length = segment_length
        self._sync = sync_level
        self._fd = -1
        self._base = -1

    def open_at(self, position: int) -> None:
        """Create (or open) the segment for ``position`` before any write, as Aeron's writer does: a recording
        that never gets a byte still has its first segment; raises ArchiveStorageError when it cannot."""
        base = segment_base_position(self._start, position, self._term_length, self._segment_length)
        try:
            if base != self._base:
                self._open(base)
        except OSError as exc:
            raise ArchiveStorageError(
                exc.errno, f"recording {self._recording_id}: cannot create its segment: {exc.strerror or exc}"
            ) from exc

    def write(self, block: memoryview, position: int) -> None:
        """Write ``block`` (within one term) at stream ``position``; raises ArchiveStorageError when it cannot."""
        base = segment_base_position(self._start, position, self._term_length, self._segment_length)
        try:
            if base != self._base:
                self._open(base)
            at = position - base
            while block:
                written = os.pwrite(self._fd, block, at)
                block = block[written:]
                at += written
            if self._sync == SyncLevel.DATA:
                os.fdatasync(self._fd)
            elif self._sync == SyncLevel.DATA_AND_METADATA:
                os.fsync(self._fd)
            if at == self._segment_length:  # full: the next segment exists from now on, as Aeron's would
                self._open(base + self._segment_length)
        except OSError as exc:  # full, over a size limit, or an I/O error: this recording cannot go on
            kind = "storage full" if exc.errno in _STORAGE_ERRNOS else "write failed"
            raise ArchiveStorageError(
                exc.errno,
                f"recording {self._recording_id}: {kind} at position {position}: {exc.strerror or exc}",
            ) from exc

    def cut(self, position: int) -> None:
        """Drop whatever a failed write left past ``position`` in the current segment."""
        if self._fd >= 0 and position >= self._base:
            path = segment_path(
                self._dir, self._recording_id, self._start, self._base, self._term_length, self._segment_length
            )
            zero_tail(path, position - self._base, self._segment_length)

    def _open(self, base: int) -> None:
        self.close()
        path = segment_path(self._dir, self._recording_id, self._start, base, self._term_length, self._segment_length)
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        self._base = base
        if os.fstat(self._fd).st_size < self._segment_length:
            try:
                os.ftruncate(self._fd, self._segment_length)  # whole and sparse, as Aeron's readers expect
            except OSError as exc:
                # A file-size limit below a segment: record into a short file until a write meets the limit
                # (sparse files take no space, so a full disk is met by the writes, not here).
                if exc.errno != errno.EFBIG:
                    raise
        if self._sync != SyncLevel.NONE:
            dir_fd = os.open(self._dir, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._base = -1


class RecordingSession:
    """Records one image into one recording until the stream ends, the image goes, or it is stopped."""

    def __init__(
        self,
        recording_id: int,
        image: Image,
        catalog: Catalog,
        writer: SegmentWriter,
        *,
        block_length: int = BLOCK_LENGTH,
        position_counter: Counter | None = None,
    ) -> None:
        self.recording_id = recording_id
        self._counter = position_counter
        self.image = image
        self._catalog = catalog
        self._writer = writer
        self._block_length = block_length
        self.start_position = image.position
        self.position = self.start_position
        self.stop_reason: StopReason | None = None
        self.error: BaseException | None = None
        self._opened = False

    @property
    def is_done(self) -> bool:
        return self.stop_reason is not None

    def do_work(self) -> int:
        if self.stop_reason is not None:
            return 0
        try:
            if not self._opened:
                self._writer.open_at(self.position)
                self._opened = True
            length = self.image.block_poll(self._write, self._block_length)
        except Exception as exc:  # one failing recording stops; the others go on
            self.error = exc
            try:
                self._writer.cut(self.position)
            except OSError:
                pass
            self._finish(StopReason.STORAGE_ERROR)
            return 1
        if length:
            return length
        if self.image.is_closed or self.image.is_end_of_stream:
            self._finish(StopReason.END_OF_STREAM if self.image.is_end_of_stream else StopReason.IMAGE_CLOSED)
            return 1
        return 0

    def _write(self, block: memoryview, position: int) -> None:
        self._writer.write(block, position)
        self.position = position + len(block)
        self._catalog.set_recorded_position(self.recording_id, self.position)
        if self._counter is not None:
            self._counter.set_ordered(self.position)

    def stop(self, reason: StopReason = StopReason.STOPPED) -> None:
        """Take what is already available, then stop."""
        if self.stop_reason is None:
            for _ in range(16):  # bounded: a busy publisher would otherwise keep us here
                if not self.do_work() or self.stop_reason is not None:
                    break
            self._finish(reason)

    def _finish(self, reason: StopReason) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
            self._writer.close()
            if self._counter is not None:
                self._counter.close()
            self._catalog.stop(self.recording_id, self.position, int(time.time() * 1000))
