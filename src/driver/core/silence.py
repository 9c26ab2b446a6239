"""When a silence ends what it is the silence of (an image, an end point's peer): pure, times passed in.

A silence longer than its timeout ends it, unless our own kernel dropped datagrams for the socket it is heard on
during it: we read that socket too late (an overloaded process), so whatever was sent meanwhile may have been lost
on our side, not left unsent. Such a silence ends only past ``DROPPED_SILENCE_TIMEOUTS`` timeouts: bounded, so a
publisher or peer that did die behind a flooded socket is still found.
"""

from __future__ import annotations

__all__ = ["DROPPED_SILENCE_TIMEOUTS", "silence_ends"]

DROPPED_SILENCE_TIMEOUTS = 3
"""How many timeouts a silence may last while our kernel dropped datagrams for its socket during it."""


def silence_ends(silent_ns: int, timeout_ns: int, saw_drops: bool) -> bool:
    """Whether a silence of ``silent_ns`` is the end, given its timeout and whether our kernel dropped datagrams
    during it."""
    return silent_ns > timeout_ns and (not saw_drops or silent_ns > timeout_ns * DROPPED_SILENCE_TIMEOUTS)
