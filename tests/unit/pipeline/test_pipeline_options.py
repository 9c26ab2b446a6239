"""Options, filter pushdown and the decoded-message JSON, without a SparkSession."""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import pytest
from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from driver.archive.catalog import Catalog
from endpoint import Serialization
from endpoint.pipeline.message_columns import decode_payloads, load_serialization, to_json
from endpoint.pipeline.options import MAX_POSITION, PipelineOptionError, ReaderOptions, WriterOptions
from endpoint.pipeline.source import ArchiveBatchReader, schema_for


@pytest.fixture
def archive_dir(tmp_path: Path) -> Path:
    Catalog(tmp_path).close()
    return tmp_path


def test_reader_options_parse_case_insensitively(archive_dir: Path) -> None:
    options = ReaderOptions.parse(
        {"path": str(archive_dir), "Recording_Id": "3, 4", "STREAM_ID": "-7", "from_position": "64"}
    )
    assert options.recording_ids == frozenset({3, 4})
    assert options.stream_ids == frozenset({-7})
    assert (options.from_position, options.to_position) == (64, MAX_POSITION)
    assert ReaderOptions.parse({"path": str(archive_dir), "checkpointLocation": "/x"}).recording_ids is None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"stream_id": "1.5"}, "option stream_id='1.5'"),
        ({"stream_id": str(1 << 31)}, "a 32-bit stream id"),
        ({"from_position": "-1"}, "option from_position='-1'"),
        ({"starting_position": "middle"}, "must be one of earliest, latest"),
        ({"serialization": "mod:"}, "must be 'module:attr'"),
        ({"typo": "1"}, r"unknown option\(s\) typo"),
    ],
)
def test_bad_reader_options(archive_dir: Path, options: dict[str, str], message: str) -> None:
    with pytest.raises(PipelineOptionError, match=message):
        ReaderOptions.parse({"path": str(archive_dir), **options})


def test_the_archive_dir_must_hold_a_catalog(tmp_path: Path) -> None:
    with pytest.raises(PipelineOptionError, match="needs the archive directory"):
        ReaderOptions.parse({})
    with pytest.raises(PipelineOptionError, match=r"has no archive\.catalog"):
        ReaderOptions.parse({"path": str(tmp_path)})


def test_writer_options(tmp_path: Path) -> None:
    options = WriterOptions.parse(
        {"aeron_dir": str(tmp_path), "channel": "aeron:ipc", "stream_id": "5", "offer_timeout": "2.5"}
    )
    assert (options.stream_id, options.offer_timeout, options.connect_timeout) == (5, 2.5, 10.0)
    with pytest.raises(PipelineOptionError, match=r"missing option\(s\) channel, stream_id"):
        WriterOptions.parse({"aeron_dir": str(tmp_path)})


def test_schema_grows_with_a_serialization(archive_dir: Path) -> None:
    plain = ReaderOptions.parse({"path": str(archive_dir)})
    assert schema_for(plain).endswith("payload binary")
    decoded = ReaderOptions.parse({"path": str(archive_dir), "serialization": "m:f"})
    assert schema_for(decoded).endswith("message_type string, message string")


def test_push_filters_takes_what_it_can_answer_exactly() -> None:
    reader = ArchiveBatchReader(ReaderOptions(archive_dir="unused", recording_ids=frozenset({1, 2, 3})))
    taken = [
        EqualTo(("recording_id",), 2),
        In(("Recording_ID",), (2, 3)),
        In(("stream_id",), (7, 8)),
        GreaterThan(("position",), 100),
        GreaterThanOrEqual(("position",), 50),
        LessThanOrEqual(("position",), 999),
        LessThan(("position",), 5000),
        IsNotNull(("position",)),
    ]
    left = [
        EqualTo(("position",), 1.5),  # not an integer position
        In(("position",), (1, 2)),
        EqualTo(("recording_id",), None),
        EqualTo(("stream_id",), True),
        Not(EqualTo(("recording_id",), 1)),
        StringStartsWith(("channel",), "aeron"),
        IsNotNull(("message",)),
        EqualTo(("a", "b"), 1),
    ]
    remaining = list(reader.pushFilters([*taken, *left]))
    assert remaining == left
    assert reader.recording_ids == frozenset({2})
    assert reader.stream_ids == frozenset({7, 8})
    assert (reader.low, reader.high) == (101, 1000)
    exact = ArchiveBatchReader(ReaderOptions(archive_dir="unused"))
    assert list(exact.pushFilters([EqualTo(("position",), 640)])) == []
    assert (exact.low, exact.high) == (640, 641)


@attrs.define
class Point:
    x: float
    y: float
    tag: bytes


def test_to_json_of_decoded_values() -> None:
    assert json.loads(to_json(Point(1.0, 2.5, b"\xff"))) == {"x": 1.0, "y": 2.5, "tag": "/w=="}
    assert json.loads(to_json({"a": [Point(0.0, 0.0, b"")]})) == {"a": [{"x": 0.0, "y": 0.0, "tag": ""}]}
    assert json.loads(to_json(Point(math.inf, math.nan, b""))) == {"x": "inf", "y": "nan", "tag": ""}
    assert json.loads(to_json({1: "int key"})) == {"1": "int key"}


def serialization_factory() -> Serialization:
    ser = Serialization()
    ser.register(Point)
    return ser


INSTANCE = serialization_factory()
NOT_A_FACTORY = dict
NUMBER = 7


def test_load_serialization_from_a_callable_or_an_instance() -> None:
    module = __name__
    assert isinstance(load_serialization(f"{module}:serialization_factory"), Serialization)
    assert load_serialization(f"{module}:INSTANCE") is INSTANCE
    with pytest.raises(PipelineOptionError, match="has no attribute 'nothing'"):
        load_serialization(f"{module}:nothing")
    with pytest.raises(PipelineOptionError, match=r"calling it gave a dict, not an endpoint\.Serialization"):
        load_serialization(f"{module}:NOT_A_FACTORY")
    with pytest.raises(PipelineOptionError, match="calling it raised TypeError"):
        load_serialization(f"{module}:Point")
    with pytest.raises(PipelineOptionError, match=r"names a int, not an endpoint\.Serialization"):
        load_serialization(f"{module}:NUMBER")


def test_decode_payloads_gives_nulls_for_what_does_not_decode() -> None:
    import pyarrow as pa

    ser = serialization_factory()
    payloads = pa.array([ser.encode(Point(1.0, 2.0, b"a")), b"", b"\xc1", ser.encode([1, "two"])], pa.binary())
    types, messages = decode_payloads(payloads.slice(0), ser)
    assert types.to_pylist() == ["Point", None, None, "list"]
    assert messages.to_pylist()[1:3] == [None, None]
    assert json.loads(messages[0].as_py()) == {"x": 1.0, "y": 2.0, "tag": "YQ=="}
    sliced_types, _ = decode_payloads(payloads.slice(3), ser)
    assert sliced_types.to_pylist() == ["list"]
