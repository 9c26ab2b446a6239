"""An idle network publication heartbeats at its configured interval (Aeron's 100 ms by default), time passed in."""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.config import DriverContext
from driver.core.flow_control import new_flow_control
from driver.core.loss_detector import StaticDelayGenerator
from driver.core.network_publication import HEARTBEAT_INTERVAL_NS, NetworkPublication, SenderCounters
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RETRANSMIT_UNICAST_LINGER_NS, RetransmitHandler
from driver.errors import DriverConfigurationError
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.log_buffers import LogBuffers
from driver.wire.header import HDR_TYPE_DATA

TERM_LENGTH = 64 * 1024
MS = 1_000_000


class _Wire:
    """The publication's channel end point: keeps what it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: memoryview) -> int:
        self.sent.append(bytes(data))
        return len(data)

    def heartbeats(self) -> int:
        return sum(1 for d in self.sent if len(d) == 32 and int.from_bytes(d[6:8], "little") == HDR_TYPE_DATA)


def _publication(tmp_path: Path, now_ns: int, **interval: int) -> tuple[NetworkPublication, _Wire, CountersManager]:
    manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
    system = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
    log = LogBuffers.create(tmp_path / "publication.logbuffer", TERM_LENGTH, 4096)
    lbd.initialize_publication_metadata(
        log.metadata,
        session_id=7,
        stream_id=10,
        initial_term_id=100,
        mtu_length=1408,
        term_length=TERM_LENGTH,
        page_size=4096,
        correlation_id=2,
    )
    wire = _Wire()
    publication = NetworkPublication(
        registration_id=2,
        channel="aeron:udp?endpoint=127.0.0.1:40123",
        endpoint=wire,  # type: ignore[arg-type]
        log=log,
        session_id=7,
        stream_id=10,
        publisher_position=manager.new_counter("pub-pos"),
        publisher_limit=manager.new_counter("pub-lmt"),
        sender_position=manager.new_counter("snd-pos"),
        sender_limit=manager.new_counter("snd-lmt"),
        flow_control=new_flow_control(None, is_multicast=False),
        retransmit_handler=RetransmitHandler(
            StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS), StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS)
        ),
        counters=SenderCounters(
            bytes_sent=system[SystemCounterId.BYTES_SENT],
            heartbeats_sent=system[SystemCounterId.HEARTBEATS_SENT],
            retransmits_sent=system[SystemCounterId.RETRANSMITS_SENT],
            short_sends=system[SystemCounterId.SHORT_SENDS],
            sender_flow_control_limits=system[SystemCounterId.SENDER_FLOW_CONTROL_LIMITS],
            unblocked_publications=system[SystemCounterId.UNBLOCKED_PUBLICATIONS],
        ),
        term_window_length=TERM_LENGTH // 2,
        connection_timeout_ns=5_000 * MS,
        unblock_timeout_ns=10_000 * MS,
        linger_timeout_ns=0,
        multicast_ttl=0,
        is_exclusive=True,
        now_ns=now_ns,
        **interval,  # type: ignore[arg-type]
    )
    publication.should_send_setup = False  # as once a receiver answered: only heartbeats are left when idle
    return publication, wire, manager


def _idle_for(publication: NetworkPublication, start_ns: int, seconds: int, step_ns: int = 10 * MS) -> None:
    for now_ns in range(start_ns, start_ns + seconds * 1000 * MS, step_ns):
        publication.send(now_ns)


def test_the_default_is_aerons_100_ms(tmp_path: Path) -> None:
    start = 1_000_000 * MS
    publication, wire, _ = _publication(tmp_path, start)
    assert publication.heartbeat_interval_ns == HEARTBEAT_INTERVAL_NS == 100 * MS
    _idle_for(publication, start, 2)
    assert 18 <= wire.heartbeats() <= 21  # one per 100 ms (plus the first, due at once)
    assert publication.next_send_ns() <= start + 2_000 * MS + 100 * MS + 1


@pytest.mark.parametrize("interval_ms", [250, 1000])
def test_an_idle_publication_heartbeats_at_its_interval(tmp_path: Path, interval_ms: int) -> None:
    start = 1_000_000 * MS
    publication, wire, _ = _publication(tmp_path, start, heartbeat_interval_ns=interval_ms * MS)
    _idle_for(publication, start, 4)
    expected = 4000 // interval_ms
    assert expected - 1 <= wire.heartbeats() <= expected + 1
    last = max(i for i, d in enumerate(wire.sent) if len(d) == 32)
    assert last == len(wire.sent) - 1
    # The sender's agenda is told when the next one is due, so an idle publication is not visited before then.
    due = publication.next_send_ns()
    publication.send(due - 2)
    assert wire.heartbeats() == (heartbeats := wire.heartbeats())
    publication.send(due)
    assert wire.heartbeats() == heartbeats + 1


def test_the_setting_is_a_duration_and_must_be_positive() -> None:
    ctx = DriverContext.from_env({"AERON_PUBLICATION_HEARTBEAT_INTERVAL": "750ms"})
    assert ctx.publication_heartbeat_interval_ns == 750 * MS
    assert DriverContext.from_env({}).publication_heartbeat_interval_ns == 100 * MS
    with pytest.raises(DriverConfigurationError, match=r"aeron\.publication\.heartbeat\.interval=0"):
        DriverContext.from_env({}, publication_heartbeat_interval_ns=0).conclude()


def test_a_plain_status_message_does_not_make_an_idle_publication_due_but_asking_for_setup_does(
    tmp_path: Path,
) -> None:
    start = 1_000_000 * MS
    publication, _, _ = _publication(tmp_path, start, heartbeat_interval_ns=1000 * MS)
    woken: list[int] = []
    publication.wake = lambda: woken.append(1)
    publication.send(start)
    publication.on_status_message(0, 100, 0, TERM_LENGTH // 2, 5, start + MS)  # a receiver's SM, once a second
    assert woken == []  # nothing to send until the next heartbeat (a frame waiting shows in the frame watch)
    assert publication.sender_limit.get() == TERM_LENGTH // 2
    assert publication.has_receivers
    publication.on_status_message(0x80, 0, 0, 0, 5, start + 2 * MS)  # SEND_SETUP: the receiver needs a SETUP now
    assert woken == [1]
    assert publication.next_send_ns() <= start + 2 * MS
    publication.is_end_of_stream = True  # lingering: the receivers' SMs may end it
    publication.on_status_message(0, 100, 0, TERM_LENGTH // 2, 5, start + 3 * MS)
    assert woken == [1, 1]


def test_the_publisher_limit_follows_the_sender_a_window_ahead_and_the_log_is_cleaned_behind(tmp_path: Path) -> None:
    """The conductor's step for each publication whose sender moved (once per message sent): the limit is the
    slowest of sender and spies plus the term window, never lowered while receivers answer, and the log is zeroed
    once the limit runs more than two terms ahead of what was cleaned."""
    publication, _wire, manager = _publication(tmp_path, 0)
    window = TERM_LENGTH // 2
    try:
        limit = publication.publisher_limit
        assert publication.update_publisher_limit() == 0  # no receiver: held at the sender position
        assert limit.get() == 0
        publication.has_receivers = True
        assert publication.update_publisher_limit() == 1
        assert limit.get() == window
        assert publication.update_publisher_limit() == 0  # nothing moved
        term = publication.log.terms[0]
        term.set_memory(0, TERM_LENGTH, 0x5A)  # what a writer left in term 0 (it is not cleaned while in reach)
        publication.sender_position.set(2 * TERM_LENGTH - window - 1024)
        assert publication.update_publisher_limit() == 1
        assert limit.get() == 2 * TERM_LENGTH - 1024
        assert term.get_byte(0) == 0x5A  # not yet more than two terms ahead of the cleaned part
        publication.sender_position.set(2 * TERM_LENGTH - window + 1024)
        assert publication.update_publisher_limit() == 1
        assert limit.get() == 2 * TERM_LENGTH + 1024
        assert term.get_byte(1023) == 0  # the part of term 0 more than two terms behind the limit
        assert term.get_byte(1024) == 0x5A
        spy = manager.new_counter("spy-pos")
        spy.set(TERM_LENGTH)
        publication.add_spy(spy)  # a spy behind the sender holds the limit back (never lowered, though)
        publication.sender_position.set(3 * TERM_LENGTH)
        assert publication.update_publisher_limit() == 0
        assert limit.get() == 2 * TERM_LENGTH + 1024
        spy.set(3 * TERM_LENGTH)
        assert publication.update_publisher_limit() == 1
        assert limit.get() == 3 * TERM_LENGTH + window
        publication.remove_spy(spy)
        publication.has_receivers = False  # receivers gone: the limit drops to the sender
        assert publication.update_publisher_limit() == 0
        assert limit.get() == 3 * TERM_LENGTH
    finally:
        publication.close()
