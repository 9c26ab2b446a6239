"""Sender-side NAK handling: resend what a receiver reports missing, once per burst of NAKs.

Theory of operation (Aeron 1.15.1 ``RetransmitHandler``, reference §3.6):

- A NAK names (term_id, term_offset, length). Offsets outside ``[0, term_length - 32]`` are
  invalid: counted (INVALID_PACKETS) and ignored. So are offsets not on a 32-byte frame boundary
  (1.15.1 does not check; its resend would scan from the middle of a frame, ours would raise).
- Each accepted NAK takes one of ``max_actions`` (16) slots keyed by (term_id, term_offset). While
  a slot for that key is active, further NAKs for it are ignored -- this absorbs the repeats a
  receiver (or many multicast receivers) send for the same gap. When all slots are busy the NAK
  is dropped; the receiver will NAK again.
- The length is clipped to the end of the term.
- The delay generator decides when to resend: 0 (the 1.15.1 default) resends at once; otherwise
  the slot is DELAYED and ``process_timeouts`` resends when the delay has passed.
- After resending, the slot LINGERs for the linger generator's time (60 ms by default) so NAKs
  still in flight for the data just resent do not trigger a second resend; then it is freed.
- Deadlines expire strictly after their time (``now_ns > expiry``), as in 1.15.1.

Sans-IO: time comes in as ``now_ns`` and resending is a callback
``resend(term_id, term_offset, length)`` (the publication scans and sends the frames).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from driver.errors import DriverConfigurationError, DriverError
from driver.logbuffer.frame import FRAME_ALIGNMENT, HEADER_LENGTH

__all__ = [
    "MAX_RETRANSMITS_DEFAULT",
    "RETRANSMIT_UNICAST_DELAY_NS",
    "RETRANSMIT_UNICAST_LINGER_CURRENT_NS",
    "RETRANSMIT_UNICAST_LINGER_NS",
    "DelayGenerator",
    "ResendFn",
    "RetransmitHandler",
]

MAX_RETRANSMITS_DEFAULT = 16
RETRANSMIT_UNICAST_DELAY_NS = 0
RETRANSMIT_UNICAST_LINGER_NS = 60_000_000
RETRANSMIT_UNICAST_LINGER_CURRENT_NS = 10_000_000
"""Today's Aeron lingers 10 ms after a unicast retransmission: the default of the driver's
``retransmit_unicast_linger_ns`` (see ``loss_detector.NAK_UNICAST_RETRY_CURRENT_NS``)."""


_INACTIVE = 0
_DELAYED = 1
_LINGERING = 2

ResendFn = Callable[[int, int, int], object]
"""``resend(term_id, term_offset, length)``; the return value is ignored."""


class DelayGenerator(Protocol):
    """Anything that yields a delay in ns.

    Deliberately narrower than ``loss_detector.FeedbackDelayGenerator`` (no immediate-feedback
    flag), so its ``StaticDelayGenerator``/``OptimalMulticastDelayGenerator`` fit as they are.
    """

    def generate_delay(self) -> int: ...


class _Action:
    __slots__ = ("expiry_ns", "key", "length", "state", "term_id", "term_offset")

    def __init__(self) -> None:
        self.state = _INACTIVE
        self.expiry_ns = 0
        self.term_id = 0
        self.term_offset = 0
        self.length = 0
        self.key = 0


def _key(term_id: int, term_offset: int) -> int:
    return ((term_id & 0xFFFF_FFFF) << 32) | (term_offset & 0xFFFF_FFFF)


class RetransmitHandler:
    """One per network publication; fed NAKs by the sender and ticked each duty cycle."""

    __slots__ = ("_active", "_delay", "_linger", "_max_actions", "_on_invalid", "_pool", "invalid_naks")

    def __init__(
        self,
        delay_generator: DelayGenerator,
        linger_generator: DelayGenerator,
        max_actions: int = MAX_RETRANSMITS_DEFAULT,
        on_invalid: Callable[[], object] | None = None,
    ) -> None:
        """``on_invalid`` is called once per invalid NAK (e.g. the INVALID_PACKETS counter's increment)."""
        if max_actions < 1:
            raise DriverConfigurationError("max_actions", max_actions, "at least 1")
        self._delay = delay_generator
        self._linger = linger_generator
        self._max_actions = max_actions
        self._on_invalid = on_invalid
        self._pool: list[_Action] = []
        """Made as NAKs need them, up to ``max_actions`` (most publications never see one: a connect storm made
        16 per publication, every one an object the garbage collector walks)."""
        self._active: dict[int, _Action] = {}
        self.invalid_naks = 0

    def on_nak(
        self, term_id: int, term_offset: int, length: int, term_length: int, now_ns: int, resend: ResendFn
    ) -> None:
        if term_offset < 0 or term_offset > term_length - HEADER_LENGTH or term_offset & (FRAME_ALIGNMENT - 1):
            self.invalid_naks += 1
            if self._on_invalid is not None:
                self._on_invalid()
            return
        active = self._active
        key = ((term_id & 0xFFFF_FFFF) << 32) | term_offset
        if key in active or len(active) >= self._max_actions:
            return
        action = self._free_action()
        remaining = term_length - term_offset
        action.term_id = term_id
        action.term_offset = term_offset
        action.length = length if length < remaining else remaining
        action.key = key
        delay_ns = self._delay.generate_delay()
        if delay_ns == 0:
            resend(term_id, term_offset, action.length)
            action.state = _LINGERING
            action.expiry_ns = now_ns + self._linger.generate_delay()
        else:
            action.state = _DELAYED
            action.expiry_ns = now_ns + delay_ns
        active[key] = action

    def on_retransmit_received(self, term_id: int, term_offset: int) -> None:
        """Another party already resent this data: drop a still-delayed action without lingering."""
        key = _key(term_id, term_offset)
        action = self._active.get(key)
        if action is not None and action.state == _DELAYED:
            del self._active[key]
            action.state = _INACTIVE

    def process_timeouts(self, now_ns: int, resend: ResendFn) -> None:
        active = self._active
        if not active:
            return
        for action in self._pool:
            state = action.state
            if state == _INACTIVE or now_ns <= action.expiry_ns:
                continue
            if state == _DELAYED:
                resend(action.term_id, action.term_offset, action.length)
                action.state = _LINGERING
                action.expiry_ns = now_ns + self._linger.generate_delay()
            else:
                action.state = _INACTIVE
                del active[action.key]

    @property
    def active_count(self) -> int:
        """Slots in use (delayed or lingering)."""
        return len(self._active)

    def is_active(self, term_id: int, term_offset: int) -> bool:
        return _key(term_id, term_offset) in self._active

    def _free_action(self) -> _Action:
        pool = self._pool
        for action in pool:
            if action.state == _INACTIVE:
                return action
        if len(pool) < self._max_actions:
            action = _Action()
            pool.append(action)
            return action
        raise DriverError("retransmit pool exhausted although the active map has room")
