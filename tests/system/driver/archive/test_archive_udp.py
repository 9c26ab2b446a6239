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


@pytest.fixture
def spying_driver(aeron_dir: Path, request: pytest.FixtureRequest) -> Iterator[MediaDriver]:
    """Our driver with ``spies_simulate_connection`` as the test's parameter says (the archive's own driver)."""
    ctx = DriverContext.from_env(
        {},
        aeron_dir=aeron_dir,
        threading_mode="SHARED",
        timer_interval_ns=50_000_000,
        publication_linger_timeout_ns=500_000_000,
        spies_simulate_connection=request.param,
        dir_delete_on_shutdown=True,
    )
    driver = MediaDriver.launch(ctx)
    try:
        yield driver
    finally:
        driver.close()


@pytest.mark.parametrize("spying_driver", [True, False], ids=["spies-connect", "beside-a-receiver"], indirect=True)
def test_record_a_local_udp_publication_through_a_spy(spying_driver: MediaDriver, archive_dir: Path) -> None:
    """``local`` (the default) on a UDP channel: the archive reads the publication's own log through a spy, in
    place. With ``spies_simulate_connection`` the spy alone connects the publication (nothing need receive it);
    without, a receiver does, and the spy records beside it."""
    simulate = spying_driver.context.spies_simulate_connection
    harness = ArchiveHarness(spying_driver.aeron_dir, archive_dir)
    try:
        channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length=64k"
        subscription_id = harness.archive.start_recording(channel, STREAM + 1)
        receiver = None if simulate else Collector(harness.client.add_subscription(channel, STREAM + 1))
        publication = harness.client.add_exclusive_publication(channel, STREAM + 1)
        try:
            (recording,) = harness.wait_for_recordings(1)
            execute_until(lambda: publication.is_connected, description="the publication connected")
            messages = udp_messages()
            end = offer_all(publication, messages, receiver.poll if receiver else lambda: None)
            harness.wait_recorded(recording.recording_id, end)
            if receiver is not None:
                assert receiver.poll_until(len(messages)) == messages
            assert harness.archive.stop_recording_subscription(subscription_id)
        finally:
            publication.close()
        d = harness.wait_stopped(recording.recording_id)
        assert (d.start_position, d.stop_position) == (0, end)
        assert d.session_id == publication.session_id
        assert d.original_channel == channel
        assert d.source_identity == "aeron:ipc"  # a spy's image, as Aeron names it
        assert assemble(parse_frames(recording_bytes(harness.archive_dir, d), 0)) == messages
        assert harness.replay_messages(d.recording_id, len(messages)) == messages
        assert harness.errors == []
    finally:
        harness.close()
