"""The native frame functions (``driver.logbuffer._frames``): their arguments, and the subscriber's scan."""

from __future__ import annotations

from typing import Any

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer import _frames
from driver.logbuffer.scanner import scan_frames

TERM = 1024


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
    assert scan_frames(term, 0, 10) == (d, [(0, 42, 0xC0), (a, 132, 0x80), (c, 40, 0x40)])
    assert scan_frames(term, 0, 2) == (b, [(0, 42, 0xC0), (a, 132, 0x80)])
    assert scan_frames(term, d, 10) == (d, [])  # nothing committed there yet
    with pytest.raises(ValueError, match="aligned"):
        scan_frames(term, 8, 1)


class _Subclass(AtomicBuffer):
    pass


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("write_frame", (0, 0, 0, 0, b"", 0, 0)),
        ("write_frames", (0, 0, 0, 0, [])),
        ("scan_for_availability", (0, 64)),
        ("scan_frames", (0, 1)),
        ("first_gap", (0, 64)),
        ("insert_packet", (0, bytes(32), 32)),
        ("read_fragments", (0, 1, print, None, memoryview(bytearray(TERM)), None)),
    ],
)
def test_every_term_function_takes_an_atomic_buffer_first_and_counts_its_arguments(
    name: str, args: tuple[Any, ...]
) -> None:
    function = getattr(_frames, name)
    function(AtomicBuffer(bytearray(TERM)), *args)
    function(_Subclass(bytearray(TERM)), *args)  # a subclass is an AtomicBuffer too
    with pytest.raises(TypeError, match=f"{name}\\(\\) takes an AtomicBuffer first, not bytearray"):
        function(bytearray(TERM), *args)
    with pytest.raises(TypeError, match=f"{name}\\(\\) takes {len(args) + 1} arguments \\({len(args)} given\\)"):
        function(AtomicBuffer(bytearray(TERM)), *args[:-1])
