"""Archive settings: Aeron Archive's property names, their environment forms, and errors naming the property."""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

from driver.archive.context import ArchiveContext, default_archive_dir
from driver.archive.recorder import SyncLevel
from driver.config import default_aeron_dir, env_name
from driver.errors import DriverConfigurationError

MIB = 1024 * 1024


def test_defaults() -> None:
    ctx = ArchiveContext().conclude()
    assert ctx.archive_dir == default_archive_dir() == Path(f"{default_aeron_dir()}-archive")
    assert ctx.aeron_dir == default_aeron_dir()
    # Aeron Archive 1.15.1's defaults (Archive.Configuration / AeronArchive.Configuration)
    assert (ctx.control_channel, ctx.control_stream_id) == ("aeron:udp?endpoint=localhost:8010", 10)
    assert (ctx.local_control_channel, ctx.local_control_stream_id) == ("aeron:ipc", 11)
    assert (ctx.control_response_channel, ctx.control_response_stream_id) == ("aeron:udp?endpoint=localhost:8020", 20)
    assert (ctx.recording_events_channel, ctx.recording_events_stream_id) == ("aeron:udp?endpoint=localhost:8030", 30)
    assert ctx.recording_events_enabled is True
    assert ctx.segment_file_length == 128 * MIB
    assert ctx.file_sync_level == ctx.catalog_file_sync_level == SyncLevel.NONE
    assert ctx.message_timeout_ns == 5_000_000_000
    assert ctx.idle_strategy == "backoff"
    assert callable(ctx.error_handler)
    # today's Aeron's bounds (1.15.1 allowed 128 of each): an archive open to the network should be conservative
    assert (ctx.max_concurrent_recordings, ctx.max_concurrent_replays) == (20, 20)


def test_environment_forms() -> None:
    environ = {
        "AERON_ARCHIVE_DIR": "/tmp/some-archive",
        "AERON_DIR": "/dev/shm/some-aeron",
        "AERON_ARCHIVE_CONTROL_CHANNEL": "aeron:udp?endpoint=127.0.0.1:8010",
        "AERON_ARCHIVE_CONTROL_STREAM_ID": "11",
        "AERON_ARCHIVE_RECORDING_EVENTS_CHANNEL": "aeron:ipc?term-length=128k",
        "AERON_ARCHIVE_RECORDING_EVENTS_STREAM_ID": "-31",
        "AERON_ARCHIVE_RECORDING_EVENTS_ENABLED": "false",
        "AERON_ARCHIVE_SEGMENT_FILE_LENGTH": "1m",
        "AERON_ARCHIVE_FILE_SYNC_LEVEL": "2",
        "AERON_ARCHIVE_CATALOG_FILE_SYNC_LEVEL": "1",
        "AERON_ARCHIVE_MAX_CATALOG_ENTRIES": "64",
        "AERON_ARCHIVE_MESSAGE_TIMEOUT": "2s",
        "AERON_ARCHIVE_RECORDING_PROGRESS_INTERVAL": "50ms",
        "AERON_ARCHIVE_IDLE_STRATEGY": "yielding",
        "AERON_ARCHIVE_LOCAL_CONTROL_CHANNEL": "aeron:ipc?term-length=128k",
        "AERON_ARCHIVE_LOCAL_CONTROL_STREAM_ID": "12",
        "AERON_ARCHIVE_CONTROL_RESPONSE_CHANNEL": "aeron:ipc?term-length=256k",
        "AERON_ARCHIVE_CONTROL_RESPONSE_STREAM_ID": "21",
        "AERON_ARCHIVE_MAX_CONTROL_SESSIONS": "5",
        "AERON_ARCHIVE_MAX_CONCURRENT_RECORDINGS": "6",
        "AERON_ARCHIVE_MAX_CONCURRENT_REPLAYS": "7",
        "AERON_ARCHIVE_ID": "1234567",
    }
    ctx = ArchiveContext.from_env(environ).conclude()
    assert ctx.archive_dir == Path("/tmp/some-archive")
    assert ctx.aeron_dir == Path("/dev/shm/some-aeron")
    assert ctx.control_channel == "aeron:udp?endpoint=127.0.0.1:8010"
    assert ctx.control_stream_id == 11
    assert ctx.recording_events_channel == "aeron:ipc?term-length=128k"
    assert ctx.recording_events_stream_id == -31
    assert ctx.recording_events_enabled is False
    assert ctx.segment_file_length == MIB
    assert ctx.file_sync_level == SyncLevel.DATA_AND_METADATA
    assert ctx.catalog_file_sync_level == SyncLevel.DATA
    assert ctx.max_catalog_entries == 64
    assert ctx.message_timeout_ns == 2_000_000_000
    assert ctx.progress_interval_ns == 50_000_000
    assert ctx.idle_strategy == "yielding"
    assert (ctx.local_control_channel, ctx.local_control_stream_id) == ("aeron:ipc?term-length=128k", 12)
    assert (ctx.control_response_channel, ctx.control_response_stream_id) == ("aeron:ipc?term-length=256k", 21)
    assert ctx.max_control_sessions == 5
    assert (ctx.max_concurrent_recordings, ctx.max_concurrent_replays) == (6, 7)
    assert ctx.archive_id == 1234567
    # every property has exactly the environment name Aeron's convention gives it
    assert set(ctx.to_properties()) == {
        "aeron.archive.dir",
        "aeron.dir",
        "aeron.archive.control.channel",
        "aeron.archive.control.stream.id",
        "aeron.archive.local.control.channel",
        "aeron.archive.local.control.stream.id",
        "aeron.archive.control.response.channel",
        "aeron.archive.control.response.stream.id",
        "aeron.archive.max.control.sessions",
        "aeron.archive.max.concurrent.recordings",
        "aeron.archive.max.concurrent.replays",
        "aeron.archive.recording.events.channel",
        "aeron.archive.recording.events.stream.id",
        "aeron.archive.recording.events.enabled",
        "aeron.archive.segment.file.length",
        "aeron.archive.file.sync.level",
        "aeron.archive.catalog.file.sync.level",
        "aeron.archive.max.catalog.entries",
        "aeron.archive.message.timeout",
        "aeron.archive.recording.progress.interval",
        "aeron.archive.idle.strategy",
        "aeron.archive.id",
    }
    assert {env_name(p) for p in ctx.to_properties()} == set(environ)


def test_overrides_win_over_the_environment() -> None:
    ctx = ArchiveContext.from_env({"AERON_ARCHIVE_CONTROL_STREAM_ID": "11"}, control_stream_id=12)
    assert ctx.control_stream_id == 12
    ctx = ArchiveContext.from_env({}, segment_file_length="256k", archive_dir="/tmp/x")
    assert ctx.segment_file_length == 256 * 1024
    assert ctx.archive_dir == Path("/tmp/x")


def test_properties_round_trip() -> None:
    ctx = ArchiveContext.from_env(
        {}, archive_dir="/tmp/a", segment_file_length=4 * MIB, file_sync_level=1, recording_events_enabled=False
    ).conclude()
    again = ArchiveContext.from_properties(ctx.to_properties()).conclude()
    assert attrs.evolve(again, error_handler=ctx.error_handler) == ctx


def test_unknown_override_names_the_fields() -> None:
    with pytest.raises(DriverConfigurationError, match="segment_length") as info:
        ArchiveContext.from_env({}, segment_length=1)
    assert "segment_file_length" in info.value.allowed


@pytest.mark.parametrize(
    ("name", "text", "prop"),
    [
        ("AERON_ARCHIVE_SEGMENT_FILE_LENGTH", "100k", "aeron.archive.segment.file.length"),
        ("AERON_ARCHIVE_SEGMENT_FILE_LENGTH", "32k", "aeron.archive.segment.file.length"),
        ("AERON_ARCHIVE_SEGMENT_FILE_LENGTH", "2g", "aeron.archive.segment.file.length"),
        ("AERON_ARCHIVE_SEGMENT_FILE_LENGTH", "lots", "aeron.archive.segment.file.length"),
        ("AERON_ARCHIVE_FILE_SYNC_LEVEL", "3", "aeron.archive.file.sync.level"),
        ("AERON_ARCHIVE_FILE_SYNC_LEVEL", "-1", "aeron.archive.file.sync.level"),
        ("AERON_ARCHIVE_FILE_SYNC_LEVEL", "full", "aeron.archive.file.sync.level"),
        ("AERON_ARCHIVE_CATALOG_FILE_SYNC_LEVEL", "9", "aeron.archive.catalog.file.sync.level"),
        ("AERON_ARCHIVE_MAX_CATALOG_ENTRIES", "0", "aeron.archive.max.catalog.entries"),
        ("AERON_ARCHIVE_MAX_CATALOG_ENTRIES", str(1 << 21), "aeron.archive.max.catalog.entries"),
        ("AERON_ARCHIVE_CONTROL_STREAM_ID", "ten", "aeron.archive.control.stream.id"),
        ("AERON_ARCHIVE_CONTROL_STREAM_ID", str(1 << 31), "aeron.archive.control.stream.id"),
        ("AERON_ARCHIVE_RECORDING_EVENTS_STREAM_ID", "1.5", "aeron.archive.recording.events.stream.id"),
        ("AERON_ARCHIVE_CONTROL_CHANNEL", "ipc", "aeron.archive.control.channel"),
        ("AERON_ARCHIVE_RECORDING_EVENTS_CHANNEL", "aeron:tcp?x=1", "aeron.archive.recording.events.channel"),
        ("AERON_ARCHIVE_MESSAGE_TIMEOUT", "0", "aeron.archive.message.timeout"),
        ("AERON_ARCHIVE_MESSAGE_TIMEOUT", "soon", "aeron.archive.message.timeout"),
        ("AERON_ARCHIVE_RECORDING_PROGRESS_INTERVAL", "-1s", "aeron.archive.recording.progress.interval"),
        ("AERON_ARCHIVE_IDLE_STRATEGY", "nap", "aeron.archive.idle.strategy"),
        ("AERON_ARCHIVE_DIR", "", "aeron.archive.dir"),
        ("AERON_ARCHIVE_MAX_CONCURRENT_RECORDINGS", "0", "aeron.archive.max.concurrent.recordings"),
        ("AERON_ARCHIVE_MAX_CONCURRENT_REPLAYS", "-1", "aeron.archive.max.concurrent.replays"),
        ("AERON_ARCHIVE_MAX_CONCURRENT_REPLAYS", "many", "aeron.archive.max.concurrent.replays"),
    ],
)
def test_bad_values_name_the_property(name: str, text: str, prop: str) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        ArchiveContext.from_env({name: text}).conclude()
    assert info.value.field == prop
    assert prop in str(info.value)


@pytest.mark.parametrize(
    ("field", "value", "prop"),
    [
        ("segment_file_length", 3 * 64 * 1024, "aeron.archive.segment.file.length"),
        ("file_sync_level", True, "aeron.archive.file.sync.level"),
        ("control_stream_id", "10", None),  # text is parsed: fine
        ("recording_events_enabled", 1, "aeron.archive.recording.events.enabled"),
        ("error_handler", "print", "error_handler"),
    ],
)
def test_bad_typed_overrides_name_the_property(field: str, value: object, prop: str | None) -> None:
    if prop is None:
        ArchiveContext.from_env({}, **{field: value}).conclude()
        return
    with pytest.raises(DriverConfigurationError) as info:
        ArchiveContext.from_env({}, **{field: value}).conclude()
    assert prop in str(info.value)
