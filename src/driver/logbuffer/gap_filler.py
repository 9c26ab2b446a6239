"""Pad over a gap that will not be repaired (1.15.1 ``TermGapFiller``).

Theory of operation
-------------------
An unreliable image (``reliable=false``) does not NAK; when the loss detector's timer
fires for a gap, the receiver writes a PAD frame over the gap so subscribers can move
past it. The fill is refused if any 32-byte slot in the gap already holds data (the
gap was partly repaired since it was scanned) — the next scan reports the smaller gap.

The PAD header is the log's default header with type PAD, the gap's term offset and
term id; its length is released last so readers never see a half-written header.
``gap_offset + gap_length`` must be 32-byte aligned (scanner gaps always are).
"""

from __future__ import annotations

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer.descriptor import apply_default_header
from driver.logbuffer.frame import (
    FRAME_ALIGNMENT,
    HDR_TYPE_PAD,
    TERM_ID_OFFSET,
    TERM_OFFSET_OFFSET,
    TYPE_OFFSET,
)

__all__ = ["try_fill_gap"]


def try_fill_gap(metadata: AtomicBuffer, term: AtomicBuffer, term_id: int, gap_offset: int, gap_length: int) -> bool:
    """PAD ``[gap_offset, gap_offset + gap_length)`` if it is still empty; False if data was found."""
    get = term.get_int
    offset = gap_offset + gap_length - FRAME_ALIGNMENT
    while offset >= gap_offset:
        if get(offset) != 0:
            return False
        offset -= FRAME_ALIGNMENT

    apply_default_header(metadata, term, gap_offset)
    term.put_short(gap_offset + TYPE_OFFSET, HDR_TYPE_PAD)
    term.put_int(gap_offset + TERM_OFFSET_OFFSET, gap_offset)
    term.put_int(gap_offset + TERM_ID_OFFSET, term_id)
    term.put_int_ordered(gap_offset, gap_length)
    return True
