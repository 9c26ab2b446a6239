"""Term scanner: how much committed data a sender may take from a term in one go.

Theory of operation
-------------------
From ``offset``, whole committed frames are counted until ``max_length`` (the
MTU or the flow-control window) would be exceeded, an uncommitted frame is met,
or a PAD frame is reached. A PAD frame ends the batch: only its 32-byte header
is sent (counted in ``available``) and the rest of it is reported as
``padding`` so the sender's position can skip the whole pad. A frame that does
not fit is left for the next scan (and a pad that does not fit is not counted).
"""

from __future__ import annotations

from driver.concurrent.atomic_buffer import AtomicBuffer

__all__ = ["TermScanner", "scan_for_availability"]


def scan_for_availability(term: AtomicBuffer, offset: int, max_length: int) -> tuple[int, int]:
    """Return ``(available, padding)`` bytes from ``offset`` (1.15.1 TermScanner), natively."""
    return term.scan_for_availability(offset, max_length)


class TermScanner:
    """Namespace mirroring Aeron's ``TermScanner``."""

    scan_for_availability = staticmethod(scan_for_availability)
