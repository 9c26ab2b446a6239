"""A connection's counters are set only where its figures changed (an idle server refreshes a thousand of them
every second); a reader always sees the current figures."""

from __future__ import annotations

from dataclasses import dataclass, field

from driver.client.counter import Counter
from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersReader
from endpoint.connection.counters import (
    REFRESH_PERIOD_NS,
    RTT_SAMPLE_PERIOD_NS,
    SAMPLE_WAIT_NS,
    ConnectionCounters,
    _Held,
)
from endpoint.messages import SAMPLE_SEQ, Ping


class _Owner:
    """Nothing to release: the counters live in a plain buffer here."""

    @property
    def counters_reader(self) -> CountersReader:
        raise NotImplementedError

    def release_counter(self, counter: Counter) -> None:
        raise NotImplementedError


class _Watched(Counter):
    """A real counter on a real buffer that also notes each store."""

    def __init__(self, counter_id: int) -> None:
        super().__init__(_Owner(), counter_id, counter_id, AtomicBuffer(bytearray(8)))
        self.stores = 0

    def set_ordered(self, value: int) -> None:
        self.stores += 1
        super().set_ordered(value)


@dataclass
class _Figures:
    rtt: float | None
    messages_sent: int
    messages_received: int


def test_the_first_write_sets_everything_and_later_ones_only_what_changed() -> None:
    rtt, sent, received = _Watched(1), _Watched(2), _Watched(3)
    held = _Held(rtt, sent, received)
    connection = _Figures(None, 0, 0)
    held.write(connection)  # type: ignore[arg-type]
    assert (rtt.get(), sent.get(), received.get()) == (-1, 0, 0)
    assert (held.wrote_rtt, held.wrote_sent, held.wrote_received) == (-1, 0, 0)
    assert (rtt.stores, sent.stores, received.stores) == (1, 1, 1)
    held.write(connection)  # type: ignore[arg-type]
    assert (rtt.stores, sent.stores, received.stores) == (1, 1, 1)  # nothing changed: nothing stored
    connection.messages_sent = 3  # a keepalive and two messages went out
    held.write(connection)  # type: ignore[arg-type]
    assert (sent.get(), sent.stores, rtt.stores, received.stores) == (3, 2, 1, 1)
    connection.rtt = 0.000_25
    connection.messages_received = 7
    held.write(connection)  # type: ignore[arg-type]
    assert (rtt.get(), sent.get(), received.get()) == (250_000, 3, 7)
    assert (held.wrote_rtt, held.wrote_sent, held.wrote_received) == (250_000, 3, 7)
    assert (rtt.stores, sent.stores, received.stores) == (2, 2, 2)


class _Outbox:
    def __init__(self) -> None:
        self.sent: list[object] = []

    def send_control(self, message: object) -> bool:
        self.sent.append(message)
        return True


@dataclass(eq=False)
class _Connection:
    """What the refresh reads and asks of a connection (figures, the keepalive's sample flag, the control path)."""

    rtt: float | None = None
    messages_sent: int = 0
    messages_received: int = 0
    is_closed: bool = False
    _sample_wanted: bool = False
    outbox: _Outbox = field(default_factory=_Outbox)


def test_a_round_trip_sample_rides_the_next_keepalive_and_goes_alone_only_if_none_carried_it() -> None:
    counters = ConnectionCounters("server")
    connection = _Connection()
    counters._counters[connection] = _Held(_Watched(1), _Watched(2), _Watched(3))  # type: ignore[index]
    second = REFRESH_PERIOD_NS
    t = 5 * second
    assert not counters.refresh(t)  # the first refresh: the first sample is due at the next one
    t += second
    assert not counters.refresh(t)
    assert connection._sample_wanted  # asked of the next keepalive (the shell clears it when one carries it)
    connection._sample_wanted = False  # a keepalive carried it
    t += SAMPLE_WAIT_NS
    assert not counters.refresh(t)
    assert connection.outbox.sent == []  # no message of its own
    t += RTT_SAMPLE_PERIOD_NS - SAMPLE_WAIT_NS
    assert not counters.refresh(t)  # the next sample, one period after the last was asked for
    assert connection._sample_wanted
    t += SAMPLE_WAIT_NS  # no keepalive went meanwhile (a busy connection): the ping goes on its own
    assert counters.refresh(t)
    assert not connection._sample_wanted
    (ping,) = connection.outbox.sent
    assert isinstance(ping, Ping)
    assert ping.seq == SAMPLE_SEQ
