"""A receive endpoint's native routes follow its subscriptions: an image's data is taken while its stream has a
subscriber and dropped once it has none, whatever order images and subscriptions come and go in (a subscription to
a stream without images, a server's next connection, looks at no other stream's images)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.logbuffer import descriptor as lbd
from driver.media._net import ImageSlot
from driver.media.endpoints import EndpointCounters, ReceiveChannelEndpoint
from driver.media.udp_channel import UdpChannel
from driver.wire.setup import SetupFrame

TERM_LENGTH = 64 * 1024
A, B, C = 10, 11, 12


@dataclass
class _Image:
    """What the endpoint keeps of an image: its native slot."""

    slot: ImageSlot


def _slot(manager: CountersManager, session_id: int, stream_id: int) -> ImageSlot:
    counter = {name: manager.new_counter(f"{name}-{session_id}") for name in ("hwm", "rebuild", "hb", "u", "o", "sm")}
    return ImageSlot(
        terms=[AtomicBuffer(bytearray(TERM_LENGTH)) for _ in range(3)],
        metadata=AtomicBuffer(bytearray(lbd.LOG_META_DATA_LENGTH)),
        eos_offset=lbd.LOG_END_OF_STREAM_POSITION_OFFSET,
        session_id=session_id,
        stream_id=stream_id,
        initial_term_id=0,
        position_bits=TERM_LENGTH.bit_length() - 1,
        hwm_position=counter["hwm"].location(),
        rebuild_position=counter["rebuild"].location(),
        heartbeats=counter["hb"].location(),
        under_runs=counter["u"].location(),
        over_runs=counter["o"].location(),
        position=0,
        window_limit=TERM_LENGTH // 2,
        now_ns=0,
        status_messages_sent=counter["sm"].location(),
        status_message_timeout_ns=1_000_000_000,
        receiver_id=1,
    )


@contextlib.contextmanager
def _endpoint(
    on_setup: Callable[[object, tuple[int, ...], object], bool] = lambda _endpoint, _fields, _source: True,
) -> Iterator[tuple[ReceiveChannelEndpoint, CountersManager]]:
    manager = CountersManager(AtomicBuffer(bytearray(256 * 1024)), AtomicBuffer(bytearray(64 * 1024)))
    system = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    endpoint = ReceiveChannelEndpoint(
        UdpChannel.parse(f"aeron:udp?endpoint=127.0.0.1:{port}"),
        EndpointCounters.of(system.__getitem__),
        manager.new_counter("rcv-channel"),
        on_setup,
        receiver_id=1,
    )
    try:
        yield endpoint, manager
    finally:
        endpoint.close()


def test_routes_follow_subscriptions_and_images_in_any_order() -> None:
    with _endpoint() as (endpoint, manager):
        a1, a2, b1 = (_Image(_slot(manager, s, stream)) for s, stream in ((1, A), (2, A), (3, B)))
        endpoint.add_image((1, A), a1)
        endpoint.add_image((3, B), b1)
        assert len(endpoint.routes) == 0  # nobody subscribes: data for them is dropped
        endpoint.add_stream(A, None)
        assert len(endpoint.routes) == 1
        endpoint.add_image((2, A), a2)  # a new image of a subscribed stream is routed at once
        assert len(endpoint.routes) == 2
        endpoint.add_stream(C, None)  # a stream without images (the next connection's) changes nothing
        endpoint.add_stream(A, None)  # a second subscriber of A: still routed once
        assert len(endpoint.routes) == 2
        endpoint.remove_stream(A, None)
        assert len(endpoint.routes) == 2  # one subscriber of A left
        endpoint.remove_stream(A, None)
        assert len(endpoint.routes) == 0  # A's last subscriber went: both its images' data is dropped
        endpoint.add_stream(B, None)
        assert len(endpoint.routes) == 1
        endpoint.remove_image((2, A), a2)
        endpoint.add_stream(A, None)  # A's one image left is taken again
        assert len(endpoint.routes) == 2
        endpoint.remove_image((1, A), a1)
        endpoint.remove_stream(A, None)
        endpoint.add_stream(A, None)  # no images of A left: nothing to route
        assert len(endpoint.routes) == 1
        endpoint.remove_image((3, B), b1)
        assert len(endpoint.routes) == 0
        assert endpoint.images == {}


def test_endpoints_polled_by_one_thread_share_its_buffer_and_threads_do_not() -> None:
    """Every endpoint a thread polls reads into that thread's one receive buffer; two threads polling at once
    (a sender and a receiver, or the keeper standing in) each read into their own, and nothing is mixed up."""
    sessions: dict[int, list[int]] = {0: [], 1: []}
    setups_each = 200
    with contextlib.ExitStack() as stack:
        endpoints = [
            stack.enter_context(_endpoint(lambda _e, fields, _s, i=i: sessions[i].append(fields[5]) is None))[0]
            for i in range(2)
        ]
        for endpoint in endpoints:
            endpoint.add_stream(A, None)
        assert endpoints[0]._view is endpoints[1]._view
        views: dict[int, memoryview] = {}

        def poll(i: int) -> None:
            endpoint = endpoints[i]
            deadline = time.monotonic() + 10.0
            while len(sessions[i]) < setups_each and time.monotonic() < deadline:
                endpoint.poll(time.monotonic_ns())
            views[i] = endpoint._view

        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sender:
            for n in range(setups_each):
                for i, endpoint in enumerate(endpoints):
                    session = (i + 1) * 1_000_000 + n
                    frame = SetupFrame(0, session, A, 0, 0, TERM_LENGTH, 1408)
                    sender.sendto(frame.encode(), ("127.0.0.1", endpoint.transport.local_address[1]))
            threads = [threading.Thread(target=poll, args=(i,)) for i in range(2)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(15.0)
        assert sessions[0] == [1_000_000 + n for n in range(setups_each)]
        assert sessions[1] == [2_000_000 + n for n in range(setups_each)]
        assert views[0] is not views[1]
