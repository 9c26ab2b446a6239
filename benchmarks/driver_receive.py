"""CPU per datagram of the driver's receive path: a receive endpoint with many images, small datagrams.

    python benchmarks/driver_receive.py [--images 200] [--datagrams 4000] [--rounds 5] [--idle-seconds 3]

What a game server's driver does for every datagram its players send: read it from the socket, route it by
session and stream to its image, check it, insert it into the term, move the high-water mark, and track the
rebuild the image then asks for. One process, real sockets on 127.0.0.1: a sender socket writes a burst of
``--datagrams`` datagrams round-robin over ``--images`` images (each image's data in order, one 64-byte
frame or one heartbeat each), then the endpoint is polled until all are read, as the receiver agent would
(``poll`` with its limit of 32, then ``track_rebuild`` for each image that asked to be tracked). Only the
polling is timed, in CPU time of this thread (``time.thread_time``), so a machine busy with other work
changes the figure less than wall time would. The best round of ``--rounds`` is printed (µs per datagram).

Idle: the same images, quiet (no data), in a real ``Receiver`` whose clock the benchmark moves on 1 ms per
duty cycle over ``--idle-seconds`` of its time: each image sends a status message every 200 ms (to a real
socket). Printed: the receiver's CPU per status message sent, and per image per second of its time.
"""

from __future__ import annotations

import argparse
import socket
import tempfile
import time
from pathlib import Path

from _common import driver_log

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.command_queues import CommandQueue
from driver.core.congestion import StaticWindowCongestionControl
from driver.core.loss_detector import LossDetector, StaticDelayGenerator
from driver.core.publication_image import ImageCounters, PublicationImage
from driver.core.receiver import Receiver
from driver.logbuffer.frame import HDR_TYPE_DATA
from driver.media.endpoints import EndpointCounters, ReceiveChannelEndpoint
from driver.media.udp_channel import UdpChannel
from driver.wire.data import HEARTBEAT_FLAGS, write_data_header, write_heartbeat

STREAM, INITIAL = 10, 100
TERM_LENGTH = 64 * 1024
WINDOW = 32 * 1024
FRAME = 64


SM_TIMEOUT_NS = 200_000_000


class _Clock:
    """The receiver's clock, moved on by the benchmark."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def nano_time(self) -> int:
        return self.now_ns


def run(images: int, datagrams: int, rounds: int, heartbeats: bool, idle_seconds: float = 0.0) -> float:
    room = (images * 3 + 200) * 512  # three counters an image, and the system counters
    manager = CountersManager(AtomicBuffer(bytearray(room * 2)), AtomicBuffer(bytearray(room)))
    sc = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
    counters = EndpointCounters.of(sc.__getitem__)
    channel = UdpChannel.parse("aeron:udp?endpoint=127.0.0.1:0")
    endpoint = ReceiveChannelEndpoint(
        channel, counters, manager.new_counter("status"), lambda *_: True, 1, so_rcvbuf=8 * 1024 * 1024
    )
    endpoint.add_stream(STREAM, None)
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 8 * 1024 * 1024)
    source = sender.getsockname()
    target = endpoint.transport.local_address
    woken: set[PublicationImage] = set()
    made: list[PublicationImage] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(images):
            session = 1000 + index
            log = driver_log(Path(tmp) / f"{session}.logbuffer", session, STREAM, INITIAL, TERM_LENGTH, image=True)
            image = PublicationImage(
                correlation_id=session,
                session_id=session,
                stream_id=STREAM,
                channel="aeron:udp?endpoint=127.0.0.1:0",
                endpoint=endpoint,
                log=log,
                active_term_id=INITIAL,
                term_offset=0,
                source_address=source,
                control_address=source,
                send_control=endpoint.send_control,
                receiver_id=1,
                hwm_position=manager.new_counter("hwm"),
                rebuild_position=manager.new_counter("rebuild"),
                loss_detector_factory=lambda on_gap: LossDetector(StaticDelayGenerator(60_000_000, True), on_gap),
                congestion_control=StaticWindowCongestionControl(WINDOW, TERM_LENGTH),
                counters=ImageCounters(
                    heartbeats_received=sc[SystemCounterId.HEARTBEATS_RECEIVED],
                    status_messages_sent=sc[SystemCounterId.STATUS_MESSAGES_SENT],
                    naks_sent=sc[SystemCounterId.NAK_MESSAGES_SENT],
                    flow_control_under_runs=sc[SystemCounterId.FLOW_CONTROL_UNDER_RUNS],
                    flow_control_over_runs=sc[SystemCounterId.FLOW_CONTROL_OVER_RUNS],
                    loss_gap_fills=sc[SystemCounterId.LOSS_GAP_FILLS],
                ),
                status_message_timeout_ns=SM_TIMEOUT_NS if idle_seconds else 1 << 60,
                image_liveness_timeout_ns=1 << 60,
                is_reliable=True,
                on_loss=None,
                now_ns=0,
            )
            subscriber = manager.new_counter("sub")
            set_positions = getattr(image, "set_subscriber_positions", None)  # (the commit before had none)
            if set_positions is not None:
                set_positions((subscriber,))
            else:
                image.subscriber_positions = (subscriber,)
            image.wake = lambda image=image: woken.add(image)  # type: ignore[misc]
            add = getattr(endpoint, "add_image", None)
            if add is not None:
                add((session, STREAM), image)
            else:
                endpoint.images[(session, STREAM)] = image
            made.append(image)
        if idle_seconds:
            cost = _idle(endpoint, made, manager, sc[SystemCounterId.STATUS_MESSAGES_SENT], idle_seconds)
            for image in made:
                image.close()
            endpoint.close()
            sender.close()
            return cost
        best = float("inf")
        offsets = [0] * images
        frame = bytearray(FRAME)
        for _ in range(rounds):  # (the data stays within the window: rounds * datagrams / images frames each)
            sent = 0
            for n in range(datagrams):
                index = n % images
                image = made[index]
                if heartbeats:
                    write_heartbeat(frame, 0, image.session_id, STREAM, INITIAL, 0, HEARTBEAT_FLAGS)
                    sender.sendto(frame[:32], target)
                else:
                    offset = offsets[index]
                    write_data_header(frame, 0, FRAME, 0xC0, HDR_TYPE_DATA, offset, image.session_id, STREAM, INITIAL)
                    sender.sendto(frame, target)
                    offsets[index] = offset + FRAME
                sent += 1
            time.sleep(0.05)
            read = 0
            started = time.thread_time()
            for _ in range(datagrams * 4):
                count = endpoint.poll(1, 32)
                read += count
                for image in list(woken):
                    image.track_rebuild(1)
                woken.clear()
                if count == 0 and read >= sent:
                    break
            elapsed = time.thread_time() - started
            if read < sent:
                raise SystemExit(f"only {read} of {sent} datagrams arrived (kernel buffer?)")
            best = min(best, elapsed / sent * 1e6)
        for image in made:
            image.close()
    endpoint.close()
    sender.close()
    return best


def _idle(
    endpoint: ReceiveChannelEndpoint,
    images: list[PublicationImage],
    manager: CountersManager,
    sms_sent: object,
    seconds: float,
) -> float:
    """CPU µs per status message of a receiver whose images are all quiet."""
    clock = _Clock()
    receiver = Receiver(clock, CommandQueue(manager.new_counter("fails")))
    for image in images:
        image.endpoint = endpoint
    receiver.endpoints.append(endpoint)
    receiver._ready.add(endpoint)
    for image in images:
        endpoint.pending_setups.pop((image.session_id, image.stream_id), None)
        receiver.on_new_image(endpoint, image)
    for _ in range(10):  # settle: first tracks, first status messages
        receiver.do_work()
        clock.now_ns += 1_000_000
    before = sms_sent.get()  # type: ignore[attr-defined]
    started = time.thread_time()
    for _ in range(int(seconds * 1000)):
        receiver.do_work()
        clock.now_ns += 1_000_000
    elapsed = time.thread_time() - started
    sent = sms_sent.get() - before  # type: ignore[attr-defined]
    print(
        f"{'idle, status messages':>22}: {elapsed / max(sent, 1) * 1e6:6.2f} µs of CPU per status message "
        f"({sent} sent), {elapsed / seconds / len(images) * 1e6:6.1f} µs per image per second"
    )
    return elapsed / max(sent, 1) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--datagrams", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    args = parser.parse_args()
    for kind, heartbeats in (("data, 64-byte frames", False), ("heartbeats", True)):
        cost = run(args.images, args.datagrams, args.rounds, heartbeats)
        print(f"{kind:>22}: {cost:6.2f} µs of CPU per datagram ({args.images} images, best of {args.rounds})")
    if args.idle_seconds:
        run(args.images, 0, 0, False, args.idle_seconds)


if __name__ == "__main__":
    main()
