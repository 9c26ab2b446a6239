"""The catalog file: descriptors added, stopped, extended, truncated and deleted; growth; readers; bad files."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest

from driver.archive.catalog import (
    CATALOG_FILE,
    DEFAULT_MAX_ENTRIES,
    NULL_POSITION,
    RECORD_LENGTH,
    Catalog,
    RecordingDescriptor,
)
from driver.archive.errors import CatalogError, CatalogLayoutError, RecordingNotFoundError

STRINGS_CAPACITY = RECORD_LENGTH - 32 - 80 - 12  # Aeron's limit: header, block, three uint32 lengths


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
        assert catalog.max_entries == DEFAULT_MAX_ENTRIES
    assert (tmp_path / CATALOG_FILE).stat().st_size == (DEFAULT_MAX_ENTRIES + 1) * RECORD_LENGTH


def test_the_bytes_are_aeron_1_15_1s_layout(tmp_path: Path) -> None:
    """CatalogHeader at 0; entry n at (n + 1) KiB: RecordingDescriptorHeader (32), RecordingDescriptor (80, strings)."""
    with Catalog(tmp_path) as catalog:
        add(catalog)
        rid = add(catalog, stripped_channel="aeron:udp?endpoint=h:1", source_identity="127.0.0.1:5555")
        catalog.stop(rid, 4096, 1_700_000_000_500)
    raw = (tmp_path / CATALOG_FILE).read_bytes()
    assert struct.unpack_from("<ii", raw, 0) == (0, 1024)  # version 0, entry length 1024
    entry = 2 * 1024
    strings = [b"aeron:udp?endpoint=h:1", b"aeron:ipc?term-length=64k", b"127.0.0.1:5555"]
    length, valid = struct.unpack_from("<ib", raw, entry)
    assert (length, valid) == (80 + sum(4 + len(x) for x in strings), 1)
    fields = struct.unpack_from("<qqqqqqqiiiiii", raw, entry + 32)
    ids, times, positions = fields[:3], fields[3:5], fields[5:7]
    assert (ids, times, positions) == ((0, 0, 1), (1_700_000_000_000, 1_700_000_000_500), (1024, 4096))
    assert fields[7:] == (-5, 128 * 1024, 64 * 1024, 1408, -77, 1001)
    at = entry + 32 + 80
    for expected in strings:
        (n,) = struct.unpack_from("<I", raw, at)
        assert raw[at + 4 : at + 4 + n] == expected
        at += 4 + n
    assert raw[at : entry + 1024].strip(b"\0") == b""
    assert struct.unpack_from("<i", raw, 3 * 1024)[0] == 0  # no entry 2: the entries end here


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


def test_delete_marks_the_entry_not_valid_keeps_ids_dense_and_never_reuses_one(tmp_path: Path) -> None:
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
        entry = catalog.entry(2)
        assert (entry.valid, entry.descriptor.recording_id, entry.descriptor.stream_id) == (False, 2, 2)
        assert [e.valid for e in catalog.entries()] == [True, True, False, True, True, True]
        catalog.set_valid(2, True)
        assert catalog.descriptor(2).stop_position == 1024


def test_unknown_ids(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        add(catalog)
        for bad in (1, 500, DEFAULT_MAX_ENTRIES, 10 * DEFAULT_MAX_ENTRIES, -1):
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
    slots = 16
    with Catalog(tmp_path, max_entries=slots) as writer:
        add(writer)
        reader = Catalog(tmp_path, writable=False)
        try:
            assert reader.descriptor(0).stream_id == 1001
            for i in range(1, slots + 40):
                assert add(writer, stream_id=i, start_position=i * 32) == i
            size = (tmp_path / CATALOG_FILE).stat().st_size
            assert size > (slots + 1) * RECORD_LENGTH
            assert size % RECORD_LENGTH == 0
            assert writer.max_entries == size // RECORD_LENGTH - 1
            # the reader mapped the file when it was small; it remaps to see the new slots
            assert reader.next_recording_id == slots + 40
            last = reader.descriptor(slots + 39)
            assert (last.stream_id, last.start_position) == (slots + 39, (slots + 39) * 32)
            assert len(reader.descriptors()) == slots + 40
            # and sees the writer's updates as they happen
            writer.set_recorded_position(slots + 39, 1 << 33)
            assert reader.recorded_position(slots + 39) == 1 << 33
            writer.stop(5, 4096, 7)
            assert reader.descriptor(5).stop_position == 4096
            writer.stop(6, 4096, 7)
            writer.delete(6)
            with pytest.raises(RecordingNotFoundError):
                reader.descriptor(6)
        finally:
            reader.close()
    with Catalog(tmp_path, max_entries=slots) as again:
        assert again.next_recording_id == slots + 40
        assert again.descriptor(slots + 39).recorded_position == 1 << 33
        assert add(again) == slots + 40


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
    [(0, 1, "catalog version 1"), (0, 3, "version 3"), (4, 0, "entry length 0"), (4, 100, "entry length 100")],
)
@pytest.mark.parametrize("writable", [True, False])
def test_bad_header(tmp_path: Path, offset: int, value: int, match: str, writable: bool) -> None:
    with Catalog(tmp_path) as catalog:
        add(catalog)
    _patch(tmp_path, offset, value)
    with pytest.raises(CatalogError, match=match):
        Catalog(tmp_path, writable=writable)


@pytest.mark.parametrize("writable", [True, False])
def test_the_old_layout_gets_its_own_error(tmp_path: Path, writable: bool) -> None:
    """Catalogs from before the archive took Aeron's layout began with "EPAC"; they are named, not misread."""
    old = bytearray(1024 + 1024)
    struct.pack_into("<iii", old, 0, 0x43415045, 1, 1024)
    (tmp_path / CATALOG_FILE).write_bytes(bytes(old))
    with pytest.raises(CatalogLayoutError, match="old layout") as info:
        Catalog(tmp_path, writable=writable)
    assert isinstance(info.value, CatalogError)
    assert "migrate" in str(info.value)


@pytest.mark.parametrize("size", [1, 7])
def test_too_short_a_file(tmp_path: Path, size: int) -> None:
    (tmp_path / CATALOG_FILE).write_bytes(bytes(size))
    with pytest.raises(CatalogError, match="too short"):
        Catalog(tmp_path)


def test_a_zeroed_file_is_not_a_catalog(tmp_path: Path) -> None:
    (tmp_path / CATALOG_FILE).write_bytes(bytes(2 * RECORD_LENGTH))
    with pytest.raises(CatalogError, match="entry length 0"):
        Catalog(tmp_path)


def test_an_entry_without_our_recorded_position_ends_at_its_start_while_active(tmp_path: Path) -> None:
    """Aeron's archive keeps a live recording's position only in its rec-pos counter; without one found (no driver
    here), a reader takes the start position until the recording is stopped."""
    with Catalog(tmp_path) as catalog:
        rid = add(catalog)
        catalog.set_recorded_position(rid, 8192)
    _patch(tmp_path, (rid + 1) * RECORD_LENGTH + 24, 0)  # the mark our archive sets; Aeron leaves it zero
    with Catalog(tmp_path, writable=False) as reader:
        entry = reader.entry(rid)
        assert not entry.keeps_recorded_position
        assert entry.descriptor.recorded_position == 1024
        assert reader.recorded_position(rid) == 1024
    with Catalog(tmp_path) as catalog:
        catalog.stop(rid, 8192, 5)
    with Catalog(tmp_path, writable=False) as reader:
        assert reader.descriptor(rid).end_position == 8192


def test_strings_up_to_the_slot_and_no_further(tmp_path: Path) -> None:
    with Catalog(tmp_path) as catalog:
        # exactly full (Aeron's 900 bytes), with multi-byte UTF-8 (the limit is in bytes)
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
