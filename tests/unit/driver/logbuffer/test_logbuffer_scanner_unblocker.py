from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st
from logbuffer_helpers import MemoryLog, MiniPublication, MiniSubscriber

from driver.logbuffer import descriptor as d
from driver.logbuffer.appender import TermAppender
from driver.logbuffer.frame import HeaderWriter
from driver.logbuffer.header import BufferClaim, Header
from driver.logbuffer.reader import read
from driver.logbuffer.scanner import TermScanner, scan_for_availability
from driver.logbuffer.unblocker import LogBufferUnblocker, Status, TermUnblocker

TL = 64 * 1024
FRAME = struct.Struct("<iBBHiiiiq")


def _setup(**kwargs: int) -> tuple[MemoryLog, HeaderWriter, TermAppender]:
    log = MemoryLog(TL, initial_term_id=9, **kwargs)
    header = HeaderWriter(d.default_frame_header(log.metadata))
    return log, header, TermAppender(log.terms[0], log.metadata, 0, log.term_views[0])


# --- scanner --------------------------------------------------------------------------------


def test_scan_empty_term() -> None:
    log, _, _ = _setup()
    assert scan_for_availability(log.terms[0], 0, 1408) == (0, 0)
    assert scan_for_availability(log.terms[0], TL, 1408) == (0, 0)


@settings(deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=500), min_size=1, max_size=40), st.integers(64, 4096))
def test_scan_takes_whole_frames_up_to_max(lengths: list[int], max_length: int) -> None:
    log, header, appender = _setup()
    for n in lengths:
        appender.append_unfragmented(header, bytes(n), 0, n, None, 9)
    available, padding = TermScanner.scan_for_availability(log.terms[0], 0, max_length)
    assert padding == 0
    expected = 0
    for n in lengths:
        aligned = (n + 63) & ~31
        if expected + aligned > max_length:
            break
        expected += aligned
    assert available == expected


def test_scan_stops_after_padding_and_reports_it() -> None:
    log, header, appender = _setup(term_id=9, term_offset=TL - 256)
    appender.append_unfragmented(header, bytes(10), 0, 10, None, 9)  # 64 bytes
    appender.append_unfragmented(header, bytes(300), 0, 300, None, 9)  # does not fit: pad 192
    assert scan_for_availability(log.terms[0], TL - 256, 1408) == (64 + 32, 192 - 32)
    # A pad that does not fit in max_length is left for next time.
    assert scan_for_availability(log.terms[0], TL - 256, 80) == (64, 0)
    assert scan_for_availability(log.terms[0], TL - 192, 1408) == (32, 160)


def test_scan_stops_at_uncommitted_frame() -> None:
    log, header, appender = _setup()
    appender.append_unfragmented(header, bytes(1), 0, 1, None, 9)
    claim = BufferClaim()
    appender.claim(header, 1, claim, 9)
    appender.append_unfragmented(header, bytes(1), 0, 1, None, 9)
    assert scan_for_availability(log.terms[0], 0, 1408) == (64, 0)
    claim.commit()
    assert scan_for_availability(log.terms[0], 0, 1408) == (192, 0)


# --- term unblocker -------------------------------------------------------------------------


def _frame(log: MemoryLog, index: int, offset: int) -> tuple[int, ...]:
    return FRAME.unpack_from(log.raw, index * TL + offset)


def test_unblock_negative_length_claim() -> None:
    log, header, appender = _setup()
    appender.append_unfragmented(header, b"a", 0, 1, None, 9)
    claim = BufferClaim()
    appender.claim(header, 40, claim, 9)
    appender.append_unfragmented(header, b"b", 0, 1, None, 9)
    tail = d.term_offset(d.raw_tail(log.metadata, 0), TL)
    assert TermUnblocker.unblock(log.metadata, log.terms[0], 64, tail, 9) is Status.UNBLOCKED
    assert _frame(log, 0, 64)[:8] == (72, 0, 0xC0, 0, 64, 7, 1001, 9)
    got: list[bytes] = []
    read(log.terms[0], 0, lambda p, h: got.append(bytes(p)), 10, Header(9, 16))
    assert got == [b"a", b"b"]


def test_unblock_zero_length_gap_before_later_frame() -> None:
    log, header, appender = _setup()
    # A writer claimed 96 bytes at offset 0 but wrote nothing; another wrote after it.
    log.metadata.get_and_add_long(d.tail_counter_offset(0), 96)
    appender.append_unfragmented(header, b"z", 0, 1, None, 9)
    assert TermUnblocker.unblock(log.metadata, log.terms[0], 0, 160, 9) is Status.UNBLOCKED
    assert _frame(log, 0, 0)[:8] == (96, 0, 0xC0, 0, 0, 7, 1001, 9)


def test_unblock_zero_gap_pads_up_to_first_nonzero_word() -> None:
    log, header, appender = _setup()
    log.metadata.get_and_add_long(d.tail_counter_offset(0), 96)
    appender.append_unfragmented(header, b"z", 0, 1, None, 9)
    log.raw[32] = 1  # something written inside the gap (a frame in progress): not safe
    # The scan meets the non-zero word at 32 and the back-scan confirms only 0..32.
    assert TermUnblocker.unblock(log.metadata, log.terms[0], 0, 160, 9) is Status.UNBLOCKED
    assert _frame(log, 0, 0)[0] == 32


def test_unblock_nothing_to_do() -> None:
    log, header, appender = _setup()
    appender.append_unfragmented(header, b"a", 0, 1, None, 9)
    assert TermUnblocker.unblock(log.metadata, log.terms[0], 0, 64, 9) is Status.NO_ACTION
    # Zero at the blocked offset but nothing after it up to the tail: still waiting.
    assert TermUnblocker.unblock(log.metadata, log.terms[0], 64, 64, 9) is Status.NO_ACTION


def test_unblock_to_end_of_term() -> None:
    log, _header, _appender = _setup(term_id=9, term_offset=TL - 128)
    log.metadata.get_and_add_long(d.tail_counter_offset(0), 256)  # claimed past the end, died
    assert TermUnblocker.unblock(log.metadata, log.terms[0], TL - 128, TL, 9) is Status.UNBLOCKED_TO_END
    assert _frame(log, 0, TL - 128)[:8] == (128, 0, 0xC0, 0, TL - 128, 7, 1001, 9)


# --- log buffer unblocker -------------------------------------------------------------------


def test_log_unblocker_rotates_when_blocked_at_start_of_next_term() -> None:
    log, _, _ = _setup(term_id=9, term_offset=TL)  # term filled exactly, publisher died before rotating
    assert d.active_term_count(log.metadata) == 0
    assert LogBufferUnblocker.unblock(log.terms, log.metadata, TL, TL)
    assert d.active_term_count(log.metadata) == 1
    assert d.raw_tail_volatile(log.metadata) == d.pack_tail(10, 0)


def test_log_unblocker_pads_to_end_and_rotates() -> None:
    log, _, _ = _setup(term_id=9, term_offset=TL - 64)
    log.metadata.get_and_add_long(d.tail_counter_offset(0), 128)
    assert LogBufferUnblocker.unblock(log.terms, log.metadata, TL - 64, TL)
    assert _frame(log, 0, TL - 64)[:4] == (64, 0, 0xC0, 0)
    assert d.active_term_count(log.metadata) == 1


def test_log_unblocker_no_action() -> None:
    log, _, _ = _setup()
    assert not LogBufferUnblocker.unblock(log.terms, log.metadata, 0, TL)


def test_publication_continues_after_unblock() -> None:
    log = MemoryLog(TL, initial_term_id=-1)
    publication = MiniPublication(log.terms, log.term_views, log.metadata)
    subscriber = MiniSubscriber(log.terms, log.term_views, log.metadata)
    assert publication.offer(b"first") > 0
    claim = BufferClaim()
    assert publication.try_claim(100, claim) > 0  # never committed
    assert publication.offer(b"second") > 0
    got: list[bytes] = []
    subscriber.poll(lambda p, h: got.append(bytes(p)))
    assert got == [b"first"]
    assert LogBufferUnblocker.unblock(log.terms, log.metadata, subscriber.position, TL)
    subscriber.poll(lambda p, h: got.append(bytes(p)))
    assert got == [b"first", b"second"]
    assert subscriber.position == publication.position
