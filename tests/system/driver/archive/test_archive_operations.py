"""Archive operations on a real embedded driver: concurrent recordings and listing, live replay, extend,
truncate, purge, recording events, and the file sync levels.
"""

from __future__ import annotations

import errno
import os
import struct
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from archive_helpers import (
    KIB,
    ArchiveHarness,
    Collector,
    assemble,
    message,
    offer_all,
    parse_frames,
    positioned_channel,
    recording_bytes,
    segment_names,
)

from driver.archive import (
    Archive,
    ArchiveContext,
    ArchiveInUseError,
    ArchivingMediaDriver,
    Catalog,
    CatalogError,
    InvalidPositionError,
    RecordingEvent,
    RecordingNotFoundError,
    RecordingStateError,
    recording_pos,
)
from driver.archive.client import RecordingEvents, replay_session_id
from driver.archive.mark import MarkFile
from driver.archive.segments import segment_file_name, segment_index
from driver.client import Aeron, ExclusivePublication
from driver.cnc import CncFile
from driver.concurrent.counters import RECORD_ALLOCATED, CountersReader
from driver.config import DriverContext
from support.archive_channels import LOCAL_ARCHIVE_ENV
from support.waiting import execute_until

pytestmark = pytest.mark.slow

CHANNEL = "aeron:ipc?term-length=64k"
TERM = 64 * KIB


def start_one(harness: ArchiveHarness, stream_id: int, channel: str = CHANNEL) -> tuple[ExclusivePublication, int]:
    """Start recording ``stream_id``, add an exclusive publication; (publication, recording id)."""
    harness.archive.start_recording(CHANNEL, stream_id)
    publication = harness.client.add_exclusive_publication(channel, stream_id)
    recording = execute_until(
        lambda: next((d for d in harness.archive.recordings() if d.session_id == publication.session_id), None),
        description=f"recording of stream {stream_id}",
    )
    return publication, recording.recording_id


def record(harness: ArchiveHarness, stream_id: int, messages: list[bytes]) -> tuple[int, int]:
    """Record ``messages`` on ``stream_id`` and stop; (recording id, stop position)."""
    publication, rid = start_one(harness, stream_id)
    end = offer_all(publication, messages)
    harness.wait_recorded(rid, end)
    publication.close()
    stopped = harness.wait_stopped(rid)
    assert stopped.stop_position == end
    harness.archive.stop_recording(CHANNEL, stream_id)
    return rid, end


def test_concurrent_recordings_and_listing(harness: ArchiveHarness) -> None:
    streams = [21, 22, 23, 24]
    for stream_id in streams:
        harness.archive.start_recording(CHANNEL, stream_id)
    publications = [harness.client.add_exclusive_publication(CHANNEL, s) for s in streams]
    publications.append(harness.client.add_exclusive_publication(CHANNEL, 21))  # a second session on 21
    harness.wait_for_recordings(len(publications))
    sent: list[list[bytes]] = [[] for _ in publications]
    deadline = time.monotonic() + 20
    for i in range(1500):
        for k, publication in enumerate(publications):
            payload = message(i * 10 + k, 40 if i % 50 else 2000)
            while publication.offer(payload) <= 0:
                assert time.monotonic() < deadline, "offers refused for too long"
            sent[k].append(payload)
    by_session = {d.session_id: d for d in harness.archive.recordings()}
    assert sorted(by_session) == sorted(p.session_id for p in publications)
    for publication in publications:
        harness.wait_recorded(by_session[publication.session_id].recording_id, publication.position)
    for stream_id in streams:
        assert harness.archive.stop_recording(CHANNEL, stream_id)
    assert not harness.archive.stop_recording(CHANNEL, 21)

    listed = harness.archive.recordings()
    assert [d.recording_id for d in listed] == list(range(len(publications)))
    assert all(not d.is_active for d in listed)
    assert [d.recording_id for d in harness.archive.recordings(1, 2)] == [1, 2]
    assert [d.recording_id for d in harness.archive.recordings(3)] == [3, 4]
    assert harness.archive.recordings(5) == []
    on_21 = harness.archive.recordings_for_uri("aeron:ipc", 21)
    assert sorted(d.session_id for d in on_21) == sorted([publications[0].session_id, publications[4].session_id])
    assert len(harness.archive.recordings_for_uri("term-length=64k")) == 5
    assert len(harness.archive.recordings_for_uri("", 23)) == 1
    assert len(harness.archive.recordings_for_uri("ipc", count=2)) == 2
    assert [d.recording_id for d in harness.archive.recordings_for_uri("ipc", from_id=3)] == [3, 4]
    assert harness.archive.recordings_for_uri("aeron:udp") == []
    assert harness.archive.recordings_for_uri("aeron:ipc", 25) == []
    for k, publication in enumerate(publications):
        d = by_session[publication.session_id]
        stopped = harness.archive.recording(d.recording_id)
        assert stopped.stop_position == publication.position
        assert (stopped.stream_id, stopped.original_channel, stopped.stripped_channel) == (
            publication.stream_id,
            CHANNEL,
            "aeron:ipc",
        )
        assert assemble(parse_frames(recording_bytes(harness.archive_dir, stopped), 0)) == sent[k]
        publication.close()
    assert harness.replay_messages(by_session[publications[4].session_id].recording_id, len(sent[4])) == sent[4]


def replay_ended(collector: Collector) -> bool:
    """Poll; True once the replay's image appeared and then reached its end (or went away)."""
    collector.poll()
    images = collector.subscription.images
    if images:
        collector.seen_image = True
    return collector.seen_image and (not images or images[0].is_end_of_stream)


def wait_replay_end(collector: Collector, what: str) -> list[bytes]:
    execute_until(lambda: replay_ended(collector), description=what, interval_s=0.001, max_iterations=10_000_000)
    return collector.messages


def test_live_replay_catches_up_follows_and_ends_with_the_recording(harness: ArchiveHarness) -> None:
    publication, rid = start_one(harness, 41)
    first = [message(i, 40 if i % 9 else 3000) for i in range(3000)]
    end = offer_all(publication, first)
    harness.wait_recorded(rid, end)
    replay_id = harness.archive.replay(rid, "aeron:ipc", 90)  # from the start, following
    replay = Collector(harness.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(replay_id)}", 90))
    assert replay.poll_until(len(first)) == first
    second = [message(i, 100) for i in range(3000, 6000)]
    end = offer_all(publication, second, replay.poll)
    assert replay.poll_until(len(first) + len(second)) == first + second
    assert harness.archive.recording(rid).is_active
    # a bounded replay of the active recording ends at its limit
    bounded_id = harness.archive.replay(rid, "aeron:ipc", 91, position=0, length=end // 2)
    bounded = Collector(harness.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(bounded_id)}", 91))
    wait_replay_end(bounded, "bounded replay ends")
    assert 0 < len(bounded.messages) < len(first)
    assert bounded.messages == first[: len(bounded.messages)]
    # the live replay ends when the recording stops
    assert not replay_ended(replay)
    publication.close()
    stopped = harness.wait_stopped(rid)
    assert stopped.stop_position == end
    wait_replay_end(replay, "live replay ends")
    assert replay.messages == first + second
    # with no replay left, the recording can be purged
    harness.archive.stop_recording(CHANNEL, 41)
    execute_until(lambda: _purged(harness, rid), description="purge once the replays are done")


def _purged(harness: ArchiveHarness, rid: int) -> bool:
    try:
        harness.archive.purge_recording(rid)
    except RecordingStateError:
        return False
    return True


def test_extend_a_stopped_recording(harness: ArchiveHarness) -> None:
    first = [message(i, 40 if i % 11 else 2500) for i in range(2000)]
    rid, stop = record(harness, 51, first)
    d = harness.archive.recording(rid)
    assert stop % TERM, "the extension joins mid-term"
    with pytest.raises(RecordingStateError, match="stream"):
        harness.archive.extend_recording(rid, CHANNEL, 52)
    with pytest.raises(RecordingNotFoundError):
        harness.archive.extend_recording(rid + 5, CHANNEL, 51)
    extension_sub = harness.archive.extend_recording(rid, CHANNEL, 51)
    publication = harness.client.add_exclusive_publication(
        positioned_channel(CHANNEL, d.initial_term_id, stop, TERM), 51
    )
    assert publication.position == stop
    execute_until(lambda: harness.archive.recording(rid).is_active, description="extension started")
    with pytest.raises(RecordingStateError, match="active"):
        harness.archive.extend_recording(rid, CHANNEL, 51)
    second = [message(i, 64 if i % 13 else 5000) for i in range(2000, 5000)]
    end = offer_all(publication, second)
    harness.wait_recorded(rid, end)
    publication.close()
    extended = harness.wait_stopped(rid)
    assert (extended.start_position, extended.stop_position) == (d.start_position, end)
    assert harness.archive.stop_recording_subscription(extension_sub)
    assert not harness.archive.stop_recording_subscription(extension_sub)
    assert len(harness.archive.recordings()) == 1
    assert assemble(parse_frames(recording_bytes(harness.archive_dir, extended), 0)) == first + second
    assert harness.replay_messages(rid, len(first) + len(second)) == first + second
    # the replay may start in the extended part, too
    assert harness.replay_messages(rid, len(second), position=stop) == second
    assert not harness.errors


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("initial term id", {"init": 1}),
        ("join position", {"position": -32}),
        ("join position", {"position": 64 * 32}),
        ("mtu", {"mtu": 4096}),
        ("term length", {"term_length": 128 * KIB}),
    ],
)
def test_mismatched_extension_is_refused(harness: ArchiveHarness, what: str, change: dict[str, int]) -> None:
    rid, stop = record(harness, 53, [message(i, 40) for i in range(500)])
    d = harness.archive.recording(rid)
    term_length = change.get("term_length", TERM)
    channel = f"aeron:ipc?term-length={term_length}"
    if "mtu" in change:
        channel += f"|mtu={change['mtu']}"
    position = stop + change.get("position", 0)
    extension_sub = harness.archive.extend_recording(rid, CHANNEL, 53)
    publication = harness.client.add_exclusive_publication(
        positioned_channel(channel, d.initial_term_id + change.get("init", 0), position, term_length), 53
    )
    try:
        error = execute_until(lambda: harness.errors and harness.errors[-1], description="extension refused")
        assert isinstance(error, InvalidPositionError)
        assert what in str(error)
        assert harness.archive.recording(rid) == d  # still stopped where it was
        assert len(harness.archive.recordings()) == 1
    finally:
        publication.close()
        harness.archive.stop_recording_subscription(extension_sub)


def test_truncate(harness: ArchiveHarness) -> None:
    messages = [message(i, 40 if i % 17 else 3000) for i in range(6000)]
    rid, stop = record(harness, 61, messages)
    d = harness.archive.recording(rid)
    assert stop > 5 * TERM
    frames = parse_frames(recording_bytes(harness.archive_dir, d), 0)
    frame_starts = {f.position for f in frames}
    assert len(segment_names(harness.archive_dir, rid)) == stop // TERM + 1
    for bad in (stop + 32, 3 * TERM + 1, -32):
        with pytest.raises(InvalidPositionError):
            harness.archive.truncate_recording(rid, bad)
    inside = next(f for f in frames if f.position > 3 * TERM and f.length > 1000)
    with pytest.raises(InvalidPositionError):
        harness.archive.truncate_recording(rid, inside.position + 64)
    # a replay in progress (here: still waiting for its subscriber) blocks truncation
    replay_id = harness.archive.replay(rid, "aeron:ipc", 92)
    with pytest.raises(RecordingStateError, match="replayed"):
        harness.archive.truncate_recording(rid, inside.position)
    assert harness.archive.stop_replay(replay_id)
    assert not harness.archive.stop_replay(replay_id)

    # mid-segment: later segments go, the segment holding the position is zeroed from there (and stays whole)
    harness.archive.truncate_recording(rid, inside.position)
    base = inside.position - inside.position % TERM
    assert segment_names(harness.archive_dir, rid) == [segment_file_name(rid, i) for i in range(base // TERM + 1)]
    cut = (harness.archive_dir / segment_file_name(rid, base // TERM)).read_bytes()
    assert len(cut) == TERM
    assert cut[inside.position - base :] == bytes(TERM - (inside.position - base))
    truncated = harness.archive.recording(rid)
    assert (truncated.stop_position, truncated.recorded_position) == (inside.position, inside.position)
    # (the position is between two fragments of a message: the replay ends with a partial message)
    kept = assemble(f for f in frames if f.position < inside.position)
    replay_id = harness.archive.replay(rid, "aeron:ipc", 93)
    replay = Collector(harness.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(replay_id)}", 93))
    assert wait_replay_end(replay, "replay ends at the new stop") == kept
    assert replay.subscription.images == () or replay.subscription.images[0].position == inside.position

    # at a segment boundary: the segment starting there stays, empty (Aeron's tools look for it), later ones go
    assert 2 * TERM in frame_starts
    harness.archive.truncate_recording(rid, 2 * TERM)
    assert segment_names(harness.archive_dir, rid) == [segment_file_name(rid, i) for i in range(3)]
    assert (harness.archive_dir / segment_file_name(rid, 1)).read_bytes().strip(b"\0") != b""
    assert (harness.archive_dir / segment_file_name(rid, 2)).read_bytes() == bytes(TERM)
    # to the stop position: nothing changes; to the start: no bytes left
    harness.archive.truncate_recording(rid, 2 * TERM)
    harness.archive.truncate_recording(rid, 0)
    assert harness.archive.recording(rid).stop_position == 0
    assert segment_names(harness.archive_dir, rid) == [segment_file_name(rid, 0)]
    assert (harness.archive_dir / segment_file_name(rid, 0)).read_bytes() == bytes(TERM)


def test_truncate_and_purge_refuse_an_active_recording(harness: ArchiveHarness) -> None:
    publication, rid = start_one(harness, 62)
    offer_all(publication, [message(i, 40) for i in range(100)])
    with pytest.raises(RecordingStateError, match="active"):
        harness.archive.truncate_recording(rid, 0)
    with pytest.raises(RecordingStateError, match="active"):
        harness.archive.purge_recording(rid)
    publication.close()


def test_purge(harness: ArchiveHarness) -> None:
    rid, stop = record(harness, 63, [message(i, 1000) for i in range(300)])
    assert len(segment_names(harness.archive_dir, rid)) == stop // TERM + 1
    harness.archive.purge_recording(rid)
    assert segment_names(harness.archive_dir, rid) == []
    assert harness.archive.recordings() == []
    for operation in (
        lambda: harness.archive.recording(rid),
        lambda: harness.archive.replay(rid, "aeron:ipc", 94),
        lambda: harness.archive.truncate_recording(rid, 0),
        lambda: harness.archive.purge_recording(rid),
        lambda: harness.archive.extend_recording(rid, CHANNEL, 63),
    ):
        with pytest.raises(RecordingNotFoundError):
            operation()
    # ids are not reused
    rid2, _ = record(harness, 63, [message(i, 40) for i in range(10)])
    assert rid2 == rid + 1


def test_recording_events(harness: ArchiveHarness) -> None:
    events = RecordingEvents(harness.client, harness.context)
    seen: list[RecordingEvent] = []
    try:
        execute_until(lambda: events.subscription.is_connected, description="events subscription connected")
        publication, rid = start_one(harness, 71)
        sent = 0
        deadline = time.monotonic() + 10
        # publish in bursts until the archive has reported progress a few times
        while sum(e.kind == "progress" for e in seen) < 3 and time.monotonic() < deadline:
            offer_all(publication, [message(sent + i, 64) for i in range(200)])
            sent += 200
            time.sleep(0.03)
            events.poll(seen.append)
        end = publication.position
        harness.wait_recorded(rid, end)
        publication.close()
        harness.wait_stopped(rid)
        execute_until(
            lambda: any(e.kind == "stopped" for e in seen),
            lambda: events.poll(seen.append),
            description="stopped event",
        )
    finally:
        events.close()
    assert events.malformed == 0
    started = seen[0]
    assert started.kind == "started"
    assert (started.recording_id, started.start_position, started.stream_id) == (rid, 0, 71)
    assert started.session_id == publication.session_id
    assert started.channel == CHANNEL
    assert started.source_identity == "aeron:ipc"
    progress = [e for e in seen if e.kind == "progress"]
    assert len(progress) >= 3
    assert all(e.recording_id == rid for e in progress)
    positions = [e.position for e in progress]
    assert positions == sorted(positions)
    assert all(0 < p <= end for p in positions)
    stopped = seen[-1]
    assert stopped.kind == "stopped"
    assert (stopped.recording_id, stopped.start_position, stopped.position) == (rid, 0, end)


def test_stop_recording_event(harness: ArchiveHarness) -> None:
    events = RecordingEvents(harness.client, harness.context)
    seen: list[RecordingEvent] = []
    try:
        execute_until(lambda: events.subscription.is_connected, description="events subscription connected")
        publication, rid = start_one(harness, 72)
        end = offer_all(publication, [message(i, 64) for i in range(500)])
        harness.wait_recorded(rid, end)
        assert harness.archive.stop_recording(CHANNEL, 72)
        execute_until(
            lambda: any(e.kind == "stopped" for e in seen),
            lambda: events.poll(seen.append),
            description="stopped event",
        )
        publication.close()
    finally:
        events.close()
    assert seen[0].kind == "started"
    assert seen[-1] == RecordingEvent("stopped", rid, 0, end)
    assert harness.archive.recording(rid).stop_position == end


@pytest.mark.parametrize("level", [1, 2])
def test_sync_levels(
    make_archive: Callable[..., ArchiveHarness], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, level: int
) -> None:
    calls: dict[str, int] = {"fdatasync": 0, "fsync": 0}

    def counting(name: str) -> Callable[[int], None]:
        original: Any = getattr(os, name)

        def call(fd: int) -> None:
            calls[name] += 1
            original(fd)

        return call

    monkeypatch.setattr(os, "fdatasync", counting("fdatasync"))
    monkeypatch.setattr(os, "fsync", counting("fsync"))
    harness = make_archive(archive_dir=tmp_path / "archive", file_sync_level=level, catalog_file_sync_level=level)
    messages = [message(i, 40 if i % 10 else 2000) for i in range(2000)]
    rid, stop = record(harness, 81, messages)
    assert stop > 2 * TERM
    if level == 1:
        assert calls["fdatasync"] > 0
    else:
        assert calls["fsync"] > calls["fdatasync"] == 0
    d = harness.archive.recording(rid)
    assert assemble(parse_frames(recording_bytes(harness.archive_dir, d), 0)) == messages
    assert harness.replay_messages(rid, len(messages)) == messages


def test_a_replay_whose_subscriber_leaves_ends(make_archive: Callable[..., ArchiveHarness]) -> None:
    harness = make_archive(message_timeout_ns=500_000_000)
    rid, _ = record(harness, 65, [message(i, 1000) for i in range(1000)])
    replay_id = harness.archive.replay(rid, "aeron:ipc?term-length=64k", 95)
    replay = Collector(harness.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(replay_id)}", 95))
    replay.poll_until(10)
    replay.subscription.close()
    execute_until(lambda: _purged(harness, rid), timeout_s=3, description="purge after the replay's subscriber left")


def test_rec_pos_counter_follows_each_active_recording(harness: ArchiveHarness) -> None:
    def rec_pos() -> dict[int, tuple[int, bytes, str]]:
        cnc = CncFile.map_existing(harness.aeron_dir, timeout_s=5.0)
        try:
            reader = CountersReader(cnc.counters_metadata_buffer, cnc.counters_values_buffer)
            found: dict[int, tuple[int, bytes, str]] = {}

            def collect(counter_id: int, type_id: int, key: bytes, label: str) -> None:
                if type_id == 100 and reader.get_counter_state(counter_id) == RECORD_ALLOCATED:
                    found[counter_id] = (reader.get_counter_value(counter_id), bytes(key), label)

            reader.for_each(collect)
            return found
        finally:
            cnc.close()

    publication, rid = start_one(harness, 66)
    end = offer_all(publication, [message(i, 40) for i in range(3000)])
    harness.wait_recorded(rid, end)
    (_value, key, label), *others = execute_until(
        lambda: [c for c in rec_pos().values() if c[0] == end], description="rec-pos at the recorded position"
    )
    assert not others
    recording_id, session_id, length = struct.unpack_from("<qii", key)
    assert (recording_id, session_id) == (rid, publication.session_id)
    assert key[16 : 16 + length] == b"aeron:ipc"
    assert label == f"rec-pos: {rid} {publication.session_id} 66 aeron:ipc"
    # ... and found as Aeron's RecordingPos finds it: by the publication's session
    counters = harness.client.counters_reader
    counter_id = recording_pos.find_counter_id_by_session(counters, publication.session_id)
    assert recording_pos.recording_id_of(counters, counter_id) == rid
    assert recording_pos.find_counter_id_by_recording(counters, rid) == counter_id
    publication.close()
    harness.wait_stopped(rid)
    execute_until(lambda: not rec_pos(), description="rec-pos counter freed once the recording stopped")


def test_segments_hold_at_least_a_term(harness: ArchiveHarness) -> None:
    """With 64 KiB segments configured, a stream of 256 KiB terms gets 256 KiB segments."""
    channel = "aeron:ipc?term-length=256k"
    harness.archive.start_recording(channel, 67)
    publication = harness.client.add_exclusive_publication(channel, 67)
    (d,) = harness.wait_for_recordings(1)
    messages = [message(i, 40 if i % 5 else 5000) for i in range(3000)]
    end = offer_all(publication, messages)
    harness.wait_recorded(d.recording_id, end)
    publication.close()
    d = harness.wait_stopped(d.recording_id)
    assert (d.term_buffer_length, d.segment_file_length) == (256 * KIB, 256 * KIB)
    last_index = segment_index(0, end, 256 * KIB, 256 * KIB)  # (the next one exists once one is full)
    assert segment_names(harness.archive_dir, d.recording_id) == [
        segment_file_name(d.recording_id, i) for i in range(last_index + 1)
    ]
    assert assemble(parse_frames(recording_bytes(harness.archive_dir, d), 0)) == messages
    assert harness.replay_messages(d.recording_id, len(messages)) == messages


def test_a_replay_nobody_subscribes_to_fails_after_the_message_timeout(
    make_archive: Callable[..., ArchiveHarness],
) -> None:
    harness = make_archive(message_timeout_ns=200_000_000)
    rid, _ = record(harness, 68, [message(i, 40) for i in range(100)])
    replay_id = harness.archive.replay(rid, "aeron:ipc", 89)
    with pytest.raises(RecordingStateError, match="replayed"):
        harness.archive.purge_recording(rid)
    execute_until(lambda: _purged(harness, rid), description="purge once the replay gave up")
    assert not harness.archive.stop_replay(replay_id)


def test_closing_the_archive_stops_its_recordings_cleanly(
    make_archive: Callable[..., ArchiveHarness], archive_dir: Path
) -> None:
    first = make_archive()
    publication, rid = start_one(first, 69)
    messages = [message(i, 40 if i % 7 else 1500) for i in range(3000)]
    sent_end = offer_all(publication, messages[:2000])
    first.wait_recorded(rid, 1)
    first.close()  # while the recording is active (this closes the publication's client too)
    second = make_archive()
    assert second.archive.recovered == []  # nothing left active for recovery to do
    d = second.archive.recording(rid)
    assert not d.is_active
    assert 0 < d.stop_position <= sent_end
    kept = assemble(parse_frames(recording_bytes(archive_dir, d), 0))
    assert kept == messages[: len(kept)]
    assert second.replay_messages(rid, len(kept)) == kept


def test_archiving_media_driver(aeron_dir: Path, archive_dir: Path) -> None:
    driver_context = DriverContext.from_env({}, aeron_dir=aeron_dir, threading_mode="SHARED")
    archive_context = ArchiveContext.from_env(
        LOCAL_ARCHIVE_ENV, archive_dir=archive_dir, aeron_dir="/nonexistent/ignored"
    )
    with ArchivingMediaDriver.launch(driver_context, archive_context) as both:
        assert both.archive.context.aeron_dir == aeron_dir
        with pytest.raises(ArchiveInUseError):
            Archive(ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, archive_dir=archive_dir, aeron_dir=aeron_dir))
        both.archive.start_recording(CHANNEL, 70)
        with Aeron.connect(aeron_dir=aeron_dir) as aeron:
            publication = aeron.add_exclusive_publication(CHANNEL, 70)
            execute_until(both.archive.recordings, description="recording")
            end = offer_all(publication, [message(i, 40) for i in range(500)])
            execute_until(lambda: both.archive.recordings()[0].recorded_position == end, description="recorded")
            publication.close()
    with Catalog(archive_dir, writable=False) as catalog:
        assert catalog.descriptor(0).stop_position == end


def test_an_io_error_stops_only_its_own_recording(harness: ArchiveHarness, monkeypatch: pytest.MonkeyPatch) -> None:
    failing, working = start_one(harness, 73), start_one(harness, 74)
    failing_name = f"/{failing[1]}-0.rec"
    pwrite = os.pwrite

    def pwrite_failing_one_segment(fd: int, data: Any, offset: int) -> int:
        if offset > 0 and os.readlink(f"/proc/self/fd/{fd}").endswith(failing_name):
            raise OSError(errno.EIO, "Input/output error")
        written: int = pwrite(fd, data, offset)
        return written

    monkeypatch.setattr(os, "pwrite", pwrite_failing_one_segment)
    first = offer_all(failing[0], [message(i, 100) for i in range(20)])
    harness.wait_recorded(failing[1], first)
    offer_all(failing[0], [message(i, 100) for i in range(20, 40)])  # this block's write fails
    end = offer_all(working[0], [message(i, 100) for i in range(300)])
    try:
        harness.wait_recorded(working[1], end, timeout_s=3)
        stopped = harness.wait_stopped(failing[1], timeout_s=3)
        assert stopped.stop_position == first
        assert sum(isinstance(e, OSError) for e in harness.errors) == 1
    finally:
        monkeypatch.undo()
        failing[0].close()
        working[0].close()


def test_an_archive_that_cannot_start_releases_its_directory(media_driver: Any, archive_dir: Path) -> None:
    archive_dir.mkdir(parents=True)
    (archive_dir / "archive.catalog").write_bytes(b"not a catalog".ljust(4096, b"\0"))
    context = ArchiveContext.from_env(LOCAL_ARCHIVE_ENV, archive_dir=archive_dir, aeron_dir=media_driver.aeron_dir)
    with pytest.raises(CatalogError, match="catalog version"):
        Archive(context)
    MarkFile(archive_dir).close()  # the failed archive let go of the mark file
    (archive_dir / "archive.catalog").unlink()
    with Archive(context) as archive:
        assert archive.recordings() == []
        assert archive.recovered == []


def test_recording_subscriptions_in_process(harness: ArchiveHarness) -> None:
    first = harness.archive.start_recording(CHANNEL, 81)
    second = harness.archive.start_recording("aeron:ipc?term-length=128k|alias=x", 82)
    assert harness.archive.recording_subscriptions() == [(first, 81, "aeron:ipc"), (second, 82, "aeron:ipc")]
    assert harness.archive.recording_subscriptions("128k") == [(second, 82, "aeron:ipc")]
    assert harness.archive.stop_recording_subscription(first)
    assert harness.archive.recording_subscriptions() == [(second, 82, "aeron:ipc")]


def test_stop_recording_matches_the_channel_string_then_the_stream_it_names(harness: ArchiveHarness) -> None:
    """As Aeron's archive keys recording subscriptions: media, endpoint, interface, control and tags."""
    exact = harness.archive.start_recording("aeron:ipc?term-length=64k|alias=a", 83)
    other = harness.archive.start_recording("aeron:ipc?term-length=128k", 83)
    assert harness.archive.stop_recording("aeron:ipc?term-length=128k", 83)  # the exact string first
    assert harness.archive.recording_subscriptions(stream_id=83) == [(exact, 83, "aeron:ipc")]
    assert not harness.archive.stop_recording("aeron:udp?endpoint=localhost:40999", 83)
    assert not harness.archive.stop_recording("aeron:ipc", 84)
    assert harness.archive.stop_recording("aeron:ipc", 83)  # the same stream, named differently
    assert harness.archive.recording_subscriptions() == []
    assert other != exact
