"""The driver conductor driven by hand: real cnc.dat and log files, a manual clock, no threads."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from driver.command.messages import (
    CorrelatedMessage,
    CounterMessage,
    PublicationMessage,
    RemoveMessage,
    SubscriptionMessage,
)
from driver.command.responses import decode_response
from driver.command.types import CommandType, ResponseType
from driver.concurrent.counters import RECORD_ALLOCATED
from driver.concurrent.error_log import read_error_log
from driver.concurrent.ring_buffer import HEADER_LENGTH, TAIL_POSITION_OFFSET
from driver.concurrent.system_counters import SystemCounterId
from driver.errors import ErrorCode
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.appender import TermAppender
from driver.logbuffer.frame import HeaderWriter
from driver.logbuffer.log_buffers import LogBuffers
from support.conductor_harness import MS, ConductorHarness


class Harness(ConductorHarness):
    """Commands as messages, responses decoded."""

    def __init__(self, aeron_dir: Path, **settings: object) -> None:
        super().__init__(
            aeron_dir,
            publication_linger_timeout_ns=500 * MS,
            publication_unblock_timeout_ns=3_000 * MS,
            **settings,
        )

    def send(self, command: CommandType, message: object) -> None:
        self.send_raw(command, message.encode())  # type: ignore[attr-defined]

    def work(self, advance_ms: int = 0, cycles: int = 5) -> list[tuple[ResponseType, object]]:
        return [decode_response(type_id, body) for type_id, body in self.pump(advance_ms, cycles)]

    def add_publication(self, channel: str = "aeron:ipc", stream_id: int = 10, exclusive: bool = False) -> int:
        cid = self.cid()
        kind = CommandType.ADD_EXCLUSIVE_PUBLICATION if exclusive else CommandType.ADD_PUBLICATION
        self.send(kind, PublicationMessage(self.client_id, cid, stream_id, channel))
        return cid


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path / "aeron")
    yield h
    h.close()


def test_publication_ready_creates_log_and_counters(harness: Harness) -> None:
    cid = harness.add_publication(stream_id=7)
    [(kind, ready)] = harness.work()
    assert kind is ResponseType.ON_PUBLICATION_READY
    assert ready.correlation_id == cid  # type: ignore[attr-defined]
    assert ready.registration_id == cid  # type: ignore[attr-defined]
    path = Path(ready.log_file_name)  # type: ignore[attr-defined]
    assert path == harness.ctx.aeron_dir / "publications" / f"{cid}.logbuffer"
    with LogBuffers.map(path) as log:
        assert log.term_length == 64 * 1024
        assert lbd.correlation_id(log.metadata) == cid
        assert lbd.end_of_stream_position(log.metadata) == 2**63 - 1
    labels: dict[int, str] = {}
    harness.counters.for_each(lambda cid_, type_id, key, label: labels.__setitem__(type_id, label))
    assert labels[1].startswith(f"pub-lmt: {cid} ")
    assert labels[12].startswith(f"pub-pos (sample): {cid} ")
    assert labels[11] == f"client-heartbeat: {harness.client_id}"
    assert harness.counters.get_counter_value(ready.publication_limit_counter_id) == 0  # type: ignore[attr-defined]


def test_shared_publication_is_reused_and_exclusive_is_not(harness: Harness) -> None:
    first = harness.add_publication()
    second = harness.add_publication()
    exclusive = harness.add_publication(exclusive=True)
    responses = harness.work()
    assert [kind for kind, _ in responses] == [
        ResponseType.ON_PUBLICATION_READY,
        ResponseType.ON_PUBLICATION_READY,
        ResponseType.ON_EXCLUSIVE_PUBLICATION_READY,
    ]
    assert responses[1][1].registration_id == first  # type: ignore[attr-defined]
    assert responses[2][1].registration_id == exclusive  # type: ignore[attr-defined]
    assert responses[0][1].session_id != responses[2][1].session_id  # type: ignore[attr-defined]
    assert second != first


def test_subscription_gets_image_and_limit_follows_subscriber(harness: Harness) -> None:
    pub_id = harness.add_publication()
    sub_id = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, sub_id, 10, "aeron:ipc"))
    responses = dict(harness.work())
    assert responses[ResponseType.ON_SUBSCRIPTION_READY].correlation_id == sub_id  # type: ignore[attr-defined]
    image = responses[ResponseType.ON_AVAILABLE_IMAGE]
    assert image.correlation_id == pub_id  # type: ignore[attr-defined]
    assert image.subscription_registration_id == sub_id  # type: ignore[attr-defined]
    assert image.source_identity == "aeron:ipc"  # type: ignore[attr-defined]
    ready = responses[ResponseType.ON_PUBLICATION_READY]
    limit_id = ready.publication_limit_counter_id  # type: ignore[attr-defined]
    assert harness.counters.get_counter_value(limit_id) == 64 * 1024  # one term window ahead of position 0
    sub_pos_id = image.subscriber_position_id  # type: ignore[attr-defined]
    assert harness.counters.get_counter_label(sub_pos_id).endswith("aeron:ipc @0")
    harness.cnc.counters_values_buffer.put_long_ordered(sub_pos_id * 128, 32 * 1024)
    harness.work()
    assert harness.counters.get_counter_value(limit_id) == 96 * 1024
    with LogBuffers.map(image.log_file_name) as log:  # type: ignore[attr-defined]
        assert lbd.is_connected(log.metadata)


def test_remove_publication_drains_lingers_and_deletes(harness: Harness) -> None:
    pub_id = harness.add_publication()
    sub_id = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, sub_id, 10, "aeron:ipc"))
    responses = dict(harness.work())
    path = Path(responses[ResponseType.ON_PUBLICATION_READY].log_file_name)  # type: ignore[attr-defined]
    remove_id = harness.cid()
    harness.send(CommandType.REMOVE_PUBLICATION, RemoveMessage(harness.client_id, remove_id, pub_id))
    responses = harness.work(advance_ms=200) + harness.work(advance_ms=200)
    assert dict(responses)[ResponseType.ON_OPERATION_SUCCESS].correlation_id == remove_id  # type: ignore[attr-defined]
    # nothing was published, so it has drained: the subscriber hears the image went away
    assert ResponseType.ON_UNAVAILABLE_IMAGE in dict(responses)
    assert path.exists()
    harness.work(advance_ms=600)
    harness.work(advance_ms=200)
    assert not path.exists()
    assert harness.conductor.ipc_publications == []


def test_errors_are_answered_and_logged(harness: Harness) -> None:
    bad = harness.add_publication(channel="aeron:ipc?term-length=1000")
    unknown = harness.cid()
    harness.send(CommandType.REMOVE_PUBLICATION, RemoveMessage(harness.client_id, unknown, 424242))
    spy = harness.add_publication(channel="aeron-spy:aeron:udp?endpoint=localhost:40123")
    responses = harness.work()
    errors = {r.offending_correlation_id: r for kind, r in responses if kind is ResponseType.ON_ERROR}  # type: ignore[attr-defined]
    assert errors[bad].error_code == ErrorCode.INVALID_CHANNEL
    assert "term-length" in errors[bad].error_message
    assert errors[unknown].error_code == ErrorCode.UNKNOWN_PUBLICATION
    assert errors[spy].error_code == ErrorCode.INVALID_CHANNEL
    observations = read_error_log(harness.cnc.error_log_buffer)
    assert len(observations) == 3
    assert harness.counters.get_counter_value(15) == 3  # ERRORS system counter


def test_malformed_command_does_not_stop_the_conductor(harness: Harness) -> None:
    assert harness.ring.write(CommandType.ADD_PUBLICATION, b"\x01\x02\x03")
    assert harness.ring.write(0x77, b"\x00" * 16)
    cid = harness.add_publication()
    kinds = [kind for kind, _ in harness.work()]
    assert kinds.count(ResponseType.ON_ERROR) == 2
    assert kinds[-1] is ResponseType.ON_PUBLICATION_READY
    assert cid


def test_client_timeout_frees_everything(harness: Harness) -> None:
    harness.add_publication()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, harness.cid(), 10, "aeron:ipc"))
    harness.send(CommandType.ADD_COUNTER, CounterMessage(harness.client_id, harness.cid(), 1001, b"k", "app counter"))
    harness.work()
    harness.send(CommandType.CLIENT_KEEPALIVE, CorrelatedMessage(harness.client_id, 0))
    assert all(kind is not ResponseType.ON_CLIENT_TIMEOUT for kind, _ in harness.run_for(1_500))
    responses = harness.run_for(2_100)
    kinds = [kind for kind, _ in responses]
    assert ResponseType.ON_CLIENT_TIMEOUT in kinds
    assert ResponseType.ON_UNAVAILABLE_COUNTER in kinds
    assert harness.conductor.clients == {}
    assert harness.conductor.subscription_links == []
    assert harness.counters.get_counter_value(24) == 1  # CLIENT_TIMEOUTS
    harness.work(advance_ms=1_000)
    harness.work(advance_ms=1_000)
    assert harness.conductor.ipc_publications == []


def test_a_stall_of_the_driver_itself_times_no_client_out(harness: Harness) -> None:
    """The driver not run for longer than the liveness timeout (its process stopped): its clients' silence
    over that gap is not theirs. They get the gap back; one that stays silent is timed out an interval later."""
    harness.add_publication()
    harness.work()
    harness.send(CommandType.CLIENT_KEEPALIVE, CorrelatedMessage(harness.client_id, 0))
    harness.work(advance_ms=500)
    stalled = harness.work(advance_ms=3_000)  # one duty cycle 3 s after the last: the driver stalled
    assert all(kind is not ResponseType.ON_CLIENT_TIMEOUT for kind, _ in stalled)
    assert harness.conductor.host_stalls == 1
    assert harness.client_id in harness.conductor.clients
    # The client (silent since before the stall) is judged from the end of the stall on.
    assert all(kind is not ResponseType.ON_CLIENT_TIMEOUT for kind, _ in harness.run_for(1_000))
    assert ResponseType.ON_CLIENT_TIMEOUT in [kind for kind, _ in harness.run_for(1_500)]
    assert harness.conductor.clients == {}
    assert harness.conductor.host_stalls == 1


def test_unblocks_a_log_left_mid_claim(harness: Harness) -> None:
    harness.add_publication()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, harness.cid(), 10, "aeron:ipc"))
    responses = dict(harness.work())
    ready = responses[ResponseType.ON_PUBLICATION_READY]
    with LogBuffers.map(ready.log_file_name) as log:  # type: ignore[attr-defined]
        header = HeaderWriter(lbd.default_frame_header(log.metadata))
        term_id = lbd.initial_term_id(log.metadata)
        appender = TermAppender(log.terms[0], log.metadata, 0)
        # a writer reserves 64 bytes and dies before committing: the frame length stays 0
        log.metadata.get_and_add_long(0, 64)
        assert appender.append_unfragmented(header, b"x" * 10, 0, 10, None, term_id) > 0
        for _ in range(50):
            harness.send(CommandType.CLIENT_KEEPALIVE, CorrelatedMessage(harness.client_id, 0))
            harness.work(advance_ms=100)
        assert log.terms[0].get_int(0) == 64  # padded over
        assert log.terms[0].get_ushort(6) == 0  # PAD
    assert harness.counters.get_counter_value(19) == 1  # UNBLOCKED_PUBLICATIONS


def _claim(harness: Harness, command: CommandType, body: bytes) -> Callable[[], None]:
    """Claim a record in the to-driver ring as a client's write does and stop mid-write (length negative, as a
    thread switched out there leaves it); returns what finishes the write."""
    buffer = harness.cnc.to_driver_buffer
    tail_index = harness.ring.capacity + TAIL_POSITION_OFFSET
    tail = buffer.get_long_volatile(tail_index)
    record_length = HEADER_LENGTH + len(body)
    assert buffer.compare_and_set_long(tail_index, tail, tail + ((record_length + 7) & -8))
    index = tail & (harness.ring.capacity - 1)
    buffer.put_long_ordered(index, (int(command) << 32) | (-record_length & 0xFFFF_FFFF))

    def finish() -> None:
        buffer.put_bytes(index + HEADER_LENGTH, body)
        buffer.put_int_ordered(index, record_length)

    return finish


def _unblocked_commands(harness: Harness) -> int:
    return harness.conductor.system_counters.get(SystemCounterId.UNBLOCKED_COMMANDS).get()


def test_a_command_caught_mid_write_after_a_quiet_spell_is_not_taken_for_a_dead_client(harness: Harness) -> None:
    harness.send(CommandType.ADD_COUNTER, CounterMessage(harness.client_id, harness.cid(), 1001, b"k", "first"))
    assert [kind for kind, _ in harness.work()] == [ResponseType.ON_COUNTER_READY]
    harness.run_for(3_000)  # the ring is still for longer than the client liveness timeout (2 s)
    cid = harness.cid()
    finish = _claim(
        harness, CommandType.ADD_COUNTER, CounterMessage(harness.client_id, cid, 1001, b"k", "late").encode()
    )
    harness.work(advance_ms=100, cycles=1)  # a timer tick while the client is switched out mid-write
    assert _unblocked_commands(harness) == 0
    finish()
    [(kind, ready)] = harness.work()
    assert kind is ResponseType.ON_COUNTER_READY
    assert ready.correlation_id == cid  # type: ignore[attr-defined]


def test_a_record_left_mid_write_for_the_liveness_timeout_is_unblocked_and_the_ring_moves_on(
    harness: Harness,
) -> None:
    harness.run_for(3_000)
    _claim(
        harness, CommandType.ADD_COUNTER, CounterMessage(harness.client_id, harness.cid(), 1001, b"k", "dead").encode()
    )
    cid = harness.cid()
    harness.send(CommandType.ADD_COUNTER, CounterMessage(harness.client_id, cid, 1001, b"k", "behind it"))
    assert harness.run_for(1_900) == []  # the stuck record holds the ring back: nothing behind it is read yet
    assert _unblocked_commands(harness) == 0
    responses = harness.run_for(300)
    assert _unblocked_commands(harness) == 1
    assert [(kind, body.correlation_id) for kind, body in responses] == [  # type: ignore[attr-defined]
        (ResponseType.ON_COUNTER_READY, cid)
    ]


def test_reserved_session_ids_are_left_at_a_random_point() -> None:
    """Drivers whose first pick falls in the reserved range must not all move to the same next id."""
    from driver.core.conductor import _random_outside

    picks = {_random_outside(0x1000_0000, 0x7FFF_FFFF) for _ in range(200)}
    assert all(-(2**31) <= p < 0x1000_0000 for p in picks)
    assert len(picks) > 190
    picks = {_random_outside(-1, 1000) for _ in range(200)}
    assert all(p < -1 or p > 1000 for p in picks)


def test_spy_subscription_reads_a_network_publication_and_frees_its_counter(harness: Harness) -> None:
    channel = "aeron:udp?endpoint=127.0.0.1:40199"
    spy_channel = f"aeron-spy:{channel}"
    early = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, early, 10, spy_channel))
    other_stream = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, other_stream, 11, spy_channel))
    responses = harness.work()
    assert [kind for kind, _ in responses] == [ResponseType.ON_SUBSCRIPTION_READY] * 2
    assert all(r.channel_status_indicator_id == -1 for _, r in responses)  # type: ignore[attr-defined]
    # A publication added later finds the spy waiting for it; one added after it, too.
    pub_id = harness.add_publication(channel=channel)
    responses = harness.work()
    kinds = [kind for kind, _ in responses]
    assert kinds == [ResponseType.ON_PUBLICATION_READY, ResponseType.ON_AVAILABLE_IMAGE]
    ready, image = responses[0][1], responses[1][1]
    assert image.correlation_id == pub_id  # type: ignore[attr-defined]
    assert image.subscription_registration_id == early  # type: ignore[attr-defined]
    assert image.session_id == ready.session_id  # type: ignore[attr-defined]
    assert image.log_file_name == ready.log_file_name  # type: ignore[attr-defined]  # the publication's own log
    assert image.source_identity == "aeron:ipc"  # type: ignore[attr-defined]
    sub_pos = image.subscriber_position_id  # type: ignore[attr-defined]
    label = f"sub-pos: {early} {ready.session_id} 10 {spy_channel} @0"  # type: ignore[attr-defined]
    assert harness.counters.get_counter_label(sub_pos) == label
    late = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, late, 10, spy_channel))
    responses = harness.work()
    assert [kind for kind, _ in responses] == [ResponseType.ON_SUBSCRIPTION_READY, ResponseType.ON_AVAILABLE_IMAGE]
    late_pos = responses[1][1].subscriber_position_id  # type: ignore[attr-defined]
    # Removing a spy frees its position counter; the publication keeps the other one.
    remove = harness.cid()
    harness.send(CommandType.REMOVE_SUBSCRIPTION, RemoveMessage(harness.client_id, remove, early))
    assert [kind for kind, _ in harness.work()] == [ResponseType.ON_OPERATION_SUCCESS]
    (publication,) = harness.conductor.network.publications
    assert [c.id for c in publication.spy_positions] == [late_pos]
    assert harness.counters.get_counter_state(sub_pos) != RECORD_ALLOCATED
    assert harness.counters.get_counter_state(late_pos) == RECORD_ALLOCATED


def test_publications_find_their_spies_among_many_subscriptions_and_removed_spies_are_forgotten(
    harness: Harness,
) -> None:
    """New network publications look for spies in the conductor's spy index, not among every subscription: a
    spy added among many ordinary subscriptions still gets the publication's image, a removed spy leaves the
    index (the next publication does not link it), and the ordinary subscriptions never enter it."""
    channel = "aeron:udp?endpoint=127.0.0.1:40199"
    for n in range(20):
        harness.send(
            CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, harness.cid(), 100 + n, "aeron:ipc")
        )
    spies = [harness.cid(), harness.cid()]
    for cid in spies:
        harness.send(
            CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, cid, 10, f"aeron-spy:{channel}")
        )
    assert [kind for kind, _ in harness.work()] == [ResponseType.ON_SUBSCRIPTION_READY] * 22
    assert [s.registration_id for s in harness.conductor.spy_links] == spies
    harness.add_publication(channel=channel)
    responses = harness.work()
    images = [r for kind, r in responses if kind is ResponseType.ON_AVAILABLE_IMAGE]
    assert sorted(i.subscription_registration_id for i in images) == spies  # type: ignore[attr-defined]
    harness.send(CommandType.REMOVE_SUBSCRIPTION, RemoveMessage(harness.client_id, harness.cid(), spies[0]))
    assert [kind for kind, _ in harness.work()] == [ResponseType.ON_OPERATION_SUCCESS]
    assert [s.registration_id for s in harness.conductor.spy_links] == spies[1:]
    harness.add_publication(channel=channel, stream_id=10, exclusive=True)
    images = [r for kind, r in harness.work() if kind is ResponseType.ON_AVAILABLE_IMAGE]
    assert [i.subscription_registration_id for i in images] == spies[1:]  # type: ignore[attr-defined]
    for publication in harness.conductor.network.publications:
        assert len(publication.spy_positions) == 1


def test_spy_prefix_on_a_publication_or_ipc_is_refused(harness: Harness) -> None:
    on_publication = harness.add_publication(channel="aeron-spy:aeron:udp?endpoint=127.0.0.1:40199")
    on_ipc = harness.cid()
    harness.send(
        CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, on_ipc, 10, "aeron-spy:aeron:ipc")
    )
    errors = {r.offending_correlation_id: r for kind, r in harness.work() if kind is ResponseType.ON_ERROR}  # type: ignore[attr-defined]
    assert errors[on_publication].error_code == ErrorCode.INVALID_CHANNEL
    assert "for subscriptions" in errors[on_publication].error_message
    assert errors[on_ipc].error_code == ErrorCode.INVALID_CHANNEL
    assert harness.conductor.subscription_links == []


def test_spies_out_of_counters_fail_alone(tmp_path: Path) -> None:
    """A spy for which no counter is left misses the new publication (logged, counted), and the publication and
    its client are answered as usual; a spy added then is refused and leaves nothing behind."""
    probe = Harness(tmp_path / "probe")
    system = sum(
        1 for cid in range(probe.counters.max_counter_id) if probe.counters.get_counter_state(cid) == RECORD_ALLOCATED
    )
    probe.close()
    # room for the client's heartbeat, the publication's 4 counters and its channel status, and one spy
    harness = ConductorHarness(tmp_path / "aeron", counters_values_buffer_length=(system + 7) * 128)
    try:
        channel = "aeron:udp?endpoint=127.0.0.1:40199"
        spies = [harness.cid(), harness.cid()]
        for cid in spies:
            harness.send_raw(
                CommandType.ADD_SUBSCRIPTION,
                SubscriptionMessage(harness.client_id, cid, 10, f"aeron-spy:{channel}").encode(),
            )
        publication = harness.cid()
        harness.send_raw(
            CommandType.ADD_PUBLICATION, PublicationMessage(harness.client_id, publication, 10, channel).encode()
        )
        responses = [decode_response(t, b) for t, b in harness.work()]
        kinds = [kind for kind, _ in responses]
        assert kinds == [ResponseType.ON_SUBSCRIPTION_READY] * 2 + [
            ResponseType.ON_PUBLICATION_READY,
            ResponseType.ON_AVAILABLE_IMAGE,
        ]
        assert responses[3][1].subscription_registration_id == spies[0]  # type: ignore[attr-defined]
        (errors,) = read_error_log(harness.cnc.error_log_buffer)
        assert "CountersFullError" in errors.text, errors.text
        assert harness.counters.get_counter_value(15) == 1  # ERRORS
        late = harness.cid()
        harness.send_raw(
            CommandType.ADD_SUBSCRIPTION,
            SubscriptionMessage(harness.client_id, late, 10, f"aeron-spy:{channel}").encode(),
        )
        [(kind, error)] = [decode_response(t, b) for t, b in harness.work()]
        assert kind is ResponseType.ON_ERROR
        assert error.offending_correlation_id == late  # type: ignore[attr-defined]
        assert [s.registration_id for s in harness.conductor.subscription_links] == spies
    finally:
        harness.close()


def test_commands_held_back_by_a_full_agent_queue_are_all_answered_once_the_agent_drains(tmp_path: Path) -> None:
    """Queues to the agents that hold one command, and a sender that takes nothing for a while: what the conductor
    could not hand over waits in its backlog, and from then on it reads no client command (not even one the
    sender has no part in); once the sender drains, every command is handed over in order and every client
    command is answered, once."""
    harness = Harness(tmp_path / "aeron", command_queue_capacity=1)
    try:
        sender = harness.conductor.sender
        channel = "aeron:udp?endpoint=127.0.0.1:40199"
        added = [harness.add_publication(channel=channel, stream_id=10 + n, exclusive=True) for n in range(4)]
        remove_id = harness.cid()
        harness.send(CommandType.REMOVE_PUBLICATION, RemoveMessage(harness.client_id, remove_id, added[0]))
        counter_id = harness.cid()
        harness.send(CommandType.ADD_COUNTER, CounterMessage(harness.client_id, counter_id, 1001, b"k", "after"))
        # The first publication fills the sender's queue, the second waits in the backlog: nothing more is read.
        assert [body.correlation_id for _, body in harness.work()] == added[:2]  # type: ignore[attr-defined]
        assert len(sender.commands) == 1
        assert harness.conductor.has_pending_work()
        assert harness.run_for(1_500) == []  # held back: the ring waits for the backlog
        assert _unblocked_commands(harness) == 0
        answered: list[int] = []
        for _ in range(10):
            sender.commands.drain()
            answered += [body.correlation_id for _, body in harness.work(cycles=1)]  # type: ignore[attr-defined]
        assert answered == [*added[2:], remove_id, counter_id]
        assert [p.registration_id for p in sender.publications] == added
        assert len(sender.commands) == 0
        assert not harness.conductor.has_pending_work()
    finally:
        harness.close()


def test_a_subscription_on_a_channel_whose_endpoint_is_still_closing_waits_for_its_port(harness: Harness) -> None:
    """Its last subscription gone, a channel's endpoint is handed to the receiver to close: a new subscription on
    the channel meanwhile is read only once the old socket has let go of the port (it used to make a second
    endpoint at once and fail with "address already in use")."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    channel = f"aeron:udp?endpoint=127.0.0.1:{port}"
    first = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, first, 10, channel))
    assert [kind for kind, _ in harness.work()] == [ResponseType.ON_SUBSCRIPTION_READY]
    remove_id = harness.cid()
    harness.send(CommandType.REMOVE_SUBSCRIPTION, RemoveMessage(harness.client_id, remove_id, first))
    again = harness.cid()
    harness.send(CommandType.ADD_SUBSCRIPTION, SubscriptionMessage(harness.client_id, again, 10, channel))
    # The receiver (not run here) has yet to let go of the endpoint: the remove is answered, the add waits.
    assert [(kind, body.correlation_id) for kind, body in harness.work()] == [  # type: ignore[attr-defined]
        (ResponseType.ON_OPERATION_SUCCESS, remove_id)
    ]
    assert harness.conductor.network.endpoints_closing
    receiver = harness.conductor.receiver
    answered: list[tuple[ResponseType, int]] = []
    for _ in range(5):
        receiver.commands.drain()
        answered += [(kind, body.correlation_id) for kind, body in harness.work(cycles=1)]  # type: ignore[attr-defined]
    assert answered == [(ResponseType.ON_SUBSCRIPTION_READY, again)]
    assert not harness.conductor.network.endpoints_closing
    assert len(harness.conductor.network.receive_endpoints) == 1
