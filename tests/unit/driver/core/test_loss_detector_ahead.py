"""The loss detector's gaps beyond the first: NAKed when found, with the same timers, never changing delivery."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.core.loss_detector import (
    MAX_GAPS_AHEAD_DEFAULT,
    FeedbackDelayGenerator,
    LossDetector,
    StaticDelayGenerator,
)

TL = 64 * 1024
MASK = TL - 1
BITS = 16
INITIAL = 7
MS = 1_000_000
DELAY = 60 * MS


class Image:
    """One term of an image plus a detector driven with a manual clock; NAKs recorded with their time."""

    def __init__(self, generator: FeedbackDelayGenerator | None = None, max_gaps_ahead: int | None = None) -> None:
        self.term = AtomicBuffer(bytearray(TL))
        self.naks: list[tuple[int, int, int]] = []
        self.now = 0
        self.times: list[int] = []
        generator = generator or StaticDelayGenerator(DELAY, True)
        if max_gaps_ahead is None:
            self.detector = LossDetector(generator, self._nak)
        else:
            self.detector = LossDetector(generator, self._nak, max_gaps_ahead)

    def _nak(self, term_id: int, offset: int, length: int) -> None:
        self.naks.append((term_id, offset, length))
        self.times.append(self.now)

    def frame(self, offset: int, length: int = 32) -> None:
        self.term.put_int(offset, length)

    def scan(self, rebuild: int, hwm: int, now_ns: int) -> tuple[bool, int]:
        self.now = now_ns
        return self.detector.scan(self.term, rebuild, hwm, now_ns, MASK, BITS, INITIAL)


def test_default_tracks_fifteen_gaps_ahead() -> None:
    assert MAX_GAPS_AHEAD_DEFAULT == 15


def test_every_gap_is_naked_at_once_for_unicast() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(128, 64)
    img.frame(256)
    assert img.scan(0, 288, 0) == (True, 32)
    assert img.naks == [(INITIAL, 32, 32), (INITIAL, 96, 32), (INITIAL, 192, 64)]
    assert img.detector.gaps_ahead == [(INITIAL, 96, 32), (INITIAL, 192, 64)]
    assert img.scan(32, 288, 1) == (False, 32)  # nothing new: no repeats before the delay
    assert len(img.naks) == 3


def test_no_gaps_ahead_is_1_15_1() -> None:
    img = Image(max_gaps_ahead=0)
    img.frame(0)
    img.frame(64)
    img.frame(128)
    assert img.scan(0, 160, 0) == (True, 32)
    assert img.naks == [(INITIAL, 32, 32)]
    img.frame(32)
    assert img.scan(32, 160, 1) == (True, 96)
    assert img.naks == [(INITIAL, 32, 32), (INITIAL, 96, 32)]


def test_a_gap_naked_ahead_keeps_its_timer_when_it_becomes_the_first() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.scan(0, 160, 0)
    img.frame(32)  # the first gap is repaired; the one at 96 is first now
    assert img.scan(32, 160, 10 * MS) == (True, 96)
    assert img.naks == [(INITIAL, 32, 32), (INITIAL, 96, 32)]  # not NAKed again at once
    img.scan(96, 160, DELAY - 1)
    assert len(img.naks) == 2
    img.scan(96, 160, DELAY)
    assert img.naks[-1] == (INITIAL, 96, 32)
    assert img.times == [0, 0, DELAY]


def test_gaps_ahead_are_naked_again_every_delay_while_empty() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.scan(0, 160, 0)
    img.scan(32, 160, DELAY)
    assert sorted(img.naks[2:]) == [(INITIAL, 32, 32), (INITIAL, 96, 32)]
    img.scan(32, 160, 2 * DELAY - 1)
    assert len(img.naks) == 4
    img.scan(32, 160, 2 * DELAY)
    assert len(img.naks) == 6


def test_a_repaired_gap_ahead_is_dropped() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.scan(0, 160, 0)
    img.frame(96)  # the gap ahead is repaired, the first is not
    img.scan(32, 160, DELAY)
    assert img.naks[2:] == [(INITIAL, 32, 32)]
    assert img.detector.gaps_ahead == []


def test_what_is_left_of_a_partly_repaired_gap_ahead_is_naked() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(256)
    img.scan(0, 288, 0)
    assert img.naks == [(INITIAL, 32, 32), (INITIAL, 96, 160)]
    img.frame(96, 64)  # the first 64 bytes of the gap ahead arrive
    img.scan(32, 288, DELAY)
    assert sorted(img.naks[2:]) == [(INITIAL, 32, 32), (INITIAL, 160, 96)]
    assert img.detector.gaps_ahead == [(INITIAL, 160, 96)]


def test_at_most_max_gaps_ahead_are_tracked_the_rest_found_later() -> None:
    img = Image(max_gaps_ahead=2)
    for offset in range(0, 320, 64):  # frames at 0, 64, ..., 256; gaps at 32, 96, 160, 224, 288
        img.frame(offset)
    img.frame(320)
    assert img.scan(0, 352, 0) == (True, 32)
    assert [n[1] for n in img.naks] == [32, 96, 160]
    img.frame(32)
    img.frame(96)
    img.scan(32, 352, 1)  # 160 is first now (NAKed already); room for two more ahead
    assert [n[1] for n in img.naks] == [32, 96, 160, 224, 288]


def test_delayed_feedback_applies_to_gaps_ahead() -> None:
    img = Image(StaticDelayGenerator(20 * MS, False))
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.scan(0, 160, 0)
    assert img.naks == []
    img.scan(32, 160, 20 * MS)
    assert sorted(img.naks) == [(INITIAL, 32, 32), (INITIAL, 96, 32)]


def test_rebuild_in_a_later_term_forgets_the_gaps_of_the_earlier() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.scan(0, 160, 0)
    assert img.detector.gaps_ahead
    img.scan(TL, TL + 160, 1)  # the next term (the same buffer here): its own gaps, with its term id
    assert img.detector.gaps_ahead == [(INITIAL + 1, 96, 32)]
    assert img.naks[-2:] == [(INITIAL + 1, 32, 32), (INITIAL + 1, 96, 32)]


def test_caught_up_clears_the_gaps_ahead() -> None:
    img = Image()
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.scan(0, 160, 0)
    img.frame(32)
    img.frame(96)
    assert img.scan(32, 160, 1) == (False, 160)
    assert img.detector.gaps_ahead == []


# -- against the one-gap-at-a-time detector ------------------------------------------------------


SLOTS = 48  # 32-byte slots in the scanned part of the term


@settings(max_examples=200, deadline=None)
@given(
    present=st.lists(st.booleans(), min_size=SLOTS, max_size=SLOTS),
    repairs=st.lists(st.tuples(st.integers(0, SLOTS - 1), st.integers(0, 40 * MS)), max_size=30),
    delayed=st.booleans(),
)
def test_same_rebuild_as_one_gap_at_a_time_and_naks_only_name_empty_slots(
    present: list[bool], repairs: list[tuple[int, int]], delayed: bool
) -> None:
    """Delivery (the rebuild offset) never differs from 1.15.1's detector; every NAK names empty slots,
    and no gap is NAKed again within the delay."""
    present[-1] = True  # the hwm is the end of a received frame
    generator = StaticDelayGenerator(DELAY, not delayed)
    ours, reference = Image(generator), Image(generator, max_gaps_ahead=0)
    for slot, here in enumerate(present):
        if here:
            ours.frame(slot * 32)
            reference.frame(slot * 32)
    hwm = SLOTS * 32
    now = rebuild = 0
    for slot, step in [(-1, 0), *repairs, (-1, 10 * DELAY)]:
        now += step
        if slot >= 0:
            ours.frame(slot * 32)
            reference.frame(slot * 32)
        before = len(ours.naks)
        _, offset = ours.scan(rebuild, hwm, now)
        _, reference_offset = reference.scan(rebuild, hwm, now)
        assert offset == reference_offset
        for _, gap_offset, length in ours.naks[before:]:
            assert length > 0
            assert ours.term.get_int(gap_offset) == 0  # the NAK names a hole
        rebuild = offset
    last: dict[int, int] = {}
    for (_, gap_offset, _), at in zip(ours.naks, ours.times, strict=True):
        if gap_offset in last:
            assert at - last[gap_offset] >= DELAY
        last[gap_offset] = at
