"""Sender flow control: how far ahead of its receivers a network publication may send.

Theory of operation (Aeron 1.15.1 semantics, reference §8):

- Every status message (SM) from a receiver carries its consumption position (term id + offset)
  and its receive window. The strategy turns that into a new *sender limit*; the sender may send
  only while ``sender_position < sender_limit``.
- ``UnicastFlowControl`` and ``MaxMulticastFlowControl`` move the limit to
  ``max(limit, position + window)``: it never goes down, so the fastest receiver wins.
- ``MinMulticastFlowControl`` tracks receivers by ``receiver_id`` and lets the slowest live one
  bound the limit. On an SM the limit only rises (``max(limit, min over receivers)``); on the idle
  step receivers silent for longer than the receiver timeout (2 s) are dropped and the limit is
  set to the minimum over the rest -- which may lower it, exactly as 1.15.1 does.
- ``on_idle`` also decides whether a closing (EOS) publication should keep lingering: it stops
  once the receivers have caught up with the sender or have gone quiet.

The per-SM path runs for every status message, so it is plain integer arithmetic on locals.
Times are ``int`` nanoseconds passed in by the caller (sans-IO).

The state an SM changes (unicast/max: the furthest position and the time of the last SM; min: the
receivers) lives in the strategy's ``feedback`` slot, a native object: a send endpoint's batched
receive applies the common SM (a known receiver, no SETUP asked) to it in C, with exactly this
arithmetic, and hands everything else to ``on_status_message`` here.
"""

from __future__ import annotations

from typing import Protocol

from driver.errors import InvalidChannelError
from driver.int32 import int32
from driver.media._net import FEEDBACK_MAX_POSITION, FEEDBACK_MIN, FeedbackSlot, FlowReceiver
from driver.uri import parse_duration_ns

__all__ = [
    "FC_PARAM_MAX",
    "FC_PARAM_MIN",
    "RECEIVER_TIMEOUT_NS",
    "FlowControl",
    "MaxMulticastFlowControl",
    "MinMulticastFlowControl",
    "UnicastFlowControl",
    "idles_only_at_end_of_stream",
    "new_flow_control",
]

RECEIVER_TIMEOUT_NS = 2_000_000_000
"""1.15.1: a receiver silent this long stops counting (min multicast) or stops a linger."""

FC_PARAM_MAX = "max"
FC_PARAM_MIN = "min"

_INT64_MAX = (1 << 63) - 1


class FlowControl(Protocol):
    """What a network publication asks of its flow-control strategy."""

    def initialize(self, initial_term_id: int, term_buffer_length: int) -> None: ...

    def on_status_message(
        self,
        term_id: int,
        term_offset: int,
        window: int,
        receiver_id: int,
        now_ns: int,
        sender_limit: int,
        initial_term_id: int,
        position_bits_to_shift: int,
    ) -> int:
        """Return the new sender limit after an SM."""
        ...

    def on_idle(self, now_ns: int, sender_limit: int, sender_position: int, is_eos: bool) -> int:
        """Housekeeping each sender duty cycle; return the sender limit to use."""
        ...

    def should_linger(self, now_ns: int) -> bool:
        """Should a closing publication keep lingering for its receivers?"""
        ...

    def on_error(self, receiver_id: int) -> None:
        """The receiver sent an ERR (it rejected the stream): stop counting on it."""
        ...


class _MaxPositionFlowControl:
    """Shared 1.15.1 logic of unicast and max multicast: the limit follows the fastest receiver."""

    __slots__ = ("_linger", "_receiver_timeout_ns", "feedback")

    def __init__(self, receiver_timeout_ns: int = RECEIVER_TIMEOUT_NS) -> None:
        self.feedback = FeedbackSlot(FEEDBACK_MAX_POSITION)
        """The furthest position (``last_position``) and the time of the last SM (``flow_sm_ns``), shared with
        the native SM path."""
        self._linger = True
        self._receiver_timeout_ns = receiver_timeout_ns

    def initialize(self, initial_term_id: int, term_buffer_length: int) -> None:
        """Nothing to prepare; kept for the protocol."""

    def on_status_message(
        self,
        term_id: int,
        term_offset: int,
        window: int,
        receiver_id: int,
        now_ns: int,
        sender_limit: int,
        initial_term_id: int,
        position_bits_to_shift: int,
    ) -> int:
        # computePosition with the int32 wrap of the term count, inlined: this runs per SM.
        position = (int32(term_id - initial_term_id) << position_bits_to_shift) + term_offset
        feedback = self.feedback
        if position > feedback.last_position:
            feedback.last_position = position
        feedback.flow_sm_ns = now_ns
        limit = position + window
        return limit if limit > sender_limit else sender_limit

    def on_idle(self, now_ns: int, sender_limit: int, sender_position: int, is_eos: bool) -> int:
        if (
            is_eos
            and self._linger
            and (
                self.feedback.last_position >= sender_position
                or now_ns - self.feedback.flow_sm_ns > self._receiver_timeout_ns
            )
        ):
            self._linger = False
        return sender_limit

    def should_linger(self, now_ns: int) -> bool:
        return self._linger

    def on_error(self, receiver_id: int) -> None:
        # One receiver (unicast) or the fastest one decides; a rejecting receiver will consume no more.
        self._linger = False

    @property
    def last_position(self) -> int:
        """Highest consumption position any receiver has reported."""
        return self.feedback.last_position


def idles_only_at_end_of_stream(flow_control: FlowControl) -> bool:
    """True when ``on_idle`` changes nothing (and returns the limit it is given) unless ``is_eos``.

    The sender then skips the call on its idle cycles until the publication ends.
    """
    return isinstance(flow_control, _MaxPositionFlowControl)


class UnicastFlowControl(_MaxPositionFlowControl):
    """Default for unicast channels: ``limit = max(limit, position + window)``."""

    __slots__ = ()


class MaxMulticastFlowControl(_MaxPositionFlowControl):
    """Default for multicast and MDC: the fastest receiver sets the pace; slow ones must NAK."""

    __slots__ = ()


class MinMulticastFlowControl:
    """``fc=min``: the slowest live receiver bounds the sender, so no receiver is left behind.

    ``group_min_size`` (today's ``fc=min,g:/N``) holds the limit still until N receivers are
    known; 0 (the default) is 1.15.1 behaviour.
    """

    __slots__ = ("_group_min_size", "_linger", "_receiver_timeout_ns", "_receivers", "feedback")

    def __init__(self, receiver_timeout_ns: int = RECEIVER_TIMEOUT_NS, group_min_size: int = 0) -> None:
        self.feedback = FeedbackSlot(FEEDBACK_MIN, group_min_size)
        """Holds the receivers, shared with the native SM path (which updates known ones)."""
        receivers = self.feedback.receivers
        assert receivers is not None
        self._receivers: dict[int, FlowReceiver] = receivers
        self._linger = True
        self._receiver_timeout_ns = receiver_timeout_ns
        self._group_min_size = group_min_size

    def initialize(self, initial_term_id: int, term_buffer_length: int) -> None:
        """Nothing to prepare; kept for the protocol."""

    def on_status_message(
        self,
        term_id: int,
        term_offset: int,
        window: int,
        receiver_id: int,
        now_ns: int,
        sender_limit: int,
        initial_term_id: int,
        position_bits_to_shift: int,
    ) -> int:
        position = (int32(term_id - initial_term_id) << position_bits_to_shift) + term_offset
        limit = position + window
        receivers = self._receivers
        receiver = receivers.get(receiver_id)
        if receiver is None:
            receivers[receiver_id] = FlowReceiver(position, limit, now_ns)
        else:
            if position > receiver.last_position:
                receiver.last_position = position
            receiver.limit = limit  # not max: 1.15.1 takes the latest SM's position + window
            receiver.time_of_last_sm_ns = now_ns
        if len(receivers) < self._group_min_size:
            return sender_limit
        if len(receivers) > 1:
            for other in receivers.values():
                if other.limit < limit:
                    limit = other.limit
        return limit if limit > sender_limit else sender_limit

    def on_error(self, receiver_id: int) -> None:
        self._receivers.pop(receiver_id, None)

    def on_idle(self, now_ns: int, sender_limit: int, sender_position: int, is_eos: bool) -> int:
        receivers = self._receivers
        min_position = _INT64_MAX
        min_limit = _INT64_MAX
        expired: list[int] | None = None
        timeout_ns = self._receiver_timeout_ns
        for receiver_id, receiver in receivers.items():
            if now_ns - receiver.time_of_last_sm_ns > timeout_ns:
                if expired is None:
                    expired = []
                expired.append(receiver_id)
            else:
                if receiver.last_position < min_position:
                    min_position = receiver.last_position
                if receiver.limit < min_limit:
                    min_limit = receiver.limit
        if expired is not None:
            for receiver_id in expired:
                del receivers[receiver_id]

        if is_eos and self._linger and (not receivers or min_position >= sender_position):
            self._linger = False

        if not receivers or len(receivers) < self._group_min_size:
            return sender_limit
        return min_limit

    def should_linger(self, now_ns: int) -> bool:
        return self._linger

    @property
    def receiver_count(self) -> int:
        """Receivers currently tracked (heard from within the receiver timeout)."""
        return len(self._receivers)

    def has_receiver(self, receiver_id: int) -> bool:
        return receiver_id in self._receivers


def new_flow_control(
    fc: str | None, *, is_multicast: bool, receiver_timeout_ns: int = RECEIVER_TIMEOUT_NS
) -> FlowControl:
    """Pick the strategy for a new network publication from its channel's ``fc=`` value.

    ``is_multicast`` must be true for multicast channels *and* for channels with an explicit
    control address (MDC), as 1.15.1 chooses the multicast supplier for both. Without ``fc`` the
    1.15.1 defaults apply (unicast / max). ``fc=`` is today's Aeron syntax
    (``max|min[,t:<timeout>][,g:/<min group size>]``); unicast channels reject it, as today's
    Aeron does, and tagged/preferred strategies are not available.
    """
    if fc is None:
        return MaxMulticastFlowControl(receiver_timeout_ns) if is_multicast else UnicastFlowControl(receiver_timeout_ns)
    if not is_multicast:
        raise InvalidChannelError("fc", fc, "no flow control strategy may be set on a unicast channel")
    strategy, *arguments = fc.split(",")
    if strategy == FC_PARAM_MAX:
        return MaxMulticastFlowControl(receiver_timeout_ns)
    if strategy != FC_PARAM_MIN:
        raise InvalidChannelError("fc", fc, f'"{FC_PARAM_MAX}" or "{FC_PARAM_MIN}" (other strategies unsupported)')
    group_min_size = 0
    for argument in arguments:
        if argument.startswith("t:"):
            receiver_timeout_ns = _parse_timeout(fc, argument[2:])
        elif argument.startswith("g:"):
            tag, slash, size = argument[2:].partition("/")
            if tag:
                raise InvalidChannelError("fc", fc, "a group tag needs fc=tagged, which is unsupported")
            if slash:
                group_min_size = _parse_group_size(fc, size)
        elif not argument.startswith("rrwm:"):
            raise InvalidChannelError("fc", fc, "min[,t:<timeout>][,g:/<min group size>]")
    return MinMulticastFlowControl(receiver_timeout_ns, group_min_size)


def _parse_timeout(fc: str, text: str) -> int:
    value = parse_duration_ns(text, "fc", error=InvalidChannelError)
    if value <= 0:
        raise InvalidChannelError("fc", fc, "a receiver timeout greater than zero")
    return value


def _parse_group_size(fc: str, text: str) -> int:
    if not text.isdigit() or not text.isascii() or int(text) > 0x7FFF_FFFF:
        raise InvalidChannelError("fc", fc, "a min group size from 0 to 2147483647")
    return int(text)
