"""Find the first hole in a term being rebuilt by the receiver (1.15.1 ``TermGapScanner``).

Theory of operation
-------------------
From ``rebuild_offset`` walk committed frames (acquire read of ``frame_length`` > 0,
step by the aligned length) until the limit or the first empty slot. That slot starts
the gap. The gap runs forward in 32-byte steps while the slot ints stay zero, up to the
limit; the first non-zero int (a frame that arrived out of order) ends it. The handler
gets ``(term_id, gap_offset, gap_length)``; the gap offset is returned as the new
rebuild offset — everything before it is contiguous.

Only the first gap is reported per scan: the receiver NAKs one gap at a time.
"""

from __future__ import annotations

from collections.abc import Callable

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import first_gap

__all__ = ["GapHandler", "first_gap", "scan_for_gap"]

GapHandler = Callable[[int, int, int], None]
"""``handler(term_id, gap_offset, gap_length)``."""

_ALIGN = 32  # FRAME_ALIGNMENT == aligned HEADER_LENGTH


def scan_for_gap(term: AtomicBuffer, term_id: int, rebuild_offset: int, limit_offset: int, handler: GapHandler) -> int:
    """Report the first gap in ``[rebuild_offset, limit_offset)``; return where it begins.

    Returns ``limit_offset`` (or beyond, if a frame straddles it) when there is no gap.
    Like Java the first slot is read even if ``rebuild_offset >= limit_offset``, so
    callers only scan when rebuild is behind the high-water mark.
    """
    gap_begin, gap_length = first_gap(term, rebuild_offset, limit_offset)
    if gap_length:
        handler(term_id, gap_begin, gap_length)
    return gap_begin
