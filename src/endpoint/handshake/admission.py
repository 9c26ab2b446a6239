"""How many handshakes a server takes on at once, and how a client spaces its resends: pure, time passed in.

A connect storm collapses when the server starts more handshakes than it can finish within a handshake timeout:
the answers come too late, every client asks again, and each asking costs a connection's streams that are then
thrown away. :class:`Admission` bounds the handshakes in flight by what the server has shown it finishes within
one handshake timeout (at least ``floor``, at most ``ceiling``); past it a HELLO is refused with a retry-after
before anything is made for it. :func:`resend_delay` spreads a client's resends (growing, jittered), so that
clients that started together do not ask again together.
"""

from __future__ import annotations

from collections import deque

from endpoint.errors import ConfigurationError
from endpoint.reconnect import RandomSource

__all__ = ["RETRY_AFTER_KEY", "Admission", "busy_delay", "resend_delay"]

RETRY_AFTER_KEY = "retry_after_ms"
"""The SERVER_BUSY refusal's detail entry saying when to ask again (milliseconds)."""
_MIN_RETRY_MS = 20
_RESEND_GROWTH = 1.25
_RESEND_CAP = 2.0
"""A resend waits at most this many handshake timeouts."""
_JITTER = 0.25


class Admission:
    """Handshakes in flight against what the server finished within the last ``window_ns`` (a handshake timeout).

    ``finished(now_ns)`` records a handshake finished (a connection made); ``retry_after_ms(in_flight, now_ns)``
    is None when one more may start, else how long the refused client should wait: the time the server, at its
    recent rate, needs to finish the excess.
    """

    def __init__(self, window_ns: int, floor: int, ceiling: int) -> None:
        if window_ns <= 0 or floor <= 0 or ceiling <= 0:
            raise ConfigurationError(f"need window_ns, floor, ceiling > 0: {window_ns}, {floor}, {ceiling}")
        self.window_ns = window_ns
        self.floor = min(floor, ceiling)
        self.ceiling = ceiling
        self._done: deque[int] = deque(maxlen=ceiling)  # finish times, oldest first; bounded by the ceiling
        self.refused = 0

    def finished(self, now_ns: int) -> None:
        self._done.append(now_ns)

    def capacity(self, now_ns: int) -> int:
        """Handshakes that may be in flight: as many as finished within the window, between floor and ceiling."""
        horizon = now_ns - self.window_ns
        done = self._done
        while done and done[0] < horizon:
            done.popleft()
        return max(self.floor, min(self.ceiling, len(done)))

    def retry_after_ms(self, in_flight: int, now_ns: int) -> int | None:
        capacity = self.capacity(now_ns)
        if in_flight < capacity:
            return None
        self.refused += 1
        per_handshake_ns = self.window_ns // capacity  # at the rate shown (or hoped for, at the floor)
        wait_ns = (in_flight - capacity + 1) * per_handshake_ns
        return max(_MIN_RETRY_MS, min(self.window_ns, wait_ns) // 1_000_000)


def resend_delay(step: float, sent: int, rng: RandomSource) -> float:
    """Seconds to wait for an answer after the ``sent``-th send (1 is the first): ``step`` growing by a quarter each
    time up to ``_RESEND_CAP`` steps, jittered by a quarter either way."""
    if sent < 1:
        raise ValueError(f"sent={sent!r}: sends count from 1")
    base = min(step * _RESEND_GROWTH ** min(sent - 1, 64), step * _RESEND_CAP)
    return base * rng.uniform(1.0 - _JITTER, 1.0 + _JITTER)


def busy_delay(retry_after_ms: int | None, refusals: int, step: float, rng: RandomSource) -> float:
    """Seconds before asking again after the ``refusals``-th SERVER_BUSY: the server's retry-after (or, when it
    named none, a tenth of ``step``), doubled for each refusal in a row up to ``step``, spread over up to half again
    so that the clients refused together come back apart."""
    if refusals < 1:
        raise ValueError(f"refusals={refusals!r}: refusals count from 1")
    base = step / 10 if retry_after_ms is None else retry_after_ms / 1000
    base = min(step, base * 2.0 ** min(refusals - 1, 32))
    return base * rng.uniform(1.0, 1.5)
