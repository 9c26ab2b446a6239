"""Aeron Archive's schemas as shipped package data, and every message of both generations round-tripping."""

from __future__ import annotations

import importlib.resources
import struct
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.archive import codecs
from driver.archive.codecs import CURRENT, CURRENT_MARK, LEGACY, LEGACY_MARK, ArchiveDispatcher, generation_for
from driver.sbe import (
    MessageCodec,
    SbeDecodeError,
    SbeSchemaIdMismatchError,
    SbeUnknownTemplateError,
    load_schema_resource,
)
from driver.sbe.schema import EncodedType, EnumType, Group, Message, SetType, snake_case


def test_the_schema_files_ship_as_package_data_with_their_notice() -> None:
    root = importlib.resources.files("driver.archive")
    for resource in codecs.SCHEMA_FILES.values():
        path = root
        for part in resource.split("/"):
            path = path.joinpath(part)
        assert path.is_file(), resource
        assert b"<sbe:messageSchema" in path.read_bytes()
    notice = root.joinpath("schemas").joinpath("README.md").read_text()
    assert "Apache License, Version 2.0" in notice
    assert "aeron-io/aeron" in notice


def test_the_cluster_schemas_ship_too() -> None:
    assert [(s.id, s.version, len(s.messages)) for s in CLUSTER] == [
        (111, 0, 47),
        (110, 0, 1),
        (111, 17, 54),
        (110, 2, 1),
    ]
    notice = importlib.resources.files("driver").joinpath("cluster").joinpath("schemas").joinpath("README.md")
    assert "Apache License, Version 2.0" in notice.read_text()


def test_the_generations_are_the_ones_aeron_ships() -> None:
    assert (LEGACY.id, LEGACY.version, len(LEGACY.messages)) == (101, 0, 22)
    assert (CURRENT.id, CURRENT.version, len(CURRENT.messages)) == (101, 14, 49)
    assert (LEGACY_MARK.id, LEGACY_MARK.version, CURRENT_MARK.version) == (100, 0, 2)
    assert "ConnectRequest" in LEGACY
    assert "ConnectRequest" not in CURRENT
    assert {"AuthConnectRequest", "KeepAliveRequest", "BoundedReplayRequest", "RecordingSignalEvent"} <= set(
        CURRENT.messages
    )
    assert LEGACY["StartRecordingRequest"].block_length == 21  # SourceLocation as uint8
    assert CURRENT["StartRecordingRequest"].block_length == 24  # ... and as int32
    assert LEGACY["RecordingDescriptorHeader"].block_length == 32  # reserved at offset 31
    assert LEGACY_MARK["MarkFileHeader"].block_length == 128
    assert LEGACY.enums["SourceLocation"].REMOTE == 1
    assert CURRENT.enums["RecordingSignal"].REPLICATE_END == 7


# -- values for any message, from its schema --------------------------------------------------------------------


def _scalar(t: EncodedType) -> st.SearchStrategy[Any]:
    p = t.primitive
    if p.code in "fd":
        return st.floats(allow_nan=False, width=32 if p.code == "f" else 64)
    bits = p.size * 8
    if p.code.islower():
        return st.integers(-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    return st.integers(0, 2**bits - 1)


def _field_values(block: Message | Group) -> st.SearchStrategy[dict[str, Any]]:
    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in block.fields:
        if f.presence == "constant":
            continue
        t = f.type
        if isinstance(t, EncodedType):
            if t.is_text:
                fields[snake_case(f.name)] = st.text(
                    st.characters(min_codepoint=1, max_codepoint=127), max_size=t.length
                )
            else:
                fields[snake_case(f.name)] = _scalar(t)
        elif isinstance(t, EnumType):
            fields[snake_case(f.name)] = st.sampled_from(sorted(t.values.values()))
        elif isinstance(t, SetType):
            fields[snake_case(f.name)] = st.integers(0, 2 ** (8 * t.size) - 1)
    for g in block.groups:
        fields[snake_case(g.name)] = st.lists(_field_values(g), max_size=3)
    for d in block.data:
        if d.character_encoding:
            fields[snake_case(d.name)] = st.text(st.characters(min_codepoint=0, max_codepoint=127), max_size=40)
        else:
            fields[snake_case(d.name)] = st.binary(max_size=40)
    return st.fixed_dictionaries(fields)


CLUSTER = [
    load_schema_resource("driver", f"cluster/schemas/{generation}/{name}")
    for generation in ("aeron-1.15.1", "aeron-current")
    for name in ("aeron-cluster-codecs.xml", "aeron-cluster-mark-codecs.xml")
]
ALL = [
    (schema, codec)
    for schema in (LEGACY, CURRENT, LEGACY_MARK, CURRENT_MARK, *CLUSTER)
    for codec in schema.messages.values()
]


@pytest.mark.parametrize("codec", [c for _, c in ALL], ids=[f"v{s.version}-{s.id}-{c.name}" for s, c in ALL])
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_every_archive_message_round_trips(codec: MessageCodec, data: st.DataObject) -> None:
    values = data.draw(_field_values(codec.message))
    encoded = codec.encode(values)
    assert len(encoded) == codec.encoded_size(values)
    decoded = codec.decode(encoded)
    assert {k: v for k, v in decoded.items() if k in values} == values
    # Through the flyweights directly, at an offset inside a larger buffer.
    buffer = bytearray(len(encoded) + 24)
    enc = codec.encoder().wrap_and_apply_header(buffer, 24).encode(values)
    assert buffer[24:] == encoded
    assert enc.encoded_length == len(encoded) - 8
    dec = codec.decoder().wrap_and_check_header(buffer, 24)
    assert dict(zip(dec.FIELD_NAMES, dec.read_fields(), strict=True)) == {k: decoded[k] for k in dec.FIELD_NAMES}
    assert dec.skip() == len(encoded) - 8
    if not codec.message.groups:  # all fixed fields in one call, then the var data, give the same bytes
        again = bytearray(len(encoded))
        bulk = codec.encoder().wrap_and_apply_header(again, 0)
        bulk.write_fields(*(values[name] for name in bulk.FIELD_NAMES))
        for d in codec.message.data:
            getattr(bulk, "put_" + snake_case(d.name))(values[snake_case(d.name)])
        assert bytes(again) == encoded


def test_the_dispatcher_picks_the_generation_by_header_version() -> None:
    dispatcher = ArchiveDispatcher()
    legacy = LEGACY["StartRecordingRequest"].encode(
        {"control_session_id": 1, "correlation_id": 2, "stream_id": 3, "source_location": 1, "channel": "aeron:ipc"}
    )
    dec = dispatcher.wrap(legacy)
    assert (dec.NAME, dec.SCHEMA_VERSION, dec.source_location, dec.channel()) == (
        "StartRecordingRequest",
        0,
        1,
        "aeron:ipc",
    )
    current = CURRENT["StartRecordingRequest"].encode(
        {"control_session_id": 1, "correlation_id": 2, "stream_id": 3, "source_location": 1, "channel": "aeron:udp"}
    )
    dec = dispatcher.wrap(current)
    assert (dec.SCHEMA_VERSION, dec.source_location, dec.channel()) == (14, 1, "aeron:udp")
    keep_alive = CURRENT["KeepAliveRequest"].encode({"control_session_id": 5, "correlation_id": 6})
    assert dispatcher.wrap(keep_alive).NAME == "KeepAliveRequest"
    connect = LEGACY["ConnectRequest"].encode({"correlation_id": 1, "response_stream_id": 2, "response_channel": "c"})
    assert dispatcher.wrap(connect).response_channel() == "c"
    assert generation_for(0, 4) is LEGACY
    assert generation_for(2, 4) is LEGACY
    assert generation_for(3, 4) is CURRENT
    assert generation_for(14, 2) is LEGACY  # only the legacy schema has ConnectRequest
    assert generation_for(1, 17) is CURRENT  # only today's has ListRecordingSubscriptionsRequest
    unknown = bytearray(keep_alive)
    struct.pack_into("<H", unknown, 2, 999)
    with pytest.raises(SbeUnknownTemplateError):
        dispatcher.wrap(unknown)
    foreign = bytearray(keep_alive)
    struct.pack_into("<H", foreign, 4, 100)
    with pytest.raises(SbeSchemaIdMismatchError):
        dispatcher.wrap(foreign)
    with pytest.raises(SbeDecodeError):
        dispatcher.wrap(keep_alive[:10])


def test_a_legacy_control_response_reads_todays_version_field_as_null() -> None:
    """ControlResponse gained ``version`` (optional, since 4) before its error message: a v0 response still reads."""
    legacy = LEGACY["ControlResponse"].encode(
        {"control_session_id": 1, "correlation_id": 2, "relevant_id": 3, "code": 1, "error_message": "boom"}
    )
    dec = CURRENT["ControlResponse"].decoder().wrap_and_check_header(legacy, 0)
    assert dec.acting_block_length == 28 < CURRENT["ControlResponse"].block_length == 32
    assert (dec.relevant_id, dec.code, dec.version, dec.error_message()) == (3, 1, 0, "boom")
    assert CURRENT["ControlResponse"].null_value("version") == 0
    # And today's response read by the legacy decoder: the longer block is skipped.
    current = CURRENT["ControlResponse"].encode(
        {"control_session_id": 1, "correlation_id": 2, "relevant_id": 3, "code": 0, "version": 7, "error_message": ""}
    )
    old = LEGACY["ControlResponse"].decoder().wrap_and_check_header(current, 0)
    assert (old.acting_version, old.code, old.error_message(), old.encoded_length) == (14, 0, "", 32 + 4)


SAMPLES = [
    LEGACY["RecordingDescriptor"].encode(
        {
            "control_session_id": 1,
            "correlation_id": 2,
            "recording_id": 3,
            "start_timestamp": 4,
            "stop_timestamp": 5,
            "start_position": 6,
            "stop_position": 7,
            "initial_term_id": 8,
            "segment_file_length": 9,
            "term_buffer_length": 10,
            "mtu_length": 11,
            "session_id": 12,
            "stream_id": 13,
            "stripped_channel": "aeron:ipc",
            "original_channel": "aeron:ipc?term-length=65536",
            "source_identity": "aeron:ipc",
        }
    ),
    CURRENT["ReplayRequest"].encode(
        {
            "control_session_id": 1,
            "correlation_id": 2,
            "recording_id": 3,
            "position": 0,
            "length": -1,
            "replay_stream_id": 5,
            "file_io_max_length": 4096,
            "replay_token": 9,
            "replay_channel": "aeron:udp?endpoint=localhost:40124",
        }
    ),
    CLUSTER[2]["SnapshotRecordings"].encode(
        {
            "correlation_id": 1,
            "snapshots": [
                {
                    "recording_id": i,
                    "leadership_term_id": i,
                    "term_base_log_position": i,
                    "log_position": i,
                    "timestamp": i,
                    "service_id": i,
                }
                for i in range(3)
            ],
            "member_endpoints": "a,b,c",
        }
    ),
]


@settings(max_examples=300, deadline=None)
@given(
    sample=st.sampled_from(SAMPLES),
    flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)), max_size=6),
    cut=st.integers(0, 400),
)
def test_hostile_bytes_decode_or_raise_a_decode_error(sample: bytes, flips: list[tuple[int, int]], cut: int) -> None:
    """Flipped bytes and truncation give values or SbeDecodeError, never another exception or a hang."""
    data = bytearray(sample)
    for at, value in flips:
        if at < len(data):
            data[at] = value
    data = data[: max(cut, 0)] if cut < len(data) else data
    for schema in (LEGACY, CURRENT, CLUSTER[2]):
        try:
            decoder = schema.dispatcher().wrap(bytes(data))
            decoder.to_dict()
        except SbeDecodeError:
            pass
    try:
        ArchiveDispatcher().wrap(memoryview(data)).to_dict()
    except SbeDecodeError:
        pass
