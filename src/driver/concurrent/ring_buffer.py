"""Agrona's ``ManyToOneRingBuffer`` (0.9.31 layout) over an :class:`AtomicBuffer`.

Theory of operation
-------------------
The buffer is ``capacity`` bytes of records (``capacity`` a power of two)
followed by a 768-byte trailer. Each trailer field sits in its own pair of
cache lines so producers and the consumer do not false-share:

=========================  ======  ==========================================
field                      offset  meaning
=========================  ======  ==========================================
tail position              +128    bytes ever claimed by producers (int64)
head cache position        +256    producers' stale copy of head (int64)
head position              +384    bytes ever consumed (int64)
correlation counter        +512    fetch-add source of correlation ids
consumer heartbeat         +640    ms epoch time stamped by the consumer
=========================  ======  ==========================================

A record is ``int32 length`` (header + body, unaligned) at +0, ``int32
msg_type_id`` at +4 and the body at +8; records start on 8-byte boundaries.
Producers claim space with a CAS on the tail. If a record would straddle the
end of the buffer, the producer claims the rest of the buffer too and fills it
with a padding record (type -1), then writes at index 0.

A producer publishes a claimed record in two steps: the header (length =
-record_length, type) as one int64 release store while it fills the body,
then length = +record_length (release). The consumer stops at the first length <= 0, so it never sees a
half-written record. After dispatching, it zeroes what it consumed (producers
rely on zeroed memory) and release-stores the new head.

A producer that dies between claim and publish blocks the consumer forever;
:meth:`ManyToOneRingBuffer.unblock` turns such a slot into padding once the
caller has decided (by a timeout) that nobody will finish it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.concurrent.atomic_buffer import AtomicBuffer, is_power_of_two
from driver.errors import DriverConfigurationError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "ALIGNMENT",
    "CONSUMER_HEARTBEAT_OFFSET",
    "CORRELATION_COUNTER_OFFSET",
    "HEADER_LENGTH",
    "HEAD_CACHE_POSITION_OFFSET",
    "HEAD_POSITION_OFFSET",
    "PADDING_MSG_TYPE_ID",
    "TAIL_POSITION_OFFSET",
    "TRAILER_LENGTH",
    "ManyToOneRingBuffer",
    "MessageHandler",
]

TAIL_POSITION_OFFSET = 128
HEAD_CACHE_POSITION_OFFSET = 256
HEAD_POSITION_OFFSET = 384
CORRELATION_COUNTER_OFFSET = 512
CONSUMER_HEARTBEAT_OFFSET = 640
TRAILER_LENGTH = 768

HEADER_LENGTH = 8
ALIGNMENT = 8
PADDING_MSG_TYPE_ID = -1

# High word of a record header whose type is PADDING_MSG_TYPE_ID (the header is
# stored as one little-endian int64: length in the low word, type in the high).
_PADDING_TYPE_HIGH = PADDING_MSG_TYPE_ID << 32

MessageHandler = Callable[[int, AtomicBuffer, int, int], None]
"""handler(msg_type_id, buffer, index, length): the body is ``buffer[index:index+length]``."""


class ManyToOneRingBuffer:
    """Many producers (in any number of processes), one consumer."""

    __slots__ = (
        "_buffer",
        "_capacity",
        "_compare_and_set_long",
        "_consumer_heartbeat_index",
        "_correlation_counter_index",
        "_get_long_volatile",
        "_head_cache",
        "_head_cache_position_index",
        "_head_position_index",
        "_mask",
        "_max_msg_length",
        "_put_bytes",
        "_put_int_ordered",
        "_put_long_ordered",
        "_tail_position_index",
    )

    def __init__(self, buffer: AtomicBuffer) -> None:
        capacity = buffer.capacity - TRAILER_LENGTH
        if not is_power_of_two(capacity):
            raise DriverConfigurationError(
                "ring buffer length",
                buffer.capacity,
                f"a power of two plus the {TRAILER_LENGTH}-byte trailer",
            )
        self._buffer = buffer
        self._capacity = capacity
        self._mask = capacity - 1
        self._max_msg_length = capacity // 8
        self._tail_position_index = capacity + TAIL_POSITION_OFFSET
        self._head_cache_position_index = capacity + HEAD_CACHE_POSITION_OFFSET
        self._head_position_index = capacity + HEAD_POSITION_OFFSET
        self._correlation_counter_index = capacity + CORRELATION_COUNTER_OFFSET
        self._consumer_heartbeat_index = capacity + CONSUMER_HEARTBEAT_OFFSET
        # Bound once: a method lookup on the C type costs as much as the call itself.
        self._get_long_volatile = buffer.get_long_volatile
        self._put_long_ordered = buffer.put_long_ordered
        self._put_int_ordered = buffer.put_int_ordered
        self._put_bytes = buffer.put_bytes
        self._compare_and_set_long = buffer.compare_and_set_long
        self._head_cache = buffer.get_long_volatile(self._head_position_index)

    @property
    def buffer(self) -> AtomicBuffer:
        return self._buffer

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_msg_length(self) -> int:
        return self._max_msg_length

    def write(self, msg_type_id: int, src: Buffer, offset: int = 0, length: int = -1) -> bool:
        """Append one record; False when the ring has no room (the caller retries or reports)."""
        if msg_type_id < 1:
            raise ValueError(f"msg_type_id={msg_type_id} is invalid: must be >= 1")
        if length < 0:
            length = (len(src) if isinstance(src, (bytes, bytearray)) else memoryview(src).nbytes) - offset
        if length > self._max_msg_length:
            raise ValueError(f"length={length} is invalid: exceeds max_msg_length {self._max_msg_length}")
        record_length = length + HEADER_LENGTH
        required = (record_length + 7) & -8

        # Claim: CAS the tail forward. Space is checked against a private copy of
        # the head first (stale is safe: head only grows), the real head only when
        # that says "full"; the shared head-cache slot is refreshed for other producers.
        capacity = self._capacity
        tail_index_pos = self._tail_position_index
        get_long_volatile = self._get_long_volatile
        head = self._head_cache
        while True:
            tail = get_long_volatile(tail_index_pos)
            if required > capacity - (tail - head):
                head = get_long_volatile(self._head_position_index)
                if required > capacity - (tail - head):
                    return False
                self._head_cache = head
                self._put_long_ordered(self._head_cache_position_index, head)
            padding = 0
            record_index = tail & self._mask
            to_end = capacity - record_index
            if required > to_end:
                if required > head & self._mask:
                    head = get_long_volatile(self._head_position_index)
                    if required > head & self._mask:
                        return False
                    self._head_cache = head
                    self._put_long_ordered(self._head_cache_position_index, head)
                padding = to_end
            if self._compare_and_set_long(tail_index_pos, tail, tail + required + padding):
                break

        # Publish: one release store of (length = -record_length, type) marks the
        # record as in progress -- the same guarantee as Agrona's ordered store of
        # the negative length followed by a store fence -- then the body, then the
        # release store of the positive length hands it to the consumer.
        put_long_ordered = self._put_long_ordered
        put_int_ordered = self._put_int_ordered
        if padding:
            put_long_ordered(record_index, _PADDING_TYPE_HIGH | (-padding & 0xFFFFFFFF))
            put_int_ordered(record_index, padding)
            record_index = 0
        put_long_ordered(record_index, (msg_type_id << 32) | (-record_length & 0xFFFFFFFF))
        if length:
            self._put_bytes(record_index + HEADER_LENGTH, src, offset, length)
        put_int_ordered(record_index, record_length)
        return True

    def read(self, handler: MessageHandler, message_count_limit: int = 1 << 30) -> int:
        """Dispatch up to ``message_count_limit`` records from the contiguous block at head.

        The head advances in ``finally`` so a raising handler loses neither its own
        record (it counts as consumed, as in Agrona) nor the ones before it.
        """
        buffer = self._buffer
        head_position_index = self._head_position_index
        head = buffer.get_long(head_position_index)
        head_index = head & self._mask
        max_block_length = self._capacity - head_index
        get_int_volatile = buffer.get_int_volatile
        get_int = buffer.get_int
        messages_read = 0
        bytes_read = 0
        try:
            while bytes_read < max_block_length and messages_read < message_count_limit:
                record_index = head_index + bytes_read
                record_length = get_int_volatile(record_index)
                if record_length <= 0:
                    break
                bytes_read += (record_length + 7) & -8
                msg_type_id = get_int(record_index + 4)
                if msg_type_id == PADDING_MSG_TYPE_ID:
                    continue
                messages_read += 1
                handler(msg_type_id, buffer, record_index + HEADER_LENGTH, record_length - HEADER_LENGTH)
        finally:
            if bytes_read:
                buffer.set_memory(head_index, bytes_read, 0)
                buffer.put_long_ordered(head_position_index, head + bytes_read)
        return messages_read

    def next_correlation_id(self) -> int:
        return self._buffer.get_and_add_long(self._correlation_counter_index, 1)

    def consumer_heartbeat_time(self) -> int:
        return self._buffer.get_long_volatile(self._consumer_heartbeat_index)

    def set_consumer_heartbeat_time(self, time_ms: int) -> None:
        self._buffer.put_long_ordered(self._consumer_heartbeat_index, time_ms)

    def producer_position(self) -> int:
        return self._buffer.get_long_volatile(self._tail_position_index)

    def consumer_position(self) -> int:
        return self._buffer.get_long_volatile(self._head_position_index)

    def size(self) -> int:
        """Bytes between head and tail, read so that head did not move meanwhile."""
        get_long_volatile = self._buffer.get_long_volatile
        head_index = self._head_position_index
        tail_index = self._tail_position_index
        head_after = get_long_volatile(head_index)
        for _ in range(1_000_000):
            head_before = head_after
            tail = get_long_volatile(tail_index)
            head_after = get_long_volatile(head_index)
            if head_after == head_before:
                break
        return tail - head_after

    def unblock(self) -> bool:
        """Turn the record at head into padding if a producer claimed it and never finished.

        Only call this once the consumer has seen no progress for longer than any
        live producer could take (Aeron: the client liveness timeout).
        """
        buffer = self._buffer
        head_position = buffer.get_long_volatile(self._head_position_index)
        tail_position = buffer.get_long_volatile(self._tail_position_index)
        if head_position == tail_position:
            return False
        capacity = self._capacity
        consumer_index = head_position & self._mask
        producer_index = tail_position & self._mask
        length = buffer.get_int_volatile(consumer_index)
        if length < 0:
            # Claimed and abandoned mid-write: its length is known.
            buffer.put_int(consumer_index + 4, PADDING_MSG_TYPE_ID)
            buffer.put_int_ordered(consumer_index, -length)
            return True
        if length == 0:
            # Claimed but not even started: pad up to the next record that has begun.
            limit = producer_index if producer_index > consumer_index else capacity
            i = consumer_index + ALIGNMENT
            while i < limit:
                if buffer.get_int_volatile(i) != 0:
                    if self._still_zeroed(i, consumer_index):
                        buffer.put_int(consumer_index + 4, PADDING_MSG_TYPE_ID)
                        buffer.put_int_ordered(consumer_index, i - consumer_index)
                        return True
                    return False
                i += ALIGNMENT
        return False

    def _still_zeroed(self, start: int, limit: int) -> bool:
        get_int_volatile = self._buffer.get_int_volatile
        i = start - ALIGNMENT
        while i >= limit:
            if get_int_volatile(i) != 0:
                return False
            i -= ALIGNMENT
        return True
