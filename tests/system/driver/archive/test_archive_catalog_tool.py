"""``python -m driver.archive describe|dump|verify|errors|migrate <dir>``: the operator's verbs over real archives.

The verdicts are checked against damage done to real recordings (a missing segment, a foreign frame, bytes past
the stop, a recording left active); the comparison with Aeron's own CatalogTool is in test_archive_java_catalog.
"""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from archive_helpers import (
    ArchiveHarness,
    assemble,
    message,
    offer_all,
    parse_frames,
    positioned_channel,
    record_stopped,
    recording_bytes,
)

from driver.archive import ArchiveContext, ArchivingMediaDriver, Catalog
from driver.archive.catalog_tool import descriptor_text, dump, migrate, run, verify
from driver.archive.errors import CatalogLayoutError, RecordingNotFoundError
from driver.archive.positions import RecordingPositions
from driver.archive.segments import segment_file_name, segment_files
from driver.config import DriverContext
from support.waiting import execute_until

pytestmark = [pytest.mark.process]

CHANNEL = "aeron:ipc?term-length=64k"
TERM = 64 * 1024


def verbs(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(list(argv), out, err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def recorded(make_archive: Callable[..., ArchiveHarness], archive_dir: Path) -> dict[int, list[bytes]]:
    """Three stopped recordings (one of several segments) in a closed archive: {recording id: its messages}."""
    harness = make_archive()
    recordings = {}
    for stream_id, count, length in ((1, 300, 40), (2, 400, 900), (3, 5, 100)):
        messages = [message(i, length) for i in range(count)]
        recordings[record_stopped(harness, CHANNEL, stream_id, messages)] = messages
    harness.close()
    return recordings


def test_describe_prints_the_mark_file_the_room_and_every_descriptor(
    recorded: dict[int, list[bytes]], archive_dir: Path
) -> None:
    code, out, err = verbs("describe", str(archive_dir))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert "(start: " in lines[0]
    assert ", activity: " in lines[0]
    assert lines[1].startswith("[MarkFileHeader](sbeTemplateId=200|sbeSchemaId=100|sbeSchemaVersion=0|")
    assert f"|pid={os.getpid()}|" in lines[1]
    assert "|localControlChannel='aeron:ipc'|" in lines[1]
    with Catalog(archive_dir, writable=False) as catalog:
        assert lines[2] == f"Catalog Max Entries: {catalog.max_entries}"
        assert lines[3:] == [descriptor_text(d) for d in catalog.descriptors()]
        assert len(lines[3:]) == len(recorded)
        one = catalog.descriptor(1)
    assert verbs(str(archive_dir), "describe", "1") == (0, descriptor_text(one) + "\n", "")
    assert verbs("describe", str(archive_dir), "99") == (0, "", "")
    assert descriptor_text(one).startswith(
        "[RecordingDescriptor](sbeTemplateId=22|sbeSchemaId=101|sbeSchemaVersion=0|sbeBlockLength=80):"
        f"controlSessionId=0|correlationId=0|recordingId=1|startTimestamp={one.start_timestamp}|"
    )
    assert descriptor_text(one).endswith(
        f"|streamId=2|strippedChannel='{one.stripped_channel}'|originalChannel='{CHANNEL}'|sourceIdentity='aeron:ipc'"
    )
    assert verbs("count-entries", str(archive_dir)) == (0, "3\n", "")
    assert verbs("pid", str(archive_dir)) == (0, f"{os.getpid()}\n", "")


def test_dump_prints_each_recordings_frames(recorded: dict[int, list[bytes]], archive_dir: Path) -> None:
    out = io.StringIO()
    assert dump(archive_dir, None, out) == 0
    text = out.getvalue()
    with Catalog(archive_dir, writable=False) as catalog:
        d = catalog.descriptor(2)
    frames = parse_frames(recording_bytes(archive_dir, d), d.start_position)
    section = text[text.index("\nRecording 2\n") :]
    assert f"  stream length: {d.stop_position - d.start_position}\n" in section
    assert section.count("\nFrame at position [") == len(frames) == 5
    assert "|Hello" not in section
    first_row = message(0, 100)[:16]
    assert first_row.hex(" ") in section
    limited = io.StringIO()
    dump(archive_dir, 2, limited)
    assert limited.getvalue().count("\nFrame at position [") == 2 * len(recorded)


def test_verify_finds_each_kind_of_damage_and_marks_the_entry(
    recorded: dict[int, list[bytes]], archive_dir: Path
) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert verify(archive_dir, None, out, err) == 0
    assert out.getvalue() == "".join(f"(recordingId={rid}) OK\n" for rid in sorted(recorded))
    assert err.getvalue() == ""

    with Catalog(archive_dir, writable=False) as catalog:
        d1, d2 = catalog.descriptor(1), catalog.descriptor(2)
    # 0: its last segment is gone
    last0 = segment_files(archive_dir, 0)[-1][1]
    last0.unlink()
    # 1: a frame of another session in the last segment
    index1, last1 = segment_files(archive_dir, 1)[-1]
    offset = d1.stop_position - index1 * TERM - 4 * 928  # a few frames before the stop (900 + 32, aligned: 960)
    offset -= offset % 32
    frames = parse_frames(last1.read_bytes()[offset - offset % TERM :], 0)
    at = next(f.position for f in frames if f.position >= offset % TERM) + offset - offset % TERM
    with last1.open("r+b") as f:
        f.seek(at + 12)
        f.write(struct.pack("<i", d1.session_id + 1))
    # 2: bytes of a frame after its stop
    (_, last2), *_ = segment_files(archive_dir, 2)
    with last2.open("r+b") as f:
        f.seek(d2.stop_position)
        f.write(struct.pack("<iBBHiiii", 64, 0, 0xC0, 1, d2.stop_position, d2.session_id, d2.stream_id, 0))

    out, err = io.StringIO(), io.StringIO()
    assert verify(archive_dir, None, out, err) == 1
    assert out.getvalue() == ""
    assert err.getvalue().splitlines() == [
        f"(recordingId=0) ERR: missing last recording file: {last0}",
        f"(recordingId=1) ERR: fragment sessionId={d1.session_id + 1} (expected={d1.session_id})",
        f"(recordingId=2) ERR: end segment offset={d2.stop_position + 64} (expected={d2.stop_position})",
    ]
    with Catalog(archive_dir, writable=False) as catalog:
        for rid in range(3):
            with pytest.raises(RecordingNotFoundError):
                catalog.descriptor(rid)
            assert not catalog.entry(rid).valid
    # mended, an entry is valid again
    with last2.open("r+b") as f:
        f.seek(d2.stop_position)
        f.write(bytes(32))
    assert verbs("verify", str(archive_dir), "2") == (0, "(recordingId=2) OK\n", "")
    with Catalog(archive_dir, writable=False) as catalog:
        assert catalog.descriptor(2) == d2


def test_verify_stops_a_recording_left_active_where_its_frames_end(
    recorded: dict[int, list[bytes]], archive_dir: Path, make_archive: Callable[..., ArchiveHarness]
) -> None:
    with Catalog(archive_dir) as catalog:
        before = catalog.descriptor(0)
        catalog.extend(0)  # as an archive that died while recording leaves it, but with no position kept
        catalog.set_recorded_position(0, before.start_position)
        assert catalog.descriptor(0).is_active
    code, out, _ = verbs("verify", str(archive_dir), "0")
    assert (code, out) == (0, "(recordingId=0) OK\n")
    with Catalog(archive_dir, writable=False) as catalog:
        after = catalog.descriptor(0)
    assert after.stop_position == before.stop_position
    assert after.stop_timestamp >= before.stop_timestamp
    harness = make_archive()
    assert harness.replay_messages(0, len(recorded[0])) == recorded[0]


def test_verify_of_a_running_archive_only_reports(
    make_archive: Callable[..., ArchiveHarness], archive_dir: Path
) -> None:
    harness = make_archive()
    rid = record_stopped(harness, CHANNEL, 1, [message(i, 40) for i in range(50)])
    segment_files(archive_dir, rid)[-1][1].unlink()
    code, out, err = verbs("verify", str(archive_dir))
    assert (code, out) == (1, "")
    assert err.splitlines()[0].endswith("the archive is running; verdicts only, the catalog is not changed")
    assert err.splitlines()[1].startswith(f"(recordingId={rid}) ERR: missing last recording file")
    assert harness.archive.recording(rid).recording_id == rid  # still valid: nothing was written


def test_errors_prints_the_archives_errors_from_its_drivers_log(aeron_dir: Path, archive_dir: Path) -> None:
    driver_context = DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode="SHARED")
    ipc = "aeron:ipc?term-length=64k"  # not Aeron's default UDP ports, which every archive would share
    archive_context = ArchiveContext.from_env(
        {
            "AERON_ARCHIVE_CONTROL_CHANNEL": ipc,
            "AERON_ARCHIVE_CONTROL_RESPONSE_CHANNEL": ipc,
            "AERON_ARCHIVE_RECORDING_EVENTS_CHANNEL": ipc,
        },
        archive_dir=archive_dir,
    )
    with ArchivingMediaDriver.launch(driver_context, archive_context) as both:
        code, out, _ = verbs("errors", str(archive_dir))
        assert (code, out.splitlines()[-1]) == (0, "0 distinct errors observed.")
        for _ in range(3):
            both.archive.context.error_handler(RuntimeError("segment write failed: disk on fire"))
        code, out, _ = verbs("errors", str(archive_dir))
    assert code == 0
    assert out.splitlines()[0] == f"Archive error log (driver {aeron_dir}):"
    assert "***\n3 observations from " in out
    assert "RuntimeError: segment write failed: disk on fire" in out
    assert out.endswith("\n1 distinct errors observed.\n")


def test_misuse_and_unreadable_directories(tmp_path: Path) -> None:
    assert verbs("describe")[0] == 2
    assert verbs("frobnicate", str(tmp_path))[0] == 2
    assert verbs("verify", str(tmp_path), "x")[0] == 2
    code, _, err = verbs("describe", str(tmp_path / "absent"))
    assert code == 1
    assert err == f"archive directory not found: {tmp_path / 'absent'}\n"
    code, _, err = verbs("verify", str(tmp_path))
    assert (code, err) == (1, f"{tmp_path}: no archive.catalog\n")
    code, _, err = verbs("errors", str(tmp_path))
    assert (code, err) == (1, f"no mark file at {tmp_path / 'archive-mark.dat'}\n")


def test_the_command_line(recorded: dict[int, list[bytes]], archive_dir: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-m", "driver.archive", str(archive_dir), "verify"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "".join(f"(recordingId={r}) OK\n" for r in sorted(recorded)))
    done = subprocess.run(
        [sys.executable, "-m", "driver.archive", "describe", str(archive_dir), "2"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        check=False,
    )
    assert done.returncode == 0
    assert done.stdout.startswith("[RecordingDescriptor](sbeTemplateId=22|")


def _to_old_layout(archive_dir: Path) -> list[int]:
    """Rewrite an archive directory as this project kept it before it took Aeron's layout (EPAC catalog, segments
    named by base position and only as long as their data); returns the recording ids."""
    with Catalog(archive_dir, writable=False) as catalog:
        entries = list(catalog.entries())
    old = bytearray(1024 + 1024 * max(len(entries), 1))
    struct.pack_into("<iiiiq", old, 0, 0x43415045, 1, 1024, 0, len(entries))
    for entry in entries:
        d = entry.descriptor
        at = 1024 + d.recording_id * 1024
        struct.pack_into(
            "<i4xqqqqqqiiiiii",
            old,
            at,
            1 if entry.valid else 2,
            d.recording_id,
            d.start_timestamp,
            d.stop_timestamp,
            d.start_position,
            d.stop_position,
            d.recorded_position,
            d.initial_term_id,
            d.segment_file_length,
            d.term_buffer_length,
            d.mtu_length,
            d.session_id,
            d.stream_id,
        )
        at += 96
        for text in (d.stripped_channel, d.original_channel, d.source_identity):
            raw = text.encode()
            struct.pack_into("<H", old, at, len(raw))
            old[at + 2 : at + 2 + len(raw)] = raw
            at += 2 + len(raw)
        end = d.end_position
        for index, path in segment_files(archive_dir, d.recording_id):
            base = index * d.segment_file_length
            if base >= end and base > 0:
                path.unlink()
                continue
            os.truncate(path, min(end - base, d.segment_file_length))
            path.rename(archive_dir / segment_file_name(d.recording_id, base))
    (archive_dir / "archive.catalog").write_bytes(bytes(old))
    return [e.descriptor.recording_id for e in entries]


def test_an_archive_in_the_old_layout_is_refused_then_migrated_once(
    recorded: dict[int, list[bytes]], archive_dir: Path, make_archive: Callable[..., ArchiveHarness]
) -> None:
    with Catalog(archive_dir, writable=False) as catalog:
        before = catalog.descriptors()
    count = len(segment_files(archive_dir, 1))
    assert count > 3
    _to_old_layout(archive_dir)
    assert sorted(p.name for p in archive_dir.glob("1-*.rec")) == sorted(f"1-{i * TERM}.rec" for i in range(count))
    with pytest.raises(CatalogLayoutError, match="migrate"):
        make_archive()
    out = io.StringIO()
    assert migrate(archive_dir, out) == 0
    assert out.getvalue() == f"migrated 3 recordings in {archive_dir}; the old catalog is archive.catalog.old\n"
    assert sorted(p.name for p in archive_dir.glob("1-*.rec")) == sorted(f"1-{i}.rec" for i in range(count))
    code, _, err = verbs("verify", str(archive_dir))
    assert code == 0, err
    with Catalog(archive_dir, writable=False) as catalog:
        assert [d.to_dict() for d in catalog.descriptors()] == [d.to_dict() for d in before]
    assert verbs("migrate", str(archive_dir))[0] == 1  # once
    harness = make_archive()
    for rid, messages in recorded.items():
        d = harness.archive.recording(rid)
        assert assemble(parse_frames(recording_bytes(archive_dir, d), d.start_position)) == messages
    assert harness.replay_messages(1, len(recorded[1])) == recorded[1]


def test_verify_judges_a_recording_that_starts_mid_term(
    make_archive: Callable[..., ArchiveHarness], archive_dir: Path
) -> None:
    """Segments count from the start position's term (Aeron 1.15.1's CatalogTool misjudges such a recording)."""
    harness = make_archive()
    harness.archive.start_recording(CHANNEL, 9)
    publication = harness.client.add_exclusive_publication(positioned_channel(CHANNEL, 100, 3 * TERM + 6400, TERM), 9)
    d = harness.wait_for_recordings(1)[0]
    assert d.start_position == 3 * TERM + 6400
    messages = [message(i, 500) for i in range(400)]  # on into the next segments
    harness.wait_recorded(d.recording_id, offer_all(publication, messages))
    harness.archive.stop_recording(CHANNEL, 9)
    publication.close()
    d = harness.wait_stopped(d.recording_id)
    harness.close()
    assert [i for i, _ in segment_files(archive_dir, d.recording_id)] == [0, 1, 2, 3]
    assert verbs("verify", str(archive_dir)) == (0, f"(recordingId={d.recording_id}) OK\n", "")
    with Catalog(archive_dir) as catalog:
        catalog.extend(d.recording_id)
    assert verbs("verify", str(archive_dir)) == (0, f"(recordingId={d.recording_id}) OK\n", "")
    with Catalog(archive_dir, writable=False) as catalog:
        assert catalog.descriptor(d.recording_id).stop_position == d.stop_position


def test_recording_positions_come_from_rec_pos_counters_of_the_driver_the_mark_file_names(
    make_archive: Callable[..., ArchiveHarness], archive_dir: Path, tmp_path: Path
) -> None:
    """What a reader uses for Aeron's live recordings, checked on ours (whose rec-pos counters have Aeron's key)."""
    harness = make_archive()
    harness.archive.start_recording(CHANNEL, 5)
    publication = harness.client.add_exclusive_publication(CHANNEL, 5)
    d = harness.wait_for_recordings(1)[0]
    end = offer_all(publication, [message(i, 100) for i in range(200)])
    harness.wait_recorded(d.recording_id, end)
    positions = RecordingPositions(archive_dir)
    try:
        assert positions(d.recording_id) == end
        assert positions(d.recording_id + 1) is None
        harness.archive.stop_recording(CHANNEL, 5)
        harness.wait_stopped(d.recording_id)
        execute_until(lambda: positions(d.recording_id) is None, description="the counter freed with the recording")
    finally:
        positions.close()
        publication.close()
    nowhere = RecordingPositions(tmp_path)  # no mark file: unknown, no error
    assert nowhere(0) is None
    nowhere.close()
