"""Archive settings, with Aeron Archive's property names and their environment forms."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path

import attrs

from driver.archive.recorder import SyncLevel
from driver.archive.segments import SEGMENT_MAX_LENGTH, SEGMENT_MIN_LENGTH
from driver.config import _build, _Checker, _Kind, _meta, _properties_of, _to_path, default_aeron_dir, env_name
from driver.uri import ChannelUri

__all__ = ["ArchiveContext", "default_archive_dir"]

DEFAULT_CONTROL_CHANNEL = "aeron:udp?endpoint=localhost:8010"
DEFAULT_LOCAL_CONTROL_CHANNEL = "aeron:ipc"
DEFAULT_CONTROL_RESPONSE_CHANNEL = "aeron:udp?endpoint=localhost:8020"
DEFAULT_EVENTS_CHANNEL = "aeron:udp?endpoint=localhost:8030"


def default_archive_dir() -> Path:
    return Path(f"{default_aeron_dir()}-archive")


def _log_error(exc: BaseException) -> None:
    import logging

    logging.getLogger("driver.archive").error("archive error", exc_info=exc)


@attrs.frozen
class ArchiveContext:
    """Every archive setting; defaults are Aeron Archive's (control on UDP 8010 stream 10 and IPC stream 11,
    events on UDP 8030 stream 30)."""

    archive_dir: Path = attrs.field(
        factory=default_archive_dir, converter=_to_path, metadata=_meta("aeron.archive.dir", _Kind.PATH)
    )
    aeron_dir: Path = attrs.field(
        factory=default_aeron_dir, converter=_to_path, metadata=_meta("aeron.dir", _Kind.PATH)
    )
    control_channel: str = attrs.field(
        default=DEFAULT_CONTROL_CHANNEL, metadata=_meta("aeron.archive.control.channel", _Kind.TEXT)
    )
    control_stream_id: int = attrs.field(default=10, metadata=_meta("aeron.archive.control.stream.id", _Kind.INT))
    control_response_channel: str = attrs.field(
        default=DEFAULT_CONTROL_RESPONSE_CHANNEL, metadata=_meta("aeron.archive.control.response.channel", _Kind.TEXT)
    )
    control_response_stream_id: int = attrs.field(
        default=20, metadata=_meta("aeron.archive.control.response.stream.id", _Kind.INT)
    )
    local_control_channel: str = attrs.field(
        default=DEFAULT_LOCAL_CONTROL_CHANNEL, metadata=_meta("aeron.archive.local.control.channel", _Kind.TEXT)
    )
    local_control_stream_id: int = attrs.field(
        default=11, metadata=_meta("aeron.archive.local.control.stream.id", _Kind.INT)
    )
    max_control_sessions: int = attrs.field(default=64, metadata=_meta("aeron.archive.max.control.sessions", _Kind.INT))
    max_concurrent_recordings: int = attrs.field(
        default=20, metadata=_meta("aeron.archive.max.concurrent.recordings", _Kind.INT)
    )
    """Recording subscriptions, and recordings, at once (Aeron today: 20; 1.15.1: 128). A remote client can ask
    for a subscription on any channel: this bounds how many ports and images it can make us take."""
    max_concurrent_replays: int = attrs.field(
        default=20, metadata=_meta("aeron.archive.max.concurrent.replays", _Kind.INT)
    )
    """Replays at once, each a publication (Aeron today: 20; 1.15.1: 128)."""
    recording_events_channel: str = attrs.field(
        default=DEFAULT_EVENTS_CHANNEL, metadata=_meta("aeron.archive.recording.events.channel", _Kind.TEXT)
    )
    recording_events_stream_id: int = attrs.field(
        default=30, metadata=_meta("aeron.archive.recording.events.stream.id", _Kind.INT)
    )
    recording_events_enabled: bool = attrs.field(
        default=True, metadata=_meta("aeron.archive.recording.events.enabled", _Kind.BOOL)
    )
    segment_file_length: int = attrs.field(
        default=128 * 1024 * 1024, metadata=_meta("aeron.archive.segment.file.length", _Kind.SIZE)
    )
    file_sync_level: int = attrs.field(default=0, metadata=_meta("aeron.archive.file.sync.level", _Kind.INT))
    catalog_file_sync_level: int = attrs.field(
        default=0, metadata=_meta("aeron.archive.catalog.file.sync.level", _Kind.INT)
    )
    max_catalog_entries: int = attrs.field(
        default=8 * 1024, metadata=_meta("aeron.archive.max.catalog.entries", _Kind.INT)
    )
    message_timeout_ns: int = attrs.field(
        default=5_000_000_000, metadata=_meta("aeron.archive.message.timeout", _Kind.DURATION)
    )
    progress_interval_ns: int = attrs.field(
        default=200_000_000, metadata=_meta("aeron.archive.recording.progress.interval", _Kind.DURATION)
    )
    archive_id: int = attrs.field(default=-1, metadata=_meta("aeron.archive.id", _Kind.INT))
    """The id ArchiveIdRequest answers; -1: the one kept in the archive directory (made once, at random)."""
    idle_strategy: str = attrs.field(default="backoff", metadata=_meta("aeron.archive.idle.strategy", _Kind.IDLE))
    error_handler: Callable[[BaseException], None] = attrs.field(default=_log_error)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> ArchiveContext:
        env = os.environ if environ is None else environ
        return _build(cls, lambda prop: env.get(env_name(prop)), overrides)

    @classmethod
    def from_properties(cls, properties: Mapping[str, str], **overrides: object) -> ArchiveContext:
        return _build(cls, properties.get, overrides)

    def to_properties(self) -> dict[str, str]:
        return _properties_of(self)

    def conclude(self) -> ArchiveContext:
        """Check every setting; returns self, raises DriverConfigurationError naming the first bad one."""
        c = _Checker(self)
        c.instance("archive_dir", Path)
        c.instance("aeron_dir", Path)
        for name in (
            "control_channel",
            "control_response_channel",
            "local_control_channel",
            "recording_events_channel",
        ):
            try:
                ChannelUri.parse(c.value(name))
            except Exception as exc:
                raise c.fail(name, f"an Aeron channel URI ({exc})") from None
        for name in (
            "control_stream_id",
            "control_response_stream_id",
            "local_control_stream_id",
            "recording_events_stream_id",
        ):
            c.int_range(name, -(2**31), 2**31 - 1)
        c.boolean("recording_events_enabled")
        c.int_range("archive_id", -1, 2**63 - 1)
        c.int_range("max_control_sessions", 1, 1 << 16)
        c.int_range("max_concurrent_recordings", 1, 1 << 16)
        c.int_range("max_concurrent_replays", 1, 1 << 16)
        c.power_of_two("segment_file_length", SEGMENT_MIN_LENGTH, SEGMENT_MAX_LENGTH)
        for name in ("file_sync_level", "catalog_file_sync_level"):
            c.int_range(name, SyncLevel.NONE, SyncLevel.DATA_AND_METADATA)
        c.int_range("max_catalog_entries", 1, (2**31 - 1) // 1024 - 1)  # Aeron's bound: a catalog under 2 GiB
        c.timeout("message_timeout_ns")
        c.timeout("progress_interval_ns")
        c.idle("idle_strategy")
        if not callable(self.error_handler):
            raise c.fail("error_handler", "a callable taking the exception")
        return self
