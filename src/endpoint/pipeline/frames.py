"""Vectorised decoding of recorded term bytes into Arrow record batches of whole messages.

Theory of operation
-------------------
A recording's segment holds the frames exactly as they sat in the term buffers:
32-byte little-endian headers, each frame 32-byte aligned, PAD frames filling
the end of a term. Walking frames one by one in Python costs a few hundred ns
a frame, so the walk is done with numpy instead:

1. View the region as 32-byte slots and treat every slot as a possible header.
   A slot is a *candidate* when it looks like a frame at that place: a length of
   at least a header, version 0, type PAD or DATA, and a ``term_offset`` field
   equal to the slot's own offset in its term.
2. Real frames are candidates, so the frames are the chain that starts at the
   region's first slot and hops ``align(frame_length, 32)`` bytes at a time.
   When the candidates *are* that chain (checked in one comparison) we are
   done; when a payload happens to look like a header the chain check fails
   and a plain walk over the candidates settles it (rare, and still correct).
3. Messages: a BEGIN fragment up to the first END fragment after it, with no
   other BEGIN in between (an unfragmented frame has both flags). Fragments
   before the first BEGIN (a recording joined mid-message) and messages cut
   off by the end of the region are dropped. The appenders never let a
   message cross a term, so a region of whole terms holds whole messages.
4. Payloads are gathered without a loop: equal frames at an equal stride
   (fixed-size messages) are one strided copy; otherwise a run-length mask
   (header, payload, padding, ...) built with ``np.repeat`` picks the payload
   bytes in one ``compress``, whatever the message sizes.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Final

import attrs
import numpy as np
import numpy.typing as npt
import pyarrow as pa  # type: ignore[import-untyped]

__all__ = [
    "ARROW_SCHEMA",
    "BEGIN_FLAG",
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_ROWS",
    "END_FLAG",
    "HEADER_DTYPE",
    "Frames",
    "Messages",
    "find_frames",
    "find_messages",
    "last_message_boundary",
    "message_batches",
]

HEADER_LENGTH: Final = 32
FRAME_ALIGNMENT: Final = 32
BEGIN_FLAG: Final = 0x80
END_FLAG: Final = 0x40
TYPE_PAD: Final = 0
TYPE_DATA: Final = 1

DEFAULT_BATCH_ROWS: Final = 65_536
"""Rows per record batch: big enough to amortise Arrow's per-batch cost, small enough to stream."""
DEFAULT_BATCH_BYTES: Final = 64 * 1024 * 1024
"""Payload bytes per record batch; also keeps Arrow's int32 binary offsets far from overflowing."""

HEADER_DTYPE: Final = np.dtype(
    [
        ("frame_length", "<i4"),
        ("version", "u1"),
        ("flags", "u1"),
        ("type", "<u2"),
        ("term_offset", "<i4"),
        ("session_id", "<i4"),
        ("stream_id", "<i4"),
        ("term_id", "<i4"),
        ("reserved_value", "<i8"),
    ]
)
"""The data frame header (driver.logbuffer.frame) as a numpy record."""

ARROW_SCHEMA: Final = pa.schema(
    [
        ("recording_id", pa.int64()),
        ("session_id", pa.int32()),
        ("stream_id", pa.int32()),
        ("channel", pa.string()),
        ("position", pa.int64()),
        ("term_id", pa.int32()),
        ("term_offset", pa.int32()),
        ("flags", pa.int32()),
        ("reserved_value", pa.int64()),
        ("payload", pa.binary()),
    ]
)
"""The reader's columns, in order; Spark checks a batch's schema against its own, type for type."""

_SLOT: Final = np.dtype((np.void, HEADER_LENGTH))

Int64Array = npt.NDArray[np.int64]
Buffer = bytes | bytearray | memoryview | npt.NDArray[np.uint8]


def _as_bytes(region: Buffer) -> npt.NDArray[np.uint8]:
    if isinstance(region, np.ndarray):
        return region.view(np.uint8).reshape(-1)
    return np.frombuffer(region, dtype=np.uint8)


@attrs.frozen
class Frames:
    """The whole frames at the start of a region: each one's byte offset in the region and its header."""

    region: npt.NDArray[np.uint8]
    position: int
    """Stream position of the region's first byte."""
    offsets: Int64Array
    headers: npt.NDArray[Any]
    """HEADER_DTYPE records, one per frame."""

    @property
    def end(self) -> int:
        """Byte offset just past the last whole frame (0 when there is none)."""
        if not len(self.offsets):
            return 0
        return int(self.offsets[-1]) + _aligned(int(self.headers["frame_length"][-1]))

    def __len__(self) -> int:
        return len(self.offsets)


def _take(headers: npt.NDArray[Any], index: Int64Array) -> npt.NDArray[Any]:
    """``headers[index]``, copied as opaque 32-byte rows (numpy copies structured records field by field: slower)."""
    rows: npt.NDArray[Any] = headers.view(_SLOT)[index].view(HEADER_DTYPE)
    return rows


def _aligned(length: int) -> int:
    return (length + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT


def find_frames(region: Buffer, position: int, term_length: int) -> Frames:
    """The chain of whole frames from the region's first byte, which must be a frame start at ``position``.

    The chain stops before the first slot that is not a plausible frame (a
    torn or unwritten tail) and before a frame running past the region's end.
    """
    data = _as_bytes(region)
    if term_length <= 0 or term_length & (term_length - 1):
        raise ValueError(f"term length {term_length} is not a power of two")
    if position & (FRAME_ALIGNMENT - 1):
        raise ValueError(f"position {position} is not {FRAME_ALIGNMENT}-byte aligned")
    slots = len(data) // HEADER_LENGTH
    headers = data[: slots * HEADER_LENGTH].view(HEADER_DTYPE)
    frame_length = headers["frame_length"]
    mask = term_length - 1
    expected = (np.arange(slots, dtype=np.int64) * HEADER_LENGTH + (position & mask)) & mask
    candidate = (
        (frame_length >= HEADER_LENGTH)
        & (headers["version"] == 0)
        & (headers["type"] <= TYPE_DATA)
        & (headers["term_offset"] == expected)
    )
    index = np.flatnonzero(candidate)
    hops = (frame_length[index].astype(np.int64) + FRAME_ALIGNMENT - 1) >> 5
    following = index + hops
    if len(index) and index[0] == 0 and np.array_equal(following[:-1], index[1:]):
        chain = index
    else:
        chain = _walk(index, following)
    if len(chain):
        # A frame running past the region's end or past its term is not whole: cut it and what follows.
        starts = chain * HEADER_LENGTH
        aligned = (frame_length[chain].astype(np.int64) + FRAME_ALIGNMENT - 1) & -FRAME_ALIGNMENT
        fits = (starts + aligned <= len(data)) & (((starts + position) & mask) + aligned <= term_length)
        if not fits.all():
            chain = chain[: int(np.argmin(fits))]
    offsets = chain * HEADER_LENGTH
    return Frames(data, position, offsets, _take(headers, chain))


def _walk(index: Int64Array, following: Int64Array) -> Int64Array:
    """Follow the hops from slot 0 through the candidates (the rare path: a payload mimics a header)."""
    if not len(index) or index[0] != 0:
        return np.empty(0, dtype=np.int64)
    where = {int(slot): k for k, slot in enumerate(index.tolist())}
    nexts = following.tolist()
    chain = [0]
    k = 0
    while True:
        nxt = where.get(nexts[k])
        if nxt is None:
            break
        chain.append(nexts[k])
        k = nxt
    return np.asarray(chain, dtype=np.int64)


@attrs.frozen
class Messages:
    """Whole messages among some frames: the index (into ``frames``) of each one's first and last fragment."""

    frames: Frames
    first: Int64Array
    last: Int64Array

    @property
    def positions(self) -> Int64Array:
        """Stream position of each message (its first fragment's)."""
        return self.frames.offsets[self.first] + self.frames.position

    def __len__(self) -> int:
        return len(self.first)

    def select(self, keep: npt.NDArray[np.bool_]) -> Messages:
        return Messages(self.frames, self.first[keep], self.last[keep])

    def between(self, low: int | None, high: int | None) -> Messages:
        """The messages whose position is in ``[low, high)`` (None: unbounded)."""
        if low is None and high is None:
            return self
        positions = self.positions
        keep = np.ones(len(positions), dtype=np.bool_)
        if low is not None:
            keep &= positions >= low
        if high is not None:
            keep &= positions < high
        return self.select(keep)


def find_messages(frames: Frames) -> Messages:
    """Pair each BEGIN fragment with the first END fragment after it, unless another BEGIN comes first."""
    headers = frames.headers
    data = np.flatnonzero(headers["type"] == TYPE_DATA)
    flags = headers["flags"][data]
    whole_frames = BEGIN_FLAG | END_FLAG
    if bool(((flags & whole_frames) == whole_frames).all()):
        data = data.astype(np.int64)
        return Messages(frames, data, data)
    begins = data[(flags & BEGIN_FLAG) != 0]
    ends = data[(flags & END_FLAG) != 0]
    at = np.searchsorted(ends, begins)
    found = at < len(ends)
    begins = begins[found]
    last = ends[at[found]]
    if len(begins) > 1:
        whole = np.ones(len(begins), dtype=np.bool_)
        whole[:-1] = last[:-1] < begins[1:]
        begins, last = begins[whole], last[whole]
    return Messages(frames, begins.astype(np.int64), last.astype(np.int64))


def last_message_boundary(frames: Frames) -> int:
    """Byte offset in the region just past the last whole message or PAD frame (0 when there is none).

    A stream position there is a safe place to end a read: no message straddles it.
    """
    headers = frames.headers
    closing = np.flatnonzero((headers["type"] == TYPE_PAD) | ((headers["flags"] & END_FLAG) != 0))
    if not len(closing):
        return 0
    k = int(closing[-1])
    return int(frames.offsets[k]) + _aligned(int(headers["frame_length"][k]))


def message_batches(
    messages: Messages,
    recording_id: int,
    channel: str,
    *,
    max_rows: int = DEFAULT_BATCH_ROWS,
    max_bytes: int = DEFAULT_BATCH_BYTES,
) -> Iterator[pa.RecordBatch]:
    """Record batches (ARROW_SCHEMA) of at most ``max_rows`` messages and, past one message, ``max_bytes``."""
    count = len(messages)
    if not count:
        return
    frames = messages.frames
    headers = frames.headers
    payload_lengths = headers["frame_length"].astype(np.int64) - HEADER_LENGTH
    running = np.concatenate(([0], np.cumsum(payload_lengths)))
    message_bytes = running[messages.last + 1] - running[messages.first]
    # Which frames belong to a kept message: +1 at each message's first fragment, -1 after its last.
    delta = np.zeros(len(frames) + 1, dtype=np.int8)
    delta[messages.first] = 1
    delta[messages.last + 1] -= 1
    in_message = np.cumsum(delta[:-1], dtype=np.int8).view(np.bool_)
    start = 0
    while start < count:
        stop = min(start + max_rows, count)
        taken = np.cumsum(message_bytes[start:stop])
        if taken[-1] > max_bytes:
            stop = start + max(1, int(np.searchsorted(taken, max_bytes, side="right")))
        yield _batch(messages, start, stop, in_message, message_bytes[start:stop], recording_id, channel)
        start = stop


def _batch(
    messages: Messages,
    start: int,
    stop: int,
    in_message: npt.NDArray[np.bool_],
    lengths: Int64Array,
    recording_id: int,
    channel: str,
) -> pa.RecordBatch:
    frames = messages.frames
    headers = frames.headers
    first = messages.first[start:stop]
    last = messages.last[start:stop]
    rows = len(first)
    lo_frame, hi_frame = int(first[0]), int(last[-1]) + 1
    base = int(frames.offsets[lo_frame])
    end = int(frames.offsets[hi_frame - 1]) + int(headers["frame_length"][hi_frame - 1])
    chosen = np.flatnonzero(in_message[lo_frame:hi_frame]) + lo_frame
    data = _gather(frames.region[base:end], frames.offsets[chosen] - base, headers["frame_length"][chosen])
    offsets = np.zeros(rows + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    head = _take(headers, first)
    flags = (head["flags"] | headers["flags"][last]).astype(np.int32)
    payload = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
    columns = [
        pa.array(np.full(rows, recording_id, dtype=np.int64)),
        pa.array(head["session_id"]),
        pa.array(head["stream_id"]),
        _repeated(channel, rows),
        pa.array(frames.offsets[first] + frames.position),
        pa.array(head["term_id"]),
        pa.array(head["term_offset"]),
        pa.array(flags),
        pa.array(head["reserved_value"]),
        payload,
    ]
    return pa.RecordBatch.from_arrays(columns, schema=ARROW_SCHEMA)


def _gather(
    span: npt.NDArray[np.uint8], starts: Int64Array, frame_lengths: npt.NDArray[np.int32]
) -> npt.NDArray[np.uint8]:
    """The payloads of the frames at ``starts`` in ``span``, back to back.

    Equal frames at an equal stride (fixed-size messages, the common case) are
    one strided copy; otherwise a run-length mask (header gap, payload, ...)
    picks the payload bytes in one ``compress``.
    """
    count = len(starts)
    payload = frame_lengths.astype(np.int64) - HEADER_LENGTH
    if count > 1:
        stride = int(starts[1] - starts[0])
        length = int(payload[0])
        if (
            stride >= HEADER_LENGTH + length
            and int(starts[0]) + stride * count <= len(span) + stride - HEADER_LENGTH - length
            and bool((payload == length).all())
            and bool((np.diff(starts) == stride).all())
        ):
            first = int(starts[0])
            rows = np.lib.stride_tricks.as_strided(
                span[first:], shape=(count, HEADER_LENGTH + length), strides=(stride, 1), writeable=False
            )
            return np.ascontiguousarray(rows[:, HEADER_LENGTH:]).reshape(-1)
    payload_starts = starts + HEADER_LENGTH
    previous_ends = np.empty(count, dtype=np.int64)
    previous_ends[0] = 0
    previous_ends[1:] = payload_starts[:-1] + payload[:-1]
    runs = np.empty(2 * count + 1, dtype=np.int64)
    runs[0:-1:2] = payload_starts - previous_ends
    runs[1::2] = payload
    runs[-1] = len(span) - (int(payload_starts[-1]) + int(payload[-1]))
    values = np.zeros(2 * count + 1, dtype=np.bool_)
    values[1::2] = True
    result: npt.NDArray[np.uint8] = span[np.repeat(values, runs)]
    return result


_REPEATED: dict[str, pa.Array] = {}


def _repeated(text: str, rows: int) -> pa.Array:
    """A string column of ``rows`` copies of ``text``: one cached array per text, sliced (no copy)."""
    cached = _REPEATED.get(text)
    if cached is None or len(cached) < rows:
        if len(_REPEATED) > 64:
            _REPEATED.clear()
        size = max(rows, DEFAULT_BATCH_ROWS)
        encoded = text.encode()
        offsets = np.arange(size + 1, dtype=np.int32) * len(encoded)
        cached = pa.Array.from_buffers(pa.string(), size, [None, pa.py_buffer(offsets), pa.py_buffer(encoded * size)])
        _REPEATED[text] = cached
    return cached.slice(0, rows)
