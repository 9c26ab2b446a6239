"""A publication whose subscribers read its log directly (``aeron:ipc``).

Theory of operation: publishers append to the log; subscribers read it in
place and advance their own position counters. The conductor sets the
publisher limit from the slowest subscriber plus a term window (back
pressure), zeroes what every subscriber has read so the log can be reused,
and notices a publisher that died mid-claim (the consumer position stalls
below the producer's) to unblock the log. With its last publisher gone it
drains (the end-of-stream position is set) and lingers before its file goes.
"""

from __future__ import annotations

from typing import Protocol

from driver.concurrent.counters import AtomicCounter
from driver.core.driver_publication import DriverPublication, PublicationState
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.log_buffers import LogBuffers

__all__ = ["IpcPublication", "PublicationState", "Subscriber"]


class Subscriber(Protocol):
    """A subscriber's read position in the log, as the publication sees it (the conductor's links hold more)."""

    @property
    def counter(self) -> AtomicCounter: ...


class IpcPublication(DriverPublication):
    def __init__(
        self,
        *,
        registration_id: int,
        channel: str,
        session_id: int,
        stream_id: int,
        log: LogBuffers,
        publisher_limit: AtomicCounter,
        publisher_position: AtomicCounter,
        term_window_length: int,
        unblock_timeout_ns: int,
        linger_timeout_ns: int,
        now_ns: int,
        is_exclusive: bool,
        unblocked_publications: AtomicCounter,
    ) -> None:
        super().__init__(log, publisher_limit, now_ns)
        self.registration_id = registration_id
        self.channel = channel
        self.session_id = session_id
        self.stream_id = stream_id
        self.publisher_position = publisher_position
        self.is_exclusive = is_exclusive
        self.mtu_length = lbd.mtu_length(log.metadata)
        self.term_window_length = term_window_length
        self._trip_gain = term_window_length // 8
        self._unblock_timeout_ns = unblock_timeout_ns
        self.linger_timeout_ns = linger_timeout_ns
        self._unblocked_publications = unblocked_publications
        self.subscribers: list[Subscriber] = []
        self.consumer_position = self.producer_position()
        self._last_consumer_position = self.consumer_position
        self._clean_position = self.consumer_position
        self._trip_limit = 0
        self._time_of_last_consumer_change_ns = now_ns

    def join_position(self) -> int:
        return self.consumer_position

    topology_version = 0
    """Bumped whenever any IPC publication gains or loses a subscriber (the conductor re-reads who watches what)."""

    def add_subscriber(self, position: Subscriber) -> None:
        lbd.set_is_connected(self.log.metadata, True)
        self.subscribers.append(position)
        IpcPublication.topology_version += 1

    def remove_subscriber(self, position: Subscriber) -> None:
        self.consumer_position = max(self.consumer_position, position.counter.get_volatile())
        self.subscribers.remove(position)
        IpcPublication.topology_version += 1
        position.counter.close()
        if not self.subscribers:
            lbd.set_is_connected(self.log.metadata, False)

    def update_publisher_limit(self) -> int:
        """Move the publisher limit from the subscribers' positions; 1 if it moved."""
        if self.subscribers:
            min_position = max_position = self.subscribers[0].counter.get_volatile()
            for sub in self.subscribers[1:]:
                position = sub.counter.get_volatile()
                if position < min_position:
                    min_position = position
                elif position > max_position:
                    max_position = position
            if max_position > self.consumer_position:
                self.consumer_position = max_position
            proposed = min_position + self.term_window_length
            if proposed > self._trip_limit:
                self.publisher_limit.set_ordered(proposed)
                self._trip_limit = proposed + self._trip_gain
                self._clean_buffer(min_position)
                return 1
        elif self.publisher_limit.get() > self.consumer_position:
            self._trip_limit = self.consumer_position
            self.publisher_limit.set_ordered(self.consumer_position)
        return 0

    def on_time_event(self, now_ns: int) -> bool:
        """Timer step; True when this publication has drained and should go to linger."""
        state = self.state
        if state is PublicationState.ACTIVE:
            producer_position = self.producer_position()
            self.publisher_position.set_ordered(producer_position)
            if not self.is_exclusive:
                self._check_for_blocked_publisher(producer_position, now_ns)
        elif state is PublicationState.DRAINING:
            producer_position = self.producer_position()
            self.publisher_position.set_ordered(producer_position)
            if all(sub.counter.get_volatile() >= producer_position for sub in self.subscribers):
                self.state = PublicationState.LINGER
                self._time_of_last_state_change_ns = now_ns
                return True
            if self._unblock(self.consumer_position):
                self._unblocked_publications.increment()
        elif state is PublicationState.LINGER and now_ns - self._time_of_last_state_change_ns > self.linger_timeout_ns:
            self.state = PublicationState.DONE
        return False

    def close(self) -> None:
        self.publisher_position.close()
        self.publisher_limit.close()
        for sub in self.subscribers:
            sub.counter.close()
        self.subscribers.clear()
        self.log.close()

    def _check_for_blocked_publisher(self, producer_position: int, now_ns: int) -> None:
        consumer_position = self.consumer_position
        if consumer_position == self._last_consumer_position and self._is_possibly_blocked(
            producer_position, consumer_position
        ):
            if now_ns - self._time_of_last_consumer_change_ns > self._unblock_timeout_ns and self._unblock(
                consumer_position
            ):
                self._unblocked_publications.increment()
        else:
            self._time_of_last_consumer_change_ns = now_ns
            self._last_consumer_position = consumer_position

    def _is_possibly_blocked(self, producer_position: int, consumer_position: int) -> bool:
        term_count = lbd.active_term_count(self.log.metadata)
        if term_count != (consumer_position >> self.position_bits):
            return True
        return producer_position > consumer_position

    def _clean_buffer(self, min_consumer_position: int) -> None:
        clean_position = self._clean_position
        term_length = self.term_length
        term_offset = clean_position & (term_length - 1)
        length = min(min_consumer_position - clean_position, term_length - term_offset)
        if length > 0:
            term = self.log.terms[lbd.index_by_position(clean_position, self.position_bits)]
            term.set_memory(term_offset, length, 0)
            self._clean_position = clean_position + length
