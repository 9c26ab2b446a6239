"""Agrona's ``DistinctErrorLog`` (0.9.31 layout): each distinct error once, with a count.

Theory of operation
-------------------
The buffer holds 8-byte aligned records, appended and never removed:

======  =====  ==========================================================
offset  size   field
======  =====  ==========================================================
0       int32  length: header + text (release-stored last; 0 = end of log)
4       int32  observation count (atomic add)
8       int64  last observation, ms epoch (release store)
16      int64  first observation, ms epoch
24      ...    UTF-8 text: the error with its stack trace
======  =====  ==========================================================

Errors are distinct by their encoded text (Python's formatted traceback, so
Java's ErrorStat prints it like a Java stack trace). The first sighting
appends a record under a lock; every sighting (first included) then bumps the
count and the last timestamp without the lock, so repeats stay cheap. When the
buffer is full, new distinct errors are dropped (``record`` returns False)
while repeats of known ones are still counted.
"""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable

import attrs

from driver.concurrent.atomic_buffer import AtomicBuffer

__all__ = [
    "ENCODED_ERROR_OFFSET",
    "FIRST_OBSERVATION_TIMESTAMP_OFFSET",
    "LAST_OBSERVATION_TIMESTAMP_OFFSET",
    "LENGTH_OFFSET",
    "OBSERVATION_COUNT_OFFSET",
    "RECORD_ALIGNMENT",
    "DistinctErrorLog",
    "ErrorObservation",
    "encode_error",
    "has_errors",
    "read_error_log",
]

LENGTH_OFFSET = 0
OBSERVATION_COUNT_OFFSET = 4
LAST_OBSERVATION_TIMESTAMP_OFFSET = 8
FIRST_OBSERVATION_TIMESTAMP_OFFSET = 16
ENCODED_ERROR_OFFSET = 24
RECORD_ALIGNMENT = 8


def encode_error(error: BaseException | str) -> str:
    """The text stored for an error: a string as is, an exception as its formatted traceback."""
    if isinstance(error, str):
        return error
    return "".join(traceback.format_exception(error))


class DistinctErrorLog:
    """Writer side; safe to share between threads of one process (one writer process per buffer)."""

    def __init__(self, buffer: AtomicBuffer, clock_ms: Callable[[], int]) -> None:
        self._buffer = buffer
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._offset_by_text: dict[str, int] = {}
        self._next_offset = 0

    @property
    def buffer(self) -> AtomicBuffer:
        return self._buffer

    def record(self, error: BaseException | str) -> bool:
        """Count one observation; False if it is new and the log has no room for it."""
        timestamp = self._clock_ms()
        text = encode_error(error)
        offset = self._offset_by_text.get(text)
        if offset is None:
            with self._lock:
                offset = self._offset_by_text.get(text)
                if offset is None:
                    offset = self._append(text, timestamp)
                    if offset < 0:
                        return False
        buffer = self._buffer
        buffer.get_and_add_int(offset + OBSERVATION_COUNT_OFFSET, 1)
        buffer.put_long_ordered(offset + LAST_OBSERVATION_TIMESTAMP_OFFSET, timestamp)
        return True

    def _append(self, text: str, timestamp: int) -> int:
        encoded = text.encode("utf-8", "replace")
        length = ENCODED_ERROR_OFFSET + len(encoded)
        offset = self._next_offset
        buffer = self._buffer
        if offset + length > buffer.capacity:
            return -1
        buffer.put_bytes(offset + ENCODED_ERROR_OFFSET, encoded)
        buffer.put_long(offset + FIRST_OBSERVATION_TIMESTAMP_OFFSET, timestamp)
        self._next_offset = (offset + length + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT
        self._offset_by_text[text] = offset
        buffer.put_int_ordered(offset + LENGTH_OFFSET, length)
        return offset


@attrs.frozen
class ErrorObservation:
    observation_count: int
    first_observation_ms: int
    last_observation_ms: int
    text: str


def has_errors(buffer: AtomicBuffer) -> bool:
    return buffer.capacity >= 4 and buffer.get_int_volatile(LENGTH_OFFSET) != 0


def read_error_log(buffer: AtomicBuffer, since_ms: int = 0) -> list[ErrorObservation]:
    """Every record last observed at or after ``since_ms``, in log order."""
    observations: list[ErrorObservation] = []
    capacity = buffer.capacity
    offset = 0
    while offset + ENCODED_ERROR_OFFSET <= capacity:
        length = buffer.get_int_volatile(offset + LENGTH_OFFSET)
        if length < ENCODED_ERROR_OFFSET or offset + length > capacity:
            break  # 0 = end of log; anything else is not a record we can trust
        last_ms = buffer.get_long_volatile(offset + LAST_OBSERVATION_TIMESTAMP_OFFSET)
        if last_ms >= since_ms:
            observations.append(
                ErrorObservation(
                    observation_count=buffer.get_int(offset + OBSERVATION_COUNT_OFFSET),
                    first_observation_ms=buffer.get_long(offset + FIRST_OBSERVATION_TIMESTAMP_OFFSET),
                    last_observation_ms=last_ms,
                    text=buffer.get_bytes(offset + ENCODED_ERROR_OFFSET, length - ENCODED_ERROR_OFFSET).decode(
                        "utf-8", "replace"
                    ),
                )
            )
        offset += (length + RECORD_ALIGNMENT - 1) & -RECORD_ALIGNMENT
    return observations
