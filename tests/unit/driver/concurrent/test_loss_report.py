"""The loss report: Aeron 1.15.1's byte layout, writer/reader round trips, full and damaged reports."""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.loss_report import (
    CHANNEL_OFFSET,
    DEFAULT_LOSS_REPORT_LENGTH,
    ENTRY_ALIGNMENT,
    LOSS_REPORT_FILE,
    LossEntry,
    LossReport,
    LossReportFile,
    read_loss_report,
)
from driver.errors import DriverConfigurationError


def test_entry_is_laid_out_as_aeron_1_15_1() -> None:
    raw = bytearray(1024)
    report = LossReport(AtomicBuffer(raw))
    entry = report.create_entry(96, 1_000, 0x11223344, 10, "aeron:udp?endpoint=a:1", "/127.0.0.1:5")
    assert entry is not None
    assert entry.offset == 0
    count, total, first, last, session, stream = struct.unpack_from("<qqqqii", raw, 0)
    assert (count, total, first, last, session, stream) == (1, 96, 1_000, 1_000, 0x11223344, 10)
    channel = b"aeron:udp?endpoint=a:1"
    assert struct.unpack_from("<i", raw, CHANNEL_OFFSET)[0] == len(channel)
    assert raw[44 : 44 + len(channel)] == channel
    source_at = 44 + len(channel)  # right after the channel: 1.15.1 does not align the source
    assert struct.unpack_from("<i", raw, source_at)[0] == len("/127.0.0.1:5")
    assert raw[source_at + 4 : source_at + 4 + 12] == b"/127.0.0.1:5"
    second = report.create_entry(32, 2_000, 1, 2, "c", "s")
    assert second is not None
    assert second.offset == ENTRY_ALIGNMENT * -(-(CHANNEL_OFFSET + 8 + len(channel) + 12) // ENTRY_ALIGNMENT)


def test_record_observation_accumulates() -> None:
    buffer = AtomicBuffer(bytearray(4096))
    report = LossReport(buffer)
    entry = report.create_entry(10, 100, 1, 2, "ch", "src")
    assert entry is not None
    report.record_observation(entry, 20, 150)
    report.record_observation(entry, 30, 200)
    assert read_loss_report(buffer) == [LossEntry(3, 60, 100, 200, 1, 2, "ch", "src")]


_text = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=120)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 1 << 40),
            st.integers(0, 1 << 45),
            st.integers(-(1 << 31), (1 << 31) - 1),
            st.integers(-(1 << 31), (1 << 31) - 1),
            _text,
            _text,
        ),
        max_size=12,
    )
)
def test_round_trip(rows: list[tuple[int, int, int, int, str, str]]) -> None:
    buffer = AtomicBuffer(bytearray(2048))
    report = LossReport(buffer)
    expected = []
    for lost, ts, session, stream, channel, source in rows:
        entry = report.create_entry(lost, ts, session, stream, channel, source)
        if entry is None:
            break  # full: the rest are refused, as Aeron refuses them
        expected.append(LossEntry(1, lost, ts, ts, session, stream, channel, source))
    assert read_loss_report(buffer) == expected


def test_full_report_refuses_new_entries() -> None:
    report = LossReport(AtomicBuffer(bytearray(128)))
    assert report.create_entry(1, 1, 1, 1, "x" * 20, "y") is not None
    assert report.create_entry(1, 1, 1, 1, "x" * 40, "y" * 40) is None


def test_non_ascii_becomes_question_marks() -> None:
    buffer = AtomicBuffer(bytearray(512))
    LossReport(buffer).create_entry(1, 1, 1, 1, "chännel", "src")
    assert read_loss_report(buffer)[0].channel == "ch?nnel"


@pytest.mark.parametrize("channel_length", [-5, 10_000])
def test_damaged_entry_stops_the_reader(channel_length: int) -> None:
    raw = bytearray(512)
    buffer = AtomicBuffer(raw)
    LossReport(buffer).create_entry(1, 1, 1, 1, "good", "one")
    bad = 64
    struct.pack_into("<q", raw, bad, 1)
    struct.pack_into("<i", raw, bad + CHANNEL_OFFSET, channel_length)
    assert [e.channel for e in read_loss_report(buffer)] == ["good"]


def test_entry_at_the_very_end_of_a_small_buffer() -> None:
    buffer = AtomicBuffer(bytearray(64))
    assert read_loss_report(buffer) == []
    assert LossReport(buffer).create_entry(1, 1, 1, 1, "", "") is not None
    assert len(read_loss_report(buffer)) == 1


def test_file_create_and_map(tmp_path: Path) -> None:
    created = LossReportFile.create(tmp_path)
    try:
        assert (tmp_path / LOSS_REPORT_FILE).stat().st_size == DEFAULT_LOSS_REPORT_LENGTH
        entry = LossReport(created.buffer).create_entry(5, 6, 7, 8, "aeron:udp?endpoint=x:1", "/1.2.3.4:5")
        assert entry is not None
        with LossReportFile.map_existing(tmp_path) as mapped:
            assert mapped.read() == [LossEntry(1, 5, 6, 6, 7, 8, "aeron:udp?endpoint=x:1", "/1.2.3.4:5")]
            LossReport(created.buffer).record_observation(entry, 1, 9)
            assert mapped.read()[0].observation_count == 2  # shared memory: the reader sees the writer
    finally:
        created.close()
        created.close()


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        LossReportFile.map_existing(tmp_path)
    (tmp_path / LOSS_REPORT_FILE).write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        LossReportFile.map_existing(tmp_path)
    with pytest.raises(DriverConfigurationError):
        LossReportFile.create(tmp_path, 16)


def test_reads_a_file_written_through_another_mapping(tmp_path: Path) -> None:
    with LossReportFile.create(tmp_path, 4096) as report_file:
        LossReport(report_file.buffer).create_entry(1, 2, 3, 4, "a", "b")
    with (tmp_path / LOSS_REPORT_FILE).open("r+b") as fh, mmap.mmap(fh.fileno(), 0) as mapping:
        buffer = AtomicBuffer(mapping)
        try:
            assert read_loss_report(buffer) == [LossEntry(1, 1, 2, 2, 3, 4, "a", "b")]
        finally:
            buffer.release()
