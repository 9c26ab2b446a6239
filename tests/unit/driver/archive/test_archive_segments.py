"""Segment files (sans-IO): where a position lives, names, and how far a torn segment holds whole frames.

The frames are real: written by the driver's own exclusive term appender into
term-sized buffers laid end to end, as the recorder copies them into a segment.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from driver.archive.segments import (
    SEGMENT_MAX_LENGTH,
    SEGMENT_MIN_LENGTH,
    check_segment_length,
    complete_frames_end,
    ensure_segment,
    segment_base_position,
    segment_file_name,
    segment_files,
    segment_index,
    segment_path,
    segment_spans,
    zero_tail,
)
from driver.concurrent.atomic_buffer import AtomicBuffer, align
from driver.errors import DriverConfigurationError
from driver.logbuffer import descriptor as d
from driver.logbuffer.appender import EXCLUSIVE_FAILED, ExclusiveTermAppender
from driver.logbuffer.frame import HeaderWriter, create_default_header

KIB = 1024
TERM = 64 * KIB
SESSION = 4242
STREAM = 1001
FRAME = struct.Struct("<iBBHiiiiq")


def build_terms(
    messages: list[bytes],
    *,
    term_length: int = TERM,
    first_term_id: int = 7,
    first_offset: int = 0,
    session_id: int = SESSION,
    stream_id: int = STREAM,
    mtu: int = 1408,
) -> tuple[bytearray, list[int]]:
    """Append ``messages`` from ``first_term_id``/``first_offset`` on, across as many terms as they need.

    Returns the terms laid end to end (starting at the first term's offset 0, so the
    bytes before ``first_offset`` are zero, as in a recording that starts mid-term)
    and the offset where each frame begins (PAD frames included).
    """
    terms: list[bytearray] = [bytearray(term_length)]
    meta_raw = bytearray(d.LOG_META_DATA_LENGTH)
    meta = AtomicBuffer(meta_raw)
    header = HeaderWriter(create_default_header(session_id, stream_id, first_term_id))
    term_id, offset = first_term_id, first_offset
    buffers: list[AtomicBuffer] = [meta]
    term = AtomicBuffer(terms[-1])
    buffers.append(term)
    appender = ExclusiveTermAppender(term, meta, 0)
    starts: list[int] = []
    try:
        for message in messages:
            while True:
                if len(message) > mtu - 32:
                    result = appender.append_fragmented(
                        term_id, offset, header, message, 0, len(message), mtu - 32, None
                    )
                else:
                    result = appender.append_unfragmented(term_id, offset, header, message, 0, len(message), None)
                base = (len(terms) - 1) * term_length
                if result == EXCLUSIVE_FAILED:
                    if offset < term_length:
                        starts.append(base + offset)  # the PAD frame that fills the rest of the term
                    terms.append(bytearray(term_length))
                    term = AtomicBuffer(terms[-1])
                    buffers.append(term)
                    appender = ExclusiveTermAppender(term, meta, 0)
                    term_id = (term_id + 1) & 0xFFFFFFFF
                    term_id = term_id - (1 << 32) if term_id >= 1 << 31 else term_id
                    offset = 0
                    continue
                at = offset
                while at < result:
                    starts.append(base + at)
                    at += align(FRAME.unpack_from(terms[-1], at)[0], 32)
                offset = result
                break
    finally:
        for buffer in buffers:
            buffer.release()
    return bytearray().join(terms), starts


def frames_end(data: bytes | bytearray, offset: int = 0, limit: int | None = None, **kwargs: int) -> int:
    settings: dict[str, int] = {"term_length": TERM, "stream_id": STREAM, "term_id_at_offset": 7}
    settings.update(kwargs)
    return complete_frames_end(
        data,
        offset,
        len(data) if limit is None else limit,
        term_length=settings["term_length"],
        stream_id=settings["stream_id"],
        term_id_at_offset=settings["term_id_at_offset"],
        session_id=settings.get("session_id"),
        page_size=settings.get("page_size", 0),
    )


def payload(i: int, length: int = 40) -> bytes:
    return (i.to_bytes(4, "little") * (length // 4 + 1))[:length]


# -- positions, spans, names ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("start", "position", "term", "segment", "expected"),
    [
        (0, 0, TERM, 4 * TERM, 0),
        (0, 4 * TERM - 32, TERM, 4 * TERM, 0),
        (0, 4 * TERM, TERM, 4 * TERM, 4 * TERM),
        (0, 9 * TERM + 96, TERM, 4 * TERM, 8 * TERM),
        # a recording that starts mid-term: segments count from the start of that term
        (3 * TERM + 1024, 3 * TERM + 1024, TERM, 4 * TERM, 3 * TERM),
        (3 * TERM + 1024, 7 * TERM - 32, TERM, 4 * TERM, 3 * TERM),
        (3 * TERM + 1024, 7 * TERM, TERM, 4 * TERM, 7 * TERM),
        (3 * TERM + 1024, 12 * TERM, TERM, 4 * TERM, 11 * TERM),
        # one term per segment
        (5 * TERM + 64, 5 * TERM + 64, TERM, TERM, 5 * TERM),
        (5 * TERM + 64, 6 * TERM + 64, TERM, TERM, 6 * TERM),
        # a position before the start's term maps to the first segment
        (3 * TERM + 1024, 0, TERM, 4 * TERM, 3 * TERM),
    ],
)
def test_segment_base_position(start: int, position: int, term: int, segment: int, expected: int) -> None:
    assert segment_base_position(start, position, term, segment) == expected


def test_segment_spans_split_a_range_at_segment_boundaries() -> None:
    spans = list(segment_spans(3 * TERM + 1024, 3 * TERM + 1024, 12 * TERM + 64, TERM, 4 * TERM))
    assert spans == [
        (3 * TERM, 3 * TERM + 1024, 7 * TERM),
        (7 * TERM, 7 * TERM, 11 * TERM),
        (11 * TERM, 11 * TERM, 12 * TERM + 64),
    ]
    assert list(segment_spans(0, 100, 100, TERM, TERM)) == []
    assert list(segment_spans(0, 32, 64, TERM, TERM)) == [(0, 32, 64)]


def test_segment_file_names_are_aeron_s_recording_id_and_segment_index(tmp_path: Path) -> None:
    assert segment_file_name(3, 0) == "3-0.rec"
    assert segment_file_name(12, 7) == "12-7.rec"
    # Segments count from the start position's term: a recording starting mid-term 3 has segment 0 at term 3.
    start = 3 * TERM + 1024
    assert segment_index(start, start, TERM, 4 * TERM) == 0
    assert segment_index(start, 7 * TERM - 32, TERM, 4 * TERM) == 0
    assert segment_index(start, 7 * TERM, TERM, 4 * TERM) == 1
    assert segment_index(start, 12 * TERM + 64, TERM, 4 * TERM) == 2
    assert segment_index(0, 5 * TERM, TERM, TERM) == 5
    assert segment_path(tmp_path, 9, start, 11 * TERM, TERM, 4 * TERM) == tmp_path / "9-2.rec"
    for name in ("3-0.rec", "3-12.rec", "3-2.rec", "33-0.rec", "3-x.rec", "3-1.tmp", "4-0.rec"):
        (tmp_path / name).write_bytes(b"")
    assert segment_files(tmp_path, 3) == [
        (0, tmp_path / "3-0.rec"),
        (2, tmp_path / "3-2.rec"),
        (12, tmp_path / "3-12.rec"),
    ]
    assert segment_files(tmp_path, 5) == []
    assert segment_files(tmp_path / "absent", 3) == []


@pytest.mark.parametrize(
    ("segment", "term"),
    [
        (SEGMENT_MIN_LENGTH, SEGMENT_MIN_LENGTH),
        (SEGMENT_MAX_LENGTH, SEGMENT_MIN_LENGTH),
        (SEGMENT_MAX_LENGTH, SEGMENT_MAX_LENGTH),
        (1 << 20, 1 << 20),
    ],
)
def test_check_segment_length_accepts(segment: int, term: int) -> None:
    check_segment_length(segment, term)


@pytest.mark.parametrize(
    ("segment", "term", "allowed"),
    [
        (SEGMENT_MIN_LENGTH // 2, SEGMENT_MIN_LENGTH // 2, "power of two"),
        (SEGMENT_MAX_LENGTH * 2, SEGMENT_MIN_LENGTH, "power of two"),
        (3 * SEGMENT_MIN_LENGTH, SEGMENT_MIN_LENGTH, "power of two"),
        (0, SEGMENT_MIN_LENGTH, "power of two"),
        (-SEGMENT_MIN_LENGTH, SEGMENT_MIN_LENGTH, "power of two"),
        (SEGMENT_MIN_LENGTH, 2 * SEGMENT_MIN_LENGTH, "at least one term"),
    ],
)
def test_check_segment_length_refuses(segment: int, term: int, allowed: str) -> None:
    with pytest.raises(DriverConfigurationError, match=r"aeron\.archive\.segment\.file\.length") as info:
        check_segment_length(segment, term)
    assert allowed in info.value.allowed
    assert info.value.value == segment


# -- complete_frames_end ----------------------------------------------------------------------------


def test_whole_frames_end_where_the_data_ends() -> None:
    data, starts = build_terms([payload(i) for i in range(100)])
    end = starts[-1] + 96  # 32 header + 40 payload, aligned
    assert frames_end(data, limit=end) == end
    # every frame start is a place to resume from
    for start in starts[::7]:
        assert frames_end(data, start, end) == end
    # the zeros after the last frame are not a frame
    assert frames_end(data) == end


def test_torn_header_is_cut() -> None:
    data, starts = build_terms([payload(i) for i in range(10)])
    end = starts[-1] + 96
    for torn in (1, 8, 31):
        assert frames_end(data[: end + torn], limit=end + torn) == end
        # a header cut short by the limit (the file holds more)
        assert frames_end(data, 0, starts[-1] + torn) == starts[-1]


def test_torn_payload_past_the_limit_is_cut() -> None:
    data, starts = build_terms([payload(i, 1000) for i in range(10)])
    last = starts[-1]
    whole = last + align(32 + 1000, 32)
    assert frames_end(data, 0, whole) == whole
    for limit in (last + 32, last + 500, whole - 32, whole - 1):
        assert frames_end(data, 0, limit) == last


def test_a_frame_whose_later_page_never_landed_is_cut() -> None:
    """In a whole (sparse) segment a torn write leaves a header whose frame runs on into a page of zeros."""
    data, _ = build_terms([payload(i + 1, 1000) for i in range(40)])
    end = frames_end(data)
    assert frames_end(data, page_size=4096) == end  # every page each frame reaches holds some of it
    frames, at = [], 0
    while at < end:
        length = align(struct.unpack_from("<i", data, at)[0], 32)
        frames.append((at, at + length))
        at += length
    start, stop = next((a, b) for a, b in frames if a // 4096 != (b - 1) // 4096)
    page = start - start % 4096 + 4096
    torn = bytearray(data)
    torn[page:stop] = bytes(stop - page)
    assert frames_end(torn, page_size=4096) == start
    assert frames_end(torn) == end  # without the page rule the zeros pass for payload
    # a frame within one page is all there or not at all
    small, small_starts = build_terms([payload(i + 1) for i in range(10)])
    assert frames_end(small, page_size=4096) == small_starts[-1] + 96


def test_garbage_after_the_frames_is_cut() -> None:
    data, starts = build_terms([payload(i) for i in range(10)])
    end = starts[-1] + 96
    torn = bytearray(data[:end]) + bytes(range(256)) * 4
    assert frames_end(torn) == end
    torn = bytearray(data[:end]) + b"\xff" * 64
    assert frames_end(torn) == end


@pytest.mark.parametrize(
    ("field_offset", "value"),
    [
        (8, 64),  # term offset: not where the frame sits
        (16, STREAM + 1),  # another stream
        (20, 8),  # another term id
        (4, 1),  # version 1
        (6, 3),  # type SM
        (6, 0xFFFF),  # type EXT
        (0, 0),  # length 0: nothing committed there
        (0, -96),  # negative length: claimed, not committed
        (0, 31),  # shorter than a header
    ],
)
def test_a_frame_not_of_this_stream_at_this_place_ends_the_walk(field_offset: int, value: int) -> None:
    data, starts = build_terms([payload(i) for i in range(10)])
    end = starts[-1] + 96
    bad = starts[6]
    if field_offset in (4,):
        data[bad + field_offset] = value
    elif field_offset == 6:
        struct.pack_into("<H", data, bad + field_offset, value)
    else:
        struct.pack_into("<i", data, bad + field_offset, value)
    assert frames_end(data, 0, end) == bad


def test_session_is_checked_only_when_given() -> None:
    data, starts = build_terms([payload(i) for i in range(10)])
    end = starts[-1] + 96
    assert frames_end(data, 0, end, session_id=SESSION) == end
    assert frames_end(data, 0, end, session_id=SESSION + 1) == 0
    struct.pack_into("<i", data, starts[4] + 12, SESSION + 1)  # an extension from another session
    assert frames_end(data, 0, end) == end
    assert frames_end(data, 0, end, session_id=SESSION) == starts[4]


def test_pad_frames_and_term_rollover() -> None:
    # 1000-byte messages do not divide a 64 KiB term: each term ends with a PAD frame.
    messages = [payload(i, 1000) for i in range(200)]
    data, starts = build_terms(messages, first_term_id=7)
    assert len(data) >= 3 * TERM
    pads = [s for s in starts if FRAME.unpack_from(data, s)[3] == 0]
    assert pads, "the appender padded the end of a term"
    assert all((s + align(FRAME.unpack_from(data, s)[0], 32)) % TERM == 0 for s in pads)
    end = starts[-1] + align(32 + 1000, 32)
    assert frames_end(data, 0, end) == end
    # resuming in the second term needs that term's id
    second = next(s for s in starts if s >= TERM)
    assert frames_end(data, second, end, term_id_at_offset=8) == end
    assert frames_end(data, second, end, term_id_at_offset=7) == second
    # a frame in the third term carrying the second term's id stops the walk there
    third = next(s for s in starts if s >= 2 * TERM)
    struct.pack_into("<i", data, third + 20, 8)
    assert frames_end(data, 0, end) == third


def test_term_id_rollover_wraps_at_int32() -> None:
    messages = [payload(i, 1000) for i in range(130)]
    data, starts = build_terms(messages, first_term_id=0x7FFFFFFF)
    end = starts[-1] + align(32 + 1000, 32)
    assert end > TERM
    second = next(s for s in starts if s >= TERM)
    assert FRAME.unpack_from(data, second)[7] == -(1 << 31)
    assert frames_end(data, 0, end, term_id_at_offset=0x7FFFFFFF) == end


def test_a_frame_running_past_its_term_is_refused() -> None:
    data, starts = build_terms([payload(i, 1000) for i in range(130)])
    pad = next(s for s in starts if FRAME.unpack_from(data, s)[3] == 0)
    # make the PAD frame claim to run 32 bytes past the end of its term
    struct.pack_into("<i", data, pad, TERM - pad + 32)
    assert frames_end(data, 0, len(data)) == pad


def test_fragmented_messages_and_a_mid_term_start() -> None:
    big = bytes(range(256)) * 20  # 5120 bytes: four fragments with mtu 1408
    data, starts = build_terms([big, payload(1), big], first_offset=4096)
    assert starts[0] == 4096
    assert FRAME.unpack_from(data, starts[0])[2] == 0x80  # BEGIN only: a first fragment
    end = starts[-1] + align(FRAME.unpack_from(data, starts[-1])[0], 32)
    assert frames_end(data, 4096, end) == end
    # the hole before the start holds no frames
    assert frames_end(data, 0, end) == 0
    # a cut inside the last fragment keeps the fragments before it
    assert frames_end(data, 4096, end - 40) == starts[-1]


def test_segments_are_whole_and_a_tail_is_zeroed_in_place(tmp_path: Path) -> None:
    path = tmp_path / "1-0.rec"
    ensure_segment(path, 4 * TERM)
    assert path.stat().st_size == 4 * TERM
    path.write_bytes(b"\x01" * (4 * TERM))
    ensure_segment(path, 4 * TERM)  # an existing segment keeps its bytes
    assert path.read_bytes() == b"\x01" * (4 * TERM)
    zero_tail(path, 96, 4 * TERM)
    data = path.read_bytes()
    assert len(data) == 4 * TERM
    assert data[:96] == b"\x01" * 96
    assert data[96:] == bytes(4 * TERM - 96)
