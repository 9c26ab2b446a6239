"""The catalog file: descriptors added, stopped, extended, truncated and deleted; growth; readers; bad files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from driver.archive.catalog import (
    CATALOG_FILE,
    HEADER_LENGTH,
    INITIAL_SLOTS,
    NULL_POSITION,
    SLOT_LENGTH,
    Catalog,
    RecordingDescriptor,
)
from driver.archive.errors import CatalogError, RecordingNotFoundError

STRINGS_CAPACITY = SLOT_LENGTH - 96 - 6  # three uint16 lengths after offset 96


def add(catalog: Catalog, **changes: Any) -> int:
    settings: dict[str, Any] = {
        "start_position": 1024,
        "start_timestamp": 1_700_000_000_000,
        "initial_term_id": -5,
        "segment_file_length": 128 * 1024,
        "term_buffer_length": 64 * 1024,
        "mtu_length": 1408,
        "session_id": -77,
        "stream_id": 1001,
        "stripped_channel": "aeron:ipc",
        "original_channel": "aeron:ipc?term-length=64k",
        "source_identity": "aeron:ipc",
    }
    settings.update(changes)
    return catalog.add(**settings)


def test_add_then_read_back_every_field(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        assert catalog.next_recording_id == 0
        recording_id = add(catalog, stripped_channel="aeron:udp?endpoint=h:1", source_identity="127.0.0.1:5555")
        assert recording_id == 0
        d = catalog.descriptor(0)
        assert d == RecordingDescriptor(
            recording_id=0,
            start_timestamp=1_700_000_000_000,
            stop_timestamp=NULL_POSITION,
            start_position=1024,
            stop_position=NULL_POSITION,
            recorded_position=1024,
            initial_term_id=-5,
            segment_file_length=128 * 1024,
            term_buffer_length=64 * 1024,
            mtu_length=1408,
            session_id=-77,
            stream_id=1001,
            stripped_channel="aeron:udp?endpoint=h:1",
            original_channel="aeron:ipc?term-length=64k",
            source_identity="127.0.0.1:5555",
        )
        assert d.is_active
        assert d.end_position == 1024
        assert d.to_dict()["session_id"] == -77
        assert RecordingDescriptor(**d.to_dict()) == d
        assert catalog.recorded_position(0) == 1024
    assert (tmp_path / CATALOG_FILE).stat().st_size == HEADER_LENGTH + INITIAL_SLOTS * SLOT_LENGTH


def test_recorded_position_stop_extend_truncate(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        rid = add(catalog)
        catalog.set_recorded_position(rid, 4096)
        assert catalog.recorded_position(rid) == 4096
        assert catalog.descriptor(rid).end_position == 4096
        catalog.stop(rid, 8192, 1_700_000_000_999)
        d = catalog.descriptor(rid)
        assert (d.stop_position, d.recorded_position, d.stop_timestamp) == (8192, 8192, 1_700_000_000_999)
        assert not d.is_active
        assert d.end_position == 8192
        catalog.extend(rid)
        d = catalog.descriptor(rid)
        assert d.is_active
        assert (d.stop_position, d.stop_timestamp, d.recorded_position) == (NULL_POSITION, NULL_POSITION, 8192)
        catalog.set_recorded_position(rid, 10240)
        catalog.stop(rid, 10240, 1_700_000_001_000)
        catalog.truncate(rid, 2048)
        d = catalog.descriptor(rid)
        assert (d.stop_position, d.recorded_position) == (2048, 2048)
        assert d.start_position == 1024


def test_delete_keeps_ids_dense_and_never_reuses_one(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        ids = [add(catalog, stream_id=i) for i in range(5)]
        assert ids == [0, 1, 2, 3, 4]
        catalog.stop(2, 1024, 1)
        catalog.delete(2)
        with pytest.raises(RecordingNotFoundError, match="no recording 2"):
            catalog.descriptor(2)
        with pytest.raises(RecordingNotFoundError):
            catalog.recorded_position(2)
        with pytest.raises(RecordingNotFoundError):
            catalog.delete(2)
        with pytest.raises(RecordingNotFoundError):
            catalog.stop(2, 1, 1)
        assert [d.recording_id for d in catalog.descriptors()] == [0, 1, 3, 4]
        assert add(catalog) == 5
        assert [d.recording_id for d in catalog] == [0, 1, 3, 4, 5]
        assert [d.recording_id for d in catalog.descriptors(1, 2)] == [1, 3]
        assert [d.recording_id for d in catalog.descriptors(4)] == [4, 5]
        assert catalog.descriptors(6) == []
        assert [d.recording_id for d in catalog.descriptors(-3, 1)] == [0]


def test_unknown_ids(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        add(catalog)
        for bad in (1, 500, INITIAL_SLOTS, 10 * INITIAL_SLOTS, -1):
            with pytest.raises(RecordingNotFoundError) as info:
                catalog.descriptor(bad)
            assert isinstance(info.value, KeyError)
            assert str(bad) in str(info.value)


def test_find_by_channel_fragment_and_stream(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        add(catalog, original_channel="aeron:ipc?term-length=64k", stream_id=1)
        add(catalog, original_channel="aeron:udp?endpoint=127.0.0.1:40123", stream_id=1)
        add(catalog, original_channel="aeron:udp?endpoint=127.0.0.1:40124", stream_id=2)
        add(catalog, original_channel="aeron:ipc", stream_id=2)
        assert [d.recording_id for d in catalog.find("udp")] == [1, 2]
        assert [d.recording_id for d in catalog.find("aeron:ipc", 2)] == [3]
        assert [d.recording_id for d in catalog.find("", 1)] == [0, 1]
        assert [d.recording_id for d in catalog.find("40124")] == [2]
        assert [d.recording_id for d in catalog.find("udp", from_id=2)] == [2]
        assert [d.recording_id for d in catalog.find("", count=3)] == [0, 1, 2]
        assert catalog.find("tcp") == []


def test_growth_past_the_initial_slots_and_a_reader_following(tmp_path: Path) -> None:
    with Catalog(tmp_path) as writer:
        add(writer)
        reader = Catalog(tmp_path, writable=False)
        try:
            assert reader.descriptor(0).stream_id == 1001
            for i in range(1, INITIAL_SLOTS + 40):
                assert add(writer, stream_id=i, start_position=i * 32) == i
            size = (tmp_path / CATALOG_FILE).stat().st_size
            assert size > HEADER_LENGTH + INITIAL_SLOTS * SLOT_LENGTH
            assert (size - HEADER_LENGTH) % SLOT_LENGTH == 0
            # the reader mapped the file when it was small; it remaps to see the new slots
            assert reader.next_recording_id == INITIAL_SLOTS + 40
            last = reader.descriptor(INITIAL_SLOTS + 39)
            assert (last.stream_id, last.start_position) == (INITIAL_SLOTS + 39, (INITIAL_SLOTS + 39) * 32)
            assert len(reader.descriptors()) == INITIAL_SLOTS + 40
            # and sees the writer's updates as they happen
            writer.set_recorded_position(INITIAL_SLOTS + 39, 1 << 33)
            assert reader.recorded_position(INITIAL_SLOTS + 39) == 1 << 33
            writer.stop(5, 4096, 7)
            assert reader.descriptor(5).stop_position == 4096
            writer.stop(6, 4096, 7)
            writer.delete(6)
            with pytest.raises(RecordingNotFoundError):
                reader.descriptor(6)
        finally:
            reader.close()
    with Catalog(tmp_path) as again:
        assert again.next_recording_id == INITIAL_SLOTS + 40
        assert again.descriptor(INITIAL_SLOTS + 39).recorded_position == 1 << 33
        assert add(again) == INITIAL_SLOTS + 40


def test_a_reader_cannot_write(tmp_path: Path) -> None:
    Catalog(tmp_path).close()
    with Catalog(tmp_path, writable=False) as reader:
        with pytest.raises(CatalogError, match="read-only"):
            add(reader)
        with pytest.raises(CatalogError, match="read-only"):
            reader.stop(0, 0, 0)


def test_reopen_keeps_everything(tmp_path: Path) -> None:
    with Catalog(tmp_path, sync=True) as catalog:
        add(catalog)
        add(catalog, stream_id=9)
        catalog.stop(1, 2048, 99)
    with Catalog(tmp_path) as catalog:
        assert catalog.next_recording_id == 2
        assert catalog.descriptor(1).stop_position == 2048
        assert catalog.descriptor(0).is_active


def test_no_catalog_to_read(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="no catalog"):
        Catalog(tmp_path / "absent", writable=False)


def test_closed_catalog(tmp_path: Path) -> None:
    catalog = Catalog(tmp_path)
    catalog.close()
    catalog.close()
    with pytest.raises(CatalogError, match="closed"):
        catalog.descriptor(0)


def _patch(tmp_path: Path, offset: int, value: int) -> None:
    path = tmp_path / CATALOG_FILE
    raw = bytearray(path.read_bytes())
    struct.pack_into("<i", raw, offset, value)
    path.write_bytes(raw)


@pytest.mark.parametrize(
    ("offset", "value", "match"),
    [(0, 0x12345678, "bad magic"), (4, 2, "version 2"), (8, 512, "slot 512")],
)
@pytest.mark.parametrize("writable", [True, False])
def test_bad_header(tmp_path: Path, offset: int, value: int, match: str, writable: bool) -> None:
    with Catalog(tmp_path) as catalog:
        add(catalog)
    _patch(tmp_path, offset, value)
    with pytest.raises(CatalogError, match=match):
        Catalog(tmp_path, writable=writable)


@pytest.mark.parametrize("size", [1, HEADER_LENGTH - 1])
def test_too_short_a_file(tmp_path: Path, size: int) -> None:
    (tmp_path / CATALOG_FILE).write_bytes(b"EPAC"[:size].ljust(size, b"\0"))
    with pytest.raises(CatalogError, match="too short"):
        Catalog(tmp_path)


def test_a_zeroed_file_is_not_a_catalog(tmp_path: Path) -> None:
    (tmp_path / CATALOG_FILE).write_bytes(bytes(HEADER_LENGTH + SLOT_LENGTH))
    with pytest.raises(CatalogError, match="bad magic"):
        Catalog(tmp_path)


def test_strings_up_to_the_slot_and_no_further(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        # exactly full, with multi-byte UTF-8 (the limit is in bytes)
        stripped = "é" * 100  # 200 bytes
        original = "aeron:ipc?alias=" + "x" * (STRINGS_CAPACITY - 200 - 16 - 10)
        source = "ü" * 5  # 10 bytes
        assert len(stripped.encode()) + len(original.encode()) + len(source.encode()) == STRINGS_CAPACITY
        rid = add(catalog, stripped_channel=stripped, original_channel=original, source_identity=source)
        d = catalog.descriptor(rid)
        assert (d.stripped_channel, d.original_channel, d.source_identity) == (stripped, original, source)
        with pytest.raises(CatalogError, match="at most"):
            add(catalog, stripped_channel=stripped, original_channel=original + "x", source_identity=source)
        with pytest.raises(CatalogError, match="at most"):
            add(catalog, source_identity="y" * (STRINGS_CAPACITY + 1))
        # nothing was added by the refused calls
        assert catalog.next_recording_id == rid + 1
