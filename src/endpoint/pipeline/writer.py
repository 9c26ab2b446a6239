"""Publishing rows to a channel: ``df.write.format("endpoint-archive")`` and its streaming form.

    df.write.format("endpoint-archive").mode("append")
      .option("aeron_dir", ...).option("channel", "aeron:ipc").option("stream_id", 7).save()

(``mode("append")``: Spark refuses its default mode for Python data sources.)

Each Spark task connects its own client to the media driver in ``aeron_dir``,
adds an exclusive publication (so every task is its own session: rows keep
their order within a task's partition, not across tasks) and offers each
row's ``payload`` with a bounded retry on back pressure. A task fails when no
subscriber connects within ``connect_timeout`` s, or when the stream makes no
progress for ``offer_timeout`` s.

Spark's writer API has no return value for the caller: ``commit`` receives
each task's :class:`PublishedMessages` and returns (and logs) the
:class:`PublishSummary` of the whole job or micro-batch. The streaming form
is at-least-once: a micro-batch Spark retries publishes its rows again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

import numpy as np
import pyarrow as pa  # type: ignore[import-untyped]
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StructType

from endpoint.pipeline.options import PipelineOptionError, WriterOptions

if TYPE_CHECKING:
    from driver.client.publication import ExclusivePublication

__all__ = [
    "ChannelPublishStreamWriter",
    "ChannelPublishWriter",
    "PublishError",
    "PublishSummary",
    "PublishedMessages",
    "check_payload_column",
    "publish_batches",
]

PAYLOAD_COLUMN: Final = "payload"
_CLOSED: Final = -4
_MAX_POSITION_EXCEEDED: Final = -5
_SPINS: Final = 100

log = logging.getLogger(__name__)


class PublishError(RuntimeError):
    """Rows could not be published: no subscriber, no progress within the timeout, or the stream closed."""


@dataclass(frozen=True)
class PublishedMessages(WriterCommitMessage):
    """One task's result: messages and bytes offered, null payloads skipped, its session and final position."""

    messages: int
    bytes: int
    skipped_nulls: int
    session_id: int
    position: int


@dataclass(frozen=True)
class PublishSummary:
    """A job's (or micro-batch's) totals over its tasks."""

    messages: int
    bytes: int
    skipped_nulls: int
    tasks: int


def _summary(messages: list[WriterCommitMessage | None]) -> PublishSummary:
    done = [m for m in messages if isinstance(m, PublishedMessages)]
    return PublishSummary(
        messages=sum(m.messages for m in done),
        bytes=sum(m.bytes for m in done),
        skipped_nulls=sum(m.skipped_nulls for m in done),
        tasks=len(done),
    )


def check_payload_column(schema: StructType) -> None:
    """The DataFrame must have a binary ``payload`` column: it is what gets published."""
    for field in schema.fields:
        if field.name.lower() == PAYLOAD_COLUMN:
            if not isinstance(field.dataType, BinaryType):
                raise PipelineOptionError(
                    f"endpoint-archive writer publishes the binary column {PAYLOAD_COLUMN!r}; "
                    f"it is {field.dataType.simpleString()} here (cast it, e.g. col('payload').cast('binary'))"
                )
            return
    raise PipelineOptionError(
        f"endpoint-archive writer publishes the binary column {PAYLOAD_COLUMN!r}; the DataFrame has "
        f"{', '.join(schema.fieldNames()) or 'no columns'}"
    )


def _wait_connected(publication: ExclusivePublication, options: WriterOptions) -> None:
    deadline = time.monotonic() + options.connect_timeout
    while not publication.is_connected:
        if time.monotonic() > deadline:
            raise PublishError(
                f"no subscriber connected to {options.channel} stream {options.stream_id} within "
                f"{options.connect_timeout} s (connect_timeout)"
            )
        time.sleep(0.001)


def _offer(
    publication: ExclusivePublication, buffer: memoryview, start: int, length: int, options: WriterOptions
) -> int:
    """Offer one message, retrying while back-pressured (or not connected) for at most ``offer_timeout`` s."""
    offer = publication.offer
    result = offer(buffer, start, length)
    if result > 0:
        return result
    stalled_at = time.monotonic()
    spins = 0
    while True:
        if result in (_CLOSED, _MAX_POSITION_EXCEEDED):
            raise PublishError(
                f"{options.channel} stream {options.stream_id}: "
                f"{'publication closed' if result == _CLOSED else 'maximum position reached'}"
            )
        if time.monotonic() - stalled_at > options.offer_timeout:
            raise PublishError(
                f"{options.channel} stream {options.stream_id}: no progress for {options.offer_timeout} s "
                f"(offer_timeout; last result {result}: back pressured or no subscriber)"
            )
        spins += 1
        if spins > _SPINS:
            time.sleep(0.0002)
        result = offer(buffer, start, length)
        if result > 0:
            return result


def publish_batches(batches: Iterator[pa.RecordBatch], options: WriterOptions) -> PublishedMessages:
    """Offer every non-null ``payload`` of ``batches``, in order, on one exclusive publication."""
    from driver.client.aeron import Aeron

    messages = 0
    total = 0
    nulls = 0
    with Aeron.connect(aeron_dir=options.aeron_dir) as aeron:
        publication = aeron.add_exclusive_publication(options.channel, options.stream_id)
        try:
            _wait_connected(publication, options)
            position = publication.position
            for batch in batches:
                index = batch.schema.get_field_index(PAYLOAD_COLUMN)
                if index < 0:
                    names = [n for n in batch.schema.names if n.lower() == PAYLOAD_COLUMN]
                    index = batch.schema.get_field_index(names[0])
                column = batch.column(index)
                rows = len(column)
                if not rows:
                    continue
                wide = pa.types.is_large_binary(column.type)
                _, offsets_buffer, data_buffer = column.buffers()
                width = 8 if wide else 4
                bounds = np.frombuffer(
                    offsets_buffer, dtype=np.int64 if wide else np.int32, count=rows + 1, offset=column.offset * width
                ).tolist()
                data = memoryview(data_buffer) if data_buffer is not None else memoryview(b"")
                valid = None if column.null_count == 0 else np.asarray(column.is_valid()).tolist()
                for row in range(rows):
                    if valid is not None and not valid[row]:
                        nulls += 1
                        continue
                    start = bounds[row]
                    length = bounds[row + 1] - start
                    position = _offer(publication, data, start, length, options)
                    messages += 1
                    total += length
            return PublishedMessages(messages, total, nulls, publication.session_id, position)
        finally:
            publication.close()


class ChannelPublishWriter(DataSourceArrowWriter):
    """Batch writer: each task publishes its rows' payloads; ``commit`` returns and logs the totals."""

    def __init__(self, options: WriterOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessages:
        return publish_batches(iterator, self.options)

    def commit(self, messages: list[WriterCommitMessage | None]) -> PublishSummary:  # type: ignore[override]
        summary = _summary(messages)
        log.info("published %s to %s stream %s", summary, self.options.channel, self.options.stream_id)
        return summary

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        log.warning(
            "publishing to %s stream %s failed after %s",
            self.options.channel,
            self.options.stream_id,
            _summary(messages),
        )


class ChannelPublishStreamWriter(DataSourceStreamArrowWriter):
    """Streaming writer: each micro-batch's tasks publish their rows (at least once across retries)."""

    def __init__(self, options: WriterOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> PublishedMessages:
        return publish_batches(iterator, self.options)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> PublishSummary:  # type: ignore[override]
        summary = _summary(messages)
        log.info(
            "batch %s: published %s to %s stream %s", batchId, summary, self.options.channel, self.options.stream_id
        )
        return summary

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("batch %s: publishing to %s failed after %s", batchId, self.options.channel, _summary(messages))
