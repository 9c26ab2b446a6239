"""The standalone archive across a crash (SIGKILL mid-segment, torn tails) and a full disk (RLIMIT_FSIZE)."""

from __future__ import annotations

import random
import resource
import struct
import sys
import time
from pathlib import Path

import pytest
from archive_helpers import (
    ArchiveProcess,
    Collector,
    assemble,
    message,
    parse_frames,
    recording_bytes,
)

from driver.archive import ArchiveContext, Catalog, RecordingDescriptor, RecordingEvent
from driver.archive.client import ArchiveClient
from driver.archive.segments import segment_file_name, segment_files
from driver.client import Aeron
from driver.concurrent.atomic_buffer import align
from support.archive_channels import LOCAL_ARCHIVE_ENV
from support.driver_process import DriverProcess
from support.waiting import execute_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

CHANNEL = "aeron:ipc?term-length=64k"
STREAM = 7
SEGMENT = 64 * 1024


def client_context(aeron_dir: Path, archive_dir: Path) -> ArchiveContext:
    return ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, aeron_dir=aeron_dir, archive_dir=archive_dir)


def publish_until_killed(
    aeron: Aeron, archive: ArchiveProcess, archive_dir: Path, min_recorded: int
) -> tuple[int, int, int]:
    """Record our stream until the catalog shows ``min_recorded`` bytes, then SIGKILL the archive mid-stream.

    Returns (messages sent, publication position, recorded position last seen before the kill).
    """
    publication = aeron.add_exclusive_publication(CHANNEL, STREAM)
    catalog = execute_until(lambda: Catalog(archive_dir, writable=False), description="catalog to read")
    try:
        execute_until(lambda: catalog.next_recording_id > 0, description="the recording")
        sent = 0
        seen = 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if publication.offer(message(sent, 40)) > 0:
                sent += 1
            if sent % 500 == 0:
                seen = catalog.recorded_position(0)
                if seen >= min_recorded and seen % SEGMENT:
                    break
        else:
            raise AssertionError(f"recorded only {seen} bytes in 30 s")
        # keep offering right up to the kill, so the recorder is busy when it dies
        for _ in range(200):
            if publication.offer(message(sent, 40)) > 0:
                sent += 1
        seen = catalog.recorded_position(0)
        archive.kill()
        return sent, publication.position, seen
    finally:
        catalog.close()


def torn_header(d: RecordingDescriptor, position: int, length: int) -> bytes:
    """A DATA frame header for a frame of ``length`` bytes at ``position`` of this recording, as it would be."""
    bits = d.term_buffer_length.bit_length() - 1
    term_id = d.initial_term_id + (position >> bits)
    term_id = ((term_id + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)
    return struct.pack(
        "<iBBHiiiiq", length, 0, 0xC0, 1, position & (d.term_buffer_length - 1), d.session_id, d.stream_id, term_id, 0
    )


@pytest.mark.parametrize("tail", ["none", "half frame", "torn header", "garbage"])
def test_recovery_after_sigkill_mid_segment(
    aeron_dir: Path, archive_dir: Path, tmp_path: Path, archive_processes: list[ArchiveProcess], tail: str
) -> None:
    args = ["--segment-file-length", "64k"]
    first = ArchiveProcess.start(archive_dir, aeron_dir, tmp_path / "archive-1.log", args=args)
    archive_processes.append(first)
    aeron = Aeron.connect(aeron_dir=aeron_dir)
    try:
        control = ArchiveClient.connect(aeron, client_context(aeron_dir, archive_dir), timeout=10)
        control.start_recording(CHANNEL, STREAM)
        sent, published, seen = publish_until_killed(aeron, first, archive_dir, 5 * SEGMENT + 1000)
    finally:
        aeron.close()  # not the archive client: its close would wait for the dead driver

    with Catalog(archive_dir, writable=False) as catalog:
        crashed = catalog.descriptor(0)
    assert crashed.is_active, "the catalog still shows the recording as active"
    (last_base, last_path), *_ = reversed(segment_files(archive_dir, 0))
    on_disk = last_base + last_path.stat().st_size
    assert seen <= crashed.recorded_position <= on_disk <= published
    expected_stop = on_disk
    if tail != "none":
        if on_disk - last_base == SEGMENT:  # the last segment is full: the torn write went to the next one
            last_base, last_path = on_disk, archive_dir / segment_file_name(0, on_disk)
        if tail == "half frame":
            torn = torn_header(crashed, on_disk, 32 + 1000) + bytes(range(200))
        elif tail == "torn header":
            torn = torn_header(crashed, on_disk, 96)[:20]
        else:
            torn = random.Random(5).randbytes(300)
        with last_path.open("ab") as f:
            f.write(torn)

    # The dead archive's embedded driver left a fresh heartbeat behind; its free lock lets the new one take over.
    second = ArchiveProcess.start(archive_dir, aeron_dir, tmp_path / "archive-2.log", args=args)
    archive_processes.append(second)
    with Catalog(archive_dir, writable=False) as catalog:
        recovered = catalog.descriptor(0)
    assert not recovered.is_active
    stop = recovered.stop_position
    assert stop == expected_stop
    assert recovered.recorded_position == stop
    assert stop >= seen
    # the torn tail is gone, and no later segment is left
    assert all(base <= stop for base, _ in segment_files(archive_dir, 0))
    if stop > last_base:
        assert last_path.stat().st_size == stop - last_base
    else:
        # The kill came as a segment filled up: the last file (the torn tail's, or one the recorder had just
        # opened) holds no whole frame. Recovery cuts it to nothing, or removes it when the catalog's position
        # was still in the previous segment; either way nothing past the stop is left.
        assert not last_path.exists() or last_path.stat().st_size == 0
    # everything up to the stop is whole frames of what we published, in order
    recorded = recording_bytes(archive_dir, recovered)
    frames = parse_frames(recorded, 0)
    assert frames[-1].position + align(frames[-1].length, 32) == stop
    messages = assemble(frames)
    assert len(messages) <= sent
    assert messages == [message(i, 40) for i in range(len(messages))]

    # and the restarted archive replays it
    with (
        Aeron.connect(aeron_dir=aeron_dir) as aeron,
        ArchiveClient.connect(aeron, client_context(aeron_dir, archive_dir), timeout=10) as control,
    ):
        assert control.recording(0) == recovered
        replay_id = control.replay(0, "aeron:ipc", 99)
        replay = Collector(control.replay_subscription("aeron:ipc", 99, replay_id))
        assert replay.poll_until(len(messages)) == messages
        replay.subscription.close()
    assert second.stop() == 0


FSIZE_WRAPPER = """
import resource, signal, sys
limit = int(sys.argv.pop(1))
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from driver.archive.__main__ import main
sys.exit(main(sys.argv[1:]))
"""


def test_full_disk_stops_the_recording_and_keeps_what_was_written(
    driver_process: DriverProcess, archive_dir: Path, tmp_path: Path, archive_processes: list[ArchiveProcess]
) -> None:
    limit = 1600 * 1024 + 500  # room for the catalog (1 MiB + 1 KiB), not for a 4 MiB segment; mid-term and unaligned
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] in (resource.RLIM_INFINITY, -1) or (
        resource.getrlimit(resource.RLIMIT_FSIZE)[0] > limit
    )
    archive = ArchiveProcess.start(
        archive_dir,
        driver_process.aeron_dir,
        tmp_path / "archive.log",
        with_driver=False,
        args=["--segment-file-length", "4m"],
        prefix=[sys.executable, "-c", FSIZE_WRAPPER, str(limit)],
    )
    archive_processes.append(archive)
    channel = "aeron:ipc?term-length=256k"
    events: list[RecordingEvent] = []
    with (
        Aeron.connect(aeron_dir=driver_process.aeron_dir) as aeron,
        ArchiveClient.connect(aeron, client_context(driver_process.aeron_dir, archive_dir), timeout=10) as control,
    ):
        recording_events = control.recording_events()
        execute_until(lambda: recording_events.subscription.is_connected, description="events subscription")
        control.start_recording(channel, STREAM)
        publication = aeron.add_exclusive_publication(channel, STREAM)
        execute_until(lambda: control.recordings(), description="the recording")
        sent = 0
        deadline = time.monotonic() + 30
        while not any(e.kind == "stopped" for e in events):
            assert time.monotonic() < deadline, f"no stopped event; events {events[-3:]}, sent {sent}"
            if publication.offer(message(sent, 100)) > 0:
                sent += 1
            else:
                recording_events.poll(events.append)
        stopped = next(e for e in events if e.kind == "stopped")
        # Aeron's RecordingStopped carries no reason: the archive reports the storage error to its error handler
        execute_until(lambda: archive.has("File too large"), description="the storage error logged")
        d = control.recording(0)
        assert not d.is_active
        assert d.stop_position == stopped.position == control.stop_position(0)
        assert 0 < d.stop_position <= limit
        assert (archive_dir / segment_file_name(0, 0)).stat().st_size == d.stop_position
        recorded = recording_bytes(archive_dir, d)
        frames = parse_frames(recorded, 0)
        assert frames[-1].position + align(frames[-1].length, 32) == d.stop_position
        messages = assemble(frames)
        assert messages == [message(i, 100) for i in range(len(messages))]
        replay_id = control.replay(0, "aeron:ipc", 99)
        replay = Collector(control.replay_subscription("aeron:ipc", 99, replay_id))
        assert replay.poll_until(len(messages)) == messages
        replay.subscription.close()
        # the archive keeps serving
        assert control.recordings() == [d]
        publication.close()
        recording_events.close()
    assert archive.stop() == 0
    assert "File too large" in archive.output()
