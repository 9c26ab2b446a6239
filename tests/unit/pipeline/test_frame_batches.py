"""The numpy frame decoder: terms written by the real appender (fragments, PAD, empty payloads) back into rows.

No Spark here: terms are built with driver.logbuffer's TermAppender and
HeaderWriter, exactly as a publication writes them, then decoded with
endpoint.pipeline.frames and compared with what was appended.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import attrs
import numpy as np
import pyarrow as pa
import pytest

from driver.archive.catalog import RecordingDescriptor
from driver.archive.segments import segment_file_name
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.appender import FAILED, TermAppender, fragmented_required_length
from driver.logbuffer.frame import HeaderWriter
from endpoint.pipeline.frames import (
    ARROW_SCHEMA,
    find_frames,
    find_messages,
    last_message_boundary,
    message_batches,
)
from endpoint.pipeline.partitions import SegmentSpan, message_boundary_at_or_before, plan_recording, read_span

TERM = 64 * 1024
MTU = 1408
MAX_PAYLOAD = MTU - 32
SESSION = 4242
STREAM = 77
HEADER = struct.Struct("<iBBHiiiiq")


@attrs.define
class Term:
    """One term's bytes as a publication wrote them, and where each whole message went."""

    data: bytes
    term_id: int
    messages: list[tuple[int, bytes]]
    """(term offset, payload) of every appended message, in order."""
    end: int
    """Term offset just past the last frame (the term length once padded)."""


def _framed(length: int) -> int:
    if length <= MAX_PAYLOAD:
        return (length + 32 + 31) & ~31
    return fragmented_required_length(length, MAX_PAYLOAD)


def build_term(payloads: list[bytes], *, term_id: int = 5, start: int = 0, pad: bool = False) -> Term:
    """Append ``payloads`` from term offset ``start`` with the real appender; ``pad`` fills the rest with PAD."""
    raw = bytearray(TERM + lbd.LOG_META_DATA_LENGTH)
    term = AtomicBuffer(raw, 0, TERM)
    metadata = AtomicBuffer(raw, TERM, lbd.LOG_META_DATA_LENGTH)
    lbd.initialize_publication_metadata(
        metadata,
        session_id=SESSION,
        stream_id=STREAM,
        initial_term_id=term_id,
        mtu_length=MTU,
        term_length=TERM,
        page_size=4096,
        correlation_id=1,
        term_id=term_id,
        term_offset=start,
    )
    header = HeaderWriter(lbd.default_frame_header(metadata))
    appender = TermAppender(term, metadata, 0, memoryview(raw)[:TERM])
    placed: list[tuple[int, bytes]] = []
    offset = start
    for payload in payloads:
        if len(payload) <= MAX_PAYLOAD:
            result = appender.append_unfragmented(header, payload, 0, len(payload), None, term_id)
        else:
            result = appender.append_fragmented(header, payload, 0, len(payload), MAX_PAYLOAD, None, term_id)
        assert result != FAILED, "test payloads must fit in the term"
        assert result == offset + _framed(len(payload))
        placed.append((offset, payload))
        offset = result
    end = offset
    if pad:
        # What the appender does when the next message does not fit: one PAD frame to the term's end.
        big = b"z" * (TERM - offset)
        assert appender.append_fragmented(header, big, 0, len(big), MAX_PAYLOAD, None, term_id) == FAILED
        end = TERM
    return Term(bytes(raw[:TERM]), term_id, placed, end)


def _rows(batches: list[pa.RecordBatch]) -> list[dict[str, object]]:
    return pa.Table.from_batches(batches, schema=ARROW_SCHEMA).to_pylist()


def _payloads(count: int) -> list[bytes]:
    return [bytes([i % 251]) * (i % 97) + i.to_bytes(4, "little") for i in range(count)]


# -- frames --------------------------------------------------------------------------------------------


def test_frames_of_a_term_with_pad_and_fragments() -> None:
    payloads = [b"a" * 5, b"", os.urandom(3 * MAX_PAYLOAD + 100), b"b" * 40, os.urandom(MAX_PAYLOAD)]
    term = build_term(payloads, pad=True)
    frames = find_frames(term.data, position=0, term_length=TERM)
    assert frames.end == TERM
    types = frames.headers["type"].tolist()
    assert types[-1] == 0  # the PAD frame
    assert types[:-1] == [1] * (len(types) - 1)
    # 1 + 1 + 4 fragments + 1 + 1 data frames, then PAD
    assert len(frames) == 9
    assert frames.offsets.tolist()[:3] == [0, 64, 96]


def test_decoded_rows_match_the_appended_messages() -> None:
    payloads = [b"a" * 5, b"", os.urandom(2 * MAX_PAYLOAD + 7), b"tail", *(_payloads(50))]
    term = build_term(payloads, term_id=9, pad=True)
    base_position = 3 * TERM  # the fourth term of a stream whose initial term id is 6
    messages = find_messages(find_frames(term.data, base_position, TERM))
    rows = _rows(list(message_batches(messages, 12, "aeron:ipc?term-length=64k")))
    assert [r["payload"] for r in rows] == payloads
    assert [r["position"] for r in rows] == [base_position + offset for offset, _ in term.messages]
    assert [r["term_offset"] for r in rows] == [offset for offset, _ in term.messages]
    assert {r["term_id"] for r in rows} == {9}
    assert {r["session_id"] for r in rows} == {SESSION}
    assert {r["stream_id"] for r in rows} == {STREAM}
    assert {r["recording_id"] for r in rows} == {12}
    assert {r["channel"] for r in rows} == {"aeron:ipc?term-length=64k"}
    assert {r["flags"] for r in rows} == {0xC0}  # a reassembled message carries BEGIN|END like a whole one
    assert {r["reserved_value"] for r in rows} == {0}


def test_fixed_size_messages_take_the_strided_path() -> None:
    payloads = [i.to_bytes(4, "little") * 8 for i in range(1000)]
    term = build_term(payloads)
    rows = _rows(list(message_batches(find_messages(find_frames(term.data, 0, TERM)), 0, "c")))
    assert [r["payload"] for r in rows] == payloads
    assert [r["position"] for r in rows] == [64 * i for i in range(1000)]


def test_batches_are_bounded_in_rows_and_bytes() -> None:
    payloads = _payloads(300)
    term = build_term(payloads)
    messages = find_messages(find_frames(term.data, 0, TERM))
    by_rows = list(message_batches(messages, 0, "c", max_rows=64))
    assert [b.num_rows for b in by_rows] == [64, 64, 64, 64, 44]
    by_bytes = list(message_batches(messages, 0, "c", max_bytes=1000))
    assert all(b.column("payload").nbytes <= 1000 + 4 * (b.num_rows + 1) for b in by_bytes if b.num_rows > 1)
    for batches in (by_rows, by_bytes):
        assert [r["payload"] for r in _rows(batches)] == payloads


def test_a_message_larger_than_the_byte_bound_is_its_own_batch() -> None:
    payloads = [b"x" * 10, os.urandom(5000), b"y" * 10]
    term = build_term(payloads)
    batches = list(message_batches(find_messages(find_frames(term.data, 0, TERM)), 0, "c", max_bytes=100))
    assert [b.num_rows for b in batches] == [1, 1, 1]
    assert [r["payload"] for r in _rows(batches)] == payloads


def test_region_cut_inside_a_fragmented_message_drops_it_and_the_boundary_stays_before_it() -> None:
    payloads = [b"a" * 10, os.urandom(3 * MAX_PAYLOAD), b"b" * 10]
    term = build_term(payloads)
    second = term.messages[1][0]
    cut = second + 2 * (MAX_PAYLOAD + 32)  # after two of its four fragments
    frames = find_frames(term.data[:cut], 0, TERM)
    assert len(frames) == 3  # the first message and two fragments of the second
    assert last_message_boundary(frames) == second
    rows = _rows(list(message_batches(find_messages(frames), 0, "c")))
    assert [r["payload"] for r in rows] == payloads[:1]


def test_leading_fragments_without_begin_are_skipped() -> None:
    payloads = [os.urandom(2 * MAX_PAYLOAD + 50), b"after"]
    term = build_term(payloads)
    middle = MAX_PAYLOAD + 32  # start reading at the second fragment (a recording joined mid-message)
    frames = find_frames(term.data[middle:], middle, TERM)
    rows = _rows(list(message_batches(find_messages(frames), 0, "c")))
    assert [r["payload"] for r in rows] == [b"after"]
    assert rows[0]["position"] == term.messages[1][0]


def test_region_starting_mid_term_reads_from_its_offset() -> None:
    payloads = _payloads(20)
    term = build_term(payloads, start=4096)
    frames = find_frames(term.data[4096:], TERM + 4096, TERM)
    rows = _rows(list(message_batches(find_messages(frames), 0, "c")))
    assert [r["payload"] for r in rows] == payloads
    assert rows[0]["position"] == TERM + 4096


def test_a_payload_that_looks_like_a_header_does_not_fool_the_walk() -> None:
    # Payload bytes that form a plausible DATA header at the very place they land: a candidate slot off the chain.
    fake_at = 32 + 32  # the second slot of the first frame's payload region
    fake = HEADER.pack(64, 0, 0xC0, 1, fake_at, SESSION, STREAM, 5, 0)
    first = b"\x00" * 32 + fake + b"\x00" * 32
    payloads = [first, b"next", b"last"]
    term = build_term(payloads)
    frames = find_frames(term.data, 0, TERM)
    assert frames.offsets.tolist() == [offset for offset, _ in term.messages]
    rows = _rows(list(message_batches(find_messages(frames), 0, "c")))
    assert [r["payload"] for r in rows] == payloads


def test_zeroed_tail_and_torn_frame_end_the_chain() -> None:
    payloads = _payloads(10)
    term = build_term(payloads)
    assert find_frames(term.data, 0, TERM).end == term.end  # zeros after the last frame are not frames
    torn = bytearray(term.data)
    last = term.messages[-1][0]
    struct.pack_into("<i", torn, last + 8, 12345)  # wrong term offset: not a frame of this place
    frames = find_frames(bytes(torn), 0, TERM)
    assert frames.end == last


def test_between_keeps_messages_by_start_position() -> None:
    payloads = [b"a" * 10, os.urandom(2 * MAX_PAYLOAD), b"c" * 10]
    term = build_term(payloads)
    messages = find_messages(find_frames(term.data, 0, TERM))
    second = term.messages[1][0]
    kept = messages.between(second, second + 1)
    assert [r["payload"] for r in _rows(list(message_batches(kept, 0, "c")))] == [payloads[1]]
    assert len(messages.between(second + 1, None)) == 1


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="power of two"):
        find_frames(b"", 0, 1000)
    with pytest.raises(ValueError, match="aligned"):
        find_frames(b"", 7, TERM)
    assert len(find_frames(b"", 0, TERM)) == 0
    assert list(message_batches(find_messages(find_frames(b"", 0, TERM)), 0, "c")) == []
    assert last_message_boundary(find_frames(b"", 0, TERM)) == 0


def test_numpy_input_is_accepted() -> None:
    term = build_term([b"one", b"two"])
    frames = find_frames(np.frombuffer(term.data, dtype=np.uint8), 0, TERM)
    assert len(find_messages(frames)) == 2


# -- segment files: planning spans and reading them in chunks -----------------------------------------


def _descriptor(recording_id: int, start: int, end: int, segment_length: int) -> RecordingDescriptor:
    return RecordingDescriptor(
        recording_id=recording_id,
        start_timestamp=0,
        stop_timestamp=0,
        start_position=start,
        stop_position=end,
        recorded_position=end,
        initial_term_id=5,
        segment_file_length=segment_length,
        term_buffer_length=TERM,
        mtu_length=MTU,
        session_id=SESSION,
        stream_id=STREAM,
        stripped_channel="aeron:ipc",
        original_channel="aeron:ipc?term-length=64k",
        source_identity="aeron:ipc",
    )


def _write_segments(directory: Path, recording_id: int, terms: list[Term], segment_length: int) -> int:
    """Lay terms out as the recorder would (term i at position i * TERM); returns the end position."""
    per_segment = segment_length // TERM
    for index, term in enumerate(terms):
        base = (index // per_segment) * segment_length
        path = directory / segment_file_name(recording_id, index // per_segment)
        with path.open("r+b" if path.exists() else "wb") as f:
            f.seek(index * TERM - base)
            f.write(term.data[: term.end])
    return (len(terms) - 1) * TERM + terms[-1].end


def test_plan_and_read_spans_across_segments(tmp_path: Path) -> None:
    terms = [
        build_term(_payloads(300), term_id=5 + i, pad=True) if i < 3 else build_term(_payloads(40), term_id=8)
        for i in range(4)
    ]
    end = _write_segments(tmp_path, 3, terms, 2 * TERM)
    descriptor = _descriptor(3, 0, end, 2 * TERM)
    spans = plan_recording(str(tmp_path), descriptor, 0, 1 << 62)
    assert [(s.base_position, s.low, s.high) for s in spans] == [(0, 0, 2 * TERM), (2 * TERM, 2 * TERM, end)]
    expected = [(i * TERM + offset, payload) for i, term in enumerate(terms) for offset, payload in term.messages]
    got: list[tuple[int, bytes]] = []
    for span in spans:
        for messages in read_span(span, chunk_length=4096):  # small chunks: messages must not split
            got.extend((r["position"], r["payload"]) for r in _rows(list(message_batches(messages, 3, "c"))))
    assert got == expected


def test_a_position_range_reads_from_the_term_start_and_filters_exactly(tmp_path: Path) -> None:
    terms = [build_term(_payloads(300), term_id=5 + i, pad=True) for i in range(2)]
    end = _write_segments(tmp_path, 0, terms, TERM)
    descriptor = _descriptor(0, 0, end, TERM)
    low, high = TERM + 1000, TERM + 5000  # inside the second term, not on frame boundaries
    spans = plan_recording(str(tmp_path), descriptor, low, high)
    assert [(s.read_from, s.read_to, s.low, s.high) for s in spans] == [(TERM, 2 * TERM, low, high)]
    rows = [r for m in read_span(spans[0]) for r in _rows(list(message_batches(m, 0, "c")))]
    expected = [(TERM + o, p) for o, p in terms[1].messages if low <= TERM + o < high]
    assert [(r["position"], r["payload"]) for r in rows] == expected


def test_message_boundary_scan_stops_before_a_partly_recorded_message(tmp_path: Path) -> None:
    payloads = [b"a" * 100, os.urandom(4 * MAX_PAYLOAD), b"b"]
    term = build_term(payloads, term_id=5)
    second = term.messages[1][0]
    recorded = second + 2 * (MAX_PAYLOAD + 32)  # the archive holds two of its fragments so far
    (tmp_path / segment_file_name(1, 0)).write_bytes(term.data[:recorded])
    descriptor = _descriptor(1, 0, recorded, TERM)
    assert message_boundary_at_or_before(str(tmp_path), descriptor, 0, recorded) == second
    assert message_boundary_at_or_before(str(tmp_path), descriptor, 0, recorded, chunk_length=256) == second
    assert message_boundary_at_or_before(str(tmp_path), descriptor, second, recorded) == second
    assert message_boundary_at_or_before(str(tmp_path), descriptor, 0, 0) == 0
    # A term's end is a boundary without reading anything.
    assert message_boundary_at_or_before(str(tmp_path), _descriptor(1, 0, 4 * TERM, TERM), 0, 2 * TERM) == 2 * TERM


def test_streaming_spans_start_and_stop_at_the_offsets(tmp_path: Path) -> None:
    terms = [build_term(_payloads(300), term_id=5, pad=True)]
    end = _write_segments(tmp_path, 0, terms, TERM)
    descriptor = _descriptor(0, 0, end, TERM)
    low, high = terms[0].messages[10][0], terms[0].messages[20][0]
    [span] = plan_recording(str(tmp_path), descriptor, low, high, boundaries=True)
    assert (span.read_from, span.read_to) == (low, high)
    rows = [r for m in read_span(span) for r in _rows(list(message_batches(m, 0, "c")))]
    assert [r["payload"] for r in rows] == [p for _, p in terms[0].messages[10:20]]


def test_a_missing_segment_is_a_clear_error(tmp_path: Path) -> None:
    span = SegmentSpan(str(tmp_path), 9, "c", TERM, 0, 0, TERM, 0, TERM)
    with pytest.raises(OSError, match=r"recording 9: segment file .*9-0\.rec is missing"):
        list(read_span(span))
