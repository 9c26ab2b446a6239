from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from logbuffer_helpers import MemoryLog, MiniPublication, MiniSubscriber

from driver.logbuffer import descriptor as d
from driver.logbuffer.appender import TermAppender
from driver.logbuffer.fragment_assembler import BufferBuilder, FragmentAssembler
from driver.logbuffer.frame import HeaderWriter
from driver.logbuffer.header import Header
from driver.logbuffer.reader import read

TL = 64 * 1024


@settings(deadline=None)
@given(st.lists(st.binary(min_size=0, max_size=5000), min_size=1, max_size=20), st.sampled_from([64, 96, 1408]))
def test_reassembles_messages(messages: list[bytes], mtu: int) -> None:
    log = MemoryLog(TL, mtu=mtu)
    publication = MiniPublication(log.terms, log.term_views, log.metadata)
    subscriber = MiniSubscriber(log.terms, log.term_views, log.metadata)
    got: list[bytes] = []
    unfragmented: list[bool] = []

    def delegate(payload: memoryview, header: Header) -> None:
        got.append(bytes(payload))
        unfragmented.append(header.flags & 0xC0 == 0xC0)

    assembler = FragmentAssembler(delegate)
    for m in messages:
        for _ in range(10):
            if publication.offer(m) > 0:
                break
        subscriber.poll(assembler)
    assert got == messages
    assert unfragmented == [len(m) <= mtu - 32 for m in messages]


def test_interleaved_sessions_and_dropped_partial() -> None:
    logs = [MemoryLog(TL, session_id=s, mtu=64) for s in (1, 2)]
    appenders = [TermAppender(log.terms[0], log.metadata, 0) for log in logs]
    headers = [HeaderWriter(d.default_frame_header(log.metadata)) for log in logs]
    for i in range(2):
        appenders[i].append_fragmented(headers[i], bytes([i + 1]) * 100, 0, 100, 32, None, 0)
    got: list[tuple[int, bytes]] = []
    assembler = FragmentAssembler(lambda p, h: got.append((h.session_id, bytes(p))), 16)
    reader_headers = [Header(0, 16), Header(0, 16)]
    offsets = [0, 0]
    # Alternate one fragment from each session.
    for _ in range(4):
        for i in range(2):
            _n, offsets[i] = read(logs[i].terms[0], offsets[i], assembler, 1, reader_headers[i])
    assert got == [(1, b"\x01" * 100), (2, b"\x02" * 100)]
    # Joining mid-message (no BEGIN seen): the fragments are dropped.
    got.clear()
    late = FragmentAssembler(lambda p, h: got.append((h.session_id, bytes(p))))
    read(logs[0].terms[0], 64, late, 10, Header(0, 16))
    assert got == []
    assert assembler.free_session_buffer(1)
    assert not assembler.free_session_buffer(1)
    assembler.clear()


def test_buffer_builder_growth_keeps_old_views_valid() -> None:
    builder = BufferBuilder()
    assert builder.capacity == 0
    builder.append(b"a" * 10)
    assert builder.capacity == 4096
    held = memoryview(builder.buffer)[: builder.limit]
    builder.append(b"b" * 5000)
    assert builder.capacity == 8192
    assert bytes(held) == b"a" * 10
    assert bytes(builder.buffer[: builder.limit]) == b"a" * 10 + b"b" * 5000
    builder.reset()
    assert builder.limit == 0
    assert builder.capacity == 8192


def test_delegate_may_keep_the_message_view() -> None:
    log = MemoryLog(TL, mtu=64)
    publication = MiniPublication(log.terms, log.term_views, log.metadata)
    subscriber = MiniSubscriber(log.terms, log.term_views, log.metadata)
    kept: list[memoryview] = []
    assembler = FragmentAssembler(lambda p, h: kept.append(p))
    publication.offer(b"x" * 100)
    publication.offer(b"y" * 8000)  # forces the builder to grow (past 4096) while a view is held
    subscriber.poll(assembler)
    assert bytes(kept[1]) == b"y" * 8000


def _fragmented_log(fill: int) -> MemoryLog:
    """A log of session 7 holding one 100-byte message in 32-byte fragments (mtu 64): 4 frames of 64 bytes."""
    log = MemoryLog(TL, session_id=7, mtu=64)
    TermAppender(log.terms[0], log.metadata, 0).append_fragmented(
        HeaderWriter(d.default_frame_header(log.metadata)), bytes([fill]) * 100, 0, 100, 32, None, 0
    )
    return log


def test_a_skip_between_fragments_drops_the_partial_message_instead_of_joining_two() -> None:
    # The subscriber read the head of message A from one image of session 7 (up to offset 128); the image was lost
    # and a new one of the same session joined further on, mid-way through message B (at 192). B's tail must not be
    # appended to A's head.
    first, second = _fragmented_log(0xA), _fragmented_log(0xB)
    got: list[bytes] = []
    assembler = FragmentAssembler(lambda p, h: got.append(bytes(p)))
    assert read(first.terms[0], 0, assembler, 2, Header(0, 16))[0] == 2  # BEGIN and one middle fragment of A
    assert read(second.terms[0], 192, assembler, 10, Header(0, 16))[0] == 1  # the END fragment of B
    assert got == []
    # The stream goes on normally afterwards: a whole message is delivered.
    assert read(second.terms[0], 0, assembler, 10, Header(0, 16))[0] == 4
    assert got == [b"\x0b" * 100]


def test_a_fragment_missing_from_the_middle_drops_the_message() -> None:
    log = _fragmented_log(0xC)
    got: list[bytes] = []
    assembler = FragmentAssembler(lambda p, h: got.append(bytes(p)))
    read(log.terms[0], 0, assembler, 1, Header(0, 16))  # BEGIN
    read(log.terms[0], 128, assembler, 10, Header(0, 16))  # fragments 3 and 4: fragment 2 skipped
    assert got == []
