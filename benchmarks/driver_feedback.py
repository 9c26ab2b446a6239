"""CPU per status message of the driver's send side: a send endpoint with many publications, receivers' SMs.

    python benchmarks/driver_feedback.py [--publications 200] [--messages 4000] [--rounds 5]
                                         [--channel unicast|min|dynamic|private] [--quick]

What a game server's driver does for every status message its players' drivers send (one every 200 ms per
stream when idle): read it from the send endpoint's socket, route it by session and stream to its publication,
apply it to flow control and move the sender limit. One process, real sockets on 127.0.0.1: a receiver socket
writes ``--messages`` SMs round-robin over ``--publications`` real network publications (each SM a little
further on), then the endpoint is polled until all are read, as the sender agent would (``poll`` with its limit
of 16). Only the polling is timed, in CPU time of this thread (``time.thread_time``). Each round runs twice: the
native path (plain SMs applied in C by the batched receive) and the Python path (``native_feedback=False``),
in turns; the best round of each is printed (µs per SM) and their ratio.

``--channel dynamic`` puts the publications on a ``control-mode=dynamic`` channel (every receiver a known
destination, refreshed by each SM); ``private`` gives each its own session id there, with destinations of its
own (an end point server's streams to its clients); ``min`` gives them ``fc=min`` with the receiver known.
``--quick``: a small run that only shows it works.
"""

from __future__ import annotations

import argparse
import socket
import sys
import tempfile
import time
from pathlib import Path

from _common import driver_log

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.flow_control import new_flow_control
from driver.core.loss_detector import StaticDelayGenerator
from driver.core.network_publication import NetworkPublication, SenderCounters
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RETRANSMIT_UNICAST_LINGER_NS, RetransmitHandler
from driver.media.endpoints import EndpointCounters, SendChannelEndpoint
from driver.media.udp_channel import UdpChannel
from driver.wire.status import write_sm

STREAM, INITIAL = 10, 100
TERM_LENGTH = 64 * 1024
WINDOW = 32 * 1024
CHUNK = 400  # SMs sent before the endpoint is polled (the socket buffer holds them all)
CHANNELS = {
    "unicast": ("aeron:udp?endpoint=127.0.0.1:9", None),
    "dynamic": ("aeron:udp?control=127.0.0.1:0|control-mode=dynamic", None),
    "min": ("aeron:udp?endpoint=127.0.0.1:9", "min"),
    "private": ("aeron:udp?control=127.0.0.1:0|control-mode=dynamic", None),
}


class _Side:
    """A send endpoint and its publications, on the native path or the Python one."""

    def __init__(
        self, directory: Path, native: bool, publications: int, channel: str, fc: str | None, private: bool
    ) -> None:
        room = (publications * 4 + 200) * 512
        self.manager = CountersManager(AtomicBuffer(bytearray(room * 2)), AtomicBuffer(bytearray(room)))
        sc: dict[SystemCounterId, AtomicCounter] = {
            sid: self.manager.new_counter(sid.label, 0) for sid in SystemCounterId
        }
        self.sms = sc[SystemCounterId.STATUS_MESSAGES_RECEIVED]
        counters = EndpointCounters(
            bytes_received=sc[SystemCounterId.BYTES_RECEIVED],
            invalid_packets=sc[SystemCounterId.INVALID_PACKETS],
            status_messages_received=self.sms,
            naks_received=sc[SystemCounterId.NAK_MESSAGES_RECEIVED],
            status_messages_sent=sc[SystemCounterId.STATUS_MESSAGES_SENT],
            short_sends=sc[SystemCounterId.SHORT_SENDS],
            bytes_sent=sc[SystemCounterId.BYTES_SENT],
        )
        self.endpoint = SendChannelEndpoint(
            UdpChannel.parse(channel),
            counters,
            self.manager.new_counter("status"),
            so_rcvbuf=8 * 1024 * 1024,
            native_feedback=native,
        )
        sender_counters = SenderCounters(
            bytes_sent=sc[SystemCounterId.BYTES_SENT],
            heartbeats_sent=sc[SystemCounterId.HEARTBEATS_SENT],
            retransmits_sent=sc[SystemCounterId.RETRANSMITS_SENT],
            short_sends=sc[SystemCounterId.SHORT_SENDS],
            sender_flow_control_limits=sc[SystemCounterId.SENDER_FLOW_CONTROL_LIMITS],
            unblocked_publications=sc[SystemCounterId.UNBLOCKED_PUBLICATIONS],
        )
        self.publications: list[NetworkPublication] = []
        name = "native" if native else "python"
        for index in range(publications):
            session = 1000 + index
            log = driver_log(directory / f"{name}-{session}.logbuffer", session, STREAM, INITIAL, TERM_LENGTH)
            publication = NetworkPublication(
                registration_id=session,
                channel=channel,
                endpoint=self.endpoint,
                log=log,
                session_id=session,
                stream_id=STREAM,
                publisher_position=self.manager.new_counter("pub-pos"),
                publisher_limit=self.manager.new_counter("pub-lmt"),
                sender_position=self.manager.new_counter("snd-pos"),
                sender_limit=self.manager.new_counter("snd-lmt"),
                flow_control=new_flow_control(fc, is_multicast=fc is not None),
                retransmit_handler=RetransmitHandler(
                    StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS),
                    StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS),
                ),
                counters=sender_counters,
                term_window_length=TERM_LENGTH // 2,
                connection_timeout_ns=1 << 60,
                unblock_timeout_ns=1 << 60,
                linger_timeout_ns=0,
                multicast_ttl=0,
                is_exclusive=True,
                now_ns=0,
                destinations=self.endpoint.destinations_for(private),
            )
            self.endpoint.attach((session, STREAM), publication, publication.destinations)
            self.publications.append(publication)
        host, port = self.endpoint.transport.socket.getsockname()[:2]
        self.address = ("127.0.0.1" if host == "0.0.0.0" else host, port)

    def close(self) -> None:
        for publication in self.publications:
            self.endpoint.detach((publication.session_id, STREAM), publication)
            publication.close()
        self.endpoint.close()


def _feed(side: _Side, sender: socket.socket, messages: int, start: int) -> float:
    """Send ``messages`` SMs round-robin over the publications in chunks, polling after each; CPU s polling."""
    frame = bytearray(36)
    count = len(side.publications)
    elapsed = 0.0
    expected = side.sms.get()
    sent = 0
    while sent < messages:
        chunk = min(CHUNK, messages - sent)
        for n in range(sent, sent + chunk):
            publication = side.publications[n % count]
            position = (start + n // count) * 64
            write_sm(frame, 0, publication.session_id, STREAM, INITIAL, position, WINDOW, 77)
            sender.sendto(frame, side.address)
        sent += chunk
        expected += chunk
        time.sleep(0.005)
        began = time.thread_time()
        for _ in range(chunk * 4):
            side.endpoint.poll(1_000_000_000, 16)
            if side.sms.get() >= expected:
                break
        elapsed += time.thread_time() - began
        if side.sms.get() < expected:
            raise SystemExit(f"only {side.sms.get()} of {expected} status messages arrived (kernel buffer?)")
    return elapsed


def run(publications: int, messages: int, rounds: int, kind: str) -> tuple[float, float]:
    """Best µs per SM: (native, Python)."""
    channel, fc = CHANNELS[kind]
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.bind(("127.0.0.1", 0))
    sender.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 * 1024 * 1024)
    best = {True: float("inf"), False: float("inf")}
    with tempfile.TemporaryDirectory() as tmp:
        sides = {
            native: _Side(Path(tmp), native, publications, channel, fc, kind == "private") for native in (True, False)
        }
        try:
            for side in sides.values():  # every publication's first SM (Python's on both paths)
                _feed(side, sender, publications, 0)
            for index in range(rounds):
                order = (True, False) if index % 2 == 0 else (False, True)
                for native in order:
                    elapsed = _feed(sides[native], sender, messages, 1 + index * messages // publications)
                    best[native] = min(best[native], elapsed / messages * 1e6)
            limits = [[p.sender_limit.get() for p in side.publications] for side in sides.values()]
            if limits[0] != limits[1]:
                raise SystemExit("the native and Python paths left different sender limits")
        finally:
            for side in sides.values():
                side.close()
            sender.close()
    return best[True], best[False]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--publications", type=int, default=200)
    parser.add_argument("--messages", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--channel", choices=sorted(CHANNELS), action="append")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    if args.quick:
        args.publications, args.messages, args.rounds = 20, 400, 2
    print(f"send endpoint, {args.publications} publications, {args.messages} SMs a round, best of {args.rounds}")
    print(f"{'channel':>8}  {'native µs/SM':>12}  {'Python µs/SM':>12}  {'ratio':>6}")
    for kind in args.channel or ["unicast", "min", "dynamic", "private"]:
        native, python = run(args.publications, args.messages, args.rounds, kind)
        print(f"{kind:>8}  {native:12.2f}  {python:12.2f}  {python / native:6.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
