"""Native watches over many images, counters or deadlines at once: what pollers and agents use when idle."""

from __future__ import annotations

import array

import pytest

from driver.concurrent._watches import FrameWatch, PositionWatch, deadlines_due
from driver.concurrent.atomic_buffer import AtomicBuffer

TERM = 1024
BITS = 10  # log2(TERM)


def _image(position: int) -> tuple[AtomicBuffer, tuple[AtomicBuffer, AtomicBuffer, AtomicBuffer]]:
    pos = AtomicBuffer(bytearray(8))
    pos.put_long(0, position)
    terms = (AtomicBuffer(bytearray(TERM)), AtomicBuffer(bytearray(TERM)), AtomicBuffer(bytearray(TERM)))
    return pos, terms


def test_frame_watch_reports_only_positions_with_a_committed_frame() -> None:
    quiet = _image(0)
    arrived = _image(0)
    arrived[1][0].put_int_ordered(0, 64)
    second_term = _image(TERM + 128)  # term index 1, offset 128
    second_term[1][1].put_int_ordered(128, 32)
    wrong_term = _image(TERM + 128)
    wrong_term[1][0].put_int_ordered(128, 32)  # a frame, but in a term the position does not point into
    claimed = _image(0)
    claimed[1][0].put_int_ordered(0, -64)  # a claim not committed yet
    images = (quiet, arrived, second_term, wrong_term, claimed)
    watch = FrameWatch([(pos, 0, terms, BITS, TERM - 1) for pos, terms in images])
    assert len(watch) == 5
    assert watch.ready() == [1, 2]
    assert watch.ready() == [1, 2]  # a look changes nothing
    quiet[1][0].put_int_ordered(0, 32)
    assert watch.ready() == [0, 1, 2]
    assert FrameWatch([]).ready() == []


def test_frame_watch_reads_the_position_at_its_offset() -> None:
    counters = AtomicBuffer(bytearray(64))
    terms = (AtomicBuffer(bytearray(TERM)), AtomicBuffer(bytearray(TERM)), AtomicBuffer(bytearray(TERM)))
    counters.put_long_ordered(24, 2 * TERM + 64)
    watch = FrameWatch([(counters, 24, terms, BITS, TERM - 1)])
    assert watch.ready() == []
    terms[2].put_int_ordered(64, 40)
    assert watch.ready() == [0]


def test_frame_watch_skips_released_buffers_and_rejects_malformed_entries() -> None:
    pos, terms = _image(0)
    terms[0].put_int_ordered(0, 64)
    watch = FrameWatch([(pos, 0, terms, BITS, TERM - 1)])
    pos.release()
    assert watch.ready() == []
    with pytest.raises(TypeError, match="entry 0"):
        FrameWatch([(1, 2, 3)])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="3 terms"):
        FrameWatch([(AtomicBuffer(bytearray(8)), 0, (), BITS, TERM - 1)])
    with pytest.raises(IndexError):
        FrameWatch([(AtomicBuffer(bytearray(8)), 8, terms, BITS, TERM - 1)])
    with pytest.raises(ValueError, match="bits"):
        FrameWatch([(AtomicBuffer(bytearray(8)), 0, terms, 63, TERM - 1)])


def test_frame_watch_extended_watches_the_newcomers_after_those_it_held() -> None:
    first, second, third = _image(0), _image(0), _image(0)
    watch = FrameWatch([(pos, 0, terms, BITS, TERM - 1) for pos, terms in (first,)])
    watch.extend([(pos, 0, terms, BITS, TERM - 1) for pos, terms in (second, third)])
    assert len(watch) == 3
    third[1][0].put_int_ordered(0, 32)
    first[1][0].put_int_ordered(0, 32)
    assert watch.ready() == [0, 2]
    watch.extend([])
    assert len(watch) == 3
    # A malformed entry adds nothing, not even the good ones before it.
    with pytest.raises(TypeError, match="entry 1"):
        watch.extend([(second[0], 0, second[1], BITS, TERM - 1), (1, 2, 3)])  # type: ignore[list-item]
    with pytest.raises(IndexError):
        watch.extend([(second[0], 0, second[1], BITS, TERM - 1), (AtomicBuffer(bytearray(8)), 8, second[1], BITS, 1)])
    assert len(watch) == 3
    assert watch.ready() == [0, 2]
    grown = FrameWatch([])
    grown.extend([(pos, 0, terms, BITS, TERM - 1) for pos, terms in (first, second)])
    assert grown.ready() == [0]


def test_position_watch_reports_and_remembers_moved_counters() -> None:
    values = AtomicBuffer(bytearray(64))
    values.put_long_ordered(0, 7)
    watch = PositionWatch([(values, 0), (values, 8), (values, 16)])
    assert len(watch) == 3
    assert watch.changed() == []  # the values when it was made are the first look
    values.put_long_ordered(8, 5)
    values.put_long_ordered(16, -1)
    assert watch.changed() == [1, 2]
    assert watch.changed() == []
    values.put_long_ordered(0, 8)
    assert watch.changed() == [0]


def test_position_watch_with_a_step_reports_a_counter_once_it_grew_that_much_or_fell() -> None:
    values = AtomicBuffer(bytearray(16))
    values.put_long_ordered(0, 100)
    values.put_long_ordered(8, 100)
    watch = PositionWatch([(values, 0, 64), (values, 8)])
    values.put_long_ordered(0, 163)  # grown by less than its step: not yet
    values.put_long_ordered(8, 101)  # no step: any change
    assert watch.changed() == [1]
    values.put_long_ordered(0, 164)  # 64 past the value it last showed (the first look's)
    assert watch.changed() == [0]
    values.put_long_ordered(0, 200)
    assert watch.changed() == []
    values.put_long_ordered(0, 150)  # fell: shows at once
    assert watch.changed() == [0]
    values.put_long_ordered(0, 213)
    assert watch.changed() == []
    values.put_long_ordered(0, 214)
    assert watch.changed() == [0]
    with pytest.raises(ValueError, match="step"):
        PositionWatch([(values, 0, 0)])
    with pytest.raises(TypeError, match="entry 0"):
        PositionWatch([(values, 0, 1, 2)])  # type: ignore[list-item]


def test_position_watch_extended_keeps_what_it_saw_and_watches_the_newcomers_from_now() -> None:
    values = AtomicBuffer(bytearray(32))
    watch = PositionWatch([(values, 0)])
    values.put_long_ordered(0, 3)  # moved before the extension: still shows
    values.put_long_ordered(8, 9)  # the newcomer's value before it is watched: its first look
    watch.extend([(values, 8), (values, 16, 64)])
    assert len(watch) == 3
    assert watch.changed() == [0]
    values.put_long_ordered(8, 10)
    values.put_long_ordered(16, 63)  # below its step
    assert watch.changed() == [1]
    values.put_long_ordered(16, 64)
    assert watch.changed() == [2]
    for bad in ([(values, 24), (values, 32)], [(values, 24), (b"x", 0)]):  # a bad entry: none of them is taken
        with pytest.raises((IndexError, TypeError)):
            watch.extend(bad)  # type: ignore[arg-type]
        assert len(watch) == 3
    watch.extend([])
    assert len(watch) == 3
    empty = PositionWatch([])
    empty.extend([(values, 24)])
    values.put_long_ordered(24, 1)
    assert empty.changed() == [0]


def test_position_watch_checks_its_entries_and_skips_released_buffers() -> None:
    values = AtomicBuffer(bytearray(16))
    with pytest.raises(IndexError):
        PositionWatch([(values, 16)])
    with pytest.raises(TypeError, match="entry 0"):
        PositionWatch([(b"x", 0)])  # type: ignore[list-item]
    watch = PositionWatch([(values, 0)])
    values.release()
    assert watch.changed() == []


def test_deadlines_due_lists_the_slots_at_or_before_now() -> None:
    deadlines = array.array("q", [5, 0, 10, -1, 6])
    assert deadlines_due(deadlines, 5) == [0, 1, 3]
    assert deadlines_due(deadlines, 10) == [0, 1, 2, 3, 4]
    assert deadlines_due(array.array("q"), 0) == []
    with pytest.raises(ValueError, match="int64"):
        deadlines_due(bytearray(12), 0)
