"""Unblocking a publication stalled by a writer that claimed space and never committed.

Theory of operation
-------------------
A concurrent publisher that dies (or stalls) between its tail fetch-add and the
commit leaves a frame whose length is negative (header written) or zero
(nothing written yet). Readers and the sender stop there forever. After the
unblock timeout, with the consumer position stuck at ``blocked_position``, the
driver turns the stuck region into padding:

* length < 0: the header is there; republish it as a PAD frame of ``-length``.
* length == 0: scan forward in 32-byte steps up to the tail for the next frame
  that has a length; if everything between is still zero, pad up to it. If the
  scan reaches the end of the term, pad to the end and rotate the log.
* If the block sits exactly at the start of the term after the active one, the
  publisher died before rotating: just rotate.

The PAD header is rebuilt from the default header (type PAD, term offset, term
id) and its length is stored last, ordered.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import note_committed
from driver.logbuffer.descriptor import (
    LOG_DEFAULT_FRAME_HEADER_OFFSET,
    PARTITION_COUNT,
    active_term_count,
    position_bits_to_shift,
    raw_tail_volatile,
    rotate_log,
    term_id,
    term_offset,
)
from driver.logbuffer.frame import (
    FRAME_ALIGNMENT,
    HDR_TYPE_PAD,
    HEADER_LENGTH,
    TERM_ID_OFFSET,
    TERM_OFFSET_OFFSET,
    TYPE_OFFSET,
)

__all__ = ["LogBufferUnblocker", "Status", "TermUnblocker"]


class Status(enum.Enum):
    NO_ACTION = 0
    UNBLOCKED = 1
    UNBLOCKED_TO_END = 2


def _reset_header(metadata: AtomicBuffer, term: AtomicBuffer, frame_offset: int, term_id: int, length: int) -> None:
    term.put_bytes(frame_offset, metadata.get_bytes(LOG_DEFAULT_FRAME_HEADER_OFFSET, HEADER_LENGTH))
    term.put_short(frame_offset + TYPE_OFFSET, HDR_TYPE_PAD)
    term.put_int(frame_offset + TERM_OFFSET_OFFSET, frame_offset)
    term.put_int(frame_offset + TERM_ID_OFFSET, term_id)
    term.put_int_ordered(frame_offset, length)
    note_committed()


def _zeroed_back_to(term: AtomicBuffer, start: int, limit: int) -> bool:
    get = term.get_int_volatile
    i = start - FRAME_ALIGNMENT
    while i >= limit:
        if get(i) != 0:
            return False
        i -= FRAME_ALIGNMENT
    return True


class TermUnblocker:
    @staticmethod
    def unblock(
        metadata: AtomicBuffer, term: AtomicBuffer, blocked_offset: int, tail_offset: int, term_id: int
    ) -> Status:
        """Pad over the stuck frame at ``blocked_offset`` if it is safe to (1.15.1 TermUnblocker)."""
        get = term.get_int_volatile
        status = Status.NO_ACTION
        length = get(blocked_offset)
        if length < 0:
            _reset_header(metadata, term, blocked_offset, term_id, -length)
            status = Status.UNBLOCKED
        elif length == 0:
            current = blocked_offset + FRAME_ALIGNMENT
            while current < tail_offset:
                if get(current) != 0:
                    if _zeroed_back_to(term, current, blocked_offset):
                        _reset_header(metadata, term, blocked_offset, term_id, current - blocked_offset)
                        status = Status.UNBLOCKED
                    break
                current += FRAME_ALIGNMENT
            if current == term.capacity and get(blocked_offset) == 0:
                _reset_header(metadata, term, blocked_offset, term_id, current - blocked_offset)
                status = Status.UNBLOCKED_TO_END
        return status


class LogBufferUnblocker:
    @staticmethod
    def unblock(terms: Sequence[AtomicBuffer], metadata: AtomicBuffer, blocked_position: int, term_length: int) -> bool:
        """Unblock the log stuck at ``blocked_position``; True if anything was done."""
        bits = position_bits_to_shift(term_length)
        blocked_term_count = blocked_position >> bits
        blocked_offset = blocked_position & (term_length - 1)
        active_count = active_term_count(metadata)

        if active_count == blocked_term_count - 1 and blocked_offset == 0:
            current_term_id = term_id(raw_tail_volatile(metadata, active_count % PARTITION_COUNT))
            return rotate_log(metadata, active_count, current_term_id)

        blocked_index = blocked_term_count % PARTITION_COUNT
        raw_tail = raw_tail_volatile(metadata, blocked_index)
        blocked_term_id = term_id(raw_tail)
        tail_offset = term_offset(raw_tail, term_length)
        status = TermUnblocker.unblock(metadata, terms[blocked_index], blocked_offset, tail_offset, blocked_term_id)
        if status is Status.UNBLOCKED_TO_END:
            rotate_log(metadata, blocked_term_count, blocked_term_id)
            return True
        return status is Status.UNBLOCKED
