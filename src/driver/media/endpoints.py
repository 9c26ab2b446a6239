"""Channel endpoints: the sockets of the send and receive sides and what arrives on them.

A ``SendChannelEndpoint`` is shared by every network publication of one UDP
channel: data, SETUP and heartbeats leave through it to the channel's
destination(s), and the receivers' status messages, NAKs and RTT measurements
come back to it and are routed to the publication by (session id, stream id).

A ``ReceiveChannelEndpoint`` is shared by every subscription of one UDP channel:
data, SETUP and RTTM frames arrive on it and are dispatched by stream and
session — to an existing image, to the conductor to create one from a SETUP, or
answered with a setup-eliciting status message when data arrives for a session
we have no image for. Status messages and NAKs leave through the same socket. A
SETUP for a stream nobody subscribes to is kept for a second: a subscription
made just after it (a client subscribing on reading a server's grant) connects
at once instead of at the publisher's next SETUP, 100 ms later.

Anything malformed is counted as an invalid packet and dropped; nothing read
from the network raises out of an agent.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

from driver.concurrent.counters import AtomicCounter
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

    def on_rttm(self, echo_timestamp_ns: int, reception_delta_ns: int, now_ns: int) -> None: ...


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
    ) -> None:
        self.bytes_received = bytes_received
        self.invalid_packets = invalid_packets
        self.status_messages_received = status_messages_received
        self.naks_received = naks_received
        self.status_messages_sent = status_messages_sent
        self.short_sends = short_sends
        self.bytes_sent = bytes_sent
        self.setups_not_elicited = setups_not_elicited


def _receive_buffer() -> tuple[bytearray, memoryview]:
    raw = bytearray(RECEIVE_BUFFER_LENGTH)
    return raw, memoryview(raw)


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
        self.ref_count = 0
        self._buffer, self._view = _receive_buffer()
        self._send = self.transport.send
        self._reply = bytearray(64)

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

    def poll(self, now_ns: int, limit: int = 16) -> int:
        """Read up to ``limit`` control datagrams and route them; returns how many were read."""
        transport = self.transport
        receive = transport.poll_receive
        view = self._view
        counters = self.counters
        count = 0
        while count < limit:
            try:
                received = receive(view)
            except OSError as exc:
                transport.receive_failed(exc)  # raises, unless it only means nothing to read
                break
            if received is None:
                break
            length, address = received
            count += 1
            counters.bytes_received.get_and_add(length)
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
        return count

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
        if self.is_dynamic:  # as 1.15.1: every receiver that speaks to the control address is a destination
            self.add_destination(address)
            self._last_seen_ns[address] = now_ns
        if session_id == 0 and stream_id == 0 and flags & SEND_SETUP_FLAG and (self.is_dynamic or self.is_manual):
            # A subscriber on ``control=`` asking every publication here for a SETUP (it knows no session yet).
            for each in self.publications.values():
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
        )
        self.transport.status_indicator_id = status_indicator.id
        self._on_setup = on_setup
        self.stream_ref_counts: dict[int, int] = {}
        self.images: dict[tuple[int, int], ImageHandler] = {}
        self.pending_setups: dict[tuple[int, int], int] = {}  # (session, stream) -> time of elicit
        self.cooldowns: dict[tuple[int, int], int] = {}  # (session, stream) -> until
        # SETUPs of streams nobody here subscribes to yet: a subscription that comes just after connects at once.
        self.unclaimed_setups: OrderedDict[tuple[int, int], tuple[tuple[int, ...], Address, int]] = OrderedDict()
        self.ref_count = 0
        self.local_address_indicator: AtomicCounter | None = None
        """The bound address's counter, for an endpoint asked to bind port 0 (see the network conductor)."""
        self._buffer, self._view = _receive_buffer()
        self._control = bytearray(64)
        self._send = self.transport.send
        self._next_control_elicit_ns = 0

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
        transport = self.transport
        receive = transport.poll_receive
        view = self._view
        counters = self.counters
        count = 0
        while count < limit:
            try:
                received = receive(view)
            except OSError as exc:
                transport.receive_failed(exc)  # raises, unless it only means nothing to read
                break
            if received is None:
                break
            length, address = received
            count += 1
            counters.bytes_received.get_and_add(length)
            try:
                frame_type = classify(view, length)
                if frame_type <= HDR_TYPE_DATA:  # DATA or PAD
                    self._on_data(view, length, address, now_ns)
                elif frame_type == HDR_TYPE_SETUP:
                    self._on_setup_frame(view, address, now_ns)
                elif frame_type == HDR_TYPE_RTTM:
                    self._on_rttm(view, address, now_ns)
            except MalformedFrameError:
                counters.invalid_packets.increment()
        return count

    def _on_data(self, view: memoryview, length: int, address: Address, now_ns: int) -> None:
        term_offset, session_id, stream_id, term_id = unpack_data_routing(view, 0)
        if stream_id not in self.stream_ref_counts:
            return
        key = (session_id, stream_id)
        image = self.images.get(key)
        if image is not None:
            validate_data_datagram(view, length, image.term_length)
            image.insert_packet(term_id, term_offset, view, length, now_ns)
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

    def elicit_from_control(self, now_ns: int, interval_ns: int) -> None:
        """``control=`` on a unicast subscription (MDC): ask the publisher there for SETUPs while subscribed.

        The publisher cannot know us before we speak, so, as 1.15.1 does, a
        setup-eliciting SM for session 0 / stream 0 goes to the control address
        every ``interval_ns`` while any stream is subscribed.
        """
        channel = self.channel
        if not channel.has_explicit_control or channel.is_multicast or not self.stream_ref_counts:
            return
        if now_ns - self._next_control_elicit_ns < 0:
            return
        self._next_control_elicit_ns = now_ns + interval_ns
        self.elicit_setup(0, 0, (channel.local_control[0], channel.local_control[1]))

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
