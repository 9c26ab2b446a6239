"""Receiver-side congestion control: the window an image advertises in its status messages.

Theory of operation (Aeron 1.15.1 ``CongestionControl``):

- The receiver asks its congestion control for the window to advertise and whether to force an
  SM out now. It is told about rebuild progress after each receive cycle (``on_track_rebuild``)
  and about round-trip measurements (``on_rttm``), and is polled for whether to start one.
- ``StaticWindowCongestionControl`` (the 1.15.1 default and today's ``cc=static``) advertises a
  fixed window, ``min(term_length / 2, initial_window)`` -- half a term, so a sender never laps a
  term the receiver is still rebuilding -- never measures RTT and never forces an SM. Its
  outcome is a constant tuple, so the per-cycle call allocates nothing.
- ``new_congestion_control`` maps today's ``cc=`` URI value; ``cubic`` is not available.
"""

from __future__ import annotations

from typing import Protocol

from driver.errors import DriverConfigurationError, InvalidChannelError

__all__ = [
    "INITIAL_WINDOW_LENGTH_DEFAULT",
    "CongestionControl",
    "CongestionOutcome",
    "StaticWindowCongestionControl",
    "new_congestion_control",
]

INITIAL_WINDOW_LENGTH_DEFAULT = 128 * 1024
"""1.15.1 ``aeron.rcv.initial.window.length``."""

CongestionOutcome = tuple[int, bool]
"""``(receiver_window_length, force_status_message)``."""


class CongestionControl(Protocol):
    """What a publication image asks of its congestion control."""

    @property
    def initial_window_length(self) -> int: ...

    def should_measure_rtt(self, now_ns: int) -> bool: ...

    def on_rttm_sent(self, now_ns: int) -> None: ...

    def on_rttm(self, now_ns: int, rtt_ns: int, src_address: object) -> None: ...

    def on_track_rebuild(
        self,
        now_ns: int,
        new_consumption_position: int,
        last_sm_position: int,
        hwm_position: int,
        starting_rebuild_position: int,
        ending_rebuild_position: int,
        loss_occurred: bool,
    ) -> CongestionOutcome: ...

    def close(self) -> None: ...


class StaticWindowCongestionControl:
    """Fixed receiver window; no RTT measurement."""

    __slots__ = ("_outcome", "_window")

    def __init__(self, initial_window: int, term_length: int) -> None:
        if initial_window <= 0:
            raise DriverConfigurationError("initial_window", initial_window, "greater than zero")
        if term_length <= 0:
            raise DriverConfigurationError("term_length", term_length, "greater than zero")
        self._window = min(term_length // 2, initial_window)
        self._outcome: CongestionOutcome = (self._window, False)

    @property
    def initial_window_length(self) -> int:
        return self._window

    def should_measure_rtt(self, now_ns: int) -> bool:
        return False

    def on_rttm_sent(self, now_ns: int) -> None:
        """Never measures, so nothing to record."""

    def on_rttm(self, now_ns: int, rtt_ns: int, src_address: object) -> None:
        """A static window ignores RTT."""

    def on_track_rebuild(
        self,
        now_ns: int,
        new_consumption_position: int,
        last_sm_position: int,
        hwm_position: int,
        starting_rebuild_position: int,
        ending_rebuild_position: int,
        loss_occurred: bool,
    ) -> CongestionOutcome:
        return self._outcome

    def close(self) -> None:
        """Holds no resources."""


def new_congestion_control(
    cc: str | None, *, term_length: int, initial_window: int = INITIAL_WINDOW_LENGTH_DEFAULT
) -> CongestionControl:
    """Congestion control for a new image from its channel's ``cc=`` value (None: static)."""
    if cc is None or cc == "static":
        return StaticWindowCongestionControl(initial_window, term_length)
    raise InvalidChannelError("cc", cc, '"static" (cubic is not supported)')
