"""The data source's options: parsed once, checked with errors that name the option and what it takes.

Spark hands a data source its options as strings (``.option("stream_id", 7)``
arrives as ``"7"``), case-insensitively; a typo would otherwise be silently
ignored, so an unknown name is an error listing the known ones.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

import attrs

from driver.archive.catalog import CATALOG_FILE
from driver.int32 import INT32_MAX as _INT32_MAX
from driver.int32 import INT32_MIN as _INT32_MIN

__all__ = [
    "MAX_POSITION",
    "PipelineOptionError",
    "ReaderOptions",
    "WriterOptions",
    "archive_path",
]

MAX_POSITION: Final = (1 << 63) - 1

_READER_OPTIONS: Final = frozenset(
    {
        "path",
        "recording_id",
        "stream_id",
        "from_position",
        "to_position",
        "serialization",
        "max_rows_per_batch",
        "starting_position",
    }
)
_WRITER_OPTIONS: Final = frozenset({"aeron_dir", "channel", "stream_id", "offer_timeout", "connect_timeout"})
_STARTING: Final = ("earliest", "latest")


class PipelineOptionError(ValueError):
    """An option of the ``endpoint-archive`` data source is missing or has a value it cannot take."""


def _lowered(options: Mapping[str, str]) -> dict[str, str]:
    return {str(key).lower(): value for key, value in options.items()}


_SPARKS_OWN: Final = frozenset({"path", "checkpointlocation"})
"""Options Spark itself sets or hands on to every source and sink; accepted and ignored."""


def _check_known(options: Mapping[str, str], known: frozenset[str], role: str) -> None:
    unknown = sorted(set(options) - known - _SPARKS_OWN)
    if unknown:
        raise PipelineOptionError(
            f"endpoint-archive {role}: unknown option(s) {', '.join(unknown)}; "
            f"the options are {', '.join(sorted(known - _SPARKS_OWN))}"
        )


def _int(options: Mapping[str, str], name: str, low: int, high: int, what: str) -> int | None:
    raw = options.get(name)
    if raw is None:
        return None
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise PipelineOptionError(f"option {name}={raw!r}: must be {what}") from None
    if not low <= value <= high:
        raise PipelineOptionError(f"option {name}={raw!r}: must be {what}")
    return value


def _int_set(options: Mapping[str, str], name: str, low: int, high: int, what: str) -> frozenset[int] | None:
    raw = options.get(name)
    if raw is None:
        return None
    values: set[int] = set()
    for part in str(raw).split(","):
        value = _int({name: part}, name, low, high, what)
        if value is None:  # pragma: no cover - the dict above always holds the name
            continue
        values.add(value)
    return frozenset(values)


def archive_path(raw: str | None) -> Path:
    """The archive directory from ``load(path)``; it must exist and hold a catalog."""
    if raw is None or not str(raw).strip():
        raise PipelineOptionError(
            'endpoint-archive needs the archive directory: spark.read.format("endpoint-archive").load("<archive dir>")'
        )
    path = Path(str(raw))
    if not path.is_dir():
        raise PipelineOptionError(f"archive directory {path} does not exist (the path given to load())")
    if not (path / CATALOG_FILE).is_file():
        raise PipelineOptionError(f"{path} is not an archive directory: it has no {CATALOG_FILE}")
    return path


@attrs.frozen
class ReaderOptions:
    """What to read: which recordings, which positions, and how to decode payloads."""

    archive_dir: str
    recording_ids: frozenset[int] | None = None
    stream_ids: frozenset[int] | None = None
    from_position: int = 0
    to_position: int = MAX_POSITION
    serialization: str | None = None
    max_rows_per_batch: int = 65_536
    starting_position: str = "earliest"

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> ReaderOptions:
        opts = _lowered(options)
        _check_known(opts, _READER_OPTIONS, "reader")
        recording_ids = _int_set(opts, "recording_id", 0, MAX_POSITION, "a recording id >= 0 (or a comma list)")
        stream_ids = _int_set(opts, "stream_id", _INT32_MIN, _INT32_MAX, "a 32-bit stream id (or a comma list of them)")
        from_position = _int(opts, "from_position", 0, MAX_POSITION, "a stream position >= 0")
        to_position = _int(opts, "to_position", 0, MAX_POSITION, "a stream position >= 0 (exclusive end)")
        low = 0 if from_position is None else from_position
        high = MAX_POSITION if to_position is None else to_position
        if high < low:
            raise PipelineOptionError(f"option to_position={high}: must not be below from_position={low}")
        serialization = opts.get("serialization")
        if serialization is not None:
            module, _, attr = serialization.partition(":")
            if not module.strip() or not attr.strip():
                raise PipelineOptionError(
                    f"option serialization={serialization!r}: must be 'module:attr' naming an "
                    "endpoint.Serialization, or a callable returning one"
                )
        rows = _int(opts, "max_rows_per_batch", 1, 1 << 24, "a row count from 1 to 16777216")
        starting = opts.get("starting_position", "earliest").strip().lower()
        if starting not in _STARTING:
            raise PipelineOptionError(
                f"option starting_position={opts.get('starting_position')!r}: must be one of {', '.join(_STARTING)}"
            )
        archive_dir = archive_path(opts.get("path"))
        return cls(
            archive_dir=os.fspath(archive_dir),
            recording_ids=recording_ids,
            stream_ids=stream_ids,
            from_position=low,
            to_position=high,
            serialization=serialization,
            max_rows_per_batch=65_536 if rows is None else rows,
            starting_position=starting,
        )


@attrs.frozen
class WriterOptions:
    """Where to publish: the driver's directory, the channel and stream, and how long to wait for room."""

    aeron_dir: str
    channel: str
    stream_id: int
    offer_timeout: float = 10.0
    connect_timeout: float = 10.0

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> WriterOptions:
        opts = _lowered(options)
        _check_known(opts, _WRITER_OPTIONS, "writer")
        missing = [name for name in ("aeron_dir", "channel", "stream_id") if not str(opts.get(name, "")).strip()]
        if missing:
            raise PipelineOptionError(
                f"endpoint-archive writer: missing option(s) {', '.join(missing)} "
                '(e.g. .option("aeron_dir", "/dev/shm/aeron").option("channel", "aeron:ipc").option("stream_id", 7))'
            )
        aeron_dir = opts["aeron_dir"]
        if not Path(aeron_dir).is_dir():
            raise PipelineOptionError(f"option aeron_dir={aeron_dir!r}: no such directory (is a media driver running?)")
        channel = opts["channel"].strip()
        if not channel.startswith("aeron:"):
            raise PipelineOptionError(
                f"option channel={channel!r}: must be an Aeron channel URI (aeron:ipc or aeron:udp?endpoint=...)"
            )
        stream_id = _int(opts, "stream_id", _INT32_MIN, _INT32_MAX, "a 32-bit stream id")
        assert stream_id is not None
        return cls(
            aeron_dir=aeron_dir,
            channel=channel,
            stream_id=stream_id,
            offer_timeout=_seconds(opts, "offer_timeout", 10.0),
            connect_timeout=_seconds(opts, "connect_timeout", 10.0),
        )


def _seconds(options: Mapping[str, str], name: str, default: float) -> float:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = float(str(raw).strip())
    except ValueError:
        value = -1.0
    if not 0 < value <= 3600:
        raise PipelineOptionError(f"option {name}={raw!r}: must be a number of seconds in (0, 3600]")
    return value


def known_reader_options() -> Iterable[str]:
    """The reader's option names (for documentation and error messages)."""
    return sorted(_READER_OPTIONS - {"path"})
