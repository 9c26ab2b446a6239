"""Real recordings for the Spark tests: an embedded media driver, an archive and a client in one temp dir.

Every publish waits (bounded) until the archive has recorded it, and keeps
the stream position of each message: the offer returns the position after
the message, so the message began ``framed length`` bytes earlier (a PAD the
appender inserted at a term's end is before that, and not part of it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path

from driver.archive import Archive, RecordingDescriptor
from driver.client.aeron import Aeron
from driver.client.publication import ExclusivePublication
from driver.core.media_driver import MediaDriver
from driver.logbuffer.appender import fragmented_required_length
from support.waiting import execute_until

SEGMENT_LENGTH = 64 * 1024
CHANNEL = "aeron:ipc?term-length=64k"
OFFER_TIMEOUT_S = 10.0


def framed_length(length: int, max_payload_length: int) -> int:
    """Bytes a message takes in the term (its frames, aligned), as the appender lays it out."""
    if length <= max_payload_length:
        return (length + 32 + 31) & ~31
    return fragmented_required_length(length, max_payload_length)


class ArchiveRig:
    """A media driver, an archive recording beside it and a client, under a fresh temp dir removed on close."""

    def __init__(self, *, segment_length: int = SEGMENT_LENGTH) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="endpoint-pipeline-", dir=_shm()))
        self.aeron_dir = self.root / "aeron"
        self.archive_dir = self.root / "archive"
        self._recording: set[tuple[str, int]] = set()
        self.driver: MediaDriver | None = None
        self.archive: Archive | None = None
        self.aeron: Aeron | None = None
        try:
            self.driver = MediaDriver.launch(aeron_dir=str(self.aeron_dir), dir_delete_on_shutdown=True)
            self.archive = Archive.launch(
                aeron_dir=self.aeron_dir, archive_dir=self.archive_dir, segment_file_length=segment_length
            )
            self.aeron = Aeron.connect(aeron_dir=self.aeron_dir)
        except BaseException:
            self.close()
            raise

    def stream(self, channel: str, stream_id: int) -> RecordedStream:
        """A new exclusive publication on ``channel``/``stream_id``, recorded from its first byte."""
        assert self.archive is not None
        assert self.aeron is not None
        if (channel, stream_id) not in self._recording:
            self.archive.start_recording(channel, stream_id)
            self._recording.add((channel, stream_id))
        return RecordedStream(self, self.aeron.add_exclusive_publication(channel, stream_id))

    def stop_recording(self, channel: str, stream_id: int) -> None:
        assert self.archive is not None
        self.archive.stop_recording(channel, stream_id)
        self._recording.discard((channel, stream_id))

    def recording_of(self, session_id: int, stream_id: int) -> RecordingDescriptor | None:
        assert self.archive is not None
        for descriptor in self.archive.recordings():
            if descriptor.session_id == session_id and descriptor.stream_id == stream_id:
                return descriptor
        return None

    def close(self) -> None:
        try:
            if self.aeron is not None:
                self.aeron.close()
            if self.archive is not None:
                self.archive.close()
            if self.driver is not None:
                self.driver.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


class RecordedStream:
    """One publication and its recording: what was published and at which positions."""

    def __init__(self, rig: ArchiveRig, publication: ExclusivePublication) -> None:
        self.rig = rig
        self.publication = publication
        self.payloads: list[bytes] = []
        self.positions: list[int] = []
        found = execute_until(
            lambda: rig.recording_of(publication.session_id, publication.stream_id),
            timeout_s=10,
            max_iterations=2_000,
            description=f"the archive to start recording session {publication.session_id}",
        )
        self.recording_id = found.recording_id
        self.start_position = found.start_position

    @property
    def session_id(self) -> int:
        return self.publication.session_id

    def publish(self, payloads: Iterable[bytes]) -> list[int]:
        """Offer each payload (retrying back pressure, bounded), wait until recorded; their start positions."""
        publication = self.publication
        started: list[int] = []
        for payload in payloads:
            deadline = time.monotonic() + OFFER_TIMEOUT_S
            for _ in range(10_000_000):
                result = publication.offer(payload)
                if result > 0:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"offer kept failing ({result}) for {OFFER_TIMEOUT_S} s")
            else:
                raise TimeoutError("offer kept failing")
            started.append(result - framed_length(len(payload), publication.max_payload_length))
            self.payloads.append(payload)
        self.positions.extend(started)
        self.wait_recorded()
        return started

    def wait_recorded(self) -> RecordingDescriptor:
        """Until the archive's recorded position reaches the publication's."""
        target = self.publication.position
        return execute_until(
            lambda: (d := self.descriptor()).end_position >= target and d,
            timeout_s=20,
            max_iterations=20_000,
            interval_s=0.005,
            description=f"recording {self.recording_id} to reach position {target}",
        )

    def descriptor(self) -> RecordingDescriptor:
        assert self.rig.archive is not None
        return self.rig.archive.recording(self.recording_id)

    def close(self) -> None:
        self.publication.close()


def _shm() -> str | None:
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() else None
