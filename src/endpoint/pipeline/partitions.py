"""Planning reads of recordings into Spark partitions, and reading one partition's segment bytes.

A partition is one segment span of one recording (``segment_spans``): the rows
are the messages whose position is in ``[low, high)``. Reading starts at a
place known to be a frame start (the recording's start, a term's start, or a
streaming offset, which is always a message boundary) that may precede
``low``, and ends at a term end or the recording's end, so a message beginning
inside the span is always read whole: the appenders never let a message cross
a term, and a segment holds whole terms.

A segment is read in chunks (``os.pread``), each decoded with numpy
(:mod:`endpoint.pipeline.frames`); the next chunk begins at the last message
boundary of the one before, so a message is never split between chunks.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from pyspark.sql.datasource import InputPartition

from driver.archive.catalog import RecordingDescriptor
from driver.archive.segments import segment_base_position, segment_file_name, segment_index, segment_spans
from endpoint.pipeline.frames import (
    FRAME_ALIGNMENT,
    HEADER_LENGTH,
    Frames,
    Messages,
    find_frames,
    find_messages,
    last_message_boundary,
)

__all__ = [
    "CHUNK_LENGTH",
    "ArchiveReadError",
    "SegmentSpan",
    "message_boundary_at_or_before",
    "plan_recording",
    "read_span",
]

CHUNK_LENGTH: Final = 8 * 1024 * 1024
"""Bytes read (and decoded) at once: large enough for numpy to pay off, small enough for a worker's memory."""


class ArchiveReadError(OSError):
    """A segment file the catalog promises is missing or unreadable."""


@dataclass(frozen=True)
class SegmentSpan(InputPartition):
    """One Spark partition: the messages of one recording starting in ``[low, high)`` within one segment."""

    archive_dir: str
    recording_id: int
    channel: str
    term_length: int
    base_position: int
    """The segment's base position."""
    read_from: int
    """A frame start at or before ``low`` (in this segment)."""
    read_to: int
    """A term end or the recording's end at or after the end of the last message starting below ``high``."""
    low: int
    high: int
    segment_index: int = 0
    """The segment's index: its file is ``<recording id>-<index>.rec``."""


def _term_base(position: int, term_length: int) -> int:
    return position - (position & (term_length - 1))


def plan_recording(
    archive_dir: str, descriptor: RecordingDescriptor, low: int, high: int, *, boundaries: bool = False
) -> list[SegmentSpan]:
    """The partitions for the messages of ``descriptor`` whose position is in ``[low, high)``.

    ``boundaries``: both ends are known message boundaries (streaming offsets),
    so reading begins right at ``low`` and stops at ``high`` instead of at the
    edges of their terms.
    """
    start = descriptor.start_position
    end = min(descriptor.end_position, high) if boundaries else descriptor.end_position
    term_length = descriptor.term_buffer_length
    low = max(low, start)
    high = min(high, end)
    spans: list[SegmentSpan] = []
    if low >= high:
        return spans
    for base, span_from, span_to in segment_spans(start, low, high, term_length, descriptor.segment_file_length):
        at_offset = boundaries and span_from == low
        read_from = low if at_offset else max(start, _term_base(span_from, term_length))
        last_term_end = _term_base(span_to - 1, term_length) + term_length
        spans.append(
            SegmentSpan(
                archive_dir=archive_dir,
                recording_id=descriptor.recording_id,
                channel=descriptor.original_channel,
                term_length=term_length,
                base_position=base,
                read_from=read_from,
                read_to=min(end, last_term_end),
                low=span_from,
                high=span_to,
                segment_index=segment_index(start, base, term_length, descriptor.segment_file_length),
            )
        )
    return spans


def _open_segment(archive_dir: str, recording_id: int, index: int) -> int:
    path = Path(archive_dir) / segment_file_name(recording_id, index)
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ArchiveReadError(
            f"recording {recording_id}: segment file {path} is missing (purged or detached?)"
        ) from None
    except OSError as exc:
        raise ArchiveReadError(f"recording {recording_id}: cannot open segment file {path}: {exc}") from exc


def _runs_past(data: bytes, offset: int) -> bool:
    """Whether the frame at ``offset`` needs bytes past the end of ``data`` (a larger chunk would hold it)."""
    if len(data) - offset < HEADER_LENGTH:
        return True
    frame_length = int.from_bytes(data[offset : offset + 4], "little", signed=True)
    aligned = (frame_length + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT
    return frame_length >= HEADER_LENGTH and offset + aligned > len(data)


def _chunks(
    fd: int, base_position: int, read_from: int, read_to: int, term_length: int, chunk_length: int
) -> Iterator[tuple[Frames, int]]:
    """Decoded chunks of ``[read_from, read_to)`` with each one's last message boundary (a stream position)."""
    start = read_from
    size = chunk_length
    while start < read_to:
        want = min(size, read_to - start)
        data = os.pread(fd, want, start - base_position)
        frames = find_frames(data, start, term_length)
        boundary = last_message_boundary(frames)
        if len(data) < want or start + want >= read_to:
            yield frames, start + boundary
            return
        if boundary:
            yield frames, start + boundary
            start += boundary
            size = chunk_length
            continue
        if frames.end < len(data) and not _runs_past(data, frames.end):
            return  # the frames break off here (a torn or foreign tail): nothing further is readable
        size *= 2  # one message (or frame) larger than the chunk


def read_span(span: SegmentSpan, *, chunk_length: int = CHUNK_LENGTH) -> Iterator[Messages]:
    """The whole messages of ``span`` (positions in ``[low, high)``), chunk by chunk."""
    fd = _open_segment(span.archive_dir, span.recording_id, span.segment_index)
    try:
        for frames, _ in _chunks(fd, span.base_position, span.read_from, span.read_to, span.term_length, chunk_length):
            messages = find_messages(frames).between(span.low, span.high)
            if len(messages):
                yield messages
    finally:
        os.close(fd)


def message_boundary_at_or_before(
    archive_dir: str, descriptor: RecordingDescriptor, known: int, position: int, *, chunk_length: int = CHUNK_LENGTH
) -> int:
    """The last message boundary in ``[known, position]``, ``known`` being one already.

    A term's start is always a boundary (messages never cross terms), so at
    most the bytes from the start of ``position``'s term are scanned.
    """
    term_length = descriptor.term_buffer_length
    if position <= known:
        return known
    if position & (term_length - 1) == 0:
        return position
    scan_from = max(known, _term_base(position, term_length), descriptor.start_position)
    if scan_from >= position:
        return scan_from
    base = segment_base_position(descriptor.start_position, scan_from, term_length, descriptor.segment_file_length)
    index = segment_index(descriptor.start_position, base, term_length, descriptor.segment_file_length)
    fd = _open_segment(archive_dir, descriptor.recording_id, index)
    found = scan_from
    try:
        for _, boundary in _chunks(fd, base, scan_from, position, term_length, chunk_length):
            found = max(found, boundary)
    finally:
        os.close(fd)
    return found
