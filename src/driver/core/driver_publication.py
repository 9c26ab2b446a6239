"""What IPC and network publications share: their log, positions and life cycle.

A publication is ACTIVE while clients hold it. When the last one lets go it
DRAINS: the publisher limit is pulled back to what was written and the
end-of-stream position is set, so readers can finish. It then LINGERs for its
linger timeout and is DONE, when the conductor frees it.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.log_buffers import LogBuffers
from driver.logbuffer.unblocker import LogBufferUnblocker

__all__ = ["DriverPublication", "PublicationState"]


class PublicationState(enum.Enum):
    ACTIVE = 1
    DRAINING = 2
    LINGER = 3
    DONE = 4


class DriverPublication:
    """Base of ``IpcPublication`` and ``NetworkPublication``; the conductor drives these methods."""

    def __init__(self, log: LogBuffers, publisher_limit: AtomicCounter, now_ns: int) -> None:
        self.log = log
        self.publisher_limit = publisher_limit
        self.term_length = log.term_length
        self.position_bits = lbd.position_bits_to_shift(self.term_length)
        self.initial_term_id = lbd.initial_term_id(log.metadata)
        self.terms: Sequence[AtomicBuffer] = log.terms
        self.ref_count = 0
        self.state = PublicationState.ACTIVE
        self._time_of_last_state_change_ns = now_ns

    @property
    def log_file_name(self) -> str:
        return self.log.name

    def producer_position(self) -> int:
        """Where the publishers have written up to: the active partition's raw tail as a position."""
        raw_tail = lbd.raw_tail_volatile(self.log.metadata)
        return lbd.compute_position(
            lbd.term_id(raw_tail), lbd.term_offset(raw_tail, self.term_length), self.position_bits, self.initial_term_id
        )

    def inc_ref(self) -> None:
        self.ref_count += 1

    def dec_ref(self, now_ns: int) -> None:
        self.ref_count -= 1
        if self.ref_count == 0:
            self.state = PublicationState.DRAINING
            self._time_of_last_state_change_ns = now_ns
            producer_position = self.producer_position()
            if self.publisher_limit.get() > producer_position:
                self.publisher_limit.set_ordered(producer_position)
            lbd.set_end_of_stream_position(self.log.metadata, producer_position)

    def _unblock(self, blocked_position: int) -> bool:
        """Pad over a claim a dead writer left at ``blocked_position``; True if anything was done."""
        return LogBufferUnblocker.unblock(self.terms, self.log.metadata, blocked_position, self.term_length)
