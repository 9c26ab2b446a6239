"""Recording and replay against a real embedded driver: byte for byte what a plain subscriber saw.

Streams mix small and fragmented (> mtu) messages over several 64 KiB terms; the
recordings' segment bytes are compared with the raw term bytes a plain subscriber's
image delivered, and replays with both, at the start, mid-term, and at random frames.
"""

from __future__ import annotations

import random
from collections.abc import Callable

import pytest
from archive_helpers import (
    KIB,
    ArchiveHarness,
    Collector,
    RawCollector,
    assemble,
    message,
    offer_all,
    parse_frames,
    positioned_channel,
    recording_bytes,
    segment_names,
    without_ids,
)

from driver.archive import InvalidPositionError, RecordingNotFoundError
from driver.archive.client import replay_session_id
from driver.archive.segments import segment_file_name, segment_index
from support.waiting import execute_until

pytestmark = pytest.mark.slow

CHANNEL = "aeron:ipc?term-length=64k"
TERM = 64 * KIB


def mixed_messages(count: int, seed: int) -> list[bytes]:
    """Mostly small messages, some just under and over the mtu, a few several fragments long."""
    rng = random.Random(seed)
    sizes = [rng.choice([0, 1, 32, 100, 500, 1376, 1377, 3000, 8000]) if i % 7 == 0 else 40 for i in range(count)]
    return [message(i, max(size, 4)) for i, size in enumerate(sizes)]


def record_stream(
    harness: ArchiveHarness, messages: list[bytes], channel: str, stream_id: int, start: int | None = None
) -> tuple[int, int, int, bytes, list[bytes]]:
    """Record ``messages`` published on an exclusive publication (starting at ``start`` when given).

    Returns (recording id, start position, stop position, the raw bytes a plain subscriber's
    image delivered, the messages a plain subscriber assembled).
    """
    aeron = harness.client
    harness.archive.start_recording(channel, stream_id)
    plain = Collector(aeron.add_subscription(channel, stream_id))
    raw = RawCollector(aeron.add_subscription(channel, stream_id))
    pub_channel = channel if start is None else positioned_channel(channel, 1234, start, TERM)
    publication = aeron.add_exclusive_publication(pub_channel, stream_id)
    try:
        recording = execute_until(
            lambda: next(
                (
                    d
                    for d in harness.archive.recordings()
                    if d.stream_id == stream_id and d.session_id == publication.session_id
                ),
                None,
            ),
            description="the recording of the publication",
        )
        execute_until(lambda: plain.subscription.images and raw.image, description="plain subscribers' images")
        start_position = publication.position
        assert recording.start_position == start_position
        if start is not None:
            assert start_position == start

        def drain() -> None:
            plain.poll()
            raw.poll()

        end = offer_all(publication, messages, drain)
        plain.poll_until(len(messages))
        raw.poll_until(end)
        harness.wait_recorded(recording.recording_id, end)
        assert harness.archive.stop_recording(channel, stream_id)
        stopped = harness.archive.recording(recording.recording_id)
        assert (stopped.start_position, stopped.stop_position) == (start_position, end)
        return recording.recording_id, start_position, end, bytes(raw.data), list(plain.messages)
    finally:
        publication.close()
        plain.subscription.close()
        raw.subscription.close()


@pytest.mark.parametrize(
    ("segment_length", "start"),
    [
        (64 * KIB, None),
        (64 * KIB, 3 * TERM + 4096),  # a recording starting mid-term
        (256 * KIB, 5 * TERM + 64 * 32),  # mid-term and mid-segment
    ],
    ids=["seg64k-from-0", "seg64k-mid-term", "seg256k-mid-term"],
)
def test_record_and_replay_byte_exact(
    make_archive: Callable[..., ArchiveHarness], segment_length: int, start: int | None
) -> None:
    harness = make_archive(segment_file_length=segment_length)
    messages = mixed_messages(2500, seed=segment_length + (start or 0))
    rid, first, end, live_raw, live_messages = record_stream(harness, messages, CHANNEL, 7, start)
    assert live_messages == messages
    assert end - first > 4 * TERM, "several terms"
    d = harness.archive.recording(rid)
    assert (d.term_buffer_length, d.segment_file_length, d.mtu_length) == (TERM, segment_length, 1408)
    assert d.initial_term_id == (1234 if start is not None else d.initial_term_id)

    # the segment files hold exactly the bytes the subscriber's image held
    recorded = recording_bytes(harness.archive_dir, d)
    assert recorded == live_raw
    assert assemble(parse_frames(recorded, first)) == messages
    # files: segments 0, 1, ... from the start's term, each a whole segment long, zeros past the stop
    term_base = first - first % TERM
    last_index = segment_index(first, end, TERM, segment_length)
    assert segment_names(harness.archive_dir, rid) == [segment_file_name(rid, i) for i in range(last_index + 1)]
    last = (harness.archive_dir / segment_file_name(rid, last_index)).read_bytes()
    assert len(last) == segment_length
    last_base = term_base + last_index * segment_length
    assert last[end - last_base :] == bytes(segment_length - (end - last_base))
    first_file = harness.archive_dir / segment_file_name(rid, 0)
    assert first_file.read_bytes()[: first - term_base] == bytes(first - term_base)  # the hole before the start

    # a replay delivers the same messages and the same frames (with the replay's session and stream)
    assert harness.replay_messages(rid, len(messages)) == messages
    replayed, replay_session = harness.replay_raw(rid, first, end)
    assert len(replayed) == len(recorded)
    assert without_ids(replayed, first) == without_ids(recorded, first)
    assert {(f.session_id, f.stream_id) for f in parse_frames(replayed, first)} == {(replay_session, 98)}


def test_replay_from_random_frames_and_lengths(harness: ArchiveHarness) -> None:
    messages = mixed_messages(1500, seed=11)
    rid, first, end, _, _ = record_stream(harness, messages, CHANNEL, 8)
    d = harness.archive.recording(rid)
    recorded = recording_bytes(harness.archive_dir, d)
    frames = parse_frames(recorded, first)
    starts = [f.position for f in frames] + [end]
    rng = random.Random(20261122)
    for _ in range(12):
        i = rng.randrange(len(starts) - 1)
        j = rng.randrange(i + 1, min(i + 400, len(starts) - 1) + 1)
        position, stop = starts[i], starts[j]
        data, _ = harness.replay_raw(rid, position, stop, length=stop - position)
        assert without_ids(data, position) == without_ids(recorded[position - first : stop - first], position)
    # a length that ends inside a frame still delivers that frame whole
    big = next(f for f in frames[10:] if f.length > 1000)
    data, _ = harness.replay_raw(rid, big.position, big.position + 32, length=40)
    assert parse_frames(data, big.position)[0].payload == big.payload
    # length 0 and a replay from the end deliver nothing, and end
    assert harness.archive.replay(rid, "aeron:ipc", 97, position=end, length=0) > 0
    assert harness.archive.replay(rid, "aeron:ipc", 97, position=starts[5], length=0) > 0


def test_invalid_replay_positions(harness: ArchiveHarness) -> None:
    messages = [message(i, 40) for i in range(200)] + [b"\0" * 3000, b"\xab" * 3000] + [message(9, 40)]
    start = 2 * TERM + 1024
    rid, first, end, _, _ = record_stream(harness, messages, CHANNEL, 9, start)
    d = harness.archive.recording(rid)
    frames = parse_frames(recording_bytes(harness.archive_dir, d), first)
    zeros = next(f for f in frames if f.payload[:8] == bytes(8) and f.length > 1000)
    pattern = next(f for f in frames if f.payload[:8] == b"\xab" * 8)
    bad = {
        "unaligned": first + 16,
        "unaligned by one": first + 97,
        "inside a frame of zeros": zeros.position + 64,
        "inside a frame of 0xab": pattern.position + 128,
        "before the start": first - 32,
        "at the start of the term, before the start": first - 1024,
        "beyond the end": end + 32,
        "far beyond the end": end + 64 * TERM,
    }
    for position in bad.values():
        with pytest.raises(InvalidPositionError):
            harness.archive.replay(rid, "aeron:ipc", 96, position=position)
    with pytest.raises(InvalidPositionError, match="length"):
        harness.archive.replay(rid, "aeron:ipc", 96, position=first, length=-2)
    with pytest.raises(RecordingNotFoundError):
        harness.archive.replay(rid + 1, "aeron:ipc", 96)
    # position -1 is the start
    assert harness.replay_messages(rid, len(messages), position=-1) == messages


def test_replay_past_a_pad_frame_longer_than_a_replay_block(make_archive: Callable[..., ArchiveHarness]) -> None:
    harness = make_archive(segment_file_length=4 * 1024 * KIB)
    channel = "aeron:ipc?term-length=4m"
    big = [message(i, 469_000) for i in range(9)]  # the 9th does not fit the first term: a 354,816-byte PAD
    rid, first, _end, _, live = record_stream(harness, big, channel, 12)
    assert live == big
    d = harness.archive.recording(rid)
    frames = parse_frames(recording_bytes(harness.archive_dir, d), first)
    assert max(f.length for f in frames if f.type == 0) > 256 * KIB
    replay_id = harness.archive.replay(rid, "aeron:ipc", 95)
    replay = Collector(harness.client.add_subscription(f"aeron:ipc?session-id={replay_session_id(replay_id)}", 95))
    try:
        assert replay.poll_until(len(big), timeout_s=3) == big
    finally:
        replay.subscription.close()
