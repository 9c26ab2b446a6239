"""The ``endpoint-archive`` PySpark data source: recordings as rows, batch and streaming; publishing rows.

Reading needs no archive process: the catalog is mapped read-only and the
segment files are read directly, so a Spark job may run beside a live archive
and follow recordings as they grow (``recorded_position`` only ever covers
whole frames that are already in the file).

- ``spark.read.format("endpoint-archive").load(archive_dir)``: one partition per
  segment span of each selected recording; ``recording_id``/``stream_id``
  equalities and ``position`` ranges in filters are pushed down and prune
  recordings, segments and rows.
- ``spark.readStream...load(archive_dir)``: offsets ``{"<recording id>": position}``,
  always message boundaries, so a micro-batch replays identically after a
  restart from its checkpoint.
- ``df.write.format("endpoint-archive")`` / ``writeStream``: see :mod:`endpoint.pipeline.writer`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Final

import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    InputPartition,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)
from pyspark.sql.streaming.datasource import ReadLimit, SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from driver.archive.catalog import Catalog, RecordingDescriptor
from driver.archive.errors import RecordingNotFoundError
from endpoint.pipeline.frames import ARROW_SCHEMA, message_batches
from endpoint.pipeline.message_columns import MESSAGE_FIELDS, decode_payloads, load_serialization
from endpoint.pipeline.options import MAX_POSITION, PipelineOptionError, ReaderOptions, WriterOptions
from endpoint.pipeline.partitions import (
    SegmentSpan,
    message_boundary_at_or_before,
    plan_recording,
    read_span,
)

__all__ = [
    "SOURCE_NAME",
    "ArchiveBatchReader",
    "ArchiveDataSource",
    "ArchiveStreamReader",
    "RecordingSelection",
    "read_partition",
    "schema_for",
]

SOURCE_NAME: Final = "endpoint-archive"

_BASE_DDL: Final = (
    "recording_id long, session_id int, stream_id int, channel string, position long, "
    "term_id int, term_offset int, flags int, reserved_value long, payload binary"
)
_MESSAGE_DDL: Final = ", message_type string, message string"
_NEVER_NULL: Final = frozenset(ARROW_SCHEMA.names)


def schema_for(options: ReaderOptions) -> str:
    """The reader's schema (DDL): the frame columns, and the decoded message when a serialization is given."""
    return _BASE_DDL + (_MESSAGE_DDL if options.serialization is not None else "")


def _arrow_schema(options: ReaderOptions) -> pa.Schema:
    if options.serialization is None:
        return ARROW_SCHEMA
    return pa.schema([*ARROW_SCHEMA, *MESSAGE_FIELDS])


def read_partition(partition: InputPartition, options: ReaderOptions) -> Iterator[pa.RecordBatch]:
    """Record batches of one planned partition (nothing for Spark's stand-in partition of an empty plan)."""
    if not isinstance(partition, SegmentSpan):
        return
    serialization = load_serialization(options.serialization) if options.serialization is not None else None
    schema = _arrow_schema(options)
    for messages in read_span(partition):
        for batch in message_batches(
            messages, partition.recording_id, partition.channel, max_rows=options.max_rows_per_batch
        ):
            if serialization is None:
                yield batch
            else:
                types, texts = decode_payloads(batch.column(len(ARROW_SCHEMA) - 1), serialization)
                yield pa.RecordBatch.from_arrays([*batch.columns, types, texts], schema=schema)


@dataclasses.dataclass(frozen=True)
class RecordingSelection:
    """Which recordings to read: by id and by stream (None: all), from the options and any pushed filters."""

    recording_ids: frozenset[int] | None
    stream_ids: frozenset[int] | None

    def select(self, descriptors: Iterable[RecordingDescriptor]) -> list[RecordingDescriptor]:
        return [
            d
            for d in descriptors
            if (self.recording_ids is None or d.recording_id in self.recording_ids)
            and (self.stream_ids is None or d.stream_id in self.stream_ids)
        ]


def _int_value(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _no_overwrite(overwrite: bool) -> None:
    """A channel has nothing to overwrite: say so instead of publishing as if appending."""
    if overwrite:
        raise PipelineOptionError(
            'endpoint-archive writer publishes messages; it cannot overwrite: use .mode("append") '
            "(Spark refuses its default mode, errorifexists, for Python data sources)"
        )


class ArchiveDataSource(DataSource):
    """``endpoint-archive``: read recordings of an archive directory; write rows' payloads to a channel."""

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return schema_for(ReaderOptions.parse(self.options))

    def reader(self, schema: StructType) -> DataSourceReader:
        return ArchiveBatchReader(ReaderOptions.parse(self.options))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ArchiveStreamReader(ReaderOptions.parse(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from endpoint.pipeline.writer import ChannelPublishWriter, check_payload_column

        _no_overwrite(overwrite)
        check_payload_column(schema)
        return ChannelPublishWriter(WriterOptions.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from endpoint.pipeline.writer import ChannelPublishStreamWriter, check_payload_column

        _no_overwrite(overwrite)
        check_payload_column(schema)
        return ChannelPublishStreamWriter(WriterOptions.parse(self.options))


class ArchiveBatchReader(DataSourceReader):
    """Plans one partition per segment span of each selected recording, after taking the pushed filters."""

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self.recording_ids: frozenset[int] | None = options.recording_ids
        self.stream_ids: frozenset[int] | None = options.stream_ids
        self.low = options.from_position
        self.high = options.to_position

    # -- filter pushdown -------------------------------------------------------------------------------

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        """Take equalities on recording_id/stream_id and ranges on position; return the rest to Spark."""
        return [f for f in filters if not self._take(f)]

    def _take(self, f: Filter) -> bool:
        attribute: tuple[str, ...] = getattr(f, "attribute", ())
        if len(attribute) != 1:
            return False
        column = str(attribute[0]).lower()
        if isinstance(f, IsNotNull):
            return column in _NEVER_NULL
        if column in ("recording_id", "stream_id"):
            values: tuple[Any, ...]
            if isinstance(f, EqualTo):
                values = (f.value,)
            elif isinstance(f, In):
                values = tuple(f.value)
            else:
                return False
            ints = [_int_value(v) for v in values]
            if any(v is None for v in ints):
                return False
            wanted = frozenset(v for v in ints if v is not None)
            if column == "recording_id":
                self.recording_ids = wanted if self.recording_ids is None else self.recording_ids & wanted
            else:
                self.stream_ids = wanted if self.stream_ids is None else self.stream_ids & wanted
            return True
        if column == "position":
            value = _int_value(getattr(f, "value", None))
            if value is None:
                return False
            if isinstance(f, GreaterThan):
                self.low = max(self.low, value + 1)
            elif isinstance(f, GreaterThanOrEqual):
                self.low = max(self.low, value)
            elif isinstance(f, LessThan):
                self.high = min(self.high, value)
            elif isinstance(f, LessThanOrEqual):
                self.high = min(self.high, value + 1 if value < MAX_POSITION else value)
            elif isinstance(f, EqualTo):
                self.low = max(self.low, value)
                self.high = min(self.high, value + 1 if value < MAX_POSITION else value)
            else:
                return False
            return True
        return False

    # -- planning and reading --------------------------------------------------------------------------

    def partitions(self) -> Sequence[InputPartition]:
        selection = RecordingSelection(self.recording_ids, self.stream_ids)
        with Catalog(self.options.archive_dir, writable=False) as catalog:
            descriptors = selection.select(catalog.descriptors())
        spans: list[InputPartition] = []
        for descriptor in descriptors:
            spans.extend(plan_recording(self.options.archive_dir, descriptor, self.low, self.high))
        return spans

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options)


class ArchiveStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Follows every selected recording; an offset is ``{"<recording id>": position}``, each a message boundary.

    The catalog is opened lazily and left out of pickling: Spark pickles the
    reader into its read tasks, which only need the planned partitions.
    """

    def __init__(self, options: ReaderOptions) -> None:
        self.options = options
        self._catalog: Catalog | None = None
        self._boundaries: dict[int, int] = {}
        self._available_now: dict[int, int] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_catalog"] = None
        return state

    def _descriptors(self) -> list[RecordingDescriptor]:
        if self._catalog is None:
            self._catalog = Catalog(self.options.archive_dir, writable=False)
        selection = RecordingSelection(self.options.recording_ids, self.options.stream_ids)
        return selection.select(self._catalog.descriptors())

    def _descriptor(self, recording_id: int) -> RecordingDescriptor | None:
        if self._catalog is None:
            self._catalog = Catalog(self.options.archive_dir, writable=False)
        try:
            return self._catalog.descriptor(recording_id)
        except RecordingNotFoundError:
            return None

    def _boundary(self, descriptor: RecordingDescriptor, current: int, end: int) -> int:
        """The last message boundary at or before ``end``, scanning only what was not scanned before."""
        known = self._boundaries.get(descriptor.recording_id, current)
        if not current <= known <= end:
            known = current
        found = message_boundary_at_or_before(self.options.archive_dir, descriptor, known, end)
        self._boundaries[descriptor.recording_id] = found
        return found

    def initialOffset(self) -> dict[str, int]:
        offsets: dict[int, int] = {}
        for descriptor in self._descriptors():
            if self.options.starting_position == "latest":
                offsets[descriptor.recording_id] = self._boundary(
                    descriptor, descriptor.start_position, descriptor.end_position
                )
            else:
                offsets[descriptor.recording_id] = descriptor.start_position
        return {str(key): offsets[key] for key in sorted(offsets)}

    def prepareForTriggerAvailableNow(self) -> None:
        """``trigger(availableNow=True)``: read up to what is recorded now, then stop."""
        self._available_now = {d.recording_id: d.end_position for d in self._descriptors()}

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        offsets = {int(key): int(value) for key, value in start.items()}
        for descriptor in self._descriptors():
            rid = descriptor.recording_id
            end = descriptor.end_position
            if self._available_now is not None:
                if rid not in self._available_now:
                    continue
                end = min(end, self._available_now[rid])
            current = offsets.get(rid, descriptor.start_position)
            offsets[rid] = self._boundary(descriptor, current, end) if end > current else current
        return {str(key): offsets[key] for key in sorted(offsets)}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        spans: list[InputPartition] = []
        for key in sorted(end, key=int):
            rid = int(key)
            descriptor = self._descriptor(rid)
            if descriptor is None:
                continue
            begin = int(start.get(key, descriptor.start_position))
            stop = int(end[key])
            if stop <= begin:
                continue
            for span in plan_recording(self.options.archive_dir, descriptor, begin, stop, boundaries=True):
                low = max(span.low, self.options.from_position)
                high = min(span.high, self.options.to_position)
                if low < high:
                    spans.append(dataclasses.replace(span, low=low, high=high))
        return spans

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(partition, self.options)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the archive keeps its recordings; Spark's checkpoint holds the offsets."""

    def stop(self) -> None:
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
