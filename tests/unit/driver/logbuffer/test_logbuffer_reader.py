from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from logbuffer_helpers import MemoryLog

from driver.logbuffer import descriptor as d
from driver.logbuffer.appender import TermAppender
from driver.logbuffer.frame import HeaderWriter
from driver.logbuffer.header import BufferClaim, Header
from driver.logbuffer.reader import ControlledAction, TermReader, controlled_read, read

TL = 64 * 1024


def _log_with(messages: list[bytes], initial_term_id: int = 3) -> tuple[MemoryLog, TermAppender, HeaderWriter]:
    log = MemoryLog(TL, initial_term_id=initial_term_id)
    header = HeaderWriter(d.default_frame_header(log.metadata))
    appender = TermAppender(log.terms[0], log.metadata, 0, log.term_views[0])
    for m in messages:
        appender.append_unfragmented(header, m, 0, len(m), None, initial_term_id)
    return log, appender, header


@settings(deadline=None)
@given(st.lists(st.binary(max_size=200), max_size=30), st.integers(min_value=1, max_value=40))
def test_read_delivers_payloads_and_headers(messages: list[bytes], limit: int) -> None:
    log, _, _ = _log_with(messages)
    header = Header(3, 16)
    got: list[tuple[bytes, int, int, int, int, int]] = []

    def handler(payload: memoryview, h: Header) -> None:
        got.append((bytes(payload), h.session_id, h.stream_id, h.term_id, h.term_offset, h.position))

    fragments, offset = read(log.terms[0], 0, handler, limit, header, None, log.term_views[0])
    n = min(limit, len(messages))
    assert fragments == n
    assert [g[0] for g in got] == messages[:n]
    end = 0
    for payload, session, stream, term_id, term_offset, position in got:
        assert (session, stream, term_id, term_offset) == (7, 1001, 3, end)
        end += (len(payload) + 63) & ~31
        assert position == end
    assert offset == end


def test_read_in_steps_resumes_at_offset() -> None:
    messages = [bytes([i]) * i for i in range(20)]
    log, _, _ = _log_with(messages)
    header = Header(3, 16)
    got: list[bytes] = []
    offset = 0
    for _ in range(10):
        _n, offset = TermReader.read(log.terms[0], offset, lambda p, h: got.append(bytes(p)), 3, header)
    assert got == messages


def test_read_stops_at_uncommitted_claim_and_skips_padding() -> None:
    log, appender, header = _log_with([b"a"])
    claim = BufferClaim()
    appender.claim(header, 4, claim, 3)
    appender.append_unfragmented(header, b"c", 0, 1, None, 3)
    got: list[bytes] = []
    reader_header = Header(3, 16)
    assert read(log.terms[0], 0, lambda p, h: got.append(bytes(p)), 10, reader_header) == (1, 64)
    claim.abort()
    assert read(log.terms[0], 64, lambda p, h: got.append(bytes(p)), 10, reader_header) == (1, 192)
    assert got == [b"a", b"c"]


def test_read_at_end_of_term_and_empty_term() -> None:
    log = MemoryLog(TL)
    header = Header(0, 16)
    assert read(log.terms[0], 0, lambda p, h: None, 10, header) == (0, 0)
    assert read(log.terms[0], TL, lambda p, h: None, 10, header) == (0, TL)


def test_payload_view_is_zero_copy_and_writable_view_of_term() -> None:
    log, _, _ = _log_with([b"hello"])
    views: list[memoryview] = []
    read(log.terms[0], 0, lambda p, h: views.append(p), 1, Header(3, 16), None, log.term_views[0])
    log.raw[32] = ord("j")
    assert bytes(views[0]) == b"jello"


def test_handler_error_with_error_handler_keeps_progress() -> None:
    log, _, _ = _log_with([b"1", b"2", b"3"])
    errors: list[Exception] = []
    got: list[bytes] = []

    def handler(payload: memoryview, _h: Header) -> None:
        if bytes(payload) == b"2":
            raise RuntimeError("boom")
        got.append(bytes(payload))

    fragments, offset = read(log.terms[0], 0, handler, 10, Header(3, 16), errors.append)
    assert (fragments, offset) == (1, 128)  # the failing fragment counts as consumed
    assert got == [b"1"]
    assert [str(e) for e in errors] == ["boom"]
    with pytest.raises(RuntimeError, match="boom"):
        read(log.terms[0], 64, handler, 10, Header(3, 16))


def test_header_buffer_switches_between_terms() -> None:
    log = MemoryLog(TL, initial_term_id=0)
    header = HeaderWriter(d.default_frame_header(log.metadata))
    for i in range(3):
        active_term_id = 0 if i == 0 else i - 3  # partitions 1 and 2 start with initial - 2 and - 1
        TermAppender(log.terms[i], log.metadata, i).append_unfragmented(header, bytes([i]), 0, 1, None, active_term_id)
    reader_header = Header(0, 16)
    got = []
    for i in range(3):
        read(log.terms[i], 0, lambda p, h: got.append((bytes(p), h.buffer)), 10, reader_header, None, log.term_views[i])
    assert [g[0] for g in got] == [b"\x00", b"\x01", b"\x02"]
    assert [g[1] for g in got] == log.terms


# --- controlled -----------------------------------------------------------------------------


def test_controlled_read_actions() -> None:
    messages = [bytes([i]) for i in range(6)]
    log, _, _ = _log_with(messages)
    header = Header(3, 16)
    actions = {
        b"\x00": ControlledAction.CONTINUE,
        b"\x01": ControlledAction.COMMIT,
        b"\x02": ControlledAction.BREAK,
        b"\x03": ControlledAction.ABORT,
    }
    seen: list[bytes] = []
    commits: list[int] = []

    def handler(payload: memoryview, _h: Header) -> ControlledAction:
        seen.append(bytes(payload))
        return actions.get(bytes(payload), ControlledAction.CONTINUE)

    assert controlled_read(log.terms[0], 0, handler, 10, header, commits.append) == (3, 192)
    assert commits == [128]
    # ABORT leaves the offset at the aborted fragment, which is redelivered.
    assert controlled_read(log.terms[0], 192, handler, 10, header, commits.append) == (0, 192)
    actions.pop(b"\x03")
    assert TermReader.controlled_read(log.terms[0], 192, handler, 2, header) == (2, 320)
    assert seen == [b"\x00", b"\x01", b"\x02", b"\x03", b"\x03", b"\x04"]


def test_controlled_read_skips_padding_and_reports_errors() -> None:
    log, appender, header = _log_with([b"a"])
    claim = BufferClaim()
    appender.claim(header, 1, claim, 3)
    claim.abort()
    appender.append_unfragmented(header, b"b", 0, 1, None, 3)
    errors: list[Exception] = []

    def handler(payload: memoryview, _h: Header) -> int:
        if bytes(payload) == b"b":
            raise ValueError("bad")
        return ControlledAction.CONTINUE

    assert controlled_read(log.terms[0], 0, handler, 10, Header(3, 16), None, errors.append) == (1, 192)
    assert len(errors) == 1
    with pytest.raises(ValueError, match="bad"):
        controlled_read(log.terms[0], 64, handler, 10, Header(3, 16))
