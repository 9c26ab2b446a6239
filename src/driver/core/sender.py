"""The sender agent: sends every network publication's data and reads the receivers' feedback.

Each duty cycle it takes a few commands from the conductor, lets each
publication send (starting from a rotating index so none starves), and polls
the send endpoints for status messages and NAKs — on every cycle that sent
nothing, and otherwise every ``send_to_status_poll_ratio`` cycles, as Aeron's
sender does, so that feedback is never starved by a busy send path.

Past a few publications a cycle visits only those with a frame waiting at
their sender position (one native scan) or whose agenda deadline passed (a
heartbeat or SETUP due, a resend pending); feedback wakes a publication. Past
a few endpoints, only those whose socket has a datagram are read.

The publications a cycle visits are sent in one native step
(``driver.media._net.send_publications``): data from each sender position up to
its limit, or a due heartbeat, for all of them in ``sendmmsg`` batches per
socket. A publication with anything else to do (SETUP, resends, end of stream,
flow control's idle step, spies standing in for receivers, faults injected on
its socket, a destination that is not a numeric address) is flagged for the
Python path (``NetworkPublication.send``); whatever changes that (feedback, the
conductor) wakes it, which flags it, and each Python visit clears the flag when
nothing of it is left.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable

from driver.clock import NanoClock
from driver.concurrent._watches import FrameWatch
from driver.core.agenda import Agenda, no_wake
from driver.core.command_queues import CommandQueue
from driver.core.network_publication import NetworkPublication
from driver.errors import ChannelEndpointError
from driver.local_clients import ClientLocality
from driver.logbuffer._frames import frames_committed
from driver.media._net import SendSlot, send_publications
from driver.media.endpoints import SendChannelEndpoint
from driver.media.readiness import FEW_ENDPOINTS, ReadyEndpoints

__all__ = ["FEEDBACK_BATCH", "FEW_PUBLICATIONS", "Sender"]

FEEDBACK_BATCH = 64
"""Feedback datagrams read per send endpoint per status poll: a host that lets feedback wait while idle
(:meth:`Sender.feedback_sockets`) finds a few dozen waiting, which one cycle then takes (a batch of native
``recvmmsg`` calls that stop as soon as the socket is empty)."""
FEW_PUBLICATIONS = 2
"""Up to this many publications each is visited every cycle (lowest latency, no bookkeeping)."""
_EVERY = [list(range(count)) for count in range(FEW_PUBLICATIONS + 1)]
"""The agenda indices a cycle visits when there are only a few publications: all of them."""


class Sender:
    role_name = "sender"

    def __init__(
        self,
        clock: NanoClock,
        commands: CommandQueue,
        status_poll_ratio: int,
        locality: ClientLocality | None = None,
    ) -> None:
        self._clock = clock
        self.commands = commands
        self._status_poll_ratio = max(1, status_poll_ratio)
        self.publications: list[NetworkPublication] = []
        self.endpoints: list[SendChannelEndpoint] = []
        self._agenda: Agenda[NetworkPublication] = Agenda()
        """Each publication with what a :class:`FrameWatch` needs to see whether it has a frame to send."""
        self._frames = FrameWatch([])
        """The agenda's entries in its order: extended as publications come (at the agenda's end), made again after
        one goes (the agenda's last entry moves into its place)."""
        self._frames_stale = False
        self._locality = locality
        """While every client of the driver runs in this process, its count of committed frames shows every write
        (None: who writes is not known, and every cycle looks)."""
        self._quiet_since: int | None = None
        """That count before the last look at every publication that found nothing to send (None: look next cycle):
        while it stands, nothing was written since and the look is skipped."""
        self.looks_skipped = 0
        """Cycles that did not look at every publication for a frame (nothing committed since a look found none)."""
        self._slots: list[SendSlot] = []
        """Each publication's native send state, in the agenda's order (kept as the agenda adds and removes)."""
        self._ready = ReadyEndpoints[SendChannelEndpoint]()
        self._dynamic: list[SendChannelEndpoint] = []
        self.sockets_version = 0
        """Changes whenever ``readable_sockets`` would answer differently."""
        self._round_robin = 0
        self._cycles = 0

    def on_start(self) -> None:
        pass

    def readable_sockets(self) -> list[socket.socket]:
        """What an idle park also waits on (data, setups and feedback arrive on these)."""
        return [endpoint.transport.socket for endpoint in self.endpoints]

    def feedback_sockets(self) -> list[socket.socket]:
        """Those of :meth:`readable_sockets` that carry only feedback (status messages, NAKs, RTT measurements,
        errors): a host that drives this agent may let a datagram on them wait a little while it is idle
        (see ``endpoint.poller``); the next cycle reads up to :data:`FEEDBACK_BATCH` of them per endpoint."""
        return self.readable_sockets()

    def do_work(self) -> int:
        now_ns = self._clock.nano_time()
        work = self.commands.drain()
        publications = self.publications
        count = len(publications)
        if count > FEW_PUBLICATIONS:
            bytes_sent = self._send_due(now_ns)
        elif count:
            bytes_sent = self._send(_EVERY[count], 0, now_ns)
        else:
            bytes_sent = 0
        self._cycles += 1
        if bytes_sent == 0 or self._cycles >= self._status_poll_ratio:
            self._cycles = 0
            endpoints = self.endpoints
            if len(endpoints) > FEW_ENDPOINTS and self._ready.covers(len(endpoints)):
                endpoints = self._ready.ready()
            for endpoint in endpoints:
                work += endpoint.poll(now_ns, FEEDBACK_BATCH)
            for endpoint in self._dynamic:
                endpoint.expire_destinations(now_ns)
        return work + bytes_sent

    def _send_due(self, now_ns: int) -> int:
        agenda = self._agenda
        due = agenda.due(now_ns)
        frames = self._frames
        if self._frames_stale:
            self._frames_stale = False
            frames = self._frames = FrameWatch(agenda.entries)  # type: ignore[arg-type]
            self._quiet_since = None
        elif len(frames) < len(agenda):  # publications came since (each at the agenda's end): watch them too
            frames.extend(agenda.entries[len(frames) :])  # type: ignore[arg-type]
            self._quiet_since = None
        committed = frames_committed()
        locality = self._locality
        if committed == self._quiet_since and locality is not None and locality.all_local:
            self.looks_skipped += 1
        else:
            waiting = frames.ready()
            if waiting:
                self._quiet_since = None
                due = sorted(set(due).union(waiting)) if due else waiting
            else:
                self._quiet_since = committed
        if not due:
            return 0
        start = self._round_robin = (self._round_robin + 1) % len(due)
        return self._send(due, start, now_ns)

    def _send(self, due: list[int], start: int, now_ns: int) -> int:
        """The publications at agenda indices ``due``: natively where they may be, the rest through Python."""
        agenda = self._agenda
        bytes_sent, python = send_publications(self._slots, due, start, now_ns, agenda.deadlines)
        if python:
            items = agenda.items
            for index in python:
                publication = items[index]
                bytes_sent += publication.send(now_ns)
                agenda.schedule(index, publication.next_send_ns())
                publication.native.python = not publication.sends_natively()
        return bytes_sent

    def on_close(self) -> None:
        """The driver is stopping: each publication's receivers are told the stream ends here (an end-of-stream
        heartbeat), so their images close now instead of after the image liveness timeout."""
        now_ns = self._clock.nano_time()
        for publication in self.publications:
            try:
                publication.signal_end_on_close(now_ns)
            except (OSError, ChannelEndpointError):  # the socket or network gone: its receivers time out as before
                pass
        self._ready.close()

    # -- commands from the conductor (run on this agent's thread) --------------------------------

    def on_new_publication(self, publication: NetworkPublication, endpoint: SendChannelEndpoint) -> None:
        if endpoint not in self.endpoints:
            self.endpoints.append(endpoint)
            self._ready.add(endpoint)
            self.sockets_version += 1
            if endpoint.is_dynamic:
                self._dynamic.append(endpoint)
        endpoint.attach((publication.session_id, publication.stream_id), publication, publication.destinations)
        transport = endpoint.transport
        if transport.sends_natively:
            own = publication.destinations
            addresses = own.addresses if own is not None else endpoint.destinations
            publication.native.bind(transport.datagram_socket, addresses, own is not None)
        publication.native.python = True  # its first visit decides
        self.publications.append(publication)
        self._agenda.add(publication, publication.waiting_entry)
        self._slots.append(publication.native)
        publication.wake = functools.partial(self.wake, publication)

    def on_remove_publication(
        self, publication: NetworkPublication, endpoint: SendChannelEndpoint, done: Callable[[], object]
    ) -> None:
        if publication in self.publications:
            self.publications.remove(publication)
        index = publication.agenda_index
        if self._agenda.remove(publication):
            last = self._slots.pop()  # as the agenda: its last item moves into the freed place
            if index < len(self._slots):
                self._slots[index] = last
            self._frames_stale = True
        publication.wake = no_wake
        publication.native.bind(None, None, False)
        endpoint.detach((publication.session_id, publication.stream_id), publication)
        done()

    def wake(self, publication: NetworkPublication) -> None:
        """Visit ``publication`` on the next cycle, through the Python path (feedback arrived, or the conductor
        changed its state, e.g. end of stream)."""
        publication.native.python = True
        self._agenda.wake(publication)

    def on_close_endpoint(self, endpoint: SendChannelEndpoint, done: Callable[[], object]) -> None:
        """Let go of ``endpoint``; ``done`` runs whatever happens (the conductor reads no client command until
        the endpoint is closed)."""
        try:
            if endpoint in self.endpoints:
                self.endpoints.remove(endpoint)
                self._ready.remove(endpoint)
                self.sockets_version += 1
                if endpoint in self._dynamic:
                    self._dynamic.remove(endpoint)
        finally:
            done()
