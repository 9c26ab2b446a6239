"""A sender whose driver has only clients of its own process looks for frames only after one was written.

Past a few publications the sender finds those with a frame to send by looking at each one's log every duty
cycle. When every client of the driver runs in the driver's process, this process's count of committed frames
says whether anything was written since a look that found nothing; the sender then skips the look. These tests
drive an INVOKER-mode publisher driver by hand: each way a client can write to a publication must make the very
next duty cycles send it (a write path that forgot to count would wait for a heartbeat instead), and a client of
another process must make the sender look every cycle again.
"""

from __future__ import annotations

import multiprocessing
import struct
from collections.abc import Callable

from udp_helpers import Collector, UdpDrivers, free_udp_port

from driver import local_clients
from driver.client import ADMIN_ACTION, BufferClaim, Publication, Subscription
from driver.core.media_driver import MediaDriver
from driver.core.network_publication import NetworkPublication
from driver.core.sender import FEW_PUBLICATIONS
from driver.logbuffer.frame import BEGIN_FRAG_FLAG, END_FRAG_FLAG, HDR_TYPE_DATA, HEADER_LENGTH
from support.child_clients import publish_checked
from support.waiting import execute_until

SPAWN = multiprocessing.get_context("spawn")
TERM = 64 * 1024
CYCLES = 3
"""Duty cycles a write may take to leave (one does it; the rest spare the test a stray command or timer)."""


class Rig:
    """A publisher driver run by this test's calls, its client's publications, and a threaded subscriber."""

    def __init__(self, udp: UdpDrivers, streams: int) -> None:
        self.driver: MediaDriver = udp.embedded("pub", threading_mode="INVOKER")
        assert self.driver.invoker is not None
        self.invoker = self.driver.invoker
        subscriber_driver = udp.embedded("sub")
        self.client = udp.client(self.driver.aeron_dir, driver_agent_invoker=self.invoker)
        self.subscriber = udp.client(subscriber_driver.aeron_dir)
        self.channel = f"aeron:udp?endpoint=127.0.0.1:{free_udp_port()}|term-length={TERM}|mtu=1408"
        self.subscriptions: list[Subscription] = []
        self.publications: list[Publication] = []
        self.collectors: list[Collector] = []
        for stream_id in range(1, streams + 1):
            self.add_stream(stream_id, exclusive=stream_id == streams)
        self.connect()

    def add_stream(self, stream_id: int, exclusive: bool = False) -> Publication:
        """A publication (and its subscription) on ``stream_id``; :meth:`connect` waits for it."""
        self.subscriptions.append(self.subscriber.add_subscription(self.channel, stream_id))
        add = self.client.add_exclusive_publication if exclusive else self.client.add_publication
        self.publications.append(add(self.channel, stream_id))
        self.collectors.append(Collector())
        return self.publications[-1]

    def remove_stream(self, publication: Publication) -> None:
        """Close ``publication`` and its subscription; returns once the sender let go of it."""
        index = self.publications.index(publication)
        self.subscriptions.pop(index).close()
        self.collectors.pop(index)
        self.publications.pop(index).close()
        execute_until(
            lambda: len(self.sender_publications) == len(self.publications),
            self.run,
            timeout_s=10,
            max_iterations=1_000_000,
            interval_s=0.0005,
            description="the closed publication gone from the sender",
        )

    def connect(self) -> None:
        execute_until(
            lambda: all(p.is_connected for p in self.publications) and all(s.images for s in self.subscriptions),
            self.run,
            timeout_s=10,
            max_iterations=1_000_000,
            interval_s=0.0005,
            description="the publications connected",
        )

    @property
    def sender_publications(self) -> list[NetworkPublication]:
        return self.driver.conductor.sender.publications

    def run(self) -> None:
        self.invoker.invoke()
        for subscription, collector in zip(self.subscriptions, self.collectors, strict=True):
            collector.poll(subscription)

    def ours(self, publication: Publication) -> NetworkPublication:
        return next(p for p in self.sender_publications if p.session_id == publication.session_id)

    def sent(self, publication: Publication) -> int:
        return self.ours(publication).sender_position.get_volatile()

    def limit(self, publication: Publication) -> int:
        return self.ours(publication).sender_limit.get()

    def leaves_at_once(self, publication: Publication, what: str) -> None:
        """What ``publication`` holds is all sent within :data:`CYCLES` duty cycles of the driver."""
        for _ in range(CYCLES):
            self.invoker.invoke()
            if self.sent(publication) == publication.position:
                return
        raise AssertionError(f"{what}: sent up to {self.sent(publication)}, written up to {publication.position}")

    def idle_cycles_skip_the_look(self) -> None:
        sender = self.driver.conductor.sender
        self.invoker.invoke()
        before = sender.looks_skipped
        for _ in range(5):
            self.invoker.invoke()
        assert sender.looks_skipped >= before + 4, "the sender looked at every log though nothing was written"


def one_frame_block(publication: Publication, payload: bytes) -> bytes:
    """A whole DATA frame that continues ``publication`` where it stands (as an archive's replay would)."""
    position = publication.position
    term_offset = position & (publication.term_buffer_length - 1)
    term_id = publication.initial_term_id + (position >> publication.position_bits_to_shift)
    frame_length = HEADER_LENGTH + len(payload)
    header = struct.pack(
        "<iBBhiiiiq",
        frame_length,
        0,
        BEGIN_FRAG_FLAG | END_FRAG_FLAG,
        HDR_TYPE_DATA,
        term_offset,
        publication.session_id,
        publication.stream_id,
        term_id,
        0,
    )
    block = header + payload
    return block + bytes(-len(block) % 32)


def test_every_way_of_writing_leaves_at_once_while_idle_cycles_skip_the_look(udp: UdpDrivers) -> None:
    rig = Rig(udp, streams=4)
    assert len(rig.sender_publications) > FEW_PUBLICATIONS  # the sender's look over every log, not a visit each
    concurrent, other, _, exclusive = rig.publications
    claim = BufferClaim()
    writes: list[tuple[str, Publication, Callable[[], int]]] = [
        ("offer", concurrent, lambda: concurrent.offer(b"native offer")),
        (
            "offer with a reserved value",
            concurrent,
            lambda: concurrent.offer(b"reserved", reserved_value_supplier=lambda *_: 7),
        ),
        ("fragmented offer", other, lambda: other.offer(bytes(3 * 1408))),
        ("batch", other, lambda: other.offer_batch([b"one", b"two", b"three"])),
        ("claim committed", concurrent, lambda: _claim(concurrent, claim, commit=True)),
        ("claim aborted", concurrent, lambda: _claim(concurrent, claim, commit=False)),
        ("exclusive offer", exclusive, lambda: exclusive.offer(b"exclusive")),
        ("exclusive padding", exclusive, lambda: exclusive.append_padding(100)),  # type: ignore[attr-defined]
        ("exclusive block", exclusive, lambda: exclusive.offer_block(one_frame_block(exclusive, b"block"))),  # type: ignore[attr-defined]
    ]
    for what, publication, write in writes:
        rig.idle_cycles_skip_the_look()
        assert write() > 0, what
        rig.leaves_at_once(publication, what)

    # The offer that meets the end of a term pads it out and rotates: the padding alone must leave as well. Each
    # message is sent and read first, and the receiver's window seen past the term's end (status messages).
    message = bytes(1000)
    for _ in range(2 * TERM // len(message)):
        execute_until(
            lambda: (
                rig.sent(concurrent) == concurrent.position
                and rig.limit(concurrent) >= concurrent.position + 2 * len(message)
            ),
            rig.run,
            timeout_s=10,
            max_iterations=1_000_000,
            interval_s=0.0002,
            description="the window open past the next message",
        )
        rig.idle_cycles_skip_the_look()
        result = concurrent.offer(message)
        if result == ADMIN_ACTION:
            break
        assert result > 0, result
    else:
        raise AssertionError("no term rotation")
    assert concurrent.position % TERM == 0
    rig.leaves_at_once(concurrent, "the padding at the end of a term")
    rig.idle_cycles_skip_the_look()


def test_publications_that_come_and_go_are_looked_at_like_the_first(udp: UdpDrivers) -> None:
    """The sender's look grows by publications that come and is made again when one goes (the last one then takes
    its place): every publication's write leaves at once either way."""
    rig = Rig(udp, streams=3)
    first, second, third = rig.publications
    rig.idle_cycles_skip_the_look()
    fourth, fifth = rig.add_stream(4), rig.add_stream(5, exclusive=True)
    rig.connect()
    for publication in (fifth, first, fourth):
        rig.idle_cycles_skip_the_look()
        assert publication.offer(b"after newcomers") > 0
        rig.leaves_at_once(publication, f"stream {publication.stream_id} after two came")
    rig.remove_stream(second)
    sixth = rig.add_stream(6)
    rig.connect()
    for publication in (fifth, third, sixth, first):  # the last one moved into the place of the one that went
        rig.idle_cycles_skip_the_look()
        assert publication.offer(b"after one went") > 0
        rig.leaves_at_once(publication, f"stream {publication.stream_id} after one went")


def test_the_conductors_timer_step_sees_writes_as_publications_come_and_go(udp: UdpDrivers) -> None:
    """The conductor's timer step visits the publications written to since its last step (one native look at their
    term tails) and the new ones: its watch grows by publications that come, and is made again when one goes. A
    visit is seen in the publisher position it writes, behind the log until a step visits the publication."""
    rig = Rig(udp, streams=3)
    network = rig.driver.conductor.network
    clock = rig.driver.conductor.now_ns

    def write(publications: list[Publication], what: str) -> None:
        for publication in publications:
            assert publication.offer(b"written before the step") > 0, what
            assert rig.ours(publication).publisher_position.get() < publication.position, what

    def visited(publications: list[Publication], what: str) -> None:
        network.on_timer(clock())
        for publication in publications:
            assert rig.ours(publication).publisher_position.get() == publication.position, what

    first, second, third = rig.publications
    network.on_timer(clock())  # the first look: every publication, the tails remembered
    assert all(rig.ours(p).timer_quiet for p in rig.publications)  # (so only a write gets one visited)
    write([second], "an old one written")
    visited([second], "an old one written")
    write([first], "written before one came")
    fourth = rig.add_stream(4)
    rig.connect()  # (the driver's own timer may take the step: either way the write is seen)
    write([fourth], "one that came")
    visited([first, fourth], "written before one came, and the newcomer")
    write([third], "the watch grown")
    visited([third], "the watch grown")
    write([fourth], "before one went")
    rig.remove_stream(second)
    visited([fourth], "before one went")
    write([first], "the watch made again")
    visited([first], "the watch made again")


def _claim(publication: Publication, claim: BufferClaim, commit: bool) -> int:
    result = publication.try_claim(16, claim)  # type: ignore[attr-defined]
    if result > 0:
        claim.put_bytes(b"claimed message!")
        claim.commit() if commit else claim.abort()
    return result


def test_a_client_of_another_process_makes_the_sender_look_every_cycle(udp: UdpDrivers) -> None:
    rig = Rig(udp, streams=3)
    sender = rig.driver.conductor.sender
    rig.idle_cycles_skip_the_look()
    stream_id = 9
    theirs = rig.subscriber.add_subscription(rig.channel, stream_id)
    ready, go, done = SPAWN.Event(), SPAWN.Event(), SPAWN.Event()
    count = 300
    child = SPAWN.Process(
        target=publish_checked,
        args=(str(rig.driver.aeron_dir), rig.channel, stream_id, 1, count, 200, ready, go, done),
    )
    child.start()
    try:
        execute_until(
            ready.is_set,
            rig.invoker.invoke,
            timeout_s=30,
            max_iterations=10_000_000,
            interval_s=0.0005,
            description="the child's publication",
        )
        # From the child's first command on, no cycle skips the look: only the child knows what it writes.
        skipped = sender.looks_skipped
        go.set()
        collector = Collector(publisher_id=1)
        execute_until(
            lambda: len(collector.seqs) >= count or bool(collector.problems),
            lambda: (rig.invoker.invoke(), collector.poll(theirs)),
            timeout_s=30,
            max_iterations=10_000_000,
            interval_s=0.0001,
            description="the child's messages",
        )
        collector.check(count)
        assert sender.looks_skipped == skipped
    finally:
        done.set()
        child.join(30)
        if child.is_alive():
            child.kill()
            child.join(10)
    assert child.exitcode == 0
    # The child closed its client: the driver's clients are all of this process again.
    execute_until(
        lambda: sender.looks_skipped > skipped,
        rig.invoker.invoke,
        timeout_s=10,
        max_iterations=10_000_000,
        interval_s=0.0005,
        description="idle cycles skipping the look again",
    )
    rig.idle_cycles_skip_the_look()


def test_a_client_is_known_as_local_to_its_driver_until_it_closes(udp: UdpDrivers) -> None:
    driver = udp.embedded("pub")
    key = local_clients.driver_key(driver.cnc.path, driver.cnc.start_timestamp_ms)
    client = udp.client(driver.aeron_dir)
    assert local_clients.is_local(key, client.client_id)
    client.add_subscription("aeron:ipc", 1)  # a command: the driver has met the client
    assert client.client_id in driver.conductor.clients
    client.close()
    assert not local_clients.is_local(key, client.client_id)
