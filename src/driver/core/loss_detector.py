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

Gaps beyond the first (our addition; 1.15.1 NAKs one gap at a time). With the first gap
still open, the scan goes on past it, through ground it has not covered before (a
frontier remembers how far it got), and up to ``max_gaps_ahead`` further gaps are tracked
with the same timing rules: each is NAKed when found (unicast) or after a generated delay,
and again every delay while it stays empty. A gap that was NAKed ahead keeps its deadline
when it becomes the first gap, so it is not NAKed twice at once. Without this, every gap
of a window costs one round trip after the previous one is repaired, and under loss the
repairs queue behind the window's data in the receive socket (a 2 MB window at 5% loss
has a dozen gaps). Rebuild and delivery do not change: only the first gap holds the
rebuild position, so delivery stays in order and exactly once; ahead gaps only ask for
their data sooner. A tracked gap found filled (or passed by the rebuild position) is
dropped; what is left of a partly repaired one is tracked in its place.

Repeats back off (our addition, ``max_retry_ns``): after the first few, each further NAK for a gap still open
waits twice as long as the one before, up to ``max_retry_ns``. A repair that has not come by then has usually
not been lost: it is queued behind a backlog in our own receive socket (a receiver that fell behind, the case
where every gap of hundreds of images was NAKed every 10 ms and the senders' repairs added to the backlog they
were stuck behind). 0 (or no more than the delay) repeats at the generator's delay, as Aeron does.

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
from driver.int32 import int32
from driver.logbuffer.gap_scanner import first_gap, scan_for_gap

__all__ = [
    "MAX_GAPS_AHEAD_DEFAULT",
    "NAK_GROUPSIZE_DEFAULT",
    "NAK_GRTT_DEFAULT",
    "NAK_MAX_BACKOFF_DEFAULT_NS",
    "NAK_QUICK_REPEATS",
    "NAK_UNICAST_DELAY_DEFAULT_NS",
    "NAK_UNICAST_RETRY_CURRENT_NS",
    "FeedbackDelayGenerator",
    "LossDetector",
    "OptimalMulticastDelayGenerator",
    "StaticDelayGenerator",
]

NAK_UNICAST_DELAY_DEFAULT_NS = 60_000_000
NAK_UNICAST_RETRY_CURRENT_NS = 10_000_000
"""Today's Aeron repeats a unicast NAK every 10 ms (its 100 µs delay times its retry ratio of 100), not 60 ms.

It is the default of the driver's ``nak_unicast_retry_ns`` (``aeron.nak.unicast.retry``); 1.15.1's
60 ms is what costs the most under loss: a lost retransmission is asked for again only after 60 ms, often just
before the sender's 60 ms linger has freed the gap, so ignored and asked again at 120 ms, the
sender held at the window meanwhile. With this value and ``RETRANSMIT_UNICAST_LINGER_CURRENT_NS``
(and the gaps ahead), 5% receive loss kept 53-73% of the loss-free 3.0-3.8 M msgs/s (2026-11-23);
with 1.15.1's, 5-14%."""
NAK_QUICK_REPEATS = 3
"""NAKs of one gap sent at the generator's delay before the repeats back off (see ``max_retry_ns``)."""
MAX_GAPS_AHEAD_DEFAULT = 15
"""Gaps tracked beyond the first: with it, the sender's 16 retransmit actions (1.15.1) are all used."""
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


class _AheadGap:
    """A gap beyond the first: where it is, how long it was when last looked at, when to NAK it next."""

    __slots__ = ("deadline_ns", "length", "naks", "position", "term_offset")

    def __init__(self, term_offset: int, length: int, position: int, deadline_ns: int, naks: int = 0) -> None:
        self.term_offset = term_offset
        self.length = length
        self.position = position
        self.deadline_ns = deadline_ns
        self.naks = naks


class LossDetector:
    """Tracks the gaps of an image and calls back when a NAK is due.

    ``on_gap_detected(term_id, term_offset, length)`` runs inside :meth:`scan`.
    """

    __slots__ = (
        "_active_length",
        "_active_naks",
        "_active_term_id",
        "_active_term_offset",
        "_ahead",
        "_ahead_term_id",
        "_deadline_ns",
        "_delay_generator",
        "_frontier",
        "_max_gaps_ahead",
        "_max_retry_ns",
        "_next_ahead_deadline_ns",
        "_on_gap",
        "_on_gap_detected",
        "_scanned_length",
        "_scanned_term_id",
        "_scanned_term_offset",
    )

    def __init__(
        self,
        delay_generator: FeedbackDelayGenerator,
        on_gap_detected: Callable[[int, int, int], None],
        max_gaps_ahead: int = MAX_GAPS_AHEAD_DEFAULT,
        max_retry_ns: int = 0,
    ) -> None:
        """``max_gaps_ahead`` gaps beyond the first are NAKed too; 0 NAKs one gap at a time, as 1.15.1.
        ``max_retry_ns``: the longest wait between NAKs of one gap as they back off (0: no backoff)."""
        self._delay_generator = delay_generator
        self._on_gap_detected = on_gap_detected
        self._scanned_term_id = 0
        self._scanned_term_offset = -1
        self._scanned_length = 0
        self._active_term_id = 0
        self._active_term_offset = -1
        self._active_length = 0
        self._active_naks = 0
        self._deadline_ns = -1
        self._max_retry_ns = max_retry_ns
        self._on_gap = self._record_gap  # bound once: scan runs every duty cycle
        self._max_gaps_ahead = max(0, max_gaps_ahead)
        self._ahead: dict[int, _AheadGap] = {}  # by term offset, all in term ``_ahead_term_id``
        self._ahead_term_id = 0
        self._frontier = -1  # position up to which the scan ahead has looked
        self._next_ahead_deadline_ns = 0

    @property
    def max_gaps_ahead(self) -> int:
        return self._max_gaps_ahead

    @max_gaps_ahead.setter
    def max_gaps_ahead(self, value: int) -> None:
        self._max_gaps_ahead = max(0, value)
        if not self._max_gaps_ahead:
            self._ahead.clear()

    def next_deadline_ns(self) -> int:
        """When a scan next has a NAK to send for the gaps found so far, if nothing is repaired meanwhile (-1: no
        gap was ever found). Between deadlines a scan that no new data reached only finds the same gaps."""
        deadline = self._deadline_ns
        if self._ahead and self._next_ahead_deadline_ns < deadline:
            deadline = self._next_ahead_deadline_ns
        return deadline

    @property
    def gaps_ahead(self) -> list[tuple[int, int, int]]:
        """``(term_id, term_offset, length)`` of the gaps tracked beyond the first."""
        return [(self._ahead_term_id, gap.term_offset, gap.length) for gap in self._ahead.values()]

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
            if self._ahead:
                self._ahead.clear()
            return False, rebuild_offset

        rebuild_term_count = rebuild_position >> position_bits_to_shift
        if rebuild_term_count == hwm_position >> position_bits_to_shift:
            limit_offset = hwm_position & term_length_mask
        else:
            limit_offset = term_length_mask + 1
        term_id = int32(initial_term_id + rebuild_term_count)

        rebuild_offset = scan_for_gap(term, term_id, rebuild_offset, limit_offset, self._on_gap)
        loss_found = False
        if rebuild_offset < limit_offset:
            if self._scanned_term_offset != self._active_term_offset or self._scanned_term_id != self._active_term_id:
                self._activate_gap(now_ns)
                loss_found = True
            if self._deadline_ns - now_ns <= 0:
                self._on_gap_detected(self._active_term_id, self._active_term_offset, self._active_length)
                self._active_naks += 1
                self._deadline_ns = now_ns + self._retry_delay(self._active_naks)
            if self._max_gaps_ahead:
                term_base = rebuild_position - (rebuild_position & term_length_mask)
                self._scan_ahead(term, term_id, term_base, rebuild_offset + self._scanned_length, limit_offset, now_ns)
        elif self._ahead:
            self._ahead.clear()

        return loss_found, rebuild_offset

    def _scan_ahead(
        self, term: AtomicBuffer, term_id: int, term_base: int, begin: int, limit_offset: int, now_ns: int
    ) -> None:
        """Track and NAK gaps in ``[begin, limit_offset)`` of the term that starts at position ``term_base``."""
        ahead = self._ahead
        if ahead and self._ahead_term_id != term_id:
            ahead.clear()  # the rebuild position has moved into a later term: all of those are behind it
        self._ahead_term_id = term_id
        if ahead:
            first_gap_position = term_base + begin
            for offset in [o for o, gap in ahead.items() if gap.position < first_gap_position]:
                del ahead[offset]  # at or behind the first gap (which has its own timer), or repaired
            if ahead and self._next_ahead_deadline_ns - now_ns <= 0:
                self._on_ahead_deadlines(term, term_id, now_ns)
        offset = self._frontier - term_base
        if offset < begin:
            offset = begin
        generator = self._delay_generator
        immediate = generator.should_feedback_immediately()
        while offset < limit_offset and len(ahead) < self._max_gaps_ahead:
            gap_begin, gap_length = first_gap(term, offset, limit_offset)
            if not gap_length:
                offset = gap_begin
                break
            deadline_ns = now_ns if immediate else now_ns + generator.generate_delay()
            ahead[gap_begin] = _AheadGap(gap_begin, gap_length, term_base + gap_begin, deadline_ns)
            if immediate:
                self._on_gap_detected(term_id, gap_begin, gap_length)
                gap = ahead[gap_begin]
                gap.naks = 1
                gap.deadline_ns = now_ns + self._retry_delay(1)
            offset = gap_begin + gap_length
        if term_base + offset > self._frontier:
            self._frontier = term_base + offset
        self._next_ahead_deadline_ns = min((gap.deadline_ns for gap in ahead.values()), default=now_ns)

    def _on_ahead_deadlines(self, term: AtomicBuffer, term_id: int, now_ns: int) -> None:
        """NAK the ahead gaps whose time has come (what is still missing of them)."""
        ahead = self._ahead
        for offset, gap in list(ahead.items()):
            if gap.deadline_ns - now_ns > 0:
                continue
            del ahead[offset]
            gap_begin, gap_length = first_gap(term, offset, offset + gap.length)
            if not gap_length:
                continue  # repaired
            if gap_begin != offset:  # partly repaired: track what is left
                gap = _AheadGap(gap_begin, gap_length, gap.position + gap_begin - offset, 0, gap.naks)
            gap.length = gap_length
            ahead[gap_begin] = gap
            self._on_gap_detected(term_id, gap_begin, gap_length)
            gap.naks += 1
            gap.deadline_ns = now_ns + self._retry_delay(gap.naks)

    def _retry_delay(self, naks: int) -> int:
        """The wait before the next NAK of a gap already NAKed ``naks`` times: the generator's delay for the first
        few (a lost repair, or a NAK that met the sender's linger, is asked for again as quickly as before), then
        doubled with each repeat, up to ``max_retry_ns``."""
        delay = self._delay_generator.generate_delay()
        cap = self._max_retry_ns
        if naks <= NAK_QUICK_REPEATS or cap <= delay:
            return delay
        return min(delay << min(naks - NAK_QUICK_REPEATS, 30), cap)

    def _record_gap(self, term_id: int, offset: int, length: int) -> None:
        self._scanned_term_id = term_id
        self._scanned_term_offset = offset
        self._scanned_length = length

    def _activate_gap(self, now_ns: int) -> None:
        self._active_term_id = self._scanned_term_id
        self._active_term_offset = self._scanned_term_offset
        self._active_length = self._scanned_length
        tracked = self._ahead.pop(self._scanned_term_offset, None) if self._ahead else None
        self._active_naks = 0
        if tracked is not None and self._ahead_term_id == self._scanned_term_id:
            # Already NAKed as a gap ahead: keep its length, timer and backoff rather than NAK it again now.
            self._active_length = tracked.length
            self._deadline_ns = tracked.deadline_ns
            self._active_naks = tracked.naks
        elif self._delay_generator.should_feedback_immediately():
            self._deadline_ns = now_ns
        else:
            self._deadline_ns = now_ns + self._delay_generator.generate_delay()
