"""Segment files: where a recorded stream's bytes live, and how a torn tail is found.

Theory of operation
-------------------
A recording keeps the stream's frames exactly as they sat in the term buffers.
Its bytes are split into segment files laid out as Aeron 1.15.1 lays them out:
a segment is a power of two from 64 KiB to 1 GiB and holds a whole number of
terms, so a term never straddles two segments, and segment ``i`` of a recording
is the file ``<recording id>-<i>.rec`` holding stream positions from its base::

    base(i) = start_term_base + i * segment_length

where ``start_term_base`` is the start position rounded down to its term; a
frame at stream position ``p`` sits at byte ``p - base`` of segment
``floor((p - start_term_base) / segment_length)``. A recording that starts
mid-term leaves the bytes before its start position as a hole in the first
segment. Every segment file is as long as a segment from the moment it is
created (sparse, so holes cost nothing): Aeron's readers map whole segments and
its tools read a frame header past the last frame, where they expect zeros.
The next segment is created as soon as one fills up, as Aeron's writer does.

Recovery: after a crash the catalog's recorded position may lag what reached
the file, and the last write may be torn. :func:`complete_frames_end` walks
frames from a known-good position and stops at the first one whose header is
not a DATA/PAD frame of this stream at this place, or whose aligned end is past
what the file holds; everything after that is zeroed (:func:`zero_tail`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from driver.concurrent.atomic_buffer import align, is_power_of_two
from driver.errors import DriverConfigurationError
from driver.logbuffer.frame import FRAME_ALIGNMENT, HEADER_LENGTH

__all__ = [
    "SEGMENT_MAX_LENGTH",
    "SEGMENT_MIN_LENGTH",
    "SEGMENT_SUFFIX",
    "check_segment_length",
    "complete_frames_end",
    "ensure_segment",
    "segment_base_position",
    "segment_file_name",
    "segment_files",
    "segment_index",
    "segment_path",
    "segment_spans",
    "zero_tail",
]

SEGMENT_MIN_LENGTH = 64 * 1024
SEGMENT_MAX_LENGTH = 1024 * 1024 * 1024
SEGMENT_SUFFIX = ".rec"

_PAD = 0
_DATA = 1
_LE: Final = "little"


def check_segment_length(segment_length: int, term_length: int) -> None:
    """A segment must be a power of two in [64 KiB, 1 GiB] and hold at least one term."""
    if not is_power_of_two(segment_length) or not SEGMENT_MIN_LENGTH <= segment_length <= SEGMENT_MAX_LENGTH:
        raise DriverConfigurationError(
            "aeron.archive.segment.file.length",
            segment_length,
            f"a power of two from {SEGMENT_MIN_LENGTH} to {SEGMENT_MAX_LENGTH}",
        )
    if segment_length < term_length:
        raise DriverConfigurationError(
            "aeron.archive.segment.file.length", segment_length, f"at least one term ({term_length} bytes)"
        )


def segment_base_position(start_position: int, position: int, term_length: int, segment_length: int) -> int:
    """Stream position at which the segment holding ``position`` begins."""
    start_term_base = start_position - (start_position & (term_length - 1))
    from_base = max(position - start_term_base, 0)
    return start_term_base + from_base - (from_base & (segment_length - 1))


def segment_index(start_position: int, position: int, term_length: int, segment_length: int) -> int:
    """Index of the segment holding stream ``position`` (the number in its file name)."""
    start_term_base = start_position - (start_position & (term_length - 1))
    return max(position - start_term_base, 0) // segment_length


def segment_file_name(recording_id: int, segment_index: int) -> str:
    """``<recording id>-<segment index>.rec``, as Aeron names them."""
    return f"{recording_id}-{segment_index}{SEGMENT_SUFFIX}"


def segment_path(
    archive_dir: Path, recording_id: int, start_position: int, position: int, term_length: int, segment_length: int
) -> Path:
    """The file of the segment holding stream ``position``."""
    index = segment_index(start_position, position, term_length, segment_length)
    return archive_dir / segment_file_name(recording_id, index)


def ensure_segment(path: Path, segment_length: int) -> None:
    """Create the segment file if absent, a whole (sparse) segment long."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size < segment_length:
            os.ftruncate(fd, segment_length)
    finally:
        os.close(fd)


def zero_tail(path: Path, offset: int, segment_length: int) -> None:
    """Drop what the segment holds from ``offset`` on, keeping it a whole (sparse) segment long."""
    os.truncate(path, offset)
    os.truncate(path, segment_length)


def segment_spans(
    start_position: int, from_position: int, to_position: int, term_length: int, segment_length: int
) -> Iterator[tuple[int, int, int]]:
    """``(base_position, from, to)`` for each segment touched by ``[from_position, to_position)``."""
    position = from_position
    while position < to_position:
        base = segment_base_position(start_position, position, term_length, segment_length)
        end = min(base + segment_length, to_position)
        yield base, position, end
        position = end


def segment_files(archive_dir: Path, recording_id: int) -> list[tuple[int, Path]]:
    """The recording's segment files present on disk: ``(segment index, path)`` by index."""
    prefix = f"{recording_id}-"
    found: list[tuple[int, Path]] = []
    try:
        entries = os.scandir(archive_dir)
    except FileNotFoundError:
        return found
    with entries:
        for entry in entries:
            name = entry.name
            if name.startswith(prefix) and name.endswith(SEGMENT_SUFFIX):
                base = name[len(prefix) : -len(SEGMENT_SUFFIX)]
                if base.isdigit():
                    found.append((int(base), Path(entry.path)))
    found.sort()
    return found


def _pages_written(view: memoryview, start: int, end: int, page_size: int) -> bool:
    """Each page that ``[start, end)`` reaches after its first holds a non-zero byte of it."""
    page = start - start % page_size + page_size
    while page < end:
        if not any(view[page : min(page + page_size, end)]):
            return False
        page += page_size
    return True


def complete_frames_end(
    segment: bytes | bytearray | memoryview,
    offset: int,
    limit: int,
    *,
    term_length: int,
    stream_id: int,
    session_id: int | None = None,
    term_id_at_offset: int,
    page_size: int = 0,
) -> int:
    """Offset just past the last whole, plausible frame from ``offset`` up to ``limit`` (both within ``segment``).

    ``term_id_at_offset`` is the term id of the term containing ``offset``;
    frames must carry their own term offset and term id, this stream (and this
    session, when given: an extended recording changes session), a DATA or PAD
    type and version 0, and fit within their term.

    ``page_size`` (for frames written but never confirmed, as after a crash): a
    DATA frame whose bytes (not its alignment) reach into further pages must
    have a non-zero byte in each of them (a PAD frame's body is never written,
    by us or by Aeron). A last unconfirmed message whose bytes in a page are all
    zeros is dropped with the torn ones: it was never reported recorded.
    Segments are whole sparse files and the kernel writes back by page, so a
    torn write shows as a frame whose header landed and whose later pages are
    still zeros -- the case Aeron's recovery guards against by dropping a last
    frame that straddles a page.
    """
    view = memoryview(segment)
    mask = term_length - 1
    term_id = term_id_at_offset
    while offset + HEADER_LENGTH <= limit:
        frame_length = int.from_bytes(view[offset : offset + 4], _LE, signed=True)
        if frame_length < HEADER_LENGTH:
            break
        aligned = align(frame_length, FRAME_ALIGNMENT)
        term_offset = offset & mask
        if offset + aligned > limit or term_offset + aligned > term_length:
            break
        if view[offset + 4] != 0:
            break
        frame_type = int.from_bytes(view[offset + 6 : offset + 8], _LE)
        if frame_type not in (_DATA, _PAD):
            break
        if (
            int.from_bytes(view[offset + 8 : offset + 12], _LE, signed=True) != term_offset
            or int.from_bytes(view[offset + 16 : offset + 20], _LE, signed=True) != stream_id
            or (
                session_id is not None
                and session_id != int.from_bytes(view[offset + 12 : offset + 16], _LE, signed=True)
            )
            or int.from_bytes(view[offset + 20 : offset + 24], _LE, signed=True) != term_id
        ):
            break
        if page_size and frame_type == _DATA and not _pages_written(view, offset, offset + frame_length, page_size):
            break
        offset += aligned
        if (offset & mask) == 0:
            term_id = (term_id + 1) & 0xFFFFFFFF
            if term_id >= 0x80000000:
                term_id -= 0x100000000
    return offset
