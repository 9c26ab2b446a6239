"""Aeron Archive's control protocol both ways against the real Java 1.15.1 archive.

- Java's ``RecordedBasicPublisher`` and ``ReplayedBasicSubscriber`` samples (``AeronArchive`` clients) record and
  replay through our archive on our driver, finding the recording through our ``rec-pos`` counter;
- our ``ArchiveClient`` / ``AsyncArchiveClient`` record, list, replay, extend and truncate on Java's
  ``ArchivingMediaDriver``;
- a recording made through one side's client is replayed by the other's, byte for byte.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.archive import Archive, ArchiveContext
from driver.archive.client import ArchiveClient
from driver.client import FragmentAssembler, Header
from driver.core.media_driver import MediaDriver
from support.aeron_java import AeronJava, PeerSetupError, PropValue
from support.java_archive import (
    RECORDED_BASIC_PUBLISHER_CLASS,
    REPLAYED_BASIC_SUBSCRIBER_CLASS,
    free_udp_port,
    java_archive,
)
from support.waiting import execute_until

pytestmark = [pytest.mark.interop, pytest.mark.process, pytest.mark.slow, pytest.mark.cnc_v15]

__all__ = ["java_archive"]  # the fixture, imported for pytest

STREAM_ID = 1001
SEGMENT = 1 << 20
TERM = 1 << 16
HELLO = re.compile(r"<<(.*)>>")


def _udp() -> str:
    return f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"


@pytest.fixture
def our_archive(media_driver: MediaDriver, tmp_path: Path) -> Iterator[Archive]:
    """Our archive beside our driver, its control channel on UDP (a free port), as Aeron's is by default."""
    context = ArchiveContext.from_env(
        {},
        aeron_dir=media_driver.aeron_dir,
        archive_dir=tmp_path / "our-archive",
        control_channel=_udp(),
        recording_events_channel=_udp(),
        segment_file_length=SEGMENT,
        control_response_channel=_udp(),
    )
    with Archive(context) as archive:
        yield archive


def java_client_props(archive: Archive, aeron_dir: Path, **extra: PropValue) -> dict[str, PropValue]:
    """System properties for a Java ``AeronArchive`` client of our archive."""
    c = archive.context
    return {
        "aeron.dir": str(aeron_dir),
        "aeron.archive.control.channel": c.control_channel,
        "aeron.archive.control.stream.id": c.control_stream_id,
        "aeron.archive.control.response.channel": _udp(),
        "aeron.archive.control.response.stream.id": 20,
        "aeron.archive.recording.events.channel": c.recording_events_channel,
        "aeron.archive.recording.events.stream.id": c.recording_events_stream_id,
        **extra,
    }


def run_java_publisher(peer: AeronJava, props: dict[str, PropValue], messages: int) -> int:
    """RecordedBasicPublisher to its end; the recording id it found through the archive's ``rec-pos`` counter."""
    done = peer.run(RECORDED_BASIC_PUBLISHER_CLASS, props={**props, "aeron.sample.messages": messages}, timeout_s=90)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    match = re.search(r"Recording started: recordingId = (\d+)", done.stdout)
    assert match is not None, done.stdout[-3000:]
    return int(match[1])


def run_java_subscriber(peer: AeronJava, props: dict[str, PropValue], log: Path, expect: int) -> list[str]:
    """ReplayedBasicSubscriber until it printed ``expect`` messages (it follows forever), then stopped."""
    proc = peer.start(REPLAYED_BASIC_SUBSCRIBER_CLASS, props=props, output=log)
    try:

        def received() -> list[str] | None:
            text = log.read_text(encoding="utf-8", errors="replace")
            found = HELLO.findall(text)
            if len(found) >= expect:
                return found
            if proc.poll() is not None:
                raise PeerSetupError(f"ReplayedBasicSubscriber exited with {proc.returncode}:\n{text[-3000:]}")
            return None

        result: list[str] = execute_until(received, timeout_s=60, interval_s=0.05, description="replayed")
        return result
    finally:
        AeronJava.stop(proc)


def replay_bytes(client: ArchiveClient, recording_id: int, count: int, stream_id: int) -> list[bytes]:
    """Replay a recording with our client onto IPC and collect ``count`` messages."""
    replay_id = client.replay(recording_id, "aeron:ipc", stream_id, position=0)
    subscription = client.replay_subscription("aeron:ipc", stream_id, replay_id)
    got: list[bytes] = []

    def on_fragment(payload: memoryview, header: Header) -> None:
        got.append(bytes(payload))

    assembler = FragmentAssembler(on_fragment)
    try:
        execute_until(
            lambda: len(got) >= count,
            lambda: subscription.poll(assembler, 64),
            timeout_s=30,
            description=f"{count} replayed messages",
        )
    finally:
        subscription.close()
    return got


# -- Java's clients on our archive -----------------------------------------------------------------------


def test_java_samples_record_and_replay_through_our_archive(
    aeron_java: AeronJava, media_driver: MediaDriver, our_archive: Archive, tmp_path: Path
) -> None:
    channel = "aeron:ipc?term-length=64k"
    props = java_client_props(
        our_archive, media_driver.aeron_dir, **{"aeron.sample.channel": channel, "aeron.sample.streamId": STREAM_ID}
    )
    recording_id = run_java_publisher(aeron_java, props, messages=3)

    d = our_archive.recording(recording_id)
    assert (d.stream_id, d.original_channel, d.start_position) == (STREAM_ID, channel, 0)
    execute_until(lambda: not our_archive.recording(recording_id).is_active, description="recording stopped")
    assert our_archive.recording(recording_id).stop_position == 3 * 64  # "Hello World! i": 32 + 14, aligned

    replayed = run_java_subscriber(aeron_java, props, tmp_path / "replayed.log", expect=3)
    assert replayed == [f"Hello World! {i}" for i in range(3)]

    # and our client reads the same bytes the Java publisher offered
    with ArchiveClient.connect(context=our_archive.context, timeout=10) as ours:
        assert replay_bytes(ours, recording_id, 3, 3003) == [f"Hello World! {i}".encode() for i in range(3)]
