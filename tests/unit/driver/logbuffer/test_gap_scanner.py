from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer.gap_scanner import scan_for_gap

TL = 64 * 1024
TERM_ID = 0x7FFF_FFFF


class Gaps:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, term_id: int, offset: int, length: int) -> None:
        self.calls.append((term_id, offset, length))


def term_with(frames: list[tuple[int, int]]) -> AtomicBuffer:
    """frames: (offset, frame_length); only the length word matters to the scanner."""
    term = AtomicBuffer(bytearray(TL))
    for offset, length in frames:
        term.put_int(offset, length)
    return term


def test_no_gap_returns_limit_and_reports_nothing() -> None:
    term = term_with([(0, 64), (64, 33), (128, 32)])
    gaps = Gaps()
    assert scan_for_gap(term, TERM_ID, 0, 160, gaps) == 160
    assert gaps.calls == []


def test_contiguous_from_a_non_zero_rebuild_offset() -> None:
    term = term_with([(0, 32), (32, 64), (96, 40)])
    gaps = Gaps()
    assert scan_for_gap(term, TERM_ID, 32, 160, gaps) == 160
    assert gaps.calls == []


def test_empty_term_is_one_gap_up_to_limit() -> None:
    gaps = Gaps()
    assert scan_for_gap(term_with([]), TERM_ID, 0, 4096, gaps) == 0
    assert gaps.calls == [(TERM_ID, 0, 4096)]


def test_gap_ends_at_first_out_of_order_frame() -> None:
    term = term_with([(0, 64), (256, 64), (320, 32)])
    gaps = Gaps()
    assert scan_for_gap(term, TERM_ID, 0, 352, gaps) == 64
    assert gaps.calls == [(TERM_ID, 64, 192)]


def test_only_first_gap_reported() -> None:
    term = term_with([(0, 32), (64, 32), (160, 32)])
    gaps = Gaps()
    assert scan_for_gap(term, TERM_ID, 0, 1024, gaps) == 32
    assert gaps.calls == [(TERM_ID, 32, 32)]


def test_gap_runs_to_limit_when_nothing_follows() -> None:
    term = term_with([(0, 100)])
    gaps = Gaps()
    assert scan_for_gap(term, TERM_ID, 0, 1024, gaps) == 128
    assert gaps.calls == [(TERM_ID, 128, 896)]


def test_gap_to_end_of_term() -> None:
    term = term_with([(0, 32)])
    gaps = Gaps()
    assert scan_for_gap(term, 3, 0, TL, gaps) == 32
    assert gaps.calls == [(3, 32, TL - 32)]


def test_single_slot_gap_just_below_limit() -> None:
    term = term_with([(0, 32)])
    gaps = Gaps()
    assert scan_for_gap(term, 1, 0, 64, gaps) == 32
    assert gaps.calls == [(1, 32, 32)]


def test_frame_straddling_limit_counts_as_contiguous() -> None:
    term = term_with([(0, 32), (32, 200)])
    gaps = Gaps()
    assert scan_for_gap(term, 1, 0, 64, gaps) == 256
    assert gaps.calls == []


def test_uncommitted_negative_length_is_a_gap() -> None:
    term = term_with([(0, 32), (32, -64), (96, 32)])
    gaps = Gaps()
    assert scan_for_gap(term, 1, 0, 128, gaps) == 32
    # as in Java the gap's first slot is not re-read: the gap runs to the next non-zero slot
    assert gaps.calls == [(1, 32, 64)]


def reference_first_gap(filled: set[int], start: int, limit: int) -> tuple[int, int] | None:
    """Slot model: every filled slot holds a 32-byte frame."""
    offset = start
    while offset < limit and offset in filled:
        offset += 32
    if offset >= limit:
        return None
    end = offset + 32
    while end < limit and end not in filled:
        end += 32
    return offset, end - offset


@settings(max_examples=300, deadline=None)
@given(
    st.sets(st.integers(0, 127)),
    st.integers(0, 127),
    st.integers(1, 128),
)
def test_matches_slot_model(slots: set[int], start_slot: int, extra: int) -> None:
    limit_slot = min(128, start_slot + extra)
    filled = {s * 32 for s in slots}
    term = term_with([(off, 32) for off in filled])
    gaps = Gaps()
    result = scan_for_gap(term, 11, start_slot * 32, limit_slot * 32, gaps)
    expected = reference_first_gap(filled, start_slot * 32, limit_slot * 32)
    if expected is None:
        assert result == limit_slot * 32
        assert gaps.calls == []
    else:
        assert result == expected[0]
        assert gaps.calls == [(11, *expected)]
