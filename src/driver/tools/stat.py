"""``stat``: every counter of a driver (AeronStat), once, as JSON, or as a live view with rates.

Theory of operation: a :class:`CounterSource` keeps the directory's cnc.dat
mapped and takes :class:`Snapshot` s of it — pure reads of shared memory, so a
tool or an exporter scraping it never slows the driver. If the driver restarts
(a new cnc.dat replaces the old file) the source notices the file changed and
maps the new one; if the directory becomes unreadable it raises a ToolError,
which the live view shows instead of exiting. Rates are differences of two
snapshots over the monotonic time between them.
"""

from __future__ import annotations

import json
import os
import re
import struct
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs

from driver.cnc import CNC_FILE, CncFile
from driver.concurrent.counters import CountersReader
from driver.concurrent.ring_buffer import ManyToOneRingBuffer
from driver.concurrent.system_counters import (
    CHANNEL_OFFSET,
    CLIENT_HEARTBEAT_TYPE_ID,
    PER_IMAGE_TYPE_ID,
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_TYPE_ID,
    RECEIVE_CHANNEL_STATUS_TYPE_ID,
    RECEIVER_HWM_TYPE_ID,
    RECEIVER_POS_TYPE_ID,
    SEND_CHANNEL_STATUS_TYPE_ID,
    SENDER_LIMIT_TYPE_ID,
    SENDER_POSITION_TYPE_ID,
    SUBSCRIBER_POSITION_TYPE_ID,
    SYSTEM_COUNTER_TYPE_ID,
)
from driver.errors import DriverError
from driver.tools.common import ToolError, format_iso_time, open_cnc, open_counters

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "STREAM_TYPE_IDS",
    "TYPE_NAMES",
    "CounterFilter",
    "CounterSample",
    "CounterSource",
    "Snapshot",
    "build_filter",
    "format_aeronstat",
    "format_table",
    "parse_type",
    "print_snapshots",
    "rates",
    "read_counters",
    "render_live",
    "run_live",
    "snapshot_json",
]

TYPE_NAMES: dict[int, str] = {
    SYSTEM_COUNTER_TYPE_ID: "system",
    PUBLISHER_LIMIT_TYPE_ID: "pub-lmt",
    SENDER_POSITION_TYPE_ID: "snd-pos",
    RECEIVER_HWM_TYPE_ID: "rcv-hwm",
    SUBSCRIBER_POSITION_TYPE_ID: "sub-pos",
    RECEIVER_POS_TYPE_ID: "rcv-pos",
    SEND_CHANNEL_STATUS_TYPE_ID: "snd-channel",
    RECEIVE_CHANNEL_STATUS_TYPE_ID: "rcv-channel",
    SENDER_LIMIT_TYPE_ID: "snd-lmt",
    PER_IMAGE_TYPE_ID: "per-image",
    CLIENT_HEARTBEAT_TYPE_ID: "client-heartbeat",
    PUBLISHER_POS_TYPE_ID: "pub-pos",
}

# Counters whose key is (registration id, session id, stream id, channel), as AeronStat decides.
STREAM_TYPE_IDS = frozenset(
    {
        PUBLISHER_LIMIT_TYPE_ID,
        SENDER_POSITION_TYPE_ID,
        RECEIVER_HWM_TYPE_ID,
        SUBSCRIBER_POSITION_TYPE_ID,
        RECEIVER_POS_TYPE_ID,
        SENDER_LIMIT_TYPE_ID,
        PER_IMAGE_TYPE_ID,
        PUBLISHER_POS_TYPE_ID,
    }
)
_CHANNEL_STATUS_TYPE_IDS = frozenset({SEND_CHANNEL_STATUS_TYPE_ID, RECEIVE_CHANNEL_STATUS_TYPE_ID})
_STREAM_KEY = struct.Struct("<qiii")
_INT32 = struct.Struct("<i")
_INT64 = struct.Struct("<q")


def parse_type(text: str) -> int:
    """A type id given as a number or as its name (``pub-lmt``, ``system`` ...)."""
    try:
        return int(text, 0)
    except ValueError:
        for type_id, name in TYPE_NAMES.items():
            if name == text.strip().lower():
                return type_id
    raise ToolError(f"--type {text!r}: not a number nor one of {', '.join(sorted(TYPE_NAMES.values()))}")


@attrs.frozen
class CounterSample:
    counter_id: int
    value: int
    type_id: int
    label: str
    registration_id: int | None = None
    session_id: int | None = None
    stream_id: int | None = None
    channel: str | None = None

    @property
    def type_name(self) -> str:
        return TYPE_NAMES.get(self.type_id, str(self.type_id))

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "id": self.counter_id,
            "value": self.value,
            "type_id": self.type_id,
            "type": self.type_name,
            "label": self.label,
        }
        for name in ("registration_id", "session_id", "stream_id", "channel"):
            value = getattr(self, name)
            if value is not None:
                data[name] = value
        return data


def _key_string(key: bytes, offset: int) -> str:
    if offset + 4 > len(key):
        return ""
    length = max(0, min(_INT32.unpack_from(key, offset)[0], len(key) - offset - 4))
    return key[offset + 4 : offset + 4 + length].decode("ascii", "replace").rstrip("\x00")


def _sample(counter_id: int, type_id: int, key: bytes, label: str, value: int) -> CounterSample:
    if type_id in STREAM_TYPE_IDS:
        registration_id, session_id, stream_id, _ = _STREAM_KEY.unpack_from(key, 0)
        return CounterSample(
            counter_id, value, type_id, label, registration_id, session_id, stream_id, _key_string(key, CHANNEL_OFFSET)
        )
    if type_id in _CHANNEL_STATUS_TYPE_IDS:
        return CounterSample(counter_id, value, type_id, label, channel=_key_string(key, 0))
    if type_id == CLIENT_HEARTBEAT_TYPE_ID:
        return CounterSample(counter_id, value, type_id, label, registration_id=_INT64.unpack_from(key, 0)[0])
    return CounterSample(counter_id, value, type_id, label)


@attrs.frozen
class CounterFilter:
    """AeronStat's filters: all given ones must match (regexes are searched, as Java's ``find``)."""

    type_ids: frozenset[int] | None = None
    label: re.Pattern[str] | None = None
    channel: re.Pattern[str] | None = None
    session_id: int | None = None
    stream_id: int | None = None

    def matches(self, sample: CounterSample) -> bool:
        if self.type_ids is not None and sample.type_id not in self.type_ids:
            return False
        if self.label is not None and not self.label.search(sample.label):
            return False
        if self.channel is not None and (sample.channel is None or not self.channel.search(sample.channel)):
            return False
        if self.session_id is not None and sample.session_id != self.session_id:
            return False
        return self.stream_id is None or sample.stream_id == self.stream_id


def read_counters(reader: CountersReader, counter_filter: CounterFilter | None = None) -> list[CounterSample]:
    """Every allocated counter (in id order) that passes the filter, with its current value."""
    samples: list[CounterSample] = []
    get_value = reader.get_counter_value

    def collect(counter_id: int, type_id: int, key: bytes, label: str) -> None:
        sample = _sample(counter_id, type_id, key, label, get_value(counter_id))
        if counter_filter is None or counter_filter.matches(sample):
            samples.append(sample)

    reader.for_each(collect)
    return samples


@attrs.frozen
class Snapshot:
    """One reading of a driver directory."""

    directory: Path
    cnc_version: int
    generation: str
    pid: int
    epoch_ms: int
    monotonic_ns: int
    heartbeat_age_ms: int
    counters: list[CounterSample]


class CounterSource:
    """A driver directory kept mapped between readings; remaps when the driver is restarted."""

    def __init__(
        self,
        directory: Path,
        counter_filter: CounterFilter | None = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic_ns: Callable[[], int] = time.monotonic_ns,
    ) -> None:
        self.directory = Path(directory)
        self.counter_filter = counter_filter
        self._clock_ms = clock_ms
        self._monotonic_ns = monotonic_ns
        self._cnc: CncFile | None = None
        self._identity: tuple[int, int] | None = None

    def _file_identity(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.directory / CNC_FILE)
        except OSError:
            return None
        return st.st_dev, st.st_ino

    def cnc(self) -> CncFile:
        """The mapped cnc.dat, remapped if the file was replaced since the last call."""
        identity = self._file_identity()
        if self._cnc is not None and identity == self._identity:
            return self._cnc
        self.close()
        self._cnc = open_cnc(self.directory)
        self._identity = identity
        return self._cnc

    def snapshot(self) -> Snapshot:
        cnc = self.cnc()
        try:
            heartbeat = ManyToOneRingBuffer(cnc.to_driver_buffer).consumer_heartbeat_time()
            now_ms = self._clock_ms()
            counters = read_counters(open_counters(cnc), self.counter_filter)
            return Snapshot(
                directory=self.directory,
                cnc_version=cnc.version,
                generation=cnc.generation.label,
                pid=cnc.pid,
                epoch_ms=now_ms,
                monotonic_ns=self._monotonic_ns(),
                heartbeat_age_ms=now_ms - heartbeat,
                counters=counters,
            )
        except (DriverError, ValueError, IndexError) as exc:
            self.close()
            raise ToolError(f"{self.directory / CNC_FILE}: unreadable: {exc}") from None

    def close(self) -> None:
        if self._cnc is not None:
            self._cnc.close()
            self._cnc = None
            self._identity = None


def rates(previous: Snapshot | None, current: Snapshot) -> dict[int, float]:
    """Per-second change of each counter present (same id and label) in both snapshots."""
    if previous is None:
        return {}
    elapsed_s = (current.monotonic_ns - previous.monotonic_ns) / 1e9
    if elapsed_s <= 0:
        return {}
    before = {(c.counter_id, c.label): c.value for c in previous.counters}
    result: dict[int, float] = {}
    for counter in current.counters:
        old = before.get((counter.counter_id, counter.label))
        if old is not None:
            result[counter.counter_id] = (counter.value - old) / elapsed_s
    return result


# ------------------------------------------------------------------------------------------------ output


def _clock(epoch_ms: int) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch_ms / 1000))


def format_aeronstat(snapshot: Snapshot) -> str:
    """Java AeronStat's screen: header, ``%3d: %,20d - %s`` per counter, ``--``."""
    lines = [
        f"{_clock(snapshot.epoch_ms)} - Aeron Stat (CnC v{snapshot.cnc_version}), pid {snapshot.pid}",
        "=" * 70,
    ]
    lines.extend(f"{c.counter_id:3d}: {c.value:20,d} - {c.label}" for c in snapshot.counters)
    lines.append("--")
    return "\n".join(lines) + "\n"


def format_table(snapshot: Snapshot, counter_rates: dict[int, float] | None = None) -> str:
    """A plain table: id, value, type (id and name), label; and rate/s when rates are given."""
    header = (
        f"{_clock(snapshot.epoch_ms)} - {snapshot.directory} - CnC v{snapshot.cnc_version}, "
        f"driver pid {snapshot.pid}, heartbeat {snapshot.heartbeat_age_ms / 1000:.1f} s ago"
    )
    rate_head = f" {'RATE/S':>14}" if counter_rates is not None else ""
    lines = [header, f"{'ID':>4} {'VALUE':>20}{rate_head} {'TYPE':<20} LABEL"]
    for c in snapshot.counters:
        rate = ""
        if counter_rates is not None:
            value = counter_rates.get(c.counter_id)
            rate = f" {value:>14,.1f}" if value is not None else f" {'':>14}"
        lines.append(f"{c.counter_id:>4} {c.value:>20,}{rate} {c.type_id:>2} {c.type_name:<17} {c.label}")
    return "\n".join(lines) + "\n"


def snapshot_json(snapshot: Snapshot, counter_rates: dict[int, float] | None = None) -> str:
    counters = []
    for c in snapshot.counters:
        data = c.to_json()
        if counter_rates is not None and c.counter_id in counter_rates:
            data["rate_per_s"] = counter_rates[c.counter_id]
        counters.append(data)
    document = {
        "directory": str(snapshot.directory),
        "cnc_version": snapshot.cnc_version,
        "pid": snapshot.pid,
        "timestamp_ms": snapshot.epoch_ms,
        "time": format_iso_time(snapshot.epoch_ms),
        "heartbeat_age_ms": snapshot.heartbeat_age_ms,
        "counters": counters,
    }
    return json.dumps(document, indent=2) + "\n"


# ------------------------------------------------------------------------------------------------ live view


def _human_rate(rate: float | None) -> str:
    if rate is None:
        return ""
    return f"{rate:,.1f}/s"


def render_live(
    directory: Path,
    snapshot: Snapshot | None,
    counter_rates: dict[int, float],
    interval_s: float,
    problem: str | None = None,
    driver_timeout_ms: int = 10_000,
) -> RenderableType:
    """The live view's screen for one refresh (rich renderables; rich is imported only here)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if snapshot is None:
        return Group(
            Text(f"Aeron Stat - {directory}", style="bold"),
            Text(problem or "waiting for the driver ...", style="bold red"),
            Text(f"refresh every {interval_s:g} s - Ctrl-C to quit", style="dim"),
        )
    stale = snapshot.heartbeat_age_ms > driver_timeout_ms
    state = Text("DRIVER NOT RESPONDING", style="bold red") if stale else Text("driver alive", style="green")
    title = Text.assemble(
        (f"{_clock(snapshot.epoch_ms)} - Aeron Stat (CnC v{snapshot.cnc_version}) - {directory} - ", "bold"),
        (f"pid {snapshot.pid} - heartbeat {snapshot.heartbeat_age_ms / 1000:.1f} s ago - ", ""),
        state,
    )
    table = Table(expand=False, box=None, pad_edge=False, header_style="bold")
    table.add_column("ID", justify="right")
    table.add_column("TYPE")
    table.add_column("LABEL", overflow="ellipsis", no_wrap=True, max_width=80)
    table.add_column("VALUE", justify="right")
    table.add_column("RATE", justify="right")
    for c in snapshot.counters:
        rate = counter_rates.get(c.counter_id)
        table.add_row(
            str(c.counter_id),
            c.type_name,
            Text(c.label),
            f"{c.value:,}",
            Text(_human_rate(rate), style="cyan" if rate else "dim"),
        )
    footer_text = f"{len(snapshot.counters)} counters - refresh every {interval_s:g} s - Ctrl-C to quit"
    parts: list[RenderableType] = [title, table, Text(footer_text, style="dim")]
    if problem:
        parts.insert(1, Text(problem, style="bold red"))
    return Group(*parts)


def run_live(
    source: CounterSource,
    interval_s: float,
    count: int | None = None,
    out: TextIO | None = None,
    screen: bool = True,
) -> int:
    """Refresh the view every ``interval_s`` until Ctrl-C (or ``count`` refreshes); returns 0."""
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        raise ToolError("the live view needs rich (pip install 'endpoint[tools]'); use --once or --json") from None
    console = Console(file=out or sys.stdout)
    previous: Snapshot | None = None
    done = 0
    with Live(console=console, screen=screen, auto_refresh=False, transient=not screen) as live:
        try:
            while count is None or done < count:
                problem: str | None = None
                try:
                    snapshot: Snapshot | None = source.snapshot()
                except ToolError as exc:
                    snapshot, problem = None, str(exc)
                counter_rates = rates(previous, snapshot) if snapshot is not None else {}
                live.update(render_live(source.directory, snapshot, counter_rates, interval_s, problem), refresh=True)
                previous = snapshot
                done += 1
                if count is None or done < count:
                    time.sleep(interval_s)
        except KeyboardInterrupt:
            pass
    return 0


def print_snapshots(
    source: CounterSource,
    fmt: str,
    interval_s: float,
    count: int,
    out: TextIO,
) -> int:
    """Print ``count`` snapshots (``fmt``: table, aeronstat or json), ``interval_s`` apart."""
    previous: Snapshot | None = None
    for index in range(count):
        snapshot = source.snapshot()
        counter_rates = rates(previous, snapshot) if previous is not None else None
        if fmt == "json":
            out.write(snapshot_json(snapshot, counter_rates))
        elif fmt == "aeronstat":
            out.write(format_aeronstat(snapshot))
        else:
            out.write(format_table(snapshot, counter_rates))
        out.flush()
        previous = snapshot
        if index + 1 < count:
            time.sleep(interval_s)
    return 0


def build_filter(
    types: Sequence[str] | None,
    label: str | None,
    channel: str | None,
    session_id: int | None,
    stream_id: int | None,
) -> CounterFilter:
    def compile_pattern(option: str, pattern: str | None) -> re.Pattern[str] | None:
        if pattern is None:
            return None
        try:
            return re.compile(pattern)
        except re.error as exc:
            raise ToolError(f"{option} {pattern!r}: invalid regular expression: {exc}") from None

    type_ids: Iterable[int] | None = None if not types else [parse_type(t) for t in types]
    return CounterFilter(
        type_ids=None if type_ids is None else frozenset(type_ids),
        label=compile_pattern("--label", label),
        channel=compile_pattern("--channel", channel),
        session_id=session_id,
        stream_id=stream_id,
    )
