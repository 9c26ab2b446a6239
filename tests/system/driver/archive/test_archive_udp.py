"""Recording UDP streams: as a remote receiver (``local=False``) and through a spy on a local publication."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from archive_helpers import (
    ArchiveHarness,
    Collector,
    RawCollector,
    assemble,
    message,
    offer_all,
    parse_frames,
    recording_bytes,
)

from driver.archive import ArchiveError
from driver.archive.client import replay_session_id
from driver.client import Aeron
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from support.waiting import execute_until

pytestmark = pytest.mark.slow

STREAM = 101


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def udp_messages() -> list[bytes]:
    return [message(i, 40 if i % 8 else (3000 if i % 16 else 500)) for i in range(1500)]


@pytest.fixture
def remote_aeron(aeron_dir: Path) -> Iterator[Aeron]:
    """A second embedded driver (the publisher's side) and a client of it."""
    remote_dir = aeron_dir.with_name(aeron_dir.name + "-remote")
    ctx = DriverContext.from_env(
        {},
        aeron_dir=remote_dir,
        threading_mode="SHARED",
        timer_interval_ns=50_000_000,
        publication_linger_timeout_ns=500_000_000,
        dir_delete_on_shutdown=True,
    )
    driver = MediaDriver.launch(ctx)
    try:
        with Aeron.connect(aeron_dir=remote_dir) as aeron:
            yield aeron
    finally:
        driver.close()


def test_record_a_remote_udp_stream(harness: ArchiveHarness, remote_aeron: Aeron) -> None:
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=64k"
    harness.archive.start_recording(channel, STREAM, local=False)
    plain = Collector(harness.client.add_subscription(channel, STREAM))
    raw = RawCollector(harness.client.add_subscription(channel, STREAM))
    publication = remote_aeron.add_exclusive_publication(channel, STREAM)
    try:
        (recording,) = harness.wait_for_recordings(1)
        execute_until(lambda: plain.subscription.images and raw.image, description="receivers' images")
        messages = udp_messages()

        def drain() -> None:
            plain.poll()
            raw.poll()

        end = offer_all(publication, messages, drain)
        # Both subscribers are drained while waiting: the slowest one's position bounds what the sender may send.
        execute_until(
            lambda: len(plain.messages) >= len(messages) and raw.position >= end,
            drain,
            timeout_s=20,
            max_iterations=10_000_000,
            interval_s=0.0001,
            description="plain and raw subscribers at the end of the stream",
        )
        assert plain.messages == messages
        harness.wait_recorded(recording.recording_id, end)
        assert harness.archive.stop_recording(channel, STREAM)
    finally:
        publication.close()
    d = harness.archive.recording(recording.recording_id)
    assert (d.start_position, d.stop_position) == (raw.start, end)
    assert d.session_id == publication.session_id
    assert d.original_channel == channel
    assert d.stripped_channel == channel.split("|")[0]
    assert d.source_identity.startswith("127.0.0.1:")
    recorded = recording_bytes(harness.archive_dir, d)
    assert recorded == bytes(raw.data)
    assert assemble(parse_frames(recorded, d.start_position)) == messages
    assert harness.replay_messages(d.recording_id, len(messages)) == messages
    assert harness.archive.recordings_for_uri("aeron:udp", STREAM) == [d]
    # a replay onto UDP
    replay_channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}"
    replay_id = harness.archive.replay(d.recording_id, replay_channel, 99)
    replay = Collector(
        harness.client.add_subscription(f"{replay_channel}|session-id={replay_session_id(replay_id)}", 99)
    )
    try:
        assert replay.poll_until(len(messages)) == messages
    finally:
        replay.subscription.close()


def test_recording_a_udp_publication_locally_says_to_record_it_as_a_receiver(harness: ArchiveHarness) -> None:
    """Our driver has no spy subscriptions yet: local recording of UDP is refused with what to do instead."""
    channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=64k"
    with pytest.raises(ArchiveError, match="local=False"):
        harness.archive.start_recording(channel, STREAM + 1)
    assert harness.archive.recordings() == []
