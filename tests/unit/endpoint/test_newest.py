"""Newest-wins: the frame, the per-class sequence, the filter, and the connection core routing frames through it."""

from __future__ import annotations

import attrs
import pytest
from test_connection_core import WHOLE, Move, feed, make

from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG
from endpoint.connection.newest import (
    MAX_NEWEST_CLASSES,
    NEWEST_HEADER_LENGTH,
    NewestFilter,
    Sequencer,
    frame,
    is_newest,
    sequence_of,
)
from endpoint.messages import Ping, is_chunk


@attrs.frozen
class Other:
    n: int


def test_a_frame_carries_its_sequence_and_the_encoded_message_untouched() -> None:
    data = frame(0x0102030405, b"\x93\x01\x02\x03")
    assert is_newest(data)
    assert not is_chunk(data)
    assert len(data) == NEWEST_HEADER_LENGTH + 4
    assert sequence_of(data) == 0x0102030405
    assert data[NEWEST_HEADER_LENGTH:] == b"\x93\x01\x02\x03"
    assert sequence_of(data[:-1]) is None  # the ext length no longer matches
    assert not is_newest(data[: NEWEST_HEADER_LENGTH - 1])


def test_the_sequencer_counts_per_class_from_one() -> None:
    sequencer = Sequencer()
    assert [sequencer.next(Move) for _ in range(3)] == [1, 2, 3]
    assert sequencer.next(Other) == 1
    assert sequencer.next(Move) == 4


def test_the_filter_delivers_only_what_is_newer_per_class() -> None:
    newest = NewestFilter()
    arrivals = [(Move, 1), (Move, 3), (Move, 2), (Other, 1), (Move, 3), (Move, 4), (Other, 1), (Other, 7)]
    accepted = [arrival for arrival in arrivals if newest.accept(*arrival)]
    assert accepted == [(Move, 1), (Move, 3), (Other, 1), (Move, 4), (Other, 7)]
    assert newest.stale == 3
    assert not newest.accept(Move, 0)
    assert newest.stale == 4


def test_the_filter_is_bounded_in_classes() -> None:
    newest = NewestFilter()
    classes = [type(f"C{i}", (), {}) for i in range(MAX_NEWEST_CLASSES + 1)]
    assert all(newest.accept(cls, 1) for cls in classes[:-1])
    assert not newest.accept(classes[-1], 1)
    assert len(newest) == MAX_NEWEST_CLASSES
    assert newest.stale == 1
    assert newest.accept(classes[0], 2)  # classes already known go on


def test_sequence_zero_is_never_delivered() -> None:
    newest = NewestFilter()
    assert not newest.accept(Move, 0)
    assert newest.accept(Move, 1)


@pytest.mark.parametrize("order", [[1, 2, 3, 4], [4, 3, 2, 1], [2, 1, 4, 3], [1, 1, 2, 2]])
def test_the_core_never_delivers_an_older_snapshot_after_a_newer_one(order: list[int]) -> None:
    core, shell, ser = make()
    for seq in order:
        feed(core, frame(seq, ser.encode(Move(seq))))
    delivered = [message.seq for kind, (message, _) in shell.events if kind == "deliver"]
    assert delivered == sorted(set(delivered))
    assert delivered[-1] == max(order)
    assert core.newest_delivered == len(delivered)
    assert core.newest.stale == len(order) - len(delivered)


def test_newest_frames_and_plain_messages_mix_and_the_size_is_the_message_s() -> None:
    core, shell, ser = make()
    plain = ser.encode(Move(10))
    feed(core, plain)
    feed(core, frame(5, ser.encode(Move(5))))
    feed(core, frame(4, ser.encode(Move(4))))
    feed(core, plain)
    assert shell.events == [
        ("deliver", (Move(10), len(plain))),
        ("deliver", (Move(5), len(ser.encode(Move(5))))),
        ("deliver", (Move(10), len(plain))),
    ]


def test_a_broken_frame_is_malformed_and_an_internal_message_inside_one_too() -> None:
    core, shell, ser = make()
    good = frame(1, ser.encode(Move(1)))
    feed(core, good[:-1])
    feed(core, frame(2, ser.encode(Ping(1, 2))))
    feed(core, frame(3, b"\xc1"))  # never valid msgpack
    assert shell.kinds() == ["malformed", "malformed", "undecodable"]
    feed(core, good)
    assert shell.kinds()[-1] == "deliver"


def test_the_unreliable_stream_takes_whole_newest_wins_frames_only() -> None:
    core, shell, ser = make()
    plain = ser.encode(Move(1))
    newest = frame(1, ser.encode(Move(2)))
    core.on_unreliable_fragment(memoryview(plain), WHOLE)  # a plain message has no place there
    core.on_unreliable_fragment(memoryview(newest[:20]), BEGIN_FRAG_FLAG)  # nor a fragment: loss could hide its rest
    core.on_unreliable_fragment(memoryview(newest[20:]), END_FRAG_FLAG)
    assert shell.kinds() == ["malformed", "malformed", "malformed"]
    core.on_unreliable_fragment(memoryview(newest), WHOLE)
    assert shell.events[-1] == ("deliver", (Move(2), len(newest) - NEWEST_HEADER_LENGTH))
