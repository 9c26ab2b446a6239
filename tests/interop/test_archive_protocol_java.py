"""Aeron Archive's control protocol both ways against the real Java 1.15.1 archive.

- Java's ``RecordedBasicPublisher`` and ``ReplayedBasicSubscriber`` samples (``AeronArchive`` clients) record and
  replay through our archive on our driver, finding the recording through our ``rec-pos`` counter;
- our ``ArchiveClient`` / ``AsyncArchiveClient`` record, list, replay, extend and truncate on Java's
  ``ArchivingMediaDriver``;
- a recording made through one side's client is replayed by the other's, byte for byte.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from driver.archive import Archive, ArchiveContext, ArchiveError, RecordingNotFoundError, recording_pos
from driver.archive.client import ArchiveClient, AsyncArchiveClient
from driver.client import Aeron, FragmentAssembler, Header
from driver.cnc import CncGeneration
from driver.config import DriverContext
from driver.core.media_driver import MediaDriver
from support.aeron_java import AeronJava, PeerSetupError, PropValue
from support.java_archive import (
    RECORDED_BASIC_PUBLISHER_CLASS,
    REPLAYED_BASIC_SUBSCRIBER_CLASS,
    JavaArchive,
    free_udp_port,
    java_archive,
    replay_with_java_subscriber,
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


# -- our clients on Java's archive -----------------------------------------------------------------------


def java_archive_context(archive: JavaArchive) -> ArchiveContext:
    """Our client's settings for Java's archive: its driver, its control and events channels, our response channel."""
    ch = archive.channels
    return ArchiveContext.from_env(
        {},
        aeron_dir=archive.aeron_dir,
        archive_dir=archive.archive_dir,
        control_channel=ch.control_channel,
        control_stream_id=ch.control_stream_id,
        control_response_channel=_udp(),
        recording_events_channel=ch.recording_events_channel,
        recording_events_stream_id=ch.recording_events_stream_id,
    )


def payloads(first: int, count: int, length: int) -> list[bytes]:
    return [
        (i.to_bytes(4, "little") + bytes((i + k) & 0xFF for k in range(length)))[:length]
        for i in range(first, first + count)
    ]


def offer_all(publication: object, messages: list[bytes]) -> int:
    """Offer every message (bounded retries); the publication's position after the last."""
    for m in messages:
        execute_until(lambda m=m: publication.offer(m) > 0, timeout_s=20, interval_s=0.0005, description="offer")  # type: ignore[attr-defined]
    return int(publication.position)  # type: ignore[attr-defined]


def test_our_client_records_lists_replays_extends_and_truncates_on_javas_archive(java_archive: JavaArchive) -> None:
    context = java_archive_context(java_archive)
    channel = "aeron:ipc?term-length=64k"
    with (
        Aeron.connect(aeron_dir=java_archive.aeron_dir) as aeron,
        ArchiveClient.connect(aeron, context, timeout=15) as archive,
    ):
        assert archive.control_session_id != 0
        events = archive.recording_events()
        execute_until(lambda: events.subscription.is_connected, description="events subscription connected")
        subscription_id = archive.start_recording(channel, STREAM_ID)
        assert subscription_id > 0
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        first = payloads(0, 200, 100)
        recordings = execute_until(lambda: archive.recordings_for_uri("ipc", STREAM_ID), description="listed")
        (d,) = recordings
        rid = d.recording_id
        assert (d.session_id, d.stream_id, d.original_channel, d.term_buffer_length) == (
            publication.session_id,
            STREAM_ID,
            channel,
            TERM,
        )
        end = offer_all(publication, first)
        execute_until(lambda: (archive.recording_position(rid) or 0) >= end, description="recorded")
        assert archive.stop_position(rid) is None  # Java answers NULL_POSITION while it records
        # Java's rec-pos counter, read as ours is laid out
        counters = aeron.counters_reader
        counter_id = recording_pos.find_counter_id_by_session(counters, publication.session_id)
        assert recording_pos.recording_id_of(counters, counter_id) == rid
        assert recording_pos.find_counter_id_by_recording(counters, rid) == counter_id
        assert recording_pos.source_identity_of(counters, counter_id) == d.source_identity
        assert counters.get_counter_label(counter_id) == recording_pos.label_of(
            rid, publication.session_id, STREAM_ID, "aeron:ipc"
        )
        assert counters.get_counter_value(counter_id) == end
        assert archive.recording(rid).is_active

        # stop, then the stop position; errors come back typed
        assert archive.stop_recording(channel, STREAM_ID)
        assert not archive.stop_recording(channel, STREAM_ID)
        execute_until(lambda: archive.stop_position(rid) == end, description="stopped")
        publication.close()
        stopped = archive.recording(rid)
        assert (stopped.start_position, stopped.stop_position) == (0, end)
        assert archive.recordings() == [stopped]
        assert archive.recordings(rid + 1) == []
        with pytest.raises(RecordingNotFoundError):
            archive.recording(rid + 5)
        with pytest.raises(RecordingNotFoundError):
            archive.replay(rid + 5, "aeron:ipc", 2001)

        assert replay_bytes(archive, rid, len(first), 2001) == first

        # extend with a publication that starts at the stop position
        term_id = stopped.initial_term_id + (end >> 16)
        positioned = (
            f"{channel}|init-term-id={stopped.initial_term_id}|term-id={term_id}|term-offset={end & (TERM - 1)}"
        )
        extension = archive.extend_recording(rid, channel, STREAM_ID)
        publication = aeron.add_exclusive_publication(positioned, STREAM_ID)
        execute_until(lambda: archive.recording(rid).is_active, description="extension started")
        second = payloads(200, 100, 300)
        end = offer_all(publication, second)
        execute_until(lambda: (archive.recording_position(rid) or 0) >= end, description="extension recorded")
        assert archive.stop_recording_subscription(extension)
        execute_until(lambda: archive.stop_position(rid) == end, description="extension stopped")
        publication.close()
        assert replay_bytes(archive, rid, len(first) + len(second), 2002) == first + second

        # truncate to a frame boundary inside the first part (a whole number of 128-byte frames)
        cut = 100 * 160
        with pytest.raises(ArchiveError, match="invalid position"):  # Java's GENERIC error code: untyped
            archive.truncate_recording(rid, cut + 8)
        archive.truncate_recording(rid, cut)
        assert archive.stop_position(rid) == cut
        assert replay_bytes(archive, rid, 100, 2003) == first[:100]

        seen: list[object] = []
        execute_until(
            lambda: sum(getattr(e, "kind", "") == "stopped" for e in seen) >= 2,
            lambda: events.poll(seen.append),
            description=f"events (so far {seen}, {events.malformed} malformed)",
        )
        kinds = [getattr(e, "kind", "") for e in seen if getattr(e, "kind", "") != "progress"]
        assert kinds == ["started", "stopped", "started", "stopped"]
        events.close()


def test_async_client_on_javas_archive(java_archive: JavaArchive) -> None:
    context = java_archive_context(java_archive)

    async def main() -> None:
        async with await AsyncArchiveClient.connect(context=context, timeout=15) as archive:
            assert await archive.recordings() == []
            channel = "aeron:ipc?term-length=64k"
            await archive.start_recording(channel, 7)
            aeron = archive._c.aeron
            publication = aeron.add_exclusive_publication(channel, 7)
            messages = payloads(0, 50, 64)
            for m in messages:
                while publication.offer(m) <= 0:
                    await asyncio.sleep(0.001)
            end = publication.position
            while True:
                found = await archive.recordings_for_uri("ipc", 7)
                if found and found[0].recorded_position >= end:
                    break
                await asyncio.sleep(0.01)
            assert await archive.stop_recording(channel, 7)
            publication.close()
            rid = found[0].recording_id
            replay_id = await archive.replay(rid, "aeron:ipc", 2004, position=0)
            subscription = await archive.replay_subscription("aeron:ipc", 2004, replay_id)
            got: list[bytes] = []
            assembler = FragmentAssembler(lambda payload, header: got.append(bytes(payload)))
            for _ in range(5000):
                if len(got) >= len(messages):
                    break
                if not subscription.poll(assembler, 64):
                    await asyncio.sleep(0.002)
            subscription.close()
            assert got == messages

    asyncio.run(asyncio.wait_for(main(), 60))


def test_our_recording_on_javas_archive_is_replayed_by_javas_subscriber(
    aeron_java: AeronJava, java_archive: JavaArchive, tmp_path: Path
) -> None:
    """The other way round from the first test: our client records on Java's archive, Java's sample replays it."""
    context = java_archive_context(java_archive)
    channel = "aeron:ipc?term-length=64k"
    texts = [f"Hello World! {i}" for i in range(5)]
    with (
        Aeron.connect(aeron_dir=java_archive.aeron_dir) as aeron,
        ArchiveClient.connect(aeron, context, timeout=15) as archive,
    ):
        archive.start_recording(channel, STREAM_ID)
        publication = aeron.add_exclusive_publication(channel, STREAM_ID)
        (d,) = execute_until(lambda: archive.recordings(), description="listed")
        end = offer_all(publication, [t.encode() for t in texts])
        execute_until(lambda: (archive.recording_position(d.recording_id) or 0) >= end, description="recorded")
        assert archive.stop_recording(channel, STREAM_ID)
        publication.close()
    replayed = replay_with_java_subscriber(
        aeron_java, java_archive, tmp_path / "replayed.log", channel=channel, stream_id=STREAM_ID, expect=len(texts)
    )
    assert replayed == texts


def test_every_aeron_archive_operation_of_javas_client_on_our_archive(
    aeron_java: AeronJava, media_driver: MediaDriver, our_archive: Archive
) -> None:
    """A small program on Java 1.15.1's ``AeronArchive``: record, positions, listings, find, replay, stop replay,
    extend, truncate and the errors of what is not there, all against our archive."""
    from support.java_programs import SOURCES, JavacUnavailableError, compile_java

    try:
        program = compile_java(
            aeron_java, (SOURCES / "ArchiveOperations.java").read_text(encoding="utf-8"), "ArchiveOperations"
        )
    except JavacUnavailableError as exc:
        pytest.skip(str(exc))
    c = our_archive.context
    channel = "aeron:ipc?term-length=64k"
    out = program.run(
        str(media_driver.aeron_dir),
        c.control_channel,
        str(c.control_stream_id),
        _udp(),
        "21",
        channel,
        str(STREAM_ID),
        timeout_s=120,
    )
    lines = [line.split("=", 1) for line in out.splitlines() if "=" in line]
    values = {key: value for key, value in lines}
    assert "timeout" not in values, out
    rid = int(values["recordingId"])
    end = int(values["end"])
    assert int(values["controlSessionId"]) != 0
    assert int(values["recordingPosition"]) == end
    assert int(values["stopPositionWhileActive"]) == -1
    assert int(values["stopPosition"]) == end
    assert int(values["recordingPositionStopped"]) == -1
    assert values["listRecordings"] == "1"
    session_id = int(values["sessionId"])
    assert values["listed"] == f"{rid} 0 {end} {STREAM_ID} {session_id} {TERM} {channel}|session-id={session_id}"
    assert (values["listRecordingsForUri"], values["listRecordingsForUriOtherStream"]) == ("1", "0")
    assert (values["listRecording"], values["listRecordingUnknown"]) == ("1", "0")
    assert int(values["findLastMatchingRecording"]) == rid
    assert int(values["findLastMatchingRecordingNone"]) == -1
    assert values["replayed"] == ",".join(f"message {i}" for i in range(10))
    assert values["stopReplay"] == "ok"
    replay_session_id = int(values["replaySessionId"])
    assert replay_session_id >> 32 > 0  # a replay count above the image's session id
    assert int(values["extendedStop"]) == int(values["extendedEnd"]) > end
    assert int(values["truncatedStop"]) == 64
    assert values["unknownStopPosition"] == "5"  # ArchiveException.UNKNOWN_RECORDING
    assert values["unknownReplay"] == "6"  # ArchiveException.UNKNOWN_REPLAY
    # our own view agrees
    d = our_archive.recording(rid)
    assert (d.stop_position, d.session_id, d.stream_id) == (64, session_id, STREAM_ID)


@pytest.fixture
def spying_archive(aeron_java: AeronJava, tmp_path: Path) -> Iterator[tuple[MediaDriver, Archive]]:
    """Our driver (CnC 15 for Java's client, spies counted as a connection) and our archive beside it."""
    driver = MediaDriver.launch(
        DriverContext.from_env(
            {},
            aeron_dir=tmp_path / "aeron",
            threading_mode="SHARED",
            cnc_generation=CncGeneration.V15,
            spies_simulate_connection=True,
            client_liveness_timeout_ns=3_000_000_000,
        )
    )
    try:
        context = ArchiveContext.from_env(
            {},
            aeron_dir=driver.aeron_dir,
            archive_dir=tmp_path / "our-archive",
            control_channel=_udp(),
            recording_events_channel=_udp(),
            segment_file_length=SEGMENT,
        )
        with Archive(context) as archive:
            yield driver, archive
    finally:
        driver.close()


def test_java_samples_record_a_udp_publication_locally_through_our_spy(
    aeron_java: AeronJava, spying_archive: tuple[MediaDriver, Archive], tmp_path: Path
) -> None:
    """RecordedBasicPublisher as its authors run it: a UDP channel recorded LOCAL, which our archive does with a spy
    subscription on our driver."""
    driver, archive = spying_archive
    channel = _udp()
    props = java_client_props(
        archive, driver.aeron_dir, **{"aeron.sample.channel": channel, "aeron.sample.streamId": STREAM_ID}
    )
    recording_id = run_java_publisher(aeron_java, props, messages=3)
    execute_until(lambda: not archive.recording(recording_id).is_active, description="recording stopped")
    d = archive.recording(recording_id)
    assert (d.original_channel, d.stop_position) == (channel, 3 * 64)
    replayed = run_java_subscriber(aeron_java, props, tmp_path / "replayed.log", expect=3)
    assert replayed == [f"Hello World! {i}" for i in range(3)]
