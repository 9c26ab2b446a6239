"""Replay sessions: recorded frames read back from segment files and offered as whole blocks.

A replay publishes on an exclusive publication that starts exactly where the
replay starts (same initial term id, term length and position), so each block
read from a segment lands at the same term offset it was recorded at; only the
session and stream ids in the frame headers are rewritten to the replay's. A
replay of an active recording stops at the recorded position and follows it as
it grows until the recording stops or the requested length is reached. A
bounded replay (:class:`~driver.archive.replay_bound.CounterBound`) reads no
further than a counter's value and waits while it has not moved.
"""

from __future__ import annotations

import enum
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from driver.archive.catalog import Catalog, RecordingDescriptor
from driver.archive.errors import InvalidPositionError
from driver.archive.replay_bound import CounterBound
from driver.archive.segments import segment_base_position, segment_path
from driver.client.publication import CLOSED, MAX_POSITION_EXCEEDED, NOT_CONNECTED
from driver.concurrent.atomic_buffer import AtomicBuffer, align
from driver.logbuffer.frame import FRAME_ALIGNMENT, HEADER_LENGTH

if TYPE_CHECKING:
    from driver.client.publication import ExclusivePublication
    from driver.concurrent.counters import CountersReader

__all__ = ["ReplaySession", "ReplayState", "check_replay_position"]

BLOCK_LENGTH = 256 * 1024
FOLLOW = -1


class ReplayState(enum.Enum):
    CONNECTING = "connecting"
    REPLAYING = "replaying"
    DONE = "done"
    FAILED = "failed"


def read_exact(fd: int, length: int, at: int) -> bytes:
    data = os.pread(fd, length, at)
    if len(data) != length:
        raise InvalidPositionError(f"segment holds {len(data)} of {length} bytes at {at}")
    return data


def check_replay_position(archive_dir: Path, descriptor: RecordingDescriptor, position: int) -> None:
    """A replay must start on a frame of the recording: within it, aligned, and at a frame's header."""
    end = descriptor.end_position
    if not descriptor.start_position <= position <= end:
        raise InvalidPositionError(
            f"position {position} is outside recording {descriptor.recording_id} [{descriptor.start_position}, {end}]"
        )
    if position & (FRAME_ALIGNMENT - 1):
        raise InvalidPositionError(f"position {position} is not {FRAME_ALIGNMENT}-byte aligned")
    if position == end:
        return
    term_length = descriptor.term_buffer_length
    base = segment_base_position(descriptor.start_position, position, term_length, descriptor.segment_file_length)
    path = segment_path(
        archive_dir,
        descriptor.recording_id,
        descriptor.start_position,
        base,
        term_length,
        descriptor.segment_file_length,
    )
    fd = os.open(path, os.O_RDONLY)
    try:
        header = read_exact(fd, HEADER_LENGTH, position - base)
    finally:
        os.close(fd)
    frame_length = int.from_bytes(header[0:4], "little", signed=True)
    term_offset = int.from_bytes(header[8:12], "little", signed=True)
    if frame_length < HEADER_LENGTH or term_offset != position & (term_length - 1):
        raise InvalidPositionError(
            f"position {position} is not the start of a frame in recording {descriptor.recording_id}"
        )


class ReplaySession:
    """Replays ``[position, position + length)`` of a recording (``length`` FOLLOW: until it stops)."""

    def __init__(
        self,
        replay_id: int,
        descriptor: RecordingDescriptor,
        catalog: Catalog,
        archive_dir: Path,
        publication: ExclusivePublication,
        position: int,
        length: int,
        connect_deadline_ns: int,
        *,
        block_length: int = BLOCK_LENGTH,
        bound: CounterBound | None = None,
        counters: CountersReader | None = None,
    ) -> None:
        """``bound`` (with the ``counters`` it reads): a bounded replay, never past that counter's value."""
        self.replay_id = replay_id
        self.recording_id = descriptor.recording_id
        self._descriptor = descriptor
        self._catalog = catalog
        self._dir = archive_dir
        self.publication = publication
        self.position = position
        self.limit = FOLLOW if length == FOLLOW else position + length
        self._connect_deadline_ns = connect_deadline_ns
        self._timeout_ns = max(connect_deadline_ns - time.monotonic_ns(), 0)
        self._unconnected_since_ns = 0
        self._block_length = min(block_length, descriptor.term_buffer_length)
        self._mask = descriptor.term_buffer_length - 1
        self._fd = -1
        self._base = -1
        self._pending: bytearray | None = None
        self._header_word = (publication.session_id & 0xFFFFFFFF) | ((publication.stream_id & 0xFFFFFFFF) << 32)
        self.state = ReplayState.CONNECTING
        self.error: str | None = None
        self._bound = bound
        self._counters = counters

    @property
    def is_done(self) -> bool:
        return self.state in (ReplayState.DONE, ReplayState.FAILED)

    def do_work(self, now_ns: int) -> int:
        if self.state is ReplayState.CONNECTING:
            if self.publication.is_connected:
                self.state = ReplayState.REPLAYING
            elif now_ns > self._connect_deadline_ns:
                return self._fail("no subscriber connected to the replay channel in time")
            else:
                return 0
        if self.state is not ReplayState.REPLAYING:
            return 0
        if self._pending is None:
            self._pending = self._read_block()
            if self._pending is None:
                if self._check_end():
                    return 1
                if self.publication.is_connected:  # waiting for more to replay
                    self._unconnected_since_ns = 0
                    return 0
                return self._unconnected(now_ns)  # waiting with nobody to wait for: do not wait forever
        result = self.publication.offer_block(self._pending)
        if result > 0:
            self.position += len(self._pending)
            self._pending = None
            self._unconnected_since_ns = 0
            return 1
        if result in (CLOSED, MAX_POSITION_EXCEEDED):
            return self._fail(f"replay publication refused the block ({result})")
        if result == NOT_CONNECTED:
            return self._unconnected(now_ns)
        self._unconnected_since_ns = 0
        return 0  # BACK_PRESSURED or ADMIN_ACTION: offer the same block again

    def _unconnected(self, now_ns: int) -> int:
        """The subscriber went away: give it the message timeout to come back, then end the replay."""
        if self._unconnected_since_ns == 0:
            self._unconnected_since_ns = now_ns
        elif now_ns - self._unconnected_since_ns > self._timeout_ns:
            return self._fail("the replay's subscriber went away")
        return 0

    def _end(self) -> tuple[int, bool]:
        """How far recorded bytes go now, and whether that is final."""
        descriptor = self._catalog.descriptor(self.recording_id)
        end = descriptor.end_position
        if self._bound is not None and self._counters is not None:
            return self._bounded_end(self._bound, self._counters, end, descriptor.is_active)
        final = not descriptor.is_active
        if self.limit != FOLLOW and self.limit <= end:
            return self.limit, True
        return end, final

    def _bounded_end(
        self, bound: CounterBound, counters: CountersReader, recorded: int, active: bool
    ) -> tuple[int, bool]:
        """A bounded replay's end: the counter's value (never past what is recorded), final at the replay's length
        or once the counter is gone; while the counter stands still the replay waits, even on a stopped recording
        (it may be extended), as Aeron's does."""
        counter_id = bound.counter_id
        try:
            value = bound.observe(
                counters.get_counter_state(counter_id),
                counters.get_counter_registration_id(counter_id),
                counters.get_counter_value(counter_id),
            )
        except ValueError:  # the counters file shrank under us: nothing more to read
            value = bound.observe(0, 0, 0)
        end = min(value, recorded)
        if self.limit != FOLLOW and self.limit <= end:
            return self.limit, True
        return end, bound.frozen and (value <= recorded or not active)

    def _check_end(self) -> int:
        end, final = self._end()
        if final and self.position >= end:
            self.state = ReplayState.DONE
            self.close()
            return 1
        return 0

    def _read_block(self) -> bytearray | None:
        end, _ = self._end()
        position = self.position
        if position >= end:
            return None
        term_remaining = self._mask + 1 - (position & self._mask)
        want = min(self._block_length, term_remaining, align(end - position, FRAME_ALIGNMENT))
        d = self._descriptor
        base = segment_base_position(d.start_position, position, d.term_buffer_length, d.segment_file_length)
        if base != self._base:
            self._close_file()
            path = segment_path(
                self._dir, self.recording_id, d.start_position, base, d.term_buffer_length, d.segment_file_length
            )
            self._fd = os.open(path, os.O_RDONLY)
            self._base = base
        raw = bytearray(os.pread(self._fd, min(term_remaining, self._block_length), position - base))
        if len(raw) >= HEADER_LENGTH:  # a frame longer than a block (a long PAD) goes alone, whole
            first = align(int.from_bytes(raw[0:4], "little", signed=True), FRAME_ALIGNMENT)
            if len(raw) < first <= term_remaining:
                raw = bytearray(os.pread(self._fd, first, position - base))
        # Whole frames only, up to the limit (a frame crossing the limit is sent whole).
        buffer = AtomicBuffer(raw)
        try:
            offset = 0
            stop = min(want, len(raw))
            while offset < stop and offset + HEADER_LENGTH <= len(raw):
                frame_length = buffer.get_int(offset)
                if frame_length < HEADER_LENGTH:
                    break
                aligned = align(frame_length, FRAME_ALIGNMENT)
                if offset + aligned > len(raw):
                    break
                buffer.put_long(offset + 12, self._header_word)
                offset += aligned
        finally:
            buffer.release()
        if offset == 0:
            return None
        del raw[offset:]
        return raw

    def _fail(self, reason: str) -> int:
        self.error = reason
        self.state = ReplayState.FAILED
        self.close()
        return 1

    def _close_file(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
            self._base = -1

    def close(self) -> None:
        self._close_file()
        self.publication.close()
