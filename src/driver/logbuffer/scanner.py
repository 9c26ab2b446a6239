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

from driver.logbuffer._frames import scan_for_availability, scan_frames

__all__ = ["TermScanner", "scan_for_availability", "scan_frames"]


# scan_for_availability(term, offset, max_length) -> (available, padding): 1.15.1 TermScanner, natively.
# scan_frames(term, offset, limit) -> (end offset, [(frame offset, frame length, flags), ...]): up to ``limit``
# committed DATA frames from ``offset``, padding stepped over; the subscriber's scan.


class TermScanner:
    """Namespace mirroring Aeron's ``TermScanner``."""

    scan_for_availability = staticmethod(scan_for_availability)
