"""Channel endpoints: the sockets of the send and receive sides and what arrives on them.

A ``SendChannelEndpoint`` is shared by every network publication of one UDP
channel: data, SETUP and heartbeats leave through it to the channel's
destination(s), and the receivers' status messages, NAKs and RTT measurements
come back to it and are routed to the publication by (session id, stream id).

On a ``control-mode=dynamic`` channel the destinations are learnt from the
status messages that arrive (multi-destination cast, as Aeron's dynamic
control mode): a receiver behind a NAT is reached at the public address and
port its status messages come from. A publication given its own session id
(``session-id=``) is *private*: its :class:`DynamicDestinations` learn only
from status messages naming its session and stream, at most
``MAX_DESTINATIONS_PER_PUBLICATION`` of them, each forgotten after
``DESTINATION_TIMEOUT_NS`` of silence; nobody who does not know both ids can
make it send anywhere, and with ``receiver-host=`` only receivers at that IP
address count. The other publications share the channel's destinations,
as 1.15.1 does (every receiver that speaks to the control address), bounded by
``MAX_SHARED_DESTINATIONS``. A receiver whose NAT mapping changes (a rebinding)
speaks from a new port: it is a new destination, and the old one is forgotten
when silent, or gives way to the new one when the publication is full.

A ``ReceiveChannelEndpoint`` is shared by every subscription of one UDP channel:
data, SETUP and RTTM frames arrive on it and are dispatched by stream and
session — to an existing image, to the conductor to create one from a SETUP, or
answered with a setup-eliciting status message when data arrives for a session
we have no image for. Status messages and NAKs leave through the same socket. A
SETUP for a stream nobody subscribes to is kept for a second: a subscription
made just after it (a client subscribing on reading a server's grant) connects
at once instead of at the publisher's next SETUP, 100 ms later.

Both read their sockets in batches (``recvmmsg``, ``DatagramSocket.receive_batch``)
unless faults are injected on receive: a receive endpoint's data for the images
it routes (``routes``, by session and stream, from each image's source) is
checked and inserted natively, and a send endpoint's plain status messages for
its publications (``feedback``: a receiver flow control already knows, no SETUP
asked, on a dynamic channel from a known destination) are applied natively to
the publication's ``FeedbackSlot`` (its flow control's state, the sender limit,
the time of its last status message); only everything else reaches the Python
handlers here, one datagram at a time.

Anything malformed is counted as an invalid packet and dropped; nothing read
from the network raises out of an agent.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from driver.concurrent.counters import AtomicCounter
from driver.concurrent.system_counters import SystemCounterId
from driver.errors import MalformedFrameError
from driver.logbuffer.frame import (
    HDR_TYPE_DATA,
    HDR_TYPE_ERR,
    HDR_TYPE_NAK,
    HDR_TYPE_PAD,
    HDR_TYPE_RTTM,
    HDR_TYPE_SETUP,
    HDR_TYPE_SM,
)
from driver.media._net import FeedbackRoutes, FeedbackSlot, ImageRoutes, ImageSlot
from driver.media.faults import FaultSpec
from driver.media.transport import Address, UdpTransport
from driver.media.udp_channel import UdpChannel
from driver.wire.data import unpack_data_routing
from driver.wire.datagram import classify, validate_data_datagram
from driver.wire.error import ErrorFrame
from driver.wire.nak import NAK
from driver.wire.rttm import REPLY_FLAG, RTTM, write_rttm
from driver.wire.setup import SETUP
from driver.wire.status import SEND_SETUP_FLAG, SM, write_sm

__all__ = [
    "EndpointCounters",
    "FeedbackHandler",
    "ImageHandler",
    "PublicationErrorHandler",
    "ReceiveChannelEndpoint",
    "SendChannelEndpoint",
    "SetupHandler",
]

RECEIVE_BUFFER_LENGTH = 65536
DESTINATION_TIMEOUT_NS = 5_000_000_000
"""A dynamic destination with no status message for this long is forgotten (1.15.1's value)."""
MAX_DESTINATIONS_PER_PUBLICATION = 4
"""Receivers one private publication on a dynamic channel sends to at once (one, and the new addresses of a
rebinding NAT until the old ones time out)."""
DESTINATION_RECLAIM_NS = 1_000_000_000
"""A private publication full of destinations gives the place of one silent this long to a new address (a live
receiver sends a status message at least every 200 ms)."""
MAX_SHARED_DESTINATIONS = 1024
"""Destinations a dynamic channel shares among its publications without a session id of their own."""
FIRST_CONTROL_ELICIT_NS = 5_000_000
NEVER_NS = 1 << 62
"""A time that never comes (a deadline with nothing due)."""
CONTROL_ELICIT_INTERVAL_NS = 100_000_000
"""How often, at most, a subscription on ``control=`` that names its session asks that publication for a SETUP
until its image is there (the first asks come faster: ``FIRST_CONTROL_ELICIT_NS``, doubling)."""
UNCLAIMED_SETUP_TTL_NS = 1_000_000_000
"""How long a SETUP for a stream nobody subscribes to is kept for a subscription that may come (see claim_setups)."""
MAX_UNCLAIMED_SETUPS = 64
MAX_PENDING_SETUPS = 1024
"""Sessions a receive endpoint waits on at most (a SETUP asked for, or handed to the conductor): data from more
unknown sessions at once (a flood of forged ones) is dropped, counted, without asking for their SETUP. (SETUPs
handed to the conductor are bounded by its queue: one it refuses is forgotten, and asked for again.)"""
_unpack_sm = SM.unpack_from
_unpack_nak = NAK.unpack_from
_unpack_rttm = RTTM.unpack_from
_unpack_setup = SETUP.unpack_from


class FeedbackHandler(Protocol):
    """Where a send endpoint routes a receiver's feedback for one (session, stream): a network publication.

    Declared here, implemented above (the driver core registers its publications): the endpoint routes by
    session and stream without knowing what a publication is, and this layer imports nothing above it."""

    def on_status_message(
        self, flags: int, term_id: int, term_offset: int, window: int, receiver_id: int, now_ns: int
    ) -> None: ...

    def on_nak(self, term_id: int, term_offset: int, length: int, now_ns: int) -> None: ...

    def on_error(self, receiver_id: int) -> bool:
        """A receiver rejected the stream (ERR); True the first time, when its owner should be told."""
        ...


class ImageHandler(Protocol):
    """Where a receive endpoint routes the data and RTT replies of one (session, stream): an image.

    Declared here, implemented above (the driver core registers its images), as :class:`FeedbackHandler`."""

    @property
    def term_length(self) -> int: ...

    def insert_packet(self, term_id: int, term_offset: int, packet: memoryview, length: int, now_ns: int) -> int: ...

    @property
    def source_address(self) -> Address: ...

    def follow_source(self, address: Address) -> None: ...

    def on_rttm(self, echo_timestamp_ns: int, reception_delta_ns: int, now_ns: int) -> None: ...

    @property
    def slot(self) -> ImageSlot:
        """What the batched receive inserts through, and the native status-message timer reads."""
        ...


PublicationErrorHandler = Callable[[FeedbackHandler, ErrorFrame, Address], None]
"""Sender thread: a receiver rejected the stream of this publication (its first ERR)."""


class EndpointCounters:
    def __init__(
        self,
        *,
        bytes_received: AtomicCounter,
        invalid_packets: AtomicCounter,
        status_messages_received: AtomicCounter,
        naks_received: AtomicCounter,
        status_messages_sent: AtomicCounter,
        short_sends: AtomicCounter,
        bytes_sent: AtomicCounter,
        setups_not_elicited: AtomicCounter | None = None,
        destinations_refused: AtomicCounter | None = None,
    ) -> None:
        self.bytes_received = bytes_received
        self.invalid_packets = invalid_packets
        self.status_messages_received = status_messages_received
        self.naks_received = naks_received
        self.status_messages_sent = status_messages_sent
        self.short_sends = short_sends
        self.bytes_sent = bytes_sent
        self.setups_not_elicited = setups_not_elicited
        self.destinations_refused = destinations_refused

    @classmethod
    def of(
        cls,
        system: Callable[[SystemCounterId], AtomicCounter],
        *,
        setups_not_elicited: AtomicCounter | None = None,
        destinations_refused: AtomicCounter | None = None,
    ) -> EndpointCounters:
        """The endpoints' counters among a driver's system counters (``system``: one by id, e.g.
        ``SystemCounters.get``); the two of this driver's own, if it has them, by name."""
        return cls(
            bytes_received=system(SystemCounterId.BYTES_RECEIVED),
            invalid_packets=system(SystemCounterId.INVALID_PACKETS),
            status_messages_received=system(SystemCounterId.STATUS_MESSAGES_RECEIVED),
            naks_received=system(SystemCounterId.NAK_MESSAGES_RECEIVED),
            status_messages_sent=system(SystemCounterId.STATUS_MESSAGES_SENT),
            short_sends=system(SystemCounterId.SHORT_SENDS),
            bytes_sent=system(SystemCounterId.BYTES_SENT),
            setups_not_elicited=setups_not_elicited,
            destinations_refused=destinations_refused,
        )


def _poll(
    transport: UdpTransport,
    routes: ImageRoutes,
    view: memoryview,
    now_ns: int,
    limit: int,
    dispatch: Callable[[int, Address], None],
    counters: EndpointCounters,
) -> int:
    """Read up to ``limit`` datagrams: a batch at a time when the transport can (data for ``routes`` inserted
    natively, the rest given to ``dispatch``), else one at a time through the transport's fault injector."""
    batch = transport.receive_batch
    if batch is not None:
        try:
            count, length = batch(routes, view, now_ns, limit, dispatch)
        except OSError as exc:
            transport.receive_failed(exc)  # raises, unless it only means nothing to read
            return 0
        if length:
            counters.bytes_received.get_and_add(length)
        return count
    receive = transport.poll_receive
    count = 0
    while count < limit:
        try:
            received = receive(view)
        except OSError as exc:
            transport.receive_failed(exc)
            break
        if received is None:
            break
        length, address = received
        count += 1
        counters.bytes_received.get_and_add(length)
        dispatch(length, address)
    return count


_buffers = threading.local()


def _receive_view() -> memoryview:
    """The calling thread's receive buffer. Every endpoint a thread polls reads into the same one (a datagram is
    handled before the next is read), not one each: a process of a thousand clients, a port each, held 64 MiB of
    them, and a connect storm made one per client."""
    try:
        view: memoryview = _buffers.view
    except AttributeError:
        view = _buffers.view = memoryview(bytearray(RECEIVE_BUFFER_LENGTH))
    return view


class DynamicDestinations:
    """Where one private publication on a dynamic control channel sends: the addresses whose status messages named
    its session and stream lately (sender thread only).

    Bounded (``MAX_DESTINATIONS_PER_PUBLICATION``); a new address when full
    takes the place of the one silent longest if that one has been silent for
    ``DESTINATION_RECLAIM_NS``, else it is refused (counted): a live receiver
    is never pushed out by another.
    """

    __slots__ = ("_last_seen_ns", "_send", "addresses", "host")

    def __init__(self, send: Callable[[memoryview, Address], int], host: str | None = None) -> None:
        self._send = send
        self.host = host
        """Only receivers at this IP address (``receiver-host=``, in the form sockets report it), if given."""
        self.addresses: list[Address] = []
        self._last_seen_ns: dict[Address, int] = {}

    def send(self, data: memoryview) -> int:
        """Send to every destination; the fewest bytes any took (all of them when there is none, as 1.15.1)."""
        result = len(data)
        for address in self.addresses:
            sent = self._send(data, address)
            if sent < result:
                result = sent
        return result

    def on_status_message(self, address: Address, now_ns: int) -> bool:
        """A status message naming the publication came from ``address``; False if it could not be a destination."""
        seen = self._last_seen_ns
        if address in seen:
            seen[address] = now_ns
            return True
        if self.host is not None and address[0] != self.host:
            return False
        if len(self.addresses) >= MAX_DESTINATIONS_PER_PUBLICATION:
            quietest = min(self.addresses, key=seen.__getitem__)
            if now_ns - seen[quietest] < DESTINATION_RECLAIM_NS:
                return False
            self.addresses.remove(quietest)
            del seen[quietest]
        self.addresses.append(address)
        seen[address] = now_ns
        return True

    @property
    def last_seen_ns(self) -> dict[Address, int]:
        """Each destination's time of its last status message (the native path refreshes known ones)."""
        return self._last_seen_ns

    def expire(self, now_ns: int, timeout_ns: int) -> None:
        for address, seen in list(self._last_seen_ns.items()):
            if now_ns - seen > timeout_ns:
                del self._last_seen_ns[address]
                self.addresses.remove(address)


class SendChannelEndpoint:
    """The socket of a UDP channel's publications; routes feedback to them."""

    def __init__(
        self,
        channel: UdpChannel,
        counters: EndpointCounters,
        status_indicator: AtomicCounter,
        *,
        so_rcvbuf: int = 0,
        so_sndbuf: int = 0,
        faults: tuple[FaultSpec, FaultSpec] | None = None,
        native_feedback: bool = True,
    ) -> None:
        self.channel = channel
        self.counters = counters
        self.status_indicator = status_indicator
        send_faults, receive_faults = faults or (None, None)
        if channel.is_multicast:
            self.transport = UdpTransport(
                bind_address=(channel.remote_control[0], channel.remote_control[1]),
                multicast_group=channel.remote_control[0],
                interface_address=channel.local_control[0] if channel.local_control[0] != "0.0.0.0" else None,
                multicast_ttl=channel.multicast_ttl,
                so_rcvbuf=so_rcvbuf,
                so_sndbuf=so_sndbuf,
                send_faults=send_faults,
                receive_faults=receive_faults,
                description=f"send endpoint {channel.original_uri_string}",
            )
        else:
            self.transport = UdpTransport(
                bind_address=(channel.local_control[0], channel.local_control[1]),
                so_rcvbuf=so_rcvbuf,
                so_sndbuf=so_sndbuf,
                send_faults=send_faults,
                receive_faults=receive_faults,
                description=f"send endpoint {channel.original_uri_string}",
                family=channel.protocol_family,
            )
        self.transport.status_indicator_id = status_indicator.id
        self.destinations: list[Address] = []
        self._last_seen_ns: dict[Address, int] = {}  # dynamic destinations: last status message
        self._next_expiry_check_ns = 0
        # Set by the driver: called on the sender thread when a receiver first rejects a publication.
        self.on_publication_error: PublicationErrorHandler | None = None
        self.is_manual = channel.control_mode == "manual"
        self.is_dynamic = channel.control_mode == "dynamic"
        if not (self.is_manual or self.is_dynamic):
            self.destinations.append((channel.remote_data[0], channel.remote_data[1]))
        self.publications: dict[tuple[int, int], FeedbackHandler] = {}
        self.private: dict[tuple[int, int], DynamicDestinations] = {}
        """Dynamic channels: the destinations of each private publication, by (session, stream)."""
        self.ref_count = 0
        self._view = _receive_view()
        self._send = self.transport.send
        self._reply = bytearray(64)
        self._no_images = ImageRoutes(
            invalid_packets=counters.invalid_packets.location(),
            short_sends=counters.short_sends.location(),
            status_messages=False,
        )
        self.feedback = FeedbackRoutes(
            counters.status_messages_received.location(), self._last_seen_ns if self.is_dynamic else None
        )
        """The publications whose plain status messages the batch applies natively (unless ``native_feedback`` is
        False: then every datagram comes to :meth:`_dispatch`, as it does when faults are injected on receive)."""
        if native_feedback:
            self._no_images.feedback = self.feedback
        self._now_ns = 0

    def destinations_for(self, private: bool, host: str | None = None) -> DynamicDestinations | None:
        """What a new publication sends through: destinations of its own if it is private (has its own session
        id) on a dynamic channel, only at ``host`` if given; else None (the endpoint's :meth:`send`)."""
        return DynamicDestinations(self.transport.send, host) if private and self.is_dynamic else None

    def attach(self, key: tuple[int, int], publication: FeedbackHandler, own: DynamicDestinations | None) -> None:
        """Sender thread: route feedback for ``key`` (session, stream) to ``publication``."""
        self.publications[key] = publication
        if own is not None:
            self.private[key] = own
        feedback = getattr(publication, "feedback", None)
        if isinstance(feedback, FeedbackSlot):
            self.feedback.add(feedback, own.last_seen_ns if own is not None else None)

    def detach(self, key: tuple[int, int], publication: FeedbackHandler) -> None:
        if self.publications.get(key) is publication:
            del self.publications[key]
            self.private.pop(key, None)
            feedback = getattr(publication, "feedback", None)
            if isinstance(feedback, FeedbackSlot):
                self.feedback.remove(feedback)

    def send(self, data: memoryview) -> int:
        """Send to every destination; returns the length if the first destination took it."""
        result = 0
        for index, destination in enumerate(self.destinations):
            sent = self._send(data, destination)
            if index == 0:
                result = sent
        return result if self.destinations else len(data)

    def add_destination(self, address: Address) -> None:
        if address not in self.destinations:
            self.destinations.append(address)

    def remove_destination(self, address: Address) -> None:
        if address in self.destinations:
            self.destinations.remove(address)

    def expire_destinations(self, now_ns: int, timeout_ns: int = DESTINATION_TIMEOUT_NS) -> None:
        """Dynamic MDC: forget receivers that sent no status message for ``timeout_ns`` (5 s, as 1.15.1)."""
        if not self.is_dynamic or now_ns < self._next_expiry_check_ns:
            return
        self._next_expiry_check_ns = now_ns + timeout_ns // 5
        for address, seen in list(self._last_seen_ns.items()):
            if now_ns - seen > timeout_ns:
                del self._last_seen_ns[address]
                self.remove_destination(address)
        for own in self.private.values():
            own.expire(now_ns, timeout_ns)

    def _learn(self, session_id: int, stream_id: int, address: Address, now_ns: int) -> None:
        """Dynamic MDC: ``address`` spoke; a destination of the private publication it named, else a shared one."""
        own = self.private.get((session_id, stream_id))
        if own is not None:
            accepted = own.on_status_message(address, now_ns)
        elif address in self._last_seen_ns:
            self._last_seen_ns[address] = now_ns
            return
        elif len(self.destinations) < MAX_SHARED_DESTINATIONS:
            self.destinations.append(address)
            self._last_seen_ns[address] = now_ns
            return
        else:
            accepted = False
        if not accepted and self.counters.destinations_refused is not None:
            self.counters.destinations_refused.increment()

    def poll(self, now_ns: int, limit: int = 16) -> int:
        """Read up to ``limit`` control datagrams and route them; returns how many were read."""
        self._now_ns = now_ns
        view = self._view = _receive_view()  # (the thread polling: the keeper may stand in for an invoker's)
        return _poll(self.transport, self._no_images, view, now_ns, limit, self._dispatch, self.counters)

    def _dispatch(self, length: int, address: Address) -> None:
        """One control datagram, in ``_view``: feedback to the publication it names."""
        view = self._view
        counters = self.counters
        now_ns = self._now_ns
        try:
            frame_type = classify(view, length)
            if frame_type == HDR_TYPE_SM:
                self._on_status_message(view, address, now_ns)
            elif frame_type == HDR_TYPE_NAK:
                _, _, _, _, session_id, stream_id, term_id, term_offset, nak_length = _unpack_nak(view, 0)
                counters.naks_received.increment()
                publication = self.publications.get((session_id, stream_id))
                if publication is not None:
                    publication.on_nak(term_id, term_offset, nak_length, now_ns)
            elif frame_type == HDR_TYPE_RTTM:
                self._on_rttm(view, address)
            elif frame_type == HDR_TYPE_ERR:
                self._on_error_frame(view, length, address)
        except MalformedFrameError:
            counters.invalid_packets.increment()

    def _on_error_frame(self, view: memoryview, length: int, address: Address) -> None:
        """Today's receivers reject a stream with ERR: the publication drops that receiver and tells its owner."""
        frame = ErrorFrame.decode(view, 0, length)
        publication = self.publications.get((frame.session_id, frame.stream_id))
        if publication is not None and publication.on_error(frame.receiver_id):
            listener = self.on_publication_error
            if listener is not None:
                listener(publication, frame, address)

    def _on_status_message(self, view: memoryview, address: Address, now_ns: int) -> None:
        _, _, flags, _, session_id, stream_id, term_id, term_offset, window, receiver_id = _unpack_sm(view, 0)
        self.counters.status_messages_received.increment()
        if self.is_dynamic:
            self._learn(session_id, stream_id, address, now_ns)
        if session_id == 0 and stream_id == 0 and flags & SEND_SETUP_FLAG and (self.is_dynamic or self.is_manual):
            # A subscriber on ``control=`` asking every publication here for a SETUP (it knows no session yet);
            # private publications answer only those who name them (no forged SM makes them all send at once).
            private = self.private
            for key, each in self.publications.items():
                if key not in private:
                    each.on_status_message(flags, term_id, term_offset, window, receiver_id, now_ns)
            return
        publication = self.publications.get((session_id, stream_id))
        if publication is not None:
            publication.on_status_message(flags, term_id, term_offset, window, receiver_id, now_ns)

    def _on_rttm(self, view: memoryview, address: Address) -> None:
        _, _, flags, _, session_id, stream_id, echo_ns, _, receiver_id = _unpack_rttm(view, 0)
        if flags & REPLY_FLAG and (session_id, stream_id) in self.publications:
            n = write_rttm(self._reply, 0, session_id, stream_id, echo_ns, 0, receiver_id, 0)
            self._send(memoryview(self._reply)[:n], address)

    def close(self) -> None:
        self.transport.close()
        self.status_indicator.close()


SetupHandler = Callable[["ReceiveChannelEndpoint", tuple[int, ...], Address], bool]
"""Receiver thread: hand a SETUP for a subscribed stream to the conductor; False if it could not be queued."""


class ReceiveChannelEndpoint:
    """The socket of a UDP channel's subscriptions; dispatches data to images."""

    def __init__(
        self,
        channel: UdpChannel,
        counters: EndpointCounters,
        status_indicator: AtomicCounter,
        on_setup: SetupHandler,
        receiver_id: int,
        *,
        so_rcvbuf: int = 0,
        so_sndbuf: int = 0,
        faults: tuple[FaultSpec, FaultSpec] | None = None,
    ) -> None:
        self.channel = channel
        self.counters = counters
        self.status_indicator = status_indicator
        self.receiver_id = receiver_id
        send_faults, receive_faults = faults or (None, None)
        # As Aeron: a receive endpoint binds the channel's endpoint address (joining it if multicast).
        self.transport = UdpTransport(
            bind_address=(channel.remote_data[0], channel.remote_data[1]),
            multicast_group=channel.remote_data[0] if channel.is_multicast else None,
            interface_address=(
                channel.local_data[0] if channel.is_multicast and channel.local_data[0] != "0.0.0.0" else None
            ),
            multicast_ttl=channel.multicast_ttl,
            so_rcvbuf=so_rcvbuf,
            so_sndbuf=so_sndbuf,
            send_faults=send_faults,
            receive_faults=receive_faults,
            description=f"receive endpoint {channel.original_uri_string}",
            family=channel.protocol_family,
        )
        self.transport.status_indicator_id = status_indicator.id
        self._on_setup = on_setup
        self.stream_ref_counts: dict[int, int] = {}
        self.control_sessions: dict[tuple[int, int], int] = {}
        """``control=`` channels: the (session, stream) pairs subscriptions name, with how many do; each is asked
        for its SETUP until its image is there."""
        self._open_subscriptions = 0
        """``control=`` channels: subscriptions that name no session (asked for with 0/0, as 1.15.1)."""
        self._waiting: dict[tuple[int, int], tuple[int, int]] = {}
        """``control=`` sessions asked for whose image has not come: when to ask next, and the wait after that."""
        self.next_elicit_ns = NEVER_NS
        """When :meth:`elicit_waiting` is next due (the receiver checks this every duty cycle)."""
        self.images: dict[tuple[int, int], ImageHandler] = {}
        self._stream_images: dict[int, dict[tuple[int, int], ImageHandler]] = {}
        """``images`` by stream id: a subscription to a stream (a server's or client's next connection) finds that
        stream's images, not by a walk through every image of the endpoint."""
        self.pending_setups: dict[tuple[int, int], int] = {}  # (session, stream) -> time of elicit
        self.cooldowns: dict[tuple[int, int], int] = {}  # (session, stream) -> until
        # SETUPs of streams nobody here subscribes to yet: a subscription that comes just after connects at once.
        self.unclaimed_setups: OrderedDict[tuple[int, int], tuple[tuple[int, ...], Address, int]] = OrderedDict()
        self.ref_count = 0
        self.local_address_indicator: AtomicCounter | None = None
        """The bound address's counter, for an endpoint asked to bind port 0 (see the network conductor)."""
        self._view = _receive_view()
        self._control = bytearray(64)
        self._send = self.transport.send
        self._next_control_elicit_ns = 0
        self.routes = ImageRoutes(
            invalid_packets=counters.invalid_packets.location(),
            short_sends=counters.short_sends.location(),
            status_messages=self.transport.sends_natively,
        )
        """The images of subscribed streams: the batched receive inserts their data natively, and their status
        messages are sent natively when due while they are quiet (unless faults are injected on send)."""
        self._now_ns = 0
        self.kernel_drops = 0
        """Datagrams the kernel dropped for this socket (its receive queue full), as last counted."""
        self.dropped_ns = -(1 << 62)
        """When the kernel was last seen to have dropped datagrams for this socket (see :meth:`count_kernel_drops`):
        an image silent since before then may be silent because we did not read in time, not because its
        publisher stopped."""

    def count_kernel_drops(self, now_ns: int) -> int:
        """Conductor, once per timer step: the datagrams the kernel dropped for our socket since the last count (if
        any, ``dropped_ns`` becomes ``now_ns``). An overloaded process reads its socket too late: what arrives while
        the receive queue is full is lost before any image sees it."""
        total = self.transport.kernel_drops()
        if total is None or total <= self.kernel_drops:
            return 0
        new = total - self.kernel_drops
        self.kernel_drops = total
        self.dropped_ns = now_ns
        return new

    def control_address_for(self, source: Address) -> Address:
        """Where status messages and NAKs go: the sender's socket, or the multicast control group."""
        if self.channel.is_multicast:
            return (self.channel.remote_control[0], self.channel.remote_control[1])
        return source

    def send_control(self, data: memoryview, address: Address) -> int:
        sent = self._send(data, address)
        if sent != len(data):
            self.counters.short_sends.increment()
        return sent

    def poll(self, now_ns: int, limit: int = 32) -> int:
        """Read up to ``limit`` datagrams: data for routed images inserted natively, the rest dispatched here."""
        self._now_ns = now_ns
        view = self._view = _receive_view()
        return _poll(self.transport, self.routes, view, now_ns, limit, self._dispatch, self.counters)

    def _dispatch(self, length: int, address: Address) -> None:
        """One datagram the batch did not take, in ``_view``."""
        view = self._view
        now_ns = self._now_ns
        try:
            frame_type = classify(view, length)
            if frame_type <= HDR_TYPE_DATA:  # DATA or PAD
                self._on_data(view, length, address, now_ns)
            elif frame_type == HDR_TYPE_SETUP:
                self._on_setup_frame(view, address, now_ns)
            elif frame_type == HDR_TYPE_RTTM:
                self._on_rttm(view, address, now_ns)
        except MalformedFrameError:
            self.counters.invalid_packets.increment()

    def add_image(self, key: tuple[int, int], image: ImageHandler) -> None:
        """Receiver thread: data for ``key`` (session, stream) now goes to ``image``."""
        self.images[key] = image
        self._stream_images.setdefault(key[1], {})[key] = image
        if key[1] in self.stream_ref_counts:
            self.routes.add(image.slot)

    def remove_image(self, key: tuple[int, int], image: ImageHandler) -> None:
        if self.images.get(key) is image:
            del self.images[key]
            of_stream = self._stream_images[key[1]]
            del of_stream[key]
            if not of_stream:
                del self._stream_images[key[1]]
            self.routes.remove(image.slot)

    def _on_data(self, view: memoryview, length: int, address: Address, now_ns: int) -> None:
        term_offset, session_id, stream_id, term_id = unpack_data_routing(view, 0)
        if stream_id not in self.stream_ref_counts:
            return
        key = (session_id, stream_id)
        image = self.images.get(key)
        if image is not None:
            validate_data_datagram(view, length, image.term_length)
            if image.insert_packet(term_id, term_offset, view, length, now_ns) and address != image.source_address:
                image.follow_source(address)
            return
        if view[5] & 0x20 or key in self.cooldowns or key in self.pending_setups:  # EOS, cooling down, asked
            return
        if view[6] not in (HDR_TYPE_DATA, HDR_TYPE_PAD):
            return
        if len(self.pending_setups) >= MAX_PENDING_SETUPS:
            if self.counters.setups_not_elicited is not None:
                self.counters.setups_not_elicited.increment()
            return
        self.pending_setups[key] = now_ns
        self.elicit_setup(session_id, stream_id, self.control_address_for(address))

    def elicit_setup(self, session_id: int, stream_id: int, address: Address) -> None:
        n = write_sm(self._control, 0, session_id, stream_id, 0, 0, 0, self.receiver_id, SEND_SETUP_FLAG)
        self.send_control(memoryview(self._control)[:n], address)
        self.counters.status_messages_sent.increment()

    def add_stream(self, stream_id: int, session_id: int | None, now_ns: int = 0) -> None:
        """Receiver thread: a subscription to ``stream_id`` (of ``session_id`` only, if given) came."""
        if stream_id not in self.stream_ref_counts:  # its images' data is taken again (see remove_stream)
            for image in self._stream_images.get(stream_id, {}).values():
                self.routes.add(image.slot)
        self.stream_ref_counts[stream_id] = self.stream_ref_counts.get(stream_id, 0) + 1
        if not self.channel.has_explicit_control or self.channel.is_multicast:
            return
        if session_id is None:
            self._open_subscriptions += 1
            return
        key = (session_id, stream_id)
        self.control_sessions[key] = self.control_sessions.get(key, 0) + 1
        if key not in self.images:  # at once: the publication may be there already (a server's grant said so)
            self._ask(key, now_ns)

    def _ask(self, key: tuple[int, int], now_ns: int) -> None:
        """Ask for ``key``'s SETUP now, then again after a doubling wait (see :meth:`elicit_waiting`)."""
        self.elicit_setup(key[0], key[1], self._control_address())
        self._waiting[key] = (now_ns + FIRST_CONTROL_ELICIT_NS, FIRST_CONTROL_ELICIT_NS)
        self.next_elicit_ns = min(self.next_elicit_ns, now_ns + FIRST_CONTROL_ELICIT_NS)

    def elicit_waiting(self, now_ns: int) -> None:
        """Receiver thread, when ``next_elicit_ns`` is due: ask again for the sessions named on ``control=`` whose
        image has not come, 5 ms after the first ask, then 10, 20, ... up to every ``CONTROL_ELICIT_INTERVAL_NS``
        (the publication may be made only just after our subscription: a server answering a HELLO)."""
        images = self.images
        upcoming = NEVER_NS
        for key, (due, wait) in list(self._waiting.items()):
            if key in images or key not in self.control_sessions:
                del self._waiting[key]
                continue
            if now_ns >= due:
                self.elicit_setup(key[0], key[1], self._control_address())
                wait = min(wait * 2, CONTROL_ELICIT_INTERVAL_NS)
                due = now_ns + wait
                self._waiting[key] = (due, wait)
            upcoming = min(upcoming, due)
        self.next_elicit_ns = upcoming

    def remove_stream(self, stream_id: int, session_id: int | None) -> None:
        count = self.stream_ref_counts.get(stream_id, 0) - 1
        if count > 0:
            self.stream_ref_counts[stream_id] = count
        else:
            self.stream_ref_counts.pop(stream_id, None)
            for image in self._stream_images.get(stream_id, {}).values():  # its data is dropped (in _on_data)
                self.routes.remove(image.slot)
        if not self.channel.has_explicit_control or self.channel.is_multicast:
            return
        if session_id is None:
            self._open_subscriptions -= 1
            return
        key = (session_id, stream_id)
        left = self.control_sessions.get(key, 0) - 1
        if left > 0:
            self.control_sessions[key] = left
        else:
            self.control_sessions.pop(key, None)

    def _control_address(self) -> Address:
        return (self.channel.local_control[0], self.channel.local_control[1])

    def elicit_from_control(self, now_ns: int, interval_ns: int) -> None:
        """``control=`` on a unicast subscription (MDC): ask the publisher there for SETUPs while subscribed.

        The publisher cannot know us before we speak. A subscription that
        names its session asks that session's publication until its image is
        there (see :meth:`elicit_waiting`; this restarts the asking for one whose
        image went): such a publication answers only those who name it (a private
        publication, see :class:`SendChannelEndpoint`), and the status
        messages from our socket teach it our address, through a NAT too. The
        others, as 1.15.1, send a setup-eliciting SM for session 0 / stream 0
        every ``interval_ns``.
        """
        channel = self.channel
        if not channel.has_explicit_control or channel.is_multicast or not self.stream_ref_counts:
            return
        images = self.images
        for key in self.control_sessions:
            if key not in images and key not in self._waiting:  # (its image went, say)
                self._ask(key, now_ns)
        if self._open_subscriptions <= 0 or now_ns - self._next_control_elicit_ns < 0:
            return
        self._next_control_elicit_ns = now_ns + interval_ns
        self.elicit_setup(0, 0, self._control_address())

    def _on_setup_frame(self, view: memoryview, address: Address, now_ns: int) -> None:
        fields = _unpack_setup(view, 0)
        key = (fields[5], fields[6])  # session, stream
        if fields[6] in self.stream_ref_counts:
            self._accept_setup(key, fields, address)
            return
        unclaimed = self.unclaimed_setups
        unclaimed.pop(key, None)
        unclaimed[key] = (fields, address, now_ns)
        while len(unclaimed) > MAX_UNCLAIMED_SETUPS:
            unclaimed.popitem(last=False)

    def _accept_setup(self, key: tuple[int, int], fields: tuple[int, ...], address: Address) -> None:
        if key in self.images or key in self.cooldowns:
            return
        if self.pending_setups.get(key) == -1:  # already asked the conductor for an image
            return
        self.pending_setups[key] = -1
        if not self._on_setup(self, fields, address):
            # The conductor's queue is full (counted there): forget the ask, so the publisher's next SETUP
            # asks again rather than this stream waiting for an answer that will never come.
            del self.pending_setups[key]

    def claim_setups(self, stream_id: int, now_ns: int) -> None:
        """A subscription to ``stream_id`` just came: connect now to the publishers whose SETUP arrived shortly
        before it (they repeat a SETUP only every 100 ms). A server that publishes to a client as soon as it
        grants the connection, and the client that subscribes on reading the grant, meet at once."""
        for key, (fields, address, seen_ns) in list(self.unclaimed_setups.items()):
            if key[1] == stream_id:
                del self.unclaimed_setups[key]
                if now_ns - seen_ns <= UNCLAIMED_SETUP_TTL_NS:
                    self._accept_setup(key, fields, address)

    def _on_rttm(self, view: memoryview, address: Address, now_ns: int) -> None:
        _, _, flags, _, session_id, stream_id, echo_ns, delta_ns, receiver_id = _unpack_rttm(view, 0)
        if flags & REPLY_FLAG:
            n = write_rttm(self._control, 0, session_id, stream_id, echo_ns, 0, self.receiver_id, 0)
            self.send_control(memoryview(self._control)[:n], address)
        elif receiver_id == self.receiver_id:  # a sender echoing one of our images' measurements
            image = self.images.get((session_id, stream_id))
            if image is not None:
                image.on_rttm(echo_ns, delta_ns, now_ns)

    def expire_pending(self, now_ns: int, setup_timeout_ns: int) -> None:
        """Forget elicited setups that got no answer, cooldowns that ran out, and unclaimed SETUPs gone stale."""
        unclaimed = self.unclaimed_setups
        while unclaimed and now_ns - next(iter(unclaimed.values()))[2] > UNCLAIMED_SETUP_TTL_NS:
            unclaimed.popitem(last=False)
        for key, since in list(self.pending_setups.items()):
            if since >= 0 and now_ns - since > setup_timeout_ns:
                del self.pending_setups[key]
        for key, until in list(self.cooldowns.items()):
            if now_ns > until:
                del self.cooldowns[key]

    def close(self) -> None:
        self.transport.close()
        if self.local_address_indicator is not None:
            self.local_address_indicator.close()
        self.status_indicator.close()
