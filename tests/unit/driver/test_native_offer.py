"""The native single-message offer (``PublicationWriter``) against the Python path it stands in for,
and the subscriber's native read loop.

Every test maps real log files (no driver). The reference is the log appender's
``offer`` (``driver.logbuffer.appender``), the whole offer in Python: the same
operations through ``offer`` and through it must give the same results and
byte-identical log files, whichever of them (native, or native handing over to
Python) did the work.
"""

from __future__ import annotations

import array
import random
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from driver.client import (
    ADMIN_ACTION,
    BACK_PRESSURED,
    CLOSED,
    MAX_POSITION_EXCEEDED,
    NOT_CONNECTED,
    ConcurrentPublication,
    ExclusivePublication,
    Header,
)
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.logbuffer._frames import PublicationWriter
from driver.logbuffer.descriptor import (
    LOG_ACTIVE_TERM_COUNT_OFFSET,
    set_is_connected,
)
from driver.logbuffer.reader import read
from support.publication_logs import INITIAL_TERM_ID, TERM, Log

MAX_PAYLOAD = 1408 - 32
PUBLICATIONS = [ConcurrentPublication, ExclusivePublication]


@pytest.fixture
def log_dir(aeron_dir: Path) -> Path:
    aeron_dir.mkdir(parents=True)
    return aeron_dir


@pytest.fixture
def logs(log_dir: Path) -> Iterator[Callable[..., Log]]:
    made: list[Log] = []

    def make(name: str = "pub", **kwargs: Any) -> Log:
        log = Log(log_dir / f"{name}-{len(made)}.logbuffer", **kwargs)
        made.append(log)
        return log

    yield make
    for log in made:
        log.close()


def _python(publication: Any) -> Callable[..., int]:
    """``offer`` without the native writer: the log appender's whole offer in Python."""

    def offer(buffer: Any, offset: int = 0, length: int | None = None, reserved_value_supplier: Any = None) -> int:
        result: int = publication._appender.offer(buffer, offset, length, reserved_value_supplier)
        return result

    return offer


def _same(native: object, python: object) -> None:
    assert native == python
    assert type(native) is type(python)


def _reserved(term: memoryview, frame_offset: int, frame_length: int) -> int:
    return frame_offset * 1_000_003 + frame_length


# ------------------------------------------------------------------ byte-identical to the Python path


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_random_offers_match_the_python_path_byte_for_byte(logs: Callable[..., Log], cls: Any) -> None:
    native_log, python_log = logs("native"), logs("python")
    native_log.connect()
    python_log.connect()
    native, python = native_log.publication(cls), python_log.publication(cls)
    python_offer = _python(python)
    rng = random.Random(1234)
    rotations = 0
    for i in range(3000):
        size = rng.choice([0, 1, 31, 32, 33, rng.randrange(0, MAX_PAYLOAD + 1), MAX_PAYLOAD])
        if i % 97 == 0:
            size = MAX_PAYLOAD + rng.randrange(1, 3000)  # fragmented: the Python path on both sides
        data = bytes(rng.getrandbits(8) for _ in range(size + 8))
        kind = i % 4
        message: Any = [data, bytearray(data), memoryview(data), memoryview(bytearray(data))][kind]
        offset = rng.randrange(0, 8)
        supplier = _reserved if i % 41 == 0 else None
        args: tuple[Any, ...] = (message, offset, size) if i % 3 else (message[offset:],)
        while True:
            result = native.offer(*args, reserved_value_supplier=supplier)
            _same(result, python_offer(*args, reserved_value_supplier=supplier))
            if result != ADMIN_ACTION:
                break
            rotations += 1
        assert result > 0
        assert native.position == python.position == result
    assert rotations >= 9  # all three partitions used three times over
    assert native_log.snapshot() == python_log.snapshot()


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_term_end_pads_and_rotates_through_every_partition(logs: Callable[..., Log], cls: Any) -> None:
    native_log, python_log = logs("native"), logs("python")
    for log in (native_log, python_log):
        log.connect()
    native, python = native_log.publication(cls), python_log.publication(cls)
    python_offer = _python(python)
    image = native_log.image()
    received: list[tuple[bytes, int]] = []

    def handler(payload: memoryview, header: Header) -> None:
        received.append((bytes(payload), header.term_id))

    message = bytes(range(200))  # 232-byte frames, 256 aligned: 256 * 256 fills a term exactly
    odd = bytes(1000)  # 1032 -> 1056: moves the tail off the 256 grid so each term ends in padding
    sent: list[tuple[bytes, int]] = []
    results: list[int] = []
    for i in range(7 * TERM // 256):
        payload = odd if i % 50 == 0 else message
        while (result := native.offer(payload)) == ADMIN_ACTION:
            _same(python_offer(payload), ADMIN_ACTION)
            results.append(result)
        _same(python_offer(payload), result)
        assert result > 0
        sent.append((payload, result))
        results.append(result)
        if i % 64 == 0:
            image.poll(handler, 1000)
            native_log.clean_to(image.position)
            python_log.clean_to(image.position)
    while image.poll(handler, 1000):
        pass
    assert [payload for payload, _ in received] == [payload for payload, _ in sent]
    assert image.position == native.position == sent[-1][1]
    assert results.count(ADMIN_ACTION) >= 6
    assert {term_id for _, term_id in received} >= {0x7FFF_FFFE, 0x7FFF_FFFF, -0x8000_0000, -0x7FFF_FFFF}
    assert native_log.snapshot() == python_log.snapshot()


# ------------------------------------------------------------------ each case handed to Python


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_not_connected_and_back_pressured_write_nothing(logs: Callable[..., Log], cls: Any) -> None:
    log = logs()
    publication = log.publication(cls)
    before = log.snapshot()
    _same(publication.offer(b"x"), NOT_CONNECTED)
    assert log.snapshot() == before
    set_is_connected(log.buffers.metadata, True)
    before = log.snapshot()
    _same(publication.offer(b"x"), BACK_PRESSURED)
    assert log.snapshot() == before
    log.limit.put_long(0, 64)
    assert publication.offer(b"x") == 64
    _same(publication.offer(b"x", 0, 1), BACK_PRESSURED)
    _same(publication.offer(b"x", 5), BACK_PRESSURED)  # a bad range is not looked at when back pressured
    assert publication.position == 64


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_closed(logs: Callable[..., Log], cls: Any) -> None:
    log = logs()
    log.connect()
    publication = log.publication(cls)
    assert publication.offer(b"abc") == 64
    publication._internal_close()
    before = log.snapshot()
    _same(publication.offer(b"abc"), CLOSED)
    _same(publication.offer(b"abc", reserved_value_supplier=_reserved), CLOSED)
    assert log.snapshot() == before


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_max_position_exceeded(logs: Callable[..., Log], cls: Any) -> None:
    last_term_id = (INITIAL_TERM_ID + (1 << 31) - 1 + (1 << 31)) % (1 << 32) - (1 << 31)
    native_log = logs("native", term_id=last_term_id, term_offset=TERM - 128)
    python_log = logs("python", term_id=last_term_id, term_offset=TERM - 128)
    for log in (native_log, python_log):
        log.connect(1 << 62)
    native, python = native_log.publication(cls), python_log.publication(cls)
    python_offer = _python(python)
    assert native.position == native.max_possible_position - 128
    results = []
    for payload in (bytes(16), bytes(100), bytes(100), bytes(16), bytes(16)):
        results.append(native.offer(payload))
        _same(results[-1], python_offer(payload))
    assert results[:3] == [native.max_possible_position - 64, MAX_POSITION_EXCEEDED, MAX_POSITION_EXCEEDED]
    assert native_log.snapshot() == python_log.snapshot()


def test_concurrent_rotation_under_way_is_admin_action(logs: Callable[..., Log]) -> None:
    log = logs()
    log.connect()
    publication = log.publication(ConcurrentPublication)
    log.buffers.metadata.put_int(LOG_ACTIVE_TERM_COUNT_OFFSET, 1)  # count moved, next tail not yet stamped
    before = log.snapshot()
    _same(publication.offer(b"abc"), ADMIN_ACTION)
    assert log.snapshot() == before


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_fragmented_and_reserved_value_go_to_python(logs: Callable[..., Log], cls: Any) -> None:
    log = logs()
    log.connect()
    publication = log.publication(cls)
    image = log.image()
    frames: list[tuple[int, int, int]] = []
    big = bytes(range(256)) * 12  # 3072 bytes: three fragments
    assert publication.offer(big) > 0
    assert publication.offer(b"r" * 40, reserved_value_supplier=_reserved) > 0
    assert publication.offer(b"plain") > 0
    assert image.poll(lambda p, h: frames.append((len(p), h.flags, h.reserved_value)), 10) == 5
    lengths = [length for length, _, _ in frames]
    assert lengths == [MAX_PAYLOAD, MAX_PAYLOAD, 3072 - 2 * MAX_PAYLOAD, 40, 5]
    assert [flags for _, flags, _ in frames] == [0x80, 0x00, 0x40, 0xC0, 0xC0]
    assert frames[3][2] == _reserved(memoryview(b""), _frame_offset(lengths[:3]), 72)


def _frame_offset(previous_payloads: list[int]) -> int:
    return sum((length + 32 + 31) & -32 for length in previous_payloads)


# ------------------------------------------------------------------ buffers and ranges


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_buffer_kinds_and_offsets(logs: Callable[..., Log], cls: Any) -> None:
    log = logs()
    log.connect()
    publication = log.publication(cls)
    image = log.image()
    data = bytes(range(48))
    ints = array.array("i", range(12))  # 48 bytes, item size 4: offsets and lengths stay in bytes
    cases: list[tuple[tuple[Any, ...], bytes]] = [
        ((data,), data),
        ((data, 5), data[5:]),
        ((data, 5, 10), data[5:15]),
        ((bytearray(data), 0, 48), data),
        ((memoryview(data)[8:20],), data[8:20]),
        ((memoryview(bytearray(data)), 47, 1), data[47:]),
        ((ints, 4, 8), ints.tobytes()[4:12]),
        ((memoryview(ints),), ints.tobytes()),
        ((data, 48), b""),
        ((b"",), b""),
    ]
    for args, _ in cases:
        assert publication.offer(*args) > 0
    got: list[bytes] = []
    assert image.poll(lambda p, h: got.append(bytes(p)), 100) == len(cases)
    assert got == [expected for _, expected in cases]


@pytest.mark.parametrize("cls", PUBLICATIONS)
@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((b"abc", 5), "invalid length: -2"),
        ((b"abc", 0, -1), "invalid length: -1"),
        ((b"abc", -1), "source range -1"),
        ((b"abc", 0, 5), "source range 0\\+5 outside 3"),
        ((b"abc", 2, 2), "source range 2\\+2"),
        ((bytearray(b"abc"), -2, 2), "source range -2\\+2"),
        ((memoryview(b"abc"), 1, 3), "source range 1\\+3"),
        ((b"abc", 1 << 62, 1), "source range"),
        ((bytes(5000), 4000, 1500), "source range 4000\\+1500"),  # fragmented
    ],
)
def test_bad_ranges_raise_before_anything_is_claimed(
    logs: Callable[..., Log], cls: Any, args: tuple[Any, ...], match: str
) -> None:
    log = logs()
    log.connect()
    publication = log.publication(cls)
    assert publication.offer(b"first") == 64
    before = log.snapshot()
    with pytest.raises(ValueError, match=match):
        publication.offer(*args)
    with pytest.raises(ValueError, match=match):
        _python(publication)(*args)
    assert log.snapshot() == before
    assert publication.position == 64
    assert publication.offer(b"next") == 128


@pytest.mark.parametrize("cls", PUBLICATIONS)
def test_unreadable_buffers_fail_as_before_and_claim_nothing(logs: Callable[..., Log], cls: Any) -> None:
    log = logs()
    log.connect()
    publication = log.publication(cls)
    before = log.snapshot()
    with pytest.raises(BufferError, match="not C-contiguous"):
        publication.offer(memoryview(b"abcdef")[::2])
    with pytest.raises(TypeError):
        publication.offer("text")
    with pytest.raises(TypeError):
        publication.offer(b"abc", "1")
    assert log.snapshot() == before
    assert publication.position == 0


# ------------------------------------------------------------------ threads


def test_threads_on_one_concurrent_log_keep_frames_whole(log_dir: Path) -> None:
    # Terms big enough that no partition is reused (the reader runs after the writers) and
    # enough messages that the threads take turns many times (the GIL switches about every ms here).
    log = Log(log_dir / "threads.logbuffer", term_length=4 * 1024 * 1024)
    try:
        log.connect()
        per_thread = 20_000
        errors: list[BaseException] = []
        deadline = time.monotonic() + 30

        start = threading.Barrier(3, timeout=30)

        def write(publication: Any, offer: Callable[..., int], tag: int) -> None:
            try:
                start.wait()
                for seq in range(per_thread):
                    message = bytes([tag]) * 4 + seq.to_bytes(4, "little") + bytes([tag]) * (seq % 60)
                    while offer(message) < 0:
                        if time.monotonic() > deadline:
                            raise TimeoutError("offer kept failing")
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        native, python = log.publication(ConcurrentPublication), log.publication(ConcurrentPublication)
        threads = [
            threading.Thread(target=write, args=(native, native.offer, 1)),
            threading.Thread(target=write, args=(python, _python(python), 2)),
            threading.Thread(target=write, args=(native, native.offer, 3)),
        ]
        interval = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)  # switch threads between (not within) native calls as often as possible
        try:
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
        finally:
            sys.setswitchinterval(interval)
        assert not errors
        assert not any(thread.is_alive() for thread in threads)

        image = log.image()
        seen: dict[int, list[int]] = {1: [], 2: [], 3: []}

        def handler(payload: memoryview, header: Header) -> None:
            data = bytes(payload)
            tag, seq = data[0], int.from_bytes(data[4:8], "little")
            assert data == bytes([tag]) * 4 + seq.to_bytes(4, "little") + bytes([tag]) * (seq % 60)
            seen[tag].append(seq)

        for _ in range(1000):
            if not image.poll(handler, 1000):
                break
        assert seen == {tag: list(range(per_thread)) for tag in seen}
        assert image.position == native.position
    finally:
        log.close()


# ------------------------------------------------------------------ the writer itself


def test_writer_refuses_to_write_once_the_log_is_unmapped(logs: Callable[..., Log]) -> None:
    log = logs()
    log.connect()
    publication = log.publication(ConcurrentPublication)
    writer: PublicationWriter = publication._appender.native
    assert writer.offer(b"abc") == 64
    log.buffers.close()
    assert writer.offer(b"abc") == 0
    assert writer.offer(b"abc", 0, 3) == 0


def test_writer_state_is_range_checked(logs: Callable[..., Log]) -> None:
    log = logs()
    writer: PublicationWriter = log.publication(ExclusivePublication)._appender.native
    assert writer.term_length == TERM
    for name, bad in (("active_index", 3), ("active_index", -1), ("term_offset", TERM + 1), ("term_offset", -32)):
        with pytest.raises(ValueError, match=name):
            setattr(writer, name, bad)
    with pytest.raises(ValueError, match="term_id"):
        writer.term_id = 1 << 31
    with pytest.raises(AttributeError):
        del writer.term_offset
    writer.term_offset = TERM
    assert writer.term_offset == TERM


def test_writer_arguments(logs: Callable[..., Log]) -> None:
    log = logs()
    terms = tuple(log.buffers.terms)
    args: list[Any] = [log.limit, log.buffers.metadata, terms, INITIAL_TERM_ID, MAX_PAYLOAD, 0, 0, 0, False]
    PublicationWriter(*args)
    with pytest.raises(ValueError, match="3 AtomicBuffers"):
        PublicationWriter(*[*args[:2], terms[:2], *args[3:]])
    with pytest.raises(TypeError):
        PublicationWriter(*[*args[:2], (terms[0], terms[1], b"x"), *args[3:]])
    with pytest.raises(ValueError, match="one length"):
        PublicationWriter(*[*args[:2], (terms[0], terms[1], AtomicBuffer(bytearray(TERM // 2))), *args[3:]])
    with pytest.raises(ValueError, match="limit and metadata"):
        PublicationWriter(*[AtomicBuffer(bytearray(4)), *args[1:]])
    writer = PublicationWriter(*args)
    with pytest.raises(TypeError):
        writer.offer()  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        writer.offer(b"a", 0, 1, 2)  # type: ignore[call-arg]
    unset = PublicationWriter.__new__(PublicationWriter)
    assert unset.offer(b"abc") == 0


# ------------------------------------------------------------------ the subscriber's native loop (reader.read)


def _three_frames(logs: Callable[..., Log]) -> Log:
    log = logs()
    log.connect()
    publication = log.publication(ExclusivePublication)
    for message in (b"one", b"two", b"three"):
        assert publication.offer(message) > 0
    return log


def test_read_stops_cleanly_when_a_handler_closes_the_log(logs: Callable[..., Log]) -> None:
    log = _three_frames(logs)
    term, view = log.reader.terms[0], log.reader.term_views[0]
    got: list[bytes] = []
    errors: list[Exception] = []

    def closing(payload: memoryview, header: Header) -> None:
        got.append(bytes(payload))
        log.reader.close()

    assert read(term, 0, closing, 10, Header(INITIAL_TERM_ID, 16), errors.append, view) == (1, 64)
    assert got == [b"one"]
    assert [str(error) for error in errors] == ["AtomicBuffer is released"]
    assert read(term, 64, closing, 10, Header(INITIAL_TERM_ID, 16), None, view) == (0, 64)  # capacity now 0


def test_read_errors_go_to_the_error_handler_or_propagate(logs: Callable[..., Log]) -> None:
    log = _three_frames(logs)
    term, view = log.reader.terms[0], log.reader.term_views[0]
    errors: list[Exception] = []

    def failing(payload: memoryview, header: Header) -> None:
        if bytes(payload) == b"two":
            raise RuntimeError("boom")

    assert read(term, 0, failing, 10, Header(INITIAL_TERM_ID, 16), errors.append, view) == (1, 128)
    assert [str(error) for error in errors] == ["boom"]
    assert errors[0].__traceback__ is not None
    with pytest.raises(RuntimeError, match="boom"):
        read(term, 64, failing, 10, Header(INITIAL_TERM_ID, 16), None, view)

    def interrupted(payload: memoryview, header: Header) -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):  # not an Exception: never handed to the error handler
        read(term, 0, interrupted, 10, Header(INITIAL_TERM_ID, 16), errors.append, view)
    assert len(errors) == 1
    with pytest.raises(ValueError, match="aligned"):
        read(term, 4, failing, 10, Header(INITIAL_TERM_ID, 16), None, view)
    assert read(term, 4, failing, 10, Header(INITIAL_TERM_ID, 16), errors.append, view) == (0, 4)
    assert read(term, TERM, failing, 10, Header(INITIAL_TERM_ID, 16), None, view) == (0, TERM)
