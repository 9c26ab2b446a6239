"""ArchiveClient and AsyncArchiveClient against the standalone archive process (and an in-process one):
every operation, typed errors, timeouts once the archive is gone, malformed control messages.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from archive_helpers import (
    ArchiveHarness,
    ArchiveProcess,
    Collector,
    message,
    offer_all,
    positioned_channel,
)

from driver.archive import (
    ArchiveContext,
    ArchiveError,
    ArchiveTimeoutError,
    InvalidPositionError,
    RecordingDescriptor,
    RecordingEvent,
    RecordingNotFoundError,
    RecordingStateError,
    control,
)
from driver.archive.client import ArchiveClient, AsyncArchiveClient, RecordingEvents
from driver.archive.control import ProtocolError
from driver.archive.sessions import SessionLimitError
from driver.client import Aeron, FragmentAssembler
from support.archive_channels import LOCAL_ARCHIVE_ENV
from support.driver_process import DriverProcess
from support.waiting import execute_until

CHANNEL = "aeron:ipc?term-length=64k"
TERM = 64 * 1024


@pytest.fixture
def archive_process(
    aeron_dir: Path, archive_dir: Path, tmp_path: Path, archive_processes: list[ArchiveProcess]
) -> ArchiveProcess:
    """``python -m driver.archive --with-driver`` with 64 KiB segments."""
    process = ArchiveProcess.start(
        archive_dir, aeron_dir, tmp_path / "archive.log", args=["--segment-file-length", "64k"]
    )
    archive_processes.append(process)
    return process


@pytest.fixture
def context(aeron_dir: Path, archive_dir: Path) -> ArchiveContext:
    return ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, aeron_dir=aeron_dir, archive_dir=archive_dir)


@pytest.fixture
def aeron(archive_process: ArchiveProcess, aeron_dir: Path) -> Iterator[Aeron]:
    with Aeron.connect(aeron_dir=aeron_dir) as client:
        yield client


def find_recording(recordings: list[RecordingDescriptor], session_id: int) -> RecordingDescriptor | None:
    return next((d for d in recordings if d.session_id == session_id), None)


@pytest.mark.process
def test_blocking_client_every_operation(aeron: Aeron, context: ArchiveContext, archive_dir: Path) -> None:
    with ArchiveClient.connect(aeron, context, timeout=10) as archive:
        assert archive.control_session_id > 0
        events = archive.recording_events()
        execute_until(lambda: events.subscription.is_connected, description="events subscription")
        subscription_id = archive.start_recording(CHANNEL, 7)
        assert subscription_id > 0
        other = archive.start_recording(CHANNEL, 8)
        assert archive.recording_subscriptions() == [(subscription_id, 7, "aeron:ipc"), (other, 8, "aeron:ipc")]
        assert archive.recording_subscriptions("ipc", 8) == [(other, 8, "aeron:ipc")]
        assert archive.recording_subscriptions(pseudo_index=1) == [(other, 8, "aeron:ipc")]
        assert archive.recording_subscriptions(count=1) == [(subscription_id, 7, "aeron:ipc")]
        assert archive.recording_subscriptions("udp") == []
        assert archive.stop_recording_subscription(other)
        publication = aeron.add_exclusive_publication(CHANNEL, 7)
        rec = execute_until(lambda: find_recording(archive.recordings(), publication.session_id))
        rid = rec.recording_id
        first = [message(i, 40 if i % 10 else 2000) for i in range(2000)]
        end = offer_all(publication, first)
        execute_until(lambda: (archive.recording_position(rid) or 0) >= end, description="recorded")
        assert archive.stop_position(rid) is None
        assert archive.recording(rid).is_active

        # typed errors while it is active
        with pytest.raises(RecordingStateError):
            archive.truncate_recording(rid, 0)
        with pytest.raises(RecordingStateError):
            archive.purge_recording(rid)
        with pytest.raises(RecordingStateError):
            archive.extend_recording(rid, CHANNEL, 7)
        with pytest.raises(InvalidPositionError):
            archive.replay(rid, "aeron:ipc", 99, position=33)
        with pytest.raises(InvalidPositionError):
            archive.replay(rid, "aeron:ipc", 99, position=end + 32)
        with pytest.raises(ArchiveError, match="InvalidChannelError"):
            archive.start_recording("aeron:tcp?endpoint=nowhere", 7)
        for operation in (archive.recording, archive.stop_position):
            with pytest.raises(RecordingNotFoundError):
                operation(rid + 100)
        assert archive.recording_position(rid + 100) is None  # Aeron answers NULL_POSITION: not recording
        with pytest.raises(RecordingNotFoundError):
            archive.replay(rid + 100, "aeron:ipc", 99)

        # live replay: catches up and follows
        replay_id = archive.replay(rid, "aeron:ipc", 99)
        replay = Collector(archive.replay_subscription("aeron:ipc", 99, replay_id))
        assert replay.poll_until(len(first)) == first
        second = [message(i, 64) for i in range(2000, 3000)]
        end = offer_all(publication, second, replay.poll)
        assert replay.poll_until(len(first) + len(second)) == first + second
        assert archive.stop_replay(replay_id)
        assert not archive.stop_replay(replay_id)
        replay.subscription.close()

        # stop, list, extend
        assert archive.stop_recording(CHANNEL, 7)
        assert not archive.stop_recording(CHANNEL, 7)
        assert not archive.stop_recording_subscription(subscription_id)
        assert archive.stop_position(rid) == end
        assert archive.recording_position(rid) is None
        publication.close()
        stopped = archive.recording(rid)
        assert (stopped.start_position, stopped.stop_position, stopped.stream_id) == (0, end, 7)
        assert archive.recordings() == [stopped]
        assert archive.recordings(rid + 1) == []
        assert archive.recordings_for_uri("ipc", 7) == [stopped]
        assert archive.recordings_for_uri("udp") == []
        extension = archive.extend_recording(rid, CHANNEL, 7)
        publication = aeron.add_exclusive_publication(
            positioned_channel(CHANNEL, stopped.initial_term_id, end, TERM), 7
        )
        execute_until(lambda: archive.recording(rid).is_active, description="extension started")
        third = [message(i, 100) for i in range(3000, 3500)]
        end = offer_all(publication, third)
        execute_until(lambda: (archive.recording_position(rid) or 0) >= end, description="extension recorded")
        assert archive.stop_recording_subscription(extension)
        assert archive.stop_position(rid) == end
        publication.close()
        everything = first + second + third
        replay_id = archive.replay(rid, "aeron:ipc", 98, position=0)
        replay = Collector(archive.replay_subscription("aeron:ipc", 98, replay_id))
        assert replay.poll_until(len(everything)) == everything
        archive.stop_replay(replay_id)  # done already, or stopped now
        replay.subscription.close()

        # truncate and purge
        with pytest.raises(InvalidPositionError):
            archive.truncate_recording(rid, end + 32)
        archive.truncate_recording(rid, TERM)
        assert archive.stop_position(rid) == TERM
        # The segment the stop position falls in stays, zeroed (Aeron's tools look for it); later ones go.
        assert sorted(p.name for p in archive_dir.glob(f"{rid}-*.rec")) == [f"{rid}-0.rec", f"{rid}-1.rec"]
        assert (archive_dir / f"{rid}-1.rec").read_bytes().strip(b"\0") == b""
        archive.purge_recording(rid)
        assert list(archive_dir.glob("*.rec")) == []
        with pytest.raises(RecordingNotFoundError):
            archive.recording(rid)
        with pytest.raises(RecordingNotFoundError):
            archive.purge_recording(rid)
        assert archive.recordings() == []

        # the events of it all
        seen: list[RecordingEvent] = []
        execute_until(
            lambda: sum(e.kind == "stopped" for e in seen) >= 2,
            lambda: events.poll(seen.append),
            description="two stopped events",
        )
        kinds = [e.kind for e in seen if e.kind != "progress"]
        assert kinds == ["started", "stopped", "started", "stopped"]
        assert all(e.recording_id == rid for e in seen)
        events.close()


@pytest.mark.process
def test_several_clients_share_the_response_channel(aeron: Aeron, context: ArchiveContext) -> None:
    with (
        ArchiveClient.connect(aeron, context, timeout=10) as one,
        ArchiveClient.connect(aeron, context, timeout=10) as two,
        ArchiveClient.connect(context=context, timeout=10) as three,  # its own Aeron client
    ):
        assert len({one.control_session_id, two.control_session_id, three.control_session_id}) == 3
        one.start_recording(CHANNEL, 8)
        for _ in range(20):
            assert one.recordings() == two.recordings() == three.recordings()
        with pytest.raises(RecordingNotFoundError):
            two.recording(5)
        assert three.stop_recording(CHANNEL, 8)


@pytest.mark.process
def test_malformed_control_messages_are_dropped_and_the_archive_keeps_serving(
    aeron: Aeron, context: ArchiveContext
) -> None:
    raw = aeron.add_exclusive_publication(context.control_channel, context.control_stream_id)
    try:
        execute_until(lambda: raw.is_connected, description="control channel connected")
        garbage = [
            b"\xc1",
            b"",
            b"not SBE at all",
            control.HEADER.pack(28, 8, 99, 0) + bytes(28),  # another schema
            control.HEADER.pack(8, 250, 101, 0) + bytes(8),  # a template nobody defined
            control.HEADER.pack(28, 8, 101, 0) + bytes(4),  # a block longer than the message
            control.HEADER.pack(21, 4, 101, 0) + bytes(21) + b"\xff\xff\xff\x7f",  # a string past the end
            control.encode(control.ListRecordingsRequest(424242, 7, 0, 10)),  # no such control session
            bytes(5000),
        ]
        for payload in garbage:
            offer_all(raw, [payload])
        with ArchiveClient.connect(aeron, context, timeout=10) as archive:
            assert archive.recordings() == []
            # a well-formed request for a recording that is not there is answered as such
            with pytest.raises(RecordingNotFoundError):
                archive.recording(1 << 40)
            archive.start_recording(CHANNEL, 9)
            assert archive.stop_recording(CHANNEL, 9)
    finally:
        raw.close()


def test_malformed_control_messages_are_counted(harness: ArchiveHarness) -> None:
    context = harness.context
    raw = harness.client.add_exclusive_publication(context.control_channel, context.control_stream_id)
    try:
        execute_until(lambda: raw.is_connected, description="control channel connected")
        offer_all(
            raw,
            [
                b"\xc1",
                control.HEADER.pack(8, 250, 101, 0) + bytes(8),
                control.encode(control.ListRecordingsRequest(424242, 7, 0, 1)),
            ],
        )
        execute_until(lambda: harness.archive.conductor.malformed_requests == 3, description="three counted")
        protocol_errors = [e for e in harness.errors if isinstance(e, ProtocolError)]
        assert len(protocol_errors) == 2
        with ArchiveClient.connect(harness.client, context, timeout=10) as archive:
            assert archive.recordings() == []
        assert harness.archive.conductor.malformed_requests == 3
    finally:
        raw.close()


def test_authenticated_connect_without_credentials_is_a_session(harness: ArchiveHarness) -> None:
    """Today's clients connect with AuthConnectRequest (template 58, with a protocol version): no credentials,
    no authenticator -- a session all the same."""
    context = harness.context
    client = harness.client
    responses = client.add_subscription("aeron:ipc?term-length=64k", 4411)
    raw = client.add_exclusive_publication(context.control_channel, context.control_stream_id)
    try:
        execute_until(lambda: raw.is_connected, description="control channel connected")
        channel = b"aeron:ipc?term-length=64k"
        correlation_id = client.next_correlation_id()
        request = (
            control.HEADER.pack(16, 58, 101, 14)
            + struct.pack("<qii", correlation_id, 4411, (1 << 16) | (37 << 8))
            + struct.pack("<I", len(channel))
            + channel
            + struct.pack("<I", 0)  # no credentials
            + struct.pack("<I", 0)  # no client info
        )
        offer_all(raw, [request])
        answers: list[control.Message] = []
        assembler = FragmentAssembler(lambda payload, header: answers.append(control.decode(payload)))
        execute_until(lambda: answers, lambda: responses.poll(assembler, 10), description="connect answered")
        answer = answers[0]
        assert isinstance(answer, control.ControlResponse)
        assert (answer.correlation_id, answer.code) == (correlation_id, control.ResponseCode.OK)
        assert answer.relevant_id == answer.control_session_id
        session_id = answer.control_session_id

        # ... and such a client is told its recordings' signals: START, then STOP
        start = client.next_correlation_id()
        offer_all(raw, [control.encode(control.StartRecordingRequest(session_id, start, 4412, 0, CHANNEL))])
        execute_until(lambda: len(answers) >= 2, lambda: responses.poll(assembler, 10), description="recording")
        subscription_id = answers[1].relevant_id  # type: ignore[union-attr]
        publication = client.add_exclusive_publication(CHANNEL, 4412)
        offer_all(publication, [b"signal me"])
        stop = client.next_correlation_id()
        execute_until(lambda: len(answers) >= 3, lambda: responses.poll(assembler, 10), description="start signal")
        offer_all(raw, [control.encode(control.StopRecordingSubscriptionRequest(session_id, stop, subscription_id))])
        execute_until(lambda: len(answers) >= 5, lambda: responses.poll(assembler, 10), description="stop signal")
        publication.close()
        signals = [a for a in answers if isinstance(a, control.RecordingSignalEvent)]
        assert [(s.signal, s.correlation_id, s.subscription_id) for s in signals] == [
            (control.RecordingSignal.START, start, subscription_id),
            (control.RecordingSignal.STOP, start, subscription_id),
        ]
    finally:
        raw.close()
        responses.close()


def test_listing_many_recordings_over_the_control_channel(make_archive: Callable[..., ArchiveHarness]) -> None:
    harness = make_archive(max_concurrent_recordings=32)  # 30 at once: past the default of 20
    for stream_id in range(200, 230):
        harness.archive.start_recording(CHANNEL, stream_id)
    publications = [harness.client.add_exclusive_publication(CHANNEL, s) for s in range(200, 230)]
    harness.wait_for_recordings(30)
    with ArchiveClient.connect(harness.client, harness.context, timeout=3) as archive:
        try:
            assert len(archive.recordings()) == 30
        finally:
            for publication in publications:
                publication.close()


# -- timeouts -----------------------------------------------------------------------------------------


@pytest.fixture
def archive_beside_driver(
    driver_process: DriverProcess, archive_dir: Path, tmp_path: Path, archive_processes: list[ArchiveProcess]
) -> ArchiveProcess:
    """An archive process without a driver, beside ``python -m driver``: it can die while the driver lives."""
    process = ArchiveProcess.start(archive_dir, driver_process.aeron_dir, tmp_path / "archive.log", with_driver=False)
    archive_processes.append(process)
    return process


@pytest.mark.process
def test_blocking_client_times_out_once_the_archive_is_gone(
    driver_process: DriverProcess, archive_beside_driver: ArchiveProcess, archive_dir: Path
) -> None:
    context = ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, aeron_dir=driver_process.aeron_dir, archive_dir=archive_dir)
    with Aeron.connect(aeron_dir=driver_process.aeron_dir) as aeron:
        archive = ArchiveClient.connect(aeron, context, timeout=1.0)
        try:
            assert archive.recordings() == []
            archive_beside_driver.kill()
            for operation in (archive.recordings, lambda: archive.recording(0), lambda: archive.stop_replay(1)):
                with pytest.raises(ArchiveTimeoutError, match="no answer") as info:  # after the 1 s timeout
                    operation()
                assert isinstance(info.value, TimeoutError)
        finally:
            archive.close()


@pytest.mark.process
def test_connecting_to_no_archive_times_out(driver_process: DriverProcess, archive_dir: Path) -> None:
    context = ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, aeron_dir=driver_process.aeron_dir, archive_dir=archive_dir)
    with Aeron.connect(aeron_dir=driver_process.aeron_dir) as aeron:
        with pytest.raises(ArchiveTimeoutError, match="connect"):
            ArchiveClient.connect(aeron, context, timeout=0.5)
        # nothing was left open on the client
        assert not aeron.is_closed


# -- asyncio --------------------------------------------------------------------------------------------


@pytest.mark.process
async def test_async_client_every_operation(aeron: Aeron, context: ArchiveContext, archive_dir: Path) -> None:
    async with await AsyncArchiveClient.connect(aeron, context, timeout=10) as archive:
        assert archive.control_session_id > 0
        events = RecordingEvents(aeron, context)  # the async client has no recording_events() (see below)
        subscription_id = await archive.start_recording(CHANNEL, 17)
        assert await archive.recording_subscriptions(stream_id=17) == [(subscription_id, 17, "aeron:ipc")]
        publication = await aeron.add_exclusive_publication_async(CHANNEL, 17)
        deadline = time.monotonic() + 10
        while not (rec := find_recording(await archive.recordings(), publication.session_id)):
            assert time.monotonic() < deadline
        rid = rec.recording_id
        messages = [message(i, 40 if i % 10 else 2000) for i in range(1000)]
        end = offer_all(publication, messages)
        while (await archive.recording(rid)).recorded_position < end:
            assert time.monotonic() < deadline
        with pytest.raises(RecordingStateError):
            await archive.truncate_recording(rid, 0)
        with pytest.raises(RecordingStateError):
            await archive.purge_recording(rid)
        with pytest.raises(InvalidPositionError):
            await archive.replay(rid, "aeron:ipc", 99, position=end + 64)
        with pytest.raises(RecordingNotFoundError):
            await archive.recording(rid + 100)

        replay_id = await archive.replay(rid, "aeron:ipc", 99)
        replay = Collector(await archive.replay_subscription("aeron:ipc", 99, replay_id))
        assert replay.poll_until(len(messages)) == messages
        assert await archive.stop_replay(replay_id)
        replay.subscription.close()

        assert await archive.stop_recording(CHANNEL, 17)
        assert not await archive.stop_recording_subscription(subscription_id)
        publication.close()
        stopped = await archive.recording(rid)
        assert stopped.stop_position == end
        assert await archive.recordings() == [stopped]
        assert await archive.recordings_for_uri("term-length=64k", 17) == [stopped]
        extension = await archive.extend_recording(rid, CHANNEL, 17)
        publication = await aeron.add_exclusive_publication_async(
            positioned_channel(CHANNEL, stopped.initial_term_id, end, TERM), 17
        )
        while not (await archive.recording(rid)).is_active:
            assert time.monotonic() < deadline
        more = [message(i, 64) for i in range(1000, 1500)]
        end = offer_all(publication, more)
        while (await archive.recording(rid)).recorded_position < end:
            assert time.monotonic() < deadline
        assert await archive.stop_recording_subscription(extension)
        publication.close()
        assert (await archive.recording(rid)).stop_position == end
        await archive.truncate_recording(rid, TERM)
        assert (await archive.recording(rid)).stop_position == TERM
        await archive.purge_recording(rid)
        with pytest.raises(RecordingNotFoundError):
            await archive.recording(rid)
        assert list(archive_dir.glob("*.rec")) == []

        # recording events, iterated asynchronously
        kinds: list[str] = []
        async with asyncio.timeout(10):
            async for event in events:
                if event.kind != "progress":
                    kinds.append(event.kind)
                if len(kinds) == 4:
                    break
        assert kinds == ["started", "stopped", "started", "stopped"]
        events.close()


@pytest.mark.process
async def test_async_client_times_out_once_the_archive_is_gone(
    driver_process: DriverProcess, archive_beside_driver: ArchiveProcess, archive_dir: Path
) -> None:
    context = ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, aeron_dir=driver_process.aeron_dir, archive_dir=archive_dir)
    async with Aeron.connect(aeron_dir=driver_process.aeron_dir) as aeron:
        archive = await AsyncArchiveClient.connect(aeron, context, timeout=1.0)
        try:
            assert await archive.recordings() == []
            archive_beside_driver.kill()
            # The client's own 1 s timeout ends the wait; the outer bound only turns a hang into a failure.
            async with asyncio.timeout(30):
                with pytest.raises(ArchiveTimeoutError, match="list_recordings"):
                    await archive.recordings()
        finally:
            await archive.close()
        with pytest.raises(ArchiveTimeoutError):
            await AsyncArchiveClient.connect(aeron, context, timeout=0.5)


@pytest.mark.parametrize("name", ["recording_position", "stop_position", "recording_events"])
def test_async_client_has_the_blocking_clients_operations(name: str) -> None:
    assert hasattr(ArchiveClient, name)
    assert hasattr(AsyncArchiveClient, name)


# -- connect ------------------------------------------------------------------------------------------


def raw_connect(harness: ArchiveHarness, response_stream_id: int) -> None:
    raw = harness.client.add_exclusive_publication(harness.context.control_channel, harness.context.control_stream_id)
    try:
        execute_until(lambda: raw.is_connected, description="control channel connected")
        offer_all(raw, [control.encode(control.ConnectRequest(1, response_stream_id, "aeron:ipc?term-length=64k"))])
    finally:
        raw.close()


def test_a_connect_whose_response_channel_never_connects_blocks_nobody(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    harness = make_archive(message_timeout_ns=60_000_000_000)
    raw_connect(harness, 4321)  # nobody subscribes to stream 4321
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        archive.start_recording(CHANNEL, 11)
        publication = harness.client.add_exclusive_publication(CHANNEL, 11)
        end = offer_all(publication, [message(i, 40) for i in range(2000)])
        execute_until(lambda: archive.recording_position(0) == end, description="recorded meanwhile")
        publication.close()
    assert not any("never connected" in str(e) for e in harness.errors)


def test_a_connect_whose_response_channel_never_connects_is_dropped(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    harness = make_archive(message_timeout_ns=200_000_000)
    raw_connect(harness, 4322)
    error = execute_until(
        lambda: next((e for e in harness.errors if "never connected" in str(e)), None), description="dropped"
    )
    assert isinstance(error, ArchiveError)
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        assert archive.recordings() == []


@pytest.mark.process
def test_standalone_archive_options(
    aeron_dir: Path, archive_dir: Path, tmp_path: Path, archive_processes: list[ArchiveProcess]
) -> None:
    process = ArchiveProcess.start(
        archive_dir,
        aeron_dir,
        tmp_path / "archive.log",
        args=[
            "--segment-file-length",
            "128k",
            "--file-sync-level",
            "1",
            "--control-channel",
            "aeron:ipc?term-length=128k",
            "--control-stream-id",
            "44",
        ],
    )
    archive_processes.append(process)
    context = ArchiveContext.from_env(
        LOCAL_ARCHIVE_ENV, aeron_dir=aeron_dir, control_channel="aeron:ipc?term-length=128k", control_stream_id=44
    )
    with Aeron.connect(aeron_dir=aeron_dir) as aeron:
        with pytest.raises(ArchiveTimeoutError):
            ArchiveClient.connect(aeron, ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, aeron_dir=aeron_dir), timeout=0.5)
        with ArchiveClient.connect(aeron, context, timeout=10) as archive:
            archive.start_recording(CHANNEL, 12)
            publication = aeron.add_exclusive_publication(CHANNEL, 12)
            end = offer_all(publication, [message(i, 100) for i in range(3000)])
            execute_until(lambda: archive.recordings() and archive.recording_position(0) == end, description="rec")
            publication.close()
            execute_until(lambda: archive.stop_position(0) == end, description="stopped")
            assert archive.recording(0).segment_file_length == 128 * 1024
    assert process.stop() == 0


# -- clients that go away ------------------------------------------------------------------------------


def orphan_request(harness: ArchiveHarness, response_stream_id: int, via: ArchiveClient) -> int:
    """A client connects on its own response stream, and dies; a request in its name follows, sent on
    ``via``'s control publication (so the archive takes it before ``via``'s next request). Returns its session id.
    """
    with Aeron.connect(aeron_dir=harness.aeron_dir) as doomed:
        session_id = ArchiveClient.connect(
            doomed, harness.context, response_stream_id=response_stream_id, timeout=10
        ).control_session_id
    conductor = harness.archive.conductor
    execute_until(
        lambda: not ((publication := conductor._publications.get(session_id)) and publication.is_connected),
        description="the archive sees the response channel gone",
    )
    request = control.encode(control.ListRecordingsRequest(session_id, harness.client.next_correlation_id(), 0, 10))
    offer_all(via._c.publication, [request])
    return session_id


def test_a_client_that_died_before_its_answer_blocks_nobody(make_archive: Callable[..., ArchiveHarness]) -> None:
    harness = make_archive(message_timeout_ns=30_000_000_000)
    with ArchiveClient.connect(harness.client, harness.context, timeout=2) as other:
        orphan_request(harness, 4400, other)
        unblock = None
        try:
            assert other.recordings() == []
        finally:
            # let the archive deliver the orphaned answer so it can stop normally
            unblock = harness.client.add_subscription("aeron:ipc?term-length=64k", 4400)
            execute_until(lambda: other.recordings() == [], description="archive serving again", timeout_s=20)
            unblock.close()


CLOSE_WHILE_STUCK = """
import os, sys, warnings
sys.path[:0] = sys.argv[1:3]
from pathlib import Path
from archive_helpers import ArchiveHarness
from test_archive_clients import orphan_request
from driver.archive import ArchiveTimeoutError
from driver.archive.client import ArchiveClient
from driver.core.media_driver import MediaDriver
from driver.config import DriverContext
base = Path(sys.argv[3])
driver = MediaDriver.launch(DriverContext.from_env({}, aeron_dir=base / "aeron", threading_mode="SHARED"))
harness = ArchiveHarness(base / "aeron", base / "archive", message_timeout_ns=30_000_000_000)
other = ArchiveClient.connect(harness.client, harness.context, timeout=1)
orphan_request(harness, 4401, other)
try:
    other.recordings()  # answered only once the archive is past the orphaned request
except ArchiveTimeoutError:
    pass
thread = harness.archive._runner._thread
aeron = harness.archive._aeron
close_aeron = aeron.close
def close_and_tell():
    print("conductor thread alive when its Aeron client is closed:", thread.is_alive(), flush=True)
    close_aeron()
aeron.close = close_and_tell
warnings.simplefilter("ignore")
harness.archive.close()  # (may crash the process after the line above: not asserted)
os._exit(0)
"""


@pytest.mark.process
def test_close_does_not_free_what_a_running_conductor_uses(tmp_path: Path) -> None:
    here = Path(__file__).parent
    tests = here.parents[2]
    try:
        result = subprocess.run(
            [sys.executable, "-c", CLOSE_WHILE_STUCK, str(here), str(tests), str(tmp_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        shutil.rmtree(tmp_path / "aeron", ignore_errors=True)
    assert "conductor thread alive when its Aeron client is closed: False" in result.stdout, (
        result.stdout + result.stderr[-2000:]
    )


def test_clients_sharing_a_response_stream_do_not_hoard_each_others_answers(harness: ArchiveHarness) -> None:
    with (
        ArchiveClient.connect(harness.client, harness.context, timeout=10) as quiet,
        ArchiveClient.connect(harness.client, harness.context, timeout=10) as busy,
    ):
        for _ in range(200):
            busy.recordings()
        quiet.recordings()
        assert len(quiet._c._exchanges) == 0


def test_a_connect_over_the_session_limit_is_refused_with_a_typed_error(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    harness = make_archive(max_control_sessions=2)
    with (
        ArchiveClient.connect(harness.client, harness.context, timeout=10) as one,
        ArchiveClient.connect(harness.client, harness.context, timeout=10) as two,
    ):
        with pytest.raises(SessionLimitError, match="limit of 2 control sessions"):
            ArchiveClient.connect(harness.client, harness.context, timeout=10)
        assert one.recordings() == two.recordings() == []
        assert harness.archive.conductor._sessions.refused == 1
    # closed sessions make room again
    execute_until(lambda: len(harness.archive.conductor._sessions) == 0, description="sessions closed")
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as three:
        assert three.recordings() == []
