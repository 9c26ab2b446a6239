"""Receiver loss detection and NAK timing (1.15.1 ``LossDetector`` and feedback delay generators).

Theory of operation
-------------------
Each receiver duty cycle the image calls :meth:`LossDetector.scan` with its rebuild and
high-water-mark positions. The scan walks the term from the rebuild offset (see
``driver.logbuffer.gap_scanner``) up to the hwm — or to the end of the term when the hwm
is already in a later term — and finds at most one gap.

* A gap whose (term id, offset) differs from the active one becomes active; its deadline
  is *now* if the delay generator asks for immediate feedback, else now + a generated
  delay. ``loss found`` is reported only on activation (congestion control input).
* Whenever the active gap is still there and its deadline has passed, ``on_gap_detected
  (term_id, offset, length)`` is called (the image sends a NAK, or pads the gap when
  unreliable) and the deadline is re-armed to now + a fresh delay — so NAKs repeat
  while the gap persists.

The gap's length may change between scans (part of it repaired) without re-activation;
the latest scanned length is not used, as in Java: the NAK carries the length seen at
activation.

Delay generators (1.15.1 defaults): unicast uses ``StaticDelayGenerator(60 ms,
immediate)`` — first NAK at once, then every 60 ms; multicast uses
``OptimalMulticastDelayGenerator(60 ms, 10)``, a randomised backoff in ``[0, 60 ms)``
that spreads NAKs from a group of receivers (Nak suppression, "optimal" per Nonnenmacher
and Biersack).
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Protocol

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer.gap_scanner import scan_for_gap

__all__ = [
    "NAK_GROUPSIZE_DEFAULT",
    "NAK_GRTT_DEFAULT",
    "NAK_MAX_BACKOFF_DEFAULT_NS",
    "NAK_UNICAST_DELAY_DEFAULT_NS",
    "FeedbackDelayGenerator",
    "LossDetector",
    "OptimalMulticastDelayGenerator",
    "StaticDelayGenerator",
]

NAK_UNICAST_DELAY_DEFAULT_NS = 60_000_000
NAK_MAX_BACKOFF_DEFAULT_NS = 60_000_000
NAK_GROUPSIZE_DEFAULT = 10
NAK_GRTT_DEFAULT = 10
"""1.15.1 passes gRTT in ms next to a backoff in ns; it only feeds ``calculated_n``."""


class FeedbackDelayGenerator(Protocol):
    def generate_delay(self) -> int:
        """Next delay in nanoseconds."""
        ...

    def should_feedback_immediately(self) -> bool:
        """True if a newly found gap is NAKed at once rather than after a first delay."""
        ...


class StaticDelayGenerator:
    """The same delay every time (unicast NAKs; also usable for retransmit delay/linger)."""

    __slots__ = ("_delay_ns", "_immediate")

    def __init__(self, delay_ns: int, immediate_feedback: bool = False) -> None:
        self._delay_ns = delay_ns
        self._immediate = immediate_feedback

    def generate_delay(self) -> int:
        return self._delay_ns

    def should_feedback_immediately(self) -> bool:
        return self._immediate

    def __repr__(self) -> str:
        return f"StaticDelayGenerator(delay_ns={self._delay_ns}, immediate_feedback={self._immediate})"


class OptimalMulticastDelayGenerator:
    """Randomised NAK backoff for multicast (1.15.1 formulas).

    With T the max backoff and lambda = ln(group_size) + 1, draw x uniformly from
    ``[lambda/(T(e^lambda - 1)), lambda/T + lambda/(T(e^lambda - 1)))`` and return
    ``(T/lambda) * ln(x (e^lambda - 1) T/lambda)``, truncated to an int — a value in
    ``[0, T)`` skewed towards T so that few receivers of a group NAK early.

    ``rng`` is a ``random.Random`` or a zero-argument callable returning a float in
    ``[0, 1)``; inject one for deterministic tests.
    """

    __slots__ = ("_base_x", "_calculated_n", "_constant_t", "_factor_t", "_rand_max", "_random")

    def __init__(
        self,
        max_backoff_ns: float,
        group_size: float,
        rng: random.Random | Callable[[], float] | None = None,
        *,
        grtt: float = NAK_GRTT_DEFAULT,
    ) -> None:
        if max_backoff_ns <= 0:
            raise ValueError(f"max_backoff_ns must be > 0, got {max_backoff_ns}")
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        lam = math.log(group_size) + 1.0
        e_lam_1 = math.exp(lam) - 1.0
        self._calculated_n = math.exp(1.2 * lam / (2.0 * max_backoff_ns / grtt))
        self._rand_max = lam / max_backoff_ns
        self._base_x = lam / (max_backoff_ns * e_lam_1)
        self._constant_t = max_backoff_ns / lam
        self._factor_t = e_lam_1 * (max_backoff_ns / lam)
        if rng is None:
            self._random: Callable[[], float] = random.random
        elif isinstance(rng, random.Random):
            self._random = rng.random
        else:
            self._random = rng

    def generate_delay(self) -> int:
        return int(self.generate_new_optimal_delay())

    def generate_new_optimal_delay(self) -> float:
        """The delay before truncation, in the units of ``max_backoff_ns``."""
        x = self._random() * self._rand_max + self._base_x
        return self._constant_t * math.log(x * self._factor_t)

    def should_feedback_immediately(self) -> bool:
        return False

    @property
    def calculated_n(self) -> float:
        """Estimated feedback messages per RTT (informational, as in Java)."""
        return self._calculated_n


class LossDetector:
    """Tracks the first gap of an image and calls back when a NAK is due.

    ``on_gap_detected(term_id, term_offset, length)`` runs inside :meth:`scan`.
    """

    __slots__ = (
        "_active_length",
        "_active_term_id",
        "_active_term_offset",
        "_deadline_ns",
        "_delay_generator",
        "_on_gap",
        "_on_gap_detected",
        "_scanned_length",
        "_scanned_term_id",
        "_scanned_term_offset",
    )

    def __init__(
        self, delay_generator: FeedbackDelayGenerator, on_gap_detected: Callable[[int, int, int], None]
    ) -> None:
        self._delay_generator = delay_generator
        self._on_gap_detected = on_gap_detected
        self._scanned_term_id = 0
        self._scanned_term_offset = -1
        self._scanned_length = 0
        self._active_term_id = 0
        self._active_term_offset = -1
        self._active_length = 0
        self._deadline_ns = -1
        self._on_gap = self._record_gap  # bound once: scan runs every duty cycle

    def scan(
        self,
        term: AtomicBuffer,
        rebuild_position: int,
        hwm_position: int,
        now_ns: int,
        term_length_mask: int,
        position_bits_to_shift: int,
        initial_term_id: int,
    ) -> tuple[bool, int]:
        """Scan the term between rebuild and hwm; return (loss found, new rebuild offset)."""
        rebuild_offset = rebuild_position & term_length_mask
        if rebuild_position >= hwm_position:
            return False, rebuild_offset

        rebuild_term_count = rebuild_position >> position_bits_to_shift
        if rebuild_term_count == hwm_position >> position_bits_to_shift:
            limit_offset = hwm_position & term_length_mask
        else:
            limit_offset = term_length_mask + 1
        term_id = ((initial_term_id + rebuild_term_count + 0x8000_0000) & 0xFFFF_FFFF) - 0x8000_0000

        rebuild_offset = scan_for_gap(term, term_id, rebuild_offset, limit_offset, self._on_gap)
        loss_found = False
        if rebuild_offset < limit_offset:
            if self._scanned_term_offset != self._active_term_offset or self._scanned_term_id != self._active_term_id:
                self._activate_gap(now_ns)
                loss_found = True
            if self._deadline_ns - now_ns <= 0:
                self._on_gap_detected(self._active_term_id, self._active_term_offset, self._active_length)
                self._deadline_ns = now_ns + self._delay_generator.generate_delay()

        return loss_found, rebuild_offset

    def _record_gap(self, term_id: int, offset: int, length: int) -> None:
        self._scanned_term_id = term_id
        self._scanned_term_offset = offset
        self._scanned_length = length

    def _activate_gap(self, now_ns: int) -> None:
        self._active_term_id = self._scanned_term_id
        self._active_term_offset = self._scanned_term_offset
        self._active_length = self._scanned_length
        if self._delay_generator.should_feedback_immediately():
            self._deadline_ns = now_ns
        else:
            self._deadline_ns = now_ns + self._delay_generator.generate_delay()
