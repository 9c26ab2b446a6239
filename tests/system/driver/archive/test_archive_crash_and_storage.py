"""The standalone archive across a crash (SIGKILL mid-segment, torn tails) and a full disk (RLIMIT_FSIZE)."""

from __future__ import annotations

import random
import resource
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from archive_helpers import (
    ArchiveHarness,
    ArchiveProcess,
    Collector,
    assemble,
    message,
    parse_frames,
    record_stopped,
    recording_bytes,
)

from driver.archive import ArchiveContext, Catalog, RecordingDescriptor, RecordingEvent
from driver.archive.client import ArchiveClient
from driver.archive.segments import ensure_segment, segment_file_name, segment_files, segment_index, segment_path
from driver.client import Aeron
from driver.concurrent.atomic_buffer import align
from support.archive_channels import LOCAL_ARCHIVE_ENV
from support.driver_process import DriverProcess
from support.waiting import execute_until

pytestmark = [pytest.mark.process, pytest.mark.slow]

CHANNEL = "aeron:ipc?term-length=64k"
STREAM = 7
SEGMENT = 64 * 1024
PAGE = 4096  # the page cache's (x86-64, arm64 by default)


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


def frames_end(archive_dir: Path, d: RecordingDescriptor) -> int:
    """Where whole frames end on disk: segments are whole (sparse) files, so the end is where a walk of frame lengths
    through the newest segment holding any meets a zero length, or a frame cut short by the kill: the kernel stops a
    write between two pages when a fatal signal is pending, so a data frame's header can land while a later page of
    it stays zeros (seen on a loaded machine)."""
    term_base = d.start_position - d.start_position % d.term_buffer_length
    for index, path in reversed(segment_files(archive_dir, d.recording_id)):
        base = term_base + index * SEGMENT
        data = path.read_bytes()
        offset = max(d.start_position, base) - base
        while offset + 32 <= len(data):
            (length,) = struct.unpack_from("<i", data, offset)
            if length < 32:
                break
            end = offset + length
            later_pages = range(offset - offset % PAGE + PAGE, end, PAGE)
            is_data = struct.unpack_from("<H", data, offset + 6)[0] == 1  # (a padding frame's body is never written)
            if is_data and any(not any(data[page : min(page + PAGE, end)]) for page in later_pages):
                break
            offset += align(length, 32)
        if offset > max(d.start_position, base) - base or index == 0:
            return base + offset
    return d.start_position


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
    on_disk = frames_end(archive_dir, crashed)
    assert seen <= crashed.recorded_position <= on_disk <= published
    sizes = [path.stat().st_size for _, path in segment_files(archive_dir, 0)]
    # Whole segments; the newest may be empty: created, not yet made whole, when the kill came.
    assert set(sizes[:-1]) == {SEGMENT}
    assert sizes[-1] in (0, SEGMENT)
    expected_stop = on_disk
    # The segment a torn write would land in (the next one when the last is full: it may exist already).
    torn_path = segment_path(archive_dir, 0, 0, on_disk, crashed.term_buffer_length, SEGMENT)
    torn_base = on_disk - on_disk % SEGMENT
    if tail != "none":
        if tail == "half frame":
            # Written back by page: the header's page landed (what of the frame is in it), the next did not.
            in_page = 4096 - on_disk % 4096
            torn = torn_header(crashed, on_disk, in_page + 1000) + bytes(range(1, 201))[: in_page - 32]
        elif tail == "torn header":
            torn = torn_header(crashed, on_disk, 96)[:20]
        else:
            torn = random.Random(5).randbytes(300)
        ensure_segment(torn_path, SEGMENT)
        with torn_path.open("r+b") as f:
            f.seek(on_disk - torn_base)
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
    # the torn tail is gone, no later segment is left, and the segment the stop falls in is whole, zero past it
    # (when the stop ends a segment, that is the next one, empty, as after a write that filled one)
    last_index = segment_index(0, stop, crashed.term_buffer_length, SEGMENT)
    assert [index for index, _ in segment_files(archive_dir, 0)] == list(range(last_index + 1))
    assert {path.stat().st_size for _, path in segment_files(archive_dir, 0)} == {SEGMENT}
    last = segment_path(archive_dir, 0, 0, stop, crashed.term_buffer_length, SEGMENT).read_bytes()
    assert len(last) == SEGMENT
    assert last[stop % SEGMENT :] == bytes(SEGMENT - stop % SEGMENT)
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
    # Room for a catalog of 1024 entries (1 MiB + 1 KiB), not for a 4 MiB segment; mid-term and unaligned. The
    # segment cannot be made whole under that limit, so it is recorded short until a write meets the limit.
    limit = 1600 * 1024 + 500
    assert resource.getrlimit(resource.RLIMIT_FSIZE)[0] in (resource.RLIM_INFINITY, -1) or (
        resource.getrlimit(resource.RLIMIT_FSIZE)[0] > limit
    )
    archive = ArchiveProcess.start(
        archive_dir,
        driver_process.aeron_dir,
        tmp_path / "archive.log",
        with_driver=False,
        args=["--segment-file-length", "4m", "--max-catalog-entries", "1024"],
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


def test_recovery_makes_a_segment_the_crash_left_unsized_whole(
    make_archive: Callable[..., ArchiveHarness], archive_dir: Path
) -> None:
    """A kill between creating a segment file and sizing it leaves it empty; recovery keeps every whole frame and
    leaves whole segments (what Aeron's tools and readers need)."""
    harness = make_archive()
    messages = [message(i, 200) for i in range(700)]  # a few 64 KiB segments
    rid = record_stopped(harness, CHANNEL, STREAM, messages)
    stop = harness.archive.recording(rid).stop_position
    harness.close()
    last_index = segment_files(archive_dir, rid)[-1][0]
    with Catalog(archive_dir) as catalog:
        catalog.extend(rid)  # as the crash left it: active, the recorded position at the last segment's base
        catalog.set_recorded_position(rid, last_index * SEGMENT)
    next_path = archive_dir / segment_file_name(rid, last_index + 1)
    next_path.write_bytes(b"")  # created, never sized
    again = make_archive()
    assert again.archive.recovered == [rid]
    recovered = again.archive.recording(rid)
    assert recovered.stop_position == stop
    assert not next_path.exists() or next_path.stat().st_size == SEGMENT
    assert {path.stat().st_size for _, path in segment_files(archive_dir, rid)} == {SEGMENT}
    assert again.replay_messages(rid, len(messages)) == messages
