"""Native scans over many images or counters at once: what pollers and the conductor use when idle."""

from __future__ import annotations

import array

import pytest

from driver.concurrent._atomic import images_ready, positions_changed
from driver.concurrent.atomic_buffer import AtomicBuffer

TERM = 1024
BITS = 10  # log2(TERM)


def _image(position: int) -> tuple[AtomicBuffer, tuple[AtomicBuffer, AtomicBuffer, AtomicBuffer]]:
    pos = AtomicBuffer(bytearray(8))
    pos.put_long(0, position)
    terms = (AtomicBuffer(bytearray(TERM)), AtomicBuffer(bytearray(TERM)), AtomicBuffer(bytearray(TERM)))
    return pos, terms


def test_images_ready_reports_only_images_whose_next_frame_has_arrived() -> None:
    quiet = _image(0)
    arrived = _image(0)
    arrived[1][0].put_int_ordered(0, 64)
    second_term = _image(TERM + 128)  # term index 1, offset 128
    second_term[1][1].put_int_ordered(128, 32)
    wrong_term = _image(TERM + 128)
    wrong_term[1][0].put_int_ordered(128, 32)  # a frame, but in a term the position does not point into
    entries = [(pos, terms, BITS, TERM - 1) for pos, terms in (quiet, arrived, second_term, wrong_term)]
    assert images_ready(entries) == [1, 2]
    assert images_ready([]) == []


def test_images_ready_skips_released_buffers_and_rejects_malformed_entries() -> None:
    pos, terms = _image(0)
    terms[0].put_int_ordered(0, 64)
    pos.release()
    assert images_ready([(pos, terms, BITS, TERM - 1)]) == []
    with pytest.raises(TypeError, match="entry 0"):
        images_ready([(1, 2, 3)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="3 terms"):
        images_ready([(AtomicBuffer(bytearray(8)), (), BITS, TERM - 1)])  # type: ignore[list-item]


def test_positions_changed_reports_and_records_moved_counters() -> None:
    values = AtomicBuffer(bytearray(64))
    entries = [(values, 0), (values, 8), (values, 16)]
    last = array.array("q", [0, 0, 0])
    assert positions_changed(entries, last) == []
    values.put_long_ordered(8, 5)
    values.put_long_ordered(16, -1)
    assert positions_changed(entries, last) == [1, 2]
    assert list(last) == [0, 5, -1]
    assert positions_changed(entries, last) == []


def test_positions_changed_checks_its_arguments() -> None:
    values = AtomicBuffer(bytearray(16))
    with pytest.raises(ValueError, match="last holds"):
        positions_changed([(values, 0), (values, 8)], array.array("q", [0]))
    with pytest.raises(IndexError):
        positions_changed([(values, 16)], array.array("q", [0]))
    with pytest.raises(TypeError, match="entry 0"):
        positions_changed([(b"x", 0)], array.array("q", [0]))  # type: ignore[list-item]


def _frame(term: AtomicBuffer, offset: int, payload_length: int, flags: int = 0xC0, frame_type: int = 1) -> int:
    """Write a committed frame header (length last, ordered); returns the next aligned offset."""
    length = 32 + payload_length
    term.put_byte(offset + 4, 0)
    term.put_byte(offset + 5, flags if flags < 128 else flags - 256)
    term.put_short(offset + 6, frame_type)
    term.put_int_ordered(offset, length)
    return offset + ((length + 31) & ~31)


def test_scan_frames_lists_committed_data_frames_steps_over_padding_and_stops_at_the_limit() -> None:
    term = AtomicBuffer(bytearray(TERM))
    a = _frame(term, 0, 10)
    b = _frame(term, a, 100, flags=0x80)  # BEGIN fragment
    c = _frame(term, b, 40, frame_type=0)  # PAD
    d = _frame(term, c, 8, flags=0x40)  # END fragment
    assert term.scan_frames(0, 10) == (d, [(0, 42, 0xC0), (a, 132, 0x80), (c, 40, 0x40)])
    assert term.scan_frames(0, 2) == (b, [(0, 42, 0xC0), (a, 132, 0x80)])
    assert term.scan_frames(d, 10) == (d, [])  # nothing committed there yet
    with pytest.raises(ValueError, match="aligned"):
        term.scan_frames(8, 1)
