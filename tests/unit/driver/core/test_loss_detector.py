from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.core.loss_detector import (
    NAK_GROUPSIZE_DEFAULT,
    NAK_MAX_BACKOFF_DEFAULT_NS,
    NAK_UNICAST_DELAY_DEFAULT_NS,
    FeedbackDelayGenerator,
    LossDetector,
    OptimalMulticastDelayGenerator,
    StaticDelayGenerator,
)

TL = 64 * 1024
MASK = TL - 1
BITS = 16
INITIAL = 7
MS = 1_000_000


class Naks:
    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []

    def __call__(self, term_id: int, offset: int, length: int) -> None:
        self.calls.append((term_id, offset, length))


class Image:
    """One term of an image plus a detector driven with a manual clock."""

    def __init__(self, generator: FeedbackDelayGenerator, initial_term_id: int = INITIAL) -> None:
        self.term = AtomicBuffer(bytearray(TL))
        self.naks = Naks()
        self.detector = LossDetector(generator, self.naks)
        self.initial_term_id = initial_term_id

    def frame(self, offset: int, length: int = 32) -> None:
        self.term.put_int(offset, length)

    def scan(self, rebuild: int, hwm: int, now_ns: int) -> tuple[bool, int]:
        return self.detector.scan(self.term, rebuild, hwm, now_ns, MASK, BITS, self.initial_term_id)


def unicast() -> Image:
    return Image(StaticDelayGenerator(NAK_UNICAST_DELAY_DEFAULT_NS, True))


def test_defaults_match_1_15_1() -> None:
    assert NAK_UNICAST_DELAY_DEFAULT_NS == 60 * MS
    assert NAK_MAX_BACKOFF_DEFAULT_NS == 60 * MS
    assert NAK_GROUPSIZE_DEFAULT == 10


def test_no_gap_advances_rebuild_to_hwm_without_naks() -> None:
    img = unicast()
    img.frame(0, 64)
    img.frame(64, 32)
    assert img.scan(0, 96, 0) == (False, 96)
    assert img.naks.calls == []


def test_rebuild_at_or_past_hwm_does_not_scan() -> None:
    img = unicast()
    assert img.scan(TL + 96, TL + 96, 0) == (False, 96)
    assert img.scan(TL + 128, TL + 96, 0) == (False, 128)
    assert img.naks.calls == []


def test_unicast_first_nak_immediate_then_every_60ms() -> None:
    img = unicast()
    img.frame(0)
    img.frame(128)
    t0 = 5 * 10**9
    assert img.scan(0, 160, t0) == (True, 32)
    assert img.naks.calls == [(INITIAL, 32, 96)]
    assert img.scan(32, 160, t0 + 1) == (False, 32)
    assert img.scan(32, 160, t0 + 60 * MS - 1) == (False, 32)
    assert len(img.naks.calls) == 1
    assert img.scan(32, 160, t0 + 60 * MS) == (False, 32)
    assert len(img.naks.calls) == 2
    # re-armed from when it fired: a late duty cycle does not make NAKs bunch up
    assert img.scan(32, 160, t0 + 130 * MS) == (False, 32)
    assert img.scan(32, 160, t0 + 189 * MS) == (False, 32)
    assert len(img.naks.calls) == 3
    assert img.scan(32, 160, t0 + 190 * MS) == (False, 32)
    assert img.naks.calls == [(INITIAL, 32, 96)] * 4


def test_repaired_gap_stops_naks_and_rebuild_moves_on() -> None:
    img = unicast()
    img.frame(0)
    img.frame(64)
    assert img.scan(0, 96, 0) == (True, 32)
    img.frame(32)
    assert img.scan(32, 96, 60 * MS) == (False, 96)
    assert img.scan(96, 96, 120 * MS) == (False, 96)
    assert img.naks.calls == [(INITIAL, 32, 32)]


def test_new_gap_is_activated_and_naked_immediately() -> None:
    img = unicast()
    img.frame(0)
    img.frame(64, 64)
    img.frame(128)
    assert img.scan(0, 160, 0) == (True, 32)
    img.frame(32)
    assert img.scan(32, 224, 1 * MS) == (True, 160)  # hwm moved on: nothing at 160..224
    assert img.naks.calls == [(INITIAL, 32, 32), (INITIAL, 160, 64)]


def test_nak_keeps_the_length_seen_at_activation() -> None:
    img = unicast()
    img.frame(0)
    assert img.scan(0, 128, 0) == (True, 32)
    img.frame(96)  # part of the gap repaired: the gap now ends at 96, same start
    assert img.scan(32, 128, 60 * MS) == (False, 32)
    assert img.naks.calls == [(INITIAL, 32, 96), (INITIAL, 32, 96)]


def test_hwm_in_next_term_scans_to_end_of_term() -> None:
    img = unicast()
    img.frame(0)
    assert img.scan(0, TL + 64, 0) == (True, 32)
    assert img.naks.calls == [(INITIAL, 32, TL - 32)]


def test_gap_in_later_term_uses_that_term_id() -> None:
    img = unicast()
    term_begin = 3 * TL
    img.frame(0)
    assert img.scan(term_begin, term_begin + 64, 0) == (True, 32)
    assert img.naks.calls == [(INITIAL + 3, 32, 32)]


def test_term_id_wraps_like_int32() -> None:
    img = Image(StaticDelayGenerator(60 * MS, True), initial_term_id=0x7FFF_FFFF)
    assert img.scan(2 * TL, 2 * TL + 64, 0) == (True, 0)
    assert img.naks.calls == [(-0x8000_0000 + 1, 0, 64)]


def test_same_offset_in_another_term_is_a_new_gap() -> None:
    img = unicast()
    assert img.scan(0, 64, 0) == (True, 0)
    assert img.scan(TL, TL + 64, 1) == (True, 0)
    assert img.naks.calls == [(INITIAL, 0, 64), (INITIAL + 1, 0, 64)]


def test_delayed_feedback_waits_for_first_delay() -> None:
    img = Image(StaticDelayGenerator(20 * MS, False))
    assert img.scan(0, 64, 1000) == (True, 0)
    assert img.naks.calls == []
    assert img.scan(0, 64, 1000 + 20 * MS - 1) == (False, 0)
    assert img.naks.calls == []
    img.scan(0, 64, 1000 + 20 * MS)
    assert img.naks.calls == [(INITIAL, 0, 64)]


def test_deadline_comparison_tolerates_negative_clock_values() -> None:
    img = unicast()
    assert img.scan(0, 64, -10 * MS) == (True, 0)
    img.scan(0, 64, 50 * MS)
    assert len(img.naks.calls) == 2


class Fixed:
    def __init__(self, values: list[float]) -> None:
        self.values = values

    def __call__(self) -> float:
        return self.values.pop(0)


def java_delay(t: float, group_size: float, u: float) -> float:
    lam = math.log(group_size) + 1
    x = u * (lam / t) + lam / (t * (math.exp(lam) - 1))
    return (t / lam) * math.log(x * (math.exp(lam) - 1) * (t / lam))


def test_optimal_multicast_formula_and_bounds_at_the_ends() -> None:
    t = float(NAK_MAX_BACKOFF_DEFAULT_NS)
    gen = OptimalMulticastDelayGenerator(t, NAK_GROUPSIZE_DEFAULT, Fixed([0.0, 0.5, 1.0 - 1e-12]))
    assert not gen.should_feedback_immediately()
    assert gen.generate_delay() == 0
    assert gen.generate_delay() == int(java_delay(t, 10, 0.5))
    last = gen.generate_delay()
    assert t - 1000 < last <= t


@settings(max_examples=300, deadline=None)
@given(
    st.floats(0.0, 1.0, exclude_max=True),
    st.integers(1, 1000),
    st.integers(1_000, 10**10),
)
def test_optimal_multicast_delay_within_zero_and_max_backoff(u: float, group: int, t: int) -> None:
    gen = OptimalMulticastDelayGenerator(t, group, lambda: u)
    delay = gen.generate_delay()
    assert 0 <= delay <= t
    assert delay == pytest.approx(int(java_delay(t, group, u)), abs=1)


def test_optimal_multicast_seeded_rng_is_deterministic() -> None:
    a = OptimalMulticastDelayGenerator(60 * MS, 10, random.Random(1234))
    b = OptimalMulticastDelayGenerator(60 * MS, 10, random.Random(1234).random)
    seq_a = [a.generate_delay() for _ in range(50)]
    assert seq_a == [b.generate_delay() for _ in range(50)]
    assert len(set(seq_a)) > 40
    assert all(0 <= v < 60 * MS for v in seq_a)


def test_optimal_multicast_calculated_n_and_argument_checks() -> None:
    gen = OptimalMulticastDelayGenerator(60.0, 10, random.Random(0), grtt=10.0)
    lam = math.log(10) + 1
    assert gen.calculated_n == pytest.approx(math.exp(1.2 * lam / (2 * 60.0 / 10.0)))
    with pytest.raises(ValueError, match="max_backoff_ns"):
        OptimalMulticastDelayGenerator(0, 10)
    with pytest.raises(ValueError, match="group_size"):
        OptimalMulticastDelayGenerator(60 * MS, 0)


def test_multicast_detector_randomised_within_bounds() -> None:
    rng = random.Random(99)
    img = Image(OptimalMulticastDelayGenerator(NAK_MAX_BACKOFF_DEFAULT_NS, NAK_GROUPSIZE_DEFAULT, rng))
    now = 0
    assert img.scan(0, 64, now) == (True, 0)
    fired: list[int] = []
    step = MS // 2
    for _ in range(2000):  # 1 s of duty cycles at 0.5 ms
        now += step
        before = len(img.naks.calls)
        img.scan(0, 64, now)
        if len(img.naks.calls) > before:
            fired.append(now)
    assert fired
    assert fired[0] <= 60 * MS + step
    gaps = [b - a for a, b in zip([0, *fired], fired, strict=False)]
    assert all(g <= 60 * MS + step for g in gaps)
    assert len(set(gaps)) > 1  # randomised, not a fixed period


def test_static_generator() -> None:
    gen = StaticDelayGenerator(5, True)
    assert gen.generate_delay() == 5
    assert gen.should_feedback_immediately()
    assert not StaticDelayGenerator(5).should_feedback_immediately()
    assert "delay_ns=5" in repr(gen)
