"""Helpers for the archive system tests: an archive beside an embedded driver, publishing and collecting
streams with bounded loops, reading a recording's segment bytes, parsing frames, and the standalone
``python -m driver.archive`` process (stopped by pid).
"""

from __future__ import annotations

import os
import struct
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from driver.archive import Archive, ArchiveContext, RecordingDescriptor
from driver.archive.client import replay_session_id
from driver.archive.segments import segment_base_position, segment_files, segment_path
from driver.client import Aeron, FragmentAssembler, Header, Publication, Subscription
from driver.client.subscription import Image
from driver.concurrent.atomic_buffer import align
from support.archive_channels import LOCAL_ARCHIVE_ENV
from support.logged_process import LoggedProcess
from support.waiting import execute_until

__all__ = [
    "FRAME",
    "ArchiveHarness",
    "ArchiveProcess",
    "Collector",
    "Frame",
    "RawCollector",
    "assemble",
    "message",
    "offer_all",
    "parse_frames",
    "positioned_channel",
    "recording_bytes",
    "segment_names",
    "without_ids",
]

FRAME = struct.Struct("<iBBHiiiiq")
KIB = 1024
LOOP_TIMEOUT_S = 20.0


def message(i: int, length: int) -> bytes:
    """Message ``i`` of ``length`` bytes: its index, then a pattern that differs per message."""
    head = i.to_bytes(4, "little")
    body = bytes((i + k) & 0xFF for k in range(min(length, 251)))
    return (head + body * (length // 251 + 1))[:length]


def positioned_channel(channel: str, initial_term_id: int, position: int, term_length: int) -> str:
    """``channel`` for an exclusive publication that starts at stream ``position``."""
    bits = term_length.bit_length() - 1
    term_id = initial_term_id + (position >> bits)
    term_id = ((term_id + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    separator = "|" if "?" in channel else "?"
    return (
        f"{channel}{separator}init-term-id={initial_term_id}|term-id={term_id}"
        f"|term-offset={position & (term_length - 1)}"
    )


@attrs.frozen
class Frame:
    position: int
    length: int
    flags: int
    type: int
    term_offset: int
    session_id: int
    stream_id: int
    term_id: int
    payload: bytes


def parse_frames(data: bytes | bytearray | memoryview, position: int, *, skip_zeros: bool = False) -> list[Frame]:
    """Every frame in ``data`` (which starts at stream ``position``); stops at the first uncommitted slot."""
    frames: list[Frame] = []
    view = memoryview(data)
    offset = 0
    while offset + 32 <= len(view):
        length, _version, flags, kind, term_offset, session, stream, term_id, _reserved = FRAME.unpack_from(
            view, offset
        )
        if length <= 0:
            if skip_zeros:
                offset += 32
                continue
            break
        frames.append(
            Frame(
                position + offset,
                length,
                flags,
                kind,
                term_offset,
                session,
                stream,
                term_id,
                bytes(view[offset + 32 : offset + length]),
            )
        )
        offset += align(length, 32)
    return frames


def assemble(frames: Iterable[Frame]) -> list[bytes]:
    """Whole messages from DATA frames (PAD skipped), by their BEGIN/END flags."""
    messages: list[bytes] = []
    partial: bytearray | None = None
    for frame in frames:
        if frame.type != 1:
            continue
        begin, end = frame.flags & 0x80, frame.flags & 0x40
        if begin and end:
            messages.append(frame.payload)
        elif begin:
            partial = bytearray(frame.payload)
        elif partial is not None:
            partial += frame.payload
            if end:
                messages.append(bytes(partial))
                partial = None
    return messages


def without_ids(data: bytes | bytearray, position: int = 0) -> bytes:
    """``data`` with every frame's session and stream id zeroed (a replay rewrites them)."""
    out = bytearray(data)
    for frame in parse_frames(data, position):
        at = frame.position - position
        out[at + 12 : at + 20] = bytes(8)
    return bytes(out)


def recording_bytes(
    archive_dir: Path, d: RecordingDescriptor, start: int | None = None, end: int | None = None
) -> bytes:
    """The recording's bytes in ``[start, end)`` (default: all of it), read from its segment files."""
    start = d.start_position if start is None else start
    end = d.end_position if end is None else end
    out = bytearray()
    position = start
    while position < end:
        base = segment_base_position(d.start_position, position, d.term_buffer_length, d.segment_file_length)
        stop = min(end, base + d.segment_file_length)
        path = segment_path(
            archive_dir, d.recording_id, d.start_position, position, d.term_buffer_length, d.segment_file_length
        )
        with path.open("rb") as f:
            f.seek(position - base)
            chunk = f.read(stop - position)
        if len(chunk) != stop - position:
            raise AssertionError(f"segment {base} holds {len(chunk)} of {stop - position} bytes at {position}")
        out += chunk
        position = stop
    return bytes(out)


def segment_names(archive_dir: Path, recording_id: int) -> list[str]:
    return [path.name for _, path in segment_files(archive_dir, recording_id)]


def offer_all(
    publication: Publication,
    messages: Sequence[bytes],
    while_waiting: Callable[[], object] | None = None,
    timeout_s: float = LOOP_TIMEOUT_S,
) -> int:
    """Offer every message in order (retrying back pressure, running ``while_waiting``); the final position."""
    deadline = time.monotonic() + timeout_s
    position = publication.position
    for payload in messages:
        while (result := publication.offer(payload)) <= 0:
            if result == -4:  # CLOSED
                raise AssertionError("publication closed while offering")
            if while_waiting is not None:
                while_waiting()
            if time.monotonic() > deadline:
                raise AssertionError(f"offer still refused ({result}) after {timeout_s} s")
        position = result
    return position


class Collector:
    """Whole messages from a subscription (fragments reassembled), polled with bounded loops."""

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.messages: list[bytes] = []
        self.headers: list[tuple[int, int]] = []  # (session id, position after the message)
        self.seen_image = False
        self._assembler = FragmentAssembler(self._on_message)

    def _on_message(self, payload: memoryview, header: Header) -> None:
        self.messages.append(bytes(payload))
        self.headers.append((header.session_id, header.position))

    def poll(self) -> int:
        return self.subscription.poll(self._assembler, 256)

    def poll_until(self, count: int, timeout_s: float = LOOP_TIMEOUT_S) -> list[bytes]:
        try:
            execute_until(
                lambda: len(self.messages) >= count,
                self.poll,
                timeout_s=timeout_s,
                max_iterations=10_000_000,
                interval_s=0.0001,
                description=f"{count} messages on {self.subscription.channel}",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc} (have {len(self.messages)})") from None
        return self.messages


class RawCollector:
    """The raw term bytes an image delivers (Image.block_poll), from its join position on."""

    def __init__(self, subscription: Subscription) -> None:
        self.subscription = subscription
        self.data = bytearray()
        self.start: int | None = None

    @property
    def image(self) -> Image | None:
        images = self.subscription.images
        return images[0] if images else None

    def _on_block(self, block: memoryview, position: int) -> None:
        if self.start is None:
            self.start = position
        if position != self.start + len(self.data):
            raise AssertionError(f"block at {position}, expected {self.start + len(self.data)}")
        self.data += block

    def poll(self) -> int:
        image = self.image
        return 0 if image is None else image.block_poll(self._on_block, 1 << 20)

    @property
    def position(self) -> int:
        return (self.start or 0) + len(self.data)

    def poll_until(self, position: int, timeout_s: float = LOOP_TIMEOUT_S) -> bytes:
        execute_until(
            lambda: self.start is not None and self.position >= position,
            self.poll,
            timeout_s=timeout_s,
            max_iterations=10_000_000,
            interval_s=0.0001,
            description=f"raw bytes up to {position} (at {self.position})",
        )
        return bytes(self.data)


class ArchiveHarness:
    """An in-process archive beside the test's embedded driver, its errors, and a client of that driver."""

    def __init__(self, aeron_dir: Path, archive_dir: Path, **settings: Any) -> None:
        self.aeron_dir = aeron_dir
        self.archive_dir = archive_dir
        self.errors: list[BaseException] = []
        options: dict[str, Any] = {
            "aeron_dir": aeron_dir,
            "archive_dir": archive_dir,
            "segment_file_length": 64 * KIB,
            "progress_interval_ns": 20_000_000,
            "message_timeout_ns": 5_000_000_000,
            "error_handler": self.errors.append,
        }
        options.update(settings)
        self.context = ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, **options)
        self.archive = Archive(self.context)
        self.aeron: Aeron | None = None
        try:
            self.aeron = Aeron.connect(aeron_dir=aeron_dir)
        except BaseException:
            self.archive.close()
            raise

    @property
    def client(self) -> Aeron:
        assert self.aeron is not None
        return self.aeron

    def wait_for_recordings(self, count: int, timeout_s: float = 10.0) -> list[RecordingDescriptor]:
        result: list[RecordingDescriptor] = execute_until(
            lambda: (found := self.archive.recordings()) and len(found) >= count and found,
            timeout_s=timeout_s,
            description=f"{count} recording(s)",
        )
        return result

    def wait_recorded(self, recording_id: int, position: int, timeout_s: float = LOOP_TIMEOUT_S) -> RecordingDescriptor:
        result: RecordingDescriptor = execute_until(
            lambda: (d := self.archive.recording(recording_id)).end_position >= position and d,
            timeout_s=timeout_s,
            description=f"recording {recording_id} at {position}",
        )
        return result

    def wait_stopped(self, recording_id: int, timeout_s: float = LOOP_TIMEOUT_S) -> RecordingDescriptor:
        result: RecordingDescriptor = execute_until(
            lambda: not (d := self.archive.recording(recording_id)).is_active and d,
            timeout_s=timeout_s,
            description=f"recording {recording_id} stopped",
        )
        return result

    def replay_messages(
        self, recording_id: int, count: int, *, position: int = -1, length: int = -1, stream_id: int = 99
    ) -> list[bytes]:
        """Replay onto IPC and collect ``count`` whole messages."""
        replay_id = self.archive.replay(recording_id, "aeron:ipc", stream_id, position=position, length=length)
        subscription = self.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(replay_id)}", stream_id)
        try:
            return Collector(subscription).poll_until(count)
        finally:
            subscription.close()

    def replay_raw(
        self, recording_id: int, position: int, end: int, *, length: int = -1, stream_id: int = 98
    ) -> tuple[bytes, int]:
        """Replay onto IPC; the raw bytes from ``position`` up to at least ``end``, and the replay's session id."""
        replay_id = self.archive.replay(recording_id, "aeron:ipc", stream_id, position=position, length=length)
        subscription = self.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(replay_id)}", stream_id)
        try:
            raw = RawCollector(subscription)
            data = raw.poll_until(end)
            assert raw.start == position
            return data, replay_session_id(replay_id)
        finally:
            subscription.close()

    def close(self) -> None:
        try:
            if self.aeron is not None:
                self.aeron.close()
                self.aeron = None
        finally:
            self.archive.close()


class ArchiveProcess(LoggedProcess):
    """``python -m driver.archive`` (optionally ``--with-driver``) as a child process, stopped by pid."""

    @classmethod
    def start(
        cls,
        archive_dir: Path,
        aeron_dir: Path,
        log_path: Path,
        *,
        with_driver: bool = True,
        args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        prefix: Sequence[str] = (),
    ) -> ArchiveProcess:
        command = [
            *(prefix or [sys.executable, "-m", "driver.archive"]),
            "-d",
            str(aeron_dir),
            "--archive-dir",
            str(archive_dir),
            *(["--with-driver"] if with_driver else []),
            *args,
        ]
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        archive = cls.spawn(command, log_path, environment)
        try:
            execute_until(
                archive._ready, archive._check_alive, timeout_s=30, interval_s=0.02, description="archive ready"
            )
        except BaseException:
            archive.kill()
            raise
        return archive

    def _check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"archive exited with {self.process.returncode}: {self.output()[-2000:]}")

    def _ready(self) -> bool:
        return "archive ready" in self.output()


def record_stopped(harness: ArchiveHarness, channel: str, stream_id: int, messages: list[bytes]) -> int:
    """Record ``messages`` on a fresh exclusive publication of ``channel``/``stream_id``, stop; the recording id."""
    harness.archive.start_recording(channel, stream_id)
    publication = harness.client.add_exclusive_publication(channel, stream_id)
    d = execute_until(
        lambda: next((d for d in harness.archive.recordings() if d.session_id == publication.session_id), None),
        description=f"recording of stream {stream_id}",
    )
    end = offer_all(publication, messages)
    harness.wait_recorded(d.recording_id, end)
    harness.archive.stop_recording(channel, stream_id)
    publication.close()
    harness.wait_stopped(d.recording_id)
    return d.recording_id
