"""Repeated NAKs of a gap that stays open back off after the first few (doubling up to ``max_retry_ns``); a new gap
starts afresh."""

from __future__ import annotations

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.config import DriverContext
from driver.core.loss_detector import LossDetector, StaticDelayGenerator

TL = 64 * 1024
MASK = TL - 1
BITS = 16
INITIAL = 7
MS = 1_000_000
RETRY = 10 * MS


class Image:
    """One term and a detector on a manual clock; every NAK recorded with its time."""

    def __init__(self, max_retry_ns: int, max_gaps_ahead: int = 15) -> None:
        self.term = AtomicBuffer(bytearray(TL))
        self.now = 0
        self.naks: list[tuple[int, int, int]] = []
        self.detector = LossDetector(StaticDelayGenerator(RETRY, True), self._nak, max_gaps_ahead, max_retry_ns)

    def _nak(self, term_id: int, offset: int, length: int) -> None:
        self.naks.append((self.now, offset, length))

    def frame(self, offset: int, length: int = 32) -> None:
        self.term.put_int(offset, length)

    def run(self, hwm: int, until_ns: int, step_ns: int = MS, rebuild: int = 32) -> None:
        """Scan every ``step_ns`` up to ``until_ns`` (a busy receiver's duty cycles)."""
        while self.now <= until_ns:
            self.detector.scan(self.term, rebuild, hwm, self.now, MASK, BITS, INITIAL)
            self.now += step_ns

    def times(self, offset: int) -> list[int]:
        return [t // MS for t, o, _ in self.naks if o == offset]


def test_repeats_of_an_open_gap_double_up_to_the_cap() -> None:
    img = Image(max_retry_ns=80 * MS)
    img.frame(0)
    img.frame(64)
    img.run(hwm=96, until_ns=400 * MS)
    # at once, three quick repeats 10 ms apart, then 20, 40, 80, 80, ... ms apart
    assert img.times(32) == [0, 10, 20, 30, 50, 90, 170, 250, 330]


def test_without_a_cap_repeats_keep_the_fixed_interval_as_aeron() -> None:
    img = Image(max_retry_ns=0)
    img.frame(0)
    img.frame(64)
    img.run(hwm=96, until_ns=50 * MS)
    assert img.times(32) == [0, 10, 20, 30, 40, 50]


def test_a_new_gap_is_naked_at_once_and_backs_off_from_the_start() -> None:
    img = Image(max_retry_ns=640 * MS)
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.run(hwm=160, until_ns=100 * MS)
    assert img.times(32) == [0, 10, 20, 30, 50, 90]
    img.frame(32)  # the first gap repaired: the second one (96) becomes the first
    img.run(hwm=160, until_ns=200 * MS, rebuild=96)
    # it was NAKed as a gap ahead with its own backoff, which it keeps as the first gap
    assert img.times(96) == [0, 10, 20, 30, 50, 90, 170]


def test_gaps_ahead_back_off_each_on_its_own() -> None:
    img = Image(max_retry_ns=640 * MS)
    img.frame(0)
    img.frame(64)
    img.frame(128)
    img.run(hwm=160, until_ns=5 * MS)
    img.frame(192)  # data past the hwm: a third gap (160) found later
    img.run(hwm=224, until_ns=100 * MS)
    assert img.times(96) == [0, 10, 20, 30, 50, 90]
    assert img.times(160) == [6, 16, 26, 36, 56, 96]


def test_the_driver_backs_off_by_default_and_can_be_told_not_to() -> None:
    assert DriverContext().nak_retry_max_ns == 640 * MS
    assert DriverContext(nak_retry_max_ns=0).nak_retry_max_ns == 0
