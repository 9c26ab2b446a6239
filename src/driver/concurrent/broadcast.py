"""Agrona's broadcast buffer (0.9.31 layout): one transmitter, any number of receivers.

Theory of operation
-------------------
The buffer is ``capacity`` bytes of records (a power of two) followed by a
128-byte trailer: ``tail_intent`` int64 at +0, ``tail`` int64 at +8 and
``latest`` int64 at +16. A record is ``int32 length`` (header + body) at +0,
``int32 msg_type_id`` at +4 (-1 = padding) and the body at +8, 8-byte aligned.

The transmitter never waits for receivers: it overwrites the oldest records.
Before touching any record bytes it release-stores ``tail_intent`` (the tail
it is about to reach); after writing, it stores ``latest`` (start of the newest
record) and release-stores ``tail``. A record that would straddle the end of
the buffer is preceded by a padding record filling the rest of the buffer.

A receiver keeps its own cursor. It has been lapped (the bytes under its
cursor may be overwritten) when ``cursor + capacity <= tail_intent``; it then
jumps to ``latest`` and counts the lap. Because the transmitter can overwrite a
record while a receiver reads it, a receiver must copy the record first and
then :meth:`BroadcastReceiver.validate` that it was not lapped meanwhile —
:class:`CopyBroadcastReceiver` does exactly that.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from driver.concurrent.atomic_buffer import AtomicBuffer, fence, is_power_of_two
from driver.errors import DriverConfigurationError, DriverError

if TYPE_CHECKING:
    from typing_extensions import Buffer

__all__ = [
    "HEADER_LENGTH",
    "LATEST_COUNTER_OFFSET",
    "PADDING_MSG_TYPE_ID",
    "RECORD_ALIGNMENT",
    "SCRATCH_BUFFER_LENGTH",
    "TAIL_COUNTER_OFFSET",
    "TAIL_INTENT_COUNTER_OFFSET",
    "TRAILER_LENGTH",
    "BroadcastReceiveError",
    "BroadcastReceiver",
    "BroadcastTransmitter",
    "CopyBroadcastReceiver",
]

TAIL_INTENT_COUNTER_OFFSET = 0
TAIL_COUNTER_OFFSET = 8
LATEST_COUNTER_OFFSET = 16
TRAILER_LENGTH = 128

HEADER_LENGTH = 8
RECORD_ALIGNMENT = 8
PADDING_MSG_TYPE_ID = -1
SCRATCH_BUFFER_LENGTH = 4096


class BroadcastReceiveError(DriverError):
    """A receiver fell behind the transmitter, or a message does not fit its scratch buffer."""


def _checked_capacity(buffer: AtomicBuffer) -> int:
    capacity = buffer.capacity - TRAILER_LENGTH
    if not is_power_of_two(capacity):
        raise DriverConfigurationError(
            "broadcast buffer length",
            buffer.capacity,
            f"a power of two plus the {TRAILER_LENGTH}-byte trailer",
        )
    return capacity


class BroadcastTransmitter:
    """The single writer (the driver's to-clients buffer)."""

    __slots__ = (
        "_buffer",
        "_capacity",
        "_latest_counter_index",
        "_max_msg_length",
        "_tail_counter_index",
        "_tail_intent_counter_index",
    )

    def __init__(self, buffer: AtomicBuffer) -> None:
        capacity = _checked_capacity(buffer)
        self._buffer = buffer
        self._capacity = capacity
        self._max_msg_length = capacity // 8
        self._tail_intent_counter_index = capacity + TAIL_INTENT_COUNTER_OFFSET
        self._tail_counter_index = capacity + TAIL_COUNTER_OFFSET
        self._latest_counter_index = capacity + LATEST_COUNTER_OFFSET

    @property
    def buffer(self) -> AtomicBuffer:
        return self._buffer

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def max_msg_length(self) -> int:
        return self._max_msg_length

    def transmit(self, msg_type_id: int, src: Buffer, offset: int = 0, length: int = -1) -> None:
        if msg_type_id < 1:
            raise ValueError(f"msg_type_id={msg_type_id} is invalid: must be >= 1")
        if length < 0:
            length = (len(src) if isinstance(src, (bytes, bytearray)) else memoryview(src).nbytes) - offset
        if length > self._max_msg_length:
            raise ValueError(f"length={length} is invalid: exceeds max_msg_length {self._max_msg_length}")
        buffer = self._buffer
        capacity = self._capacity
        tail = buffer.get_long(self._tail_counter_index)
        record_offset = tail & (capacity - 1)
        record_length = HEADER_LENGTH + length
        aligned = (record_length + 7) & -8
        new_tail = tail + aligned
        to_end = capacity - record_offset
        if to_end < aligned:
            buffer.put_long_ordered(self._tail_intent_counter_index, new_tail + to_end)
            fence()
            buffer.put_int(record_offset, to_end)
            buffer.put_int(record_offset + 4, PADDING_MSG_TYPE_ID)
            tail += to_end
            record_offset = 0
        else:
            buffer.put_long_ordered(self._tail_intent_counter_index, new_tail)
            fence()
        buffer.put_int(record_offset, record_length)
        buffer.put_int(record_offset + 4, msg_type_id)
        if length:
            buffer.put_bytes(record_offset + HEADER_LENGTH, src, offset, length)
        buffer.put_long(self._latest_counter_index, tail)
        buffer.put_long_ordered(self._tail_counter_index, tail + aligned)


class BroadcastReceiver:
    """One reader's cursor; starts at the latest record, as Agrona's does."""

    __slots__ = (
        "_buffer",
        "_capacity",
        "_cursor",
        "_lapped_count",
        "_latest_counter_index",
        "_next_record",
        "_record_offset",
        "_tail_counter_index",
        "_tail_intent_counter_index",
    )

    def __init__(self, buffer: AtomicBuffer) -> None:
        capacity = _checked_capacity(buffer)
        self._buffer = buffer
        self._capacity = capacity
        self._tail_intent_counter_index = capacity + TAIL_INTENT_COUNTER_OFFSET
        self._tail_counter_index = capacity + TAIL_COUNTER_OFFSET
        self._latest_counter_index = capacity + LATEST_COUNTER_OFFSET
        self._cursor = self._next_record = buffer.get_long_volatile(self._latest_counter_index)
        self._record_offset = self._cursor & (capacity - 1)
        self._lapped_count = 0

    @property
    def buffer(self) -> AtomicBuffer:
        return self._buffer

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def lapped_count(self) -> int:
        return self._lapped_count

    @property
    def type_id(self) -> int:
        return self._buffer.get_int(self._record_offset + 4)

    @property
    def offset(self) -> int:
        """Index of the current record's body in :attr:`buffer`."""
        return self._record_offset + HEADER_LENGTH

    @property
    def length(self) -> int:
        return self._buffer.get_int(self._record_offset) - HEADER_LENGTH

    def receive_next(self) -> bool:
        """Move to the next record if one is there; the caller then reads and validates it."""
        buffer = self._buffer
        tail = buffer.get_long_volatile(self._tail_counter_index)
        cursor = self._next_record
        if tail <= cursor:
            return False
        mask = self._capacity - 1
        record_offset = cursor & mask
        if cursor + self._capacity <= buffer.get_long_volatile(self._tail_intent_counter_index):
            self._lapped_count += 1
            cursor = buffer.get_long(self._latest_counter_index)
            record_offset = cursor & mask
        self._cursor = cursor
        self._next_record = cursor + ((buffer.get_int(record_offset) + 7) & -8)
        if buffer.get_int(record_offset + 4) == PADDING_MSG_TYPE_ID:
            record_offset = 0
            self._cursor = self._next_record
            self._next_record += (buffer.get_int(0) + 7) & -8
        self._record_offset = record_offset
        return True

    def validate(self) -> bool:
        """True if the current record was not overwritten since :meth:`receive_next`."""
        fence()
        return self._cursor + self._capacity > self._buffer.get_long_volatile(self._tail_intent_counter_index)


class CopyBroadcastReceiver:
    """Copies each record into a scratch buffer and validates it before the handler sees it.

    The memoryview handed to the handler is the scratch buffer: valid only during
    the call (copy it to keep it).
    """

    __slots__ = ("_receiver", "_scratch", "_scratch_view")

    def __init__(self, receiver: BroadcastReceiver, scratch_length: int = SCRATCH_BUFFER_LENGTH) -> None:
        self._receiver = receiver
        self._scratch = bytearray(scratch_length)
        self._scratch_view = memoryview(self._scratch)

    @property
    def receiver(self) -> BroadcastReceiver:
        return self._receiver

    def receive(self, handler: Callable[[int, memoryview], None]) -> int:
        """Deliver at most one message; 0 when there is none."""
        receiver = self._receiver
        lapped_before = receiver.lapped_count
        if not receiver.receive_next():
            return 0
        if lapped_before != receiver.lapped_count:
            raise BroadcastReceiveError("unable to keep up with broadcast")
        length = receiver.length
        scratch = self._scratch_view
        msg_type_id = receiver.type_id
        offset = receiver.offset
        if length < 0 or length > len(scratch) or offset + length > receiver.capacity:
            if not receiver.validate():
                raise BroadcastReceiveError("unable to keep up with broadcast")
            raise BroadcastReceiveError(f"message length {length} does not fit the {len(scratch)}-byte scratch buffer")
        body = scratch[:length]
        body[:] = receiver.buffer.view(offset, length)
        if not receiver.validate():
            raise BroadcastReceiveError("unable to keep up with broadcast")
        handler(msg_type_id, body)
        return 1
