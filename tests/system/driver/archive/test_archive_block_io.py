"""``Image.block_poll`` and ``ExclusivePublication.offer_block`` on a real embedded driver.

block_poll hands over the raw committed frames of one term at a time and moves the
position only once the handler returns; offer_block appends already framed blocks
that continue the publication exactly (as a replay does).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from archive_helpers import (
    FRAME,
    Collector,
    RawCollector,
    assemble,
    message,
    offer_all,
    parse_frames,
    positioned_channel,
)

from driver.client import ADMIN_ACTION, CLOSED, NOT_CONNECTED, Aeron, ExclusivePublication, Image
from driver.concurrent.atomic_buffer import align
from driver.core.media_driver import MediaDriver
from support.waiting import execute_until

CHANNEL = "aeron:ipc?term-length=64k"
TERM = 64 * 1024


@pytest.fixture
def aeron(media_driver: MediaDriver) -> Iterator[Aeron]:
    with Aeron.connect(aeron_dir=media_driver.aeron_dir) as client:
        yield client


def image_of(aeron: Aeron, stream_id: int, channel: str = CHANNEL) -> tuple[ExclusivePublication, Image]:
    subscription = aeron.add_subscription(channel, stream_id)
    publication = aeron.add_exclusive_publication(channel, stream_id)
    (image,) = execute_until(lambda: subscription.images, description="image")
    return publication, image


def test_block_poll_hands_over_whole_frames_within_a_term(aeron: Aeron) -> None:
    publication, image = image_of(aeron, 1)
    messages = [message(i, 40 if i % 10 else 3000) for i in range(1500)]
    blocks: list[tuple[int, bytes]] = []

    def on_block(block: memoryview, position: int) -> None:
        assert image.position == position  # not moved before the handler returns
        blocks.append((position, bytes(block)))

    end = offer_all(publication, messages, lambda: image.block_poll(on_block, 8192))
    execute_until(lambda: image.position == end, lambda: image.block_poll(on_block, 8192), interval_s=0)
    assert image.block_poll(on_block, 8192) == 0  # nothing more
    position = 0
    for at, block in blocks:
        assert at == position
        frames = parse_frames(block, at)
        assert len(block) > 0
        assert len(block) <= 8192 or frames[-1].type == 0  # (a PAD frame at the end may exceed it: see below)
        assert len(block) % 32 == 0
        assert at // TERM == (at + len(block) - 1) // TERM, "never past the end of a term"
        assert frames[-1].position + align(frames[-1].length, 32) == at + len(block), "whole frames only"
        position += len(block)
    data = b"".join(block for _, block in blocks)
    frames = parse_frames(data, 0)
    assert any(f.type == 0 for f in frames), "PAD frames at term ends are part of the blocks"
    assert assemble(frames) == messages


def test_block_poll_never_exceeds_its_limit(aeron: Aeron) -> None:
    publication, image = image_of(aeron, 11)
    # 1002 frames of 64 bytes, then a message that does not fit the term's last 1408 bytes: a PAD frame there
    small = [message(i, 32) for i in range(1002)]
    consumed_to = 56832  # the block below starts here: 7296 bytes of frames, then the PAD (32 + 1376)
    end = offer_all(
        publication, small, lambda: image.position < consumed_to and image.block_poll(lambda b, p: None, 64)
    )
    execute_until(lambda: image.position == consumed_to, lambda: image.block_poll(lambda b, p: None, 64), interval_s=0)
    assert end == 64128
    offer_all(publication, [message(5000, 3000)])
    lengths: list[int] = []
    assert image.block_poll(lambda block, _: lengths.append(len(block)), 8192) == lengths[0]
    assert lengths == [7296]  # the frames before the PAD: with the PAD the block would be 8704 bytes
    assert image.position == consumed_to + 7296
    assert image.block_poll(lambda block, _: lengths.append(len(block)), 8192) == 1408  # the PAD, alone
    assert image.position == TERM


def test_block_poll_handler_that_raises_loses_nothing(aeron: Aeron) -> None:
    publication, image = image_of(aeron, 2)
    end = offer_all(publication, [message(i, 100) for i in range(50)])

    def fail(block: memoryview, position: int) -> None:
        raise OSError("disk on fire")

    with pytest.raises(OSError, match="disk on fire"):
        image.block_poll(fail, 1 << 20)
    assert image.position == 0
    raw = RawCollector(image.subscription)
    assert len(raw.poll_until(end)) == end
    assert raw.start == 0  # the failed block came again, from where it was
    assert assemble(parse_frames(raw.data, 0)) == [message(i, 100) for i in range(50)]


def test_block_poll_on_a_closed_image(aeron: Aeron) -> None:
    publication, image = image_of(aeron, 3)
    offer_all(publication, [b"x" * 100])
    image.subscription.close()
    calls: list[int] = []
    assert image.block_poll(lambda block, position: calls.append(position), 1 << 20) == 0
    assert calls == []


def framed_blocks(aeron: Aeron, stream_id: int, messages: list[bytes], initial_term_id: int) -> bytes:
    """The raw frames of ``messages`` published on a source stream that starts at position 0."""
    channel = positioned_channel(CHANNEL, initial_term_id, 0, TERM)
    subscription = aeron.add_subscription(CHANNEL, stream_id)
    publication = aeron.add_exclusive_publication(channel, stream_id)
    try:
        raw = RawCollector(subscription)
        execute_until(lambda: raw.image, description="source image")
        end = offer_all(publication, messages, raw.poll)
        return raw.poll_until(end)
    finally:
        publication.close()
        subscription.close()


def with_ids(data: bytes, session_id: int, stream_id: int) -> bytearray:
    out = bytearray(data)
    for frame in parse_frames(data, 0):
        struct.pack_into("<ii", out, frame.position + 12, session_id, stream_id)
    return out


def test_offer_block_continues_the_stream_exactly(aeron: Aeron) -> None:
    messages = [message(i, 40 if i % 10 else 2500) for i in range(2500)]
    source = framed_blocks(aeron, 4, messages, 777)
    assert len(source) > 3 * TERM
    subscription = aeron.add_subscription(CHANNEL, 5)
    publication = aeron.add_exclusive_publication(positioned_channel(CHANNEL, 777, 0, TERM), 5)
    collector = Collector(subscription)
    raw = RawCollector(aeron.add_subscription(CHANNEL, 5))
    execute_until(lambda: subscription.images and raw.image, description="images")
    blocks = with_ids(source, publication.session_id, 5)
    position = 0
    admin_actions = 0
    for _ in range(100_000):
        if position >= len(blocks):
            break
        term_end = (position // TERM + 1) * TERM
        frames = parse_frames(blocks[position : min(term_end, position + 20_000)], position)
        stop = frames[-1].position + align(frames[-1].length, 32)
        result = publication.offer_block(blocks, position, stop - position)
        if result > 0:
            assert result == stop == publication.position
            position = stop
        elif result == ADMIN_ACTION:
            admin_actions += 1
        collector.poll()
        raw.poll()
    assert position == len(blocks)
    assert admin_actions >= 3, "a full term rotates on the next offer"
    assert collector.poll_until(len(messages)) == messages
    assert raw.poll_until(len(blocks)) == bytes(blocks)


def test_offer_block_refuses_what_does_not_continue_the_publication(aeron: Aeron) -> None:
    source = framed_blocks(aeron, 6, [message(i, 40) for i in range(10)], 888)
    subscription = aeron.add_subscription(CHANNEL, 7)
    publication = aeron.add_exclusive_publication(positioned_channel(CHANNEL, 888, 0, TERM), 7)
    execute_until(lambda: subscription.images, description="image")
    good = with_ids(source, publication.session_id, 7)
    bad_cases: dict[str, tuple[bytes | bytearray, int, int | None]] = {
        "unaligned length": (good, 0, 40),
        "empty": (good, 0, 0),
        "negative offset": (good, -32, 96),
        "beyond the buffer": (good, 0, len(good) + 32),
        "another session": (with_ids(source, publication.session_id + 1, 7), 0, None),
        "another stream": (with_ids(source, publication.session_id, 8), 0, None),
        "not at its term offset": (good, 96, 96),
    }
    for frame_field, value in ((20, 889),):  # another term id
        wrong = bytearray(good)
        struct.pack_into("<i", wrong, frame_field, value)
        bad_cases["another term id"] = (wrong, 0, None)
    for what, (block, offset, length) in bad_cases.items():
        with pytest.raises(ValueError, match=r"block|frame"):
            publication.offer_block(block, offset, length)
        assert publication.position == 0, what
    # a block running past the end of the term
    big = with_ids(framed_blocks(aeron, 8, [message(i, 1000) for i in range(80)], 888), publication.session_id, 7)
    with pytest.raises(ValueError, match="past the term"):
        publication.offer_block(big, 0, TERM + 1024)
    assert publication.offer_block(good) == len(good)
    publication.close()
    assert publication.offer_block(good) == CLOSED


def test_offer_block_without_a_subscriber(aeron: Aeron) -> None:
    source = framed_blocks(aeron, 9, [message(i, 40) for i in range(10)], 999)
    publication = aeron.add_exclusive_publication(positioned_channel(CHANNEL, 999, 0, TERM), 10)
    block = with_ids(source, publication.session_id, 10)
    assert publication.offer_block(block) == NOT_CONNECTED
    assert FRAME.unpack_from(block, 0)[0] > 0
