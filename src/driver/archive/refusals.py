"""The archive's refusal counters: what it turned away or dropped, in the driver's counters file so that the stat
tools show them beside the driver's own (one counter per kind, type id :data:`ARCHIVE_REFUSALS_TYPE_ID`, the
kind's code as a 4-byte key, label ``archive refused: <kind>``)."""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable
from typing import Final, Protocol

__all__ = ["ARCHIVE_REFUSALS_TYPE_ID", "Refusal", "Refusals"]

ARCHIVE_REFUSALS_TYPE_ID: Final = 4301
"""Our own type id (Aeron's archive counters are 100-117; the end point's 4201-4203)."""


class Refusal(enum.IntEnum):
    """Why the archive turned a request (or an input) away."""

    MALFORMED_REQUEST = 1
    """Not a control request we decode, or for a control session that is not (or no longer) ours."""
    MAX_REPLAYS = 2
    """A replay asked for while ``max_concurrent_replays`` are under way."""
    MAX_RECORDINGS = 3
    """A recording subscription asked for, or an image arriving on one, past ``max_concurrent_recordings``."""
    MAX_CONTROL_SESSIONS = 4
    """A connect past ``max_control_sessions``."""
    DROPPED_ANSWERS = 5
    """Answers that never reached their client (its session ended, or its queue was full)."""
    REQUEST_ERRORS = 6
    """Requests answered with an error (bad ids, positions, channels...)."""


class _Counter(Protocol):
    def get_and_add(self, delta: int) -> int: ...

    def close(self) -> None: ...


class Refusals:
    """Counts per kind, kept here (for tests and the in-process API) and mirrored into driver counters when the
    driver gives us some (a full counters file costs the mirror, never the count)."""

    def __init__(self, add_counter: Callable[[int, bytes, str], _Counter] | None = None) -> None:
        self.counts: dict[Refusal, int] = dict.fromkeys(Refusal, 0)
        self._counters: dict[Refusal, _Counter] = {}
        if add_counter is not None:
            for kind in Refusal:
                label = "archive refused: " + kind.name.lower().replace("_", " ")
                try:
                    self._counters[kind] = add_counter(ARCHIVE_REFUSALS_TYPE_ID, struct.pack("<i", kind), label)
                except Exception:  # the counters file is full: counts are still kept here
                    break

    def add(self, kind: Refusal, count: int = 1) -> None:
        if count <= 0:
            return
        self.counts[kind] += count
        counter = self._counters.get(kind)
        if counter is not None:
            counter.get_and_add(count)

    def __getitem__(self, kind: Refusal) -> int:
        return self.counts[kind]

    def close(self) -> None:
        for counter in self._counters.values():
            counter.close()
        self._counters.clear()
