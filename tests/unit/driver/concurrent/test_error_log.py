from __future__ import annotations

import struct
import threading

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.error_log import (
    ENCODED_ERROR_OFFSET,
    FIRST_OBSERVATION_TIMESTAMP_OFFSET,
    LAST_OBSERVATION_TIMESTAMP_OFFSET,
    OBSERVATION_COUNT_OFFSET,
    DistinctErrorLog,
    ErrorObservation,
    encode_error,
    has_errors,
    read_error_log,
)


class FakeClock:
    def __init__(self) -> None:
        self.now = 100

    def __call__(self) -> int:
        return self.now


def raise_here(message: str) -> BaseException:
    try:
        raise RuntimeError(message)
    except RuntimeError as exc:
        return exc


def test_layout_and_repeat() -> None:
    raw = bytearray(4096)
    buf = AtomicBuffer(raw)
    clock = FakeClock()
    log = DistinctErrorLog(buf, clock)
    assert not has_errors(buf)
    assert log.record("first problem")
    clock.now = 150
    assert log.record("first problem")
    length = ENCODED_ERROR_OFFSET + len("first problem")
    assert struct.unpack_from("<iiqq", raw, 0) == (length, 2, 150, 100)
    assert (OBSERVATION_COUNT_OFFSET, LAST_OBSERVATION_TIMESTAMP_OFFSET) == (4, 8)
    assert (FIRST_OBSERVATION_TIMESTAMP_OFFSET, ENCODED_ERROR_OFFSET) == (16, 24)
    assert bytes(raw[24:length]) == b"first problem"
    assert has_errors(buf)

    clock.now = 200
    assert log.record("second")
    second = (length + 7) & -8
    assert struct.unpack_from("<iiqq", raw, second) == (24 + 6, 1, 200, 200)
    assert read_error_log(buf) == [
        ErrorObservation(2, 100, 150, "first problem"),
        ErrorObservation(1, 200, 200, "second"),
    ]
    assert read_error_log(buf, since_ms=160) == [ErrorObservation(1, 200, 200, "second")]


def test_exception_text_is_traceback_and_deduped() -> None:
    buf = AtomicBuffer(bytearray(1 << 16))
    log = DistinctErrorLog(buf, FakeClock())
    errors = [raise_here("bad thing") for _ in range(3)]
    for error in errors:
        assert log.record(error)
    log.record(raise_here("other thing"))
    observations = read_error_log(buf)
    assert [o.observation_count for o in observations] == [3, 1]
    assert observations[0].text.startswith("Traceback (most recent call last):")
    assert "RuntimeError: bad thing" in observations[0].text
    assert observations[0].text == encode_error(errors[0])
    assert "raise_here" in observations[0].text


def test_unicode_text() -> None:
    buf = AtomicBuffer(bytearray(256))
    log = DistinctErrorLog(buf, FakeClock())
    assert log.record("caf\u00e9 \u2603")
    assert read_error_log(buf)[0].text == "caf\u00e9 \u2603"


def test_full_log_drops_new_errors_but_counts_known_ones() -> None:
    buf = AtomicBuffer(bytearray(64))
    log = DistinctErrorLog(buf, FakeClock())
    assert log.record("a" * 30)  # 54 bytes -> next at 56
    assert not log.record("bb")  # 26 bytes do not fit in the 8 left
    assert log.record("a" * 30)
    assert read_error_log(buf) == [ErrorObservation(2, 100, 100, "a" * 30)]


def test_threads_record_concurrently() -> None:
    buf = AtomicBuffer(bytearray(1 << 16))
    log = DistinctErrorLog(buf, FakeClock())
    barrier = threading.Barrier(4)

    def worker(n: int) -> None:
        barrier.wait(timeout=10)
        for i in range(500):
            log.record(f"shared {i % 5}")
            log.record(f"own {n}")

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    counts = {o.text: o.observation_count for o in read_error_log(buf)}
    assert counts == {**{f"shared {i}": 400 for i in range(5)}, **{f"own {n}": 500 for n in range(4)}}


def test_reader_stops_at_garbage() -> None:
    raw = bytearray(128)
    struct.pack_into("<i", raw, 0, 10_000)
    assert read_error_log(AtomicBuffer(raw)) == []
