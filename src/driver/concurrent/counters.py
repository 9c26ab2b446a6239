"""Agrona's counters: a metadata buffer and a values buffer, indexed by counter id.

Theory of operation
-------------------
Counter ``id`` owns a 128-byte slot at ``id * 128`` in the values buffer and a
512-byte record at ``id * 512`` in the metadata buffer. The value slot holds the
int64 value at +0 and, as today's Agrona lays it out, the registration id at
+8, the owner id (the client, -1 for none) at +16 and the reference id at +24;
Agrona 0.9.31 (Aeron 1.15.1) reads only the value and ignores the rest of the
slot, so one layout serves both generations. The metadata record:

======  =====  ================================================================
offset  size   field
======  =====  ================================================================
0       int32  state: 0 unused, 1 allocated, -1 reclaimed (release-stored last)
4       int32  type id
8       int64  free-for-reuse deadline, ms epoch (Long.MAX while allocated)
16      112    key (type-specific bytes)
128     int32  label length
132     380    label (ASCII)
======  =====  ================================================================

Ids are handed out from a high-water mark; a freed id goes on a free list and
is reused only after its deadline, so a reader that still holds the id sees a
reclaimed record, not somebody else's counter. Readers walk the metadata in id
order and stop at the first never-used record.

Only one process (the driver) allocates; any process may read and update values.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.errors import DriverError

__all__ = [
    "COUNTER_LENGTH",
    "DEFAULT_TYPE_ID",
    "FREE_FOR_REUSE_DEADLINE_OFFSET",
    "KEY_OFFSET",
    "LABEL_LENGTH_OFFSET",
    "LABEL_OFFSET",
    "MAX_KEY_LENGTH",
    "MAX_LABEL_LENGTH",
    "METADATA_LENGTH",
    "NOT_FREE_TO_REUSE",
    "NULL_COUNTER_ID",
    "OWNER_ID_OFFSET",
    "RECORD_ALLOCATED",
    "RECORD_RECLAIMED",
    "RECORD_UNUSED",
    "REFERENCE_ID_OFFSET",
    "REGISTRATION_ID_VALUE_OFFSET",
    "TYPE_ID_OFFSET",
    "AtomicCounter",
    "CountersFullError",
    "CountersManager",
    "CountersReader",
    "Position",
    "counter_offset",
    "encode_ascii",
    "metadata_offset",
]

RECORD_UNUSED = 0
RECORD_ALLOCATED = 1
RECORD_RECLAIMED = -1
NULL_COUNTER_ID = -1
DEFAULT_TYPE_ID = 0
NOT_FREE_TO_REUSE = (1 << 63) - 1

TYPE_ID_OFFSET = 4
FREE_FOR_REUSE_DEADLINE_OFFSET = 8
KEY_OFFSET = 16
MAX_KEY_LENGTH = 112
LABEL_LENGTH_OFFSET = 128
LABEL_OFFSET = 132
MAX_LABEL_LENGTH = 380
METADATA_LENGTH = 512
COUNTER_LENGTH = 128


class CountersFullError(DriverError):
    """No counter id is free (values or metadata buffer exhausted)."""


REGISTRATION_ID_VALUE_OFFSET = 8
OWNER_ID_OFFSET = 16
REFERENCE_ID_OFFSET = 24
DEFAULT_REGISTRATION_ID = 0
DEFAULT_OWNER_ID = 0
DEFAULT_REFERENCE_ID = 0


def counter_offset(counter_id: int) -> int:
    return counter_id * COUNTER_LENGTH


def metadata_offset(counter_id: int) -> int:
    return counter_id * METADATA_LENGTH


def encode_ascii(text: str, max_length: int) -> bytes:
    """Encode as Agrona's ``putStringWithoutLengthAscii``: non-ASCII becomes '?', then truncate."""
    return text[:max_length].encode("ascii", "replace")


def _epoch_ms() -> int:
    return time.time_ns() // 1_000_000


class CountersReader:
    """Read-only view of counters; what AeronStat-like tools and clients use."""

    def __init__(self, metadata: AtomicBuffer, values: AtomicBuffer) -> None:
        self._metadata = metadata
        self._values = values
        self._max_counter_id = values.capacity // COUNTER_LENGTH

    @property
    def metadata_buffer(self) -> AtomicBuffer:
        return self._metadata

    @property
    def values_buffer(self) -> AtomicBuffer:
        return self._values

    @property
    def max_counter_id(self) -> int:
        """Number of counter slots in the values buffer (ids are ``0 .. max_counter_id - 1``)."""
        return self._max_counter_id

    def _check_id(self, counter_id: int) -> None:
        if (
            counter_id < 0
            or counter_id >= self._max_counter_id
            or (counter_id + 1) * METADATA_LENGTH > self._metadata.capacity
        ):
            raise ValueError(f"counter_id={counter_id} is invalid: must be in 0..{self._max_counter_id - 1}")

    def get_counter_value(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._values.get_long_volatile(counter_id * COUNTER_LENGTH)

    def get_counter_state(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._metadata.get_int_volatile(counter_id * METADATA_LENGTH)

    def get_counter_type_id(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._metadata.get_int(counter_id * METADATA_LENGTH + TYPE_ID_OFFSET)

    def free_for_reuse_deadline(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._metadata.get_long_volatile(counter_id * METADATA_LENGTH + FREE_FOR_REUSE_DEADLINE_OFFSET)

    def get_counter_label(self, counter_id: int) -> str:
        self._check_id(counter_id)
        return self._label(counter_id * METADATA_LENGTH)

    def get_counter_key(self, counter_id: int) -> bytes:
        """The whole 112-byte key area (its meaning depends on the type id)."""
        self._check_id(counter_id)
        return self._metadata.get_bytes(counter_id * METADATA_LENGTH + KEY_OFFSET, MAX_KEY_LENGTH)

    def _label(self, record_offset: int) -> str:
        length = self._metadata.get_int(record_offset + LABEL_LENGTH_OFFSET)
        length = max(0, min(length, MAX_LABEL_LENGTH))
        return self._metadata.get_bytes(record_offset + LABEL_OFFSET, length).decode("utf-8", "replace")

    def for_each(self, fn: Callable[[int, int, bytes, str], None]) -> None:
        """fn(counter_id, type_id, key, label) for each allocated counter, up to the first unused."""
        metadata = self._metadata
        limit = min(metadata.capacity // METADATA_LENGTH, self._max_counter_id)
        for counter_id in range(limit):
            offset = counter_id * METADATA_LENGTH
            state = metadata.get_int_volatile(offset)
            if state == RECORD_ALLOCATED:
                fn(
                    counter_id,
                    metadata.get_int(offset + TYPE_ID_OFFSET),
                    metadata.get_bytes(offset + KEY_OFFSET, MAX_KEY_LENGTH),
                    self._label(offset),
                )
            elif state == RECORD_UNUSED:
                break

    def get_counter_registration_id(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._values.get_long_volatile(counter_id * COUNTER_LENGTH + REGISTRATION_ID_VALUE_OFFSET)

    def get_counter_owner_id(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._values.get_long_volatile(counter_id * COUNTER_LENGTH + OWNER_ID_OFFSET)

    def get_counter_reference_id(self, counter_id: int) -> int:
        self._check_id(counter_id)
        return self._values.get_long_volatile(counter_id * COUNTER_LENGTH + REFERENCE_ID_OFFSET)

    def find_by_registration_id(self, type_id: int, registration_id: int) -> int:
        """Id of the allocated counter of ``type_id`` whose value slot carries ``registration_id`` (today's way)."""
        metadata = self._metadata
        limit = min(metadata.capacity // METADATA_LENGTH, self._max_counter_id)
        for counter_id in range(limit):
            offset = counter_id * METADATA_LENGTH
            state = metadata.get_int_volatile(offset)
            if state == RECORD_UNUSED:
                break
            if (
                state == RECORD_ALLOCATED
                and metadata.get_int(offset + TYPE_ID_OFFSET) == type_id
                and self._values.get_long_volatile(counter_id * COUNTER_LENGTH + REGISTRATION_ID_VALUE_OFFSET)
                == registration_id
            ):
                return counter_id
        return NULL_COUNTER_ID

    def ids_by_registration_id(self, type_id: int) -> dict[int, int]:
        """{int64 at the start of the key: counter id} of every allocated counter of ``type_id``: one scan for many
        lookups (a server's thousand receiver high-water marks), where :meth:`find_by_type_id_and_registration_id`
        scans once for each."""
        metadata = self._metadata
        limit = min(metadata.capacity // METADATA_LENGTH, self._max_counter_id)
        found: dict[int, int] = {}
        for counter_id in range(limit):
            offset = counter_id * METADATA_LENGTH
            state = metadata.get_int_volatile(offset)
            if state == RECORD_UNUSED:
                break
            if state == RECORD_ALLOCATED and metadata.get_int(offset + TYPE_ID_OFFSET) == type_id:
                found[metadata.get_long(offset + KEY_OFFSET)] = counter_id
        return found

    def find_by_type_id_and_registration_id(self, type_id: int, registration_id: int) -> int:
        """Id of the allocated counter of ``type_id`` whose key starts with int64 ``registration_id``.

        Works for stream-position and heartbeat counters; NULL_COUNTER_ID if none.
        """
        metadata = self._metadata
        limit = min(metadata.capacity // METADATA_LENGTH, self._max_counter_id)
        for counter_id in range(limit):
            offset = counter_id * METADATA_LENGTH
            state = metadata.get_int_volatile(offset)
            if state == RECORD_UNUSED:
                break
            if (
                state == RECORD_ALLOCATED
                and metadata.get_int(offset + TYPE_ID_OFFSET) == type_id
                and metadata.get_long(offset + KEY_OFFSET) == registration_id
            ):
                return counter_id
        return NULL_COUNTER_ID


class CountersManager(CountersReader):
    """Allocates and frees counters (the driver conductor only; not thread-safe)."""

    def __init__(
        self,
        metadata: AtomicBuffer,
        values: AtomicBuffer,
        clock_ms: Callable[[], int] = _epoch_ms,
        free_to_reuse_timeout_ms: int = 1000,
    ) -> None:
        super().__init__(metadata, values)
        if metadata.capacity < values.capacity * 2:
            raise ValueError(
                f"metadata length {metadata.capacity} is invalid: must be at least twice the "
                f"values length {values.capacity}"
            )
        self._clock_ms = clock_ms
        self._free_to_reuse_timeout_ms = free_to_reuse_timeout_ms
        self._id_high_water_mark = -1
        self._free_list: deque[int] = deque()

    def allocate(
        self,
        label: str,
        type_id: int = DEFAULT_TYPE_ID,
        key: bytes = b"",
        *,
        registration_id: int = DEFAULT_REGISTRATION_ID,
        owner_id: int = DEFAULT_OWNER_ID,
        reference_id: int = DEFAULT_REFERENCE_ID,
    ) -> int:
        """Allocate a counter; the label is ASCII-encoded ('?' for others) and cut to 380 bytes."""
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"key length {len(key)} is invalid: at most {MAX_KEY_LENGTH} bytes")
        return self._allocate(
            type_id, key, encode_ascii(label, MAX_LABEL_LENGTH), registration_id, owner_id, reference_id
        )

    def allocate_raw_label(
        self,
        type_id: int,
        key: bytes,
        label: bytes,
        *,
        registration_id: int = DEFAULT_REGISTRATION_ID,
        owner_id: int = DEFAULT_OWNER_ID,
        reference_id: int = DEFAULT_REFERENCE_ID,
    ) -> int:
        """Allocate with an already-encoded label (truncated to 380 bytes)."""
        if len(key) > MAX_KEY_LENGTH:
            raise ValueError(f"key length {len(key)} is invalid: at most {MAX_KEY_LENGTH} bytes")
        return self._allocate(type_id, key, label[:MAX_LABEL_LENGTH], registration_id, owner_id, reference_id)

    def set_counter_registration_id(self, counter_id: int, registration_id: int) -> None:
        self._values.put_long_ordered(counter_id * COUNTER_LENGTH + REGISTRATION_ID_VALUE_OFFSET, registration_id)

    def set_counter_owner_id(self, counter_id: int, owner_id: int) -> None:
        self._values.put_long(counter_id * COUNTER_LENGTH + OWNER_ID_OFFSET, owner_id)

    def set_counter_reference_id(self, counter_id: int, reference_id: int) -> None:
        self._values.put_long(counter_id * COUNTER_LENGTH + REFERENCE_ID_OFFSET, reference_id)

    def _allocate(
        self,
        type_id: int,
        key: bytes,
        label: bytes,
        registration_id: int = DEFAULT_REGISTRATION_ID,
        owner_id: int = DEFAULT_OWNER_ID,
        reference_id: int = DEFAULT_REFERENCE_ID,
    ) -> int:
        counter_id = self._next_counter_id()
        if (counter_id + 1) * COUNTER_LENGTH > self._values.capacity or (
            counter_id + 1
        ) * METADATA_LENGTH > self._metadata.capacity:
            self._id_high_water_mark -= 1
            raise CountersFullError(
                f"unable to allocate counter {counter_id}: values buffer holds {self._max_counter_id}"
            )
        values = self._values
        value_offset = counter_id * COUNTER_LENGTH
        values.put_long(value_offset + OWNER_ID_OFFSET, owner_id)
        values.put_long(value_offset + REFERENCE_ID_OFFSET, reference_id)
        values.put_long_ordered(value_offset + REGISTRATION_ID_VALUE_OFFSET, registration_id)
        metadata = self._metadata
        offset = counter_id * METADATA_LENGTH
        metadata.put_int(offset + TYPE_ID_OFFSET, type_id)
        metadata.put_long(offset + FREE_FOR_REUSE_DEADLINE_OFFSET, NOT_FREE_TO_REUSE)
        metadata.set_memory(offset + KEY_OFFSET, MAX_KEY_LENGTH, 0)
        if key:
            metadata.put_bytes(offset + KEY_OFFSET, key)
        metadata.put_int(offset + LABEL_LENGTH_OFFSET, len(label))
        if label:
            metadata.put_bytes(offset + LABEL_OFFSET, label)
        metadata.put_int_ordered(offset, RECORD_ALLOCATED)
        return counter_id

    def _next_counter_id(self) -> int:
        # Ids are freed in time order with one timeout, so the oldest is the first that may be due: a driver
        # with thousands freed in the last second (connections coming and going) checks one, not all.
        free_list = self._free_list
        if free_list:
            counter_id = free_list[0]
            deadline = self._metadata.get_long_volatile(counter_id * METADATA_LENGTH + FREE_FOR_REUSE_DEADLINE_OFFSET)
            if self._clock_ms() >= deadline:
                free_list.popleft()
                self._values.put_long_ordered(counter_id * COUNTER_LENGTH, 0)
                return counter_id
        self._id_high_water_mark += 1
        return self._id_high_water_mark

    def new_counter(self, label: str, type_id: int = DEFAULT_TYPE_ID, key: bytes = b"") -> AtomicCounter:
        return AtomicCounter(self._values, self.allocate(label, type_id, key), self)

    def free(self, counter_id: int) -> None:
        """Reclaim ``counter_id``; it becomes reusable after the free-to-reuse timeout."""
        self._check_id(counter_id)
        offset = counter_id * METADATA_LENGTH
        self._metadata.put_long(
            offset + FREE_FOR_REUSE_DEADLINE_OFFSET, self._clock_ms() + self._free_to_reuse_timeout_ms
        )
        self._metadata.put_int_ordered(offset, RECORD_RECLAIMED)
        self._free_list.append(counter_id)

    def set_counter_value(self, counter_id: int, value: int) -> None:
        self._values.put_long_ordered(counter_id * COUNTER_LENGTH, value)


class AtomicCounter:
    """One int64 counter value in shared memory; also serves as Aeron's ``Position``."""

    __slots__ = ("_buffer", "_manager", "_offset", "id", "is_closed")

    def __init__(self, values: AtomicBuffer, counter_id: int, manager: CountersManager | None = None) -> None:
        offset = counter_id * COUNTER_LENGTH
        if counter_id < 0 or offset + 8 > values.capacity:
            raise ValueError(f"counter_id={counter_id} is invalid: outside the values buffer")
        self._buffer = values
        self._offset = offset
        self._manager = manager
        self.id = counter_id
        self.is_closed = False

    def __repr__(self) -> str:
        return f"AtomicCounter(id={self.id}, value={self.get_volatile()})"

    def get(self) -> int:
        return self._buffer.get_long_volatile(self._offset)

    def get_volatile(self) -> int:
        return self._buffer.get_long_volatile(self._offset)

    def location(self) -> tuple[AtomicBuffer, int]:
        """The buffer and offset of the value, for native scans over many counters."""
        return self._buffer, self._offset

    def get_weak(self) -> int:
        return self._buffer.get_long(self._offset)

    def set(self, value: int) -> None:
        self._buffer.put_long_volatile(self._offset, value)

    def set_volatile(self, value: int) -> None:
        self._buffer.put_long_volatile(self._offset, value)

    def set_ordered(self, value: int) -> None:
        self._buffer.put_long_ordered(self._offset, value)

    def set_weak(self, value: int) -> None:
        self._buffer.put_long(self._offset, value)

    def increment(self) -> int:
        """Atomic add of 1; returns the value before."""
        return self._buffer.get_and_add_long(self._offset, 1)

    def increment_ordered(self) -> int:
        """Single-writer add of 1 (cheaper release store); returns the value before."""
        buffer = self._buffer
        value = buffer.get_long(self._offset)
        buffer.put_long_ordered(self._offset, value + 1)
        return value

    def get_and_add(self, delta: int) -> int:
        return self._buffer.get_and_add_long(self._offset, delta)

    def get_and_add_ordered(self, delta: int) -> int:
        buffer = self._buffer
        value = buffer.get_long(self._offset)
        buffer.put_long_ordered(self._offset, value + delta)
        return value

    def compare_and_set(self, expected: int, update: int) -> bool:
        return self._buffer.compare_and_set_long(self._offset, expected, update)

    def propose_max(self, value: int) -> bool:
        """Single-writer: raise the value to ``value`` if it is higher."""
        buffer = self._buffer
        if buffer.get_long(self._offset) < value:
            buffer.put_long(self._offset, value)
            return True
        return False

    def propose_max_ordered(self, value: int) -> bool:
        """Single-writer: raise the value (release store) to ``value`` if it is higher."""
        buffer = self._buffer
        if buffer.get_long(self._offset) < value:
            buffer.put_long_ordered(self._offset, value)
            return True
        return False

    def close(self) -> None:
        """Free the counter through its manager (once); the value stays readable."""
        if not self.is_closed:
            self.is_closed = True
            if self._manager is not None:
                self._manager.free(self.id)


Position = AtomicCounter
"""Aeron's ``UnsafeBufferPosition`` has the same operations; one class serves both."""
