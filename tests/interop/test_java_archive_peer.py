"""The Java 1.15.1 archive harness works: ArchivingMediaDriver records, CatalogTool describes, the samples replay."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.aeron_java import AeronJava
from support.java_archive import (
    JavaArchive,
    catalog_tool,
    free_udp_port,
    java_archive,
    parse_sbe_fields,
    read_mark_file_header,
    record_with_java_publisher,
    replay_with_java_subscriber,
)

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.slow]

__all__ = ["java_archive"]  # the fixture, imported for pytest


def test_mark_file_names_the_archive_and_its_channels(java_archive: JavaArchive) -> None:
    header = read_mark_file_header(java_archive.mark_path)

    assert header is not None
    assert header.pid == java_archive.pid
    assert header.control_channel == java_archive.channels.control_channel
    assert header.events_channel == java_archive.channels.recording_events_channel
    assert header.aeron_directory == str(java_archive.aeron_dir)


def test_recorded_publisher_recording_is_described_verified_and_replayed(
    aeron_java: AeronJava, java_archive: JavaArchive, tmp_path: Path
) -> None:
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    recording_id, _ = record_with_java_publisher(aeron_java, java_archive, channel=channel, stream_id=1001, messages=3)

    described = catalog_tool(aeron_java, java_archive.archive_dir, "describe", str(recording_id))
    assert described.returncode == 0, described.stderr
    name, fields = parse_sbe_fields(described.stdout.strip().splitlines()[-1])
    assert name == "RecordingDescriptor"
    assert fields["recordingId"] == str(recording_id)
    assert fields["streamId"] == "1001"
    assert fields["originalChannel"] == channel
    assert int(fields["startPosition"]) == 0
    # Three "Hello World! i" messages: 32-byte header + 14 bytes, aligned to 64 each.
    assert int(fields["stopPosition"]) == 3 * 64

    counted = catalog_tool(aeron_java, java_archive.archive_dir, "count-entries")
    assert counted.stdout.strip() == "1"
    verified = catalog_tool(aeron_java, java_archive.archive_dir, "verify")
    assert verified.returncode == 0
    assert f"(recordingId={recording_id}) OK" in verified.stdout, verified.stderr

    replayed = replay_with_java_subscriber(
        aeron_java, java_archive, tmp_path / "replayed.log", channel=channel, stream_id=1001, expect=3
    )
    assert replayed == [f"Hello World! {i}" for i in range(3)]
