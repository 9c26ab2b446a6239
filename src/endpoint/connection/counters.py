"""Each connection's figures in its driver's counters file, where ``aeron-tools connections`` and the
exporter read them.

Theory of operation: when a connection opens, the end point asks its driver client for three counters (last
round trip, messages sent, messages received; layout in :mod:`driver.tools.connections`) in a background
task. The liveness tick copies the connection's own figures into them: the send and receive paths are not
touched. Keepalives do not measure the round trip, so every :data:`RTT_SAMPLE_PERIOD_NS` the connection's next
keepalive is sent as a ping the peer answers (its pong lands in ``connection.rtt``); one that sends no keepalive
within :data:`SAMPLE_WAIT_NS` (it is busy sending) is sent that ping by the tick, as a control message (like a
keepalive it neither waits out back pressure nor wakes the poller). An idle connection's samples thus cost no
message of their own. When the connection closes
the counters are freed. Counters are a bounded resource of the driver: one that
cannot be allocated (the file is full, the driver is gone) is counted in :attr:`ConnectionCounters.failures`
and the connection goes on without it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from driver.client.aeron import Aeron
from driver.client.aio import await_request
from driver.client.counter import Counter
from driver.concurrent.counters import METADATA_LENGTH, RECORD_UNUSED, CountersReader
from driver.tools.connections import (
    ENDPOINT_STAT_NAMES,
    ENDPOINT_STAT_TYPE_ID,
    HANDSHAKE_DROP_REASONS,
    MESSAGES_RECEIVED_TYPE_ID,
    MESSAGES_SENT_TYPE_ID,
    RTT_TYPE_ID,
    SESSION_EVENTS,
    ConnectionKey,
    EndpointStatKey,
)
from endpoint.connection.agenda import NEVER_NS
from endpoint.messages import SAMPLE_SEQ, Ping

if TYPE_CHECKING:
    from endpoint.connection.shell import Connection

__all__ = ["ConnectionCounters", "EndpointCounters", "connection_key", "endpoint_stats"]

_log = logging.getLogger("endpoint")
_TYPE_IDS = (RTT_TYPE_ID, MESSAGES_SENT_TYPE_ID, MESSAGES_RECEIVED_TYPE_ID)
COUNTERS_FILL_LIMIT = 0.75
"""Share of the counters file past which connections get no counters: the rest is the driver's."""
RTT_SAMPLE_PERIOD_NS = 10_000_000_000
"""How often a connection with counters is pinged to sample its round trip (the first time one refresh after
its counters appear, not in the burst of a connection's opening)."""
SAMPLE_WAIT_NS = 2_000_000_000
"""How long a due round-trip sample waits for the connection's next keepalive to carry it (an idle connection
sends one every ping interval and a half) before it is sent on its own."""
REFRESH_PERIOD_NS = 1_000_000_000
"""How often the counters are brought up to date: the tools read them about once a second."""
OPEN_AFTER_NS = 1_000_000_000
"""A connection gets its counters once it has lived this long: allocating them is three driver commands each
way, which a connect storm should not wait behind, and a connection shorter than a tools' refresh shows nothing."""
OPEN_AFTER_STORMING_NS = 10_000_000_000
"""While the end point has handshakes under way, a connection waits this long instead: in a storm of 400 the
counters of the connections made first were 9% of the server's CPU (and 3% of a client process's), spent while
hundreds of clients waited for their handshakes. Bounded, so a steady trickle of connects still gets them."""


def connection_key(connection: Connection, role: str) -> ConnectionKey:
    """Which connection the counters describe, and where its byte positions are."""
    image = connection._image
    return ConnectionKey(
        connection_id=connection.id,
        opened_ms=time.time_ns() // 1_000_000,
        pid=os.getpid(),
        transport="ipc" if connection.is_ipc else "udp",
        role=role,
        out_session_id=connection._pub.session_id,
        out_stream_id=connection.outbound[1],
        in_session_id=image.session_id if image is not None else 0,
        in_stream_id=connection.inbound[1],
        peer=connection.remote_address,
    )


class _Held:
    """One connection's counters, what they were last set to (a refresh writes only what changed: an idle
    connection's round trip changes every :data:`RTT_SAMPLE_PERIOD_NS`, its message counts at each keepalive),
    and when its round trip is next sampled (None: at the next refresh). One object per connection, so the
    once-a-second refresh of a thousand costs a few attribute reads each, not dictionary look-ups."""

    __slots__ = ("asked", "next_sample_ns", "received", "rtt", "sent", "wrote_received", "wrote_rtt", "wrote_sent")

    def __init__(self, rtt: Counter, sent: Counter, received: Counter) -> None:
        self.rtt = rtt
        self.sent = sent
        self.received = received
        self.wrote_rtt: int | None = None
        self.wrote_sent: int | None = None
        self.wrote_received: int | None = None
        self.next_sample_ns: int | None = None
        self.asked = False
        """The connection was asked to carry a sample on its next keepalive (``next_sample_ns`` is then when the
        wait for it ends)."""

    def write(self, connection: Connection) -> None:
        """Set the counters to the connection's figures, those that differ from what they were last set to."""
        sent = connection.messages_sent
        if sent != self.wrote_sent:
            self.sent.set_ordered(sent)
            self.wrote_sent = sent
        received = connection.messages_received
        if received != self.wrote_received:
            self.received.set_ordered(received)
            self.wrote_received = received
        seconds = connection.rtt
        rtt = -1 if seconds is None else int(seconds * 1e9)
        if rtt != self.wrote_rtt:
            self.rtt.set_ordered(rtt)
            self.wrote_rtt = rtt


class ConnectionCounters:
    """The counters of one end point's connections."""

    def __init__(self, role: str) -> None:
        self.role = role
        self._counters: dict[Connection, _Held] = {}
        self._pending: set[Connection] = set()
        self._waiting: dict[Connection, int] = {}
        """Connections not yet old enough for counters (:data:`OPEN_AFTER_NS`), and since when."""
        self._next_refresh_ns = 0
        self._next_open_ns = NEVER_NS
        """When :meth:`due` may next find a waiting connection old enough (at the threshold it last used)."""
        self.failures = 0
        """Connections whose counters could not be allocated."""

    @property
    def next_due_ns(self) -> int:
        """When the liveness tick next has something to do here (a refresh, or a waiting connection to look at):
        an end point with no timer of its own due before then skips its tick steps."""
        return min(self._next_refresh_ns, self._next_open_ns)

    async def open(self, aeron: Aeron, connection: Connection) -> None:
        """Allocate the connection's counters (run as a task of the end point's)."""
        reader = aeron.conductor.counters_reader
        if used_counter_slots(reader) > COUNTERS_FILL_LIMIT * counter_slots(reader):
            self.failures += 1
            return
        key = connection_key(connection, self.role)
        encoded = key.encode()
        self._pending.add(connection)
        try:
            # The three commands in flight at once: the driver answers them in one duty cycle, not three.
            outcomes = await asyncio.gather(
                *(aeron.add_counter_async(type_id, encoded, key.label(type_id)) for type_id in _TYPE_IDS),
                return_exceptions=True,
            )
        finally:
            self._pending.discard(connection)
        allocated = [c for c in outcomes if isinstance(c, Counter)]
        failed = [e for e in outcomes if isinstance(e, BaseException)]
        if failed:  # counters file full or driver gone: the connection goes on without them
            self.failures += 1
            _log.debug("no counters for connection %s: %s", connection.id, failed[0])
            await _release(aeron, allocated)
            if not isinstance(failed[0], Exception):
                raise failed[0]  # cancelled: not a failure to swallow
            return
        if connection.is_closed:
            await _release(aeron, allocated)
            return
        held = _Held(*allocated)
        self._counters[connection] = held
        held.write(connection)  # no reader sees a zero round trip before the first refresh

    def admit(self, connection: Connection, now_ns: int) -> None:
        """A new connection: it gets its counters from :meth:`due` once it has lived :data:`OPEN_AFTER_NS`."""
        self._waiting[connection] = now_ns
        self._next_open_ns = min(self._next_open_ns, now_ns + OPEN_AFTER_NS)

    @property
    def waiting(self) -> bool:
        """Connections wait for counters (else :meth:`due` has nothing to find: a timer step skips it)."""
        return bool(self._waiting)

    def due(self, now_ns: int, storming: bool = False) -> list[Connection]:
        """Connections to give counters to now (each once); called on the liveness tick. ``storming``: the end
        point has handshakes under way (:data:`OPEN_AFTER_STORMING_NS`)."""
        after = OPEN_AFTER_STORMING_NS if storming else OPEN_AFTER_NS
        waiting = self._waiting
        # Admitted in order, so the oldest come first: the look ends at the first too young (a server ticks every
        # step, and a storm of 1,500 had each step walk them all). A closed one leaves at its close.
        ready: list[Connection] = []
        for connection, since in waiting.items():
            if now_ns - since < after:
                break
            ready.append(connection)
        for connection in ready:
            del waiting[connection]
        # (a storm that ends sooner is seen at the next refresh)
        self._next_open_ns = next(iter(waiting.values())) + after if waiting else NEVER_NS
        return [c for c in ready if not c.is_closed]

    async def close(self, aeron: Aeron | None, connection: Connection) -> None:
        """Free a closed connection's counters (a task of the end point's)."""
        self._waiting.pop(connection, None)
        held = self._counters.pop(connection, None)
        if held is not None and aeron is not None:
            await _release(aeron, [held.rtt, held.sent, held.received])

    def refresh(self, now_ns: int) -> bool:
        """Copy each connection's figures into its counters and send the round-trip samples that are due
        (called on the liveness tick, acts once every :data:`REFRESH_PERIOD_NS`); True if it sent a sample."""
        if now_ns < self._next_refresh_ns:
            return False
        self._next_refresh_ns = now_ns + REFRESH_PERIOD_NS
        sampled = False
        for connection, held in self._counters.items():
            held.write(connection)
            due = held.next_sample_ns
            if due is None:
                held.next_sample_ns = now_ns  # sampled at the next refresh
            elif now_ns >= due and not connection.is_closed:
                if not held.asked:
                    held.asked = connection._sample_wanted = True
                    held.next_sample_ns = now_ns + SAMPLE_WAIT_NS
                    continue
                held.asked = False
                held.next_sample_ns = now_ns + RTT_SAMPLE_PERIOD_NS - SAMPLE_WAIT_NS
                if connection._sample_wanted:  # no keepalive carried it: sent on its own
                    connection._sample_wanted = False
                    connection.outbox.send_control(Ping(SAMPLE_SEQ, time.perf_counter_ns()))
                    sampled = True
        return sampled

    def forget(self) -> None:
        """The driver failed: its counters went with it."""
        self._counters.clear()
        self._waiting.clear()
        self._next_open_ns = NEVER_NS

    def __len__(self) -> int:
        return len(self._counters)


def endpoint_stats(endpoint: Any) -> dict[str, int]:
    """A server's figures as :data:`~driver.tools.connections.ENDPOINT_STAT_NAMES` names them."""
    stats = {
        "connections": endpoint.connection_count,
        "decode_errors": endpoint.malformed_messages,
        "seal_failures": endpoint.seal_failures,
        "driver_restarts": endpoint.restarts,
    }
    handshake = getattr(endpoint, "_handshake", None)
    shake = handshake.stats if handshake is not None else None
    stats["handshake_packets"] = shake.received if shake is not None else 0
    stats["handshake_challenges"] = shake.challenged if shake is not None else 0
    for reason in HANDSHAKE_DROP_REASONS:
        stats[f"handshake_drops:{reason}"] = getattr(shake, reason, 0) if shake is not None else 0
    stats["handshakes_accepted"] = getattr(endpoint, "handshakes_accepted", 0)
    rejections = getattr(endpoint, "rejections", {})
    for reason, count in rejections.items():
        stats[f"rejections:{reason.name.lower()}"] = count
    sessions = getattr(endpoint, "_sessions", None)
    if sessions is not None:
        stats["sessions"] = len(sessions)
        for event in SESSION_EVENTS:
            stats[f"session_events:{event}"] = getattr(sessions.stats, event)
    return stats


class EndpointCounters:
    """A server's own figures (connections, handshake outcomes, decode errors ...), one counter each, allocated
    at its first refresh once it is bound (its port is then known, a ``port=0`` one included), refreshed with
    the connection counters, freed when it closes. Clients keep none: a process may run hundreds of them, and
    their connections' counters tell their story."""

    def __init__(self, role: str, port: int) -> None:
        self.role = role
        self.port = port
        self._counters: dict[str, Counter] = {}
        self._tried = False
        self._next_refresh_ns = 0
        self.failures = 0

    @property
    def next_due_ns(self) -> int:
        """When :meth:`refresh` next acts."""
        return self._next_refresh_ns

    async def open(self, aeron: Aeron, endpoint: Any) -> None:
        reader = aeron.conductor.counters_reader
        if used_counter_slots(reader) > COUNTERS_FILL_LIMIT * counter_slots(reader):
            self.failures += 1
            return
        allocated: dict[str, Counter] = {}
        try:
            for name in ENDPOINT_STAT_NAMES:
                key = EndpointStatKey(os.getpid(), self.role, self.port, name)
                allocated[name] = await aeron.add_counter_async(ENDPOINT_STAT_TYPE_ID, key.encode(), key.label())
        except Exception as exc:  # counters file full or driver gone: the end point goes on without them
            self.failures += 1
            _log.debug("no end point counters: %s", exc)
            await _release(aeron, list(allocated.values()))
            return
        self._counters = allocated
        self._write(endpoint)

    def refresh(self, now_ns: int, endpoint: Any) -> None:
        """Bring the counters up to date (acts once every :data:`REFRESH_PERIOD_NS`); a bound server that has
        none yet asks for them, once per driver lease."""
        if now_ns < self._next_refresh_ns:
            return
        self._next_refresh_ns = now_ns + REFRESH_PERIOD_NS
        if self._counters:
            self._write(endpoint)
            return
        if self.role != "server" or self._tried:
            return
        shared = endpoint._shared
        port = _bound_port(endpoint)
        if shared is None or shared.aeron is None or not port:
            return
        self._tried = True
        self.port = port
        endpoint._spawn(self.open(shared.aeron, endpoint))

    def _write(self, endpoint: Any) -> None:
        for name, value in endpoint_stats(endpoint).items():
            counter = self._counters.get(name)
            if counter is not None:
                counter.set_ordered(value)

    async def close(self, aeron: Aeron | None) -> None:
        counters, self._counters = list(self._counters.values()), {}
        if aeron is not None:
            await _release(aeron, counters)

    def forget(self) -> None:
        """The driver failed: its counters went with it; the next lease gets new ones."""
        self._counters = {}
        self._tried = False

    def __len__(self) -> int:
        return len(self._counters)


def _bound_port(endpoint: Any) -> int:
    """The port a server is bound to, 0 while unknown (``server.port`` raises before a ``port=0`` bind)."""
    try:
        port: Any = getattr(endpoint, "port", None)
    except Exception:  # not bound yet
        return 0
    if port is None:
        port = getattr(endpoint.config, "port", 0)
    return int(port)


def counter_slots(reader: CountersReader) -> int:
    return min(reader.metadata_buffer.capacity // METADATA_LENGTH, reader.max_counter_id)


def used_counter_slots(reader: CountersReader) -> int:
    """Slots ever allocated (freed ones included: the driver reuses them): records are used in id order, so
    this is the first unused one, found by bisection instead of a scan of the whole file."""
    low, high = 0, counter_slots(reader)
    while low < high:
        middle = (low + high) // 2
        if reader.get_counter_state(middle) == RECORD_UNUSED:
            high = middle
        else:
            low = middle + 1
    return low


async def _release(aeron: Aeron, counters: list[Counter]) -> None:
    """Free ``counters``: every release sent first, then their answers awaited (one driver duty cycle, not one
    each)."""
    conductor = aeron.conductor
    requests = []
    for counter in counters:
        try:
            request = conductor.begin_release(counter)
            if request is not None:
                requests.append((counter, request))
        except Exception as exc:  # the driver may be gone; its counters with it
            _log.debug("freeing %r failed: %s", counter, exc)
    for counter, request in requests:
        try:
            await await_request(conductor, request)
        except Exception as exc:
            _log.debug("freeing %r failed: %s", counter, exc)


def role_of(endpoint: Any) -> str:
    """``server`` for a Server (or a subclass), else ``client``."""
    names = {(cls.__module__, cls.__name__) for cls in type(endpoint).__mro__}
    return "server" if ("endpoint.server", "Server") in names else "client"
