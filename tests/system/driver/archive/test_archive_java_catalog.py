"""The archive directory against Aeron Java 1.15.1: its CatalogTool reads and verifies ours, we read and replay theirs.

Ours: recordings made by our archive (several segments, truncated, purged, recovered after SIGKILL) are described by
``CatalogTool <dir> describe <id>`` field for field and pass its ``verify``. Theirs: a recording made by Java's
ArchivingMediaDriver with RecordedBasicPublisher is read by our catalog (while it is live, through its ``rec-pos``
counter, and once stopped), its bytes are whole frames of the messages sent, and our archive replays them.
"""

from __future__ import annotations

import io
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from archive_helpers import (
    ArchiveHarness,
    ArchiveProcess,
    assemble,
    message,
    offer_all,
    parse_frames,
    positioned_channel,
    record_stopped,
    recording_bytes,
)

from driver.archive import ArchiveContext, Catalog, RecordingDescriptor
from driver.archive.catalog_tool import run
from driver.archive.client import ArchiveClient
from driver.archive.mark import read_mark_file
from driver.archive.segments import segment_files
from driver.client import Aeron
from support.aeron_java import AeronJava
from support.java_archive import (
    JavaArchive,
    catalog_tool,
    free_udp_port,
    java_archive,
    parse_sbe_fields,
    record_with_java_publisher,
)
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.slow]

__all__ = ["java_archive"]  # the fixture, imported for pytest

CHANNEL = "aeron:ipc?term-length=64k"
TERM = 64 * 1024
IPC_ARCHIVE_ENV = {
    "AERON_ARCHIVE_CONTROL_CHANNEL": CHANNEL,
    "AERON_ARCHIVE_CONTROL_RESPONSE_CHANNEL": CHANNEL,
    "AERON_ARCHIVE_RECORDING_EVENTS_CHANNEL": CHANNEL,
}
"""Control, responses and events on IPC, whatever the defaults (Aeron's are UDP ports shared by every archive)."""


def described(peer: AeronJava, archive_dir: Path, recording_id: int) -> dict[str, str]:
    done = catalog_tool(peer, archive_dir, "describe", str(recording_id))
    assert done.returncode == 0, done.stderr
    name, fields = parse_sbe_fields(done.stdout.strip().splitlines()[-1])
    assert name == "RecordingDescriptor"
    sbe = [fields.pop(key) for key in ("sbeTemplateId", "sbeSchemaId", "sbeSchemaVersion", "sbeBlockLength")]
    assert sbe == ["22", "101", "0", "80"]
    return fields


def as_java_fields(d: RecordingDescriptor) -> dict[str, str]:
    """Our descriptor as CatalogTool prints it (SBE field names, decimal text)."""
    return {
        "controlSessionId": str(d.control_session_id),
        "correlationId": str(d.correlation_id),
        "recordingId": str(d.recording_id),
        "startTimestamp": str(d.start_timestamp),
        "stopTimestamp": str(d.stop_timestamp),
        "startPosition": str(d.start_position),
        "stopPosition": str(d.stop_position),
        "initialTermId": str(d.initial_term_id),
        "segmentFileLength": str(d.segment_file_length),
        "termBufferLength": str(d.term_buffer_length),
        "mtuLength": str(d.mtu_length),
        "sessionId": str(d.session_id),
        "streamId": str(d.stream_id),
        "strippedChannel": d.stripped_channel,
        "originalChannel": d.original_channel,
        "sourceIdentity": d.source_identity,
    }


def record(harness: ArchiveHarness, stream_id: int, messages: list[bytes]) -> int:
    return record_stopped(harness, CHANNEL, stream_id, messages)


def test_catalog_tool_describes_and_verifies_what_our_archive_wrote(
    aeron_java: AeronJava, make_archive: Callable[..., ArchiveHarness], archive_dir: Path
) -> None:
    harness = make_archive()  # 64 KiB segments and terms
    long_messages = [message(i, 40 if i % 5 else 3000) for i in range(800)]  # several segments
    long_id = record(harness, 71, long_messages)
    cut_id = record(harness, 72, [message(i, 100) for i in range(1500)])
    boundary_id = record(harness, 73, [message(i, 200) for i in range(1200)])
    purged_id = record(harness, 74, [message(i, 40) for i in range(10)])
    empty_id = record(harness, 75, [])
    cut = harness.archive.recording(cut_id)
    frames = parse_frames(recording_bytes(archive_dir, cut), 0)
    inside = next(f for f in frames if f.position > TERM + 5000)
    harness.archive.truncate_recording(cut_id, inside.position)  # mid-segment
    harness.archive.truncate_recording(boundary_id, 2 * TERM)  # at a segment boundary
    harness.archive.purge_recording(purged_id)
    ours = {d.recording_id: d for d in harness.archive.recordings()}
    assert ours[long_id].stop_position > 3 * TERM
    assert ours[boundary_id].stop_position == 2 * TERM
    assert ours[empty_id].stop_position == ours[empty_id].start_position
    harness.close()

    for recording_id, d in ours.items():
        assert described(aeron_java, archive_dir, recording_id) == as_java_fields(d)
    assert catalog_tool(aeron_java, archive_dir, "count-entries").stdout.strip() == str(len(ours) + 1)
    with Catalog(archive_dir, writable=False) as catalog:
        assert catalog_tool(aeron_java, archive_dir, "max-entries").stdout.strip() == str(catalog.max_entries)

    verified = catalog_tool(aeron_java, archive_dir, "verify")
    assert verified.returncode == 0
    for recording_id in ours:
        assert f"(recordingId={recording_id}) OK" in verified.stdout, verified.stderr
    # The purged recording's files are gone: Java says so and leaves it not valid.
    assert f"(recordingId={purged_id}) ERR: missing last recording file" in verified.stderr
    assert f"(recordingId={purged_id}) OK" not in verified.stdout

    # Java's verify changed nothing we keep: the same descriptors, and our archive replays them.
    again = make_archive()
    assert {d.recording_id: d for d in again.archive.recordings()} == ours
    assert again.replay_messages(long_id, len(long_messages)) == long_messages


def test_catalog_tool_verifies_our_archive_recovered_after_sigkill(
    aeron_java: AeronJava, aeron_dir: Path, archive_dir: Path, tmp_path: Path, archive_processes: list[ArchiveProcess]
) -> None:
    args = ["--segment-file-length", "64k"]
    first = ArchiveProcess.start(archive_dir, aeron_dir, tmp_path / "archive-1.log", args=args, env=IPC_ARCHIVE_ENV)
    archive_processes.append(first)
    context = ArchiveContext.from_env(IPC_ARCHIVE_ENV, aeron_dir=aeron_dir, archive_dir=archive_dir)
    aeron = Aeron.connect(aeron_dir=aeron_dir)
    try:
        control = ArchiveClient.connect(aeron, context, timeout=10)
        control.start_recording(CHANNEL, 7)
        publication = aeron.add_exclusive_publication(CHANNEL, 7)
        catalog = execute_until(lambda: Catalog(archive_dir, writable=False), description="catalog to read")
        try:
            execute_until(lambda: catalog.next_recording_id > 0, description="the recording")
            sent = 0
            deadline = time.monotonic() + 30
            while catalog.recorded_position(0) < 3 * TERM + 1000:
                assert time.monotonic() < deadline, "recording too slow"
                if publication.offer(message(sent, 40)) > 0:
                    sent += 1
            assert catalog.descriptor(0).is_active
        finally:
            catalog.close()
        first.kill()
    finally:
        aeron.close()

    second = ArchiveProcess.start(archive_dir, aeron_dir, tmp_path / "archive-2.log", args=args, env=IPC_ARCHIVE_ENV)
    archive_processes.append(second)
    assert second.stop() == 0
    with Catalog(archive_dir, writable=False) as catalog:
        recovered = catalog.descriptor(0)
    assert not recovered.is_active
    assert recovered.stop_position >= 3 * TERM + 1000
    assert described(aeron_java, archive_dir, 0) == as_java_fields(recovered)
    verified = catalog_tool(aeron_java, archive_dir, "verify")
    assert "(recordingId=0) OK" in verified.stdout, verified.stderr


def test_we_read_follow_and_replay_what_javas_archive_recorded(
    aeron_java: AeronJava,
    java_archive: JavaArchive,
    make_archive: Callable[..., ArchiveHarness],
    tmp_path: Path,
) -> None:
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    sent = [f"Hello World! {i}".encode() for i in range(3)]
    recording_id, _ = record_with_java_publisher(aeron_java, java_archive, channel=channel, stream_id=1001, messages=3)

    # A second recording, followed while Java's archive records it: its stop position is unset, and our reader
    # finds its progress in the rec-pos counter of the driver Java's mark file names.
    follow_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    props = java_archive.client_props(
        **{"aeron.sample.channel": follow_channel, "aeron.sample.streamId": 1002, "aeron.sample.messages": 4}
    )
    publisher = aeron_java.start(
        "io.aeron.samples.archive.RecordedBasicPublisher", props=props, output=tmp_path / "follow.log"
    )
    try:
        with Catalog(java_archive.archive_dir, writable=False) as catalog:
            live = execute_until(
                lambda: next(
                    (
                        d
                        for d in catalog.descriptors()
                        if d.stream_id == 1002 and d.is_active and d.recorded_position > d.start_position
                    ),
                    None,
                ),
                timeout_s=60,
                interval_s=0.05,
                description="the live Java recording's progress",
            )
            assert catalog.entry(live.recording_id).keeps_recorded_position is False
            assert publisher.wait(timeout=60) == 0
            follow = execute_until(
                lambda: not (d := catalog.descriptor(live.recording_id)).is_active and d,
                timeout_s=30,
                description="the followed recording stopped",
            )
            assert follow.recorded_position == follow.stop_position == 4 * 64
    finally:
        AeronJava.stop(publisher)

    stopped = described(aeron_java, java_archive.archive_dir, recording_id)
    mark = read_mark_file(java_archive.archive_dir)
    assert (mark.pid, mark.aeron_directory) == (java_archive.pid, str(java_archive.aeron_dir))
    assert java_archive.stop() == 0

    with Catalog(java_archive.archive_dir, writable=False) as catalog:
        d = catalog.descriptor(recording_id)
        assert as_java_fields(d) == stopped
        assert (d.stream_id, d.original_channel, d.stop_position) == (1001, channel, 3 * 64)
        assert catalog.next_recording_id == 2
    frames = parse_frames(recording_bytes(java_archive.archive_dir, d), d.start_position)
    assert assemble(frames) == sent
    assert {(f.session_id, f.stream_id) for f in frames} == {(d.session_id, 1001)}

    # Our archive opens Java's directory as it is and replays the recording.
    ours = make_archive(archive_dir=java_archive.archive_dir)
    assert ours.archive.recovered == []
    assert ours.archive.recording(recording_id) == d
    assert ours.replay_messages(recording_id, len(sent)) == sent


def ours(*argv: str) -> subprocess.CompletedProcess[str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return subprocess.CompletedProcess(list(argv), code, out.getvalue(), err.getvalue())


def test_our_verbs_report_what_catalog_tool_reports(
    aeron_java: AeronJava, make_archive: Callable[..., ArchiveHarness], archive_dir: Path, tmp_path: Path
) -> None:
    harness = make_archive()
    for stream_id, count, length in ((1, 300, 40), (2, 400, 900), (3, 5, 100), (4, 200, 3000), (5, 50, 40)):
        record(harness, stream_id, [message(i, length) for i in range(count)])
    harness.close()
    with Catalog(archive_dir) as catalog:
        d2, d4 = catalog.descriptor(2), catalog.descriptor(4)
        catalog.extend(3)  # left active: both tools recover its stop position from the segments
    segment_files(archive_dir, 1)[-1][1].unlink()  # missing last segment
    (_, last2), *_ = segment_files(archive_dir, 2)
    with last2.open("r+b") as f:  # a frame of another session in the last segment
        f.seek(0)
        f.write(struct.pack("<iBBHiiii", 132, 0, 0xC0, 1, 0, d2.session_id + 7, d2.stream_id, d2.initial_term_id))
    index4, last4 = segment_files(archive_dir, 4)[-1]
    with last4.open("r+b") as f:  # bytes after the stop
        f.seek(d4.stop_position - index4 * TERM)
        f.write(struct.pack("<iBBHiiii", 64, 0, 0xC0, 1, 0, d4.session_id, d4.stream_id, 0))
    java_copy, our_copy = tmp_path / "java", tmp_path / "ours"
    shutil.copytree(archive_dir, java_copy)
    shutil.copytree(archive_dir, our_copy)

    for recording_id in range(6):  # 5 has no entry: both print nothing
        java = catalog_tool(aeron_java, java_copy, "describe", str(recording_id))
        assert ours("describe", str(our_copy), str(recording_id)).stdout == java.stdout
    for verb in ("count-entries", "max-entries"):
        assert ours(verb, str(our_copy)).stdout == catalog_tool(aeron_java, java_copy, verb).stdout

    java = catalog_tool(aeron_java, java_copy, "verify")
    mine = ours("verify", str(our_copy))
    assert mine.stdout == java.stdout
    assert mine.stdout.splitlines() == [f"(recordingId={i}) OK" for i in (0, 3)]
    java_errors = [line for line in java.stderr.splitlines() if line.startswith("(recordingId=")]
    assert [line.replace(str(java_copy), "") for line in java_errors] == [
        line.replace(str(our_copy), "") for line in mine.stderr.splitlines()
    ]
    assert [line.split(" ERR: ")[1].split(":")[0].split("=")[0] for line in java_errors] == [
        "missing last recording file",
        "fragment sessionId",
        "end segment offset",
    ]
    # the same verdicts written, and the same stop position recovered for the active one
    with Catalog(java_copy, writable=False) as theirs, Catalog(our_copy, writable=False) as mine_catalog:
        assert [e.valid for e in theirs.entries()] == [e.valid for e in mine_catalog.entries()]
        assert [e.valid for e in mine_catalog.entries()] == [True, False, False, True, False]
        assert theirs.entry(3).descriptor.stop_position == mine_catalog.entry(3).descriptor.stop_position > 0


def test_our_verbs_read_javas_archive_as_catalog_tool_does(
    aeron_java: AeronJava, java_archive: JavaArchive, tmp_path: Path
) -> None:
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    recording_id, _ = record_with_java_publisher(aeron_java, java_archive, channel=channel, stream_id=1001, messages=2)
    described_live = ours("describe", str(java_archive.archive_dir))
    assert f"|pid={java_archive.pid}|" in described_live.stdout.splitlines()[1]
    assert java_archive.stop() == 0
    java = catalog_tool(aeron_java, java_archive.archive_dir, "describe", str(recording_id))
    assert ours("describe", str(java_archive.archive_dir), str(recording_id)).stdout == java.stdout
    assert ours("describe", str(java_archive.archive_dir)).stdout.splitlines()[3] == java.stdout.strip()
    assert ours("verify", str(java_archive.archive_dir)).stdout == "(recordingId=0) OK\n"
    assert catalog_tool(aeron_java, java_archive.archive_dir, "verify").stdout == "(recordingId=0) OK\n"
    dumped = ours("dump", str(java_archive.archive_dir)).stdout
    assert dumped.count("\nFrame at position [") == 2
    assert "|Hello World! 1|" in dumped
    # Java's archive keeps its errors in its driver's cnc.dat, which ErrorStat reads as we do.
    errors = ours("errors", str(java_archive.archive_dir))
    assert errors.returncode == 0
    stat = aeron_java.run("io.aeron.samples.ErrorStat", props={"aeron.dir": str(java_archive.aeron_dir)})
    assert errors.stdout.splitlines()[1:] == stat.stdout.splitlines()[-len(errors.stdout.splitlines()[1:]) :]


def test_a_recording_starting_mid_term_is_where_our_verify_and_catalog_tool_differ(
    aeron_java: AeronJava, make_archive: Callable[..., ArchiveHarness], archive_dir: Path, tmp_path: Path
) -> None:
    """1.15.1's CatalogTool counts segments from the start position, not from its term, and looks in the wrong
    place; ours finds the recording whole (docs/archive.md says so)."""
    harness = make_archive()
    harness.archive.start_recording(CHANNEL, 9)
    publication = harness.client.add_exclusive_publication(positioned_channel(CHANNEL, 100, 3 * TERM + 6400, TERM), 9)
    d = harness.wait_for_recordings(1)[0]
    messages = [message(i, 500) for i in range(400)]
    harness.wait_recorded(d.recording_id, offer_all(publication, messages))
    harness.archive.stop_recording(CHANNEL, 9)
    publication.close()
    harness.wait_stopped(d.recording_id)
    harness.close()
    java_copy = tmp_path / "java"
    shutil.copytree(archive_dir, java_copy)
    assert ours("verify", str(archive_dir)).stdout == "(recordingId=0) OK\n"
    java = catalog_tool(aeron_java, java_copy, "verify")
    assert java.stdout == ""
    assert "(recordingId=0) ERR: " in java.stderr
