"""A network publication on a real mmap'd log with real counters, for tests of the sender's two paths.

``Rig.write`` commits DATA frames (and ``pad`` PAD frames) into its terms as a publisher would; ``python_path``
sends through a recording end point (the Python path), ``bind`` points the native send at a real socket.
"""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from driver.concurrent.atomic_buffer import AtomicBuffer
from driver.concurrent.counters import AtomicCounter, CountersManager
from driver.concurrent.system_counters import SystemCounterId
from driver.core.flow_control import new_flow_control
from driver.core.loss_detector import StaticDelayGenerator
from driver.core.network_publication import NetworkPublication, SendEndpoint, SenderCounters
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RETRANSMIT_UNICAST_LINGER_NS, RetransmitHandler
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.log_buffers import LogBuffers
from driver.media._net import DatagramSocket

__all__ = ["INITIAL_TERM_ID", "MS", "MTU", "TERM_LENGTH", "Recorder", "Rig"]

TERM_LENGTH = 64 * 1024
MTU = 1408
MS = 1_000_000
INITIAL_TERM_ID = 0x7FFF_FFFE
"""Term ids wrap through int32 max after two terms."""
_HEADER = struct.Struct("<iBBHiiiiq")


class Recorder:
    """The Python path's end point: keeps what it is asked to send."""

    def __init__(self) -> None:
        self.sent: list[bytes] = []

    def send(self, data: memoryview) -> int:
        self.sent.append(bytes(data))
        return len(data)


class Rig:
    def __init__(
        self,
        directory: Path,
        name: str = "pub",
        *,
        session_id: int = 7,
        stream_id: int = 10,
        now_ns: int = 0,
        endpoint: SendEndpoint | None = None,
    ) -> None:
        """``endpoint``: what the Python path sends through (default: a :class:`Recorder`)."""
        self.manager = CountersManager(AtomicBuffer(bytearray(64 * 1024)), AtomicBuffer(bytearray(16 * 1024)))
        self.system = {sid: self.manager.new_counter(sid.label, 0) for sid in SystemCounterId}
        self.log = LogBuffers.create(directory / f"{name}.logbuffer", TERM_LENGTH, 4096)
        lbd.initialize_publication_metadata(
            self.log.metadata,
            session_id=session_id,
            stream_id=stream_id,
            initial_term_id=INITIAL_TERM_ID,
            mtu_length=MTU,
            term_length=TERM_LENGTH,
            page_size=4096,
            correlation_id=2,
        )
        self.session_id = session_id
        self.stream_id = stream_id
        self.recorder = Recorder()
        self.publication = NetworkPublication(
            registration_id=2,
            channel="aeron:udp?endpoint=127.0.0.1:40123",
            endpoint=endpoint if endpoint is not None else self.recorder,
            log=self.log,
            session_id=session_id,
            stream_id=stream_id,
            publisher_position=self.manager.new_counter("pub-pos"),
            publisher_limit=self.manager.new_counter("pub-lmt"),
            sender_position=self.manager.new_counter("snd-pos"),
            sender_limit=self.manager.new_counter("snd-lmt"),
            flow_control=new_flow_control(None, is_multicast=False),
            retransmit_handler=RetransmitHandler(
                StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS), StaticDelayGenerator(RETRANSMIT_UNICAST_LINGER_NS)
            ),
            counters=SenderCounters(
                bytes_sent=self.system[SystemCounterId.BYTES_SENT],
                heartbeats_sent=self.system[SystemCounterId.HEARTBEATS_SENT],
                retransmits_sent=self.system[SystemCounterId.RETRANSMITS_SENT],
                short_sends=self.system[SystemCounterId.SHORT_SENDS],
                sender_flow_control_limits=self.system[SystemCounterId.SENDER_FLOW_CONTROL_LIMITS],
                unblocked_publications=self.system[SystemCounterId.UNBLOCKED_PUBLICATIONS],
            ),
            term_window_length=TERM_LENGTH // 2,
            connection_timeout_ns=5_000 * MS,
            unblock_timeout_ns=10_000 * MS,
            linger_timeout_ns=0,
            multicast_ttl=0,
            is_exclusive=True,
            now_ns=now_ns,
        )
        self.publication.should_send_setup = False  # a receiver has answered: data and heartbeats are left
        self.position = 0
        """Where the next frame is written (the publisher's position)."""

    def counter(self, sid: SystemCounterId) -> int:
        return self.system[sid].get()

    @property
    def sender_position(self) -> AtomicCounter:
        return self.publication.sender_position

    def set_limit(self, limit: int) -> None:
        self.publication.sender_limit.set_ordered(limit)

    def _term(self, position: int) -> tuple[AtomicBuffer, int, int]:
        index = (position // TERM_LENGTH) % 3
        term_id = (INITIAL_TERM_ID + position // TERM_LENGTH + 2**31) % 2**32 - 2**31
        return self.log.terms[index], position % TERM_LENGTH, term_id

    def write(self, payload_length: int, fill: int = 0) -> None:
        """Commit one unfragmented DATA frame (header, then payload, then its length last, as a publisher does)."""
        term, offset, term_id = self._term(self.position)
        length = 32 + payload_length
        header = _HEADER.pack(0, 0, 0xC0, 1, offset, self.session_id, self.stream_id, term_id, fill)
        term.put_bytes(offset, header)
        term.put_bytes(offset + 32, bytes((fill + i) & 0xFF for i in range(payload_length)))
        term.put_int_ordered(offset, length)
        self.position += (length + 31) & ~31

    def pad_to_end(self) -> None:
        """Commit a PAD frame to the end of the current term."""
        term, offset, term_id = self._term(self.position)
        length = TERM_LENGTH - offset
        term.put_bytes(offset, _HEADER.pack(0, 0, 0xC0, 0, offset, self.session_id, self.stream_id, term_id, 0))
        term.put_int_ordered(offset, length)
        self.position += length
        if self.position >= 3 * TERM_LENGTH:  # the next term is used again: clean, as the conductor leaves it
            self._term(self.position)[0].set_memory(0, TERM_LENGTH, 0)

    def bind(self, sock: socket.socket, destinations: list[tuple[str, int]], all_destinations: bool = False) -> None:
        """Send natively through ``sock`` (kept alive by the caller) to ``destinations``."""
        self.io = DatagramSocket(sock.fileno(), sock.family)
        self.publication.native.bind(self.io, destinations, all_destinations)
        self.publication.native.python = False

    def close(self) -> None:
        self.publication.close()
