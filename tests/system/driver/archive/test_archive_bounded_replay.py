"""Bounded replay and the archive id, our client on our archive over today's control messages.

A bounded replay never reads past its limit counter's value: these tests read the replay image's position after
the last message (the header position), which equals the counter's value exactly when the replay stopped at the
limit, and check that nothing more arrives while the counter stands still -- a replay that ignored the limit would
deliver the whole recording at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest
from archive_helpers import ArchiveHarness, Collector, message, offer_all

from driver.archive import InvalidPositionError, ReplayLimitError
from driver.archive.client import ArchiveClient, AsyncArchiveClient, replay_channel
from driver.archive.recording_pos import find_counter_id_by_recording
from driver.client import Subscription
from driver.core.media_driver import MediaDriver
from support.waiting import execute_until

CHANNEL = "aeron:ipc?term-length=64k"
STREAM = 7
REPLAY_STREAM = 99
QUIET_POLLS = 200
"""Polls (with a short pause) that must bring nothing while the limit stands still."""
LIMIT_TYPE_ID = 1101


def assert_quiet(collector: Collector, count: int) -> None:
    """Nothing past ``count`` messages arrives while the limit stands still."""
    for _ in range(QUIET_POLLS):
        collector.poll()
        time.sleep(0.001)
    assert len(collector.messages) == count, f"{len(collector.messages)} messages, the limit allowed {count}"


def image_gone(subscription: Subscription) -> None:
    execute_until(lambda: not subscription.images, description="the replay image gone: the replay ended")


def record(harness: ArchiveHarness, archive: ArchiveClient, count: int) -> tuple[int, list[bytes], list[int]]:
    """A stopped recording of ``count`` messages: its id, the messages, and the stream position after each."""
    archive.start_recording(CHANNEL, STREAM)
    publication = harness.client.add_exclusive_publication(CHANNEL, STREAM)
    messages = [message(i, 100 + i % 300) for i in range(count)]
    ends = [offer_all(publication, [m]) for m in messages]
    rid = harness.wait_for_recordings(1)[0].recording_id
    harness.wait_recorded(rid, ends[-1])
    publication.close()
    harness.wait_stopped(rid)
    assert archive.stop_recording(CHANNEL, STREAM)
    return rid, messages, ends


def test_a_bounded_replay_of_a_live_recording_stops_at_its_rec_pos_and_follows_it(harness: ArchiveHarness) -> None:
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        archive.start_recording(CHANNEL, STREAM)
        publication = harness.client.add_exclusive_publication(CHANNEL, STREAM)
        first = [message(i, 64 + i) for i in range(50)]
        end_first = offer_all(publication, first)
        rid = harness.wait_for_recordings(1)[0].recording_id
        harness.wait_recorded(rid, end_first)
        reader = harness.client.counters_reader
        rec_pos = execute_until(
            lambda: (found := find_counter_id_by_recording(reader, rid)) >= 0 and found, description="rec-pos"
        )
        replay_id = archive.bounded_replay(rid, rec_pos, "aeron:ipc", REPLAY_STREAM)
        subscription = archive.replay_subscription("aeron:ipc", REPLAY_STREAM, replay_id)
        collector = Collector(subscription)
        assert collector.poll_until(len(first)) == first
        assert_quiet(collector, len(first))
        assert collector.headers[-1][1] == end_first == reader.get_counter_value(rec_pos)

        second = [message(i, 200) for i in range(50, 120)]
        end_second = offer_all(publication, second)
        assert collector.poll_until(len(first) + len(second)) == first + second
        assert collector.headers[-1][1] == end_second

        publication.close()  # the recording stops, its rec-pos counter is freed: the replay ends where it got to
        harness.wait_stopped(rid)
        image_gone(subscription)
        assert len(collector.messages) == len(first) + len(second)
        subscription.close()
    assert not harness.errors


def test_a_bounded_replay_follows_a_counter_the_client_keeps(harness: ArchiveHarness) -> None:
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, messages, ends = record(harness, archive, 200)
        limit = harness.client.add_counter(LIMIT_TYPE_ID, b"", "replay limit")
        try:
            limit.set(ends[39])
            replay_id = archive.bounded_replay(rid, limit.id, "aeron:ipc", REPLAY_STREAM)
            subscription = archive.replay_subscription("aeron:ipc", REPLAY_STREAM, replay_id)
            collector = Collector(subscription)
            assert collector.poll_until(40) == messages[:40]
            assert_quiet(collector, 40)
            assert collector.headers[-1][1] == ends[39]

            limit.set(ends[149])
            assert collector.poll_until(150) == messages[:150]
            assert_quiet(collector, 150)
            assert collector.headers[-1][1] == ends[149]

            limit.set(ends[-1])  # the whole recording: the replay waits there (the limit may move on), not ends
            assert collector.poll_until(200) == messages
            assert_quiet(collector, 200)
            assert subscription.images
            assert archive.stop_replay(replay_id)
            image_gone(subscription)
            subscription.close()
        finally:
            limit.close()
    assert not harness.errors


def test_a_bounded_replay_ends_at_its_length_or_once_its_counter_is_freed(harness: ArchiveHarness) -> None:
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, messages, ends = record(harness, archive, 100)
        limit = harness.client.add_counter(LIMIT_TYPE_ID, b"", "replay limit")
        limit.set(ends[-1])
        replay_id = archive.bounded_replay(
            rid, limit.id, "aeron:ipc", REPLAY_STREAM, position=ends[9], length=ends[29] - ends[9]
        )
        subscription = archive.replay_subscription("aeron:ipc", REPLAY_STREAM, replay_id)
        collector = Collector(subscription)
        assert collector.poll_until(20) == messages[10:30]
        image_gone(subscription)
        assert len(collector.messages) == 20
        subscription.close()

        limit.set(ends[49])
        replay_id = archive.bounded_replay(rid, limit.id, "aeron:ipc", REPLAY_STREAM + 1)
        subscription = archive.replay_subscription("aeron:ipc", REPLAY_STREAM + 1, replay_id)
        collector = Collector(subscription)
        assert collector.poll_until(50) == messages[:50]
        limit.close()  # gone: the bound stays where it was and the replay, there already, ends
        image_gone(subscription)
        collector.poll()
        assert len(collector.messages) == 50
        subscription.close()
    assert not harness.errors


def test_a_bounded_replay_on_an_unknown_or_free_counter_is_a_typed_error(harness: ArchiveHarness) -> None:
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, _, ends = record(harness, archive, 20)
        reader = harness.client.counters_reader
        for counter_id in (-1, reader.max_counter_id, reader.max_counter_id + 1000):
            with pytest.raises(ReplayLimitError, match=f"id={counter_id}"):
                archive.bounded_replay(rid, counter_id, "aeron:ipc", REPLAY_STREAM)
        freed = harness.client.add_counter(LIMIT_TYPE_ID, b"", "freed limit")
        freed_id = freed.id
        freed.close()
        execute_until(lambda: reader.get_counter_state(freed_id) != 1, description="counter freed")
        with pytest.raises(ReplayLimitError, match="not allocated"):
            archive.bounded_replay(rid, freed_id, "aeron:ipc", REPLAY_STREAM)
        behind = harness.client.add_counter(LIMIT_TYPE_ID, b"", "limit behind")
        try:
            behind.set(ends[4])
            with pytest.raises(InvalidPositionError, match="exceeds the limit"):
                archive.bounded_replay(rid, behind.id, "aeron:ipc", REPLAY_STREAM, position=ends[9])
        finally:
            behind.close()
        archive.keep_alive()  # the session serves on after the refusals
    assert not harness.errors


async def test_the_async_client_replays_bounded_and_asks_the_archive_id(harness: ArchiveHarness) -> None:
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, messages, ends = record(harness, archive, 30)
        expected_id = archive.archive_id()
    limit = harness.client.add_counter(LIMIT_TYPE_ID, b"", "replay limit")
    try:
        limit.set(ends[9])
        async with await AsyncArchiveClient.connect(harness.client, harness.context, timeout=10) as archive_async:
            assert await archive_async.archive_id() == expected_id
            replay_id = await archive_async.bounded_replay(rid, limit.id, "aeron:ipc", REPLAY_STREAM)
            subscription = harness.client.add_subscription(replay_channel("aeron:ipc", replay_id), REPLAY_STREAM)
            collector = Collector(subscription)
            assert collector.poll_until(10) == messages[:10]
            assert_quiet(collector, 10)
            assert await archive_async.stop_replay(replay_id)
            subscription.close()
        with pytest.raises(ReplayLimitError):
            async with await AsyncArchiveClient.connect(harness.client, harness.context, timeout=10) as again:
                await again.bounded_replay(rid, -5, "aeron:ipc", REPLAY_STREAM)
    finally:
        limit.close()


def test_the_archive_id_is_stable_across_restarts(
    media_driver: MediaDriver, archive_dir: Path, tmp_path: Path, make_archive: Callable[..., ArchiveHarness]
) -> None:
    first = ArchiveHarness(media_driver.aeron_dir, archive_dir)
    try:
        with ArchiveClient.connect(first.client, first.context, timeout=10) as archive:
            archive_id = archive.archive_id()
    finally:
        first.close()
    assert archive_id >= 0
    again = make_archive()
    with ArchiveClient.connect(again.client, again.context, timeout=10) as archive:
        assert archive.archive_id() == archive_id
    assert again.archive.archive_id() == archive_id  # the in-process API answers the same
    other = make_archive(archive_dir=tmp_path / "other-archive", control_stream_id=12, local_control_stream_id=13)
    assert other.archive.archive_id() != archive_id
    configured = make_archive(
        archive_dir=tmp_path / "third-archive", control_stream_id=14, local_control_stream_id=15, archive_id=77
    )
    assert configured.archive.archive_id() == 77


def test_a_waiting_bounded_replay_whose_subscriber_goes_away_ends(make_archive: Callable[..., ArchiveHarness]) -> None:
    harness = make_archive(message_timeout_ns=300_000_000)
    with ArchiveClient.connect(harness.client, harness.context, timeout=10) as archive:
        rid, messages, ends = record(harness, archive, 20)
        limit = harness.client.add_counter(LIMIT_TYPE_ID, b"", "replay limit")
        try:
            limit.set(ends[4])  # stands still from here on: the replay waits at message 5
            replay_id = archive.bounded_replay(rid, limit.id, "aeron:ipc", REPLAY_STREAM)
            subscription = archive.replay_subscription("aeron:ipc", REPLAY_STREAM, replay_id)
            assert Collector(subscription).poll_until(5) == messages[:5]
            assert harness.archive.conductor.active_replays == 1
            subscription.close()
            execute_until(lambda: harness.archive.conductor.active_replays == 0, description="the replay ended")
            assert not archive.stop_replay(replay_id)  # already gone
        finally:
            limit.close()
