"""The conductor's network half: UDP publications, subscriptions, endpoints and images.

The conductor owns every driver resource; this component holds the network ones
and runs on the conductor's thread. It creates a channel endpoint per canonical
UDP channel (shared by the publications or subscriptions of that channel), a
``NetworkPublication`` per publication (the sender sends it), and a
``PublicationImage`` when the receiver reports a SETUP for a subscribed stream
(the receiver fills it). Teardown is two-phase: the conductor asks the sender or
receiver to drop a resource and frees it only when they answer, so no agent ever
touches a closed log or socket.

It sits below the conductor and does not import it: what it asks of the
conductor (the clients' links, the hand-offs to the agents, ids, the clock) is
the :class:`ConductorServices` protocol, and it is given the rest when made.
"""

from __future__ import annotations

import functools
import ipaddress
import os
import random
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from driver.command.current import ADDRESS_TYPE_IPV4, ADDRESS_TYPE_IPV6, PublicationErrorResponse
from driver.concurrent._atomic import AtomicBuffer
from driver.concurrent._watches import PositionWatch
from driver.concurrent.counters import AtomicCounter, CountersFullError
from driver.concurrent.error_log import DistinctErrorLog
from driver.concurrent.system_counters import (
    CHANNEL_STATUS_ACTIVE,
    PUBLISHER_LIMIT_NAME,
    PUBLISHER_LIMIT_TYPE_ID,
    PUBLISHER_POS_NAME,
    PUBLISHER_POS_TYPE_ID,
    RECEIVE_CHANNEL_STATUS_TYPE_ID,
    RECEIVER_HWM_NAME,
    RECEIVER_HWM_TYPE_ID,
    RECEIVER_POS_NAME,
    RECEIVER_POS_TYPE_ID,
    SEND_CHANNEL_STATUS_TYPE_ID,
    SENDER_LIMIT_NAME,
    SENDER_LIMIT_TYPE_ID,
    SENDER_POSITION_NAME,
    SENDER_POSITION_TYPE_ID,
    DriverSystemCounterId,
    SystemCounterId,
    SystemCounters,
    allocate_channel_status,
    allocate_local_socket_address,
)
from driver.core.allocator import PublicationParams, StreamAllocator
from driver.core.client_proxy import ClientProxy
from driver.core.congestion import new_congestion_control
from driver.core.flow_control import new_flow_control
from driver.core.links import PublicationLink, SubscriberPosition, SubscriptionLink
from driver.core.loss_detector import (
    NAK_GROUPSIZE_DEFAULT,
    NAK_MAX_BACKOFF_DEFAULT_NS,
    LossDetector,
    OptimalMulticastDelayGenerator,
    StaticDelayGenerator,
)
from driver.core.network_publication import NetworkPublication, NetworkPublicationState, SenderCounters
from driver.core.publication_image import ImageCounters, ImageState, PublicationImage
from driver.core.receiver import Receiver
from driver.core.retransmit import RETRANSMIT_UNICAST_DELAY_NS, RetransmitHandler
from driver.core.sender import Sender
from driver.errors import (
    ChannelEndpointError,
    ControlProtocolError,
    ErrorCode,
    InvalidChannelError,
    MalformedFrameError,
)
from driver.logbuffer import descriptor as lbd
from driver.logbuffer.current_metadata import LOG_TYPE_PUBLICATION_IMAGE, CurrentLogMetadata, write_current_metadata
from driver.logbuffer.log_buffers import LogBuffers
from driver.media.endpoints import EndpointCounters, FeedbackHandler, ReceiveChannelEndpoint, SendChannelEndpoint
from driver.media.os_buffers import os_socket_buffer_lengths
from driver.media.transport import Address
from driver.media.udp_channel import UdpChannel, destination_address
from driver.uri import (
    HEARTBEAT_INTERVAL_PARAM_NAME,
    RECEIVER_HOST_PARAM_NAME,
    TAIL_PROBE_PARAM_NAME,
    ChannelUri,
    parse_size,
)
from driver.wire.error import ErrorFrame
from driver.wire.setup import check_setup

if TYPE_CHECKING:
    from driver.config import DriverContext

__all__ = ["ConductorServices", "NetworkResources"]

NULL_VALUE = -1

_REASONS = {
    DriverSystemCounterId.IMAGES_REFUSED_INVALID_SETUP: (
        "invalid SETUP (term length not a power of two in 64 KiB..1 GiB, term offset outside the term, "
        "or mtu not a multiple of 32 in 32..65504)"
    ),
    DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH: "SETUP asks for a term longer than the subscription allows",
    DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT: "the subscription holds as many images as it may",
    DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT: (
        "the subscription holds as many images from this source address as it may"
    ),
}


def _size_param(value: str | None, default: int) -> int:
    return parse_size(value) if value is not None else default


def _receiver_host(uri: ChannelUri) -> str | None:
    """``receiver-host=``, in the form sockets report addresses (compressed IPv6)."""
    value = uri.get(RECEIVER_HOST_PARAM_NAME)
    if value is None:
        return None
    try:
        ip = ipaddress.ip_address(value.strip("[]"))
    except ValueError:
        raise InvalidChannelError(RECEIVER_HOST_PARAM_NAME, value, "an IPv4 or IPv6 address") from None
    # As inet_ntop writes it (an IPv4-mapped address as ::ffff:1.2.3.4, which ``str`` would not)
    return socket.inet_ntop(socket.AF_INET6, ip.packed) if ip.version == 6 else str(ip)


class ConductorServices(Protocol):
    """What the network half asks of the conductor, which owns the clients' links, the hand-offs to the
    agents, the correlation and session ids and the clock. The conductor implements it; this module does not
    import the conductor."""

    @property
    def publication_links(self) -> Sequence[PublicationLink]: ...

    @property
    def subscription_links(self) -> Sequence[SubscriptionLink]: ...

    @property
    def spy_links(self) -> Sequence[SubscriptionLink]:
        """The spy subscriptions among ``subscription_links``."""
        ...

    def now_ns(self) -> int: ...

    def next_correlation_id(self) -> int: ...

    def sender_command(self, command: Callable[[], object]) -> None:
        """Hand the sender work, in order (a full queue holds it back, never drops it)."""
        ...

    def receiver_command(self, command: Callable[[], object]) -> None:
        """Hand the receiver work, in order (a full queue holds it back, never drops it)."""
        ...

    def conductor_command(self, command: Callable[[], object]) -> bool:
        """From the sender or receiver thread: run ``command`` on the conductor's; False if its queue is full."""
        ...

    def after_teardown(self, command: Callable[[], object]) -> None:
        """From the sender or receiver thread: finish a teardown on the conductor's (never refused)."""
        ...

    def release_session_id(self, session_id: int) -> None: ...

    def delete_file(self, path: str) -> None: ...


class NetworkResources:
    """UDP publications, subscriptions, endpoints and images: created, linked, timed and torn down here."""

    def __init__(
        self,
        conductor: ConductorServices,
        *,
        ctx: DriverContext,
        allocator: StreamAllocator,
        system_counters: SystemCounters,
        client_proxy: ClientProxy,
        error_log: DistinctErrorLog,
        sender: Sender,
        receiver: Receiver,
    ) -> None:
        self._conductor = conductor
        self._ctx = ctx
        self._allocator = allocator
        self._counters = allocator.counters
        self._system_counters = system_counters
        self._client_proxy = client_proxy
        self._error_log = error_log
        self._sender = sender
        self._receiver = receiver
        self.loss_observer: Callable[[PublicationImage, int, int], None] | None = None
        """Told of every gap an image fills with padding (the driver's loss report)."""
        sc = system_counters
        self.endpoint_counters = EndpointCounters.of(
            sc.get,
            setups_not_elicited=sc.get(DriverSystemCounterId.SETUPS_NOT_ELICITED),
            destinations_refused=sc.get(DriverSystemCounterId.DYNAMIC_DESTINATIONS_REFUSED),
        )
        self.sender_counters = SenderCounters(
            bytes_sent=sc.get(SystemCounterId.BYTES_SENT),
            heartbeats_sent=sc.get(SystemCounterId.HEARTBEATS_SENT),
            retransmits_sent=sc.get(SystemCounterId.RETRANSMITS_SENT),
            short_sends=sc.get(SystemCounterId.SHORT_SENDS),
            sender_flow_control_limits=sc.get(SystemCounterId.SENDER_FLOW_CONTROL_LIMITS),
            unblocked_publications=sc.get(SystemCounterId.UNBLOCKED_PUBLICATIONS),
        )
        self.image_counters = ImageCounters(
            heartbeats_received=sc.get(SystemCounterId.HEARTBEATS_RECEIVED),
            status_messages_sent=sc.get(SystemCounterId.STATUS_MESSAGES_SENT),
            naks_sent=sc.get(SystemCounterId.NAK_MESSAGES_SENT),
            flow_control_under_runs=sc.get(SystemCounterId.FLOW_CONTROL_UNDER_RUNS),
            flow_control_over_runs=sc.get(SystemCounterId.FLOW_CONTROL_OVER_RUNS),
            loss_gap_fills=sc.get(SystemCounterId.LOSS_GAP_FILLS),
            timeouts_put_off=sc.get(DriverSystemCounterId.IMAGE_TIMEOUTS_PUT_OFF),
        )
        self._socket_drops = sc.get(DriverSystemCounterId.RECEIVE_SOCKET_DROPS)
        self._bytes_received = sc.get(SystemCounterId.BYTES_RECEIVED)
        self._invalid_packets = sc.get(SystemCounterId.INVALID_PACKETS)
        self.send_endpoints: dict[str, SendChannelEndpoint] = {}
        self.receive_endpoints: dict[str, ReceiveChannelEndpoint] = {}
        # Endpoints handed to the sender or receiver to close: still open until they answer, so
        # a shutdown in between closes them here rather than leaking their sockets.
        self._closing: set[SendChannelEndpoint | ReceiveChannelEndpoint] = set()
        # Publications and images the conductor asked the sender or receiver to let go of: still held (log,
        # counters, session id) until they answer, and freed here if the driver shuts down first.
        self._tearing_down: set[NetworkPublication | PublicationImage] = set()
        self.publications: list[NetworkPublication] = []
        self.images: list[PublicationImage] = []
        self._images_by_stream: dict[tuple[ReceiveChannelEndpoint, int], list[PublicationImage]] = {}
        # The subscription links of each endpoint and stream, in the order they came (the conductor's order): an
        # image's subscribers, and whether a stream is still subscribed, without a scan of every link (a server
        # holds a stream, so a link, per connection).
        self._links_by_stream: dict[tuple[ReceiveChannelEndpoint, int], list[SubscriptionLink]] = {}
        # What each subscription's limits count (active images, and per source host), worked out once until an
        # image comes, goes or stops being active: a flood of refused SETUPs would otherwise scan them each time.
        self._held_cache: dict[tuple[ReceiveChannelEndpoint, int, int | None], _Held] = {}
        # Publisher limits follow sender positions: only those whose sender position moved are recomputed (one
        # native scan per cycle), and those that gained or lost their receivers. The watch is not rebuilt per
        # publication that comes or goes (a server in a connect storm makes several per handshake): newcomers
        # are appended to it, leavers are skipped, and it is rebuilt once a quarter of it are leavers (so each
        # change costs a bounded share of one rebuild).
        self._limits_of: list[NetworkPublication | None] = []
        self._limits_index: dict[NetworkPublication, list[int]] = {}
        self._limits_new: dict[NetworkPublication, None] = {}
        self._limits_dead = 0
        self._receivers_changed: deque[NetworkPublication] = deque()
        self._sender_positions = PositionWatch([])
        self._limits_spied = False  # the watch also holds spy positions (a publication may show up twice)
        self._limits_rebuild = False  # spies came or went, or many publications did: the next cycle rebuilds
        # The timer step visits only the publications whose logs were written to since the last step, or that
        # were not quiet then (see NetworkPublication.quiet_time_event): the rest cost an attribute check each,
        # not a Python call per counter (an idle server's thousand publications were its heaviest timer work).
        # The tails watched are those of the publications listed in the order of ``_timer_of`` (three each),
        # grown at the next step after publications came, made again after one went.
        self._publications_version = 0
        self._timer_version = -1
        self._timer_of: list[NetworkPublication] = []
        self._timer_tails = PositionWatch([])
        self._images_dir = os.path.join(self._ctx.aeron_dir, "images")
        os.makedirs(self._images_dir, exist_ok=True)
        self._faults = (self._ctx.send_faults, self._ctx.receive_faults)

    # -- publications ---------------------------------------------------------------------------

    def find_shared_publication(self, channel: UdpChannel, stream_id: int) -> NetworkPublication | None:
        endpoint = self.send_endpoints.get(channel.canonical_form)
        if endpoint is None:
            return None
        for publication in self.publications:
            if (
                publication.endpoint is endpoint
                and publication.stream_id == stream_id
                and not publication.is_exclusive
                and publication.state is NetworkPublicationState.ACTIVE
            ):
                return publication
        return None

    def _send_endpoint(self, channel: UdpChannel) -> SendChannelEndpoint:
        endpoint = self.send_endpoints.get(channel.canonical_form)
        if endpoint is None:
            status_id = allocate_channel_status(
                self._counters, SEND_CHANNEL_STATUS_TYPE_ID, channel.original_uri_string
            )
            status = AtomicCounter(self._counters.values_buffer, status_id, self._counters)
            try:
                endpoint = SendChannelEndpoint(
                    channel,
                    self.endpoint_counters,
                    status,
                    so_rcvbuf=self._ctx.socket_rcvbuf_length,
                    so_sndbuf=self._ctx.socket_sndbuf_length,
                    faults=self._faults,
                )
            except ChannelEndpointError:
                status.close()
                raise
            status.set_ordered(CHANNEL_STATUS_ACTIVE)
            endpoint.on_publication_error = self._on_publication_error
            self.send_endpoints[channel.canonical_form] = endpoint
        return endpoint

    def _on_publication_error(self, publication: FeedbackHandler, frame: ErrorFrame, address: Address) -> None:
        """Sender thread: a receiver rejected ``publication``; the conductor tells its owners."""
        self._conductor.conductor_command(
            functools.partial(self._notify_publication_error, publication, frame, address)
        )

    def _notify_publication_error(self, publication: FeedbackHandler, frame: ErrorFrame, address: Address) -> None:
        host, port = address[0], address[1]
        ip = ipaddress.ip_address(host)
        for link in self._conductor.publication_links:
            if link.publication is not publication:
                continue
            self._client_proxy.on_publication_error(
                PublicationErrorResponse(
                    registration_id=link.publication.registration_id,
                    destination_registration_id=NULL_VALUE,
                    session_id=frame.session_id,
                    stream_id=frame.stream_id,
                    receiver_id=frame.receiver_id,
                    group_tag=NULL_VALUE if frame.group_tag is None else frame.group_tag,
                    address_type=ADDRESS_TYPE_IPV6 if ip.version == 6 else ADDRESS_TYPE_IPV4,
                    source_port=port,
                    source_address=ip.packed,
                    error_code=frame.error_code,
                    error_message=frame.error_message,
                )
            )

    def add_publication(
        self,
        *,
        registration_id: int,
        channel: UdpChannel,
        channel_text: str,
        stream_id: int,
        session_id: int,
        initial_term_id: int,
        params: PublicationParams,
        is_exclusive: bool,
        client_id: int = 0,
    ) -> NetworkPublication:
        conductor = self._conductor
        uri = channel.channel_uri
        receiver_host = _receiver_host(uri)
        flow_control = new_flow_control(
            uri.get("fc"), is_multicast=channel.is_multicast or channel.has_explicit_control
        )
        endpoint = self._send_endpoint(channel)
        counters: list[AtomicCounter] = []
        try:
            current = self._allocator.publication_metadata(
                params,
                is_exclusive,
                self._ctx.publication_term_window_length_for(params.term_length),
                group=channel.is_multicast,
                socket_sndbuf_length=_size_param(uri.get("so-sndbuf"), self._ctx.socket_sndbuf_length),
                socket_rcvbuf_length=_size_param(uri.get("so-rcvbuf"), self._ctx.socket_rcvbuf_length),
            )
            log = self._allocator.create_publication_log(
                registration_id, session_id, stream_id, initial_term_id, params, current
            )
            for name, type_id in (
                (PUBLISHER_POS_NAME, PUBLISHER_POS_TYPE_ID),
                (PUBLISHER_LIMIT_NAME, PUBLISHER_LIMIT_TYPE_ID),
                (SENDER_POSITION_NAME, SENDER_POSITION_TYPE_ID),
                (SENDER_LIMIT_NAME, SENDER_LIMIT_TYPE_ID),
            ):
                counters.append(
                    self._allocator.stream_counter(
                        name, type_id, registration_id, session_id, stream_id, channel_text, owner_id=client_id
                    )
                )
        except BaseException:
            for counter in counters:
                counter.close()
            if endpoint.ref_count == 0 and not endpoint.publications:
                self._drop_send_endpoint(endpoint)
            raise
        publication = NetworkPublication(
            registration_id=registration_id,
            channel=channel_text,
            endpoint=endpoint,
            log=log,
            session_id=session_id,
            stream_id=stream_id,
            publisher_position=counters[0],
            publisher_limit=counters[1],
            sender_position=counters[2],
            sender_limit=counters[3],
            flow_control=flow_control,
            retransmit_handler=RetransmitHandler(
                StaticDelayGenerator(RETRANSMIT_UNICAST_DELAY_NS),
                StaticDelayGenerator(self._ctx.retransmit_unicast_linger_ns),
                on_invalid=self._invalid_packets.increment,
            ),
            counters=self.sender_counters,
            term_window_length=self._ctx.publication_term_window_length_for(params.term_length),
            connection_timeout_ns=self._ctx.publication_connection_timeout_ns,
            unblock_timeout_ns=self._ctx.publication_unblock_timeout_ns,
            linger_timeout_ns=params.linger_ns,
            multicast_ttl=channel.multicast_ttl,
            is_exclusive=is_exclusive,
            signal_eos=uri.get("eos", "true") != "false",
            heartbeat_interval_ns=uri.get_duration_ns(HEARTBEAT_INTERVAL_PARAM_NAME)
            or self._ctx.publication_heartbeat_interval_ns,
            tail_probe_ns=uri.get_duration_ns(TAIL_PROBE_PARAM_NAME) or 0,
            now_ns=conductor.now_ns(),
            destinations=endpoint.destinations_for(params.session_id is not None, receiver_host),
            spies_simulate_connection=self._ctx.spies_simulate_connection,
        )
        endpoint.ref_count += 1
        self.publications.append(publication)
        self._publications_version += 1
        self._limits_new[publication] = None
        publication.receivers_changed = self._receivers_changed
        conductor.sender_command(functools.partial(self._sender.on_new_publication, publication, endpoint))
        return publication

    def on_destination(self, registration_id: int, channel: str, add: bool) -> None:
        publication = next((p for p in self.publications if p.registration_id == registration_id), None)
        if publication is None:
            raise ControlProtocolError(ErrorCode.UNKNOWN_PUBLICATION, f"unknown publication: {registration_id}")
        endpoint = publication.endpoint
        assert isinstance(endpoint, SendChannelEndpoint)
        if not endpoint.is_manual:
            raise ControlProtocolError(
                ErrorCode.INVALID_CHANNEL,
                f"{endpoint.channel.original_uri_string}: destinations need control-mode=manual",
            )
        address = destination_address(channel)
        action = endpoint.add_destination if add else endpoint.remove_destination
        self._conductor.sender_command(functools.partial(action, (address[0], address[1])))

    # -- spies -----------------------------------------------------------------------------------

    def add_spy(self, link: SubscriptionLink) -> list[SubscriberPosition]:
        """Link a new spy to the active publications it matches; returns the positions made (their images are
        for the conductor to announce, after the subscription is ready)."""
        made = []
        for publication in self.publications:
            if publication.state is NetworkPublicationState.ACTIVE and self._spies_on(link, publication):
                position = self._link_spy(link, publication)
                if position is not None:
                    made.append(position)
        return made

    def link_spies(self, publication: NetworkPublication) -> list[SubscriberPosition]:
        """Link a new publication to the spies already waiting for it; returns the positions made. A spy for
        which no counter is left misses this publication (the error logged and counted): the publication, and
        the client that asked for it, are not failed for a spy."""
        made = []
        for link in self._conductor.spy_links:
            if self._spies_on(link, publication) and not link.is_linked(publication):
                try:
                    position = self._link_spy(link, publication)
                except CountersFullError as exc:
                    self._system_counters.get(SystemCounterId.ERRORS).increment()
                    self._error_log.record(exc)
                    continue
                if position is not None:
                    made.append(position)
        return made

    def remove_spy(self, link: SubscriptionLink) -> None:
        """A spy goes (removed, or its client did): its positions leave their publications, counters freed."""
        for position in link.positions.values():
            publication = position.publication
            if isinstance(publication, NetworkPublication):
                publication.remove_spy(position.counter)
                self._spies_changed(publication)
        link.positions.clear()

    @staticmethod
    def _spies_on(link: SubscriptionLink, publication: NetworkPublication) -> bool:
        endpoint = publication.endpoint
        assert isinstance(endpoint, SendChannelEndpoint)
        return link.is_spy and link.matches_spied(publication, endpoint.channel.canonical_form)

    def _link_spy(self, link: SubscriptionLink, publication: NetworkPublication) -> SubscriberPosition | None:
        """A spy's position in ``publication``'s log, from what has been sent; None (counted) when the spy holds
        as many images as ``max-images`` allows."""
        held = sum(1 for p in link.positions.values() if isinstance(p.publication, NetworkPublication))
        if held >= link.max_images:
            self._refuse(link, DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT)
            return None
        counter = self._allocator.subscriber_position(link, publication.session_id, publication.join_position())
        position = SubscriberPosition(link, publication, counter)
        link.positions[publication.registration_id] = position
        publication.add_spy(counter)
        self._spies_changed(publication)
        return position

    def _cleanup_spies(self, publication: NetworkPublication) -> None:
        """The publication has drained and its spies have read it to the end: their images go."""
        for link in self._conductor.spy_links:
            position = link.positions.get(publication.registration_id)
            if position is not None and position.publication is publication:
                del link.positions[publication.registration_id]
                publication.remove_spy(position.counter)
                self._client_proxy.on_unavailable_image(
                    publication.registration_id, link.registration_id, publication.stream_id, publication.channel
                )
        self._spies_changed(publication)

    def _spies_changed(self, publication: NetworkPublication) -> None:
        """Spy positions came or went (rare): the publisher limits' watch is rebuilt, every limit worked out again."""
        self._limits_rebuild = True

    # -- subscriptions and images ---------------------------------------------------------------

    def add_subscription(self, link: SubscriptionLink, channel: UdpChannel) -> ReceiveChannelEndpoint:
        # Port 0 asks for a port of its own: a fresh endpoint each time, known by its bound port from then on.
        endpoint = None if channel.binds_any_port else self.receive_endpoints.get(channel.canonical_form)
        conductor = self._conductor
        if endpoint is None:
            status_id = allocate_channel_status(
                self._counters, RECEIVE_CHANNEL_STATUS_TYPE_ID, channel.original_uri_string
            )
            status = AtomicCounter(self._counters.values_buffer, status_id, self._counters)
            try:
                endpoint = ReceiveChannelEndpoint(
                    channel,
                    self.endpoint_counters,
                    status,
                    self._on_setup_from_receiver,
                    random.getrandbits(63),
                    so_rcvbuf=self._ctx.socket_rcvbuf_length,
                    so_sndbuf=self._ctx.socket_sndbuf_length,
                    faults=self._faults,
                )
            except ChannelEndpointError:
                status.close()
                raise
            if channel.binds_any_port:
                self._publish_bound_address(endpoint)
            status.set_ordered(CHANNEL_STATUS_ACTIVE)
            self.receive_endpoints[endpoint.channel.canonical_form] = endpoint
        endpoint.ref_count += 1
        link.endpoint = endpoint
        conductor.receiver_command(
            functools.partial(self._receiver.on_add_subscription, endpoint, link.stream_id, link.session_id)
        )
        key = (endpoint, link.stream_id)
        self._links_by_stream.setdefault(key, []).append(link)
        try:
            for image in tuple(self._images_by_stream.get(key, ())):
                if image.state is ImageState.ACTIVE and self._matches(link, image):
                    linked = [
                        p.publication for p in link.positions.values() if isinstance(p.publication, PublicationImage)
                    ]
                    cause = self._refusal(link, image.term_length, image.source_address, _Held(linked))
                    if cause is None:
                        self._link_image(link, image)
                    else:
                        self._refuse(link, cause)
        except BaseException:
            self._forget_link(link)
            raise
        return endpoint

    def _forget_link(self, link: SubscriptionLink) -> None:
        assert isinstance(link.endpoint, ReceiveChannelEndpoint)
        key = (link.endpoint, link.stream_id)
        links = self._links_by_stream.get(key)
        if links is not None and link in links:
            links.remove(link)
            if not links:
                del self._links_by_stream[key]
        if not any(other.session_id == link.session_id for other in links or ()):
            # Nobody left to keep its holding up to date (see _helds_of): worked out afresh if asked again.
            self._held_cache.pop((*key, link.session_id), None)

    def _publish_bound_address(self, endpoint: ReceiveChannelEndpoint) -> None:
        """A port-0 endpoint takes the port it was given as its channel's, and says which in a local socket
        address counter (what a client reads to learn it)."""
        host, port = endpoint.transport.local_address[:2]
        endpoint.channel = endpoint.channel.with_bound_port(port)
        counters = self._counters
        address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        indicator = AtomicCounter(
            counters.values_buffer,
            allocate_local_socket_address(counters, endpoint.status_indicator.id, address),
            counters,
        )
        indicator.set_ordered(CHANNEL_STATUS_ACTIVE)
        endpoint.local_address_indicator = indicator

    def _refusal(
        self, link: SubscriptionLink, term_length: int, source: Address, held: _Held
    ) -> DriverSystemCounterId | None:
        """Why ``link``, holding ``held``, may not take an image of ``term_length`` from ``source`` (None: it may)."""
        if term_length > link.max_term_length:
            return DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH
        if len(held.images) >= link.max_images:
            return DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT
        if len(held.images) >= link.max_images_per_source and held.from_host(source[0]) >= link.max_images_per_source:
            return DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT
        return None

    def _evict_silent(self, link: SubscriptionLink, cause: DriverSystemCounterId, source: Address) -> bool:
        """End the image of ``link`` that has been silent longest (for :data:`SILENT_NS` at least; from
        ``source``'s host when that host is at its limit), so a new one fits; False when none is that silent."""
        held = self._held(link)
        if held.lingering >= link.max_images:
            return False  # evicted images linger with their files: at most the limit of them, as ended ones
        host = source[0] if cause is DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT else None
        now_ns = self._conductor.now_ns()
        if now_ns < held.no_eviction_before_ns.get(host, 0):
            return False  # a flood of SETUPs asks again and again: the images are scanned once per silence
        candidates = (
            held.images if host is None else [image for image in held.images if image.source_address[0] == host]
        )
        victim = min(candidates, key=lambda image: image.time_of_last_packet_ns, default=None)
        if victim is None:
            return False
        if now_ns - victim.time_of_last_packet_ns < SILENT_NS:
            held.no_eviction_before_ns[host] = victim.time_of_last_packet_ns + SILENT_NS
            return False
        victim.state = ImageState.INACTIVE  # lingers as an image that ended, then goes; holds no place now
        victim.time_of_last_state_change_ns = now_ns
        self._system_counters.get(DriverSystemCounterId.IMAGES_EVICTED_SILENT).increment()
        self._image_ended(victim)
        return True

    def _images_changed(self) -> None:
        """Many images stopped being active at once: what the subscriptions hold is worked out again when asked."""
        self._held_cache.clear()

    def _helds_of(self, image: PublicationImage) -> list[tuple[_Held, bool]]:
        """The worked-out holdings ``image`` changes (those of its stream's subscriptions), and whether each counts
        it (its session, or any): a new image or one that ends costs the few subscriptions of its stream, not a
        look through every image of it (a server's handshake stream holds one per client route)."""
        endpoint, stream_id, session_id = image.endpoint, image.stream_id, image.session_id
        cache = self._held_cache
        helds: list[tuple[_Held, bool]] = []
        for link in self._links_by_stream.get((endpoint, stream_id), ()):
            held = cache.get((endpoint, stream_id, link.session_id))
            if held is not None and not any(h is held for h, _ in helds):
                helds.append((held, link.session_id is None or link.session_id == session_id))
        return helds

    def _image_added(self, image: PublicationImage) -> None:
        for held, counts in self._helds_of(image):
            held.of_stream += 1
            if counts:
                held.add(image)

    def _image_ended(self, image: PublicationImage) -> None:
        """``image`` stopped being active: it lingers with its files (counted in the stream) but holds no place."""
        for held, _ in self._helds_of(image):
            held.discard(image)

    def _held(self, link: SubscriptionLink) -> _Held:
        assert link.endpoint is not None
        key = (link.endpoint, link.stream_id, link.session_id)
        held = self._held_cache.get(key)
        if held is None:
            everything = self._images_by_stream.get(key[:2], ())
            held = self._held_cache[key] = _Held(self._held_images(link), len(everything))
        return held

    def _held_images(self, link: SubscriptionLink) -> list[PublicationImage]:
        """The active images of ``link``'s stream (and session) on its endpoint: what its limits count.

        An image that ended (end of stream, or silent for the image liveness timeout) keeps its log and
        counters while it lingers, for one more liveness timeout, but no longer holds a place: a client host
        whose processes come and go is not locked out meanwhile, and images of forged SETUPs, which send
        nothing, cost at most twice the limit in files at any time."""
        assert link.endpoint is not None
        session = link.session_id
        return [
            i
            for i in self._images_by_stream.get((link.endpoint, link.stream_id), ())
            if i.state is ImageState.ACTIVE and (session is None or i.session_id == session)
        ]

    def _refuse(self, link: SubscriptionLink | None, cause: DriverSystemCounterId, channel: str = "") -> None:
        """Count a refused image by its cause; its reason goes to the distinct error log in words that stay the
        same whatever the packet (no session id, address or offered value), so a flood is one entry."""
        self._system_counters.get(cause).increment()
        if link is not None:
            channel = link.channel
            limit = {
                DriverSystemCounterId.IMAGES_REFUSED_TERM_LENGTH: link.max_term_length,
                DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT: link.max_images,
                DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT: link.max_images_per_source,
            }.get(cause)
            text = f"image refused on {channel} stream {link.stream_id}: {_REASONS[cause]} (limit {limit})"
        else:
            text = f"image refused on {channel}: {_REASONS[cause]}"
        self._error_log.record(text)

    def _matches(self, link: SubscriptionLink, image: PublicationImage) -> bool:
        return (
            link.endpoint is image.endpoint
            and link.stream_id == image.stream_id
            and (link.session_id is None or link.session_id == image.session_id)
        )

    def _link_image(self, link: SubscriptionLink, image: PublicationImage) -> None:
        join = image.rebuild_position.get_volatile()
        counter = self._allocator.subscriber_position(link, image.session_id, join)
        link.positions[image.correlation_id] = SubscriberPosition(link, image, counter)
        self._push_subscribers(image)
        self._client_proxy.on_available_image(
            correlation_id=image.correlation_id,
            session_id=image.session_id,
            stream_id=image.stream_id,
            subscription_registration_id=link.registration_id,
            subscriber_position_id=counter.id,
            log_file_name=image.log_file_name,
            source_identity=image.source_identity,
        )

    def _subscribers_of(self, image: PublicationImage) -> list[SubscriberPosition]:
        return [
            p
            for link in self._links_by_stream.get((image.endpoint, image.stream_id), ())
            if (p := link.positions.get(image.correlation_id)) is not None and p.publication is image
        ]

    def _push_subscribers(self, image: PublicationImage, released: tuple[AtomicCounter, ...] = ()) -> None:
        """Give the receiver the image's current subscriber positions; free released counters after."""
        positions = tuple(p.counter for p in self._subscribers_of(image))
        conductor = self._conductor

        def close_released() -> None:
            for counter in released:
                counter.close()

        def done() -> None:
            conductor.after_teardown(close_released)

        conductor.receiver_command(functools.partial(self._receiver.on_update_subscribers, image, positions, done))

    def remove_subscription(self, link: SubscriptionLink) -> None:
        endpoint = link.endpoint
        assert isinstance(endpoint, ReceiveChannelEndpoint)
        conductor = self._conductor
        self._forget_link(link)
        key = (endpoint, link.stream_id)
        of_stream = self._images_by_stream.get(key, ())
        released: dict[int, list[AtomicCounter]] = {}
        for correlation_id, position in list(link.positions.items()):
            del link.positions[correlation_id]
            released.setdefault(correlation_id, []).append(position.counter)
        for image in of_stream:  # a link's images are those of its endpoint and stream
            if image.correlation_id in released:
                self._push_subscribers(image, tuple(released[image.correlation_id]))
        conductor.receiver_command(
            functools.partial(self._receiver.on_remove_subscription, endpoint, link.stream_id, link.session_id)
        )
        if key not in self._links_by_stream:  # nobody else subscribes to the stream on this endpoint
            now_ns = conductor.now_ns()
            for image in of_stream:
                if image.state is ImageState.ACTIVE:
                    image.state = ImageState.INACTIVE
                    image.time_of_last_state_change_ns = now_ns
            self._images_changed()
        endpoint.ref_count -= 1
        self._maybe_close_receive_endpoint(endpoint)

    def _on_setup_from_receiver(
        self, endpoint: ReceiveChannelEndpoint, fields: tuple[int, ...], source: Address
    ) -> bool:
        """Receiver thread: a SETUP for a subscribed stream; the conductor builds the image (False: its queue is
        full, counted; the publisher repeats its SETUP)."""
        return self._conductor.conductor_command(functools.partial(self._create_image, endpoint, fields, source))

    def _create_image(self, endpoint: ReceiveChannelEndpoint, fields: tuple[int, ...], source: Address) -> None:
        conductor = self._conductor
        _, _, _, _, term_offset, session_id, stream_id, initial_term_id, active_term_id, term_length, mtu, _ = fields
        links = [
            link
            for link in self._links_by_stream.get((endpoint, stream_id), ())
            if link.session_id is None or link.session_id == session_id
        ]
        if links and endpoint.channel.canonical_form in self.receive_endpoints:
            try:
                check_setup(term_offset, term_length, mtu)
            except MalformedFrameError:
                self._invalid_packets.increment()
                self._refuse(None, DriverSystemCounterId.IMAGES_REFUSED_INVALID_SETUP, links[0].channel)
                links = []
            accepted = []
            cause: DriverSystemCounterId | None = None
            for link in links:
                refusal = self._refusal(link, term_length, source, self._held(link))
                if refusal in _EVICTABLE and (
                    self._end_ended(link, refusal, source)
                    or (link.evict_silent and self._evict_silent(link, refusal, source))
                ):
                    refusal = self._refusal(link, term_length, source, self._held(link))
                if refusal is None:
                    accepted.append(link)
                elif cause is None:
                    cause = refusal
                    refused = link
            if links and not accepted:
                assert cause is not None
                self._refuse(refused, cause)
            links = accepted
        if not links or endpoint.channel.canonical_form not in self.receive_endpoints:
            conductor.receiver_command(
                functools.partial(self._receiver.on_image_creation_failed, endpoint, session_id, stream_id)
            )
            return
        correlation_id = conductor.next_correlation_id()
        path = f"{self._images_dir}/{correlation_id}.logbuffer"
        channel_text = links[0].channel
        # A long log is sparse: its pages cost memory only as data fills them, not when a SETUP asks. So is
        # any log a subscription asks to be (sparse=true: a handshake stream, whose images cost nothing until
        # a peer proves itself).
        sparse = (
            self._ctx.term_buffer_sparse_file
            or any(link.sparse for link in links)
            or lbd.compute_log_length(term_length, self._ctx.file_page_size) > self._ctx.receiver_sparse_image_threshold
        )
        log = LogBuffers.create(path, term_length, self._ctx.file_page_size, sparse=sparse)
        lbd.initialize_image_metadata(
            log.metadata,
            session_id=session_id,
            stream_id=stream_id,
            initial_term_id=initial_term_id,
            mtu_length=mtu,
            term_length=term_length,
            page_size=self._ctx.file_page_size,
            correlation_id=correlation_id,
        )
        owner_id = links[0].client.client_id
        hwm = self._allocator.stream_counter(
            RECEIVER_HWM_NAME,
            RECEIVER_HWM_TYPE_ID,
            correlation_id,
            session_id,
            stream_id,
            channel_text,
            owner_id=owner_id,
        )
        rebuild = self._allocator.stream_counter(
            RECEIVER_POS_NAME,
            RECEIVER_POS_TYPE_ID,
            correlation_id,
            session_id,
            stream_id,
            channel_text,
            owner_id=owner_id,
        )
        uri = endpoint.channel.channel_uri
        multicast = endpoint.channel.is_multicast
        is_reliable = links[0].reliable  # the first subscription's choice, as Aeron's conductor makes it
        if self._allocator.is_current:
            os_lengths = os_socket_buffer_lengths()
            write_current_metadata(
                log.metadata,
                CurrentLogMetadata(
                    log_type=LOG_TYPE_PUBLICATION_IMAGE,
                    receiver_window_length=min(self._ctx.initial_window_length, term_length // 2),
                    socket_sndbuf_length=_size_param(uri.get("so-sndbuf"), self._ctx.socket_sndbuf_length),
                    os_default_socket_sndbuf_length=os_lengths[0],
                    os_max_socket_sndbuf_length=os_lengths[1],
                    socket_rcvbuf_length=_size_param(uri.get("so-rcvbuf"), self._ctx.socket_rcvbuf_length),
                    os_default_socket_rcvbuf_length=os_lengths[2],
                    os_max_socket_rcvbuf_length=os_lengths[3],
                    group=multicast,
                    rejoin=uri.get("rejoin", "true") != "false",
                    reliable=is_reliable,
                    sparse=sparse,
                    tether=uri.get("tether", "true") != "false",
                ),
            )

        def loss_detector(on_gap: object) -> LossDetector:
            generator = (
                OptimalMulticastDelayGenerator(NAK_MAX_BACKOFF_DEFAULT_NS, NAK_GROUPSIZE_DEFAULT)
                if multicast
                else StaticDelayGenerator(self._ctx.nak_unicast_retry_ns, True)
            )
            return LossDetector(generator, on_gap, max_retry_ns=self._ctx.nak_retry_max_ns)  # type: ignore[arg-type]

        image = PublicationImage(
            correlation_id=correlation_id,
            session_id=session_id,
            stream_id=stream_id,
            channel=channel_text,
            endpoint=endpoint,
            log=log,
            active_term_id=active_term_id,
            term_offset=term_offset,
            source_address=source,
            control_address=endpoint.control_address_for(source),
            send_control=endpoint.send_control,
            receiver_id=endpoint.receiver_id,
            hwm_position=hwm,
            rebuild_position=rebuild,
            loss_detector_factory=loss_detector,
            congestion_control=new_congestion_control(
                uri.get("cc"), term_length=term_length, initial_window=self._ctx.initial_window_length
            ),
            counters=self.image_counters,
            status_message_timeout_ns=self._ctx.status_message_timeout_ns,
            image_liveness_timeout_ns=self._ctx.image_liveness_timeout_ns,
            is_reliable=is_reliable,
            on_loss=self.loss_observer,
            now_ns=conductor.now_ns(),
        )
        self.images.append(image)
        self._images_by_stream.setdefault((endpoint, stream_id), []).append(image)
        self._image_added(image)
        for link in links:
            counter = self._allocator.subscriber_position(link, session_id, image.join_position)
            link.positions[correlation_id] = SubscriberPosition(link, image, counter)
        image.set_subscriber_positions(tuple(p.counter for p in self._subscribers_of(image)))
        conductor.receiver_command(functools.partial(self._receiver.on_new_image, endpoint, image))
        for link in links:
            position = link.positions[correlation_id]
            self._client_proxy.on_available_image(
                correlation_id=correlation_id,
                session_id=session_id,
                stream_id=stream_id,
                subscription_registration_id=link.registration_id,
                subscriber_position_id=position.counter.id,
                log_file_name=image.log_file_name,
                source_identity=image.source_identity,
            )

    def find_image(self, correlation_id: int) -> PublicationImage | None:
        return next((i for i in self.images if i.correlation_id == correlation_id), None)

    def session_ids(self, stream_id: int) -> set[int]:
        """The session ids of this stream's network publications (in use, whatever their state)."""
        return {p.session_id for p in self.publications if p.stream_id == stream_id}

    # -- conductor duty cycle and timers ---------------------------------------------------------

    def update_publisher_limits(self) -> int:
        """Limits of the publications whose sender or spies moved, that gained or lost their receivers or spies,
        or that are new."""
        work = 0
        owners = self._limits_of
        moved = self._sender_positions.changed()
        if moved:
            if not self._limits_spied:  # one position per publication
                for index in moved:
                    owner = owners[index]
                    if owner is not None:
                        work += owner.update_publisher_limit()
            else:  # a spied publication shows once per position: its limit is worked out once
                for owner in {id(owners[index]): owners[index] for index in moved}.values():
                    if owner is not None:
                        work += owner.update_publisher_limit()
        if self._limits_rebuild:
            self._rebuild_limits_watch()
        elif self._limits_new:
            work += self._watch_new_limits()
        changed = self._receivers_changed
        if changed:
            recomputed: set[NetworkPublication] = set()
            while changed:
                publication = changed.popleft()
                if publication not in recomputed and publication.receivers_changed is changed:
                    recomputed.add(publication)
                    work += publication.update_publisher_limit()
        return work

    def _rebuild_limits_watch(self) -> None:
        """Watch every publication's sender position, and its spies' positions, again; each limit is recomputed
        now (and from then on when one of its positions moves)."""
        self._limits_of = []
        self._limits_index = {}
        self._limits_spied = False
        self._limits_rebuild = False
        self._limits_new = dict.fromkeys(self.publications)
        self._limits_dead = 0
        self._sender_positions = PositionWatch([])
        self._watch_new_limits()

    def _watch_new_limits(self) -> int:
        """Append the publications made since the last look to the watch and work out their limits."""
        publications = list(self._limits_new)
        self._limits_new = {}
        owners = self._limits_of
        index = self._limits_index
        # A publication without spies: its limit is moved once its sender has sent an eighth of its window (not
        # at every message: one Python call per message sent at a thousand publications). The publisher may meet
        # its limit up to that much early; blocked there, its sender catching up moves a whole window, which shows.
        entries: list[tuple[AtomicBuffer, int] | tuple[AtomicBuffer, int, int]] = []
        for publication in publications:
            position = publication.sender_position.location()
            spies = publication.spy_positions
            indices = index[publication] = [len(owners)]
            owners.append(publication)
            entries.append(
                position if spies else (*position, max(1, publication.term_window_length >> _LIMIT_STEP_SHIFT))
            )
            for spy in spies:
                indices.append(len(owners))
                owners.append(publication)
                entries.append(spy.location())
                self._limits_spied = True
        # Positions noted before the limits are computed from them: a move in between shows next cycle.
        self._sender_positions.extend(entries)
        work = 0
        for publication in publications:
            work += publication.update_publisher_limit()
        return work

    def _forget_limits_of(self, publication: NetworkPublication) -> None:
        publication.receivers_changed = None
        if self._limits_new.pop(publication, 0) is None:
            return  # not watched yet
        for index in self._limits_index.pop(publication, ()):
            self._limits_of[index] = None
            self._limits_dead += 1
        if self._limits_dead > _LIMITS_DEAD + len(self._limits_of) // 4:
            self._limits_rebuild = True  # time for a rebuild

    def _written_publications(self) -> set[NetworkPublication] | None:
        """The publications whose logs were written to since the last look, None if all are to be visited (one
        went: the watch is made again, remembering the tails as they are now). Publications that only came are
        watched from now on (their first step visits them anyway: they are not quiet yet)."""
        of = self._timer_of
        came: list[NetworkPublication] = []
        if self._timer_version != self._publications_version:
            self._timer_version = self._publications_version
            publications = self.publications
            held = len(of)
            if len(publications) < held or publications[:held] != of:  # one went
                self._timer_of = list(publications)
                self._timer_tails = PositionWatch(_tails(self._timer_of))
                return None
            came = publications[held:]
        written = {of[index // lbd.PARTITION_COUNT] for index in self._timer_tails.changed()}
        if came:
            self._timer_tails.extend(_tails(came))
            of.extend(came)
        return written

    def on_released(self, publication: NetworkPublication, now_ns: int) -> None:
        """Its last client let go of ``publication``: if everything was sent, the end of stream goes out now (as
        Aeron's ``decRef`` flags it), not at the next timer step up to a second later: the subscriber's image ends,
        and a place it held (a handshake route's, at a per-source limit) is free that much sooner."""
        if publication.ref_count == 0:
            self._time_event(publication, now_ns)

    def _time_event(self, publication: NetworkPublication, now_ns: int) -> None:
        state = publication.state
        publication.on_time_event(now_ns)
        if publication.state is not state:  # e.g. end of stream to signal: the sender should look now
            self._conductor.sender_command(functools.partial(self._sender.wake, publication))
            if publication.state is NetworkPublicationState.LINGER and publication.spy_positions:
                self._cleanup_spies(publication)

    def on_timer(self, now_ns: int) -> None:
        conductor = self._conductor
        written = self._written_publications()
        if written is None:
            visit = list(self.publications)
        else:
            visit = [p for p in self.publications if p in written or not p.quiet_time_event(now_ns)]
        for publication in visit:
            self._time_event(publication, now_ns)
            if publication.state is NetworkPublicationState.DONE and publication in self.publications:
                self.publications.remove(publication)
                self._publications_version += 1
                self._tearing_down.add(publication)
                self._forget_limits_of(publication)
                endpoint = publication.endpoint
                assert isinstance(endpoint, SendChannelEndpoint)
                done = functools.partial(
                    conductor.after_teardown, functools.partial(self._close_publication, publication)
                )
                conductor.sender_command(
                    functools.partial(self._sender.on_remove_publication, publication, endpoint, done)
                )
        dropped: dict[ReceiveChannelEndpoint, int] = {}
        for image in list(self.images):
            source = image.endpoint
            dropped_ns = dropped.get(source)
            if dropped_ns is None:  # once per endpoint with images: one system call each
                drops = source.count_kernel_drops(now_ns)
                if drops:
                    self._socket_drops.get_and_add(drops)
                dropped_ns = dropped[source] = source.dropped_ns
            self._image_time_event(image, now_ns, dropped_ns)
            if image.state is ImageState.DONE and image in self.images:
                self.images.remove(image)
                self._forget_image(image)
                self._tearing_down.add(image)
                done = functools.partial(conductor.after_teardown, functools.partial(self._close_image, image))
                conductor.receiver_command(
                    functools.partial(self._receiver.on_remove_image, image.endpoint, image, done)
                )

    def _image_time_event(self, image: PublicationImage, now_ns: int, dropped_ns: int | None) -> None:
        was_active = image.state is ImageState.ACTIVE
        receiver = self._receiver
        ended = image.on_time_event(now_ns, receiver.polled_ns, receiver.awake_since_ns, dropped_ns)
        if was_active and image.state is not ImageState.ACTIVE:
            self._image_ended(image)
        if ended:
            self._on_image_inactive(image)

    def _end_ended(self, link: SubscriptionLink, cause: DriverSystemCounterId, source: Address) -> bool:
        """At a limit of ``link``: its images whose publishers said end of stream (a closed handshake route) stop
        holding a place now rather than at the next timer step, up to a second later, which a storm of clients
        from one host waited out in turns of the per-source limit. True if any did. A flood of SETUPs at the
        limit scans the images once per :data:`_END_SCAN_NS` (per host), not once per SETUP."""
        host = source[0] if cause is DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT else None
        held = self._held(link)
        now_ns = self._conductor.now_ns()
        if now_ns < held.no_end_scan_before_ns.get(host, 0):
            return False
        held.no_end_scan_before_ns[host] = now_ns + _END_SCAN_NS
        ended = [
            image
            for image in held.images
            if image.is_end_of_stream and (host is None or image.source_address[0] == host)
        ]
        for image in ended:
            self._image_time_event(image, now_ns, image.endpoint.dropped_ns)
        return any(image.state is not ImageState.ACTIVE for image in ended)

    def _forget_image(self, image: PublicationImage) -> None:
        for held, _ in self._helds_of(image):  # (an ended image has left their images already)
            held.discard(image)
            held.of_stream -= 1
        key = (image.endpoint, image.stream_id)
        images = self._images_by_stream.get(key)
        if images is not None and image in images:
            images.remove(image)
            if not images:
                del self._images_by_stream[key]

    def _on_image_inactive(self, image: PublicationImage) -> None:
        released: list[AtomicCounter] = []
        for link in self._links_by_stream.get((image.endpoint, image.stream_id), ()):
            position = link.positions.pop(image.correlation_id, None)
            if position is not None:
                released.append(position.counter)
                self._client_proxy.on_unavailable_image(
                    image.correlation_id, link.registration_id, image.stream_id, link.channel
                )
        self._push_subscribers(image, tuple(released))

    def _close_publication(self, publication: NetworkPublication) -> None:
        conductor = self._conductor
        self._tearing_down.discard(publication)
        conductor.release_session_id(publication.session_id)
        publication.close()
        conductor.delete_file(publication.log.name)
        endpoint = publication.endpoint
        assert isinstance(endpoint, SendChannelEndpoint)
        endpoint.ref_count -= 1
        if endpoint.ref_count == 0:
            self._drop_send_endpoint(endpoint)

    def _drop_send_endpoint(self, endpoint: SendChannelEndpoint) -> None:
        conductor = self._conductor
        self.send_endpoints.pop(endpoint.channel.canonical_form, None)
        self._closing.add(endpoint)
        done = functools.partial(conductor.after_teardown, functools.partial(self._closed, endpoint))
        conductor.sender_command(functools.partial(self._sender.on_close_endpoint, endpoint, done))

    def _close_image(self, image: PublicationImage) -> None:
        self._tearing_down.discard(image)
        image.close()
        self._conductor.delete_file(image.log.name)
        self._maybe_close_receive_endpoint(image.endpoint)

    def _maybe_close_receive_endpoint(self, endpoint: ReceiveChannelEndpoint) -> None:
        if endpoint.ref_count > 0 or any(i.endpoint is endpoint for i in self.images):
            return
        if self.receive_endpoints.get(endpoint.channel.canonical_form) is not endpoint:
            return
        conductor = self._conductor
        del self.receive_endpoints[endpoint.channel.canonical_form]
        self._closing.add(endpoint)
        done = functools.partial(conductor.after_teardown, functools.partial(self._closed, endpoint))
        conductor.receiver_command(functools.partial(self._receiver.on_close_endpoint, endpoint, done))

    @property
    def endpoints_closing(self) -> bool:
        """Endpoints handed to the sender or receiver to close are still open (their sockets still bound).

        While one is, the conductor reads no client command: a subscription (or publication) on the same
        channel would otherwise make a new endpoint while the old socket still holds the port, and fail with
        "address already in use" (the channel's index forgets the endpoint when its close is asked for, the
        socket goes when the agent has let go of it)."""
        return bool(self._closing)

    def _closed(self, endpoint: SendChannelEndpoint | ReceiveChannelEndpoint) -> None:
        """Conductor: the sender or receiver has let go of ``endpoint``."""
        self._closing.discard(endpoint)
        endpoint.close()

    def close(self) -> None:
        """Driver shutdown (agents already stopped): free everything."""
        for publication in self.publications:
            publication.close()
        for image in self.images:
            image.close()
        for send_endpoint in self.send_endpoints.values():
            send_endpoint.close()
        for receive_endpoint in self.receive_endpoints.values():
            receive_endpoint.close()
        for endpoint in self._closing:
            endpoint.close()
        self._closing.clear()
        for resource in self._tearing_down:
            resource.close()
        self._tearing_down.clear()
        self.publications.clear()
        self._rebuild_limits_watch()
        self._receivers_changed.clear()
        self.images.clear()
        self._images_by_stream.clear()
        self._links_by_stream.clear()
        self._held_cache.clear()
        self.send_endpoints.clear()
        self.receive_endpoints.clear()


_LIMITS_DEAD = 32
"""Publications gone (beyond a quarter of those watched) before the publisher limits' watch is rebuilt without
them."""

_LIMIT_STEP_SHIFT = 3
"""A watched publication's limit moves once its sender position has grown by its term window over 2**this."""

SILENT_NS = 1_000_000_000
"""How long an image must have had no packet (not even a heartbeat, which a live publisher sends every 100 ms)
before ``evict-silent`` lets a new image take its place."""

_END_SCAN_NS = 10_000_000
"""At an image limit, how often the images are looked through for ones whose publishers ended: a SETUP refused
meanwhile is asked again within 100 ms by a live publisher, while a flood of forged ones costs no scan each."""

_EVICTABLE = frozenset(
    (DriverSystemCounterId.IMAGES_REFUSED_SUBSCRIPTION_LIMIT, DriverSystemCounterId.IMAGES_REFUSED_SOURCE_LIMIT)
)


class _Held:
    """The active images a subscription's limits count, and how many of them come from each host (counted once,
    when first asked)."""

    __slots__ = ("_per_host", "images", "no_end_scan_before_ns", "no_eviction_before_ns", "of_stream")

    def __init__(self, images: list[PublicationImage], of_stream: int = 0) -> None:
        self.images = images
        self.of_stream = of_stream
        """Images of the stream (of every session, ended ones included while they keep their files)."""
        self._per_host: dict[str, int] | None = None
        self.no_end_scan_before_ns: dict[str | None, int] = {}
        """For ended images at a limit, per host (None: the whole subscription): no scan again before then."""
        self.no_eviction_before_ns: dict[str | None, int] = {}
        """For ``evict-silent``, per host at its limit (None: the whole subscription): no image is silent enough
        before then (packets only make images fresher; a new image makes a new record)."""

    @property
    def lingering(self) -> int:
        """Images of the stream that ended but keep their files for a while (of every session)."""
        return max(0, self.of_stream - len(self.images))

    def add(self, image: PublicationImage) -> None:
        self.images.append(image)
        if self._per_host is not None:
            host = image.source_address[0]
            self._per_host[host] = self._per_host.get(host, 0) + 1

    def discard(self, image: PublicationImage) -> None:
        try:
            self.images.remove(image)  # (images compare by identity)
        except ValueError:
            return
        if self._per_host is not None:
            self._per_host[image.source_address[0]] -= 1

    def from_host(self, host: str) -> int:
        per_host = self._per_host
        if per_host is None:
            per_host = self._per_host = {}
            for image in self.images:
                per_host[image.source_address[0]] = per_host.get(image.source_address[0], 0) + 1
        return per_host.get(host, 0)


def _tails(publications: list[NetworkPublication]) -> list[tuple[AtomicBuffer, int]]:
    """What a :class:`PositionWatch` of the publications' term tails watches (three each, in order)."""
    return [
        (publication.log.metadata, lbd.tail_counter_offset(index))
        for publication in publications
        for index in range(lbd.PARTITION_COUNT)
    ]
