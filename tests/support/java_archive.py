"""The real Aeron Java 1.15.1 archive as a test peer: ArchivingMediaDriver, its sample clients and CatalogTool.

Theory of operation: everything runs from the jar that :mod:`support.aeron_java` keeps in its cache.
An :class:`JavaArchive` is one ``io.aeron.archive.ArchivingMediaDriver`` JVM with its own ``aeron.dir``
and ``aeron.archive.dir`` under a directory the test owns, and its own control and recording-events
channels on UDP ports picked free on 127.0.0.1 (1.15.1's defaults, ``localhost:8010`` and
``localhost:8030``, would make parallel tests collide). The sample clients
(``RecordedBasicPublisher``, ``ReplayedBasicSubscriber``) and any ``AeronArchive`` client read the
same ``aeron.archive.*`` system properties, so :meth:`ArchiveChannels.client_props` hands them the
matching set, including a control-response channel of their own.

Readiness: 1.15.1 writes ``archive-mark.dat`` (pid, start and activity timestamps) before its
conductor subscribes to the control channel, but the conductor only refreshes the activity
timestamp from its duty cycle, after the control subscription exists. So the archive is ready
once the mark file holds the JVM's pid and an activity timestamp later than its start timestamp.
(The mark schema's version is 0, so the version word cannot be the signal.)

Every process is bounded by a timeout and stopped by its process-group id (see
:meth:`AeronJava.stop`); nothing is looked up or killed by name.
"""

from __future__ import annotations

import os
import re
import signal
import struct
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from support.aeron_java import DRIVER_PROPS, AeronJava, PeerSetupError, PropValue, read_cnc_header
from support.ports import distinct_free_udp_ports, free_udp_port
from support.waiting import execute_until

__all__ = [
    "ARCHIVING_MEDIA_DRIVER_CLASS",
    "CATALOG_TOOL_CLASS",
    "RECORDED_BASIC_PUBLISHER_CLASS",
    "REPLAYED_BASIC_SUBSCRIBER_CLASS",
    "ArchiveChannels",
    "JavaArchive",
    "MarkFileHeader",
    "catalog_tool",
    "free_udp_port",
    "java_archive",
    "parse_sbe_fields",
    "read_mark_file_header",
    "record_with_java_publisher",
    "replay_with_java_subscriber",
    "start_java_archive",
]

ARCHIVING_MEDIA_DRIVER_CLASS = "io.aeron.archive.ArchivingMediaDriver"
CATALOG_TOOL_CLASS = "io.aeron.archive.CatalogTool"
RECORDED_BASIC_PUBLISHER_CLASS = "io.aeron.samples.archive.RecordedBasicPublisher"
REPLAYED_BASIC_SUBSCRIBER_CLASS = "io.aeron.samples.archive.ReplayedBasicSubscriber"

MARK_FILE_NAME = "archive-mark.dat"
CATALOG_FILE_NAME = "archive.catalog"

# A small archive for a small machine: one conductor thread for the archive (SHARED), small
# segments so a test crosses segment boundaries cheaply, and spies that count as a connection so
# RecordedBasicPublisher's UDP publication (recorded LOCAL through a spy) can offer at all.
ARCHIVE_PROPS: dict[str, PropValue] = {
    "aeron.archive.threading.mode": "SHARED",
    "aeron.archive.segment.file.length": 1 << 20,
    "aeron.spies.simulate.connection": True,
}

# MarkFileHeader (aeron-archive-mark-codecs.xml, schema 100 v0): no message header, fixed block of 128.
_MARK_BLOCK_LENGTH = 128


@dataclass(frozen=True)
class ArchiveChannels:
    """The archive's control and events channels, and a client's response channel (1.15.1 property names)."""

    control_channel: str
    control_response_channel: str
    recording_events_channel: str
    control_stream_id: int = 10
    control_response_stream_id: int = 20
    recording_events_stream_id: int = 30

    @classmethod
    def free(cls, host: str = "127.0.0.1") -> ArchiveChannels:
        """Channels on UDP ports free on ``host`` right now (so parallel tests do not share 8010/8020/8030)."""
        control, response, events = distinct_free_udp_ports(3, host)
        return cls(
            control_channel=f"aeron:udp?endpoint={host}:{control}",
            control_response_channel=f"aeron:udp?endpoint={host}:{response}",
            recording_events_channel=f"aeron:udp?endpoint={host}:{events}",
        )

    def archive_props(self) -> dict[str, PropValue]:
        """What the archive reads (``Archive.Context`` takes its defaults from ``AeronArchive.Configuration``)."""
        return {
            "aeron.archive.control.channel": self.control_channel,
            "aeron.archive.control.stream.id": self.control_stream_id,
            "aeron.archive.recording.events.channel": self.recording_events_channel,
            "aeron.archive.recording.events.stream.id": self.recording_events_stream_id,
        }

    def client_props(self) -> dict[str, PropValue]:
        """What an ``AeronArchive`` client reads: the archive's channels plus where it wants its responses."""
        return {
            **self.archive_props(),
            "aeron.archive.control.response.channel": self.control_response_channel,
            "aeron.archive.control.response.stream.id": self.control_response_stream_id,
        }


@dataclass(frozen=True)
class MarkFileHeader:
    """The fixed fields and the four strings of 1.15.1's ``archive-mark.dat``."""

    version: int
    activity_timestamp: int
    start_timestamp: int
    pid: int
    control_stream_id: int
    local_control_stream_id: int
    events_stream_id: int
    control_channel: str
    local_control_channel: str
    events_channel: str
    aeron_directory: str


def read_mark_file_header(path: Path) -> MarkFileHeader | None:
    """Decode ``archive-mark.dat`` (None while it is too short to hold the header and its strings)."""
    data = path.read_bytes()
    if len(data) < _MARK_BLOCK_LENGTH:
        return None
    version, activity, start, pid, control, local, events = struct.unpack_from("<i4xqqqiii", data, 0)
    strings: list[str] = []
    at = _MARK_BLOCK_LENGTH
    for _ in range(4):
        if at + 4 > len(data):
            return None
        (length,) = struct.unpack_from("<I", data, at)
        if at + 4 + length > len(data):
            return None
        strings.append(data[at + 4 : at + 4 + length].decode("ascii", errors="replace"))
        at += 4 + length
    return MarkFileHeader(version, activity, start, pid, control, local, events, *strings)


@dataclass
class JavaArchive:
    """A running ``ArchivingMediaDriver``: its process, directories, channels and output."""

    process: subprocess.Popen[bytes]
    aeron_dir: Path
    archive_dir: Path
    log_path: Path
    channels: ArchiveChannels
    props: dict[str, PropValue] = field(default_factory=dict)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def mark_path(self) -> Path:
        return self.archive_dir / MARK_FILE_NAME

    @property
    def catalog_path(self) -> Path:
        return self.archive_dir / CATALOG_FILE_NAME

    def client_props(self, **extra: PropValue) -> dict[str, PropValue]:
        """System properties for a Java client of this archive (``aeron.dir`` and the archive channels)."""
        return {"aeron.dir": str(self.aeron_dir), **self.channels.client_props(), **extra}

    def output(self) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return ""

    def stop(self, timeout_s: float = 15.0) -> int:
        """SIGTERM to its process group (the JVM's shutdown hook closes archive and driver), SIGKILL if stuck."""
        return AeronJava.stop(self.process, timeout_s)

    def kill(self) -> None:
        """SIGKILL the JVM, as a crash would (its group, by id, while it is unreaped)."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def is_ready(self) -> bool:
        """The driver's CnC and the archive's mark file are ours and the archive's duty cycle runs."""
        if not (self.aeron_dir / "cnc.dat").is_file() or not self.mark_path.is_file():
            return False
        version, pid = read_cnc_header(self.aeron_dir / "cnc.dat")
        if version == 0 or pid != self.pid:
            return False
        header = read_mark_file_header(self.mark_path)
        return (
            header is not None
            and header.pid == self.pid
            and header.start_timestamp > 0
            and header.activity_timestamp > header.start_timestamp
        )


def start_java_archive(
    peer: AeronJava,
    root: Path,
    *,
    channels: ArchiveChannels | None = None,
    props: Mapping[str, PropValue] | None = None,
    archive_dir: Path | None = None,
    aeron_dir: Path | None = None,
    timeout_s: float = 60.0,
) -> JavaArchive:
    """Start an ArchivingMediaDriver with ``aeron.dir`` and ``aeron.archive.dir`` under ``root``; wait until ready.

    ``archive_dir`` may name an existing archive directory (a restart, or one our archive wrote).
    A failed start leaves no process behind.
    """
    root.mkdir(parents=True, exist_ok=True)
    channels = channels or ArchiveChannels.free()
    aeron_dir = aeron_dir or root / "aeron"
    archive_dir = archive_dir or root / "archive"
    log_path = root / "archiving-media-driver.log"
    all_props: dict[str, PropValue] = {
        **DRIVER_PROPS,
        **ARCHIVE_PROPS,
        **channels.archive_props(),
        **(props or {}),
        "aeron.dir": str(aeron_dir),
        "aeron.archive.dir": str(archive_dir),
    }
    archive = JavaArchive(
        peer.start(ARCHIVING_MEDIA_DRIVER_CLASS, props=all_props, output=log_path),
        aeron_dir,
        archive_dir,
        log_path,
        channels,
        all_props,
    )
    try:
        execute_until(
            lambda: archive.process.poll() is not None or archive.is_ready(),
            timeout_s=timeout_s,
            interval_s=0.05,
            description=f"Java ArchivingMediaDriver to be ready on {archive_dir}",
        )
        if archive.process.poll() is not None:
            raise PeerSetupError(
                f"ArchivingMediaDriver exited with {archive.process.returncode} before it was ready:\n"
                f"{archive.output()}"
            )
    except BaseException:
        archive.stop()
        raise
    return archive


@pytest.fixture
def java_archive(aeron_java: AeronJava, tmp_path: Path) -> Iterator[JavaArchive]:
    """A ready Java 1.15.1 ArchivingMediaDriver on directories under ``tmp_path``, stopped by pid afterwards.

    Import it into a test module (``from support.java_archive import java_archive``) to use it.
    """
    archive = start_java_archive(aeron_java, tmp_path / "java-archive")
    try:
        yield archive
    finally:
        archive.stop()


_RECORDING_STARTED = re.compile(r"Recording started: recordingId = (\d+)")


def record_with_java_publisher(
    peer: AeronJava,
    archive: JavaArchive,
    *,
    channel: str | None = None,
    stream_id: int = 1001,
    messages: int = 3,
    timeout_s: float = 90.0,
) -> tuple[int, subprocess.CompletedProcess[str]]:
    """Run RecordedBasicPublisher to the end; returns (recording id, its run).

    It records ``channel`` LOCAL on the archive, offers ``messages`` "Hello World! i" messages one
    second apart, waits until the recording caught up and stops the recording. ``channel`` defaults
    to UDP on a free port.
    """
    channel = channel or f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    props = archive.client_props(
        **{"aeron.sample.channel": channel, "aeron.sample.streamId": stream_id, "aeron.sample.messages": messages}
    )
    done = peer.run(RECORDED_BASIC_PUBLISHER_CLASS, props=props, timeout_s=timeout_s)
    if done.returncode != 0:
        raise PeerSetupError(
            f"RecordedBasicPublisher exited with {done.returncode}:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    match = _RECORDING_STARTED.search(done.stdout)
    if match is None:
        raise PeerSetupError(f"RecordedBasicPublisher printed no recording id:\n{done.stdout[-4000:]}")
    return int(match[1]), done


_REPLAYED_MESSAGE = re.compile(r"<<(.*)>>")


def replay_with_java_subscriber(
    peer: AeronJava,
    archive: JavaArchive,
    log_path: Path,
    *,
    channel: str,
    stream_id: int = 1001,
    expect: int,
    timeout_s: float = 60.0,
) -> list[str]:
    """Run ReplayedBasicSubscriber until it printed ``expect`` messages, then stop it; returns them in order.

    It replays the newest recording of ``channel``/``stream_id`` from position 0 to ``channel`` on
    ``stream_id + 1`` and never exits by itself (it follows the recording), so it is stopped here.
    The response stream id it uses is the configured one + 2.
    """
    props = archive.client_props(**{"aeron.sample.channel": channel, "aeron.sample.streamId": stream_id})
    proc = peer.start(REPLAYED_BASIC_SUBSCRIBER_CLASS, props=props, output=log_path)
    try:

        def received() -> list[str] | None:
            text = log_path.read_text(encoding="utf-8", errors="replace")
            found = _REPLAYED_MESSAGE.findall(text)
            if len(found) >= expect:
                return found
            if proc.poll() is not None:
                raise PeerSetupError(f"ReplayedBasicSubscriber exited with {proc.returncode}:\n{text[-4000:]}")
            return None

        messages = execute_until(
            received, timeout_s=timeout_s, interval_s=0.05, description=f"{expect} replayed messages"
        )
    finally:
        AeronJava.stop(proc)
    return messages


def catalog_tool(
    peer: AeronJava, archive_dir: Path, *args: str, timeout_s: float = 60.0
) -> subprocess.CompletedProcess[str]:
    """Run ``CatalogTool <archive_dir> args...`` to completion (bounded); stdout and stderr apart.

    ``describe`` and ``verify`` print descriptors and ``OK`` lines on stdout, ``ERR`` lines on
    stderr; ``verify`` writes its verdict (and a recovered stop position) into the catalog.
    """
    return peer.run(CATALOG_TOOL_CLASS, str(archive_dir), *args, timeout_s=timeout_s)


_SBE_HEADER = re.compile(r"^\[(\w+)\]\(([^)]*)\):(.*)$")


def _split_sbe_fields(text: str) -> Iterator[tuple[str, str]]:
    """``key=value|key='text'|...``; a quoted value runs to the quote that ends it (channels hold ``|``)."""
    at = 0
    while at < len(text):
        eq = text.find("=", at)
        if eq < 0:
            return
        key = text[at:eq]
        if text.startswith("'", eq + 1):
            end = text.find("'|", eq + 2)
            end = len(text) - 1 if end < 0 else end
            yield key, text[eq + 2 : end]
            at = end + 2
        else:
            end = text.find("|", eq + 1)
            end = len(text) if end < 0 else end
            yield key, text[eq + 1 : end]
            at = end + 1


def parse_sbe_fields(line: str) -> tuple[str, dict[str, str]]:
    """Split an SBE decoder's ``toString`` (``[Name](sbeTemplateId=..|..):field=value|...``) into its name and
    fields (string values without their quotes).

    Raises ValueError for a line that is not one.
    """
    match = _SBE_HEADER.match(line.strip())
    if match is None:
        raise ValueError(f"not an SBE decoder's text: {line!r}")
    return match[1], dict(_split_sbe_fields(match[2])) | dict(_split_sbe_fields(match[3]))
