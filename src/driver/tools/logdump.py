"""``log``: dump a ``.logbuffer`` file (LogInspector) — metadata, term tails, frames, optional payload hexdump.

Theory of operation: the file is mapped read-only and decoded with ``struct``,
so dumping a log never writes to it (a live publication or image is safe to
inspect). Each term is walked frame by frame from offset 0 until a zero length
(end of data), using the aligned frame length to step; a negative length is a
frame being written (claimed, not yet committed) and is shown as such. Given a
directory instead of a file, the tool lists the log files a driver keeps under
it (``publications/`` and ``images/``).
"""

from __future__ import annotations

import json
import mmap
import os
import struct
from collections.abc import Iterator
from pathlib import Path

import attrs

from driver.logbuffer.descriptor import (
    LOG_ACTIVE_TERM_COUNT_OFFSET,
    LOG_CORRELATION_ID_OFFSET,
    LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET,
    LOG_DEFAULT_FRAME_HEADER_OFFSET,
    LOG_END_OF_STREAM_POSITION_OFFSET,
    LOG_INITIAL_TERM_ID_OFFSET,
    LOG_IS_CONNECTED_OFFSET,
    LOG_META_DATA_LENGTH,
    LOG_MTU_LENGTH_OFFSET,
    LOG_PAGE_SIZE_OFFSET,
    LOG_TERM_LENGTH_OFFSET,
    PARTITION_COUNT,
    TERM_MAX_LENGTH,
    TERM_MIN_LENGTH,
    TERM_TAIL_COUNTERS_OFFSET,
    compute_position,
    position_bits_to_shift,
)
from driver.logbuffer.frame import (
    BEGIN_FRAG_FLAG,
    END_FRAG_FLAG,
    EOS_FLAG,
    FRAME_ALIGNMENT,
    HDR_TYPE_DATA,
    HDR_TYPE_EXT,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_RTTM,
    HDR_TYPE_SETUP,
    HDR_TYPE_SM,
    HEADER_LENGTH,
)
from driver.tools.common import ToolError

__all__ = [
    "FrameInfo",
    "LogFile",
    "LogMetadata",
    "TermTail",
    "find_log_files",
    "format_log",
    "format_log_listing",
    "hexdump",
    "log_json",
]

_HEADER = struct.Struct("<iBBHiiiiq")
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")
_TYPE_NAMES = {
    HDR_TYPE_PAD: "PAD",
    HDR_TYPE_DATA: "DATA",
    HDR_TYPE_NAK: "NAK",
    HDR_TYPE_SM: "SM",
    4: "ERR",
    HDR_TYPE_SETUP: "SETUP",
    HDR_TYPE_RTTM: "RTTM",
    HDR_TYPE_EXT: "EXT",
}
_LONG_MAX = (1 << 63) - 1
_SCAN_CHUNK = 1 << 20


def _flags_text(flags: int) -> str:
    text = "".join(ch for bit, ch in ((BEGIN_FRAG_FLAG, "B"), (END_FRAG_FLAG, "E"), (EOS_FLAG, "S")) if flags & bit)
    return f"0x{flags:02x}" + (f"({text})" if text else "")


@attrs.frozen
class FrameInfo:
    term_offset: int
    frame_length: int  # negative: claimed, not yet committed
    version: int
    flags: int
    type: int
    header_term_offset: int
    session_id: int
    stream_id: int
    term_id: int
    reserved_value: int

    @property
    def type_name(self) -> str:
        return _TYPE_NAMES.get(self.type, f"0x{self.type:04x}")

    @property
    def payload_length(self) -> int:
        return max(0, abs(self.frame_length) - HEADER_LENGTH)

    @property
    def aligned_length(self) -> int:
        return (abs(self.frame_length) + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT

    def to_json(self) -> dict[str, object]:
        return {
            "term_offset": self.term_offset,
            "frame_length": self.frame_length,
            "committed": self.frame_length > 0,
            "version": self.version,
            "flags": self.flags,
            "type": self.type_name,
            "header_term_offset": self.header_term_offset,
            "session_id": self.session_id,
            "stream_id": self.stream_id,
            "term_id": self.term_id,
            "reserved_value": self.reserved_value,
            "payload_length": self.payload_length,
        }


@attrs.frozen
class TermTail:
    partition: int
    raw_tail: int
    term_id: int
    term_offset: int
    position: int


@attrs.frozen
class LogMetadata:
    term_length: int
    page_size: int
    mtu_length: int
    initial_term_id: int
    active_term_count: int
    correlation_id: int
    end_of_stream_position: int
    is_connected: bool
    default_header: bytes
    tails: list[TermTail]

    @property
    def active_partition(self) -> int:
        return self.active_term_count % PARTITION_COUNT


class LogFile:
    """A log buffer file mapped read-only."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except FileNotFoundError:
            raise ToolError(f"{self.path}: no such file") from None
        except IsADirectoryError:
            raise ToolError(f"{self.path}: is a directory") from None
        except PermissionError:
            raise ToolError(f"{self.path}: permission denied") from None
        try:
            size = os.fstat(fd).st_size
            if size < LOG_META_DATA_LENGTH:
                raise ToolError(
                    f"{self.path}: {size} bytes is too short for a log buffer (its metadata is {LOG_META_DATA_LENGTH})"
                )
            self._mmap = mmap.mmap(fd, size, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)
        self.file_length = size
        self._meta_base = size - LOG_META_DATA_LENGTH
        term_length = self._int(LOG_TERM_LENGTH_OFFSET)
        if not (TERM_MIN_LENGTH <= term_length <= TERM_MAX_LENGTH and term_length & (term_length - 1) == 0):
            self.close()
            raise ToolError(f"{self.path}: not a log buffer (term length {term_length} in its metadata is invalid)")
        if PARTITION_COUNT * term_length + LOG_META_DATA_LENGTH > size:
            self.close()
            raise ToolError(
                f"{self.path}: truncated ({size} bytes; 3 terms of {term_length} need "
                f"{PARTITION_COUNT * term_length + LOG_META_DATA_LENGTH})"
            )
        self.term_length = term_length

    def _int(self, offset: int) -> int:
        return int(_INT32.unpack_from(self._mmap, self._meta_base + offset)[0])

    def _long(self, offset: int) -> int:
        return int(_INT64.unpack_from(self._mmap, self._meta_base + offset)[0])

    def metadata(self) -> LogMetadata:
        term_length = self.term_length
        initial_term_id = self._int(LOG_INITIAL_TERM_ID_OFFSET)
        bits = position_bits_to_shift(term_length)
        tails = []
        for partition in range(PARTITION_COUNT):
            raw = self._long(TERM_TAIL_COUNTERS_OFFSET + 8 * partition)
            term_id = raw >> 32
            offset = min(raw & 0xFFFF_FFFF, term_length)
            position = compute_position(term_id, offset, bits, initial_term_id)
            tails.append(TermTail(partition, raw, term_id, offset, position))
        header_length = max(0, min(self._int(LOG_DEFAULT_FRAME_HEADER_LENGTH_OFFSET), 128))
        start = self._meta_base + LOG_DEFAULT_FRAME_HEADER_OFFSET
        return LogMetadata(
            term_length=term_length,
            page_size=self._int(LOG_PAGE_SIZE_OFFSET),
            mtu_length=self._int(LOG_MTU_LENGTH_OFFSET),
            initial_term_id=initial_term_id,
            active_term_count=self._int(LOG_ACTIVE_TERM_COUNT_OFFSET),
            correlation_id=self._long(LOG_CORRELATION_ID_OFFSET),
            end_of_stream_position=self._long(LOG_END_OF_STREAM_POSITION_OFFSET),
            is_connected=self._int(LOG_IS_CONNECTED_OFFSET) == 1,
            default_header=bytes(self._mmap[start : start + header_length]),
            tails=tails,
        )

    def _next_nonzero(self, start: int, end: int) -> int | None:
        """Absolute index of the first non-zero byte in ``[start, end)``, scanning in C-speed chunks."""
        mapping = self._mmap
        position = start
        while position < end:
            chunk = mapping[position : min(end, position + _SCAN_CHUNK)]
            stripped = chunk.lstrip(b"\x00")
            if stripped:
                return position + len(chunk) - len(stripped)
            position += len(chunk)
        return None

    def frames(self, partition: int, limit: int | None = None) -> Iterator[FrameInfo | str]:
        """Frames of one term in order; a str describes a zeroed stretch or why the walk stopped (never raises).

        Zeroed stretches are normal: the driver cleans what every subscriber has
        read, and an image has holes where data is still to be received.
        """
        base = partition * self.term_length
        term_length = self.term_length
        offset = 0
        count = 0
        mapping = self._mmap
        while offset < term_length:
            if limit is not None and count >= limit:
                yield f"... stopped after {limit} frames (--frames)"
                return
            if offset + HEADER_LENGTH > term_length:
                yield f"offset {offset}: {term_length - offset} bytes left, too few for a frame header"
                return
            fields = _HEADER.unpack_from(mapping, base + offset)
            if fields[0] == 0:
                found = self._next_nonzero(base + offset, base + term_length)
                if found is None:
                    if offset:
                        yield f"offset {offset}: zeros to the end of the term"
                    return
                next_frame = (found - base) & -FRAME_ALIGNMENT
                if next_frame <= offset:
                    yield f"offset {offset}: header without a length yet (a frame being written)"
                    offset += FRAME_ALIGNMENT
                else:
                    yield f"offset {offset}: {next_frame - offset:,} zero bytes (read and cleaned, or not yet written)"
                    offset = next_frame
                continue
            frame = FrameInfo(offset, *fields)
            yield frame
            count += 1
            step = frame.aligned_length
            if step < HEADER_LENGTH or offset + step > term_length:
                yield f"offset {offset}: frame length {frame.frame_length} runs past the term end; stopping"
                return
            offset += step

    def payload(self, partition: int, frame: FrameInfo, max_bytes: int) -> bytes:
        start = partition * self.term_length + frame.term_offset + HEADER_LENGTH
        return bytes(self._mmap[start : start + min(frame.payload_length, max_bytes)])

    def close(self) -> None:
        self._mmap.close()

    def __enter__(self) -> LogFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def hexdump(data: bytes, indent: str = "      ") -> str:
    lines = []
    for row in range(0, len(data), 16):
        chunk = data[row : row + 16]
        hex_part = " ".join(f"{b:02x}" for b in chunk)
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        lines.append(f"{indent}{row:04x}: {hex_part:<47}  |{text}|")
    return "\n".join(lines)


def _describe_default_header(header: bytes) -> str:
    if len(header) < HEADER_LENGTH:
        return f"{len(header)} bytes"
    _, version, flags, frame_type, _, session_id, stream_id, _, _ = _HEADER.unpack_from(header, 0)
    name = _TYPE_NAMES.get(frame_type, f"0x{frame_type:04x}")
    return f"type={name} version={version} flags={_flags_text(flags)} session={session_id} stream={stream_id}"


def format_log(
    log: LogFile,
    partitions: list[int] | None = None,
    frame_limit: int | None = None,
    payload_bytes: int | None = None,
) -> str:
    """The dump: metadata, the three tails, then each term's frames (payload hexdump if ``payload_bytes``)."""
    meta = log.metadata()
    eos = "MAX (open)" if meta.end_of_stream_position == _LONG_MAX else f"{meta.end_of_stream_position:,}"
    out = [
        f"log buffer:          {log.path}",
        f"file length:         {log.file_length:,}",
        f"term length:         {meta.term_length:,}",
        f"page size:           {meta.page_size:,}",
        f"mtu length:          {meta.mtu_length:,}",
        f"correlation id:      {meta.correlation_id}",
        f"initial term id:     {meta.initial_term_id}",
        f"active term count:   {meta.active_term_count} (partition {meta.active_partition})",
        f"is connected:        {'yes' if meta.is_connected else 'no'}",
        f"end of stream:       {eos}",
        f"default header:      {_describe_default_header(meta.default_header)}",
        "term tails:",
    ]
    for tail in meta.tails:
        active = "  <- active" if tail.partition == meta.active_partition else ""
        out.append(
            f"  [{tail.partition}] raw=0x{tail.raw_tail & 0xFFFF_FFFF_FFFF_FFFF:016x} term id={tail.term_id} "
            f"offset={tail.term_offset:,} position={tail.position:,}{active}"
        )
    for partition in partitions if partitions is not None else range(PARTITION_COUNT):
        out.append(f"term {partition} (term id {meta.tails[partition].term_id}):")
        frames = 0
        data_bytes = 0
        for item in log.frames(partition, frame_limit):
            if isinstance(item, str):
                out.append(f"  {item}")
                continue
            frames += 1
            state = "" if item.frame_length > 0 else "  (claimed, not committed)"
            out.append(
                f"  offset={item.term_offset:>10} length={item.frame_length:>7} type={item.type_name:<5} "
                f"flags={_flags_text(item.flags):<9} version={item.version} term_offset={item.header_term_offset} "
                f"session={item.session_id} stream={item.stream_id} term_id={item.term_id} "
                f"reserved={item.reserved_value}{state}"
            )
            if item.type != HDR_TYPE_PAD:
                data_bytes += item.payload_length
            if payload_bytes and item.type == HDR_TYPE_DATA and item.frame_length > 0 and item.payload_length:
                payload = log.payload(partition, item, payload_bytes)
                out.append(hexdump(payload))
                if item.payload_length > len(payload):
                    out.append(f"      ... {item.payload_length - len(payload)} more bytes")
        out.append(f"  {frames} frames, {data_bytes:,} payload bytes")
    return "\n".join(out) + "\n"


def log_json(log: LogFile, partitions: list[int] | None = None, frame_limit: int | None = None) -> str:
    meta = log.metadata()
    terms = []
    for partition in partitions if partitions is not None else range(PARTITION_COUNT):
        frames = []
        notes = []
        for item in log.frames(partition, frame_limit):
            if isinstance(item, str):
                notes.append(item)
            else:
                frames.append(item.to_json())
        terms.append({"partition": partition, "frames": frames, "notes": notes})
    document = {
        "path": str(log.path),
        "file_length": log.file_length,
        "term_length": meta.term_length,
        "page_size": meta.page_size,
        "mtu_length": meta.mtu_length,
        "correlation_id": meta.correlation_id,
        "initial_term_id": meta.initial_term_id,
        "active_term_count": meta.active_term_count,
        "is_connected": meta.is_connected,
        "end_of_stream_position": meta.end_of_stream_position,
        "default_header": meta.default_header.hex(),
        "tails": [attrs.asdict(t) for t in meta.tails],
        "terms": terms,
    }
    return json.dumps(document, indent=2) + "\n"


def find_log_files(directory: Path) -> list[Path]:
    """Log files under a driver directory (``publications/``, ``images/``), or any ``*.logbuffer`` below it."""
    directory = Path(directory)
    if not directory.exists():
        raise ToolError(f"{directory}: no such file or directory")
    return sorted(p for p in directory.rglob("*.logbuffer") if p.is_file())


def format_log_listing(directory: Path, paths: list[Path]) -> str:
    if not paths:
        return f"no .logbuffer files under {directory}\n"
    lines = [f"{'FILE':<60} {'TERM LENGTH':>12} {'CORRELATION':>12} {'POSITION':>16}"]
    for path in paths:
        try:
            with LogFile(path) as log:
                meta = log.metadata()
                tail = meta.tails[meta.active_partition]
                lines.append(
                    f"{path.relative_to(directory)!s:<60} {meta.term_length:>12,} {meta.correlation_id:>12} "
                    f"{tail.position:>16,}"
                )
        except ToolError as exc:
            lines.append(f"{path.relative_to(directory)!s:<60} unreadable: {exc}")
    return "\n".join(lines) + "\n"
