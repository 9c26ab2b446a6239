"""``connections``: end point connections as their counters in the driver's counters file show them.

Theory of operation: each end point connection owns three counters in its
driver's counters file (allocated by the end point through its driver client,
freed when the connection closes): its last round-trip time and the messages it
sent and received. All three carry the same key, which says which connection
it is — id, role, transport, peer, when it opened, which process — and the
session and stream of its publication and of the image it reads, so a reader
finds the connection's byte positions (pub-pos, pub-lmt, sub-pos) among the
driver's own counters. The end point copies its figures into the counters on
its liveness tick, never on the send or receive path.

This module holds the layout (the end points import it: the driver knows
nothing of end points but how their counters read) and the reader and views
behind ``aeron-tools connections``. Rates are differences of two readings over
the monotonic time between them, as ``stat`` computes them.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

import attrs

from driver.concurrent.system_counters import (
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_TYPE_ID,
    SUBSCRIBER_POSITION_TYPE_ID,
)
from driver.tools.common import ToolError, format_iso_time, open_counters
from driver.tools.stat import CounterSource, read_counters

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = [
    "CONNECTION_TYPE_IDS",
    "ENDPOINT_STAT_NAMES",
    "ENDPOINT_STAT_TYPE_ID",
    "HANDSHAKE_DROP_REASONS",
    "MESSAGES_RECEIVED_TYPE_ID",
    "MESSAGES_SENT_TYPE_ID",
    "REJECT_REASONS",
    "RTT_TYPE_ID",
    "SESSION_EVENTS",
    "ConnectionKey",
    "ConnectionRow",
    "ConnectionsReading",
    "EndpointStatKey",
    "connections_json",
    "format_connections",
    "read_connections",
    "run_live",
]

RTT_TYPE_ID = 4201
"""An end point connection's last round-trip time in ns (-1 until its first pong)."""
MESSAGES_SENT_TYPE_ID = 4202
"""Messages an end point connection has sent."""
MESSAGES_RECEIVED_TYPE_ID = 4203
"""Messages (keepalives included) an end point connection has received."""
CONNECTION_TYPE_IDS = frozenset({RTT_TYPE_ID, MESSAGES_SENT_TYPE_ID, MESSAGES_RECEIVED_TYPE_ID})
LABEL_NAMES = {
    RTT_TYPE_ID: "endpoint-rtt-ns",
    MESSAGES_SENT_TYPE_ID: "endpoint-sent",
    MESSAGES_RECEIVED_TYPE_ID: "endpoint-rcvd",
}

_MAX_KEY = 112
_TRANSPORTS = ("ipc", "udp")
_ROLES = ("server", "client")
ENDPOINT_STAT_TYPE_ID = 4210
"""One figure of a server end point as a whole (connections, handshake outcomes, decode errors ...)."""
HANDSHAKE_DROP_REASONS = (
    "malformed",
    "replayed",
    "spoofed",
    "unknown",
    "expired",
    "overloaded",
    "bad_cookie",
    "misrouted",
    "evicted",
    "unsealed",
    "unanswered",
    "busy",
    "discarded",
)
"""Why a server's handshake dropped a packet (its ``HandshakeStats``): ``handshake_drops:<reason>``. ``busy``: a HELLO
refused SERVER_BUSY before anything was made for it; ``discarded``: a handshake whose streams were made and thrown
away."""
REJECT_REASONS = (
    "server_full",
    "too_many_from_address",
    "filtered",
    "serialization_mismatch",
    "version_mismatch",
    "ids_exhausted",
    "shutting_down",
    "server_key_changed",
    "server_busy",
)
"""Why a server turned a client away (the end point's ``RejectReason`` names, lower case): ``rejections:<reason>``."""
SESSION_EVENTS = ("opened", "resumed", "expired", "evicted", "refused", "closed")
"""What became of a server's buffered sessions (its ``session_stats``): ``session_events:<event>``."""
ENDPOINT_STAT_NAMES = (
    "connections",
    "decode_errors",
    "seal_failures",
    "driver_restarts",
    "handshake_packets",
    "handshake_challenges",
    *(f"handshake_drops:{reason}" for reason in HANDSHAKE_DROP_REASONS),
    "handshakes_accepted",
    *(f"rejections:{reason}" for reason in REJECT_REASONS),
    "sessions",
    *(f"session_events:{event}" for event in SESSION_EVENTS),
)
"""The figures a server keeps in its driver's counters file, one counter each."""
_STAT_FIXED = struct.Struct("<iBxxxii")
"""pid, role, port, name length; the name follows."""


@attrs.frozen
class EndpointStatKey:
    """Which end point and which of its figures a counter holds."""

    pid: int
    role: str
    port: int
    name: str

    def encode(self) -> bytes:
        name = self.name.encode("ascii", "replace")[: _MAX_KEY - _STAT_FIXED.size]
        return _STAT_FIXED.pack(self.pid, _ROLES.index(self.role), self.port, len(name)) + name

    @classmethod
    def decode(cls, key: bytes) -> EndpointStatKey | None:
        if len(key) < _STAT_FIXED.size:
            return None
        pid, role, port, length = _STAT_FIXED.unpack_from(key, 0)
        if role >= len(_ROLES) or not 0 <= length <= _MAX_KEY - _STAT_FIXED.size:
            return None
        name = key[_STAT_FIXED.size : _STAT_FIXED.size + length].decode("ascii", "replace")
        return cls(pid, _ROLES[role], port, name)

    def label(self) -> str:
        return f"endpoint-stat: {self.role} {self.port} pid={self.pid} {self.name}"


_FIXED = struct.Struct("<qqiiiiiBBxxi")
"""Connection id, opened (epoch ms), pid, out session and stream, in session and stream, transport, role, peer
length; the peer follows."""
_MAX_PEER = 112 - _FIXED.size


@attrs.frozen
class ConnectionKey:
    """Which connection a counter belongs to; the same key on all three of its counters."""

    connection_id: int
    opened_ms: int
    pid: int
    transport: str
    role: str
    out_session_id: int
    out_stream_id: int
    in_session_id: int
    in_stream_id: int
    peer: str

    def encode(self) -> bytes:
        peer = self.peer.encode("ascii", "replace")[:_MAX_PEER]
        fixed = _FIXED.pack(
            self.connection_id,
            self.opened_ms,
            self.pid,
            self.out_session_id,
            self.out_stream_id,
            self.in_session_id,
            self.in_stream_id,
            _TRANSPORTS.index(self.transport),
            _ROLES.index(self.role),
            len(peer),
        )
        return fixed + peer

    @classmethod
    def decode(cls, key: bytes) -> ConnectionKey | None:
        """None for a key too short or with fields out of range (not ours, or torn)."""
        if len(key) < _FIXED.size:
            return None
        conn_id, opened, pid, out_s, out_t, in_s, in_t, transport, role, length = _FIXED.unpack_from(key, 0)
        if transport >= len(_TRANSPORTS) or role >= len(_ROLES) or not 0 <= length <= _MAX_PEER:
            return None
        peer = key[_FIXED.size : _FIXED.size + length].decode("ascii", "replace")
        return cls(conn_id, opened, pid, _TRANSPORTS[transport], _ROLES[role], out_s, out_t, in_s, in_t, peer)

    def label(self, type_id: int) -> str:
        return (
            f"{LABEL_NAMES[type_id]}: {self.connection_id} {self.role} {self.transport} {self.peer} "
            f"out={self.out_session_id}/{self.out_stream_id} in={self.in_session_id}/{self.in_stream_id}"
        )


@attrs.frozen
class ConnectionRow:
    """One connection in one reading."""

    key: ConnectionKey
    rtt_ns: int | None
    messages_sent: int
    messages_received: int
    bytes_sent: int | None
    """Position of the connection's publication (pub-pos): bytes written to the peer."""
    bytes_received: int | None
    """Position of this end's subscriber on the peer's image (sub-pos): bytes read from the peer."""
    headroom: int | None
    """pub-lmt - pub-pos: bytes the connection may still write before sends are back-pressured."""


@attrs.frozen
class ConnectionsReading:
    directory: Path
    epoch_ms: int
    monotonic_ns: int
    rows: list[ConnectionRow]


def read_connections(source: CounterSource, clock_ms: Callable[[], int] | None = None) -> ConnectionsReading:
    """Every end point connection with counters in the directory's driver, oldest first."""
    cnc = source.cnc()
    reader = open_counters(cnc)
    now_ms = time.time_ns() // 1_000_000 if clock_ms is None else clock_ms()
    keys: dict[tuple[int, int, int], ConnectionKey] = {}
    values: dict[tuple[int, int, int], dict[int, int]] = {}
    positions: dict[tuple[int, int, int], int] = {}
    subscribers: dict[tuple[int, int], int] = {}
    get_value = reader.get_counter_value

    def visit(counter_id: int, type_id: int, key: bytes, label: str) -> None:
        if type_id not in CONNECTION_TYPE_IDS:
            return
        decoded = ConnectionKey.decode(key)
        if decoded is None:
            return
        ident = (decoded.pid, _ROLES.index(decoded.role), decoded.connection_id)
        keys[ident] = decoded
        values.setdefault(ident, {})[type_id] = get_value(counter_id)

    reader.for_each(visit)
    for sample in read_counters(reader):
        if sample.session_id is None or sample.stream_id is None:
            continue
        if sample.type_id in (PUBLISHER_POS_TYPE_ID, PUBLISHER_LIMIT_TYPE_ID):
            positions[(sample.type_id, sample.session_id, sample.stream_id)] = sample.value
        elif sample.type_id == SUBSCRIBER_POSITION_TYPE_ID:
            subscribers[(sample.session_id, sample.stream_id)] = sample.value
    rows = []
    for ident, key in sorted(keys.items(), key=lambda item: (item[1].opened_ms, item[0])):
        got = values[ident]
        rtt = got.get(RTT_TYPE_ID, -1)
        pub = positions.get((PUBLISHER_POS_TYPE_ID, key.out_session_id, key.out_stream_id))
        limit = positions.get((PUBLISHER_LIMIT_TYPE_ID, key.out_session_id, key.out_stream_id))
        rows.append(
            ConnectionRow(
                key=key,
                rtt_ns=rtt if rtt >= 0 else None,
                messages_sent=got.get(MESSAGES_SENT_TYPE_ID, 0),
                messages_received=got.get(MESSAGES_RECEIVED_TYPE_ID, 0),
                bytes_sent=pub,
                bytes_received=subscribers.get((key.in_session_id, key.in_stream_id)),
                headroom=None if pub is None or limit is None else limit - pub,
            )
        )
    return ConnectionsReading(source.directory, now_ms, time.monotonic_ns(), rows)


def _ident(row: ConnectionRow) -> tuple[int, str, int]:
    return row.key.pid, row.key.role, row.key.connection_id


def _rates(
    before: ConnectionsReading | None, after: ConnectionsReading
) -> dict[tuple[int, str, int], dict[str, float]]:
    """Per connection, per second: messages and bytes each way, between two readings."""
    if before is None:
        return {}
    seconds = (after.monotonic_ns - before.monotonic_ns) / 1e9
    if seconds <= 0:
        return {}
    old = {_ident(row): row for row in before.rows}
    result: dict[tuple[int, str, int], dict[str, float]] = {}
    for row in after.rows:
        prior = old.get(_ident(row))
        if prior is None:
            continue
        rates = {
            "messages_out": (row.messages_sent - prior.messages_sent) / seconds,
            "messages_in": (row.messages_received - prior.messages_received) / seconds,
        }
        if row.bytes_sent is not None and prior.bytes_sent is not None:
            rates["bytes_out"] = (row.bytes_sent - prior.bytes_sent) / seconds
        if row.bytes_received is not None and prior.bytes_received is not None:
            rates["bytes_in"] = (row.bytes_received - prior.bytes_received) / seconds
        result[_ident(row)] = rates
    return result


def _age_s(row: ConnectionRow, reading: ConnectionsReading) -> float:
    return max(0.0, (reading.epoch_ms - row.key.opened_ms) / 1000)


def _rtt_text(rtt_ns: int | None) -> str:
    if rtt_ns is None:
        return "-"
    return f"{rtt_ns / 1e6:.3f} ms" if rtt_ns >= 1_000_000 else f"{rtt_ns / 1e3:.0f} us"


def _rate_text(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


_HEADER = ("ID", "ROLE", "PEER", "TRANSPORT", "RTT", "MSG/S OUT", "MSG/S IN", "B/S OUT", "B/S IN", "HEADROOM", "AGE")


def _table_rows(reading: ConnectionsReading, before: ConnectionsReading | None) -> list[tuple[str, ...]]:
    rates = _rates(before, reading)
    rows: list[tuple[str, ...]] = []
    for row in reading.rows:
        rate = rates.get(_ident(row), {})
        rows.append(
            (
                str(row.key.connection_id),
                f"{row.key.role} pid {row.key.pid}",
                row.key.peer,
                row.key.transport,
                _rtt_text(row.rtt_ns),
                _rate_text(rate.get("messages_out")),
                _rate_text(rate.get("messages_in")),
                _rate_text(rate.get("bytes_out")),
                _rate_text(rate.get("bytes_in")),
                "-" if row.headroom is None else f"{row.headroom:,}",
                f"{_age_s(row, reading):.0f} s",
            )
        )
    return rows


def format_connections(reading: ConnectionsReading, before: ConnectionsReading | None = None) -> str:
    """A plain table; rates need a reading before (``--once`` takes two, ``--interval`` apart)."""
    rows = [_HEADER, *_table_rows(reading, before)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(_HEADER))]
    lines = [f"{len(reading.rows)} end point connection(s) in {reading.directory}"]
    lines += ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(r)).rstrip() for r in rows]
    return "\n".join(lines) + "\n"


def connections_json(reading: ConnectionsReading, before: ConnectionsReading | None = None) -> str:
    rates = _rates(before, reading)
    doc = {
        "directory": str(reading.directory),
        "time": format_iso_time(reading.epoch_ms),
        "connections": [
            {
                "id": row.key.connection_id,
                "role": row.key.role,
                "pid": row.key.pid,
                "peer": row.key.peer,
                "transport": row.key.transport,
                "rtt_ns": row.rtt_ns,
                "messages_sent": row.messages_sent,
                "messages_received": row.messages_received,
                "bytes_sent": row.bytes_sent,
                "bytes_received": row.bytes_received,
                "headroom": row.headroom,
                "age_s": round(_age_s(row, reading), 3),
                "opened": format_iso_time(row.key.opened_ms),
                "outbound": {"session_id": row.key.out_session_id, "stream_id": row.key.out_stream_id},
                "inbound": {"session_id": row.key.in_session_id, "stream_id": row.key.in_stream_id},
                "rates": rates.get(_ident(row), {}),
            }
            for row in reading.rows
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def _render_live(
    reading: ConnectionsReading | None, before: ConnectionsReading | None, problem: str | None
) -> RenderableType:
    from rich.table import Table
    from rich.text import Text

    if reading is None:
        return Text(problem or "no reading", style="bold red")
    table = Table(title=f"{len(reading.rows)} end point connection(s) in {reading.directory}", expand=True)
    for name in _HEADER:
        table.add_column(name, justify="left" if name in ("ROLE", "PEER", "TRANSPORT") else "right")
    for row in _table_rows(reading, before):
        table.add_row(*row)
    return table


def run_live(source: CounterSource, interval_s: float, count: int | None, out: TextIO) -> int:
    """Refresh in place until interrupted (or ``count`` refreshes); needs ``rich``."""
    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        print(
            "aeron-tools connections: the live view needs rich (pip install 'endpoint[tools]'); use --once or --json",
            file=sys.stderr,
        )
        return 2
    console = Console(file=out)
    before: ConnectionsReading | None = None
    shown = 0
    with Live(console=console, auto_refresh=False) as live:
        while count is None or shown < count:
            problem = None
            reading: ConnectionsReading | None
            try:
                reading = read_connections(source)
            except ToolError as exc:
                reading, problem = None, str(exc)
            live.update(_render_live(reading, before, problem), refresh=True)
            before = reading
            shown += 1
            if count is None or shown < count:
                time.sleep(interval_s)
    return 0
