"""CPU per datagram of the driver's send path: a sender agent with many publications, small frames, idle heartbeats.

    python benchmarks/driver_send.py [--publications 200] [--rounds 20] [--idle-seconds 3] [--path both] [--quick]

What a game server's driver does for every snapshot it sends a player: find the publications with a frame
waiting, read each from its sender position up to its sender limit, send the datagram, move the sender position.
One process, real sockets on 127.0.0.1: ``--publications`` network publications on one send endpoint (a real
``SendChannelEndpoint``, a real ``Sender`` agent), each given one 64-byte frame per round (written into its
mmap'd term as a publisher would), then the sender's duty cycle runs until all are sent. Only the duty cycles
are timed, in CPU time of this thread (``time.thread_time``); the best round is printed (µs per datagram).

Idle: the same publications, quiet, the sender's clock moved on 1 ms per duty cycle over ``--idle-seconds`` of
its time: each heartbeats every 100 ms (Aeron's default). Printed: CPU per heartbeat, and per publication per
second of its time.

``floor`` (always printed): the same number of 96-byte datagrams to the same socket by a bare loop of
``DatagramSocket.sendto``, one system call each and no driver work: what any driver pays the kernel per
datagram on this machine (on loopback the sender's CPU also delivers it to the receiving socket).

``--path native`` runs the batched native step (``send_publications``, sendmmsg); ``--path python`` unbinds each
publication's native slot so every datagram goes through ``NetworkPublication.send`` and one ``sendto`` (the path
before it, and still the path with faults injected); ``both`` runs them side by side in the same process.
"""

from __future__ import annotations

import argparse
import socket
import struct
import tempfile
import time
from pathlib import Path

from _common import driver_log

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.command_queues import CommandQueue
from driver.core.flow_control import new_flow_control
from driver.core.loss_detector import StaticDelayGenerator
from driver.core.network_publication import NetworkPublication, SenderCounters
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RETRANSMIT_UNICAST_LINGER_NS, RetransmitHandler
from driver.core.sender import Sender
from driver.logbuffer.log_buffers import LogBuffers
from driver.media._net import DatagramSocket
from driver.media.endpoints import EndpointCounters, SendChannelEndpoint
from driver.media.udp_channel import UdpChannel

STREAM, INITIAL = 10, 100
TERM_LENGTH = 64 * 1024
FRAME = 64
_HEADER = struct.Struct("<iBBHiiiiq")


class _Clock:
    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def nano_time(self) -> int:
        return self.now_ns


def run(publications: int, rounds: int, idle_seconds: float, native: bool) -> tuple[float, float, float]:
    """(µs per data datagram, µs per heartbeat, µs per publication per idle second)."""
    room = (publications * 4 + 200) * 512
    manager = CountersManager(AtomicBuffer(bytearray(room * 2)), AtomicBuffer(bytearray(room)))
    sc = {sid: manager.new_counter(sid.label, 0) for sid in SystemCounterId}
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    channel = UdpChannel.parse(f"aeron:udp?endpoint=127.0.0.1:{sink.getsockname()[1]}")
    endpoint = SendChannelEndpoint(
        channel,
        EndpointCounters.of(sc.__getitem__),
        manager.new_counter("status"),
        so_sndbuf=8 * 1024 * 1024,
    )
    clock = _Clock()
    sender = Sender(clock, CommandQueue(manager.new_counter("fails")), 4)
    made: list[tuple[NetworkPublication, LogBuffers]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(publications):
            session = 1000 + index
            log = driver_log(Path(tmp) / f"{session}.logbuffer", session, STREAM, INITIAL, TERM_LENGTH)
            publication = NetworkPublication(
                registration_id=session,
                channel=channel.original_uri_string,
                endpoint=endpoint,
                log=log,
                session_id=session,
                stream_id=STREAM,
                publisher_position=manager.new_counter("pub-pos"),
                publisher_limit=manager.new_counter("pub-lmt"),
                sender_position=manager.new_counter("snd-pos"),
                sender_limit=manager.new_counter("snd-lmt"),
                flow_control=new_flow_control(None, is_multicast=False),
                retransmit_handler=RetransmitHandler(
                    StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS),
                    StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS),
                ),
                counters=SenderCounters(
                    bytes_sent=sc[SystemCounterId.BYTES_SENT],
                    heartbeats_sent=sc[SystemCounterId.HEARTBEATS_SENT],
                    retransmits_sent=sc[SystemCounterId.RETRANSMITS_SENT],
                    short_sends=sc[SystemCounterId.SHORT_SENDS],
                    sender_flow_control_limits=sc[SystemCounterId.SENDER_FLOW_CONTROL_LIMITS],
                    unblocked_publications=sc[SystemCounterId.UNBLOCKED_PUBLICATIONS],
                ),
                term_window_length=TERM_LENGTH // 2,
                connection_timeout_ns=1 << 60,
                unblock_timeout_ns=1 << 60,
                linger_timeout_ns=0,
                multicast_ttl=0,
                is_exclusive=True,
                now_ns=clock.now_ns,
            )
            publication.should_send_setup = False  # connected: data and heartbeats are left
            publication.sender_limit.set_ordered(TERM_LENGTH)
            sender.on_new_publication(publication, endpoint)
            if not native:
                publication.native.bind(None, None, False)
            made.append((publication, log))
        for _ in range(3):  # first visits: each publication's path decided, heartbeats sent
            clock.now_ns += 1_000_000
            sender.do_work()
        data = _data(sender, made, rounds, sc[SystemCounterId.BYTES_SENT])
        heartbeat, per_publication = _idle(sender, clock, sc[SystemCounterId.HEARTBEATS_SENT], idle_seconds)
        heartbeat_cost = heartbeat
        for publication, _log in made:
            publication.close()
    endpoint.close()
    sink.close()
    return data, heartbeat_cost, per_publication / max(1, publications)


def _data(sender: Sender, made: list[tuple[NetworkPublication, LogBuffers]], rounds: int, sent: object) -> float:
    best = float("inf")
    offset = 0
    for round_ in range(rounds):
        if offset + FRAME > TERM_LENGTH // 2:
            break  # the data stays within one term and the sender limit
        for publication, log in made:
            term = log.terms[0]
            header = _HEADER.pack(0, 0, 0xC0, 1, offset, publication.session_id, STREAM, INITIAL, round_)
            term.put_bytes(offset, header)
            term.put_int_ordered(offset, FRAME)
        offset += FRAME
        target = sent.get() + FRAME * len(made)  # type: ignore[attr-defined]
        get = sent.get  # type: ignore[attr-defined]
        started = time.thread_time()
        for _ in range(1000):
            sender.do_work()
            if get() >= target:
                break
        elapsed = time.thread_time() - started
        if get() < target:
            raise SystemExit("the sender did not send every frame")
        best = min(best, elapsed / len(made) * 1e6)
    return best


def _idle(sender: Sender, clock: _Clock, heartbeats: object, seconds: float) -> tuple[float, float]:
    before = heartbeats.get()  # type: ignore[attr-defined]
    cycles = int(seconds * 1000)
    started = time.thread_time()
    for _ in range(cycles):
        clock.now_ns += 1_000_000
        sender.do_work()
    elapsed = time.thread_time() - started
    sent = heartbeats.get() - before  # type: ignore[attr-defined]
    return elapsed / max(1, sent) * 1e6, elapsed / seconds * 1e6


def floor(datagrams: int, rounds: int) -> float:
    """µs per datagram of a bare ``sendto`` loop (the kernel's share of any driver's send)."""
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("127.0.0.1", 0))
    out = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    out.bind(("127.0.0.1", 0))
    out.setblocking(False)
    io = DatagramSocket(out.fileno(), out.family)
    target = sink.getsockname()
    frame = bytes(FRAME + 32)
    best = float("inf")
    for _ in range(rounds):
        started = time.thread_time()
        for _ in range(datagrams):
            io.sendto(frame, target)
        best = min(best, (time.thread_time() - started) / datagrams * 1e6)
    io.detach()
    out.close()
    sink.close()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--publications", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--idle-seconds", type=float, default=3.0)
    parser.add_argument("--path", choices=("native", "python", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="smoke run: 20 publications, 3 rounds, 0.3 s idle")
    args = parser.parse_args()
    if args.quick:
        args.publications, args.rounds, args.idle_seconds = 20, 3, 0.3
    paths = ("python", "native") if args.path == "both" else (args.path,)
    print(f" floor: bare sendto, {floor(args.publications, args.rounds):.2f} µs/datagram")
    for path in paths:
        data, heartbeat, idle = run(args.publications, args.rounds, args.idle_seconds, path == "native")
        print(
            f"{path:>6}: {args.publications} publications: data {data:.2f} µs/datagram (sender duty cycle), "
            f"idle {heartbeat:.2f} µs/heartbeat, {idle:.1f} µs per publication per second idle"
        )


if __name__ == "__main__":
    main()
