"""cnc.dat layout by generation, creation, readiness, mapping from another process, version checks."""

from __future__ import annotations

import multiprocessing
import os
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from driver.cnc import (
    CNC_FILE,
    END_OF_METADATA_OFFSET,
    CncFile,
    CncGeneration,
    compute_cnc_file_length,
    semantic_version,
    semantic_version_major,
    semantic_version_minor,
    semantic_version_patch,
    semantic_version_str,
)
from driver.errors import CncVersionError, DriverConfigurationError, DriverError, DriverTimeoutError

SMALL: dict[str, int] = {
    "to_driver_length": 1024 + 768,
    "to_clients_length": 1024 + 128,
    "counters_values_length": 4 * 128,
    "error_log_length": 1000,
    "client_liveness_timeout_ns": 5_000_000_000,
    "start_timestamp_ms": 1_700_000_000_123,
    "pid": 4242,
}


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps = 0

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds


def create(directory: Path, **changes: Any) -> CncFile:
    args: dict[str, Any] = {**SMALL, **changes}
    return CncFile.create(directory, **args)


# ------------------------------------------------------------------------------------------- layout


def test_v15_header_layout_at_exact_offsets(tmp_path: Path) -> None:
    with create(tmp_path) as cnc:
        raw = (tmp_path / CNC_FILE).read_bytes()
        assert struct.unpack_from("<iiiiii", raw, 0) == (0, 1792, 1152, 2048, 512, 1000)
        assert struct.unpack_from("<qqq", raw, 24) == (5_000_000_000, 1_700_000_000_123, 4242)
        assert raw[48:END_OF_METADATA_OFFSET] == bytes(80)  # no page size field in 1.15
        total = 128 + 1792 + 1152 + 2048 + 512 + 1000
        assert len(raw) == compute_cnc_file_length(total - 128, 4096) == 8192
        assert cnc.version == 0
        assert cnc.file_page_size is None
        assert cnc.generation is CncGeneration.V15


def test_buffers_sit_back_to_back_after_the_header(tmp_path: Path) -> None:
    with create(tmp_path) as cnc:
        buffers = [
            cnc.to_driver_buffer,
            cnc.to_clients_buffer,
            cnc.counters_metadata_buffer,
            cnc.counters_values_buffer,
            cnc.error_log_buffer,
        ]
        assert [b.capacity for b in buffers] == [1792, 1152, 2048, 512, 1000]
        for index, buffer in enumerate(buffers):
            buffer.put_int(0, 0x5A5A0000 + index)
        raw = (tmp_path / CNC_FILE).read_bytes()
        offset = END_OF_METADATA_OFFSET
        for index, buffer in enumerate(buffers):
            assert struct.unpack_from("<i", raw, offset)[0] == 0x5A5A0000 + index
            offset += buffer.capacity


def test_signal_ready_stores_the_generation_version(tmp_path: Path) -> None:
    with create(tmp_path) as cnc:
        cnc.signal_ready()
        assert cnc.version == 15
        assert struct.unpack_from("<i", (tmp_path / CNC_FILE).read_bytes(), 0)[0] == 15


def test_current_generation_writes_512_and_the_page_size(tmp_path: Path) -> None:
    with create(tmp_path, generation=CncGeneration.CURRENT, file_page_size=8192) as cnc:
        cnc.signal_ready()
        raw = (tmp_path / CNC_FILE).read_bytes()
        assert struct.unpack_from("<i", raw, 0)[0] == 512
        assert struct.unpack_from("<i", raw, 48)[0] == 8192
        assert len(raw) % 8192 == 0
        assert cnc.file_page_size == 8192
        assert cnc.to_driver_buffer.capacity == 1792  # buffers still start at 128


def test_generation_constants() -> None:
    assert CncGeneration.V15.version == 15
    assert CncGeneration.CURRENT.version == semantic_version(0, 2, 0) == 512
    assert CncGeneration.V15.metadata_length == 48
    assert CncGeneration.CURRENT.metadata_length == 52
    assert CncGeneration.V15.accepts(15)
    assert not CncGeneration.V15.accepts(16)
    assert not CncGeneration.V15.accepts(512)
    assert CncGeneration.CURRENT.accepts(512)
    assert CncGeneration.CURRENT.accepts(semantic_version(0, 3, 1))
    assert not CncGeneration.CURRENT.accepts(semantic_version(1, 0, 0))
    assert CncGeneration.parse("15") is CncGeneration.V15
    assert CncGeneration.parse(" Current ") is CncGeneration.CURRENT
    with pytest.raises(DriverConfigurationError, match=r"aeron\.cnc\.version"):
        CncGeneration.parse("14")


@given(st.integers(0, 255), st.integers(0, 255), st.integers(0, 255))
def test_semantic_version_round_trip(major: int, minor: int, patch: int) -> None:
    version = semantic_version(major, minor, patch)
    assert (semantic_version_major(version), semantic_version_minor(version), semantic_version_patch(version)) == (
        major,
        minor,
        patch,
    )
    assert semantic_version_str(version) == f"{major}.{minor}.{patch}"


@given(st.integers(1, 1 << 24), st.sampled_from([4096, 8192, 1 << 16, 1 << 21]))
def test_file_length_is_page_aligned_and_covers_everything(total: int, page: int) -> None:
    length = compute_cnc_file_length(total, page)
    assert length % page == 0
    assert 128 + total <= length < 128 + total + page


# ------------------------------------------------------------------------------------------- create validation


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"to_driver_length": 1000 + 768}, "to_driver_length"),
        ({"to_driver_length": 768}, "to_driver_length"),
        ({"to_clients_length": 1024}, "to_clients_length"),
        ({"counters_values_length": 100}, "counters_values_length"),
        ({"counters_values_length": 0}, "counters_values_length"),
        ({"error_log_length": 0}, "error_log_length"),
        ({"file_page_size": 1000}, "file_page_size"),
        ({"file_page_size": 2048}, "file_page_size"),
        ({"client_liveness_timeout_ns": 0}, "client_liveness_timeout_ns"),
    ],
)
def test_create_rejects_bad_lengths_naming_the_field(tmp_path: Path, changes: dict[str, int], field: str) -> None:
    with pytest.raises(DriverConfigurationError) as info:
        create(tmp_path, **changes)
    assert info.value.field == field
    assert not (tmp_path / CNC_FILE).exists()


def test_create_makes_the_directory_and_replaces_an_old_file(tmp_path: Path) -> None:
    directory = tmp_path / "a" / "b"
    old = create(directory, pid=1)
    old.signal_ready()
    new = create(directory, pid=2)
    try:
        assert new.version == 0
        assert new.pid == 2
        assert old.version == 15  # the old mapping keeps the unlinked file
        assert old.pid == 1
    finally:
        old.close()
        new.close()


# ------------------------------------------------------------------------------------------- mapping


def test_map_existing_sees_the_header_and_shares_memory(tmp_path: Path) -> None:
    with create(tmp_path, generation=CncGeneration.CURRENT) as driver:
        driver.signal_ready()
        with CncFile.map_existing(tmp_path, timeout_s=1.0) as client:
            assert client.generation is CncGeneration.CURRENT
            assert client.version == 512
            assert client.client_liveness_timeout_ns == 5_000_000_000
            assert client.start_timestamp_ms == 1_700_000_000_123
            assert client.pid == 4242
            assert client.file_page_size == 4096
            assert client.file_length == driver.file_length
            client.to_driver_buffer.put_long_ordered(8, 77)
            assert driver.to_driver_buffer.get_long_volatile(8) == 77
            driver.error_log_buffer.put_int(4, 99)
            assert client.error_log_buffer.get_int(4) == 99


def test_map_existing_times_out_without_a_file(tmp_path: Path) -> None:
    fake = FakeClock()
    with pytest.raises(DriverTimeoutError, match="did not appear"):
        CncFile.map_existing(tmp_path, timeout_s=0.5, clock=fake.clock, sleep=fake.sleep)
    assert 0 < fake.sleeps < 1000


def test_map_existing_times_out_while_the_version_is_zero(tmp_path: Path) -> None:
    fake = FakeClock()
    with create(tmp_path), pytest.raises(DriverTimeoutError, match="did not mark it ready"):
        CncFile.map_existing(tmp_path, timeout_s=0.05, clock=fake.clock, sleep=fake.sleep)


def test_map_existing_rejects_an_unknown_version_naming_both(tmp_path: Path) -> None:
    with create(tmp_path) as cnc:
        cnc.metadata_buffer.put_int_volatile(0, 16)
        with pytest.raises(CncVersionError, match=r"version 16 \(0\.0\.16\) is not supported.*15.*512"):
            CncFile.map_existing(tmp_path, timeout_s=0.1)


def test_map_existing_honours_the_supported_generations(tmp_path: Path) -> None:
    with create(tmp_path, generation=CncGeneration.CURRENT) as cnc:
        cnc.signal_ready()
        with pytest.raises(CncVersionError, match=r"version 512 .*supported: 15 \(Aeron 1\.15\.x\)$"):
            CncFile.map_existing(tmp_path, timeout_s=0.1, supported=[CncGeneration.V15])


def test_map_existing_rejects_a_header_larger_than_the_file(tmp_path: Path) -> None:
    with create(tmp_path) as cnc:
        cnc.metadata_buffer.put_int(20, 1 << 30)  # error log length far past the end
        cnc.signal_ready()
        with pytest.raises(CncVersionError, match="describes buffers"):
            CncFile.map_existing(tmp_path, timeout_s=0.1)


def test_close_is_idempotent_and_guards_access(tmp_path: Path) -> None:
    cnc = create(tmp_path)
    cnc.close()
    cnc.close()
    assert cnc.closed
    with pytest.raises(DriverError, match="closed"):
        _ = cnc.to_driver_buffer
    with pytest.raises(DriverError, match="closed"):
        cnc.signal_ready()
    assert "closed" in repr(cnc)


# ------------------------------------------------------------------------------------------- two processes


def _client_process(directory: str, results: Any) -> None:
    try:
        with CncFile.map_existing(Path(directory), timeout_s=20.0) as cnc:
            results.put(("mapped", cnc.version, cnc.pid, cnc.client_liveness_timeout_ns, cnc.to_driver_buffer.capacity))
            cnc.error_log_buffer.put_long_ordered(0, 0x1234_5678_9ABC)
    except BaseException as exc:
        results.put(("error", repr(exc)))


@pytest.mark.process
def test_a_client_process_waits_for_readiness_then_maps(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    child = context.Process(target=_client_process, args=(str(tmp_path), results))
    child.start()
    try:
        with create(tmp_path, pid=os.getpid()) as cnc:
            cnc.signal_ready()
            outcome = results.get(timeout=30)
            assert outcome == ("mapped", 15, os.getpid(), 5_000_000_000, 1792), outcome
            child.join(timeout=30)
            assert child.exitcode == 0
            assert cnc.error_log_buffer.get_long_volatile(0) == 0x1234_5678_9ABC
    finally:
        if child.is_alive():
            child.kill()
            child.join(timeout=10)
