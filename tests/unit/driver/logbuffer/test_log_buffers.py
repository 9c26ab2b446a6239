from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from driver.errors import DriverConfigurationError, StorageSpaceError
from driver.logbuffer import descriptor as d
from driver.logbuffer import log_buffers as lb
from driver.logbuffer.log_buffers import LogBuffers

TL = 64 * 1024


def test_create_and_map_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "1.logbuffer"
    with LogBuffers.create(path, TL, 4096) as log:
        assert path.stat().st_size == d.compute_log_length(TL, 4096) == 3 * TL + 4096
        assert log.term_length == TL
        assert len(log.terms) == len(log.term_views) == 3
        assert all(t.capacity == TL for t in log.terms)
        assert all(len(v) == TL for v in log.term_views)
        assert log.metadata.capacity == 4096
        d.initialize_publication_metadata(
            log.metadata,
            session_id=1,
            stream_id=2,
            initial_term_id=3,
            mtu_length=1408,
            term_length=TL,
            page_size=4096,
            correlation_id=4,
        )
        log.terms[1].put_long(8, 0x1122334455)
        with LogBuffers.map(path) as mapped:
            assert mapped.term_length == TL
            assert mapped.terms[1].get_long(8) == 0x1122334455
            assert d.initial_term_id(mapped.metadata) == 3
            mapped.terms[2].put_int(0, 77)  # shared mapping: visible to the creator
        assert log.terms[2].get_int(0) == 77
        assert bytes(log.term_views[1][8:13]) == bytes.fromhex("5544332211")


def test_metadata_is_the_last_4096_bytes_with_large_pages(tmp_path: Path) -> None:
    path = tmp_path / "big-page.logbuffer"
    page = 1024 * 1024
    with LogBuffers.create(path, TL, page, sparse=True) as log:
        size = path.stat().st_size
        assert size == page
        d.set_correlation_id(log.metadata, 5)
    with open(path, "rb") as f:
        f.seek(size - 4096 + d.LOG_TERM_LENGTH_OFFSET)
        assert int.from_bytes(f.read(4), "little") == TL
    with LogBuffers.map(path) as mapped:
        assert d.correlation_id(mapped.metadata) == 5
        assert d.page_size(mapped.metadata) == page


def test_sparse_file_is_not_allocated(tmp_path: Path) -> None:
    path = tmp_path / "sparse.logbuffer"
    LogBuffers.create(path, 16 * 1024 * 1024, 4096, sparse=True).close()
    assert path.stat().st_blocks * 512 < 16 * 1024 * 1024
    dense = tmp_path / "dense.logbuffer"
    LogBuffers.create(dense, TL, 4096).close()
    assert dense.stat().st_blocks * 512 >= 3 * TL


def test_create_refuses_existing_file(tmp_path: Path) -> None:
    path = tmp_path / "x.logbuffer"
    LogBuffers.create(path, TL, 4096).close()
    with pytest.raises(FileExistsError):
        LogBuffers.create(path, TL, 4096)


def test_create_validates_lengths(tmp_path: Path) -> None:
    with pytest.raises(DriverConfigurationError, match="term_length"):
        LogBuffers.create(tmp_path / "a", 1000, 4096)
    with pytest.raises(DriverConfigurationError, match="page_size"):
        LogBuffers.create(tmp_path / "b", TL, 1000)
    assert not (tmp_path / "a").exists()


def test_insufficient_space(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lb, "_usable_space", lambda _d: 1000)
    with pytest.raises(StorageSpaceError, match="insufficient usable storage"):
        LogBuffers.create(tmp_path / "full.logbuffer", TL, 4096)
    assert not (tmp_path / "full.logbuffer").exists()


def test_allocation_failure_is_storage_space_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_space(_fd: int, _length: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(lb, "_fill_zeros", no_space)
    with pytest.raises(StorageSpaceError):
        LogBuffers.create(tmp_path / "nospc.logbuffer", TL, 4096)
    assert not (tmp_path / "nospc.logbuffer").exists()


def test_fill_zeros_fallback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def unsupported(_fd: int, _off: int, _len: int) -> None:
        raise OSError(95, "Operation not supported")

    monkeypatch.setattr(os, "posix_fallocate", unsupported)
    path = tmp_path / "fallback.logbuffer"
    LogBuffers.create(path, TL, 4096).close()
    assert path.stat().st_size == 3 * TL + 4096
    data = bytearray(path.read_bytes())
    meta = 3 * TL
    assert data[meta + d.LOG_TERM_LENGTH_OFFSET : meta + d.LOG_PAGE_SIZE_OFFSET + 4] == (
        TL.to_bytes(4, "little") + (4096).to_bytes(4, "little")
    )
    data[meta + d.LOG_TERM_LENGTH_OFFSET : meta + d.LOG_PAGE_SIZE_OFFSET + 4] = bytes(8)
    assert data == bytes(3 * TL + 4096)


def test_map_rejects_bad_files(tmp_path: Path) -> None:
    small = tmp_path / "small"
    small.write_bytes(b"\x00" * 100)
    with pytest.raises(DriverConfigurationError, match="log_length"):
        LogBuffers.map(small)
    zeros = tmp_path / "zeros"
    zeros.write_bytes(b"\x00" * 8192)
    with pytest.raises(DriverConfigurationError, match="term_length"):
        LogBuffers.map(zeros)
    truncated = tmp_path / "truncated"
    LogBuffers.create(truncated, TL, 4096).close()
    data = truncated.read_bytes()
    truncated.write_bytes(data[:TL] + data[-4096:])
    with pytest.raises(DriverConfigurationError, match="log_length"):
        LogBuffers.map(truncated)


def test_close_is_idempotent_and_survives_outstanding_slices(tmp_path: Path) -> None:
    log = LogBuffers.create(tmp_path / "c.logbuffer", TL, 4096)
    log.term_views[0][0:5] = b"hello"
    kept = log.term_views[0][0:5]
    log.close()
    log.close()
    assert log.is_closed
    assert bytes(kept) == b"hello"  # the mapping stays until the slice goes away
    with pytest.raises(ValueError, match="released"):
        log.terms[0].get_int(0)
    del kept
    gc.collect()


def test_usable_space_is_read_once_per_batch_of_logs_while_plenty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []
    plenty = 1 << 40

    def usable(directory: Path) -> int:
        reads.append(directory)
        return plenty

    monkeypatch.setattr(lb, "_usable_space", usable)
    for i in range(lb._SPACE_RECHECK_EVERY + 1):
        LogBuffers.create(tmp_path / f"{i}.logbuffer", TL, 4096, sparse=True).close()
    assert len(reads) == 2  # the first log, then one batch later
    plenty = 1000  # the file system filled up meanwhile (others wrote): noticed at the next read
    for i in range(lb._SPACE_RECHECK_EVERY - 1):  # the rest of the batch: taken from what was read
        LogBuffers.create(tmp_path / f"late-{i}.logbuffer", TL, 4096, sparse=True).close()
    with pytest.raises(StorageSpaceError, match="insufficient usable storage"):
        LogBuffers.create(tmp_path / "late-full.logbuffer", TL, 4096, sparse=True)
    assert len(reads) == 3


def test_usable_space_is_read_for_every_log_when_little_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[Path] = []

    def usable(directory: Path) -> int:
        reads.append(directory)
        return lb._SPACE_SLACK  # room, but under the slack once a log is taken from it

    monkeypatch.setattr(lb, "_usable_space", usable)
    for i in range(3):
        LogBuffers.create(tmp_path / f"{i}.logbuffer", TL, 4096, sparse=True).close()
    assert len(reads) == 3


def test_a_log_created_in_this_process_is_mapped_through_the_same_mapping(tmp_path: Path) -> None:
    path = tmp_path / "s.logbuffer"
    log = LogBuffers.create(path, TL, 4096)
    mapped = LogBuffers.map(path)
    assert mapped._mmap is log._mmap  # no second open and mmap of the file
    log.terms[0].put_int(0, 5)
    log.close()  # the creator goes first (a driver closing an image its client still reads)
    assert mapped.terms[0].get_int(0) == 5
    mapped.terms[0].put_int(4, 6)
    shared = mapped._mmap
    assert shared is not None
    assert not shared.closed
    mapped.close()
    assert shared.closed  # the last holder unmapped it

    again = LogBuffers.create(tmp_path / "t.logbuffer", TL, 4096)
    first = LogBuffers.map(again.path)
    first.close()  # a client goes first: the creator's mapping stays usable
    again.terms[1].put_int(0, 7)
    assert again.terms[1].get_int(0) == 7
    again.close()


def test_a_file_made_again_under_a_name_is_mapped_afresh(tmp_path: Path) -> None:
    path = tmp_path / "r.logbuffer"
    old = LogBuffers.create(path, TL, 4096)
    data = path.read_bytes()
    path.unlink()  # a driver started again on the same directory makes the same name anew
    path.write_bytes(data)
    fresh = LogBuffers.map(path)
    try:
        assert fresh._mmap is not old._mmap
        fresh.terms[0].put_int(0, 9)
        assert old.terms[0].get_int(0) == 0
    finally:
        fresh.close()
        old.close()


def test_a_bad_log_mapped_through_its_creators_mapping_leaves_that_mapping_open(tmp_path: Path) -> None:
    path = tmp_path / "b.logbuffer"
    log = LogBuffers.create(path, TL, 4096)
    log.metadata.put_int(d.LOG_TERM_LENGTH_OFFSET, 3)
    with pytest.raises(DriverConfigurationError, match="term_length"):
        LogBuffers.map(path)
    log.terms[0].put_int(0, 1)
    assert log.terms[0].get_int(0) == 1
    log.close()
